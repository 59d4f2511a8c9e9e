"""The kernel table's view: every kind and row count with each candidate's time and the one chosen, a bfloat16 table
without oneDNN's column, a supplied table said to be supplied, and record text escaped."""

from __future__ import annotations

import unittest
from typing import Any

from kv_serving_views.kernels import kernels_view
from site_hooks.blocks import render_block


def record(timings: str = "timed", with_onednn: bool = True, kind: str = "qkv", way: str = "torch") -> dict[str, Any]:
    def ns(out_in: float, in_out: float, onednn: float) -> dict[str, float]:
        return {"out_in": out_in, "in_out": in_out, **({"onednn": onednn} if with_onednn else {})}
    return {"trained": {"decode_way": way, "kernels": [{
        "dtype": "float32" if with_onednn else "bfloat16", "threads": 1, "passes": 3, "timings": timings,
        "rows": [{"kind": kind, "rows": 1, "shape_out_in": [960, 576], "matrices": 30, "ns": ns(154e3, 132e3, 169e3)},
                 {"kind": kind, "rows": 8, "shape_out_in": [960, 576], "matrices": 30, "ns": ns(324e3, 276e3, 251e3)}],
        "chosen": {kind: {"1": "in_out", "8": "onednn" if with_onednn else "in_out"}}}]}}


class KernelsView(unittest.TestCase):
    def test_each_row_count_shows_every_candidate_and_the_one_chosen(self) -> None:
        html = render_block(kernels_view(record()))
        self.assertIn("q, k and v (fused)", html)
        self.assertIn("960 × 576", html)
        for shown in ("0.154", "0.132", "0.169", "0.324", "0.276", "0.251", "timed on this run", "1 thread, float32", "Here, at 1 thread, best of 3 passes",
                      "chose by the 1-thread table"):
            self.assertIn(shown, html)
        self.assertEqual(html.count("<td>in_out</td>"), 1)
        self.assertEqual(html.count("<td>onednn</td>"), 1)

    def test_a_table_without_onednn_has_no_column_for_it_and_a_supplied_one_says_so(self) -> None:
        html = render_block(kernels_view(record(timings="supplied", with_onednn=False)))
        self.assertIn("<th>out_in</th><th>in_out</th><th>Chosen</th>", html)
        self.assertNotIn("onednn</th>", html)
        self.assertIn("supplied by the caller, not measured", html)

    def test_decode_steps_of_the_one_call_step_are_said_to_take_none_of_them(self) -> None:
        one_call, in_torch = (render_block(kernels_view(record(way=way))) for way in ("one call", "torch"))
        self.assertIn("the decode steps took none of these", one_call)
        self.assertIn("A short prefill multiplies a few rows by each weight matrix", one_call)
        self.assertNotIn("took none of these", in_torch)
        self.assertIn("A decode step alone multiplies one row by each weight matrix", in_torch)

    def test_a_kind_named_in_the_record_is_escaped(self) -> None:
        html = render_block(kernels_view(record(kind="<b>x</b>")))
        self.assertIn("&lt;b&gt;x&lt;/b&gt;", html)
        self.assertNotIn("<b>x</b>", html)
