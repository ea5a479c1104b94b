"""Cross-pair summary of the oversmoothing analysis and the bases of its figures and claims
(paper §5, App. E.1): head means of ``rho`` (Fig. 2), condition counts and sign agreement
(Figs. 8-9), the approximation's offset (Fig. 2 left), the ``summary`` and ``conditions``
tables and :func:`summarize` (several pairs plus a pooled pseudo-dataset). Numbers only: the
claims read off them are decided in :mod:`sinkscope.claims.checks.oversmoothing` and
:mod:`sinkscope.claims.checks.oversmoothing_conditions`, in the
``claims`` rule alone (a tolerance changed reruns only it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from sinkscope.config_schema import schema_default
from sinkscope.heads.order import sort_pooled_last
from sinkscope.labels import POOLED
from sinkscope.oversmoothing.names import (
    BY_SEQUENCE_COLUMNS,
    HEADS_BY_SEQUENCE_COLUMNS,
    LAYERS_BY_SEQUENCE_COLUMNS,
    PER_HEAD_COLUMNS,
    PER_LAYER_COLUMNS,
)
from sinkscope.oversmoothing.theory import CONDITIONS

__all__ = [
    "CONDITION_BASIS",
    "KEYS",
    "UNIFORMITY_THRESHOLD",
    "approximation_offsets",
    "component_mean_exprs",
    "component_means",
    "condition_exprs",
    "condition_label_agreement",
    "condition_summary",
    "summarize",
    "summary_tables",
]

#: Uniformity ``u(A)`` above which a head is dense (paper: 0.6): the config schema's
#: ``oversmoothing.uniformity_threshold``.
UNIFORMITY_THRESHOLD: float = schema_default("oversmoothing", "uniformity_threshold")


# --------------------------------------------------------------------------- figure / claim bases
#
# Every number that a figure shows and a claim (sinkscope.claims, and its per-pair ``claims``
# table) tests is computed by one of the functions below; the summary table, the
# figures and the claims all call them, so a figure's annotation and the claim row agree.

KEYS: tuple[str, ...] = ("model", "dataset", "context_length")

#: Basis of Figs. 8-9 and of the claims read off them (§5: "Figures 8-9 show that (a) the
#: monotonicity ... replicates well in practice, and that (b) roughly half of the heads satisfy
#: condition (i) ..., whereas few heads satisfy condition (ii)"). Heads: the non-sink heads
#: (``is_sink`` of the head classification; App. E.1: "Since sink attention patterns are far from
#: this interpolation, we exclude them from this analysis"). Map: ``s_l W``, the map whose effect
#: the plotted deltas measure (App. E.1, eq. 11; the deltas are of ``X + s_l W Z M^T``). Condition
#: (i) ``beta tr(BW) > 0`` is the same for ``W`` and ``s_l W`` (``s_l > 0``); condition (ii)
#: depends on the scale (``s_l`` multiplies ``tr(BW)`` by ``s_l`` and ``tr(BW^T W)`` by
#: ``s_l^2``). Context length: each pair's largest ``T'`` (the paper's figures: 512).
CONDITION_BASIS = "non-sink heads (is_sink), conditions for the rescaled map s_l W (eq. 11)"


#: A head's change of ``rho`` from ``X`` under its learned attention and under uniform causal
#: attention (rescaled, App. E.1 eq. (11); Figs. 2 right and 6): the per-head values whose
#: means are ``mean_increase_attn_s`` and ``mean_increase_unif_s``, and how much ``W`` alone
#: lowers it (``mean_rho_x - mean_rho_xwz_s``); the claims resample them over sequences
#: (:mod:`sinkscope.claims.checks.oversmoothing_conditions`).
INCREASE_ATTN_S = pl.col("rho_xwza_s") - pl.col("rho_x")
INCREASE_UNIF_S = pl.col("rho_xwzau_s") - pl.col("rho_x")
DECREASE_W_S = pl.col("rho_x") - pl.col("rho_xwz_s")


def component_mean_exprs() -> list[pl.Expr]:
    """Head means of ``rho`` for Fig. 2 left / 5 (``X`` and ``X + WZ`` without rescaling,
    empirical ``mean_rho_*`` and approximation (2) ``mean_rhohat_*``: App. E.1, "the quantity
    captured by the theory") and Fig. 2 right / 6 (``X + s_l WZ``, ``X + s_l WZA^T``,
    ``X + s_l WZA_u^T``: ``mean_rho_*_s``, App. E.1 eq. (11))."""
    return [
        pl.col("rho_x").mean().alias("mean_rho_x"),
        pl.col("rhohat_x").mean().alias("mean_rhohat_x"),
        pl.col("rho_xwz").mean().alias("mean_rho_xwz"),
        pl.col("rhohat_xwz").mean().alias("mean_rhohat_xwz"),
        pl.col("rho_xwz_s").mean().alias("mean_rho_xwz_s"),
        pl.col("rho_xwza_s").mean().alias("mean_rho_xwza_s"),
        pl.col("rho_xwzau_s").mean().alias("mean_rho_xwzau_s"),
    ]


def component_means(per_head: pl.DataFrame, by: Sequence[str] = KEYS) -> pl.DataFrame:
    """:func:`component_mean_exprs` per group of ``by`` (plus ``n_heads``), sorted by ``by``."""
    return (
        per_head.group_by(*by, maintain_order=True)
        .agg(pl.len().cast(pl.Int64).alias("n_heads"), *component_mean_exprs())
        .sort(*by)
    )


def condition_exprs() -> list[pl.Expr]:
    """Figs. 8-9 on the basis :data:`CONDITION_BASIS`: ``n_non_sink``, ``n_cond_{i,ii,neither}_s
    _non_sink`` and ``frac_cond_{i,ii}_s_non_sink`` (share of the non-sink heads),
    ``n_predicted_s`` (non-sink heads with condition (i) or (ii)) and, among those, the share
    whose ``rho`` changes with the predicted sign in Fig. 8 (``agree_attn_s``: ``delta_attn_s``),
    in Fig. 9 (``agree_unif_s``: ``delta_unif_s``) and in both (``agree_both_s``: App. E.1,
    "Both quantities should be positive when ... negative when ..."). The base rate of that
    agreement: ``n_unpredicted_s`` (non-sink heads with neither condition) and
    ``base_agree_both_s``, the share of them whose two changes have the sign the predicted heads
    are predicted to have, weighted by the predicted signs' shares (all predictions "increase":
    the share of unpredicted heads that increase in both figures)."""
    non_sink = ~pl.col("is_sink")
    pred = pl.col("predicted_sign_s")
    with_prediction = non_sink & (pred != 0)
    without_prediction = non_sink & (pred == 0)

    def agrees(delta: str) -> pl.Expr:
        return pl.col(delta).sign().cast(pl.Int64) == pred

    def both_have_sign(sign: int) -> pl.Expr:
        return (pl.col("delta_attn_s").sign() == sign) & (pl.col("delta_unif_s").sign() == sign)

    base_rate = sum(
        (pred == sign).filter(with_prediction).mean()
        * both_have_sign(sign).filter(without_prediction).mean()
        for sign in (1, -1)
    )

    return [
        non_sink.sum().cast(pl.Int64).alias("n_non_sink"),
        *(
            (pl.col("condition_s") == c)
            .filter(non_sink)
            .sum()
            .cast(pl.Int64)
            .alias(f"n_cond_{c}_s_non_sink")
            for c in CONDITIONS
        ),
        *(
            (pl.col("condition_s") == c).filter(non_sink).mean().alias(f"frac_cond_{c}_s_non_sink")
            for c in ("i", "ii")
        ),
        with_prediction.sum().cast(pl.Int64).alias("n_predicted_s"),
        agrees("delta_attn_s").filter(with_prediction).mean().alias("agree_attn_s"),
        agrees("delta_unif_s").filter(with_prediction).mean().alias("agree_unif_s"),
        (agrees("delta_attn_s") & agrees("delta_unif_s"))
        .filter(with_prediction)
        .mean()
        .alias("agree_both_s"),
        without_prediction.sum().cast(pl.Int64).alias("n_unpredicted_s"),
        base_rate.alias("base_agree_both_s"),
    ]


def condition_summary(per_head: pl.DataFrame, by: Sequence[str] = KEYS) -> pl.DataFrame:
    """:func:`condition_exprs` per group of ``by``, sorted by ``by`` (the numbers of Figs. 8-9
    and of the claims ``condition_i_half``, ``condition_ii_few`` and ``predicted_signs``)."""
    return per_head.group_by(*by, maintain_order=True).agg(*condition_exprs()).sort(*by)


def condition_label_agreement(first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
    """How often a head keeps its condition label of Figs. 8-9 (``condition_s``: "i", "ii" or
    "neither" of Theorem 5.1) between two per-head tables of the same models and datasets, e.g.
    two runs on different samples of sequences: the sequences' share in the uncertainty of the
    claims ``condition_i_half``, ``condition_ii_few`` and ``predicted_signs``, whose intervals
    count heads (Wilson over the non-sink heads of :data:`CONDITION_BASIS`).

    Read at each pair's largest ``T'`` in both tables, over the head instances that are non-sink
    in both. One row per model (its datasets pooled, each head instance once): ``n_heads``,
    ``n_changed`` (label differs), ``share_same``, and each table's share of the heads with
    condition (i) and (ii) (``frac_i_first`` ...), which the claims read."""
    key = ["model", "dataset", "layer", "head"]
    needed = [*key, "context_length", "condition_s", "is_sink"]
    for which, table in (("first", first), ("second", second)):
        missing = [c for c in needed if c not in table.columns]
        if missing:
            raise ValueError(f"the {which} per-head table lacks columns {missing}")

    def at_largest(table: pl.DataFrame) -> pl.DataFrame:
        largest = pl.col("context_length") == pl.col("context_length").max().over(
            "model", "dataset"
        )
        return table.filter(largest).select(*key, "condition_s", "is_sink")

    both = (
        at_largest(first)
        .join(at_largest(second), on=key, suffix="_second")
        .filter(~pl.col("is_sink") & ~pl.col("is_sink_second"))
    )
    share = {
        f"frac_{c}_{side}": (pl.col(column) == c).mean()
        for c in ("i", "ii")
        for side, column in (("first", "condition_s"), ("second", "condition_s_second"))
    }
    changed = pl.col("condition_s") != pl.col("condition_s_second")
    return (
        both.group_by("model")
        .agg(
            pl.len().cast(pl.Int64).alias("n_heads"),
            changed.sum().cast(pl.Int64).alias("n_changed"),
            (~changed).mean().alias("share_same"),
            *(expr.alias(name) for name, expr in share.items()),
        )
        .sort("model")
    )


def approximation_offsets(curves: pl.DataFrame) -> pl.DataFrame:
    """Fig. 2 left / 5: how far approximation (2) is from the empirical head-averaged curve.

    ``curves``: one row per ``model, dataset, context_length`` with ``mean_rho_x``,
    ``mean_rhohat_x``, ``mean_rho_xwz``, ``mean_rhohat_xwz`` (the summary table, or
    :func:`component_means`). Per ``model, dataset`` and component ``c`` in ``x``, ``xwz``:
    ``offset_c`` = largest ``|mean_rho_c - mean_rhohat_c|`` over ``T'`` (the gap between the
    solid and the dashed curve), ``signed_offset_c`` (that gap with its sign, empirical minus
    approximation), ``range_c`` = ``max - min`` over ``T'`` of the empirical curve (its whole
    change across ``T'``), ``rel_offset_c = offset_c / range_c`` (``inf`` for a flat curve with a
    gap; null with fewer than two context lengths), and ``rel_offset`` = the larger of the two.
    """
    rows = []
    ordered = curves.sort("model", "dataset", "context_length")
    for (model, dataset), part in ordered.group_by("model", "dataset", maintain_order=True):
        row: dict[str, Any] = {
            "model": str(model),
            "dataset": str(dataset),
            "n_context_lengths": part.height,
            "context_length_max": int(part["context_length"].max()),
        }
        rels = []
        for c in ("x", "xwz"):
            emp = part[f"mean_rho_{c}"].to_numpy().astype(np.float64)
            gap = emp - part[f"mean_rhohat_{c}"].to_numpy().astype(np.float64)
            worst = int(np.argmax(np.abs(gap)))
            offset = float(abs(gap[worst]))
            span = float(emp.max() - emp.min())
            if part.height < 2:
                rel = None
            elif span > 0:
                rel = offset / span
            else:
                rel = 0.0 if offset == 0 else math.inf
            row |= {
                f"offset_{c}": offset,
                f"signed_offset_{c}": float(gap[worst]),
                f"range_{c}": span,
                f"rel_offset_{c}": rel,
            }
            rels.append(rel)
        row["rel_offset"] = None if None in rels else max(rels)
        rows.append(row)
    schema = {"model": pl.String, "dataset": pl.String, "n_context_lengths": pl.Int64}
    schema["context_length_max"] = pl.Int64
    for c in ("x", "xwz"):
        for name in ("offset", "signed_offset", "range", "rel_offset"):
            schema[f"{name}_{c}"] = pl.Float64
    schema["rel_offset"] = pl.Float64
    return pl.DataFrame(rows, schema=schema)


# --------------------------------------------------------------------------- summaries


def summary_tables(
    per_head: pl.DataFrame,
    per_layer: pl.DataFrame,
    uniformity_threshold: float = UNIFORMITY_THRESHOLD,
) -> dict[str, pl.DataFrame]:
    """``summary`` and ``conditions`` from per-head and per-layer tables.

    ``summary`` (one row per model, dataset, context length): ``n_heads, n_non_sink,
    n_dense`` (``u > threshold``), approximation errors (``mean/max_abs_err_x``,
    ``mean/max_abs_err_xwz``, ``mean_abs_err_xwzau``, ``frac_err_xwz_below_0_1``), mean ``rho``
    of ``X, X+WZ, X+WZA^T, X+WZA_u^T`` (rescaled, all heads and dense heads), mean increases
    over ``rho(X)`` (``mean_increase_attn_s``, ``mean_increase_unif_s`` and ``_dense``),
    ``frac_unif_above_attn_s``, fractions of all heads per condition (``frac_cond_i``, ... for
    ``W`` and ``_s`` for ``s_l W``), of the non-sink heads for ``W`` (``frac_cond_i_non_sink``,
    ``frac_cond_ii_non_sink``), the Figs. 8-9 numbers of :func:`condition_exprs` (basis
    :data:`CONDITION_BASIS`: ``n_non_sink``, ``n_cond_*_s_non_sink``, ``frac_cond_*_s_non_sink``,
    ``n_predicted_s``, ``agree_attn_s``, ``agree_unif_s``, ``agree_both_s``), the same agreement
    for the unscaled ``W`` (``agree_attn``, ``agree_unif``, ``agree_both``),
    ``frac_rhohat_trend_as_predicted`` (a check of the theorem on the closed forms) and
    ``min_rho_layers`` (Fig. 4: smallest layer ``rho``). Head means of ``rho``:
    :func:`component_mean_exprs`.

    ``conditions`` (long): per model, dataset, context length, ``scaling`` (``unscaled`` /
    ``rescaled``) and condition: ``n_heads`` (non-sink), ``frac_heads``, ``frac_attn_positive``,
    ``frac_unif_positive``, ``mean_delta_attn``, ``mean_delta_unif``, ``agree_attn``,
    ``agree_unif`` (agreement with the predicted sign; null for ``neither``).
    """
    thr = float(uniformity_threshold)
    dense = pl.col("uniformity") > thr
    non_sink = ~pl.col("is_sink")

    def agreement(delta: str, pred: str) -> pl.Expr:
        mask = non_sink & (pl.col(pred) != 0)
        return (pl.col(delta).sign().cast(pl.Int64) == pl.col(pred)).filter(mask).mean()

    def both(pred: str, d1: str, d2: str) -> pl.Expr:
        mask = non_sink & (pl.col(pred) != 0)
        ok = (pl.col(d1).sign().cast(pl.Int64) == pl.col(pred)) & (
            pl.col(d2).sign().cast(pl.Int64) == pl.col(pred)
        )
        return ok.filter(mask).mean()

    predicted = pl.when(pl.col("predicted_sign") == 1).then(pl.col("rhohat_trend") == "increasing")
    predicted = predicted.when(pl.col("predicted_sign") == -1).then(
        pl.col("rhohat_trend") == "decreasing"
    )
    summary = (
        per_head.group_by(*KEYS, maintain_order=True)
        .agg(
            pl.col("n_sequences").max(),
            pl.len().cast(pl.Int64).alias("n_heads"),
            dense.sum().cast(pl.Int64).alias("n_dense"),
            pl.col("abs_err_x").mean().alias("mean_abs_err_x"),
            pl.col("abs_err_x").max().alias("max_abs_err_x"),
            pl.col("abs_err_xwz").mean().alias("mean_abs_err_xwz"),
            pl.col("abs_err_xwz").max().alias("max_abs_err_xwz"),
            pl.col("abs_err_xwzau").mean().alias("mean_abs_err_xwzau"),
            (pl.col("abs_err_xwz") < 0.1).mean().alias("frac_err_xwz_below_0_1"),
            *component_mean_exprs(),
            INCREASE_ATTN_S.mean().alias("mean_increase_attn_s"),
            INCREASE_UNIF_S.mean().alias("mean_increase_unif_s"),
            INCREASE_ATTN_S.filter(dense).mean().alias("mean_increase_attn_s_dense"),
            INCREASE_UNIF_S.filter(dense).mean().alias("mean_increase_unif_s_dense"),
            (pl.col("rho_xwzau_s") > pl.col("rho_xwza_s")).mean().alias("frac_unif_above_attn_s"),
            *(
                (pl.col(f"condition{v}") == c).mean().alias(f"frac_cond_{c}{v}")
                for v in ("", "_s")
                for c in CONDITIONS
            ),
            *(
                (pl.col("condition") == c).filter(non_sink).mean().alias(f"frac_cond_{c}_non_sink")
                for c in ("i", "ii")
            ),
            agreement("delta_attn", "predicted_sign").alias("agree_attn"),
            agreement("delta_unif", "predicted_sign").alias("agree_unif"),
            both("predicted_sign", "delta_attn", "delta_unif").alias("agree_both"),
            *condition_exprs(),
            predicted.filter(pl.col("predicted_sign") != 0)
            .mean()
            .alias("frac_rhohat_trend_as_predicted"),
            pl.col("expectation_positive").mean().alias("frac_expectation_positive"),
        )
        .with_columns(uniformity_threshold=pl.lit(thr))
    )
    layer_min = per_layer.group_by(*KEYS).agg(
        pl.min_horizontal(pl.col("rho_before").min(), pl.col("rho_after").min()).alias(
            "min_rho_layers"
        )
    )
    summary = summary.join(layer_min, on=list(KEYS), how="left").sort(*KEYS)

    conditions = []
    for label, suffix in (("unscaled", ""), ("rescaled", "_s")):
        cond = f"condition{suffix}"
        d1, d2 = f"delta_attn{suffix}", f"delta_unif{suffix}"
        pred = f"predicted_sign{suffix}"
        frame = (
            per_head.filter(non_sink)
            .group_by(*KEYS, cond)
            .agg(
                pl.len().cast(pl.Int64).alias("n_heads"),
                (pl.col(d1) > 0).mean().alias("frac_attn_positive"),
                (pl.col(d2) > 0).mean().alias("frac_unif_positive"),
                pl.col(d1).mean().alias("mean_delta_attn"),
                pl.col(d2).mean().alias("mean_delta_unif"),
                (pl.col(d1).sign().cast(pl.Int64) == pl.col(pred)).mean().alias("agree_attn"),
                (pl.col(d2).sign().cast(pl.Int64) == pl.col(pred)).mean().alias("agree_unif"),
            )
            .rename({cond: "condition"})
            .with_columns(
                scaling=pl.lit(label),
                frac_heads=pl.col("n_heads") / pl.col("n_heads").sum().over(*KEYS),
                agree_attn=pl.when(pl.col("condition") == "neither")
                .then(None)
                .otherwise(pl.col("agree_attn")),
                agree_unif=pl.when(pl.col("condition") == "neither")
                .then(None)
                .otherwise(pl.col("agree_unif")),
            )
        )
        conditions.append(frame)
    conditions_table = (
        pl.concat(conditions)
        .select(
            *KEYS,
            "scaling",
            "condition",
            "n_heads",
            "frac_heads",
            "frac_attn_positive",
            "frac_unif_positive",
            "mean_delta_attn",
            "mean_delta_unif",
            "agree_attn",
            "agree_unif",
        )
        .sort(*KEYS, "scaling", "condition")
    )
    return {"summary": summary, "conditions": conditions_table}


def summarize(
    tables: Sequence[Mapping[str, pl.DataFrame]], *, uniformity_threshold: float | None = None
) -> dict[str, pl.DataFrame]:
    """Combine :func:`~sinkscope.oversmoothing.analysis.analyze_file` outputs of several pairs.

    Returns ``per_head``, ``per_layer``, ``approximation_by_sequence``,
    ``layers_by_sequence`` and ``heads_by_sequence`` (concatenated), and ``summary`` and ``conditions``
    recomputed per pair plus one pooled pseudo-dataset ``"all"`` per model (every head
    of every dataset counted once). ``uniformity_threshold`` defaults to the one the tables were
    made with.
    """
    if not tables:
        raise ValueError("summarize needs at least one table dict")
    per_head = pl.concat([t["per_head"].select(PER_HEAD_COLUMNS) for t in tables])
    per_layer = pl.concat([t["per_layer"].select(PER_LAYER_COLUMNS) for t in tables])
    if (per_head["dataset"] == POOLED).any():
        raise ValueError(f"dataset name {POOLED!r} is reserved for the pooled summary")
    if per_head.select("model", "dataset", "layer", "head", "context_length").is_duplicated().any():
        raise ValueError("the same (model, dataset) pair appears twice")
    if uniformity_threshold is None:
        thresholds = {
            float(v) for t in tables for v in t["summary"]["uniformity_threshold"].to_list()
        }
        if len(thresholds) != 1:
            raise ValueError(f"tables use different uniformity thresholds {sorted(thresholds)}")
        uniformity_threshold = thresholds.pop()
    # the pooled pseudo-dataset counts the sequences of all of a model's datasets
    totals = (
        per_head.group_by("model", "dataset")
        .agg(pl.col("n_sequences").first())
        .group_by("model")
        .agg(pl.col("n_sequences").sum().alias("n_total"))
    )
    pooled_heads = (
        per_head.join(totals, on="model")
        .with_columns(n_sequences=pl.col("n_total"), dataset=pl.lit(POOLED))
        .drop("n_total")
    )
    pooled_layers = per_layer.with_columns(dataset=pl.lit(POOLED))
    by_pair = summary_tables(per_head, per_layer, uniformity_threshold)
    pooled = summary_tables(pooled_heads, pooled_layers, uniformity_threshold)
    out = {"per_head": per_head, "per_layer": per_layer}
    # per sequence: concatenated; the claims resample each pair's sequences on their own
    out["approximation_by_sequence"] = pl.concat(
        [t["approximation_by_sequence"].select(BY_SEQUENCE_COLUMNS) for t in tables]
    )
    out["layers_by_sequence"] = pl.concat(
        [t["layers_by_sequence"].select(LAYERS_BY_SEQUENCE_COLUMNS) for t in tables]
    )
    out["heads_by_sequence"] = pl.concat(
        [t["heads_by_sequence"].select(HEADS_BY_SEQUENCE_COLUMNS) for t in tables]
    )
    for key in ("summary", "conditions"):
        out[key] = sort_pooled_last(
            pl.concat([by_pair[key], pooled[key]]), "context_length", maintain_order=True
        )
    return out
