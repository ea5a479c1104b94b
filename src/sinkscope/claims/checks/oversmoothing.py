"""Checks of the oversmoothing claims (§5, App. E.1): read the ``oversmoothing_*`` summary tables.

The approximation of attention by its mean (Theorem 5.1's eq. (2): Fig. 2 left, Fig. 7) and the
positive similarity (Fig. 4). The head-mean changes of ``rho`` (Figs. 2, 5-6) and conditions
(i) and (ii) with their predicted signs (Figs. 8-9) are
:mod:`sinkscope.claims.checks.oversmoothing_conditions`. Each claim's verdict is one function
(``*_holds``), called by its ``check_*``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import polars as pl

from sinkscope.claims.events import LayerEvents, coincidence
from sinkscope.claims.resampling import (
    Simultaneous,
    sequence_interval,
    sequence_reading,
    simultaneous_sequence_intervals,
)
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
    where_heads,
)
from sinkscope.heads.order import sort_pooled_last
from sinkscope.labels import POOLED
from sinkscope.stats.intervals import (
    needed_units,
    share_bounds,
    wilson_interval,
)

# sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use their helpers
# import them when they run, so importing this module (and rendering the claims that need none of
# them) does not load torch.

__all__ = [
    "approximation_holds",
    "check_approximation_every_head",
    "check_approximation_most_heads",
    "check_mean_approximation",
    "check_similarity_stays_positive",
    "largest_context",
    "relative_offset_holds",
    "similarity_positive",
]


def largest_context(summary: pl.DataFrame) -> pl.DataFrame:
    """The summary rows at each pair's largest ``T'``, pooled rows last."""
    largest = summary.filter(
        pl.col("context_length") == pl.col("context_length").max().over("model", "dataset")
    )
    return sort_pooled_last(largest)


def _with_pooled_heads(per_head: pl.DataFrame) -> pl.DataFrame:
    """The heads of each pair plus, per model, all of them again as the pooled ``"all"``
    (column ``dataset_of_head``: the pair each head reading comes from)."""
    heads = per_head.filter(pl.col("dataset") != POOLED).with_columns(
        dataset_of_head=pl.col("dataset")
    )
    return pl.concat([heads, heads.with_columns(dataset=pl.lit(POOLED))], how="vertical_relaxed")


# --------------------------------------------------------------------------- readings, verdicts


def approximation_holds(worst: float, approximation_error: float) -> bool:
    """App. E.1 / Fig. 7: every head's error is below ``approximation_error`` (paper: 0.1)."""
    return worst < approximation_error


def relative_offset_holds(
    rel_offset: float | None, approximation_relative_offset: float
) -> bool | None:
    """§5 / Fig. 2 left: the approximation's largest gap, relative to the curve's range across
    ``T'`` (:func:`sinkscope.oversmoothing.summary.approximation_offsets`), is at most
    ``approximation_relative_offset``; None with a single context length."""
    return None if rel_offset is None else rel_offset <= approximation_relative_offset


def similarity_positive(min_rho: float | None) -> bool | None:
    """App. E.1 / Fig. 4: the smallest average cosine is ``> 0`` (the paper's own bound)."""
    return None if min_rho is None else min_rho > 0


# --------------------------------------------------------------------------- checks


def _head_groups(per_head: pl.DataFrame) -> list[dict[str, Any]]:
    """Per model and dataset (plus the pooled ``"all"``) the heads at the largest context length."""
    require(
        per_head,
        ["model", "dataset", "layer", "head", "context_length", "abs_err_xwz"],
        "per_head",
    )
    heads = largest_context(_with_pooled_heads(per_head))
    return [
        {"model": model, "dataset": dataset, "heads": h}
        for (model, dataset), h in heads.group_by("model", "dataset", maintain_order=True)
    ]


def _heads_setting(h: pl.DataFrame) -> str:
    return f"T'={int(h['context_length'][0])}, {h.height} heads"


def _head_errors(group: Mapping[str, Any]) -> pl.Series:
    """The heads' ``|rho - rho_hat|`` for ``X + WZ`` (for ``X`` it is an identity, see
    :mod:`sinkscope.claims.sanity`)."""
    return group["heads"]["abs_err_xwz"]


