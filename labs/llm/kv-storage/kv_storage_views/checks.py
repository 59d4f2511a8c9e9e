"""Every figure of the storage record that follows from others is recomputed; a hand edit is refused."""

from __future__ import annotations

import math
from typing import Any

from labkit.records import RecordError


def cache_bytes(model: dict[str, Any], kv_heads: int, length: int) -> int:
    """2 x Hkv x T x D x bytes for one request (the storage lab decodes one at a time)."""
    return 2 * kv_heads * length * model["head_dim"] * model["bytes_per_element"]


def blocks(positions: int, block_size: int) -> int:
    return -(-positions // block_size)


class Checker:
    def __init__(self, record: dict[str, Any], source: str) -> None:
        self.record, self.source = record, source
        self.model = record["config"]["model"]

    def refuse(self, field: str, message: str) -> None:
        raise RecordError(f"{self.source}: field $.{field} {message}")

    def expect(self, field: str, stored: Any, computed: Any, how: str) -> None:
        if stored != computed:
            self.refuse(field, f"is {stored}, but {how} gives {computed}")

    def steps(self) -> None:
        window = self.record["config"]["benchmark"]["window"]
        for index, entry in enumerate(self.record["lengths"]):
            self.expect(f"lengths[{index}].steps", entry["steps"], window, "the timed window (config.benchmark.window)")

    def memory(self) -> None:
        memory = self.record["memory"]
        expected = cache_bytes(self.model, self.model["kv_heads"], memory["length"])
        self.expect("memory.formula_bytes", memory["formula_bytes"], expected, "the config")
        for mode, values in memory["variants"].items():
            if not expected <= values["retained_bytes"] <= values["peak_bytes"]:
                self.refuse(f"memory.variants.{mode}", f"has retained {values['retained_bytes']} and peak "
                            f"{values['peak_bytes']}: a cache of {expected} bytes needs formula <= retained <= peak")

    def gqa(self) -> None:
        tolerance = self.record["tolerance"]
        for index, row in enumerate(self.record["gqa"]):
            expected = cache_bytes(self.model, row["kv_heads"], row["length"])
            if (row["formula_bytes"], row["concat_bytes"], row["prealloc_bytes"]) != (expected,) * 3 \
                    or row["paged_bytes"] < expected:
                self.refuse(f"gqa[{index}]", f"bytes disagree with 2 x {row['kv_heads']} x {row['length']} x D "
                            f"x bytes = {expected}")
            if row["max_abs_diff"] > tolerance["atol"] + tolerance["rtol"] * row["max_abs_reference"]:
                self.refuse(f"gqa[{index}].max_abs_diff", f"is {row['max_abs_diff']:g}, beyond the tolerance")

    def paging(self) -> None:
        paging = self.record["paging"]
        lengths = paging["request_lengths"]
        self.expect("paging.requests", paging["requests"], len(lengths), "the number of request_lengths")
        self.expect("paging.used_slots", paging["used_slots"], sum(lengths), "the sum of request_lengths")
        low, high = paging["length_range"]
        if not all(low <= n <= high for n in lengths):
            self.refuse("paging.request_lengths", f"holds a length outside length_range [{low}, {high}]")
        for index, row in enumerate(paging["rows"]):
            size, where = row["block_size"], f"paging.rows[{index}]"
            in_use = sum(blocks(n, size) for n in lengths)
            self.expect(f"{where}.blocks_in_use", row["blocks_in_use"], in_use, f"blocks of {size} for request_lengths")
            self.expect(f"{where}.table_entries", row["table_entries"], in_use, "one table entry per block")
            self.expect(f"{where}.allocated_slots", row["allocated_slots"], in_use * size, "blocks x block_size")
            self.expect(f"{where}.wasted_slots", row["wasted_slots"], in_use * size - sum(lengths),
                        "allocated - used slots")
            if not math.isclose(row["waste_share"], row["wasted_slots"] / row["allocated_slots"]):
                self.refuse(f"{where}.waste_share", f"is {row['waste_share']}, not wasted / allocated slots")

    def sharing(self) -> None:
        s = self.record["sharing"]
        n, prompt, size = s["requests"], s["prompt"], s["block_size"]
        per_request = blocks(prompt + s["tokens"], size)
        full_prompt_blocks, partial = divmod(prompt, size)
        # Every request but the last copies a partly filled shared block on its first write; the last
        # one finds itself its sole owner and writes in place.
        copies = n - 1 if partial and s["tokens"] else 0
        block_bytes = cache_bytes(self.model, self.model["kv_heads"], size)
        expected = {
            "block_bytes": block_bytes,
            "without.blocks": n * per_request,
            "without.bytes": n * per_request * block_bytes,
            "with.prompt_blocks": blocks(prompt, size),
            "with.shared_blocks": full_prompt_blocks if partial and s["tokens"] else blocks(prompt, size),
            "with.copied_blocks": copies,
            "with.blocks": full_prompt_blocks + n * (per_request - full_prompt_blocks),
        }
        expected["with.bytes"] = expected["with.blocks"] * block_bytes
        expected["saved_bytes"] = expected["without.bytes"] - expected["with.bytes"]
        for field, value in expected.items():
            part, _, name = field.rpartition(".")
            stored = (s[part] if part else s)[name]
            self.expect(f"sharing.{field}", stored, value, f"{n} requests, a {prompt}-token prompt, "
                        f"{s['tokens']} tokens each and blocks of {size}")


def check_record(record: dict[str, Any], source: str) -> None:
    """Raise RecordError naming the first field the rest of the record contradicts."""
    checker = Checker(record, source)
    for check in (checker.steps, checker.memory, checker.gqa, checker.paging, checker.sharing):
        check()
