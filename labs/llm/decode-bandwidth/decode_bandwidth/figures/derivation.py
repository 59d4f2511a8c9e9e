"""Every figure of the decode record that follows from its raw data (``derive``), and the bandwidth rates the
floors use. Torch-free: the record holds only raw data; the site build derives every figure with ``derive``
when it reads the record (labkit.figures.check_record), and the views read the figures derived there. Each is
computed from raw data only (durations, counts, token times, the config), never from another derived figure.
The constants and formulas are formulas.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from decode_bandwidth.floors import best_rate, kernel_bytes, square_matmul_flops
from decode_bandwidth.grid import BASELINE, COMPILED, LAYOUT_KERNELS, OURS, Cell, Group, group_key, headline_key
from decode_bandwidth.llama_modes import (
    LLAMA_BASELINE,
    LLAMA_DTYPE,
    LLAMA_INT8,
    LLAMA_OURS,
    LLAMA_WEIGHTS,
    fastest_reads,
    floor_slowdown,
)
from decode_bandwidth.traffic import MATRICES, dims, kind_bytes, kv_crossover, matrix_shapes, step_bytes
from labkit.figures import Figures, tolerance_bound
from labkit.huge_pages import HUGE as HUGE_PAGE_BYTES
from labkit.records import JsonPath
from labkit.summary import as_number, median, paired, parted, side_of_one
from llm_models.generations import first_departure
from llm_models.kernels.choice import fastest
from llm_models.kv_bytes import BYTES_PER_ELEMENT
from llm_models.llama.traffic import llama_step_bytes

from ..llama_modes import LLAMA_SERVED
from .formulas import LLAMA_LADDER, REGIMES, activation_bytes, client_summary, contrast, regime, step_matrix_ns

Rates = Mapping[tuple[str, str], float]
Floors = dict[Group, tuple[float, float]]  # group -> (memory floor, arithmetic floor), ns per step


def derive(record: dict[str, Any]) -> Figures:
    """Every figure of the record that follows from its raw durations, token times and config."""
    figures = Figures()
    rates = hardware_figures(record["hardware"], figures)
    model, bench = record["config"]["model"], record["config"]["benchmark"]
    figures.add(("config", "model", "ffn_width"), dims(model)[2], "ffn_multiplier x width")
    tolerance = record["tolerance"]
    for mode, entry in record["equivalence"]["modes"].items():
        bound = tolerance_bound(tolerance["atol"], tolerance["rtol"], entry["max_abs_reference"])
        figures.add(("equivalence", "modes", mode, "bound"), bound, "atol + rtol x its max |reference|")
        figures.add(("equivalence", "modes", mode, "share_of_bound"), entry["max_abs_diff"] / bound,
                    "its max |difference| / its bound")
    medians, _ = grid_figures(record, rates, figures)
    floor_stability(record, rates, figures)
    size = BYTES_PER_ELEMENT[bench["dtype"]]
    one = step_bytes(model, size, 1, 1)  # sized in the headline dtype
    for name, value in (("batch_x_context", kv_crossover(model)), ("weight_bytes", one["weights"]),
                        ("kv_bytes_per_position", one["kv_read"]),
                        ("full_context_sequences", kv_crossover(model) / model["max_positions"])):
        figures.add(("kv_crossover", name), value, "the model config")
    largest = activation_bytes(model, size, bench["batches"][-1], bench["contexts"][-1])
    for name, value in largest.items():
        figures.add(("activations", name, "bytes"), value, "the model config at the grid's largest batch and context")
        figures.add(("activations", name, "share_of_weights"), value / one["weights"], "its bytes / the weight bytes")
    layout_figures(record, rates, figures)
    profile_figures(record, rates, medians, figures)
    variant_figures(record, rates, medians, figures)
    llama_figures(record, rates, figures)
    slowdown_figures(record, figures)
    step_sized_figures(record, figures)
    huge_page_figures(record, figures)
    client = record["client"]
    summaries = {mode: client_summary(entry["token_times_ns"], client["new_tokens"])
                 for mode, entry in client["modes"].items()}
    for mode, summary in summaries.items():
        for name, value in summary.items():
            figures.add(("client", "modes", mode, name), value, "its token times")
    figures.add(("client", "ours_over_transformers"),
                summaries["ours"]["tokens_per_s"] / summaries["transformers"]["tokens_per_s"], "the two modes' token times")
    return figures


def grid_figures(record: Mapping[str, Any], rates: Rates, figures: Figures) -> tuple[dict[Cell, float], Floors]:
    """Each group's bytes and two floors, each cell's statistics against them and its regime, and per group the
    fastest of this lab's modes against transformers, against ours-prealloc, and against batch 1; returns the
    cells' medians and the groups' floors for the figures built on them."""
    model, bench = record["config"]["model"], record["config"]["benchmark"]
    floors: Floors = {}
    work: dict[Group, Mapping[str, int]] = {}  # each group's bytes and flops
    for index, group in enumerate(record["groups"]):
        needed = step_bytes(model, BYTES_PER_ELEMENT[group["dtype"]], group["batch"], group["context"])
        work[group_key(group)] = needed
        for name, value in needed.items():
            figures.add(("groups", index, "bytes", name), value, "the model config")
        rate = beside_rate(record["hardware"], group)
        memory = memory_floor_ns(needed, rate)
        compute = needed["flops"] / rates[("matmul", f"{group['dtype']}/{group['threads']}")] * 1e9
        floors[group_key(group)] = (memory, compute)
        figures.add(("groups", index, "floor_bytes_per_s"), rate, "the fastest read kernel's pass beside it")
        figures.add(("groups", index, "floor_ns_per_step"), memory, "its bytes / the read bandwidth beside it")
        figures.add(("groups", index, "compute_floor_ns_per_step"), compute, "its flops / the measured matmul rate")
        figures.add(("groups", index, "kv_over_weights"), needed["kv_read"] / needed["weights"], "the model config")
        figures.add(("groups", index, "flops_per_byte"), needed["flops"] / needed["total"], "its flops / its bytes")
    medians = {(*group_key(cell), cell["mode"]): as_number(median(cell["durations_ns"])) for cell in record["cells"]}
    headline = headline_key(record)
    for index, cell in enumerate(record["cells"]):
        durations, where = cell["durations_ns"], ("cells", index)
        (memory, compute), ns = floors[group_key(cell)], medians[(*group_key(cell), cell["mode"])]
        for name, value in (("min_ns_per_step", min(durations)), ("median_ns_per_step", ns),
                            ("max_ns_per_step", max(durations))):
            figures.add((*where, name), value, "its raw durations")
        figures.add((*where, "floor_ns_per_step"), memory, "its group's bytes / the read bandwidth beside it")
        figures.add((*where, "step_over_floor"), ns / memory, "its median / its group's floor")
        figures.add((*where, "step_over_higher_floor"), ns / max(memory, compute), "its median / its group's higher floor")
        bound = memory_floor_ns(work[group_key(cell)], rates[("bandwidth", str(cell["threads"]))])
        figures.add((*where, "regime"), regime(durations, memory, compute, bound), "its quartiles against its group's two "
                    "floors")
        figures.add((*where, "flops_per_s"), work[group_key(cell)]["flops"] / ns * 1e9, "its group's flops / its "
                    "median")
        figures.add((*where, "spread"), (max(durations) - min(durations)) / ns, "its raw durations")
        figures.add((*where, "minor_faults_median"), as_number(median(cell["minor_faults"])), "its fault counts")
        base = None if (cell["dtype"], cell["threads"]) == headline else \
            medians.get((*headline, cell["batch"], cell["context"], cell["mode"]))
        figures.add((*where, "over_headline"), None if base is None else ns / base,
                    "its median / the headline grid's same cell")
        figures.add((*where, "above_headline_ns"), None if base is None else ns - base,
                    "its median - the headline grid's same cell")
        one = medians.get((cell["dtype"], cell["threads"], 1, cell["context"], cell["mode"]))
        figures.add((*where, "over_batch_1"), None if one is None else ns / one, "its median / the batch-1 cell's")
    repetitions = {(*group_key(cell), cell["mode"]): cell["durations_ns"] for cell in record["cells"]}
    for index in range(len(record["groups"])):
        figures_of_group(record["groups"], index, medians, floors, figures, repetitions)
    cells = record["cells"]
    first_slowest = sum(c["durations_ns"][0] == max(c["durations_ns"]) and len(set(c["durations_ns"])) > 1
                        for c in cells)
    figures.add(("noise", "first_slowest_cells"), first_slowest, "the cells' raw durations")
    figures.add(("noise", "first_slowest_expected"), len(cells) / bench["repeats"], "cells / repeats")
    counts = dict.fromkeys(REGIMES, 0)
    for group in record["groups"]:
        key = group_key(group)
        if key[:2] == headline:
            bound = memory_floor_ns(work[key], rates[("bandwidth", str(key[1]))])
            counts[regime(repetitions[(*key, fastest_mode(medians, key))], *floors[key], bound)] += 1
    for name, count in counts.items():
        figures.add(("headline_regimes", name), count, "the headline cells' medians against their floors")
    return medians, floors


def fastest_mode(medians: Mapping[Cell, float], key: Group) -> str:
    """The fastest of this lab's modes at one group: the lower median, the first listed on a tie (the one choice
    rule, llm_models.kernels.choice.fastest)."""
    return fastest({mode: medians[(*key, mode)] for mode in OURS})


def figures_of_group(groups: list[dict[str, Any]], index: int, medians: Mapping[Cell, float], floors: Floors,
                     figures: Figures, repetitions: Mapping[Cell, list[int]]) -> None:
    """One group's fastest of ours, that mode against transformers and per token, the other modes against
    ours-prealloc, and the group against its batch-1 group at the same context."""
    key, where = group_key(groups[index]), ("groups", index)
    best = fastest_mode(medians, key)
    ns = medians[(*key, best)]
    figures.add((*where, "best_ours"), best, "its cells' medians")
    for name, mode, over in (("best_over_hf_dynamic", best, BASELINE), ("compiled_over_prealloc", COMPILED, "ours-prealloc"),
                             ("concat_over_prealloc", "ours-concat", "ours-prealloc")):
        figures.add((*where, name), medians[(*key, mode)] / medians[(*key, over)], "its cells' medians")
    figures.add((*where, "best_parted_from_hf_dynamic"), parted(repetitions[(*key, best)], repetitions[(*key, BASELINE)]),
                "whether the two cells' repetitions overlap")
    figures.add((*where, "best_ns_per_token"), ns / key[2], "its fastest median / its batch")
    one = (*key[:2], 1, key[3])
    has_one = one in floors
    figures.add((*where, "best_over_batch_1"), ns / medians[(*one, fastest_mode(medians, one))] if has_one else None,
                "its fastest median / the batch-1 group's")
    figures.add((*where, "floor_over_batch_1"), floors[key][0] / floors[one][0] if has_one else None,
                "its floor / the batch-1 group's")


def layouts(record: Mapping[str, Any]) -> list[tuple[JsonPath, Mapping[str, Any], Mapping[str, Any]]]:
    """Every layout measurement with its path and its dtype's batch-1 measurement."""
    found: list[tuple[JsonPath, Mapping[str, Any], Mapping[str, Any]]] = [(("layout",), record["layout"], record["layout"])]
    found += [(("layout_batches", i), layout, record["layout"]) for i, layout in enumerate(record["layout_batches"])]
    for dtype, first in record.get("layout_other_dtypes", {}).items():
        found.append((("layout_other_dtypes", dtype), first, first))
        found += [(("layout_batches_other_dtypes", dtype, i), layout, first)
                  for i, layout in enumerate(record["layout_batches_other_dtypes"].get(dtype, []))]
    return found