def _head_error_intervals(
    group: Mapping[str, Any],
    by_sequence: pl.DataFrame,
    intervals: Mapping[str, Any],
    key: tuple[str, ...] = (),
) -> Simultaneous | None:
    """Simultaneous intervals over sequences of every head's ``|rho - rho_hat|`` (Bonferroni
    over the group's head readings, :func:`sinkscope.oversmoothing.resampling.head_error_draws`,
    :func:`sinkscope.claims.resampling.simultaneous_sequence_intervals`): the largest error lies
    between the largest lower and the largest upper end, the share within a bound between the
    shares of the upper and of the lower ends under it. None where the table has none of the
    group's pairs."""
    from sinkscope.oversmoothing.resampling import head_error_draws

    datasets = group["heads"]["dataset_of_head"].unique().sort().to_list()
    model, dataset = str(group["model"]), str(group["dataset"])
    return simultaneous_sequence_intervals(
        by_sequence, model, dataset, head_error_draws, intervals, "head", key, datasets=datasets
    )


def check_approximation_every_head(
    per_head: pl.DataFrame,
    approximation_error: float,
    events: Mapping[tuple[str, str], LayerEvents] | None = None,
    by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """App. E.1 / Fig. 7: ``|rho - rho_hat|`` (approximation (2) of Theorem 5.1) is below
    ``approximation_error`` (paper: 0.1) for every head, for ``X + WZ`` (``X``: an identity, a
    sanity check; :mod:`sinkscope.claims.sanity`), at each pair's largest context length (the
    paper's Fig. 7 uses 512).

    The measured value is the largest error over the heads. With ``by_sequence`` (the
    ``approximation_by_sequence`` table: eq. (2)'s terms per sequence) every head's error gets
    an interval over sequences, all of them simultaneous (Bonferroni over the heads; each
    resample recomputes every head's ``rho`` and ``rho_hat`` from the drawn sequences,
    :func:`_head_error_intervals`, ``intervals``: the config's ``claims.intervals``), and the
    largest error's interval runs from the largest lower end to the largest upper end: reproduced
    when every head's interval lies below ``approximation_error``, not reproduced when one lies
    wholly above it, inconclusive otherwise; without the table, the point reading decides. A failing pair's reason names the failing heads by
    layer, the other layers' error, and whether the failing layers are the pair's known
    ``events`` (:func:`sinkscope.claims.events.coincidence`: BOS's norm jump, the
    massive-activation onset)."""

    def reading(g: Mapping[str, Any]) -> Reading:
        h, err = g["heads"], _head_errors(g)
        worst = float(err.max())
        over = h.filter(err >= approximation_error)
        n_heads = h.select("layer", "head").n_unique()
        n_over = over.select("layer", "head").n_unique()
        reason = f"{n_over} of {n_heads} heads have an error >= {approximation_error:g}"
        if over.height:
            # where: the failing heads by layer, and the mean error of the other layers
            per_layer = dict(h.group_by("layer").agg(pl.col("head").n_unique()).iter_rows())
            rest = h.filter(~pl.col("layer").is_in(over["layer"].unique().to_list()))
            readings = (
                f"; {over.height} of {h.height} readings over the datasets"
                if h.height != n_heads  # pooled: each head is read once per dataset
                else ""
            )
            reason += f" ({where_heads(over, per_layer)}{readings})"
            if rest.height:
                reason += (
                    f"; in the other layers the mean error is {float(rest['abs_err_xwz'].mean()):.3g}"
                    f" and the largest {float(rest['abs_err_xwz'].max()):.3g}"
                )
            known = coincidence(
                over["layer"].to_list(), (events or {}).get((g["model"], g["dataset"]))
            )
            if known:
                reason += f"; {known}"
        setting, measured = _heads_setting(h), f"max error {worst:.3f} (X+WZ)"
        holds = approximation_holds(worst, approximation_error)
        heads = (
            None if by_sequence is None else _head_error_intervals(g, by_sequence, intervals or {})
        )
        interval = (
            None
            if heads is None
            else heads.interval(
                float(heads.low.max()), float(heads.high.max()), "the largest head error"
            )
        )
        point = Reading(setting, measured, worst, holds, reason)
        if interval is None:
            return point
        pooled = h["dataset_of_head"].n_unique() > 1
        return sequence_reading(
            point, interval, approximation_error, above=False, pooled=pooled, strict=True
        )

    test = f"max over heads of |rho - rho_hat| < {approximation_error:g}"
    return rows_per(_head_groups(per_head), test, reading)


def check_approximation_most_heads(
    per_head: pl.DataFrame,
    approximation_error: float,
    most: float,
    level: float = 0.95,
    by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """§5: the approximation is accurate "for most individual attention heads": more than
    ``most`` of the heads have ``|rho - rho_hat| < approximation_error`` for ``X + WZ`` (``X``:
    an identity, :mod:`sinkscope.claims.sanity`).

    Two sampling units, both tested: the head, as in :func:`check_predicted_signs` (a Wilson
    interval, :func:`sinkscope.stats.intervals.wilson_interval`, at ``level``), and, given
    ``by_sequence`` (``approximation_by_sequence``), the sequences each head's error is read on:
    the share lies between the share of heads whose simultaneous interval over sequences lies
    wholly under the bound and the share whose interval reaches under it
    (:func:`_head_error_intervals`, :func:`sinkscope.stats.intervals.share_bounds`;
    ``intervals``: the config's ``claims.intervals``). Reproduced
    when both lie wholly above ``most``, not reproduced when either lies wholly below,
    inconclusive otherwise; the row shows the interval over sequences and its reason the one
    over heads."""

    def reading(g: Mapping[str, Any]) -> Reading:
        within = _head_errors(g) < approximation_error
        share = float(within.mean())
        # the pooled row reads each head once per dataset: its unit is still the head
        n = g["heads"].select("layer", "head").n_unique()
        k = round(share * n)
        low, high = wilson_interval(k, n, level)
        interval = Interval(low, high, f"Wilson score interval over {n} heads", level, percent=True)
        verdict = decide(interval, most, above=True, strict=True)
        reason = f"{pct(share)} of {within.len()} head readings have an X+WZ error below"
        reason += f" {approximation_error:g}"
        if within.len() != n:
            reason += f" ({n} heads, each read on {within.len() // n} datasets)"
        if verdict == INCONCLUSIVE:
            need = needed_units(n, share, low, high, most)
            reason += f"; the interval straddles {most:g}: needs more heads ({needed_text(need, 'heads')})"
        measured = f"{pct(share)} of heads within {approximation_error:g}"
        over_sequences = None
        if by_sequence is not None:
            heads = _head_error_intervals(g, by_sequence, intervals or {}, ("most_heads",))
            if heads is not None:
                over_sequences = heads.interval(
                    *share_bounds(
                        heads.low, heads.high, approximation_error, above=False, strict=True
                    ),
                    f"the share of head readings under {approximation_error:g}",
                    percent=True,
                )
        if over_sequences is None:
            return Reading(
                _heads_setting(g["heads"]), measured, share, None, reason, interval, verdict
            )
        reason += f"; over the heads: {interval.text()}"
        by_sequences = sequence_reading(
            Reading(_heads_setting(g["heads"]), measured, share, None, reason),
            over_sequences,
            most,
            above=True,
            pooled=g["dataset"] == POOLED,
            strict=True,
        )
        return dataclasses.replace(
            by_sequences, verdict=combine([verdict, str(by_sequences.verdict)])
        )

    test = f"fraction of heads with error < {approximation_error:g} > {most:g}"
    return rows_per(_head_groups(per_head), test, reading)


def _offset_interval(
    record: Mapping[str, Any], by_sequence: pl.DataFrame, intervals: Mapping[str, Any]
) -> Interval | None:
    """The interval of Fig. 2 left's relative offset for ``X + WZ``: a bootstrap-SE t-interval over
    the sequences (:func:`sinkscope.oversmoothing.resampling.relative_offset_draws`,
    :func:`sinkscope.claims.resampling.sequence_interval`). None where the table lacks the row's
    pairs or holds one ``T'`` only, or where a pooled row's datasets have different ``T'``."""
    from sinkscope.oversmoothing.resampling import relative_offset_draws

    def one_curve(strata: list[pl.DataFrame]) -> bool:  # the same T' >= 2 in every dataset
        lengths = {tuple(sorted(part["context_length"].unique())) for part in strata}
        return len(lengths) == 1 and len(next(iter(lengths))) >= 2

    return sequence_interval(
        by_sequence,
        str(record["model"]),
        str(record["dataset"]),
        relative_offset_draws,
        intervals,
        ("relative_offset",),
        accept=one_curve,
    )


def check_mean_approximation(
    summary: pl.DataFrame,
    approximation_relative_offset: float,
    by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """§5 / Fig. 2 left: the head-averaged ``rho`` and approximation (2) are in "excellent
    agreement" for ``X`` and ``X + WZ`` (head update not rescaled) across context lengths.

    The figure's two curves are compared on the figure's own scale
    (:func:`sinkscope.oversmoothing.summary.approximation_offsets`): the largest gap over ``T'``
    between the solid (empirical) and the dashed (approximation) curve, relative to the empirical
    curve's whole change across ``T'`` (``max - min``). Holds if that ratio is at most
    ``approximation_relative_offset`` for ``X + WZ`` (:func:`relative_offset_holds`; ``X`` is an
    identity here, :mod:`sinkscope.claims.sanity`, so its gap is shown in the reason only). An
    absolute bound would not do: the head-averaged curves change by only a few hundredths across
    ``T'`` here, so an offset as large as the whole curve would pass Fig. 7's per-head 0.1.
    Given eq. (2)'s terms per sequence at every ``T'`` (``by_sequence``), the ratio is decided on
    its interval over the sequences (:func:`_offset_interval`; ``intervals``: the config's
    ``claims.intervals``); without them, on the ratio itself."""
    require(
        summary,
        [
            "model",
            "dataset",
            "context_length",
            "mean_rho_x",
            "mean_rhohat_x",
            "mean_rho_xwz",
            "mean_rhohat_xwz",
        ],
        "summary",
    )
    from sinkscope.oversmoothing.summary import approximation_offsets

    def reading(r: Mapping[str, Any]) -> Reading:
        lengths = sorted(
            summary.filter((pl.col("model") == r["model"]) & (pl.col("dataset") == r["dataset"]))[
                "context_length"
            ].to_list()
        )
        setting = f"T' in {lengths}"
        if r["rel_offset"] is None:
            return not_applicable(setting, "one context length: no curve across T' to compare")
        parts = {
            c: f"{name}: largest gap {r[f'signed_offset_{c}']:+.2g} = "
            f"{r[f'rel_offset_{c}']:.2g} x the curve's range {r[f'range_{c}']:.2g}"
            for c, name in (("x", "X"), ("xwz", "X+WZ"))
        }
        ratio = r["rel_offset_xwz"]
        reason = (
            f"{parts['xwz']}; {parts['x']}, an identity here, not evidence (gap = empirical - "
            "approximation, head means; Fig. 2 left's second title line)"
        )
        interval = (
            None if by_sequence is None else _offset_interval(r, by_sequence, intervals or {})
        )
        holds = relative_offset_holds(ratio, approximation_relative_offset)
        point = Reading(setting, parts["xwz"], ratio, holds, reason)
        if interval is None:
            return point
        pooled = r["dataset"] == POOLED
        return sequence_reading(
            point, interval, approximation_relative_offset, above=False, pooled=pooled
        )

    test = f"largest |gap| / range across T' <= {approximation_relative_offset:g} for X+WZ"
    offsets = sort_pooled_last(approximation_offsets(summary))
    return rows_per(offsets.iter_rows(named=True), test, reading)


def _similarity_interval(
    group: Mapping[str, Any],
    layers_by_sequence: pl.DataFrame,
    intervals: Mapping[str, Any],
) -> Interval | None:
    """The interval of the smallest layer ``rho``: from the smallest lower to the smallest
    upper end of every layer's (and ``T'``'s) simultaneous interval over the sequences
    (:func:`sinkscope.oversmoothing.resampling.layer_similarity_draws`,
    :func:`sinkscope.claims.resampling.simultaneous_sequence_intervals`). None where the table
    has none of the group's pairs."""
    from sinkscope.oversmoothing.resampling import layer_similarity_draws

    model, dataset = str(group["model"]), str(group["dataset"])
    layers = simultaneous_sequence_intervals(
        layers_by_sequence,
        model,
        dataset,
        layer_similarity_draws,
        intervals,
        "layer reading",
        ("similarity",),
    )
    if layers is None:
        return None
    return layers.interval(
        float(layers.low.min()), float(layers.high.min()), "the smallest layer rho"
    )


def check_similarity_stays_positive(
    summary: pl.DataFrame,
    layers_by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """App. E.1 / Fig. 4: the average token cosine similarity stays positive across layers (before
    and after each attention update): smallest per-layer ``rho`` over every ``T'`` > 0
    (:func:`similarity_positive`). Given the per-sequence values (``layers_by_sequence``), the
    smallest ``rho`` is decided on its interval over the sequences (:func:`_similarity_interval`,
    settings ``intervals``: ``claims.intervals``); without them, on the value itself."""
    require(
        summary, ["model", "dataset", "context_length", "min_rho_layers"], "oversmoothing summary"
    )

    def reading(g: Mapping[str, Any]) -> Reading:
        s = g["summary"]
        x = float(s["min_rho_layers"].min())
        setting = f"T' in {sorted(s['context_length'].to_list())}"
        measured = f"smallest layer rho {x:.3f}"
        reason = f"the smallest average cosine over layers and context lengths is {x:.3f}"
        interval = (
            None
            if layers_by_sequence is None
            else _similarity_interval(g, layers_by_sequence, intervals or {})
        )
        point = Reading(setting, measured, x, similarity_positive(x), reason)
        if interval is None:
            return point
        pooled = g["dataset"] == POOLED
        return sequence_reading(point, interval, 0.0, above=True, pooled=pooled, strict=True)

    groups = [
        {"model": model, "dataset": dataset, "summary": s}
        for (model, dataset), s in sort_pooled_last(summary).group_by(
            "model", "dataset", maintain_order=True
        )
    ]
    return rows_per(groups, "min over layers and T' of rho > 0", reading)
