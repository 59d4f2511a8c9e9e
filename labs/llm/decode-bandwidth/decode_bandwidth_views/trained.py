"""The trained model beside the grid: SmolLM2-135M on this project's Llama decoder and on transformers' Llama.

What changes from GPT-2 small is drawn from the two configs (formulas.contrast, stored as llama.contrast);
how close each path came to its floor, and ours against transformers, from the Llama section's cells."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import LLAMA_LADDER, REGIMES
from decode_bandwidth.grid import headline_key
from decode_bandwidth.llama_modes import LLAMA_BASELINE, LLAMA_INT8, LLAMA_NATIVE, LLAMA_SERVED
from llm_models.llama.kinds import ONE_CALL
from site_hooks.blocks import Block, Strong, Table, answer
from site_hooks.diagrams import Canvas, Diagram, legend
from site_hooks.formatting import format_bytes, format_ms, format_percent, format_ratio, format_sci, join

from .common import against, ratio_range, threads_text
from .pictures import headline_groups, stacked_bar

OURS = "ours-prealloc"
NATIVE_FLOAT = next(mode for mode, weights in LLAMA_NATIVE.items() if weights == "float32")  # the one-call step
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
    """Two bars to one scale, the two models' bytes at batch 1 and the longest context."""
    section = record["llama"]
    context = section["contexts"][-1]
    rows = bars(record)
    canvas = bars_canvas(rows, f"One batch-1 step at context {context:,}, float32: two models' bytes",
                         "; ".join(f"{name}: {format_bytes(p['layer_bytes'])} of layer weights, "
                                   f"{format_bytes(p['head_bytes'])} of head, {format_bytes(p['step_kv_bytes'])} of KV "
                                   "cache" for name, p, _ in rows))
    llama, l_model = section["contrast"]["llama"], section["model"]
    caption = (f"Bars to one scale, from step_bytes and llama_step_bytes on the two configs in the "
               f"record. Each of {llama_name(record)}'s {l_model['kv_heads']} key/value heads serves "
               f"{llama['queries_per_kv_head']} of its {l_model['heads']} query heads, so its cache holds "
               f"{format_ratio(llama['kv_head_share'])} the keys and values that one key/value head per query head "
               f"would. The right column divides each total by the read bandwidth measured beside that model's "
               f"steps at {threads_text(section['threads'][0])}, its floor.")
    return Block(diagrams=[Diagram(canvas.svg(), caption)])


def trained_contrast_view(record: dict[str, Any]) -> Block:
    """What differs between the two models per step, field by field (llama.contrast)."""
    section = record["llama"]
    gpt2, llama, ratios = section["contrast"]["gpt2"], section["contrast"]["llama"], section["contrast"]["ratios"]
    g_model, l_model = record["config"]["model"], section["model"]
    return Block(tables=[Table(
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
        ])])


def trained_view(record: dict[str, Any]) -> Block:
    """Per thread count and context: every mode's step and its ratio to the floor, the fastest in bold."""
    section = record["llama"]
    cells, groups = llama_cells(record), llama_groups(record)
    modes = [*LLAMA_LADDER, LLAMA_SERVED]  # the server's step last: it is set beside the ladder, not on it
    rows = []
    for (threads, context), group in groups.items():
        shown = [cells[(threads, context, mode)] for mode in modes]
        fastest = min(shown[:-1], key=lambda cell: cell["median_ns_per_step"])["mode"]
        rows.append((threads, f"{context:,}", format_ms(group["floor_ns_per_step"]),
                     format_ms(group["int8_floor_ns_per_step"]),
                     *[Strong(f"{format_ms(c['median_ns_per_step'])} ({format_ratio(c['step_over_floor'])})")
                       if c["mode"] == fastest else
                       f"{format_ms(c['median_ns_per_step'])} ({format_ratio(c['step_over_floor'])})" for c in shown],
                     format_ratio(group["best_over_transformers"])))
    table = Table(headings=["Threads", "Context", "float32 floor (ms)", "int8 floor (ms)",
                            *[f"{mode} (ms, ÷ its floor)" for mode in modes], f"best float32 of ours ÷ {LLAMA_BASELINE}"],
                  rows=rows, caption=f"{llama_name(record)}, batch {section['batch']}, {section['dtype']} activations; "
                                     f"{LLAMA_INT8} reads int8 weights, every other mode float32; {LLAMA_SERVED} is "
                                     "the server's step over a paged cache")
    checks = section["equivalence"]
    tolerance = section["tolerance"]
    agree = all(entry["argmax_agrees_every_step"] for entry in checks)
    fast = [check for entry in checks for check in entry["fast"].values()]
    notes = [
        f"Median milliseconds per decode step over {section['repeats']} timed steps per mode, after {section['warmup']} "
        f"untimed, the modes in rotating order; the fastest of this lab's own is in bold. Cache: {section['cache_contents']}. "
        f"{LLAMA_BASELINE} is {section['reference']}.",
        f"Before any timing, one step of each at every context was checked: {OURS} gave transformers' logits "
        f"within atol = {tolerance['atol']:g}, rtol = {tolerance['rtol']:g}, and each fast mode and {LLAMA_SERVED} {OURS}'s within "
        f"atol = {section['fast_tolerance']['atol']:g}, rtol = {section['fast_tolerance']['rtol']:g} (its dot "
        f"products sum in another order; {LLAMA_INT8} against {section['int8_reference']}, the float model its codes "
        "stand for); the "
        f"largest differences were {format_sci(max(entry['max_abs_diff'] for entry in checks))} and "
        f"{format_sci(max(check['max_abs_diff'] for check in fast))} on logits up to "
        f"{max(entry['max_abs_reference'] for entry in checks):.1f}, and the most likely next token "
        + ("agreed at every context." if agree else "differed at some context."),
        f"Loading the pair, the kernel table, the compile, the checks and these timed steps took "
        f"{section['wall_time_s']:.0f} s of the whole run's {record['wall_time_s']:.0f} s.",
    ]
    return Block(tables=[table], notes=notes)


