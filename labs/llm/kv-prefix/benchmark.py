"""The prefix-caching lab's benchmark: `labs/.venv/bin/python labs/llm/kv-prefix/benchmark.py --help`.

The code is kv_prefix/benchmark.py; this launcher imports it only after Ctrl-C and SIGTERM are handled.
"""

import sys

from labkit.launch import launch

sys.exit(launch("kv_prefix.benchmark"))
