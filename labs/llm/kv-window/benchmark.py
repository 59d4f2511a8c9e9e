"""The cache-window lab's benchmark: `labs/.venv/bin/python labs/llm/kv-window/benchmark.py --help`.

The code is kv_window/benchmark.py; this launcher imports it only after Ctrl-C and SIGTERM are handled.
"""

import sys

from labkit.launch import launch

sys.exit(launch("kv_window.benchmark"))
