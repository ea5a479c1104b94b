"""Figures of the geometry analyses (:mod:`sinkscope.geometry`).

Every function takes one table or a list of tables (as returned by
:func:`sinkscope.geometry.analyze_file`, or the pooled ones of
:func:`sinkscope.geometry.summarize`), an output path and a title, builds its figure with
:func:`sinkscope.plotting.new_figure` and writes it with :func:`sinkscope.plotting.save_figure`
(atomic, deterministic PNG). Box plots follow the paper's Figures 1 and 12: the box spans the
quartiles, the line is the median and the whiskers reach the absolute minimum and maximum (no
1.5 IQR rule, no fliers).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sinkscope.geometry import ALL_TOKENS, ATTENDING, BOS_MINUS_TOKEN, POOLED, RANK_RTOL
from sinkscope.heads import HEAD_CLASSES
from sinkscope.plotting import CLASS_COLORS, new_figure, save_figure

__all__ = [
    "plot_bos_alignment",
    "plot_bos_residual_norm",
    "plot_bos_value_norm",
    "plot_halfspace_margins",
    "plot_value_rank",
]

Tables = pl.DataFrame | Sequence[pl.DataFrame]

_SPACE_LABELS: dict[str, str] = {
    "Z": "attention input Z (normed, with gain)",
    "X": "residual stream X",
}
_SET_LABELS: dict[str, str] = {
    BOS_MINUS_TOKEN: "{z0 - zi : i in [T]}",
    ATTENDING: "{zj : j in J} (sink-attending)",
    ALL_TOKENS: "{zi : i in [T]} (any sink pattern)",
}
_SET_COLORS: dict[str, str] = {
    BOS_MINUS_TOKEN: "#7570b3",
    ATTENDING: "#e6ab02",
    ALL_TOKENS: "#66a61e",
}


def _concat(tables: Tables, required: Sequence[str]) -> pl.DataFrame:
    frames = [tables] if isinstance(tables, pl.DataFrame) else list(tables)
    if not frames:
        raise ValueError("no table to plot")
    frame = pl.concat(frames, how="diagonal_relaxed")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"table lacks columns {missing}")
    if frame.height == 0:
        raise ValueError("the table to plot is empty")
    return frame


def _dataset_order(datasets: Sequence[str]) -> list[str]:
    return sorted(set(datasets), key=lambda name: (name == POOLED, name))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _dataset_label(dataset: str, n_datasets: int | None = None) -> str:
    if dataset == POOLED:
        return f"pooled over {_plural(n_datasets, 'dataset')}" if n_datasets else "pooled"
    return dataset


def _panel_grid(n: int, max_cols: int = 2) -> tuple[int, int]:
    cols = min(n, max_cols)
    return (n + cols - 1) // cols, cols


def _box_stats(values: np.ndarray) -> dict[str, Any]:
    """Box statistics with min/max whiskers (Figures 1 and 12) from raw values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    q1, med, q3 = np.quantile(v, [0.25, 0.5, 0.75])
    return {
        "med": med,
        "q1": q1,
        "q3": q3,
        "whislo": v.min(),
        "whishi": v.max(),
        "mean": v.mean(),
        "fliers": [],
    }


def _draw_boxes(
    ax: Axes, stats: list[dict[str, Any]], positions: Sequence[float], width: float, color: str
) -> None:
    ax.bxp(
        stats,
        positions=list(positions),
        widths=width,
        showfliers=False,
        showmeans=False,
        patch_artist=True,
        manage_ticks=False,
        boxprops={"facecolor": color, "edgecolor": "black", "linewidth": 0.6, "alpha": 0.85},
        medianprops={"color": "black", "linewidth": 1.0},
        whiskerprops={"color": "black", "linewidth": 0.6},
        capprops={"color": "black", "linewidth": 0.6},
    )


def _layer_ticks(ax: Axes, layers: Sequence[int]) -> None:
    layers = sorted(layers)
    step = max(1, int(np.ceil(len(layers) / 16)))
    ax.set_xticks(layers[::step])
    ax.set_xlim(min(layers) - 0.7, max(layers) + 0.7)
    ax.set_xlabel("layer")


