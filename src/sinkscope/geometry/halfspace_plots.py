"""Figures of the half-space test of Proposition 4.1 (:mod:`sinkscope.geometry.halfspace`): the
margins per layer and point set on the extraction's sequences, and on the long sequences where the
test can fail (:mod:`sinkscope.geometry.long_context`). Box plots as in
:mod:`sinkscope.geometry.figure_parts`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sinkscope.geometry.figure_parts import (
    _SET_COLORS,
    _SET_LABELS,
    MARGIN_YLIM,
    MAX_INCHES,
    MIN_MARGIN_ROW,
    Tables,
    _box_stats,
    _concat,
    _draw_boxes,
    _layer_ticks,
    _scope,
)
from sinkscope.geometry.halfspace import long_context_counts, representability_counts
from sinkscope.geometry.long_context import LONG_CONTEXT_COLUMNS
from sinkscope.geometry.names import ALL_TOKENS, ATTENDING, BOS_MINUS_TOKEN, LONG_CONTEXT_POINT_SETS
from sinkscope.heads.order import dataset_order as _dataset_order
from sinkscope.plotting import (
    new_figure,
    save_figure,
)


def _margin_boxes(ax: Axes, sub: pl.DataFrame, sets: Sequence[str]) -> None:
    """Per layer and point set, the box of the margins over sequences (and datasets); circles
    mark the non-trivial cases."""
    width = 0.8 / len(sets)
    for k, name in enumerate(sets):
        part = sub.filter((pl.col("point_set") == name) & pl.col("margin").is_not_null())
        if part.height == 0:
            continue
        grouped = part.group_by("layer").agg(pl.col("margin")).sort("layer")
        stats = [_box_stats(np.asarray(m)) for m in grouped["margin"].to_list()]
        offset = (k - (len(sets) - 1) / 2) * width
        positions = [layer + offset for layer in grouped["layer"].to_list()]
        _draw_boxes(
            ax, stats, positions, width * 0.85, _SET_COLORS[name], MARGIN_YLIM[1] - MARGIN_YLIM[0]
        )
        informative = part.filter(~pl.col("trivially_separable"))
        if informative.height:
            ax.scatter(
                informative["layer"].to_numpy() + offset,
                informative["margin"].to_numpy(),
                marker="o",
                s=9,
                facecolors="none",
                edgecolors="black",
                linewidths=0.6,
                zorder=3,
            )
    ax.axhline(0.0, color="crimson", linewidth=0.8, linestyle="--", zorder=0)
    _layer_ticks(ax, sub["layer"].unique().to_list())
    ax.set_ylim(*MARGIN_YLIM)
    ax.set_ylabel("margin gamma\n(cosine to the best direction)")
    handles: list[Any] = [
        Patch(facecolor=_SET_COLORS[n], edgecolor="black", label=_SET_LABELS[n]) for n in sets
    ]
    handles += [
        Line2D(
            [],
            [],
            marker="o",
            markerfacecolor="none",
            markeredgecolor="black",
            color="black",
            linestyle="",
            label="non-trivial case\n(> d_model points\nor rank-deficient)",
        ),
        Line2D([], [], color="crimson", linestyle="--", linewidth=0.8, label="gamma = 0"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


#: Prefix of the long-context columns in the counts of :func:`halfspace_margins_figure`.
LONG_PREFIX = "long_"


def _null_bounds(ax: Axes, sub: pl.DataFrame) -> None:
    """Per layer and point set, the largest upper bound of the Gaussian null's margin over
    sequences (a grey bar: chance reaches at most this margin), where the null ran; added to the
    panel's legend."""
    if "null_margin_upper" not in sub.columns or sub["null_margin_upper"].is_null().all():
        return
    sets = LONG_CONTEXT_POINT_SETS
    width = 0.8 / len(sets)
    for k, name in enumerate(sets):
        part = sub.filter((pl.col("point_set") == name) & pl.col("null_margin_upper").is_not_null())
        if part.height == 0:
            continue
        bound = part.group_by("layer").agg(pl.col("null_margin_upper").max()).sort("layer")
        offset = (k - (len(sets) - 1) / 2) * width
        ax.scatter(
            bound["layer"].to_numpy() + offset,
            np.minimum(bound["null_margin_upper"].to_numpy(), MARGIN_YLIM[1]),
            marker="_",
            s=60,
            color="dimgray",
            linewidths=1.5,
            zorder=4,
        )
    legend = ax.get_legend()
    handles = list(legend.legend_handles) if legend is not None else []
    labels = [text.get_text() for text in legend.texts] if legend is not None else []
    handles.append(
        Line2D([], [], marker="_", markersize=9, markeredgewidth=1.5, color="dimgray", ls="")
    )
    labels.append(
        "Gaussian null (same N, d,\ncovariance): its margin\nis at most this (solved\n"
        "until below half the real)"
    )
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


