"""The key results and the answers to the page's questions, worded from the checked record."""

from __future__ import annotations

from typing import Any

from kv_quant.config import GGML_BLOCK
from kv_quant.figures import (
    GGML_SCALE_BYTES,
    PERPLEXITY_BAND,
    REFERENCE,
    TOP1_BAND,
    format_of,
    kivi_residual_range,
    kivi_split,
)
from site_hooks.blocks import Block, answer
from site_hooks.formatting import format_number, format_ratio, format_sci, join

from .common import agreement, bits, longest, ppl_change, trained


def key_results_view(record: dict[str, Any]) -> Block:
    formats, at = record["formats"], longest(record)
    t = trained(record)
    q4, kivi = formats["q4_0"], formats["kivi-2b-g32-r128"]
    hidden = record["trained"]["perplexity_hides"]
    worst = record["trained"]["kl_order"][-1]
    best_quantized = next(label for label in record["trained"]["kl_order"] if label not in (REFERENCE, "bfloat16"))
    memory = record["attention_memory"]["formats"]["q4_0"]
    items = [
        f"Bits are not code bits: q4_0 stores {bits(q4['effective_bits'])} bits per element and int4 in groups of 32 "
        f"stores {bits(formats['int4-g32']['effective_bits'])}; KIVI at 2 bits stores "
        f"{bits(kivi['effective_bits'])} at {kivi['bytes'][-1]['tokens']:,} tokens, its exact residual included.",
        f"A budget counted by code bits overpromises: for KIVI 2-bit it says {format_number(kivi['naive_tokens'])} "
        f"tokens where {format_number(kivi['fits_tokens'])} fit; the float32 formula says "
        f"{format_number(record['fits']['naive_float32_tokens'])} where q4_0 fits {format_number(q4['fits_tokens'])}.",
        (f"Perplexity hides damage: {join(hidden)} stay within {PERPLEXITY_BAND:.0%} of float32's perplexity at {at} tokens while "
         f"changing the top token at up to "
         f"{agreement(1 - min(t[label]['top1_agreement'][at] for label in hidden))} of positions."
         if hidden else f"Perplexity and top-1 agreement agreed in this record at {at} tokens."),
        f"On SmolLM2-135M the least damaging quantized cache is {best_quantized} (KL "
        f"{format_sci(t[best_quantized]['kl'][at])}), the most damaging {worst} (KL {format_sci(t[worst]['kl'][at])}, "
        f"top-1 {agreement(t[worst]['top1_agreement'][at])}).",
        f"Dequantizing the whole cache before attention peaked at {format_ratio(memory['peak_ratio'])} the "
        f"temporaries of block-by-block attention for q4_0 over {record['attention_memory']['tokens']:,} tokens.",
    ]
    return Block(css="lab-key-results", items=items)


def answer_bits_view(record: dict[str, Any]) -> Block:
    q4 = record["formats"]["q4_0"]
    return answer(
        f"Every {GGML_BLOCK} values carry one {GGML_SCALE_BYTES}-byte fp16 scale, {8 * GGML_SCALE_BYTES} bits shared "
        f"by {GGML_BLOCK} values: {8 * GGML_SCALE_BYTES / GGML_BLOCK:g} bits each, so q4_0 costs "
        f"{bits(q4['effective_bits'])} bits per element and {q4['bytes_per_token']:,.0f} bytes per token per layer "
        f"here, not 4 bits. The same arithmetic makes q8_0 "
        f"{bits(record['formats']['q8_0']['effective_bits'])} bits.")


def answer_perplexity_view(record: dict[str, Any]) -> Block:
    at, t = longest(record), trained(record)
    hidden = record["trained"]["perplexity_hides"]
    if not hidden:
        return answer(
            f"It did not, in this record: no format kept perplexity within {PERPLEXITY_BAND:.0%} of float32's at "
            f"{at} tokens while changing the top token at more than {1 - TOP1_BAND:.0%} of positions. The mechanism still holds: perplexity averages "
            f"log-probabilities, and errors that raise some and lower others partly cancel in an average.")
    label = min(hidden, key=lambda name: t[name]["top1_agreement"][at])
    v = t[label]
    return answer(
        f"Perplexity averages the log-probability of the right token. {label} moved it by "
        f"{ppl_change(v['perplexity_change'][at])} at {at} tokens, yet its most likely token differed from float32's "
        f"at {agreement(1 - v['top1_agreement'][at])} of positions (KL {format_sci(v['kl'][at])}). Errors that raise "
        f"some probabilities and lower others partly cancel in the average; KL and top-1 agreement do not cancel.")


def answer_kivi_view(record: dict[str, Any]) -> Block:
    t, contexts = trained(record), [str(c) for c in record["trained"]["contexts"]]
    label = "kivi-2b-g32-r128"
    kivi, fmt = t[label], format_of(label)
    first, last = contexts[0], contexts[-1]
    early, late = kivi_split(fmt, int(first))[0], kivi_split(fmt, int(last))[0]
    fewest, most = kivi_residual_range(fmt)
    return answer(
        f"Because its residual keeps the newest {fewest} to {most} tokens exact. "
        f"At {first} tokens {early} had left it (KL {format_sci(kivi['kl'][first])}); at {last} tokens {late} of "
        f"{last} were {fmt.bits}-bit and KL was {format_sci(kivi['kl'][last])}. A short evaluation measures KIVI's "
        f"residual, not its quantizer.")
