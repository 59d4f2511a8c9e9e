"""What the decode record's raw data must satisfy before anything is derived from it (``check_invariants``):
the lab's model, modes and tolerance, the grid, the rotation, the floor holding under every timed repetition.
Torch-free, run by the site build before any figure is derived from the record.
"""

from __future__ import annotations

from typing import Any

from decode_bandwidth.floors import MIN_BANDWIDTH_PASSES, READ_KERNELS, kernel_bytes
from decode_bandwidth.grid import ATOL, BASELINE, COMPILED, EQUIVALENCE_MODES, LAYOUT, MODES, RTOL, Cell, grid
from decode_bandwidth.llama_modes import (
    ATTENTION,
    KERNEL_CHOICES,
    KERNEL_SETS,
    LLAMA_ATOL,
    LLAMA_BASELINE,
    LLAMA_BATCH,
    LLAMA_DTYPE,
    LLAMA_FAST_ATOL,
    LLAMA_FAST_RTOL,
    LLAMA_MODES,
    LLAMA_PRESETS,
    LLAMA_REFERENCE,
    LLAMA_RTOL,
    LLAMA_WEIGHTS,
    QUALITY_POSITIONS,
    fastest_attention,
    fastest_kernel,
    kept_attempt,
    kernel_set,
    quality_positions,
    set_candidates,
)
from decode_bandwidth.traffic import KINDS, matrix_shapes, step_bytes
from labkit.figures import Figures, refuse, tolerance_bound
from labkit.records import JsonPath
from llm_models.kv_bytes import BYTES_PER_ELEMENT
from llm_models.llama.kinds import MATRIX_KINDS
from llm_models.llama.traffic import llama_step_bytes

from ..llama_modes import LLAMA_CHECKED
from .derivation import attempt_rates, hardware_figures, memory_floor_ns
from .formulas import llama_grid, rotations


def check_invariants(record: dict[str, Any], source: str) -> None:
    """What the raw data must satisfy before anything is derived from it: this lab's model, modes
    and tolerance; every mode within the tolerance; the grid the config asks for, one cell per group and
    mode, each with a duration and a fault count per repetition in the rotating order; enough bandwidth
    passes over a buffer beyond the cache; the layouts and profile kinds the decoder has; ascending token times."""
    model, bench = record["config"]["model"], record["config"]["benchmark"]
    if model["head_dim"] * model["heads"] != model["width"] or model["heads"] % model["kv_heads"]:
        refuse(source, ("config", "model"), f"has width {model['width']}, heads {model['heads']}, kv_heads "
               f"{model['kv_heads']} and head_dim {model['head_dim']}, which do not fit together")
    if model["bytes_per_element"] != BYTES_PER_ELEMENT.get(model["dtype"]):
        refuse(source, ("config", "model", "bytes_per_element"), f"is {model['bytes_per_element']} for dtype {model['dtype']}")
    if model["dtype"] != "float32":
        refuse(source, ("config", "model", "dtype"), f"is {model['dtype']}: the model is built in float32 and cast per dtype")
    if max(bench["contexts"]) > model["max_positions"]:
        refuse(source, ("config", "benchmark", "contexts"),
               f"reach {max(bench['contexts'])}, beyond {model['max_positions']} positions")
    if bench["modes"] != MODES or bench["baseline"] != BASELINE:
        refuse(source, ("config", "benchmark", "modes"), f"are {bench['modes']} with baseline {bench['baseline']!r}, "
               f"but this lab measures {MODES} with baseline {BASELINE!r}")
    in_force = record["environment"]["torch"]["threads"]
    if in_force != bench["threads"]:
        refuse(source, ("environment", "torch", "threads"),
               f"is {in_force}, but the headline grid ran at --threads {bench['threads']}")
    check_equivalence(record, source)
    check_hardware(record["hardware"], source, quick=bench.get("quick", False))
    check_compiled(record, source)
    check_groups(record, source)
    check_floor_holds(record, source)
    check_quality(record, source)
    check_layouts(record, source)
    check_profile(record, source)
    check_client(record["client"], source)
    check_llama(record, source)


