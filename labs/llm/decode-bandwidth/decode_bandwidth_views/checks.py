"""A decode record's figures must agree with each other: every derivable number is recomputed here."""

from __future__ import annotations

import math
from typing import Any

from labkit.records import RecordError

from .figures import (
    ATOL,
    BYTES_PER_ELEMENT,
    KINDS,
    LAYOUT,
    MIN_BANDWIDTH_PASSES,
    RTOL,
    TARGETS,
    client_summary,
    grid,
    kind_bytes,
    kv_crossover,
    median,
    rotation,
    step_bytes,
)

CLOSE = 1e-9  # relative: stored floats are the same arithmetic, so only rounding may differ


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=CLOSE, abs_tol=1e-12)


def check_record(record: dict[str, Any], source: str) -> None:
    """Raise RecordError naming the first field that the rest of the record contradicts."""

    def refuse(field: str, message: str) -> None:
        raise RecordError(f"{source}: field $.{field} {message}")

    model, bench = record["config"]["model"], record["config"]["benchmark"]
    if model["head_dim"] * model["heads"] != model["width"] or model["heads"] % model["kv_heads"]:
        refuse("config.model", f"has width {model['width']}, heads {model['heads']}, kv_heads {model['kv_heads']} "
               f"and head_dim {model['head_dim']}, which do not fit together")
    if model["bytes_per_element"] != BYTES_PER_ELEMENT[model["dtype"]]:
        refuse("config.model.bytes_per_element", f"is {model['bytes_per_element']} for dtype {model['dtype']}")
    if model["dtype"] != "float32":
        refuse("config.model.dtype", f"is {model['dtype']}: the model is built in float32 and cast per dtype")
    if max(bench["contexts"]) > model["max_positions"]:
        refuse("config.benchmark.contexts", f"reach {max(bench['contexts'])}, beyond {model['max_positions']} positions")
    if bench["targets"] != TARGETS:
        refuse("config.benchmark.targets", f"are {bench['targets']}, the benchmark's code sets {TARGETS}")
    in_force = record["environment"]["torch"]["threads"]
    if in_force != bench["threads"]:
        refuse("environment.torch.threads", f"is {in_force}, but the headline grid ran at --threads {bench['threads']}")
    check_equivalence(record, refuse)
    check_hardware(record["hardware"], refuse)
    check_groups(record, refuse)
    check_layout(record, refuse)
    crossover = record["kv_crossover"]
    one = step_bytes(model, bench["dtype"], 1, 1)  # the benchmark sizes these in the headline dtype
    expected = {"batch_x_context": kv_crossover(model), "weight_bytes": one["weights"],
                "kv_bytes_per_position": one["kv_read"]}
    if any(not _close(crossover[name], value) for name, value in expected.items()):
        refuse("kv_crossover", f"is {crossover}, the model config gives {expected}")
    check_profile(record, refuse)
    check_client(record["client"], refuse)


def check_equivalence(record: dict[str, Any], refuse: Any) -> None:
    tolerance = record["tolerance"]
    expected = {"atol": ATOL, "rtol": RTOL}
    if {name: tolerance.get(name) for name in expected} != expected:
        refuse("tolerance", f"is atol {tolerance.get('atol')}, rtol {tolerance.get('rtol')}; the benchmark's "
               f"equivalence check uses atol {ATOL}, rtol {RTOL}")
    for mode, entry in record["equivalence"]["modes"].items():
        if entry["within_tolerance"] is not True:
            refuse(f"equivalence.modes.{mode}.within_tolerance", f"is {entry['within_tolerance']}: the benchmark "
                   "stops before timing when a mode disagrees, so a timed record cannot hold a miss")
        bound = tolerance["atol"] + tolerance["rtol"] * entry["max_abs_reference"]
        if entry["max_abs_diff"] > bound:
            refuse(f"equivalence.modes.{mode}.max_abs_diff", f"is {entry['max_abs_diff']:g}, beyond atol + rtol x "
                   f"max|reference| = {bound:g}, yet within_tolerance is true")


