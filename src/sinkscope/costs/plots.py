"""Figures of §7 (Figure 3 and condition (3) of Theorem 7.1) from the cost tables.

All figures use :func:`sinkscope.plotting.new_figure` / :func:`sinkscope.plotting.save_figure`
(pyplot-free, deterministic PNGs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sinkscope.costs.backcopy import fit_slopes
from sinkscope.plotting import new_figure, save_figure

__all__ = ["plot_backcopy_costs", "plot_condition3", "plot_copypaste_costs", "plot_toy"]

COLORS = {"sink": "#e6ab02", "diagonal": "#1b9e77"}


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


def plot_backcopy_costs(
    table: Sequence[Mapping[str, Any]], out_png: str | os.PathLike[str], title: str = ""
) -> None:
    """Figure 3 left: total cost vs T (log-log), mean over seeds with min-max bars, fitted slopes.

    Right panel: the query-key part alone, with the certified lower bound of the convex program.
    """
    fig = new_figure(11.0, 4.5)
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
            label=f"{pattern} (slope {slopes[pattern]['slope']:.2f})",
        )
        x, m, lo, hi = _by_x(rows, "T", "cost_qk")
        ax_qk.errorbar(
            x,
            m,
            yerr=[m - lo, hi - m],
            color=c,
            marker="o",
            capsize=3,
            label=f"{pattern} QK (slope {slopes_qk[pattern]['slope']:.2f})",
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
        ax.legend(fontsize=8)
    ax_tot.set_title(f"backcopy, {seeds} seeds (bars: min-max)")
    ax_qk.set_title(
        f"kappa={first.get('kappa', '?')}, scores/{'d' if first.get('score_norm') == 'd' else 'sqrt(d)'}"
    )
    if title:
        fig.suptitle(title)
    save_figure(fig, out_png)


def plot_condition3(
    grid: Sequence[Mapping[str, Any]],
    out_png: str | os.PathLike[str],
    n_dormant: int = 5,
    n_copy: int = 5,
    d_offset: int = 2,
    measured: Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Where condition (3) of Theorem 7.1 holds, over (T, kappa), for both readings of kappa.

    ``grid``: rows of :func:`.backcopy.condition3_grid`, filtered to ``|D| = n_dormant``,
    ``|C| = n_copy`` and ``d = T + |D| + |C| + d_offset``. ``measured``: optional backcopy rows;
    each measured (T, kappa) cell is marked "s" if the measured sink total was cheaper (mean over
    seeds), "d" otherwise, using ``cost_total_sqrt_d`` in the literal panel (plain ``1/sqrt(d)``
    scores, margin kappa) and ``cost_total_d`` in the folded one (scores ``/d``, margin kappa).
    """
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
    fig = new_figure(12.5, 4.8)
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
            cmap="RdYlGn",
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
                    ax.text(Ts.index(T), ks.index(k), mark, ha="center", va="center", fontsize=12)
        label = (
            "kappa = margin of scores/sqrt(d)"
            if reading == "literal"
            else "kappa*sqrt(d): margin kappa of scores/d"
        )
        ax.set_title(
            f"condition (3), {label}; green: holds, red: fails\n"
            f"|D|={n_dormant}, |C|={n_copy}, d=T+|D|+|C|+{d_offset}; "
            "letters: measured cheaper pattern (s = sink)",
            fontsize=9,
        )
    save_figure(fig, out_png)


def plot_copypaste_costs(
    table: Sequence[Mapping[str, Any]], out_png: str | os.PathLike[str]
) -> None:
    """Figure 3 right: cost vs r_eff(Sigma_D)/delta^2 with the Theorem D.1 bounds per point."""
    fig = new_figure(11.0, 4.5)
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
        for k, n in enumerate(sorted({r["n"] for r in rows})):
            sel = [i for i, r in enumerate(rows) if r["n"] == n]
            ax.plot(
                x[sel],
                y[sel],
                color=c,
                marker="osD^v<>"[k % 7],
                ls="-",
                lw=0.8,
                label=f"{pattern}, {n} dormant tokens/group",
            )
        lo = np.array([r["lower_bound"] for r in rows])
        hi = np.array([r["upper_bound"] for r in rows])
        ax_b.vlines(x, lo, hi, color=c, alpha=0.5, lw=4)
        ax_b.plot(
            x, y, color=c, marker="o", ls="", label=f"{pattern}: measured in [L, U] of Thm D.1"
        )
    for a in (ax, ax_b):
        a.set_xscale("log")
        a.set_xlabel("r_eff(Sigma_D) / delta^2")
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    ax.set_ylabel("total cost")
    ax_b.set_yscale("log")
    ax_b.set_ylabel("cost (log) with Theorem D.1 bounds")
    first = table[0] if table else {}
    ax.set_title(
        f"generic copy-paste, C={first.get('C')}, d={first.get('d')}, kappa={first.get('kappa')}",
        fontsize=9,
    )
    save_figure(fig, out_png)


def plot_toy(table: Sequence[Mapping[str, Any]], out_png: str | os.PathLike[str]) -> None:
    """§7's nuclear-norm toy on ``X = I_{T+1}``: ``||W_QK||_*`` of the sink (``kappa 1 e_1^T``,
    ``kappa sqrt(T+1)``) and of the diagonal (``kappa I``, ``kappa (T+1)``) vs T, log-log; points
    are the numerical singular-value sums, lines the closed forms."""
    fig = new_figure(6.0, 4.5)
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
    ax.set_title(f"Nuclear-norm toy (X = I, kappa = {float(table[0]['kappa']):g})")
    ax.legend(fontsize=8)
    save_figure(fig, out_png)
