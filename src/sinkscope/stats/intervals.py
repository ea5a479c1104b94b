"""Intervals of the claims' measured values, each from the value's own sampling unit.

A verdict is decided on an interval, never on a point (:func:`sinkscope.claims.verdicts.decide`):

* :func:`wilson_interval`: a binomial proportion ``k / n`` (Wilson 1927, the score interval;
  it keeps its coverage near 0 and 1, where the Wald interval collapses to a point).
* :func:`newcombe_difference`: the difference of two independent proportions ``k1/n1 - k2/n2``
  (Newcombe 1998, "Interval estimation for the difference between independent proportions",
  Stat. Med. 17:873-890, method 10: the hybrid score interval built from the two Wilson
  intervals).
* :func:`bootstrap_t_interval`: any statistic of resampled units (means over sequences, ratios
  of means, maxima and shares over heads), for values with no closed form: a t-interval with a
  bootstrap standard error, ``value -+ t_{n-1} sqrt(n / (n - 1)) sd(draws)`` (Efron and
  Tibshirani 1993, ch. 12-13; the ``n / (n - 1)`` undoes the plug-in variance's shrink, and the
  quantile of Student's t with ``n - 1`` degrees of freedom, :func:`student_t_quantile`, gives
  the interval of a mean of normal units its exact level at every ``n``; a percentile interval
  covers 89% at 8 units for a nominal 95%). :func:`bootstrap_interval` draws the resamples of
  any statistic of a unit array and builds it. The generator is seeded, so a table is
  byte-identical between two runs. The coverage of each kind of statistic the claims read, at the
  sample sizes the runs have, is measured by simulation (:mod:`sinkscope.claims.coverage`).
* :func:`block_bootstrap_interval`: the same for a series whose neighbours are correlated
  (the NLLs of consecutive tokens of one stream): the moving-block bootstrap (Kuensch 1989,
  "The jackknife and the bootstrap for general stationary observations", Ann. Stat.
  17:1217-1241) resamples runs of ``block`` consecutive units, which keeps the correlation
  within a block; a plain bootstrap of correlated units gives too narrow an interval. Its
  degrees of freedom count the blocks.

* :func:`fieller_interval`: a ratio of two paired means (StreamingLLM's recovered fraction), by
  inverting the paired t-test of the linear combination (Fieller 1954): exact for normal pairs,
  and unbounded, honestly, where the denominator's mean is not resolved from zero.

* :func:`simultaneous_t_intervals`: one such interval per head (or layer) at a Bonferroni
  level, all holding together at ``level``; a maximum, a minimum or a thresholded share over the
  heads is bounded by the same function of their ends (:func:`share_bounds`).

Where an interval straddles the tolerance, :func:`needed_units` says how many sampling units an
interval of the same shape would need to decide (the power statement of an inconclusive row).

The level, the number of resamples and the seed are the config's ``claims.intervals`` keys
(their reasons are in ``workflow/schemas/config.schema.yaml``).
"""

from __future__ import annotations

