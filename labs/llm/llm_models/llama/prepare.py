"""``python -m llm_models.llama.prepare``: the trained weights dequantized into their cache now, not by the first
test or benchmark that loads them.

``make venv`` runs this last, so the one-time dequantization (about 20 s on a quiet two-core machine, more beside
other work) is part of installing, like unpacking a wheel, and a build or a suite starts from weights that load in
about a second. Nothing here is required: a missing or removed cache is rebuilt by the first process that loads the
weights (weights.py), as before.
"""

from __future__ import annotations

import sys

from .weights import WeightsError, trained


def main() -> int:
    try:
        weights = trained()
    except WeightsError as error:
        print(f"llm_models.llama.prepare: {error}", file=sys.stderr)
        return 1
    print(f"llm_models.llama.prepare: the trained weights load from {weights.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
