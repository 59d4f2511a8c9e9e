"""Bad input fails loudly, with the numbers that were wrong, before any computation."""

from __future__ import annotations

import unittest

import torch

from kv_cache.testing import TINY, random_ids
from llm_models.toy.model import DecoderBlock


class PositionCapacity(unittest.TestCase):
    model = DecoderBlock(TINY)  # 32 positions

    def test_a_sequence_longer_than_the_position_table_fails_in_one_call(self) -> None:
        ids = random_ids(1, TINY.max_positions + 1, seed=0)
        with self.assertRaisesRegex(ValueError, r"0 cached \+ 33 new positions = 33, beyond .* 32"):
            self.model(ids)

    def test_growing_a_cache_past_the_position_table_fails(self) -> None:
        ids = random_ids(1, TINY.max_positions + 1, seed=0)
        with torch.inference_mode():
            _, cache = self.model(ids[:, : TINY.max_positions - 1])
            _, cache = self.model(ids[:, 31:32], cache)  # exactly full: allowed
            self.assertEqual(cache[0].shape[-2], TINY.max_positions)
            with self.assertRaisesRegex(ValueError, r"32 cached \+ 1 new positions = 33, beyond .* 32"):
                self.model(ids[:, 32:33], cache)


class BadInputsAreRejected(unittest.TestCase):
    model = DecoderBlock(TINY)
    ids = random_ids(2, 4, seed=0)

    def cache(self, **changes: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = dict(batch=2, heads=TINY.heads, length=3, head_dim=TINY.head_dim) | changes
        keys = torch.zeros(shape["batch"], shape["heads"], shape["length"], shape["head_dim"])
        return keys, keys.clone()

    def test_zero_tokens(self) -> None:
        with self.assertRaisesRegex(ValueError, r"at least one token .* \(2, 0\)"):
            self.model(torch.zeros(2, 0, dtype=torch.long))

    def test_ids_that_are_not_two_dimensional(self) -> None:
        with self.assertRaisesRegex(ValueError, r"2-D .* got \(4,\)"):
            self.model(torch.zeros(4, dtype=torch.long))
        with self.assertRaisesRegex(ValueError, r"2-D .* got list"):
            self.model([[1, 2]])

    def test_ids_that_are_not_integers(self) -> None:
        with self.assertRaisesRegex(ValueError, r"int64 \(or int32\) token ids, got dtype torch.float32"):
            self.model(torch.zeros(2, 3))

    def test_small_integer_ids_that_embedding_would_reject_are_named(self) -> None:
        for dtype in (torch.int8, torch.int16, torch.uint8, torch.bool):
            with self.subTest(dtype=dtype), self.assertRaisesRegex(ValueError, rf"got dtype {dtype}$"):
                self.model(torch.zeros(2, 3, dtype=dtype))

    def test_int32_ids_are_accepted(self) -> None:
        with torch.inference_mode():
            logits, _ = self.model(self.ids.int())
        self.assertEqual(tuple(logits.shape), (2, 4, TINY.vocab_size))

    def test_token_ids_outside_the_vocabulary(self) -> None:
        with self.assertRaisesRegex(ValueError, r"\[0, 50\), got values from 0 to 50"):
            self.model(torch.tensor([[0, 50]]))
        with self.assertRaisesRegex(ValueError, r"\[0, 50\), got values from -1 to 3"):
            self.model(torch.tensor([[-1, 3]]))

    def test_cache_keys_and_values_of_different_shapes(self) -> None:
        keys, _ = self.cache()
        with self.assertRaisesRegex(ValueError, r"keys \(2, 4, 3, 8\) and values \(2, 4, 2, 8\)"):
            self.model(self.ids, (keys, keys[:, :, :2]))

    def test_cache_for_another_batch_size_head_count_or_head_width(self) -> None:
        for change, shown in [
            (dict(batch=1), r"\(1, 4, 3, 8\)"),
            (dict(heads=2), r"\(2, 2, 3, 8\)"),
            (dict(head_dim=16), r"\(2, 4, 3, 16\)"),
        ]:
            with self.subTest(**change), self.assertRaisesRegex(ValueError, shown + " does not fit"):
                self.model(self.ids, self.cache(**change))

    def test_cache_of_another_dtype_or_device(self) -> None:
        keys, values = self.cache()
        with self.assertRaisesRegex(ValueError, r"torch.float64 on cpu, the model is torch.float32"):
            self.model(self.ids, (keys.double(), values.double()))
        meta = torch.empty_like(keys, device="meta")
        with self.assertRaisesRegex(ValueError, r"on meta, the model is torch.float32 on cpu"):
            self.model(self.ids, (meta, meta))

    def test_cache_that_is_not_a_pair(self) -> None:
        keys, _ = self.cache()
        with self.assertRaisesRegex(ValueError, r"\(keys, values\) tuple"):
            self.model(self.ids, [keys])

    def test_cache_pair_that_holds_no_tensors(self) -> None:
        with self.assertRaisesRegex(ValueError, r"two tensors \(keys, values\), got \(list, list\)"):
            self.model(self.ids, ([0.0], [0.0]))


if __name__ == "__main__":
    unittest.main()
