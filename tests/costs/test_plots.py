"""The §7 figures (synthetic tables): written, readable, and saying how d was set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import LineCollection

from sinkscope.costs.backcopy import FRAME_EXTRA, make_task
from sinkscope.costs.condition3 import condition3_grid
from sinkscope.costs.plots import (
    backcopy_costs_figure,
    condition3_figure,
    copypaste_costs_figure,
    dimension_label,
    plot_backcopy_costs,
    plot_condition3,
    plot_copypaste_costs,
    plot_toy,
    toy_figure,
)
from sinkscope.costs.toy import toy_table
from sinkscope.plotting import BINARY_CMAP, figure_problems


def _backcopy_rows(n_dormant: int = 5, n_copy: int = 5) -> list[dict]:
    rows = []
    for T in (4, 8, 16):
        for pattern, power in (("sink", 1.0), ("diagonal", 1.5)):
            for seed in (0, 1):
                c = 10.0 * T**power * (1 + 0.01 * seed)
                rows.append(
                    {
                        "T": T,
                        "d": T + n_dormant + n_copy + FRAME_EXTRA,
                        "n_dormant": n_dormant,
                        "n_copy": n_copy,
                        "pattern": pattern,
                        "seed": seed,
                        "kappa": 10.0,
                        "score_norm": "d",
                        "cost_total": c,
                        "cost_qk": 0.9 * c,
                        "cost_qk_lower": 0.89 * c,
                        "cost_total_d": c,
                        "cost_total_sqrt_d": c / 3,
                    }
                )
    return rows


def _copypaste_rows() -> list[dict]:
    # both patterns at the same r_eff/delta^2 values, with overlapping bounds (the case)
    return [
        {
            "pattern": p,
            "n": n,
            "reff_over_delta2": x,
            "cost_total": c,
            "lower_bound": c / 2,
            "upper_bound": 2 * c,
            "C": 3,
            "d": 100,
            "kappa": 10.0,
        }
        for p, f in (("sink", lambda x: 30.0), ("diagonal", lambda x: 3.0 * x))
        for n, x in ((2, 10.0), (2, 100.0), (4, 50.0))
        for c in [f(x)]
    ]


def test_figures_are_written(tmp_path: Path) -> None:
    rows = _backcopy_rows()
    plot_backcopy_costs(rows, tmp_path / "a.png")
    grid = condition3_grid([4, 8, 16], [5], [1.0, 10.0], d_offsets=[FRAME_EXTRA])
    plot_condition3(grid, tmp_path / "b.png", measured=rows)
    plot_copypaste_costs(_copypaste_rows(), tmp_path / "c.png")
    plot_toy(toy_table([4, 8, 16]), tmp_path / "d.png")
    for name in ("a.png", "b.png", "c.png", "d.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_figures_are_readable() -> None:
    rows = _backcopy_rows()
    grid = condition3_grid([4, 8, 16, 32], [5], [1.0, 10.0, 100.0], d_offsets=[0, FRAME_EXTRA])
    figures = {
        "backcopy": backcopy_costs_figure(rows, "backcopy"),
        "condition3": condition3_figure(grid, measured=rows),
        "copypaste": copypaste_costs_figure(_copypaste_rows()),
        "toy": toy_figure(toy_table([4, 8, 16, 32])),
    }
    for name, fig in figures.items():
        assert figure_problems(fig) == [], name
    images = [im for ax in figures["condition3"].axes for im in ax.images]
    assert images and {im.get_cmap().name for im in images} == {BINARY_CMAP}


def test_copypaste_bound_bars_never_share_an_x() -> None:
    fig = copypaste_costs_figure(_copypaste_rows())
    bars = [c for c in fig.axes[1].collections if isinstance(c, LineCollection)]
    assert len(bars) == 2
    xs = [np.array([segment[0, 0] for segment in c.get_segments()]) for c in bars]
    ratios = np.abs(np.log(xs[0][:, None] / xs[1][None, :]))
    assert ratios.min() > np.log(1.1)  # at least 10% apart on the log axis


def test_the_figures_say_how_d_was_set() -> None:
    # the offset is the frame's: BOS h_0 and p_0 on top of the |D|+|C| contexts and T positions
    task = make_task(4, n_dormant=5, n_copy=5)
    assert task.d == 4 + 5 + 5 + FRAME_EXTRA == task.E.shape[0]
    assert dimension_label(FRAME_EXTRA).startswith(f"d = T+|D|+|C|+{FRAME_EXTRA} (")
    assert dimension_label(0) == "d = T+|D|+|C|"
    fig = backcopy_costs_figure(_backcopy_rows(), "backcopy")
    assert dimension_label(FRAME_EXTRA) in fig.get_suptitle()
    assert "|D|=5, |C|=5" in fig.get_suptitle()
    grid = condition3_grid([4, 8], [5], [10.0], d_offsets=[0, FRAME_EXTRA])
    assert condition3_figure(grid).get_suptitle().endswith(dimension_label(FRAME_EXTRA))
    assert condition3_figure(grid, d_offset=0).get_suptitle().endswith(dimension_label(0))
    # rows with another d: the label follows the rows
    rows = [dict(r, d=r["d"] + 3) for r in _backcopy_rows()]
    assert "d = T+|D|+|C|+5" in backcopy_costs_figure(rows).get_suptitle()


def test_condition3_rejects_a_missing_slice() -> None:
    grid = condition3_grid([4], [5], [10.0], d_offsets=[0])
    with pytest.raises(ValueError, match="no grid rows"):
        condition3_figure(grid, d_offset=FRAME_EXTRA)