def removed(group: dict[str, Any], mode: str) -> str:
    """What a rung took off the step of the rung before it, in ms, or that the run cannot tell (the two cells'
    repetitions overlap); '–' for the first rung."""
    if mode not in group["rung_removed_ns"]:
        return "–"
    if not group["rung_parted"][mode]:
        return "within noise"
    ns = group["rung_removed_ns"][mode]
    return f"{format_ms(ns)} ms" if ns > 0 else f"added {format_ms(-ns)} ms"


def trained_ladder_view(record: dict[str, Any]) -> Block:
    """The ladder at the first thread count: each rung, what it changes, its step over its floor per context."""
    section = record["llama"]
    threads, contexts = section["threads"][0], section["contexts"]
    cells = llama_cells(record)
    last = llama_groups(record)[(threads, contexts[-1])]
    ladder = Table(headings=["Mode", "What it changes", *[f"÷ floor at {c:,}" for c in contexts],
                             f"Time it removed at {contexts[-1]:,}"],
                   rows=[(mode, what, *[format_ratio(cells[(threads, c, mode)]["step_over_floor"]) for c in contexts],
                          removed(last, mode)) for mode, what in LLAMA_LADDER.items()],
                   caption=f"{llama_name(record)}, batch 1, {threads_text(threads)}: each mode's median step over the "
                           "floor its bytes set")
    return Block(tables=[ladder])


def trained_kernels_view(record: dict[str, Any]) -> Block:
    """The kernel table the fast rungs chose their kernels from, per weight format and for compiled layers."""
    section = record["llama"]
    kernels = section["kernels"]
    names, formats = list(kernels["descriptions"]), list(kernels["chosen"])
    table = Table(headings=["Matrix kind", "Shape (out × in)",
                            *[f"{name}, {kernels['formats'][name]} (ms)" for name in names],
                            *[f"Chosen, {weights}" for weights in formats]],
                  rows=[(row["kind"], f"{row['shape_out_in'][0]:,} × {row['shape_out_in'][1]:,}",
                         *[format_ms(row["kernels"][name]["ns"]) if name in row["kernels"] else "–"
                           for name in names], *[kernels["chosen"][weights][row["kind"]] for weights in formats])
                        for row in kernels["rows"]],
                  caption=f"One product per matrix, best of {kernels['passes']} passes over every matrix of the kind, "
                          f"{threads_text(kernels['threads'])}")
    notes = [f"{name}: {text}." for name, text in kernels["descriptions"].items()]
    notes += [f"{name} does not run here: {why}." for name, why in kernels["unavailable"].items()]
    if "int8-c" in kernels["descriptions"]:
        # a cold-cache run builds them afresh; another may load them from the build cache (llm_models.native)
        how = "compiled and loaded" if record["compiled"]["cold_cache"] else "compiled, or loaded from the build cache,"
        notes.append(f"The C loops (the int8 product, the attention and the one-call step) were {how} "
                     f"in {kernels['native_build_s']:.2f} s.")
    if "int8" in kernels["chosen"]:
        notes.append("No timed mode takes the “Chosen, int8” column: ours-int8 is the one-call step, whose own loop "
                     "widens each code as it streams; the column sets torch's int8 product beside the C loop per kind.")
    eager = [name for name, traced in kernels["traceable"].items() if not traced]
    if eager:
        notes.append(f"{join(eager)} run in eager steps only, so the compiled mode chooses among the others "
                     "(the “-compiled” column).")
    notes.append("First step of each fast mode (its kernels' and, compiled, its regions' compile; for the one-call "
                 "steps, packing their weights too): " + join(
        [f"{mode} {seconds:.1f} s" for mode, seconds in kernels["warm_s"].items()]) + ".")
    return Block(tables=[table], notes=notes)


