"""What a step must move, and the floor it sets: the machine's measured rates, the bytes per cell, the
crossover where KV reads overtake the weights, which floor is the higher, and what the floor leaves out."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.floors import READ_KERNELS
from decode_bandwidth.grid import headline_key
from llm_models.kv_bytes import BYTES_PER_ELEMENT
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_bytes, format_ms, format_number, format_ratio, join

from .common import gbs, threads_text

MIB = 2**20


def where_text(groups: list[dict[str, Any]]) -> str:
    """'batch 4 at contexts 512 and 1024, batch 16 at context 128'."""
    by_batch: dict[int, list[str]] = {}
    for g in groups:
        by_batch.setdefault(g["batch"], []).append(str(g["context"]))
    return join([f"batch {batch} at context{'s' if len(c) > 1 else ''} {join(c)}" for batch, c in by_batch.items()])


def machine_paragraphs(machine: dict[str, Any]) -> list[str]:
    llc = machine["last_level_cache_bytes"]
    best = "; ".join(f"at {threads_text(int(t))} the fastest was {e['best_kernel']}, {gbs(e['bytes_per_s'])}"
                     for t, e in machine["bandwidth"].items())
    return [
        (f"The last-level cache is {llc / MIB:g} MiB (read from {machine['last_level_cache_source']}), so the "
         if llc else f"The last-level cache size was {machine['last_level_cache_source']}, so the ")
        + f"bandwidth buffer was {machine['buffer_bytes'] / MIB:g} MiB, read by {len(READ_KERNELS)} kernels "
        f"(table below), each the best of its passes; the floor takes the fastest, {best}.",
        "Matrix arithmetic, best of a few square matmuls at each dtype's own width: "
        + "; ".join(f"{key.split('/')[0]} ({e['size']:,}-wide) at {threads_text(int(key.split('/')[1]))}, "
                    f"{e['flops_per_s'] / 1e9:.0f} GFLOP/s" for key, e in machine["matmul"].items()) + ".",
    ]


def floor_drift_view(record: dict[str, Any]) -> Block:
    """How the floor moved through the run, and which floor bounds the trained step: the page folds it away."""
    sized = step_sized_sentence(record)
    return Block(paragraphs=[beside_sentence(record["hardware"]), *([sized] if sized else []),
                             pages_sentence(record)])


def pages_sentence(record: dict[str, Any]) -> str:
    """Where the weights, caches and floor buffer sat: on 2 MiB pages or 4 KiB ones, as measured just before the
    trained model's steps were timed (figures.derivation.huge_page_figures); where they sit moved a step's time
    from one process to the next, which no pairing within a run can see."""
    pages = record["hardware"].get("huge_pages", {}).get("trained")
    if pages is None or pages["after"] is None:
        return ("Where this run's tensors sat, on 2 MiB pages or 4 KiB ones, was not measured. On 4 KiB pages a "
                "read walks far more page-table entries, and where a step's weights happen "
                "to land can move its time from one process to the next.")
    share = {moment: pages[f"share_{moment}"] for moment in ("before", "after")}
    if pages["unavailable"] is not None:
        moved = f" The kernel could not move more: {pages['unavailable']}."
    elif pages["refused"]:
        moved = (f" The kernel found no free 2 MiB run for {pages['refused']:,} of the {pages['asked']:,} huge pages "
                 f"it was asked for ({format_bytes(pages['refused_bytes'])}), even after compacting: those stayed on "
                 "4 KiB pages.")
    else:
        moved = ""
    return (f"Just before the trained model's steps were timed, the process asked the kernel to move its memory onto "
            f"2 MiB pages: {share['before']:.0%} of it sat there before and {share['after']:.0%} after "
            f"({format_bytes(pages['after']['huge_bytes'])} of {format_bytes(pages['after']['anonymous_bytes'])}).{moved} "
            "Each timed copy of the weights sits in one buffer of its own, and so does each of this lab's caches, "
            "every layer's keys and values (transformers' cache grows by concatenation and cannot): a 2 MiB page "
            "needs a whole aligned 2 MiB inside one allocation, so a matrix or a layer's cache smaller than that, "
            "allocated apart, would stay on 4 KiB pages. Pages "
            "matter because torch's request for huge pages is silently refused when memory is fragmented, and a "
            "read over 4 KiB pages walks far more page-table entries and runs slower: a floor read over fallen-back pages against weights "
            "that were not would shift every ratio on this page, which no pairing within one run can see.")


def beside_sentence(machine: dict[str, Any]) -> str:
    """How the floor read through the run wandered at each thread count (figures.derivation.floor_stability):
    stated, as what this machine did while it was measured, never a reason to refuse the run."""
    parts = [f"{gbs(e['beside']['lowest_bytes_per_s']).removesuffix(' GB/s')}–{gbs(e['beside']['highest_bytes_per_s'])} "
             f"at {threads_text(int(t))} (drift {e['beside']['drift']:.0%} over {e['beside']['groups']} reads, best "
             f"pass {format_ratio(e['beside']['median_over_best'])} the median)" for t, e in machine["bandwidth"].items()]
    faster = [t for t, e in machine["bandwidth"].items() if e["beside"]["highest_bytes_per_s"] > e["bytes_per_s"]]
    beat = (f" At {join([threads_text(int(t)) for t in faster])} one of these single reads beat the best of the passes "
            "before and after the timed steps, the rate the floor above is priced at: that floor allows a step a "
            "little more time than the fastest read this run saw would." if faster else "")
    return (f"Read again through the run, before each group of cells and at the start of every round of the "
            f"trained model's steps, the floor gave {join(parts)}.{beat} That is how much this machine's memory moved "
            "while it was measured. Each ratio to a floor divides a step by the floor read in its own group (and, for the "
            "trained model, its own round), so the drift moves both sides of it; absolute times are this run's.")


def kernels_table(machine: dict[str, Any]) -> Table:
    """Each read kernel's best rate at each thread count: the floor is the fastest of them."""
    threads = list(machine["bandwidth"])
    rows = [(name, how, *(gbs(machine["bandwidth"][t]["kernels"][name]["bytes_per_s"]) for t in threads))
            for name, how in READ_KERNELS.items()]
    return Table(headings=["Read kernel", "What it runs", *(f"{threads_text(int(t))}" for t in threads)], rows=rows,
                 caption="Read bandwidth of each kernel over the same buffer, best pass")