def layout_figures(record: Mapping[str, Any], rates: Rates, figures: Figures) -> None:
    """Per layout measurement: one step's weight multiplies in the stored layout, in each kind's faster BLAS layout
    and through the generated loop, the rate of the stored one and the floor of their bytes; per matrix kind the
    rate of each kernel, the fastest against the floor's rate, and the two BLAS layouts against each other."""
    floor_rate = rates[("bandwidth", str(headline_key(record)[1]))]
    for where, layout, first in layouts(record):
        rows = layout["rows"]
        matrix_bytes = sum(row["bytes_per_matrix"] * row["matrices"] for row in rows)
        stored, matrix_floor = step_matrix_ns(layout), matrix_bytes / floor_rate * 1e9
        compiled = step_matrix_ns(layout, "compiled") if all("compiled_ns" in row for row in rows) else None
        for name, value in (
                ("matrix_bytes", matrix_bytes), ("stored_step_ns", stored),
                ("best_step_ns", sum(min(row["in_out_ns"], row["out_in_ns"]) * row["matrices"] for row in rows)),
                ("stored_bytes_per_s", matrix_bytes / stored * 1e9), ("matrix_floor_ns", matrix_floor),
                ("compiled_step_ns", compiled), ("compiled_over_floor", None if compiled is None else compiled / matrix_floor),
                ("stored_over_batch_1", stored / step_matrix_ns(first))):
            figures.add((*where, name), value, "its rows' times and bytes")
        for index, row in enumerate(rows):
            kernels = {kernel: row["bytes_per_matrix"] / row[f"{kernel}_ns"] * 1e9
                       for kernel in LAYOUT_KERNELS if f"{kernel}_ns" in row}
            best = max(kernels, key=lambda kernel: kernels[kernel])
            for name, value in (("bytes_per_s", kernels), ("fastest", best),
                                ("fastest_over_floor", kernels[best] / floor_rate),
                                ("out_in_over_in_out", row["out_in_ns"] / row["in_out_ns"])):
                figures.add((*where, "rows", index, name), value, "its times and bytes")


