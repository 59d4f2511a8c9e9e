"""The serving lab's figures contract, the module lab.toml names: ``derive`` (derivation.py), every figure of the
record that follows from its raw data, and ``check_invariants`` (invariants.py), what the raw data must satisfy;
formulas.py holds the formulas both use, which the views import too, and re-exports what the mechanism computes
with (kv_serving.dtypes, sizes, client_stats), where the server and the load generator take it from.
Torch-free: the benchmark fills its record with ``derive`` (labkit.harness.run), the site build runs
``check_invariants`` and then compares the stored figures with ``derive`` (labkit.figures.check).
"""

from __future__ import annotations

from .derivation import derive
from .invariants import check_invariants

__all__ = ["check_invariants", "derive"]
