"""Figures of the streaming evaluation (:mod:`sinkscope.streaming`).

Per model x dataset pair (``tables`` = the dict of
:func:`sinkscope.streaming.experiment.evaluate_pair`):

* :func:`plot_nll_by_position` -- log-perplexity (NLL, nats, running mean) vs token position,
  one panel per window size, for dense, window-only, sink and neutral-sink policies;
* :func:`plot_perplexity_vs_window` -- perplexity vs window size ``L``;
* :func:`plot_sink_count` -- the effect of the number ``k`` of kept first tokens;
* :func:`plot_first_position_mass` -- attention mass on the first positions per layer (from
  :func:`sinkscope.streaming.first_positions.first_position_mass`);
* :func:`plot_recompute` -- each cache against sliding window with re-computation, StreamingLLM's
  baseline (the ``recompute`` table).

Across pairs (``tables`` = the dict of :func:`sinkscope.streaming.summary.summarize`):
:func:`plot_summary` (damage of each policy per pair, and single-layer eviction damage vs the
layer's share of sink heads).

Figures are built with :func:`sinkscope.plotting.new_figure` and written with
:func:`sinkscope.plotting.save_figure`.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from sinkscope.plotting import Draw, legend_below, new_figure, save_figure
from sinkscope.streaming.summary import eviction_label, recovered_label
from sinkscope.text import plural

__all__ = [
    "KIND_COLORS",
    "PLOTS",
    "figures",
    "plot_first_position_mass",
    "plot_nll_by_position",
    "plot_perplexity_vs_window",
    "plot_recompute",
    "plot_sink_count",
    "plot_summary",
]

#: Colour per policy kind.
KIND_COLORS: dict[str, str] = {
    "dense": "#000000",
    "window": "#d55e00",
    "sink": "#0072b2",
    "neutral": "#f0e442",
}
KIND_STYLES: dict[str, str] = {"dense": "-", "window": "-", "sink": "-", "neutral": "--"}
KIND_LABELS: dict[str, str] = {
    "dense": "dense",
    "window": "window only",
    "sink": "sink + window",
    "neutral": "neutral sink + window",
}


def _table(tables: Mapping[str, pl.DataFrame] | pl.DataFrame, name: str) -> pl.DataFrame:
    if isinstance(tables, pl.DataFrame):
        return tables
    if name not in tables:
        raise ValueError(f"tables lack {name!r} (have {sorted(tables)})")
    return tables[name]


def _one_pair(table: pl.DataFrame, what: str) -> pl.DataFrame:
    pairs = table.select("model", "dataset").unique()
    if pairs.height != 1:
        raise ValueError(f"{what}: expected one model x dataset pair, got {pairs.height}")
    return table


def _main_positions(table: pl.DataFrame) -> pl.DataFrame:
    """Rows with the position handling of the dense reference (drops the position ablation)."""
    if "positions" not in table.columns:
        return table
    dense = table.filter(pl.col("kind") == "dense")
    if dense.is_empty():
        return table
    return table.filter(pl.col("positions") == dense["positions"][0])


def _main_sink_count(perplexity: pl.DataFrame) -> int | None:
    """The ``k`` of the window sweep: the sink count present at the most window sizes."""
    sinks = perplexity.filter(pl.col("kind") == "sink").select("n_sink", "window").unique()
    if sinks.is_empty():
        return None
    counts = sinks.group_by("n_sink").len().sort(["len", "n_sink"], descending=[True, False])
    return int(counts["n_sink"][0])


def _sweep_window(perplexity: pl.DataFrame) -> int | None:
    """The window of the k sweep: the window with the most distinct sink counts."""
    sinks = perplexity.filter(pl.col("kind") == "sink").select("n_sink", "window").unique()
    if sinks.is_empty():
        return None
    counts = sinks.group_by("window").len().sort(["len", "window"], descending=[True, False])
    return int(counts["window"][0])


def _window_series(table: pl.DataFrame, k0: int | None) -> list[tuple[str, pl.DataFrame, str]]:
    """``(kind, rows sorted by window, legend label)`` for window-only and, with ``k0`` sinks,
    sink and neutral sink: the series drawn against the window size."""
    series = []
    for kind in ("window", "sink", "neutral"):
        rows = table.filter(pl.col("kind") == kind)
        if kind != "window" and k0 is not None:
            rows = rows.filter(pl.col("n_sink") == k0)
        if rows.height:
            label = KIND_LABELS[kind] + (f" (k={k0})" if kind != "window" else "")
            series.append((kind, rows.sort("window"), label))
    return series


def _window_axis(ax, windows: list[int]) -> None:
    """Log2 x axis labelled with the window sizes and grid (window-sweep panels)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(windows)
    ax.set_xticklabels([str(w) for w in windows])
    if windows:  # explicit limits: a panel of all-null series has no data to autoscale on
        ax.set_xlim(min(windows) / 1.25, max(windows) * 1.25)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("window L (most recent tokens kept)")
    ax.grid(alpha=0.3)


