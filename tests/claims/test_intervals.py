"""The claims' intervals against independent references: published worked examples (Newcombe
1998, Table II), an exact inversion of the score test by brute force, and the coverage of each
interval on simulated data with a known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sinkscope.claims.intervals import (
    block_bootstrap_interval,
    bootstrap_interval,
    needed_units,
    newcombe_difference,
    normal_quantile,
    wilson_interval,
)


def test_normal_quantile_is_the_familiar_one() -> None:
    assert normal_quantile(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert normal_quantile(0.90) == pytest.approx(1.644854, abs=1e-6)
    with pytest.raises(ValueError, match="level"):
        normal_quantile(1.0)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (1, 29), (15, 148), (81, 263), (10, 10)])
def test_wilson_is_the_inverted_score_test(k: int, n: int) -> None:
    """The Wilson interval is every p whose score statistic |k/n - p| / sqrt(p (1-p) / n) stays
    within 1.96: found here by scanning p on a fine grid, not by the closed form."""
    low, high = wilson_interval(k, n)
    grid = np.linspace(1e-9, 1 - 1e-9, 2_000_001)
    accepted = grid[np.abs(k / n - grid) / np.sqrt(grid * (1 - grid) / n) <= normal_quantile(0.95)]
    assert low == pytest.approx(accepted.min(), abs=2e-6)
    assert high == pytest.approx(accepted.max(), abs=2e-6)


@pytest.mark.parametrize(
    ("counts", "published"),
    [
        ((56, 70, 48, 80), (0.0524, 0.3339)),  # Newcombe 1998, Table II, example (a), method 10
        ((9, 10, 3, 10), (0.1705, 0.8090)),  # example (b)
        ((0, 10, 0, 20), (-0.1611, 0.2775)),  # example (e)
        ((0, 10, 0, 10), (-0.2775, 0.2775)),  # example (f)
        ((10, 10, 0, 20), (0.6791, 1.0)),  # example (g)
        ((10, 10, 0, 10), (0.6075, 1.0)),  # example (h)
    ],
)
def test_newcombe_matches_the_published_examples(
    counts: tuple[int, int, int, int], published: tuple[float, float]
) -> None:
    low, high = newcombe_difference(*counts)
    assert (round(low, 4), round(high, 4)) == pytest.approx(published, abs=1.5e-4)


def test_the_intervals_cover_a_known_truth_about_as_often_as_stated() -> None:
    """Simulated samples with a known proportion / difference / mean: each 95% interval holds
    the truth in 93-97.5% of 2,000 samples (a binomial sd of 0.5 points around 95%)."""
    rng = np.random.default_rng(1)
    trials = 2000
    p1, p2, n1, n2 = 0.3, 0.2, 120, 150
    k1, k2 = rng.binomial(n1, p1, trials), rng.binomial(n2, p2, trials)
    wilson = [wilson_interval(int(k), n1) for k in k1]
    assert 0.93 <= np.mean([lo <= p1 <= hi for lo, hi in wilson]) <= 0.975
    newcombe = [newcombe_difference(int(a), n1, int(b), n2) for a, b in zip(k1, k2, strict=True)]
    assert 0.93 <= np.mean([lo <= p1 - p2 <= hi for lo, hi in newcombe]) <= 0.975
    covered = 0
    for i in range(400):  # the bootstrap is slower: 400 samples, a wider band
        sample = rng.exponential(2.0, size=200)
        lo, hi = bootstrap_interval(sample, np.mean, n_resamples=400, seed=i)
        covered += lo <= 2.0 <= hi
    assert 0.90 <= covered / 400 <= 0.98


def test_bootstrap_is_seeded_and_shrinks_with_the_sample() -> None:
    rng = np.random.default_rng(0)
    small, large = rng.normal(size=20), rng.normal(size=2000)
    a = bootstrap_interval(small, np.mean, n_resamples=500, seed=7)
    assert a == bootstrap_interval(small, np.mean, n_resamples=500, seed=7)
    b = bootstrap_interval(large, np.mean, n_resamples=500, seed=7)
    # the width falls as 1/sqrt(n): 100x the units, about a tenth of the width
    ratio = (b[1] - b[0]) / (a[1] - a[0])
    assert 0.05 < ratio < 0.2, ratio
    with pytest.raises(ValueError, match="two sampling units"):
        bootstrap_interval(small[:1], np.mean, n_resamples=10, seed=0)
    assert math.isfinite(a[0]) and a[0] < small.mean() < a[1]


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    """A stationary AR(1) series with mean 0: ``x_t = phi x_{t-1} + e_t``."""
    noise = rng.normal(size=n)
    series = np.empty(n)
    series[0] = noise[0] / math.sqrt(1 - phi * phi)
    for t in range(1, n):
        series[t] = phi * series[t - 1] + noise[t]
    return series


def test_block_bootstrap_covers_the_mean_of_a_correlated_series_where_the_plain_one_fails() -> None:
    """An AR(1) series (phi = 0.8, the correlation of neighbouring tokens' NLLs made strong):
    its mean's variance is (1 + phi) / (1 - phi) = 9 times the iid one, so the plain bootstrap's
    95% interval is a third of the width it needs and holds the true mean 0 about half the time.
    Blocks of 16 units keep the correlation: 85% here, near the stated 95% (moving blocks run
    short on series this length, Kuensch 1989; 300 trials have a binomial sd of 2 points)."""
    rng = np.random.default_rng(3)
    trials, plain, blocked = 300, 0, 0
    for i in range(trials):
        series = _ar1(rng, 240, 0.8)
        lo, hi = bootstrap_interval(series, np.mean, n_resamples=300, seed=i)
        plain += lo <= 0.0 <= hi
        lo, hi = block_bootstrap_interval(series, np.mean, block=16, n_resamples=300, seed=i)
        blocked += lo <= 0.0 <= hi
    assert plain / trials < 0.7, plain / trials
    assert 0.80 <= blocked / trials <= 0.99, blocked / trials


def test_block_bootstrap_is_seeded_and_needs_two_blocks() -> None:
    """Blocks of one unit resample like the plain bootstrap (same width within noise); the
    interval repeats under one seed; fewer than two blocks of units is refused."""
    rng = np.random.default_rng(0)
    iid = rng.normal(size=400)
    one = block_bootstrap_interval(iid, np.mean, block=1, n_resamples=1000, seed=5)
    assert one == block_bootstrap_interval(iid, np.mean, block=1, n_resamples=1000, seed=5)
    plain = bootstrap_interval(iid, np.mean, n_resamples=1000, seed=5)
    assert 0.85 < (one[1] - one[0]) / (plain[1] - plain[0]) < 1.15
    assert one[0] < iid.mean() < one[1]
    with pytest.raises(ValueError, match="two blocks: 31 units, blocks of 16"):
        block_bootstrap_interval(iid[:31], np.mean, block=16, n_resamples=10, seed=0)


@pytest.mark.parametrize(
    ("p", "n", "tolerance"), [(0.55, 100, 0.5), (0.62, 40, 0.5), (0.3, 60, 0.4)]
)
def test_needed_units_is_the_sample_whose_interval_decides(
    p: float, n: int, tolerance: float
) -> None:
    """The power statement checked against the interval itself: at the same proportion, the
    Wilson interval over the needed sample lies (just) on the proportion's side of the
    tolerance, and over four fifths of it still straddles."""
    p = round(p * n) / n  # the observed proportion
    low, high = wilson_interval(round(p * n), n)
    assert low < tolerance < high  # inconclusive now
    needed = needed_units(n, p, low, high, tolerance)
    assert needed is not None and needed > n

    def decided(m: int) -> bool:
        lo, hi = wilson_interval(round(p * m), m)
        return lo > tolerance if p > tolerance else hi < tolerance

    assert decided(math.ceil(1.1 * needed))
    assert not decided(math.floor(0.8 * needed))
    assert needed_units(n, tolerance, low, high, tolerance) is None
    assert needed_units(n, 0.9, 0.8, 0.95, 0.5) == n  # decided already


def _t_within(c: float, dof: int) -> float:
    """``P(|T| < c)`` for Student's t with ``dof`` degrees of freedom: Simpson's rule on the
    density ``Gamma((v+1)/2) / (sqrt(v pi) Gamma(v/2)) (1 + t^2/v)^(-(v+1)/2)`` (error < 1e-10
    at 20,000 panels), independent of the bootstrap code."""
    v = float(dof)
    log_norm = math.lgamma((v + 1) / 2) - math.lgamma(v / 2) - 0.5 * math.log(v * math.pi)
    t = np.linspace(0.0, c, 20_001)
    density = np.exp(log_norm - (v + 1) / 2 * np.log1p(t * t / v))
    h = c / 20_000
    simpson = (
        h / 3 * (density[0] + density[-1] + 4 * density[1:-1:2].sum() + 2 * density[2:-1:2].sum())
    )
    return 2.0 * simpson


def _percentile_coverage(n: int, level: float = 0.95) -> float:
    """The closed-form coverage of a percentile interval of a mean of ``n`` normal units: it is
    about ``mean -+ z s_plugin / sqrt(n)`` with ``s_plugin = s sqrt((n-1)/n)``, so it covers
    when ``|T_{n-1}| < z sqrt((n-1)/n)``."""
    return _t_within(normal_quantile(level) * math.sqrt((n - 1) / n), n - 1)


def test_t_probability_matches_its_tabulated_quantiles() -> None:
    # the familiar two-sided 95% points of Student's t (any statistics table)
    for dof, quantile in ((7, 2.364624), (19, 2.093024), (28, 2.048407)):
        assert _t_within(quantile, dof) == pytest.approx(0.95, abs=1e-6)


def test_min_units_description_states_the_closed_form_coverage() -> None:
    """The schema's reason for ``claims.intervals.min_units`` quotes the coverage of a nominal
    95% percentile interval at 8 units and at the default floor: both must be the closed form's,
    rounded to a percent, and the floor must bring it within about two points of its level."""
    import re

    from sinkscope.config_schema import load_schema, schema_default

    floor = int(schema_default("claims", "intervals")["min_units"])
    node = load_schema()["properties"]["claims"]["properties"]["intervals"]["properties"]
    text = node["min_units"]["description"]
    match = re.search(r"covers about (\d+)% at (\d+) units and (\d+)% at (\d+)", text)
    assert match, text
    low_pct, low_n, floor_pct, floor_n = (int(g) for g in match.groups())
    assert floor_n == floor
    assert round(100 * _percentile_coverage(low_n)) == low_pct
    assert round(100 * _percentile_coverage(floor_n)) == floor_pct
    # a pooled row's stratified bootstrap: each of its strata of n_h units shrinks by
    # (n_h - 1) / n_h and the t has sum(n_h - 1) degrees of freedom
    strata = re.search(r"(\d+) datasets of (\d+) cover about (\d+)%", text)
    assert strata, text
    n_strata, per_stratum, stated = (int(g) for g in strata.groups())
    z = normal_quantile(0.95) * math.sqrt((per_stratum - 1) / per_stratum)
    stratified = _t_within(z, n_strata * (per_stratum - 1))
    assert round(100 * stratified) == stated
    assert stratified < _percentile_coverage(floor)  # why the floor is per stratum
    # "within about two points of its level": two points at the floor, nearly four at 12 units
    assert round(100 * (0.95 - _percentile_coverage(floor))) == 2
    assert round(100 * (0.95 - _percentile_coverage(floor - 8))) > 3


@pytest.mark.parametrize("n", [8, 20])
def test_bootstrap_coverage_on_normal_means_is_the_closed_form(n: int) -> None:
    """The project's percentile bootstrap, run on 600 simulated normal samples of ``n`` units,
    covers the true mean as often as the closed form says (within three binomial standard
    errors plus 0.015 for the percentile interval's own approximation): the under-coverage that
    ``min_units`` guards against is real, and is the closed form's."""
    rng = np.random.default_rng(20261204 + n)
    trials = 600
    hits = 0
    for trial in range(trials):
        sample = rng.normal(size=n)
        low, high = bootstrap_interval(sample, lambda u: float(u.mean()), 500, seed=trial)
        hits += low <= 0.0 <= high
    expected = _percentile_coverage(n)
    se = math.sqrt(expected * (1 - expected) / trials)
    assert abs(hits / trials - expected) < 3 * se + 0.015


def test_sample_and_resample_counts_put_the_sample_first() -> None:
    """Row 0 draws every unit once; each resample draws n units with replacement, so a
    count-weighted mean over the units is the sample's mean in row 0 and a bootstrap mean in
    the others (their spread: the standard error, sqrt((n - 1) / n) s / sqrt(n), within 10%)."""
    from sinkscope.claims.intervals import percentile_interval, sample_and_resample_counts

    rng = np.random.default_rng(0)
    counts = sample_and_resample_counts(30, 4000, rng)
    assert counts.shape == (4001, 30) and (counts[0] == 1).all()
    assert (counts.sum(axis=1) == 30).all()
    values = np.random.default_rng(1).normal(size=30)
    means = counts @ values / 30
    assert means[0] == pytest.approx(values.mean())
    expected = values.std(ddof=0) / np.sqrt(30)
    assert means[1:].std() == pytest.approx(expected, rel=0.1)
    low, high = percentile_interval(means[1:], 0.9)
    assert (low, high) == pytest.approx(tuple(np.quantile(means[1:], [0.05, 0.95])), rel=1e-12)
    with pytest.raises(ValueError):
        sample_and_resample_counts(0, 10, rng)


def test_wilson_ends_are_exact_at_zero_and_all_successes() -> None:
    """At k = 0 the score interval's lower end is 0 and at k = n its upper end is 1, exactly (no
    rounding residue such as 3e-17 in a printed interval)."""
    from sinkscope.claims.intervals import wilson_interval

    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    assert wilson_interval(0, 5)[1] == pytest.approx(1.96**2 / (5 + 1.96**2), rel=1e-3)


def test_percentile_interval_of_draws_with_infinities_is_order_statistics() -> None:
    """A ratio over a flat curve is infinite: with 10 of 100 draws infinite the upper end is
    infinite and the lower end a draw, never NaN (linear interpolation would give inf - inf)."""
    from sinkscope.claims.intervals import percentile_interval

    draws = np.concatenate([np.full(90, 0.1), np.full(10, np.inf)])
    low, high = percentile_interval(draws, 0.95)
    assert low == 0.1 and high == np.inf
