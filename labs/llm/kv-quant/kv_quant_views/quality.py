"""Quality: the error chain on random weights, and on the trained model perplexity, KL divergence and top-1
agreement with their bootstrap intervals, per context; keys against values; the cases where perplexity alone
would have hidden damage; greedy departures; fp8's scale. Every comparative word is chosen from the derived
intervals (a difference whose interval holds zero is called one the record cannot tell)."""

from __future__ import annotations

from typing import Any

from kv_quant.evaluation import REFERENCE, SPLIT
from llm_models.cache_formats import FP8_MAX, format_of, kivi_residual_range
from site_hooks.blocks import Block, Chart, Table
from site_hooks.chart import Series, line_chart
from site_hooks.formatting import format_sci, join

from .common import agreement, at_longest, bits, hiding_rule, kl_text, misses, ppl_change, trained


def text_of(record: dict[str, Any]) -> str:
    """'2,048 positions of python-language-reference.txt'."""
    text = record["trained"]["text"]
    return f"{text['evaluated']:,} positions of {text['name']}"


def chain_view(record: dict[str, Any]) -> Block:
    rows = []
    for label, entry in record["formats"].items():
        c = entry["error_chain"]
        rows.append([label, format_sci(max(c["keys"], c["values"])), format_sci(c["scores"]),
                     format_sci(c["attention_output"]), format_sci(c["logits"]), f"{c['top1_agreement']:.1%}"])
    toy = record["config"]["toy"]
    magnitude = record["formats"][REFERENCE]["error_chain"]["logits_magnitude"]
    return Block(tables=[Table(
        ["format", "element", "scores", "attention output", "logits", "top-1 agrees"], rows,
        lead=f"Max |difference| from the float32 cache on one random-weight block: a {toy['prefix']}-token prefill, "
             f"then {record['error_chain_steps']} one-token steps. Logits reach {magnitude:.2f} in magnitude.")])


def trained_table_view(record: dict[str, Any]) -> Block:
    """At the longest context, each format's figures with their intervals; then KL at every context."""
    found, formats = at_longest(record), record["formats"]
    rows = [[label, bits(formats[label]["trained"]["evaluated_bits"]), ppl_change(q["perplexity_change"]),
             kl_text(q["kl"]), agreement(q["top1_agreement"])] for label, q in found.items()]
    contexts = [str(c) for c in record["trained"]["contexts"]]
    by_context = [[label] + [kl_text(t["quality"][c]["kl"]) for c in contexts] for label, t in trained(record).items()]
    level = record["trained"]["bootstrap"]["level"]
    reference = found[REFERENCE]["perplexity"]["estimate"]
    return Block(tables=[
        Table(["format", f"bits at {record['trained']['text']['evaluated']:,} positions", "perplexity against float32's",
               "KL divergence (nats)", "top-1 agreement"], rows,
              lead=f"Over {text_of(record)}, against the float32 cache (perplexity {reference:.2f}); in brackets "
                   f"the {level:.0%} bootstrap interval."),
        Table(["format"] + [f"KL over the first {int(c):,} positions" for c in contexts], by_context,
              caption="The same pass read at shorter contexts: the first L positions of it.")])


def quality_chart_view(record: dict[str, Any]) -> Block:
    found = at_longest(record)
    series = []
    for label, q in found.items():
        if label == REFERENCE or q["kl"]["low"] <= 0:  # a log axis: nothing to draw at zero
            continue
        x = record["formats"][label]["trained"]["evaluated_bits"]
        series.append(Series(label, [x], [q["kl"]["estimate"]], [q["kl"]["low"]], [q["kl"]["high"]]))
    svg = line_chart(series, f"KL divergence against bits, {text_of(record)}",
                     f"bits per element at {record['trained']['text']['evaluated']:,} positions",
                     "KL divergence (nats)", "Each format's mean KL divergence from the float32 cache's next-token "
                                             "distributions, with its bootstrap interval, against its bits per element.")
    return Block(charts=[Chart(svg, f"SmolLM2-135M-Instruct over {text_of(record)}; the whiskers are bootstrap "
                                    f"intervals; float32 is the reference (KL 0).")])


