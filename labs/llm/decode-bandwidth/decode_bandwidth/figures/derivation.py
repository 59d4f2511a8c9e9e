"""Every figure of the decode record that follows from its raw data (``derive``), and the bandwidth rates the
floors use. Torch-free: the benchmark fills its record with ``derive`` (labkit.harness.run), the site build
compares the stored figures with it (labkit.figures.check). The constants and formulas are formulas.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labkit.figures import Figures
from labkit.summary import as_number, percentile

from .formulas import (
    BYTES_PER_ELEMENT,
    LLAMA_BASELINE,
    Group,
    best_rate,
    client_summary,
    contrast,
    kind_bytes,
    kv_crossover,
    llama_step_bytes,
    regime,
    square_matmul_flops,
    step_bytes,
)


def derive(record: dict[str, Any]) -> Figures:
    """Every figure of the record that follows from its raw durations, token times and config."""
    figures = Figures()
    rates = hardware_figures(record["hardware"], figures)
    model, bench = record["config"]["model"], record["config"]["benchmark"]
    floors: dict[Group, float] = {}
    for index, group in enumerate(record["groups"]):
        key = (group["dtype"], group["threads"], group["batch"], group["context"])
        needed = step_bytes(model, BYTES_PER_ELEMENT[group["dtype"]], group["batch"], group["context"])
        for name, value in needed.items():
            figures.add(("groups", index, "bytes", name), value, "the model config")
        floors[key] = memory_floor_ns(needed, rates, group["threads"])
        figures.add(("groups", index, "floor_ns_per_step"), floors[key], "its bytes / the measured read bandwidth")
        compute = needed["flops"] / rates[("matmul", f"{group['dtype']}/{group['threads']}")] * 1e9
        figures.add(("groups", index, "compute_floor_ns_per_step"), compute, "its flops / the measured matmul rate")
    for index, cell in enumerate(record["cells"]):
        durations = cell["durations_ns"]
        median = as_number(percentile(durations, 0.5))
        floor = floors[(cell["dtype"], cell["threads"], cell["batch"], cell["context"])]
        for name, value in (("min_ns_per_step", min(durations)), ("median_ns_per_step", median),
                            ("max_ns_per_step", max(durations))):
            figures.add(("cells", index, name), value, "its raw durations")
        figures.add(("cells", index, "floor_ns_per_step"), floor, "its group's bytes / the measured read bandwidth")
        figures.add(("cells", index, "step_over_floor"), median / floor, "its median / its group's floor")
    one = step_bytes(model, BYTES_PER_ELEMENT[bench["dtype"]], 1, 1)  # sized in the headline dtype
    for name, value in (("batch_x_context", kv_crossover(model)), ("weight_bytes", one["weights"]),
                        ("kv_bytes_per_position", one["kv_read"])):
        figures.add(("kv_crossover", name), value, "the model config")
    profile_figures(record, rates, figures)
    llama_figures(record, rates, figures)
    client = record["client"]
    for mode, entry in client["modes"].items():
        for name, value in client_summary(entry["token_times_ns"], client["new_tokens"]).items():
            figures.add(("client", "modes", mode, name), value, "its token times")
    return figures


def llama_figures(record: Mapping[str, Any], rates: Mapping[tuple[str, str], float], figures: Figures) -> None:
    """The trained model's steps: each group's bytes and two floors, each cell's statistics, its ratio to the
    floor and its regime, ours against transformers per group; and the two models' bytes per step side by side."""
    section = record["llama"]
    model, size = section["model"], BYTES_PER_ELEMENT[section["dtype"]]
    medians: dict[tuple[int, int, str], float] = {}
    for index, cell in enumerate(section["cells"]):
        durations = cell["durations_ns"]
        medians[(cell["threads"], cell["context"], cell["mode"])] = median = as_number(percentile(durations, 0.5))
        for name, value in (("min_ns_per_step", min(durations)), ("median_ns_per_step", median),
                            ("max_ns_per_step", max(durations))):
            figures.add(("llama", "cells", index, name), value, "its raw durations")
    floors: dict[tuple[int, int], tuple[float, float]] = {}
    for index, group in enumerate(section["groups"]):
        key, where = (group["threads"], group["context"]), ("llama", "groups", index)
        needed = llama_step_bytes(model, size, section["batch"], group["context"])
        for name, value in needed.items():
            figures.add((*where, "bytes", name), value, "the Llama config")
        memory = memory_floor_ns(needed, rates, group["threads"])
        compute = needed["flops"] / rates[("matmul", f"{section['dtype']}/{group['threads']}")] * 1e9
        floors[key] = (memory, compute)
        figures.add((*where, "floor_ns_per_step"), memory, "its bytes / the measured read bandwidth")
        figures.add((*where, "compute_floor_ns_per_step"), compute, "its flops / the measured matmul rate")
        ours, theirs = medians[(*key, "ours-prealloc")], medians[(*key, LLAMA_BASELINE)]
        figures.add((*where, "ours_over_transformers"), ours / theirs, "its two cells' medians")
        figures.add((*where, "faster"), "ours-prealloc" if ours < theirs else LLAMA_BASELINE, "its two cells' medians")
    for index, cell in enumerate(section["cells"]):
        memory, compute = floors[(cell["threads"], cell["context"])]
        median, where = medians[(cell["threads"], cell["context"], cell["mode"])], ("llama", "cells", index)
        figures.add((*where, "floor_ns_per_step"), memory, "its group's bytes / the measured read bandwidth")
        figures.add((*where, "step_over_floor"), median / memory, "its median / its group's floor")
        figures.add((*where, "regime"), regime(median, memory, compute), "its median against its group's two floors")
    for name, values in contrast(record["config"]["model"], model, size).items():
        for field, value in values.items():
            figures.add(("llama", "contrast", name, field), value, "the two models' configs")


