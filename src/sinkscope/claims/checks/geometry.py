"""Checks of the geometry claims (§4, §6, App. E.2): read the ``geometry_*`` summary tables.

BOS cosines in the middle layers (Figure 1), sink representability (Proposition 4.1), value ranks
(Figure 12) and the BOS value-output norms of sink heads (§6).
"""

from __future__ import annotations

import math

import polars as pl

from sinkscope.claims.verdicts import Row, model_dataset_order, num, pct, require, row
from sinkscope.heads.names import POOLED

# sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use their helpers
# import them when they run, so importing this module (and rendering the claims that need none of
# them) does not load torch.

__all__ = [
    "check_bos_cosine_middle_layers",
    "check_sink_bos_value_norm",
    "check_sink_representable",
    "check_value_rank_middle_layers",
]


def check_bos_cosine_middle_layers(bos_alignment: pl.DataFrame, bos_cosine_max: float) -> list[Row]:
    """§4 / Fig. 1: the maximum cosine between BOS and every other token at the attention input
    (``space == "Z"``, pooled over datasets) stays below ``bos_cosine_max`` (paper: 0) in every
    middle layer (:func:`sinkscope.geometry.alignment.middle_layers`).

    Both readings of :func:`sinkscope.geometry.alignment.bos_max_readings` (the numbers of Figure 1's panel
    titles) are reported: the maximum over all positions, the paper's statement and the verdict,
    and over positions ``>= 2``, without the first text token, whose input is almost parallel to
    BOS in some models."""
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
    from sinkscope.geometry.alignment import bos_max_readings, bos_max_statement

    rows = []
    pooled = bos_alignment.filter(pl.col("dataset") == POOLED)
    table = pooled if pooled.height else bos_alignment
    readings = bos_max_readings(table, bos_cosine_max)
    for b in readings.iter_rows(named=True):
        datasets = sorted(set(table.filter(pl.col("model") == b["model"])["dataset"].to_list()))
        n_mid = b["n_middle"]
        rows.append(
            row(
                b["model"],
                ", ".join(datasets),
                f"middle layers {b['middle_first']}..{b['middle_last']} of {b['n_layers']}",
                f"all positions: max {num(b['mid_max_all'])} (layer {b['mid_max_all_layer']}), "
                f"{b['n_mid_below_all']}/{n_mid} middle layers below {bos_cosine_max:g}; "
                f"positions >= 2: max {num(b['mid_max_from2'])} (layer "
                f"{b['mid_max_from2_layer']}), {b['n_mid_below_from2']}/{n_mid} below; "
                f"position 1 holds the maximum in {b['n_mid_max_at_first']}/{n_mid}; "
                f"{pct(b['mid_frac_positive'])} of cosines > 0",
                b["mid_max_all"],
                f"max over middle layers of the max cosine over all positions < {bos_cosine_max:g} "
                "(positions >= 2 reported, not tested)",
                b["n_mid_below_all"] == n_mid,
                bos_max_statement(b),
            )
        )
    return rows


def check_sink_representable(
    statements: pl.DataFrame, representable_min_fraction: float
) -> list[Row]:
    """§4 / Prop. 4.1: the sink is representable: the proposition's half-space condition holds for
    the tokens that attend to BOS in sink heads (reads the ``sink_representable`` statement of
    :func:`sinkscope.geometry.summary.summarize`, i.e.
    :func:`sinkscope.geometry.halfspace.sink_representable_statements`).

    Decided on the non-trivial cases only: a (layer, sequence) pair whose two point sets each
    hold at most ``d_model`` points of full rank satisfies the condition whatever its geometry
    (the test cannot fail), so such pairs are counted apart; with no non-trivial pair the claim
    is not applicable. Where the statement's ``basis`` is ``"long_context"`` the pairs are those
    of the long sequences (``T' > d_model`` tokens, where the test can fail) and the set tested
    is every token (``J = [T']``, Figure 1's "any sink pattern", which implies the condition for
    every sink-attending ``J``); otherwise the sink-attending tokens at the extraction's ``T``."""
    from sinkscope.geometry.names import BASIS_LONG_CONTEXT

    require(
        statements,
        ["model", "claim", "value", "statement", "n_cases", "n_trivial"],
        "geometry statements",
    )
    rows = []
    rep = statements.filter(pl.col("claim") == "sink_representable").sort("model")
    test = f"fraction of non-trivial pairs >= {representable_min_fraction:g}"
    for r in rep.iter_rows(named=True):
        value, n_cases, n_trivial = r["value"], r["n_cases"] or 0, r["n_trivial"] or 0
        setting = "(layer, sequence) pairs with sink-attending tokens"
        if r.get("basis") == BASIS_LONG_CONTEXT:
            setting = "long-context (layer, sequence) pairs, T' > d_model, every sink pattern"
        if n_cases == 0:
            rows.append(
                row(
                    r["model"],
                    POOLED,
                    setting,
                    "no (layer, sequence) pair has sink-attending tokens",
                    None,
                    test,
                    None,
                    "model has no BOS-attending tokens in sink heads",
                )
            )
            continue
        if n_trivial == n_cases or value is None or math.isnan(value):
            rows.append(
                row(
                    r["model"],
                    POOLED,
                    setting,
                    f"all {n_cases} pairs trivially separable (n_points <= d_model, full rank)",
                    None,
                    test,
                    None,
                    "not applicable - all cases trivially separable: " + r["statement"],
                )
            )
            continue
        rows.append(
            row(
                r["model"],
                POOLED,
                setting,
                f"condition holds in {pct(value)} of {n_cases - n_trivial} non-trivial pairs "
                f"({n_trivial} of {n_cases} trivially separable, not counted)",
                value,
                test,
                value >= representable_min_fraction,
                r["statement"],
            )
        )
    return rows


