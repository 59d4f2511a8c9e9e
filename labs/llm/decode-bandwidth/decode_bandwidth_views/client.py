"""What a client sees: time to first token, inter-token latencies and tokens/s of both generators."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_ratio


def client_view(record: dict[str, Any]) -> Block:
    client = record["client"]
    ours, theirs = client["modes"]["ours"], client["modes"]["transformers"]
    runs = len(ours["token_times_ns"])
    table = Table(
        headings=["Generator", "Time to first token (ms)", "Inter-token p50 (ms)", "p90 (ms)", "p99 (ms)", "Tokens/s"],
        rows=[(label, format_ms(m["ttft_ns"]), format_ms(m["itl_p50_ns"]), format_ms(m["itl_p90_ns"]),
               format_ms(m["itl_p99_ns"]), f"{m['tokens_per_s']:.1f}")
              for label, m in (("this lab's decoder", ours), ("transformers generate", theirs))])
    return Block(tables=[table], notes=[
        f"Batch {client['batch']}, a {client['prompt']}-token prompt, {client['new_tokens']} new tokens chosen greedily. "
        "Times run from the call to the moment each token exists; tokens/s is new tokens ÷ the median run's total "
        "time, prefill included; inter-token percentiles pool every gap of every run.",
        f"Over {runs} run{'' if runs == 1 else 's'} each, this lab's decoder produced {ours['tokens_per_s']:.1f} "
        f"tokens/s and transformers' generate {theirs['tokens_per_s']:.1f} "
        f"({format_ratio(client['ours_over_transformers'])}); median inter-token latency "
        f"{format_ms(ours['itl_p50_ns'])} ms against {format_ms(theirs['itl_p50_ns'])} ms, time to first token "
        f"{format_ms(ours['ttft_ns'])} ms against {format_ms(theirs['ttft_ns'])} ms.",
        "Both chose the same tokens at every step." if client["same_tokens"] else
        "The two chose different tokens somewhere in the run: with random weights, near-ties in the logits can "
        "flip a greedy choice under a rounding difference, so this compares the same amount of work, not the same text.",
    ])
