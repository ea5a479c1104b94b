"""Cross-pair summary of the geometry analyses: pooled exactly over the datasets of each model.

:func:`summarize` turns the per-pair tables of :func:`~sinkscope.geometry.analysis.analyze_file`
(and the long-context tables of :func:`~sinkscope.geometry.long_context.solve_long_context`)
into the summary tables. Cosine distributions are pooled through their histograms
(:func:`pool_bos_alignment`; see :mod:`sinkscope.geometry.alignment`), value ranks, half-space
margins and norm ratios from their raw rows. Numbers only: the ``statements`` table of the
claims' numbers is :func:`sinkscope.claims.checks.geometry.geometry_statements`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from sinkscope.geometry.alignment import COSINE_BINS, COSINE_SIGN_BOUND, histogram_quantiles
from sinkscope.geometry.analysis import N_WORST, TABLE_COLUMNS, halfspace_layer
from sinkscope.geometry.names import LONG_CONTEXT_TABLE, VALUE_RANK_BY_SEQUENCE_COLUMNS
from sinkscope.geometry.values import vo_classes
from sinkscope.heads.order import sort_pooled_last
from sinkscope.labels import POOLED

__all__ = [
    "VALUE_RANK_BY_SEQUENCE_COLUMNS",
    "long_context_table",
    "lowest_median_draws",
    "pair_table",
    "pool_bos_alignment",
    "summarize",
    "value_rank_stats",
    "weighted_median",
]


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
    return sort_pooled_last(pl.concat(parts), "layer")


def weighted_median(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The median of ``values`` ``(M,)`` counted with each row of integer ``weights`` ``(B, M)``:
    the mean of the lower and the upper weighted median (the value where the cumulative weight
    first reaches half the total, and where it first exceeds it), which with unit weights is the
    ordinary median (the middle value, or the mean of the two middle values)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    cumulative = np.cumsum(weights[:, order], axis=1)
    half = cumulative[:, -1:] / 2.0
    lower = np.argmax(cumulative >= half, axis=1)
    upper = np.argmax(cumulative > half, axis=1)
    return (ordered[lower] + ordered[upper]) / 2.0


def lowest_median_draws(
    strata: Sequence[pl.DataFrame],
    layers: Sequence[int],
    n_resamples: int,
    rng: np.random.Generator,
) -> tuple[float, np.ndarray]:
    """The lowest over ``layers`` of the per-layer median relative value rank (App. E.2,
    Fig. 12's box centres: the median over kv heads and sequences), on the sample and on
    ``n_resamples`` resamples of the sequences.

    Each stratum is one pair's ``value_rank_by_sequence`` rows (``layer, kv_head, sequence,
    rel_rank``) and is resampled on its own (as many sequences as it has, with replacement); a
    drawn sequence brings every kv head's rank of every layer, counted as often as it was drawn
    (:func:`weighted_median`). Returns the sample's value and the ``(n_resamples,)`` draws."""
    from sinkscope.stats.intervals import sample_and_resample_counts

    values: dict[int, list[np.ndarray]] = {layer: [] for layer in layers}
    weights: dict[int, list[np.ndarray]] = {layer: [] for layer in layers}
    for frame in strata:
        sequences = np.sort(frame["sequence"].unique().to_numpy())
        counts = sample_and_resample_counts(sequences.size, n_resamples, rng)
        for layer in layers:
            part = frame.filter(pl.col("layer") == layer)
            values[layer].append(part["rel_rank"].to_numpy().astype(np.float64))
            weights[layer].append(counts[:, np.searchsorted(sequences, part["sequence"])])
    medians = np.stack(
        [
            weighted_median(np.concatenate(values[layer]), np.hstack(weights[layer]))
            for layer in layers
        ]
    ).min(axis=0)
    return float(medians[0]), medians[1:]


def pool_bos_alignment(pairs: Sequence[Mapping[str, pl.DataFrame]]) -> pl.DataFrame:
    """Pooled ``bos_alignment`` per (model, space, layer) over the datasets of each model.

    ``pairs``: mappings holding the ``bos_alignment`` and ``bos_cosine_hist`` tables of
    :func:`~sinkscope.geometry.analysis.analyze_file`. Count, minimum, maximum, mean, positive count
    and fraction are exact; quartiles come from the summed histograms
    (:func:`~sinkscope.geometry.alignment.histogram_quantiles`, error at most
    ``quantile_resolution`` = one bin width). ``dataset`` is ``"all"``.
    """
    align = pair_table(pairs, "bos_alignment")
    hist = pair_table(pairs, "bos_cosine_hist")
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
            max_below_zero=pl.col("max") < COSINE_SIGN_BOUND,
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


