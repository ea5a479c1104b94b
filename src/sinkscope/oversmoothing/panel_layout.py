"""Panel layout and axis helpers of the oversmoothing figures (:mod:`.plots`).

Several (model, dataset) pairs are laid out as panels of one figure within
:data:`sinkscope.plotting.MAX_FIGURE_PIXELS` (:func:`pair_grid`); the other helpers select a
pair's rows, check a table's columns, label panels and format the context-length and head axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from sinkscope.labels import POOLED
from sinkscope.plotting import DPI, MAX_FIGURE_PIXELS, new_figure

__all__ = [
    "LAYER_AXIS_LABEL",
    "MAX_INCHES",
    "PANEL_FONTSIZE",
    "axis_labels",
    "check",
    "head_index",
    "label",
    "largest",
    "layer_ticks",
    "length_axis",
    "pair",
    "pair_grid",
    "pairs",
]

#: Longest side of a figure in inches (:data:`sinkscope.plotting.MAX_FIGURE_PIXELS` at its dpi).
MAX_INCHES = MAX_FIGURE_PIXELS / DPI
#: Font size of panel titles and tick labels in the grids of several pairs.
PANEL_FONTSIZE = 8


def pairs(table: pl.DataFrame) -> list[tuple[str, str]]:
    """(model, dataset) pairs of a table, pooled rows excluded, in a stable order."""
    frame = table.filter(pl.col("dataset") != POOLED).select("model", "dataset").unique()
    return sorted(frame.iter_rows())


def pair(table: pl.DataFrame, model: str, dataset: str) -> pl.DataFrame:
    return table.filter((pl.col("model") == model) & (pl.col("dataset") == dataset))


def largest(table: pl.DataFrame) -> pl.DataFrame:
    """Rows of the largest context length (the paper's 512; here the file's T at most)."""
    return table.filter(pl.col("context_length") == pl.col("context_length").max())


def label(frame: pl.DataFrame, model: str, dataset: str, with_t: bool = True) -> str:
    n = int(frame["n_sequences"].max()) if "n_sequences" in frame.columns else None
    parts = [f"{model} · {dataset}"]
    details = []
    if n is not None:
        details.append(f"N={n}")
    if with_t:
        details.append(f"T'={int(frame['context_length'].max())}")
    if details:
        parts.append(f"({', '.join(details)})")
    return " ".join(parts)


def check(table: pl.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"{what} lacks columns {missing}")
    if table.filter(pl.col("dataset") != POOLED).is_empty():
        raise ValueError(f"{what} has no rows to plot")


@dataclass
class _PairGrid:
    """Panels of several (model, dataset) pairs laid out within :data:`MAX_FIGURE_PIXELS`."""

    fig: Figure
    panels: dict[tuple[str, str], list[Axes]]
    panel_width: float
    #: panels with no visible panel below them (they carry the x label)
    bottom: set[Axes]
    #: the first panel of each grid row (they carry the y label)
    left: set[Axes]
    #: whether the panels keep the minimum size asked for
    fits: bool


def pair_grid(
    pairs: list[tuple[str, str]],
    per_pair: int,
    size: tuple[float, float],
    minimum: tuple[float, float],
    reserve: tuple[float, float] = (0.4, 1.8),
) -> _PairGrid:
    """A figure with ``per_pair`` adjacent panels per pair, laid out so that no side exceeds
    :data:`MAX_FIGURE_PIXELS`: one row per model and one column (block) per dataset when the
    panels keep at least 80% of the best possible size, else pairs wrapped into the grid of
    blocks whose panels come closest to ``size`` (inches, width x height; shrunk to fit, never
    below ``minimum`` when some layout allows it). ``reserve``: inches kept for the suptitle,
    the figure legend and margins."""
    models = list(dict.fromkeys(m for m, _ in pairs))
    datasets = sorted({d for _, d in pairs})
    avail_w = MAX_INCHES - reserve[0] - 0.05
    avail_h = MAX_INCHES - reserve[1] - 0.05

    def option(blocks_per_row: int, n_rows: int) -> tuple[float, float, float, bool]:
        width = min(size[0], avail_w / (blocks_per_row * per_pair))
        height = min(size[1], avail_h / n_rows)
        fits = width >= minimum[0] - 1e-9 and height >= minimum[1] - 1e-9
        return width, height, min(width / size[0], height / size[1]), fits

    by_model = option(len(datasets), len(models))
    wrapped = {bpr: option(bpr, math.ceil(len(pairs) / bpr)) for bpr in range(1, len(pairs) + 1)}
    best_bpr = max(wrapped, key=lambda b: (wrapped[b][3], wrapped[b][2], -b))
    best = wrapped[best_bpr]
    if by_model[3] and by_model[2] >= 0.8 * best[2]:
        width, height, _, fits = by_model
        n_rows, blocks_per_row = len(models), len(datasets)
        where = {(m, d): (models.index(m), datasets.index(d)) for m, d in pairs}
    else:
        width, height, _, fits = best
        blocks_per_row, n_rows = best_bpr, math.ceil(len(pairs) / best_bpr)
        where = {pair: divmod(i, best_bpr) for i, pair in enumerate(pairs)}
    n_cols = blocks_per_row * per_pair
    fig = new_figure(n_cols * width + reserve[0], n_rows * height + reserve[1])
    grid = fig.subplots(n_rows, n_cols, squeeze=False)
    used = np.zeros(grid.shape, dtype=bool)
    panels = {}
    for pair, (row, block) in where.items():
        panels[pair] = [grid[row, block * per_pair + k] for k in range(per_pair)]
        used[row, block * per_pair : (block + 1) * per_pair] = True
    for ax in grid[~used]:
        ax.set_visible(False)
    bottom = {
        grid[r, c]
        for r in range(n_rows)
        for c in range(n_cols)
        if used[r, c] and not used[r + 1 :, c].any()
    }
    left = {grid[r, int(np.argmax(used[r]))] for r in range(n_rows) if used[r].any()}
    return _PairGrid(fig, panels, width, bottom, left, fits)


def axis_labels(layout: _PairGrid, ax: Axes, xlabel: str, ylabel: str) -> None:
    """x label on the lowest panel of each grid column, y label on the first of each row."""
    ax.set_xlabel(xlabel if ax in layout.bottom else "")
    ax.set_ylabel(ylabel if ax in layout.left else "")
    ax.tick_params(labelsize=PANEL_FONTSIZE)


def length_axis(ax, lengths) -> None:
    """Log-2 context-length axis with the analysed lengths as plain tick labels."""
    ticks = sorted({int(t) for t in lengths})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("context length $T'$ (text tokens)")


def head_index(frame: pl.DataFrame) -> np.ndarray:
    """Heads numbered in order from the first to the last layer (the paper's x-axis)."""
    n_heads = int(frame["head"].max()) + 1
    return frame["layer"].to_numpy() * n_heads + frame["head"].to_numpy()


LAYER_AXIS_LABEL = "head (grouped by layer; tick = layer index)"


def layer_ticks(ax, frame: pl.DataFrame, panel_width: float = 12.0) -> None:
    """Heads on the x axis grouped by layer: a tick per layer (at most 15, and about three per
    inch of ``panel_width``), thin lines between layers."""
    n_heads = int(frame["head"].max()) + 1
    layers = np.unique(frame["layer"].to_numpy())
    step = max(1, math.ceil(len(layers) / min(15, max(4, int(3 * panel_width)))))
    ax.set_xticks(layers[::step] * n_heads + (n_heads - 1) / 2)
    ax.set_xticklabels([str(v) for v in layers[::step]])
    for layer in layers[1:]:
        ax.axvline(layer * n_heads - 0.5, color="#e0e0e0", lw=0.5, zorder=0)
    ax.set_xlim(layers[0] * n_heads - 1, (layers[-1] + 1) * n_heads)
    ax.set_xlabel(LAYER_AXIS_LABEL)