def check_equivalence(record: dict[str, Any], source: str) -> None:
    tolerance, modes = record["tolerance"], record["equivalence"]["modes"]
    if (tolerance.get("atol"), tolerance.get("rtol")) != (ATOL, RTOL):
        refuse(source, ("tolerance",), f"is atol {tolerance.get('atol')}, rtol {tolerance.get('rtol')}; the "
               f"benchmark's equivalence check uses atol {ATOL}, rtol {RTOL}")
    if list(modes) != EQUIVALENCE_MODES:
        refuse(source, ("equivalence", "modes"), f"cover {list(modes)}, the benchmark compares {EQUIVALENCE_MODES}")
    for mode, entry in modes.items():
        if entry["within_tolerance"] is not True:
            refuse(source, ("equivalence", "modes", mode, "within_tolerance"), f"is {entry['within_tolerance']}: the "
                   "benchmark stops before timing when a mode disagrees, so a timed record cannot hold a miss")
        bound = tolerance_bound(tolerance["atol"], tolerance["rtol"], entry["max_abs_reference"])
        if entry["max_abs_diff"] > bound:
            refuse(source, ("equivalence", "modes", mode, "max_abs_diff"), f"is {entry['max_abs_diff']:g}, beyond "
                   f"atol + rtol x max|reference| = {bound:g}, yet within_tolerance is true")


def check_hardware(machine: dict[str, Any], source: str, quick: bool = False) -> None:
    llc = machine["last_level_cache_bytes"]
    if llc is not None and not quick and machine["buffer_bytes"] < 4 * llc:  # a smoke run's floor reads less
        refuse(source, ("hardware", "buffer_bytes"), f"is {machine['buffer_bytes']}, under 4 x the last-level cache ({llc})")
    for threads, entry in machine["bandwidth"].items():
        where: JsonPath = ("hardware", "bandwidth", threads)
        if entry["passes"] < MIN_BANDWIDTH_PASSES:
            refuse(source, (*where, "passes"), f"is {entry['passes']}, under the {MIN_BANDWIDTH_PASSES} passes the floor needs")
        if entry["buffer_bytes"] != machine["buffer_bytes"]:
            refuse(source, (*where, "buffer_bytes"), f"is {entry['buffer_bytes']}, not the {machine['buffer_bytes']} "
                   f"bytes of $.hardware.buffer_bytes")
        if sorted(entry["kernels"]) != sorted(READ_KERNELS):
            refuse(source, (*where, "kernels"), f"are {sorted(entry['kernels'])}, but the floor reads with "
                   f"{sorted(READ_KERNELS)}")
        for name, kernel in entry["kernels"].items():
            if len(kernel["durations_ns"]) != entry["passes"]:
                refuse(source, (*where, "kernels", name, "durations_ns"), f"holds {len(kernel['durations_ns'])} "
                       f"passes, not the {entry['passes']} its entry states")
            if kernel["bytes"] != kernel_bytes(name, entry["buffer_bytes"]):
                refuse(source, (*where, "kernels", name, "bytes"), f"is {kernel['bytes']}, but the {name} kernel "
                       f"moves {kernel_bytes(name, entry['buffer_bytes'])} bytes over its buffer")
    for key, entry in machine["matmul"].items():
        if entry["passes"] != len(entry["durations_ns"]):
            refuse(source, ("hardware", "matmul", key, "passes"), f"is {entry['passes']}, but it holds "
                   f"{len(entry['durations_ns'])} durations")


def check_compiled(record: dict[str, Any], source: str) -> None:
    """ours-compiled was compiled, before timing, at every (dtype, threads) the grid times it in."""
    timed = sorted({f"{dtype}/{threads}" for dtype, threads, _, _ in grid(record["config"]["benchmark"])})
    compiled = sorted(record["compiled"]["compile_s"])
    if compiled != timed:
        refuse(source, ("compiled", "compile_s"), f"covers {compiled}, but the grid times {COMPILED} at {timed}")


