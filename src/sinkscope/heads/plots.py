"""Figures of the head pattern labelling (paper §3): mass heatmaps, class maps, summary bars.

Each ``plot_*`` function builds its figure with the matching ``*_figure`` function (kept apart so
that tests can read the figure) and writes it with :func:`sinkscope.plotting.save_figure`, which
enforces the readability rules of :mod:`sinkscope.plotting` (colours, sizes, legends, labels).
"""

from __future__ import annotations

import math
import os

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sinkscope.heads.classify import DEFAULT_THRESHOLDS, HeadClassThresholds
from sinkscope.heads.names import SUMMARY
from sinkscope.heads.order import dataset_order
from sinkscope.labels import DIAGONAL, HEAD_CLASSES, POOLED, SINK, SINK_PREV
from sinkscope.plotting import (
    CLASS_COLORS,
    CLASS_LEGEND_NAMES,
    GRID_TICK_FONTSIZE,
    HEAD_CLASS_CMAP,
    MAX_FIGURE_INCHES,
    SEQUENTIAL_CMAP,
    Draw,
    new_figure,
    save_figure,
)

__all__ = [
    "class_counts",
    "class_map_figure",
    "mass_heatmaps_figure",
    "pair_figures",
    "pattern_legend_names",
    "percent_label",
    "plot_class_map",
    "plot_mass_heatmaps",
    "plot_summary_bars",
    "summary_bars_figure",
    "summary_figures",
]

#: Summary columns plotted as bars (overlapping flags), with the pattern name used as hue.
_PATTERN_COLUMNS: dict[str, str] = {
    "frac_sink": SINK,
    "frac_diagonal": DIAGONAL,
    "frac_sink_prev": SINK_PREV,
}


# --- layer x head grids ---------------------------------------------------------------------


def _layer_head_grid(per_head: pl.DataFrame, column: str) -> pd.DataFrame:
    """``column`` as a layer x head frame (layers ascending down, heads across; NaN if absent)."""
    missing = [c for c in ("layer", "head", column) if c not in per_head.columns]
    if missing:
        raise ValueError(f"per-head table lacks columns {missing}")
    if per_head.select("layer", "head").is_duplicated().any():
        raise ValueError(
            "per-head table has several rows per (layer, head); pass one model x dataset "
            "(or a table pooled with sinkscope.heads.summary.pool_datasets)"
        )
    layers = np.unique(per_head["layer"].to_numpy())
    heads = np.unique(per_head["head"].to_numpy())
    rows = np.searchsorted(layers, per_head["layer"].to_numpy())
    cols = np.searchsorted(heads, per_head["head"].to_numpy())
    values = per_head[column].to_numpy()
    grid = np.full((layers.size, heads.size), np.nan if values.dtype.kind == "f" else None)
    grid[rows, cols] = values
    return pd.DataFrame(grid, index=pd.Index(layers, name="layer"), columns=pd.Index(heads))


def _grid_height(n_layers: int) -> float:
    """Height in inches of a layer x head grid: 0.22 in per layer (one readable label each)."""
    return float(np.clip(0.22 * n_layers, 2.5, 15.0))


#: Least width in inches of a head's column in a layer x head grid: its label (two digits at
#: :data:`~sinkscope.plotting.GRID_TICK_FONTSIZE`) and the gap to the next fit (64 heads:
#: gpt-oss-20b).
HEAD_LABEL_INCHES = 0.16


def _grid_width(n_heads: int, per_head: float, low: float, high: float, margin: float) -> float:
    """Width in inches of a layer x head grid: ``per_head`` inches a head within ``[low, high]``,
    and never less than :data:`HEAD_LABEL_INCHES` a head plus ``margin`` (the inches of the
    grid's width that its layer labels take, or its legend beyond the space kept for it), so
    that every head is labelled."""
    return max(float(np.clip(per_head * n_heads, low, high)), HEAD_LABEL_INCHES * n_heads + margin)


def _label_every_cell(ax: Axes, grid: pd.DataFrame) -> None:
    """One horizontal tick label per layer (rows) and per head (columns)."""
    ax.set_yticks(np.arange(grid.shape[0]) + 0.5, [str(v) for v in grid.index], rotation=0)
    ax.set_xticks(np.arange(grid.shape[1]) + 0.5, [str(v) for v in grid.columns], rotation=0)
    ax.tick_params(axis="both", labelsize=GRID_TICK_FONTSIZE, length=2)


