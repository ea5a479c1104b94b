"""Checks of §5's head-mean changes of ``rho`` and of Theorem 5.1's conditions: read the
``oversmoothing_summary`` table.

The similarity differences of Figs. 2, 5-6 (learned attention raises ``rho``, ``W`` lowers it,
dense and uniform heads raise it more; bootstrap-SE t-intervals over the sequences), conditions (i) and
(ii) of Figs. 8-9 and the signs they predict (Wilson / Newcombe intervals over the non-sink
heads), each head counted once where datasets are pooled. Each claim's verdict is one function
(``*_holds``), called by its ``check_*``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import polars as pl

from sinkscope.claims.checks.oversmoothing import largest_context
from sinkscope.claims.resampling import sequence_interval, sequence_reading
from sinkscope.claims.verdicts import (
    INCONCLUSIVE,
    Interval,
    Reading,
    Row,
    combine,
    decide,
    needed_text,
    not_applicable,
    pct,
    require,
    rows_per,
)
from sinkscope.labels import POOLED
from sinkscope.stats.intervals import (
    needed_units,
    newcombe_difference,
    wilson_interval,
)

__all__ = [
    "check_attention_raises_similarity",
    "check_condition_i_about_half",
    "check_condition_ii_few",
    "check_dense_heads_raise_more",
    "check_predicted_signs",
    "check_uniform_raises_more",
    "check_w_decreases_similarity",
    "condition_i_holds",
    "condition_ii_holds",
    "difference",
    "difference_holds",
]


def _missing(x: float | None) -> bool:
    return x is None or math.isnan(x)


def _readings_per_head(summary: pl.DataFrame) -> Callable[[Mapping[str, Any]], int]:
    """How many readings of each head a summary row counts: 1 for a pair, the number of datasets
    a model's ``"all"`` row pools (its pairs in the summary), so that a Wilson interval over a
    pooled row counts each head once, not once per dataset."""
    per_model = dict(
        summary.filter(pl.col("dataset") != POOLED)
        .group_by("model")
        .agg(pl.col("dataset").n_unique())
        .iter_rows()
    )

    def readings(r: Mapping[str, Any]) -> int:
        return int(per_model.get(r["model"], 1)) if r["dataset"] == POOLED else 1

    return readings


def _heads_once(k: int, n: int, readings: int) -> tuple[int, int]:
    """``k`` of ``n`` readings as counts of heads, each read ``readings`` times (rounded)."""
    if readings == 1:
        return k, n
    heads = max(1, round(n / readings))
    return round(k / n * heads) if n else 0, heads


def difference(summary_row: Mapping[str, Any], larger: str, smaller: str | None) -> float | None:
    """``larger - smaller`` of a summary row (``smaller=None``: ``larger - 0``); None when either
    is missing."""
    a = summary_row[larger]
    b = summary_row[smaller] if smaller else 0.0
    return None if a is None or b is None else a - b


def difference_holds(diff: float | None, min_difference: float) -> bool | None:
    """§5 / Figs. 2, 6: a difference of head means is ``> min_difference``; None when missing."""
    return None if _missing(diff) else diff > min_difference


def condition_i_holds(frac: float | None, half_band: float) -> bool | None:
    """§5 / Figs. 8-9: "roughly half": ``|frac - 1/2| <= half_band``; None when missing."""
    return None if _missing(frac) else abs(frac - 0.5) <= half_band


def condition_ii_holds(frac: float | None, few_max_fraction: float) -> bool | None:
    """§5 / Figs. 8-9: "few": ``frac <= few_max_fraction``; None when missing."""
    return None if _missing(frac) else frac <= few_max_fraction


# --------------------------------------------------------------------------- checks


def _increases() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """A head's rescaled change of ``rho`` under its learned and under uniform attention, and
    its decrease under ``W`` alone, as the summary defines them
    (:data:`sinkscope.oversmoothing.summary.INCREASE_ATTN_S`, ``INCREASE_UNIF_S``,
    ``DECREASE_W_S``; imported here, when a check runs, not with this module)."""
    from sinkscope.oversmoothing.summary import DECREASE_W_S, INCREASE_ATTN_S, INCREASE_UNIF_S

    return INCREASE_ATTN_S, INCREASE_UNIF_S, DECREASE_W_S


def _difference_rows(
    summary: pl.DataFrame,
    larger: str,
    smaller: str | None,
    min_difference: float,
    what: str,
    needs: str | None = None,
    by_sequence: pl.DataFrame | None = None,
    unit_value: pl.Expr | None = None,
    intervals: Mapping[str, Any] | None = None,
    dense_only_minus_all: bool = False,
) -> list[Row]:
    """Rows testing ``larger - smaller > min_difference`` (``smaller=None``: 0) at the largest T'
    (:func:`difference`, :func:`difference_holds`).

    With ``by_sequence`` (the ``heads_by_sequence`` table) the difference gets a t-interval
    with the bootstrap standard error over the sequences (:func:`sinkscope.claims.resampling.sequence_interval`,
    ``intervals``: the config's ``claims.intervals``): each head's ``unit_value`` (the per-head
    difference whose mean over heads is the summary's) averaged over the drawn sequences, then
    over the heads (:func:`sinkscope.oversmoothing.resampling.head_mean_draws`);
    ``dense_only_minus_all``: the mean over the heads that the resample makes dense (uniformity
    above the summary's threshold) minus the mean over all. The heads are fixed by the model;
    the sequences are what another sample of text would change. Reproduced when the interval
    lies above ``min_difference``, not reproduced when below, inconclusive when it straddles
    it."""

    cols = ["model", "dataset", "context_length", "n_heads", larger]
    cols += [c for c in (smaller, needs) if c]
    require(summary, cols, "oversmoothing summary")

    def reading(r: Mapping[str, Any]) -> Reading:
        setting = f"T'={r['context_length']}, {r['n_heads']} heads"
        if needs and not r[needs]:
            return not_applicable(setting, f"no heads to average over ({needs} = 0)")
        diff = difference(r, larger, smaller)
        if _missing(diff):
            return not_applicable(setting, "value missing")
        a, b = r[larger], r[smaller] if smaller else 0.0
        measured = f"{what}: {a:.4f}" + (f" vs {b:.4f} (difference {diff:+.4f})" if smaller else "")
        reason = f"{larger} = {a:.4f}" + (f", {smaller} = {b:.4f}" if smaller else "")
        point = Reading(setting, measured, diff, difference_holds(diff, min_difference), reason)
        if by_sequence is None or unit_value is None:
            return point
        interval = _head_mean_interval(
            r, by_sequence, unit_value, intervals or {}, larger, dense_only_minus_all
        )
        if interval is None:
            return point
        spread = _per_head_text(r, by_sequence, unit_value, min_difference, dense_only_minus_all)
        point = dataclasses.replace(point, reason=point.reason + spread)
        pooled = r["dataset"] == POOLED
        return sequence_reading(
            point, interval, min_difference, above=True, pooled=pooled, strict=True
        )

    test = f"{larger}{f' - {smaller}' if smaller else ''} > {min_difference:g}"
    return rows_per(largest_context(summary).iter_rows(named=True), test, reading)


def _per_head_text(
    record: Mapping[str, Any],
    by_sequence: pl.DataFrame,
    unit_value: pl.Expr,
    min_difference: float,
    dense_only_minus_all: bool,
) -> str:
    """How the row's head mean spreads over its heads (each head once, its values averaged over
    the sequences and, for a pooled row, over the datasets): how many heads' own values exceed
    ``min_difference``, or with ``dense_only_minus_all`` how many dense heads raise ``rho`` more
    than the mean over all heads. A reading, not the verdict's basis: the heads are fixed by the
    model, and a mean that rests on a few of them is still that model's mean."""
    rows = by_sequence.filter(pl.col("model") == record["model"])
    if record["dataset"] != POOLED:
        rows = rows.filter(pl.col("dataset") == record["dataset"])
    heads = (
        rows.with_columns(unit_value.alias("unit_value"))
        .group_by("dataset", "layer", "head")
        .agg(pl.col("unit_value").mean(), pl.col("uniformity").mean())
        .group_by("layer", "head")
        .agg(pl.col("unit_value").mean(), pl.col("uniformity").mean())
    )
    if heads.height == 0:
        return ""
    once = " (each once, averaged over the datasets)" if record["dataset"] == POOLED else ""
    if not dense_only_minus_all:
        above = heads.filter(pl.col("unit_value") > min_difference).height
        return f"; per head{once}: {above} of {heads.height} heads above {min_difference:g}"
    dense = heads.filter(pl.col("uniformity") > float(record["uniformity_threshold"]))
    more = dense.filter(pl.col("unit_value") > heads["unit_value"].mean()).height
    return (
        f"; per head{once}: {more} of the {dense.height} dense heads raise rho more than the "
        f"mean over all {heads.height}"
    )


def _head_mean_interval(
    record: Mapping[str, Any],
    by_sequence: pl.DataFrame,
    unit_value: pl.Expr,
    intervals: Mapping[str, Any],
    key: str,
    dense_only_minus_all: bool,
) -> Interval | None:
    """The interval over sequences of a summary row's head mean (:func:`_difference_rows`); None
    where ``by_sequence`` lacks the row's pairs or holds another ``T'`` than the row's."""
    from sinkscope.oversmoothing.resampling import head_mean_draws

    context_length = int(record["context_length"])

    def at_row_length(strata: list[pl.DataFrame]) -> bool:
        return all(part["context_length"].unique().to_list() == [context_length] for part in strata)

    threshold = float(record["uniformity_threshold"]) if dense_only_minus_all else None
    return sequence_interval(
        by_sequence,
        str(record["model"]),
        str(record["dataset"]),
        head_mean_draws(unit_value, threshold),
        intervals,
        (key,),
        accept=at_row_length,
    )


def check_w_decreases_similarity(
    summary: pl.DataFrame,
    min_difference: float,
    heads_by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """§5 / Fig. 2 right: applying ``W`` decreases the average cosine:
    ``rho(X) > rho(X + s_l WZ)``, averaged over all heads. Basis of Fig. 2 right (§5: "The
    attention contribution is rescaled to match the magnitude of the original token matrix",
    App. E.1 eq. (11)); the unrescaled ``X + WZ`` of Fig. 2 left is the approximation's basis,
    not this claim's. With ``heads_by_sequence``: an interval over the sequences
    (:func:`_difference_rows`)."""
    return _difference_rows(
        summary, "mean_rho_x", "mean_rho_xwz_s", min_difference, "rho(X) vs rho(X + s_l WZ)",
        by_sequence=heads_by_sequence, unit_value=_increases()[2], intervals=intervals,
    )  # fmt: skip


def check_attention_raises_similarity(
    summary: pl.DataFrame,
    min_difference: float,
    heads_by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """§5 / Figs. 2, 6: attention raises the average cosine on average:
    ``rho(X + WZA^T) - rho(X) > 0`` (rescaled), averaged over heads; with
    ``heads_by_sequence``, an interval over the sequences (:func:`_difference_rows`)."""
    return _difference_rows(
        summary, "mean_increase_attn_s", None, min_difference, "mean rho(X+WZA^T) - rho(X)",
        by_sequence=heads_by_sequence, unit_value=_increases()[0], intervals=intervals,
    )  # fmt: skip


def check_dense_heads_raise_more(
    summary: pl.DataFrame,
    min_difference: float,
    heads_by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """§5 / Figs. 2, 6: the increase is larger for heads with uniformity above the threshold
    (paper: 0.6) than for all heads; with ``heads_by_sequence``, an interval over the sequences
    (:func:`_difference_rows`: each resample's dense heads against all of its heads)."""
    return _difference_rows(
        summary,
        "mean_increase_attn_s_dense",
        "mean_increase_attn_s",
        min_difference,
        "increase for dense heads vs all heads",
        needs="n_dense",
        by_sequence=heads_by_sequence,
        unit_value=_increases()[0],
        intervals=intervals,
        dense_only_minus_all=True,
    )


def check_uniform_raises_more(
    summary: pl.DataFrame,
    min_difference: float,
    heads_by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """§5 / Figs. 2, 6: uniform attention ``A_u`` raises the average cosine more than the learned
    attention: ``rho(X + WZA_u^T) > rho(X + WZA^T)`` on average (rescaled); with
    ``heads_by_sequence``, an interval over the sequences (:func:`_difference_rows`)."""
    return _difference_rows(
        summary,
        "mean_increase_unif_s",
        "mean_increase_attn_s",
        min_difference,
        "increase under uniform vs learned attention",
        by_sequence=heads_by_sequence,
        unit_value=_increases()[1] - _increases()[0],
        intervals=intervals,
    )


def check_condition_i_about_half(
    summary: pl.DataFrame, half_band: float, level: float = 0.95
) -> list[Row]:
    """§5 / Figs. 8-9: "roughly half of the heads satisfy condition (i)" ``beta tr(BW) > 0``:
    ``|frac_cond_i_s_non_sink - 1/2| <= half_band`` (:func:`condition_i_holds`), on the heads
    Figs. 8-9 show (:data:`sinkscope.oversmoothing.summary.CONDITION_BASIS`; condition (i) does
    not depend on ``s_l``). Decided on the share's Wilson interval over the non-sink heads
    (:func:`_condition_rows`): reproduced when it lies inside the band, not reproduced when
    wholly outside, inconclusive when it straddles an edge."""
    cols = ["model", "dataset", "context_length", "n_heads", "n_non_sink"]
    cols += ["n_cond_i_s_non_sink", "frac_cond_i_s_non_sink"]
    require(summary, cols, "oversmoothing summary")
    test = f"|frac_cond_i_s_non_sink - 0.5| <= {half_band:g}"
    low, high = 0.5 - half_band, 0.5 + half_band

    def verdict(interval: Interval) -> str:
        return combine([decide(interval, low, above=True), decide(interval, high, above=False)])

    return _condition_rows(summary, "i", test, verdict, (low, high), lambda r: "", level)


def check_condition_ii_few(
    summary: pl.DataFrame, few_max_fraction: float, level: float = 0.95
) -> list[Row]:
    """§5 / Figs. 8-9, App. E.1: few heads satisfy condition (ii)
    ``beta tr(BW) + tr(BW^T W) < 0``: ``frac_cond_ii_s_non_sink <= few_max_fraction``
    (:func:`condition_ii_holds`) on the heads and map of Figs. 8-9
    (:data:`sinkscope.oversmoothing.summary.CONDITION_BASIS`), decided on the share's Wilson
    interval over the non-sink heads (:func:`_condition_rows`). Condition (ii) depends on the
    scale of the map; the reason also gives the share for the unscaled ``W`` (named as such; not
    plotted)."""
    cols = ["model", "dataset", "context_length", "n_heads", "n_non_sink"]
    cols += ["n_cond_ii_s_non_sink", "frac_cond_ii_s_non_sink", "frac_cond_ii_non_sink"]
    require(summary, cols, "oversmoothing summary")
    test = f"frac_cond_ii_s_non_sink <= {few_max_fraction:g}"
    return _condition_rows(
        summary,
        "ii",
        test,
        lambda interval: decide(interval, few_max_fraction, above=False),
        (few_max_fraction,),
        lambda r: f"; for the unscaled head map W (not plotted): {pct(r['frac_cond_ii_non_sink'])}",
        level,
    )


def _condition_rows(
    summary: pl.DataFrame,
    condition: str,
    test: str,
    verdict_of: Callable[[Interval], str],
    bounds: tuple[float, ...],
    extra_reason: Callable[[Mapping[str, Any]], str],
    level: float,
) -> list[Row]:
    """One row per model and dataset at the largest context length for condition ``(i)`` or
    ``(ii)`` of Theorem 5.1 on the non-sink heads and map of Figs. 8-9 (``n_cond_<c>_s_non_sink``
    of ``n_non_sink``); "n/a" where every head is a sink head.

    The sampling unit is the head, as in :func:`check_predicted_signs`: the share gets a Wilson
    interval at ``level`` (:func:`sinkscope.stats.intervals.wilson_interval`), which
    ``verdict_of`` reads against the tolerance's ``bounds``. A pooled row counts each head
    once (:func:`_readings_per_head`)."""
    from sinkscope.oversmoothing.summary import CONDITION_BASIS

    readings_of = _readings_per_head(summary)

    def reading(r: Mapping[str, Any]) -> Reading:
        setting = f"T'={r['context_length']}, {r['n_non_sink']} non-sink heads of {r['n_heads']}"
        x = r[f"frac_cond_{condition}_s_non_sink"]
        if _missing(x):
            return not_applicable(setting, "every head is a sink head")
        counts = f"{r[f'n_cond_{condition}_s_non_sink']} of {r['n_non_sink']} non-sink heads"
        k, n = _heads_once(
            int(r[f"n_cond_{condition}_s_non_sink"]), int(r["n_non_sink"]), readings_of(r)
        )
        low, high = wilson_interval(k, n, level)
        interval = Interval(low, high, f"Wilson score interval over {n} heads", level, percent=True)
        verdict = verdict_of(interval)
        reason = (
            f"{counts} satisfy condition ({condition}); basis: {CONDITION_BASIS} (Figs. 8-9 "
            f"titles){extra_reason(r)}"
        )
        if readings_of(r) > 1:
            reason += f"; each head counted once: {k} of {n}"
        if verdict == INCONCLUSIVE:
            near = min(bounds, key=lambda b: abs(b - x))
            need = needed_units(n, k / n, low, high, near)
            reason += (
                f"; the interval straddles {near:g}: needs more heads "
                f"({needed_text(need, 'heads')}; models)"
            )
        return Reading(
            setting,
            f"{counts} ({pct(x)}) satisfy ({condition})",
            x,
            None,
            reason,
            interval,
            verdict,
        )

    return rows_per(largest_context(summary).iter_rows(named=True), test, reading)


def check_predicted_signs(summary: pl.DataFrame, most: float, level: float = 0.95) -> list[Row]:
    """§5 / Figs. 8-9: the monotonicity predicted by Theorem 5.1 mostly holds: among the non-sink
    heads with a prediction (condition (i) or (ii) for ``s_l W``), the share whose ``rho``
    changes with the predicted sign both from ``X+WZ`` to ``X+WZA^T`` (Fig. 8) and on to
    ``X+WZA_u^T`` (Fig. 9) is > ``most`` (App. E.1: "Both
    quantities should be positive when ... negative when ..."), and higher than the base rate:
    the share of the heads *without* a prediction that change that way anyway
    (``base_agree_both_s``, :func:`sinkscope.oversmoothing.summary.condition_exprs`). When every
    prediction is "increase" and most heads increase regardless, agreeing is no evidence.

    The sampling unit is the head: the agreement gets a Wilson interval against ``most`` and its
    difference from the base rate Newcombe's interval against 0
    (:mod:`sinkscope.stats.intervals`, at ``level``). Reproduced when both lie wholly above,
    not reproduced when either lies wholly below, inconclusive otherwise. Without unpredicted
    heads there is no base rate and the first test decides alone (the reason says so)."""
    cols = ["model", "dataset", "context_length", "n_predicted_s"]
    cols += ["agree_attn_s", "agree_unif_s", "agree_both_s", "n_unpredicted_s", "base_agree_both_s"]
    require(summary, cols, "oversmoothing summary")
    from sinkscope.oversmoothing.summary import CONDITION_BASIS

    readings_of = _readings_per_head(summary)

    def reading(r: Mapping[str, Any]) -> Reading:
        x, n = r["agree_both_s"], int(r["n_predicted_s"] or 0)
        setting = f"T'={r['context_length']}, {n} non-sink heads with a prediction"
        if _missing(x) or n == 0:
            return not_applicable(setting, "no non-sink head satisfies condition (i) or (ii)")
        # a pooled row reads each head once per dataset: its unit is still the head
        k, n = _heads_once(round(x * n), n, readings_of(r))
        low, high = wilson_interval(k, n, level)
        interval = Interval(low, high, f"Wilson score interval over {n} heads", level, percent=True)
        verdicts = [decide(interval, most, above=True, strict=True)]
        needed = [needed_units(n, k / n, low, high, most)]
        reason = (
            f"{k} of the {n} heads with a prediction change rho with the predicted sign in "
            f"both Figs. 8 and 9; basis: {CONDITION_BASIS}"
        )
        base, m = r["base_agree_both_s"], int(r["n_unpredicted_s"] or 0)
        if m == 0 or _missing(base):
            reason += "; no head without a prediction, so no base rate to compare with"
        else:
            b, m = _heads_once(round(base * m), m, readings_of(r))
            d_low, d_high = newcombe_difference(k, n, b, m, level)
            verdicts.append(
                decide(Interval(d_low, d_high, "", level), 0.0, above=True, strict=True)
            )
            needed.append(needed_units(min(n, m), k / n - b / m, d_low, d_high, 0.0))
            reason += (
                f"; base rate: {b} of the {m} heads without a prediction change that way too "
                f"({pct(base)}), difference {pct(x - base)} ({100 * level:.0f}% Newcombe "
                f"interval {d_low:+.3f} to {d_high:+.3f})"
            )
        verdict = combine(verdicts)
        if verdict == INCONCLUSIVE:
            # the straddling tests' needs; the larger one decides
            open_needs = [
                u for u, v in zip(needed, verdicts, strict=True) if v == INCONCLUSIVE and u
            ]
            need = max(open_needs) if open_needs else None
            reason += (
                "; an interval straddles its bound: needs more heads "
                f"({needed_text(need, 'heads of each kind')}; models or datasets)"
            )
        return Reading(
            setting,
            f"{pct(x)} follow both predicted signs (Fig. 8 alone: "
            f"{pct(r['agree_attn_s'])}, Fig. 9 alone: {pct(r['agree_unif_s'])})",
            x,
            None,
            reason,
            interval,
            verdict,
        )

    test = f"agree_both_s > {most:g} and > the base rate of heads without a prediction"
    return rows_per(largest_context(summary).iter_rows(named=True), test, reading)
