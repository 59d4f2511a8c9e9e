"""The one-request step's weight share, said as what two separate timings can say."""

from __future__ import annotations

import unittest

from kv_serving_views.steps import weights_sentence


def record(share: float) -> dict:
    return {"step_times": [{"batch": 1, "weights_share": share}, {"batch": 8, "weights_share": 0.2}]}


class WeightShare(unittest.TestCase):
    def test_a_share_under_the_whole_step_is_said_as_measured(self) -> None:
        self.assertIn("the weight multiplications alone took 80% of the step: a one-request step is mostly",
                      weights_sentence(record(0.8)))
        self.assertIn("took 30% of the step: most of a one-request step is attention", weights_sentence(record(0.3)))

    def test_a_share_over_the_whole_step_is_not_said_as_a_fact(self) -> None:
        said = weights_sentence(record(1.01))
        self.assertIn("took about all of the step (101%: two separate timings", said)
        self.assertNotIn("took 101% of the step", said)


if __name__ == "__main__":
    unittest.main()
