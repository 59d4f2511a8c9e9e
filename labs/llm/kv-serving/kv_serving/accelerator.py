"""The trained server's KV budget in the units the accelerator arithmetic uses: bytes per cached token and the
long sequences it holds (llm_models.accelerator prices the accelerator's side with the same formula).

Torch-free, computed by the site build from the checked record; not a figure of the record (see
llm_models.accelerator for why), and never run by the benchmark, so not in the record's fingerprint.
"""

from __future__ import annotations

from typing import Any

from llm_models.accelerator import LONG_CONTEXT
from llm_models.kv_bytes import BYTES_PER_ELEMENT, kv_bytes


def served_here(record: dict[str, Any]) -> dict[str, Any]:
    """The trained server's budget, a cached token's bytes and the 8k sequences the budget holds, from the record."""
    trained = record["trained"]
    model = trained["model"]
    token = kv_bytes(model, BYTES_PER_ELEMENT[model["dtype"]], 1, 1)
    budget = max(point["budget_kv_bytes"] for point in trained["points"])
    return {"dtype": model["dtype"], "budget": budget, "token": token,
            "tokens": budget // token, "sequences": budget // (token * LONG_CONTEXT),
            "gain": trained["speedup_over_serial"], "rate": trained["serial"]["rate"], "requests": trained["requests"],
            "peak_running": max(point["server"]["peak_running"] for point in trained["points"])}


