"""Checks of the cost claims (§7, Fig. 3, App. D.1): read the ``costs_*`` summary tables.

The back-copy slopes and cost comparison, the copy-paste trends and Theorem D.1's bounds (the
toy nuclear norms are an identity of the construction: :mod:`sinkscope.claims.sanity`).
"""

from __future__ import annotations

import math

import polars as pl

from sinkscope.claims.verdicts import SYNTHETIC, Row, require, row

# sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use their helpers
# import them when they run, so importing this module (and rendering the claims that need none of
# them) does not load torch.

__all__ = [
    "check_backcopy_sink_cheaper",
    "check_backcopy_slopes",
    "check_copypaste_trends",
    "check_theorem_d1_bounds",
]


def check_backcopy_slopes(backcopy_slopes: pl.DataFrame, slope_tolerance: float) -> list[Row]:
    """§7 / Fig. 3 left (Theorem 7.1): on a log-log scale the backcopy cost grows with slope about
    1 for the sink and 3/2 for the diagonal (total cost, ``1/d`` score normalisation as in the
    paper): ``|slope - expected| <= slope_tolerance`` (0.25 = half the gap between 1 and 3/2)."""
    require(backcopy_slopes, ["cost", "pattern", "slope", "n"], "backcopy_slopes")
    rows = []
    expected = {"sink": 1.0, "diagonal": 1.5}
    total = backcopy_slopes.filter(pl.col("cost") == "cost_total").sort("pattern", descending=True)
    for r in total.iter_rows(named=True):
        want = expected.get(r["pattern"])
        if want is None:
            continue
        slope = r["slope"]
        test = f"|slope - {want:g}| <= {slope_tolerance:g}"
        if slope is None or math.isnan(slope):
            rows.append(
                row(
                    SYNTHETIC,
                    "-",
                    f"pattern={r['pattern']}",
                    "n/a",
                    None,
                    test,
                    None,
                    f"fewer than 2 context lengths ({int(r['n'])}) to fit a slope",
                )
            )
            continue
        rows.append(
            row(
                SYNTHETIC,
                "-",
                f"pattern={r['pattern']}, {int(r['n'])} values of T",
                f"slope {slope:.3f}",
                slope,
                test,
                abs(slope - want) <= slope_tolerance,
                f"log-log slope of the total cost in T is {slope:.3f} (paper: about {want:g})",
            )
        )
    return rows


def check_backcopy_sink_cheaper(backcopy_runs: pl.DataFrame) -> list[Row]:
    """§7 / Theorem 7.1, Fig. 3 left: larger context lengths favour sinks: at the largest ``T``
    the sink block is cheaper than the diagonal one (mean total cost over seeds)."""
    from sinkscope.costs.summary import sink_cheaper_reading

    require(backcopy_runs, ["T", "pattern", "cost_total"], "backcopy_runs")
    reading = sink_cheaper_reading(backcopy_runs.to_dicts())
    if reading is None:
        both = {"sink", "diagonal"} <= set(backcopy_runs["pattern"].to_list())
        return [
            row(
                SYNTHETIC,
                "-",
                "both patterns",
                "n/a",
                None,
                "sink < diagonal at the largest T",
                None,
                "no T with runs of both patterns"
                if both
                else "the runs do not include both patterns",
            )
        ]
    ratio = reading["ratio"]
    return [
        row(
            SYNTHETIC,
            "-",
            f"T={reading['T']}",
            f"sink {reading['sink']:.1f} vs diagonal {reading['diagonal']:.1f} (ratio {ratio:.2f})",
            ratio,
            "diagonal / sink cost > 1 at the largest T",
            ratio > 1,
            f"sink cheaper at T in {reading['cheaper_T']} of {reading['T_values']}",
        )
    ]


