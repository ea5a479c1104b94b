"""Value matrices and the hard attention switch: value ranks, BOS value-output and residual norms.

1. Value-matrix rank (Appendix E.2, Figure 12): the numerical rank, at relative tolerance
   ``1e-3``, of each key/value head's matrix of value vectors over the first
   ``m = min(T + 1, head_dim)`` positions (BOS included; with causal attention a prefix is the
   same as a shorter sequence), divided by ``min(m, head_dim)`` (:func:`relative_rank`). Ranks
   are per key/value head: the query heads that share one have identical value matrices, so
   pooling over query heads would only repeat each matrix ``H / K`` times. Value vectors are
   recomputed in float32 from the stored float32 residual stream and weights
   (:func:`~sinkscope.extraction.h5read.read_values`; schema 1 stored them in float16, relative rounding
   ``2^-11``, already well below the ``1e-3`` tolerance).

2. Hard attention switch (§6, Proposition 6.1, Theorem C.1, Remark C.4): the norm of a head's
   BOS value-output vector ``W_O^h (W_V^h z_0 + b_V^h)`` relative to the median over the other
   tokens (:func:`value_output_norms`,
   :func:`sinkscope.geometry.alignment.relative_bos_norm`; the theory assumes
   ``W_VO x_0 = 0`` for sink heads), compared between sink and other heads by
   :func:`sink_value_norm_effect` (ratio of medians with a bootstrap interval over heads) and
   summarised per head group by :func:`vo_classes`, and the BOS residual-stream norm relative to
   the other tokens (massive activations,
   :func:`sinkscope.geometry.alignment.row_norms`), per layer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.geometry.halfspace_solver import rank_from_singular_values, torch_threads
from sinkscope.heads.order import dataset_order, sort_pooled_last
from sinkscope.labels import CLASS_LEGEND_NAMES, POOLED
from sinkscope.stats.intervals import bootstrap_t_interval

__all__ = [
    "BOOTSTRAP_LEVEL",
    "BOOTSTRAP_SAMPLES",
    "BOOTSTRAP_SEED",
    "EFFECT_SCHEMA",
    "HIGH_BOS_MASS",
    "LOW_BOS_MASS",
    "RANK_RTOL",
    "RELATION_SCHEMA",
    "VO_GROUP_DEFINITIONS",
    "average_ranks",
    "bootstrap_settings",
    "bos_mass_relation",
    "relative_rank",
    "sink_value_norm_effect",
    "spearman",
    "value_norm_statement",
    "value_output_factor",
    "value_output_norms",
    "vo_classes",
]

#: Relative tolerance of the value-matrix rank (Appendix E.2): singular values > 1e-3 * largest.
RANK_RTOL = 1e-3


def bootstrap_settings(intervals: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``n_boot``, ``seed`` and ``level`` of the bootstraps over heads of this module
    (:func:`sink_value_norm_effect`, :func:`bos_mass_relation`, which decide the claim
    ``geometry.sink_bos_value_small``): the config's ``claims.intervals`` (``n_resamples``,
    ``seed``, ``level``) over their defaults, the settings of every other interval of the
    claims."""
    from sinkscope.stats.intervals import interval_settings

    settings = interval_settings(intervals)
    return {
        "n_boot": int(settings["n_resamples"]),
        "seed": int(settings["seed"]),
        "level": float(settings["level"]),
    }


#: The default bootstrap over heads (:func:`bootstrap_settings` of the schema's defaults).
_DEFAULT_BOOTSTRAP = bootstrap_settings()
BOOTSTRAP_SAMPLES = _DEFAULT_BOOTSTRAP["n_boot"]
BOOTSTRAP_SEED = _DEFAULT_BOOTSTRAP["seed"]
BOOTSTRAP_LEVEL = _DEFAULT_BOOTSTRAP["level"]