def check_groups(record: dict[str, Any], source: str) -> None:
    bench, machine = record["config"]["benchmark"], record["hardware"]
    repeats = bench["repeats"]
    keys = [(g["dtype"], g["threads"], g["batch"], g["context"]) for g in record["groups"]]
    if keys != grid(bench):
        refuse(source, ("groups",), f"cover {keys}, the config asks for {grid(bench)}")
    cells: dict[Cell, int] = {}
    for index, cell in enumerate(record["cells"]):
        key = (cell["dtype"], cell["threads"], cell["batch"], cell["context"], cell["mode"])
        if key in cells:
            refuse(source, ("cells", index), f"repeats the cell {key}")
        cells[key] = index
        for name, what in (("durations_ns", "repetitions"), ("minor_faults", "counts")):
            if len(cell[name]) != repeats:
                refuse(source, ("cells", index, name), f"has {len(cell[name])} {what}, one per repetition needs "
                       f"repeats = {repeats}")
    if len(cells) != len(keys) * len(MODES):
        refuse(source, ("cells",), f"hold {len(cells)} cells, {len(keys)} groups x {len(MODES)} modes need "
               f"{len(keys) * len(MODES)}")
    for index, (group, key) in enumerate(zip(record["groups"], keys)):
        if group["order"] != rotations(MODES, repeats):
            refuse(source, ("groups", index, "order"), f"is not {repeats} rotations of {MODES}")
        if str(group["threads"]) not in machine["bandwidth"] or f"{group['dtype']}/{group['threads']}" not in machine["matmul"]:
            refuse(source, ("groups", index), f"ran at {group['threads']} threads in {group['dtype']}, which the "
                   "hardware section did not measure")
        check_beside(machine, group, ("groups", index), source)
        for mode in MODES:
            if (*key, mode) not in cells:
                refuse(source, ("cells",), f"lack the {mode} cell of {key}")


def check_layouts(record: dict[str, Any], source: str) -> None:
    """The layout measurements: every matrix kind, counted from the model's tensors as the config gives them."""
    model, bench = record["config"]["model"], record["config"]["benchmark"]
    check_layout(model, record["layout"], ("layout",), source)
    if record["layout"]["dtype"] != "float32" or record["layout"]["batch"] != 1:
        refuse(source, ("layout",), f"is measured in {record['layout']['dtype']} at batch {record['layout']['batch']}; "
               "the stored layout is chosen on the float32 model at batch 1")
    for index, row in enumerate(record["layout"]["rows"]):
        if "compiled_ns" not in row:
            refuse(source, ("layout", "rows", index), f"lacks compiled_ns: the benchmark times {COMPILED}'s kernel "
                   "beside the library kernels at batch 1")
    larger = [batch for batch in bench["batches"] if batch > 1]
    measured = [layout["batch"] for layout in record["layout_batches"]]
    if measured != larger:
        refuse(source, ("layout_batches",), f"measure batches {measured}; the headline grid's batches above 1 are {larger}")
    for index, layout in enumerate(record["layout_batches"]):
        if layout["dtype"] != "float32":
            refuse(source, ("layout_batches", index, "dtype"), f"is {layout['dtype']}; these repeat the float32 measurement")
        check_layout(model, layout, ("layout_batches", index), source)
    timed = {bench["dtype"], bench["variant_dtype"]} - {None, "float32"}
    for dtype, layout in record.get("layout_other_dtypes", {}).items():
        if dtype not in timed or layout["dtype"] != dtype:
            refuse(source, ("layout_other_dtypes", dtype), f"holds a {layout['dtype']} measurement; the run timed "
                   f"{sorted(timed) or 'no dtype'} besides float32")
        check_layout(model, layout, ("layout_other_dtypes", dtype), source)
    batches = record["layout_batches_other_dtypes"]
    if sorted(batches) != sorted(record.get("layout_other_dtypes", {})):
        refuse(source, ("layout_batches_other_dtypes",), f"cover {sorted(batches)}, but the batch-1 layout was "
               f"measured in {sorted(record.get('layout_other_dtypes', {}))}")
    for dtype, layouts in batches.items():
        measured = [layout["batch"] for layout in layouts]
        if measured != larger:
            refuse(source, ("layout_batches_other_dtypes", dtype), f"measure batches {measured}; the headline grid's "
                   f"batches above 1 are {larger}")
        for index, layout in enumerate(layouts):
            if layout["dtype"] != dtype:
                refuse(source, ("layout_batches_other_dtypes", dtype, index, "dtype"), f"is {layout['dtype']}")
            check_layout(model, layout, ("layout_batches_other_dtypes", dtype, index), source)


