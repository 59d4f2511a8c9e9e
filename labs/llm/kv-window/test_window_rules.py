"""The rules the caches' masks and slots follow, on plain ints (the pictures' inputs), and the policies'
parameters: each refusal is one line naming the number that is wrong."""

from __future__ import annotations

import unittest

from kv_window.config import Policy
from kv_window.figures import bucket_edges, drift_shifts, kept_bytes, layout_tokens, sample_positions
from kv_window.rules import most_shifts, packed_positions, packed_sequences, ring_slot, sink_slot, visible


class Visibility(unittest.TestCase):
    def test_a_query_sees_its_past_and_itself_but_not_its_future(self) -> None:
        self.assertTrue(visible(5, 5) and visible(5, 0))
        self.assertFalse(visible(5, 6))

    def test_a_window_keeps_the_newest_positions_and_the_sinks(self) -> None:
        seen = [key for key in range(10) if visible(9, key, window=3, sinks=2)]
        self.assertEqual(seen, [0, 1, 7, 8, 9])

    def test_a_sequence_never_sees_another(self) -> None:
        self.assertFalse(visible(3, 1, query_sequence=1, key_sequence=0))
        self.assertTrue(visible(3, 1, query_sequence=1, key_sequence=1))


class Slots(unittest.TestCase):
    def test_a_ring_gives_every_window_of_consecutive_positions_distinct_slots(self) -> None:
        for start in range(0, 30, 7):
            self.assertEqual(sorted(ring_slot(p, 8) for p in range(start, start + 8)), list(range(8)))

    def test_sinks_keep_their_slots_and_the_rest_share_a_ring(self) -> None:
        self.assertEqual([sink_slot(p, 2, 6) for p in range(10)], [0, 1, 2, 3, 4, 5, 2, 3, 4, 5])
        self.assertEqual(most_shifts(4, 256), 251)

    def test_packed_positions_restart_per_sequence(self) -> None:
        self.assertEqual(packed_positions([2, 3]), [0, 1, 0, 1, 2])
        self.assertEqual(packed_sequences([2, 3]), [0, 0, 1, 1, 1])
        self.assertEqual(layout_tokens([2, 3, 7]), {"packed": 12, "padded": 21, "alone": 12})


class Layout(unittest.TestCase):
    def test_buckets_double_after_the_window_and_samples_fall_after_the_first_eviction(self) -> None:
        self.assertEqual(bucket_edges(256, 4096), [0, 256, 512, 1024, 2048, 4096])
        samples = sample_positions(bucket_edges(256, 4096), 10)
        self.assertEqual(len(samples), 10)
        self.assertTrue(all(256 <= t < 4096 for t in samples) and samples == sorted(samples))
        self.assertIn(251, drift_shifts(256, 4))

    def test_bounded_policies_keep_flat_memory_and_the_full_cache_grows(self) -> None:
        full, ring, snap = Policy("full"), Policy("window", slots=8), Policy("snapkv", slots=8, observation=2)
        self.assertEqual(kept_bytes(full, 20, 2, 2, 16), 2 * kept_bytes(full, 10, 2, 2, 16))
        self.assertEqual(kept_bytes(ring, 1, 2, 2, 16), kept_bytes(ring, 100, 2, 2, 16))
        self.assertLess(kept_bytes(snap, 4, 2, 2, 16), kept_bytes(snap, 100, 2, 2, 16))
        self.assertEqual(kept_bytes(snap, 8, 2, 2, 16), kept_bytes(snap, 100, 2, 2, 16))


class Parameters(unittest.TestCase):
    def test_each_bad_parameter_is_one_clear_error(self) -> None:
        for kwargs, words in (({"name": "lru"}, "unknown cache policy 'lru'"),
                              ({"name": "sinks", "slots": 4, "sinks": 4}, r"sinks must lie in \[0, slots\) = \[0, 4\)"),
                              ({"rule": "shift"}, "sinks rule must be one of"),
                              ({"name": "snapkv", "slots": 8, "observation": 8}, "observation window"),
                              ({"kernel": 4}, "pooling kernel must be odd")):
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(ValueError, words):
                Policy(**kwargs)

    def test_labels_name_the_parameters_that_tell_policies_apart(self) -> None:
        self.assertEqual(Policy("sinks", rule="rerotate", dtype="bfloat16").label, "sinks-4-256-rerotate-bfloat16")
        self.assertEqual(Policy("window", slots=64).label, "window-64")


if __name__ == "__main__":
    unittest.main()