import math
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = [
    "block_bootstrap_interval",
    "bootstrap_interval",
    "bootstrap_t_interval",
    "fieller_interval",
    "needed_units",
    "newcombe_difference",
    "normal_quantile",
    "row_seed",
    "sample_and_resample_counts",
    "share_bounds",
    "simultaneous_t_intervals",
    "student_t_quantile",
    "student_t_within",
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


def student_t_quantile(level: float, dof: float) -> float:
    """``t`` with ``P(|T| <= t) = level`` for Student's ``T`` with ``dof`` degrees of freedom
    (12.706 at 1, 2.365 at 7, 2.093 at 19 for a 95% level), by bisection on
    :func:`student_t_within`; the normal quantile beyond 10,000 degrees of freedom (they differ
    by under 1e-4 there)."""
    z = normal_quantile(level)
    if dof < 1:
        raise ValueError(f"Student's t needs at least one degree of freedom, got {dof}")
    dof = int(dof)
    if dof > 10_000:
        return z
    low, high = z, z
    while student_t_within(high, dof) < level:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if student_t_within(middle, dof) < level:
            low = middle
        else:
            high = middle
        if high - low < 1e-10 * high:
            break
    return 0.5 * (low + high)


def student_t_within(t: float, dof: int) -> float:
    """``P(|T| <= t)`` for Student's ``T`` with an integer ``dof``: the closed series of
    Abramowitz and Stegun (1964), 26.7.3 (odd) and 26.7.4 (even), in ``theta = atan(t /
    sqrt(dof))``."""
    if dof < 1 or int(dof) != dof:
        raise ValueError(f"an integer number of degrees of freedom >= 1 is needed, got {dof}")
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(dof))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if dof % 2 == 0:  # sin(theta) (1 + c^2/2 + 1.3/(2.4) c^4 + ... up to c^(dof-2))
        term, total = 1.0, 1.0
        for k in range(2, dof, 2):
            term *= c2 * (k - 1) / k
            total += term
        return min(1.0, s * total)
    if dof == 1:
        return 2.0 * theta / math.pi
    # (2/pi) (theta + sin(theta) cos(theta) (1 + 2/3 c^2 + 2.4/(3.5) c^4 + ... up to c^(dof-3)))
    term, total = 1.0, 1.0
    for k in range(3, dof - 1, 2):
        term *= c2 * (k - 1) / k
        total += term
    return min(1.0, 2.0 / math.pi * (theta + s * math.sqrt(c2) * total))


def bootstrap_t_interval(
    value: float, draws: np.ndarray, n_units: int, level: float, dof: int | None = None
) -> tuple[float, float]:
    """The t-interval with a bootstrap standard error of a statistic whose value on the sample
    is ``value`` and whose bootstrap ``draws`` resampled ``n_units`` units:
    ``value -+ t sqrt(n / (n - 1)) sd(draws)``, with ``t`` Student's quantile at ``level`` and
    ``dof`` degrees of freedom (``n_units - 1`` unless given: a stratified bootstrap counts
    ``sum(n_h - 1)`` over its strata, and passes its smallest stratum as ``n_units``, whose
    shrink ``(n - 1) / n`` is the largest to undo).

    For the mean of ``n`` normal units this is the t-interval, exact at every ``n`` (the
    bootstrap variance of a mean is ``(n - 1) / n`` of its unbiased estimate); for smooth
    functions of means it is the delta-method t-interval. NaN draws (a resample the statistic
    leaves undefined) are left out; infinite draws make that end of the interval infinite (a
    ratio over a flat curve: no finite spread describes it). Draws that do not vary give a
    point: every resample, hence every unit, agrees."""
    if n_units < 2:
        raise ValueError(f"an interval needs at least two sampling units, got {n_units}")
    draws = np.asarray(draws, dtype=np.float64)
    draws = draws[~np.isnan(draws)]
    if draws.size < 2 or not math.isfinite(value):
        return (-math.inf, math.inf)
    finite = draws[np.isfinite(draws)]
    t = student_t_quantile(level, n_units - 1 if dof is None else dof)
    if finite.size < 2:
        spread = math.inf
    elif finite.min() == finite.max():  # no resample moves it (std would leave rounding dust)
        spread = 0.0
    else:
        spread = t * math.sqrt(n_units / (n_units - 1)) * float(finite.std(ddof=1))
    low = -math.inf if (draws == -math.inf).any() else value - spread
    high = math.inf if (draws == math.inf).any() else value + spread
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


