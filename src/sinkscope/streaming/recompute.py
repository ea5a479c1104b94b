"""The caches against sliding window with re-computation (rule ``analyze_streaming_recompute``).

:func:`recompute_pair` re-encodes the ``L`` most recent tokens from scratch at sampled query
positions (:meth:`sinkscope.streaming.evaluator.StreamingEvaluator.recompute_nll`), with and
without the BOS token in front (:data:`RECOMPUTE_BASELINES`), and compares every cache of
:func:`sinkscope.streaming.experiment.evaluate_pair` (its ``nll_by_position`` table) with it on
exactly those tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.defaults import STREAMING_PARAMS
from sinkscope.streaming.evaluator import StreamingEvaluator
from sinkscope.streaming.streams import Streams, load_streams, pair_names, with_names

__all__ = [
    "RECOMPUTE_BASELINES",
    "RECOMPUTE_SCHEMA",
    "RECOMPUTE_TIMINGS_SCHEMA",
    "recompute_pair",
    "recompute_queries",
]

#: The re-computation baselines of :func:`recompute_pair`: name -> BOS in front of the window.
RECOMPUTE_BASELINES: dict[str, bool] = {"recompute_bos": True, "recompute": False}

RECOMPUTE_SCHEMA: dict[str, Any] = {
    "baseline": pl.String,
    "window": pl.Int64,
    "kind": pl.String,
    "n_sink": pl.Int64,
    "policy": pl.String,
    "first_position": pl.Int64,
    "n_queries": pl.Int64,
    "n_tokens": pl.Int64,
    "dense_nll": pl.Float64,
    "window_nll": pl.Float64,
    "recompute_nll": pl.Float64,
    "policy_nll": pl.Float64,
    "window_vs_recompute": pl.Float64,
    "policy_vs_recompute": pl.Float64,
    "policy_vs_recompute_se": pl.Float64,
    "recovered_fraction": pl.Float64,
    # per sampled query (mean over streams), in the order of the sampled positions: the sampling
    # unit of the claims' bootstrap interval of recovered_fraction (sinkscope.stats.intervals)
    "window_nll_by_query": pl.List(pl.Float64),
    "recompute_nll_by_query": pl.List(pl.Float64),
    "policy_nll_by_query": pl.List(pl.Float64),
}

RECOMPUTE_TIMINGS_SCHEMA: dict[str, Any] = {
    "baseline": pl.String,
    "window": pl.Int64,
    "tokens": pl.Int64,
    "wall_s": pl.Float64,
    "wall_tokens_per_s": pl.Float64,
}


def recompute_queries(length: int, first_query: int, n_samples: int) -> list[int]:
    """``n_samples`` query indices spread evenly over ``first_query..length-2`` (fewer if the
    region is shorter; empty if it is empty or ``n_samples`` is 0). Query ``t`` predicts token
    ``t + 1``."""
    last = length - 2
    if n_samples <= 0 or first_query > last:
        return []
    grid = np.linspace(first_query, last, num=min(int(n_samples), last - first_query + 1))
    return sorted({int(t) for t in np.rint(grid)})


def _check_same_streams(settings: pl.DataFrame, offsets: Sequence[int], length: int, path: Any):
    """The re-computation must see the streams the caches saw (same corpus cut, same length)."""
    row = settings.row(0, named=True)
    stored = [int(x) for x in str(row["stream_offsets"]).split(",") if x != ""]
    if stored != list(offsets) or int(row["stream_length"]) != length:
        raise ValueError(
            f"{path}: the cache evaluation ran on streams at offsets {stored} of length "
            f"{row['stream_length']}, the current streaming.params give offsets {list(offsets)} "
            f"of length {length}; re-run analyze_streaming for this pair"
        )


def recompute_pair(
    prepared_model_dir: str | Path,
    token_stream: str | Path,
    corpus_provenance: str | Path,
    nll_by_position: str | Path | pl.DataFrame,
    settings: str | Path | pl.DataFrame,
    params: Mapping[str, Any] | None = None,
    *,
    dtype: str | None = None,
    attn_implementation: str = "eager",
    device: str = "auto",
    max_attention: int | None = None,
) -> dict[str, pl.DataFrame]:
    """The caches of :func:`~sinkscope.streaming.experiment.evaluate_pair` against sliding window
    with re-computation.

    For each window size ``L`` of a window-only policy in ``nll_by_position`` (that function's
    table) and each baseline of :data:`RECOMPUTE_BASELINES`, the NLL under re-computation
    (:meth:`~sinkscope.streaming.evaluator.StreamingEvaluator.recompute_nll`) at
    ``recompute_samples`` query positions per
    stream, spread over ``t >= L + k_max`` (``k_max``: the largest sink count of the table, so
    every policy at ``L`` has evicted there; query ``t`` predicts the token at position
    ``t + 1``), next to the NLL of dense, window-only and every sink/neutral policy (cache
    positions) at ``L`` on the same tokens. The caches' NLL is the mean over streams per position
    (``nll_by_position``), so the pairing unit is the sampled position: per policy
    ``policy_vs_recompute`` = mean over positions of (policy - baseline), the log-perplexity ratio
    to the baseline, with its standard error over positions; ``window_vs_recompute`` the same for
    window-only, and ``recovered_fraction = (window_nll - policy_nll) / (window_nll -
    recompute_nll)``: 1 = the policy is as good as re-computation, 0 = as bad as window-only (null
    when window-only is not worse than re-computation: nothing to recover).

    ``settings`` (:func:`~sinkscope.streaming.experiment.evaluate_pair`'s table) must record the
    streams that ``params`` cut
    again here; otherwise a ValueError names the file before any forward pass. The model is loaded
    as :func:`~sinkscope.streaming.experiment.evaluate_pair` loads it (``dtype``,
    ``attn_implementation``, ``device``: see there); ``max_attention`` bounds the attention weights
    per layer of a batch of re-computed windows (None: the device's default,
    :data:`~sinkscope.streaming.evaluator.BATCHING`). Returns the tables
    ``recompute`` (:data:`RECOMPUTE_SCHEMA`) and ``recompute_timings``, with ``model`` and
    ``dataset`` columns.
    """
    from sinkscope.prepare.models import pick_device

    p = {**STREAMING_PARAMS, **dict(params or {})}
    model_name, dataset_name = pair_names(p, prepared_model_dir, corpus_provenance)
    nll_table = _as_frame(nll_by_position)
    nll_source = "nll_by_position" if isinstance(nll_by_position, pl.DataFrame) else nll_by_position
    _check_nll_table(nll_table, nll_source)  # before the model is loaded
    settings_table = _as_frame(settings)
    length = int(p["stream_length"])
    threads_before = torch.get_num_threads()
    if p["threads"]:
        torch.set_num_threads(int(p["threads"]))
    try:
        resolved = pick_device(device)
        streams = load_streams(
            prepared_model_dir,
            token_stream,
            corpus_provenance,
            p,
            dtype=dtype,
            attn_implementation=attn_implementation,
            device=resolved,
        )
        _check_same_streams(settings_table, streams.offsets, length, settings)
        evaluator = StreamingEvaluator(
            streams.model, chunk_size=int(p["chunk_size"]), device=resolved
        )
        rows, times = _recompute_rows(
            evaluator,
            streams,
            nll_table,
            int(p.get("recompute_samples") or 0),
            nll_source,
            max_attention,
        )
    finally:
        torch.set_num_threads(threads_before)
    tables = {
        "recompute": pl.DataFrame(rows, schema=RECOMPUTE_SCHEMA),
        "recompute_timings": pl.DataFrame(times, schema=RECOMPUTE_TIMINGS_SCHEMA),
    }
    return {name: with_names(frame, model_name, dataset_name) for name, frame in tables.items()}


def _as_frame(table: str | Path | pl.DataFrame) -> pl.DataFrame:
    return table if isinstance(table, pl.DataFrame) else pl.read_parquet(table)


#: Columns of ``nll_by_position`` that the re-computation reads.
_NLL_COLUMNS = ("policy", "kind", "n_sink", "window", "positions", "position", "nll")


def _check_nll_table(nll_table: pl.DataFrame, source: Any) -> None:
    """``source`` (the file, for the message) has the columns and the dense policy we read."""
    missing = [c for c in _NLL_COLUMNS if c not in nll_table.columns]
    if missing:
        raise ValueError(f"{source}: columns {missing} are missing; re-run analyze_streaming")
    if "dense" not in nll_table["policy"].unique().to_list():
        raise ValueError(f"{source}: no dense policy; re-run analyze_streaming for this pair")


def _nll_at(
    nll_table: pl.DataFrame, policy: str, positions: Sequence[int], source: Any
) -> np.ndarray:
    """Mean-over-streams NLL of ``policy`` at the token ``positions`` (from ``nll_by_position``,
    read from ``source``: named in the error when a position is missing)."""
    rows = nll_table.filter(pl.col("policy") == policy).select("position", "nll")
    by_position = dict(zip(rows["position"].to_list(), rows["nll"].to_list(), strict=True))
    missing = [t for t in positions if t not in by_position]
    if missing:
        raise ValueError(
            f"{source}: no NLL of policy {policy} at positions {missing}; the caches were "
            "evaluated with other streaming.params: re-run analyze_streaming for this pair"
        )
    return np.array([by_position[t] for t in positions], dtype=np.float64)


def _recompute_rows(
    evaluator: StreamingEvaluator,
    streams: Streams,
    nll_table: pl.DataFrame,
    n_samples: int,
    source: Any = "nll_by_position",
    max_attention: int | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ids = streams.ids
    length = ids.shape[1]
    _check_nll_table(nll_table, source)
    policies = nll_table.select("policy", "kind", "n_sink", "window", "positions").unique()
    k_max = int(policies["n_sink"].max() or 0)
    window_rows = (
        policies.filter(pl.col("kind") == "window")
        .sort("window", pl.col("positions") != "cache")
        .unique("window", keep="first", maintain_order=True)
    )
    rows: list[dict[str, Any]] = []
    times: list[dict[str, Any]] = []
    for window_policy in window_rows.iter_rows(named=True):
        window = int(window_policy["window"])
        queries = recompute_queries(length, window + k_max, n_samples)
        if not queries:
            continue
        positions = [t + 1 for t in queries]
        dense = _nll_at(nll_table, "dense", positions, source)
        window_nll = _nll_at(nll_table, window_policy["policy"], positions, source)
        others = policies.filter(
            pl.col("kind").is_in(["sink", "neutral"])
            & (pl.col("window") == window)
            & (pl.col("positions") == "cache")
        ).sort("kind", "n_sink")
        compared = [window_policy, *others.iter_rows(named=True)]
        for baseline, with_bos in RECOMPUTE_BASELINES.items():
            run = evaluator.recompute_nll(
                ids,
                queries,
                window,
                streams.bos_token_id if with_bos else None,
                max_attention=max_attention,
            )
            times.append(
                {
                    "baseline": baseline,
                    "window": window,
                    "tokens": run.n_tokens,
                    "wall_s": run.wall_s,
                    "wall_tokens_per_s": (
                        run.n_tokens / run.wall_s if run.wall_s > 0 else float("nan")
                    ),
                }
            )
            recompute = run.nll.numpy().astype(np.float64).mean(axis=0)  # per sampled position
            gap = float(window_nll.mean() - recompute.mean())
            for pol in compared:
                values = _nll_at(nll_table, pol["policy"], positions, source)
                diff = values - recompute
                rows.append(
                    {
                        "baseline": baseline,
                        "window": window,
                        "kind": pol["kind"],
                        "n_sink": pol["n_sink"],
                        "policy": pol["policy"],
                        "first_position": positions[0],
                        "n_queries": len(queries),
                        "n_tokens": len(queries) * int(ids.shape[0]),
                        "dense_nll": float(dense.mean()),
                        "window_nll": float(window_nll.mean()),
                        "recompute_nll": float(recompute.mean()),
                        "policy_nll": float(values.mean()),
                        "window_vs_recompute": gap,
                        "policy_vs_recompute": float(diff.mean()),
                        "policy_vs_recompute_se": (
                            float(diff.std(ddof=1) / math.sqrt(diff.size))
                            if diff.size > 1
                            else None
                        ),
                        "recovered_fraction": (
                            float((window_nll.mean() - values.mean()) / gap) if gap > 0 else None
                        ),
                        "window_nll_by_query": window_nll.tolist(),
                        "recompute_nll_by_query": recompute.tolist(),
                        "policy_nll_by_query": values.tolist(),
                    }
                )
    return rows, times
