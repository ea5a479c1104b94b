"""Figures of :mod:`sinkscope.dynamics` (value-softmax dynamics, induction, classification).

Every function takes the ``tables`` dict of the matching ``summarize_*`` function and the output
PNG path, builds its figure with :func:`sinkscope.plotting.new_figure` and writes it with
:func:`sinkscope.plotting.save_figure`. Trajectory figures show seed 0 (the smallest seed present).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from sinkscope.dynamics.grids import NO_SWITCH
from sinkscope.dynamics.induction import OFF_THRESHOLD, loss_floor
from sinkscope.dynamics.names import FIGURES, IDLE_ROWS, INDUCTION_ROWS
from sinkscope.dynamics.summary import flip_rate_trend
from sinkscope.plotting import Draw, legend_below, new_figure, save_figure

__all__ = [
    "PLOTS",
    "figures",
    "flip_trend_statement",
    "plot_classification_attention",
    "plot_classification_flips",
    "plot_classification_flips_by_size",
    "plot_induction_accuracy",
    "plot_induction_curves",
    "plot_induction_patterns",
    "plot_induction_sinks",
    "plot_induction_switches",
    "plot_vs_activations",
    "plot_vs_losses",
    "plot_vs_polarization",
    "plot_vs_regression",
    "plot_vs_tied",
    "polarized_statement",
    "unlearned_label",
]

PathLike = str | os.PathLike[str]
#: The colour of the switch figure's heads (one series: the fill tells the rows apart).
SWITCH_COLOR = "#3b528b"
Plot = Callable[[dict[str, pl.DataFrame], PathLike], None]


# --------------------------------------------------------------------------- value-softmax


class MissingRuns(ValueError):
    """The config's grid holds no run of the kind a figure shows."""