def check_hardware(machine: dict[str, Any], refuse: Any) -> None:
    llc = machine["last_level_cache_bytes"]
    if llc is not None and machine["buffer_bytes"] < 4 * llc:
        refuse("hardware.buffer_bytes", f"is {machine['buffer_bytes']}, under 4 x the last-level cache ({llc})")
    for threads, entry in machine["bandwidth"].items():
        where = f"hardware.bandwidth.{threads}"
        if entry["passes"] < MIN_BANDWIDTH_PASSES:
            refuse(f"{where}.passes", f"is {entry['passes']}, under the {MIN_BANDWIDTH_PASSES} passes the floor needs")
        if entry["buffer_bytes"] != machine["buffer_bytes"] or entry["passes"] != len(entry["durations_ns"]):
            refuse(where, f"reads {entry['buffer_bytes']} bytes in {len(entry['durations_ns'])} passes, "
                   f"not the {machine['buffer_bytes']} bytes in {entry['passes']} passes it states")
        if entry["best_ns"] != min(entry["durations_ns"]):
            refuse(f"{where}.best_ns", f"is {entry['best_ns']}, but the fastest of its passes took "
                   f"{min(entry['durations_ns'])} ns")
        if not _close(entry["bytes_per_s"], entry["buffer_bytes"] / entry["best_ns"] * 1e9):
            refuse(f"{where}.bytes_per_s", f"is {entry['bytes_per_s']:g}, but the best of its passes gives "
                   f"{entry['buffer_bytes'] / min(entry['durations_ns']) * 1e9:g}")
    for key, entry in machine["matmul"].items():
        if entry["flops"] != 2 * entry["size"] ** 3 or entry["best_ns"] != min(entry["durations_ns"]) \
                or not _close(entry["flops_per_s"], entry["flops"] / entry["best_ns"] * 1e9):
            refuse(f"hardware.matmul.{key}", "does not follow from its size and best pass")


def check_groups(record: dict[str, Any], refuse: Any) -> None:
    model, bench, machine = record["config"]["model"], record["config"]["benchmark"], record["hardware"]
    modes, repeats = bench["modes"], bench["repeats"]
    keys = [(g["dtype"], g["threads"], g["batch"], g["context"]) for g in record["groups"]]
    if keys != grid(bench):
        refuse("groups", f"cover {keys}, the config asks for {grid(bench)}")
    cells = {}
    for index, cell in enumerate(record["cells"]):
        key = (cell["dtype"], cell["threads"], cell["batch"], cell["context"], cell["mode"])
        if key in cells:
            refuse(f"cells[{index}]", f"repeats the cell {key}")
        cells[key] = (index, cell)
    if len(cells) != len(keys) * len(modes):
        refuse("cells", f"hold {len(cells)} cells, {len(keys)} groups x {len(modes)} modes need {len(keys) * len(modes)}")
    for index, group in enumerate(record["groups"]):
        where = f"groups[{index}]"
        key = (group["dtype"], group["threads"], group["batch"], group["context"])
        if group["order"] != [rotation(modes, r) for r in range(repeats)]:
            refuse(f"{where}.order", f"is not {repeats} rotations of {modes}")
        expected = step_bytes(model, group["dtype"], group["batch"], group["context"])
        if group["bytes"] != expected:
            refuse(f"{where}.bytes", f"is {group['bytes']}, the model config gives {expected}")
        bandwidth = machine["bandwidth"].get(str(group["threads"]))
        arithmetic = machine["matmul"].get(f"{group['dtype']}/{group['threads']}")
        if bandwidth is None or arithmetic is None:
            refuse(where, f"ran at {group['threads']} threads in {group['dtype']}, which the hardware section did not measure")
        floor = expected["total"] / bandwidth["bytes_per_s"] * 1e9
        compute = expected["flops"] / arithmetic["flops_per_s"] * 1e9
        if not _close(group["floor_ns_per_step"], floor) or not _close(group["compute_floor_ns_per_step"], compute):
            refuse(f"{where}.floor_ns_per_step", f"is {group['floor_ns_per_step']:g}, bytes / bandwidth gives {floor:g}")
        for mode in modes:
            if (*key, mode) not in cells:
                refuse("cells", f"lack the {mode} cell of {key}")
            cell_index, cell = cells[(*key, mode)]
            check_cell(cell, f"cells[{cell_index}]", floor, repeats, refuse)


def check_cell(cell: dict[str, Any], where: str, floor: float, repeats: int, refuse: Any) -> None:
    durations = cell["durations_ns"]
    if len(durations) != repeats:
        refuse(f"{where}.durations_ns", f"has {len(durations)} repetitions, config says repeats = {repeats}")
    if len(cell["minor_faults"]) != repeats:
        refuse(f"{where}.minor_faults", f"has {len(cell['minor_faults'])} counts, one per repetition needs {repeats}")
    stored = (cell["min_ns_per_step"], cell["median_ns_per_step"], cell["max_ns_per_step"])
    computed = (min(durations), median(durations), max(durations))
    if not all(_close(a, b) for a, b in zip(stored, computed)):
        refuse(f"{where}.median_ns_per_step", f"min/median/max {stored}, but the raw durations give {computed}")
    if not _close(cell["floor_ns_per_step"], floor) or not _close(cell["step_over_floor"], cell["median_ns_per_step"] / floor):
        refuse(f"{where}.step_over_floor", f"is {cell['step_over_floor']:g} with floor {cell['floor_ns_per_step']:g}, "
               f"its group's floor gives {cell['median_ns_per_step'] / floor:g}")