def memory_floor_ns(needed: Mapping[str, int], rates: Mapping[tuple[str, str], float], threads: int) -> float:
    """A step's bytes over the fastest read kernel's rate at its thread count: the least time they can take."""
    return needed["total"] / rates[("bandwidth", str(threads))] * 1e9


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
        fastest = max(kernel_rates, key=lambda name: kernel_rates[name])
        figures.add(("hardware", "bandwidth", threads, "best_kernel"), fastest, "the fastest of its read kernels")
        figures.add(("hardware", "bandwidth", threads, "bytes_per_s"), kernel_rates[fastest],
                    "the fastest read kernel's rate")
        rates[("bandwidth", threads)] = kernel_rates[fastest]
    for key, entry in machine["matmul"].items():
        flops = square_matmul_flops(entry["size"])
        best, rate = best_rate(flops, entry["durations_ns"])
        figures.add(("hardware", "matmul", key, "flops"), flops, "2 x size^3")
        figures.add(("hardware", "matmul", key, "best_ns"), best, "the fastest of its passes")
        figures.add(("hardware", "matmul", key, "flops_per_s"), rate, "its flops / its fastest pass")
        rates[("matmul", key)] = rate
    return rates


def profile_figures(record: Mapping[str, Any], rates: Mapping[tuple[str, str], float], figures: Figures) -> None:
    """Per profiled kind the bytes it must read, the floor they set and the time over it; per mode the total."""
    profile, model = record["profile"], record["config"]["model"]
    needed = kind_bytes(model, BYTES_PER_ELEMENT[profile["dtype"]], profile["batch"], profile["context"])
    bandwidth = rates[("bandwidth", str(profile["threads"]))]
    for mode, entry in profile["modes"].items():
        for index, row in enumerate(entry["rows"]):
            where = ("profile", "modes", mode, "rows", index)
            floor = needed[row["kind"]] / bandwidth * 1e9
            figures.add((*where, "bytes"), needed[row["kind"]], "the model config")
            figures.add((*where, "floor_ns"), floor, "its bytes / the measured read bandwidth")
            figures.add((*where, "ratio_to_floor"), row["ns_per_step"] / floor, "its time / its floor")
        figures.add(("profile", "modes", mode, "total_ns_per_step"), sum(row["ns_per_step"] for row in entry["rows"]),
                    "the sum of its rows")
