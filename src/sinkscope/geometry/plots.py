"""Figures of the geometry analyses (:mod:`sinkscope.geometry`), and every rule's
``{figure name: Draw}`` (those of the half-space test are drawn by
:mod:`sinkscope.geometry.halfspace_plots`).

Every function takes one table or a list of tables (as returned by
:func:`sinkscope.geometry.analysis.analyze_file`, or the pooled ones of
:func:`sinkscope.geometry.summary.summarize`), an output path and a title, builds its figure with
:func:`sinkscope.plotting.new_figure` and writes it with :func:`sinkscope.plotting.save_figure`
(atomic, deterministic PNG). Box plots follow the paper's Figures 1 and 12: the box spans the
quartiles, the line is the median and the whiskers reach the absolute minimum and maximum (no
1.5 IQR rule, no fliers).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from sinkscope.geometry.alignment import FIRST_TEXT_POSITION, bos_max_readings
from sinkscope.geometry.figure_parts import (
    _SPACE_LABELS,
    COSINE_YLIM,
    MAX_INCHES,
    PANEL_TITLE_FONTSIZE,
    Tables,
    _box_stats,
    _concat,
    _dataset_label,
    _draw_boxes,
    _fmt,
    _layer_ticks,
    _panel_grid,
    _scope,
)
from sinkscope.geometry.halfspace_plots import plot_halfspace_long_context, plot_halfspace_margins
from sinkscope.geometry.values import (
    HIGH_BOS_MASS,
    LOW_BOS_MASS,
    RANK_RTOL,
    bootstrap_settings,
    bos_mass_relation,
    sink_value_norm_effect,
)
from sinkscope.heads.order import dataset_order as _dataset_order
from sinkscope.labels import POOLED, SINK
from sinkscope.plotting import (
    CLASS_COLORS,
    Draw,
    new_figure,
    save_figure,
    wrap_to_width,
)
from sinkscope.text import plural

__all__ = [
    "bos_alignment_figure",
    "bos_residual_norm_figure",
    "bos_value_norm_figure",
    "pair_figures",
    "plot_bos_alignment",
    "plot_bos_residual_norm",
    "plot_bos_value_norm",
    "plot_value_rank",
    "summary_figures",
]


def bos_alignment_figure(
    tables: Tables, title: str, space: str = "Z", bound: float = 0.0
) -> tuple[Figure, pl.DataFrame]:
    """Figure 1 and the numbers its panel titles print (see :func:`plot_bos_alignment`)."""
    frame = _concat(
        tables,
        ["model", "dataset", "space", "layer", "min", "q1", "median", "q3", "max"],
    ).filter(pl.col("space") == space)
    if frame.height == 0:
        raise ValueError(f"no rows for space {space!r}")
    readings = bos_max_readings(frame, bound, space)
    models = sorted(set(frame["model"].to_list()))
    rows, cols = _panel_grid(len(models), max_cols=1)
    n_layers = int(frame["layer"].n_unique())
    n_sets = max(len(set(frame.filter(pl.col("model") == m)["dataset"].to_list())) for m in models)
    width = min(MAX_INCHES, max(9.0, 0.32 * n_layers * max(1, n_sets) + 5.0))
    fig = new_figure(width, min(3.8, (MAX_INCHES - 0.8) / rows) * rows + 0.8)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
    palette = sns.color_palette("colorblind")
    all_datasets = _dataset_order(frame["dataset"].to_list())
    color_of = {name: palette[i % len(palette)] for i, name in enumerate(all_datasets)}
    for ax, model in zip(axes, models, strict=False):
        sub = frame.filter(pl.col("model") == model)
        datasets = _dataset_order(sub["dataset"].to_list())
        width = 0.8 / len(datasets)
        for k, dataset in enumerate(datasets):
            part = sub.filter(pl.col("dataset") == dataset).sort("layer")
            offset = (k - (len(datasets) - 1) / 2) * width
            stats = [
                {
                    "med": r["median"],
                    "q1": r["q1"],
                    "q3": r["q3"],
                    "whislo": r["min"],
                    "whishi": r["max"],
                    "fliers": [],
                }
                for r in part.iter_rows(named=True)
            ]
            positions = [layer + offset for layer in part["layer"].to_list()]
            _draw_boxes(
                ax,
                stats,
                positions,
                width * 0.85,
                color_of[dataset],
                COSINE_YLIM[1] - COSINE_YLIM[0],
            )
            ax.scatter(
                positions,
                part["max_excl_first"].cast(pl.Float64).to_numpy(),
                marker="x",
                s=16,
                color="black",
                linewidths=0.9,
                zorder=3,
            )
        ax.axhline(bound, color="crimson", linewidth=0.8, linestyle="--", zorder=0)
        _layer_ticks(ax, sub["layer"].unique().to_list())
        ax.set_ylim(*COSINE_YLIM)
        ax.set_ylabel(f"cos(BOS, token)\n{_SPACE_LABELS.get(space, space)}")
        n_datasets = sub["n_datasets"].max() if "n_datasets" in sub.columns else None
        b = readings.filter(pl.col("model") == model).row(0, named=True)
        ax.set_title(
            f"{model}: {', '.join(_dataset_label(d, n_datasets) for d in datasets)} "
            f"({_scope(sub)})\nmax < {bound:g} in {b['n_below_all']} of {b['n_layers']} layers "
            f"over all positions (whisker tops), in {b['n_below_from2']} of {b['n_layers']} over "
            f"positions >= 2 (crosses)\nmiddle layers {b['middle_first']}..{b['middle_last']}: "
            f"max {_fmt(b['mid_max_all'])} (all positions) / {_fmt(b['mid_max_from2'])} "
            f"(positions >= 2)\n"
            f"the whisker top is position {FIRST_TEXT_POSITION} (first text token after BOS) in "
            f"{b['n_max_at_first']} of {b['n_layers']} layers",
            fontsize=9,
        )
        handles: list[Any] = [
            Patch(facecolor=color_of[d], edgecolor="black", label=_dataset_label(d, n_datasets))
            for d in datasets
        ]
        handles += [
            Line2D(
                [], [], color="black", linewidth=0.6, label="whiskers: min / max,\nall positions"
            ),
            Line2D(
                [], [], marker="x", color="black", linestyle="", label="max over positions >= 2"
            ),
            Line2D(
                [], [], color="crimson", linestyle="--", linewidth=0.8, label=f"cos = {bound:g}"
            ),
        ]
        ax.legend(
            handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=True
        )
    for ax in axes[len(models) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    return fig, readings


def plot_bos_alignment(
    tables: Tables, out_png: str | os.PathLike[str], title: str, space: str = "Z"
) -> pl.DataFrame:
    """Figure 1: per layer, the cosine between BOS and every other token (box = quartiles,
    whiskers = absolute min and max over all positions), one panel per model (the figure within
    :data:`~sinkscope.plotting.MAX_FIGURE_PIXELS`: 48 layers, or many models), one colour per
    dataset; a cross marks the maximum over positions >= 2 (without the first text token).

    ``tables``: ``bos_alignment`` tables of :func:`~sinkscope.geometry.analysis.analyze_file` (one
    per pair) or the pooled one of :func:`~sinkscope.geometry.summary.summarize` (dataset
    ``"all"``). ``space``: ``"Z"`` (attention input, the paper's Figure 1) or ``"X"`` (residual
    stream). Each panel title gives both readings of
    :func:`~sinkscope.geometry.alignment.bos_max_readings` (the numbers of the claim
    ``geometry.bos_cosine_below_zero``), which this function returns.
    """
    fig, readings = bos_alignment_figure(tables, title, space)
    save_figure(fig, out_png)
    return readings


def plot_value_rank(tables: Tables, out_png: str | os.PathLike[str], title: str) -> None:
    """Figure 12: relative rank of the value matrices per layer (box = quartiles, whiskers =
    min/max), pooled over kv heads and sequences; top row pooled over datasets, then one row
    per dataset; one column per model (panels narrowed to fit
    :data:`~sinkscope.plotting.MAX_FIGURE_PIXELS`, their titles wrapped to the panel's width and
    their layer ticks thinned, :func:`_layer_ticks`).

    ``tables``: raw ``value_rank`` tables of :func:`~sinkscope.geometry.analysis.analyze_file`.
    """
    frame = _concat(tables, ["model", "dataset", "layer", "sequence", "rel_rank", "m"])
    models = sorted(set(frame["model"].to_list()))
    datasets = _dataset_order(frame["dataset"].to_list())
    row_names = ([POOLED] if len(datasets) > 1 else []) + datasets
    n_layers = int(frame["layer"].n_unique())
    # panels shrink (their layer ticks thinned to fit) so that no side exceeds MAX_FIGURE_PIXELS
    panel_width = min(0.3 * n_layers + 1.5, (MAX_INCHES - 1.0) / len(models))
    panel_height = min(2.6, (MAX_INCHES - 0.8) / len(row_names))
    fig = new_figure(max(6.0, panel_width * len(models) + 1.0), panel_height * len(row_names) + 0.8)
    axes = fig.subplots(len(row_names), len(models), squeeze=False)
    for j, model in enumerate(models):
        by_model = frame.filter(pl.col("model") == model)
        for i, row_name in enumerate(row_names):
            ax = axes[i, j]
            sub = by_model if row_name == POOLED else by_model.filter(pl.col("dataset") == row_name)
            if sub.height == 0:
                ax.set_visible(False)
                continue
            grouped = sub.group_by("layer").agg(pl.col("rel_rank")).sort("layer")
            stats = [_box_stats(np.asarray(v)) for v in grouped["rel_rank"].to_list()]
            color = "#7fc97f" if row_name == POOLED else "#beaed4"
            low = float(sub["rel_rank"].min())
            bottom = min(0.0, low) - 0.02
            _draw_boxes(ax, stats, grouped["layer"].to_list(), 0.7, color, 1.02 - bottom)
            _layer_ticks(ax, grouped["layer"].to_list(), panel_width)
            ax.set_ylim(bottom, 1.02)
            ax.set_ylabel("rank / min(m, n)")
            label = (
                f"pooled over {plural(sub['dataset'].n_unique(), 'dataset')}"
                if row_name == POOLED
                else row_name
            )
            n_seq = sub.group_by("dataset").agg(pl.col("sequence").n_unique())["sequence"].sum()
            ax.set_title(
                wrap_to_width(
                    f"{model}: {label} (N={n_seq} seq, m={int(sub['m'].max())} tokens, "
                    f"min {low:.2f})",
                    panel_width,
                    PANEL_TITLE_FONTSIZE,
                ),
                fontsize=PANEL_TITLE_FONTSIZE,
            )
    fig.suptitle(f"{title}\n(relative tolerance {RANK_RTOL:g})")
    save_figure(fig, out_png)


#: Colours of the two head groups of the value-norm figure: sink heads (``is_sink``, the sink
#: colour of the class map) and all other heads (Okabe-Ito blue; distinct for dichromats).
_SINK_GROUP_COLORS: dict[bool, str] = {True: CLASS_COLORS[SINK], False: "#0072b2"}


def _group_label(is_sink: bool, n: int) -> str:
    return f"sink heads, is_sink ({n})" if is_sink else f"other heads ({n})"


def bos_value_norm_figure(
    tables: Tables, title: str, intervals: Mapping[str, Any] | None = None
) -> tuple[Figure, pl.DataFrame]:
    """The value-norm figure and the effect sizes its panels print (:func:`plot_bos_value_norm`;
    ``intervals``: the config's ``claims.intervals``, as the summary's)."""
    frame = _concat(
        tables, ["model", "dataset", "layer", "head", "bos_mass", "rel_bos_vo_norm", "is_sink"]
    ).filter(pl.col("rel_bos_vo_norm").is_not_null() & pl.col("rel_bos_vo_norm").is_finite())
    models = sorted(set(frame["model"].to_list()))
    datasets = _dataset_order(frame["dataset"].to_list())
    settings = bootstrap_settings(intervals)
    effect = sink_value_norm_effect(frame, with_pooled=len(datasets) > 1, **settings)
    shown = effect.filter(pl.col("dataset") == (POOLED if len(datasets) > 1 else datasets[0]))
    # the claim's numbers (geometry.sink_bos_value_small): the graded relation over every head
    relation = bos_mass_relation(frame, with_pooled=len(datasets) > 1, **settings).filter(
        pl.col("dataset") == (POOLED if len(datasets) > 1 else datasets[0])
    )
    row_height = min(4.4, (MAX_INCHES - 0.7) / len(models))
    fig = new_figure(12.5, row_height * len(models) + 0.7)
    axes = fig.subplots(len(models), 2, squeeze=False, width_ratios=[3.0, 1.2])
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    marker_of = {d: markers[i % len(markers)] for i, d in enumerate(datasets)}
    for (ax, box_ax), model in zip(axes, models, strict=True):
        sub = frame.filter(pl.col("model") == model)
        e = shown.filter(pl.col("model") == model).row(0, named=True)
        for dataset in _dataset_order(sub["dataset"].to_list()):
            for flag in (False, True):
                part = sub.filter((pl.col("dataset") == dataset) & (pl.col("is_sink") == flag))
                if part.height == 0:
                    continue
                ax.scatter(
                    part["bos_mass"].to_numpy(),
                    part["rel_bos_vo_norm"].to_numpy(),
                    s=22,
                    marker=marker_of[dataset],
                    color=_SINK_GROUP_COLORS[flag],
                    edgecolors="black",
                    linewidths=0.4,
                    alpha=0.85,
                )
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        for end in (LOW_BOS_MASS, HIGH_BOS_MASS):  # the two ends the median ratio compares
            ax.axvline(end, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlim(-0.02, 1.02)
        ax.set_xlabel("BOS attention mass of the head (mean over sequences)")
        ax.set_ylabel("|W_VO z_0| / median_i |W_VO z_i|\n(mean over sequences)")
        g = relation.filter(pl.col("model") == model).row(0, named=True)
        ax.set_title(
            f"{model}: {', '.join(_dataset_order(sub['dataset'].to_list()))} ({_scope(sub)}); "
            "one point per head and dataset\n"
            f"Spearman(BOS mass, norm) {_fmt(g['spearman'])} [{_fmt(g['spearman_lo'])}, "
            f"{_fmt(g['spearman_hi'])}]; median norm at BOS mass >= {HIGH_BOS_MASS:g} / "
            f"< {LOW_BOS_MASS:g}: {_fmt(g['ratio_high_low'])} [{_fmt(g['ratio_high_low_lo'])}, "
            f"{_fmt(g['ratio_high_low_hi'])}]",
            fontsize=9,
        )
        groups = [(True, e["n_sink"]), (False, e["n_other"])]
        values = [
            sub.filter(pl.col("is_sink") == flag)["rel_bos_vo_norm"].to_numpy()
            for flag, _ in groups
        ]
        present = [(g, v) for g, v in zip(groups, values, strict=True) if v.size]
        for k, ((flag, _), v) in enumerate(present):
            _draw_boxes(box_ax, [_box_stats(v)], [k], 0.6, _SINK_GROUP_COLORS[flag])
        box_ax.set_xticks(
            range(len(present)), ["sink" if flag else "other" for (flag, _), _ in present]
        )
        box_ax.set_xlim(-0.6, len(present) - 0.4)
        box_ax.set_yscale("log")
        box_ax.set_ylim(ax.get_ylim())
        box_ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        pooled = f"pooled over {len(datasets)} datasets" if len(datasets) > 1 else datasets[0]
        ratio = (
            f"ratio of medians {_fmt(e['ratio'])}\n{100 * e['level']:.0f}% CI "
            f"{_fmt(e['ratio_lo'])}-{_fmt(e['ratio_hi'])}"
            if e["ratio"] is not None
            else "ratio n/a"
        )
        box_ax.set_title(
            f"{pooled}\nmedian: sink {_fmt(e['sink_median'])}, other {_fmt(e['other_median'])}"
            f"\n{ratio}",
            fontsize=9,
        )
        handles: list[Any] = [
            Patch(
                facecolor=_SINK_GROUP_COLORS[flag], edgecolor="black", label=_group_label(flag, n)
            )
            for flag, n in groups
        ]
        if len(datasets) > 1:
            handles += [
                Line2D([], [], marker=marker_of[d], color="black", linestyle="", label=d)
                for d in _dataset_order(sub["dataset"].to_list())
            ]
        handles.append(
            Line2D([], [], color="grey", linestyle="--", linewidth=0.8, label="ratio = 1")
        )
        box_ax.legend(
            handles=handles,
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.04, 1.0),
            title="head instances (n)",
            title_fontsize=8,
        )
    fig.suptitle(title)
    return fig, shown


def plot_bos_value_norm(
    tables: Tables,
    out_png: str | os.PathLike[str],
    title: str,
    intervals: Mapping[str, Any] | None = None,
) -> pl.DataFrame:
    """§6 / Remark C.4: per head, BOS attention mass vs. the BOS value-output norm relative to
    the median token (log scale), sink heads (``is_sink``, sink+previous included) against the
    other heads; one row per model, one marker per dataset; on the right the pooled
    distributions of the two groups (box = quartiles, whiskers = min/max) with their medians and
    the ratio of medians with its bootstrap interval
    (:func:`~sinkscope.geometry.values.sink_value_norm_effect`, the claim's reported reading),
    which this function returns. The scatter's title gives the numbers the claim
    ``geometry.sink_bos_value_small`` decides on (:func:`~sinkscope.geometry.values.bos_mass_relation`:
    Spearman's correlation of BOS mass with the norm, and the median ratio between the two
    dotted BOS-mass ends, each with its interval). Legend counts are the head instances the
    medians are taken over.

    ``tables``: ``bos_value_norm`` tables of :func:`~sinkscope.geometry.analysis.analyze_file`.
    """
    fig, shown = bos_value_norm_figure(tables, title, intervals)
    save_figure(fig, out_png)
    return shown


def plot_bos_residual_norm(tables: Tables, out_png: str | os.PathLike[str], title: str) -> None:
    """Massive activations: per layer, the BOS residual-stream norm relative to the median
    token norm (mean over sequences; band = min..max over sequences), one line per model and
    dataset, log scale.

    ``tables``: ``bos_residual_norm`` tables of :func:`~sinkscope.geometry.analysis.analyze_file` or
    the pooled one of :func:`~sinkscope.geometry.summary.summarize`.
    """
    fig = bos_residual_norm_figure(tables, title)
    save_figure(fig, out_png)


def bos_residual_norm_figure(tables: Tables, title: str) -> Figure:
    """The figure of :func:`plot_bos_residual_norm`."""
    frame = _concat(
        tables,
        ["model", "dataset", "layer", "rel_bos_norm", "rel_bos_norm_min", "rel_bos_norm_max"],
    )
    fig = new_figure(11.0, 4.6)
    ax = fig.subplots()
    palette = sns.color_palette("colorblind")
    models = sorted(set(frame["model"].to_list()))
    datasets = _dataset_order(frame["dataset"].to_list())
    styles = ["-", "--", ":", "-."]
    for i, model in enumerate(models):
        for k, dataset in enumerate(datasets):
            part = frame.filter((pl.col("model") == model) & (pl.col("dataset") == dataset))
            if part.height == 0:
                continue
            part = part.sort("layer")
            layers = part["layer"].to_numpy()
            color = palette[i % len(palette)]
            ax.fill_between(
                layers,
                part["rel_bos_norm_min"].to_numpy(),
                part["rel_bos_norm_max"].to_numpy(),
                color=color,
                alpha=0.2,
                linewidth=0,
            )
            ax.plot(
                layers,
                part["rel_bos_norm"].to_numpy(),
                color=color,
                linestyle=styles[k % len(styles)],
                marker="o",
                markersize=3,
                label=f"{model} / {_dataset_label(dataset)}\n({_scope(part)})",
            )
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer (residual stream entering the layer)")
    ax.set_ylabel("|x_0| / median_i |x_i|\n(line: mean over sequences, band: min-max)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("BOS residual-stream norm relative to the median token", fontsize=10)
    fig.suptitle(title)
    return fig


# --- the figures of each rule -----------------------------------------------------------------


def pair_figures(
    tables: dict[str, pl.DataFrame], title: str, intervals: Mapping[str, Any] | None = None
) -> dict[str, Draw]:
    """The figures of rule ``analyze_geometry`` (:data:`sinkscope.geometry.names.FIGURES`) from
    the tables of :func:`~sinkscope.geometry.analysis.analyze_file` (``intervals``: the config's
    ``claims.intervals``, for the value-norm figure's bootstraps over heads)."""
    return {
        "bos_alignment": lambda out: plot_bos_alignment(tables["bos_alignment"], out, title),
        "halfspace_margins": lambda out: plot_halfspace_margins(tables["halfspace"], out, title),
        "value_rank": lambda out: plot_value_rank(tables["value_rank"], out, title),
        "bos_value_norm": lambda out: plot_bos_value_norm(
            tables["bos_value_norm"], out, title, intervals
        ),
        "bos_residual_norm": lambda out: plot_bos_residual_norm(
            tables["bos_residual_norm"], out, title
        ),
    }


def long_context_figures(table: pl.DataFrame, title: str) -> dict[str, Draw]:
    """The figure of rule ``analyze_geometry_long_context``
    (:data:`sinkscope.geometry.names.LONG_CONTEXT_FIGURES`) from its table."""
    return {"halfspace_long_context": lambda out: plot_halfspace_long_context(table, out, title)}


def summary_figures(
    summary: dict[str, pl.DataFrame],
    pairs: Sequence[dict[str, pl.DataFrame]],
    long_context: pl.DataFrame | None,
    title: str,
    intervals: Mapping[str, Any] | None = None,
) -> dict[str, Draw]:
    """The figures of rule ``summarize_geometry`` (:data:`sinkscope.geometry.names.FIGURES`):
    from the pooled tables of :func:`~sinkscope.geometry.summary.summarize` where they suffice,
    else from every pair's tables (``pairs``); ``long_context``: the long-context table of
    :func:`~sinkscope.geometry.summary.long_context_table` (Prop. 4.1 at T' > d_model)."""
    return {
        "bos_alignment": lambda out: plot_bos_alignment(summary["bos_alignment"], out, title),
        "halfspace_margins": lambda out: plot_halfspace_margins(
            [p["halfspace"] for p in pairs], out, title, long_context=long_context
        ),
        "value_rank": lambda out: plot_value_rank([p["value_rank"] for p in pairs], out, title),
        "bos_value_norm": lambda out: plot_bos_value_norm(
            [p["bos_value_norm"] for p in pairs], out, title, intervals
        ),
        "bos_residual_norm": lambda out: plot_bos_residual_norm(
            summary["bos_residual_norm"], out, title
        ),
    }