def _long_context_panel(ax: Axes, sub: pl.DataFrame, counts: dict[str, Any]) -> None:
    """One model's long-context margins (Prop. 4.1 at T' > d_model) on ``ax``, titled with its
    :func:`~sinkscope.geometry.halfspace.long_context_counts` row ``counts``."""
    _margin_boxes(ax, sub, LONG_CONTEXT_POINT_SETS)
    _null_bounds(ax, sub)
    datasets = _dataset_order(sub["dataset"].to_list())
    if counts["n_nontrivial"]:
        verdict = (
            f"both sets in an open half-space (every sink pattern representable) in "
            f"{counts['n_representable_nontrivial']} of {counts['n_nontrivial']} non-trivial "
            f"pairs ({100 * counts['frac_representable_nontrivial']:.1f}%)"
        )
        if counts.get("n_undecided"):
            verdict += f", {counts['n_undecided']} undecided (solve time budget)"
    else:
        verdict = "none non-trivial: the test cannot fail (not applicable)"
    ax.set_title(
        f"{sub['model'][0]}: {', '.join(datasets)}, long context (N={counts['n_sequences']} seq, "
        f"T'={counts['seq_len'] - 1} > d_model={counts['dim']}; decides the claim)\n"
        f"(layer, seq) pairs: {counts['n_pairs']}, of which {counts['n_trivial']} trivially "
        f"separable; {verdict}",
        fontsize=9,
    )


def halfspace_long_context_figure(table: pl.DataFrame, title: str) -> tuple[Figure, pl.DataFrame]:
    """The long-context half-space figure of one pair and its counts
    (:func:`plot_halfspace_long_context`)."""
    frame = _concat(table, [*LONG_CONTEXT_COLUMNS])
    counts = long_context_counts(frame)
    (row,) = counts.iter_rows(named=True)
    n_layers = int(frame["layer"].n_unique())
    fig = new_figure(min(19.5, max(9.0, 0.5 * n_layers + 5.0)), 4.7)
    ax = fig.subplots(1, 1)
    _long_context_panel(ax, frame, row)
    fig.suptitle(title)
    return fig, counts


def plot_halfspace_long_context(
    table: pl.DataFrame, out_png: str | os.PathLike[str], title: str
) -> pl.DataFrame:
    """Proposition 4.1 on long sequences (T' > d_model, where the test can fail) for one pair:
    per layer, the margins ``gamma`` of the two point sets that need no attention (``z_0 - z_i``
    and all tokens; box = quartiles over sequences, whiskers = min/max, circles = non-trivial
    cases). ``table``: :func:`~sinkscope.geometry.long_context.halfspace_long_context`. Returns
    the counts of its title (:func:`~sinkscope.geometry.halfspace.long_context_counts`), the
    numbers the claim ``geometry.sink_representable`` pools over the model's datasets."""
    fig, counts = halfspace_long_context_figure(table, title)
    save_figure(fig, out_png)
    return counts


