"""The storage lab's benchmark: `labs/.venv/bin/python labs/llm/kv-storage/benchmark.py --help`.

The code is kv_storage/benchmark.py; this launcher imports it only after Ctrl-C and SIGTERM are handled.
"""

import sys

from labkit.launch import launch

sys.exit(launch("kv_storage.benchmark"))
