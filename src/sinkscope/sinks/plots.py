"""Figures of sinks beyond BOS: per pair (:func:`pair_figures`) and across pairs
(:func:`summary_figures`), in the style of :mod:`sinkscope.plotting`."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator

from sinkscope.heads.order import dataset_order
from sinkscope.labels import POOLED
from sinkscope.plotting import (
    MAX_FIGURE_INCHES,
    SEQUENTIAL_CMAP,
    Draw,
    legend_below,
    new_figure,
    save_figure,
)

__all__ = [
    "N_TOKENS_SHOWN",
    "pair_figures",
    "plot_massive",
    "plot_secondary",
    "plot_secondary_summary",
    "plot_sink_rate",
    "plot_sink_rate_summary",
    "summary_figures",
]

#: Token types shown in the secondary-sink bar charts.
N_TOKENS_SHOWN = 12
#: Size in inches (width, height) of a panel of token types in the summary, one per model.
TOKEN_PANEL = (6.0, 4.8)


def _eps_colors(eps: Sequence[float]) -> dict[float, tuple[float, ...]]:
    cmap = sns.color_palette(SEQUENTIAL_CMAP, n_colors=max(2, len(eps)))
    return {e: cmap[i] for i, e in enumerate(sorted(eps))}


def _nearest(values: Sequence[float], target: float) -> float:
    return min(values, key=lambda v: abs(v - target))


def plot_sink_rate(
    rate: pl.DataFrame,
    rate_layer: pl.DataFrame,
    eps: float,
    out_png: str | os.PathLike[str],
    title: str,
) -> None:
    """Left: the sink rate (share of sequence x layer x head units with score > eps) against the
    key position k, pooled over layers, one line per eps (solid: full length; dashed: a prefix of
    P positions). Right: the rate per layer and key position at the reference ``eps`` (full
    length)."""
    full = int(rate["n_positions"].max())
    lengths = sorted(set(rate["n_positions"].to_list()), reverse=True)
    thresholds = sorted(set(rate["eps"].to_list()))
    colors = _eps_colors(thresholds)
    fig = new_figure(12.0, 4.8)
    left, right = fig.subplots(1, 2, width_ratios=[1.0, 1.1])
    styles = ["-", "--", ":", "-."]
    for i, p in enumerate(lengths):
        for e in thresholds:
            part = rate.filter((pl.col("n_positions") == p) & (pl.col("eps") == e)).sort(
                "key_position"
            )
            left.plot(
                part["key_position"].to_numpy(),
                part["rate"].to_numpy(),
                color=colors[e],
                linestyle=styles[i % len(styles)],
                marker="o",
                markersize=3,
                label=f"eps = {e:g}, P = {p}" + (" (full)" if p == full else ""),
            )
    left.set_xlabel("key position k (0 = BOS)")
    left.set_ylabel("sink rate: share of (sequence, layer, head)\nwith score(k) > eps")
    left.set_ylim(-0.02, 1.02)
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_title("pooled over layers", fontsize=10)
    ref = _nearest(thresholds, eps)
    part = rate_layer.filter((pl.col("n_positions") == full) & (pl.col("eps") == ref))
    n_layers = int(part["layer"].max()) + 1
    n_keys = int(part["key_position"].max()) + 1
    grid = np.full((n_layers, n_keys), np.nan)
    grid[part["layer"].to_numpy(), part["key_position"].to_numpy()] = part["rate"].to_numpy()
    image = right.imshow(
        grid, aspect="auto", origin="lower", cmap=SEQUENTIAL_CMAP, vmin=0.0, vmax=1.0
    )
    right.set_xlabel("key position k (0 = BOS)")
    right.set_ylabel("layer")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_title(f"per layer at eps = {ref:g} (P = {full})", fontsize=10)
    fig.colorbar(image, ax=right, label="sink rate (share of sequence x head)")
    legend_below(fig, [left], ncols=len(thresholds), fontsize=7)
    fig.suptitle(f"{title}: sink rate of Gu et al. (score(k) = mean attention on k)")
    save_figure(fig, out_png)


def _token_bars(ax: Axes, tokens: pl.DataFrame, label: str) -> None:
    """Horizontal bars of the most frequent secondary-sink tokens (``n_sink``)."""
    top = tokens.sort(["n_sink", "token_id"], descending=[True, False]).head(N_TOKENS_SHOWN)
    if top.height == 0:
        ax.text(0.5, 0.5, "no secondary sinks", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    y = np.arange(top.height)[::-1]
    ax.barh(y, top["n_sink"].to_numpy(), color=sns.color_palette("colorblind")[0])
    ax.set_yticks(y, [_short(t) for t in top["token"].to_list()], fontsize=8)
    for yi, (n, occ) in zip(y, zip(top["n_sink"], top["n_occurrences"], strict=True), strict=True):
        ax.text(n, yi, f" {n}/{occ}", va="center", fontsize=7)
    ax.set_xlabel(label)
    ax.set_xlim(0, top["n_sink"].max() * 1.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _short(token: str, width: int = 18) -> str:
    return token if len(token) <= width else token[: width - 1] + "…"


def plot_secondary(
    secondary: pl.DataFrame,
    tokens: pl.DataFrame,
    n_layers: int,
    eps: float,
    out_png: str | os.PathLike[str],
    title: str,
) -> None:
    """Left: the token types that most often become secondary sinks (bars: secondary-sink
    occurrences; label: of all eligible occurrences). Right: per layer, how many secondary sinks
    are within their layer span (first to last layer) and how many appear first there."""
    fig = new_figure(12.0, 4.8)
    left, right = fig.subplots(1, 2)
    _token_bars(left, tokens, "secondary-sink occurrences (label: of eligible occurrences)")
    left.set_title("token types", fontsize=10)
    layers = np.arange(n_layers)
    first = secondary["first_layer"].to_numpy()
    last = secondary["last_layer"].to_numpy()
    spanning = [(int(np.sum((first <= layer) & (last >= layer)))) for layer in layers]
    appearing = (
        np.bincount(first, minlength=n_layers)[:n_layers] if first.size else np.zeros(n_layers)
    )
    palette = sns.color_palette("colorblind")
    right.bar(layers, appearing, color=palette[1], label="appear first in this layer")
    right.plot(
        layers,
        spanning,
        color=palette[0],
        marker="o",
        markersize=3,
        label="within their layer span",
    )
    right.set_ylim(0, max(1.0, float(np.max(spanning, initial=0)) * 1.1))
    right.set_xlabel("layer")
    right.set_ylabel("secondary sinks (sequence, position)")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    legend_below(fig, [right], fontsize=8)
    right.set_title(f"{secondary.height} secondary sinks", fontsize=10)
    fig.suptitle(f"{title}: secondary sinks (k > 0, score > eps = {eps:g} in some head)")
    save_figure(fig, out_png)


def plot_massive(
    massive_layer: pl.DataFrame,
    massive_top: pl.DataFrame,
    out_png: str | os.PathLike[str],
    title: str,
) -> None:
    """Per layer, the ratio of the largest |X| entries to the layer's median |X| (one pair: the
    three largest dimensions; several: the largest, colour by model, line style by dataset;
    filled marker: the entry sits at position 0, the BOS / sink token), with the massive
    threshold (dashed grey)."""
    keys = massive_layer.select("model", "dataset").unique(maintain_order=True).rows()
    fig = new_figure(11.0, 4.6)
    ax = fig.subplots()
    palette = sns.color_palette("colorblind")
    threshold = float(massive_layer["massive_ratio"][0])
    single = len(keys) == 1
    models = sorted({model for model, _ in keys})
    datasets = dataset_order([dataset for _, dataset in keys])
    styles = ["-", "--", ":", "-."]
    for model, dataset in keys:
        top = massive_top.filter((pl.col("model") == model) & (pl.col("dataset") == dataset))
        ranks = [1, 2, 3] if single else [1]
        for rank in ranks:
            part = top.filter(pl.col("rank") == rank).sort("layer")
            if part.height == 0:
                continue
            color = palette[(rank - 1) if single else models.index(model) % len(palette)]
            style = "-" if single else styles[datasets.index(dataset) % len(styles)]
            layers = part["layer"].to_numpy()
            ratio = part["ratio"].to_numpy()
            sink = part["at_sink"].to_numpy()
            label = f"rank {rank}" if single else f"{model} / {dataset}"
            ax.plot(layers, ratio, color=color, linestyle=style, linewidth=1.2, label=label)
            ax.scatter(layers[sink], ratio[sink], color=color, s=22, zorder=3)
            ax.scatter(
                layers[~sink], ratio[~sink], facecolors="white", edgecolors=[color], s=22, zorder=3
            )
    ax.axhline(threshold, color="grey", linestyle="--", linewidth=0.8)
    ax.text(
        0.0, threshold, f" massive: {threshold:g} x median", va="bottom", fontsize=8, color="grey"
    )
    ax.set_yscale("log")
    ax.set_xlabel("layer (residual stream entering the layer; 0 = embeddings)")
    ax.set_ylabel("|X| / median |X| of the layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.scatter([], [], color="black", s=22, label="at the sink token (position 0)")
    ax.scatter([], [], facecolors="white", edgecolors="black", s=22, label="elsewhere")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    what = "largest entries (one per dimension)" if single else "largest entry"
    ax.set_title(f"massive activations: the {what} of the residual stream per layer", fontsize=10)
    fig.suptitle(title)
    save_figure(fig, out_png)


def plot_sink_rate_summary(
    rate: pl.DataFrame, eps: float, out_png: str | os.PathLike[str], title: str
) -> None:
    """The sink rate at the reference ``eps`` against the key position, pooled over layers, one
    line per model and dataset (thick: pooled over the model's datasets), one panel per number
    of positions P."""
    lengths = sorted(set(rate["n_positions"].to_list()), reverse=True)
    ref = _nearest(sorted(set(rate["eps"].to_list())), eps)
    fig = new_figure(6.0 * len(lengths), 4.6)
    axes = np.atleast_1d(fig.subplots(1, len(lengths), sharey=True))
    palette = sns.color_palette("colorblind")
    models = sorted(set(rate["model"].to_list()))
    datasets = dataset_order(rate["dataset"].to_list())
    styles = [":", "--", "-.", (0, (1, 3)), (0, (5, 1))]
    for ax, p in zip(axes, lengths, strict=True):
        for i, model in enumerate(models):
            for j, dataset in enumerate(datasets):
                part = rate.filter(
                    (pl.col("model") == model)
                    & (pl.col("dataset") == dataset)
                    & (pl.col("n_positions") == p)
                    & (pl.col("eps") == ref)
                ).sort("key_position")
                if part.height == 0:
                    continue
                pooled = dataset == POOLED
                ax.plot(
                    part["key_position"].to_numpy(),
                    part["rate"].to_numpy(),
                    color=palette[i % len(palette)],
                    linestyle="-" if pooled else styles[j % len(styles)],
                    linewidth=2.2 if pooled else 1.0,
                    marker="o" if pooled else None,
                    markersize=3,
                    label=f"{model} / {'all datasets' if pooled else dataset}",
                )
        ax.set_title(f"P = {p} positions", fontsize=10)
        ax.set_xlabel("key position k (0 = BOS)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel(f"sink rate at eps = {ref:g}\n(share of sequence x layer x head)")
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{title}: sink rate of Gu et al. per key position")
    save_figure(fig, out_png)


def plot_secondary_summary(
    ranked: pl.DataFrame, eps: float, out_png: str | os.PathLike[str], title: str
) -> None:
    """Per model, the token types that most often become secondary sinks, pooled over datasets;
    one panel per model, wrapped into rows of as many as fit within
    :data:`~sinkscope.plotting.MAX_FIGURE_PIXELS` (one panel saying so when there is none)."""
    models = sorted(set(ranked["model"].to_list())) if ranked.height else []
    n_panels = max(1, len(models))
    n_cols = min(n_panels, int(MAX_FIGURE_INCHES // TOKEN_PANEL[0]))
    n_rows = math.ceil(n_panels / n_cols)
    fig = new_figure(TOKEN_PANEL[0] * n_cols, TOKEN_PANEL[1] * n_rows)
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    if not models:
        _token_bars(axes[0], ranked, "")
    for ax, model in zip(axes, models, strict=False):
        _token_bars(
            ax,
            ranked.filter(pl.col("model") == model),
            "secondary-sink occurrences\n(label: of eligible occurrences)",
        )
        ax.set_title(model, fontsize=10)
    fig.suptitle(f"{title}: token types of secondary sinks (score > eps = {eps:g})")
    save_figure(fig, out_png)


def pair_figures(tables: dict[str, pl.DataFrame], eps: float, title: str) -> dict[str, Draw]:
    """The figures of rule ``analyze_sinks`` (:data:`sinkscope.sinks.names.FIGURES`)."""
    n_layers = int(tables["massive_layer"]["layer"].max()) + 1
    return {
        "sink_rate": lambda out: plot_sink_rate(
            tables["sink_rate"], tables["sink_rate_layer"], eps, out, title
        ),
        "secondary_sinks": lambda out: plot_secondary(
            tables["secondary_sinks"], tables["secondary_tokens"], n_layers, eps, out, title
        ),
        "massive_activations": lambda out: plot_massive(
            tables["massive_layer"], tables["massive_top"], out, title
        ),
    }


def summary_figures(
    summary: dict[str, pl.DataFrame], pairs: Sequence[dict[str, pl.DataFrame]], eps: float
) -> dict[str, Draw]:
    """The figures of rule ``summarize_sinks`` (:data:`sinkscope.sinks.names.SUMMARY_FIGURES`)."""
    title = "all pairs"
    top = pl.concat([p["massive_top"] for p in pairs], how="vertical_relaxed")
    return {
        "sink_rate": lambda out: plot_sink_rate_summary(summary["sink_rate"], eps, out, title),
        "secondary_tokens": lambda out: plot_secondary_summary(
            summary["secondary_tokens"], eps, out, title
        ),
        "massive_activations": lambda out: plot_massive(summary["massive_layer"], top, out, title),
    }
