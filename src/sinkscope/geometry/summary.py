"""Cross-pair summary of the geometry analyses: pooled exactly over the datasets of each model.

:func:`summarize` turns the per-pair tables of :func:`~sinkscope.geometry.analysis.analyze_file`
(and the long-context tables of :func:`~sinkscope.geometry.long_context.halfspace_long_context`)
into the summary tables and one statement per (model, claim). Cosine distributions are pooled
through their histograms (:func:`pool_bos_alignment`; see :mod:`sinkscope.geometry.alignment`),
value ranks, half-space margins and norm ratios from their raw rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from sinkscope.geometry.alignment import (
    COSINE_BINS,
    bos_max_readings,
    bos_max_statement,
    histogram_quantiles,
    middle_layers,
)
from sinkscope.geometry.analysis import N_WORST, TABLE_COLUMNS, halfspace_layer
from sinkscope.geometry.halfspace import STATEMENT_SCHEMA, sink_representable_statements
from sinkscope.geometry.names import LONG_CONTEXT_TABLE, POOLED
from sinkscope.geometry.values import RANK_RTOL, value_norm_statement, vo_classes

__all__ = ["long_context_table", "pool_bos_alignment", "summarize", "value_rank_stats"]


def value_rank_stats(value_rank: pl.DataFrame, with_pooled: bool = True) -> pl.DataFrame:
    """Per (model, dataset, layer) distribution of ``rel_rank`` (Figure 12), exact from raw rows.

    Pooled over kv heads and sequences; with ``with_pooled`` each model also gets rows with
    ``dataset = "all"`` pooled over its datasets. Columns: ``model, dataset, layer, n_matrices,
    m, min, q1, median, q3, max, mean, frac_full_rank``.
    """

    def stats(frame: pl.DataFrame) -> pl.DataFrame:
        r = pl.col("rel_rank")
        return frame.group_by("model", "dataset", "layer").agg(
            pl.len().cast(pl.Int64).alias("n_matrices"),
            pl.col("m").min(),
            r.min().alias("min"),
            r.quantile(0.25, "linear").alias("q1"),
            r.median().alias("median"),
            r.quantile(0.75, "linear").alias("q3"),
            r.max().alias("max"),
            r.mean().alias("mean"),
            (r >= 1.0).mean().alias("frac_full_rank"),
        )

    parts = [stats(value_rank)]
    if with_pooled:
        parts.append(stats(value_rank.with_columns(dataset=pl.lit(POOLED))))
    return pl.concat(parts).sort("model", pl.col("dataset") == POOLED, "dataset", "layer")


def pool_bos_alignment(pairs: Sequence[Mapping[str, pl.DataFrame]]) -> pl.DataFrame:
    """Pooled ``bos_alignment`` per (model, space, layer) over the datasets of each model.

    ``pairs``: mappings holding the ``bos_alignment`` and ``bos_cosine_hist`` tables of
    :func:`~sinkscope.geometry.analysis.analyze_file`. Count, minimum, maximum, mean, positive count
    and fraction are exact; quartiles come from the summed histograms
    (:func:`~sinkscope.geometry.alignment.histogram_quantiles`, error at most
    ``quantile_resolution`` = one bin width). ``dataset`` is ``"all"``.
    """
    align = pl.concat([p["bos_alignment"] for p in pairs], how="vertical_relaxed")
    hist = pl.concat([p["bos_cosine_hist"] for p in pairs], how="vertical_relaxed")
    keys = ["model", "space", "layer"]
    exact = (
        align.with_columns(_sum=pl.col("mean") * pl.col("n_values"))
        .sort("max", descending=True, nulls_last=True)
        .group_by(keys)
        .agg(
            pl.col("dataset").n_unique().cast(pl.Int64).alias("n_datasets"),
            pl.col("n_sequences").sum(),
            pl.col("context_length").max(),
            pl.col("n_values").sum(),
            pl.col("min").min(),
            pl.col("max").max(),
            (pl.col("_sum").sum() / pl.col("n_values").sum()).alias("mean"),
            pl.col("n_positive").sum(),
            pl.col("dataset").first().alias("max_dataset"),
            pl.col("max_sequence").first(),
            pl.col("max_position").first(),
            pl.col("max_excl_first").max(),
        )
    )
    rows: list[dict[str, Any]] = []
    for (model, space, layer), group in hist.group_by(keys):
        counts = np.zeros(COSINE_BINS, dtype=np.int64)
        np.add.at(counts, group["bin"].to_numpy(), group["count"].to_numpy())
        rows.append({"model": model, "space": space, "layer": layer, "_counts": counts})
    quartiles = []
    for row in rows:
        match = exact.filter(
            (pl.col("model") == row["model"])
            & (pl.col("space") == row["space"])
            & (pl.col("layer") == row["layer"])
        )
        vmin, vmax = float(match["min"][0]), float(match["max"][0])
        q1, median, q3 = histogram_quantiles(row["_counts"], [0.25, 0.5, 0.75], vmin, vmax)
        quartiles.append(
            {
                "model": row["model"],
                "space": row["space"],
                "layer": row["layer"],
                "q1": q1,
                "median": median,
                "q3": q3,
            }
        )
    quart = pl.DataFrame(quartiles).with_columns(pl.col("layer").cast(pl.Int64))
    return (
        exact.with_columns(pl.col("layer").cast(pl.Int64))
        .join(quart, on=keys, how="left")
        .with_columns(
            dataset=pl.lit(POOLED),
            frac_positive=pl.col("n_positive") / pl.col("n_values"),
            max_below_zero=pl.col("max") < 0.0,
            quantile_resolution=pl.lit(2.0 / COSINE_BINS),
        )
        .select(
            "model",
            "dataset",
            "n_datasets",
            *TABLE_COLUMNS["bos_alignment"][2:-3],
            "max_dataset",
            "max_sequence",
            "max_position",
            "max_excl_first",
            "quantile_resolution",
        )
        .sort("model", "space", "layer")
    )


def _statements(
    alignment: pl.DataFrame,
    halfspace_layer: pl.DataFrame,
    value_rank: pl.DataFrame,
    vo_classes: pl.DataFrame,
    residual: pl.DataFrame,
    halfspace: pl.DataFrame,
    halfspace_long: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per (model, claim) with a number and a sentence (pooled over datasets); the
    ``sink_representable`` row is
    :func:`~sinkscope.geometry.halfspace.sink_representable_statements`'."""
    rows: list[dict[str, Any]] = []
    readings = bos_max_readings(alignment)
    representable = sink_representable_statements(halfspace, halfspace_long)
    for model in sorted(set(alignment["model"].to_list())):
        b = readings.filter(pl.col("model") == model).row(0, named=True)
        rows.append(
            {
                "model": model,
                "claim": "bos_cosine_max_below_zero_middle_layers",
                "value": b["n_mid_below_all"] / b["n_middle"],
                "statement": bos_max_statement(b),
            }
        )
        middle = middle_layers(b["n_layers"])
        rows += representable.filter(pl.col("model") == model).to_dicts()
        v = value_rank.filter((pl.col("model") == model) & (pl.col("dataset") == POOLED))
        vm = v.filter(pl.col("layer").is_in(middle))
        rows.append(
            {
                "model": model,
                "claim": "value_rank_middle_layers",
                "value": float(vm["median"].median()),
                "statement": (
                    f"{model}: the relative rank of the value matrices (tolerance {RANK_RTOL:g}) "
                    f"has median {float(vm['median'].median()):.3f} and minimum "
                    f"{float(vm['min'].min()):.3f} in the middle layers, minimum "
                    f"{float(v['min'].min()):.3f} over all layers"
                ),
            }
        )
        c = vo_classes.filter(
            (pl.col("model") == model)
            & (pl.col("dataset") == POOLED)
            & (pl.col("group") == "is_sink")
        )
        sink_row = c.row(0, named=True) if c.height else None
        rows.append(
            {
                "model": model,
                "claim": "sink_heads_switch_off",
                "value": sink_row["ratio"] if sink_row else None,
                "statement": f"{model}: "
                + (value_norm_statement(sink_row) if sink_row else "no sink heads"),
            }
        )
        r = residual.filter(pl.col("model") == model).sort("rel_bos_norm", descending=True)
        rows.append(
            {
                "model": model,
                "claim": "massive_bos_activation",
                "value": float(r["rel_bos_norm"][0]),
                "statement": (
                    f"{model}: the BOS residual-stream norm reaches {float(r['rel_bos_norm'][0]):.1f}"
                    f"x the median token norm (layer {int(r['layer'][0])})"
                ),
            }
        )
    return pl.DataFrame(rows, schema=STATEMENT_SCHEMA)


