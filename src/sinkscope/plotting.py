"""The rules every figure follows, and the shared style of the figures of every stage.

Figures are built on a bare ``matplotlib.figure.Figure`` with an Agg canvas
(:func:`new_figure`): pyplot is never used, so there is no global figure registry to leak into
and no interactive backend to select. Each figure has a fixed size and dpi and is written
without the ``Software`` (version) metadata, so the same table gives a byte-identical PNG on the
same software stack. Every figure is written by :func:`save_figure`: atomically (temporary name,
explicit ``format="png"``, then rename), and the figure is released afterwards. The figures
themselves live with their stage (``sinkscope.<stage>.plots``; the head classes':
:mod:`sinkscope.heads.plots`).

Readability rules (stated once here, checked by :func:`figure_problems`, enforced by
:func:`save_figure` for every figure written): colour maps come from
:data:`COLORBLIND_SAFE_CMAPS`; no side of a figure exceeds :data:`MAX_FIGURE_PIXELS`; no legend
covers an axes; tick labels of one axis do not come closer than MIN_TICK_LABEL_GAP_PX.
Categorical colours (:data:`CLASS_COLORS`) stay at least :data:`MIN_CVD_DELTA_E` apart (CIELAB)
under simulated deuteranopia, protanopia and tritanopia (:func:`cvd_min_distance`).

Layouts that hold at every panel count (one panel to the paper's largest models, 48 layers and
up to 64 heads): a figure legend in as many columns as the figure's width holds
(:func:`fitted_legend`, :func:`legend_below`), layer and head ticks thinned to a panel's width
(:func:`tick_step`) and panel titles wrapped to it (:func:`wrap_to_width`).
"""

from __future__ import annotations

import itertools
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import matplotlib.colors as mcolors
import numpy as np
from matplotlib import patheffects
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from sinkscope.io import atomic_path
from sinkscope.labels import CLASS_LEGEND_NAMES, DIAGONAL, OTHER, SINK, SINK_PREV

__all__ = [
    "BINARY_CMAP",
    "CLASS_COLORS",
    "CLASS_LEGEND_NAMES",
    "COLORBLIND_SAFE_CMAPS",
    "DIVERGING_CMAP",
    "MAX_FIGURE_INCHES",
    "MAX_FIGURE_PIXELS",
    "MIN_CVD_DELTA_E",
    "SEQUENTIAL_CMAP",
    "Draw",
    "cvd_min_distance",
    "figure_problems",
    "fitted_legend",
    "is_colorblind_safe",
    "median_line_props",
    "new_figure",
    "save_figure",
    "tick_step",
    "wrap_overflowing_titles",
    "wrap_to_width",
]

#: One figure of a rule, bound to its tables: draws it into the PNG path given. Every stage's
#: ``plots.py`` returns the figures of each of its rules as ``{figure name: Draw}`` (the names of
#: the stage's ``names.py``; the rule writes figure ``name`` to its output ``figure_<name>``).
Draw = Callable[[str | os.PathLike[str]], None]

DPI = 120
PNG_METADATA: dict[str, str | None] = {"Software": None}
#: Longest side of any figure in pixels (at :data:`DPI`); wider content is wrapped into a grid.
MAX_FIGURE_PIXELS = 2400
#: The same in inches (the unit of a figure's size).
MAX_FIGURE_INCHES = MAX_FIGURE_PIXELS / DPI
#: Smallest gap in pixels between two tick labels of one axis (closer labels read as one).
MIN_TICK_LABEL_GAP_PX = 3.0
#: Font size of tick labels on layer x head grids (one label per layer and per head).
GRID_TICK_FONTSIZE = 8
#: Most integer tick labels (layers, heads) per inch of a panel: labels of up to two digits keep
#: MIN_TICK_LABEL_GAP_PX apart at the default tick font size (10 pt) whatever the layer count.
INTEGER_TICKS_PER_INCH = 3.0
#: Inches a figure legend fitted to the figure's width (:func:`fitted_legend`) leaves on each side.
LEGEND_MARGIN_INCHES = 0.1
#: Mean width of a character of the figures' font (DejaVu Sans) in ems, to wrap a text to a
#: width before it is drawn (:func:`wrap_to_width`).
CHAR_WIDTH_EM = 0.6

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


def contrasting_line_color(fill: str) -> str:
    """Black or white, whichever stands out on ``fill`` (WCAG relative luminance, threshold 0.18):
    the median line of a box filled with the indigo of sink+previous heads is white."""
    linear = [
        c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in mcolors.to_rgb(fill)
    ]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return "white" if luminance < 0.18 else "black"