def attention_sentence(record: dict[str, Any]) -> str:
    """What this run's attention table says, worded by whether the two ways' passes parted at every context."""
    table = record["llama"]["attention"]
    rows = table["rows"]
    if table["chosen"] == "products" and "c" not in rows[0]["durations_ns"]:
        return ("Only the two products ran here (" + join([f"{way}: {why}" for way, why in table["unavailable"].items()])
                + "), so every fast mode attends through them.")
    ratios = ratio_range([row["c_over_products"] for row in rows])
    parted = [row["context"] for row in rows if row["parted"]]
    if len(parted) == len(rows):
        faster = "c" if rows[0]["c_over_products"] < 1 else "products"
        verdict = (f"{'the C loop was' if faster == 'c' else 'the two products were'} faster at every context, "
                   "every pass beating every pass of the other way")
    elif parted:
        verdict = (f"the two ways' passes parted only at {contexts_text(parted)}; elsewhere they overlapped, a "
                   "difference within this run's noise")
    else:
        verdict = "at no context did the two ways' passes part: the difference is within this run's noise"
    return (f"The C loop took {ratios} the products' time per layer: {verdict}. The fused modes attend through "
            f"{'the C loop' if table['chosen'] == 'c' else 'the two products'}, the faster in sum; the one-call steps "
            "always run the C loop's per-head code.")


def trained_attention_view(record: dict[str, Any]) -> Block:
    """Both ways of attending over the cache, per context: time per layer and the read rate it implies."""
    section = record["llama"]
    table = section["attention"]
    ways = list(table["rows"][0]["durations_ns"])
    rows = []
    for row in table["rows"]:
        cells = [f"{row['median_ns_per_layer'][way] / 1e3:.1f} µs ({row['bytes_per_ns'][way]:.1f} GB/s)"
                 for way in ways]
        rows.append((f"{row['context']:,}", format_bytes(row["bytes_per_layer"]), *cells,
                     format_ratio(row["c_over_products"]) if "c_over_products" in row else "–"))
    supplied = "" if table["timings"] == "timed" else "; timings supplied by the caller, not measured"
    return Block(
        paragraphs=[attention_sentence(record)],
        tables=[Table(headings=["Context", "Keys and values per layer", *[f"{way} (per layer)" for way in ways],
                                "c ÷ products"], rows=rows,
                      caption=f"One token's attention over one random cache per layer ({table['layers']} layers), "
                              f"median of {table['passes']} passes, the ways alternating{supplied}")],
        notes=[f"Before timing, the two outputs agreed at every context within atol {table['atol']:g} (largest "
               f"difference {max(row['max_abs_diff'] for row in table['rows']):.1e}).",
               "products: q (Hkv, G, D) times the transposed keys, a masked softmax, the weights times the values, "
               "through torch's BLAS; c: attend_rows.c, one pass over the stored key rows, a softmax, one pass over "
               "the value rows, each row read once for the G query heads it serves."])


def contexts_text(contexts: list[int]) -> str:
    return ("context " if len(contexts) == 1 else "contexts ") + join([f"{c:,}" for c in contexts])


def ladder_sentences(record: dict[str, Any]) -> list[str]:
    """The fastest float32 step against its floor and against transformers at every context of the first thread
    count, and the int8 step against that step, said as measured."""
    section = record["llama"]
    threads = section["threads"][0]
    groups = [llama_groups(record)[(threads, c)] for c in section["contexts"]]
    best = join(sorted({g["best_float32_mode"] for g in groups}))
    floor, theirs, int8 = (ratio_range([g[field] for g in groups]) for field in (
        "best_over_floor", "best_over_transformers", "int8_over_best_float32"))
    int8_floor = ratio_range([g["int8_floor_over_float32_floor"] for g in groups])
    own = ratio_range([g["int8_over_floor"] for g in groups])
    return [f"The fastest of this project's float32 modes ({best}) took {floor} its floor and {theirs} "
            "transformers' step time.",
            f"{LLAMA_INT8} took {int8} the time of that float32 step and {own} its own floor, where that floor is "
            f"{int8_floor} the float32 one."]


