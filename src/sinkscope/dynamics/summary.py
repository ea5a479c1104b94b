"""Summaries of the training-dynamics runs across a part's grid (rules
``summarize_dynamics_<part>``): per-run tables concatenated and aggregated over seeds.

Polars only (no torch): the summary rules, the plots and the claims read these without loading
the models. :data:`SUMMARIZE` maps each part of :data:`sinkscope.dynamics.names.PARTS` to its
function; each returns the part's ``SUMMARY_TABLES``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from sinkscope.dynamics.grids import variant_name
from sinkscope.dynamics.names import IDLE_ROWS, INDUCTION_ROWS, PARTS

__all__ = [
    "FIG21_SCOPE",
    "SUMMARIZE",
    "SWITCH_MEASURES",
    "flip_rate_trend",
    "summarize_classification",
    "summarize_induction",
    "summarize_value_softmax",
]


#: The (rows, measure) pairs of the ``switches`` table that ``summarize_induction`` averages over
#: the last layer's heads per run (columns ``<rows>_<measure>`` of ``final`` and ``by_setup``).
SWITCH_MEASURES: tuple[tuple[str, str], ...] = (
    (IDLE_ROWS, "bos_share"),
    (IDLE_ROWS, "switch_mass"),
    (INDUCTION_ROWS, "switch_mass"),
    (IDLE_ROWS, "off_share"),
    (INDUCTION_ROWS, "off_share"),
)


def summarize_value_softmax(results: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Concatenate per-run tables: ``final`` (one row per run), ``trajectory``, ``scalars`` and
    ``by_variant`` (mean / min / max final entropy, top weight and ``||V||`` per experiment x loss
    x activation x n x kappa over seeds, with the share of polarized runs)."""
    final = pl.concat([r["final"] for r in results], how="diagonal_relaxed")
    trajectory = pl.concat([r["trajectory"] for r in results], how="diagonal_relaxed")
    scalars = pl.concat([r["scalars"] for r in results], how="diagonal_relaxed")
    keys = ["experiment", "loss", "activation", "n", "d", "kappa", "target", "kl_sharpness"]
    by_variant = (
        final.group_by(keys)
        .agg(
            runs=pl.len(),
            entropy_mean=pl.col("entropy").mean(),
            entropy_max=pl.col("entropy").max(),
            max_entropy=pl.col("max_entropy").first(),
            top_weight_mean=pl.col("top_weight").mean(),
            top_weight_min=pl.col("top_weight").min(),
            v_norm_mean=pl.col("v_norm").mean(),
            final_loss_mean=pl.col("final_loss").mean(),
            polarized_share=pl.col("polarized").cast(pl.Float64).mean(),
            order_preserved_mean=pl.col("order_preserved").mean(),
        )
        .sort(keys)
    )
    return {
        "final": final.sort("run_id"),
        "trajectory": trajectory,
        "scalars": scalars,
        "by_variant": by_variant,
    }


