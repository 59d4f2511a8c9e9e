"""How the benchmark measures: every mode against one full pass, before any timing."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.grid import COMPILED
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_sci, join


def equivalence_view(record: dict[str, Any]) -> Block:
    equivalence, tolerance = record["equivalence"], record["tolerance"]
    modes = equivalence["modes"]
    within = [mode for mode, entry in modes.items() if entry["within_tolerance"]]
    worst = max(modes.values(), key=lambda entry: entry["max_abs_diff"])
    agree = [mode for mode, entry in modes.items() if entry["argmax_agrees_every_step"]]
    table = Table(headings=["Mode", "max |difference|", "max |reference logit|", "Greedy token agrees at every position"],
                  rows=[(mode, format_sci(e["max_abs_diff"]), format_sci(e["max_abs_reference"]),
                         "yes" if e["argmax_agrees_every_step"] else "no") for mode, e in modes.items()])
    return Block(tables=[table], notes=[
        f"Batch {equivalence['batch']}, {equivalence['dtype']}: a {equivalence['prefix']}-token prefix of random token "
        f"ids prefilled in one call, then {equivalence['steps']} one-token decode steps, every logit compared with "
        f"{equivalence['reference']}; hf-full is transformers' own single pass. {COMPILED} decodes each row "
        "alone, at batch 1, because only a one-row multiply takes its compiled kernel.",
        f"{len(within)} of {len(modes)} modes (hf-full included) were within atol = {tolerance['atol']:g}, rtol = "
        f"{tolerance['rtol']:g} before any timing began; the largest difference, {worst['max_abs_diff']:.2e}, is "
        f"{worst['share_of_bound']:.1%} of the bound atol + rtol × max |reference logit| = {worst['bound']:.2e}.",
        f"The greedy token agreed with the reference at every position for all {len(modes)}." if len(agree) == len(modes)
        else f"The greedy token agreed at every position for {len(agree)} of {len(modes)}; "
             + join([mode for mode in modes if mode not in agree])
             + " chose another token somewhere, as logits within the tolerance can at a near-tie.",
    ])