def threads_sentence(record: dict[str, Any]) -> str | None:
    """Whether each mode got faster with the second thread count at every context, against what the floor allows."""
    section = record["llama"]
    if len(section["threads"]) < 2:
        return None
    first, second = section["threads"][:2]
    cells, contexts = llama_cells(record), section["contexts"]
    floors = [cells[(second, c, OURS)]["floor_over_first_threads"] for c in contexts]
    ratios = {mode: [cells[(second, c, mode)]["over_first_threads"] for c in contexts] for mode in LLAMA_LADDER}
    faster = [mode for mode, values in ratios.items() if max(values) < 1]
    held = [mode for mode in ratios if mode not in faster]
    parts = [f"With {threads_text(second)} the float32 floor fell to {ratio_range(floors)} its value at {threads_text(first)}, the "
             "most a byte-bound step could gain"]
    if faster:
        parts.append(f"{join(faster)} got faster at every context (" + ", ".join(
            f"{mode} {ratio_range(ratios[mode])}" for mode in faster) + " of the one-thread step)")
    if held:
        distance = [cells[(first, c, mode)]["step_over_floor"] for mode in held for c in contexts]
        parts.append(f"{join(held)} did not at every context (" + "; ".join(
            f"{mode} {ratio_range(ratios[mode])}" for mode in held) + f"): at one thread they ran "
            f"{ratio_range(distance)} their floors, so bandwidth was not what held them")
    return "; ".join(parts) + "."


def trained_verdict_view(record: dict[str, Any]) -> Block:
    """How close each path came to its floor, and ours against transformers, at the first thread count."""
    section = record["llama"]
    threads = section["threads"][0]
    cells, groups = llama_cells(record), llama_groups(record)
    contexts = section["contexts"]
    ours = [cells[(threads, c, OURS)] for c in contexts]
    theirs = [cells[(threads, c, LLAMA_BASELINE)] for c in contexts]
    ratios = [groups[(threads, c)]["ours_over_transformers"] for c in contexts]
    verdict = against(ratios, [groups[(threads, c)]["sides"]["ours_over_transformers"] for c in contexts], contexts,
                      "transformers")
    regimes = join(sorted({REGIMES[cell["regime"]] for cell in ours}))
    text = (f"At {threads_text(threads)}, over contexts {contexts[0]:,} to {contexts[-1]:,}, this decoder's step took "
            f"{ratio_range([c['step_over_floor'] for c in ours])} its floor ({regimes}) and transformers' "
            f"{ratio_range([c['step_over_floor'] for c in theirs])}; ours was {verdict} in its step time.")
    second = threads_sentence(record)
    return answer(text, *ladder_sentences(record), *([second] if second else []))


def departure_sentence(quality: dict[str, Any]) -> str:
    """Where the int8 model's greedy answer first leaves the float32 one's, or that it never does."""
    greedy, first = quality["greedy"], quality["figures"]["first_departure"]
    asked = (f"the prompt “{quality['prompt']}”" if quality["prompt"] else
             f"a prompt of {greedy['prompt_tokens']} random tokens")
    lengths = {len(ids) for ids in greedy["ids"].values()}
    if first is None:
        return (f"Answering {asked} greedily, the two models chose the same {max(lengths)} tokens: no departure "
                "within the answer.")
    return (f"Answering {asked} greedily, the two models chose the same first {first} of {greedy['new_tokens']} "
            "tokens, then parted.")


def trained_quality_view(record: dict[str, Any]) -> Block:
    """What the int8 codes cost in prediction: perplexity, KL and top-1 agreement against float32, the departure."""
    section = record["llama"]
    quality = section["quality"]
    figures = quality["figures"]
    table = Table(headings=["Weights", "Perplexity", "Mean KL from float32 (nats)", "Top-1 agreement with float32"],
                  rows=[(name, f"{figures[name]['perplexity']:.3f}", format_sci(figures[name]["kl_mean"]),
                         format_percent(figures[name]["top1_agreement"])) for name in ("float32", "int8")],
                  caption=f"{llama_name(record)} over the first {quality['positions']:,} positions of {quality['text']}")
    return Block(tables=[table], notes=[departure_sentence(quality)])


