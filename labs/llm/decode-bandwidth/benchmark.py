"""The decode lab's benchmark: `labs/.venv/bin/python labs/llm/decode-bandwidth/benchmark.py --help`.

The code is decode_bandwidth/benchmark.py; this launcher imports it only after Ctrl-C and SIGTERM are handled.
"""

import sys

from labkit.launch import launch

sys.exit(launch("decode_bandwidth.benchmark"))