def median_line_props(fill: str, flat: bool = False, linewidth: float = 1.2) -> dict[str, Any]:
    """``medianprops`` of a box filled with ``fill``: a line in :func:`contrasting_line_color`,
    which shows on the fill. A ``flat`` box (no visible height: one sequence, equal quartiles)
    is its median alone, on the white axes: its line takes the fill colour, twice as wide and
    edged in black, so that the legend's colours still tell the boxes apart."""
    if not flat:
        return {"color": contrasting_line_color(fill), "linewidth": linewidth}
    return {
        "color": fill,
        "linewidth": 2 * linewidth,
        "path_effects": [
            patheffects.Stroke(linewidth=3 * linewidth, foreground="black"),
            patheffects.Normal(),
        ],
    }


def new_figure(width: float, height: float) -> Figure:
    """A pyplot-free figure with an Agg canvas (no global state; deterministic size and dpi)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def wrap_overflowing_titles(fig: Figure, rounds: int = 3) -> bool:
    """Re-wrap each title, axis label or legend text of ``fig`` that runs off the figure at the
    longest line that fits around its centre (along its direction: a rotated label against the
    figure's height), so that titles which print counts stay whole for any number of layers,
    models or datasets; mathtext (``$...$``) is never split. Draws ``fig``; returns
    whether it is drawn as it stands (nothing re-wrapped in the last round)."""
    # each text as the figure gave it: a later round re-wraps it whole, not the lines of the
    # round before (which would leave a word that went over twice on a line of its own)
    originals: dict[int, str] = {}
    for _ in range(rounds):
        with warnings.catch_warnings():  # a provisional layout; the checked draw warns itself
            warnings.filterwarnings("ignore", "constrained_layout not applied", UserWarning)
            fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        size = fig.get_size_inches() * fig.dpi
        changed = False
        for text in _titles_and_labels(fig):
            content = text.get_text()
            if not content.strip():
                continue
            box = text.get_window_extent(renderer)
            if _inside(box, size):
                continue
            vertical = round(text.get_rotation()) % 180 == 90
            low, high, extent = (box.y0, box.y1, size[1]) if vertical else (box.x0, box.x1, size[0])
            centre = (low + high) / 2
            room = 2 * min(centre, extent - centre) - 8.0
            lines = content.split("\n")
            longest = max(len(line) for line in lines)
            max_chars = max(12, int(longest * room / (high - low)))
            original = originals.setdefault(id(text), content)
            wrapped = "\n".join(_wrap_line(line, max_chars) for line in original.split("\n"))
            if wrapped != content:
                text.set_text(wrapped)
                changed = True
        if not changed:
            return True
    return False


#: A word of a line: a mathtext group ``$...$`` with what is glued to it, or a run of non-spaces.
_WORD = re.compile(r"(?:[^\s$]*\$[^$]*\$)+[^\s$]*|\S+")


def _wrap_line(line: str, max_chars: int) -> str:
    """``line`` broken at spaces into lines of at most ``max_chars`` characters where the words
    allow (a longer word stays whole), never inside a mathtext group."""
    out: list[str] = []
    for word in _WORD.findall(line):
        if out and len(out[-1]) + 1 + len(word) <= max_chars:
            out[-1] += " " + word
        else:
            out.append(word)
    return "\n".join(out)


def wrap_to_width(text: str, inches: float, fontsize: float) -> str:
    """``text`` broken at spaces (never inside mathtext) into lines of about ``inches`` at
    ``fontsize`` points (:data:`CHAR_WIDTH_EM`): the title of a panel that shares a row with
    others, which would run into its neighbour's (:func:`wrap_overflowing_titles` re-wraps only
    what runs off the figure)."""
    max_chars = max(12, int(inches * 72.0 / (CHAR_WIDTH_EM * fontsize)))
    return "\n".join(_wrap_line(line, max_chars) for line in text.split("\n"))


def _inside(box: Bbox, size: np.ndarray) -> bool:
    """Whether window extent ``box`` lies within a figure of ``size`` pixels (1 px of slack)."""
    canvas = Bbox.from_bounds(0, 0, size[0], size[1]).padded(1.0)
    return bool(canvas.contains(box.x0, box.y0) and canvas.contains(box.x1, box.y1))


def save_figure(fig: Figure, out_png: str | os.PathLike[str]) -> None:
    """Write ``fig`` atomically as PNG and release it.

    Every figure of the package is written here, so the readability rules hold for all of them:
    a figure for which :func:`figure_problems` reports anything (after re-wrapping the titles that
    run off it) is refused with a ``ValueError`` naming the file and the problems, and nothing is
    written.
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