def _scope(frame: pl.DataFrame) -> str:
    """'N=.. sequences, T=..' for a panel (sequences summed over datasets)."""
    parts = []
    if "n_sequences" in frame.columns:
        per_dataset = frame.group_by("dataset").agg(pl.col("n_sequences").max())
        parts.append(f"N={int(per_dataset['n_sequences'].sum())} seq")
    elif "sequence" in frame.columns:
        per_dataset = frame.group_by("dataset").agg(pl.col("sequence").n_unique())
        parts.append(f"N={int(per_dataset['sequence'].sum())} seq")
    if "context_length" in frame.columns and frame["context_length"].drop_nulls().len():
        parts.append(f"T={int(frame['context_length'].max())}")
    return ", ".join(parts)


def plot_bos_alignment(
    tables: Tables, out_png: str | os.PathLike[str], title: str, space: str = "Z"
) -> None:
    """Figure 1: per layer, the cosine between BOS and every other token (box = quartiles,
    whiskers = absolute min and max), one panel per model, one colour per dataset.

    ``tables``: ``bos_alignment`` tables of :func:`~sinkscope.geometry.analyze_file` (one per
    pair) or the pooled one of :func:`~sinkscope.geometry.summarize` (dataset ``"all"``).
    ``space``: ``"Z"`` (attention input, the paper's Figure 1) or ``"X"`` (residual stream).
    A cross marks the maximum over positions >= 2 (the first text token often aligns with BOS).
    """
    frame = _concat(
        tables, ["model", "dataset", "space", "layer", "min", "q1", "median", "q3", "max"]
    ).filter(pl.col("space") == space)
    if frame.height == 0:
        raise ValueError(f"no rows for space {space!r}")
    models = sorted(set(frame["model"].to_list()))
    rows, cols = _panel_grid(len(models), max_cols=1)
    n_layers = int(frame["layer"].n_unique())
    n_sets = max(len(set(frame.filter(pl.col("model") == m)["dataset"].to_list())) for m in models)
    fig = new_figure(max(8.0, 0.32 * n_layers * max(1, n_sets) + 2.5), 3.4 * rows + 0.8)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
    palette = sns.color_palette("tab10")
    all_datasets = _dataset_order(frame["dataset"].to_list())
    color_of = {name: palette[i % len(palette)] for i, name in enumerate(all_datasets)}
    for ax, model in zip(axes, models, strict=False):
        sub = frame.filter(pl.col("model") == model)
        datasets = _dataset_order(sub["dataset"].to_list())
        width = 0.8 / len(datasets)
        for k, dataset in enumerate(datasets):
            part = sub.filter(pl.col("dataset") == dataset).sort("layer")
            offset = (k - (len(datasets) - 1) / 2) * width
            stats = [
                {
                    "med": r["median"],
                    "q1": r["q1"],
                    "q3": r["q3"],
                    "whislo": r["min"],
                    "whishi": r["max"],
                    "fliers": [],
                }
                for r in part.iter_rows(named=True)
            ]
            positions = [layer + offset for layer in part["layer"].to_list()]
            _draw_boxes(ax, stats, positions, width * 0.85, color_of[dataset])
            if "max_excl_first" in part.columns:
                ax.scatter(
                    positions,
                    part["max_excl_first"].to_numpy(),
                    marker="x",
                    s=14,
                    color="black",
                    linewidths=0.8,
                    zorder=3,
                )
        ax.axhline(0.0, color="crimson", linewidth=0.8, linestyle="--", zorder=0)
        _layer_ticks(ax, sub["layer"].unique().to_list())
        ax.set_ylim(-1.02, 1.02)
        ax.set_ylabel(f"cos(BOS, token)\n{_SPACE_LABELS.get(space, space)}")
        n_datasets = sub["n_datasets"].max() if "n_datasets" in sub.columns else None
        below = sub.group_by("layer").agg(pl.col("max").max()).filter(pl.col("max") < 0).height
        ax.set_title(
            f"{model}: {', '.join(_dataset_label(d, n_datasets) for d in datasets)} "
            f"({_scope(sub)}); max < 0 in {below} of {sub['layer'].n_unique()} layers",
            fontsize=10,
        )
        handles = [
            Patch(facecolor=color_of[d], edgecolor="black", label=_dataset_label(d, n_datasets))
            for d in datasets
        ]
        handles.append(
            Line2D([], [], marker="x", color="black", linestyle="", label="max over positions >= 2")
        )
        ax.legend(handles=handles, loc="lower left", fontsize=8, frameon=True, ncols=2)
    for ax in axes[len(models) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    save_figure(fig, out_png)


def plot_halfspace_margins(tables: Tables, out_png: str | os.PathLike[str], title: str) -> None:
    """Proposition 4.1 margins per layer: for each point set, the distribution over sequences
    (and datasets) of the normalised margin ``gamma`` (box = quartiles, whiskers = min/max).

    ``tables``: ``halfspace`` tables of :func:`~sinkscope.geometry.analyze_file`. A set lies in
    an open half-space iff ``gamma > 0``; the panel title gives the fraction of (layer,
    sequence) pairs where the sink is representable and where the test is trivial.
    """
    frame = _concat(
        tables, ["model", "dataset", "layer", "sequence", "point_set", "margin", "halfspace"]
    )
    models = sorted(set(frame["model"].to_list()))
    rows, cols = _panel_grid(len(models), max_cols=1)
    n_layers = int(frame["layer"].n_unique())
    fig = new_figure(max(8.0, 0.5 * n_layers + 2.5), 3.4 * rows + 0.8)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
    sets = [BOS_MINUS_TOKEN, ATTENDING, ALL_TOKENS]
    width = 0.8 / len(sets)
    for ax, model in zip(axes, models, strict=False):
        sub = frame.filter(pl.col("model") == model)
        for k, name in enumerate(sets):
            part = sub.filter((pl.col("point_set") == name) & pl.col("margin").is_not_null())
            if part.height == 0:
                continue
            grouped = part.group_by("layer").agg(pl.col("margin")).sort("layer")
            stats = [_box_stats(np.asarray(m)) for m in grouped["margin"].to_list()]
            offset = (k - 1) * width
            positions = [layer + offset for layer in grouped["layer"].to_list()]
            _draw_boxes(ax, stats, positions, width * 0.85, _SET_COLORS[name])
        ax.axhline(0.0, color="crimson", linewidth=0.8, linestyle="--", zorder=0)
        _layer_ticks(ax, sub["layer"].unique().to_list())
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("margin gamma\n(cosine to the best direction)")
        wide = sub.pivot(
            on="point_set", index=["dataset", "layer", "sequence"], values=["halfspace"]
        )
        with_j = wide.filter(pl.col(ATTENDING).is_not_null())
        representable = (
            (with_j[BOS_MINUS_TOKEN] & with_j[ATTENDING]).mean() if with_j.height else None
        )
        trivial = (
            sub.filter(pl.col("point_set") != ATTENDING)["trivially_separable"].mean()
            if "trivially_separable" in sub.columns
            else None
        )
        datasets = _dataset_order(sub["dataset"].to_list())
        text = f"{model}: {', '.join(datasets)} ({_scope(sub)}); sink representable in "
        text += f"{100 * representable:.1f}%" if representable is not None else "n/a"
        text += " of (layer, seq) with sink-attending tokens"
        if trivial is not None:
            text += f"; trivially separable: {100 * trivial:.0f}%"
        ax.set_title(text, fontsize=9)
        ax.legend(
            handles=[
                Patch(facecolor=_SET_COLORS[n], edgecolor="black", label=_SET_LABELS[n])
                for n in sets
            ],
            loc="lower left",
            fontsize=8,
            ncols=3,
        )
    for ax in axes[len(models) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    save_figure(fig, out_png)


def plot_value_rank(tables: Tables, out_png: str | os.PathLike[str], title: str) -> None:
    """Figure 12: relative rank of the value matrices per layer (box = quartiles, whiskers =
    min/max), pooled over kv heads and sequences; top row pooled over datasets, then one row
    per dataset; one column per model.

    ``tables``: raw ``value_rank`` tables of :func:`~sinkscope.geometry.analyze_file`.
    """
    frame = _concat(tables, ["model", "dataset", "layer", "sequence", "rel_rank", "m"])
    models = sorted(set(frame["model"].to_list()))
    datasets = _dataset_order(frame["dataset"].to_list())
    row_names = ([POOLED] if len(datasets) > 1 else []) + datasets
    n_layers = int(frame["layer"].n_unique())
    fig = new_figure(
        max(6.0, (0.3 * n_layers + 1.5) * len(models) + 1.0), 2.6 * len(row_names) + 0.8
    )
    axes = fig.subplots(len(row_names), len(models), squeeze=False)
    for j, model in enumerate(models):
        by_model = frame.filter(pl.col("model") == model)
        for i, row_name in enumerate(row_names):
            ax = axes[i, j]
            sub = by_model if row_name == POOLED else by_model.filter(pl.col("dataset") == row_name)
            if sub.height == 0:
                ax.set_visible(False)
                continue
            grouped = sub.group_by("layer").agg(pl.col("rel_rank")).sort("layer")
            stats = [_box_stats(np.asarray(v)) for v in grouped["rel_rank"].to_list()]
            color = "#7fc97f" if row_name == POOLED else "#beaed4"
            _draw_boxes(ax, stats, grouped["layer"].to_list(), 0.7, color)
            _layer_ticks(ax, grouped["layer"].to_list())
            low = float(sub["rel_rank"].min())
            ax.set_ylim(min(0.0, low) - 0.02, 1.02)
            ax.set_ylabel("rank / min(m, n)")
            label = (
                f"pooled over {_plural(sub['dataset'].n_unique(), 'dataset')}"
                if row_name == POOLED
                else row_name
            )
            n_seq = sub.group_by("dataset").agg(pl.col("sequence").n_unique())["sequence"].sum()
            ax.set_title(
                f"{model}: {label} (N={n_seq} seq, m={int(sub['m'].max())} tokens, min {low:.2f})",
                fontsize=9,
            )
    fig.suptitle(f"{title}\n(relative tolerance {RANK_RTOL:g})")
    save_figure(fig, out_png)


def plot_bos_value_norm(tables: Tables, out_png: str | os.PathLike[str], title: str) -> None:
    """§6 / Remark C.4: per head, BOS attention mass vs. the BOS value-output norm relative to
    the median token (log scale), coloured by head class; one panel per model, one marker per
    dataset. A head implementing the hard attention switch has a small relative norm.

    ``tables``: ``bos_value_norm`` tables of :func:`~sinkscope.geometry.analyze_file`.
    """
    frame = _concat(
        tables, ["model", "dataset", "layer", "head", "bos_mass", "rel_bos_vo_norm", "head_class"]
    )
    models = sorted(set(frame["model"].to_list()))
    rows, cols = _panel_grid(len(models), max_cols=2)
    fig = new_figure(6.0 * cols + 1.0, 4.6 * rows + 0.6)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    datasets = _dataset_order(frame["dataset"].to_list())
    marker_of = {d: markers[i % len(markers)] for i, d in enumerate(datasets)}
    for ax, model in zip(axes, models, strict=False):
        sub = frame.filter((pl.col("model") == model) & pl.col("rel_bos_vo_norm").is_not_nan())
        for dataset in _dataset_order(sub["dataset"].to_list()):
            for head_class in HEAD_CLASSES:
                part = sub.filter(
                    (pl.col("dataset") == dataset) & (pl.col("head_class") == head_class)
                )
                if part.height == 0:
                    continue
                ax.scatter(
                    part["bos_mass"].to_numpy(),
                    part["rel_bos_vo_norm"].to_numpy(),
                    s=22,
                    marker=marker_of[dataset],
                    color=CLASS_COLORS[head_class],
                    edgecolors="black",
                    linewidths=0.4,
                    alpha=0.9,
                )
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlim(-0.02, 1.02)
        ax.set_xlabel("BOS attention mass of the head")
        ax.set_ylabel("|W_VO z_0| / median_i |W_VO z_i|")
        sink = (
            sub.filter(pl.col("is_sink"))["rel_bos_vo_norm"] if "is_sink" in sub.columns else None
        )
        rest = (
            sub.filter(~pl.col("is_sink"))["rel_bos_vo_norm"] if "is_sink" in sub.columns else None
        )
        summary = ""
        if sink is not None and sink.len() and rest is not None and rest.len():
            summary = f"\nmedian: sink heads {sink.median():.3g}, other heads {rest.median():.3g}"
        n_seq = sub.group_by("dataset").agg(pl.col("n_sequences").max())["n_sequences"].sum()
        ax.set_title(
            f"{model}: {', '.join(_dataset_order(sub['dataset'].to_list()))} "
            f"(N={n_seq} seq){summary}",
            fontsize=9,
        )
        counts = sub["head_class"].value_counts()
        count_of = dict(zip(counts["head_class"], counts["count"], strict=True))
        handles: list[Any] = [
            Patch(facecolor=CLASS_COLORS[c], edgecolor="black", label=f"{c} ({count_of.get(c, 0)})")
            for c in HEAD_CLASSES
        ]
        panel_datasets = _dataset_order(sub["dataset"].to_list())
        if len(datasets) > 1:
            handles += [
                Line2D([], [], marker=marker_of[d], color="black", linestyle="", label=d)
                for d in panel_datasets
            ]
        ax.legend(handles=handles, fontsize=7, loc="best", title="head class (count)")
    for ax in axes[len(models) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    save_figure(fig, out_png)


def plot_bos_residual_norm(tables: Tables, out_png: str | os.PathLike[str], title: str) -> None:
    """Massive activations: per layer, the BOS residual-stream norm relative to the median
    token norm (mean over sequences; band = min..max over sequences), one line per model and
    dataset, log scale.

    ``tables``: ``bos_residual_norm`` tables of :func:`~sinkscope.geometry.analyze_file` or the
    pooled one of :func:`~sinkscope.geometry.summarize`.
    """
    frame = _concat(
        tables,
        ["model", "dataset", "layer", "rel_bos_norm", "rel_bos_norm_min", "rel_bos_norm_max"],
    )
    fig = new_figure(8.5, 4.6)
    ax = fig.subplots()
    palette = sns.color_palette("tab10")
    models = sorted(set(frame["model"].to_list()))
    datasets = _dataset_order(frame["dataset"].to_list())
    styles = ["-", "--", ":", "-."]
    for i, model in enumerate(models):
        for k, dataset in enumerate(datasets):
            part = frame.filter((pl.col("model") == model) & (pl.col("dataset") == dataset))
            if part.height == 0:
                continue
            part = part.sort("layer")
            layers = part["layer"].to_numpy()
            color = palette[i % len(palette)]
            ax.fill_between(
                layers,
                part["rel_bos_norm_min"].to_numpy(),
                part["rel_bos_norm_max"].to_numpy(),
                color=color,
                alpha=0.2,
                linewidth=0,
            )
            ax.plot(
                layers,
                part["rel_bos_norm"].to_numpy(),
                color=color,
                linestyle=styles[k % len(styles)],
                marker="o",
                markersize=3,
                label=f"{model} / {_dataset_label(dataset)} ({_scope(part)})",
            )
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("layer (residual stream entering the layer)")
    ax.set_ylabel("|x_0| / median_i |x_i|")
    ax.legend(fontsize=8, loc="best")
    ax.set_title("BOS residual-stream norm relative to the median token", fontsize=10)
    fig.suptitle(title)
    save_figure(fig, out_png)
