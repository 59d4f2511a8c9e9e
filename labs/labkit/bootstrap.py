"""Bootstrap confidence intervals for a statistic of per-position values: how much a figure would move on
another sample of the same text.

A mean over a few hundred positions of one text (a log-likelihood, a KL divergence, a 0/1 agreement) is an
estimate, not a property of the model: the percentile bootstrap resamples the positions with replacement,
recomputes the statistic on each resample, and reports the central ``level`` share of those values. Seeded,
so the interval derived from a record's raw values is the same on every read. Neighbouring positions of one
text are not independent, so resampling them one by one understates the spread; ``block`` resamples runs of
that many consecutive positions instead (the moving-block bootstrap), which keeps their correlation inside a
run.

Torch-free: the figures modules that derive intervals when a record is read import this, and the site build
imports them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 1000  # enough for a 95% interval's ends to settle to about a tenth of its width
LEVEL = 0.95
SEED = 0


@dataclass(frozen=True)
class Interval:
    estimate: float  # the statistic on the values themselves
    low: float
    high: float

    def as_record(self) -> dict[str, float]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


def block_starts(count: int, block: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, ceil(count / block)) start indices of the runs each resample strings together."""
    runs = -(-count // block)
    generator = np.random.default_rng(seed)
    return generator.integers(0, count - block + 1, size=(resamples, runs))


@functools.lru_cache(maxsize=16)
def resampled_indices(count: int, block: int = 1, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, count) position indices: runs of ``block`` consecutive positions drawn with replacement,
    cut to ``count``. The same seed, count and block always give the same indices, so several statistics of
    one text (each policy's mean, or a difference of two) can be resampled at the same positions. Kept (read-only)
    for the next interval over as many values: a lab derives dozens over one text's positions."""
    if count < 1:
        raise ValueError(f"a bootstrap needs at least one value, got {count}")
    if not 1 <= block <= count:
        raise ValueError(f"a bootstrap block is between 1 and the {count} values, got {block}")
    if resamples < 1:
        raise ValueError(f"a bootstrap needs at least one resample, got {resamples}")
    starts = block_starts(count, block, resamples, seed)  # (R, runs)
    indices = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, -1)[:, :count]
    indices.flags.writeable = False
    return indices


def mean(values: np.ndarray) -> np.ndarray:
    """The mean along the last axis: one value for one series, one per resample for a (resamples, count) array."""
    return np.mean(values, axis=-1)


Statistic = Callable[[np.ndarray], "np.ndarray | float"]  # reduces the last axis: (..., count) -> (...)


def interval(values: Sequence[float], statistic: Statistic = mean, *,
             block: int = 1, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED) -> Interval:
    """The percentile bootstrap interval of ``statistic`` over ``values``. The statistic reduces the last axis
    (``mean``, or ``np.exp(np.mean(x, axis=-1))``): it is applied once to the (resamples, count) array of every
    resample, not once per resample, which a page's build derives a hundred times over (a Python loop of a
    thousand calls per interval was most of the quality labs' derivation time)."""
    if not 0 < level < 1:
        raise ValueError(f"a confidence level is between 0 and 1, got {level}")
    data = np.asarray(values, dtype=float)
    if data.ndim != 1:
        raise ValueError(f"bootstrap values must be one-dimensional, got shape {data.shape}")
    samples = np.asarray(statistic(data[resampled_indices(len(data), block, resamples, seed)]), dtype=float)
    if samples.shape != (resamples,):
        raise ValueError(f"a bootstrap statistic reduces the last axis: over {resamples} resamples of {len(data)} "
                         f"values it gave shape {samples.shape}, not ({resamples},)")
    tail = (1 - level) / 2
    low, high = np.quantile(samples, [tail, 1 - tail])
    return Interval(estimate=float(statistic(data)), low=float(low), high=float(high))
