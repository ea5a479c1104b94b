"""Figures of the head pattern labelling (:mod:`sinkscope.heads`) and the rules every figure follows.

Figures are built on a bare ``matplotlib.figure.Figure`` with an Agg canvas: pyplot is never
used, so there is no global figure registry to leak into and no interactive backend to select.
Each figure has a fixed size and dpi and is written without the ``Software`` (version) metadata,
so the same table gives a byte-identical PNG on the same software stack. Every function writes
its PNG atomically (temporary name, explicit ``format="png"``, then rename) and releases the
figure afterwards.

Readability rules (stated once here, checked by :func:`figure_problems`, enforced by
:func:`save_figure` for every figure written): colour maps come from
:data:`COLORBLIND_SAFE_CMAPS`; no side of a figure exceeds :data:`MAX_FIGURE_PIXELS`; no legend
covers an axes; tick labels of one axis do not come closer than MIN_TICK_LABEL_GAP_PX.
Categorical colours (:data:`CLASS_COLORS`) stay at least :data:`MIN_CVD_DELTA_E` apart (CIELAB)
under simulated deuteranopia, protanopia and tritanopia (:func:`cvd_min_distance`).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Sequence

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.patches import Patch

from sinkscope.heads import (
    DIAGONAL,
    HEAD_CLASSES,
    OTHER,
    POOLED,
    SINK,
    SINK_PREV,
    HeadClassThresholds,
)
from sinkscope.io import atomic_path

__all__ = [
    "BINARY_CMAP",
    "CLASS_COLORS",
    "CLASS_LEGEND_NAMES",
    "COLORBLIND_SAFE_CMAPS",
    "DIVERGING_CMAP",
    "MAX_FIGURE_PIXELS",
    "MIN_CVD_DELTA_E",
    "SEQUENTIAL_CMAP",
    "class_map_figure",
    "cvd_min_distance",
    "figure_problems",
    "is_colorblind_safe",
    "mass_heatmaps_figure",
    "new_figure",
    "percent_label",
    "plot_class_map",
    "plot_mass_heatmaps",
    "plot_summary_bars",
    "save_figure",
    "summary_bars_figure",
]

DPI = 120
PNG_METADATA: dict[str, str | None] = {"Software": None}
#: Longest side of any figure in pixels (at :data:`DPI`); wider content is wrapped into a grid.
MAX_FIGURE_PIXELS = 2400
#: Smallest gap in pixels between two tick labels of one axis (closer labels read as one).
MIN_TICK_LABEL_GAP_PX = 3.0
#: Font size of tick labels on layer x head grids (one label per layer and per head).
GRID_TICK_FONTSIZE = 8

#: Colour map of the head classes (a ``ListedColormap`` of :data:`CLASS_COLORS`).
HEAD_CLASS_CMAP = "head_classes"
#: Sequential data (e.g. attention mass in [0, 1]).
SEQUENTIAL_CMAP = "viridis"
#: Signed data around a centre.
DIVERGING_CMAP = "PuOr"
#: Two-valued data (e.g. a condition holds / fails): the two ends of cividis, dark blue / yellow.
BINARY_CMAP = "cividis"
#: Colour maps a figure may use: perceptually uniform maps (viridis family, cividis), single-hue
#: sequential maps and ColorBrewer diverging maps without a red-green axis, plus the head-class
#: colours (checked by :func:`cvd_min_distance`). Red/green maps (RdYlGn, RdGy, jet, ...) are out.
#: A ``_r`` (reversed) variant counts as its base map.
COLORBLIND_SAFE_CMAPS: frozenset[str] = frozenset(
    {
        "viridis",
        "cividis",
        "magma",
        "inferno",
        "plasma",
        "Blues",
        "Greys",
        "Purples",
        "PuOr",
        "RdBu",
        "BrBG",
        HEAD_CLASS_CMAP,
    }
)
#: Minimum CIELAB distance between any two categorical colours under simulated colour-vision
#: deficiency (Machado et al. 2009, severity 1); ~10 is a clearly visible difference.
MIN_CVD_DELTA_E = 25.0

#: Fixed colour per head class: sink yellow and diagonal green as in the paper's Figure 10,
#: sink+previous indigo, other light grey (every pair >= MIN_CVD_DELTA_E apart for dichromats).
CLASS_COLORS: dict[str, str] = {
    SINK: "#e6ab02",
    DIAGONAL: "#009e73",
    SINK_PREV: "#332288",
    OTHER: "#e0e0e0",
}
#: Legend names of the *exclusive* labels ``head_class`` (class map). The label "sink" excludes
#: the sink heads labelled sink+previous (and the few where the diagonal mass is larger), so it
#: is not the ``is_sink`` flag that the summary and the oversmoothing figures count.
CLASS_LEGEND_NAMES: dict[str, str] = {
    SINK: "sink (not sink+previous)",
    DIAGONAL: "diagonal",
    SINK_PREV: "sink+previous",
    OTHER: "other (no pattern)",
}
#: Summary columns plotted as bars (overlapping flags), with the pattern name used as hue.
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
    """Write ``fig`` atomically as PNG and release it.

    Every figure of the package is written here, so the readability rules hold for all of them:
    a figure for which :func:`figure_problems` reports anything is refused with a ``ValueError``
    naming the file and the problems, and nothing is written.
    """
    try:
        problems = figure_problems(fig)
        if problems:
            raise ValueError(
                f"refusing to write the figure {os.fspath(out_png)!r}, it breaks the readability "
                f"rules of sinkscope.plotting: {'; '.join(problems)}"
            )
        with atomic_path(out_png) as tmp:
            fig.savefig(tmp, format="png", dpi=DPI, metadata=PNG_METADATA)
    finally:
        fig.clear()


# --- readability checks ---------------------------------------------------------------------


def legend_below(fig: Figure, axes: Iterable[Axes], ncols: int = 6, fontsize: float = 8) -> None:
    """One legend under the panels, outside every axes (so that it covers no data): the distinct
    entries of ``axes`` in order of appearance."""
    entries: dict[str, object] = {}
    for ax in np.ravel(np.asarray(axes, dtype=object)):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(
            list(entries.values()),
            list(entries),
            loc="outside lower center",
            ncols=min(ncols, len(entries)),
            frameon=False,
            fontsize=fontsize,
        )


def is_colorblind_safe(cmap_name: str) -> bool:
    """Whether ``cmap_name`` (or its base map, for a ``_r`` variant) is in the allowed list."""
    return cmap_name.removesuffix("_r") in COLORBLIND_SAFE_CMAPS


#: Machado, Oliveira & Fernandes (2009) dichromacy matrices, severity 1, on linear RGB.
_CVD_MATRICES: dict[str, np.ndarray] = {
    "deuteranopia": np.array(
        [
            [0.367322, 0.860646, -0.227968],
            [0.280085, 0.672501, 0.047413],
            [-0.011820, 0.042940, 0.968881],
        ]
    ),
    "protanopia": np.array(
        [
            [0.152286, 1.052583, -0.204868],
            [0.114503, 0.786281, 0.099216],
            [-0.003882, -0.048116, 1.051998],
        ]
    ),
    "tritanopia": np.array(
        [
            [1.255528, -0.076749, -0.178779],
            [-0.078411, 0.930809, 0.147602],
            [0.004733, 0.691367, 0.303900],
        ]
    ),
}


def _linear_rgb(color: str) -> np.ndarray:
    srgb = np.asarray(mcolors.to_rgb(color), dtype=float)
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def _lab(linear: np.ndarray) -> np.ndarray:
    xyz = np.array(
        [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
    ) @ np.clip(linear, 0.0, 1.0)
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > 0.008856, np.cbrt(t), 7.787 * t + 16.0 / 116.0)
    return np.array([116.0 * f[1] - 16.0, 500.0 * (f[0] - f[1]), 200.0 * (f[1] - f[2])])


def cvd_min_distance(colors: Iterable[str]) -> dict[str, float]:
    """Smallest CIELAB distance between any two of ``colors``, for normal vision and each
    simulated dichromacy (keys ``normal``, ``deuteranopia``, ``protanopia``, ``tritanopia``)."""
    linear = [_linear_rgb(c) for c in colors]
    if len(linear) < 2:
        raise ValueError("need at least two colours")
    out = {}
    for name, matrix in {"normal": np.eye(3), **_CVD_MATRICES}.items():
        lab = [_lab(matrix @ c) for c in linear]
        out[name] = float(min(np.linalg.norm(a - b) for a, b in itertools.combinations(lab, 2)))
    return out


def _overlap(a: object, b: object, tolerance: float = 1.0) -> bool:
    """Whether two display-space Bboxes overlap by more than ``tolerance`` pixels each way (a
    negative tolerance: they come closer than ``-tolerance`` pixels)."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)  # type: ignore[attr-defined]
    height = min(a.y1, b.y1) - max(a.y0, b.y0)  # type: ignore[attr-defined]
    return width > tolerance and height > tolerance