def _or_placeholder(plot: Plot) -> Plot:
    """``plot``, or a figure saying which runs are missing when the config selected none."""

    @functools.wraps(plot)
    def wrapped(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
        try:
            plot(tables, out_png)
        except MissingRuns as error:
            fig = new_figure(6.0, 2.0)
            fig.text(0.5, 0.5, f"not run in this config:\n{error}", ha="center", va="center")
            save_figure(fig, out_png)

    return wrapped


def _runs(tables: dict[str, pl.DataFrame], **match) -> pl.DataFrame:
    """Final rows matching ``match`` at the smallest seed, sorted by run id."""
    final = tables["final"]
    for key, value in match.items():
        final = final.filter(pl.col(key) == value)
    if final.is_empty():
        raise MissingRuns(f"no value-softmax run with {match}")
    return final.filter(pl.col("seed") == final["seed"].min()).sort("run_id")


#: The columns ``summarize_value_softmax`` groups ``by_variant`` by (one row per setting).
_VARIANT_KEYS = ("experiment", "loss", "activation", "n", "d", "kappa", "target", "kl_sharpness")


def polarized_statement(tables: dict[str, pl.DataFrame], run: dict) -> str:
    """``polarized 60.0% of 5 runs``: the share of seeds of ``run``'s setting whose top weight
    ends >= 0.9, read from ``by_variant`` (the row the ``dynamics.*_polarizes`` /
    ``*_no_polarization`` claims state, in their format); empty without ``by_variant``."""
    by = tables.get("by_variant")
    if by is None:
        return ""
    for key in _VARIANT_KEYS:
        if key in by.columns:
            by = by.filter(pl.col(key).eq_missing(run.get(key)))
    if by.height != 1:
        raise ValueError(f"by_variant has {by.height} rows for run {run.get('run_id')!r}")
    row = by.row(0, named=True)
    return f"polarized {100 * row['polarized_share']:.1f}% of {row['runs']} runs"


def _traj(tables: dict[str, pl.DataFrame], run_id: str) -> pl.DataFrame:
    return tables["trajectory"].filter(pl.col("run_id") == run_id).sort("step", "entry")


def _scal(tables: dict[str, pl.DataFrame], run_id: str) -> pl.DataFrame:
    return tables["scalars"].filter(pl.col("run_id") == run_id).sort("step")


def _lines(ax, traj: pl.DataFrame, column: str) -> None:
    traj = traj.filter(pl.col("step") > 0)
    entries = sorted(set(traj["entry"].to_list()))
    colors = sns.color_palette("tab10", max(len(entries), 3))
    for k, e in enumerate(entries):
        part = traj.filter(pl.col("entry") == e)
        ax.plot(part["time"], part[column], color=colors[k % 10], lw=1.2, label=f"i={e}")
    ax.set_xscale("log")
    ax.set_xlabel("gradient-flow time (lr x step)")


def plot_vs_polarization(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figure 2: untied softmax model, logistic loss - sigma(a), value projections u and the
    entropy / ||V|| / loss over time."""
    row = _runs(tables, experiment="untied", loss="logistic", activation="softmax").row(
        0, named=True
    )
    traj, scal = _traj(tables, row["run_id"]), _scal(tables, row["run_id"])
    fig = new_figure(14.0, 4.6)
    ax1, ax2, ax3 = fig.subplots(1, 3)
    _lines(ax1, traj, "weight")
    ax1.set_ylabel("attention score sigma(a)_i")
    ax1.set_ylim(-0.02, 1.02)
    _lines(ax2, traj, "value_proj")
    ax2.set_ylabel("value projection u_i = <w, v_i>")
    s = scal.filter(pl.col("step") > 0)
    # black line styles: the shared legend keeps them apart from the colours of the entries i
    ax3.plot(s["time"], s["entropy"], color="k", ls="-", label="entropy of sigma(a)")
    ax3.plot(s["time"], s["v_norm"], color="k", ls="--", label="||V||_F")
    ax3.plot(s["time"], s["loss_value"], color="k", ls=":", label="loss")
    ax3.set_ylabel("entropy, ||V||_F, loss")
    ax3.set_xscale("log")
    ax3.set_yscale("log")
    ax3.set_xlabel("gradient-flow time (lr x step)")
    legend_below(fig, [ax1, ax3], ncols=8, fontsize=7)
    fig.suptitle(
        f"Value-softmax, logistic loss (n={row['n']}, d={row['d']}, seed {row['seed']}): "
        f"final top weight {row['top_weight']:.3f}, order of u kept for "
        f"{row['order_preserved']:.0%} of pairs; all seeds: {polarized_statement(tables, row)}"
    )
    save_figure(fig, out_png)


@_or_placeholder
def plot_vs_losses(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figure 10 and the loss comparison: sigma(a) and u over time per loss (untied softmax)."""
    runs = _runs(tables, experiment="untied", activation="softmax")
    fig = new_figure(10.0, 2.6 * runs.height)
    axes = np.atleast_2d(fig.subplots(runs.height, 2, squeeze=False))
    for r, row in enumerate(runs.iter_rows(named=True)):
        traj = _traj(tables, row["run_id"])
        _lines(axes[r, 0], traj, "weight")
        _lines(axes[r, 1], traj, "value_proj")
        label = row["loss"]
        if row["loss"] == "square":
            label += f" (y={row['target']:g})"
        if row["loss"] == "kl":
            label += f" (target sharpness {row['kl_sharpness']:g})"
        axes[r, 0].set_ylabel(f"{label}\nsigma(a)_i")
        axes[r, 0].set_ylim(-0.02, 1.02)
        axes[r, 1].set_ylabel("u_i")
        axes[r, 0].set_title(
            f"entropy {row['entropy']:.2f} / {row['max_entropy']:.2f}, top {row['top_weight']:.2f}",
            fontsize=9,
        )
    fig.suptitle("Value-softmax model per loss (untied, softmax)")
    save_figure(fig, out_png)


@_or_placeholder
def plot_vs_activations(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figure 13: weights ``|phi_i| / sum |phi|`` over time, rows square / logistic loss,
    columns softmax / sum / sigmoid."""
    acts = ["softmax", "sum", "sigmoid"]
    losses = ["square", "logistic"]
    fig = new_figure(13.0, 6.5)
    axes = fig.subplots(len(losses), len(acts), squeeze=False, sharey=True)
    for r, loss in enumerate(losses):
        for c, act in enumerate(acts):
            match = {"experiment": "untied", "loss": loss, "activation": act}
            if loss == "square":
                match["target"] = 1.0
            row = _runs(tables, **match).row(0, named=True)
            _lines(axes[r, c], _traj(tables, row["run_id"]), "weight")
            axes[r, c].set_title(
                f"{loss} / {act}: entropy {row['entropy']:.2f}, top {row['top_weight']:.2f}\n"
                f"all seeds: {polarized_statement(tables, row)}",
                fontsize=9,
            )
            axes[r, c].set_ylim(-0.02, 1.02)
        axes[r, 0].set_ylabel("|phi_i| / sum |phi|")
    fig.suptitle("Activation variants (sum: phi(a)=a, sigmoid: elementwise, unnormalised)")
    save_figure(fig, out_png)


@_or_placeholder
def plot_vs_tied(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figure 11: tied model ``U softmax(U a)``, logistic loss: top weight, entropy and
    ``||U^(m)||`` over time for each D."""
    runs = _runs(tables, experiment="tied").sort("n")
    fig = new_figure(13.0, 4.5)
    axes = fig.subplots(1, 3)
    colors = sns.color_palette("viridis", runs.height)
    for k, row in enumerate(runs.iter_rows(named=True)):
        s = _scal(tables, row["run_id"]).filter(pl.col("step") > 0)
        for ax, col in zip(axes, ("top_weight", "entropy", "top_value_norm"), strict=True):
            ax.plot(s["time"], s[col], color=colors[k], label=f"D={row['n']}")
    for ax, label in zip(
        axes,
        ("max_i softmax(Ua)_i", "entropy of softmax(Ua)", "||U^(m)|| (column at top)"),
        strict=True,
    ):
        ax.set_xscale("log")
        ax.set_xlabel("gradient-flow time")
        ax.set_ylabel(label)
    legend_below(fig, axes[:1], ncols=8, fontsize=7)
    fig.suptitle("Tied value-softmax model U softmax(U a), logistic loss")
    save_figure(fig, out_png)


@_or_placeholder
def plot_vs_regression(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figures 3 and 12: logits ``a`` over time for every kappa, plus final entropy vs kappa
    (all seeds)."""
    runs = _runs(tables, experiment="regression").sort("kappa")
    # at most 6 panels per row (the figure stays within plotting.MAX_FIGURE_PIXELS)
    cols = min(runs.height + 1, 6)
    rows = math.ceil((runs.height + 1) / cols)
    fig = new_figure(3.2 * cols, 3.6 * rows + 0.5)
    grid = fig.subplots(rows, cols, squeeze=False)
    for extra in grid.ravel()[runs.height + 1 :]:
        extra.set_visible(False)
    axes = list(grid.ravel()[: runs.height + 1])
    for ax, row in zip(axes, runs.iter_rows(named=True), strict=False):
        _lines(ax, _traj(tables, row["run_id"]), "logit")
        ax.set_title(f"kappa={row['kappa']:g}: entropy {row['entropy']:.2f}", fontsize=9)
        ax.set_ylabel("logit a_i")
    allk = tables["final"].filter(pl.col("experiment") == "regression").sort("kappa")
    ax = axes[-1]
    for seed in sorted(set(allk["seed"].to_list())):
        part = allk.filter(pl.col("seed") == seed)
        ax.plot(part["kappa"], part["entropy"], marker="o", label=f"seed {seed}")
    ax.set_xlabel("condition number kappa")
    ax.set_ylabel("final entropy of softmax(a)")
    legend_below(fig, [axes[0], ax], ncols=10, fontsize=7)
    fig.suptitle("Regression with condition number kappa: logits over time")
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- induction


def unlearned_label(runs: int, learned_runs: int) -> str:
    """The line a grid cell adds under its value when a run of its setup did not learn: of
    several seeds, how many did not ("1/3 not learned": the other two did); "" when all did."""
    if learned_runs >= runs:
        return ""
    share = f"{runs - learned_runs}/{runs} " if runs > 1 else ""
    return f"\n{share}not\nlearned"


def _seeds_words(by_setup: pl.DataFrame) -> str:
    """How many seeds the grid's setups ran, in words: "1 seed", "2 seeds per setup", "1-3
    seeds per setup" (the ``runs`` column of the by-setup table)."""
    runs = by_setup["runs"].to_list()
    low, high = (min(runs), max(runs)) if runs else (0, 0)
    if high <= 1:
        return "1 seed"
    count = f"{low}" if low == high else f"{low}-{high}"
    return f"{count} seeds per setup"


def _red_box_words(by_setup: pl.DataFrame) -> str:
    """What a red box means in this grid: a run did not learn; with several seeds, the cell
    says how many of them did not."""
    several = bool(by_setup.height) and max(by_setup["runs"].to_list()) > 1
    where = ", the cell says how many of its seeds" if several else ""
    return f"red box: a run did not learn, accuracy < 0.5{where}"


def _grid_panels(
    tables: dict[str, pl.DataFrame],
    column: str,
    out_png: PathLike,
    title: str,
    fmt: str,
    spread: tuple[str, str] | None = None,
) -> None:
    """Heatmaps of ``column`` per attention function x PE, one panel per weight decay; with
    ``spread`` (the min and max columns over a setup's seeds), a setup of several seeds shows
    their range under its mean."""
    by = tables["by_setup"]
    variants = sorted(set(by["variant"].to_list()), key=lambda v: (v != "softmax", v))
    pes = [p for p in ("none", "absolute", "rope") if p in set(by["positional"].to_list())]
    wds = sorted(set(by["weight_decay"].to_list()))
    # one row per weight decay: the full grid (16 attention functions) fits the width of a page
    fig = new_figure(max(8.0, 2.5 + 0.75 * len(variants)), (1.3 + 0.8 * len(pes)) * len(wds) + 1.6)
    axes = np.atleast_1d(fig.subplots(len(wds), 1, squeeze=False)[:, 0])
    for ax, wd in zip(axes, wds, strict=True):
        part = by.filter(pl.col("weight_decay") == wd)
        grid = np.full((len(pes), len(variants)), np.nan)
        failed = np.zeros_like(grid, dtype=bool)
        ranges = np.full(grid.shape, "", dtype=object)
        unlearned = np.full(grid.shape, "", dtype=object)
        for row in part.iter_rows(named=True):
            i, j = pes.index(row["positional"]), variants.index(row["variant"])
            grid[i, j] = row[column]
            failed[i, j] = row["learned_runs"] < row["runs"]
            if spread is not None and row["runs"] > 1 and row.get(spread[0]) is not None:
                low, high = row[spread[0]], row[spread[1]]
                ranges[i, j] = f"\n{format(low, fmt)}-{format(high, fmt)}"
            unlearned[i, j] = unlearned_label(row["runs"], row["learned_runs"])
        labels = np.vectorize(lambda v: "" if np.isnan(v) else format(v, fmt))(grid).astype(object)
        labels = labels + ranges + unlearned
        sns.heatmap(
            grid,
            ax=ax,
            vmin=0.0,
            vmax=1.0,
            cmap="viridis",
            annot=labels,
            fmt="",
            annot_kws={"fontsize": 8},
            cbar=ax is axes[-1],
            xticklabels=variants if ax is axes[-1] else False,
            yticklabels=pes,
        )
        for i, j in zip(*np.nonzero(failed), strict=True):
            ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor="red", lw=2.5))
        ax.set_title(f"lambda = {wd:g}")
        ax.set_xlabel("attention function" if ax is axes[-1] else "")
        ax.set_ylabel("positional encoding")
        ax.tick_params(axis="x", labelrotation=90)
    fig.suptitle(f"{title} ({_seeds_words(by)}; {_red_box_words(by)})")
    save_figure(fig, out_png)


def plot_induction_sinks(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figures 4, 14, 15: share of layer-2 sink heads per attention function x PE, one panel per
    weight decay, failed setups crossed out."""
    _grid_panels(
        tables,
        "sink_proportion_mean",
        out_png,
        "Share of sink heads in layer 2 (mean over seeds; below it their range)",
        ".2f",
        spread=("sink_proportion_min", "sink_proportion_max"),
    )


def plot_induction_accuracy(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figures 16, 17: mean induction accuracy per attention function x PE per weight decay."""
    _grid_panels(tables, "accuracy_mean", out_png, "Induction accuracy", ".2f")


#: Panels per row of :func:`plot_induction_patterns` (the full scale draws 11 heads).
PATTERN_COLUMNS = 6


def plot_induction_patterns(
    tables: dict[str, pl.DataFrame], out_png: PathLike, kind: str = "example"
) -> None:
    """Figure 1: layer-2 attention (rows as distributions ``|A| / row sum``; ``kind="example"``:
    evaluation sequence 0, ``"mean"``: mean over evaluation sequences) of one head per
    attention function: softmax and the *unnormalised* variants, at the smallest seed, the
    largest weight decay and the first positional encoding among rope / absolute / none present.
    The head shown is the layer-2 head with the largest sink mass (the strongest sink candidate).
    """
    final = tables["final"]
    pe = next(p for p in ("rope", "absolute", "none") if p in set(final["positional"].to_list()))
    wd = final["weight_decay"].max()
    pick = final.filter(
        (pl.col("positional") == pe)
        & (pl.col("weight_decay") == wd)
        & ((pl.col("attention") == "softmax") | ~pl.col("normalize"))
    )
    pick = pick.filter(pl.col("seed") == pick["seed"].min())
    order = ["softmax", "sigmoid", "elu", "elu_elu", "mlp", "linear"]
    rows = sorted(
        pick.iter_rows(named=True),
        key=lambda r: (order.index(r["attention"]), r["variant"] != "softmax", r["variant"]),
    )
    cols = min(len(rows), PATTERN_COLUMNS)
    n_rows = -(-len(rows) // cols)
    fig = new_figure(max(6.0, 2.8 * cols), 3.6 * n_rows + 0.4)
    axes = fig.subplots(n_rows, cols, squeeze=False).ravel()
    for ax in axes[len(rows) :]:
        ax.set_visible(False)
    heads = tables["heads"]
    for ax, row in zip(axes, rows, strict=False):
        h2 = heads.filter((pl.col("run_id") == row["run_id"]) & (pl.col("layer") == 2))
        best = h2.sort("sink_mass", descending=True).row(0, named=True)
        pat = tables["pattern"].filter(
            (pl.col("run_id") == row["run_id"]) & (pl.col("head") == best["head"])
        )
        if "kind" in pat.columns:
            pat = pat.filter(pl.col("kind") == kind)
        T = int(pat["query"].max()) + 1
        mat = np.zeros((T, T))
        mat[pat["query"].to_numpy(), pat["key"].to_numpy()] = pat["weight"].to_numpy()
        sns.heatmap(mat, ax=ax, vmin=0, vmax=1, cmap="Blues", cbar=False, square=True)
        ax.set_title(
            f"{row['variant']}\nhead {best['head']}, sink mass {best['sink_mass']:.2f}, "
            f"acc {row['accuracy']:.2f}",
            fontsize=8,
        )
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.tick_params(labelsize=6)
    what = "eval sequence 0" if kind == "example" else "mean over eval sequences"
    fig.suptitle(f"Layer-2 attention ({what}), PE={pe}, lambda={wd:g}")
    save_figure(fig, out_png)


def plot_induction_curves(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Training curves (train loss per logged step) of every run, one panel per PE x lambda
    (shared axes), coloured by attention variant; runs that did not learn are dashed; the dotted
    line is the task's loss floor (:func:`.induction.loss_floor`)."""
    final = tables["final"]
    curve = tables["curve"].filter(pl.col("eval_accuracy").is_null())
    pes = [p for p in ("none", "absolute", "rope") if p in set(final["positional"].to_list())]
    wds = sorted(set(final["weight_decay"].to_list()))
    variants = sorted(set(final["variant"].to_list()), key=lambda v: (v != "softmax", v))
    colors = dict(zip(variants, sns.color_palette("tab20", len(variants)), strict=True))
    fig = new_figure(5.0 * len(wds) + 2.0, 3.2 * len(pes))
    axes = fig.subplots(len(pes), len(wds), squeeze=False, sharex=True, sharey=True)
    for i, pe in enumerate(pes):
        for j, wd in enumerate(wds):
            ax = axes[i, j]
            part = final.filter((pl.col("positional") == pe) & (pl.col("weight_decay") == wd))
            floors = {
                loss_floor(r["vocab"], r["seq_len"], r["loss_positions"])
                for r in part.iter_rows(named=True)
            }
            for floor in sorted(floors):
                ax.axhline(floor, color="grey", ls=":", lw=1.0, label="loss floor of the task")
            for row in part.iter_rows(named=True):
                c = curve.filter(pl.col("run_id") == row["run_id"])
                ax.plot(
                    c["step"],
                    c["train_loss"],
                    color=colors[row["variant"]],
                    ls="-" if row["learned"] else "--",
                    lw=1.0,
                    label=row["variant"],
                )
            ax.set_title(f"PE={pe}, lambda={wd:g}", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel("train loss")
    seen: dict[str, object] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    fig.legend(
        list(seen.values()), list(seen), loc="outside right upper", fontsize=7, frameon=False
    )
    fig.suptitle("Induction training curves (dashed: did not learn)")
    save_figure(fig, out_png)


@_or_placeholder
def plot_induction_switches(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Every softmax head's switch side by side. One panel per variant (softmax
    without a switch first, then each switch of :mod:`.switches`) and row per (positional
    encoding, weight decay) with a switch run; each layer-2 head of each seed is a point at its
    mean BOS mass (x) and mean switch mass (y): filled on the first-half rows (nothing to copy),
    hollow on the induction rows. Points on or above the dotted line ``x + y = OFF_THRESHOLD``
    are heads that most rows turn off (BOS plus switch); a switch that replaces the sink moves
    the filled points from the lower right (BOS) to the upper left (switch)."""
    switches, final = tables["switches"], tables["final"]
    switched = final.filter(pl.col("switch") != NO_SWITCH)
    if switched.is_empty():
        raise MissingRuns("no induction run with another switch (dynamics.induction.select)")
    setups = switched.select("positional", "weight_decay").unique().sort(pl.all())
    variants = sorted(
        set(final.filter(pl.col("attention") == "softmax")["variant"].to_list()),
        key=lambda v: (v != "softmax", v),
    )
    fig = new_figure(1.0 + 2.3 * len(variants), 0.8 + 2.4 * setups.height)
    axes = fig.subplots(setups.height, len(variants), squeeze=False, sharex=True, sharey=True)
    for i, setup in enumerate(setups.iter_rows(named=True)):
        for j, variant in enumerate(variants):
            ax = axes[i, j]
            runs = final.filter(
                (pl.col("variant") == variant)
                & (pl.col("positional") == setup["positional"])
                & (pl.col("weight_decay") == setup["weight_decay"])
            )
            ax.plot([0, OFF_THRESHOLD], [OFF_THRESHOLD, 0], ls=":", color="0.5", lw=1)
            ax.plot([0, 1], [1, 0], ls="-", color="0.85", lw=1)
            if runs.is_empty():
                ax.set_title(f"{variant}\nnot run", fontsize=8)
                continue
            last = int(runs["n_layers"].max())
            heads = switches.filter(
                pl.col("run_id").is_in(runs["run_id"].implode()) & (pl.col("layer") == last)
            )
            for rows, filled in ((IDLE_ROWS, True), (INDUCTION_ROWS, False)):
                part = heads.filter(pl.col("rows") == rows)
                ax.scatter(
                    part["bos_mass"],
                    part["switch_mass"],
                    s=22,
                    marker="o",
                    facecolors=SWITCH_COLOR if filled else "none",
                    edgecolors=SWITCH_COLOR,
                    linewidths=1.0,
                    label="first-half rows" if filled else "induction rows",
                )
            learned = int(runs["learned"].sum())
            title = (
                f"{variant}\nacc {runs['accuracy'].mean():.2f}, "
                f"sink heads {runs['sink_proportion'].mean():.2f}"
            )
            if learned < runs.height:
                title += f"\nnot learned ({learned}/{runs.height})"
            ax.set_title(title, fontsize=8, color="black" if learned == runs.height else "red")
            ax.set_xlim(-0.03, 1.03)
            ax.set_ylim(-0.03, 1.03)
        axes[i, 0].set_ylabel(
            f"PE={setup['positional']}, lambda={setup['weight_decay']:g}\nswitch mass"
        )
    for ax in axes[-1]:
        ax.set_xlabel("BOS mass")
    legend_below(fig, axes.flat, ncols=2)
    fig.suptitle(
        f"Layer-2 heads: BOS mass vs switch mass (dotted: off mass {OFF_THRESHOLD:g}; "
        "red title: a run did not learn)"
    )
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- classification


def _setup_label() -> pl.Expr:
    """The legend / panel label of a classification setup: vocabulary size, MLP and LayerNorm
    (0/1), e.g. ``|V|=41 mlp=0 ln=1``."""
    return pl.format(
        "|V|={} mlp={} ln={}",
        pl.col("vocab_size"),
        pl.col("use_mlp").cast(pl.Int8),
        pl.col("use_layernorm").cast(pl.Int8),
    )


def plot_classification_flips(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figures 6, 18-21: one-token flip rate (and accuracy) over epochs, rows = number of heads,
    columns = number of layers, one line per vocabulary / MLP / LayerNorm setup (mean over
    seeds)."""
    curve = tables["curve"].with_columns(setup=_setup_label())
    agg = (
        curve.group_by("setup", "n_heads", "n_layers", "epoch")
        .agg(pl.col("flip_rate").mean(), pl.col("eval_accuracy").mean())
        .sort("epoch")
    )
    heads = sorted(set(agg["n_heads"].to_list()))
    layers = sorted(set(agg["n_layers"].to_list()))
    setups = sorted(set(agg["setup"].to_list()))
    colors = dict(zip(setups, sns.color_palette("tab10", max(len(setups), 3)), strict=False))
    fig = new_figure(4.2 * len(layers) + 1.5, 3.0 * len(heads))
    axes = fig.subplots(len(heads), len(layers), squeeze=False, sharey=True)
    for i, h in enumerate(heads):
        for j, n in enumerate(layers):
            ax = axes[i, j]
            part = agg.filter((pl.col("n_heads") == h) & (pl.col("n_layers") == n))
            for setup in setups:
                p = part.filter(pl.col("setup") == setup)
                ax.plot(p["epoch"], p["flip_rate"], marker="o", color=colors[setup], label=setup)
                ax.plot(p["epoch"], p["eval_accuracy"], ls=":", color=colors[setup])
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"H={h}, L={n}", fontsize=9)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("flip rate (solid) / accuracy (dotted)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=7, frameon=False)
    fig.suptitle("Adversarial one-token flip success rate")
    save_figure(fig, out_png)


def flip_trend_statement(final: pl.DataFrame) -> str:
    """The mean final flip rate at the fewest and the most heads and layers
    (:func:`.summary.flip_rate_trend`, the numbers of claim
    ``dynamics.flip_rate_decreases``, in its format), one line per factor, e.g. ``H 1 -> 4 (|V|=41,
    no MLP, no LayerNorm): flip rate 0.400 -> 0.100``."""
    parts = []
    for factor, name in (("n_heads", "H"), ("n_layers", "L")):
        trend = flip_rate_trend(final, factor)
        levels = trend["levels"]
        if trend["low"] is None:
            parts.append(f"{name}: one value only ({trend['scope']})")
        else:
            parts.append(
                f"{name} {levels[0]} -> {levels[-1]} ({trend['scope']}): "
                f"flip rate {trend['low']:.3f} -> {trend['high']:.3f}"
            )
    return "\n".join(parts)


def plot_classification_flips_by_size(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figure 21's question in one panel per |V| / MLP / LayerNorm setup: final flip rate (all
    replacements: solid; neutral tokens only: dashed) against the number of heads, one line per
    number of layers, mean over seeds with the seeds' min-max range as error bars."""
    by = tables["by_setup"].with_columns(setup=_setup_label())
    setups = sorted(set(by["setup"].to_list()))
    layers = sorted(set(by["n_layers"].to_list()))
    colors = dict(zip(layers, sns.color_palette("tab10", max(len(layers), 3)), strict=False))
    cols = min(len(setups), 4)  # wrapped: the figure stays within plotting.MAX_FIGURE_PIXELS
    rows = math.ceil(len(setups) / cols)
    fig = new_figure(max(7.5, 4.2 * cols), 3.8 * rows + 0.5)
    grid = fig.subplots(rows, cols, squeeze=False, sharey=True).ravel()
    for extra in grid[len(setups) :]:
        extra.set_visible(False)
    axes = grid[: len(setups)]
    for ax, setup in zip(axes, setups, strict=True):
        for n in layers:
            p = by.filter((pl.col("setup") == setup) & (pl.col("n_layers") == n)).sort("n_heads")
            mean = p["flip_rate_mean"].to_numpy()
            err = np.vstack([mean - p["flip_rate_min"].to_numpy(), p["flip_rate_max"] - mean])
            ax.errorbar(
                p["n_heads"], mean, yerr=err, marker="o", capsize=3, color=colors[n], label=f"L={n}"
            )
            ax.plot(p["n_heads"], p["flip_rate_neutral_mean"], ls="--", color=colors[n])
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(by["n_heads"].to_list())))
        ax.set_xticklabels([str(h) for h in sorted(set(by["n_heads"].to_list()))])
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("heads H")
        ax.set_ylabel("final one-token flip rate")
        ax.set_title(f"{setup} ({int(p['runs'][0])} seeds)", fontsize=9)
    legend_below(fig, axes[:1], ncols=6, fontsize=7)
    fig.suptitle(
        "Final one-token flip rate (dashed: neutral-token replacements only)\n"
        + flip_trend_statement(tables["final"])
    )
    save_figure(fig, out_png)


def plot_classification_attention(tables: dict[str, pl.DataFrame], out_png: PathLike) -> None:
    """Figure 5: layer-1 CLS attention (head 0) over epochs for the two recorded samples of the
    1-layer 1-head run (or the first run); signal tokens are starred on the x axis."""
    final = tables["final"].sort("n_layers", "n_heads", "seed")
    run_id = final["run_id"][0]
    att = tables["attention"].filter((pl.col("run_id") == run_id) & (pl.col("head") == 0))
    fig = new_figure(10.0, 3.6)
    axes = fig.subplots(1, 2)
    for ax, sample in zip(axes, (0, 1), strict=True):
        part = att.filter(pl.col("sample") == sample)
        epochs = sorted(set(part["epoch"].to_list()))
        T = int(part["position"].max()) + 1
        mat = np.zeros((len(epochs), T))
        for row in part.iter_rows(named=True):
            mat[epochs.index(row["epoch"]), row["position"]] = row["weight"]
        first = part.filter(pl.col("epoch") == epochs[0]).sort("position")
        labels = [
            f"{tok}*" if signal else str(tok)
            for tok, signal in zip(first["token"], first["is_signal"], strict=True)
        ]
        sns.heatmap(
            mat, ax=ax, vmin=0, vmax=1, cmap="Blues", xticklabels=labels, yticklabels=epochs
        )
        ax.set_xlabel("token at position (0 = CLS, * = signal token)")
        ax.set_ylabel("epoch")
        ax.set_title(f"sample {sample}, label {part['label'][0]}", fontsize=9)
    fig.suptitle(f"CLS attention over training ({run_id})")
    save_figure(fig, out_png)


#: The drawing function of each figure of each part of the ``dynamics`` config section (the
#: figures :data:`sinkscope.dynamics.names.FIGURES` names).
PLOTS: dict[str, dict[str, Plot]] = {
    "value_softmax": {
        "polarization": plot_vs_polarization,
        "losses": plot_vs_losses,
        "activations": plot_vs_activations,
        "tied": plot_vs_tied,
        "regression": plot_vs_regression,
    },
    "induction": {
        "sinks": plot_induction_sinks,
        "accuracy": plot_induction_accuracy,
        "patterns": plot_induction_patterns,
        "curves": plot_induction_curves,
        "switches": plot_induction_switches,
    },
    "classification": {
        "flips": plot_classification_flips,
        "flips_by_size": plot_classification_flips_by_size,
        "attention": plot_classification_attention,
    },
}


def figures(part: str, tables: dict[str, pl.DataFrame]) -> dict[str, Draw]:
    """The figures of rule ``summarize_dynamics_<part>`` (:data:`sinkscope.dynamics.names.FIGURES`)
    drawn from the ``tables`` of its ``summarize_*`` function."""
    return {name: functools.partial(PLOTS[part][name], tables) for name in FIGURES[part]}
