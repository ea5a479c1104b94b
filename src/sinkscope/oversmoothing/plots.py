"""Figures of the oversmoothing analysis (:mod:`sinkscope.oversmoothing`; paper Figs. 2, 4-11).

Every function takes tables of :func:`sinkscope.oversmoothing.analysis.analyze_file` (one pair)
or :func:`sinkscope.oversmoothing.summary.summarize` (several pairs; its pooled ``"all"`` rows are
never plotted) and lays the pairs out as panels. Which head update each figure shows follows
App. E.1:

* Fig. 2 left / 5 (:func:`plot_approximation`) and Fig. 7 (:func:`plot_head_errors`): the head
  update as it is, ``X + W Z`` (the quantity of the theory);
* Fig. 2 right / 6, 8, 9, 10, 11: the update rescaled by ``s_l`` of eq. (11) ("effect after the
  skip connection"), labelled ``X + s_l WZ ...``; Figs. 8-9 colour heads by the conditions
  evaluated for that rescaled map (``condition_s``) and leave out the sink heads (``is_sink``),
  as the paper does (basis :data:`sinkscope.oversmoothing.summary.CONDITION_BASIS`).

The numbers a figure prints (Fig. 2 left: the approximation's offset; Fig. 2 right: the
differences of the head means; Figs. 8-9: condition counts and sign agreement) come from the
functions of :mod:`sinkscope.oversmoothing.summary` that the claims call, and the plotting functions
return them (keyed by ``(model, dataset)``) so that tests can compare them with the claim rows.

Figures are built with :func:`sinkscope.plotting.new_figure` and written with
:func:`sinkscope.plotting.save_figure` (atomic, deterministic PNG); the panel layout is in
:mod:`sinkscope.oversmoothing.panel_layout`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import numpy as np
import polars as pl
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from sinkscope.heads.classify import DEFAULT_THRESHOLDS, TOLERANCE, HeadClassThresholds
from sinkscope.labels import POOLED
from sinkscope.oversmoothing import panel_layout
from sinkscope.oversmoothing.panel_layout import MAX_INCHES, PANEL_FONTSIZE
from sinkscope.oversmoothing.summary import (
    UNIFORMITY_THRESHOLD,
    approximation_offsets,
    component_means,
    condition_summary,
)
from sinkscope.plotting import CLASS_COLORS, Draw, fitted_legend, new_figure, save_figure

__all__ = [
    "CONDITION_COLORS",
    "figures",
    "plot_approximation",
    "plot_components",
    "plot_condition_deltas",
    "plot_deviating_heads",
    "plot_head_errors",
    "plot_layers",
    "plot_uniformity",
    "select_deviating_heads",
]

#: Theorem 5.1's conditions: (i) red, (ii) blue, neither grey (paper Figs. 8-9).
CONDITION_COLORS: dict[str, str] = {"i": "#d62728", "ii": "#1f77b4", "neither": "#9e9e9e"}
CONDITION_LABELS: dict[str, str] = {
    "i": r"(i) $\beta\,$tr$(BW)>0$",
    "ii": r"(ii) $\beta\,$tr$(BW)+$tr$(BW^\top W)<0$",
    "neither": "neither",
}
#: ρ of the four token matrices of Fig. 2 right (head update rescaled by s_l), with colours.
COMPONENTS: dict[str, tuple[str, str]] = {
    "rho_x": ("$X$", "#000000"),
    "rho_xwz_s": ("$X+s_lWZ$", "#ff7f0e"),
    "rho_xwza_s": (r"$X+s_lWZA^\top$", "#2ca02c"),
    "rho_xwzau_s": (r"$X+s_lWZA_u^\top$", "#9467bd"),
}
#: Fig. 10: head type by the head classification's flags (paper: 0.5 mass thresholds; here the
#: project's ``is_sink`` / ``is_diagonal``, thresholds ``head_classes``): sink yellow,
#: diagonal (self-attention) green, neither dark grey.
PATTERN_COLORS: dict[str, str] = {
    "sink": CLASS_COLORS["sink"],
    "diagonal": CLASS_COLORS["diagonal"],
    "neither": "#444444",
}
#: Fig. 10: linear range of the symlog y axis (|relative change| below it is drawn linearly).
SYMLOG_LINTHRESH = 0.1


def sink_rule(frame: pl.DataFrame, thresholds: HeadClassThresholds | None = None) -> str:
    """The ``is_sink`` rule as a legend text, after checking that the table's ``is_sink`` (and
    ``is_diagonal``, if present) follow ``thresholds`` (default: the paper's, the config
    schema's ``head_classes``)."""
    th = thresholds or DEFAULT_THRESHOLDS
    checks = [("is_sink", "bos_mass", th.sink)]
    if "is_diagonal" in frame.columns and "diagonal_mass" in frame.columns:
        checks.append(("is_diagonal", "diagonal_mass", th.diagonal))
    for flag, mass, threshold in checks:
        if mass not in frame.columns:
            continue
        expected = frame[mass].to_numpy() >= threshold - TOLERANCE
        if not np.array_equal(expected, frame[flag].to_numpy()):
            raise ValueError(
                f"the table's {flag} does not follow {mass} >= {threshold:g}: pass the "
                "head_classes thresholds it was classified with"
            )
    return f"is_sink: BOS mass >= {th.sink:g}"


# --------------------------------------------------------------------------- Fig. 2 left / 5


def plot_approximation(
    per_head: pl.DataFrame, out_png: str | os.PathLike[str]
) -> dict[tuple[str, str], dict]:
    """Figs. 2 left / 5: mean over heads of the empirical ``rho`` (solid) and Theorem 5.1's
    approximation (dashed) against the context length, for ``X`` and ``X + WZ`` (head update
    not rescaled); one row per dataset, one colour per model. Each panel's second title line
    gives, per model, the largest gap between the two curves relative to the empirical curve's
    range across ``T'`` (:func:`sinkscope.oversmoothing.summary.approximation_offsets`, the value
    of the claim ``oversmoothing.approximation_mean``). Returns the offsets row per
    ``(model, dataset)``.
    """
    panel_layout.check(per_head, ["rho_x", "rhohat_x", "rho_xwz", "rhohat_xwz"], "per-head table")
    frame = per_head.filter(pl.col("dataset") != POOLED)
    means = component_means(frame)
    offsets = {
        (r["model"], r["dataset"]): r for r in approximation_offsets(means).iter_rows(named=True)
    }
    datasets = sorted(set(means["dataset"].to_list()))
    models = sorted(set(means["model"].to_list()))
    colors = dict(zip(models, _palette(len(models)), strict=True))
    # one title line per model: rows grow with the models, within MAX_INCHES
    row_height = min(3.7 + 0.17 * max(0, len(models) - 2), (MAX_INCHES - 1.6) / len(datasets))
    fig = new_figure(11.0, row_height * len(datasets) + 1.5)
    axes = np.atleast_2d(fig.subplots(len(datasets), 2, squeeze=False))
    for row, dataset in enumerate(datasets):
        for col, (c, name) in enumerate((("x", "$X$"), ("xwz", "$X+WZ$ (not rescaled)"))):
            ax = axes[row, col]
            notes = []
            for model in models:
                part = panel_layout.pair(means, model, dataset)
                if part.is_empty():
                    continue
                t = part["context_length"].to_numpy()
                ax.plot(t, part[f"mean_rho_{c}"], "-o", color=colors[model], ms=3, label=model)
                ax.plot(t, part[f"mean_rhohat_{c}"], "--", color=colors[model], lw=1.5)
                off = offsets[(model, dataset)]
                rel = off[f"rel_offset_{c}"]
                ratio = "n/a" if rel is None else f"{rel:.2g}"
                notes.append(
                    f"{model}: gap {off[f'signed_offset_{c}']:+.2g} = {ratio} x range "
                    f"{off[f'range_{c}']:.2g}"
                )
            panel_layout.length_axis(ax, means["context_length"].to_list())
            ax.set_ylabel("avg. cosine similarity\n(mean over heads)")
            n = int(_pair_rows(frame, dataset)["n_sequences"].max())
            ax.set_title(f"{name} · {dataset} (N={n})\n" + "\n".join(notes), fontsize=9)
    handles = [Line2D([], [], color=colors[m], marker="o", ms=3, label=m) for m in models]
    handles += [
        Line2D([], [], color="k", ls="-", label="empirical"),
        Line2D([], [], color="k", ls="--", label="approximation (eqs. 1-2)"),
    ]
    fitted_legend(fig, handles, ncols=5, loc="outside lower center", frameon=False)
    fig.suptitle(
        "Empirical avg. cosine similarity (solid) vs Theorem 5.1's approximation (dashed); "
        "head update not rescaled\ngap: largest (empirical - approximation) over T'; range: "
        "max - min of the empirical curve over T'"
    )
    save_figure(fig, out_png)
    return offsets


def _pair_rows(frame: pl.DataFrame, dataset: str) -> pl.DataFrame:
    return frame.filter(pl.col("dataset") == dataset)


def _palette(n: int) -> list[str]:
    base = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    return [base[i % len(base)] for i in range(n)]


# --------------------------------------------------------------------------- Fig. 2 right / 6


def plot_components(
    per_head: pl.DataFrame,
    out_png: str | os.PathLike[str],
    uniformity_threshold: float = UNIFORMITY_THRESHOLD,
) -> dict[tuple[str, str], dict]:
    """Figs. 2 right / 6: ``rho`` of ``X, X + s_l WZ, X + s_l WZA^T, X + s_l WZA_u^T`` (head update
    rescaled by ``s_l``, eq. 11) against the context length, averaged over all heads (left) and
    over heads with uniformity above ``uniformity_threshold`` (right); one row per pair. The
    left panel's title gives ``rho(X) - rho(X + s_l WZ)`` at the largest ``T'`` (claim
    ``oversmoothing.w_decreases``). Returns the head means at the largest ``T'`` per pair
    (:func:`sinkscope.oversmoothing.summary.component_means`)."""
    panel_layout.check(per_head, [*COMPONENTS, "uniformity"], "per-head table")
    pairs = panel_layout.pairs(per_head)
    layout = panel_layout.pair_grid(pairs, 2, (5.5, 3.4), (2.3, 2.4))
    fig = layout.fig
    shown: dict[tuple[str, str], dict] = {}
    for model, dataset in pairs:
        frame = panel_layout.pair(per_head, model, dataset)
        for ax, dense in zip(layout.panels[(model, dataset)], (False, True), strict=True):
            part = frame.filter(pl.col("uniformity") > uniformity_threshold) if dense else frame
            means = component_means(part, ["context_length"]) if part.height else None
            if means is not None:
                for column, (label, color) in COMPONENTS.items():
                    ax.plot(
                        means["context_length"],
                        means[f"mean_{column}"],
                        "-o",
                        ms=3,
                        color=color,
                        label=label,
                    )
            panel_layout.length_axis(ax, frame["context_length"].to_list())
            panel_layout.axis_labels(layout, ax, "context length $T'$", "avg. cosine similarity")
            n_heads = int(means["n_heads"][-1]) if means is not None else 0
            title = f"{panel_layout.label(frame, model, dataset, with_t=False)}\n"
            if means is not None and not dense:
                last = means.row(-1, named=True)
                shown[(model, dataset)] = last
                drop = last["mean_rho_x"] - last["mean_rho_xwz_s"]
                title += (
                    f"all {n_heads} heads, T'={last['context_length']}\n"
                    f"$\\rho(X)-\\rho(X+s_lWZ)$ = {drop:+.4f}"
                )
            elif dense:
                title += f"{n_heads} heads with u > {uniformity_threshold:g} (largest T')"
            else:
                title += "all heads: none"
            ax.set_title(title, fontsize=PANEL_FONTSIZE)
            if means is None:
                ax.text(
                    0.5,
                    0.5,
                    "no head above\nthe threshold",
                    ha="center",
                    va="center",
                    fontsize=PANEL_FONTSIZE,
                    transform=ax.transAxes,
                )
    handles = [
        Line2D([], [], color=c, marker="o", ms=3, label=lab) for lab, c in COMPONENTS.values()
    ]
    fitted_legend(
        fig,
        handles,
        loc="outside lower center",
        frameon=False,
        title="head update rescaled by $s_l$ (eq. 11)",
    )
    fig.suptitle(
        "Average cosine similarity of the attention step's components, per model and dataset\n"
        f"(per pair: all heads | heads with uniformity u > {uniformity_threshold:g})"
    )
    save_figure(fig, out_png)
    return shown


# --------------------------------------------------------------------------- Fig. 4


def plot_layers(per_layer: pl.DataFrame, out_png: str | os.PathLike[str]) -> None:
    """Fig. 4: per layer, ``rho`` before the layer (at ``l``) and after adding the full attention
    update (at ``l + 0.5``), one line per context length; one panel per pair."""
    panel_layout.check(
        per_layer, ["rho_before", "rho_after", "layer", "context_length"], "per-layer table"
    )
    pairs = panel_layout.pairs(per_layer)
    layout = panel_layout.pair_grid(pairs, 1, (7.0, 3.6), (3.0, 2.4))
    fig = layout.fig
    lengths = sorted(set(per_layer["context_length"].to_list()))
    colors = dict(zip(lengths, _palette(len(lengths)), strict=True))
    for model, dataset in pairs:
        (ax,) = layout.panels[(model, dataset)]
        frame = panel_layout.pair(per_layer, model, dataset).sort("layer")
        for t in lengths:
            part = frame.filter(pl.col("context_length") == t)
            if part.is_empty():
                continue
            layers = part["layer"].to_numpy()
            xs = np.column_stack([layers, layers + 0.5]).ravel()
            ys = np.column_stack([part["rho_before"], part["rho_after"]]).ravel()
            ax.plot(xs, ys, "-", color=colors[t], lw=1.2, label=f"T'={t}")
            ax.plot(layers, part["rho_before"], "o", color=colors[t], ms=4)
            ax.plot(layers + 0.5, part["rho_after"], "^", color=colors[t], ms=4)
        ax.axhline(0.0, color="k", lw=0.6)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        panel_layout.axis_labels(layout, ax, "layer", "avg. cosine similarity")
        ax.set_title(
            panel_layout.label(frame, model, dataset, with_t=False), fontsize=PANEL_FONTSIZE + 1
        )
    handles = [Line2D([], [], color=colors[t], lw=1.2, label=f"T'={t}") for t in lengths]
    handles += [
        Line2D([], [], color="k", ls="", marker="o", ms=5, label=r"entering the layer: $\rho(X)$"),
        Line2D(
            [],
            [],
            color="k",
            ls="",
            marker="^",
            ms=5,
            label=r"after adding the attention update: $\rho(X+U)$ (at layer + 0.5)",
        ),
    ]
    fitted_legend(fig, handles, ncols=3, loc="outside lower center", frameon=False)
    fig.suptitle("Average cosine similarity of the residual stream across layers")
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- Fig. 7


#: Fig. 7's markers: filled translucent dots for X, hollow rings for X+WZ (coinciding points of
#: one head stay distinguishable).
_FIG7_MARKERS: dict[str, dict[str, object]] = {
    "x": {"ls": "", "marker": "o", "ms": 3.0, "color": "#1f77b4", "alpha": 0.75, "mew": 0.0},
    "xwz": {"ls": "", "marker": "o", "ms": 6.0, "color": "#ff7f0e", "mfc": "none", "mew": 1.0},
}


#: Fig. 7's log axis: errors below this (exact zeros included) are drawn at it
FIG7_FLOOR = 1e-9


def plot_head_errors(per_head: pl.DataFrame, out_png: str | os.PathLike[str]) -> None:
    """Fig. 7: ``|rho - rho_hat|`` per head at the largest context length, for ``X`` (blue) and
    ``X + WZ`` (orange); heads ordered from the first to the last layer; one row per pair."""
    panel_layout.check(per_head, ["abs_err_x", "abs_err_xwz"], "per-head table")
    pairs = panel_layout.pairs(per_head)
    layout = panel_layout.pair_grid(pairs, 1, (12.0, 3.0), (3.5, 2.4))
    fig = layout.fig
    bound_drawn = False
    for model, dataset in pairs:
        (ax,) = layout.panels[(model, dataset)]
        frame = panel_layout.largest(panel_layout.pair(per_head, model, dataset)).sort(
            "layer", "head"
        )
        index = panel_layout.head_index(frame)
        # X: small filled dots; X+WZ: larger hollow rings around them, so a head whose two
        # errors coincide shows a dot inside a ring and no marker hides the other
        # log scale: X's errors are float rounding (~1e-8), X+WZ's up to ~0.1; a linear axis
        # drew the former on the axis line
        ax.plot(index, frame["abs_err_x"].clip(FIG7_FLOOR), **_FIG7_MARKERS["x"], label="$X$")
        ax.plot(
            index, frame["abs_err_xwz"].clip(FIG7_FLOOR), **_FIG7_MARKERS["xwz"], label="$X+WZ$"
        )
        top = float(max(frame["abs_err_x"].max(), frame["abs_err_xwz"].max()))
        if top > 0.05:
            ax.axhline(0.1, color="k", ls=":", lw=0.8)
            bound_drawn = True
        panel_layout.layer_ticks(ax, frame, layout.panel_width)
        panel_layout.axis_labels(
            layout,
            ax,
            panel_layout.LAYER_AXIS_LABEL,
            rf"$|\rho - \hat\rho|$ (log; below {FIG7_FLOOR:.0e} at {FIG7_FLOOR:.0e})",
        )
        ax.set_yscale("log")
        ax.set_ylim(bottom=FIG7_FLOOR / 2)
        ax.set_title(
            f"{panel_layout.label(frame, model, dataset)}\n"
            f"max {frame['abs_err_x'].max():.2g} ($X$), "
            f"{frame['abs_err_xwz'].max():.2g} ($X+WZ$)",
            fontsize=PANEL_FONTSIZE + 1,
        )
    t_max = int(per_head.filter(pl.col("dataset") != POOLED)["context_length"].max())
    handles = [
        Line2D([], [], **_FIG7_MARKERS["x"], label="$X$"),
        Line2D([], [], **_FIG7_MARKERS["xwz"], label="$X+WZ$"),
    ]
    if bound_drawn:
        handles.append(Line2D([], [], color="k", ls=":", lw=0.8, label="0.1 (the paper's bound)"))
    fitted_legend(fig, handles, loc="outside lower center", frameon=False)
    fig.suptitle(
        "Per-head error of Theorem 5.1's approximation (head update not rescaled)\n"
        f"at the largest analysed context length T'={t_max} (the paper's Fig. 7: T'=512)"
    )
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- Figs. 8 and 9


def plot_condition_deltas(
    per_head: pl.DataFrame,
    out_png: str | os.PathLike[str],
    which: str = "attention",
    thresholds: HeadClassThresholds | None = None,
) -> dict[tuple[str, str], dict]:
    """Fig. 8 (``which="attention"``: ``rho(X+WZA^T) - rho(X+WZ)``) or Fig. 9 (``"uniform"``:
    ``rho(X+WZA_u^T) - rho(X+WZA^T)``) per non-sink head at the largest context length, head
    update rescaled by ``s_l``, coloured by Theorem 5.1's condition for the rescaled map.

    Basis :data:`sinkscope.oversmoothing.summary.CONDITION_BASIS`; sink heads are ``is_sink``
    (``thresholds``, default the paper's 0.40, checked against the table's ``bos_mass``). Each
    panel's title gives the numbers of
    :func:`sinkscope.oversmoothing.summary.condition_summary`: heads per condition (claims
    ``condition_i_half``, ``condition_ii_few``) and the share of heads with a prediction whose
    sign agrees in this figure and in both figures (claim ``predicted_signs``). Returns that
    summary row per ``(model, dataset)``. The legend lists only the conditions that occur in
    some panel."""
    if which not in ("attention", "uniform"):
        raise ValueError(f"which must be 'attention' or 'uniform', got {which!r}")
    column = "delta_attn_s" if which == "attention" else "delta_unif_s"
    own = "agree_attn_s" if which == "attention" else "agree_unif_s"
    figure_name = "Fig. 8" if which == "attention" else "Fig. 9"
    panel_layout.check(per_head, [column, "condition_s", "is_sink"], "per-head table")
    rule = sink_rule(per_head, thresholds)
    pairs = panel_layout.pairs(per_head)
    layout = panel_layout.pair_grid(pairs, 1, (12.0, 3.4), (3.5, 2.6), reserve=(0.4, 2.0))
    fig = layout.fig
    shown: dict[tuple[str, str], dict] = {}
    present: set[str] = set()
    for model, dataset in pairs:
        (ax,) = layout.panels[(model, dataset)]
        full = panel_layout.largest(panel_layout.pair(per_head, model, dataset)).sort(
            "layer", "head"
        )
        stats = condition_summary(full).row(0, named=True)
        shown[(model, dataset)] = stats
        frame = full.filter(~pl.col("is_sink"))
        index = panel_layout.head_index(full)[~full["is_sink"].to_numpy()]
        conditions = frame["condition_s"].to_numpy()
        values = frame[column].to_numpy()
        for cond, color in CONDITION_COLORS.items():
            mask = conditions == cond
            if mask.any():
                present.add(cond)
                ax.bar(index[mask], values[mask], width=0.9, color=color)
        ax.axhline(0.0, color="k", lw=0.6)
        panel_layout.layer_ticks(ax, full, layout.panel_width)
        panel_layout.axis_labels(
            layout, ax, panel_layout.LAYER_AXIS_LABEL, r"$\Delta$ avg. cos. sim."
        )
        n_non_sink = stats["n_non_sink"]
        counts = ", ".join(
            f"({c}) {stats[f'n_cond_{c}_s_non_sink']} ({_pct(stats[f'frac_cond_{c}_s_non_sink'])})"
            for c in ("i", "ii")
        )
        agreement = (
            f"predicted sign agrees ({stats['n_predicted_s']} heads with (i)/(ii)):\n"
            f"{figure_name} {_pct(stats[own])}, Figs. 8 and 9 both {_pct(stats['agree_both_s'])}"
        )
        ax.set_title(
            f"{panel_layout.label(full, model, dataset)}\n{n_non_sink} non-sink heads shown, "
            f"{full.height - n_non_sink} sink heads left out\n"
            f"{counts}, neither {stats['n_cond_neither_s_non_sink']}\n{agreement}",
            fontsize=PANEL_FONTSIZE,
        )
    handles = [
        Patch(color=CONDITION_COLORS[k], label=CONDITION_LABELS[k])
        for k in CONDITION_COLORS
        if k in present
    ]
    absent = [f"({k})" for k in ("i", "ii") if k not in present]
    title = r"Theorem 5.1 condition for the map $s_lW$"
    if absent:
        title += f" (no non-sink head satisfies {' or '.join(absent)})"
    fitted_legend(fig, handles, loc="outside lower center", frameon=False, title=title)
    quantity = (
        r"$\rho(X+s_lWZA^\top)-\rho(X+s_lWZ)$"
        if which == "attention"
        else r"$\rho(X+s_lWZA_u^\top)-\rho(X+s_lWZA^\top)$"
    )
    fig.suptitle(
        f"{quantity} per non-sink head at the largest $T'$\n(sink heads, {rule}, left out; "
        "head update rescaled by $s_l$)"
    )
    save_figure(fig, out_png)
    return shown


def _pct(x: float | None) -> str:
    """Percent with one decimal, as the claims table prints it."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


# --------------------------------------------------------------------------- Fig. 10


def _pattern(frame: pl.DataFrame) -> np.ndarray:
    """Sink (``is_sink``) / diagonal (``is_diagonal`` and not ``is_sink``) / neither."""
    sink = frame["is_sink"].to_numpy()
    diagonal = frame["is_diagonal"].to_numpy() & ~sink
    return np.select([sink, diagonal], ["sink", "diagonal"], default="neither")


def plot_uniformity(
    per_head: pl.DataFrame,
    out_png: str | os.PathLike[str],
    thresholds: HeadClassThresholds | None = None,
) -> None:
    """Fig. 10: relative change ``(rho(X + s_l WZA^T) - rho(X)) / |rho(X)|`` against the head's
    uniformity at the largest context length, heads coloured sink (``is_sink``) / diagonal
    (``is_diagonal``, not sink) / neither (the paper: 0.5 mass thresholds; here the project's
    ``head_classes`` thresholds, default 0.40, named in the legend); black: mean within
    uniformity bins of width 0.1. Symlog y axis, linear within +-:data:`SYMLOG_LINTHRESH`; the
    y limits leave a margin around every point."""
    panel_layout.check(
        per_head,
        ["rel_change_s", "uniformity", "bos_mass", "diagonal_mass", "is_sink", "is_diagonal"],
        "per-head table",
    )
    th = thresholds or DEFAULT_THRESHOLDS
    rule = sink_rule(per_head, th)
    names = {
        "sink": f"sink ({rule})",
        "diagonal": f"diagonal (is_diagonal: diagonal mass >= {th.diagonal:g}; not sink)",
        "neither": "neither",
    }
    pairs = panel_layout.pairs(per_head)
    layout = panel_layout.pair_grid(pairs, 1, (6.2, 4.0), (3.5, 2.8), reserve=(0.6, 2.0))
    fig = layout.fig
    edges = np.linspace(0.0, 1.0, 11)
    for model, dataset in pairs:
        (ax,) = layout.panels[(model, dataset)]
        frame = panel_layout.largest(panel_layout.pair(per_head, model, dataset))
        u = frame["uniformity"].to_numpy()
        change = frame["rel_change_s"].to_numpy()
        kinds = _pattern(frame)
        counts = []
        for kind, color in PATTERN_COLORS.items():
            mask = kinds == kind
            counts.append(f"{kind} {int(mask.sum())}")
            ax.scatter(u[mask], change[mask], s=14, color=color, alpha=0.85, edgecolors="none")
        bins = np.clip(np.digitize(u, edges) - 1, 0, len(edges) - 2)
        centres, means = [], []
        for b in range(len(edges) - 1):
            if (bins == b).any():
                centres.append((edges[b] + edges[b + 1]) / 2)
                means.append(change[bins == b].mean())
        ax.plot(centres, means, "-o", color="k", ms=3)
        ax.axhline(0.0, color="k", lw=0.5, ls=":")
        # a few heads of early layers, where rho(X) is small, change rho several-fold
        ax.set_yscale("symlog", linthresh=SYMLOG_LINTHRESH, linscale=1.5)
        finite = change[np.isfinite(change)]
        if finite.size:
            transform = ax.yaxis.get_transform()
            lo, hi = transform.transform(np.array([finite.min(), finite.max()]))
            pad = 0.08 * max(hi - lo, 1.0)
            ax.set_ylim(*transform.inverted().transform(np.array([lo - pad, hi + pad])))
        ax.set_xlim(-0.03, 1.03)  # u in [0, 1]: no point on the frame
        panel_layout.axis_labels(
            layout,
            ax,
            "uniformity coefficient u (eq. 12)",
            r"$(\rho(X+s_lWZA^\top)-\rho(X))\,/\,|\rho(X)|$"
            f"\n(symlog, linear within ±{SYMLOG_LINTHRESH:g})",
        )
        ax.set_title(
            f"{panel_layout.label(frame, model, dataset)}\n{', '.join(counts)} heads",
            fontsize=PANEL_FONTSIZE + 1,
        )
    handles = [
        Line2D([], [], ls="", marker="o", ms=5, color=PATTERN_COLORS[k], label=names[k])
        for k in PATTERN_COLORS
    ]
    handles.append(
        Line2D([], [], color="k", marker="o", ms=3, label="bin mean (bins of width 0.1)")
    )
    fitted_legend(fig, handles, ncols=2, loc="outside lower center", frameon=False)
    fig.suptitle(
        "Relative change in avg. cosine similarity vs head uniformity\n(head update rescaled by $s_l$)"
    )
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- Fig. 11

#: Fig. 11's panels (inches, width x height), the least they shrink to when the blocks of many
#: pairs share the figure, and the inches kept for the suptitle and the legend (width, height).
FIG11_PANEL = (3.6, 3.1)
FIG11_MIN_PANEL = (2.4, 2.4)
FIG11_RESERVE = (0.4, 2.0)
#: Fig. 11's least width in inches: with one or two panels (a pair with few or no deviating
#: heads) they widen to it, so that the title and the legend (four components and the sink
#: rule) keep a readable width whatever the number of panels.
FIG11_MIN_WIDTH = 7.2


def select_deviating_heads(per_head: pl.DataFrame, n: int = 4) -> pl.DataFrame:
    """Heads that deviate from "denser attention smooths more" (Fig. 11), per pair.

    Rule: at the largest context length, among non-sink heads, a head deviates if uniform
    attention mixes no more than its learned attention (``rho(X+WZA_u^T) <= rho(X+WZA^T)``) or
    than no attention (``rho(X+WZA_u^T) < rho(X+WZ)``), all with the rescaled update. Deviation
    score: ``min(rho(X+WZA_u^T) - rho(X+WZA^T), rho(X+WZA_u^T) - rho(X+WZ))``; the ``n`` most
    negative scores are kept (at most one head per layer, so the panels show different layers).
    Returns ``model, dataset, layer, head, score, uniformity_mean`` (``uniformity`` averaged over
    context lengths, as in the paper's panel titles).
    """
    largest = per_head.filter(
        (pl.col("dataset") != POOLED)
        & (pl.col("context_length") == pl.col("context_length").max().over("model", "dataset"))
        & ~pl.col("is_sink")
    ).with_columns(
        score=pl.min_horizontal(
            pl.col("rho_xwzau_s") - pl.col("rho_xwza_s"),
            pl.col("rho_xwzau_s") - pl.col("rho_xwz_s"),
        )
    )
    candidates = largest.filter(pl.col("score") <= 0).sort("score")
    picked = (
        candidates.group_by("model", "dataset", "layer", maintain_order=True)
        .first()
        .sort("score")
        .group_by("model", "dataset", maintain_order=True)
        .head(n)
        .select("model", "dataset", "layer", "head", "score")
    )
    mean_u = per_head.group_by("model", "dataset", "layer", "head").agg(
        pl.col("uniformity").mean().alias("uniformity_mean")
    )
    return picked.join(mean_u, on=["model", "dataset", "layer", "head"], how="left").sort(
        "model", "dataset", "score"
    )


def plot_deviating_heads(
    per_head: pl.DataFrame,
    out_png: str | os.PathLike[str],
    n: int = 4,
    thresholds: HeadClassThresholds | None = None,
) -> None:
    """Fig. 11: ``rho`` of the four components against the context length for the heads chosen
    by :func:`select_deviating_heads` (non-sink heads: ``is_sink`` of the head classification,
    ``thresholds`` default the paper's 0.40, checked against the table's ``bos_mass`` by
    :func:`sink_rule` and named in the legend's title). One block of panels per pair (up to
    ``n`` heads, most deviating first; fewer per pair when the pairs' panels would not fit within
    :data:`sinkscope.plotting.MAX_FIGURE_PIXELS`); a pair without a deviating head gets one
    panel saying so. The figure is at least :data:`FIG11_MIN_WIDTH` wide and its legend, under
    the panels, takes as many columns as fit (:func:`~sinkscope.plotting.fitted_legend`), so
    that it reads the same with 0, 1 or many panels."""
    panel_layout.check(per_head, [*COMPONENTS, "is_sink", "uniformity"], "per-head table")
    rule = sink_rule(per_head, thresholds)
    pairs = panel_layout.pairs(per_head)
    chosen = select_deviating_heads(per_head, n)
    most = max(
        (chosen.filter((pl.col("model") == m) & (pl.col("dataset") == d)).height for m, d in pairs),
        default=1,
    )
    per_pair = max(1, min(n, most))
    sizes = (FIG11_PANEL, FIG11_MIN_PANEL, FIG11_RESERVE)
    while per_pair > 1:
        layout = panel_layout.pair_grid(pairs, per_pair, *sizes)
        if layout.fits:
            break
        layout.fig.clear()
        per_pair -= 1
    else:
        layout = panel_layout.pair_grid(pairs, per_pair, *sizes)
    fig = layout.fig
    # one or two panels widen to the figure's least width (the legend and title fit it)
    fig.set_figwidth(max(fig.get_figwidth(), FIG11_MIN_WIDTH))
    for model, dataset in pairs:
        frame = panel_layout.pair(per_head, model, dataset)
        heads = chosen.filter((pl.col("model") == model) & (pl.col("dataset") == dataset))
        panels = layout.panels[(model, dataset)]
        if heads.is_empty():
            panels[0].text(
                0.5,
                0.5,
                f"{model} · {dataset}:\nno non-sink head deviates",
                ha="center",
                va="center",
                fontsize=PANEL_FONTSIZE + 1,
                transform=panels[0].transAxes,
            )
            panels[0].set_axis_off()
        for col, ax in enumerate(panels):
            if col >= heads.height:
                if col > 0 or not heads.is_empty():
                    ax.set_visible(False)
                continue
            info = heads.row(col, named=True)
            part = frame.filter(
                (pl.col("layer") == info["layer"]) & (pl.col("head") == info["head"])
            ).sort("context_length")
            for column, (label, color) in COMPONENTS.items():
                ax.plot(part["context_length"], part[column], "-o", ms=3, color=color, label=label)
            panel_layout.length_axis(ax, part["context_length"].to_list())
            panel_layout.axis_labels(layout, ax, "context length $T'$", "avg. cosine similarity")
            ax.set_title(
                f"{model} · {dataset}\nlayer {info['layer']}, head {info['head']}, "
                f"unif. {info['uniformity_mean']:.2f}",
                fontsize=PANEL_FONTSIZE + 1,
            )
    handles = [
        Line2D([], [], color=c, marker="o", ms=3, label=lab) for lab, c in COMPONENTS.values()
    ]
    fitted_legend(
        fig,
        handles,
        loc="outside lower center",
        frameon=False,
        title=r"head update rescaled by $s_l$ (eq. 11)"
        f"\nnon-sink heads only: sink heads ({rule}) are not chosen",
    )
    shown = f"up to {per_pair} per pair" if len(pairs) > 1 else f"up to {per_pair}"
    fig.suptitle(
        "Heads where uniform attention does not smooth more than the learned attention or no "
        f"attention\n(non-sink heads, most deviating first, {shown}; unif.: mean uniformity "
        "over the context lengths)"
    )
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- the figures


def figures(
    tables: Mapping[str, pl.DataFrame],
    uniformity_threshold: float = UNIFORMITY_THRESHOLD,
    thresholds: HeadClassThresholds | None = None,
) -> dict[str, Draw]:
    """The figures of rules ``analyze_oversmoothing`` and ``summarize_oversmoothing``
    (:data:`~sinkscope.oversmoothing.names.FIGURES`, named after the paper's figures).

    ``tables``: the dict of :func:`~sinkscope.oversmoothing.analysis.analyze_file` or
    :func:`~sinkscope.oversmoothing.summary.summarize` (needs ``per_head`` and ``per_layer``);
    ``thresholds``: the head classification's thresholds (config ``head_classes``) that the
    per-head table's ``is_sink`` / ``is_diagonal`` were made with (named in Figs. 8-11).
    """
    per_head, per_layer = tables["per_head"], tables["per_layer"]
    return {
        "fig2_left_approximation": lambda out: plot_approximation(per_head, out),
        "fig2_right_components": lambda out: plot_components(per_head, out, uniformity_threshold),
        "fig4_layer_similarity": lambda out: plot_layers(per_layer, out),
        "fig7_head_errors": lambda out: plot_head_errors(per_head, out),
        "fig8_attention_deltas": lambda out: plot_condition_deltas(
            per_head, out, "attention", thresholds
        ),
        "fig9_uniform_deltas": lambda out: plot_condition_deltas(
            per_head, out, "uniform", thresholds
        ),
        "fig10_uniformity": lambda out: plot_uniformity(per_head, out, thresholds),
        "fig11_deviating_heads": lambda out: plot_deviating_heads(
            per_head, out, thresholds=thresholds
        ),
    }
