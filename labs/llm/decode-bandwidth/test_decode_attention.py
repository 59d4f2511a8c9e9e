"""One token's attention over a cache, two ways (decode_bandwidth.attention): the C loop gives the two products'
output at every stored length, reads no position past the token's, splits over threads, carries a fast twin's
step; the measurement refuses ways that disagree and picks the faster; the page words the comparison by whether
the passes parted."""

from __future__ import annotations

import unittest
from unittest import mock

import torch

from decode_bandwidth import attention, native
from decode_bandwidth.fast_llama import FastLlama
from decode_bandwidth.figures.derivation import attention_figures
from decode_bandwidth.llama_modes import ATTENTION_ATOL, fastest_attention
from decode_bandwidth_views.trained import attention_sentence
from labkit.figures import Figures, fill
from llm_models.llama.kinds import MATRIX_KINDS
from llm_models.llama.tiny import tiny_pair

# (Hkv, G, D): SmolLM2's heads (64 wide, 3 queries per key/value head: the AVX-512 or AVX2 path where the CPU has one), a
# narrow head and a wide group (the plain loops everywhere)
SHAPES = ((3, 3, 64), (2, 2, 16), (2, 5, 64))
CAPACITY = 37


def products(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, last: int) -> torch.Tensor:
    """The reference: the two products with positions 0 .. last visible."""
    return attention.attend_products(q, keys[0], values[0], torch.arange(keys.shape[2]) <= last)


class CAttention(unittest.TestCase):
    def test_the_c_loop_gives_the_products_output_at_every_stored_length(self) -> None:
        generator = torch.Generator().manual_seed(3)
        before = torch.get_num_threads()
        try:
            for kv_heads, group, dim in SHAPES:
                keys, values = (torch.randn(1, kv_heads, CAPACITY, dim, generator=generator) for _ in range(2))
                q = torch.randn(kv_heads, group, dim, generator=generator)
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    for position in (0, 1, 17, CAPACITY - 1):
                        with self.subTest(shape=(kv_heads, group, dim), threads=threads, position=position):
                            found = native.attend(q, keys, values, torch.tensor([position]))
                            torch.testing.assert_close(found, products(q, keys, values, position),
                                                       atol=ATTENTION_ATOL, rtol=0)
        finally:
            torch.set_num_threads(before)

    def test_a_loop_reading_one_position_too_many_or_too_few_fails_the_tolerance(self) -> None:
        generator = torch.Generator().manual_seed(4)
        keys, values = (torch.randn(1, 3, CAPACITY, 64, generator=generator) for _ in range(2))
        q = torch.randn(3, 3, 64, generator=generator)
        found = native.attend(q, keys, values, torch.tensor([17]))
        for wrong in (16, 18):
            with self.subTest(wrong=wrong):
                self.assertGreater(float((found - products(q, keys, values, wrong)).abs().max()), ATTENTION_ATOL)

    def test_the_c_loop_gives_float32_whatever_torchs_default_dtype(self) -> None:
        generator = torch.Generator().manual_seed(6)
        keys, values = (torch.randn(1, 3, 9, 64, generator=generator) for _ in range(2))
        q = torch.randn(3, 3, 64, generator=generator)
        before = torch.get_default_dtype()
        try:
            torch.set_default_dtype(torch.float64)
            found = native.attend(q, keys, values, torch.tensor([8]))
        finally:
            torch.set_default_dtype(before)
        self.assertEqual(found.dtype, torch.float32)
        torch.testing.assert_close(found, products(q, keys, values, 8), atol=ATTENTION_ATOL, rtol=0)

    def test_a_position_outside_the_cache_or_a_wrong_shape_is_refused_by_name(self) -> None:
        keys = values = torch.zeros(1, 3, 8, 64)
        with self.assertRaises(ValueError) as refused:
            native.attend(torch.zeros(3, 3, 64), keys, values, torch.tensor([8]))
        self.assertIn("position 8 is outside a cache of 8 positions", str(refused.exception))
        with self.assertRaises(ValueError) as refused:
            native.attend(torch.zeros(3, 3, 32), keys, values, torch.tensor([0]))
        self.assertIn("q (3, 3, 32)", str(refused.exception))

    def test_a_fast_twin_attending_through_the_c_loop_gives_the_decoders_logits(self) -> None:
        reference, model = tiny_pair(seed=0)
        generator = torch.Generator().manual_seed(5)
        prompt = torch.randint(0, model.config.vocab_size, (1, 7), generator=generator)
        for compiled in (False, True):
            twin = FastLlama(model, dict.fromkeys(MATRIX_KINDS, "out_in"), compiled, attention="c")
            ours, theirs = model.new_cache(1, 12), model.new_cache(1, 12)
            with self.subTest(compiled=compiled), torch.inference_mode():
                token = model(prompt, ours)[:, -1:].argmax(-1)
                model(prompt, theirs)
                for _ in range(5):  # the caches have room past the token: the loop must not read it
                    expected, found = model(token, ours), twin.step(token, theirs)
                    torch.testing.assert_close(found, expected, atol=1e-4, rtol=1e-4)
                    token = expected[:, -1:].argmax(-1)
        with self.assertRaises(ValueError):
            FastLlama(model, dict.fromkeys(MATRIX_KINDS, "out_in"), False, attention="flash")


