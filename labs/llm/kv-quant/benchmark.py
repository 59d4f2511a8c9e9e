"""The quantized-cache lab's benchmark: `labs/.venv/bin/python labs/llm/kv-quant/benchmark.py --help`.

The code is kv_quant/benchmark.py; this launcher imports it only after Ctrl-C and SIGTERM are handled.
"""

import sys

from labkit.launch import launch

sys.exit(launch("kv_quant.benchmark"))
