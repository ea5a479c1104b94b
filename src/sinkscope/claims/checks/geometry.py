"""Checks of the geometry claims (§4, §6, App. E.2): read the ``geometry_*`` summary tables.

BOS cosines in the middle layers (Figure 1), sink representability (Proposition 4.1), value ranks
(Figure 12) and the BOS value-output norms of sink heads (§6). The geometry stage's
``statements`` table (one sentence per model and claim, written by the rule
``summarize_geometry``) is :func:`geometry_statements`: it reads the numbers the checks read
(:func:`bos_cosine_readings`, :func:`sink_representable_statements`), so a statement and its
claim row give the same number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from sinkscope.claims.resampling import sequence_interval, sequence_reading
from sinkscope.claims.tolerances import DEFAULT_TOLERANCES
from sinkscope.claims.verdicts import (
    INCONCLUSIVE,
    REPRODUCED,
    Interval,
    Reading,
    Row,
    combine,
    decide,
    not_applicable,
    num,
    pct,
    require,
    rows_per,
)
from sinkscope.heads.order import sort_pooled_last
from sinkscope.labels import POOLED

# sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use their helpers
# import them when they run, so importing this module (and rendering the claims that need none of
# them) does not load torch.

__all__ = [
    "STATEMENT_SCHEMA",
    "bos_cosine_readings",
    "check_bos_cosine_middle_layers",
    "check_sink_bos_value_norm",
    "check_sink_representable",
    "check_value_rank_middle_layers",
    "geometry_statements",
    "sink_representable_statements",
    "unseen_share_bound",
]


def bos_cosine_readings(
    bos_alignment: pl.DataFrame, bos_cosine_max: float
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ``bos_alignment`` rows Figure 1's claim is read on (the pooled ``"all"`` rows where
    there are any, else every row) and their
    :func:`sinkscope.geometry.alignment.bos_max_readings` with the bound ``bos_cosine_max``."""
    from sinkscope.geometry.alignment import bos_max_readings

    pooled = bos_alignment.filter(pl.col("dataset") == POOLED)
    table = pooled if pooled.height else bos_alignment
    return table, bos_max_readings(table, bos_cosine_max)


def unseen_share_bound(n: int, level: float) -> float:
    """The exact one-sided upper bound, at ``level``, on the share of units holding a
    counterexample when none of ``n`` independent units held one: the ``p`` with
    ``(1 - p)^n = 1 - level`` (Clopper-Pearson at ``k = 0``; about ``3 / n`` at 0.95, the rule
    of three)."""
    if n <= 0:
        raise ValueError(f"a bound needs at least one unit, got {n}")
    return 1.0 - (1.0 - level) ** (1.0 / n)


