"""The KV-cache lab's part of the site: its record's own checks, its cache-bytes view, its headline.

Torch-free: the site build imports this module (named by ``views`` in the lab's lab.toml) and nothing
else of the lab. The shared views (tests, environment, timing sweep, ...) come from site_hooks.
"""

from __future__ import annotations

from typing import Any

from labkit.records import RecordError
from site_hooks.orchestrate import Evidence
from site_hooks.templating import lab_renderer

render = lab_renderer(__file__)
WORKED_EXAMPLE = 128  # positions: the article's worked example of the byte formula


def cache_bytes(model: dict[str, Any], batch: int, length: int) -> int:
    """2 x B x Hkv x T x D x bytes per element, from a record's model config: the site's torch-free copy of
    kv_cache.memory.kv_cache_bytes, which the lab's tests check against the tensors themselves."""
    return 2 * batch * model["kv_heads"] * length * model["head_dim"] * model["bytes_per_element"]


def check_record(record: dict[str, Any], source: str) -> None:
    """Every loop decodes one position per step, and the stored bytes follow from the config."""
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    last = record["lengths"][-1]["length"]
    if record["precision"]["length"] != last:
        raise RecordError(f"{source}: field $.precision.length is {record['precision']['length']}, but the "
                          f"precision check runs at the longest length, {last}")
    for index, entry in enumerate(record["lengths"]):
        where = f"{source}: field $.lengths[{index}]"
        if entry["steps"] != entry["length"]:
            raise RecordError(f"{where}.steps is {entry['steps']}, but a loop over {entry['length']} positions "
                              f"makes {entry['length']} decode steps")
        expected = cache_bytes(model, batch, entry["length"])
        if entry["cache_bytes"] != {"formula": expected, "measured": expected}:
            raise RecordError(f"{where}.cache_bytes is {entry['cache_bytes']}, but 2 x B x Hkv x T x D x bytes "
                              f"gives {expected} from the record's config")


def cache_bytes_view(evidence: Evidence) -> str:
    """Bytes per position from the config; rows already checked against it by check_record."""
    record = evidence.record
    model, batch = record["config"]["model"], record["config"]["benchmark"]["batch"]
    per_position = cache_bytes(model, batch, length=1)
    rows = [{"length": e["length"], **e["cache_bytes"]} for e in record["lengths"]]
    last = rows[-1]
    example = cache_bytes(model, batch, WORKED_EXAMPLE)
    measured = next((row for row in rows if row["length"] == WORKED_EXAMPLE), None)
    example_source = ("the benchmark counted the same from the tensors" if measured else
                      "a length this record did not measure, so it comes from the formula alone")
    sentence = (
        f"With batch {batch}, {model['kv_heads']} key/value heads of width {model['head_dim']} and "
        f"{model['dtype']} ({model['bytes_per_element']} bytes per element), every retained position adds "
        f"2 × {batch} × {model['kv_heads']} × {model['head_dim']} × {model['bytes_per_element']} = "
        f"{per_position:,} bytes to this one-layer cache. At {WORKED_EXAMPLE} positions, the worked example, "
        f"that is {example:,} bytes ({example_source}); at {last['length']} positions, the longest measured, "
        f"the key and value tensors hold {last['formula']:,} bytes. At every measured length the bytes of the "
        f"real cache tensors equal the formula."
    )
    return render("cache_bytes.html.j2", sentence=sentence, rows=rows, per_position=per_position)


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Cached against full at the shortest and the longest length: ratios measured within one run."""
    first, last = record["lengths"][0], record["lengths"][-1]
    return [(f"full / cached at {entry['length']} tokens", entry["speedup"]["cached"]["ratio_of_medians"])
            for entry in (first, last)]


VIEWS = {"cache-bytes": cache_bytes_view}
