"""The key results, the takeaways whose wording depends on the data, and the answers to the page's questions,
worded from the checked record: every comparative word follows a figure or interval derived from it when it was read."""

from __future__ import annotations

from typing import Any

from kv_quant.evaluation import REFERENCE, SPLIT
from kv_quant.figures import TOP1_BAND
from llm_models.cache_formats import GGML_BLOCK, GGML_SCALE_BYTES, format_of, kivi_residual_range, kivi_split
from site_hooks.blocks import Block, answer, takeaway
from site_hooks.formatting import format_ms, format_number, format_ratio, join

from .common import at_longest, bits, hiding_rule, kl_text, misses, moved, ppl_change, trained
from .quality import text_of

KIVI = "kivi-2b-g32-r128"


def side_words(record: dict[str, Any], family: str, owner: str = "its") -> str:
    """Which side of ``family`` the record says hurts more, with both KLs; ``owner`` names whose keys they are."""
    found = at_longest(record)
    keys, values = (found[f"{family}-{side}"]["kl"]["estimate"] for side in ("keys", "values"))
    return {"above": f"{owner} keys do more of the damage than its values (KL {keys:.2e} against {values:.2e})",
            "below": f"{owner} values do more of the damage than its keys (KL {values:.2e} against {keys:.2e})",
            "neither": f"this record cannot tell whether {owner} keys or its values do more of the damage (KL "
                       f"{keys:.2e} and {values:.2e})"}[record["trained"]["sides"][family]["keys_are"]]


def key_results_view(record: dict[str, Any]) -> Block:
    formats, found = record["formats"], at_longest(record)
    q4, q8, kivi = formats["q4_0"], formats["q8_0"], formats[KIVI]
    memory = record["attention_memory"]["formats"]["q4_0"]
    family = SPLIT[0]
    owner = f"{family}'s"
    items = [
        f"A 4-bit format is not 4 bits: q4_0 stores {bits(q4['effective_bits'])} bits per element, int4-g32 "
        f"{bits(formats['int4-g32']['effective_bits'])}, and KIVI at 2 bits {bits(kivi['effective_bits'])} at "
        f"{kivi['bytes'][-1]['tokens']:,} tokens, scales and exact residual included.",
        f"A budget counted by code bits overpromises: for KIVI 2-bit it says {format_number(kivi['naive_tokens'])} "
        f"tokens where {format_number(kivi['fits_tokens'])} fit.",
        f"On SmolLM2-135M over {text_of(record)}, q8_0 ({bits(q8['long_run_bits'])} bits) changed the most likely "
        f"token at {misses(found['q8_0']['top1_agreement'])} of positions and q4_0 ({bits(q4['long_run_bits'])} bits) "
        f"at {misses(found['q4_0']['top1_agreement'])}.",
        f"Split apart, {side_words(record, family, owner)}.",
        (f"Dequantizing the whole cache before attention peaked at {format_ratio(memory['peak_ratio'])} the "
         f"temporaries of block-by-block attention for q4_0 over {record['attention_memory']['tokens']:,} tokens."
         if memory["peak_ratio"] > 1 else
         f"Dequantizing the whole cache before attention peaked no higher than block-by-block attention for q4_0 "
         f"over {record['attention_memory']['tokens']:,} tokens ({format_ratio(memory['peak_ratio'])})."),
    ]
    return Block(css="lab-key-results", items=items)


def answer_bits_view(record: dict[str, Any]) -> Block:
    q4 = record["formats"]["q4_0"]
    return answer(
        f"Every {GGML_BLOCK} values carry one {GGML_SCALE_BYTES}-byte fp16 scale, {8 * GGML_SCALE_BYTES} bits shared "
        f"by {GGML_BLOCK} values: {8 * GGML_SCALE_BYTES / GGML_BLOCK:g} bits each, so q4_0 costs "
        f"{bits(q4['effective_bits'])} bits per element and {q4['bytes_per_token']:,.0f} bytes per token per layer "
        f"here, not 4 bits. The same arithmetic makes q8_0 {bits(record['formats']['q8_0']['effective_bits'])} bits; "
        f"int4-g32 keeps a float32 scale and a float32 zero point per {format_of('int4-g32').group_size} values, "
        f"{bits(record['formats']['int4-g32']['effective_bits'])} bits.")


