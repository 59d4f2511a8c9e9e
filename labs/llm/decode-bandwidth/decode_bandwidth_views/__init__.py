"""The decode-bandwidth lab's part of the site: record checks, views and headline ratios.
Torch-free; named by ``views`` in the lab's lab.toml."""

from __future__ import annotations

from typing import Any

from .checks import check_record
from .figures import best_ours, cell_table
from .views import VIEWS

__all__ = ["VIEWS", "check_record", "headline"]


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Ratios within one run, comparable across machines: ours against transformers and against the floor."""
    bench = record["config"]["benchmark"]
    dtype, threads = bench["dtype"], bench["threads"]
    cells = cell_table(record)
    short, long = bench["contexts"][0], bench["contexts"][-1]
    batch = bench["batches"][-1]
    best_long = best_ours(cells, (dtype, threads, 1, long))
    best_short = best_ours(cells, (dtype, threads, 1, short))
    client = record["client"]["modes"]
    return [
        (f"ours best / hf-dynamic, batch 1, context {long}",
         best_long["median_ns_per_step"] / cells[(dtype, threads, 1, long, "hf-dynamic")]["median_ns_per_step"]),
        (f"ours best / memory floor, batch 1, context {short}", best_short["step_over_floor"]),
        (f"hf-dynamic / memory floor, batch 1, context {short}",
         cells[(dtype, threads, 1, short, "hf-dynamic")]["step_over_floor"]),
        (f"ours-concat / ours-prealloc, batch {batch}, context {long}",
         cells[(dtype, threads, batch, long, "ours-concat")]["median_ns_per_step"]
         / cells[(dtype, threads, batch, long, "ours-prealloc")]["median_ns_per_step"]),
        ("client tokens/s, ours / transformers", client["ours"]["tokens_per_s"] / client["transformers"]["tokens_per_s"]),
    ]