def _plain_log_axis(ax) -> None:
    """Log y axis labelled with plain numbers (major and minor ticks)."""
    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(1.5, 2, 3, 5, 7)))
    formatter = FuncFormatter(lambda value, _: f"{value:g}")
    ax.yaxis.set_major_formatter(formatter)
    ax.yaxis.set_minor_formatter(formatter)
    ax.tick_params(axis="y", which="minor", labelsize=7)


def _running_mean(values: np.ndarray, width: int) -> np.ndarray:
    """Trailing running mean (the first points average what is available)."""
    width = max(1, int(width))
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    index = np.arange(1, values.size + 1)
    lo = np.maximum(0, index - width)
    return (cumulative[index] - cumulative[lo]) / (index - lo)


def plot_nll_by_position(
    tables: Mapping[str, pl.DataFrame],
    out_png: str | os.PathLike[str],
    title: str,
    smooth: int = 32,
) -> None:
    """Log-perplexity (mean NLL over streams, trailing running mean of ``smooth`` positions) vs
    the position of the predicted token; one panel per window size ``L`` with dense, window-only,
    sink (``k`` of the window sweep) and neutral sink. The dotted line marks the first eviction
    (``k + L``) of the sink policies, the dashed one that of window-only (``L``)."""
    nll = _main_positions(_one_pair(_table(tables, "nll_by_position"), "nll_by_position"))
    perplexity = _main_positions(_table(tables, "perplexity"))
    k0 = _main_sink_count(perplexity)
    windows = sorted(nll.filter(pl.col("kind") == "window")["window"].unique().to_list())
    if not windows:
        windows = sorted(nll.drop_nulls("window")["window"].unique().to_list())
    if not windows:
        raise ValueError("no evicting policy to plot")
    dense = nll.filter(pl.col("kind") == "dense").sort("position")
    cols = min(2, len(windows))
    rows = math.ceil(len(windows) / cols)
    fig = new_figure(6.0 * cols, 3.6 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False, sharey=True)).ravel()
    for ax in axes[len(windows) :]:
        ax.set_visible(False)
    for ax, window in zip(axes, windows, strict=False):
        lines = [("dense", dense)]
        part = nll.filter(pl.col("window") == window)
        for kind in ("window", "sink", "neutral"):
            chosen = part.filter(pl.col("kind") == kind)
            if kind != "window" and k0 is not None:
                chosen = chosen.filter(pl.col("n_sink") == k0)
            for name in sorted(chosen["policy"].unique().to_list()):
                lines.append((kind, chosen.filter(pl.col("policy") == name).sort("position")))
        for kind, frame in lines:
            k = int(frame["n_sink"][0])
            label = KIND_LABELS[kind] + (f" (k={k})" if kind in ("sink", "neutral") else "")
            ax.plot(
                frame["position"].to_numpy(),
                _running_mean(frame["nll"].to_numpy(), smooth),
                color=KIND_COLORS[kind],
                ls=KIND_STYLES[kind],
                lw=1.3 if kind == "dense" else 1.0,
                label=label,
            )
        ax.axvline(window, color=KIND_COLORS["window"], ls="--", lw=0.8)
        if k0 is not None:
            ax.axvline(window + k0, color=KIND_COLORS["sink"], ls=":", lw=0.8)
        ax.set_title(f"window L = {window}")
        ax.set_xlabel("position of the predicted token")
        ax.set_ylabel(f"NLL (nats), running mean of {smooth}")
        ax.grid(alpha=0.3)
    legend_below(fig, axes[:1], ncols=4, fontsize=8)
    n_streams = _n_streams(tables)
    fig.suptitle(f"{title}{n_streams}")
    save_figure(fig, out_png)


