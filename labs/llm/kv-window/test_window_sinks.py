"""Sinks + window: with rotate-at-read, every step equals recomputing the kept tokens at positions 0 .. n - 1;
re-rotated keys give the same in float32 and drift in bfloat16; a chunk gets exactly what one token at a time
would. Valid with random weights and random tensors."""

from __future__ import annotations

import unittest

import torch

from kv_window.config import Policy
from kv_window.decoder import forward, new_cache
from kv_window.rotary import Rotary
from kv_window.rules import visible
from kv_window.sinks import SinkStore
from kv_window.testing import ONE_LAYER, TOLERANCE, kept_attention, random_ids, tiny_llama

SINKS, SLOTS = 2, 8


def kept_tokens(step: int) -> list[int]:
    """The positions a sinks + window cache holds at ``step``, the step's own included: written out."""
    recent = range(max(SINKS, step - (SLOTS - SINKS) + 1), step + 1)
    return list(range(min(SINKS, step + 1))) + list(recent)


def decode(model, ids: torch.Tensor, policy: Policy, chunks: list[int]) -> torch.Tensor:
    cache, out, start = new_cache(model, policy), [], 0
    with torch.inference_mode():
        for size in chunks:
            out.append(forward(model, ids[:, start:start + size], cache))
            start += size
    return torch.cat(out, dim=1)


class AgainstRecomputation(unittest.TestCase):
    def test_on_one_layer_every_step_equals_a_fresh_pass_over_the_kept_tokens(self) -> None:
        """With one layer a key depends on its token alone, so recomputing the kept tokens at 0 .. n - 1 is a
        fresh pass over them: the cache must give that pass's last logits at every step, both rules."""
        model, ids = tiny_llama(seed=4, config=ONE_LAYER), random_ids(40, seed=5)
        for rule in ("read", "rerotate"):
            logits = decode(model, ids, Policy("sinks", slots=SLOTS, sinks=SINKS, rule=rule), [1] * 40)
            with torch.inference_mode():
                fresh = torch.stack([model(ids[:, kept_tokens(t)])[0, -1] for t in range(40)])
            with self.subTest(rule=rule):
                torch.testing.assert_close(logits[0], fresh, **TOLERANCE)

    def test_each_step_of_the_store_equals_attention_over_the_kept_keys_at_in_cache_positions(self) -> None:
        """Random queries, keys and values, one step at a time: the read rule's output against the kept keys
        rotated at 0 .. n - 1 by hand, the query at n - 1."""
        generator = torch.Generator().manual_seed(6)
        inverse = tiny_llama(seed=0).inverse_frequencies
        store = SinkStore(SINKS, SLOTS, "read", 1, 2, 16, torch.float32, "cpu", Rotary(inverse))
        keys, values = [], []
        for step in range(30):
            q = torch.randn(1, 4, 1, 16, generator=generator)
            k, v = torch.randn(1, 2, 1, 16, generator=generator), torch.randn(1, 2, 1, 16, generator=generator)
            keys.append(k)
            values.append(v)
            position = torch.tensor([[step]])
            got = store.attend(q, k, v, position, torch.zeros_like(position))
            kept = kept_tokens(step)
            want = kept_attention(q, torch.cat([keys[t] for t in kept], 2), torch.cat([values[t] for t in kept], 2),
                                  inverse)
            torch.testing.assert_close(got, want, **TOLERANCE)

    def test_the_store_masks_its_slots_with_the_rule_the_pictures_draw(self) -> None:
        model = tiny_llama(seed=0)
        cache = new_cache(model, Policy("sinks", slots=SLOTS, sinks=SINKS))
        with torch.inference_mode():
            forward(model, random_ids(20, seed=7), cache)
        kept = sorted(cache.layers[0].kept.positions[0, 0].tolist())
        self.assertEqual(kept, [p for p in range(20) if visible(19, p, window=SLOTS - SINKS, sinks=SINKS)])


class PositionRules(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.model, cls.ids = tiny_llama(seed=8), random_ids(50, seed=9)

    def test_a_chunk_gets_what_one_token_at_a_time_would_for_both_rules(self) -> None:
        for rule in ("read", "rerotate"):
            policy = Policy("sinks", slots=SLOTS, sinks=SINKS, rule=rule)
            steps = decode(self.model, self.ids, policy, [1] * 50)
            for chunks in ([7] * 7 + [1], [20, 30]):
                with self.subTest(rule=rule, chunks=chunks):
                    torch.testing.assert_close(decode(self.model, self.ids, policy, chunks), steps, **TOLERANCE)

    def test_in_float32_re_rotated_keys_give_what_rotation_at_read_gives(self) -> None:
        read = decode(self.model, self.ids, Policy("sinks", slots=SLOTS, sinks=SINKS), [10] * 5)
        rerotated = decode(self.model, self.ids, Policy("sinks", slots=SLOTS, sinks=SINKS, rule="rerotate"), [10] * 5)
        torch.testing.assert_close(rerotated, read, **TOLERANCE)

    def test_a_bfloat16_chunk_re_rotates_each_key_as_often_as_one_step_at_a_time_does(self) -> None:
        """Random tensors fed to two stores: the keys they hold after the same positions are bit for bit equal."""
        generator = torch.Generator().manual_seed(10)
        inverse = self.model.inverse_frequencies
        stores = [SinkStore(SINKS, SLOTS, "rerotate", 1, 2, 16, torch.bfloat16, "cpu", Rotary(inverse))
                  for _ in range(2)]
        q, k, v = (torch.randn(1, heads, 30, 16, generator=generator) for heads in (4, 2, 2))
        positions = torch.arange(30)[None]
        outputs = [stores[0].attend(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], positions[:, t:t + 1],
                                    positions[:, t:t + 1] * 0) for t in range(30)]
        chunked = [stores[1].attend(q[:, :, s:s + 10], k[:, :, s:s + 10], v[:, :, s:s + 10], positions[:, s:s + 10],
                                    positions[:, s:s + 10] * 0) for s in (0, 10, 20)]
        self.assertTrue(torch.equal(stores[0].kept.keys, stores[1].kept.keys))
        torch.testing.assert_close(torch.cat(chunked, 2), torch.cat(outputs, 2), **TOLERANCE)


if __name__ == "__main__":
    unittest.main()
