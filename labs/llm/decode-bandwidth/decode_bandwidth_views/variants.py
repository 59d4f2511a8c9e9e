"""Two threads, and half the bytes: a second thread count and a second dtype against the headline grid, with
what they did to the step, to this lab's lead over transformers and to the step's distance from its floor."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import cell_table, group_table, other_layout
from llm_models.kv_bytes import BYTES_PER_ELEMENT
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_ratio, join

from .common import gbs, percent_range, ratio_range, signed_percent, threads_text

COMPARED = ("ours-prealloc", "hf-dynamic")  # the variant table's modes: this lab's main cache and the baseline
TIE = 0.02  # two medians within 2% of each other count as unchanged: closer than the repetitions spread


def threads_sentences(record: dict[str, Any], rows: list[dict[str, Any]], other: int) -> list[str]:
    bench, machine, variant = record["config"]["benchmark"], record["hardware"], record["variants"]["threads"]
    dtype, threads = bench["dtype"], bench["threads"]
    one, two = (machine["bandwidth"][str(t)]["bytes_per_s"] for t in (threads, other))
    ratios = [r["ratio"] for r in rows]
    faster, slower = [r for r in ratios if r < 1 - TIE], [r for r in ratios if r > 1 + TIE]
    same = [r for r in ratios if 1 - TIE <= r <= 1 + TIE]
    tie = f" and {len(same)} changed by less than {TIE:.0%}, a tie" if same else ""
    verdict = f"{len(faster)} of {len(ratios)} cells got faster, {len(slower)} slower{tie}"
    cells = cell_table(record)
    base_floor = [cells[(dtype, threads, r["batch"], r["context"], r["mode"])]["step_over_floor"] for r in rows]
    return [
        f"At {threads_text(other)} the read test drew {gbs(two)} against {gbs(one)} at {threads_text(threads)} "
        f"({signed_percent(variant['bandwidth_ratio'])}) at their best, which moves a {other}-thread cell's floor by about "
        f"{signed_percent(variant['floor_ratio'])} (each group's own floor, read beside it, sets the exact change); a square matmul ran {format_ratio(variant['matmul_ratio'])} as fast. "
        f"The steps "
        f"({join(list(COMPARED))}, batch {join([str(b) for b in bench['variant_batches']])}) took "
        f"{ratio_range(ratios)} their {threads}-thread time: {verdict}. Measured against their own floors, "
        f"they went from {ratio_range(base_floor)} at {threads_text(threads)} to "
        f"{ratio_range([r['over_floor'] for r in rows])} at {threads_text(other)}.",
    ]


def dtype_sentences(record: dict[str, Any], rows: list[dict[str, Any]], other: str) -> list[str]:
    bench, machine, variant = record["config"]["benchmark"], record["hardware"], record["variants"]["dtype"]
    dtype, threads = bench["dtype"], bench["threads"]
    groups = group_table(record)
    sentences = []
    lead = {(batch, context): tuple(groups[(which, threads, batch, context)]["best_over_hf_dynamic"] for which in (dtype, other))
            for batch in bench["variant_batches"] for context in bench["contexts"]}  # the fastest of ours / hf-dynamic
    closer = [key for key, (base, variant) in lead.items() if variant > base]
    lost = [key for key, (_, variant) in lead.items() if variant >= 1]
    if len(closer) == len(lead):
        change = f"this lab's lead over transformers shrinks in {other} at every one of the {len(lead)} cells"
    elif not closer:
        change = f"this lab's lead over transformers grows in {other} at every one of the {len(lead)} cells"
    else:
        change = f"this lab's lead over transformers shrinks in {other} at {len(closer)} of {len(lead)} cells"
    if lost:
        change = f"{change}; transformers is as fast or faster at {join([f'batch {b}, context {c}' for b, c in lost])}"
    sentences.append(
        f"The fastest of this lab's modes took {ratio_range([b for b, _ in lead.values()])} hf-dynamic's step in "
        f"{dtype} and {ratio_range([v for _, v in lead.values()])} in {other}: {change}.")

    base_rate = machine["matmul"][f"{dtype}/{threads}"]
    rate = variant["matmul_ratio"]
    steps = [r["ratio"] for r in rows]
    other_rate = machine["matmul"].get(f"{other}/{threads}", base_rate)
    sizes = (f"{base_rate['size']:,}-wide in {dtype}" if other_rate["size"] == base_rate["size"] else
             f"{base_rate['size']:,}-wide in {dtype}, {other_rate['size']:,}-wide in {other}")
    sentence = (f"A square matmul ({sizes}) ran {format_ratio(rate)} as many flops per second in {other} as in "
                f"{dtype} at {threads_text(threads)}, best pass against best pass, while the steps in the table took "
                f"{ratio_range(steps)} their {dtype} time.")
    if rate > 1 and min(steps) > 1:
        sentence += (f" The {other} speed of a square matrix multiply, whose every weight meets many rows, does not "
                     f"carry over to these decode steps, whose weights meet a few rows each.")
    sentences.append(sentence)

    chosen = record["layout"]["dtype"]  # the stored layout was chosen from measurements in this dtype
    layouts = {chosen: record["layout"], **record.get("layout_other_dtypes", {})}
    layout, variant_layout = layouts.get(dtype), layouts.get(other)
    if layout is None or variant_layout is None:
        sentences.append(
            f"The decoder stores each matrix in the same layout in every dtype, chosen from {chosen} measurements; "
            f"this record's layout measurement ran in {join(sorted(layouts))} only, so it does not show whether "
            f"{other} would prefer another layout, nor how {dtype} and {other} compare in the matrix-vector "
            f"products alone.")
        return sentences
    base_ns, variant_ns = layout["stored_step_ns"], variant_layout["stored_step_ns"]
    sentence = (f"The layout measurement, taken in both dtypes, isolates the batch-1 matrix-vector products: one "
                f"step's five weight kinds, each in its stored layout, took {format_ms(variant_ns)} ms in {other} "
                f"against {format_ms(base_ns)} ms in {layout['dtype']} ({format_ratio(variant['matrix_ratio'])}).")
    if rate > 1 and variant_ns > base_ns:
        share = record["profile"]["modes"]["ours-prealloc"]["matrices_share"]
        sentence = sentence + (f" So on this machine {other} loses in the matrix-vector path, while square matrix multiplies "
                     f"gain. In the {record['profile']['dtype']} profile (batch {record['profile']['batch']}, context "
                     f"{record['profile']['context']}) the weight matrices are {share:.0%} of ours-prealloc's "
                     f"operator time{', most of the step' if share > 0.5 else ''}.")
        extra = [r["extra"] for r in rows if r["mode"] == "ours-prealloc"]
        if min(extra) > 0:
            covered = variant["matrix_share_of_extra"]
            rest = (f"; the layout measurement does not account for the rest, and this record has no {other} profile "
                    "to say where it goes." if max(covered) < 1 else ".")
            sentence = sentence + (f" The matrix-vector products' extra {format_ms(variant['matrix_extra_ns'])} ms per "
                                   f"step is {percent_range(covered)} of the extra time of the ours-prealloc steps in the "
                                   f"table ({format_ms(min(extra))}–{format_ms(max(extra))} ms){rest}")
    sentences.append(sentence)
    faster = [row for row in variant_layout["rows"] if row[f"{row['stored']}_ns"] > row[f"{other_layout(row['stored'])}_ns"]]
    sentences.append(
        f"The decoder stores each matrix in the layout chosen from {chosen} measurements, in every dtype; "
        + (f"in {other} that layout was also the faster one for all {len(variant_layout['rows'])} kinds."
           if not faster else
           f"in {other} the other layout was faster for {join([row['kind'] for row in faster])}."))
    return sentences


def variants_view(record: dict[str, Any]) -> Block:
    bench = record["config"]["benchmark"]
    dtype, threads = bench["dtype"], bench["threads"]
    cells = cell_table(record)
    variants = []
    if bench["variant_threads"]:
        variants.append((bench["dtype"], bench["variant_threads"], f"{bench['variant_threads']} threads"))
    if bench["variant_dtype"]:
        variants.append((bench["variant_dtype"], threads, bench["variant_dtype"]))
    rows: list[dict[str, Any]] = []
    sentences: list[str] = []
    for variant_dtype, variant_threads, label in variants:
        mine = []
        for batch in bench["variant_batches"]:
            for context in bench["contexts"]:
                for mode in COMPARED:
                    base = cells[(dtype, threads, batch, context, mode)]
                    other = cells[(variant_dtype, variant_threads, batch, context, mode)]
                    mine.append({"label": label, "batch": batch, "context": context, "mode": mode,
                                 "base": base["median_ns_per_step"], "variant": other["median_ns_per_step"],
                                 "ratio": other["over_headline"], "extra": other["above_headline_ns"],
                                 "floor": other["floor_ns_per_step"], "over_floor": other["step_over_floor"]})
        rows.extend(mine)
        if variant_dtype == dtype:
            sentences.extend(threads_sentences(record, mine, variant_threads))
        else:
            size, base_size = BYTES_PER_ELEMENT[variant_dtype], BYTES_PER_ELEMENT[dtype]
            sentences.append(f"{variant_dtype} stores {size} bytes per element against {dtype}'s {base_size}, so "
                             f"every byte a step must move, and its floor, scales by {size}/{base_size}; its steps "
                             f"came out at {ratio_range([r['over_floor'] for r in mine])} their floor.")
            sentences.extend(dtype_sentences(record, mine, variant_dtype))
    table = Table(headings=["Variant", "Batch", "Context", "Mode", f"{dtype}, {threads_text(threads)} (ms)", "Variant (ms)",
                            "Variant ÷ headline", "Variant floor (ms)", "Variant ÷ its floor"],
                  rows=[(r["label"], r["batch"], r["context"], r["mode"], format_ms(r["base"]), format_ms(r["variant"]),
                         format_ratio(r["ratio"]), format_ms(r["floor"]), format_ratio(r["over_floor"])) for r in rows])
    return Block(tables=[table], notes=sentences)
