"""Views of the decode record: the floor, the roofline charts, ours against transformers, the targets,
the variants, the profile, the layout measurement and what a client sees. Every number and verdict is
computed from the record."""

from __future__ import annotations

from typing import Any

from site_hooks.chart import Series, line_chart
from site_hooks.formatting import format_ms, format_ratio
from site_hooks.prose import NOISY_SPREAD
from site_hooks.templating import lab_renderer

from .figures import BYTES_PER_ELEMENT, MATRICES, WALL_TIME_TARGET_S, best_ours, cell_table, median
from .text import gbs, join, threads_text
from .variants import stored_matrix_ns, variants_view

render = lab_renderer(__file__)
MODES = ["ours-concat", "ours-prealloc", "hf-dynamic", "hf-static"]
CHARTED = ["ours-prealloc", "ours-concat", "hf-dynamic"]  # with the floor: the chart's four lines
LABELS = {"in_out": "(in, out)", "out_in": "(out, in)"}
MANY_FAULTS = 1000  # extra faults per step worth naming: megabytes freshly mapped, milliseconds of kernel work


def headline_key(record: dict[str, Any]) -> tuple[str, int]:
    bench = record["config"]["benchmark"]
    return bench["dtype"], bench["threads"]


def floor_view(record: dict[str, Any]) -> str:
    machine, model, bench = record["hardware"], record["config"]["model"], record["config"]["benchmark"]
    dtype, threads = headline_key(record)
    llc = machine["last_level_cache_bytes"]
    paragraphs = [
        (f"The last-level cache is {llc / 2**20:g} MiB (read from {machine['last_level_cache_source']}), so the "
         if llc else f"The last-level cache size was {machine['last_level_cache_source']}, so the ")
        + f"bandwidth buffer was {machine['buffer_bytes'] / 2**20:g} MiB, read with {machine['kernel']}. "
        + " ".join(f"At {threads_text(int(t))} the best of {e['passes']} passes read {gbs(e['bytes_per_s'])}."
                   for t, e in machine["bandwidth"].items()),
        f"Matrix arithmetic, best of a few square {next(iter(machine['matmul'].values()))['size']}-wide matmuls: "
        + "; ".join(f"{key.split('/')[0]} at {threads_text(int(key.split('/')[1]))}, "
                    f"{e['flops_per_s'] / 1e9:.0f} GFLOP/s" for key, e in machine["matmul"].items()) + ".",
    ]
    groups = [g for g in record["groups"] if (g["dtype"], g["threads"]) == (dtype, threads)]
    rows = [{**g, "kv_share": g["bytes"]["kv_read"] / g["bytes"]["weights"]} for g in groups]
    crossover = record["kv_crossover"]
    over_by_batch: dict[int, list[str]] = {}
    for g in rows:
        if g["kv_share"] > 1:
            over_by_batch.setdefault(g["batch"], []).append(str(g["context"]))
    over = [f"batch {batch} at context{'s' if len(c) > 1 else ''} {join(c)}" for batch, c in over_by_batch.items()]
    crossing = (f"KV reads overtake weight reads at B × T = {crossover['weight_bytes']:,} / "
                f"{crossover['kv_bytes_per_position']:,} = {crossover['batch_x_context']:,.0f} positions "
                f"(weights ÷ KV bytes per position, batch 1). ")
    crossing += (f"In this grid that happens at {join(over)}." if over else
                 "No cell of this grid reaches it; the weights dominate every step.")
    return render("floor.html.j2", paragraphs=paragraphs, rows=rows, crossing=crossing, dtype=dtype,
                  bound=bound_sentence(groups), activations=activations_sentence(record, groups),
                  threads=threads_text(threads), device=bench["device"], model=model)


