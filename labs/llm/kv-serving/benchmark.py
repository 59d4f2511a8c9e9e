"""The serving lab's benchmark: `labs/.venv/bin/python labs/llm/kv-serving/benchmark.py --help`.

The code is kv_serving/benchmark.py; this launcher imports it only after Ctrl-C and SIGTERM are handled.
"""

import sys

from labkit.launch import launch

sys.exit(launch("kv_serving.benchmark"))