def profile_figures(record: Mapping[str, Any], rates: Rates, medians: Mapping[Cell, float], figures: Figures) -> None:
    """Per profiled kind the bytes it must read, the floor they set, the time over it; per mode the total, the
    weight matrices' share against their floor, the small operators and the timed step."""
    profile, model = record["profile"], record["config"]["model"]
    needed = kind_bytes(model, BYTES_PER_ELEMENT[profile["dtype"]], profile["batch"], profile["context"])
    bandwidth = rates[("bandwidth", str(profile["threads"]))]
    shapes = matrix_shapes(model)
    group = (profile["dtype"], profile["threads"], profile["batch"], profile["context"])
    for mode, entry in profile["modes"].items():
        spent: dict[str, float] = {}
        matrices_floor = 0.0
        for index, row in enumerate(entry["rows"]):
            where, kind = ("profile", "modes", mode, "rows", index), row["kind"]
            floor = needed[kind] / bandwidth * 1e9
            spent[kind] = row["ns_per_step"]
            matrices_floor += floor if kind in MATRICES else 0.0
            figures.add((*where, "bytes"), needed[kind], "the model config")
            figures.add((*where, "floor_ns"), floor, "its bytes / the measured read bandwidth")
            figures.add((*where, "ratio_to_floor"), row["ns_per_step"] / floor, "its time / its floor")
            figures.add((*where, "above_floor_ns"), row["ns_per_step"] - floor, "its time - its floor")
            figures.add((*where, "ns_per_call"), row["ns_per_step"] / shapes[kind][1] if kind in MATRICES else None,
                        "its time / the matrices of its kind")
        where = ("profile", "modes", mode)
        total, matrices = sum(spent.values()), sum(spent[kind] for kind in MATRICES)
        timed = medians.get((*group, mode))
        for name, value, how in (
                ("total_ns_per_step", total, "the sum of its rows"),
                ("matrices_ns", matrices, "its weight matrices' rows"),
                ("matrices_floor_ns", matrices_floor, "its weight matrices' floors"),
                ("matrices_over_floor", matrices / matrices_floor, "its weight matrices' rows and floors"),
                ("matrices_share", matrices / total, "its rows"),
                ("small_ops_ns", spent["other"] + spent["cache writes and copies"], "its rows"),
                ("minor_faults_median", as_number(median(entry["minor_faults"])), "its fault counts"),
                ("total_minus_timed_ns", None if timed is None else total - timed, "its rows and the cell's timed steps"),
                ("total_over_timed", None if timed is None else total / timed, "its rows and the cell's timed steps")):
            figures.add((*where, name), value, how)