def check_layout(model: dict[str, Any], layout: dict[str, Any], where: JsonPath, source: str) -> None:
    expected, size = matrix_shapes(model), BYTES_PER_ELEMENT[layout["dtype"]]
    kinds = [row["kind"] for row in layout["rows"]]
    if kinds != list(expected):
        refuse(source, (*where, "rows"), f"list {kinds}, expected {list(expected)}")
    for index, row in enumerate(layout["rows"]):
        (rows, cols), count = expected[row["kind"]]
        if row["stored"] != LAYOUT[row["kind"]]:
            refuse(source, (*where, "rows", index, "stored"), f"is {row['stored']}, the decoder stores {row['kind']} "
                   f"{LAYOUT[row['kind']]}")
        if row["shape_in_out"] != [rows, cols] or row["matrices"] != count or row["bytes_per_matrix"] != rows * cols * size:
            refuse(source, (*where, "rows", index), f"describes {row['matrices']} matrices of {row['shape_in_out']}, "
                   f"{row['bytes_per_matrix']} bytes each; the config gives {count} of {[rows, cols]}")


def check_profile(record: dict[str, Any], source: str) -> None:
    profile = record["profile"]
    if str(profile["threads"]) not in record["hardware"]["bandwidth"]:
        refuse(source, ("profile", "threads"), f"is {profile['threads']}, a thread count the hardware section did not measure")
    for mode, entry in profile["modes"].items():
        kinds = [row["kind"] for row in entry["rows"]]
        if kinds != KINDS:
            refuse(source, ("profile", "modes", mode, "rows"), f"list {kinds}, expected {KINDS}")


def check_client(client: dict[str, Any], source: str) -> None:
    for mode, entry in client["modes"].items():
        for run, stamps in enumerate(entry["token_times_ns"]):
            if len(stamps) != client["new_tokens"] or stamps != sorted(stamps):
                refuse(source, ("client", "modes", mode, "token_times_ns", run), f"holds {len(stamps)} times "
                       f"(ascending: {stamps == sorted(stamps)}), expected {client['new_tokens']} ascending")