def _n_streams(tables: Mapping[str, pl.DataFrame]) -> str:
    if isinstance(tables, Mapping) and "settings" in tables and tables["settings"].height:
        row = tables["settings"].row(0, named=True)
        return f" ({plural(row['n_streams'], 'stream')} x {row['stream_length']} tokens)"
    return ""


def _region_label(region: str) -> str:
    return {
        "tail": "common tail region",
        "evicting": "each policy's evicting region",
        "all": "all positions",
    }[region]


def plot_perplexity_vs_window(
    tables: Mapping[str, pl.DataFrame], out_png: str | os.PathLike[str], title: str
) -> None:
    """Perplexity vs window size ``L``: left on the common tail region (positions where every
    policy evicts; dense as a horizontal line), right the log-perplexity ratio to dense on each
    policy's own evicting region (positions ``> k + L``)."""
    perplexity = _main_positions(_one_pair(_table(tables, "perplexity"), "perplexity"))
    k0 = _main_sink_count(perplexity)
    fig = new_figure(11.0, 4.2)
    axes = fig.subplots(1, 2)
    for ax, region in zip(axes, ("tail", "evicting"), strict=True):
        part = perplexity.filter(pl.col("region") == region)
        for kind, rows, label in _window_series(part, k0):
            y = rows["ppl"] if region == "tail" else rows["log_ppl_ratio"]
            ax.plot(
                rows["window"].to_numpy(),
                y.to_numpy(),
                marker="o",
                ls=KIND_STYLES[kind],
                color=KIND_COLORS[kind],
                label=label,
            )
        if region == "tail":
            dense = part.filter(pl.col("kind") == "dense")
            if dense.height:
                ax.axhline(dense["ppl"][0], color=KIND_COLORS["dense"], ls="--", label="dense")
                ax.set_title(
                    f"{_region_label(region)} (positions >= {int(dense['first_position'][0])})"
                )
            ax.set_ylabel("perplexity")
            _plain_log_axis(ax)
        else:
            ax.axhline(0.0, color=KIND_COLORS["dense"], ls="--", lw=0.8)
            ax.set_title(_region_label(region))
            ax.set_ylabel("log(ppl / dense ppl) on the same tokens")
        _window_axis(ax, sorted(part.drop_nulls("window")["window"].unique().to_list()))
    legend_below(fig, axes, ncols=4, fontsize=8)
    fig.suptitle(f"{title}{_n_streams(tables)}")
    save_figure(fig, out_png)


def plot_sink_count(
    tables: Mapping[str, pl.DataFrame], out_png: str | os.PathLike[str], title: str
) -> None:
    """The effect of ``k`` at the window of the k sweep: perplexity on the common tail region
    for window-only (k = 0), sink and neutral sink with each ``k``; dense dashed."""
    perplexity = _one_pair(_table(tables, "perplexity"), "perplexity")
    ablation = perplexity.filter(pl.col("region") == "tail")
    perplexity = _main_positions(perplexity)
    ablation = ablation.join(perplexity, on="policy", how="anti")
    window = _sweep_window(perplexity)
    if window is None:
        raise ValueError("no sink policies to plot")
    part = perplexity.filter(pl.col("region") == "tail")
    at_window = part.filter(pl.col("window") == window)
    fig = new_figure(6.5, 4.2)
    ax = fig.subplots()
    base = at_window.filter(pl.col("kind") == "window")
    for kind in ("sink", "neutral"):
        rows = at_window.filter(pl.col("kind") == kind).sort("n_sink")
        if rows.is_empty():
            continue
        ks = rows["n_sink"].to_list()
        ys = rows["ppl"].to_list()
        if base.height:
            ks, ys = [0, *ks], [base["ppl"][0], *ys]
        ax.plot(
            ks,
            ys,
            marker="o",
            ls=KIND_STYLES[kind],
            color=KIND_COLORS[kind],
            label=KIND_LABELS[kind],
        )
    if base.height:
        ax.scatter(
            [0],
            [base["ppl"][0]],
            color=KIND_COLORS["window"],
            zorder=3,
            label="window only (k = 0)",
        )
    for row in ablation.filter(pl.col("window") == window).iter_rows(named=True):
        ax.scatter(
            [row["n_sink"]],
            [row["ppl"]],
            marker="x",
            s=50,
            color=KIND_COLORS[row["kind"]],
            zorder=3,
            label=f"{KIND_LABELS[row['kind']]}, {row['positions']} positions",
        )
    dense = part.filter(pl.col("kind") == "dense")
    if dense.height:
        ax.axhline(dense["ppl"][0], color=KIND_COLORS["dense"], ls="--", label="dense")
    ax.set_xscale("symlog", base=2, linthresh=1)
    ticks = sorted({0, *at_window["n_sink"].to_list()})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    _plain_log_axis(ax)
    ax.set_xlabel("k = first tokens kept (sinks)")
    ax.set_ylabel("perplexity")
    first = int(part["first_position"][0]) if part.height else 0
    ax.set_title(f"window L = {window}; positions >= {first}", fontsize=10)
    ax.grid(alpha=0.3)
    legend_below(fig, [ax], ncols=2, fontsize=8)
    fig.suptitle(f"{title}{_n_streams(tables)}")
    save_figure(fig, out_png)


