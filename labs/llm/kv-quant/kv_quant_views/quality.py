"""Quality: the error chain on random weights, and on the trained model perplexity, KL divergence, top-1
agreement and the first greedy departure, with the cases where perplexity alone would have hidden damage."""

from __future__ import annotations

from typing import Any

from kv_quant.figures import FP8_MAX, PERPLEXITY_BAND, REFERENCE, TOP1_BAND
from site_hooks.blocks import Block, Chart, Table
from site_hooks.chart import Series, line_chart
from site_hooks.formatting import format_sci, join

from .common import agreement, longest, ppl_change, reference_perplexity, trained


def chain_view(record: dict[str, Any]) -> Block:
    rows = []
    for label, entry in record["formats"].items():
        c = entry["error_chain"]
        rows.append([label, format_sci(max(c["keys"], c["values"])), format_sci(c["scores"]),
                     format_sci(c["attention_output"]), format_sci(c["logits"]), agreement(c["top1_agreement"])])
    toy = record["config"]["toy"]
    magnitude = record["formats"][REFERENCE]["error_chain"]["logits_magnitude"]
    return Block(tables=[Table(
        ["format", "element", "scores", "attention output", "logits", "top-1 agrees"], rows,
        lead=f"Max |difference| from the float32 cache on one random-weight block: a {toy['prefix']}-token prefill, "
             f"then {record['error_chain_steps']} one-token steps. Logits reach {magnitude:.2f} in magnitude.")])


def trained_table_view(record: dict[str, Any]) -> Block:
    contexts = [str(c) for c in record["trained"]["contexts"]]
    rows = []
    for label, t in trained(record).items():
        row = [label]
        for c in contexts:
            row += [f"{t['perplexity'][c]:.2f}", format_sci(t["kl"][c]), agreement(t["top1_agreement"][c])]
        rows.append(row)
    header = [("", 1)] + [(f"{c} tokens", 3) for c in contexts]
    return Block(tables=[Table(
        ["format"] + ["perplexity", "KL", "top-1"] * len(contexts), rows, header_rows=[header],
        caption="KL divergence and top-1 agreement are against the float32 cache's next-token distributions.")])


def quality_chart_view(record: dict[str, Any]) -> Block:
    at = longest(record)
    series = []
    for label, t in trained(record).items():
        if label == REFERENCE or t["kl"][at] <= 0:
            continue
        x = record["formats"][label]["long_run_bits"]
        series.append(Series(label, [x], [t["kl"][at]], [t["kl"][at]], [t["kl"][at]]))
    svg = line_chart(series, f"KL divergence against bits, {at} tokens", "bits per element, long run",
                     "KL divergence (nats)", "Each format's mean KL divergence from the float32 cache's next-token "
                                             "distributions on the corpus, against its bits per element at long context.")
    return Block(charts=[Chart(svg, f"SmolLM2-135M-Instruct on the lab's corpus, first "
                                                             f"{at} tokens; float32 is the reference (KL 0).")])


def hidden_view(record: dict[str, Any]) -> Block:
    at, hidden = longest(record), record["trained"]["perplexity_hides"]
    t = trained(record)
    if not hidden:
        return Block(paragraphs=[
            f"In this record no format kept perplexity within {PERPLEXITY_BAND:.0%} of float32's while its top-1 "
            f"agreement fell below {TOP1_BAND:.0%}: here perplexity and top-1 tell the same story."])
    rows = [[label, ppl_change(t[label]["perplexity_change"][at]), format_sci(t[label]["kl"][at]),
             agreement(t[label]["top1_agreement"][at])] for label in hidden]
    return Block(tables=[Table(
        ["format", "perplexity vs float32", "KL", "top-1 agrees"], rows,
        lead=f"{len(hidden)} formats kept perplexity within {PERPLEXITY_BAND:.0%} of float32's "
             f"({reference_perplexity(record):.2f} at {at} tokens) while changing the most likely token at "
             f"more than {1 - TOP1_BAND:.0%} of positions.")])


def greedy_view(record: dict[str, Any]) -> Block:
    t = trained(record)
    new = record["trained"]["new_tokens"]
    parted = {label: v["departs_at"] for label, v in t.items() if v["departs_at"] is not None}
    same = [label for label, v in t.items() if v["departs_at"] is None and label != REFERENCE]
    paragraphs = [f"Greedy answers of {new} tokens to one chat prompt, each format against the float32 cache's: "
                  + (join([f"{label} parts at token {at}" for label, at in sorted(parted.items(), key=lambda i: i[1])])
                     if parted else "no format parts from it")
                  + (f"; {join(same)} give the same {new} tokens." if same else ".")]
    return Block(paragraphs=paragraphs,
                 notes=[f"The float32 answer begins: “{' '.join(record['trained']['reference_text'].split()[:24])} …”"])


def fp8_view(record: dict[str, Any]) -> Block:
    t, at = trained(record), longest(record)
    sizes, needed = record["trained"]["magnitudes"], record["trained"]["fp8_scale_needed"]
    labels = [label for label in t if label.startswith("fp8")]
    rows = [[label, ppl_change(t[label]["perplexity_change"][at]), format_sci(t[label]["kl"][at]),
             agreement(t[label]["top1_agreement"][at])] for label in labels]
    largest = max(sizes["keys_max_abs"], sizes["values_max_abs"])
    uncalibrated, calibrated = t["fp8-tensor-none"]["kl"][at], t["fp8-tensor-amax"]["kl"][at]
    verdict = ("slightly better than" if uncalibrated < calibrated * 0.95 else
               "slightly worse than" if uncalibrated > calibrated * 1.05 else "about as good as")
    fits = [variant for variant, need in needed.items() if not need]
    return Block(tables=[Table(["format", "perplexity vs float32", "KL", "top-1 agrees"], rows)],
                 paragraphs=[
                     f"SmolLM2's largest stored key or value is {largest:.1f}, "
                     + (f"inside the range of {join(fits)} (max {join([f'{FP8_MAX[v]:g}' for v in fits])})"
                        if fits else "beyond every fp8 variant's maximum")
                     + f". So a scale of 1.0 saturates nothing, and the uncalibrated cache is {verdict} the "
                     f"amax-calibrated one (KL {format_sci(uncalibrated)} against {format_sci(calibrated)}). A float "
                     f"format's relative precision does not depend on the scale; the scale only moves where "
                     f"saturation and the subnormal range begin. With scale 1.0, "
                     f"{sizes['keys_below_normal']:.1%} of keys and {sizes['values_below_normal']:.1%} of values sit "
                     f"below e4m3's smallest normal ({sizes['smallest_normal']:g}), where fewer bits remain."])
