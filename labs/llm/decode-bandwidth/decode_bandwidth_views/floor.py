"""What a step must move, and the floor it sets: the machine's measured rates, the bytes per cell, the
crossover where KV reads overtake the weights, which floor is the higher, and what the floor leaves out."""

from __future__ import annotations

from typing import Any

from decode_bandwidth.figures.formulas import (
    BYTES_PER_ELEMENT,
    FLOOR_DRIFT_LIMIT,
    FLOOR_MEDIAN_OVER_BEST_LIMIT,
    READ_KERNELS,
    headline_key,
)
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, format_number, format_ratio, join

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


def beside_sentence(machine: dict[str, Any]) -> str:
    """How the floors read beside the groups wandered at each thread count, and whether that is within the limits
    a reference record must meet (figures.derivation.floor_stability)."""
    parts = [f"{gbs(e['beside']['lowest_bytes_per_s']).removesuffix(' GB/s')}–{gbs(e['beside']['highest_bytes_per_s'])} "
             f"at {threads_text(int(t))} (drift {e['beside']['drift']:.0%}, best pass "
             f"{format_ratio(e['beside']['median_over_best'])} the median)" for t, e in machine["bandwidth"].items()]
    steady = all(entry["beside"]["stable"] for entry in machine["bandwidth"].values())
    verdict = "steady" if steady else "unsteady: the memory these cells had changed during the run"
    return (f"Read again before each group of cells, the floor gave {join(parts)}: {verdict} by the limits a "
            f"reference record must meet (drift at most {FLOOR_DRIFT_LIMIT:.0%}, best at most "
            f"{format_ratio(FLOOR_MEDIAN_OVER_BEST_LIMIT)} the median). Each cell's ratio uses its group's floor.")


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
    return Block(paragraphs=[*machine_paragraphs(record["hardware"]), beside_sentence(record["hardware"])],
                 tables=[kernels_table(record["hardware"]), table],
                 notes=[legend, crossing, bound_sentence(groups), activations_sentence(record, groups)])


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