def check_llama(record: dict[str, Any], source: str) -> None:
    """The trained model's section: its preset, modes, dtype, batch and tolerance as the code sets them; one
    equivalence per context, each within the tolerance; one group per (threads, context) in rotating order at
    thread counts the hardware section measured, two cells each with a duration per repetition; and no
    repetition under its memory floor."""
    section, where = record["llama"], ("llama",)
    if section["preset"] not in LLAMA_PRESETS:
        refuse(source, (*where, "preset"), f"is {section['preset']!r}, not one of {sorted(LLAMA_PRESETS)}")
    settings = {"modes": (section["modes"], LLAMA_MODES), "baseline": (section["baseline"], LLAMA_BASELINE),
                "dtype": (section["dtype"], LLAMA_DTYPE), "batch": (section["batch"], LLAMA_BATCH),
                "model": (section["model"]["dtype"], LLAMA_DTYPE)}
    for name, (found, needed) in settings.items():
        if found != needed:
            refuse(source, (*where, name), f"is {found!r}, but the benchmark times {needed!r}")
    model = section["model"]
    if model["heads"] % model["kv_heads"]:
        refuse(source, (*where, "model"), f"has {model['heads']} query heads, not a multiple of its "
               f"{model['kv_heads']} key/value heads")
    if max(section["contexts"]) > model["max_positions"]:
        refuse(source, (*where, "contexts"), f"reach {max(section['contexts'])}, beyond {model['max_positions']} positions")
    tolerance = section["tolerance"]
    if (tolerance.get("atol"), tolerance.get("rtol")) != (LLAMA_ATOL, LLAMA_RTOL):
        refuse(source, (*where, "tolerance"), f"is atol {tolerance.get('atol')}, rtol {tolerance.get('rtol')}; the "
               f"benchmark compares the two Llama steps with atol {LLAMA_ATOL}, rtol {LLAMA_RTOL}")
    fast_tolerance = section["fast_tolerance"]
    if (fast_tolerance.get("atol"), fast_tolerance.get("rtol")) != (LLAMA_FAST_ATOL, LLAMA_FAST_RTOL):
        refuse(source, (*where, "fast_tolerance"), f"is atol {fast_tolerance.get('atol')}, rtol "
               f"{fast_tolerance.get('rtol')}; the benchmark compares the fast modes with atol {LLAMA_FAST_ATOL}, "
               f"rtol {LLAMA_FAST_RTOL}")
    checked = [entry["context"] for entry in section["equivalence"]]
    if checked != section["contexts"]:
        refuse(source, (*where, "equivalence"), f"covers contexts {checked}, the timed ones are {section['contexts']}")
    for index, entry in enumerate(section["equivalence"]):
        bound = tolerance_bound(tolerance["atol"], tolerance["rtol"], entry["max_abs_reference"])
        if entry["within_tolerance"] is not True or entry["max_abs_diff"] > bound:
            refuse(source, (*where, "equivalence", index, "max_abs_diff"), f"is {entry['max_abs_diff']:g} at context "
                   f"{entry['context']} (atol + rtol x max|reference| = {bound:g}, within_tolerance "
                   f"{entry['within_tolerance']}): a step that disagrees with transformers is never timed")
        if sorted(entry["fast"]) != sorted(LLAMA_CHECKED):
            refuse(source, (*where, "equivalence", index, "fast"), f"checks {sorted(entry['fast'])}, the benchmark "
                   f"times {sorted(LLAMA_CHECKED)}")
        for mode, check in entry["fast"].items():
            bound = tolerance_bound(LLAMA_FAST_ATOL, LLAMA_FAST_RTOL, check["max_abs_reference"])
            if check["within_tolerance"] is not True or check["max_abs_diff"] > bound:
                refuse(source, (*where, "equivalence", index, "fast", mode, "max_abs_diff"), f"is "
                       f"{check['max_abs_diff']:g} at context {entry['context']} (bound {bound:g}): a fast mode that "
                       f"disagrees with its reference ({LLAMA_REFERENCE}, or it on the int8 round trip) is never timed")
    kernels = section["kernels"]
    if sorted(row["kind"] for row in kernels["rows"]) != sorted(MATRIX_KINDS):
        refuse(source, (*where, "kernels", "rows"), f"cover {[row['kind'] for row in kernels['rows']]}, the fast "
               f"modes multiply by {list(MATRIX_KINDS)}")
    if sorted(kernels["chosen"]) != sorted(KERNEL_SETS):
        refuse(source, (*where, "kernels", "chosen"), f"names {sorted(kernels['chosen'])}, the fast modes take "
               f"{sorted(KERNEL_SETS)}")
    for weights, compiled in KERNEL_CHOICES:
        chosen = kernel_set(weights, compiled)
        for row in kernels["rows"]:
            present = set_candidates(weights, compiled, list(row["kernels"]), kernels["traceable"])
            found = kernels["chosen"][chosen].get(row["kind"])
            if not present or found != fastest_kernel(row, present):
                refuse(source, (*where, "kernels", "chosen", chosen, row["kind"]), f"is {found!r}, but the table's "
                       f"fastest of {present} for it is {fastest_kernel(row, present) if present else None!r}")
    attention = section["attention"]
    if [row["context"] for row in attention["rows"]] != section["contexts"]:
        refuse(source, (*where, "attention", "rows"), f"cover contexts {[row['context'] for row in attention['rows']]}"
               f", the section's are {section['contexts']}")
    for index, row in enumerate(attention["rows"]):
        if "products" not in row["durations_ns"] or not set(row["durations_ns"]) <= set(ATTENTION):
            refuse(source, (*where, "attention", "rows", index, "durations_ns"), f"times {sorted(row['durations_ns'])}"
                   f": the products and at most the other ways of {list(ATTENTION)}")
        if row["max_abs_diff"] > attention["atol"]:
            refuse(source, (*where, "attention", "rows", index, "max_abs_diff"), f"is {row['max_abs_diff']:g}, beyond "
                   f"atol {attention['atol']:g}: ways that disagree are never timed")
    if attention["chosen"] != fastest_attention(attention["rows"]):
        refuse(source, (*where, "attention", "chosen"), f"is {attention['chosen']!r}, but the table's fastest is "
               f"{fastest_attention(attention['rows'])!r}")
    repeats, measured = section["repeats"], record["hardware"]
    keys = [(group["threads"], group["context"]) for group in section["groups"]]
    if keys != llama_grid(section):
        refuse(source, (*where, "groups"), f"cover {keys}, the section asks for {llama_grid(section)}")
    for index, group in enumerate(section["groups"]):
        if group["order"] != rotations(LLAMA_MODES, repeats):
            refuse(source, (*where, "groups", index, "order"), f"is not {repeats} rotations of {LLAMA_MODES}")
        if str(group["threads"]) not in measured["bandwidth"] or f"{LLAMA_DTYPE}/{group['threads']}" not in measured["matmul"]:
            refuse(source, (*where, "groups", index, "threads"), f"is {group['threads']}, a thread count the hardware "
                   f"section did not measure in {LLAMA_DTYPE}")
        check_beside(measured, group, (*where, "groups", index), source)
        check_round_floor(group, repeats, (*where, "groups", index), source)
        check_set_aside(measured, group, repeats, (*where, "groups", index), source)
    aside = sum(len(group["set_aside"]) for group in section["groups"])
    if aside > section["remeasure"]["limit"]:
        refuse(source, (*where, "groups"), f"set aside {aside} attempts; the section measures again at most "
               f"{section['remeasure']['limit']} times (remeasure.limit)")
    cells = [(cell["threads"], cell["context"], cell["mode"]) for cell in section["cells"]]
    expected = [(*key, mode) for key in keys for mode in LLAMA_MODES]
    if cells != expected:
        refuse(source, (*where, "cells"), f"are {cells}, the groups need {expected}")
    rates = hardware_figures(measured, Figures())
    for index, cell in enumerate(section["cells"]):
        if len(cell["durations_ns"]) != repeats:
            refuse(source, (*where, "cells", index, "durations_ns"), f"has {len(cell['durations_ns'])} repetitions, "
                   f"one per repetition needs repeats = {repeats}")
        needed = llama_step_bytes(model, BYTES_PER_ELEMENT[section["dtype"]], section["batch"], cell["context"],
                                  LLAMA_WEIGHTS[cell["mode"]])
        floor = memory_floor_ns(needed, rates[("bandwidth", str(cell["threads"]))])
        fastest = min(cell["durations_ns"])
        if fastest < floor:
            refuse(source, (*where, "cells", index, "durations_ns"), f"holds a step of {fastest} ns, under its memory "
                   f"floor of {floor:.0f} ns (Llama {cell['mode']}, {cell['threads']} thread(s), context "
                   f"{cell['context']}): the floor is not a bound on this machine")


