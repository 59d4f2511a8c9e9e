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

    def settings(self) -> None:
        """One request at a time, one block size everywhere, a position table as long as the longest use."""
        bench, record = self.record["config"]["benchmark"], self.record
        self.expect("config.benchmark.batch", bench["batch"], 1, "the storage lab (one request at a time)")
        for field, stored in (("memory.block_size", record["memory"]["block_size"]),
                              ("sharing.block_size", record["sharing"]["block_size"])):
            self.expect(field, stored, bench["block_size"], "config.benchmark.block_size")
        longest = max(bench["lengths"][-1] + bench["window"], record["memory"]["length"],
                      record["sharing"]["prompt"] + record["sharing"]["tokens"])
        self.expect("config.model.max_positions", self.model["max_positions"], longest,
                    "the longest prefix + window, memory loop or shared prompt + tokens")
        self.expect("paging.length_range", record["paging"]["length_range"], [1, self.model["max_positions"]],
                    "[1, config.model.max_positions]")

    def steps(self) -> None:
        window = self.record["config"]["benchmark"]["window"]
        for index, entry in enumerate(self.record["lengths"]):
            self.expect(f"lengths[{index}].steps", entry["steps"], window, "the timed window (config.benchmark.window)")

    def memory(self) -> None:
        memory = self.record["memory"]
        expected = cache_bytes(self.model, self.model["kv_heads"], memory["length"])
        self.expect("memory.formula_bytes", memory["formula_bytes"], expected, "the config")
        retained = self.retained(self.model["kv_heads"], memory["length"], memory["block_size"])
        for mode, values in memory["variants"].items():
            self.expect(f"memory.variants.{mode}.retained_bytes", values["retained_bytes"], retained[mode],
                        f"{mode} storage of {memory['length']} positions")
            if values["peak_bytes"] < values["retained_bytes"]:
                self.refuse(f"memory.variants.{mode}.peak_bytes", f"is {values['peak_bytes']}, below the "
                            f"{values['retained_bytes']} bytes retained at the end")

    def retained(self, kv_heads: int, length: int, block_size: int) -> dict[str, int]:
        """Bytes each layout holds after a loop of ``length`` positions: exact, capacity, whole blocks."""
        exact = cache_bytes(self.model, kv_heads, length)
        return {"concat": exact, "prealloc": exact,
                "paged": blocks(length, block_size) * cache_bytes(self.model, kv_heads, block_size)}

    def gqa(self) -> None:
        """Every cached layout's bytes and agreement with full recompute, at every position of the memory loop."""
        tolerance = self.record["tolerance"]
        block_size = self.record["config"]["benchmark"]["block_size"]
        bench = self.record["config"]["benchmark"]
        cached = [mode for mode in bench["modes"] if mode != bench["baseline"]]
        for index, row in enumerate(self.record["gqa"]):
            where = f"gqa[{index}]"
            self.expect(f"{where}.heads", row["heads"], self.model["heads"], "config.model.heads")
            self.expect(f"{where}.length", row["length"], self.record["memory"]["length"],
                        "the memory loop's length (memory.length)")
            self.expect(f"{where}.positions_compared", row["positions_compared"], row["length"],
                        "every position of the loop")
            self.expect(f"{where}.formula_bytes", row["formula_bytes"],
                        cache_bytes(self.model, row["kv_heads"], row["length"]), "2 x Hkv x T x D x bytes")
            self.expect(f"{where}.layouts", sorted(row["layouts"]), sorted(cached),
                        "the cached modes of config.benchmark.modes")
            for mode, value in self.retained(row["kv_heads"], row["length"], block_size).items():
                layout = row["layouts"][mode]
                self.expect(f"{where}.layouts.{mode}.bytes", layout["bytes"], value, f"{mode} storage")
                if layout["max_abs_diff"] > tolerance["atol"] + tolerance["rtol"] * layout["max_abs_reference"]:
                    self.refuse(f"{where}.layouts.{mode}.max_abs_diff",
                                f"is {layout['max_abs_diff']:g}, beyond the tolerance")

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
    for check in (checker.settings, checker.steps, checker.memory, checker.gqa, checker.paging, checker.sharing):
        check()