def _visible_labels(ax: Axes, axis: str) -> list[object]:
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t for t in labels if t.get_visible() and t.get_text().strip()]


def figure_problems(fig: Figure) -> list[str]:
    """Readability problems of ``fig`` (empty list: none). Draws the figure once.

    Checks: every colour map of an image or mesh is colour-blind safe; no side exceeds
    :data:`MAX_FIGURE_PIXELS`; no legend (of an axes or of the figure) overlaps any axes;
    the tick labels of each axis keep :data:`MIN_TICK_LABEL_GAP_PX` apart.
    """
    problems: list[str] = []
    width, height = fig.get_size_inches() * fig.dpi
    if max(width, height) > MAX_FIGURE_PIXELS:
        problems.append(f"figure is {width:.0f} x {height:.0f} px (> {MAX_FIGURE_PIXELS})")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes:
        for artist in [*ax.images, *ax.collections]:
            if isinstance(artist, ScalarMappable) and artist.get_array() is not None:
                name = artist.get_cmap().name
                if not is_colorblind_safe(name):
                    problems.append(f"colour map {name!r} is not in COLORBLIND_SAFE_CMAPS")
    legends: list[Legend] = [*fig.legends]
    legends += [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for index, ax in enumerate(fig.axes):
            if _overlap(box, ax.get_window_extent(renderer)):
                title = legend.get_title().get_text() or legend.texts[0].get_text()
                problems.append(f"legend {title!r} covers axes {index} ({ax.get_title()!r})")
    for index, ax in enumerate(fig.axes):
        for axis in ("x", "y"):
            boxes = [t.get_window_extent(renderer) for t in _visible_labels(ax, axis)]
            for a, b in itertools.combinations(boxes, 2):
                if _overlap(a, b, tolerance=-MIN_TICK_LABEL_GAP_PX):
                    problems.append(f"axes {index}: overlapping {axis} tick labels")
                    break
    return problems


# --- layer x head grids ---------------------------------------------------------------------


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


def _grid_height(n_layers: int) -> float:
    """Height in inches of a layer x head grid: 0.22 in per layer (one readable label each)."""
    return float(np.clip(0.22 * n_layers, 2.5, 15.0))


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
    panel_width = float(np.clip(0.3 * n_heads, 3.0, 5.5))
    fig = new_figure(3 * panel_width + 1.6, _grid_height(n_layers) + 1.3)
    axes = fig.subplots(1, 4, gridspec_kw={"width_ratios": [1, 1, 1, 0.05]})
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
            cbar_ax=axes[-1] if last else None,
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
    ``subdiagonal_mass`` (e.g. a per-head table of :func:`sinkscope.heads.classify_file`).
    Layers run top to bottom, heads left to right, every layer and head labelled; absent cells
    stay blank.
    """
    save_figure(mass_heatmaps_figure(per_head, title), out_png)


def class_counts(per_head: pl.DataFrame) -> dict[str, int]:
    """Heads per exclusive label (every class of :data:`HEAD_CLASSES`, zeros included) and the
    number of heads with the ``is_sink`` flag under the key ``"is_sink"``."""
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
    fig = new_figure(float(np.clip(0.45 * n_heads, 3.0, 10.0)) + 3.6, _grid_height(n_layers) + 1.2)
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
    Colours are fixed per class (:data:`CLASS_COLORS`); absent cells stay blank.
    """
    save_figure(class_map_figure(per_head, title, thresholds), out_png)


# --- summary bars ---------------------------------------------------------------------------


def _facet_order(datasets: Sequence[str]) -> list[str]:
    return sorted(set(datasets), key=lambda name: (name == POOLED, name))


def pattern_legend_names(thresholds: HeadClassThresholds | None = None) -> dict[str, str]:
    """Legend names of the (overlapping) pattern flags counted by :func:`sinkscope.heads.summarize`."""
    th = thresholds or HeadClassThresholds()
    return {
        SINK: f"sink: is_sink, BOS mass >= {th.sink:g} (any class)",
        DIAGONAL: f"diagonal: diagonal mass >= {th.diagonal:g}",
        SINK_PREV: (
            f"sink+previous: BOS + previous >= {th.sink_prev_joint:g}, "
            f"each >= {th.sink_prev_min_part:g} of it"
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
    thresholds: HeadClassThresholds | None = None,
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
    facets = _facet_order(summary["dataset"].to_list())
    patterns = list(_PATTERN_COLUMNS.values())
    facet_width = max(2.8, 0.75 * len(models) + 1.0)
    legend_width = 3.2
    max_inches = MAX_FIGURE_PIXELS / DPI
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
    thresholds: HeadClassThresholds | None = None,
) -> None:
    """Grouped bars of :func:`sinkscope.heads.summarize`: x = model, hue = pattern (sink,
    diagonal, sink+previous), one facet per dataset with the pooled ``"all"`` facet last (wrapped
    into rows when they would exceed :data:`MAX_FIGURE_PIXELS`).

    Bars show percentages of heads with each *flag* (``is_sink``, ``is_diagonal``,
    ``is_sink_prev``; a head can have several) and are labelled with their value in percent with
    one decimal (:func:`percent_label`: the number the ``heads.*`` claim rows state); the legend
    states each flag's rule (with ``thresholds``, default the paper's).
    """
    save_figure(summary_bars_figure(summary, title, thresholds), out_png)