def variant_figures(record: Mapping[str, Any], rates: Rates, medians: Mapping[Cell, float], figures: Figures) -> None:
    """What the second thread count and the second dtype changed: the measured rates against the headline's, and
    for the dtype the weight multiplies alone (the layout measurement) against the extra time of its steps."""
    bench = record["config"]["benchmark"]
    dtype, threads = headline_key(record)
    other_threads, other_dtype = bench["variant_threads"], bench["variant_dtype"]
    how = "the hardware measurements"
    if other_threads:
        one, two = rates[("bandwidth", str(threads))], rates[("bandwidth", str(other_threads))]
        figures.add(("variants", "threads", "bandwidth_ratio"), two / one, how)
        figures.add(("variants", "threads", "floor_ratio"), one / two, how)
        figures.add(("variants", "threads", "matmul_ratio"),
                    rates[("matmul", f"{dtype}/{other_threads}")] / rates[("matmul", f"{dtype}/{threads}")], how)
    else:
        figures.add(("variants", "threads"), None, "the config: no second thread count")
    if not other_dtype:
        figures.add(("variants", "dtype"), None, "the config: no second dtype")
        return
    figures.add(("variants", "dtype", "matmul_ratio"),
                rates[("matmul", f"{other_dtype}/{threads}")] / rates[("matmul", f"{dtype}/{threads}")], how)
    measured = {record["layout"]["dtype"]: record["layout"], **record.get("layout_other_dtypes", {})}
    base, variant = measured.get(dtype), measured.get(other_dtype)
    ratio = extra = shares = None
    if base is not None and variant is not None:
        ratio = step_matrix_ns(variant) / step_matrix_ns(base)
        extra = step_matrix_ns(variant) - step_matrix_ns(base)
        pairs = [(medians.get((other_dtype, threads, b, c, "ours-prealloc")), medians.get((dtype, threads, b, c, "ours-prealloc")))
                 for b in bench["variant_batches"] for c in bench["contexts"]]
        shares = [extra / (slow - fast) if slow is not None and fast is not None and slow > fast else None
                  for slow, fast in pairs]
    how = "the two dtypes' layout measurements and ours-prealloc's steps"
    figures.add(("variants", "dtype", "matrix_ratio"), ratio, how)
    figures.add(("variants", "dtype", "matrix_extra_ns"), extra, how)
    figures.add(("variants", "dtype", "matrix_share_of_extra"), shares, how)


