"""The pieces every geometry figure shares (:mod:`sinkscope.geometry.plots`,
:mod:`sinkscope.geometry.halfspace_plots`): table concatenation, labels and colours of the point
sets, the paper's box plots (Figures 1 and 12: the box spans the quartiles, the line is the median,
the whiskers reach the absolute minimum and maximum; no 1.5 IQR rule, no fliers) and layer ticks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
from matplotlib.axes import Axes

from sinkscope.geometry.names import ALL_TOKENS, ATTENDING, BOS_MINUS_TOKEN
from sinkscope.labels import POOLED
from sinkscope.plotting import (
    MAX_FIGURE_INCHES,
    median_line_props,
    tick_step,
)
from sinkscope.text import plural

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
    BOS_MINUS_TOKEN: "#332288",
    ATTENDING: "#e69f00",
    ALL_TOKENS: "#56b4e9",
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


def _dataset_label(dataset: str, n_datasets: int | None = None) -> str:
    if dataset == POOLED:
        return f"pooled over {plural(n_datasets, 'dataset')}" if n_datasets else "pooled"
    return dataset


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}g}"


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


#: Longest side of a figure in inches (:data:`~sinkscope.plotting.MAX_FIGURE_INCHES` less a
#: rounding margin).
MAX_INCHES = MAX_FIGURE_INCHES - 0.05
#: Most layer ticks of a panel (48 layers: every third).
MAX_LAYER_TICKS = 16
#: Font size of the panel titles of the figures of several models.
PANEL_TITLE_FONTSIZE = 9
#: Least height in inches of a row of the half-space figure: below it (more than seven panels:
#: seven models with their long-context panels) the panels go two to a row, so that the stacked
#: y labels do not run into each other.
MIN_MARGIN_ROW = 2.6
#: A box lower than this share of its axis (about 6 px of a 400-px panel: a median line and two
#: edges cover it) is flat: drawn as its median alone. Without the axis range: of the values' range.
FLAT_BOX_FRACTION = 0.015
#: y limits of the panels of cosines (Fig. 1) and of half-space margins.
COSINE_YLIM = (-1.02, 1.02)
MARGIN_YLIM = (-0.04, 1.02)


def _draw_boxes(
    ax: Axes,
    stats: list[dict[str, Any]],
    positions: Sequence[float],
    width: float,
    color: str,
    axis_range: float | None = None,
) -> None:
    """Boxes in ``color``; the flat ones (:data:`FLAT_BOX_FRACTION` of ``axis_range``, the span
    of the panel's y limits in data units) as a median line in that colour
    (:func:`~sinkscope.plotting.median_line_props`)."""
    if axis_range is None:
        axis_range = max(s["whishi"] for s in stats) - min(s["whislo"] for s in stats)
    flat = [s["q3"] - s["q1"] <= FLAT_BOX_FRACTION * axis_range for s in stats]
    for is_flat in (False, True):
        chosen = [k for k, f in enumerate(flat) if f == is_flat]
        if not chosen:
            continue
        ax.bxp(
            [stats[k] for k in chosen],
            positions=[positions[k] for k in chosen],
            widths=width,
            showfliers=False,
            showmeans=False,
            patch_artist=True,
            manage_ticks=False,
            boxprops={"facecolor": color, "edgecolor": "black", "linewidth": 0.6, "alpha": 0.85},
            medianprops=median_line_props(color, flat=is_flat),
            whiskerprops={"color": "black", "linewidth": 0.6},
            capprops={"color": "black", "linewidth": 0.6},
        )


def _layer_ticks(ax: Axes, layers: Sequence[int], inches: float = MAX_INCHES) -> None:
    """A tick per layer, thinned to at most :data:`MAX_LAYER_TICKS` and to what a panel
    ``inches`` wide holds (:func:`~sinkscope.plotting.tick_step`)."""
    layers = sorted(layers)
    step = tick_step(len(layers), inches, MAX_LAYER_TICKS)
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