def tick_step(n_values: int, inches: float, most: int | None = None) -> int:
    """Every how many of ``n_values`` consecutive integers (e.g. layers) a tick label goes, on an
    axis of a panel ``inches`` wide: at most :data:`INTEGER_TICKS_PER_INCH` labels per inch and
    at most ``most`` labels, so that the 48 layers of a narrow panel (one of many models) do not
    overlap (1: every value labelled)."""
    fit = max(1, int(INTEGER_TICKS_PER_INCH * inches))
    if most is not None:
        fit = min(fit, most)
    return max(1, math.ceil(n_values / fit))


def fitted_legend(
    fig: Figure,
    handles: Sequence[Artist],
    labels: Sequence[str] | None = None,
    ncols: int | None = None,
    **kwargs: Any,
) -> Legend:
    """A figure legend (``fig.legend``, e.g. ``loc="outside lower center"``) in ``ncols`` columns
    (default: all entries in one row), or in fewer where that row would be wider than the
    figure (less :data:`LEGEND_MARGIN_INCHES` each side): its place and width do not depend on
    how many panels set the figure's width, so the legend of one panel fits as that of many."""
    labels = [h.get_label() for h in handles] if labels is None else list(labels)
    columns = max(1, min(ncols or len(handles), len(handles)))
    room = (fig.get_figwidth() - 2 * LEGEND_MARGIN_INCHES) * fig.dpi
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    while True:
        legend = fig.legend(list(handles), labels, ncols=columns, **kwargs)
        if columns == 1 or legend.get_window_extent(renderer).width <= room:
            return legend
        legend.remove()
        columns -= 1


def legend_below(fig: Figure, axes: Iterable[Axes], ncols: int = 6, fontsize: float = 8) -> None:
    """One legend under the panels, outside every axes (so that it covers no data): the distinct
    entries of ``axes`` in order of appearance, in at most ``ncols`` columns
    (:func:`fitted_legend`: fewer where they would not fit the figure's width)."""
    entries: dict[str, Artist] = {}
    for ax in np.ravel(np.asarray(axes, dtype=object)):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        fitted_legend(
            fig,
            list(entries.values()),
            list(entries),
            ncols=ncols,
            loc="outside lower center",
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


def _titles_and_labels(fig: Figure) -> list[Text]:
    """The texts of ``fig`` but its tick labels (those of ticks outside the view are kept but
    never drawn; :func:`figure_problems` checks tick labels apart): titles, axis labels, legends,
    free texts."""
    ticks = {
        id(label)
        for ax in fig.axes
        for axis in (ax.xaxis, ax.yaxis)
        for label in [*axis.get_ticklabels(which="both"), axis.get_offset_text()]
    }
    return [text for text in fig.findobj(Text) if id(text) not in ticks]


def figure_problems(fig: Figure) -> list[str]:
    """Readability problems of ``fig`` (empty list: none), after re-wrapping the titles and
    labels that run off it (:func:`wrap_overflowing_titles`, which draws the figure).

    Checks: every colour map of an image or mesh is colour-blind safe; no side exceeds
    :data:`MAX_FIGURE_PIXELS`; no legend (of an axes or of the figure) overlaps any axes;
    the tick labels of each axis keep :data:`MIN_TICK_LABEL_GAP_PX` apart; every title, label
    and legend text lies inside the figure (one that cannot be wrapped, e.g. mathtext, is cut
    off).
    """
    problems: list[str] = []
    width, height = fig.get_size_inches() * fig.dpi
    drawn = wrap_overflowing_titles(fig)
    if max(width, height) > MAX_FIGURE_PIXELS:
        problems.append(f"figure is {width:.0f} x {height:.0f} px (> {MAX_FIGURE_PIXELS})")
    if not drawn:
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
    for text in _titles_and_labels(fig):
        visible = text.get_visible() and text.get_text().strip()
        if visible and not _inside(text.get_window_extent(renderer), np.array([width, height])):
            problems.append(f"text {text.get_text()[:60]!r} runs off the figure")
    for index, ax in enumerate(fig.axes):
        for axis in ("x", "y"):
            boxes = [t.get_window_extent(renderer) for t in _visible_labels(ax, axis)]
            for a, b in itertools.combinations(boxes, 2):
                if _overlap(a, b, tolerance=-MIN_TICK_LABEL_GAP_PX):
                    problems.append(f"axes {index}: overlapping {axis} tick labels")
                    break
    return problems