def bound_sentence(groups: list[dict[str, Any]]) -> str:
    """Where the arithmetic floor, not the memory floor, is the higher of the two lower bounds."""
    compute = [g for g in groups if g["compute_floor_ns_per_step"] > g["floor_ns_per_step"]]
    if not compute:
        return ("The memory floor is above the arithmetic floor in every cell of this grid: by these two lower "
                "bounds, every step here is bound by the bytes it moves, not by its flops.")
    by_batch: dict[int, list[str]] = {}
    for g in compute:
        by_batch.setdefault(g["batch"], []).append(str(g["context"]))
    where = join([f"batch {batch} at context{'s' if len(c) > 1 else ''} {join(c)}" for batch, c in by_batch.items()])
    memory_bound = sorted({g["batch"] for g in groups} - set(by_batch))
    return (f"The arithmetic floor is the higher of the two at {where}: there the step's flops, not its bytes, set "
            "the lower bound, and a step's ratio to the memory floor overstates how far it is from what the "
            "machine allows. "
            + (f"At batch {join([str(b) for b in memory_bound])} the memory floor is the higher in every cell."
               if memory_bound else ""))


def activations_sentence(record: dict[str, Any], groups: list[dict[str, Any]]) -> str:
    """What the floor leaves out, sized from the config at the grid's largest batch and context."""
    model = record["config"]["model"]
    batch, context = max(g["batch"] for g in groups), max(g["context"] for g in groups)
    size = BYTES_PER_ELEMENT[groups[0]["dtype"]]
    hidden = model["ffn_multiplier"] * model["width"]
    sizes = {  # name: (factors, bytes)
        "the logits": (f"{batch} × {model['vocab_size']:,} × {size}", batch * model["vocab_size"] * size),
        f"one layer's attention scores at context {context}, where a kernel materialises them":
            (f"{batch} × {model['heads']} × {context:,} × {size}", batch * model["heads"] * context * size),
        "one layer's MLP hidden vector": (f"{batch} × {hidden:,} × {size}", batch * hidden * size),
    }
    ordered = sorted(sizes.items(), key=lambda item: -item[1][1])
    weights = groups[0]["bytes"]["weights"]
    (name, (factors, largest)), rest = ordered[0], ordered[1:]
    return (f"Activations are not counted. At batch {batch} the largest is {name}, {factors} = {largest:,} bytes, "
            f"{largest / weights:.1%} of the {weights:,} weight bytes; then "
            + join([f"{other} ({value:,} bytes)" for other, (_, value) in rest]) + ".")


def roofline_view(record: dict[str, Any]) -> str:
    dtype, threads = headline_key(record)
    bench = record["config"]["benchmark"]
    cells = cell_table(record)
    groups = {(g["batch"], g["context"]): g for g in record["groups"] if (g["dtype"], g["threads"]) == (dtype, threads)}
    contexts = bench["contexts"]
    overview = []  # the roofline: this lab's preallocated step against its floor, one pair of lines per batch
    for index, batch in enumerate(bench["batches"]):  # a batch's step and its floor share a colour
        picked = [cells[(dtype, threads, batch, c, "ours-prealloc")] for c in contexts]
        overview.append(Series(f"ours-prealloc, batch {batch}", contexts, [p["median_ns_per_step"] / 1e6 for p in picked],
                               [p["min_ns_per_step"] / 1e6 for p in picked], [p["max_ns_per_step"] / 1e6 for p in picked],
                               colour_of=index))
        floors = [groups[(batch, c)]["floor_ns_per_step"] / 1e6 for c in contexts]
        overview.append(Series(f"floor, batch {batch}", contexts, floors, floors, floors, colour_of=index, dashed=True))
    title = f"Decode step against the memory floor, every batch ({dtype}, {threads_text(threads)})"
    description = "; ".join(f"{s.label}: " + ", ".join(f"context {c} {y:.1f} ms" for c, y in zip(s.x, s.y))
                            for s in overview)
    charts = [(title, line_chart(overview, title, "context (positions attended)",
                                 "ms per step (median, whiskers min–max)", description))]
    for batch in bench["batches"]:
        series = []
        for mode in CHARTED:
            picked = [cells[(dtype, threads, batch, c, mode)] for c in contexts]
            series.append(Series(mode, contexts, [p["median_ns_per_step"] / 1e6 for p in picked],
                                 [p["min_ns_per_step"] / 1e6 for p in picked],
                                 [p["max_ns_per_step"] / 1e6 for p in picked]))
        floors = [groups[(batch, c)]["floor_ns_per_step"] / 1e6 for c in contexts]
        series.append(Series("memory floor", contexts, floors, floors, floors, dashed=True))
        compute = [groups[(batch, c)]["compute_floor_ns_per_step"] / 1e6 for c in contexts]
        series.append(Series("arithmetic floor", contexts, compute, compute, compute, dashed=True))
        description = "; ".join(
            f"context {c}: " + ", ".join(f"{s.label} {s.y[i]:.1f} ms" for s in series) for i, c in enumerate(contexts))
        title = f"Decode step at batch {batch} ({dtype}, {threads_text(threads)})"
        charts.append((title, line_chart(series, title,
                                 "context (positions attended)", "ms per step (median, whiskers min–max)",
                                 description)))
    return render("roofline.html.j2", charts=charts)


