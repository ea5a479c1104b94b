"""Cross-pair summary of sinks beyond BOS (:func:`summarize`): every pair's rows, and per model
the rows pooled exactly over its datasets (``dataset = "all"``)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from sinkscope.heads.order import sort_pooled_last
from sinkscope.labels import POOLED
from sinkscope.sinks.analysis import TABLE_COLUMNS
from sinkscope.sinks.massive import onset

__all__ = ["SECONDARY_RANK_COLUMNS", "pool_sink_rate", "rank_secondary_tokens", "summarize"]

SECONDARY_RANK_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "eps",
    "rank",
    "token_id",
    "token",
    "n_sink",
    "n_occurrences",
    "frac_sink",
    "n_datasets",
    "datasets",
    "mean_first_layer",
    "mean_n_layers",
)


def _concat(pairs: Sequence[dict[str, pl.DataFrame]], name: str) -> pl.DataFrame:
    frames = [p[name] for p in pairs if name in p]
    if not frames:
        raise ValueError(f"no pair has a {name!r} table")
    return pl.concat(frames, how="vertical_relaxed").select(TABLE_COLUMNS[name])


def pool_sink_rate(rate: pl.DataFrame) -> pl.DataFrame:
    """``rate`` (pairs' ``sink_rate`` rows) with, per model, rows pooled over its datasets:
    counts summed, ``rate = n_sink / n_units`` and ``mean_score`` weighted by ``n_units``."""
    keys = ["model", "n_positions", "key_position", "eps"]
    pooled = (
        rate.group_by(keys)
        .agg(
            pl.col("n_units").sum(),
            pl.col("n_sink").sum(),
            (pl.col("mean_score") * pl.col("n_units")).sum().alias("score_sum"),
        )
        .with_columns(
            dataset=pl.lit(POOLED),
            rate=pl.col("n_sink") / pl.col("n_units"),
            mean_score=pl.col("score_sum") / pl.col("n_units"),
        )
        .select(rate.columns)
    )
    return sort_pooled_last(
        pl.concat([rate, pooled], how="vertical_relaxed"), "n_positions", "eps", "key_position"
    )


def rank_secondary_tokens(tokens: pl.DataFrame) -> pl.DataFrame:
    """The secondary-sink token types of each model, pooled over its datasets and ranked by
    ``n_sink`` (secondary-sink occurrences; ties by ``token_id``): ``n_occurrences`` counts the
    eligible occurrences in the datasets where the token became a sink at least once,
    ``datasets`` names them, the layers are means over the sink occurrences."""
    if tokens.height == 0:
        return pl.DataFrame(schema={c: pl.Null for c in SECONDARY_RANK_COLUMNS}).with_columns(
            pl.col("model", "dataset", "token", "datasets").cast(pl.String)
        )
    pooled = (
        tokens.sort("dataset")
        .group_by("model", "eps", "token_id")
        .agg(
            pl.col("token").first(),
            pl.col("n_sink").sum(),
            pl.col("n_occurrences").sum(),
            pl.len().cast(pl.Int64).alias("n_datasets"),
            pl.col("dataset").str.join(" ").alias("datasets"),
            (pl.col("mean_first_layer") * pl.col("n_sink")).sum().alias("first_sum"),
            (pl.col("mean_n_layers") * pl.col("n_sink")).sum().alias("layers_sum"),
        )
        .with_columns(
            dataset=pl.lit(POOLED),
            frac_sink=pl.col("n_sink") / pl.col("n_occurrences"),
            mean_first_layer=pl.col("first_sum") / pl.col("n_sink"),
            mean_n_layers=pl.col("layers_sum") / pl.col("n_sink"),
        )
        .sort(["model", "eps", "n_sink", "token_id"], descending=[False, False, True, False])
        .with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("model", "eps"))
    )
    return pooled.select(SECONDARY_RANK_COLUMNS)


def summarize(pairs: Sequence[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """The summary tables (:data:`sinkscope.sinks.names.SUMMARY_TABLES`) from the per-pair tables
    of :func:`~sinkscope.sinks.analysis.analyze_file`:

    * ``sink_rate``: every pair's pooled-over-layers rates, and per model the rates pooled over
      its datasets (:func:`pool_sink_rate`).
    * ``secondary_tokens``: the ranked secondary-sink token types per model
      (:func:`rank_secondary_tokens`).
    * ``massive_layer``: every pair's per-layer massive-activation statistics.
    * ``massive_onset``: per pair, the first layer with a massive entry and where it sits
      (:func:`sinkscope.sinks.massive.onset`).
    """
    massive_layer = sort_pooled_last(_concat(pairs, "massive_layer"), "layer")
    massive_top = _concat(pairs, "massive_top")
    return {
        "sink_rate": pool_sink_rate(_concat(pairs, "sink_rate")),
        "secondary_tokens": rank_secondary_tokens(_concat(pairs, "secondary_tokens")),
        "massive_layer": massive_layer,
        "massive_onset": sort_pooled_last(onset(massive_layer, massive_top)),
    }