def summarize(tables_by_pair: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Cross-pair summary tables, pooled exactly over the datasets of each model.

    ``tables_by_pair``: outputs of :func:`~sinkscope.geometry.analysis.analyze_file`, each
    optionally with the pair's long-context table under
    :data:`~sinkscope.geometry.names.LONG_CONTEXT_TABLE`
    (:func:`~sinkscope.geometry.long_context.halfspace_long_context`; it decides the
    ``sink_representable`` statement of its model). Returns:

    * ``bos_alignment``: per (model, space, layer) with ``dataset = "all"``: exact count, min,
      max, mean and fraction positive; quartiles from the summed histograms (resolution
      ``quantile_resolution``); ``n_datasets`` and where the maximum occurs.
    * ``halfspace_layer``: the per-layer half-space summary recomputed from the pooled
      per-sequence rows (``dataset = "all"``).
    * ``value_rank``: :func:`value_rank_stats` per dataset and pooled (Figure 12).
    * ``value_rank_worst``: the ``N_WORST`` sequences of lowest mean relative rank per model.
    * ``bos_value_norm_classes``: per model, dataset (and ``"all"``) and head group (each
      exclusive ``head_class`` under its class-map name, e.g. ``"sink (not sink+previous)"``,
      plus the ``is_sink`` flag's ``"is_sink"``/``"not_sink"``; column ``definition`` says which
      rule a group follows) the distribution of the relative BOS
      value-output norm over head instances; the ``"is_sink"`` rows also carry the effect size of
      :func:`~sinkscope.geometry.values.sink_value_norm_effect` (``ratio``, ``ratio_lo``,
      ``ratio_hi``, per-dataset spread).
    * ``bos_residual_norm``: per (model, layer) pooled over datasets (means weighted by
      sequences, exact min/max).
    * ``statements``: one sentence per model and claim with its key number (the
      ``sink_representable`` rows also ``n_cases``, ``n_trivial`` and ``basis`` of
      :func:`~sinkscope.geometry.halfspace.sink_representable_statements`).
    """
    if not tables_by_pair:
        raise ValueError("summarize needs the tables of at least one model x dataset pair")
    for pair in tables_by_pair:
        missing = [name for name in TABLE_COLUMNS if name not in pair]
        if missing:
            raise ValueError(f"a pair's tables lack {missing}")
        if (pair["bos_alignment"]["dataset"] == POOLED).any():
            raise ValueError(f"dataset name {POOLED!r} is reserved for pooled summaries")

    def cat(name: str) -> pl.DataFrame:
        return pl.concat([p[name] for p in tables_by_pair], how="vertical_relaxed")

    out: dict[str, pl.DataFrame] = {}
    out["bos_alignment"] = pool_bos_alignment(tables_by_pair)
    halfspace = cat("halfspace")
    context = cat("halfspace_layer").group_by("model").agg(pl.col("context_length").max())
    out["halfspace_layer"] = (
        halfspace_layer(halfspace, pooled=True)
        .join(context, on="model", how="left")
        .select(TABLE_COLUMNS["halfspace_layer"])
    )
    value_rank = cat("value_rank")
    out["value_rank"] = value_rank_stats(value_rank)
    out["value_rank_worst"] = (
        cat("value_rank_worst")
        .sort("model", "mean_rel_rank", "min_rel_rank", "dataset", "sequence")
        .group_by("model", maintain_order=True)
        .head(N_WORST)
    )
    bos_value_norm = cat("bos_value_norm")
    out["bos_value_norm_classes"] = vo_classes(bos_value_norm)
    resid = cat("bos_residual_norm")
    w = pl.col("n_sequences").cast(pl.Float64)
    out["bos_residual_norm"] = (
        resid.group_by("model", "layer")
        .agg(
            pl.col("n_sequences").sum(),
            pl.col("context_length").max(),
            *(
                ((pl.col(c) * w).sum() / w.sum()).alias(c)
                for c in ("bos_norm", "median_norm", "rel_bos_norm")
            ),
            pl.col("rel_bos_norm_min").min(),
            pl.col("rel_bos_norm_max").max(),
        )
        .with_columns(dataset=pl.lit(POOLED))
        .select(TABLE_COLUMNS["bos_residual_norm"])
        .sort("model", "layer")
    )
    out["statements"] = _statements(
        out["bos_alignment"],
        out["halfspace_layer"],
        out["value_rank"],
        out["bos_value_norm_classes"],
        out["bos_residual_norm"],
        halfspace,
        long_context_table(tables_by_pair),
    )
    return out


def long_context_table(tables_by_pair: Sequence[Mapping[str, pl.DataFrame]]) -> pl.DataFrame | None:
    """The pairs' :data:`~sinkscope.geometry.names.LONG_CONTEXT_TABLE` tables concatenated (None
    when no pair has one)."""
    frames = [p[LONG_CONTEXT_TABLE] for p in tables_by_pair if LONG_CONTEXT_TABLE in p]
    return pl.concat(frames, how="vertical_relaxed") if frames else None