def round_rates(machine: Mapping[str, Any], group: Mapping[str, Any], threads: int | None = None) -> list[float]:
    """The read rate of each paired round of a trained-model group (or of one of its set-aside attempts, at
    ``threads``): its kernel's bytes over that round's pass."""
    read = group["round_floor"]
    moved = machine["bandwidth"][str(group["threads"] if threads is None else threads)]["kernels"][read["kernel"]]["bytes"]
    return [moved / ns * 1e9 for ns in read["durations_ns"]]


def attempt_rates(machine: Mapping[str, Any], group: Mapping[str, Any]) -> list[list[float]]:
    """Every attempt at a trained-model group, the kept one first, as its rounds' read rates."""
    return [round_rates(machine, group)] + [round_rates(machine, attempt, group["threads"])
                                            for attempt in group["set_aside"]]


def slowdown_figures(record: Mapping[str, Any], figures: Figures) -> None:
    """How far each trained-model group's floor reads (and each set-aside attempt's) ran under the fastest round
    read at its thread count over every attempt: the measure by which the benchmark chose what to measure again."""
    section, machine = record["llama"], record["hardware"]
    fastest = fastest_reads((group["threads"], attempt_rates(machine, group)) for group in section["groups"])
    for index, group in enumerate(section["groups"]):
        where, top = ("llama", "groups", index), fastest[group["threads"]]
        kept, *aside = attempt_rates(machine, group)
        how = "1 - its rounds' median read rate / the fastest round read at its thread count"
        figures.add((*where, "floor_slowdown"), floor_slowdown(kept, top), how)
        for number, rates in enumerate(aside):
            figures.add((*where, "set_aside", number, "floor_slowdown"), floor_slowdown(rates, top), how)


