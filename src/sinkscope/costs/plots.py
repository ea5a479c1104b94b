"""Figures of §7 (Figure 3 and condition (3) of Theorem 7.1) from the cost tables.

All figures use :func:`sinkscope.plotting.new_figure` / :func:`sinkscope.plotting.save_figure`
(pyplot-free, deterministic PNGs) and follow the readability rules of :mod:`sinkscope.plotting`
(legends outside the axes, colour-blind-safe colours). Each ``plot_*`` writes the figure that
the matching ``*_figure`` function builds (the tests inspect the latter).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sinkscope.costs.backcopy import FRAME_EXTRA
from sinkscope.costs.copypaste import copypaste_slopes
from sinkscope.costs.names import BACKCOPY_FIGURES, COPYPASTE_FIGURES, TOY_FIGURES
from sinkscope.costs.summary import fit_slopes, sink_cheaper_reading
from sinkscope.costs.toy import toy_ratio_deviation
from sinkscope.labels import DIAGONAL, SINK
from sinkscope.plotting import BINARY_CMAP, CLASS_COLORS, Draw, new_figure, save_figure

__all__ = [
    "backcopy_costs_figure",
    "backcopy_figures",
    "backcopy_ratio_statement",
    "condition3_figure",
    "copypaste_costs_figure",
    "copypaste_figures",
    "copypaste_setting",
    "dimension_label",
    "plot_backcopy_costs",
    "plot_condition3",
    "plot_copypaste_costs",
    "plot_toy",
    "toy_figure",
    "toy_figures",
]

#: Sink and diagonal colours of the head figures (one definition: sinkscope.plotting).
COLORS = {"sink": CLASS_COLORS[SINK], "diagonal": CLASS_COLORS[DIAGONAL]}
#: Horizontal dodge of the two patterns' bound bars on the log x axis (factor per side).
_DODGE = {"sink": 1 / 1.08, "diagonal": 1.08}


def _legend_below(ax: Axes, ncol: int = 1) -> None:
    """Legend under the axes (outside it, so it covers no data)."""
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=ncol,
        fontsize=8,
        frameon=False,
    )


def dimension_label(d_offset: int) -> str:
    """How ``d`` was set, e.g. ``d = T+|D|+|C|+2`` (with the reason when the offset is the frame's)."""
    label = f"d = T+|D|+|C|+{d_offset}" if d_offset else "d = T+|D|+|C|"
    if d_offset == FRAME_EXTRA:
        label += " (+2: BOS h_0 and position p_0 need their own orthonormal directions)"
    return label


def _d_offsets(rows: Sequence[Mapping[str, Any]]) -> set[int]:
    keys = ("d", "T", "n_dormant", "n_copy")
    return {
        int(r["d"]) - int(r["T"]) - int(r["n_dormant"]) - int(r["n_copy"])
        for r in rows
        if all(k in r for k in keys)
    }


def _by_x(
    rows: Sequence[Mapping[str, Any]], x: str, y: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    xs = np.array(sorted({float(r[x]) for r in rows}))
    vals = [[float(r[y]) for r in rows if float(r[x]) == v] for v in xs]
    return (
        xs,
        np.array([np.mean(v) for v in vals]),
        np.array([np.min(v) for v in vals]),
        np.array([np.max(v) for v in vals]),
    )


def backcopy_ratio_statement(table: Sequence[Mapping[str, Any]]) -> str:
    """The second title line of Figure 3 left: diagonal / sink total cost at the largest ``T``
    (:func:`.summary.sink_cheaper_reading`, the number of claim ``costs.backcopy_sink_cheaper``);
    empty without a ``T`` that has runs of both patterns."""
    reading = sink_cheaper_reading(table)
    if reading is None:
        return ""
    return (
        f"\nat T={reading['T']}: sink {reading['sink']:.1f} vs diagonal "
        f"{reading['diagonal']:.1f} (ratio {reading['ratio']:.2f})"
    )


def backcopy_costs_figure(table: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """The figure of :func:`plot_backcopy_costs` (not yet written)."""
    fig = new_figure(11.0, 5.4)
    ax_tot, ax_qk = fig.subplots(1, 2)
    slopes = fit_slopes(table, "T", "cost_total")
    slopes_qk = fit_slopes(table, "T", "cost_qk")
    for pattern in ("sink", "diagonal"):
        rows = [r for r in table if r["pattern"] == pattern]
        if not rows:
            continue
        c = COLORS[pattern]
        x, m, lo, hi = _by_x(rows, "T", "cost_total")
        ax_tot.errorbar(
            x,
            m,
            yerr=[m - lo, hi - m],
            color=c,
            marker="o",
            capsize=3,
            label=f"{pattern} (slope {slopes[pattern]['slope']:.3f})",
        )
        x, m, lo, hi = _by_x(rows, "T", "cost_qk")
        ax_qk.errorbar(
            x,
            m,
            yerr=[m - lo, hi - m],
            color=c,
            marker="o",
            capsize=3,
            label=f"{pattern} QK (slope {slopes_qk[pattern]['slope']:.3f})",
        )
        x, ml, _, _ = _by_x(rows, "T", "cost_qk_lower")
        ax_qk.plot(x, ml, color=c, ls=":", marker="x", label=f"{pattern} QK certified lower bound")
    seeds = len({r["seed"] for r in table})
    first = table[0] if table else {}
    for ax, lab in (
        (ax_tot, "total cost (sum of squared Frobenius norms)"),
        (ax_qk, "query-key cost ||W_Q||^2 + ||W_K||^2"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length T")
        ax.set_ylabel(lab)
        ax.grid(True, which="both", alpha=0.3)
        _legend_below(ax, ncol=2)
    ax_tot.set_title(
        f"total, mean of {seeds} seed{'s' if seeds != 1 else ''} (bars: min-max)"
        + backcopy_ratio_statement(table),
        fontsize=10,
    )
    norm = "d" if first.get("score_norm") == "d" else "sqrt(d)"
    ax_qk.set_title(f"query-key part, kappa={first.get('kappa', '?')}, scores/{norm}")
    setting = []
    if "n_dormant" in first and "n_copy" in first:
        setting.append(f"|D|={first['n_dormant']}, |C|={first['n_copy']}")
    offsets = _d_offsets(table)
    if len(offsets) == 1:
        setting.append(dimension_label(offsets.pop()))
    suptitle = "; ".join(s for s in (title, ", ".join(setting)) if s)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


def plot_backcopy_costs(
    table: Sequence[Mapping[str, Any]], out_png: str | os.PathLike[str], title: str = ""
) -> None:
    """Figure 3 left: total cost vs T (log-log), mean over seeds with min-max bars, fitted slopes.

    Right panel: the query-key part alone, with the certified lower bound of the convex program.
    The suptitle states ``|D|, |C|`` and how ``d`` was set (:func:`dimension_label`).
    """
    save_figure(backcopy_costs_figure(table, title), out_png)


def condition3_figure(
    grid: Sequence[Mapping[str, Any]],
    n_dormant: int = 5,
    n_copy: int = 5,
    d_offset: int = FRAME_EXTRA,
    measured: Sequence[Mapping[str, Any]] | None = None,
) -> Figure:
    """The figure of :func:`plot_condition3` (not yet written)."""
    rows = [
        r
        for r in grid
        if r["n_dormant"] == n_dormant
        and r["n_copy"] == n_copy
        and r["d"] - r["T"] - n_dormant - n_copy == d_offset
    ]
    if not rows:
        raise ValueError("no grid rows for these set sizes and d offset")
    Ts = sorted({r["T"] for r in rows})
    ks = sorted({r["kappa"] for r in rows})
    cmap = mpl.colormaps[BINARY_CMAP]
    fig = new_figure(12.5, 5.6)
    axes = fig.subplots(1, 2)
    for ax, reading, column in zip(
        axes, ("literal", "folded"), ("cost_total_sqrt_d", "cost_total_d"), strict=True
    ):
        grid_img = np.full((len(ks), len(Ts)), np.nan)
        for r in rows:
            if r["reading"] == reading:
                grid_img[ks.index(r["kappa"]), Ts.index(r["T"])] = float(r["holds"])
        ax.imshow(
            grid_img,
            origin="lower",
            aspect="auto",
            cmap=cmap,
            vmin=0,
            vmax=1,
            extent=(-0.5, len(Ts) - 0.5, -0.5, len(ks) - 0.5),
        )
        ax.set_xticks(range(len(Ts)), [str(t) for t in Ts])
        ax.set_yticks(range(len(ks)), [f"{k:g}" for k in ks])
        ax.set_xlabel("T")
        ax.set_ylabel("kappa")
        for T in sorted({r["T"] for r in measured or []}):
            for k in sorted({r["kappa"] for r in measured or []}):
                sel = [r for r in measured or [] if r["T"] == T and r["kappa"] == k]
                s = [r[column] for r in sel if r["pattern"] == "sink"]
                g = [r[column] for r in sel if r["pattern"] == "diagonal"]
                if s and g and T in Ts and k in ks:
                    mark = "s" if np.mean(s) < np.mean(g) else "d"
                    ax.text(
                        Ts.index(T),
                        ks.index(k),
                        mark,
                        ha="center",
                        va="center",
                        fontsize=11,
                        bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "lw": 0.5},
                    )
        label = (
            "literal: kappa = margin of scores/sqrt(d)"
            if reading == "literal"
            else "folded: margin kappa of scores/d (= kappa*sqrt(d) of scores/sqrt(d))"
        )
        ax.set_title(label, fontsize=9)
    fig.suptitle(
        f"Condition (3) of Theorem 7.1: |D|={n_dormant}, |C|={n_copy}, {dimension_label(d_offset)}",
        fontsize=10,
    )
    fig.legend(
        handles=[
            Patch(facecolor=cmap(1.0), edgecolor="black", lw=0.5, label="(3) holds"),
            Patch(facecolor=cmap(0.0), edgecolor="black", lw=0.5, label="(3) fails"),
            Line2D(
                [],
                [],
                ls="",
                marker="$s$",
                color="black",
                label="measured: sink cheaper (d: diagonal cheaper)",
            ),
        ],
        loc="outside lower center",
        ncol=3,
        frameon=False,
        fontsize=9,
    )
    return fig


def plot_condition3(
    grid: Sequence[Mapping[str, Any]],
    out_png: str | os.PathLike[str],
    n_dormant: int = 5,
    n_copy: int = 5,
    d_offset: int = FRAME_EXTRA,
    measured: Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Where condition (3) of Theorem 7.1 holds, over (T, kappa), for both readings of kappa.

    ``grid``: rows of :func:`.condition3.condition3_grid`, filtered to ``|D| = n_dormant``,
    ``|C| = n_copy`` and ``d = T + |D| + |C| + d_offset`` (default: the measured runs'
    :data:`.backcopy.FRAME_EXTRA`). Holds / fails are the two ends of :data:`BINARY_CMAP`.
    ``measured``: optional backcopy rows;
    each measured (T, kappa) cell is marked "s" if the measured sink total was cheaper (mean over
    seeds), "d" otherwise, using ``cost_total_sqrt_d`` in the literal panel (plain ``1/sqrt(d)``
    scores, margin kappa) and ``cost_total_d`` in the folded one (scores ``/d``, margin kappa).
    """
    save_figure(condition3_figure(grid, n_dormant, n_copy, d_offset, measured), out_png)


def copypaste_costs_figure(table: Sequence[Mapping[str, Any]]) -> Figure:
    """The figure of :func:`plot_copypaste_costs` (not yet written)."""
    fig = new_figure(11.0, 5.4)
    ax, ax_b = fig.subplots(1, 2)
    for pattern in ("sink", "diagonal"):
        rows = sorted(
            [r for r in table if r["pattern"] == pattern], key=lambda r: r["reff_over_delta2"]
        )
        if not rows:
            continue
        c = COLORS[pattern]
        x = np.array([r["reff_over_delta2"] for r in rows])
        y = np.array([r["cost_total"] for r in rows])
        pooled, within = copypaste_slopes(rows, pattern)
        slope_of = dict(within)
        for k, n in enumerate(sorted({r["n"] for r in rows})):
            sel = [i for i, r in enumerate(rows) if r["n"] == n]
            slope = f" (slope {slope_of[int(n)]:.3f})" if int(n) in slope_of else ""
            ax.plot(
                x[sel],
                y[sel],
                color=c,
                marker="osD^v<>"[k % 7],
                ls="-",
                lw=0.8,
                label=f"{pattern}, {n} dormant tokens/group{slope}",
            )
        if np.isfinite(pooled):
            # no line: a legend entry stating the slope pooled over the whole sweep
            ax.plot([], [], ls="", label=f"{pattern}: pooled slope {pooled:.3f}")
        lo = np.array([r["lower_bound"] for r in rows])
        hi = np.array([r["upper_bound"] for r in rows])
        xd = x * _DODGE[pattern]
        ax_b.vlines(xd, lo, hi, color=c, lw=5, label=f"{pattern}: bounds [L, U] of Thm D.1")
        ax_b.plot(
            xd,
            y,
            color="black",
            markerfacecolor=c,
            marker="o",
            ls="",
            label=f"{pattern}: measured cost",
        )
    for a in (ax, ax_b):
        a.set_xscale("log")
        a.set_xlabel("r_eff(Sigma_D) / delta^2")
        a.grid(True, which="both", alpha=0.3)
        _legend_below(a, ncol=2)
    ax.set_ylabel("total cost")
    ax_b.set_yscale("log")
    ax_b.set_ylabel("cost (log scale)")
    ax_b.set_title(
        "measured cost within Theorem D.1's bounds (sink left, diagonal right)", fontsize=9
    )
    ax.set_title(
        f"generic copy-paste, {copypaste_setting(table)}\nlog-log slopes of the cost in the legend",
        fontsize=9,
    )
    return fig


def _values(table: Sequence[Mapping[str, Any]], key: str) -> str:
    """``key``'s value in the runs (``a`` or ``{a, b}`` when they differ; ``?`` if absent)."""
    values = sorted({r[key] for r in table if r.get(key) is not None})
    if not values:
        return "?"
    text = [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    return text[0] if len(text) == 1 else "{" + ", ".join(text) + "}"


def copypaste_setting(table: Sequence[Mapping[str, Any]]) -> str:
    """``C=.., d=.., T=.., kappa=..`` of the copy-paste runs, read from the runs' rows (so the
    figure states the config's values, not the defaults)."""
    return ", ".join(f"{key}={_values(table, key)}" for key in ("C", "d", "T", "kappa"))


def plot_copypaste_costs(
    table: Sequence[Mapping[str, Any]], out_png: str | os.PathLike[str]
) -> None:
    """Figure 3 right: cost vs r_eff(Sigma_D)/delta^2 with the Theorem D.1 bounds per point.

    The two patterns' bound bars are dodged sideways (sink left, diagonal right) so that they
    never overlap at a shared x value.
    """
    save_figure(copypaste_costs_figure(table), out_png)


def toy_figure(table: Sequence[Mapping[str, Any]]) -> Figure:
    """The figure of :func:`plot_toy` (not yet written)."""
    fig = new_figure(6.0, 5.2)
    ax = fig.subplots()
    t = np.array([float(r["T"]) for r in table])
    for pattern in ("sink", "diagonal"):
        key = "sink" if pattern == "sink" else "diag"
        ax.plot(
            t,
            [float(r[f"{key}_nuclear_formula"]) for r in table],
            color=COLORS[pattern],
            label=f"{pattern}: closed form",
        )
        ax.scatter(
            t,
            [float(r[f"{key}_nuclear"]) for r in table],
            color=COLORS[pattern],
            edgecolor="black",
            zorder=3,
            label=f"{pattern}: sum of singular values",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("context length T")
    ax.set_ylabel(r"$\|W_{QK}\|_*$")
    ax.set_title(
        f"Nuclear-norm toy (X = I, kappa = {float(table[0]['kappa']):g})\n"
        f"largest |diagonal / sink / sqrt(T+1) - 1| = {toy_ratio_deviation(table):.2g}",
        fontsize=10,
    )
    _legend_below(ax, ncol=2)
    return fig


def plot_toy(table: Sequence[Mapping[str, Any]], out_png: str | os.PathLike[str]) -> None:
    """§7's nuclear-norm toy on ``X = I_{T+1}``: ``||W_QK||_*`` of the sink (``kappa 1 e_1^T``,
    ``kappa sqrt(T+1)``) and of the diagonal (``kappa I``, ``kappa (T+1)``) vs T, log-log; points
    are the numerical singular-value sums, lines the closed forms."""
    save_figure(toy_figure(table), out_png)


# --- the figures of each rule -----------------------------------------------------------------
# (named in sinkscope.costs.names, as their files: ``sinkscope.paths.Paths.cost_figure``)


def toy_figures(table: Sequence[Mapping[str, Any]]) -> dict[str, Draw]:
    """The figure of rule ``cost_toy`` (:data:`~sinkscope.costs.names.TOY_FIGURES`): the
    nuclear-norm toy (:func:`plot_toy`)."""
    (toy,) = TOY_FIGURES
    return {toy: lambda out: plot_toy(table, out)}


def backcopy_figures(
    runs: Sequence[Mapping[str, Any]],
    grid: Sequence[Mapping[str, Any]],
    panel: Mapping[str, int],
) -> dict[str, Draw]:
    """The figures of rule ``summarize_backcopy`` (:data:`~sinkscope.costs.names.BACKCOPY_FIGURES`):
    Figure 3 left from the back-copy ``runs``, and condition (3) of Theorem 7.1 over ``grid``
    (:func:`.condition3.condition3_grid`) in the ``panel`` of :func:`.condition3.condition3_panel`,
    the measured runs marked."""
    costs, condition3 = BACKCOPY_FIGURES
    return {
        costs: lambda out: plot_backcopy_costs(runs, out, "backcopy task (Theorem 7.1)"),
        condition3: lambda out: plot_condition3(grid, out, **panel, measured=runs),
    }


def copypaste_figures(runs: Sequence[Mapping[str, Any]]) -> dict[str, Draw]:
    """The figure of rule ``summarize_copypaste``
    (:data:`~sinkscope.costs.names.COPYPASTE_FIGURES`): Figure 3 right
    (:func:`plot_copypaste_costs`)."""
    (costs,) = COPYPASTE_FIGURES
    return {costs: lambda out: plot_copypaste_costs(runs, out)}
