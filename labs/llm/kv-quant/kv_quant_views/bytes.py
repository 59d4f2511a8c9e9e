"""Bytes: what each format stores per token as the context grows, its effective bits, what a fixed budget
holds by the real formula against the naive estimates, and what the serving lab's budget admits."""

from __future__ import annotations

from typing import Any

from kv_quant.figures import SERVING
from site_hooks.blocks import Block, Chart, Table
from site_hooks.chart import Series, line_chart
from site_hooks.formatting import format_bytes, format_number, format_ratio

from .common import bits

CHART_FORMATS = ("float32", "bfloat16", "int8", "int4-g32", "kivi-2b-g32-r128", "q4_0", "fp8-tensor-none")


def bytes_chart_view(record: dict[str, Any]) -> Block:
    formats = record["formats"]
    series = []
    for label in CHART_FORMATS:
        xs = [count["tokens"] for count in formats[label]["bytes"]]
        ys = [count["bytes_per_token"] for count in formats[label]["bytes"]]
        series.append(Series(label, xs, ys, ys, ys))
    layer = record["config"]["layer"]
    svg = line_chart(series, "Stored bytes per token, one layer", "tokens in the cache", "bytes per token",
                     f"Bytes per token of one SmolLM2-135M layer's cache ({layer['kv_heads']} key/value heads of "
                     f"{layer['head_dim']}), counted from the stored tensors, by format and length.")
    kivi = formats["kivi-2b-g32-r128"]
    first, last = kivi["bytes"][0]["bytes_per_token"], kivi["bytes"][-1]["bytes_per_token"]
    rate = kivi["long_run_bytes_per_token"]
    return Block(charts=[Chart(svg, "Counted from the tensors each cache holds (codes, "
                                                           "scales, zeros, residual); every count equals its formula.")],
                 paragraphs=[f"Most formats cost the same per token at any length. KIVI does not: at "
                             f"{kivi['bytes'][0]['tokens']} tokens its residual holds everything in float32 "
                             f"({first:,.0f} bytes per token); at {kivi['bytes'][-1]['tokens']:,} tokens it is down to "
                             f"{last:,.1f}, still above its long-run rate of {rate:,.0f} bytes per token."])


def formats_table_view(record: dict[str, Any]) -> Block:
    formats = record["formats"]
    longest = record["config"]["lengths"][-1]
    rows = [[label, bits(entry["nominal_bits"]), bits(entry["effective_bits"]), bits(entry["long_run_bits"]),
             f"{entry['bytes_per_token']:,.1f}", format_ratio(entry["smaller_than_float32"])]
            for label, entry in formats.items()]
    return Block(tables=[Table(
        ["format", "code bits", f"bits at {longest:,} tokens", "bits, long run", "bytes/token/layer",
         "smaller than float32"], rows,
        caption="Bits per cached element with every scale, zero point and residual included.")])


def fits_view(record: dict[str, Any]) -> Block:
    fits, formats = record["fits"], record["formats"]
    layers = record["config"]["layer"]["layers"]
    rows = []
    for label in ("float32", "bfloat16", "int8", "int4-g32", "kivi-2b-g32-r128", "kivi-4b-g32-r128", "q8_0", "q4_0",
                  "fp8-tensor-none"):
        entry = formats[label]
        over = entry["fits_overpromise"]
        rows.append([label, format_number(entry["fits_tokens"]), format_number(entry["naive_tokens"]),
                     "n/a" if over is None else f"{over:+.0%}", format_ratio(entry["fits_vs_float32_estimate"])])
    worst = max((row[0] for row in rows if formats[row[0]]["fits_overpromise"] is not None),
                key=lambda label: formats[label]["fits_overpromise"])
    over = formats[worst]["fits_overpromise"]
    return Block(tables=[Table(
        ["format", "tokens that fit", "by code bits alone", "code-bits estimate off by",
         "against the float32 estimate"], rows,
        lead=f"A {format_bytes(fits['budget_bytes'], binary=True)} budget for SmolLM2-135M's whole cache "
             f"({layers} layers). The float32 formula says {format_number(fits['naive_float32_tokens'])} tokens; "
             f"the bfloat16 one {format_number(fits['naive_bfloat16_tokens'])}.")],
        notes=[f"Counting only code bits overpromises most for {worst}: {over:.0%} more tokens than fit."])


def serving_view(record: dict[str, Any]) -> Block:
    formats = record["formats"]
    budget = record["serving"]["budget_bytes"]
    rows = [[label, format_number(entry["serving_requests"]), format_ratio(entry["serving_vs_float32"])]
            for label, entry in formats.items() if "serving_requests" in entry and not label.startswith("fp8-head")]
    return Block(tables=[Table(
        ["priced as", "requests admitted", "against float32"], rows,
        lead=f"The serving lab's default byte budget ({format_bytes(budget, binary=True)}: {SERVING['layers']} "
             f"layers, {SERVING['kv_heads']} key/value heads of {SERVING['head_dim']}, blocks of "
             f"{SERVING['block_size']} positions), with each request holding {SERVING['positions']} positions, "
             f"and its blocks priced by each format's real bytes.")],
        notes=["KIVI is missing on purpose: its exact residual belongs to a request, not to a block."])