def check_quality(record: dict[str, Any], source: str) -> None:
    """The int8 quality entry: the positions the code scores, one value per position for each model, misses
    that are positions, and two greedy answers of the stated length."""
    quality, where = record["llama"]["quality"], ("llama", "quality")
    positions = quality["positions"]
    if positions != quality_positions(record["llama"]["model"]["max_positions"]):
        refuse(source, (*where, "positions"), f"is {positions}, the benchmark scores {QUALITY_POSITIONS} positions "
               "(fewer only where the model holds fewer)")
    if sorted(quality["scores"]) != ["float32", "int8"]:
        refuse(source, (*where, "scores"), f"names {sorted(quality['scores'])}, not float32 and int8")
    for name, entry in quality["scores"].items():
        for field in ("nll", "kl"):
            if len(entry[field]) != positions:
                refuse(source, (*where, "scores", name, field), f"holds {len(entry[field])} values, one per position "
                       f"needs {positions}")
        misses = entry["top1_misses"]
        if misses != sorted(set(misses)) or any(not 0 <= index < positions for index in misses):
            refuse(source, (*where, "scores", name, "top1_misses"), f"are not distinct ascending positions below "
                   f"{positions}")
    if quality["scores"]["float32"]["top1_misses"] or any(quality["scores"]["float32"]["kl"]):
        refuse(source, (*where, "scores", "float32"), "differs from itself: the reference's KL and misses must be 0")
    greedy = quality["greedy"]
    for name, ids in greedy["ids"].items():
        if not 1 <= len(ids) <= greedy["new_tokens"]:
            refuse(source, (*where, "greedy", "ids", name), f"holds {len(ids)} tokens, 1 to {greedy['new_tokens']} "
                   "were asked for")


