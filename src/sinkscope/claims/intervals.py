"""Intervals of the claims' measured values, each from the value's own sampling unit.

A verdict is decided on an interval, never on a point (:func:`sinkscope.claims.verdicts.decide`):

* :func:`wilson_interval`: a binomial proportion ``k / n`` (Wilson 1927, the score interval;
  it keeps its coverage near 0 and 1, where the Wald interval collapses to a point).
* :func:`newcombe_difference`: the difference of two independent proportions ``k1/n1 - k2/n2``
  (Newcombe 1998, "Interval estimation for the difference between independent proportions",
  Stat. Med. 17:873-890, method 10: the hybrid score interval built from the two Wilson
  intervals).
* :func:`bootstrap_interval`: any statistic of resampled units (percentile bootstrap, Efron and
  Tibshirani 1993, ch. 13), for values with no closed form (means of per-token differences,
  ratios of means). The generator is seeded, so a table is byte-identical between two runs.
* :func:`block_bootstrap_interval`: the same for a series whose neighbours are correlated
  (the NLLs of consecutive tokens of one stream): the moving-block bootstrap (Kuensch 1989,
  "The jackknife and the bootstrap for general stationary observations", Ann. Stat.
  17:1217-1241) resamples runs of ``block`` consecutive units, which keeps the correlation
  within a block; a plain bootstrap of correlated units gives too narrow an interval.

Where an interval straddles the tolerance, :func:`needed_units` says how many sampling units an
interval of the same shape would need to decide (the power statement of an inconclusive row).

The level, the number of resamples and the seed are the config's ``claims.intervals`` keys
(their reasons are in ``workflow/schemas/config.schema.yaml``).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

__all__ = [
    "block_bootstrap_interval",
    "bootstrap_interval",
    "needed_units",
    "newcombe_difference",
    "normal_quantile",
    "percentile_interval",
    "row_seed",
    "sample_and_resample_counts",
    "wilson_interval",
]


def row_seed(seed: int, *key: str) -> list[int]:
    """The seed of one claims row's resampling: the config's ``claims.intervals.seed`` and a
    stable hash (CRC-32) of the row's ``key`` (model, dataset, ...), so that every row draws its
    own resamples, the same in every run and whatever the order the rows are read in."""
    return [int(seed), zlib.crc32("/".join(key).encode())]


def sample_and_resample_counts(n: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(1 + n_resamples, n)`` counts of ``n`` units: the sample (every unit once), then
    ``n_resamples`` draws of ``n`` units with replacement. A statistic that is a function of
    count-weighted sums (a mean over the drawn units: ``counts @ values / n``) is then computed
    on the sample and on every resample in one product; a stratified bootstrap draws each
    stratum's counts on its own."""
    if n < 1:
        raise ValueError(f"a resample needs at least one unit, got {n}")
    return np.vstack([np.ones(n), rng.multinomial(n, np.full(n, 1.0 / n), n_resamples)])


def percentile_interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile interval (Efron and Tibshirani 1993, ch. 13) of bootstrap ``draws`` at
    ``level``: their ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (linear
    interpolation; the order statistics where some draws are infinite)."""
    normal_quantile(level)  # checks the level
    alpha = (1.0 - level) / 2.0
    draws = np.asarray(draws, dtype=np.float64)
    # draws with infinities (a ratio over a flat curve): order statistics, no interpolation
    method = "linear" if np.isfinite(draws).all() else "inverted_cdf"
    low, high = np.quantile(draws, [alpha, 1.0 - alpha], method=method)
    return float(low), float(high)


def normal_quantile(level: float) -> float:
    """``z`` with ``P(|Z| <= z) = level`` for a standard normal ``Z`` (1.96 at 0.95)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"an interval's level must lie in (0, 1), got {level}")
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of the proportion ``k / n``: the ``p`` whose score test against
    ``k`` successes in ``n`` trials does not reject at ``1 - level``,
    ``(p_hat + z^2/2n -+ z sqrt(p_hat (1 - p_hat)/n + z^2/4n^2)) / (1 + z^2/n)``."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"a proportion needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    z = normal_quantile(level)
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denominator = 1 + z * z / n
    # at k = 0 (k = n) the lower (upper) end is exactly 0 (1): centre and spread are both z^2/2n
    low = 0.0 if k == 0 else max(0.0, (centre - spread) / denominator)
    high = 1.0 if k == n else min(1.0, (centre + spread) / denominator)
    return low, high


