"""A record's stored statistics must be what its raw repetitions give; a hand-edited number is refused."""

from __future__ import annotations

import math
from typing import Any

from labkit.records import RecordError
from labkit.summary import STATISTICS, speedup_frame, statistics_frame


def check_statistics(record: dict[str, Any], source: str) -> None:
    """Raise RecordError naming the first stored figure that the raw durations contradict."""
    lengths = record["lengths"]
    modes = record["config"]["benchmark"]["modes"]
    baseline = record["config"]["benchmark"]["baseline"]
    for index, entry in enumerate(lengths):
        where = f"{source}: field $.lengths[{index}]"
        if sorted(entry["modes"]) != sorted(modes) or any(sorted(o) != sorted(modes) for o in entry["order"]):
            raise RecordError(f"{where} does not hold exactly the modes {modes}")
        compared = sorted(m for m in modes if m != baseline)
        if sorted(entry["equivalence"]) != compared:
            raise RecordError(f"{where}.equivalence compares {sorted(entry['equivalence'])}, expected {compared}")
        counts = {len(entry["modes"][m]["durations_ns"]) for m in modes}
        if counts != {len(entry["order"])}:
            raise RecordError(f"{where}: {len(entry['order'])} repetitions in order but durations counts {sorted(counts)}")
    if baseline not in modes:
        raise RecordError(f"{source}: field $.config.benchmark.baseline {baseline!r} is not one of {modes}")
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