def check_bos_cosine_middle_layers(
    bos_alignment: pl.DataFrame, bos_cosine_max: float, level: float = 0.95
) -> list[Row]:
    """§4 / Fig. 1: the maximum cosine between BOS and every other token at the attention input
    (``space == "Z"``, pooled over datasets) stays below ``bos_cosine_max`` (paper: 0) in every
    middle layer (:func:`sinkscope.geometry.alignment.middle_layers`).

    Both readings of :func:`sinkscope.geometry.alignment.bos_max_readings` (the numbers of Figure 1's panel
    titles) are reported: the maximum over all positions, the paper's statement and the verdict,
    and over positions ``>= 2``, without the first text token, whose input is almost parallel to
    BOS in some models.

    The claim is universal ("every token"), so a sample decides it one way only: one cosine at
    or above the bound refutes it whatever else the sample holds (its interval is exact: the
    largest cosine of all sequences is at least the sample's, up to 1), and a sample without one
    reproduces it with the bound :func:`unseen_share_bound` on the share of sequences that could
    hold one unseen (the sequences are the independent unit; a sequence's tokens are not)."""
    require(
        bos_alignment,
        [
            "model",
            "dataset",
            "space",
            "layer",
            "max",
            "max_excl_first",
            "max_position",
            "n_positive",
            "n_values",
        ],
        "bos_alignment",
    )
    from sinkscope.geometry.alignment import bos_max_statement

    def reading(b: Mapping[str, Any]) -> Reading:
        n_mid = b["n_middle"]
        setting = f"middle layers {b['middle_first']}..{b['middle_last']} of {b['n_layers']}"
        measured = (
            f"all positions: max {num(b['mid_max_all'])} (layer {b['mid_max_all_layer']}), "
            f"{b['n_mid_below_all']}/{n_mid} middle layers below {bos_cosine_max:g}; "
            f"positions >= 2: max {num(b['mid_max_from2'])} (layer "
            f"{b['mid_max_from2_layer']}), {b['n_mid_below_from2']}/{n_mid} below; "
            f"position 1 holds the maximum in {b['n_mid_max_at_first']}/{n_mid}; "
            f"{pct(b['mid_frac_positive'])} of cosines > 0"
        )
        holds = b["n_mid_below_all"] == n_mid
        n_seq, reason = b.get("n_sequences"), bos_max_statement(b)
        if not n_seq or b["mid_max_all"] is None:
            return Reading(setting, measured, b["mid_max_all"], holds, reason)
        if holds:
            reason += (
                f"; a universal claim with no counterexample among the {n_seq} sequences: "
                f"fewer than {pct(unseen_share_bound(n_seq, level))} of sequences hold one "
                f"(exact one-sided {100 * level:.0f}% bound)"
            )
            return Reading(setting, measured, b["mid_max_all"], True, reason)
        interval = Interval(
            float(b["mid_max_all"]),
            1.0,
            f"the largest cosine over all sequences is at least the largest of these "
            f"{n_seq}; one counterexample refutes a universal claim",
            1.0,
        )
        verdict = decide(interval, bos_cosine_max, above=False, strict=True)
        return Reading(setting, measured, b["mid_max_all"], None, reason, interval, verdict)

    table, readings = bos_cosine_readings(bos_alignment, bos_cosine_max)
    records = [
        {
            **b,
            "dataset": ", ".join(
                sorted(set(table.filter(pl.col("model") == b["model"])["dataset"].to_list()))
            ),
        }
        for b in readings.iter_rows(named=True)
    ]
    return rows_per(
        records,
        f"max over middle layers of the max cosine over all positions < {bos_cosine_max:g} "
        "(positions >= 2 reported, not tested)",
        reading,
    )


