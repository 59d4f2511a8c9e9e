"""Two threads, and half the bytes: a second thread count and a second dtype against the headline grid, with
what they did to the step, to this lab's lead over transformers and to the step's distance from its floor."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import BYTES_PER_ELEMENT, MATRICES, best_ours, cell_table, stored_matrix_ns
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_ratio, join

from .common import gbs, percent_range, ratio_range, signed_percent, threads_text

COMPARED = ("ours-prealloc", "hf-dynamic")  # the variant table's modes: this lab's main cache and the baseline
TIE = 0.02  # two medians within 2% of each other count as unchanged: closer than the repetitions spread


def threads_sentences(record: dict[str, Any], rows: list[dict[str, Any]], other: int) -> list[str]:
    bench, machine = record["config"]["benchmark"], record["hardware"]
    dtype, threads = bench["dtype"], bench["threads"]
    one, two = (machine["bandwidth"][str(t)]["bytes_per_s"] for t in (threads, other))
    arithmetic = (machine["matmul"][f"{dtype}/{other}"]["flops_per_s"]
                  / machine["matmul"][f"{dtype}/{threads}"]["flops_per_s"])
    ratios = [r["ratio"] for r in rows]
    faster, slower = sum(r < 1 - TIE for r in ratios), sum(r > 1 + TIE for r in ratios)
    same = len(ratios) - faster - slower
    verdict = (f"{faster} of {len(ratios)} cells got faster, {slower} slower"
               + (f" and {same} changed by less than {TIE:.0%}, a tie" if same else ""))
    cells = cell_table(record)
    base_floor = [cells[(dtype, threads, r["batch"], r["context"], r["mode"])]["step_over_floor"] for r in rows]
    return [
        f"At {threads_text(other)} the read test drew {gbs(two)} against {gbs(one)} at {threads_text(threads)} "
        f"({signed_percent(two / one)}), which moves the floor of every {other}-thread cell by "
        f"{signed_percent(one / two)}; a square matmul ran {format_ratio(arithmetic)} as fast. The steps "
        f"({join(list(COMPARED))}, batch {join([str(b) for b in bench['variant_batches']])}) took "
        f"{ratio_range(ratios)} their {threads}-thread time: {verdict}. Measured against their own floors, "
        f"they went from {ratio_range(base_floor)} at {threads_text(threads)} to "
        f"{ratio_range([r['over_floor'] for r in rows])} at {threads_text(other)}.",
    ]


def dtype_sentences(record: dict[str, Any], rows: list[dict[str, Any]], other: str) -> list[str]:
    bench, machine = record["config"]["benchmark"], record["hardware"]
    dtype, threads = bench["dtype"], bench["threads"]
    cells = cell_table(record)
    sentences = []
    lead = {}  # (batch, context) -> (headline, variant): the fastest of ours / hf-dynamic
    for batch in bench["variant_batches"]:
        for context in bench["contexts"]:
            pair = []
            for which in (dtype, other):
                key = (which, threads, batch, context)
                pair.append(best_ours(cells, key)["median_ns_per_step"] / cells[(*key, "hf-dynamic")]["median_ns_per_step"])
            lead[(batch, context)] = tuple(pair)
    closer = [key for key, (base, variant) in lead.items() if variant > base]
    lost = [key for key, (_, variant) in lead.items() if variant >= 1]
    if len(closer) == len(lead):
        change = f"this lab's lead over transformers shrinks in {other} at every one of the {len(lead)} cells"
    elif not closer:
        change = f"this lab's lead over transformers grows in {other} at every one of the {len(lead)} cells"
    else:
        change = f"this lab's lead over transformers shrinks in {other} at {len(closer)} of {len(lead)} cells"
    if lost:
        change += "; transformers is as fast or faster at " + join([f"batch {b}, context {c}" for b, c in lost])
    sentences.append(
        f"The fastest of this lab's modes took {ratio_range([b for b, _ in lead.values()])} hf-dynamic's step in "
        f"{dtype} and {ratio_range([v for _, v in lead.values()])} in {other}: {change}.")

    base_rate = machine["matmul"][f"{dtype}/{threads}"]
    rate = machine["matmul"][f"{other}/{threads}"]["flops_per_s"] / base_rate["flops_per_s"]
    steps = [r["ratio"] for r in rows]
    sentence = (f"A square {base_rate['size']}-wide matmul ran {format_ratio(rate)} as fast in {other} as in {dtype} "
                f"at {threads_text(threads)}, while the steps in the table took {ratio_range(steps)} their {dtype} "
                f"time.")
    if rate > 1 and min(steps) > 1:
        sentence += f" The {other} speed of a large matrix multiply does not carry over to these decode steps."
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
    base_ns, variant_ns = stored_matrix_ns(layout), stored_matrix_ns(variant_layout)
    sentence = (f"The layout measurement, taken in both dtypes, isolates the batch-1 matrix-vector products: one "
                f"step's five weight kinds, each in its stored layout, took {format_ms(variant_ns)} ms in {other} "
                f"against {format_ms(base_ns)} ms in {layout['dtype']} ({format_ratio(variant_ns / base_ns)}).")
    if rate > 1 and variant_ns > base_ns:
        profiled = record["profile"]["modes"]["ours-prealloc"]
        matrices = sum(row["ns_per_step"] for row in profiled["rows"] if row["kind"] in MATRICES)
        share = matrices / profiled["total_ns_per_step"]
        sentence += (f" So on this machine {other} loses in the matrix-vector path, while square matrix multiplies "
                     f"gain. In the {record['profile']['dtype']} profile (batch {record['profile']['batch']}, context "
                     f"{record['profile']['context']}) the weight matrices are {share:.0%} of ours-prealloc's "
                     f"operator time{', most of the step' if share > 0.5 else ''}.")
        extra = [r["variant"] - r["base"] for r in rows if r["mode"] == "ours-prealloc"]
        if min(extra) > 0:
            covered = [(variant_ns - base_ns) / e for e in extra]
            sentence += (f" The matrix-vector products' extra {format_ms(variant_ns - base_ns)} ms per step is "
                         f"{percent_range(covered)} of the extra time of the ours-prealloc steps in the table "
                         f"({format_ms(min(extra))}–{format_ms(max(extra))} ms)"
                         + (f"; the layout measurement does not account for the rest, and this record has no "
                            f"{other} profile to say where it goes." if max(covered) < 1 else "."))
    sentences.append(sentence)
    faster = [row for row in variant_layout["rows"]
              if row[f"{row['stored']}_ns"] > row[f"{'out_in' if row['stored'] == 'in_out' else 'in_out'}_ns"]]
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
    variants = [(bench["dtype"], bench["variant_threads"], f"{bench['variant_threads']} threads")] \
        if bench["variant_threads"] else []
    variants += [(bench["variant_dtype"], threads, bench["variant_dtype"])] if bench["variant_dtype"] else []
    rows, sentences = [], []
    for variant_dtype, variant_threads, label in variants:
        mine = []
        for batch in bench["variant_batches"]:
            for context in bench["contexts"]:
                for mode in COMPARED:
                    base = cells[(dtype, threads, batch, context, mode)]
                    other = cells[(variant_dtype, variant_threads, batch, context, mode)]
                    mine.append({"label": label, "batch": batch, "context": context, "mode": mode,
                                 "base": base["median_ns_per_step"], "variant": other["median_ns_per_step"],
                                 "ratio": other["median_ns_per_step"] / base["median_ns_per_step"],
                                 "floor": other["floor_ns_per_step"], "over_floor": other["step_over_floor"]})
        rows += mine
        if variant_dtype == dtype:
            sentences += threads_sentences(record, mine, variant_threads)
        else:
            size, base_size = BYTES_PER_ELEMENT[variant_dtype], BYTES_PER_ELEMENT[dtype]
            sentences.append(f"{variant_dtype} stores {size} bytes per element against {dtype}'s {base_size}, so "
                             f"every byte a step must move, and its floor, scales by {size}/{base_size}; its steps "
                             f"came out at {ratio_range([r['over_floor'] for r in mine])} their floor.")
            sentences += dtype_sentences(record, mine, variant_dtype)
    table = Table(headings=["Variant", "Batch", "Context", "Mode", f"{dtype}, {threads_text(threads)} (ms)", "Variant (ms)",
                            "Variant ÷ headline", "Variant floor (ms)", "Variant ÷ its floor"],
                  rows=[(r["label"], r["batch"], r["context"], r["mode"], format_ms(r["base"]), format_ms(r["variant"]),
                         format_ratio(r["ratio"]), format_ms(r["floor"]), format_ratio(r["over_floor"])) for r in rows])
    return Block(css="lab-decode-variants", tables=[table], notes=sentences)
