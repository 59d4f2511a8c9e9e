"""The serving lab's figures contract, the module lab.toml names: ``derive`` (derivation.py), every figure of the
record that follows from its raw data, and ``check_invariants`` (invariants.py), what the raw data must satisfy;
formulas.py holds the formulas both use, which the views import too; what the mechanism computes with lives where
the server and the load generator take it from (llm_models.serving.dtypes and sizes, kv_serving.client_stats).
Torch-free: the record holds only raw data; the site build runs ``check_invariants`` and derives every figure
with ``derive`` when it reads the record (labkit.figures.check_record), and the views and the benchmark's summary
lines read the figures derived there (labkit.summary.with_figures).
"""

from __future__ import annotations

from .derivation import derive
from .invariants import check_invariants

__all__ = ["check_invariants", "derive"]
