"""The coverage of the claims' bootstrap intervals, measured by simulation with a known truth.

Every interval a verdict is decided on should cover the true value at its level at the sample
size the run has. :func:`sinkscope.stats.intervals.bootstrap_t_interval` is exact for the mean
of normal units (a closed form: it is the t-interval); for the other statistics the claims read
there is no closed form, so :func:`coverage` measures it: it draws ``trials`` samples of ``n``
units from a model whose true statistic is known (:data:`KINDS`), builds each sample's interval
exactly as the claims do (the same count-weighted resampling,
:func:`~sinkscope.stats.intervals.sample_and_resample_counts`, and the same method: a
bootstrap-SE t-interval of the statistic, Fieller's interval for a ratio, or, for a maximum or a thresholded share over heads,
the simultaneous per-head intervals of
:func:`~sinkscope.stats.intervals.simultaneous_t_intervals` reduced by the statistic), and counts
how often the interval covers the truth. The numbers the config schema's reasons state
(``claims.intervals``) come from :func:`coverage_table`, which ``python -m
sinkscope.claims.coverage`` prints; a test holds the stated numbers to a smaller re-run.

The kinds mirror what the rows read: the mean over sequences of a per-sequence value (normal, and
skewed), a ratio of two such means (StreamingLLM's recovered fraction), the largest of a
layer's or model's per-head means (Fig. 7's largest error), the share of heads whose mean passes
a threshold (the head classes of §3), and the median over heads (the value ranks of Fig. 12).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sinkscope.stats.intervals import (
    bootstrap_t_interval,
    fieller_interval,
    sample_and_resample_counts,
    share_bounds,
    simultaneous_t_intervals,
)

__all__ = ["KINDS", "Kind", "coverage", "coverage_table", "main"]


@dataclass(frozen=True)
class Kind:
    """A statistic of ``(n, H)`` unit values (``statistic`` maps ``(B, H)`` means over the drawn
    units to ``(B,)`` values) with a generator of units and the statistic's true value."""

    description: str
    #: ``(rng, n) -> (n, H)`` unit values
    draw: Callable[[np.random.Generator, int], np.ndarray]
    statistic: Callable[[np.ndarray], np.ndarray]
    truth: float
    #: the interval of the statistic from simultaneous per-head intervals ``(low, high)``
    #: (:func:`~sinkscope.stats.intervals.simultaneous_t_intervals`); None: the bootstrap-SE
    #: t-interval of the statistic itself
    from_heads: Callable[[np.ndarray, np.ndarray], tuple[float, float]] | None = None
    #: the interval in closed form from the ``(n, H)`` units and the level (Fieller's for a
    #: ratio); None: one of the two above
    from_units: Callable[[np.ndarray, float], tuple[float, float]] | None = None


#: Heads of the per-head kinds and their true means: evenly spread over [0.05, 0.95], so some lie
#: near any threshold, as real heads do.
_HEAD_MEANS = np.linspace(0.05, 0.95, 24)
#: The per-sequence spread of a head's value around its mean (a head's BOS mass moves by about
#: this much from one sequence to the next in the default run's tables).
_HEAD_SD = 0.15
#: The threshold of the share kind: between two of the true means, as a class threshold is.
_THRESHOLD = 0.6


def _heads(rng: np.random.Generator, n: int) -> np.ndarray:
    return _HEAD_MEANS + _HEAD_SD * rng.standard_normal((n, _HEAD_MEANS.size))


def _ratio(rng: np.random.Generator, n: int) -> np.ndarray:
    # (window - policy, window - recompute): a fraction 0.8 of a positive excess, both noisy
    excess = 1.0 + 0.5 * rng.standard_normal(n)
    recovered = 0.8 * excess + 0.3 * rng.standard_normal(n)
    return np.column_stack([recovered, excess])