def check_layout(record: dict[str, Any], refuse: Any) -> None:
    check_one_layout(record["config"]["model"], record["layout"], "layout", refuse)
    if record["layout"]["dtype"] != "float32" or record["layout"]["batch"] != 1:
        refuse("layout", f"is measured in {record['layout']['dtype']} at batch {record['layout']['batch']}; the "
               "stored layout is chosen on the float32 model at batch 1")
    bench = record["config"]["benchmark"]
    larger = [batch for batch in bench["batches"] if batch > 1]
    measured = [layout["batch"] for layout in record["layout_batches"]]
    if measured != larger:
        refuse("layout_batches", f"measure batches {measured}; the headline grid's batches above 1 are {larger}")
    for index, layout in enumerate(record["layout_batches"]):
        if layout["dtype"] != "float32":
            refuse(f"layout_batches[{index}].dtype", f"is {layout['dtype']}; these repeat the float32 measurement")
        check_one_layout(record["config"]["model"], layout, f"layout_batches[{index}]", refuse)
    timed = {bench["dtype"], bench["variant_dtype"]} - {None, "float32"}
    for dtype, layout in record.get("layout_other_dtypes", {}).items():
        if dtype not in timed or layout["dtype"] != dtype:
            refuse(f"layout_other_dtypes.{dtype}", f"holds a {layout['dtype']} measurement; the run timed "
                   f"{sorted(timed) or 'no dtype'} besides float32")
        check_one_layout(record["config"]["model"], layout, f"layout_other_dtypes.{dtype}", refuse)


def check_one_layout(model: dict[str, Any], layout: dict[str, Any], field: str, refuse: Any) -> None:
    width, layers = model["width"], model["layers"]
    kv_width, hidden = model["kv_heads"] * model["head_dim"], model["ffn_multiplier"] * width
    expected = {"qkv": ([width, width + 2 * kv_width], layers), "attention out": ([width, width], layers),
                "mlp fc": ([width, hidden], layers), "mlp proj": ([hidden, width], layers),
                "output head": ([width, model["vocab_size"]], 1)}
    size = BYTES_PER_ELEMENT[layout["dtype"]]
    if [row["kind"] for row in layout["rows"]] != list(expected):
        refuse(f"{field}.rows", f"list {[row['kind'] for row in layout['rows']]}, expected {list(expected)}")
    for index, row in enumerate(layout["rows"]):
        shape, count = expected[row["kind"]]
        if row["stored"] != LAYOUT[row["kind"]]:
            refuse(f"{field}.rows[{index}].stored", f"is {row['stored']}, the decoder stores {row['kind']} {LAYOUT[row['kind']]}")
        if row["shape_in_out"] != shape or row["matrices"] != count or row["bytes_per_matrix"] != shape[0] * shape[1] * size:
            refuse(f"{field}.rows[{index}]", f"describes {row['matrices']} matrices of {row['shape_in_out']}, "
                   f"{row['bytes_per_matrix']} bytes each; the config gives {count} of {shape}")


def check_profile(record: dict[str, Any], refuse: Any) -> None:
    profile, model = record["profile"], record["config"]["model"]
    bandwidth = record["hardware"]["bandwidth"].get(str(profile["threads"]))
    if bandwidth is None:
        refuse("profile.threads", f"is {profile['threads']}, a thread count the hardware section did not measure")
    needed = kind_bytes(model, profile["dtype"], profile["batch"], profile["context"])
    for mode, entry in profile["modes"].items():
        where = f"profile.modes.{mode}"
        if [row["kind"] for row in entry["rows"]] != KINDS:
            refuse(f"{where}.rows", f"list {[row['kind'] for row in entry['rows']]}, expected {KINDS}")
        for index, row in enumerate(entry["rows"]):
            floor = needed[row["kind"]] / bandwidth["bytes_per_s"] * 1e9
            if row["bytes"] != needed[row["kind"]] or not _close(row["floor_ns"], floor) \
                    or not _close(row["ratio_to_floor"], row["ns_per_step"] / floor):
                refuse(f"{where}.rows[{index}]", f"({row['kind']}) has bytes {row['bytes']} and floor "
                       f"{row['floor_ns']:g}; the config and bandwidth give {needed[row['kind']]} and {floor:g}")
        total = sum(row["ns_per_step"] for row in entry["rows"])
        if not math.isclose(entry["total_ns_per_step"], total, rel_tol=1e-6):
            refuse(f"{where}.total_ns_per_step", f"is {entry['total_ns_per_step']:g}, its rows add to {total:g}")


def check_client(client: dict[str, Any], refuse: Any) -> None:
    for mode, entry in client["modes"].items():
        where = f"client.modes.{mode}"
        for run, stamps in enumerate(entry["token_times_ns"]):
            if len(stamps) != client["new_tokens"] or stamps != sorted(stamps):
                refuse(f"{where}.token_times_ns[{run}]", f"holds {len(stamps)} times (ascending: "
                       f"{stamps == sorted(stamps)}), expected {client['new_tokens']} ascending")
        computed = client_summary(entry["token_times_ns"], client["new_tokens"])
        for name, value in computed.items():
            if not _close(entry[name], value):
                refuse(f"{where}.{name}", f"is {entry[name]:g}, the token times give {value:g}")