def comparison_view(record: dict[str, Any]) -> str:
    cells = cell_table(record)
    sections: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for group in record["groups"]:
        key = (group["dtype"], group["threads"], group["batch"], group["context"])
        best = best_ours(cells, key)
        hf = cells[(*key, "hf-dynamic")]
        sections.setdefault((group["dtype"], group["threads"]), []).append({
            "group": group, "over_hf": best["median_ns_per_step"] / hf["median_ns_per_step"],
            "medians": [{"ns": cells[(*key, m)]["median_ns_per_step"], "faster": m == best["mode"]} for m in MODES],
            "over_floor": best["step_over_floor"], "hf_over_floor": hf["step_over_floor"]})
    headline = headline_key(record)
    headings = [(f"{dtype}, {threads_text(threads)}" + (" (the headline grid)" if (dtype, threads) == headline else ""),
                 rows) for (dtype, threads), rows in sections.items()]
    bench = record["config"]["benchmark"]
    warmup = bench["warmup"]
    return render("comparison.html.j2", sections=headings, modes=MODES, repeats=bench["repeats"],
                  warmup_text=f"{warmup} untimed warm-up step{'' if warmup == 1 else 's'}",
                  cache_contents=bench["cache_contents"], timer=bench["timer"],
                  sentences=noise_sentences(record) + faults_sentences(record))


def noise_sentences(record: dict[str, Any]) -> list[str]:
    """How far the repetitions of a cell spread, and whether the first timed one ran slowest (too little warm-up)."""
    cells = record["cells"]
    spreads = [((c["max_ns_per_step"] - c["min_ns_per_step"]) / c["median_ns_per_step"], c) for c in cells]
    noisy = [pair for pair in spreads if pair[0] > NOISY_SPREAD]
    widest, cell = max(spreads, key=lambda pair: pair[0])
    first_slowest = sum(c["durations_ns"][0] == max(c["durations_ns"]) and len(set(c["durations_ns"])) > 1
                        for c in cells)
    repeats = record["config"]["benchmark"]["repeats"]
    sentences = [
        f"{len(noisy)} of {len(cells)} cells spread more than {NOISY_SPREAD:.0%} of their median from fastest to "
        f"slowest repetition; the widest, {cell['mode']} at batch {cell['batch']}, context {cell['context']} "
        f"({cell['dtype']}, {threads_text(cell['threads'])}), ran from {format_ms(cell['min_ns_per_step'])} to "
        f"{format_ms(cell['max_ns_per_step'])} ms around a median of {format_ms(cell['median_ns_per_step'])} ms. "
        "A ratio of two medians closer to 1 than such spreads is a tie, not a ranking.",
        f"In {first_slowest} of {len(cells)} cells the first timed repetition was the slowest; if the warm-up "
        f"were enough, that would happen in about 1 in {repeats}, {len(cells) / repeats:.1f} cells.",
    ]
    return sentences


