"""Quality on the trained model: perplexity per position bucket with its interval, for every policy and for
window with recomputation at its samples; after the first eviction, each policy against the full cache; at
the sampled positions, each against recomputation."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Chart, Table
from site_hooks.chart import Series, line_chart

from .common import (
    NAMES,
    band,
    closest_sentence,
    coarse_note,
    level_verdict,
    policy,
    ranged,
    ratio,
    recompute_verdict,
    share,
    span,
)


def quality_chart_view(record: dict[str, Any]) -> Block:
    series = []
    for name, entry in [(entry["policy"]["name"], entry) for entry in record["policies"].values()]:
        buckets = entry["buckets"]
        series.append(Series(NAMES[name], [b["end"] for b in buckets], [b["perplexity"]["estimate"] for b in buckets],
                             [b["perplexity"]["low"] for b in buckets], [b["perplexity"]["high"] for b in buckets]))
    recomputed = record["recompute"]["buckets"]
    series.append(Series(f"window + recompute ({record['recompute']['at_samples']['positions']} samples)",
                         [b["end"] for b in recomputed], [b["perplexity"]["estimate"] for b in recomputed],
                         [b["perplexity"]["low"] for b in recomputed], [b["perplexity"]["high"] for b in recomputed]))
    slots = record["config"]["slots"]
    svg = line_chart(series, "Perplexity by position, each bucket twice as long as the one before",
                     "end of the position bucket (log scale)", "perplexity (log scale)",
                     f"Perplexity of the next token over each position bucket of the text, per cache policy, with "
                     f"95% bootstrap intervals; the first bucket ends where the {slots}-slot caches first evict.")
    return Block(charts=[Chart(svg, f"{record['model']['name']} on {record['text']['name']}; the first bucket, "
                                    f"before any eviction, is the same for every policy.")])


def buckets_view(record: dict[str, Any]) -> Block:
    full = policy(record, "full")
    headings = ["positions"] + [NAMES[entry["policy"]["name"]] for entry in record["policies"].values()]
    recomputed = {b["start"]: b for b in record["recompute"]["buckets"]}
    rows = []
    for index, bucket in enumerate(full["buckets"]):
        row = [f"{bucket['start']:,}–{bucket['end'] - 1:,}"]
        row += [ranged(entry["buckets"][index]["perplexity"]) for entry in record["policies"].values()]
        sampled = recomputed.get(bucket["start"])
        row.append(ranged(sampled["perplexity"]) + f", {sampled['positions']} samples" if sampled else
                   "as the full cache")
        rows.append(row)
    return Block(tables=[Table(headings + ["window + recompute"], rows,
                               caption="Perplexity with its 95% bootstrap interval (moving blocks of positions). "
                                       "Before the first eviction every bounded cache attends exactly as the full "
                                       "cache does, and recomputation's window holds the whole prefix.")])


def divergence_view(record: dict[str, Any]) -> Block:
    rows = []
    for entry in record["policies"].values():
        after, name = entry["after_eviction"], entry["policy"]["name"]
        against = entry.get("against_full")
        rows.append([NAMES[name], ranged(after["perplexity"]),
                     ratio(against["perplexity_ratio"]) if against else "1 (reference)",
                     ranged(after["kl"], 3) if "kl" in after else "0", share(after["top1"]) if "top1" in after else "100%"])
    return Block(tables=[Table(
        ["policy", "perplexity", "against full", "KL from full (nats)", "top-1 agrees with full"], rows,
        lead=f"Over {span(record)}, after the first eviction; every bounded cache keeps "
             f"{record['config']['slots']} slots per layer and head.")])


def collapse_view(record: dict[str, Any]) -> Block:
    window, full = policy(record, "window"), policy(record, "full")
    against = window["against_full"]
    return Block(paragraphs=[
        f"Once the first tokens leave, window-only's perplexity is "
        f"{level_verdict(against, window['full_resolution'])} the full cache's: "
        f"{window['after_eviction']['perplexity']['estimate']:.2f} against "
        f"{full['after_eviction']['perplexity']['estimate']:.2f} over {span(record)}, a ratio of "
        f"{ratio(against['perplexity_ratio'])}"
        f"{coarse_note(window['full_resolution'], against)}. Its top-1 choice agrees with the full cache at "
        f"{share(window['after_eviction']['top1'])} of those positions."])


def recompute_view(record: dict[str, Any]) -> Block:
    recompute = record["recompute"]
    rows = [["window + recompute", ranged(recompute["at_samples"]["perplexity"]), "—", "—"]]
    for entry in record["policies"].values():
        rows.append([NAMES[entry["policy"]["name"]], ranged(entry["at_samples"]["perplexity"]),
                     ratio(entry["against_recompute"]["perplexity_ratio"]), recompute_verdict(record, entry)])
    return Block(
        tables=[Table(["policy", "perplexity at the samples", "against recomputation", "paired verdict"], rows,
                      lead=f"At the {recompute['at_samples']['positions']} positions where window with "
                           f"recomputation was run (a fresh {recompute['window']}-token pass per position), spread "
                           f"evenly over the buckets after the first eviction.")],
        paragraphs=[f"{closest_sentence(record)} A paired interval resolves a gap of "
                    f"{record['comparisons']['recompute_yardstick']['ratio']:.2f}× only inside {band(record)}; one "
                    f"that includes 1× and reaches outside it is too coarse to tell its policy from recomputation."],
        notes=["Each verdict pairs a policy's NLL with recomputation's at the same positions, so the text's own "
               "difficulty cancels."])