def answer_perplexity_view(record: dict[str, Any]) -> Block:
    found = at_longest(record)
    hidden = record["trained"]["perplexity_hides"]
    if not hidden:
        undecided = record["trained"]["perplexity_hides_undecided"]
        near = "".join(f" {label} comes near: its perplexity changed {ppl_change(found[label]['perplexity_change'])} "
                       f"and its top token changed at {misses(found[label]['top1_agreement'])} of positions, an "
                       f"interval that reaches below {1 - TOP1_BAND:.0%}." for label in undecided)
        return answer(
            f"It did not, in this record: no format kept {hiding_rule()}.{near} The mechanism still holds: "
            f"perplexity averages log-probabilities, and errors that raise some and lower others partly cancel in "
            f"an average.")
    label = min(hidden, key=lambda name: found[name]["top1_agreement"]["estimate"])
    q = found[label]
    return answer(
        f"Perplexity averages the log-probability of the right token. Over {text_of(record)}, {label}'s perplexity "
        f"{moved(q['perplexity_change'])} ({ppl_change(q['perplexity_change'])}), yet its most likely token differed "
        f"from float32's at {misses(q['top1_agreement'])} of positions (KL {kl_text(q['kl'])}). Errors that raise "
        f"some probabilities and lower others partly cancel in the average; KL and top-1 agreement do not cancel.")


def answer_kivi_view(record: dict[str, Any]) -> Block:
    t, contexts = trained(record)[KIVI], [str(c) for c in record["trained"]["contexts"]]
    fmt = format_of(KIVI)
    first, last = contexts[0], contexts[-1]
    early, late = kivi_split(fmt, int(first))[0], kivi_split(fmt, int(last))[0]
    fewest, most = kivi_residual_range(fmt)
    return answer(
        f"Because its residual keeps the newest {fewest} to {most} tokens exact. Over the first {int(first):,} "
        f"positions {early} had left it (KL {kl_text(t['quality'][first]['kl'])}); over {int(last):,}, {late:,} of "
        f"{int(last):,} were {fmt.bits}-bit and KL was {kl_text(t['quality'][last]['kl'])}. A short evaluation "
        f"measures KIVI's residual, not its quantizer.")


def takeaway_quality_view(record: dict[str, Any]) -> Block:
    hidden = record["trained"]["perplexity_hides"]
    return takeaway("judge a cache format by KL divergence and top-1 agreement against the full-precision cache, "
                    "each with its interval"
                    + (f"; here {join(hidden)} kept {hiding_rule()}." if hidden else
                       "; in this record perplexity happened to tell the same story."))


def takeaway_fp8_view(record: dict[str, Any]) -> Block:
    calibration = record["trained"]["fp8_calibration"]["uncalibrated_is"]
    needed = any(record["trained"]["fp8_scale_needed"].values())
    verdict = {"above": "calibrating the scale helped", "below": "the uncalibrated scale did better",
               "neither": "calibrating the scale made no difference the record can see"}[calibration]
    return takeaway(f"for fp8, {verdict} on SmolLM2, whose entries "
                    f"{'exceed at least one' if needed else 'stay inside every'} variant's range; calibration matters where entries approach the maximum or sink into the "
                    f"subnormal range, so check the model's real magnitudes first.")


def takeaway_chain_view(record: dict[str, Any]) -> Block:
    """Whether every quantized format's logit error came out below its element error on the random block."""
    chains = {label: entry["error_chain"] for label, entry in record["formats"].items() if label != REFERENCE}
    shrunk = [label for label, c in chains.items() if c["logits"] < max(c["keys"], c["values"])]
    if len(shrunk) == len(chains):
        lead = "every format's element error was attenuated on the way to the logits here"
    elif shrunk:
        lead = (f"the element error was attenuated on the way to the logits for {len(shrunk)} of {len(chains)} "
                f"formats here, not for all")
    else:
        lead = "no format's element error shrank on the way to the logits here"
    return takeaway(f"{lead}, so the element error alone does not say how large the damage is, and logits on random "
                    f"weights cannot say which format is safe on a trained model.")


def takeaway_cost_view(record: dict[str, Any]) -> Block:
    memory = record["attention_memory"]["formats"]
    quantized = {label: row for label, row in memory.items() if label not in (REFERENCE, "bfloat16")}
    above = [label for label, row in quantized.items() if row["peak_ratio"] > 1]
    peak = ("dequantizing all at once peaked above block by block for every quantized format"
            if len(above) == len(quantized) else
            f"dequantizing all at once peaked above block by block for {join(above)}" if above else
            "block-by-block attention saved no peak memory here")
    timing = record["trained"]["timing"]
    return takeaway(f"a quantized cache saves memory only if attention never materialises it in float: {peak}; and "
                    f"reading it back costs time unless a kernel fuses it (reading a cache back, timed apart from the "
                    f"step, took up to {format_ms(timing['longest_dequantize_ns'], 1)} ms here).")