def relative_rank(
    matrices: np.ndarray, rtol: float = RANK_RTOL
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Numerical rank of a stack of matrices ``(..., m, n)`` at relative tolerance ``rtol``.

    Returns ``(rank, rel_rank, sigma_ratio_min)``: ``rank`` counts singular values strictly
    greater than ``rtol`` times the largest (0 for a zero matrix), ``rel_rank = rank / min(m,
    n)`` (Appendix E.2), ``sigma_ratio_min`` is the smallest over the largest singular value.
    Computed in float64.
    """
    a = np.asarray(matrices, dtype=np.float64)
    if a.ndim < 2 or min(a.shape[-2:]) == 0:
        raise ValueError(f"matrices must have shape (..., m, n) with m, n >= 1, got {a.shape}")
    with torch_threads(1):
        sigma = torch.linalg.svdvals(torch.from_numpy(np.ascontiguousarray(a))).numpy()
    rank = rank_from_singular_values(sigma, rtol)
    largest = sigma.max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(largest > 0, sigma.min(axis=-1) / np.where(largest > 0, largest, 1), 0.0)
    return rank, rank / min(a.shape[-2:]), ratio


def value_output_factor(w_o: np.ndarray) -> torch.Tensor:
    """Triangular factors ``R_h`` of ``W_O^h = Q_h R_h`` (float64, ``(H, min(D, hd), hd)``).

    ``|W_O^h v| = |R_h v|`` for every ``v``; computed once per layer and passed to
    :func:`value_output_norms` for each block of sequences.
    """
    w = torch.from_numpy(np.ascontiguousarray(w_o, dtype=np.float64))
    if w.ndim != 3:
        raise ValueError(f"W_O must have shape (H, D, hd), got {tuple(w.shape)}")
    with torch_threads(1):
        return torch.linalg.qr(w, mode="r")[1]


def value_output_norms(
    values: np.ndarray, w_o: np.ndarray, factor: torch.Tensor | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Norms of every token's value and value-output vector per query head (§6).

    ``values``: ``(N, K, T1, hd)`` value vectors ``W_V z + b_V`` of the ``K`` key/value heads;
    ``w_o``: ``(H, D, hd)`` output maps (query head ``h`` uses kv head ``h // (H / K)``). Returns
    ``(value_norms, vo_norms)``, both ``(N, H, T1)`` float64: ``|v_t|`` and
    ``|W_O^h v_t| = |W_O^h (W_V^h z_t + b_V^h)|``, the latter through the triangular factor
    ``R_h`` of ``W_O^h = Q_h R_h`` (``|W_O v| = |R v|``, no ``D``-sized products); ``factor``:
    those ``R_h`` from :func:`value_output_factor`, if already computed for ``w_o``.
    """
    v = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    w_shape = np.shape(w_o)  # only its shape: the norms go through the factors R_h
    if v.ndim != 4 or len(w_shape) != 3 or w_shape[2] != v.shape[3] or w_shape[0] % v.shape[1]:
        raise ValueError(f"incompatible values {tuple(v.shape)} and W_O {w_shape}")
    n_kv, n_heads = v.shape[1], w_shape[0]
    group = n_heads // n_kv
    with torch_threads(1):
        r = value_output_factor(w_o) if factor is None else factor  # (H, min(D, hd), hd)
        value_norms = torch.linalg.vector_norm(v, dim=-1)  # (N, K, T1)
        vo = [torch.linalg.vector_norm(v[:, h // group] @ r[h].T, dim=-1) for h in range(n_heads)]
        vo_norms = torch.stack(vo, dim=1)
    kv_of_head = np.arange(n_heads) // group
    return value_norms.numpy()[:, kv_of_head], vo_norms.numpy()


#: Columns of :func:`sink_value_norm_effect`.
EFFECT_SCHEMA: dict[str, Any] = {
    "model": pl.String,
    "dataset": pl.String,
    "n_datasets": pl.Int64,
    "n_sink": pl.Int64,
    "n_other": pl.Int64,
    "n_units": pl.Int64,
    "sink_median": pl.Float64,
    "other_median": pl.Float64,
    "ratio": pl.Float64,
    "ratio_lo": pl.Float64,
    "ratio_hi": pl.Float64,
    "ratio_dataset_min": pl.Float64,
    "ratio_dataset_max": pl.Float64,
    "n_boot": pl.Int64,
    "level": pl.Float64,
}


def head_units(part: pl.DataFrame) -> tuple[np.ndarray, int]:
    """The bootstrap unit of each row of ``part``: its head ``(layer, head)`` numbered 0..n-1
    (a head measured on several datasets is one unit), and n."""
    units = part.select(pl.struct("layer", "head").rank("dense").cast(pl.Int64) - 1).to_series()
    units = units.to_numpy()
    return units, int(units.max()) + 1 if units.size else 0


def resample_units(rng: np.random.Generator, units: np.ndarray, n_units: int) -> np.ndarray:
    """Row indices of one bootstrap resample: ``n_units`` units drawn with replacement, each
    bringing all its rows."""
    weight = np.bincount(rng.integers(n_units, size=n_units), minlength=n_units)
    return np.repeat(np.arange(units.size), weight[units])


def sink_value_norm_effect(
    bos_value_norm: pl.DataFrame,
    with_pooled: bool = True,
    n_boot: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = BOOTSTRAP_LEVEL,
) -> pl.DataFrame:
    """Effect size of §6's ``W_VO x_0 = 0``: sink heads' BOS value-output norm vs. other heads'.

    ``bos_value_norm``: per-head rows of :func:`~sinkscope.geometry.analysis.analyze_file`
    (``rel_bos_vo_norm`` = ``|W_VO z_0| / median_i |W_VO z_i|`` averaged over sequences, ``is_sink``
    from :func:`sinkscope.heads.classify.with_classes`). Per (model, dataset) and, with
    ``with_pooled``, per model over all its datasets (``dataset = "all"``): the medians over sink
    and non-sink head instances, their ratio ``sink / other`` (the effect size; ``W_VO x_0 = 0``
    is ratio 0, no difference is 1) and a t-interval at ``level`` with the bootstrap standard
    error of ``n_boot`` resamples of the heads
    (:func:`sinkscope.stats.intervals.bootstrap_t_interval`): the unit of resampling is the head ``(layer, head)`` with all its
    dataset instances (the same head measured on four datasets is one unit, not four
    independent ones), and a head keeps its per-dataset ``is_sink`` label. ``ratio_dataset_min``
    / ``ratio_dataset_max``: the smallest and largest per-dataset ratio (the spread across
    datasets; equal to ``ratio`` on a single dataset). Each group uses a fresh generator seeded
    with ``seed``, so the numbers do not depend on what else is in the table. Columns:
    ``model, dataset, n_datasets, n_sink, n_other, n_units, sink_median, other_median, ratio,
    ratio_lo, ratio_hi, ratio_dataset_min, ratio_dataset_max, n_boot, level`` (statistics null
    when a group has no sink or no other head).
    """
    needed = ["model", "dataset", "layer", "head", "rel_bos_vo_norm", "is_sink"]
    missing = [c for c in needed if c not in bos_value_norm.columns]
    if missing:
        raise ValueError(f"bos_value_norm lacks columns {missing}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    frame = bos_value_norm.select(needed).filter(
        pl.col("rel_bos_vo_norm").is_not_null() & pl.col("rel_bos_vo_norm").is_finite()
    )

    def ratio_of(values: np.ndarray, sink: np.ndarray) -> float:
        if not sink.any() or sink.all():
            return float("nan")
        return float(np.median(values[sink]) / np.median(values[~sink]))

    def effect(part: pl.DataFrame) -> dict[str, Any]:
        part = part.sort("dataset", "layer", "head")
        values = part["rel_bos_vo_norm"].to_numpy().astype(np.float64)
        sink = part["is_sink"].to_numpy().astype(bool)
        units, n_units = head_units(part)
        per_dataset = [
            ratio_of(
                g["rel_bos_vo_norm"].to_numpy().astype(np.float64),
                g["is_sink"].to_numpy().astype(bool),
            )
            for _, g in part.group_by("dataset", maintain_order=True)
        ]
        finite = [r for r in per_dataset if math.isfinite(r)]
        ratio = ratio_of(values, sink)
        lo = hi = float("nan")
        if math.isfinite(ratio) and n_boot > 0:
            rng = np.random.default_rng(seed)
            draws = np.empty(n_boot)
            for b in range(n_boot):
                take = resample_units(rng, units, n_units)
                draws[b] = ratio_of(values[take], sink[take])
            lo, hi = (
                bootstrap_t_interval(ratio, draws, n_units, level)
                if n_units >= 2
                else (
                    float("nan"),
                    float("nan"),
                )
            )
        return {
            "n_datasets": int(part["dataset"].n_unique()),
            "n_sink": int(sink.sum()),
            "n_other": int((~sink).sum()),
            "n_units": n_units,
            "sink_median": float(np.median(values[sink])) if sink.any() else None,
            "other_median": float(np.median(values[~sink])) if (~sink).any() else None,
            "ratio": ratio if math.isfinite(ratio) else None,
            "ratio_lo": lo if math.isfinite(lo) else None,
            "ratio_hi": hi if math.isfinite(hi) else None,
            "ratio_dataset_min": min(finite) if finite else None,
            "ratio_dataset_max": max(finite) if finite else None,
            "n_boot": int(n_boot),
            "level": float(level),
        }

    rows: list[dict[str, Any]] = []
    for model in sorted(set(frame["model"].to_list())):
        by_model = frame.filter(pl.col("model") == model)
        datasets = dataset_order(by_model["dataset"].to_list())
        for dataset in datasets:
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    **effect(by_model.filter(pl.col("dataset") == dataset)),
                }
            )
        if with_pooled:
            rows.append({"model": model, "dataset": POOLED, **effect(by_model)})
    return pl.DataFrame(rows, schema=EFFECT_SCHEMA)


#: BOS mass of a head that clearly sinks (well above the sink threshold 0.4) and of one that
#: barely looks at BOS: the two ends :func:`bos_mass_relation` compares (the relation itself is
#: read over every head, by rank).
HIGH_BOS_MASS = 0.6
LOW_BOS_MASS = 0.1

RELATION_SCHEMA: dict[str, Any] = {
    "model": pl.String,
    "dataset": pl.String,
    "n_head_instances": pl.Int64,
    "spearman": pl.Float64,
    "spearman_lo": pl.Float64,
    "spearman_hi": pl.Float64,
    "n_high": pl.Int64,
    "n_low": pl.Int64,
    "n_high_heads": pl.Int64,
    "n_low_heads": pl.Int64,
    "median_high": pl.Float64,
    "median_low": pl.Float64,
    "ratio_high_low": pl.Float64,
    "ratio_high_low_lo": pl.Float64,
    "ratio_high_low_hi": pl.Float64,
}


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x`` with ties given their average rank (as Spearman's correlation needs)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.arange(1, x.size + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks (NaN when either
    side is constant)."""
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denominator) if denominator > 0 else float("nan")


def bos_mass_relation(
    bos_value_norm: pl.DataFrame,
    with_pooled: bool = True,
    n_boot: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = BOOTSTRAP_LEVEL,
) -> pl.DataFrame:
    """§6's assumption ``W_VO x_0 = 0`` read where it applies, graded: the more a head sinks,
    the smaller its BOS value-output vector. Per (model, dataset) and, with ``with_pooled``, per
    model (``dataset = "all"``), over the head instances of ``bos_value_norm`` (the per-head rows
    of :func:`sink_value_norm_effect`'s input): Spearman's correlation of ``bos_mass`` with
    ``rel_bos_vo_norm`` (negative: the relation the assumption implies), and the ratio of the
    median ``rel_bos_vo_norm`` at ``bos_mass >= HIGH_BOS_MASS`` to the median at ``bos_mass <
    LOW_BOS_MASS``, each with a t-interval at ``level`` with the bootstrap standard error over
    heads (:func:`sinkscope.stats.intervals.bootstrap_t_interval`; the unit is the head
    ``(layer, head)`` with all its dataset instances, as in :func:`sink_value_norm_effect`; a
    fresh generator seeded with ``seed`` per group; the correlation's t has ``heads - 1``
    degrees of freedom). ``n_high`` / ``n_low`` count the head instances at each end,
    ``n_high_heads`` / ``n_low_heads`` the distinct heads among them: the units the ratio's
    bootstrap draws from each end, whose fewer, less one, are its t's degrees of freedom. Columns
    :data:`RELATION_SCHEMA` (statistics null where a side is empty or constant)."""
    needed = ["model", "dataset", "layer", "head", "rel_bos_vo_norm", "bos_mass"]
    missing = [c for c in needed if c not in bos_value_norm.columns]
    if missing:
        raise ValueError(f"bos_value_norm lacks columns {missing}")
    frame = bos_value_norm.select(needed).filter(
        pl.col("rel_bos_vo_norm").is_not_null() & pl.col("rel_bos_vo_norm").is_finite()
    )

    def ratio_of(norm: np.ndarray, mass: np.ndarray) -> float:
        high, low = norm[mass >= HIGH_BOS_MASS], norm[mass < LOW_BOS_MASS]
        if not high.size or not low.size or np.median(low) == 0:
            return float("nan")
        return float(np.median(high) / np.median(low))

    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    def relation(part: pl.DataFrame) -> dict[str, Any]:
        part = part.sort("dataset", "layer", "head")
        norm = part["rel_bos_vo_norm"].to_numpy().astype(np.float64)
        mass = part["bos_mass"].to_numpy().astype(np.float64)
        units, n_units = head_units(part)
        rho = spearman(mass, norm) if norm.size >= 3 else float("nan")
        ratio = ratio_of(norm, mass)
        bounds = {"rho": (float("nan"),) * 2, "ratio": (float("nan"),) * 2}
        if n_units >= 2 and n_boot > 0:
            rng = np.random.default_rng(seed)
            draws = np.empty((n_boot, 2))
            for b in range(n_boot):
                take = resample_units(rng, units, n_units)
                draws[b] = spearman(mass[take], norm[take]), ratio_of(norm[take], mass[take])
            ends = min(
                np.unique(units[mass >= HIGH_BOS_MASS]).size,
                np.unique(units[mass < LOW_BOS_MASS]).size,
            )
            with np.errstate(all="ignore"):
                for key, column, value, dof in (
                    ("rho", 0, rho, n_units - 1),
                    ("ratio", 1, ratio, ends - 1),
                ):
                    if np.isfinite(draws[:, column]).any() and math.isfinite(value) and dof >= 1:
                        bounds[key] = bootstrap_t_interval(value, draws[:, column], dof + 1, level)
                if math.isfinite(rho):  # a correlation lies in [-1, 1]
                    lo, hi = bounds["rho"]
                    bounds["rho"] = (max(lo, -1.0), min(hi, 1.0))
                if math.isfinite(ratio):  # a ratio of norms is not negative
                    bounds["ratio"] = (max(bounds["ratio"][0], 0.0), bounds["ratio"][1])
        high, low = norm[mass >= HIGH_BOS_MASS], norm[mass < LOW_BOS_MASS]
        return {
            "n_head_instances": int(norm.size),
            "spearman": finite(rho),
            "spearman_lo": finite(bounds["rho"][0]) if math.isfinite(rho) else None,
            "spearman_hi": finite(bounds["rho"][1]) if math.isfinite(rho) else None,
            "n_high": int(high.size),
            "n_low": int(low.size),
            "n_high_heads": int(np.unique(units[mass >= HIGH_BOS_MASS]).size),
            "n_low_heads": int(np.unique(units[mass < LOW_BOS_MASS]).size),
            "median_high": float(np.median(high)) if high.size else None,
            "median_low": float(np.median(low)) if low.size else None,
            "ratio_high_low": finite(ratio),
            "ratio_high_low_lo": finite(bounds["ratio"][0]) if math.isfinite(ratio) else None,
            "ratio_high_low_hi": finite(bounds["ratio"][1]) if math.isfinite(ratio) else None,
        }

    rows: list[dict[str, Any]] = []
    for model in sorted(set(frame["model"].to_list())):
        by_model = frame.filter(pl.col("model") == model)
        for dataset in dataset_order(by_model["dataset"].to_list()):
            part = by_model.filter(pl.col("dataset") == dataset)
            rows.append({"model": model, "dataset": dataset, **relation(part)})
        if with_pooled:
            rows.append({"model": model, "dataset": POOLED, **relation(by_model)})
    return pl.DataFrame(rows, schema=RELATION_SCHEMA)


def value_norm_statement(effect: Mapping[str, Any]) -> str:
    """One row of :func:`sink_value_norm_effect` in words."""
    e = effect

    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3g}"

    text = (
        f"median |W_VO z_0| / median_i |W_VO z_i|: {num(e['sink_median'])} over {e['n_sink']} "
        f"sink head instances (is_sink) vs {num(e['other_median'])} over {e['n_other']} other "
        f"head instances; ratio {num(e['ratio'])}"
    )
    if e["ratio_lo"] is not None:
        text += (
            f" ({100 * e['level']:.0f}% bootstrap interval over heads {num(e['ratio_lo'])}-"
            f"{num(e['ratio_hi'])})"
        )
    if e["ratio_dataset_min"] is not None and e["ratio_dataset_min"] != e["ratio_dataset_max"]:
        text += f"; per dataset {num(e['ratio_dataset_min'])}-{num(e['ratio_dataset_max'])}"
    return text


#: Columns of :func:`sink_value_norm_effect` carried by the ``"is_sink"`` rows of the summary
#: table ``bos_value_norm_classes`` (null on the other groups' rows).
_EFFECT_COLUMNS = (
    "n_sink",
    "n_other",
    "sink_median",
    "other_median",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "ratio_dataset_min",
    "ratio_dataset_max",
    "n_units",
    "n_boot",
    "level",
)


#: ``definition`` of the two kinds of ``bos_value_norm_classes`` groups.
VO_GROUP_DEFINITIONS: dict[str, str] = {
    "head_class": "exclusive head_class of the class map (its sink excludes sink+previous)",
    "is_sink": "is_sink flag: bos_mass >= the sink threshold, sink+previous included",
}


def vo_classes(
    bos_value_norm: pl.DataFrame, intervals: Mapping[str, Any] | None = None
) -> pl.DataFrame:
    """Distribution of ``rel_bos_vo_norm`` per model, dataset (and ``"all"``) and head group.

    Groups (column ``definition``, :data:`VO_GROUP_DEFINITIONS`): every exclusive
    ``head_class``, named as in the class map's legend
    (:data:`sinkscope.heads.names.CLASS_LEGEND_NAMES`: its sink group is
    ``"sink (not sink+previous)"``, so that it cannot be read as the ``is_sink`` group that the
    claim ``geometry.sink_bos_value_small`` and the value-norm figure use), and ``"is_sink"`` / ``"not_sink"``
    (the ``is_sink`` flag of :func:`sinkscope.heads.classify.with_classes`: every head with
    ``bos_mass`` at the sink threshold, sink+previous included; the claim and the value-norm
    figure use these). The ``"is_sink"``
    rows also carry the effect size of :func:`sink_value_norm_effect` (ratio of the sink to the
    non-sink median with its bootstrap interval and per-dataset spread) and the graded relation
    of :func:`bos_mass_relation` (Spearman's correlation of BOS mass with the relative BOS value
    norm, and the high / low BOS-mass median ratio, with their intervals; ``intervals``: the
    config's ``claims.intervals``, :func:`bootstrap_settings`).
    """

    def stats(frame: pl.DataFrame, group: pl.Expr, definition: str) -> pl.DataFrame:
        r = pl.col("rel_bos_vo_norm")
        return (
            frame.with_columns(group=group, definition=pl.lit(VO_GROUP_DEFINITIONS[definition]))
            .group_by("model", "dataset", "group", "definition")
            .agg(
                pl.len().cast(pl.Int64).alias("n_heads"),
                r.quantile(0.25, "linear").alias("q1_rel_bos_vo_norm"),
                r.median().alias("median_rel_bos_vo_norm"),
                r.quantile(0.75, "linear").alias("q3_rel_bos_vo_norm"),
                pl.col("rel_bos_value_norm").median().alias("median_rel_bos_value_norm"),
                pl.col("bos_mass").mean().alias("mean_bos_mass"),
            )
        )

    both = pl.concat([bos_value_norm, bos_value_norm.with_columns(dataset=pl.lit(POOLED))])
    parts = [
        stats(
            both,
            pl.col("head_class").replace_strict(CLASS_LEGEND_NAMES, return_dtype=pl.String),
            "head_class",
        ),
        stats(
            both,
            pl.when(pl.col("is_sink")).then(pl.lit("is_sink")).otherwise(pl.lit("not_sink")),
            "is_sink",
        ),
    ]
    settings = bootstrap_settings(intervals)
    effect = sink_value_norm_effect(bos_value_norm, **settings).select(
        "model", "dataset", *_EFFECT_COLUMNS
    )
    relation = bos_mass_relation(bos_value_norm, **settings).drop("n_head_instances")
    carried = (*_EFFECT_COLUMNS, *(c for c in relation.columns if c not in ("model", "dataset")))
    joined = (
        pl.concat(parts)
        .join(effect, on=["model", "dataset"], how="left")
        .join(relation, on=["model", "dataset"], how="left")
        .with_columns(
            *(pl.when(pl.col("group") == "is_sink").then(pl.col(c)).alias(c) for c in carried)
        )
    )
    return sort_pooled_last(joined, "group")