class Measurement(unittest.TestCase):
    def test_the_faster_way_is_chosen_whichever_it_is(self) -> None:
        for supplied, expected in (({"products": 1.0, "c": 2.0}, "products"), ({"products": 2.0, "c": 1.0}, "c")):
            with self.subTest(expected=expected):
                table = attention.measure(2, 2, 2, 16, [5, 9], supplied_ns=supplied)
                self.assertEqual(table["chosen"], expected)
                self.assertEqual(table["timings"], "supplied")
                self.assertEqual([row["context"] for row in table["rows"]], [5, 9])
                self.assertEqual(fastest_attention(table["rows"]), expected)

    def test_ways_that_disagree_are_never_timed(self) -> None:
        right = native.attend

        def off_by_a_bit(q: torch.Tensor, *args: torch.Tensor) -> torch.Tensor:
            return right(q, *args) + 10 * ATTENTION_ATOL

        with mock.patch.object(attention.native, "attend", off_by_a_bit), self.assertRaises(ValueError) as refused:
            attention.measure(2, 2, 2, 16, [5], supplied_ns={"products": 1.0, "c": 2.0})
        self.assertIn("no timing taken", str(refused.exception))


def record_with(rows: list[dict], chosen: str, unavailable: dict[str, str] | None = None) -> dict:
    """A record holding only an attention table of these raw rows, its figures derived as the build derives them."""
    table = {"layers": 1, "passes": 3, "atol": ATTENTION_ATOL, "timings": "supplied", "unavailable": unavailable or {},
             "rows": rows, "chosen": chosen}
    record = {"llama": {"attention": table}}
    derived = Figures()
    attention_figures(table, derived)
    fill(record, derived)
    return record


def row(context: int, products_ns: list[int], c_ns: list[int] | None = None) -> dict:
    durations = {"products": products_ns} if c_ns is None else {"products": products_ns, "c": c_ns}
    return {"context": context, "bytes_per_layer": 1000, "max_abs_diff": 0.0, "durations_ns": durations}


class Wording(unittest.TestCase):
    def test_faster_is_said_only_where_every_pass_parted(self) -> None:
        clear = record_with([row(128, [10, 11, 12], [5, 6, 7]), row(1024, [80, 82, 84], [40, 41, 42])], "c")
        self.assertIn("the C loop was faster at every context", attention_sentence(clear))
        opposite = record_with([row(128, [5, 6, 7], [10, 11, 12]), row(1024, [40, 41, 42], [80, 82, 84])],
                               "products")
        self.assertIn("the two products were faster at every context", attention_sentence(opposite))
        self.assertIn("attend through the two products", attention_sentence(opposite))
        noisy = record_with([row(128, [5, 9, 12], [6, 8, 11]), row(1024, [40, 60, 80], [45, 50, 90])], "c")
        self.assertIn("within this run's noise", attention_sentence(noisy))
        self.assertNotIn("faster at every context", attention_sentence(noisy))
        partly = record_with([row(128, [10, 11, 12], [5, 6, 7]), row(1024, [40, 60, 80], [45, 50, 90])], "c")
        self.assertIn("parted only at context 128", attention_sentence(partly))

    def test_a_machine_without_the_c_loop_says_why(self) -> None:
        sentence = attention_sentence(record_with([row(128, [5, 6, 7])], "products",
                                                  {"c": "no C compiler: set CC, or install gcc"}))
        self.assertIn("Only the two products ran here (c: no C compiler", sentence)


if __name__ == "__main__":
    unittest.main()
