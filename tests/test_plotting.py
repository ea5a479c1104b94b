"""Figure rules shared by every stage: readability checks, colour-blind safe colours and maps,
save_figure refusing an unreadable figure (the head-class figures: tests/heads/test_plots.py)."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.colors as mcolors
import numpy as np
import pytest

from sinkscope.plotting import (
    BINARY_CMAP,
    CLASS_COLORS,
    DIVERGING_CMAP,
    DPI,
    MAX_FIGURE_PIXELS,
    MIN_CVD_DELTA_E,
    SEQUENTIAL_CMAP,
    cvd_min_distance,
    figure_problems,
    is_colorblind_safe,
    new_figure,
    save_figure,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_figure_problems_finds_each_problem() -> None:
    fig = new_figure(6.0, 4.0)
    ax = fig.subplots()
    ax.imshow(np.arange(4.0).reshape(2, 2), cmap="RdYlGn")
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(loc="center")
    assert any("RdYlGn" in p for p in figure_problems(fig))
    assert any("covers axes" in p for p in figure_problems(fig))
    fig = new_figure(6.0, 2.0)
    ax = fig.subplots()
    ax.set_yticks(range(40), [f"layer {i}" for i in range(40)])
    assert any("overlapping y tick labels" in p for p in figure_problems(fig))
    big = new_figure(MAX_FIGURE_PIXELS / DPI + 1.0, 3.0)
    big.subplots()
    assert any("px" in p for p in figure_problems(big))
    # a title wider than the figure is cut off; a log axis's labels of ticks outside the view
    # (kept by matplotlib, never drawn) are not a problem
    fig = new_figure(4.0, 3.0)
    ax = fig.subplots()
    ax.plot([1, 10, 100], [1, 2, 3])
    ax.set_xscale("log")
    ax.set_title("a short title")
    assert figure_problems(fig) == []
    ax.set_title(r"$\mathrm{" + "x" * 120 + "}$")  # mathtext: cannot be wrapped
    assert any("runs off the figure" in p for p in figure_problems(fig))


def test_save_figure_rewraps_titles_that_run_off_the_figure(tmp_path: Path) -> None:
    """A title printing counts for many layers or datasets is wrapped to fit around its centre,
    every word kept; a mathtext title is left as it is (and refused if it does not fit)."""
    from sinkscope.plotting import wrap_overflowing_titles

    title = "a title with the counts of every layer, " * 4
    fig = new_figure(4.0, 3.0)
    ax = fig.subplots()
    ax.set_title(title)
    fig.suptitle("model x dataset " * 12)
    wrap_overflowing_titles(fig)
    assert figure_problems(fig) == []
    assert ax.get_title().count("\n") >= 2
    assert ax.get_title().split() == title.split()
    save_figure(fig, tmp_path / "wrapped.png")
    assert (tmp_path / "wrapped.png").read_bytes()[:8] == PNG_SIGNATURE
    # a legend entry with mathtext: broken at spaces, never inside $...$
    fig = new_figure(6.0, 3.0)
    ax = fig.subplots()
    label = r"after adding the attention update: $\rho(X + U)$ (at layer + 0.5), " * 2
    ax.plot([0, 1], [0, 1], label=label)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    assert figure_problems(fig) == []
    (entry,) = ax.get_legend().get_texts()
    text = entry.get_text()
    assert "\n" in text and any(r"$\rho(X + U)$" in line for line in text.split("\n"))
    assert entry.get_text().split() == label.split()
    # a rotated label is wrapped against the figure's height
    fig = new_figure(6.0, 2.0)
    ax = fig.subplots()
    ax.set_ylabel("fraction of attention mass (mean over query rows 1..T)")
    assert figure_problems(fig) == []
    assert "\n" in ax.get_ylabel()
    fig = new_figure(4.0, 3.0)
    fig.suptitle(r"$\mathrm{" + "x" * 120 + "}$")
    with pytest.raises(ValueError, match="runs off the figure"):
        save_figure(fig, tmp_path / "math.png")
    assert not (tmp_path / "math.png").exists()


def test_class_colours_stay_apart_for_colour_blind_readers() -> None:
    distances = cvd_min_distance(CLASS_COLORS.values())
    assert min(distances.values()) >= MIN_CVD_DELTA_E, distances
    # the check can fail: red against green collapses under deuteranopia
    assert cvd_min_distance(["#d62728", "#2ca02c"])["deuteranopia"] < MIN_CVD_DELTA_E
    for name in (SEQUENTIAL_CMAP, DIVERGING_CMAP, BINARY_CMAP, f"{SEQUENTIAL_CMAP}_r"):
        assert is_colorblind_safe(name)
    assert not is_colorblind_safe("RdYlGn") and not is_colorblind_safe("jet")


_CMAP_LITERAL = re.compile(
    r"""(?:cmap\s*=\s*|colormaps\[\s*|get_cmap\(\s*)["']([A-Za-z0-9_]+)["']"""
)


def test_every_colour_map_named_in_the_package_is_colorblind_safe(repo: Path) -> None:
    """Every colour map spelled out in a module of the package is in COLORBLIND_SAFE_CMAPS."""
    found = {
        (path.relative_to(repo).as_posix(), name)
        for path in sorted((repo / "src" / "sinkscope").rglob("*.py"))
        for name in _CMAP_LITERAL.findall(path.read_text())
    }
    assert found  # the pattern matches how figures name their maps
    bad = sorted((path, name) for path, name in found if not is_colorblind_safe(name))
    assert bad == []


def test_save_figure_refuses_a_figure_that_breaks_a_rule(tmp_path: Path) -> None:
    """Every stage writes through save_figure, so no stage can write an unreadable figure: the
    error names the file and each problem, and nothing (not even a temporary file) is written."""
    fig = new_figure(6.0, 4.0)
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(loc="center")  # covers the data
    out = tmp_path / "covered.png"
    with pytest.raises(ValueError, match=r"covered\.png.*legend 'a line' covers axes 0"):
        save_figure(fig, out)
    big = new_figure(MAX_FIGURE_PIXELS / DPI + 1.0, 3.0)
    big.subplots()
    with pytest.raises(ValueError, match=r"too_big\.png.*px \(> 2400\)"):
        save_figure(big, tmp_path / "too_big.png")
    assert list(tmp_path.iterdir()) == []
    # a readable figure is written
    fine = new_figure(6.0, 4.0)
    fine.subplots().plot([0, 1], [0, 1])
    save_figure(fine, tmp_path / "fine.png")
    assert (tmp_path / "fine.png").read_bytes().startswith(PNG_SIGNATURE)


def test_every_categorical_palette_stays_apart_for_colour_blind_readers() -> None:
    """The fixed categorical colours of every figure module (policies, conditions, head types,
    point sets, sink groups, cost patterns) keep MIN_CVD_DELTA_E apart under each dichromacy."""
    from sinkscope.costs import plots as cost_plots
    from sinkscope.geometry import figure_parts as geometry_parts
    from sinkscope.geometry import plots as geometry_plots
    from sinkscope.oversmoothing import plots as oversmoothing_plots
    from sinkscope.streaming import plots as streaming_plots

    palettes = {
        "streaming.plots.KIND_COLORS": streaming_plots.KIND_COLORS,
        "oversmoothing.plots.CONDITION_COLORS": oversmoothing_plots.CONDITION_COLORS,
        "oversmoothing.plots.PATTERN_COLORS": oversmoothing_plots.PATTERN_COLORS,
        "geometry.figure_parts._SET_COLORS": geometry_parts._SET_COLORS,
        "geometry.plots._SINK_GROUP_COLORS": geometry_plots._SINK_GROUP_COLORS,
        "costs.plots.COLORS": cost_plots.COLORS,
    }
    low = {
        name: distances
        for name, palette in palettes.items()
        if min((distances := cvd_min_distance(palette.values())).values()) < MIN_CVD_DELTA_E
    }
    assert not low, low


def test_box_medians_contrast_with_their_fill() -> None:
    """The median line of a class-coloured box stands out: white on the dark sink+previous
    indigo, black on the light colours (and on white / black themselves, the other way)."""
    from sinkscope.labels import SINK, SINK_PREV
    from sinkscope.plotting import CLASS_COLORS, contrasting_line_color

    assert contrasting_line_color(CLASS_COLORS[SINK_PREV]) == "white"
    assert contrasting_line_color(CLASS_COLORS[SINK]) == "black"
    assert contrasting_line_color("white") == "black" and contrasting_line_color("black") == "white"


@pytest.mark.parametrize(("height", "flat"), [(0.0, True), (0.4, False)])
def test_box_medians_show_on_the_fill_and_on_the_white_axes(height: float, flat: bool) -> None:
    """A box of every class colour, drawn with :func:`median_line_props`: the pixels of its median
    differ from what lies under them, the fill (a tall box) or the white axes (a flat box, drawn
    as its median in the fill colour; a white median on the indigo fill vanished there)."""
    from sinkscope.plotting import median_line_props

    for name, fill in CLASS_COLORS.items():
        fig = new_figure(2.0, 2.0)
        ax = fig.subplots()
        stats = {"med": 0.5, "q1": 0.5 - height / 2, "q3": 0.5 + height / 2, "fliers": []}
        stats |= {"whislo": stats["q1"], "whishi": stats["q3"]}
        ax.bxp(
            [stats],
            positions=[0.0],
            widths=0.5,
            patch_artist=True,
            showfliers=False,
            manage_ticks=False,
            boxprops={"facecolor": fill, "edgecolor": "black", "linewidth": 0.6},
            medianprops=median_line_props(fill, flat=flat),
        )
        ax.set_xlim(-1.0, 1.0)
        ax.set_ylim(0.0, 1.0)
        ax.set_axis_off()
        fig.canvas.draw()
        image = np.asarray(fig.canvas.buffer_rgba())[..., :3] / 255.0
        rows = image.shape[0]
        x, y = (int(v) for v in ax.transData.transform((0.0, 0.5)))
        under = np.array(mcolors.to_rgb(fill) if height else (1.0, 1.0, 1.0))
        band = image[rows - y - 3 : rows - y + 3, x]  # the median's rows at the box centre
        contrast = np.abs(band - under).sum(axis=1).max()
        assert contrast > 1.0, (name, fill, height, contrast)
