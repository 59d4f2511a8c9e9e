"""The trained model beside the grid: SmolLM2-135M on this project's Llama decoder and on transformers' Llama.

What changes from GPT-2 small is drawn from the two configs (formulas.contrast, stored as llama.contrast);
how close each path came to its floor, and ours against transformers, from the Llama section's cells."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import LLAMA_BASELINE, LLAMA_LADDER, LLAMA_TARGETS, REGIMES, headline_key
from site_hooks.blocks import Block, Strong, Table, answer
from site_hooks.diagrams import Canvas, Diagram, legend
from site_hooks.formatting import format_bytes, format_ms, format_percent, format_ratio, format_sci, join

from .common import ratio_range, threads_text
from .pictures import headline_groups, stacked_bar

OURS = "ours-prealloc"
# Each bar's segments: the field of llama.contrast.<model> it draws (a batch-1 step at the longest context), its
# fill and its legend.
SEGMENTS = (("layer_bytes", "old", "layer weights, read once"),
            ("head_bytes", "shared", "output head = token embedding, once"),
            ("step_kv_bytes", "new", "KV cache, read and written"))


def llama_name(record: dict[str, Any]) -> str:
    return str(record["llama"]["weights"]["name"])


def gpt2_name(record: dict[str, Any]) -> str:
    return str(record["config"]["model"]["preset"])


def llama_cells(record: dict[str, Any]) -> dict[tuple[int, int, str], dict[str, Any]]:
    """The Llama cells by (threads, context, mode)."""
    return {(c["threads"], c["context"], c["mode"]): c for c in record["llama"]["cells"]}


def llama_groups(record: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    return {(g["threads"], g["context"]): g for g in record["llama"]["groups"]}


def shape_text(model: dict[str, Any]) -> str:
    return f"{model['kv_heads']} heads of {model['head_dim']} features × {model['layers']} layers"


def bars(record: dict[str, Any]) -> list[tuple[str, dict[str, float], float | None]]:
    """Per model (GPT-2 first): its name, its bytes of a batch-1 step at the longest context (llama.contrast), and
    the floor they set at the headline thread count (GPT-2's only where its headline grid ran in the same dtype)."""
    section = record["llama"]
    context, threads = section["contexts"][-1], section["threads"][0]
    contrast = section["contrast"]
    gpt2_floor = headline_groups(record)[(1, context)]["floor_ns_per_step"] if headline_key(record) == (
        section["dtype"], threads) else None
    return [(gpt2_name(record), contrast["gpt2"], gpt2_floor),
            (llama_name(record), contrast["llama"], llama_groups(record)[(threads, context)]["floor_ns_per_step"])]


def bars_canvas(rows: list[tuple[str, dict[str, float], float | None]], title: str, description: str) -> Canvas:
    """Two bars to one scale, each total and its floor at the right, the legend below."""
    widest = max(parts["step_total_bytes"] for _, parts, _ in rows)
    left, bar_w, row_h = 200, 250, 34  # room for the longer model name
    canvas = Canvas(width=left + bar_w + 170, height=40 + len(rows) * row_h + 24 * len(SEGMENTS) + 16,
                    slug="trained-bytes", title=title, description=description)
    canvas.text(left + bar_w + 14, 18, "bytes → floor", anchor="start", size=14, weight="bold")
    y = 32
    for name, parts, floor in rows:
        canvas.text(left - 10, y + row_h / 2 + 5, name, anchor="end", size=14)
        stacked_bar(canvas, left, y + 5, row_h - 10, [([parts[key]], fill) for key, fill, _ in SEGMENTS], bar_w / widest)
        total = format_bytes(parts["step_total_bytes"])
        canvas.text(left + bar_w + 14, y + row_h / 2 + 5, total if floor is None else f"{total} → {format_ms(floor)} ms",
                    anchor="start", size=14)
        y += row_h
    legend(canvas, left, y + 14, [(fill, text) for _, fill, text in SEGMENTS])
    return canvas


def trained_bytes_view(record: dict[str, Any]) -> Block:
    """Two bars to one scale, the two models' bytes at batch 1 and the longest context; a table of what differs."""
    section = record["llama"]
    context = section["contexts"][-1]
    rows = bars(record)
    canvas = bars_canvas(rows, f"One batch-1 step at context {context:,}, float32: two models' bytes",
                         "; ".join(f"{name}: {format_bytes(p['layer_bytes'])} of layer weights, "
                                   f"{format_bytes(p['head_bytes'])} of head, {format_bytes(p['step_kv_bytes'])} of KV "
                                   "cache" for name, p, _ in rows))
    gpt2, llama, ratios = section["contrast"]["gpt2"], section["contrast"]["llama"], section["contrast"]["ratios"]
    g_model, l_model = record["config"]["model"], section["model"]
    table = Table(
        headings=["Per step, float32", gpt2_name(record), llama_name(record), f"{llama_name(record)} ÷ {gpt2_name(record)}"],
        rows=[
            ("Weights read (a tied head counted once)", format_bytes(gpt2["weight_bytes"]),
             format_bytes(llama["weight_bytes"]), format_ratio(ratios["weight_bytes"])),
            ("Output head, vocabulary × width",
             f"{g_model['vocab_size']:,} × {g_model['width']}: {format_bytes(gpt2['head_bytes'])}",
             f"{l_model['vocab_size']:,} × {l_model['width']}: {format_bytes(llama['head_bytes'])}",
             format_ratio(ratios["head_bytes"])),
            ("Head's share of the weights", format_percent(gpt2["head_share"]), format_percent(llama["head_share"]),
             format_ratio(ratios["head_share"])),
            ("Key/value heads × layers", shape_text(g_model), shape_text(l_model), format_ratio(ratios["kv_heads_x_layers"])),
            ("KV cache per position", format_bytes(gpt2["kv_bytes_per_position"]),
             format_bytes(llama["kv_bytes_per_position"]), format_ratio(ratios["kv_bytes_per_position"])),
            ("Batch × context at which KV reads equal the weights", f"{gpt2['batch_x_context']:,.0f}",
             f"{llama['batch_x_context']:,.0f}", format_ratio(ratios["batch_x_context"])),
        ])
    caption = (f"Bars to one scale, from formulas.step_bytes and formulas.llama_step_bytes on the two configs in the "
               f"record. Each of {llama_name(record)}'s {l_model['kv_heads']} key/value heads serves "
               f"{llama['queries_per_kv_head']} of its {l_model['heads']} query heads, so its cache holds "
               f"{format_ratio(llama['kv_head_share'])} the keys and values that one key/value head per query head "
               f"would. The right column divides each total by the fastest read bandwidth measured at "
               f"{threads_text(section['threads'][0])}.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)], tables=[table])


def trained_view(record: dict[str, Any]) -> Block:
    """Per thread count and context: every mode's step and its ratio to the floor, the fastest in bold."""
    section = record["llama"]
    cells, groups = llama_cells(record), llama_groups(record)
    modes = list(LLAMA_LADDER)
    rows = []
    for (threads, context), group in groups.items():
        shown = [cells[(threads, context, mode)] for mode in modes]
        fastest = min(shown, key=lambda cell: cell["median_ns_per_step"])["mode"]
        rows.append((threads, f"{context:,}", format_ms(group["floor_ns_per_step"]),
                     *[Strong(f"{format_ms(c['median_ns_per_step'])} ({format_ratio(c['step_over_floor'])})")
                       if c["mode"] == fastest else
                       f"{format_ms(c['median_ns_per_step'])} ({format_ratio(c['step_over_floor'])})" for c in shown],
                     format_ratio(group["best_over_transformers"])))
    table = Table(headings=["Threads", "Context", "Memory floor (ms)", *[f"{mode} (ms, ÷ floor)" for mode in modes],
                            f"best of ours ÷ {LLAMA_BASELINE}"], rows=rows,
                  caption=f"{llama_name(record)}, batch {section['batch']}, {section['dtype']}")
    checks = section["equivalence"]
    tolerance = section["tolerance"]
    agree = all(entry["argmax_agrees_every_step"] for entry in checks)
    fast = [check for entry in checks for check in entry["fast"].values()]
    notes = [
        f"Median milliseconds per decode step over {section['repeats']} timed steps per mode, after {section['warmup']} "
        f"untimed, the modes in rotating order; the fastest is in bold. Cache: {section['cache_contents']}. "
        f"{LLAMA_BASELINE} is {section['reference']}.",
        f"Before any timing, one step of each at every context was checked: {OURS} gave transformers' logits "
        f"within atol = {tolerance['atol']:g}, rtol = {tolerance['rtol']:g}, and each fast mode {OURS}'s within "
        f"atol = {section['fast_tolerance']['atol']:g}, rtol = {section['fast_tolerance']['rtol']:g} (its dot "
        "products sum in another order); the "
        f"largest differences were {format_sci(max(entry['max_abs_diff'] for entry in checks))} and "
        f"{format_sci(max(check['max_abs_diff'] for check in fast))} on logits up to "
        f"{max(entry['max_abs_reference'] for entry in checks):.1f}, and the most likely next token "
        + ("agreed at every context." if agree else "differed at some context."),
        f"Loading the pair, the kernel table, the compile, the checks and these timed steps took "
        f"{section['wall_time_s']:.0f} s of the whole run's {record['wall_time_s']:.0f} s.",
    ]
    return Block(tables=[table], notes=notes)


def trained_ladder_view(record: dict[str, Any]) -> Block:
    """The ladder at the first thread count: each rung, what it changes, its step over its floor per context;
    and the kernel table the fast rungs chose their kernels from."""
    section = record["llama"]
    threads, contexts = section["threads"][0], section["contexts"]
    cells = llama_cells(record)
    ladder = Table(headings=["Mode", "What it changes", *[f"÷ floor at {c:,}" for c in contexts]],
                   rows=[(mode, what, *[format_ratio(cells[(threads, c, mode)]["step_over_floor"]) for c in contexts])
                         for mode, what in LLAMA_LADDER.items()],
                   caption=f"{llama_name(record)}, batch 1, {threads_text(threads)}: each mode's median step over the "
                           "floor its bytes set")
    kernels = section["kernels"]
    names = list(kernels["descriptions"])
    table = Table(headings=["Matrix kind", "Shape (out × in)", *[f"{name} (ms)" for name in names], "Chosen"],
                  rows=[(row["kind"], f"{row['shape_out_in'][0]:,} × {row['shape_out_in'][1]:,}",
                         *[format_ms(row["kernels"][name]["ns"]) if name in row["kernels"] else "–"
                           for name in names], kernels["chosen"][row["kind"]]) for row in kernels["rows"]],
                  caption=f"One product per matrix, best of {kernels['passes']} passes over every matrix of the kind, "
                          f"{threads_text(kernels['threads'])}")
    notes = [f"{name}: {text}." for name, text in kernels["descriptions"].items()]
    notes += [f"{name} does not run here: {why}." for name, why in kernels["unavailable"].items()]
    notes.append("First step of each fast mode (its kernels' and, compiled, its regions' compile): " + join(
        [f"{mode} {seconds:.1f} s" for mode, seconds in kernels["warm_s"].items()]) + ".")
    return Block(tables=[ladder, table], notes=notes)


def contexts_text(contexts: list[int]) -> str:
    return ("context " if len(contexts) == 1 else "contexts ") + join([f"{c:,}" for c in contexts])


def target_sentences(record: dict[str, Any]) -> list[str]:
    """Whether the best float32 step meets each target at every context of the first thread count, said plainly."""
    section = record["llama"]
    threads = section["threads"][0]
    groups = [llama_groups(record)[(threads, c)] for c in section["contexts"]]
    floor, transformers = LLAMA_TARGETS["best_over_floor"], LLAMA_TARGETS["best_over_transformers"]
    over_floor = [g["best_over_floor"] for g in groups]
    over_theirs = [g["best_over_transformers"] for g in groups]
    missed_floor = [g["context"] for g in groups if g["best_over_floor"] > floor]
    missed_theirs = [g["context"] for g in groups if g["best_over_transformers"] > transformers]
    best = join(sorted({g["best_float32_mode"] for g in groups}))
    return [
        f"The fastest of this project's modes ({best}) took {ratio_range(over_floor)} its floor: "
        + (f"within {format_ratio(floor)} at every context." if not missed_floor else
           f"above the {format_ratio(floor)} it aims for at {contexts_text(missed_floor)}."),
        f"Against transformers it took {ratio_range(over_theirs)} the step time: "
        + (f"at most {format_ratio(transformers)} at every context." if not missed_theirs else
           f"above the {format_ratio(transformers)} it aims for at {contexts_text(missed_theirs)}."),
    ]


def trained_verdict_view(record: dict[str, Any]) -> Block:
    """How close each path came to its floor, and ours against transformers, at the first thread count."""
    section = record["llama"]
    threads = section["threads"][0]
    cells, groups = llama_cells(record), llama_groups(record)
    contexts = section["contexts"]
    ours = [cells[(threads, c, OURS)] for c in contexts]
    theirs = [cells[(threads, c, LLAMA_BASELINE)] for c in contexts]
    ratios = [groups[(threads, c)]["ours_over_transformers"] for c in contexts]
    verdict = ("faster than" if max(ratios) < 1 else "slower than" if min(ratios) > 1 else "level with")
    regimes = join(sorted({REGIMES[cell["regime"]] for cell in ours}))
    text = (f"At {threads_text(threads)}, over contexts {contexts[0]:,} to {contexts[-1]:,}, this decoder's step took "
            f"{ratio_range([c['step_over_floor'] for c in ours])} its floor ({regimes}) and transformers' "
            f"{ratio_range([c['step_over_floor'] for c in theirs])}; ours was {verdict} transformers, "
            f"{ratio_range(ratios)} its step time.")
    return answer(text, *target_sentences(record), layout_sentence(record))


def layout_sentence(record: dict[str, Any]) -> str:
    """Both Llama paths multiply (out, in) weights with F.linear: how that layout fared in this run's layout table."""
    rows = record["layout"]["rows"]
    slower = [row for row in rows if row["out_in_ns"] > row["in_out_ns"]]
    head = next(row for row in rows if row["kind"] == "output head")
    verdict = (f"the slower one for {len(slower)} of {len(rows)} kinds of GPT-2 matrix at batch 1" if slower
               else "the faster one for every kind of GPT-2 matrix at batch 1")
    return (f"Both Llama paths keep every weight (out, in), as transformers stores it, and multiply it with F.linear: "
            f"in this run's layout measurement above that layout was {verdict}; over the output head it took "
            f"{format_ratio(head['out_in_over_in_out'])} the time of the (in, out) product.")


def trained_item(record: dict[str, Any]) -> str:
    """The key-results bullet: the trained model's fastest float32 step against its floor and transformers'."""
    section = record["llama"]
    threads = section["threads"][0]
    groups = [llama_groups(record)[(threads, c)] for c in section["contexts"]]
    contexts = section["contexts"]
    ratios = [g["best_over_transformers"] for g in groups]
    verdict = ("faster than" if max(ratios) < 1 else "slower than" if min(ratios) > 1 else "level with")
    named = f"The trained {llama_name(record)}" if section["weights"]["trained"] else f"A {llama_name(record)}"
    return (f"{named}: at batch 1 on {threads_text(threads)} this project's fastest Llama step "
            f"({join(sorted({g['best_float32_mode'] for g in groups}))}) took "
            f"{ratio_range([g['best_over_floor'] for g in groups])} its floor over contexts {contexts[0]:,} to "
            f"{contexts[-1]:,}, {verdict} transformers' Llama on the same weights ({ratio_range(ratios)} its step "
            f"time), after every mode matched the reference logits at every context.")
