"""Checks of the value-softmax paper's claims: read the ``dynamics_*`` summary tables.

Polarization by variant (logistic, square, unnormalized), softmax sinks emerging, the flip rate
decreasing over training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from sinkscope.claims.tolerances import DEFAULT_TOLERANCES
from sinkscope.claims.verdicts import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    SYNTHETIC,
    Interval,
    Reading,
    Row,
    combine,
    decide,
    needed_text,
    not_applicable,
    pct,
    require,
    row,
    rows_per,
)
from sinkscope.dynamics.grids import NO_SWITCH, compared_for_sinks
from sinkscope.stats.intervals import (
    bootstrap_interval,
    needed_units,
    newcombe_difference,
    wilson_interval,
)

# sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use their helpers
# import them when they run, so importing this module (and rendering the claims that need none of
# them) does not load torch.

__all__ = [
    "check_flip_rate_decreases",
    "check_logistic_polarizes",
    "check_other_switch_replaces_sink",
    "check_softmax_sinks_emerge",
    "check_square_does_not_polarize",
    "check_unnormalized_do_not_polarize",
    "pooled_drop",
    "seed_drops",
]

#: Why a training-dynamics claim run on one seed is inconclusive: a verdict against the
#: seed-to-seed spread needs two runs at least (the companion paper averages over seeds).
ONE_SEED_TEXT = "one training seed: the seed-to-seed spread is unknown"


def _share_rows(
    by_variant: pl.DataFrame,
    loss: str,
    activations: Sequence[str],
    majority: float,
    polarizes: bool,
    level: float,
) -> list[Row]:
    """One row per polarization variant: the share of its seeds' runs that polarize, decided on
    the share's Wilson interval (the runs of one variant are independent draws of its initial
    point) against ``majority`` (:func:`sinkscope.claims.verdicts.decide`)."""
    require(
        by_variant,
        ["experiment", "loss", "activation", "n", "d", "runs", "polarized_share"],
        "value_softmax by_variant",
    )
    part = by_variant.filter(
        (pl.col("experiment") == "untied")
        & (pl.col("loss") == loss)
        & pl.col("activation").is_in(list(activations))
    ).sort("activation", "n", "d", *(c for c in ("kappa", "target") if c in by_variant.columns))
    test = f"polarized share > {majority:g}" if polarizes else f"polarized share < {majority:g}"
    if part.height == 0:
        return [
            row(
                SYNTHETIC,
                "-",
                f"loss={loss}, phi in {list(activations)}",
                "n/a",
                None,
                test,
                None,
                "no run of this loss and activation in this config",
            )
        ]

    # the knobs that tell this loss's runs apart beyond (phi, n, d), e.g. two regression targets
    varying = [
        name
        for name in ("kappa", "target", "kl_sharpness")
        if name in part.columns
        and part.group_by("activation", "n", "d").agg(pl.col(name).n_unique())[name].max() > 1
    ]

    def reading(r: Mapping[str, Any]) -> Reading:
        share, runs = float(r["polarized_share"]), int(r["runs"])
        polarized = round(share * runs)
        knobs = "".join(f", {name}={r[name]:g}" for name in varying)
        interval = Interval(
            *wilson_interval(polarized, runs, level),
            f"Wilson score interval over the {runs} seeds' runs",
            level,
            percent=True,
        )
        verdict = decide(interval, majority, above=polarizes, strict=True)
        text = f"{polarized} of {runs} seeds end with a top attention weight >= 0.9"
        if verdict == INCONCLUSIVE:
            needed = needed_units(runs, share, interval.low, interval.high, majority)
            text += (
                f"; the interval straddles {majority:g}: needs more seeds "
                f"({needed_text(needed, 'seeds')}; dynamics.grids.POLARIZATION_SEEDS)"
            )
        return Reading(
            f"loss={loss}, phi={r['activation']}, n={r['n']}, d={r['d']}{knobs}",
            f"{pct(share)} of {runs} runs polarized (top weight {r['top_weight_mean']:.3f})"
            if "top_weight_mean" in r
            else f"{pct(share)} of {runs} runs polarized",
            share,
            None,
            text,
            interval,
            verdict,
        )

    synthetic = part.with_columns(model=pl.lit(SYNTHETIC), dataset=pl.lit("-"))
    return rows_per(synthetic.iter_rows(named=True), test, reading)


def check_logistic_polarizes(
    by_variant: pl.DataFrame, majority: float, level: float = 0.95
) -> list[Row]:
    """Value-softmax paper, Theorem 3.3 / Fig. 2: with the logistic loss gradient flow drives
    ``softmax(a)`` to a one-hot vector: most seeds polarize (top weight >= 0.9)."""
    return _share_rows(by_variant, "logistic", ["softmax"], majority, polarizes=True, level=level)


def check_square_does_not_polarize(
    by_variant: pl.DataFrame, majority: float, level: float = 0.95
) -> list[Row]:
    """Value-softmax paper, Fig. 13 caption: the square loss does not give rise to sparse
    solutions (the abstract's "universality ... including square loss" says otherwise): most
    seeds do not polarize."""
    return _share_rows(by_variant, "square", ["softmax"], majority, polarizes=False, level=level)


def check_unnormalized_do_not_polarize(
    by_variant: pl.DataFrame, majority: float, level: float = 0.95
) -> list[Row]:
    """Value-softmax paper, Fig. 13 caption: ``sum`` and ``sigmoid`` (no normalisation) do not
    converge to sparse solutions under the logistic loss: most seeds do not polarize."""
    return _share_rows(
        by_variant, "logistic", ["sum", "sigmoid"], majority, polarizes=False, level=level
    )


def check_softmax_sinks_emerge(
    by_setup: pl.DataFrame,
    softmax_min_sink_proportion: float,
    unnormalized_max_sink_proportion: float,
) -> list[Row]:
    """Value-softmax paper, Fig. 1 / Fig. 4 (and the "sinks are necessary" abstract): in the
    induction task sinks emerge in layer 2 with softmax attention but not with the attention
    functions trained without normalisation: per (positional encoding, weight decay), the softmax
    sink proportion is ``>= softmax_min_sink_proportion`` and every un-normalised variant's is
    ``<= unnormalized_max_sink_proportion``.

    Against the seed-to-seed spread: where a setup ran several seeds (``runs``), each bound is
    tested on the range over its runs (``sink_proportion_min`` / ``_max``): reproduced when every
    seed meets both bounds, not reproduced when every seed misses one, inconclusive when the
    seeds disagree ("needs more seeds"). With one run per setup it is inconclusive: a point
    reading of one seed says nothing of the spread over seeds (:data:`ONE_SEED_TEXT`)."""
    cols = [
        "variant",
        "attention",
        "normalize",
        "switch",
        "positional",
        "weight_decay",
        "runs",
        "sink_proportion_mean",
        "sink_proportion_min",
        "sink_proportion_max",
    ]
    require(by_setup, cols, "induction by_setup")
    # Table 1's attention functions only: a softmax head with another switch is claim
    # dynamics.other_switch_replaces_sink's
    by_setup = by_setup.filter(pl.col("switch") == NO_SWITCH)

    def reading(r: Mapping[str, Any]) -> Reading:
        part = r["part"]
        setting = f"positional={r['positional']}, weight_decay={r['weight_decay']}"
        compared = part.filter(
            pl.struct("attention", "normalize").map_elements(
                lambda v: compared_for_sinks(v["attention"], v["normalize"]),
                return_dtype=pl.Boolean,
            )
        )
        soft = compared.filter(pl.col("attention") == "softmax")
        raw = compared.filter(pl.col("attention") != "softmax")
        if soft.height == 0 or raw.height == 0:
            return not_applicable(setting, "this setup lacks softmax or un-normalised runs")
        s = float(soft["sink_proportion_mean"][0])
        worst = raw.sort("sink_proportion_mean", descending=True).row(0, named=True)
        others = ", ".join(
            f"{v}: {p:.2f}"
            for v, p in zip(raw["variant"], raw["sink_proportion_mean"], strict=True)
        )
        measured = (
            f"softmax {s:.2f} vs un-normalised max {worst['sink_proportion_mean']:.2f} "
            f"({worst['variant']})"
        )
        text = f"layer-2 sink-head proportion: softmax {s:.2f}; {others}"
        value = s - float(worst["sink_proportion_mean"])
        # the compared variants' seeds only: the normalised ones are not part of the claim
        runs = int(compared["runs"].min())
        if runs < 2:
            # one run per setup: no seed-to-seed spread to weigh the point reading against
            return Reading(
                setting,
                measured,
                value,
                None,
                f"{text}; {ONE_SEED_TEXT}: needs 2 or more seeds (dynamics.induction select seed)",
                verdict=INCONCLUSIVE,
            )
        # the range over the seeds' runs: softmax's against its floor, each un-normalised
        # variant's against its ceiling
        soft_range = (float(soft["sink_proportion_min"][0]), float(soft["sink_proportion_max"][0]))
        verdicts = [
            decide(Interval(*soft_range, ""), softmax_min_sink_proportion, above=True),
            *(
                decide(Interval(lo, hi, ""), unnormalized_max_sink_proportion, above=False)
                for lo, hi in zip(
                    raw["sink_proportion_min"], raw["sink_proportion_max"], strict=True
                )
            ),
        ]
        verdict = combine(verdicts)
        raw_max = float(raw["sink_proportion_max"].max())
        raw_min = float(raw.sort("sink_proportion_mean", descending=True)["sink_proportion_min"][0])
        interval = Interval(
            soft_range[0] - raw_max,
            soft_range[1] - raw_min,
            f"range over the {runs}+ seeds of each setup (softmax {soft_range[0]:.2f}-"
            f"{soft_range[1]:.2f}; un-normalised up to {raw_max:.2f})",
            1.0,
            range_of_runs=True,
        )
        if verdict == INCONCLUSIVE:
            text += (
                "; the seeds disagree on a bound: needs more seeds (dynamics.induction select seed)"
            )
        return Reading(setting, measured, value, None, text, interval, verdict)

    setups = by_setup.sort("positional", "weight_decay").group_by(
        "positional", "weight_decay", maintain_order=True
    )
    return rows_per(
        (
            {"model": SYNTHETIC, "dataset": "-", "positional": pe, "weight_decay": wd, "part": part}
            for (pe, wd), part in setups
        ),
        f"softmax >= {softmax_min_sink_proportion:g} and every un-normalised variant <= "
        f"{unnormalized_max_sink_proportion:g}",
        reading,
    )


def check_other_switch_replaces_sink(
    by_setup: pl.DataFrame,
    min_sink_share_drop: float,
    min_bos_share_drop: float,
    max_accuracy_drop: float,
) -> list[Row]:
    """A prediction from the main study's thesis (§6, Proposition 6.1: a sink is the
    head's attention switch): a softmax head that has another switch (:mod:`sinkscope.dynamics.
    switches`) needs BOS less, so against softmax at the same positional encoding and weight
    decay (same steps and task) the layer-2 sink-head share falls by at least
    ``min_sink_share_drop``, the mean BOS share of the first-half rows (BOS's part of the mass a
    row delivers, the rows with nothing to copy) by at least ``min_bos_share_drop``, while the
    induction accuracy drops by at most ``max_accuracy_drop``.

    One row per (switch, positional encoding, weight decay). A switch that does not keep the
    accuracy is "not reproduced" (the prediction includes that the task is still solved); a
    setup whose softmax runs did not all learn has no reference and is not applicable.

    Against the seed-to-seed spread: with one run per setup the row is
    inconclusive (:data:`ONE_SEED_TEXT`); with several, the sink-head share's drop is read on
    the seeds' ranges (from the reference's smallest minus the switch's largest share to the
    reverse, the row's interval): reproduced only when every pairing of seeds drops by the
    tolerance, inconclusive when the ranges overlap across it. The BOS share and the accuracy
    are compared on their means over the seeds."""
    require(by_setup, ["attention", "switch"], "induction by_setup")
    softmax = by_setup.filter(pl.col("attention") == "softmax")
    test = (
        f"vs softmax: sink-head share -{min_sink_share_drop:g} or more, first-half BOS share "
        f"-{min_bos_share_drop:g} or more, accuracy -{max_accuracy_drop:g} at most"
    )

    def reading(r: Mapping[str, Any]) -> Reading:
        setting = f"{r['variant']}, positional={r['positional']}, weight_decay={r['weight_decay']}"
        base = softmax.filter(
            (pl.col("switch") == NO_SWITCH)
            & (pl.col("positional") == r["positional"])
            & (pl.col("weight_decay") == r["weight_decay"])
        )
        if base.height == 0:
            return not_applicable(setting, "no softmax run without a switch at this setup")
        b = base.row(0, named=True)
        if b["learned_runs"] < b["runs"]:
            return not_applicable(setting, "the softmax reference did not learn the task")
        sink_drop = b["sink_proportion_mean"] - r["sink_proportion_mean"]
        share_drop = b["idle_bos_share"] - r["idle_bos_share"]
        accuracy_drop = b["accuracy_mean"] - r["accuracy_mean"]
        learned = f"{r['learned_runs']}/{r['runs']} runs learned"
        measured = (
            f"sink heads {b['sink_proportion_mean']:.2f} -> {r['sink_proportion_mean']:.2f}; "
            f"first-half BOS share {b['idle_bos_share']:.2f} -> {r['idle_bos_share']:.2f}; "
            f"accuracy {b['accuracy_mean']:.2f} -> {r['accuracy_mean']:.2f}"
        )
        text = (
            f"drops: sink-head share {sink_drop:+.2f}, first-half BOS share {share_drop:+.2f}, "
            f"accuracy {accuracy_drop:+.2f} ({learned}; first-half switch mass "
            f"{r['idle_switch_mass']:.2f})"
        )
        runs = min(int(b["runs"]), int(r["runs"]))
        if runs < 2:
            return Reading(
                setting,
                measured,
                sink_drop,
                None,
                f"{text}; {ONE_SEED_TEXT}: needs 2 or more seeds (dynamics.induction select seed)",
                verdict=INCONCLUSIVE,
            )
        over_seeds = Interval(
            float(b["sink_proportion_min"]) - float(r["sink_proportion_max"]),
            float(b["sink_proportion_max"]) - float(r["sink_proportion_min"]),
            f"range over the {runs}+ seeds of each setup (the sink-head share's drop)",
            1.0,
            range_of_runs=True,
        )
        verdict = combine(
            [
                decide(over_seeds, min_sink_share_drop, above=True),
                REPRODUCED if share_drop >= min_bos_share_drop else NOT_REPRODUCED,
                REPRODUCED if accuracy_drop <= max_accuracy_drop else NOT_REPRODUCED,
            ]
        )
        if verdict == INCONCLUSIVE:
            text += (
                "; the seeds' sink-head shares overlap across the tolerance: needs more seeds "
                "(dynamics.induction select seed)"
            )
        return Reading(setting, measured, sink_drop, None, text, over_seeds, verdict)

    switched = softmax.filter(pl.col("switch") != NO_SWITCH)
    if switched.height == 0:
        return [
            row(
                SYNTHETIC,
                "-",
                "softmax with another switch",
                "n/a",
                None,
                test,
                None,
                "no run with a switch in this config (dynamics.induction.select: switch)",
            )
        ]
    cols = [
        "variant",
        "positional",
        "weight_decay",
        "runs",
        "learned_runs",
        "accuracy_mean",
        "sink_proportion_mean",
        "sink_proportion_min",
        "sink_proportion_max",
        "idle_bos_share",
        "idle_switch_mass",
    ]
    require(by_setup, cols, "induction by_setup")
    switched = switched.sort("switch", "positional", "weight_decay")
    return rows_per(
        ({"model": SYNTHETIC, "dataset": "-", **r} for r in switched.iter_rows(named=True)),
        test,
        reading,
    )


def seed_drops(
    by_seed_low: Mapping[int, tuple[int, int]], by_seed_high: Mapping[int, tuple[int, int]]
) -> np.ndarray:
    """``(seeds, 4)``: per training seed run at both levels, ``flipped, attacked`` at the low and
    at the high level (the units of the bootstrap over seeds)."""
    seeds = sorted(set(by_seed_low) & set(by_seed_high))
    return np.array([[*by_seed_low[s], *by_seed_high[s]] for s in seeds], dtype=np.float64).reshape(
        len(seeds), 4
    )


def pooled_drop(units: np.ndarray) -> float:
    """The pooled flip rate at the low level minus the one at the high level of ``units``
    (:func:`seed_drops` rows)."""
    return float(units[:, 0].sum() / units[:, 1].sum() - units[:, 2].sum() / units[:, 3].sum())


def check_flip_rate_decreases(
    final: pl.DataFrame,
    min_difference: float,
    level: float = 0.95,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """Value-softmax paper, Fig. 21: more heads or more layers make the classifier harder to flip
    with one adversarial token: the final flip rate at the smallest number of heads (layers)
    minus the one at the largest exceeds ``min_difference``. Fig. 21's setup (|V| = 41, no MLP,
    no LayerNorm) is used when the runs include it with both levels, otherwise all runs pooled
    over the other factors.

    The sampling unit is the attacked sequence (``attacked`` per run; ``flip_rate`` = flipped /
    attacked): the flips of the runs at one level are pooled into one proportion, and the
    difference of the two proportions gets Newcombe's score interval at ``level``
    (:func:`sinkscope.stats.intervals.newcombe_difference`); the verdict is decided on it
    (:func:`sinkscope.claims.verdicts.decide`). That interval covers the attack's sampling only.
    Where two or more training seeds ran at both levels, the seed-to-seed spread is tested too: a
    t-interval with the bootstrap standard error over the seeds (each resample pools the flips of the drawn seeds,
    :func:`pooled_drop`; ``intervals``: the config's ``claims.intervals``) must also lie above
    ``min_difference``, and the row reports that interval (with three seeds its t has 2
    degrees of freedom, 4.30 at 95%). With one seed the row is inconclusive whatever the attacked
    sequences say (:data:`ONE_SEED_TEXT`); their interval is still shown."""
    from sinkscope.dynamics.summary import flip_rate_trend

    require(final, ["n_heads", "n_layers", "flip_rate", "attacked"], "classification final")
    rows = []
    for factor in ("n_heads", "n_layers"):
        trend = flip_rate_trend(final, factor)
        levels, scope = trend["levels"], trend["scope"]
        test = f"flip rate(min {factor}) - flip rate(max {factor}) > {min_difference:g}"
        if trend["low"] is None:
            rows.append(
                row(
                    SYNTHETIC,
                    "-",
                    f"{factor} in {levels}",
                    "n/a",
                    None,
                    test,
                    None,
                    f"only one value of {factor} was run",
                )
            )
            continue
        (k_low, n_low), (k_high, n_high) = trend["low_counts"], trend["high_counts"]
        runs_low, runs_high = trend["low_runs"], trend["high_runs"]
        low, high = newcombe_difference(k_low, n_low, k_high, n_high, level)
        interval = Interval(
            low,
            high,
            f"Newcombe score interval over {n_low} + {n_high} attacked sequences",
            level,
        )
        verdict = attack_verdict = decide(interval, min_difference, above=True, strict=True)
        lo, hi = k_low / n_low, k_high / n_high
        reason = (
            f"flip rate {lo:.3f} ({k_low}/{n_low}) with {factor}={levels[0]}, {hi:.3f} "
            f"({k_high}/{n_high}) with {factor}={levels[-1]} ({runs_low} + {runs_high} runs)"
        )
        units = seed_drops(trend.get("low_by_seed") or {}, trend.get("high_by_seed") or {})
        if units.shape[0] >= 2:
            settings = {**DEFAULT_TOLERANCES["intervals"], **(intervals or {}), "level": level}
            s_low, s_high = bootstrap_interval(
                units, pooled_drop, int(settings["n_resamples"]), int(settings["seed"]), level
            )
            over_seeds = Interval(
                s_low,
                s_high,
                f"t ({units.shape[0] - 1} df), bootstrap SE over {units.shape[0]} training seeds, "
                f"{int(settings['n_resamples'])} "
                f"resamples (Newcombe over the attacked sequences: {low:+.3f} to {high:+.3f})",
                level,
            )
            by_seed = ", ".join(f"{pooled_drop(units[i : i + 1]):+.3f}" for i in range(len(units)))
            reason += f"; the drop per seed: {by_seed}"
            seed_verdict = decide(over_seeds, min_difference, above=True, strict=True)
            verdict = combine([verdict, seed_verdict])
            interval = over_seeds
            if seed_verdict == INCONCLUSIVE and verdict == INCONCLUSIVE:
                reason += (
                    f"; over the seeds the drop straddles {min_difference:g}: needs more seeds "
                    "(dynamics.classification select seed)"
                )
        else:
            # one seed (or none recorded): the attack's sampling alone decides nothing
            verdict = INCONCLUSIVE
            reason += (
                f"; {ONE_SEED_TEXT} (the interval covers the attack's sampling only): needs 2 "
                "or more seeds (dynamics.classification select seed)"
            )
        if attack_verdict == INCONCLUSIVE:
            needed = needed_units(min(n_low, n_high), lo - hi, low, high, min_difference)
            reason += (
                f"; the interval over the attacked sequences straddles {min_difference:g}: "
                f"needs more attacked sequences ({needed_text(needed, 'per setting')}; "
                "dynamics.classification n_attack) or seeds"
            )
        rows.append(
            row(
                SYNTHETIC,
                "-",
                f"{factor} {levels[0]} vs {levels[-1]} ({scope})",
                f"flip rate {lo:.3f} -> {hi:.3f}",
                lo - hi,
                test,
                None,
                reason,
                interval,
                verdict,
            )
        )
    return rows
