"""Re-rotation drift: turning a stored key back one position at a time matches the exact rotation in float32
and drifts in bfloat16, further the more it is turned and further still when the turn's cos and sin are
rounded too; the sinks cache's re-rotated keys are exactly the probe's."""

from __future__ import annotations

import unittest

import torch

from kv_window.drift import exact_rotation, probe_frequencies, random_keys, rerotation_drift
from kv_window.rotary import Rotary
from kv_window.sinks import SinkStore


class Drift(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.keys, cls.inverse = random_keys(64, 32, seed=0), probe_frequencies(32, 1e4)

    def test_float32_stays_exact_and_bfloat16_drifts_more_with_every_shift(self) -> None:
        exact = rerotation_drift(self.keys, self.inverse, 300, [1, 16, 256], torch.float32, torch.float32)
        drifted = rerotation_drift(self.keys, self.inverse, 300, [1, 16, 256], torch.bfloat16, torch.bfloat16)
        self.assertLess(max(exact), 1e-4)
        self.assertEqual(drifted, sorted(drifted))
        self.assertGreater(drifted[-1], 10 * drifted[0])
        stored_only = rerotation_drift(self.keys, self.inverse, 300, [256], torch.bfloat16, torch.float32)
        self.assertLess(stored_only[0], drifted[-1])  # rounded cos and sin add a bias of their own

    def test_the_sinks_cache_holds_the_keys_the_probe_turns(self) -> None:
        """One key per step into a bfloat16 re-rotating cache: the oldest recent key entered at the last slot
        and has been shifted once a step since, exactly as the probe turns it."""
        sinks, slots, steps = 1, 8, 20
        store = SinkStore(sinks, slots, "rerotate", 1, 1, 32, torch.bfloat16, "cpu", Rotary(self.inverse))
        keys = random_keys(steps, 32, seed=1)
        for t in range(steps):
            entry = keys[t][None, None, None]
            position = torch.tensor([[t]])
            store.attend(torch.zeros(1, 1, 1, 32), entry, entry, position, position * 0)
        position = steps - 1 - (slots - sinks) + 1  # the oldest recent key still held
        slot = store.kept.positions[0, 0].tolist().index(position)
        shifts = steps - 1 - position
        stored = store.kept.keys[0, 0, slot]
        turned = Rotary(self.inverse).turn(keys[position].bfloat16()[None, None, None], torch.tensor([[slots - 1]]))
        for _ in range(shifts):
            turned = Rotary(self.inverse).shift(turned, -1)
        self.assertTrue(torch.equal(stored, turned[0, 0, 0]))
        exact = exact_rotation(keys[position], slots - 1 - shifts, self.inverse)
        self.assertLess(float((stored.double() - exact).norm() / exact.norm()), 0.1)

    def test_shift_counts_must_ascend(self) -> None:
        with self.assertRaisesRegex(ValueError, "ascending and positive"):
            rerotation_drift(self.keys, self.inverse, 10, [4, 2], torch.float32, torch.float32)


if __name__ == "__main__":
    unittest.main()