def llama_figures(record: Mapping[str, Any], rates: Rates, figures: Figures) -> None:
    """The trained model's steps: each group's bytes and two floors, each cell's statistics, its ratio to the
    floor and its regime, ours against transformers per group; and the two models' bytes per step side by side.
    Every comparison is paired (labkit.summary.paired): the median of the per-round ratios, with their middle half,
    a step over its floor dividing by the floor read at the start of the same round."""
    section = record["llama"]
    model, size = section["model"], BYTES_PER_ELEMENT[section["dtype"]]
    medians: dict[tuple[int, int, str], float] = {}
    repetitions = {(cell["threads"], cell["context"], cell["mode"]): cell["durations_ns"] for cell in section["cells"]}
    for index, cell in enumerate(section["cells"]):
        durations = cell["durations_ns"]
        medians[(cell["threads"], cell["context"], cell["mode"])] = ns = as_number(median(durations))
        for name, value in (("min_ns_per_step", min(durations)), ("median_ns_per_step", ns),
                            ("max_ns_per_step", max(durations))):
            figures.add(("llama", "cells", index, name), value, "its raw durations")
    floors: dict[tuple[int, int, str], tuple[float, float]] = {}  # (threads, context, weight format)
    bounds: dict[tuple[int, int, str], float] = {}  # the same bytes at the run's best read
    per_round: dict[tuple[int, int, str], list[float]] = {}  # the memory floor of each round
    for index, group in enumerate(section["groups"]):
        key, where = (group["threads"], group["context"]), ("llama", "groups", index)
        read = round_rates(record["hardware"], group)
        figures.add((*where, "round_floor", "median_bytes_per_s"), median(read), "its rounds' read rates")
        figures.add((*where, "round_floor", "drift"), (max(read) - min(read)) / max(read),
                    "(fastest - slowest) / fastest of its rounds' read rates")
        for weights in sorted(set(LLAMA_WEIGHTS.values()), key=lambda name: name != "float32"):  # float32 first
            needed = llama_step_bytes(model, size, section["batch"], group["context"], weights)
            prefix = () if weights == "float32" else (weights,)  # float32's figures keep their plain names
            for name, value in needed.items():
                figures.add((*where, "_".join((*prefix, "bytes")), name), value, f"the Llama config, {weights} weights")
            per_round[(*key, weights)] = [memory_floor_ns(needed, rate) for rate in read]
            memory = memory_floor_ns(needed, median(read))
            compute = needed["flops"] / rates[("matmul", f"{section['dtype']}/{group['threads']}")] * 1e9
            floors[(*key, weights)] = (memory, compute)
            bounds[(*key, weights)] = memory_floor_ns(needed, rates[("bandwidth", str(group["threads"]))])
            name = "_".join((*prefix, "floor_ns_per_step"))
            figures.add((*where, name), memory, f"its {weights} bytes / the median read rate of its rounds")
            if weights == "float32":
                figures.add((*where, "compute_floor_ns_per_step"), compute, "its flops / the measured matmul rate")
        best = min(LLAMA_OURS, key=lambda mode: medians[(*key, mode)])
        figures.add((*where, "best_float32_mode"), best, "the lowest median of this lab's float32 modes")
        steps = {mode: repetitions[(*key, mode)] for mode in (*LLAMA_OURS, LLAMA_INT8, LLAMA_BASELINE, LLAMA_SERVED)}
        comparisons = {
            "best_over_floor": (steps[best], per_round[(*key, "float32")], "that mode's step / the round's floor"),
            "best_over_transformers": (steps[best], steps[LLAMA_BASELINE], "that mode's step / transformers'"),
            "ours_over_transformers": (steps["ours-prealloc"], steps[LLAMA_BASELINE], "ours-prealloc's step / "
                                       "transformers'"),
            "int8_over_floor": (steps[LLAMA_INT8], per_round[(*key, "int8")], f"{LLAMA_INT8}'s step / the round's "
                                "int8 floor"),
            "int8_over_best_float32": (steps[LLAMA_INT8], steps[best], f"{LLAMA_INT8}'s step / the best float32 "
                                       "mode's"),
            "served_over_best": (steps[LLAMA_SERVED], steps[best], "the served step / the best float32 mode's"),
        }
        for name, (numerators, denominators, how) in comparisons.items():
            ratio = paired(numerators, denominators)
            figures.add((*where, "paired", name), ratio, f"per round, {how}: median and middle half")
            figures.add((*where, name), ratio["median"], f"the median over rounds of {how}")
            figures.add((*where, "sides", name), side_of_one(ratio), "whether its rounds' middle half lies wholly "
                        "below 1, wholly above, or holds it")
        ours, theirs = medians[(*key, "ours-prealloc")], medians[(*key, LLAMA_BASELINE)]
        figures.add((*where, "faster"), "ours-prealloc" if ours < theirs else LLAMA_BASELINE, "its two cells' medians")
        figures.add((*where, "int8_floor_over_float32_floor"), floors[(*key, "int8")][0] / floors[(*key, "float32")][0],
                    "its int8 floor / its float32 floor")
        rungs = list(LLAMA_LADDER)
        for before, mode in zip(rungs, rungs[1:]):  # what each rung of the ladder removed from the one before
            figures.add((*where, "rung_removed_ns", mode), medians[(*key, before)] - medians[(*key, mode)],
                        "the rung before's median - its median")
            figures.add((*where, "rung_parted", mode),
                        side_of_one(paired(repetitions[(*key, mode)], repetitions[(*key, before)])) != "within",
                        "whether the rounds' ratio of the two rungs lies wholly on one side of 1")
    for index, cell in enumerate(section["cells"]):
        memory, compute = floors[(cell["threads"], cell["context"], LLAMA_WEIGHTS[cell["mode"]])]
        ns, where = medians[(cell["threads"], cell["context"], cell["mode"])], ("llama", "cells", index)
        figures.add((*where, "floor_ns_per_step"), memory, "its group's bytes / the median read rate of its rounds")
        figures.add((*where, "step_over_floor"),
                    paired(cell["durations_ns"], per_round[(cell["threads"], cell["context"], LLAMA_WEIGHTS[cell["mode"]])])[
                        "median"], "the median over rounds of its step / the round's floor")
        bound = bounds[(cell["threads"], cell["context"], LLAMA_WEIGHTS[cell["mode"]])]
        figures.add((*where, "regime"), regime(cell["durations_ns"], memory, compute, bound), "its quartiles against its "
                    "group's two floors")
        first = (section["threads"][0], cell["context"], cell["mode"])
        if cell["threads"] != first[0]:  # a second thread count: did it help this mode at this context?
            figures.add((*where, "over_first_threads"), ns / medians[first], "its median / the same mode's at the "
                        "first thread count")
            figures.add((*where, "floor_over_first_threads"), memory / floors[(*first[:2], LLAMA_WEIGHTS[cell["mode"]])][0],
                        "its floor / the same floor at the first thread count")
    for name, values in contrast(record["config"]["model"], model, size, section["contexts"][-1]).items():
        for field, value in values.items():
            figures.add(("llama", "contrast", name, field), value, "the two models' configs")
    attention_figures(section["attention"], figures)
    quality_figures(section["quality"], figures)