def check_value_rank_middle_layers(value_rank: pl.DataFrame, near_full_rank: float) -> list[Row]:
    """App. E.2 / Fig. 12 (used by Prop. 6.1): value matrices have (near) full relative rank in the
    middle layers: the median relative rank of every middle layer is ``>= near_full_rank``."""
    from sinkscope.geometry.alignment import middle_layers

    require(value_rank, ["model", "dataset", "layer", "median", "min"], "value_rank")
    rows = []
    for (model, dataset), v in model_dataset_order(value_rank).group_by(
        "model", "dataset", maintain_order=True
    ):
        v = v.sort("layer")
        n_layers = int(v["layer"].max()) + 1
        middle = middle_layers(n_layers)
        vm = v.filter(pl.col("layer").is_in(middle))
        test = f"per-layer median relative rank >= {near_full_rank:g} in every middle layer"
        if vm.height == 0:
            rows.append(
                row(
                    str(model),
                    str(dataset),
                    f"middle layers {middle[0]}..{middle[-1]}",
                    "n/a",
                    None,
                    test,
                    None,
                    "the value_rank table holds none of the middle layers",
                )
            )
            continue
        worst = vm.sort("median").row(0, named=True)
        ok = vm.filter(pl.col("median") >= near_full_rank).height
        rows.append(
            row(
                str(model),
                str(dataset),
                f"middle layers {middle[0]}..{middle[-1]}",
                f"lowest layer median {worst['median']:.3f} (layer {worst['layer']}); "
                f"minimum {float(vm['min'].min()):.3f}",
                float(worst["median"]),
                test,
                ok == vm.height,
                f"{ok} of {vm.height} middle layers have median relative rank >= {near_full_rank:g}",
            )
        )
    return rows


def check_sink_bos_value_norm(
    bos_value_norm_classes: pl.DataFrame, bos_value_ratio_max: float
) -> list[Row]:
    """§6 (assumption ``W_VO x_0 = 0``, supported by [13]): sink heads have a small BOS
    value-output vector, measured against the other heads of the same model.

    Effect size (:func:`sinkscope.geometry.values.sink_value_norm_effect`, on the ``"is_sink"`` rows of
    the summary table): the ratio of the median ``|W_VO z_0| / median_i |W_VO z_i|`` over sink
    heads (``is_sink``) to the median over the other heads, with a bootstrap interval over heads
    and the per-dataset spread. ``W_VO x_0 = 0`` is a ratio of 0, no difference a ratio of 1.
    Reproduced when the upper end of the interval is at most ``bos_value_ratio_max`` (the
    schema's reason: a two-fold reduction)."""
    require(
        bos_value_norm_classes,
        ["model", "dataset", "group", "n_heads", "ratio", "ratio_lo", "ratio_hi"],
        "bos_value_norm_classes",
    )
    from sinkscope.geometry.values import value_norm_statement

    rows = []
    table = model_dataset_order(bos_value_norm_classes)
    for (model, dataset), c in table.group_by("model", "dataset", maintain_order=True):
        sink = c.filter(pl.col("group") == "is_sink")
        e = sink.row(0, named=True) if sink.height else None
        test = (
            f"upper end of the bootstrap interval of median(sink) / median(other heads) "
            f"<= {bos_value_ratio_max:g}"
        )
        if e is None or not e["n_sink"] or not e["n_other"] or e["ratio"] is None:
            rows.append(
                row(
                    str(model),
                    str(dataset),
                    "sink vs other head instances",
                    "no sink heads" if e is None or not e["n_sink"] else "no non-sink heads",
                    None,
                    test,
                    None,
                    "model has no BOS-attending (sink) heads"
                    if e is None or not e["n_sink"]
                    else "every head is a sink head: nothing to compare with",
                )
            )
            continue
        hi = e["ratio_hi"]
        passed = hi is not None and hi <= bos_value_ratio_max
        rows.append(
            row(
                str(model),
                str(dataset),
                f"{e['n_sink']} sink vs {e['n_other']} other head instances",
                f"ratio {num(e['ratio'])} [{num(e['ratio_lo'])}, {num(hi)}] "
                f"(sink median {num(e['sink_median'])}, other {num(e['other_median'])})",
                e["ratio"],
                test,
                passed,
                value_norm_statement(e)
                + (
                    ""
                    if passed
                    else f"; the interval reaches above {bos_value_ratio_max:g}"
                    + (" and includes 1 (no difference)" if hi is not None and hi >= 1 else "")
                ),
            )
        )
    return rows