def summarize(
    tables_by_pair: list[dict[str, pl.DataFrame]], intervals: Mapping[str, Any] | None = None
) -> dict[str, pl.DataFrame]:
    """Cross-pair summary tables, pooled exactly over the datasets of each model (``intervals``:
    the config's ``claims.intervals``, for the bootstraps over heads of
    ``bos_value_norm_classes``).

    ``tables_by_pair``: outputs of :func:`~sinkscope.geometry.analysis.analyze_file`, each
    optionally with the pair's long-context table under
    :data:`~sinkscope.geometry.names.LONG_CONTEXT_TABLE`
    (:func:`~sinkscope.geometry.long_context.solve_long_context`; read by the ``statements``
    of :func:`sinkscope.claims.checks.geometry.geometry_statements`, not here). Returns:

    * ``bos_alignment``: per (model, space, layer) with ``dataset = "all"``: exact count, min,
      max, mean and fraction positive; quartiles from the summed histograms (resolution
      ``quantile_resolution``); ``n_datasets`` and where the maximum occurs.
    * ``halfspace_layer``: the per-layer half-space summary recomputed from the pooled
      per-sequence rows (``dataset = "all"``).
    * ``value_rank``: :func:`value_rank_stats` per dataset and pooled (Figure 12).
    * ``value_rank_by_sequence``: the pairs' relative ranks per (layer, kv head, sequence), the
      rows :func:`lowest_median_draws` resamples (the claims' interval over sequences).
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
    """
    if not tables_by_pair:
        raise ValueError("summarize needs the tables of at least one model x dataset pair")
    for pair in tables_by_pair:
        missing = [name for name in TABLE_COLUMNS if name not in pair]
        if missing:
            raise ValueError(f"a pair's tables lack {missing}")
        if (pair["bos_alignment"]["dataset"] == POOLED).any():
            raise ValueError(f"dataset name {POOLED!r} is reserved for pooled summaries")

    out: dict[str, pl.DataFrame] = {}
    out["bos_alignment"] = pool_bos_alignment(tables_by_pair)
    halfspace = pair_table(tables_by_pair, "halfspace")
    context = (
        pair_table(tables_by_pair, "halfspace_layer")
        .group_by("model")
        .agg(pl.col("context_length").max())
    )
    out["halfspace_layer"] = (
        halfspace_layer(halfspace, pooled=True)
        .join(context, on="model", how="left")
        .select(TABLE_COLUMNS["halfspace_layer"])
    )
    value_rank = pair_table(tables_by_pair, "value_rank")
    out["value_rank"] = value_rank_stats(value_rank)
    out["value_rank_by_sequence"] = value_rank.select(VALUE_RANK_BY_SEQUENCE_COLUMNS).sort(
        "model", "dataset", "layer", "kv_head", "sequence"
    )
    out["value_rank_worst"] = (
        pair_table(tables_by_pair, "value_rank_worst")
        .sort("model", "mean_rel_rank", "min_rel_rank", "dataset", "sequence")
        .group_by("model", maintain_order=True)
        .head(N_WORST)
    )
    bos_value_norm = pair_table(tables_by_pair, "bos_value_norm")
    out["bos_value_norm_classes"] = vo_classes(bos_value_norm, intervals)
    resid = pair_table(tables_by_pair, "bos_residual_norm")
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
    return out


def pair_table(tables_by_pair: Sequence[Mapping[str, pl.DataFrame]], name: str) -> pl.DataFrame:
    """The pairs' tables ``name`` concatenated (pooled over datasets)."""
    return pl.concat([p[name] for p in tables_by_pair], how="vertical_relaxed")


def long_context_table(tables_by_pair: Sequence[Mapping[str, pl.DataFrame]]) -> pl.DataFrame | None:
    """The pairs' :data:`~sinkscope.geometry.names.LONG_CONTEXT_TABLE` tables concatenated (None
    when no pair has one)."""
    frames = [p[LONG_CONTEXT_TABLE] for p in tables_by_pair if LONG_CONTEXT_TABLE in p]
    return pl.concat(frames, how="vertical_relaxed") if frames else None