def check_copypaste_trends(
    copypaste_runs: pl.DataFrame, flat_max_slope: float, growth_min_slope: float
) -> list[Row]:
    """§7 / Fig. 3 right (Theorem 7.2, App. D's Theorem D.1): the sink cost is flat in
    ``r_eff(Sigma_D)/delta^2`` and the diagonal cost grows with it.

    The verdict is decided at fixed dormant tokens per group ``n``: the log-log slope
    (:func:`sinkscope.costs.summary.fit_slopes`) over ``delta`` of every ``n`` with at least two values of
    ``r_eff/delta^2`` must satisfy ``|slope| <= flat_max_slope`` (sink) or ``slope >=
    growth_min_slope`` (diagonal). Theorem D.1's sink bound depends on ``r_eta + C``, and
    ``r_eta`` (the rank of the noise vectors) grows with ``n``: a slope pooled over several ``n``
    mixes that growth into the trend (on the full offline grid the pooled sink slope is 0.07, on
    two of its ``n`` 0.11 to 0.19, while every fixed-``n`` slope is within +-0.04). The pooled
    slope is reported beside it. With no ``n`` swept over two ``delta``, the pooled slope decides.
    """
    from sinkscope.costs.copypaste import copypaste_slopes

    require(copypaste_runs, ["pattern", "n", "reff_over_delta2", "cost_total"], "copypaste_runs")
    rows = []
    for pattern in ("sink", "diagonal"):
        runs = copypaste_runs.filter(pl.col("pattern") == pattern)
        flat = pattern == "sink"
        test = f"|slope| <= {flat_max_slope:g}" if flat else f"slope >= {growth_min_slope:g}"

        def passes(slope: float, flat: bool = flat) -> bool:
            return abs(slope) <= flat_max_slope if flat else slope >= growth_min_slope

        if runs["reff_over_delta2"].n_unique() < 2:
            rows.append(
                row(
                    SYNTHETIC,
                    "-",
                    f"pattern={pattern}",
                    "n/a",
                    None,
                    test,
                    None,
                    "fewer than 2 values of r_eff/delta^2 to fit a slope",
                )
            )
            continue
        pooled, within = copypaste_slopes(runs.to_dicts(), pattern)
        if within:
            worst = max(within, key=lambda pair: abs(pair[1]) if flat else -pair[1])[1]
            slopes = ", ".join(f"n={n}: {slope:.3f}" for n, slope in within)
            measured = f"log-log slope at fixed n: {slopes}"
            passed = all(passes(slope) for _, slope in within)
            reason = (
                f"every fixed-n slope must pass (Theorem D.1's sink bound grows with n through "
                f"r_eta); {'all pass' if passed else 'not all pass'}; pooled over the sweep: "
                f"{pooled:.3f}"
            )
            value = worst
        else:
            measured, value, passed = f"log-log slope {pooled:.3f} (pooled)", pooled, passes(pooled)
            reason = "pooled over the sweep: no n has two values of delta"
        rows.append(
            row(
                SYNTHETIC,
                "-",
                f"pattern={pattern}, {runs.height} runs",
                measured,
                value,
                test,
                passed,
                reason,
            )
        )
    return rows


def check_theorem_d1_bounds(copypaste_runs: pl.DataFrame) -> list[Row]:
    """Theorem D.1 (App. D): every measured copy-paste cost lies inside the theorem's lower and
    upper bounds for its pattern: ``lower_bound <= cost_total <= upper_bound`` for every run.

    A run counts as inside only if both its numbers and its ``in_bounds`` flag say so: the verdict
    follows the quantity the theorem is about, and a table whose flag and numbers disagree cannot
    pass on either alone."""
    require(
        copypaste_runs,
        ["pattern", "in_bounds", "cost_total", "lower_bound", "upper_bound"],
        "copypaste_runs",
    )
    rows = []
    for pattern in sorted(set(copypaste_runs["pattern"].to_list()), reverse=True):
        runs = copypaste_runs.filter(pl.col("pattern") == pattern)
        inside = runs.filter(
            pl.col("in_bounds")
            & (pl.col("lower_bound") <= pl.col("cost_total"))
            & (pl.col("cost_total") <= pl.col("upper_bound"))
        ).height
        rows.append(
            row(
                SYNTHETIC,
                "-",
                f"pattern={pattern}, {runs.height} runs",
                f"{inside}/{runs.height} runs inside the bounds",
                inside / runs.height,
                "every run: lower_bound <= cost_total <= upper_bound",
                inside == runs.height,
                f"cost / upper bound ranges {float((runs['cost_total'] / runs['upper_bound']).min()):.2f}"
                f"-{float((runs['cost_total'] / runs['upper_bound']).max()):.2f}",
            )
        )
    return rows