def newcombe_difference(
    k1: int, n1: int, k2: int, n2: int, level: float = 0.95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval of ``k1/n1 - k2/n2`` (two independent samples), from the
    Wilson intervals ``(l1, u1)`` and ``(l2, u2)``: ``d - sqrt((p1 - l1)^2 + (u2 - p2)^2)`` to
    ``d + sqrt((u1 - p1)^2 + (p2 - l2)^2)``."""
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1, level)
    l2, u2 = wilson_interval(k2, n2, level)
    d = p1 - p2
    return d - math.hypot(p1 - l1, u2 - p2), d + math.hypot(u1 - p1, p2 - l2)


def bootstrap_interval(
    units: np.ndarray,
    statistic: Callable[[np.ndarray], float],
    n_resamples: int,
    seed: int | Sequence[int],
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over the rows of ``units`` (one row per
    sampling unit: a token, a stream, a head, a seed), resampled with replacement
    ``n_resamples`` times by a generator seeded with ``seed`` (an int or :func:`row_seed`)."""
    units = np.asarray(units)
    if units.shape[0] < 2:
        raise ValueError(f"a bootstrap needs at least two sampling units, got {units.shape[0]}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    alpha = (1.0 - level) / 2.0
    normal_quantile(level)  # checks the level
    rng = np.random.default_rng(seed)
    n = units.shape[0]
    draws = np.array([statistic(units[rng.integers(n, size=n)]) for _ in range(n_resamples)])
    low, high = np.nanquantile(draws, [alpha, 1.0 - alpha])
    return float(low), float(high)


def block_bootstrap_interval(
    series: np.ndarray,
    statistic: Callable[[np.ndarray], float],
    block: int,
    n_resamples: int,
    seed: int,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile moving-block bootstrap interval of ``statistic`` over the rows of ``series``
    (in their order: one row per position of a stream). Each resample joins ``ceil(n / block)``
    runs of ``block`` consecutive rows, each starting at a uniformly drawn row ``0..n - block``,
    and keeps the first ``n`` rows; ``block = 1`` is :func:`bootstrap_interval`'s resampling.
    A series shorter than two blocks has too few independent pieces for an interval."""
    series = np.asarray(series)
    n = series.shape[0]
    if block < 1:
        raise ValueError(f"a block holds at least one unit, got {block}")
    if n < 2 * block:
        raise ValueError(
            f"a block bootstrap needs at least two blocks: {n} units, blocks of {block}"
        )
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    alpha = (1.0 - level) / 2.0
    normal_quantile(level)  # checks the level
    rng = np.random.default_rng(seed)
    n_blocks = -(-n // block)
    offsets = np.arange(block)
    draws = np.empty(n_resamples)
    for i in range(n_resamples):
        starts = rng.integers(n - block + 1, size=n_blocks)
        draws[i] = statistic(series[(starts[:, None] + offsets).ravel()[:n]])
    low, high = np.nanquantile(draws, [alpha, 1.0 - alpha])
    return float(low), float(high)


def needed_units(n: int, value: float, low: float, high: float, tolerance: float) -> int | None:
    """About how many sampling units (``n`` now) an interval ``[low, high]`` of ``value`` would
    need to lie wholly on ``value``'s side of ``tolerance``, at the same effect: the interval's
    reach towards the tolerance shrinks as ``1 / sqrt(n)`` (the rate of every interval here), so
    ``n x (reach / |value - tolerance|)^2``, rounded up; ``n`` when it already lies there, None
    when ``value`` sits on the tolerance (no sample decides it)."""
    gap = value - tolerance
    if n <= 0 or gap == 0 or not all(map(math.isfinite, (value, low, high, tolerance))):
        return None
    reach = value - low if gap > 0 else high - value
    if reach < abs(gap):
        return n
    return math.ceil(n * (reach / abs(gap)) ** 2)
