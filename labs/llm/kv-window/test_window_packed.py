"""Packed sequences: several prompts in one row, a block-diagonal mask from their sequence ids and positions
restarting, give every prompt its own logits, as right-padded prefill does; a mask that is not block-diagonal
is caught; positions that do not restart are caught on the toy block's learned positions, and RoPE's relative
positions make them harmless on the Llama."""

from __future__ import annotations

import unittest

import torch

from kv_window.broken import LeakyPackedStore
from kv_window.config import Policy
from kv_window.decoder import WindowCache, forward, new_cache
from kv_window.packing import alone_logits, pack, packed_logits, padded_logits, unpack
from kv_window.rotary import Rotary
from kv_window.testing import TOLERANCE, TOY, random_ids, tiny_llama
from kv_window.toy import new_toy_cache, toy_forward
from llm_models.toy.model import DecoderBlock

LENGTHS = [5, 12, 3, 9]


def prompts(vocab_size: int) -> list[list[int]]:
    return [random_ids(length, seed=20 + i, vocab_size=vocab_size)[0].tolist() for i, length in enumerate(LENGTHS)]


class PackedOnTheLlama(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.model = tiny_llama(seed=14)
        cls.prompts = prompts(cls.model.config.vocab_size)
        with torch.inference_mode():
            cls.alone = alone_logits(cls.model, cls.prompts)

    def test_packed_and_padded_prefill_give_every_prompt_its_own_logits(self) -> None:
        with torch.inference_mode():
            for name, logits in (("packed", packed_logits(self.model, self.prompts)),
                                 ("padded", padded_logits(self.model, self.prompts, pad_id=0))):
                for index, (got, want) in enumerate(zip(logits, self.alone)):
                    with self.subTest(layout=name, prompt=index):
                        torch.testing.assert_close(got, want, **TOLERANCE)

    def test_a_mask_that_lets_one_prompt_see_another_is_caught_from_the_second_prompt_on(self) -> None:
        config, rotary = self.model.config, Rotary(self.model.inverse_frequencies)
        cache = WindowCache([LeakyPackedStore(1, config.kv_heads, config.head_dim, config.dtype, "cpu", rotary)
                             for _ in range(config.layers)])
        ids, positions, sequences = pack(self.prompts)
        with torch.inference_mode():
            leaked = unpack(forward(self.model, ids, cache, positions, sequences), LENGTHS)
        torch.testing.assert_close(leaked[0], self.alone[0], **TOLERANCE)
        self.assertGreater(float((leaked[1] - self.alone[1]).abs().max()), 0.1)

    def test_positions_that_run_on_across_prompts_change_nothing_under_rope(self) -> None:
        ids, _, sequences = pack(self.prompts)
        running = torch.arange(ids.shape[1])[None]  # not restarted: every prompt shifted by the ones before it
        with torch.inference_mode():
            logits = forward(self.model, ids, new_cache(self.model, Policy("full")), running, sequences)
        for got, want in zip(unpack(logits, LENGTHS), self.alone):
            torch.testing.assert_close(got, want, **TOLERANCE)  # rotation depends on distances only


class PackedOnTheToyBlock(unittest.TestCase):
    def test_packed_equals_alone_and_positions_that_do_not_restart_are_caught(self) -> None:
        block = DecoderBlock(TOY)
        texts = prompts(TOY.vocab_size)
        ids, positions, sequences = pack(texts)
        with torch.inference_mode():
            alone = [toy_forward(block, torch.tensor([text]), new_toy_cache(block, Policy("full")))[0]
                     for text in texts]
            packed = toy_forward(block, ids, new_toy_cache(block, Policy("full")), positions, sequences)
            running = toy_forward(block, ids, new_toy_cache(block, Policy("full")), torch.arange(ids.shape[1])[None],
                                  sequences)
        for got, want in zip(unpack(packed, LENGTHS), alone):
            torch.testing.assert_close(got, want, **TOLERANCE)
        self.assertGreater(float((unpack(running, LENGTHS)[1] - alone[1]).abs().max()), 0.1)


if __name__ == "__main__":
    unittest.main()