def attention_figures(table: Mapping[str, Any], figures: Figures) -> None:
    """Per context and way of attending: the median ns per layer, the read rate it implies, its range; and the C
    loop over the products, with whether the two ranges part (the only case a page may call one faster)."""
    for index, row in enumerate(table["rows"]):
        where, per_layer = ("llama", "attention", "rows", index), {}
        for way, durations in row["durations_ns"].items():
            per_layer[way] = as_number(median(durations)) / table["layers"]
            figures.add((*where, "median_ns_per_layer", way), per_layer[way], "its passes' median / the layers")
            figures.add((*where, "bytes_per_ns", way), row["bytes_per_layer"] / per_layer[way],
                        "the bytes one layer reads / its median ns per layer")
            figures.add((*where, "range_ns_per_layer", way), [min(durations) / table["layers"],
                                                               max(durations) / table["layers"]],
                        "its fastest and slowest pass / the layers")
        if "c" in per_layer:
            figures.add((*where, "c_over_products"), per_layer["c"] / per_layer["products"], "the two medians")
            low, high = sorted(row["durations_ns"].values(), key=median)
            figures.add((*where, "parted"), max(low) < min(high), "whether every pass of the faster way beat every "
                        "pass of the slower")


def quality_figures(quality: Mapping[str, Any], figures: Figures) -> None:
    """The int8 round trip against float32: mean KL, top-1 agreement and perplexity over the scored positions,
    and where the two greedy answers first part (None where they never do)."""
    positions, scores = quality["positions"], quality["scores"]
    for name, entry in scores.items():  # each holds one value per position (invariants.check_quality)
        where = ("llama", "quality", "figures", name)
        figures.add((*where, "perplexity"), math.exp(sum(entry["nll"]) / positions), "exp(mean NLL)")
        figures.add((*where, "kl_mean"), sum(entry["kl"]) / positions, "mean of the per-position KL")
        figures.add((*where, "top1_agreement"), 1 - len(entry["top1_misses"]) / positions,
                    "1 - positions whose most likely token differs / positions")
    answers = quality["greedy"]["ids"]
    figures.add(("llama", "quality", "figures", "first_departure"), first_departure(answers["int8"], answers["float32"]),
                "the first position the two greedy answers differ")


def memory_floor_ns(needed: Mapping[str, int], rate: float) -> float:
    """A step's bytes over a read rate (bytes per second): the least time they can take at that rate."""
    return needed["total"] / rate * 1e9


def beside_rate(machine: Mapping[str, Any], group: Mapping[str, Any]) -> float:
    """The rate of the floor read beside a group: the fastest of its read kernels' one pass each (each kernel's
    bytes are the hardware section's, over the same buffer)."""
    kernels = machine["bandwidth"][str(group["threads"])]["kernels"]
    return max(kernels[name]["bytes"] / ns * 1e9 for name, ns in group["floor_ns"].items())


def floor_stability(record: Mapping[str, Any], rates: Rates, figures: Figures) -> None:
    """Per thread count, how the floors read through the run wandered (the pass beside each headline group, each
    trained-model round's): the slowest and fastest, the drift between them and their median against the run's
    best pass. Stated on the page, never a reason to refuse a run: every machine this site runs on moves, and every
    comparison divides by a floor read in the same group or round, so the drift moves both sides of it."""
    beside: dict[str, list[float]] = {}
    for group in record["groups"]:
        beside.setdefault(str(group["threads"]), []).append(beside_rate(record["hardware"], group))
    for group in record["llama"]["groups"]:
        beside.setdefault(str(group["threads"]), []).extend(round_rates(record["hardware"], group))
    for threads, found in sorted(beside.items()):
        lowest, highest, middle = min(found), max(found), median(found)
        drift, over_best = (highest - lowest) / highest, rates[("bandwidth", threads)] / middle
        where = ("hardware", "bandwidth", threads, "beside")
        for name, value, how in (
                ("groups", len(found), "the floor reads through the run at this thread count"),
                ("lowest_bytes_per_s", lowest, "the slowest floor read through the run"),
                ("highest_bytes_per_s", highest, "the fastest floor read through the run"),
                ("median_bytes_per_s", middle, "the median floor read through the run"),
                ("drift", drift, "(fastest - slowest) / fastest of the floor reads through the run"),
                ("median_over_best", over_best, "the run's best rate / the median floor read")):
            figures.add((*where, name), value, how)