def sides_view(record: dict[str, Any]) -> Block:
    """Keys only against values only, per split family: which side the record says hurts."""
    found = at_longest(record)
    rows, sentences = [], []
    for family in SPLIT:
        for label in (family, f"{family}-keys", f"{family}-values"):
            q = found[label]
            rows.append([label, kl_text(q["kl"]), misses(q["top1_agreement"]), ppl_change(q["perplexity_change"])])
        side = record["trained"]["sides"][family]
        difference = side["keys_minus_values_kl"]
        keys, values = found[f"{family}-keys"]["kl"]["estimate"], found[f"{family}-values"]["kl"]["estimate"]
        verdict = {"above": f"its keys do more of the damage: keys alone give KL {keys:.2e}, values alone {values:.2e}",
                   "below": f"its values do more of the damage: values alone give KL {values:.2e}, keys alone {keys:.2e}",
                   "neither": f"this record cannot tell which side does more damage (keys alone {keys:.2e}, values "
                              f"alone {values:.2e})"}[side["keys_are"]]
        sentences.append(f"For {family}, {verdict}; the paired difference, keys less values, is "
                         f"{difference['estimate']:.2e} ({difference['low']:.2e} to {difference['high']:.2e}).")
    return Block(tables=[Table(["format", "KL divergence (nats)", "top token changed at", "perplexity against float32's"],
                               rows, lead=f"One side in the format, the other in float32, over {text_of(record)}.")],
                 paragraphs=sentences)


def hidden_view(record: dict[str, Any]) -> Block:
    hidden, found = record["trained"]["perplexity_hides"], at_longest(record)
    if not hidden:
        return Block(paragraphs=[
            f"No format here kept {hiding_rule()}: perplexity and top-1 tell the same story."])
    rows = [[label, ppl_change(found[label]["perplexity_change"]), kl_text(found[label]["kl"]),
             misses(found[label]["top1_agreement"])] for label in hidden]
    return Block(tables=[Table(
        ["format", "perplexity against float32's", "KL", "top token changed at"], rows,
        lead=f"{join(hidden)}: {hiding_rule()}.")])


def greedy_view(record: dict[str, Any]) -> Block:
    t = trained(record)
    new = record["trained"]["new_tokens"]
    parted = {label: v["departs_at"] for label, v in t.items() if v["departs_at"] is not None}
    same = [label for label, v in t.items() if v["departs_at"] is None and label != REFERENCE]
    exact = [label for label in same if t[label]["greedy_exact"]]  # never quantized a position of the run
    same = [label for label in same if label not in exact]
    prompt = record["trained"]["prompt_tokens"]
    paragraphs = [f"Greedy answers of {new} tokens to one chat prompt, each format against the float32 cache's: "
                  + (join([f"{label} parts at token {at}" for label, at in sorted(parted.items(), key=lambda i: i[1])])
                     if parted else "no format parts from it")
                  + (f"; {join(same)} give{'s' if len(same) == 1 else ''} the same {new} tokens" if same else "")
                  + "".join(f"; so does {label}, but only because the {prompt} + {new} positions never leave its "
                            f"exact residual (up to {kivi_residual_range(format_of(label))[1]} tokens)"
                            for label in exact) + "."]
    return Block(paragraphs=paragraphs,
                 notes=[f"The float32 answer begins: “{' '.join(record['trained']['reference_text'].split()[:24])} …”"])


def fp8_view(record: dict[str, Any]) -> Block:
    found = at_longest(record)
    sizes, needed = record["trained"]["magnitudes"], record["trained"]["fp8_scale_needed"]
    labels = [label for label in found if label.startswith("fp8")]
    rows = [[label, ppl_change(found[label]["perplexity_change"]), kl_text(found[label]["kl"]),
             agreement(found[label]["top1_agreement"])] for label in labels]
    largest = max(sizes["keys_max_abs"], sizes["values_max_abs"])
    calibration = record["trained"]["fp8_calibration"]
    difference = calibration["none_minus_amax_kl"]
    verdict = {"above": "worse than", "below": "better than", "neither": "indistinguishable from"}[
        calibration["uncalibrated_is"]]
    fits = [variant for variant, need in needed.items() if not need]
    return Block(tables=[Table(["format", "perplexity against float32's", "KL", "top-1 agreement"], rows)],
                 paragraphs=[
                     f"SmolLM2's largest stored key or value is {largest:.1f}, "
                     + (f"inside the range of {join(fits)} (max {join([f'{FP8_MAX[v]:g}' for v in fits])})"
                        if fits else "beyond every fp8 variant's maximum")
                     + f". So a scale of 1.0 saturates {'nothing' if fits else 'some entries'}, and the uncalibrated "
                     f"cache is {verdict} the amax-calibrated one: their paired KL difference is "
                     f"{difference['estimate']:.2e} ({difference['low']:.2e} to {difference['high']:.2e}). A float "
                     f"format's relative precision does not depend on the scale; the scale only moves where "
                     f"saturation and the subnormal range begin. With scale 1.0, "
                     f"{sizes['keys_below_normal']:.1%} of keys and {sizes['values_below_normal']:.1%} of values sit "
                     f"below e4m3's smallest normal ({sizes['smallest_normal']:g}), where fewer bits remain."])