def floor_view(record: dict[str, Any]) -> Block:
    model, bench = record["config"]["model"], record["config"]["benchmark"]
    dtype, threads = headline_key(record)
    groups = [g for g in record["groups"] if (g["dtype"], g["threads"]) == (dtype, threads)]
    crossover = record["kv_crossover"]
    over = [g for g in groups if g["bytes"]["kv_read"] > g["bytes"]["weights"]]
    reached = (f"In this grid that happens at {where_text(over)}." if over else
               "No cell of this grid reaches it; the weights dominate every step.")
    crossing = (f"KV reads overtake weight reads at B × T = {crossover['weight_bytes']:,} / "
                f"{crossover['kv_bytes_per_position']:,} = {crossover['batch_x_context']:,.0f} positions "
                f"(weights ÷ KV bytes per position, batch 1). {reached}")
    table = Table(
        headings=["Batch", "Context", "Weights", "KV read", "KV written", "Embedding rows", "Total", "KV read ÷ weights",
                  "Memory floor (ms)", "Arithmetic floor (ms)"],
        rows=[(g["batch"], g["context"], *(format_number(g["bytes"][name]) for name in
                                           ("weights", "kv_read", "kv_written", "embedding_rows", "total")),
               format_ratio(g["kv_over_weights"]), format_ms(g["floor_ns_per_step"]),
               format_ms(g["compute_floor_ns_per_step"])) for g in groups])
    legend = (f"Bytes one decode step must move on {bench['device']} in {dtype} at {threads_text(threads)}, from the "
              f"model's configuration ({model['layers']} layers, width {model['width']}, {model['kv_heads']} key/value "
              f"heads of {model['head_dim']}, vocabulary {model['vocab_size']:,}): the memory floor is the total ÷ the "
              "read bandwidth measured beside its group; the arithmetic floor is the step's flops ÷ the measured matmul rate.")
    return Block(paragraphs=machine_paragraphs(record["hardware"]),
                 tables=[kernels_table(record["hardware"]), table],
                 notes=[legend, crossing, bound_sentence(groups), activations_sentence(record, groups)])