#: Least height in inches of :func:`plot_first_position_mass` (0.22 in per layer above it): with
#: a few layers the colour bar's label still fits beside the heatmap, under the title.
MIN_MASS_HEIGHT = 4.2


def plot_first_position_mass(
    tables: Mapping[str, pl.DataFrame] | pl.DataFrame,
    out_png: str | os.PathLike[str],
    title: str,
) -> None:
    """Heatmap of the attention mass on each of the first key positions (layers top to bottom,
    mean over sequences, heads and queries), and the cumulative mass on the first ``k``; 0.22 in
    a layer, at least :data:`MIN_MASS_HEIGHT` high."""
    table = _table(tables, "first_position_mass").sort("layer", "key_position")
    layers = sorted(table["layer"].unique().to_list())
    positions = sorted(table["key_position"].unique().to_list())
    grid = table["mass"].to_numpy().reshape(len(layers), len(positions))
    cumulative = table["cumulative_mass"].to_numpy().reshape(len(layers), len(positions))
    fig = new_figure(11.0, max(MIN_MASS_HEIGHT, 0.22 * len(layers) + 2.5))
    axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
    sns.heatmap(
        grid,
        ax=axes[0],
        vmin=0.0,
        vmax=1.0,
        cmap="viridis",
        xticklabels=[str(p) for p in positions],
        yticklabels=[str(layer) for layer in layers],
        cbar_kws={"label": "attention mass (mean over heads and queries)"},
    )
    axes[0].set_xlabel("key position (0 = BOS)")
    axes[0].set_ylabel("layer")
    axes[0].set_title("mass on each first position")
    for k in sorted({1, 2, 4, len(positions)}):
        if k <= len(positions):
            axes[1].plot(cumulative[:, k - 1], layers, marker=".", label=f"first {k}")
    axes[1].set_yticks(layers[:: max(1, len(layers) // 15)])
    axes[1].set_ylim(layers[-1] + 0.5, layers[0] - 0.5)
    axes[1].set_xlim(0, 1)
    axes[1].set_xlabel("attention mass on the first k positions")
    axes[1].set_ylabel("layer")
    axes[1].grid(alpha=0.3)
    legend_below(fig, axes[1:], ncols=4, fontsize=8)
    n_queries = int(table["n_queries"][0]) if "n_queries" in table.columns else None
    suffix = f" (queries at positions >= {len(positions)}, {n_queries} per sequence)"
    fig.suptitle(title + (suffix if n_queries else ""))
    save_figure(fig, out_png)


def plot_summary(
    tables: Mapping[str, pl.DataFrame], out_png: str | os.PathLike[str], title: str
) -> None:
    """Across pairs. Left: log-perplexity ratio to dense on each policy's evicting region, for
    window-only and sink at the smallest window, per pair. Right (when ``layers`` is non-empty):
    the damage of window-only eviction in a single layer vs that layer's share of sink heads,
    one colour per model, with the pooled Spearman rho."""
    perplexity = _main_positions(_table(tables, "perplexity")).filter(
        pl.col("region") == "evicting"
    )
    layers = tables.get("layers") if isinstance(tables, Mapping) else None
    has_layers = layers is not None and layers.height > 0
    fig = new_figure(13.0 if has_layers else 7.5, 5.6)
    axes = np.atleast_1d(fig.subplots(1, 2 if has_layers else 1))
    evicting = perplexity.filter(pl.col("kind").is_in(["window", "sink", "neutral"]))
    smallest = evicting["window"].min()
    k0 = _main_sink_count(perplexity)
    rows = evicting.filter(pl.col("window") == smallest)
    if k0 is not None:
        rows = rows.filter((pl.col("kind") == "window") | (pl.col("n_sink") == k0))
    rows = rows.with_columns(
        pair=pl.col("model") + " · " + pl.col("dataset"),
        what=pl.col("kind").replace_strict(KIND_LABELS, default=pl.col("kind")),
    ).sort("model", "dataset")
    kinds = [k for k in ("window", "sink", "neutral") if k in rows["kind"].to_list()]
    pairs = rows["pair"].unique(maintain_order=True).to_list()
    width = 0.8 / max(1, len(kinds))
    ax = axes[0]
    for index, kind in enumerate(kinds):
        part = rows.filter(pl.col("kind") == kind)
        lookup = dict(zip(part["pair"], part["log_ppl_ratio"], strict=True))
        xs = np.arange(len(pairs)) + (index - (len(kinds) - 1) / 2) * width
        bars = ax.bar(
            xs,
            [lookup.get(p, np.nan) for p in pairs],
            width,
            color=KIND_COLORS[kind],
            edgecolor="black",
            linewidth=0.5,
            label=KIND_LABELS[kind] + (f" (k={k0})" if kind != "window" else ""),
        )
        if kind == "window":  # the perplexity factor of claim streaming.eviction_hurts
            ax.bar_label(
                bars,
                labels=[eviction_label(lookup.get(p, np.nan)) for p in pairs],
                fontsize=7,
                padding=2,
                rotation=90,
            )
    ax.margins(y=0.2)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(np.arange(len(pairs)))
    ax.set_xticklabels(pairs, rotation=90, fontsize=8)
    ax.set_ylabel("log(ppl / dense ppl),\nevicting region")
    ax.set_title(f"window L = {smallest}\nlabels: window-only perplexity / dense perplexity")
    ax.grid(axis="y", alpha=0.3)
    if has_layers:
        ax = axes[1]
        palette = sns.color_palette("tab10")
        for index, model in enumerate(sorted(layers["model"].unique().to_list())):
            part = layers.filter(pl.col("model") == model)
            ax.scatter(
                part["frac_sink_heads"],
                part["log_ppl_ratio"],
                s=14,
                alpha=0.7,
                color=palette[index % 10],
                label=model,
            )
        correlations = tables.get("correlations")
        note = ""
        if correlations is not None and correlations.height:
            pooled = correlations.filter(
                (pl.col("level") == "layer")
                & (pl.col("scope") == "all pairs")
                & (pl.col("predictor") == "frac_sink_heads")
            )
            if pooled.height:
                r = pooled.row(0, named=True)
                note = f"pooled Spearman rho = {r['spearman_rho']:.2f} (n = {r['n']})"
        ax.set_xlabel("share of sink heads in the layer")
        ax.set_ylabel("log(ppl / dense ppl)\nwhen only this layer evicts")
        window = int(layers["window"][0])
        ax.set_title(f"single-layer window-only eviction, L = {window}\n{note}", fontsize=10)
        ax.grid(alpha=0.3)
    legend_below(fig, axes, ncols=5, fontsize=8)
    fig.suptitle(title)
    save_figure(fig, out_png)


#: Column titles of :func:`plot_recompute`, per baseline of
#: :data:`sinkscope.streaming.recompute.RECOMPUTE_BASELINES`.
RECOMPUTE_TITLES = {
    "recompute_bos": "re-computation of [BOS] + window",
    "recompute": "re-computation of the window alone (StreamingLLM)",
}


def plot_recompute(
    tables: Mapping[str, pl.DataFrame], out_png: str | os.PathLike[str], title: str
) -> None:
    """Each cache against sliding window with re-computation (StreamingLLM's baseline: the last
    ``L`` tokens re-encoded from scratch for every token), on the same sampled tokens, vs window
    size ``L``; one column per baseline (with the BOS token in front, without). Top: log-perplexity
    ratio to the baseline, error bars = 2 standard errors of the paired mean; bottom: the fraction
    of the window-only excess that each cache with the main ``k`` recovers (1 = as good as
    re-computation, 0 = window only). Without any baseline (an empty table) the figure says so."""
    table = _table(tables, "recompute")
    if not table.is_empty():  # no baseline at all: no pair either, the figure says so
        table = _one_pair(table, "recompute")
    baselines = [b for b in RECOMPUTE_TITLES if b in set(table["baseline"].to_list())]
    fig = new_figure(5.2 * max(1, len(baselines)), 7.4)
    if table.is_empty():
        ax = fig.subplots(1, 1)
        ax.text(0.5, 0.5, "no re-computation baseline in this run", ha="center")
        ax.set_axis_off()
        fig.suptitle(title)
        save_figure(fig, out_png)
        return
    grid = fig.subplots(2, len(baselines), squeeze=False, sharex=True)
    k0 = _main_sink_count(table)
    windows = sorted(table["window"].unique().to_list())
    for column, baseline in enumerate(baselines):
        top, bottom = grid[0, column], grid[1, column]
        rows_of_baseline = table.filter(pl.col("baseline") == baseline)
        for kind, rows, label in _window_series(rows_of_baseline, k0):
            x = rows["window"].to_numpy()
            top.errorbar(
                x,
                rows["policy_vs_recompute"].to_numpy(),
                yerr=2 * rows["policy_vs_recompute_se"].fill_null(0.0).to_numpy(),
                marker="o",
                ls=KIND_STYLES[kind],
                color=KIND_COLORS[kind],
                capsize=3,
                label=label,
            )
            if kind != "window":
                fraction = rows["recovered_fraction"].cast(pl.Float64).to_numpy()
                bottom.plot(
                    x, fraction, marker="o", ls=KIND_STYLES[kind], color=KIND_COLORS[kind],
                    label=label,
                )  # fmt: skip
            if kind == "sink":  # the numbers of claim streaming.sinks_restore (k = k0)
                for xi, value in zip(x, rows["recovered_fraction"].to_list(), strict=True):
                    if recovered_label(value):
                        bottom.annotate(
                            recovered_label(value),
                            (xi, value),
                            xytext=(0, 7),
                            textcoords="offset points",
                            ha="center",
                            fontsize=7,
                            color=KIND_COLORS[kind],
                        )
        top.axhline(0.0, color="0.3", ls=":", lw=1.0, label="re-computation")
        top.set_title(RECOMPUTE_TITLES[baseline], fontsize=10)
        bottom.axhline(1.0, color="0.3", ls=":", lw=1.0)
        bottom.axhline(0.0, color=KIND_COLORS["window"], ls=":", lw=1.0)
        recovered = rows_of_baseline.filter(pl.col("kind") != "window")["recovered_fraction"]
        if recovered.drop_nulls().is_empty():
            bottom.text(
                0.5,
                0.5,
                "re-computation is not better than window-only:\n"
                "no excess to recover (the baseline is out of regime)",
                ha="center",
                va="center",
                transform=bottom.transAxes,
                fontsize=9,
            )
        for ax in (top, bottom):
            _window_axis(ax, windows)
    grid[0, 0].set_ylabel("log(ppl / re-computation ppl),\nsame tokens")
    grid[1, 0].set_ylabel("recovered fraction of the window-only excess\n(1 = re-computation)")
    legend_below(fig, grid, ncols=4, fontsize=8)
    n = int(table["n_tokens"].max())
    fig.suptitle(f"{title}: caches vs sliding window with re-computation ({n} sampled tokens)")
    save_figure(fig, out_png)


#: The drawing function of every figure of the stage, by its name in
#: :mod:`sinkscope.streaming.names` (per pair by rule, and the summary's).
PLOTS: dict[str, Callable[[Mapping[str, pl.DataFrame], str | os.PathLike[str], str], None]] = {
    "nll_by_position": plot_nll_by_position,
    "perplexity_vs_window": plot_perplexity_vs_window,
    "sink_count": plot_sink_count,
    "recompute": plot_recompute,
    "first_position_mass": plot_first_position_mass,
    "eviction_damage": plot_summary,
}


def figures(
    names: tuple[str, ...], tables: Mapping[str, pl.DataFrame], title: str
) -> dict[str, Draw]:
    """The figures ``names`` of one rule (``POLICY_FIGURES``, ``RECOMPUTE_FIGURES``,
    ``FIRST_POSITION_FIGURES`` or ``SUMMARY_FIGURES`` of :mod:`sinkscope.streaming.names`) drawn
    from the rule's ``tables`` with ``title``."""
    return {name: functools.partial(PLOTS[name], tables, title=title) for name in names}
