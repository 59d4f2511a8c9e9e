"""A record's numbers must agree with each other: stored statistics with the raw durations, the
lengths with the config, equivalence with the tolerance. A hand-edited figure is refused."""

from __future__ import annotations

import math
from typing import Any

from labkit.records import RecordError
from labkit.summary import STATISTICS, speedup_frame, statistics_frame


def check_statistics(record: dict[str, Any], source: str) -> None:
    """Raise RecordError naming the first field that the rest of the record contradicts."""
    bench = record["config"]["benchmark"]
    modes, baseline = bench["modes"], bench["baseline"]
    if baseline not in modes:
        raise RecordError(f"{source}: field $.config.benchmark.baseline {baseline!r} is not one of {modes}")
    lengths = record["lengths"]
    measured = [entry["length"] for entry in lengths]
    if measured != bench["lengths"]:
        raise RecordError(f"{source}: field $.lengths holds lengths {measured}, "
                          f"but $.config.benchmark.lengths says {bench['lengths']}")
    for index, entry in enumerate(lengths):
        check_entry(entry, f"{source}: field $.lengths[{index}]", record, modes, baseline)
    check_stored_statistics(lengths, source, modes, baseline)
    check_memory_sections(record, source)


def check_entry(entry: dict[str, Any], where: str, record: dict[str, Any], modes: list[str], baseline: str) -> None:
    others = sorted(m for m in modes if m != baseline)
    repeats = record["config"]["benchmark"]["repeats"]
    if sorted(entry["modes"]) != sorted(modes) or any(sorted(order) != sorted(modes) for order in entry["order"]):
        raise RecordError(f"{where} does not hold exactly the modes {modes}")
    if len(entry["order"]) != repeats:
        raise RecordError(f"{where}.order has {len(entry['order'])} repetitions, config says repeats = {repeats}")
    counts = sorted({len(entry["modes"][m]["durations_ns"]) for m in modes})
    if counts != [repeats]:
        raise RecordError(f"{where}.modes: durations per mode {counts}, config says repeats = {repeats}")
    for name in ("equivalence", "speedup"):
        if sorted(entry[name]) != others:
            raise RecordError(f"{where}.{name} covers {sorted(entry[name])}, expected {others}")
    tolerance = record["tolerance"]
    for mode, comparison in entry["equivalence"].items():
        bound = tolerance["atol"] + tolerance["rtol"] * comparison["max_abs_reference"]
        if comparison["max_abs_diff"] > bound:
            raise RecordError(f"{where}.equivalence.{mode}.max_abs_diff is {comparison['max_abs_diff']:g}, "
                              f"beyond atol + rtol x max|reference| = {bound:g}, yet within_tolerance is true")
    if "cache_bytes" in entry:
        check_cache_bytes(entry, where, record)


def cache_bytes(model: dict[str, Any], batch: int, kv_heads: int, length: int) -> int:
    """2 x B x Hkv x T x D x bytes per element, from a record's model config: the site's one copy of
    kv_cache.memory.kv_cache_bytes (importing the lab would pull torch into every build)."""
    return 2 * batch * kv_heads * length * model["head_dim"] * model["bytes_per_element"]


def check_cache_bytes(entry: dict[str, Any], where: str, record: dict[str, Any]) -> None:
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    expected = cache_bytes(model, batch, model["kv_heads"], entry["length"])
    if entry["cache_bytes"] != {"formula": expected, "measured": expected}:
        raise RecordError(f"{where}.cache_bytes is {entry['cache_bytes']}, but 2 x B x Hkv x T x D x bytes "
                          f"gives {expected} from the record's config")


def check_stored_statistics(lengths: list[dict[str, Any]], source: str, modes: list[str], baseline: str) -> None:
    stats = statistics_frame(lengths)
    speedups = speedup_frame(lengths, baseline)
    for index, entry in enumerate(lengths):
        for mode in modes:
            for name in STATISTICS:
                stored, computed = entry["modes"][mode][name], float(stats.loc[(entry["length"], mode), name])
                if not math.isclose(stored, computed, rel_tol=1e-9):
                    raise RecordError(f"{source}: field $.lengths[{index}].modes.{mode}.{name} is {stored}, "
                                      f"but its raw durations give {computed:g}")
        for mode, values in entry["speedup"].items():
            for name, stored in values.items():
                computed = float(speedups.loc[(entry["length"], mode), name])
                if not math.isclose(stored, computed, rel_tol=1e-9):
                    raise RecordError(f"{source}: field $.lengths[{index}].speedup.{mode}.{name} is {stored}, "
                                      f"but the raw durations give {computed:g}")


def check_memory_sections(record: dict[str, Any], source: str) -> None:
    """The storage sections: bytes agree with the config and with each other, counts with their parts."""
    model = record["config"]["model"]

    def formula(kv_heads: int, length: int) -> int:
        return cache_bytes(model, 1, kv_heads, length)  # the storage lab decodes one request at a time

    def refuse(field: str, message: str) -> None:
        raise RecordError(f"{source}: field $.{field} {message}")

    if "memory" in record:
        memory = record["memory"]
        expected = formula(model["kv_heads"], memory["length"])
        if memory["formula_bytes"] != expected:
            refuse("memory.formula_bytes", f"is {memory['formula_bytes']}, the config gives {expected}")
        for mode, values in memory["variants"].items():
            if values["retained_bytes"] < expected or values["peak_bytes"] < values["retained_bytes"]:
                refuse(f"memory.variants.{mode}", f"has retained {values['retained_bytes']} and peak "
                       f"{values['peak_bytes']}: a cache of {expected} bytes needs formula <= retained <= peak")
    tolerance = record["tolerance"]
    for index, row in enumerate(record.get("gqa", [])):
        expected = formula(row["kv_heads"], row["length"])
        if (row["formula_bytes"], row["concat_bytes"], row["prealloc_bytes"]) != (expected,) * 3 \
                or row["paged_bytes"] < expected:
            refuse(f"gqa[{index}]", f"bytes disagree with 2 x {row['kv_heads']} x {row['length']} x D x bytes "
                   f"= {expected}")
        if row["max_abs_diff"] > tolerance["atol"] + tolerance["rtol"] * row["max_abs_reference"]:
            refuse(f"gqa[{index}].max_abs_diff", f"is {row['max_abs_diff']:g}, beyond the tolerance")
    if "paging" in record:
        used = record["paging"]["used_slots"]
        for index, row in enumerate(record["paging"]["rows"]):
            wasted = row["allocated_slots"] - used
            if row["allocated_slots"] != row["blocks_in_use"] * row["block_size"] or row["wasted_slots"] != wasted \
                    or not math.isclose(row["waste_share"], wasted / row["allocated_slots"]):
                refuse(f"paging.rows[{index}]", f"does not add up: {row['blocks_in_use']} blocks of "
                       f"{row['block_size']} for {used} used slots")
    if "sharing" in record:
        sharing = record["sharing"]
        for name in ("without", "with"):
            if sharing[name]["bytes"] != sharing[name]["blocks"] * sharing["block_bytes"]:
                refuse(f"sharing.{name}.bytes", f"is not {sharing[name]['blocks']} blocks x {sharing['block_bytes']}")
        if sharing["saved_bytes"] != sharing["without"]["bytes"] - sharing["with"]["bytes"]:
            refuse("sharing.saved_bytes", f"is {sharing['saved_bytes']}, not without - with")