def mass_heatmaps_figure(per_head: pl.DataFrame, title: str) -> Figure:
    """The figure of :func:`plot_mass_heatmaps` (not yet written)."""
    panels = {
        "bos_mass": "BOS mass",
        "diagonal_mass": "diagonal mass",
        "subdiagonal_mass": "sub-diagonal (previous-token) mass",
    }
    grids = {column: _layer_head_grid(per_head, column).astype(float) for column in panels}
    n_layers, n_heads = grids["bos_mass"].shape
    panel_width = _grid_width(n_heads, 0.3, 3.0, 5.5, margin=0.3)
    height = _grid_height(n_layers)
    if len(panels) * panel_width + 1.6 <= MAX_FIGURE_INCHES:  # side by side
        fig = new_figure(len(panels) * panel_width + 1.6, height + 1.3)
        grid = fig.add_gridspec(1, len(panels) + 1, width_ratios=[1] * len(panels) + [0.05])
        axes = [fig.add_subplot(grid[0, index]) for index in range(len(panels))]
        colorbar = fig.add_subplot(grid[0, -1])
    else:  # many heads: the panels stacked, one colour bar beside them
        fig = new_figure(panel_width + 1.6, len(panels) * (height + 0.5) + 0.8)
        grid = fig.add_gridspec(len(panels), 2, width_ratios=[1, 0.05])
        axes = [fig.add_subplot(grid[index, 0]) for index in range(len(panels))]
        colorbar = fig.add_subplot(grid[:, 1])
    for index, (column, label) in enumerate(panels.items()):
        ax = axes[index]
        last = index == len(panels) - 1
        sns.heatmap(
            grids[column],
            ax=ax,
            vmin=0.0,
            vmax=1.0,
            cmap=SEQUENTIAL_CMAP,
            cbar=last,
            cbar_ax=colorbar if last else None,
            cbar_kws={"label": "fraction of attention mass (mean over query rows 1..T)"},
        )
        _label_every_cell(ax, grids[column])
        ax.set_title(label)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    fig.suptitle(title)
    return fig


def plot_mass_heatmaps(per_head: pl.DataFrame, out_png: str | os.PathLike[str], title: str) -> None:
    """Three layer x head heatmaps side by side: BOS, diagonal and sub-diagonal mass in [0, 1].

    ``per_head``: one row per (layer, head) with ``bos_mass``, ``diagonal_mass`` and
    ``subdiagonal_mass`` (e.g. a per-head table of :func:`sinkscope.heads.classify.classify_file`).
    Layers run top to bottom, heads left to right, every layer and head labelled (columns of at
    least :data:`HEAD_LABEL_INCHES`; heatmaps that would then not fit side by side within
    :data:`~sinkscope.plotting.MAX_FIGURE_PIXELS`, e.g. 64 heads, are stacked); absent cells
    stay blank.
    """
    save_figure(mass_heatmaps_figure(per_head, title), out_png)


def class_counts(per_head: pl.DataFrame) -> dict[str, int]:
    """Heads per exclusive label (every class of :data:`~sinkscope.labels.HEAD_CLASSES`,
    zeros included) and the number of heads with the ``is_sink`` flag under the key
    ``"is_sink"``."""
    counts = dict.fromkeys(HEAD_CLASSES, 0)
    for name, count in per_head["head_class"].value_counts().iter_rows():
        counts[name] = int(count)
    counts["is_sink"] = int(per_head["is_sink"].sum())
    return counts


def _is_sink_note(per_head: pl.DataFrame, thresholds: HeadClassThresholds | None) -> str:
    """How the ``is_sink`` total splits over the exclusive labels (reconciles the two counts)."""
    flagged = per_head.filter(pl.col("is_sink"))["head_class"].value_counts()
    parts = dict(zip(flagged["head_class"], flagged["count"], strict=True))
    split = " + ".join(f"{int(parts[name])} {name}" for name in HEAD_CLASSES if parts.get(name, 0))
    rule = (
        f"BOS mass >= {thresholds.sink:g}"
        if thresholds is not None
        else "BOS mass >= sink threshold"
    )
    total = int(per_head["is_sink"].sum())
    return f"\nis_sink flag ({rule}), any class:\n{total} heads" + (f" = {split}" if split else "")


