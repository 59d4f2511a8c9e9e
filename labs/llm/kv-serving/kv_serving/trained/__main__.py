"""python -m kv_serving.trained: serve the trained model (see app.py)."""

import sys

from .app import main

sys.exit(main())
