"""Figures of the head pattern labelling (:mod:`sinkscope.heads`).

Figures are built on a bare ``matplotlib.figure.Figure`` with an Agg canvas: pyplot is never
used, so there is no global figure registry to leak into and no interactive backend to select.
Each figure has a fixed size and dpi and is written without the ``Software`` (version) metadata,
so the same table gives a byte-identical PNG on the same software stack. Every function writes
its PNG atomically (temporary name, explicit ``format="png"``, then rename) and releases the
figure afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import polars as pl
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sinkscope.heads import DIAGONAL, HEAD_CLASSES, OTHER, POOLED, SINK, SINK_PREV
from sinkscope.io import atomic_path

__all__ = [
    "CLASS_COLORS",
    "new_figure",
    "plot_class_map",
    "plot_mass_heatmaps",
    "plot_summary_bars",
    "save_figure",
]

DPI = 120
PNG_METADATA: dict[str, str | None] = {"Software": None}
#: Fixed colour per head class (sink yellow and diagonal green as in the paper's Figure 10).
CLASS_COLORS: dict[str, str] = {
    SINK: "#e6ab02",
    DIAGONAL: "#1b9e77",
    SINK_PREV: "#d95f02",
    OTHER: "#d0d0d0",
}
#: Summary columns plotted as bars, with the pattern name used as hue.
_PATTERN_COLUMNS: dict[str, str] = {
    "frac_sink": SINK,
    "frac_diagonal": DIAGONAL,
    "frac_sink_prev": SINK_PREV,
}


def new_figure(width: float, height: float) -> Figure:
    """A pyplot-free figure with an Agg canvas (no global state; deterministic size and dpi)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, out_png: str | os.PathLike[str]) -> None:
    """Write ``fig`` atomically as PNG and release it."""
    try:
        with atomic_path(out_png) as tmp:
            fig.savefig(tmp, format="png", dpi=DPI, metadata=PNG_METADATA)
    finally:
        fig.clear()


def _layer_head_grid(per_head: pl.DataFrame, column: str) -> pd.DataFrame:
    """``column`` as a layer x head frame (layers ascending down, heads across; NaN if absent)."""
    missing = [c for c in ("layer", "head", column) if c not in per_head.columns]
    if missing:
        raise ValueError(f"per-head table lacks columns {missing}")
    if per_head.select("layer", "head").is_duplicated().any():
        raise ValueError(
            "per-head table has several rows per (layer, head); pass one model x dataset "
            "(or a table pooled with sinkscope.heads.pool_datasets)"
        )
    layers = np.unique(per_head["layer"].to_numpy())
    heads = np.unique(per_head["head"].to_numpy())
    rows = np.searchsorted(layers, per_head["layer"].to_numpy())
    cols = np.searchsorted(heads, per_head["head"].to_numpy())
    values = per_head[column].to_numpy()
    grid = np.full((layers.size, heads.size), np.nan if values.dtype.kind == "f" else None)
    grid[rows, cols] = values
    return pd.DataFrame(grid, index=pd.Index(layers, name="layer"), columns=pd.Index(heads))


def plot_mass_heatmaps(per_head: pl.DataFrame, out_png: str | os.PathLike[str], title: str) -> None:
    """Three layer x head heatmaps side by side: BOS, diagonal and sub-diagonal mass in [0, 1].

    ``per_head``: one row per (layer, head) with ``bos_mass``, ``diagonal_mass`` and
    ``subdiagonal_mass`` (e.g. a per-head table of :func:`sinkscope.heads.classify_file`).
    Layers run top to bottom, heads left to right; absent cells stay blank.
    """
    panels = {
        "bos_mass": "BOS mass",
        "diagonal_mass": "diagonal mass",
        "subdiagonal_mass": "sub-diagonal (previous-token) mass",
    }
    grids = {column: _layer_head_grid(per_head, column).astype(float) for column in panels}
    fig = new_figure(16.0, 5.5)
    axes = fig.subplots(1, 4, gridspec_kw={"width_ratios": [1, 1, 1, 0.05]})
    for index, (column, label) in enumerate(panels.items()):
        ax = axes[index]
        sns.heatmap(
            grids[column],
            ax=ax,
            vmin=0.0,
            vmax=1.0,
            cmap="viridis",
            cbar=index == len(panels) - 1,
            cbar_ax=axes[-1] if index == len(panels) - 1 else None,
            cbar_kws={"label": "fraction of attention mass (query rows 1..T)"},
        )
        ax.set_title(label)
        ax.set_xlabel("head")
        ax.set_ylabel("layer" if index == 0 else "")
    fig.suptitle(title)
    save_figure(fig, out_png)