def trained_answers_view(record: dict[str, Any]) -> Block:
    """The two greedy answers the departure point is read from, as the tokenizer decodes them."""
    quality = record["llama"]["quality"]
    answers = quality["answers"]
    if answers["float32"] is None:  # a random model has no tokenizer: its answers are token ids only
        return answer(f"{llama_name(record)} has no tokenizer; its answers are the token ids in the record.")
    section = record["llama"]
    return Block(tables=[Table(headings=["Weights", "Greedy answer"],
                               rows=[(name, answers[name]) for name in ("float32", "int8")],
                               caption=f"“{quality['prompt']}”, {quality['greedy']['new_tokens']} new tokens at most")],
                 notes=[f"The scores above compare each position's next-token distribution of the int8 round trip "
                        f"({section['int8_reference']}, which {LLAMA_INT8}'s step equals within the tolerance of "
                        f"the timed checks) with float32's, both decoders reading the text {quality['chunk']} tokens "
                        f"per call; {quality['seconds']:.0f} s untimed, {threads_text(quality['threads'])}."])


def trained_item(record: dict[str, Any]) -> str:
    """The key-results bullet: the trained model's fastest float32 step against its floor and transformers'."""
    section = record["llama"]
    threads = section["threads"][0]
    groups = [llama_groups(record)[(threads, c)] for c in section["contexts"]]
    contexts = section["contexts"]
    ratios = [g["best_over_transformers"] for g in groups]
    verdict = against(ratios, [g["sides"]["best_over_transformers"] for g in groups], contexts,
                      "transformers' Llama on the same weights")
    named = f"The trained {llama_name(record)}" if section["weights"]["trained"] else f"A {llama_name(record)}"
    return (f"{named}: at batch 1 on {threads_text(threads)} this project's fastest Llama step "
            f"({join(sorted({g['best_float32_mode'] for g in groups}))}) took "
            f"{ratio_range([g['best_over_floor'] for g in groups])} its floor over contexts {contexts[0]:,} to "
            f"{contexts[-1]:,}, {verdict} in step "
            f"time, after every mode matched its reference logits at every context; over int8 weights "
            f"{ratio_range([g['int8_over_best_float32'] for g in groups])} the best float32 step, with a mean KL of "
            f"{format_sci(section['quality']['figures']['int8']['kl_mean'])} nats from float32.")


# The comparisons the paired rounds give, in the order the page draws them: (figure, column heading).
PAIRED = (("best_over_floor", "best float32 ÷ its floor"), ("best_over_transformers", f"best float32 ÷ {LLAMA_BASELINE}"),
          ("ours_over_transformers", f"{OURS} ÷ {LLAMA_BASELINE}"), ("int8_over_floor", f"{LLAMA_INT8} ÷ its int8 floor"),
          ("int8_over_best_float32", f"{LLAMA_INT8} ÷ best float32"), ("served_over_best", "served ÷ best float32"))


def paired_text(ratio: dict[str, Any]) -> str:
    """'0.81× (0.79–0.83)': a paired ratio's median with its rounds' middle half."""
    return f"{format_ratio(ratio['median'])} ({ratio['low']:.2f}–{ratio['high']:.2f})"


def trained_paired_view(record: dict[str, Any]) -> Block:
    """Every comparison of the trained model's steps as timed: the median of its per-round ratios and their middle
    half, per thread count and context, and how far the floor's read moved across each group's rounds."""
    section = record["llama"]
    groups = llama_groups(record)
    rows = [(f"{threads}", f"{context:,}", *(paired_text(group["paired"][name]) for name, _ in PAIRED),
             format_percent(group["round_floor"]["drift"]))
            for (threads, context), group in groups.items()]
    table = Table(headings=["Threads", "Context", *(heading for _, heading in PAIRED), "floor's drift over the rounds"],
                  rows=rows, caption=f"{llama_name(record)}: per group, the median of {section['repeats']} "
                                     "per-round ratios, with their lower and upper quartiles")
    return Block(paragraphs=[
        f"Each group ran {section['repeats']} rounds. A round reads the memory floor once (the fastest of the "
        "read kernels, as the group's own pass found it) and then takes one step of every mode, in an order that "
        "rotates from round to round. A ratio is taken within a round, where whatever the machine was doing at "
        "that moment slowed both of its sides, and the page quotes the median of those ratios. It calls one step "
        "faster than another only where their middle half lies wholly on one side of 1; absolute times in the "
        "tables are this run's.", remeasure_sentence(record), *filter(None, [below_floor_sentence(groups)])],
        tables=[table])


