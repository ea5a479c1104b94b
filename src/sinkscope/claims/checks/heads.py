"""Checks of the head-class claims (§1, §3, §7): read the ``head_classes`` summary table.

Given the shares' intervals over sequences (``intervals``: the table of
:func:`sinkscope.heads.summary.share_intervals`, ``<share>_lo/_hi`` per model and dataset, which
the claims rule bootstraps from the per-sequence masses), every verdict is decided on them
(:func:`sinkscope.claims.verdicts.decide`); without them, on the shares themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from sinkscope.claims.verdicts import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    Interval,
    Reading,
    Row,
    combine,
    decide,
    head_count,
    needed_text,
    pct,
    require,
    rows_per,
)
from sinkscope.heads.order import sort_pooled_last
from sinkscope.stats.intervals import needed_units


def _interval(r: Mapping[str, Any], share: str) -> Interval | None:
    """The row's interval of ``share`` over sequences, None where the table has none (the
    t-interval with a bootstrap standard error of :func:`sinkscope.heads.summary.
    share_intervals`)."""
    low, high = r.get(f"{share}_lo"), r.get(f"{share}_hi")
    if low is None or high is None:
        return None
    n_units, dof = r.get("n_units"), r.get("dof")
    t = "t" if dof is None else f"t ({int(dof)} df)"
    unit = f"{t}, bootstrap SE over the {r['n_sequences']} sequences, {r['n_resamples']} resamples"
    if _stratified(r) and n_units is not None:
        # pooled: stratified by dataset, each stratum resampled from its own N
        unit = (
            f"{t}, bootstrap SE over the {r['n_sequences']} sequences stratified by dataset (at "
            f"fewest {n_units} per dataset), {r['n_resamples']} resamples"
        )
    return Interval(
        float(low),
        float(high),
        unit,
        float(r["level"]),
        n_units=None if n_units is None else int(n_units),
        percent=share != "sink_minus_diagonal",  # the shares' rows state them in percent
    )


def _stratified(r: Mapping[str, Any]) -> bool:
    """A pooled row: its bootstrap resamples each dataset's sequences separately."""
    return int(r.get("n_datasets") or 1) > 1


def _more_sequences(
    interval: Interval, r: Mapping[str, Any], value: float, tolerance: float
) -> str:
    """Why an interval over sequences left its row inconclusive: it straddles ``tolerance``;
    about how many sequences (per dataset, for a pooled row) would decide it at this effect."""
    units = "sequences per dataset" if _stratified(r) else "sequences"
    more = needed_units(
        interval.n_units or 0, value, interval.low, interval.high, tolerance, interval.level
    )
    return (
        f"; the interval straddles {tolerance:g}: needs more sequences "
        f"({needed_text(more, units)}; extraction.n_sequences)"
    )


__all__ = [
    "check_diagonal_fraction_in_paper_range",
    "check_diagonal_heads_rarer",
    "check_sink_heads_common",
    "check_sink_prev_fraction_in_paper_range",
]


def _with_intervals(head_classes: pl.DataFrame, intervals: pl.DataFrame | None) -> pl.DataFrame:
    """``head_classes`` with the intervals' columns joined on (model, dataset), in its order."""
    if intervals is None:
        return head_classes
    return head_classes.join(intervals, on=["model", "dataset"], how="left", maintain_order="left")


def check_sink_heads_common(
    head_classes: pl.DataFrame, sink_min_fraction: float, intervals: pl.DataFrame | None = None
) -> list[Row]:
    """§1/§7: sink heads are common and more prevalent than diagonal heads.

    Per model and dataset: ``frac_sink >= sink_min_fraction`` and ``frac_sink > frac_diagonal``.
    """
    require(
        head_classes, ["model", "dataset", "n_heads", "frac_sink", "frac_diagonal"], "head_classes"
    )

    def reading(r: Mapping[str, Any]) -> Reading:
        sink, diag = r["frac_sink"], r["frac_diagonal"]
        common, more = sink >= sink_min_fraction, sink > diag
        reason = (
            f"{pct(sink)} sink heads vs {pct(diag)} diagonal heads"
            + ("" if common else f"; below the {pct(sink_min_fraction)} floor")
            + ("" if more else "; sinks are not more common than diagonals")
        )
        setting, measured = f"{r['n_heads']} heads", f"sink {pct(sink)}, diagonal {pct(diag)}"
        share, excess = _interval(r, "frac_sink"), _interval(r, "sink_minus_diagonal")
        if share is None or excess is None:
            return Reading(setting, measured, sink, common and more, reason)
        verdict = combine(
            [
                decide(share, sink_min_fraction, above=True),
                decide(excess, 0.0, above=True, strict=True),
            ]
        )
        reason += (
            f" (sink minus diagonal {100 * excess.low:+.1f} to {100 * excess.high:+.1f} points "
            "on its interval)"
        )
        if verdict == INCONCLUSIVE:
            if decide(share, sink_min_fraction, above=True) == INCONCLUSIVE:
                reason += _more_sequences(share, r, sink, sink_min_fraction)
            else:
                reason += _more_sequences(excess, r, sink - diag, 0.0)
        return Reading(setting, measured, sink, None, reason, share, verdict)

    return rows_per(
        sort_pooled_last(_with_intervals(head_classes, intervals)).iter_rows(named=True),
        f"frac_sink >= {sink_min_fraction:g} and frac_sink > frac_diagonal",
        reading,
    )