SIZED_VERDICTS = {  # labkit.summary.side_of_one of the step-sized read's rate over the large one's
    "above": "the read the size of the step ran faster, so the large buffer's floor may sit above what a step could "
             "reach here, and the step-sized read's rate is the safer bound",
    "within": "the two reads agree within their rounds' middle half, so the large buffer's floor bounds the step",
    "below": "the read the size of the step ran slower, so the large buffer's floor is the lower of the two and "
             "bounds the step",
}
CACHED = {True: "they fit in it, so part of a step's bytes can come from cache rather than memory",
          False: "no step can keep them there, so each step streams them from memory"}


def step_sized_sentence(record: dict[str, Any]) -> str | None:
    """Which floor bounds the trained step: whether its weights fit in the last-level cache, and its own bytes read
    against the large buffer in paired rounds, per thread count (figures.derivation.step_sized_figures)."""
    hardware = record["hardware"]
    sized = hardware.get("step_sized")
    if sized is None:
        return None
    llc, weights = hardware["last_level_cache_bytes"], sized["weight_bytes"]
    fit = ("" if llc is None else
           f", {'within' if sized['weights_fit_in_cache'] else 'larger than'} the {format_bytes(llc)} last-level "
           f"cache: {CACHED[sized['weights_fit_in_cache']]}")
    parts = [f"at {threads_text(int(t))} the step-sized read ran {format_ratio(e['step_over_large']['median'])} the "
             f"large one's rate (middle half {e['step_over_large']['low']:.2f}–{e['step_over_large']['high']:.2f}; "
             f"medians {gbs(e['step_bytes_per_s'])} and {gbs(e['large_bytes_per_s'])}): {SIZED_VERDICTS[e['side']]}"
             for t, e in sized["threads"].items()]
    return (f"Does this floor bound the trained model's step? Its float32 weights are {format_bytes(weights)}{fit}. "
            f"Read in alternating rounds over a buffer of the step's own {format_bytes(sized['step_bytes'])} and over "
            f"the {format_bytes(hardware['buffer_bytes'])} one, each round's fastest kernels compared: "
            + "; ".join(parts) + ".")


def bound_sentence(groups: list[dict[str, Any]]) -> str:
    """Where the arithmetic floor, not the memory floor, is the higher of the two lower bounds."""
    compute = [g for g in groups if g["compute_floor_ns_per_step"] > g["floor_ns_per_step"]]
    if not compute:
        return ("The memory floor is above the arithmetic floor in every cell of this grid: by these two lower "
                "bounds, every step here is bound by the bytes it moves, not by its flops.")
    compute_batches = {g["batch"] for g in compute}
    memory_bound = sorted({g["batch"] for g in groups if g["batch"] not in compute_batches})
    return (f"The arithmetic floor is the higher of the two at {where_text(compute)}: there the step's flops, not its "
            "bytes, set the lower bound, and a step's ratio to the memory floor overstates how far it is from what "
            "the machine allows. "
            + (f"At batch {join([str(b) for b in memory_bound])} the memory floor is the higher in every cell."
               if memory_bound else ""))


def activations_sentence(record: dict[str, Any], groups: list[dict[str, Any]]) -> str:
    """What the floor leaves out, sized from the config at the grid's largest batch and context (activations)."""
    model, activations = record["config"]["model"], record["activations"]
    batch, context = max(g["batch"] for g in groups), max(g["context"] for g in groups)
    size = BYTES_PER_ELEMENT[groups[0]["dtype"]]
    sizes = {  # name: (factors, its entry in activations)
        "the logits": (f"{batch} × {model['vocab_size']:,} × {size}", activations["logits"]),
        f"one layer's attention scores at context {context}, where a kernel materialises them":
            (f"{batch} × {model['heads']} × {context:,} × {size}", activations["attention_scores"]),
        "one layer's MLP hidden vector": (f"{batch} × {model['ffn_width']:,} × {size}", activations["mlp_hidden"]),
    }
    ordered = sorted(sizes.items(), key=lambda item: -item[1][1]["bytes"])
    weights = groups[0]["bytes"]["weights"]
    (name, (factors, largest)), rest = ordered[0], ordered[1:]
    return (f"Activations are not counted. At batch {batch} the largest is {name}, {factors} = {largest['bytes']:,} "
            f"bytes, {largest['share_of_weights']:.1%} of the {weights:,} weight bytes; then "
            + join([f"{other} ({value['bytes']:,} bytes)" for other, (_, value) in rest]) + ".")