KINDS: dict[str, Kind] = {
    "mean, normal units": Kind(
        "the mean of normal units (closed form: the t-interval, exact)",
        lambda rng, n: rng.standard_normal((n, 1)),
        lambda m: m[:, 0],
        0.0,
    ),
    "mean, skewed units": Kind(
        "the mean of lognormal units (sigma 1): a per-sequence value with a long tail",
        lambda rng, n: rng.lognormal(0.0, 1.0, (n, 1)),
        lambda m: m[:, 0],
        float(np.exp(0.5)),
    ),
    "ratio of means": Kind(
        "a ratio of two correlated paired means (StreamingLLM's recovered fraction, true 0.8): "
        "Fieller's interval",
        _ratio,
        lambda m: m[:, 0] / m[:, 1],
        0.8,
        from_units=lambda units, level: fieller_interval(units[:, 0], units[:, 1], level),
    ),
    "largest head mean": Kind(
        "the largest of 24 per-head means (Fig. 7's largest error over heads): simultaneous "
        "per-head intervals",
        _heads,
        lambda m: m.max(axis=1),
        float(_HEAD_MEANS.max()),
        lambda low, high: (float(low.max()), float(high.max())),
    ),
    "share of heads over a threshold": Kind(
        "the share of 24 heads whose mean exceeds 0.6 (the head classes): simultaneous "
        "per-head intervals",
        _heads,
        lambda m: (m > _THRESHOLD).mean(axis=1),
        float((_HEAD_MEANS > _THRESHOLD).mean()),
        lambda low, high: share_bounds(low, high, _THRESHOLD, strict=True),
    ),
    "largest head mean, bootstrap-t": Kind(
        "the same largest head mean by a bootstrap-SE t-interval of the maximum itself",
        _heads,
        lambda m: m.max(axis=1),
        float(_HEAD_MEANS.max()),
    ),
    "share of heads, bootstrap-t": Kind(
        "the same share by a bootstrap-SE t-interval of the share itself",
        _heads,
        lambda m: (m > _THRESHOLD).mean(axis=1),
        float((_HEAD_MEANS > _THRESHOLD).mean()),
    ),
    "median head mean": Kind(
        "the median of 24 per-head means (the value ranks' per-layer median)",
        _heads,
        lambda m: np.median(m, axis=1),
        float(np.median(_HEAD_MEANS)),
    ),
}


def coverage(
    kind: Kind,
    n: int,
    trials: int = 1000,
    n_resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> float:
    """The share of ``trials`` simulated samples of ``n`` units whose interval at ``level``
    (:func:`~sinkscope.stats.intervals.bootstrap_t_interval` of ``n_resamples`` resamples)
    covers ``kind``'s true value."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        units = kind.draw(rng, n)
        if kind.from_units is not None:
            low, high = kind.from_units(units, level)
            hits += low <= kind.truth <= high
            continue
        counts = sample_and_resample_counts(n, n_resamples, rng)
        means = counts @ units / n  # (1 + B, H)
        if kind.from_heads is None:
            values = kind.statistic(means)
            low, high = bootstrap_t_interval(float(values[0]), values[1:], n, level)
        else:
            low, high = kind.from_heads(*simultaneous_t_intervals(means[0], means[1:], n, level))
        hits += low <= kind.truth <= high
    return hits / trials


def coverage_table(
    sizes: tuple[int, ...] = (4, 8, 20, 50),
    trials: int = 1000,
    n_resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[int, float]]:
    """:func:`coverage` of every kind of :data:`KINDS` at every size of ``sizes``."""
    return {
        name: {n: coverage(kind, n, trials, n_resamples, level, seed + n) for n in sizes}
        for name, kind in KINDS.items()
    }


def main(argv: list[str] | None = None) -> None:
    """Print :func:`coverage_table` as Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 20, 50])
    args = parser.parse_args(argv)
    table = coverage_table(tuple(args.sizes), args.trials, args.resamples)
    print("| statistic | " + " | ".join(f"n = {n}" for n in args.sizes) + " |")
    print("|---|" + "---|" * len(args.sizes))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(f"{100 * row[n]:.1f}%" for n in args.sizes) + " |")


if __name__ == "__main__":
    main()