def check_diagonal_heads_rarer(
    head_classes: pl.DataFrame, intervals: pl.DataFrame | None = None
) -> list[Row]:
    """§7: diagonal heads exist (at least one head) but are rarer than sink heads."""
    require(
        head_classes, ["model", "dataset", "n_heads", "frac_sink", "frac_diagonal"], "head_classes"
    )

    def reading(r: Mapping[str, Any]) -> Reading:
        sink, diag = r["frac_sink"], r["frac_diagonal"]
        n_diag = round(diag * r["n_heads"])
        exists, rarer = n_diag >= 1, diag < sink
        if not exists:
            reason = "no head has >= the diagonal threshold of its mass on the diagonal"
        elif not rarer:
            reason = f"diagonal heads ({pct(diag)}) are not rarer than sink heads ({pct(sink)})"
        else:
            reason = f"{head_count(n_diag)} diagonal ({pct(diag)}) < sink heads ({pct(sink)})"
        setting = f"{r['n_heads']} heads"
        measured = (
            f"sink minus diagonal {sink - diag:+.3f} (diagonal {pct(diag)}, "
            f"{head_count(n_diag)}; sink {pct(sink)})"
        )
        excess = _interval(r, "sink_minus_diagonal")
        if excess is None:
            return Reading(setting, measured, sink - diag, exists and rarer, reason)
        # existence is read off the heads themselves; "rarer" on the interval of the excess,
        # which is the row's value and interval
        verdict = decide(excess, 0.0, above=True, strict=True) if exists else NOT_REPRODUCED
        if verdict == INCONCLUSIVE:
            reason += _more_sequences(excess, r, sink - diag, 0.0)
        return Reading(setting, measured, sink - diag, None, reason, excess, verdict)

    return rows_per(
        sort_pooled_last(_with_intervals(head_classes, intervals)).iter_rows(named=True),
        "0 < frac_diagonal < frac_sink",
        reading,
    )


def _range_rows(
    head_classes: pl.DataFrame,
    column: str,
    bounds: Sequence[float],
    label: str,
    intervals: pl.DataFrame | None = None,
) -> list[Row]:
    require(head_classes, ["model", "dataset", "n_heads", column], "head_classes")
    lo, hi = float(bounds[0]), float(bounds[1])
    if lo > hi:
        raise ValueError(f"claims: the range of {column} is empty ({lo} > {hi})")

    def reading(r: Mapping[str, Any]) -> Reading:
        x = r[column]
        inside = lo <= x <= hi
        where = "inside" if inside else ("below" if x < lo else "above")
        setting, measured = f"{r['n_heads']} heads", f"{label} {pct(x)}"
        reason = f"{pct(x)} is {where} the paper's range {pct(lo)}-{pct(hi)}"
        interval = _interval(r, column)
        if interval is None:
            return Reading(setting, measured, x, inside, reason)
        verdict = combine([decide(interval, lo, above=True), decide(interval, hi, above=False)])
        if verdict == INCONCLUSIVE:
            nearer = lo if abs(x - lo) <= abs(x - hi) else hi
            reason += _more_sequences(interval, r, x, nearer)
        return Reading(setting, measured, x, None, reason, interval, verdict)

    return rows_per(
        sort_pooled_last(_with_intervals(head_classes, intervals)).iter_rows(named=True),
        f"{lo:g} <= {column} <= {hi:g}",
        reading,
    )


def check_diagonal_fraction_in_paper_range(
    head_classes: pl.DataFrame,
    diagonal_fraction_range: Sequence[float],
    intervals: pl.DataFrame | None = None,
) -> list[Row]:
    """§7: 6 % / 0.6 % / 9.5 % of heads (gpt2-medium / Llama 3.1-8B / Gemma 7B) are diagonal."""
    return _range_rows(
        head_classes, "frac_diagonal", diagonal_fraction_range, "diagonal heads", intervals
    )


def check_sink_prev_fraction_in_paper_range(
    head_classes: pl.DataFrame,
    sink_prev_fraction_range: Sequence[float],
    intervals: pl.DataFrame | None = None,
) -> list[Row]:
    """Remark C.4: 16 % / 13 % / 21 % of heads (gpt2 / Llama 3.1-8B / Gemma 7B) are sink+prev."""
    return _range_rows(
        head_classes,
        "frac_sink_prev",
        sink_prev_fraction_range,
        "sink+previous-token heads",
        intervals,
    )