def plot_class_map(per_head: pl.DataFrame, out_png: str | os.PathLike[str], title: str) -> None:
    """Layer x head grid coloured by ``head_class`` with a legend of the four classes (and counts).

    Colours are fixed per class (:data:`CLASS_COLORS`); absent cells stay blank.
    """
    labels = _layer_head_grid(per_head, "head_class")
    unknown = set(per_head["head_class"].unique().to_list()) - set(HEAD_CLASSES)
    if unknown:
        raise ValueError(f"unknown head classes {sorted(unknown)}; expected {HEAD_CLASSES}")
    code_of = {name: float(code) for code, name in enumerate(HEAD_CLASSES)}
    codes = labels.apply(lambda column: column.map(code_of)).astype(float)
    cmap = mcolors.ListedColormap([CLASS_COLORS[name] for name in HEAD_CLASSES])
    fig = new_figure(9.0, 6.5)
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
    counts = per_head["head_class"].value_counts()
    count_of = dict(zip(counts["head_class"], counts["count"], strict=True))
    handles = [
        Patch(facecolor=CLASS_COLORS[name], label=f"{name} ({count_of.get(name, 0)})")
        for name in HEAD_CLASSES
    ]
    ax.legend(
        handles=handles,
        title="head class (count)",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    save_figure(fig, out_png)


def _facet_order(datasets: Sequence[str]) -> list[str]:
    return sorted(set(datasets), key=lambda name: (name == POOLED, name))


def plot_summary_bars(
    summary: pl.DataFrame,
    out_png: str | os.PathLike[str],
    title: str = "Share of heads per attention pattern",
) -> None:
    """Grouped bars of :func:`sinkscope.heads.summarize`: x = model, hue = pattern (sink,
    diagonal, sink+previous), one facet per dataset with the pooled ``"all"`` facet last.

    Bars show percentages of heads and are labelled with their rounded value.
    """
    missing = [c for c in ("model", "dataset", *_PATTERN_COLUMNS) if c not in summary.columns]
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
    facets = _facet_order(summary["dataset"].to_list())
    patterns = list(_PATTERN_COLUMNS.values())
    width = 1.5 + len(facets) * max(2.8, 0.9 * len(models) + 1.0)
    fig = new_figure(width, 4.5)
    axes = np.atleast_1d(fig.subplots(1, len(facets), sharey=True, squeeze=False)[0])
    for ax, dataset in zip(axes, facets, strict=True):
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
                labels=[f"{v:.0f}" if np.isfinite(v) else "" for v in values],
                fontsize=7,
                padding=1,
            )
        ax.set_title("pooled over datasets" if dataset == POOLED else dataset)
        ax.set_ylim(0.0, 105.0)
        ax.set_xlabel("model")
        ax.set_ylabel("% of heads" if ax is axes[0] else "")
        ax.tick_params(axis="x", labelrotation=30)
    fig.legend(
        handles=[Patch(facecolor=CLASS_COLORS[name], label=name) for name in patterns],
        title="pattern",
        loc="outside right upper",
        frameon=False,
    )
    fig.suptitle(title)
    save_figure(fig, out_png)