def check_round_floor(attempt: dict[str, Any], repeats: int, where: JsonPath, source: str) -> None:
    """An attempt's rounds read the floor by one of its own pass's kernels, once per round."""
    read = attempt["round_floor"]
    if read["kernel"] not in attempt["floor_ns"]:
        refuse(source, (*where, "round_floor", "kernel"), f"is {read['kernel']!r}, not one of the read kernels of "
               f"the group's own pass ({sorted(attempt['floor_ns'])})")
    if len(read["durations_ns"]) != repeats:
        refuse(source, (*where, "round_floor", "durations_ns"), f"holds {len(read['durations_ns'])} passes; one per "
               f"round needs repeats = {repeats}")


def check_set_aside(machine: dict[str, Any], group: dict[str, Any], repeats: int, where: JsonPath,
                    source: str) -> None:
    """A group's set-aside attempts were timed as the group was (every mode once per round, rotated), and the
    attempt the group keeps is the one whose reads ran fastest, as the benchmark chose (llama_modes.kept_attempt)."""
    for number, attempt in enumerate(group["set_aside"]):
        at = (*where, "set_aside", number)
        if attempt["order"] != rotations(LLAMA_MODES, repeats):
            refuse(source, (*at, "order"), f"is not {repeats} rotations of {LLAMA_MODES}")
        check_beside(machine, {**attempt, "threads": group["threads"]}, at, source)
        check_round_floor(attempt, repeats, at, source)
        if sorted(attempt["durations_ns"]) != sorted(LLAMA_MODES) or any(
                len(times) != repeats for times in attempt["durations_ns"].values()):
            refuse(source, (*at, "durations_ns"), f"must hold {repeats} steps of each of {LLAMA_MODES}")
    if group["set_aside"]:
        tries = attempt_rates(machine, group)
        if kept_attempt(tries) != 0:
            refuse(source, (*where, "round_floor"), f"is an attempt whose reads' median ran slower than set_aside "
                   f"{kept_attempt(tries) - 1}'s; the group keeps the attempt whose reads ran fastest")


def check_beside(machine: dict[str, Any], group: dict[str, Any], where: JsonPath, source: str) -> None:
    """A group's floor was read by the same kernels as the hardware section's at its thread count, one pass each."""
    measured = sorted(machine["bandwidth"][str(group["threads"])]["kernels"])
    if sorted(group["floor_ns"]) != measured:
        refuse(source, (*where, "floor_ns"), f"names the read kernels {sorted(group['floor_ns'])}; the hardware section "
               f"measured {measured} at {group['threads']} thread(s)")


def check_floor_holds(record: dict[str, Any], source: str) -> None:
    """No repetition of any timed cell may take less than its memory floor: a step that beat it would show
    that some kernel reads memory faster than every read kernel measured, so the floor would not be one."""
    rates = hardware_figures(record["hardware"], Figures())
    model = record["config"]["model"]
    for index, cell in enumerate(record["cells"]):
        needed = step_bytes(model, BYTES_PER_ELEMENT[cell["dtype"]], cell["batch"], cell["context"])
        floor = memory_floor_ns(needed, rates[("bandwidth", str(cell["threads"]))])
        fastest = min(cell["durations_ns"])
        if fastest < floor:
            refuse(source, ("cells", index, "durations_ns"), f"holds a step of {fastest} ns, under its memory floor of "
                   f"{floor:.0f} ns ({cell['mode']}, {cell['dtype']}, {cell['threads']} thread(s), batch "
                   f"{cell['batch']}, context {cell['context']}): the floor is not a bound on this machine")
