"""The bootstrap interval every lab's quality figures use (labkit.bootstrap)."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.bootstrap import interval, mean, resampled_indices


def test_the_same_seed_gives_the_same_interval_and_another_seed_a_different_one() -> None:
    values = np.random.default_rng(1).normal(size=200)
    assert interval(values, seed=3) == interval(values, seed=3)
    assert interval(values, seed=3) != interval(values, seed=4)


def test_the_interval_brackets_the_estimate_and_narrows_with_more_values() -> None:
    rng = np.random.default_rng(2)
    short, long = interval(rng.normal(size=100)), interval(rng.normal(size=10_000))
    for found in (short, long):
        assert found.low <= found.estimate <= found.high
    assert long.high - long.low < (short.high - short.low) / 5  # width shrinks as 1/sqrt(n): 10x here


def test_a_mean_of_a_normal_sample_gets_about_its_textbook_interval() -> None:
    values = np.random.default_rng(5).normal(size=2_000)
    found = interval(values, resamples=2_000)
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values))  # the normal approximation of the same interval
    assert found.high - found.low == pytest.approx(2 * half, rel=0.15)


def test_constant_values_give_an_interval_of_zero_width() -> None:
    found = interval([0.25] * 50)
    assert (found.low, found.estimate, found.high) == (0.25, 0.25, 0.25)


def test_blocks_resample_runs_of_consecutive_positions() -> None:
    indices = resampled_indices(10, block=5, resamples=4, seed=0)
    assert indices.shape == (4, 10)
    for row in indices:
        for run in (row[:5], row[5:]):
            assert list(np.diff(run)) == [1, 1, 1, 1]


def test_blocks_widen_the_interval_of_correlated_values() -> None:
    """A slowly drifting series: neighbours alike, so resampling single positions claims too much precision."""
    drift = np.repeat(np.random.default_rng(7).normal(size=40), 25)  # 40 runs of 25 equal values
    single, blocked = interval(drift), interval(drift, block=25)
    assert blocked.high - blocked.low > 2 * (single.high - single.low)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"values": []}, "at least one value"),
    ({"values": [1.0, 2.0], "block": 3}, "between 1 and the 2 values"),
    ({"values": [1.0], "level": 1.0}, "between 0 and 1, got 1.0"),
    ({"values": [1.0], "resamples": 0}, "at least one resample"),
    ({"values": [[1.0]]}, "one-dimensional"),
])
def test_bad_arguments_are_refused_with_the_numbers(kwargs: dict, message: str) -> None:
    values = kwargs.pop("values")
    with pytest.raises(ValueError, match=message):
        interval(values, **kwargs)


def test_every_resample_at_once_gives_the_interval_one_resample_at_a_time_gives() -> None:
    values = np.random.default_rng(9).normal(size=300)
    found = interval(values, lambda x: np.exp(np.mean(x, axis=-1)), block=8)
    rows = [np.exp(np.mean(values[row])) for row in resampled_indices(300, 8)]
    low, high = np.quantile(rows, [0.025, 0.975])
    assert (found.low, found.high) == pytest.approx((low, high), rel=1e-12)
    assert found.estimate == pytest.approx(np.exp(values.mean()), rel=1e-12)


def test_a_statistic_that_does_not_reduce_the_last_axis_is_refused_with_the_shape_it_gave() -> None:
    with pytest.raises(ValueError, match=r"reduces the last axis: over 1000 resamples of 5 values it gave shape \(\)"):
        interval([1.0, 2.0, 3.0, 4.0, 5.0], np.mean)  # the mean of the whole array, not of each resample
    assert interval([1.0, 2.0, 3.0], mean).estimate == 2.0


def test_kept_indices_cannot_be_edited_by_a_caller() -> None:
    with pytest.raises(ValueError, match="read-only"):
        resampled_indices(20, 4)[0, 0] = 3