def halfspace_margins_figure(
    tables: Tables, title: str, long_context: Tables | None = None
) -> tuple[Figure, pl.DataFrame]:
    """The half-space figure and the counts its panel titles print (:func:`plot_halfspace_margins`)."""
    frame = _concat(
        tables,
        [
            "model",
            "dataset",
            "layer",
            "sequence",
            "point_set",
            "margin",
            "halfspace",
            "n_points",
            "trivially_separable",
        ],
    )
    counts = representability_counts(frame)
    long_frame = None
    if long_context is not None:
        long_frame = _concat(long_context, [*LONG_CONTEXT_COLUMNS])
        long_counts = long_context_counts(long_frame)
        counts = counts.join(
            long_counts.rename({c: LONG_PREFIX + c for c in long_counts.columns if c != "model"}),
            on="model",
            how="left",
        )
    models = sorted(set(frame["model"].to_list()))
    panels: list[tuple[str, bool]] = []
    for model in models:
        panels.append((model, False))
        if long_frame is not None and (long_frame["model"] == model).any():
            panels.append((model, True))
    n_layers = int(frame["layer"].n_unique())
    n_cols = 1 if (MAX_INCHES - 0.8) / len(panels) >= MIN_MARGIN_ROW else 2
    n_rows = -(-len(panels) // n_cols)
    row_height = min(3.9, (MAX_INCHES - 0.8) / n_rows)
    width = min(MAX_INCHES, n_cols * min(19.5, max(9.0, 0.5 * n_layers + 5.0)))
    fig = new_figure(width, row_height * n_rows + 0.8)
    axes = np.atleast_1d(fig.subplots(n_rows, n_cols, squeeze=False).ravel())
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax, (model, is_long) in zip(axes, panels, strict=False):
        r = counts.filter(pl.col("model") == model).row(0, named=True)
        if is_long:
            assert long_frame is not None
            lc = {c: r[LONG_PREFIX + c] for c in long_counts.columns if c != "model"}
            _long_context_panel(ax, long_frame.filter(pl.col("model") == model), lc)
            continue
        sub = frame.filter(pl.col("model") == model)
        _margin_boxes(ax, sub, [BOS_MINUS_TOKEN, ATTENDING, ALL_TOKENS])
        datasets = _dataset_order(sub["dataset"].to_list())
        n_tokens = sub.filter(pl.col("point_set") == BOS_MINUS_TOKEN)["n_points"].max()
        if r["n_nontrivial"]:
            verdict = (
                f"sink representable in {r['n_representable_nontrivial']} of them "
                f"({100 * r['frac_representable_nontrivial']:.1f}%)"
            )
        else:
            verdict = "none non-trivial: the test cannot fail (not applicable)"
        share = 100 * r["n_any_trivial"] / r["n_pairs"] if r["n_pairs"] else float("nan")
        ax.set_title(
            f"{model}: {', '.join(datasets)} ({_scope(sub)}, T={n_tokens})\n"
            f"(layer, seq) pairs with sink-attending tokens: {r['n_cases']}, of which "
            f"{r['n_trivial']} trivially separable and {r['n_nontrivial']} non-trivial; {verdict}\n"
            f"any sink pattern (J = all tokens): {r['n_any_trivial']} of {r['n_pairs']} pairs "
            f"({share:.0f}%) trivially separable; holds in "
            f"{r['n_any_representable_nontrivial']} of the {r['n_any_nontrivial']} others",
            fontsize=9,
        )
    fig.suptitle(title)
    return fig, counts


def plot_halfspace_margins(
    tables: Tables,
    out_png: str | os.PathLike[str],
    title: str,
    long_context: Tables | None = None,
) -> pl.DataFrame:
    """Proposition 4.1 margins per layer: for each point set, the distribution over sequences
    (and datasets) of the normalised margin ``gamma`` (box = quartiles, whiskers = min/max);
    circles mark the non-trivial cases (the others are trivially separable).

    ``tables``: ``halfspace`` tables of :func:`~sinkscope.geometry.analysis.analyze_file`. A set
    lies in an open half-space iff ``gamma > 0``; the panel titles give the counts of
    :func:`~sinkscope.geometry.halfspace.representability_counts`, which this function returns:
    (layer, sequence) pairs with sink-attending tokens, how many are trivially separable (and their
    share among all pairs for ``J`` = all tokens), and in how many of the others the sink is
    representable. ``long_context``: the tables of
    :func:`~sinkscope.geometry.long_context.halfspace_long_context`; each model then gets a second
    panel after its first (under it; beside it when the panels would be lower than
    :data:`MIN_MARGIN_ROW` one under the other) with the long-context margins of the two sets
    that need no attention,
    titled with :func:`~sinkscope.geometry.halfspace.long_context_counts` (N, T', d_model, the share
    of non-trivial pairs where both sets lie in an open half-space), returned as the ``long_*``
    columns. Those are the numbers of the claim ``geometry.sink_representable`` when present, the
    ``T``-panel's otherwise
    (:func:`~sinkscope.claims.checks.geometry.sink_representable_statements`).
    """
    fig, counts = halfspace_margins_figure(tables, title, long_context)
    save_figure(fig, out_png)
    return counts
