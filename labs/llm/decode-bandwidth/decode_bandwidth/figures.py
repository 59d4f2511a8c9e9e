"""Every figure of the decode record that follows from its raw data, and what the raw data must satisfy: the
module lab.toml names. Torch-free: the benchmark fills its record with ``derive`` (labkit.harness.run), the
site build runs ``check_invariants`` and then compares the stored figures with ``derive`` (labkit.figures.check).
"""

from __future__ import annotations

from .derivation import derive, hardware_figures
from .invariants import check_invariants

__all__ = ["check_invariants", "derive", "hardware_figures"]
