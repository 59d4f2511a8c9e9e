"""Views of the decode record: the floor, the roofline charts, ours against transformers, the targets,
the variants, the profile, the layout measurement and what a client sees. Every number and verdict is
computed from the record."""

from __future__ import annotations

from typing import Any

from site_hooks.chart import Series, line_chart
from site_hooks.orchestrate import Evidence
from site_hooks.templating import format_ms, format_ratio, lab_renderer

from .figures import BYTES_PER_ELEMENT, MATRICES, WALL_TIME_TARGET_S, best_ours, cell_table
from .text import gbs, join, threads_text
from .variants import variants_view

render = lab_renderer(__file__)
MODES = ["ours-concat", "ours-prealloc", "hf-dynamic", "hf-static"]
CHARTED = ["ours-prealloc", "ours-concat", "hf-dynamic"]  # with the floor: the chart's four lines
LABELS = {"in_out": "(in, out)", "out_in": "(out, in)"}


def headline_key(record: dict[str, Any]) -> tuple[str, int]:
    bench = record["config"]["benchmark"]
    return bench["dtype"], bench["threads"]


def floor_view(evidence: Evidence) -> str:
    record = evidence.record
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
                  activations=activations_sentence(record, groups),
                  threads=threads_text(threads), device=bench["device"], model=model)


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


def roofline_view(evidence: Evidence) -> str:
    record = evidence.record
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
        series.append(Series("memory floor", contexts, floors, floors, floors))
        description = "; ".join(
            f"context {c}: " + ", ".join(f"{s.label} {s.y[i]:.1f} ms" for s in series) for i, c in enumerate(contexts))
        title = f"Decode step at batch {batch} ({dtype}, {threads_text(threads)})"
        charts.append((title, line_chart(series, title,
                                 "context (positions attended)", "ms per step (median, whiskers min–max)",
                                 description)))
    return render("roofline.html.j2", charts=charts)


def comparison_view(evidence: Evidence) -> str:
    record = evidence.record
    cells = cell_table(record)
    rows = []
    for group in record["groups"]:
        key = (group["dtype"], group["threads"], group["batch"], group["context"])
        best = best_ours(cells, key)
        hf = cells[(*key, "hf-dynamic")]
        rows.append({"group": group, "medians": [cells[(*key, m)]["median_ns_per_step"] for m in MODES],
                     "best": best["mode"], "over_hf": best["median_ns_per_step"] / hf["median_ns_per_step"],
                     "over_floor": best["step_over_floor"], "hf_over_floor": hf["step_over_floor"],
                     "compute": group["compute_floor_ns_per_step"]})
    bench = record["config"]["benchmark"]
    return render("comparison.html.j2", rows=rows, modes=MODES, repeats=bench["repeats"], warmup=bench["warmup"],
                  cache_contents=bench["cache_contents"], timer=bench["timer"])


def limit_sentence(record: dict[str, Any], group: dict[str, Any]) -> str:
    """What holds a cell above its memory floor, from the record's own figures."""
    if group["compute_floor_ns_per_step"] > group["floor_ns_per_step"]:
        return (f"at this batch the arithmetic floor ({format_ms(group['compute_floor_ns_per_step'])} ms at the "
                f"measured matmul rate) is above the memory floor, so the step is bound by compute, not by bytes")
    profile = record["profile"]
    rows = profile["modes"]["ours-prealloc"]["rows"]
    matrices = [row for row in rows if row["kind"] in MATRICES]
    spent, floor = sum(r["ns_per_step"] for r in matrices), sum(r["floor_ns"] for r in matrices)
    rest = {row["kind"]: row for row in rows if row["kind"] not in MATRICES}
    return (f"in the profile (batch {profile['batch']}, context {profile['context']}) the five weight matrices took "
            f"{format_ms(spent)} ms against their own floor of {format_ms(floor)} ms ({format_ratio(spent / floor)}): "
            f"the matrix-vector kernels stream weights {'slower' if spent > floor else 'no slower'} than the read test "
            f"does; attention took {format_ms(rest['attention']['ns_per_step'])} ms against "
            f"{format_ms(rest['attention']['floor_ns'])} ms, and operations that move almost no bytes "
            f"{format_ms(rest['other']['ns_per_step'] + rest['cache writes and copies']['ns_per_step'])} ms")


def targets_view(evidence: Evidence) -> str:
    record = evidence.record
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


def profile_view(evidence: Evidence) -> str:
    record = evidence.record
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
        + streaming_sentence(record["layout"], worst["kind"]),
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
                f"{format_ms(timed)} ms: the profiled steps ran slower than the timed ones (the profiler adds its "
                f"own overhead to every operator), so the rows are shares of a profiled step, not timings of an "
                f"unprofiled one.")
        else:
            sentences.append(
                f"Profiled, one {mode} step's operator self times add up to {format_ms(total)} ms, "
                f"{format_ms(timed - total)} ms less than its timed median of {format_ms(timed)} ms: the time "
                f"between operators (Python, dispatch) is in the timed step but in no row.")
    return render("profile.html.j2", rows=rows, profile=profile, sentences=sentences,
                  threads=threads_text(profile["threads"]))


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


def client_view(evidence: Evidence) -> str:
    client = evidence.record["client"]
    ours, theirs = client["modes"]["ours"], client["modes"]["transformers"]
    runs = len(ours["token_times_ns"])
    sentences = [
        f"Over {runs} run(s) each, this lab's decoder produced {ours['tokens_per_s']:.1f} tokens/s and transformers' "
        f"generate {theirs['tokens_per_s']:.1f} ({format_ratio(ours['tokens_per_s'] / theirs['tokens_per_s'])}); "
        f"median inter-token latency {format_ms(ours['itl_p50_ns'])} ms against {format_ms(theirs['itl_p50_ns'])} ms, "
        f"time to first token {format_ms(ours['ttft_ns'])} ms against {format_ms(theirs['ttft_ns'])} ms.",
        "Both chose the same tokens at every step." if client["same_tokens"] else
        "The two chose different tokens somewhere in the run: with random weights, near-ties in the logits can "
        "flip a greedy choice under a rounding difference, so this compares the same amount of work, not the same text.",
    ]
    return render("client.html.j2", client=client, rows=[("this lab's decoder", ours), ("transformers generate", theirs)],
                  sentences=sentences)


def layout_view(evidence: Evidence) -> str:
    layout = evidence.record["layout"]
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


def equivalence_view(evidence: Evidence) -> str:
    record = evidence.record
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
         "variants": variants_view, "profile": profile_view, "client": client_view, "layout": layout_view,
         "decode-equivalence": equivalence_view}
