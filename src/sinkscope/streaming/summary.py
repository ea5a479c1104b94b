"""The StreamingLLM tables across model x dataset pairs (rule ``summarize_streaming``):
:func:`summarize`, :func:`correlation` (Spearman/Pearson with a permutation p-value), and the
number formats that the figures and the claims print alike (:func:`perplexity_factor`,
:func:`eviction_label`, :func:`recovered_label`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import polars as pl

from sinkscope.streaming.recompute import RECOMPUTE_SCHEMA

__all__ = [
    "correlation",
    "eviction_excess",
    "eviction_label",
    "perplexity_factor",
    "recovered_label",
    "summarize",
]


def perplexity_factor(log_ppl_ratio: float) -> str:
    """The factor by which a cache multiplies perplexity over dense, ``exp(log ratio)`` with two
    decimals (StreamingLLM notes: evicting the first tokens raises perplexity sharply)."""
    return f"{math.exp(log_ppl_ratio):.2f}"


def eviction_label(log_ppl_ratio: float | None) -> str:
    """``x`` + :func:`perplexity_factor` (``x2.31``): a window-only bar's label in the summary
    figure and the measured text of claim ``streaming.eviction_hurts``; empty when missing."""
    if log_ppl_ratio is None or math.isnan(log_ppl_ratio):
        return ""
    return f"x{perplexity_factor(log_ppl_ratio)}"


def recovered_label(fraction: float | None) -> str:
    """The share of the window-only log-perplexity excess that the sink tokens remove, in percent
    with one decimal (``95.0%``): the recompute figure's annotations and claim
    ``streaming.sinks_restore``; empty when undefined."""
    if fraction is None or not math.isfinite(fraction):
        return ""
    return f"{100 * fraction:.1f}%"


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.arange(values.size, dtype=np.float64)
    # average ties
    for value in np.unique(values):
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 3 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def correlation(x: Iterable[float], y: Iterable[float], n_perm: int = 10000, seed: int = 0) -> dict:
    """Pearson r, Spearman rho and a two-sided permutation p-value of rho (numpy only)."""
    x = np.asarray(list(x), dtype=np.float64)
    y = np.asarray(list(y), dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(x.size)
    r = _pearson(x, y)
    rho = _pearson(_ranks(x), _ranks(y)) if n >= 3 else float("nan")
    p_value = float("nan")
    if np.isfinite(rho):
        rng = np.random.default_rng(seed)
        rx, ry = _ranks(x), _ranks(y)
        perms = np.array([_pearson(rx, rng.permutation(ry)) for _ in range(n_perm)])
        p_value = float((np.sum(np.abs(perms) >= abs(rho) - 1e-12) + 1) / (n_perm + 1))
    return {"n": n, "pearson_r": r, "spearman_rho": rho, "p_permutation": p_value}


def eviction_excess(pair_tables: Sequence[Mapping[str, pl.DataFrame]]) -> pl.DataFrame:
    """Per pair and window, the window-only cache's NLL excess over the dense cache at every
    evicting position, in position order: ``model, dataset, window, window_excess_by_position``
    (a list; each entry the mean over streams of the token's window-only minus dense NLL).
    Their mean is the pair's ``window_log_ppl_ratio`` (every stream scores every position), and
    the claim ``streaming.eviction_hurts`` takes its interval over them
    (:func:`sinkscope.stats.intervals.block_bootstrap_interval`: neighbouring tokens' NLLs are
    correlated). Pairs without ``nll_by_position`` give no rows."""
    frames = []
    for tables in pair_tables:
        by_position, perplexity = tables.get("nll_by_position"), tables.get("perplexity")
        if by_position is None or perplexity is None or not by_position.height:
            continue
        first = perplexity.filter(
            (pl.col("kind") == "window") & (pl.col("region") == "evicting")
        ).select("model", "dataset", "window", "first_position")
        dense = by_position.filter(pl.col("kind") == "dense").select(
            "model", "dataset", "position", dense_nll="nll"
        )
        excess = (
            by_position.filter(pl.col("kind") == "window")
            .join(first, on=["model", "dataset", "window"])
            .filter(pl.col("position") >= pl.col("first_position"))
            .join(dense, on=["model", "dataset", "position"])
            .sort("model", "dataset", "window", "position")
            .group_by("model", "dataset", "window", maintain_order=True)
            .agg(
                window_excess_by_position=(
                    pl.col("nll").cast(pl.Float64) - pl.col("dense_nll").cast(pl.Float64)
                )
            )
        )
        frames.append(excess)
    if not frames:
        return pl.DataFrame(
            schema={
                "model": pl.String,
                "dataset": pl.String,
                "window": pl.Int64,
                "window_excess_by_position": pl.List(pl.Float64),
            }
        )
    return pl.concat(frames)


def summarize(
    pair_tables: Sequence[Mapping[str, pl.DataFrame]],
    head_tables: Sequence[pl.DataFrame] | pl.DataFrame | None = None,
) -> dict[str, pl.DataFrame]:
    """Tables across model x dataset pairs (each pair: the dict of
    :func:`sinkscope.streaming.experiment.evaluate_pair`).

    * ``perplexity``: every pair's perplexity rows.
    * ``overview``: one row per pair and policy on the ``tail`` region (the region common to
      all policies): ``ppl``, ``dense_ppl``, ``log_ppl_ratio``.
    * ``sink_heads``: per pair the share of sink heads (``is_sink`` of the head tables) and the
      mean BOS mass, next to the window-only damage (``log_ppl_ratio`` on the evicting region,
      and its per-position parts, :func:`eviction_excess`) for every window size, and what
      ``sink{k}`` recovers.
    * ``layers``: the single-layer eviction damage of every pair (``layer_ablation``) next to
      the layer's share of sink heads and mean BOS mass (empty without ablations or heads).
    * ``correlations``: Spearman/Pearson correlations, with n and a permutation p-value --
      across pairs: share of sink heads vs window-only damage (one row per window; with two
      models the pairs of one model share their weights, so n overstates the independent
      evidence); across layers (from ``layer_ablation``): the layer's share of sink heads and mean
      BOS mass vs the damage of evicting in that layer alone, per pair and pooled.
    * ``recompute``: every pair's ``recompute`` table (caches vs sliding window with
      re-computation), sorted.
    """
    perplexity = pl.concat(
        [t["perplexity"] for t in pair_tables if t["perplexity"].height], how="diagonal_relaxed"
    )
    overview = perplexity.filter(pl.col("region") == "tail").select(
        "model",
        "dataset",
        "policy",
        "kind",
        "n_sink",
        "window",
        "n_tokens",
        "ppl",
        "dense_ppl",
        "log_ppl_ratio",
    )
    heads = _head_table(head_tables)
    per_pair = (
        heads.group_by("model", "dataset").agg(
            frac_sink_heads=pl.col("is_sink").cast(pl.Float64).mean(),
            mean_bos_mass=pl.col("bos_mass").mean(),
        )
        if heads is not None
        else None
    )
    evicting = perplexity.filter(pl.col("region") == "evicting")
    window_damage = evicting.filter(pl.col("kind") == "window").select(
        "model", "dataset", "window", window_log_ppl_ratio="log_ppl_ratio"
    )
    sink_damage = evicting.filter(pl.col("kind") == "sink").select(
        "model",
        "dataset",
        "window",
        "n_sink",
        sink_positions="positions",
        sink_log_ppl_ratio="log_ppl_ratio",
    )
    sink_heads = window_damage.join(
        eviction_excess(pair_tables), on=["model", "dataset", "window"], how="left"
    ).join(sink_damage, on=["model", "dataset", "window"], how="left")
    if per_pair is not None:
        sink_heads = sink_heads.join(per_pair, on=["model", "dataset"], how="left")
    sink_heads = sink_heads.sort("model", "dataset", "window", "n_sink")
    corr_rows = []
    if per_pair is not None:
        for window in sorted(window_damage["window"].unique().to_list()):
            # sorted: the permutation p-value depends on the row order (joins do not keep it)
            part = (
                window_damage.filter(pl.col("window") == window)
                .join(per_pair, on=["model", "dataset"], how="inner")
                .sort("model", "dataset")
            )
            for predictor in ("frac_sink_heads", "mean_bos_mass"):
                stats = correlation(part[predictor], part["window_log_ppl_ratio"])
                corr_rows.append(
                    {
                        "level": "pair",
                        "scope": "all pairs",
                        "window": window,
                        "predictor": predictor,
                        "outcome": "window-only log ppl ratio",
                        **stats,
                    }
                )
    ablations = [
        t["layer_ablation"]
        for t in pair_tables
        if "layer_ablation" in t and t["layer_ablation"].height
    ]
    layers_table = pl.DataFrame()
    if ablations and heads is not None:
        per_layer = heads.group_by("model", "dataset", "layer").agg(
            frac_sink_heads=pl.col("is_sink").cast(pl.Float64).mean(),
            mean_bos_mass=pl.col("bos_mass").mean(),
        )
        layers = pl.concat(ablations, how="diagonal_relaxed").join(
            per_layer, on=["model", "dataset", "layer"], how="inner"
        )
        layers = layers_table = layers.sort("model", "dataset", "layer")  # deterministic order
        groups = [("all pairs", layers)]
        for (model, dataset), part in layers.group_by("model", "dataset", maintain_order=True):
            groups.append((f"{model}/{dataset}", part))
        for scope, part in groups:
            for predictor in ("frac_sink_heads", "mean_bos_mass"):
                stats = correlation(part[predictor], part["log_ppl_ratio"])
                corr_rows.append(
                    {
                        "level": "layer",
                        "scope": scope,
                        "window": int(part["window"][0]),
                        "predictor": predictor,
                        "outcome": "single-layer window-only log ppl ratio",
                        **stats,
                    }
                )
    correlations = pl.DataFrame(
        corr_rows,
        schema={
            "level": pl.String,
            "scope": pl.String,
            "window": pl.Int64,
            "predictor": pl.String,
            "outcome": pl.String,
            "n": pl.Int64,
            "pearson_r": pl.Float64,
            "spearman_rho": pl.Float64,
            "p_permutation": pl.Float64,
        },
    )
    recompute_frames = [
        t["recompute"] for t in pair_tables if "recompute" in t and t["recompute"].height
    ]
    recompute = (
        pl.concat(recompute_frames, how="diagonal_relaxed").sort(
            "model", "dataset", "baseline", "window", "kind", "n_sink"
        )
        if recompute_frames
        else pl.DataFrame(schema={"model": pl.String, "dataset": pl.String, **RECOMPUTE_SCHEMA})
    )
    return {
        "perplexity": perplexity,
        "overview": overview,
        "sink_heads": sink_heads,
        "layers": layers_table,
        "correlations": correlations,
        "recompute": recompute,
    }


def _head_table(head_tables: Sequence[pl.DataFrame] | pl.DataFrame | None) -> pl.DataFrame | None:
    if head_tables is None:
        return None
    if isinstance(head_tables, pl.DataFrame):
        frames = [head_tables]
    else:
        frames = [t for t in head_tables if t is not None and t.height]
    if not frames:
        return None
    table = pl.concat(
        [t.select("model", "dataset", "layer", "head", "is_sink", "bos_mass") for t in frames]
    )
    return table