def faults_sentences(record: dict[str, Any]) -> list[str]:
    """Minor page faults per step: the first touches of freshly mapped memory, which a step that allocates pays."""
    dtype, threads = headline_key(record)
    by_mode: dict[str, list[float]] = {}
    for cell in record["cells"]:
        if (cell["dtype"], cell["threads"]) == (dtype, threads):
            by_mode.setdefault(cell["mode"], []).append(median(cell["minor_faults"]))
    parts = [f"{mode} {format_count(min(values))}" + ("" if min(values) == max(values) else f"–{format_count(max(values))}")
             for mode, values in by_mode.items()]
    return [f"Minor page faults per timed step (median per cell, over the headline grid): {join(parts)}. A fault "
            "is the kernel mapping a fresh page on its first touch; a step that allocates new memory for its cache "
            "faults on every page of it, a step that writes into memory it already holds pays none."]


def format_count(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def limit_sentence(record: dict[str, Any], group: dict[str, Any]) -> str:
    """What holds a cell above its memory floor, from the record's own figures."""
    if group["compute_floor_ns_per_step"] > group["floor_ns_per_step"]:
        return (f"at this batch the arithmetic floor ({format_ms(group['compute_floor_ns_per_step'])} ms at the "
                f"measured matmul rate) is above the memory floor, so the step is bound by compute, not by bytes")
    profile, target = record["profile"], record["config"]["benchmark"]["targets"]["step_over_floor"]
    rows = {row["kind"]: row for row in profile["modes"]["ours-prealloc"]["rows"]}
    spent = sum(rows[kind]["ns_per_step"] for kind in MATRICES)
    floor = sum(rows[kind]["floor_ns"] for kind in MATRICES)
    small = rows["other"]["ns_per_step"] + rows["cache writes and copies"]["ns_per_step"]
    key = (profile["dtype"], profile["threads"], profile["batch"], profile["context"], "ours-prealloc")
    timed = cell_table(record)[key]["median_ns_per_step"]
    profiled = profile["modes"]["ours-prealloc"]["total_ns_per_step"]
    budget = target * timed / cell_table(record)[key]["step_over_floor"]
    gap = (f"{format_ms(timed - profiled)} ms of the timed step's {format_ms(timed)} ms is time between operators "
           f"(Python and dispatch) that no row holds" if profiled < timed else
           f"the profiled rows add to {format_ms(profiled - timed)} ms more than the timed step, the profiler's own cost")
    return (f"in the profile of ours-prealloc (batch {profile['batch']}, context {profile['context']}) the five weight "
            f"matrices took {format_ms(spent)} ms against their own floor of {format_ms(floor)} ms "
            f"({format_ratio(spent / floor)}, {'within' if spent <= target * floor else 'beyond'} {target:g}× on "
            f"their own); attention read the KV cache in {format_ms(rows['attention']['ns_per_step'])} ms against "
            f"{format_ms(rows['attention']['floor_ns'])} ms ({format_ratio(rows['attention']['ratio_to_floor'])}); "
            f"operators that move almost no bytes (norms, GELU, residual adds, the cache write) took "
            f"{format_ms(small)} ms; and {gap}. Within {target:g}× of that cell's floor the whole step would have "
            f"to take at most {format_ms(budget)} ms, and the weights alone used {spent / budget:.0%} of that. The "
            f"profile is of the longest context; at shorter ones the KV cache is a smaller share of the bytes, so "
            f"the weights and the small operators weigh more")


def targets_view(record: dict[str, Any]) -> str:
    bench = record["config"]["benchmark"]
    targets = bench["targets"]
    dtype, threads = headline_key(record)
    cells = cell_table(record)
    rows, sentences = [], []
    for group in record["groups"]:
        if (group["dtype"], group["threads"], group["batch"]) != (dtype, threads, 1):
            continue
        key = (dtype, threads, 1, group["context"])
        best = best_ours(cells, key)
        hf = cells[(*key, "hf-dynamic")]
        over_hf = best["median_ns_per_step"] / hf["median_ns_per_step"]
        met_hf = over_hf <= targets["best_over_hf_dynamic"]
        met_floor = best["step_over_floor"] <= targets["step_over_floor"]
        rows.append({"context": group["context"], "best": best["mode"], "over_hf": over_hf, "met_hf": met_hf,
                     "over_floor": best["step_over_floor"], "met_floor": met_floor,
                     "hf_over_floor": hf["step_over_floor"]})
    for name, target, key, label in (("hf", targets["best_over_hf_dynamic"], "over_hf", "hf-dynamic's step"),
                                      ("floor", targets["step_over_floor"], "over_floor", "the memory floor")):
        missed = [r for r in rows if not r[f"met_{name}"]]
        if missed:
            sentences.append(
                f"Missed ≤ {target:g}× {label} at context{'s' if len(missed) > 1 else ''} "
                + join([f"{r['context']} ({format_ratio(r[key])})" for r in missed]) + ".")
    bound = [g for g in record["groups"] if (g["dtype"], g["threads"], g["batch"]) == (dtype, threads, 1)]
    if any(not (r["met_hf"] and r["met_floor"]) for r in rows):
        compute = [g for g in bound if g["compute_floor_ns_per_step"] > g["floor_ns_per_step"]]
        group = compute[0] if compute else bound[0]
        sentences.append("What limits them: " + limit_sentence(record, group) + ".")
    summary = (f"At batch 1, {dtype}, {threads_text(threads)}: this lab's faster cache took at most "
               f"{targets['best_over_hf_dynamic']:g}× hf-dynamic's step at {sum(r['met_hf'] for r in rows)} of "
               f"{len(rows)} contexts, and stayed within {targets['step_over_floor']:g}× the measured memory floor at "
               f"{sum(r['met_floor'] for r in rows)} of {len(rows)}.")
    wall = record["wall_time_s"]
    sentences.append(
        f"The whole benchmark, from building the models to the end of the client workload (starting Python and "
        f"importing torch and transformers come on top), took {wall:.0f} s: "
        f"{'within' if wall <= WALL_TIME_TARGET_S else 'beyond'} the {WALL_TIME_TARGET_S / 60:g}-minute "
        f"({WALL_TIME_TARGET_S} s) target.")
    return render("targets.html.j2", rows=rows, summary=summary, sentences=sentences, targets=targets)


def profile_view(record: dict[str, Any]) -> str:
    profile = record["profile"]
    ours, theirs = profile["modes"]["ours-prealloc"], profile["modes"]["hf-dynamic"]
    rows = [{"ours": a, "theirs": b} for a, b in zip(ours["rows"], theirs["rows"])]
    matrices = [r for r in ours["rows"] if r["kind"] in MATRICES]
    worst = max(matrices, key=lambda r: r["ratio_to_floor"])
    best = min(matrices, key=lambda r: r["ratio_to_floor"])
    excess = max(ours["rows"], key=lambda r: r["ns_per_step"] - r["floor_ns"])
    sentences = [
        f"Of the weight matrices, {worst['kind']} is farthest from its own floor ({format_ratio(worst['ratio_to_floor'])}) "
        f"and {best['kind']} closest ({format_ratio(best['ratio_to_floor'])}); the most time above a floor is spent in "
        f"{excess['kind']} ({format_ms(excess['ns_per_step'] - excess['floor_ns'])} ms per step)."
        + streaming_sentence(record["layout"], worst["kind"]) + per_call_sentence(record, worst),
    ]
    cells = cell_table(record)
    key = (profile["dtype"], profile["threads"], profile["batch"], profile["context"])
    for mode, entry in (("ours-prealloc", ours), ("hf-dynamic", theirs)):
        if (*key, mode) not in cells:
            continue
        timed, total = cells[(*key, mode)]["median_ns_per_step"], entry["total_ns_per_step"]
        if total > timed:
            sentences.append(
                f"Profiled, one {mode} step's operator self times add up to {format_ms(total)} ms, "
                f"{format_ms(total - timed)} ms ({format_ratio(total / timed)}) more than its timed median of "
                f"{format_ms(timed)} ms: the profiled steps ran slower than the timed ones, so the rows are shares "
                f"of a profiled step, not timings of an unprofiled one.")
        else:
            sentences.append(
                f"Profiled, one {mode} step's operator self times add up to {format_ms(total)} ms, "
                f"{format_ms(timed - total)} ms less than its timed median of {format_ms(timed)} ms: the time "
                f"between operators (Python, dispatch) is in the timed step but in no row.")
    sentences += profile_faults_sentences(record)
    return render("profile.html.j2", rows=rows, profile=profile, sentences=sentences,
                  threads=threads_text(profile["threads"]))


def per_call_sentence(record: dict[str, Any], worst: dict[str, Any]) -> str:
    """How long one multiply of the farthest kind takes: the shorter a call, the more a fixed cost per call weighs."""
    layout = {row["kind"]: row for row in record["layout"]["rows"]}
    calls = layout[worst["kind"]]["matrices"]
    per_call = worst["ns_per_step"] / calls
    shortest = min(layout, key=lambda kind: layout[kind]["bytes_per_matrix"])
    if shortest != worst["kind"]:
        return ""
    return (f" One multiply by it took {per_call / 1e3:.0f} µs in the profiled step ({calls} per step), the shortest "
            "call of the five kinds, so any fixed cost per call (dispatch, and the profiler's own bookkeeping per "
            "operator) is the largest share of it.")


def profile_faults_sentences(record: dict[str, Any]) -> list[str]:
    """Page faults in the profiled steps against the timed steps of the same cell."""
    profile = record["profile"]
    cells = cell_table(record)
    sentences = []
    for mode, entry in profile["modes"].items():
        key = (profile["dtype"], profile["threads"], profile["batch"], profile["context"], mode)
        if key not in cells:
            continue
        profiled, timed = median(entry["minor_faults"]), median(cells[key]["minor_faults"])
        copies = next(row for row in entry["rows"] if row["kind"] == "cache writes and copies")
        sentence = (f"Profiled, the {mode} step took {format_count(profiled)} minor page faults (median of "
                    f"{len(entry['minor_faults'])}), against {format_count(timed)} in its timed steps")
        if profiled - timed >= MANY_FAULTS and profiled > 2 * timed:
            sentence += (": under the profiler the memory its copies wrote was freshly mapped, and the kernel's "
                         f"work of mapping it lands in the \"cache writes and copies\" row "
                         f"({format_ms(copies['ns_per_step'])} ms), which the timed steps did not pay to that extent")
        sentences.append(sentence + ".")
    return sentences


def streaming_sentence(layout: dict[str, Any], kind: str) -> str:
    """What the separate layout measurement says about one matrix kind, without claiming a cause it cannot show."""
    rates = {row["kind"]: row["bytes_per_matrix"] / row[f"{row['stored']}_ns"] * 1e9 for row in layout["rows"]}
    sizes = {row["kind"]: row["bytes_per_matrix"] for row in layout["rows"]}
    others = [rate for other, rate in rates.items() if other != kind]
    if rates[kind] >= min(others):
        return ""
    smallest = sizes[kind] == min(sizes.values())
    return (f" In the separate layout measurement {kind} also streamed slowest of the five, {gbs(rates[kind])} per "
            f"matrix in its stored layout against {gbs(min(others)).removesuffix(' GB/s')}–{gbs(max(others))} for "
            f"the others" + (f", and it is the smallest matrix ({sizes[kind]:,} bytes)" if smallest else "")
            + "; the record does not separate a fixed cost per multiply from the streaming itself, so it shows "
              "this without establishing why.")


def client_view(record: dict[str, Any]) -> str:
    client = record["client"]
    ours, theirs = client["modes"]["ours"], client["modes"]["transformers"]
    runs = len(ours["token_times_ns"])
    sentences = [
        f"Over {runs} run{'' if runs == 1 else 's'} each, this lab's decoder produced {ours['tokens_per_s']:.1f} tokens/s and transformers' "
        f"generate {theirs['tokens_per_s']:.1f} ({format_ratio(ours['tokens_per_s'] / theirs['tokens_per_s'])}); "
        f"median inter-token latency {format_ms(ours['itl_p50_ns'])} ms against {format_ms(theirs['itl_p50_ns'])} ms, "
        f"time to first token {format_ms(ours['ttft_ns'])} ms against {format_ms(theirs['ttft_ns'])} ms.",
        "Both chose the same tokens at every step." if client["same_tokens"] else
        "The two chose different tokens somewhere in the run: with random weights, near-ties in the logits can "
        "flip a greedy choice under a rounding difference, so this compares the same amount of work, not the same text.",
    ]
    return render("client.html.j2", client=client, rows=[("this lab's decoder", ours), ("transformers generate", theirs)],
                  sentences=sentences)


def layout_view(record: dict[str, Any]) -> str:
    layout = record["layout"]
    rows = []
    for row in layout["rows"]:
        faster = "in_out" if row["in_out_ns"] <= row["out_in_ns"] else "out_in"
        rows.append({**row, "ratio": row["out_in_ns"] / row["in_out_ns"], "faster": LABELS[faster],
                     "stored_label": LABELS[row["stored"]], "stored_is_faster": row["stored"] == faster})
    agree = sum(r["stored_is_faster"] for r in rows)
    head = next(r for r in rows if r["kind"] == "output head")
    sentences = [
        f"The output head, read whole every step, took {format_ms(head['in_out_ns'])} ms stored (in, out) and "
        f"{format_ms(head['out_in_ns'])} ms stored (out, in).",
        f"In this run the layout the decoder stores was the faster one for {agree} of {len(rows)} kinds of matrix"
        + ("." if agree == len(rows) else "; "
           + ", ".join(f"{r['kind']} ran faster {r['faster']} ({format_ratio(max(r['ratio'], 1 / r['ratio']))})"
                       for r in rows if not r["stored_is_faster"]) + "."),
    ]
    return render("layout.html.j2", rows=rows, layout=layout, sentences=sentences)


def batches_view(record: dict[str, Any]) -> str:
    """The weight multiplies of one step at each batch: the same bytes, a different kernel."""
    dtype, threads = headline_key(record)
    cells = cell_table(record)
    context = record["config"]["benchmark"]["contexts"][0]
    matrix_bytes = sum(row["bytes_per_matrix"] * row["matrices"] for row in record["layout"]["rows"])
    rows = []
    for layout in [record["layout"], *record["layout_batches"]]:
        stored = stored_matrix_ns(layout)
        best = sum(min(row["in_out_ns"], row["out_in_ns"]) * row["matrices"] for row in layout["rows"])
        flipped = [row["kind"] for row in layout["rows"]
                   if row[f"{row['stored']}_ns"] > row[f"{'out_in' if row['stored'] == 'in_out' else 'in_out'}_ns"]]
        cell = cells[(dtype, threads, layout["batch"], context, "ours-prealloc")]
        rows.append({"batch": layout["batch"], "stored_ns": stored, "best_ns": best, "rate": gbs(matrix_bytes / stored * 1e9),
                     "flipped": ", ".join(flipped) or "none", "step_ns": cell["median_ns_per_step"],
                     "floor_ns": cell["floor_ns_per_step"]})
    first, last = rows[0], rows[-1]
    sentences = [] if len(rows) == 1 else [
        f"From batch {first['batch']} to batch {last['batch']} the weight multiplies went from "
        f"{format_ms(first['stored_ns'])} to {format_ms(last['stored_ns'])} ms "
        f"({format_ratio(last['stored_ns'] / first['stored_ns'])}) for the same bytes, while the step's memory floor "
        f"at context {context} rose {format_ratio(last['floor_ns'] / first['floor_ns'])} and the timed step "
        f"{format_ratio(last['step_ns'] / first['step_ns'])}. "
        + "".join(f"At batch {r['batch']} they took {format_ratio(r['stored_ns'] / first['stored_ns'])} their "
                  f"batch-{first['batch']} time. " for r in rows[1:-1])
        + "A batch-1 multiply is a matrix-vector product and a larger batch a matrix-matrix product, which the "
          "library runs with other kernels: on these short, wide shapes their speed, not the bytes, sets the time.",
    ]
    if any(r["flipped"] != "none" for r in rows):
        sentences.append("The stored layout was chosen at batch 1; " + join(
            [f"at batch {r['batch']} the other layout would have been faster for {r['flipped']} "
             f"({format_ms(r['best_ns'])} ms with the faster layout of every kind)" for r in rows if r["flipped"] != "none"])
            + ". One layout serves every batch here, because a second copy of the weights would double the bytes "
              "held.")
    return render("batches.html.j2", rows=rows, sentences=sentences, context=context, dtype=record["layout"]["dtype"],
                  passes=record["layout"]["passes"], weight_bytes=matrix_bytes)


def model_view(record: dict[str, Any]) -> str:
    """The model this record measured, from its configuration."""
    model = record["config"]["model"]
    weights = record["kv_crossover"]["weight_bytes"]
    heads = f"{model['heads']} heads" + ("" if model["kv_heads"] == model["heads"]
                                         else f" sharing {model['kv_heads']} key/value heads")
    sentences = [
        f"This record's model is the {model['preset']} preset: {model['layers']} layers, width {model['width']}, "
        f"{heads} of {model['head_dim']}, a feed-forward width of {model['ffn_multiplier'] * model['width']:,}, a "
        f"vocabulary of {model['vocab_size']:,} tokens and {model['max_positions']:,} learned positions. A decode "
        f"step multiplies by {weights:,} bytes of weights in {record['config']['benchmark']['dtype']}.",
        f"Weights are drawn from seed {model['seed']} with standard deviation {model['init_std']:g}, the two residual "
        f"projections of every layer scaled down by 1 / sqrt(2 × {model['layers']}); layer norms use "
        f"eps = {model['layer_norm_eps']:g}.",
    ]
    return render("model.html.j2", sentences=sentences)


def equivalence_view(record: dict[str, Any]) -> str:
    modes, tolerance = record["equivalence"]["modes"], record["tolerance"]
    within = [mode for mode, entry in modes.items() if entry["within_tolerance"]]
    worst = max(modes.values(), key=lambda entry: entry["max_abs_diff"])
    bound = tolerance["atol"] + tolerance["rtol"] * worst["max_abs_reference"]
    agree = [mode for mode, entry in modes.items() if entry["argmax_agrees_every_step"]]
    sentences = [
        f"{len(within)} of {len(modes)} modes (hf-full included) were within atol = {tolerance['atol']:g}, rtol = {tolerance['rtol']:g} before "
        f"any timing began; the largest difference, {worst['max_abs_diff']:.2e}, is "
        f"{worst['max_abs_diff'] / bound:.1%} of the bound atol + rtol × max |reference logit| = {bound:.2e}.",
        f"The greedy token agreed with the reference at every position for all {len(modes)}." if len(agree) == len(modes)
        else f"The greedy token agreed at every position for {len(agree)} of {len(modes)}; "
             + join([mode for mode in modes if mode not in agree])
             + " chose another token somewhere, as logits within the tolerance can at a near-tie.",
    ]
    return render("decode_equivalence.html.j2", equivalence=record["equivalence"], sentences=sentences)


VIEWS = {"floor": floor_view, "roofline": roofline_view, "comparison": comparison_view, "targets": targets_view,
         "variants": variants_view, "profile": profile_view, "client": client_view, "layout": layout_view, "batches": batches_view,
         "model": model_view,
         "decode-equivalence": equivalence_view}