def check_sink_representable(
    statements: pl.DataFrame,
    representable_min_fraction: float,
    level: float = 0.95,
    null_probability_max: float | None = None,
) -> list[Row]:
    """§4 / Prop. 4.1: the sink is representable: the proposition's half-space condition holds for
    the tokens that attend to BOS in sink heads (reads the ``sink_representable`` rows of the
    ``statements`` table, :func:`sink_representable_statements`).

    Decided on the non-trivial cases only: a (layer, sequence) pair whose two point sets each
    hold at most ``d_model`` points of full rank satisfies the condition whatever its geometry
    (the test cannot fail), so such pairs are counted apart; with no non-trivial pair the claim
    is not applicable. Where the statement's ``basis`` is ``"long_context"`` the pairs are those
    of the long sequences (``T' > d_model`` tokens, where the test can fail) and the set tested
    is every token (``J = [T']``, Figure 1's "any sink pattern", which implies the condition for
    every sink-attending ``J``); otherwise the sink-attending tokens at the extraction's ``T``.
    Where every long-context pair holds, the reason bounds the share of sequences that could
    hold a failing pair unseen (:func:`unseen_share_bound` over the long-context sequences, at
    ``level``), as for the other universal claim of §4."""
    from sinkscope.geometry.names import BASIS_LONG_CONTEXT

    if null_probability_max is None:
        null_probability_max = float(DEFAULT_TOLERANCES["geometry"]["null_probability_max"])

    require(
        statements,
        ["model", "claim", "value", "statement", "n_cases", "n_trivial"],
        "geometry statements",
    )

    def reading(r: Mapping[str, Any]) -> Reading:
        value, n_cases, n_trivial = r["value"], r["n_cases"] or 0, r["n_trivial"] or 0
        setting = "(layer, sequence) pairs with sink-attending tokens"
        if r.get("basis") == BASIS_LONG_CONTEXT:
            setting = "long-context (layer, sequence) pairs, T' > d_model, every sink pattern"
        if n_cases == 0:
            return not_applicable(
                setting,
                "model has no BOS-attending tokens in sink heads",
                "no (layer, sequence) pair has sink-attending tokens",
            )
        if n_trivial == n_cases or value is None or math.isnan(value):
            return not_applicable(
                setting,
                "not applicable - all cases trivially separable: " + r["statement"],
                f"all {n_cases} pairs trivially separable (n_points <= d_model, full rank)",
            )
        n_undecided = r.get("n_undecided") or 0
        nontrivial = n_cases - n_trivial
        decided = nontrivial - n_undecided
        measured = (
            f"condition holds in {pct(value)} of {decided} non-trivial pairs "
            f"({n_trivial} of {n_cases} trivially separable, not counted"
            + (f"; {n_undecided} undecided by the solver's time budget" if n_undecided else "")
            + ")"
        )
        passed = value >= representable_min_fraction
        interval = None
        if n_undecided:
            # the share if every undecided pair failed, and if every one held
            holding = round(value * decided)
            interval = Interval(
                holding / nontrivial,
                (holding + n_undecided) / nontrivial,
                f"bounds over {nontrivial} pairs, {n_undecided} undecided within "
                "geometry.long_context.solve_seconds",
                level=1.0,
            )
            verdict = decide(interval, representable_min_fraction, above=True)
            if verdict != REPRODUCED:
                passed = verdict == REPRODUCED
                reason = r["statement"]
                if verdict == INCONCLUSIVE:
                    reason += (
                        f"; the {n_undecided} undecided pairs could turn it either way: needs "
                        "a longer solve budget (geometry.long_context.solve_seconds)"
                    )
                return Reading(setting, measured, value, passed, reason, interval, verdict)
        chance = [
            f"{name} {p:.3g}"
            for name, p in (
                ("Wendel's probability", r.get("null_probability")),
                ("the Gaussian null's share", r.get("null_pass_fraction")),
            )
            if p is not None and p > null_probability_max
        ]
        if passed and chance:
            # random points of the same N and d would pass too: no evidence either way
            return Reading(
                setting,
                measured,
                value,
                None,
                f"{r['statement']}; random points pass this test too ({', '.join(chance)} > "
                f"{null_probability_max:g}, claims.geometry.null_probability_max): needs longer "
                "sequences (about 2.5 x d_model tokens; geometry.long_context.seq_len)",
                interval,
                verdict=INCONCLUSIVE,
            )
        reason = r["statement"]
        n_seq = r.get("n_sequences")
        if passed and value == 1.0 and n_seq and r.get("basis") == BASIS_LONG_CONTEXT:
            # "every sink pattern, every sequence" is universal: bound what the sample has not seen
            reason += (
                f"; a universal claim with no failing pair among the {n_seq} long-context "
                f"sequences: fewer than {pct(unseen_share_bound(int(n_seq), level))} of "
                f"sequences hold one (exact one-sided {100 * level:.0f}% bound; more: "
                "geometry.long_context.n_sequences)"
            )
        return Reading(setting, measured, value, passed, reason, interval)

    rep = statements.filter(pl.col("claim") == "sink_representable").sort("model")
    return rows_per(
        ({**r, "dataset": POOLED} for r in rep.iter_rows(named=True)),
        f"fraction of non-trivial pairs >= {representable_min_fraction:g}",
        reading,
    )


def _value_rank_interval(
    record: Mapping[str, Any],
    middle: Sequence[int],
    by_sequence: pl.DataFrame,
    intervals: Mapping[str, Any],
) -> Interval | None:
    """The interval of the lowest middle-layer median relative rank: a t-interval with the
    bootstrap standard error over the sequences (:func:`sinkscope.geometry.summary.lowest_median_draws`,
    :func:`sinkscope.claims.resampling.sequence_interval`). None where ``by_sequence`` lacks the
    row's pairs."""
    from sinkscope.geometry.summary import lowest_median_draws

    def draws(strata: list[pl.DataFrame], n_resamples: int, rng: Any) -> tuple[float, Any]:
        return lowest_median_draws(strata, middle, n_resamples, rng)

    model, dataset = str(record["model"]), str(record["dataset"])
    return sequence_interval(by_sequence, model, dataset, draws, intervals, ("value_rank",))


