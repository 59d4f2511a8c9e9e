"""The decode lab's figures contract, the module lab.toml names: ``derive`` (derivation.py), every figure of the
record that follows from its raw data, and ``check_invariants`` (invariants.py), what the raw data must satisfy;
formulas.py holds the formulas both use; the constants and formulas the timed code takes live in the mechanism's own
torch-free modules (grid, floors, traffic, llama_modes), where the views and tests import them too.
Torch-free: the record holds only raw data; the site build runs ``check_invariants`` and derives every figure
with ``derive`` when it reads the record (labkit.figures.check_record), and the views and the benchmark's summary
lines read the figures derived there (labkit.summary.with_figures).
"""

from __future__ import annotations

from .derivation import derive, hardware_figures
from .invariants import check_invariants

__all__ = ["check_invariants", "derive", "hardware_figures"]