def remeasure_sentence(record: dict[str, Any]) -> str:
    """Which groups were measured again because their floor reads ran slowed (llama_modes.most_slowed), how far
    each attempt's reads lay under the fastest at its thread count, and which attempt the tables read; or, where
    none was, how far the most slowed group's reads lay."""
    section, groups = record["llama"], llama_groups(record)
    rule = section["remeasure"]
    threshold = format_percent(rule["slowed"])
    again = {key: group for key, group in groups.items() if group["set_aside"]}
    if not again:
        (threads, context), worst = max(groups.items(), key=lambda item: item[1]["floor_slowdown"])
        return (f"A group whose floor reads ran more than {threshold} under the fastest read at its thread count is "
                f"measured again: most likely something else was using the memory then, and a pure read suffers more "
                f"from that than a step does. None did here: the furthest under was {threads_text(threads)} at context "
                f"{context:,}, at {format_percent(max(worst['floor_slowdown'], 0.0))}.")
    where = join([f"{threads_text(threads)} at context {context:,} ("
                  + ", then ".join(format_percent(attempt["floor_slowdown"]) for attempt in group["set_aside"])
                  + f" under; kept: {format_percent(group['floor_slowdown'])})"
                  for (threads, context), group in again.items()])
    still = [key for key, group in again.items() if group["floor_slowdown"] > rule["slowed"]]
    return (f"A group whose floor reads ran more than {threshold} under the fastest read at its thread count was "
            f"measured again, up to {rule['limit']} times in the run: most likely something else was using the "
            f"memory then, and a pure read suffers more from that than a step does. That happened for {where}. The tables read "
            "the attempt whose reads ran fastest; the record keeps every attempt."
            + (f" {len(still)} of them stayed above {threshold} after every attempt, so treat their ratios as "
               "this machine's noise." if still else ""))


def below_floor_sentence(groups: dict[tuple[int, int], dict[str, Any]]) -> str | None:
    """Where a group's best step came out below its floor (which no step can be), why: the floor's reads in those
    rounds were slowed, so they price the machine's neighbours there, not the step."""
    below = [(threads, context, group) for (threads, context), group in groups.items()
             if group["paired"]["best_over_floor"]["median"] < 1]
    if not below:
        return None
    where = join([f"{threads_text(threads)} at context {context:,} ({paired_text(group['paired']['best_over_floor'])}"
                  f", the floor's reads {format_percent(group['round_floor']['drift'])} apart over its rounds)"
                  for threads, context, group in below])
    return (f"On {where} the best step came out below its floor, which no step can be: the floor's reads in those "
            "rounds ran slower than the step's own bytes did, something else on the machine was using the memory "
            "then, and those ratios price that, not the step."
            + (" The other groups' rounds did not see it." if len(below) < len(groups) else ""))


def trained_served_view(record: dict[str, Any]) -> Block:
    """The server's step for one request beside this lab's best float32 step, per thread count: the paired ratio's
    direction named only where its rounds' middle half lies wholly on one side of 1 (common.against)."""
    section = record["llama"]
    groups = llama_groups(record)
    contexts = section["contexts"]
    parts = []
    for threads in section["threads"]:
        mine = [groups[(threads, context)] for context in contexts]
        verdict = against([g["served_over_best"] for g in mine], [g["sides"]["served_over_best"] for g in mine],
                          contexts, "this lab's best float32 step")
        parts.append(f"on {threads_text(threads)} it was {verdict}")
    if section["served_way"] == ONE_CALL:
        how = (f"The server runs this lab's one-call step ({NATIVE_FLOAT}'s C loop, here at batch 1), over a cache kept in "
               "fixed-size blocks of a shared pool that each request's block table lists, so the loop reads a "
               "request's keys and values where its blocks lie")
    else:
        how = ("The server ran the decoder's layer in torch, one operation at a time (the one-call step could not "
               "run in this run), over a cache kept in fixed-size blocks of a shared pool, each matrix multiplied by "
               "the kernel the serving engine's own table chose")
    return Block(paragraphs=[
        how + f". It took its place in every round above, after matching {OURS}'s logits within the same tolerance. "
        "Taken round by round, " + "; ".join(parts) + ". What a paged cache and a served step add over a contiguous "
        "one shows here as that ratio's distance from 1."])