def best_round_rates(passes: Mapping[str, list[int]], buffer_bytes: int) -> list[float]:
    """Per round, the fastest read kernel's rate: each kernel's bytes over that buffer / its pass of the round."""
    rounds = len(next(iter(passes.values())))
    return [max(kernel_bytes(name, buffer_bytes) / durations[index] * 1e9 for name, durations in passes.items())
            for index in range(rounds)]


def step_sized_figures(record: Mapping[str, Any], figures: Figures) -> None:
    """Which floor bounds the trained step: per thread count, the read over a buffer of the step's own bytes
    against the read over the large buffer, paired by round (their rates' ratio above 1 where the step-sized read
    ran faster: cache held part of it); and whether the step's float32 weights fit in the last-level cache."""
    hardware = record["hardware"]
    if "step_sized" not in hardware:
        return
    sized, llc = hardware["step_sized"], hardware["last_level_cache_bytes"]
    weights = llama_step_bytes(record["llama"]["model"], BYTES_PER_ELEMENT[LLAMA_DTYPE], 1, 1)["weights"]
    figures.add(("hardware", "step_sized", "weight_bytes"), weights, "the trained model's float32 weights")
    figures.add(("hardware", "step_sized", "weights_fit_in_cache"), None if llc is None else weights <= llc,
                "its weight bytes against the last-level cache (none where the cache size was not read)")
    for threads, entry in sized["threads"].items():
        where = ("hardware", "step_sized", "threads", threads)
        step = best_round_rates(entry["step_ns"], sized["buffer_bytes"])
        large = best_round_rates(entry["large_ns"], hardware["buffer_bytes"])
        figures.add((*where, "step_bytes_per_s"), median(step), "the median of its rounds' fastest step-sized reads")
        figures.add((*where, "large_bytes_per_s"), median(large), "the median of its rounds' fastest large reads")
        ratio = paired(step, large)
        figures.add((*where, "step_over_large"), ratio, "per round, the step-sized read's rate / the large read's")
        figures.add((*where, "side"), side_of_one(ratio), "whether its rounds' middle half lies wholly below 1, "
                    "wholly above, or holds it")


def huge_page_figures(record: Mapping[str, Any], figures: Figures) -> None:
    """Per timed part, the share of the process's anonymous memory on 2 MiB pages before and after it was settled
    (labkit.huge_pages); none where the record predates the settling or the coverage was not read."""
    for part, settled in record["hardware"].get("huge_pages", {}).items():
        for moment in ("before", "after"):
            pages = settled[moment]
            figures.add(("hardware", "huge_pages", part, f"share_{moment}"),
                        None if not pages or not pages["anonymous_bytes"] else pages["huge_bytes"] / pages["anonymous_bytes"],
                        f"huge-page bytes / anonymous bytes, {moment} the settling")
        refused = settled.get("refused", 0)  # a record from before settling counted its refusals has none
        figures.add(("hardware", "huge_pages", part, "asked"), settled["collapsed"] + refused,
                    "huge pages moved + huge pages refused")
        figures.add(("hardware", "huge_pages", part, "refused_bytes"), refused * HUGE_PAGE_BYTES,
                    "huge pages refused x 2 MiB")


def hardware_figures(machine: Mapping[str, Any], figures: Figures) -> dict[tuple[str, str], float]:
    """Each measurement's best pass and rate; returns the rates by (section, key) for the floors."""
    rates = {}
    for threads, entry in machine["bandwidth"].items():
        kernel_rates = {}
        for name, kernel in entry["kernels"].items():
            where = ("hardware", "bandwidth", threads, "kernels", name)
            best, kernel_rates[name] = best_rate(kernel["bytes"], kernel["durations_ns"])
            figures.add((*where, "best_ns"), best, "the fastest of its passes")
            figures.add((*where, "bytes_per_s"), kernel_rates[name], "its bytes / its fastest pass")
        fastest_kernel = max(kernel_rates, key=lambda name: kernel_rates[name])
        figures.add(("hardware", "bandwidth", threads, "best_kernel"), fastest_kernel, "the fastest of its read kernels")
        figures.add(("hardware", "bandwidth", threads, "bytes_per_s"), kernel_rates[fastest_kernel],
                    "the fastest read kernel's rate")
        rates[("bandwidth", threads)] = kernel_rates[fastest_kernel]
    for key, entry in machine["matmul"].items():
        flops = square_matmul_flops(entry["size"])
        best, rate = best_rate(flops, entry["durations_ns"])
        figures.add(("hardware", "matmul", key, "flops"), flops, "2 x size^3")
        figures.add(("hardware", "matmul", key, "best_ns"), best, "the fastest of its passes")
        figures.add(("hardware", "matmul", key, "flops_per_s"), rate, "its flops / its fastest pass")
        rates[("matmul", key)] = rate
    return rates
