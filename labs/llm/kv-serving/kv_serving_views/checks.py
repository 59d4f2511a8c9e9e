"""What this run checked: each property the engine must hold, with the evidence beside its verdict, then what it
measured (batching against one at a time, the benchmark's wall time) as measured."""

from __future__ import annotations

from typing import Any

from kv_serving.figures.formulas import best_point, mode, policy
from site_hooks.blocks import Block, Table
from site_hooks.formatting import join


def checks_view(record: dict[str, Any]) -> Block:
    """Each property, its verdict and the measurement behind it; the run's throughput ratios and wall time."""
    t = record["targets"]
    by_bytes = policy(record, "kv_budget_bytes")
    b = by_bytes["server"]
    config = record["config"]["benchmark"]
    honoured, ignored = mode(record, True)["server"], mode(record, False)["server"]
    points = record["rates"]["points"]
    best = best_point(record)
    others = [f"{p['over_serial']:.2f}× at {p['rate']:g}/s" for p in points if p is not best]
    verdict = lambda ok: "held" if ok else "did not hold"  # noqa: E731
    rows = [
        (f"Byte admission: reserved blocks never exceed the budget ({b['budget_blocks']} blocks, "
         f"{config['byte_budget_share']:g} of the {b['num_blocks']}-block pool)",
         f"{verdict(t['bytes_peak_within_budget'])}: peak {b['peak_used_blocks']} of {b['budget_blocks']} blocks"),
        ("Byte admission: no request fails for memory",
         f"{verdict(t['bytes_failed_for_memory'] == 0)}: {t['bytes_failed_for_memory']} of "
         f"{by_bytes['summary']['requests']} failed"),
        ("Zero blocks leaked after the cancellation experiment",
         f"{verdict(t['blocks_leaked_after_cancellation'] == 0)}: {honoured['num_used_blocks']} blocks in use once "
         f"idle with disconnects honoured, {ignored['num_used_blocks']} with them ignored"),
        (f"Batched throughput over the same requests served one at a time, at each of the {len(points)} arrival rates",
         f"{t['speedup_over_serial']:.2f}× at {best['rate']:g}/s, the most"
         + (f" (other rates: {join(others)})" if others else "")),
        ("The benchmark's wall time (timed inside it, from building the model to the last server's stop; starting "
         "Python and writing the record are not included)", f"{t['wall_time_s']:.0f} s"),
    ]
    return Block(css="lab-findings", tables=[Table(["Checked", "Result"], rows)])