def check_value_rank_middle_layers(
    value_rank: pl.DataFrame,
    near_full_rank: float,
    by_sequence: pl.DataFrame | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """App. E.2 / Fig. 12 (used by Prop. 6.1): value matrices have (near) full relative rank in the
    middle layers: the median relative rank of every middle layer is ``>= near_full_rank``.

    Given the ranks per sequence (``by_sequence``, the geometry summary's
    ``value_rank_by_sequence``), the lowest middle-layer median is decided on its interval over
    the sequences (:func:`_value_rank_interval`, settings ``intervals``: ``claims.intervals``);
    without them, on the medians themselves."""
    from sinkscope.geometry.alignment import middle_layers

    require(value_rank, ["model", "dataset", "layer", "median", "min"], "value_rank")

    def reading(r: Mapping[str, Any]) -> Reading:
        v = r["layers"].sort("layer")
        middle = middle_layers(int(v["layer"].max()) + 1)
        vm = v.filter(pl.col("layer").is_in(middle))
        setting = f"middle layers {middle[0]}..{middle[-1]}"
        if vm.height == 0:
            return not_applicable(setting, "the value_rank table holds none of the middle layers")
        worst = vm.sort("median").row(0, named=True)
        ok = vm.filter(pl.col("median") >= near_full_rank).height
        measured = (
            f"lowest layer median {worst['median']:.3f} (layer {worst['layer']}); "
            f"minimum {float(vm['min'].min()):.3f}"
        )
        reason = (
            f"{ok} of {vm.height} middle layers have median relative rank >= {near_full_rank:g}"
        )
        lowest = float(worst["median"])
        interval = (
            None
            if by_sequence is None
            else _value_rank_interval(r, list(vm["layer"]), by_sequence, intervals or {})
        )
        point = Reading(setting, measured, lowest, ok == vm.height, reason)
        if interval is None:
            return point
        return sequence_reading(
            point, interval, near_full_rank, above=True, pooled=r["dataset"] == POOLED
        )

    return rows_per(
        _per_model_dataset(value_rank, "layers"),
        f"per-layer median relative rank >= {near_full_rank:g} in every middle layer",
        reading,
    )


def check_sink_bos_value_norm(
    bos_value_norm_classes: pl.DataFrame, bos_value_ratio_max: float
) -> list[Row]:
    """§6 (assumption ``W_VO x_0 = 0``, supported by [13]): a head's BOS value-output vector is
    small where the head sinks. Decided on the relation the assumption implies, over every head
    (:func:`sinkscope.geometry.values.bos_mass_relation`, on the ``"is_sink"`` rows of the summary
    table): the more BOS mass, the smaller ``|W_VO z_0| / median_i |W_VO z_i|``, i.e.

    * Spearman's correlation of BOS mass with that norm is negative: its bootstrap interval over
      heads lies below 0; and
    * the median norm of the heads with BOS mass >= 0.6 is at most ``bos_value_ratio_max`` times
      that of the heads with BOS mass < 0.1: the upper end of its interval (the schema's reason:
      a two-fold reduction).

    The intervals are the geometry summary's (its level in the table's ``level`` column).
    Reproduced when both hold on their whole intervals, not reproduced when either fails on its
    whole interval, inconclusive otherwise. The ratio's t counts the distinct heads at its
    fewer end (Gemma 3 has 4 under BOS mass 0.1: 3 degrees of freedom, a wide interval).
    Without heads at both ends the correlation decides alone. The former comparison of the sink heads (``is_sink``) with all other heads, many of
    which carry 0.1-0.4 of their mass on BOS, stays in the reason as a reported reading
    (:func:`sinkscope.geometry.values.value_norm_statement`)."""
    require(
        bos_value_norm_classes,
        ["model", "dataset", "group", "n_heads", "ratio", "ratio_lo", "ratio_hi", "spearman"],
        "bos_value_norm_classes",
    )
    from sinkscope.geometry.values import HIGH_BOS_MASS, LOW_BOS_MASS, value_norm_statement

    def reading(r: Mapping[str, Any]) -> Reading:
        sink = r["groups"].filter(pl.col("group") == "is_sink")
        e = sink.row(0, named=True) if sink.height else None
        setting = "every head, by BOS mass"
        if e is None or e["spearman"] is None or e["spearman_lo"] is None:
            return not_applicable(
                setting,
                "too few heads with a finite BOS value norm to rank (or BOS mass is constant)",
                "no relation",
            )
        level = float(e["level"])
        rho = Interval(
            e["spearman_lo"],
            e["spearman_hi"],
            f"t ({e['n_units'] - 1} df), bootstrap SE over {e['n_units']} heads, Spearman",
            level,
            n_units=e["n_units"],
        )
        verdicts = [decide(rho, 0.0, above=False, strict=True)]
        text = (
            f"Spearman(BOS mass, |W_VO z_0| / median_i |W_VO z_i|) = {num(e['spearman'])} "
            f"({100 * level:.0f}% interval over heads {num(e['spearman_lo'])} to "
            f"{num(e['spearman_hi'])})"
        )
        if e["ratio_high_low"] is not None and e["ratio_high_low_hi"] is not None:
            ends = min(e["n_high_heads"], e["n_low_heads"])
            ratio = Interval(e["ratio_high_low_lo"], e["ratio_high_low_hi"], "", level, ends)
            verdicts.append(decide(ratio, bos_value_ratio_max, above=False))
            text += (
                f"; median norm at BOS mass >= {HIGH_BOS_MASS:g} ({e['n_high']} head instances "
                f"of {e['n_high_heads']} heads) / at < {LOW_BOS_MASS:g} ({e['n_low']} of "
                f"{e['n_low_heads']}): {num(e['ratio_high_low'])} "
                f"[{num(e['ratio_high_low_lo'])}, {num(e['ratio_high_low_hi'])}] (t, "
                f"{ends - 1} df: the heads at its fewer end)"
            )
        else:
            text += (
                f"; no head instances at both ends (BOS mass >= {HIGH_BOS_MASS:g}: {e['n_high']}, "
                f"< {LOW_BOS_MASS:g}: {e['n_low']}), so the correlation decides alone"
            )
        verdict = combine(verdicts)
        if verdict == INCONCLUSIVE:
            text += (
                "; an interval straddles its bound: needs more heads (not in this model, whose "
                "heads are fixed)"
            )
        if e["n_sink"] and e["n_other"] and e["ratio"] is not None:
            text += f". Reported reading, sink vs other heads: {value_norm_statement(e)}"
        return Reading(
            setting,
            f"Spearman {num(e['spearman'])}; high / low BOS-mass norm ratio "
            f"{num(e['ratio_high_low'])}",
            e["spearman"],
            None,
            text,
            rho,
            verdict,
        )

    return rows_per(
        _per_model_dataset(bos_value_norm_classes, "groups"),
        f"Spearman(BOS mass, BOS value norm) < 0 and median norm ratio (BOS mass >= "
        f"{HIGH_BOS_MASS:g} vs < {LOW_BOS_MASS:g}) <= {bos_value_ratio_max:g}, on their intervals",
        reading,
    )


def _per_model_dataset(table: pl.DataFrame, key: str) -> list[dict[str, Any]]:
    """One record per (model, dataset) of ``table`` in :func:`~sinkscope.heads.order.sort_pooled_last`: its
    ``model``, ``dataset`` and, under ``key``, its rows."""
    return [
        {"model": model, "dataset": dataset, key: part}
        for (model, dataset), part in sort_pooled_last(table).group_by(
            "model", "dataset", maintain_order=True
        )
    ]


#: Columns of the geometry ``statements`` table (:func:`geometry_statements`; the
#: ``sink_representable`` rows fill the last three).
STATEMENT_SCHEMA: dict[str, Any] = {
    "model": pl.String,
    "claim": pl.String,
    "value": pl.Float64,
    "statement": pl.String,
    "n_cases": pl.Int64,
    "n_trivial": pl.Int64,
    "basis": pl.String,
    # Wendel's probability that the test passes on random points of the same N and d (long
    # context only: geometry.halfspace_solver.wendel_probability); null where not computed
    "null_probability": pl.Float64,
    # long context only: pairs left undecided by the solver's time budget, and the share of
    # decided Gaussian-null sets in an open half-space (geometry.halfspace.null_pass_fraction)
    "n_undecided": pl.Int64,
    "null_pass_fraction": pl.Float64,
    # long context only: the sequences the pairs come from (summed over datasets), the
    # independent unit of the universal claim's bound (unseen_share_bound)
    "n_sequences": pl.Int64,
}


def sink_representable_statements(
    halfspace: pl.DataFrame, halfspace_long: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The ``sink_representable`` statement per model (read by ``geometry.sink_representable``).

    With long-context rows for a model
    (:func:`~sinkscope.geometry.long_context.halfspace_long_context`) of which at least one pair is
    non-trivial, the statement is decided there (``basis = "long_context"``): ``value`` = share of
    the non-trivial (dataset, layer, sequence) pairs where every sink pattern is representable (both
    sets in an open half-space; this implies it for every sink-attending ``J``), ``n_cases`` =
    pairs, ``n_trivial`` = trivially separable pairs
    (:func:`~sinkscope.geometry.halfspace.long_context_counts`); the sentence also gives the
    counts at the extraction's ``T``
    (:func:`~sinkscope.geometry.halfspace.representability_statement`, trivial cases apart).
    Otherwise (``basis = "attending"``) it is decided on the sink-attending tokens at ``T``
    (:func:`~sinkscope.geometry.halfspace.representability_counts`: ``value`` = share of
    non-trivial cases, null when none), and the sentence adds the long-context counts where there
    are any.
    """
    from sinkscope.geometry.halfspace import (
        long_context_counts,
        long_context_statement,
        null_pass_fraction,
        representability_counts,
        representability_statement,
    )
    from sinkscope.geometry.halfspace_solver import wendel_probability
    from sinkscope.geometry.names import BASIS_ATTENDING, BASIS_LONG_CONTEXT

    short = representability_counts(halfspace) if halfspace.height else None
    long = (
        long_context_counts(halfspace_long)
        if halfspace_long is not None and halfspace_long.height
        else None
    )
    models = set(short["model"].to_list()) if short is not None else set()
    models |= set(long["model"].to_list()) if long is not None else set()
    rows: list[dict[str, Any]] = []
    for model in sorted(models):
        s = short.filter(pl.col("model") == model) if short is not None else None
        at_t = (
            representability_statement(s.row(0, named=True)) if s is not None and s.height else None
        )
        lc = long.filter(pl.col("model") == model) if long is not None else None
        lr = lc.row(0, named=True) if lc is not None and lc.height else None
        if lr is not None and lr["n_nontrivial"]:
            r = lr
            decided = r["n_nontrivial"] - r["n_undecided"]
            text = long_context_statement(r)
            if at_t is not None:
                text += f"; at the extraction's T: {at_t}"
            rows.append(
                {
                    "model": model,
                    "claim": "sink_representable",
                    # the share of the decided pairs (all of them unless a solve ran out of time)
                    "value": r["n_representable_nontrivial"] / decided if decided else None,
                    "statement": f"{model}: {text}",
                    "n_cases": r["n_pairs"],
                    "n_trivial": r["n_trivial"],
                    "basis": BASIS_LONG_CONTEXT,
                    "null_probability": wendel_probability(int(r["seq_len"]) - 1, int(r["dim"])),
                    "n_undecided": r["n_undecided"],
                    "null_pass_fraction": null_pass_fraction(r),
                    "n_sequences": r.get("n_sequences"),
                }
            )
        elif s is not None and s.height:
            r = s.row(0, named=True)
            rows.append(
                {
                    "model": model,
                    "claim": "sink_representable",
                    "value": r["frac_representable_nontrivial"],
                    "statement": f"{model}: {at_t}"
                    + (f"; {long_context_statement(lr)}" if lr is not None else ""),
                    "n_cases": r["n_cases"],
                    "n_trivial": r["n_trivial"],
                    "basis": BASIS_ATTENDING,
                }
            )
    return pl.DataFrame(rows, schema=STATEMENT_SCHEMA)


#: The bound of the statement ``bos_cosine_max_below_zero_middle_layers``: Fig. 1's own "below
#: zero" (the claim ``geometry.bos_cosine_below_zero`` takes its bound from the config, in the
#: claims rule, so that a changed tolerance reruns only that rule).
STATEMENT_BOS_COSINE_BOUND = 0.0


def geometry_statements(
    summary: Mapping[str, pl.DataFrame],
    tables_by_pair: Sequence[Mapping[str, pl.DataFrame]],
) -> pl.DataFrame:
    """The geometry stage's ``statements`` table: one row per (model, claim) with a number and a
    sentence, pooled over datasets.

    ``summary``: the tables of :func:`sinkscope.geometry.summary.summarize` (``bos_alignment``,
    ``value_rank``, ``bos_value_norm_classes``, ``bos_residual_norm``); ``tables_by_pair``: its
    input (the pairs' ``halfspace`` tables and long-context tables). Rows per model:
    ``bos_cosine_max_below_zero_middle_layers`` (share of the middle layers whose maximum cosine is
    below zero, :data:`STATEMENT_BOS_COSINE_BOUND`, on :func:`bos_cosine_readings`, the claim's
    readings),
    ``sink_representable`` (:func:`sink_representable_statements`, also ``n_cases``,
    ``n_trivial`` and ``basis``), ``value_rank_middle_layers`` (median of the middle layers'
    medians, Figure 12), ``sink_heads_switch_off`` (the ``is_sink`` ratio of
    :func:`sinkscope.geometry.values.sink_value_norm_effect`) and ``massive_bos_activation``
    (largest relative BOS residual norm)."""
    from sinkscope.geometry.alignment import bos_max_statement, middle_layers
    from sinkscope.geometry.summary import long_context_table, pair_table
    from sinkscope.geometry.values import RANK_RTOL, value_norm_statement

    alignment = summary["bos_alignment"]
    value_rank, vo_classes = summary["value_rank"], summary["bos_value_norm_classes"]
    residual = summary["bos_residual_norm"]
    _, readings = bos_cosine_readings(alignment, STATEMENT_BOS_COSINE_BOUND)
    representable = sink_representable_statements(
        pair_table(tables_by_pair, "halfspace"), long_context_table(tables_by_pair)
    )
    rows: list[dict[str, Any]] = []
    for model in sorted(set(alignment["model"].to_list())):
        b = readings.filter(pl.col("model") == model).row(0, named=True)
        rows.append(
            {
                "model": model,
                "claim": "bos_cosine_max_below_zero_middle_layers",
                "value": b["n_mid_below_all"] / b["n_middle"],
                "statement": bos_max_statement(b),
            }
        )
        middle = middle_layers(b["n_layers"])
        rows += representable.filter(pl.col("model") == model).to_dicts()
        v = value_rank.filter((pl.col("model") == model) & (pl.col("dataset") == POOLED))
        vm = v.filter(pl.col("layer").is_in(middle))
        rows.append(
            {
                "model": model,
                "claim": "value_rank_middle_layers",
                "value": float(vm["median"].median()),
                "statement": (
                    f"{model}: the relative rank of the value matrices (tolerance {RANK_RTOL:g}) "
                    f"has median {float(vm['median'].median()):.3f} and minimum "
                    f"{float(vm['min'].min()):.3f} in the middle layers, minimum "
                    f"{float(v['min'].min()):.3f} over all layers"
                ),
            }
        )
        c = vo_classes.filter(
            (pl.col("model") == model)
            & (pl.col("dataset") == POOLED)
            & (pl.col("group") == "is_sink")
        )
        sink_row = c.row(0, named=True) if c.height else None
        rows.append(
            {
                "model": model,
                "claim": "sink_heads_switch_off",
                "value": sink_row["ratio"] if sink_row else None,
                "statement": f"{model}: "
                + (value_norm_statement(sink_row) if sink_row else "no sink heads"),
            }
        )
        r = residual.filter(pl.col("model") == model).sort("rel_bos_norm", descending=True)
        rows.append(
            {
                "model": model,
                "claim": "massive_bos_activation",
                "value": float(r["rel_bos_norm"][0]),
                "statement": (
                    f"{model}: the BOS residual-stream norm reaches {float(r['rel_bos_norm'][0]):.1f}"
                    f"x the median token norm (layer {int(r['layer'][0])})"
                ),
            }
        )
    return pl.DataFrame(rows, schema=STATEMENT_SCHEMA)