def class_map_figure(
    per_head: pl.DataFrame, title: str, thresholds: HeadClassThresholds | None = None
) -> Figure:
    """The figure of :func:`plot_class_map` (not yet written)."""
    labels = _layer_head_grid(per_head, "head_class")
    unknown = set(per_head["head_class"].unique().to_list()) - set(HEAD_CLASSES)
    if unknown:
        raise ValueError(f"unknown head classes {sorted(unknown)}; expected {HEAD_CLASSES}")
    if "is_sink" not in per_head.columns:
        raise ValueError("per-head table lacks columns ['is_sink']")
    code_of = {name: float(code) for code, name in enumerate(HEAD_CLASSES)}
    codes = labels.apply(lambda column: column.map(code_of)).astype(float)
    cmap = mcolors.ListedColormap(
        [CLASS_COLORS[name] for name in HEAD_CLASSES], name=HEAD_CLASS_CMAP
    )
    n_layers, n_heads = codes.shape
    width = _grid_width(n_heads, 0.45, 3.0, 10.0, margin=1.5)
    fig = new_figure(width + 3.6, _grid_height(n_layers) + 1.2)
    ax = fig.subplots()
    sns.heatmap(
        codes,
        ax=ax,
        cmap=cmap,
        vmin=-0.5,
        vmax=len(HEAD_CLASSES) - 0.5,
        cbar=False,
        linewidths=0.5,
        linecolor="white",
    )
    _label_every_cell(ax, codes)
    counts = class_counts(per_head)
    handles = [
        Patch(facecolor=CLASS_COLORS[name], label=f"{CLASS_LEGEND_NAMES[name]}: {counts[name]}")
        for name in HEAD_CLASSES
    ]
    # the is_sink total (the flag that the summary and the oversmoothing figures count), split
    # over the exclusive classes, as an extra legend row without a swatch
    handles.append(Patch(visible=False, label=_is_sink_note(per_head, thresholds)))
    ax.legend(
        handles=handles,
        title="exclusive head class: heads",
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        frameon=False,
        fontsize=9,
        alignment="left",
    )
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    return fig


def plot_class_map(
    per_head: pl.DataFrame,
    out_png: str | os.PathLike[str],
    title: str,
    thresholds: HeadClassThresholds | None = None,
) -> None:
    """Layer x head grid coloured by the exclusive ``head_class``, every layer and head labelled.

    The legend gives each class's head count (the class "sink" is named "sink (not
    sink+previous)": it is not the ``is_sink`` flag) and, below it, the ``is_sink`` total split
    over the classes, so the class map's count can be reconciled with the figures that count
    ``is_sink``. ``thresholds``: those used for the table, to state the sink threshold.
    Colours are fixed per class (:data:`~sinkscope.plotting.CLASS_COLORS`); absent cells stay blank.
    """
    save_figure(class_map_figure(per_head, title, thresholds), out_png)


# --- summary bars ---------------------------------------------------------------------------


def pattern_legend_names(thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS) -> dict[str, str]:
    """Legend names of the (overlapping) pattern flags counted by
    :func:`sinkscope.heads.summary.summarize`."""
    return {
        SINK: f"sink: is_sink, BOS mass >= {thresholds.sink:g} (any class)",
        DIAGONAL: f"diagonal: diagonal mass >= {thresholds.diagonal:g}",
        SINK_PREV: (
            f"sink+previous: BOS + previous >= {thresholds.sink_prev_joint:g}, "
            f"each >= {thresholds.sink_prev_min_part:g} of it"
        ),
    }


def percent_label(percent: float) -> str:
    """A bar's label: the share of heads in percent (``100 * frac_*`` of the summary) with one
    decimal, as the claims table states it (``heads.*`` rows, ``measured``: e.g. ``sink
    37.5%``), without the % sign."""
    return f"{percent:.1f}" if np.isfinite(percent) else ""