def simultaneous_t_intervals(
    values: np.ndarray,
    draws: np.ndarray,
    n_units: int,
    level: float,
    dof: int | None = None,
    family: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Simultaneous intervals of many statistics of the same sampling units (one per head, say):
    each ``values[j]``'s :func:`bootstrap_t_interval` from the column ``draws[:, j]`` at the
    Bonferroni level ``1 - (1 - level) / family`` (``family``: the number of intervals that
    must hold together, ``values.size`` unless given), so that all of them cover together with
    probability at least ``level`` whatever their dependence (Bonferroni's inequality). A
    maximum over the columns then lies in ``[max(low), max(high)]`` and a share of columns over
    a threshold between the shares of ``low`` and of ``high`` over it, at ``level`` at least
    (:func:`share_bounds`): the interval of a maximum, a minimum or a thresholded share that the
    bootstrap of the statistic itself does not give (a share is discontinuous in the units, and
    its bootstrap under-covers as the units grow: :mod:`sinkscope.claims.coverage`). A column
    whose draws are all NaN gets ``(-inf, inf)``."""
    values = np.asarray(values, dtype=np.float64).ravel()
    draws = np.asarray(draws, dtype=np.float64).reshape(-1, values.size)
    if n_units < 2:
        raise ValueError(f"an interval needs at least two sampling units, got {n_units}")
    family = values.size if family is None else int(family)
    if family < 1:
        raise ValueError(f"a family holds at least one interval, got {family}")
    t = student_t_quantile(1.0 - (1.0 - level) / family, n_units - 1 if dof is None else dof)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column of no finite draw
        finite = np.where(np.isfinite(draws), draws, np.nan)
        counts = np.isfinite(draws).sum(axis=0)
        spread = t * math.sqrt(n_units / (n_units - 1)) * np.nanstd(finite, axis=0, ddof=1)
        constant = np.nanmin(finite, axis=0) == np.nanmax(finite, axis=0)
    spread = np.where(counts >= 2, np.where(constant, 0.0, spread), np.inf)
    low = np.where((draws == -np.inf).any(axis=0), -np.inf, values - spread)
    high = np.where((draws == np.inf).any(axis=0), np.inf, values + spread)
    undefined = ~np.isfinite(values)
    return np.where(undefined, -np.inf, low), np.where(undefined, np.inf, high)


def share_bounds(
    low: np.ndarray, high: np.ndarray, threshold: float, above: bool = True, strict: bool = False
) -> tuple[float, float]:
    """The least and the largest share of the columns whose value lies above ``threshold``
    (``above``; below when not; ``strict``: a strict inequality) that simultaneous intervals
    ``[low, high]`` (:func:`simultaneous_t_intervals`) allow: the share where even the
    interval's worst end passes, and the share where its best end does."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    if low.size == 0:
        raise ValueError("a share needs at least one column")

    def passes(x: np.ndarray) -> np.ndarray:
        if above:
            return x > threshold if strict else x >= threshold
        return x < threshold if strict else x <= threshold

    worst, best = (low, high) if above else (high, low)
    return float(passes(worst).mean()), float(passes(best).mean())


def bootstrap_interval(
    units: np.ndarray,
    statistic: Callable[[np.ndarray], float],
    n_resamples: int,
    seed: int | Sequence[int],
    level: float = 0.95,
) -> tuple[float, float]:
    """:func:`bootstrap_t_interval` of ``statistic`` over the rows of ``units`` (one row per
    sampling unit: a re-computed query, a head, a seed), resampled with replacement
    ``n_resamples`` times by a generator seeded with ``seed`` (an int or :func:`row_seed`)."""
    units = np.asarray(units)
    if units.shape[0] < 2:
        raise ValueError(f"a bootstrap needs at least two sampling units, got {units.shape[0]}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    normal_quantile(level)  # checks the level
    rng = np.random.default_rng(seed)
    n = units.shape[0]
    draws = np.array([statistic(units[rng.integers(n, size=n)]) for _ in range(n_resamples)])
    return bootstrap_t_interval(float(statistic(units)), draws, n, level)


def block_bootstrap_interval(
    series: np.ndarray,
    statistic: Callable[[np.ndarray], float],
    block: int,
    n_resamples: int,
    seed: int,
    level: float = 0.95,
) -> tuple[float, float]:
    """:func:`bootstrap_t_interval` of ``statistic`` by the moving-block bootstrap over the rows of ``series``
    (in their order: one row per position of a stream). Each resample joins ``ceil(n / block)``
    runs of ``block`` consecutive rows, each starting at a uniformly drawn row ``0..n - block``,
    and keeps the first ``n`` rows; ``block = 1`` is :func:`bootstrap_interval`'s resampling.
    The degrees of freedom and the shrink count the ``n // block`` whole blocks, the
    series' nearly independent pieces; a series shorter than two blocks has too few of them
    for an interval."""
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
    normal_quantile(level)  # checks the level
    rng = np.random.default_rng(seed)
    n_blocks = -(-n // block)
    offsets = np.arange(block)
    draws = np.empty(n_resamples)
    for i in range(n_resamples):
        starts = rng.integers(n - block + 1, size=n_blocks)
        draws[i] = statistic(series[(starts[:, None] + offsets).ravel()[:n]])
    return bootstrap_t_interval(float(statistic(series)), draws, n // block, level)


def fieller_interval(
    numerator: np.ndarray, denominator: np.ndarray, level: float = 0.95
) -> tuple[float, float]:
    """Fieller's interval of the ratio of two paired means, ``rho = mean(a) / mean(b)`` of units
    ``(a_i, b_i)`` (Fieller 1954, "Some problems in interval estimation", J. R. Stat. Soc. B
    16:175-185): the ``rho`` whose paired t-test of ``mean(a - rho b) = 0`` does not reject at
    ``level``, i.e. the roots of ``(A - rho B)^2 = t^2 (S_aa - 2 rho S_ab + rho^2 S_bb)`` with
    ``A, B`` the means, ``S`` the covariances of the means and ``t`` Student's t with ``n - 1``
    degrees of freedom. Exact for normal pairs at every ``n``; and "rho >= rho_0" is decided on
    it exactly as by the t-interval of ``mean(a - rho_0 b)``, a linear statistic, where a
    bootstrap of the ratio itself is heavy-tailed whenever ``mean(b)`` is noisy. Where ``mean(b)``
    is not itself resolved from 0 (``B^2 <= t^2 S_bb``) the set is unbounded: ``(-inf, inf)``."""
    a = np.asarray(numerator, dtype=np.float64)
    b = np.asarray(denominator, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two 1-d arrays of paired units, got {a.shape} and {b.shape}")
    n = a.size
    if n < 2:
        raise ValueError(f"Fieller's interval needs at least two units, got {n}")
    t = student_t_quantile(level, n - 1)
    mean_a, mean_b = float(a.mean()), float(b.mean())
    cov = np.cov(np.vstack([a, b]), ddof=1) / n
    s_aa, s_ab, s_bb = float(cov[0, 0]), float(cov[0, 1]), float(cov[1, 1])
    t2 = t * t
    quad = mean_b * mean_b - t2 * s_bb
    if quad <= 0:
        return -math.inf, math.inf
    lin = mean_a * mean_b - t2 * s_ab
    const = mean_a * mean_a - t2 * s_aa
    root = math.sqrt(max(0.0, lin * lin - quad * const))
    return (lin - root) / quad, (lin + root) / quad


def needed_units(
    n: int, value: float, low: float, high: float, tolerance: float, level: float = 0.95
) -> int | None:
    """About how many sampling units (``n`` now) an interval ``[low, high]`` of ``value`` would
    need to lie wholly on ``value``'s side of ``tolerance``, at the same effect: the interval's
    reach towards the tolerance shrinks as ``t_{m-1} / sqrt(m)`` with the units ``m``
    (:func:`bootstrap_t_interval`), so the smallest ``m`` with ``reach x sqrt(n / m) x
    t_{m-1} / t_{n-1} < |value - tolerance|``; ``n`` when it already lies there, None when
    ``value`` sits on the tolerance (no sample decides it)."""
    gap = value - tolerance
    if n <= 1 or gap == 0 or not all(map(math.isfinite, (value, low, high, tolerance))):
        return None
    reach = value - low if gap > 0 else high - value
    if reach < abs(gap):
        return n
    t_now = student_t_quantile(level, n - 1)

    def decides(m: int) -> bool:
        return reach * math.sqrt(n / m) * student_t_quantile(level, m - 1) / t_now < abs(gap)

    lo, hi = n, 2 * n  # decides(lo) is false; double hi until it decides
    while not decides(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # the smallest deciding size (the reach falls with m)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi


def interval_settings(intervals: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config's ``claims.intervals`` (``level``, ``n_resamples``, ``seed``, ...) over the
    config schema's defaults, the level checked: the settings of every interval the analyses
    and the claims compute."""
    from sinkscope.config_schema import schema_default

    settings = {**schema_default("claims", "intervals"), **(intervals or {})}
    if not 0.0 < float(settings["level"]) < 1.0:
        raise ValueError(f"claims.intervals.level must lie in (0, 1), got {settings['level']}")
    return settings