def summarize_induction(results: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Concatenate per-run tables and aggregate over seeds.

    Returns ``final``, ``curve``, ``heads``, ``pattern`` (concatenated), ``switches`` (the runs'
    per-head switch measures with each run's ``variant``, ``positional``, ``weight_decay``,
    ``seed``, ``accuracy`` and ``learned``) and ``by_setup``: one row per (attention, normalize,
    switch, positional, weight_decay) with ``runs``, ``learned_runs``, ``accuracy_mean``,
    ``sink_proportion_mean`` (layer 2, over all runs; ``_min`` / ``_max`` over them: the
    seed-to-seed spread), ``sink_proportion_learned`` (over runs
    that learned; null if none), ``mean_sink_mass`` and ``idle_sink_mass`` (layer-2 mean over
    heads of the position-0 mass of the first-half rows), and the layer-2 means of the switch
    measures (:func:`sinkscope.dynamics.induction.switch_measures`): ``idle_bos_share``,
    ``idle_switch_mass``, ``induction_switch_mass``, ``idle_off_share``,
    ``induction_off_share``. ``final`` gains ``variant``, ``idle_sink_mass`` and those five.
    """
    final = pl.concat([r["final"] for r in results], how="diagonal_relaxed")
    final = final.with_columns(
        variant=pl.struct("attention", "normalize", "switch").map_elements(
            lambda s: variant_name(s["attention"], s["normalize"], s["switch"]),
            return_dtype=pl.String,
        )
    )
    heads = pl.concat([r["heads"] for r in results], how="diagonal_relaxed")
    last_layer = final.select("run_id", "n_layers")
    idle = (
        heads.join(last_layer, on="run_id")
        .filter(pl.col("layer") == pl.col("n_layers"))
        .group_by("run_id")
        .agg(idle_sink_mass=pl.col("idle_sink_mass").mean())
    )
    switches = pl.concat([r["switches"] for r in results], how="diagonal_relaxed")
    layer2 = (
        switches.join(last_layer, on="run_id")
        .filter(pl.col("layer") == pl.col("n_layers"))
        .group_by("run_id")
        .agg(
            **{
                f"{rows}_{measure}": pl.col(measure).filter(pl.col("rows") == rows).mean()
                for rows, measure in SWITCH_MEASURES
            }
        )
    )
    final = final.join(idle, on="run_id", how="left").join(layer2, on="run_id", how="left")
    keys = ["variant", "attention", "normalize", "switch", "positional", "weight_decay"]
    by_setup = (
        final.group_by(keys)
        .agg(
            runs=pl.len(),
            learned_runs=pl.col("learned").sum(),
            accuracy_mean=pl.col("accuracy").mean(),
            sink_proportion_mean=pl.col("sink_proportion").mean(),
            sink_proportion_min=pl.col("sink_proportion").min(),
            sink_proportion_max=pl.col("sink_proportion").max(),
            sink_proportion_learned=pl.col("sink_proportion").filter(pl.col("learned")).mean(),
            mean_sink_mass=pl.col("mean_sink_mass").mean(),
            idle_sink_mass=pl.col("idle_sink_mass").mean(),
            **{f"{r}_{m}": pl.col(f"{r}_{m}").mean() for r, m in SWITCH_MEASURES},
        )
        .sort(keys)
    )
    run_columns = ["run_id", "variant", "positional", "weight_decay", "seed", "accuracy", "learned"]
    return {
        "final": final.sort("run_id"),
        "curve": pl.concat([r["curve"] for r in results], how="diagonal_relaxed"),
        "heads": heads,
        "pattern": pl.concat([r["pattern"] for r in results], how="diagonal_relaxed"),
        "switches": switches.join(final.select(run_columns), on="run_id", how="left"),
        "by_setup": by_setup,
    }


def summarize_classification(results: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Concatenated ``final``, ``curve`` (with the spec columns joined on) and ``attention``
    tables, and ``by_setup``: per (|V|, MLP, LayerNorm, heads, layers) the number of runs and the
    mean / min / max over seeds of the final flip rate, the mean neutral-only flip rate, accuracy
    and ``CLS`` top attention weight."""
    final = pl.concat([r["final"] for r in results], how="diagonal_relaxed").sort("run_id")
    cols = ["run_id", "vocab_size", "use_mlp", "use_layernorm", "n_heads", "n_layers", "seed"]
    curve = pl.concat([r["curve"] for r in results], how="diagonal_relaxed").join(
        final.select(cols), on="run_id"
    )
    attention = pl.concat([r["attention"] for r in results], how="diagonal_relaxed")
    keys = ["vocab_size", "use_mlp", "use_layernorm", "n_heads", "n_layers"]
    by_setup = (
        final.group_by(keys)
        .agg(
            runs=pl.len(),
            accuracy_mean=pl.col("accuracy").mean(),
            flip_rate_mean=pl.col("flip_rate").mean(),
            flip_rate_min=pl.col("flip_rate").min(),
            flip_rate_max=pl.col("flip_rate").max(),
            flip_rate_neutral_mean=pl.col("flip_rate_neutral").mean(),
            cls_top_weight_mean=pl.col("cls_top_weight").mean(),
        )
        .sort(keys)
    )
    return {"final": final, "curve": curve, "attention": attention, "by_setup": by_setup}


#: Figure 21's setup: |V| = 41, no MLP, no LayerNorm (the runs the flip-rate trend is read on).
FIG21_SCOPE = "|V|=41, no MLP, no LayerNorm"


def flip_rate_trend(final: pl.DataFrame, factor: str) -> dict[str, Any]:
    """Mean final flip rate at the smallest and the largest value of ``factor`` (``"n_heads"`` or
    ``"n_layers"``), the numbers of claim ``dynamics.flip_rate_decreases`` and of the title of the
    flip-rate-by-size figure.

    Read on Figure 21's setup (:data:`FIG21_SCOPE`) when the runs include it with two values of
    ``factor``, otherwise on all runs pooled over the other factors. Returns ``{"scope",
    "levels" (sorted values of factor), "n_runs", "low" (the flip rate at the smallest), "high"
    (at the largest), "low_runs" / "high_runs" (their numbers of runs)}``; ``low`` / ``high`` are
    ``None`` with fewer than two levels. With the runs' ``attacked`` counts the rate of a level
    is its runs' flips pooled (:func:`pooled_flips`; the sampling unit is the attacked
    sequence), and ``low_counts`` / ``high_counts`` are its ``(flipped, attacked)``, with
    ``low_by_seed`` / ``high_by_seed`` the same per training seed (``{seed: (flipped,
    attacked)}``, where the runs have a ``seed``); without them, the mean of the runs' rates.
    """
    fig21 = final
    if {"vocab_size", "use_mlp", "use_layernorm"} <= set(final.columns):
        fig21 = final.filter(
            (pl.col("vocab_size") == 41) & ~pl.col("use_mlp") & ~pl.col("use_layernorm")
        )
    runs, scope = fig21, FIG21_SCOPE
    if fig21[factor].n_unique() < 2:
        runs, scope = final, "all runs pooled"
    levels = sorted(set(runs[factor].to_list()))
    out: dict[str, Any] = {
        "scope": scope, "levels": levels, "n_runs": runs.height, "low": None, "high": None,
    }  # fmt: skip
    if len(levels) >= 2:
        for key, value in (("low", levels[0]), ("high", levels[-1])):
            part = runs.filter(pl.col(factor) == value)
            out[f"{key}_runs"] = part.height
            if "attacked" in part.columns:
                flipped, attacked = pooled_flips(part)
                out[key] = flipped / attacked
                out[f"{key}_counts"] = (flipped, attacked)
                if "seed" in part.columns:
                    out[f"{key}_by_seed"] = {
                        int(seed): pooled_flips(runs_of_seed)
                        for (seed,), runs_of_seed in part.group_by("seed", maintain_order=True)
                    }
            else:
                out[key] = float(part["flip_rate"].mean())
    return out


def pooled_flips(runs: pl.DataFrame) -> tuple[int, int]:
    """``(flipped, attacked)`` summed over ``runs``: each run's flips are ``flip_rate x
    attacked`` (an integer count, rounded from the stored rate)."""
    attacked = runs["attacked"].cast(pl.Int64)
    flipped = (runs["flip_rate"] * attacked).round(0).cast(pl.Int64)
    return int(flipped.sum()), int(attacked.sum())


#: The summary function of each part (rule ``summarize_dynamics_<part>``).
SUMMARIZE: dict[str, Callable[[list[dict[str, pl.DataFrame]]], dict[str, pl.DataFrame]]] = dict(
    zip(
        PARTS, (summarize_value_softmax, summarize_induction, summarize_classification), strict=True
    )
)