def summary_bars_figure(
    summary: pl.DataFrame,
    title: str = "Share of heads per attention pattern",
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
) -> Figure:
    """The figure of :func:`plot_summary_bars` (not yet written)."""
    missing = [
        c
        for c in ("model", "dataset", "n_sequences", *_PATTERN_COLUMNS)
        if c not in summary.columns
    ]
    if missing:
        raise ValueError(f"summary table lacks columns {missing}")
    long = (
        summary.select("model", "dataset", *_PATTERN_COLUMNS)
        .unpivot(index=["model", "dataset"], variable_name="column", value_name="fraction")
        .with_columns(
            pattern=pl.col("column").replace_strict(_PATTERN_COLUMNS),
            percent=pl.col("fraction") * 100.0,
        )
    )
    frame = pd.DataFrame(long.select("model", "dataset", "pattern", "percent").to_dict())
    models = sorted(set(summary["model"].to_list()))
    facets = dataset_order(summary["dataset"].to_list())
    patterns = list(_PATTERN_COLUMNS.values())
    facet_width = max(2.8, 0.75 * len(models) + 1.0)
    legend_width = 3.2
    max_inches = MAX_FIGURE_INCHES
    n_cols = max(1, min(len(facets), int((max_inches - legend_width - 0.5) // facet_width)))
    n_rows = math.ceil(len(facets) / n_cols)
    fig = new_figure(0.5 + n_cols * facet_width + legend_width, 0.6 + 3.9 * n_rows)
    grid = fig.subplots(n_rows, n_cols, sharey=True, squeeze=False)
    axes = grid.ravel()
    n_sequences = dict(
        summary.group_by("dataset")
        .agg(pl.col("n_sequences").max())
        .select("dataset", "n_sequences")
        .iter_rows()
    )
    for ax, dataset in zip(axes, facets, strict=False):
        sns.barplot(
            data=frame[frame["dataset"] == dataset],
            x="model",
            y="percent",
            hue="pattern",
            order=models,
            hue_order=patterns,
            palette=[CLASS_COLORS[name] for name in patterns],
            errorbar=None,
            saturation=1.0,
            legend=False,
            ax=ax,
        )
        for container in ax.containers:
            values = getattr(container, "datavalues", [])
            ax.bar_label(
                container,
                labels=[percent_label(v) for v in values],
                fontsize=6,
                padding=1,
            )
        name = "pooled over datasets" if dataset == POOLED else dataset
        ax.set_title(f"{name} (N={n_sequences[dataset]})")
        ax.set_ylim(0.0, 105.0)
        ax.set_xlabel("model")
        ax.set_ylabel("% of heads" if ax in grid[:, 0] else "")
        ax.tick_params(axis="x", labelrotation=30)
    for ax in axes[len(facets) :]:
        ax.set_visible(False)
    names = pattern_legend_names(thresholds)
    fig.legend(
        handles=[Patch(facecolor=CLASS_COLORS[name], label=names[name]) for name in patterns],
        title="pattern (flags overlap)",
        loc="outside right upper",
        frameon=False,
        fontsize=8,
    )
    fig.suptitle(title)
    return fig


def plot_summary_bars(
    summary: pl.DataFrame,
    out_png: str | os.PathLike[str],
    title: str = "Share of heads per attention pattern",
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
) -> None:
    """Grouped bars of :func:`sinkscope.heads.summary.summarize`: x = model, hue = pattern (sink,
    diagonal, sink+previous), one facet per dataset with the pooled ``"all"`` facet last (wrapped
    into rows when they would exceed :data:`~sinkscope.plotting.MAX_FIGURE_PIXELS`).

    Bars show percentages of heads with each *flag* (``is_sink``, ``is_diagonal``,
    ``is_sink_prev``; a head can have several) and are labelled with their value in percent with
    one decimal (:func:`percent_label`: the number the ``heads.*`` claim rows state); the legend
    states each flag's rule (with ``thresholds``, default the paper's).
    """
    save_figure(summary_bars_figure(summary, title, thresholds), out_png)


# --- the figures of each rule -----------------------------------------------------------------


def pair_figures(
    per_head: pl.DataFrame, title: str, thresholds: HeadClassThresholds
) -> dict[str, Draw]:
    """The figures of rule ``classify_heads`` (:data:`sinkscope.heads.names.FIGURES`)."""
    return {
        "mass_heatmaps": lambda out: plot_mass_heatmaps(per_head, out, title),
        "class_map": lambda out: plot_class_map(per_head, out, title, thresholds),
    }


def summary_figures(summary: pl.DataFrame, thresholds: HeadClassThresholds) -> dict[str, Draw]:
    """The figure of rule ``summarize_heads`` (:data:`sinkscope.heads.names.SUMMARY`): the summary
    bars of every pair."""
    return {SUMMARY: lambda out: plot_summary_bars(summary, out, thresholds=thresholds)}
