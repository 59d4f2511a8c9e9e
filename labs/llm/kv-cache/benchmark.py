"""The KV-cache lab's benchmark: `labs/.venv/bin/python labs/llm/kv-cache/benchmark.py --help`.

The code is kv_cache/benchmark.py; this launcher imports it only after Ctrl-C and SIGTERM are handled.
"""

import sys

from labkit.launch import launch

sys.exit(launch("kv_cache.benchmark"))
