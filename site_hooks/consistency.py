"""A record's numbers must agree with each other. A hand-edited figure is refused.

Shared checks: the header's timestamp is a real UTC time and its machine label names a file; a record
that declares a timing sweep (it has ``lengths``) has strictly ascending lengths that match its config
and fit the model's positions, the run order its policy states, statistics that follow from its raw
durations, and equivalence within its tolerance. What is specific to a lab's record is checked by the lab's own
``check_record`` (see labviews.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from labkit.bench import run_order
from labkit.figures import check, fill, refuse
from labkit.machines import LabelError, check_label
from labkit.records import RecordError
from labkit.summary import sweep_figures
from llm_models.kv_bytes import BYTES_PER_ELEMENT  # the labs' one table of element sizes

# No record of this project can predate it: records need PyTorch 2 (2023) and schema version 3. An
# earlier date is a clock that was never set (1970) or a hand edit, not a measurement.
EARLIEST_RECORD = datetime(2020, 1, 1, tzinfo=UTC)


def check_header(record: dict[str, Any], source: str) -> None:
    """The timestamp must be a real time, not only digits in the right places, and the machine label must
    name a file (the schema's pattern is checked again here, as labkit checks a label)."""
    try:
        check_label(record["machine"], f"{source}: field $.machine")
    except LabelError as error:
        raise RecordError(str(error)) from None
    try:
        created = datetime.strptime(record["created_utc"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError as error:
        refuse(source, ("created_utc",), f"is {record['created_utc']!r}, not a UTC time: {error}")
    if created > datetime.now(UTC) + timedelta(days=1):  # a day of clock skew between machines is tolerated
        refuse(source, ("created_utc",), f"is {record['created_utc']!r}, in the future")
    if created < EARLIEST_RECORD:
        refuse(source, ("created_utc",), f"is {record['created_utc']!r}, before "
                          f"{EARLIEST_RECORD:%Y-%m-%d}, earlier than any record of this project")


def check_config(record: dict[str, Any], source: str) -> None:
    """Derived model settings follow from the others, and the threads in force are the ones configured."""
    config = record.get("config", {})
    model, bench = config.get("model", {}), config.get("benchmark", {})
    if {"width", "heads", "head_dim"} <= model.keys() and model["head_dim"] * model["heads"] != model["width"]:
        refuse(source, ("config", "model", "head_dim"), f"is {model['head_dim']}, but width "
                          f"{model['width']} / heads {model['heads']} gives {model['width'] / model['heads']:g}")
    if {"dtype", "bytes_per_element"} <= model.keys() and \
            BYTES_PER_ELEMENT.get(model["dtype"]) != model["bytes_per_element"]:
        refuse(source, ("config", "model", "bytes_per_element"), f"is {model['bytes_per_element']}, but "
                          f"dtype {model['dtype']!r} has {BYTES_PER_ELEMENT.get(model['dtype'], 'unknown')}")
    threads = record["environment"]["torch"]["threads"]
    if "threads" in bench and bench["threads"] != threads:
        refuse(source, ("environment", "torch", "threads"), f"is {threads}, but "
                          f"$.config.benchmark.threads is {bench['threads']}")


def check_sweep(record: dict[str, Any], source: str) -> None:
    """Raise RecordError naming the first field of a timing sweep that the rest of the record contradicts."""
    bench = record["config"]["benchmark"]
    modes, baseline = bench["modes"], bench["baseline"]
    if baseline not in modes:
        refuse(source, ("config", "benchmark", "baseline"), f"{baseline!r} is not one of {modes}")
    lengths = record["lengths"]
    measured = [entry["length"] for entry in lengths]
    if measured != sorted(set(measured)):  # every check, sentence and view takes the last as the longest
        refuse(source, ("lengths",), f"holds lengths {measured}, not strictly ascending "
                          f"(each length once, shortest first)")
    if measured != bench["lengths"]:
        refuse(source, ("lengths",), f"holds lengths {measured}, "
                          f"but $.config.benchmark.lengths says {bench['lengths']}")
    model = record["config"].get("model", {})
    if "max_positions" in model and model["max_positions"] < measured[-1]:
        refuse(source, ("config", "model", "max_positions"), f"is {model['max_positions']}, but the "
                          f"sweep decoded {measured[-1]} positions at its longest length")
    for index, entry in enumerate(lengths):
        check_entry(entry, index, source, record, modes, baseline)
    figures = sweep_figures(record)  # min/median/max and speedups, from the raw durations
    check(record, figures, source)  # a stored one must equal its derivation; the others are derived here
    fill(record, figures)


def check_entry(entry: dict[str, Any], index: int, source: str, record: dict[str, Any], modes: list[str],
                baseline: str) -> None:
    at = ("lengths", index)
    others = sorted(m for m in modes if m != baseline)
    repeats = record["config"]["benchmark"]["repeats"]
    if sorted(entry["modes"]) != sorted(modes):
        refuse(source, (*at, "modes"), f"holds the modes {sorted(entry['modes'])}, but the config's modes are {modes}")
    if len(entry["order"]) != repeats:
        refuse(source, (*at, "order"), f"has {len(entry['order'])} repetitions, config says repeats = {repeats}")
    for repetition, order in enumerate(entry["order"]):
        if sorted(order) != sorted(modes):
            refuse(source, (*at, "order", repetition), f"is {order}, not an order of the modes {modes}")
        if record["config"]["benchmark"].get("order_policy", "").startswith("rotate:") and \
                order != run_order(modes, repetition):  # labkit.bench.ORDER_POLICY
            refuse(source, (*at, "order", repetition), f"is {order}, but the record's rotating order policy runs "
                   f"{run_order(modes, repetition)} in repetition {repetition + 1}")
    for mode in modes:
        count = len(entry["modes"][mode]["durations_ns"])
        if count != repeats:
            refuse(source, (*at, "modes", mode, "durations_ns"), f"holds {count} durations, config says repeats = {repeats}")
    for name in ("equivalence", "speedup"):  # speedup: derived when read, checked here where a record stores it
        if name in entry and sorted(entry[name]) != others:
            refuse(source, (*at, name), f"covers {sorted(entry[name])}, expected {others}")
    tolerance = record["tolerance"]
    for mode, comparison in entry["equivalence"].items():
        bound = tolerance["atol"] + tolerance["rtol"] * comparison["max_abs_reference"]
        if comparison["max_abs_diff"] > bound:
            refuse(source, (*at, "equivalence", mode, "max_abs_diff"), f"is {comparison['max_abs_diff']:g}, beyond "
                   f"atol + rtol x max|reference| = {bound:g}, yet within_tolerance is true")
