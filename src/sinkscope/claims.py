"""The claims table: every claim of the three studies checked against what the pipeline measured.

One :class:`Claim` per statement of the papers (``/work/shared/papers``: *Sink vs. diagonal
patterns* (§3-§7, App. C-E), the value-softmax polarization abstracts and figure captions, and the
StreamingLLM notes). Each claim names the section / figure / number where the paper makes it, the
paper's value, the summary tables it reads, and a small, named, typed ``check_*`` function that
takes those tables and the claim's tolerances (config section ``claims``; defaults in
:data:`DEFAULT_TOLERANCES`, documented per key in ``workflow/schemas/config.schema.yaml``) and
returns one row per model (x dataset, or per setting for the synthetic experiments) with

* ``measured`` (a short human-readable statement) and ``value`` (the number the test compares),
* ``test`` (the comparison, tolerance included),
* ``verdict`` in :data:`VERDICTS` and a ``reason``.

Verdicts: ``reproduced`` / ``not reproduced`` when the measured number passes / fails the test;
``not applicable`` when the claim cannot be tested here -- the analysis did not run in this config
(its summary table is not an input: :data:`NOT_RUN`), or the model has nothing the claim speaks
about (e.g. no sink heads), with the reason spelled out. Tolerances come from the paper's own
numbers where it states them (0.1 in Fig. 7, 40 % / 60 % thresholds, 13-21 %, slopes 1 and 3/2);
where the paper only uses words ("most", "few", "roughly half", "sharply") the tolerance is a
fixed reading of that word, chosen once and documented, never tuned to turn a verdict.

Inputs are the summary tables of the analyses, keyed as in :data:`TABLE_ANALYSIS` (the rule reads
the parquet files that :meth:`sinkscope.paths.Paths.claims_inputs` lists for this config).
:func:`evaluate_claims` runs every claim; :func:`write_claims` writes ``claims.md`` (not-reproduced
claims first), ``claims.parquet`` / ``.csv`` and ``claims.rst`` (included at the top of the
Snakemake report's main page). What the figures show about the models but no claim states
(sink-head profile over depth, BOS-norm jump, sign of the BOS cosines, lowest value ranks) is
computed by :mod:`sinkscope.observations` and rendered after the claims in ``claims.md``
("Observations (shown by the figures; not claims of the paper)"), with its own table
``summary/observations.parquet``.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from sinkscope.heads import POOLED  # the pooled pseudo-dataset of the summary tables
from sinkscope.io import atomic_path, write_table

# sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use their helpers
# import them when they run, so importing this module (and rendering the claims that need none of
# them) does not load torch.

__all__ = [
    "CLAIMS",
    "COLUMNS",
    "DEFAULT_TOLERANCES",
    "NOT_APPLICABLE",
    "NOT_REPRODUCED",
    "NOT_RUN",
    "REPRODUCED",
    "SYNTHETIC",
    "TABLE_ANALYSIS",
    "VERDICTS",
    "Claim",
    "claims_markdown",
    "claims_rst",
    "compare_runs",
    "compare_runs_markdown",
    "evaluate_claims",
    "resolve_tolerances",
    "write_claims",
]

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_APPLICABLE = "not applicable"
VERDICTS = (NOT_REPRODUCED, REPRODUCED, NOT_APPLICABLE)
#: Reason of a claim whose analysis is not part of this config.
NOT_RUN = "analysis not run in this config"
#: ``model`` of the claims about synthetic experiments (no pretrained model involved).
SYNTHETIC = "synthetic"

#: Columns of the claims table, in order.
COLUMNS: dict[str, Any] = {
    "claim_id": pl.String,
    "claim": pl.String,
    "source": pl.String,
    "paper_value": pl.String,
    "model": pl.String,
    "dataset": pl.String,
    "setting": pl.String,
    "measured": pl.String,
    "value": pl.Float64,
    "test": pl.String,
    "verdict": pl.String,
    "reason": pl.String,
}

#: Summary table key -> the analysis that writes it (the ``model`` axis of a missing table's
#: rows: per-model analyses get one not-applicable row per model, synthetic ones a single row).
TABLE_ANALYSIS: dict[str, str] = {
    "head_classes": "heads",
    "geometry_bos_alignment": "geometry",
    "geometry_value_rank": "geometry",
    "geometry_bos_value_norm_classes": "geometry",
    "geometry_statements": "geometry",
    # read only by sinkscope.observations (the "Observations" section of claims.md)
    "geometry_bos_residual_norm": "geometry",
    "geometry_value_rank_worst": "geometry",
    "oversmoothing_summary": "oversmoothing",
    "oversmoothing_per_head": "oversmoothing",
    "costs_toy": "costs",
    "costs_backcopy_runs": "costs",
    "costs_backcopy_slopes": "costs",
    "costs_copypaste_runs": "costs",
    "streaming_sink_heads": "streaming",
    "streaming_recompute": "streaming",
    "dynamics_value_softmax_by_variant": "dynamics",
    "dynamics_induction_by_setup": "dynamics",
    "dynamics_classification_final": "dynamics",
}
PER_MODEL_ANALYSES = ("heads", "geometry", "oversmoothing", "streaming")

#: Default tolerances of every claim (the config's ``claims`` section overrides them per key).
DEFAULT_TOLERANCES: dict[str, dict[str, Any]] = {
    "heads": {
        "sink_min_fraction": 0.1,
        "diagonal_fraction_range": [0.006, 0.095],
        "sink_prev_fraction_range": [0.13, 0.21],
    },
    "geometry": {
        "bos_cosine_max": 0.0,
        "representable_min_fraction": 1.0,
        "near_full_rank": 0.9,
        "bos_value_ratio_max": 0.5,
    },
    "oversmoothing": {
        "approximation_error": 0.1,
        "approximation_relative_offset": 0.25,
        "most": 0.5,
        "min_difference": 0.0,
        "half_band": 0.25,
        "few_max_fraction": 0.1,
    },
    "costs": {
        "toy_rtol": 1e-6,
        "slope_tolerance": 0.25,
        "flat_max_slope": 0.1,
        "growth_min_slope": 0.1,
    },
    "streaming": {
        "sharp_ppl_ratio": 2.0,
        "max_sink_tokens": 4,
        "min_recovered_fraction": 0.9,
    },
    "dynamics": {
        "majority": 0.5,
        "softmax_min_sink_proportion": 0.1,
        "unnormalized_max_sink_proportion": 0.05,
        "min_difference": 0.0,
    },
}

Row = dict[str, Any]
Tables = Mapping[str, pl.DataFrame]


def resolve_tolerances(overrides: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """:data:`DEFAULT_TOLERANCES` with the config's ``claims`` section applied (unknown keys fail)."""
    out = copy.deepcopy(DEFAULT_TOLERANCES)
    for group, values in (overrides or {}).items():
        if group not in out:
            raise KeyError(f"claims.{group}: unknown group; known: {sorted(out)}")
        for key, value in values.items():
            if key not in out[group]:
                raise KeyError(f"claims.{group}.{key}: unknown key; known: {sorted(out[group])}")
            out[group][key] = value
    return out


def _verdict(passed: bool | None) -> str:
    if passed is None:
        return NOT_APPLICABLE
    return REPRODUCED if passed else NOT_REPRODUCED


def _row(
    model: str,
    dataset: str,
    setting: str,
    measured: str,
    value: float | None,
    test: str,
    passed: bool | None,
    reason: str,
) -> Row:
    number = None if value is None or (isinstance(value, float) and math.isnan(value)) else value
    return {
        "model": model,
        "dataset": dataset,
        "setting": setting,
        "measured": measured,
        "value": None if number is None else float(number),
        "test": test,
        "verdict": _verdict(passed),
        "reason": reason,
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}g}"


def _heads(n: int) -> str:
    return f"{n} head" if n == 1 else f"{n} heads"


def _require(table: pl.DataFrame, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"claims: table {name!r} lacks the column(s) {missing}")


def _model_dataset_order(table: pl.DataFrame) -> pl.DataFrame:
    """Rows sorted by model, then datasets with the pooled ``"all"`` last."""
    return table.sort("model", pl.col("dataset") == POOLED, "dataset")


# =============================================================================== heads (§3, §7)


def check_sink_heads_common(head_classes: pl.DataFrame, sink_min_fraction: float) -> list[Row]:
    """§1/§7: sink heads are common and more prevalent than diagonal heads.

    Per model and dataset: ``frac_sink >= sink_min_fraction`` and ``frac_sink > frac_diagonal``.
    """
    _require(
        head_classes, ["model", "dataset", "n_heads", "frac_sink", "frac_diagonal"], "head_classes"
    )
    rows = []
    for r in _model_dataset_order(head_classes).iter_rows(named=True):
        sink, diag = r["frac_sink"], r["frac_diagonal"]
        common, more = sink >= sink_min_fraction, sink > diag
        reason = (
            f"{_pct(sink)} sink heads vs {_pct(diag)} diagonal heads"
            + ("" if common else f"; below the {_pct(sink_min_fraction)} floor")
            + ("" if more else "; sinks are not more common than diagonals")
        )
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                f"{r['n_heads']} heads",
                f"sink {_pct(sink)}, diagonal {_pct(diag)}",
                sink,
                f"frac_sink >= {sink_min_fraction:g} and frac_sink > frac_diagonal",
                common and more,
                reason,
            )
        )
    return rows


def check_diagonal_heads_rarer(head_classes: pl.DataFrame) -> list[Row]:
    """§7: diagonal heads exist (at least one head) but are rarer than sink heads."""
    _require(
        head_classes, ["model", "dataset", "n_heads", "frac_sink", "frac_diagonal"], "head_classes"
    )
    rows = []
    for r in _model_dataset_order(head_classes).iter_rows(named=True):
        sink, diag = r["frac_sink"], r["frac_diagonal"]
        n_diag = round(diag * r["n_heads"])
        exists, rarer = n_diag >= 1, diag < sink
        if not exists:
            reason = "no head has >= the diagonal threshold of its mass on the diagonal"
        elif not rarer:
            reason = f"diagonal heads ({_pct(diag)}) are not rarer than sink heads ({_pct(sink)})"
        else:
            reason = f"{_heads(n_diag)} diagonal ({_pct(diag)}) < sink heads ({_pct(sink)})"
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                f"{r['n_heads']} heads",
                f"diagonal {_pct(diag)} ({_heads(n_diag)}), sink {_pct(sink)}",
                diag,
                "0 < frac_diagonal < frac_sink",
                exists and rarer,
                reason,
            )
        )
    return rows


def _range_rows(
    head_classes: pl.DataFrame, column: str, bounds: Sequence[float], label: str
) -> list[Row]:
    _require(head_classes, ["model", "dataset", "n_heads", column], "head_classes")
    lo, hi = float(bounds[0]), float(bounds[1])
    if lo > hi:
        raise ValueError(f"claims: the range of {column} is empty ({lo} > {hi})")
    rows = []
    for r in _model_dataset_order(head_classes).iter_rows(named=True):
        x = r[column]
        inside = lo <= x <= hi
        where = "inside" if inside else ("below" if x < lo else "above")
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                f"{r['n_heads']} heads",
                f"{label} {_pct(x)}",
                x,
                f"{lo:g} <= {column} <= {hi:g}",
                inside,
                f"{_pct(x)} is {where} the paper's range {_pct(lo)}-{_pct(hi)}",
            )
        )
    return rows


def check_diagonal_fraction_in_paper_range(
    head_classes: pl.DataFrame, diagonal_fraction_range: Sequence[float]
) -> list[Row]:
    """§7: 6 % / 0.6 % / 9.5 % of heads (gpt2-medium / Llama 3.1-8B / Gemma 7B) are diagonal."""
    return _range_rows(head_classes, "frac_diagonal", diagonal_fraction_range, "diagonal heads")


def check_sink_prev_fraction_in_paper_range(
    head_classes: pl.DataFrame, sink_prev_fraction_range: Sequence[float]
) -> list[Row]:
    """Remark C.4: 16 % / 13 % / 21 % of heads (gpt2 / Llama 3.1-8B / Gemma 7B) are sink+prev."""
    return _range_rows(
        head_classes, "frac_sink_prev", sink_prev_fraction_range, "sink+previous-token heads"
    )


# =============================================================================== geometry (§4, §6, E.2)


def check_bos_cosine_middle_layers(bos_alignment: pl.DataFrame, bos_cosine_max: float) -> list[Row]:
    """§4 / Fig. 1: the maximum cosine between BOS and every other token at the attention input
    (``space == "Z"``, pooled over datasets) stays below ``bos_cosine_max`` (paper: 0) in every
    middle layer (:func:`sinkscope.geometry.alignment.middle_layers`).

    Both readings of :func:`sinkscope.geometry.alignment.bos_max_readings` (the numbers of Figure 1's panel
    titles) are reported: the maximum over all positions, the paper's statement and the verdict,
    and over positions ``>= 2``, without the first text token, whose input is almost parallel to
    BOS in some models."""
    _require(
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
            _row(
                b["model"],
                ", ".join(datasets),
                f"middle layers {b['middle_first']}..{b['middle_last']} of {b['n_layers']}",
                f"all positions: max {_num(b['mid_max_all'])} (layer {b['mid_max_all_layer']}), "
                f"{b['n_mid_below_all']}/{n_mid} middle layers below {bos_cosine_max:g}; "
                f"positions >= 2: max {_num(b['mid_max_from2'])} (layer "
                f"{b['mid_max_from2_layer']}), {b['n_mid_below_from2']}/{n_mid} below; "
                f"position 1 holds the maximum in {b['n_mid_max_at_first']}/{n_mid}; "
                f"{_pct(b['mid_frac_positive'])} of cosines > 0",
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

    _require(
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
                _row(
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
                _row(
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
            _row(
                r["model"],
                POOLED,
                setting,
                f"condition holds in {_pct(value)} of {n_cases - n_trivial} non-trivial pairs "
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

    _require(value_rank, ["model", "dataset", "layer", "median", "min"], "value_rank")
    rows = []
    for (model, dataset), v in _model_dataset_order(value_rank).group_by(
        "model", "dataset", maintain_order=True
    ):
        v = v.sort("layer")
        n_layers = int(v["layer"].max()) + 1
        middle = middle_layers(n_layers)
        vm = v.filter(pl.col("layer").is_in(middle))
        test = f"per-layer median relative rank >= {near_full_rank:g} in every middle layer"
        if vm.height == 0:
            rows.append(
                _row(
                    str(model), str(dataset), f"middle layers {middle[0]}..{middle[-1]}", "n/a",
                    None, test, None, "the value_rank table holds none of the middle layers",
                )
            )
            continue
        worst = vm.sort("median").row(0, named=True)
        ok = vm.filter(pl.col("median") >= near_full_rank).height
        rows.append(
            _row(
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
    _require(
        bos_value_norm_classes,
        ["model", "dataset", "group", "n_heads", "ratio", "ratio_lo", "ratio_hi"],
        "bos_value_norm_classes",
    )
    from sinkscope.geometry.values import value_norm_statement

    rows = []
    table = _model_dataset_order(bos_value_norm_classes)
    for (model, dataset), c in table.group_by("model", "dataset", maintain_order=True):
        sink = c.filter(pl.col("group") == "is_sink")
        e = sink.row(0, named=True) if sink.height else None
        test = (
            f"upper end of the bootstrap interval of median(sink) / median(other heads) "
            f"<= {bos_value_ratio_max:g}"
        )
        if e is None or not e["n_sink"] or not e["n_other"] or e["ratio"] is None:
            rows.append(
                _row(
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
            _row(
                str(model),
                str(dataset),
                f"{e['n_sink']} sink vs {e['n_other']} other head instances",
                f"ratio {_num(e['ratio'])} [{_num(e['ratio_lo'])}, {_num(hi)}] "
                f"(sink median {_num(e['sink_median'])}, other {_num(e['other_median'])})",
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


# =============================================================================== oversmoothing (§5, E.1)


def _largest_context(summary: pl.DataFrame) -> pl.DataFrame:
    largest = summary.filter(
        pl.col("context_length") == pl.col("context_length").max().over("model", "dataset")
    )
    return _model_dataset_order(largest)


def _with_pooled_heads(per_head: pl.DataFrame) -> pl.DataFrame:
    heads = per_head.filter(pl.col("dataset") != POOLED)
    return pl.concat([heads, heads.with_columns(dataset=pl.lit(POOLED))], how="vertical_relaxed")


def check_approximation_every_head(per_head: pl.DataFrame, approximation_error: float) -> list[Row]:
    """App. E.1 / Fig. 7: ``|rho - rho_hat|`` (approximation (2) of Theorem 5.1) is below
    ``approximation_error`` (paper: 0.1) for every head, for ``X`` and ``X + WZ``, at each pair's
    largest context length (the paper's Fig. 7 uses 512)."""
    _require(
        per_head, ["model", "dataset", "context_length", "abs_err_x", "abs_err_xwz"], "per_head"
    )
    rows = []
    heads = _largest_context(_with_pooled_heads(per_head))
    for (model, dataset), h in heads.group_by("model", "dataset", maintain_order=True):
        err = h.select(pl.max_horizontal("abs_err_x", "abs_err_xwz").alias("e"))["e"]
        worst = float(err.max())
        n_over = int((err >= approximation_error).sum())
        rows.append(
            _row(
                str(model),
                str(dataset),
                f"T'={int(h['context_length'][0])}, {h.height} heads",
                f"max error {worst:.3f} (X: {float(h['abs_err_x'].max()):.3g}, "
                f"X+WZ: {float(h['abs_err_xwz'].max()):.3g})",
                worst,
                f"max over heads of |rho - rho_hat| < {approximation_error:g}",
                worst < approximation_error,
                f"{n_over} of {h.height} heads have an error >= {approximation_error:g}",
            )
        )
    return rows


def check_approximation_most_heads(
    per_head: pl.DataFrame, approximation_error: float, most: float
) -> list[Row]:
    """§5: the approximation is accurate "for most individual attention heads": more than
    ``most`` of the heads have ``|rho - rho_hat| < approximation_error`` for both ``X`` and
    ``X + WZ``."""
    _require(
        per_head, ["model", "dataset", "context_length", "abs_err_x", "abs_err_xwz"], "per_head"
    )
    rows = []
    heads = _largest_context(_with_pooled_heads(per_head))
    for (model, dataset), h in heads.group_by("model", "dataset", maintain_order=True):
        err = h.select(pl.max_horizontal("abs_err_x", "abs_err_xwz").alias("e"))["e"]
        frac = float((err < approximation_error).mean())
        rows.append(
            _row(
                str(model),
                str(dataset),
                f"T'={int(h['context_length'][0])}, {h.height} heads",
                f"{_pct(frac)} of heads within {approximation_error:g}",
                frac,
                f"fraction of heads with error < {approximation_error:g} > {most:g}",
                frac > most,
                f"{_pct(frac)} of heads have both errors below {approximation_error:g}",
            )
        )
    return rows


def check_mean_approximation(
    summary: pl.DataFrame, approximation_relative_offset: float
) -> list[Row]:
    """§5 / Fig. 2 left: the head-averaged ``rho`` and approximation (2) are in "excellent
    agreement" for ``X`` and ``X + WZ`` (head update not rescaled) across context lengths.

    The figure's two curves are compared on the figure's own scale
    (:func:`sinkscope.oversmoothing.summary.approximation_offsets`): the largest gap over ``T'`` between
    the solid (empirical) and the dashed (approximation) curve, relative to the empirical curve's
    whole change across ``T'`` (``max - min``). Holds if that ratio is at most
    ``approximation_relative_offset`` for both components. An absolute bound would not do: the
    head-averaged curves change by only a few hundredths across ``T'`` here, so an offset as
    large as the whole curve would pass Fig. 7's per-head 0.1."""
    _require(
        summary,
        [
            "model",
            "dataset",
            "context_length",
            "mean_rho_x",
            "mean_rhohat_x",
            "mean_rho_xwz",
            "mean_rhohat_xwz",
        ],
        "summary",
    )
    from sinkscope.oversmoothing.summary import approximation_offsets

    test = f"largest |gap| / range across T' <= {approximation_relative_offset:g} for X and X+WZ"
    rows = []
    offsets = _model_dataset_order(approximation_offsets(summary))
    for r in offsets.iter_rows(named=True):
        lengths = sorted(
            summary.filter((pl.col("model") == r["model"]) & (pl.col("dataset") == r["dataset"]))[
                "context_length"
            ].to_list()
        )
        setting = f"T' in {lengths}"
        if r["rel_offset"] is None:
            rows.append(
                _row(
                    r["model"],
                    r["dataset"],
                    setting,
                    "n/a",
                    None,
                    test,
                    None,
                    "one context length: no curve across T' to compare",
                )
            )
            continue
        parts = {
            c: f"{name}: largest gap {r[f'signed_offset_{c}']:+.2g} = "
            f"{r[f'rel_offset_{c}']:.2g} x the curve's range {r[f'range_{c}']:.2g}"
            for c, name in (("x", "X"), ("xwz", "X+WZ"))
        }
        worst = "xwz" if r["rel_offset_xwz"] >= r["rel_offset_x"] else "x"
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                setting,
                parts[worst],
                r["rel_offset"],
                test,
                r["rel_offset"] <= approximation_relative_offset,
                f"{parts['x']}; {parts['xwz']} (gap = empirical - approximation, head means; "
                "Fig. 2 left's second title line)",
            )
        )
    return rows


def _difference_rows(
    summary: pl.DataFrame,
    larger: str,
    smaller: str | None,
    min_difference: float,
    what: str,
    needs: str | None = None,
) -> list[Row]:
    """Rows testing ``larger - smaller > min_difference`` (``smaller=None``: 0) at the largest T'."""
    cols = ["model", "dataset", "context_length", "n_heads", larger]
    cols += [c for c in (smaller, needs) if c]
    _require(summary, cols, "oversmoothing summary")
    rows = []
    test = f"{larger}{f' - {smaller}' if smaller else ''} > {min_difference:g}"
    for r in _largest_context(summary).iter_rows(named=True):
        a = r[larger]
        b = r[smaller] if smaller else 0.0
        setting = f"T'={r['context_length']}, {r['n_heads']} heads"
        if needs and not r[needs]:
            rows.append(
                _row(
                    r["model"],
                    r["dataset"],
                    setting,
                    "n/a",
                    None,
                    test,
                    None,
                    f"no heads to average over ({needs} = 0)",
                )
            )
            continue
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            rows.append(
                _row(r["model"], r["dataset"], setting, "n/a", None, test, None, "value missing")
            )
            continue
        diff = a - b
        measured = f"{what}: {a:.4f}" + (f" vs {b:.4f} (difference {diff:+.4f})" if smaller else "")
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                setting,
                measured,
                diff,
                test,
                diff > min_difference,
                f"{larger} = {a:.4f}" + (f", {smaller} = {b:.4f}" if smaller else ""),
            )
        )
    return rows


def check_w_decreases_similarity(summary: pl.DataFrame, min_difference: float) -> list[Row]:
    """§5 / Fig. 2 right: applying ``W`` decreases the average cosine:
    ``rho(X) > rho(X + s_l WZ)``, averaged over all heads. Basis of Fig. 2 right (§5: "The
    attention contribution is rescaled to match the magnitude of the original token matrix",
    App. E.1 eq. (11)); the unrescaled ``X + WZ`` of Fig. 2 left is the approximation's basis,
    not this claim's."""
    return _difference_rows(
        summary, "mean_rho_x", "mean_rho_xwz_s", min_difference, "rho(X) vs rho(X + s_l WZ)"
    )


def check_attention_raises_similarity(summary: pl.DataFrame, min_difference: float) -> list[Row]:
    """§5 / Figs. 2, 6: attention raises the average cosine on average:
    ``rho(X + WZA^T) - rho(X) > 0`` (rescaled), averaged over heads."""
    return _difference_rows(
        summary, "mean_increase_attn_s", None, min_difference, "mean rho(X+WZA^T) - rho(X)"
    )


def check_dense_heads_raise_more(summary: pl.DataFrame, min_difference: float) -> list[Row]:
    """§5 / Figs. 2, 6: the increase is larger for heads with uniformity above the threshold
    (paper: 0.6) than for all heads."""
    return _difference_rows(
        summary,
        "mean_increase_attn_s_dense",
        "mean_increase_attn_s",
        min_difference,
        "increase for dense heads vs all heads",
        needs="n_dense",
    )


def check_uniform_raises_more(summary: pl.DataFrame, min_difference: float) -> list[Row]:
    """§5 / Figs. 2, 6: uniform attention ``A_u`` raises the average cosine more than the learned
    attention: ``rho(X + WZA_u^T) > rho(X + WZA^T)`` on average (rescaled)."""
    return _difference_rows(
        summary,
        "mean_increase_unif_s",
        "mean_increase_attn_s",
        min_difference,
        "increase under uniform vs learned attention",
    )


def _condition_setting(r: dict[str, Any]) -> str:
    return f"T'={r['context_length']}, {r['n_non_sink']} non-sink heads of {r['n_heads']}"


def check_condition_i_about_half(summary: pl.DataFrame, half_band: float) -> list[Row]:
    """§5 / Figs. 8-9: "roughly half of the heads satisfy condition (i)" ``beta tr(BW) > 0``:
    ``|frac_cond_i_s_non_sink - 1/2| <= half_band``, on the heads Figs. 8-9 show
    (:data:`sinkscope.oversmoothing.summary.CONDITION_BASIS`; condition (i) does not depend on
    ``s_l``)."""
    cols = ["model", "dataset", "context_length", "n_heads", "n_non_sink"]
    cols += ["n_cond_i_s_non_sink", "frac_cond_i_s_non_sink"]
    _require(summary, cols, "oversmoothing summary")
    test = f"|frac_cond_i_s_non_sink - 0.5| <= {half_band:g}"
    return _condition_rows(summary, "i", test, lambda x: abs(x - 0.5) <= half_band, lambda r: "")


def check_condition_ii_few(summary: pl.DataFrame, few_max_fraction: float) -> list[Row]:
    """§5 / Figs. 8-9, App. E.1: few heads satisfy condition (ii)
    ``beta tr(BW) + tr(BW^T W) < 0``: ``frac_cond_ii_s_non_sink <= few_max_fraction`` on the
    heads and map of Figs. 8-9 (:data:`sinkscope.oversmoothing.summary.CONDITION_BASIS`). Condition (ii)
    depends on the scale of the map; the reason also gives the share for the unscaled ``W``
    (named as such; not plotted)."""
    cols = ["model", "dataset", "context_length", "n_heads", "n_non_sink"]
    cols += ["n_cond_ii_s_non_sink", "frac_cond_ii_s_non_sink", "frac_cond_ii_non_sink"]
    _require(summary, cols, "oversmoothing summary")
    test = f"frac_cond_ii_s_non_sink <= {few_max_fraction:g}"
    return _condition_rows(
        summary,
        "ii",
        test,
        lambda x: x <= few_max_fraction,
        lambda r: (
            f"; for the unscaled head map W (not plotted): {_pct(r['frac_cond_ii_non_sink'])}"
        ),
    )


def _condition_rows(
    summary: pl.DataFrame,
    condition: str,
    test: str,
    passes: Callable[[float], bool],
    extra_reason: Callable[[dict[str, Any]], str],
) -> list[Row]:
    """One row per model and dataset at the largest context length for condition ``(i)`` or
    ``(ii)`` of Theorem 5.1 on the non-sink heads and map of Figs. 8-9 (``n_cond_<c>_s_non_sink``
    of ``n_non_sink``); "n/a" where every head is a sink head."""
    from sinkscope.oversmoothing.summary import CONDITION_BASIS

    rows = []
    for r in _largest_context(summary).iter_rows(named=True):
        x = r[f"frac_cond_{condition}_s_non_sink"]
        if x is None or math.isnan(x):
            rows.append(
                _row(
                    r["model"],
                    r["dataset"],
                    _condition_setting(r),
                    "n/a",
                    None,
                    test,
                    None,
                    "every head is a sink head",
                )
            )
            continue
        counts = f"{r[f'n_cond_{condition}_s_non_sink']} of {r['n_non_sink']} non-sink heads"
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                _condition_setting(r),
                f"{counts} ({_pct(x)}) satisfy ({condition})",
                x,
                test,
                passes(x),
                f"{counts} satisfy condition ({condition}); basis: {CONDITION_BASIS} (Figs. 8-9 "
                f"titles){extra_reason(r)}",
            )
        )
    return rows


def check_predicted_signs(summary: pl.DataFrame, most: float) -> list[Row]:
    """§5 / Figs. 8-9: the monotonicity predicted by Theorem 5.1 mostly holds: among the non-sink
    heads with a prediction (condition (i) or (ii) for ``s_l W``), the share whose ``rho``
    changes with the predicted sign both from ``X+WZ`` to ``X+WZA^T`` (Fig. 8) and on to
    ``X+WZA_u^T`` (Fig. 9) is > ``most`` (App. E.1: "Both quantities should be positive when ...
    negative when ..."). The measured text also gives each figure's own share, as their titles
    do."""
    cols = ["model", "dataset", "context_length", "n_predicted_s"]
    cols += ["agree_attn_s", "agree_unif_s", "agree_both_s"]
    _require(summary, cols, "oversmoothing summary")
    from sinkscope.oversmoothing.summary import CONDITION_BASIS

    rows = []
    test = f"agree_both_s > {most:g}"
    for r in _largest_context(summary).iter_rows(named=True):
        x = r["agree_both_s"]
        setting = f"T'={r['context_length']}, {r['n_predicted_s']} non-sink heads with a prediction"
        if x is None or math.isnan(x):
            rows.append(
                _row(
                    r["model"],
                    r["dataset"],
                    setting,
                    "n/a",
                    None,
                    test,
                    None,
                    "no non-sink head satisfies condition (i) or (ii)",
                )
            )
            continue
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                setting,
                f"{_pct(x)} follow both predicted signs (Fig. 8 alone: "
                f"{_pct(r['agree_attn_s'])}, Fig. 9 alone: {_pct(r['agree_unif_s'])})",
                x,
                test,
                x > most,
                f"{_pct(x)} of the {r['n_predicted_s']} heads with a prediction change rho with "
                f"the predicted sign in both Figs. 8 and 9; basis: {CONDITION_BASIS}",
            )
        )
    return rows


def check_similarity_stays_positive(summary: pl.DataFrame) -> list[Row]:
    """App. E.1 / Fig. 4: the average token cosine similarity stays positive across layers (before
    and after each attention update): smallest per-layer ``rho`` > 0 (the paper's own bound)."""
    _require(
        summary, ["model", "dataset", "context_length", "min_rho_layers"], "oversmoothing summary"
    )
    rows = []
    for (model, dataset), s in _model_dataset_order(summary).group_by(
        "model", "dataset", maintain_order=True
    ):
        x = float(s["min_rho_layers"].min())
        rows.append(
            _row(
                str(model),
                str(dataset),
                f"T' in {sorted(s['context_length'].to_list())}",
                f"smallest layer rho {x:.3f}",
                x,
                "min over layers and T' of rho > 0",
                x > 0,
                f"the smallest average cosine over layers and context lengths is {x:.3f}",
            )
        )
    return rows


# =============================================================================== costs (§7, Fig. 3, D.1)


def check_toy_nuclear_norms(toy: pl.DataFrame, toy_rtol: float) -> list[Row]:
    """§7 (intro): on ``X = I_{T+1}`` the sink needs nuclear norm ``kappa sqrt(T+1)``, the diagonal
    ``kappa (T+1)``: the measured ratio diagonal / sink equals ``sqrt(T+1)``."""
    from sinkscope.costs.toy import toy_ratio_deviation

    _require(toy, ["T", "ratio_diag_over_sink"], "costs toy")
    worst = toy_ratio_deviation(toy.to_dicts())
    return [
        _row(
            SYNTHETIC,
            "-",
            f"T in {toy['T'].to_list()}",
            f"largest relative deviation from sqrt(T+1): {worst:.2g}",
            worst,
            f"|ratio / sqrt(T+1) - 1| <= {toy_rtol:g} at every T",
            worst <= toy_rtol,
            f"diagonal / sink nuclear norm = sqrt(T+1) within {worst:.2g} (relative)",
        )
    ]


def check_backcopy_slopes(backcopy_slopes: pl.DataFrame, slope_tolerance: float) -> list[Row]:
    """§7 / Fig. 3 left (Theorem 7.1): on a log-log scale the backcopy cost grows with slope about
    1 for the sink and 3/2 for the diagonal (total cost, ``1/d`` score normalisation as in the
    paper): ``|slope - expected| <= slope_tolerance`` (0.25 = half the gap between 1 and 3/2)."""
    _require(backcopy_slopes, ["cost", "pattern", "slope", "n"], "backcopy_slopes")
    rows = []
    expected = {"sink": 1.0, "diagonal": 1.5}
    total = backcopy_slopes.filter(pl.col("cost") == "cost_total").sort("pattern", descending=True)
    for r in total.iter_rows(named=True):
        want = expected.get(r["pattern"])
        if want is None:
            continue
        slope = r["slope"]
        test = f"|slope - {want:g}| <= {slope_tolerance:g}"
        if slope is None or math.isnan(slope):
            rows.append(
                _row(
                    SYNTHETIC,
                    "-",
                    f"pattern={r['pattern']}",
                    "n/a",
                    None,
                    test,
                    None,
                    f"fewer than 2 context lengths ({int(r['n'])}) to fit a slope",
                )
            )
            continue
        rows.append(
            _row(
                SYNTHETIC,
                "-",
                f"pattern={r['pattern']}, {int(r['n'])} values of T",
                f"slope {slope:.3f}",
                slope,
                test,
                abs(slope - want) <= slope_tolerance,
                f"log-log slope of the total cost in T is {slope:.3f} (paper: about {want:g})",
            )
        )
    return rows


def check_backcopy_sink_cheaper(backcopy_runs: pl.DataFrame) -> list[Row]:
    """§7 / Theorem 7.1, Fig. 3 left: larger context lengths favour sinks: at the largest ``T``
    the sink block is cheaper than the diagonal one (mean total cost over seeds)."""
    from sinkscope.costs.backcopy import sink_cheaper_reading

    _require(backcopy_runs, ["T", "pattern", "cost_total"], "backcopy_runs")
    reading = sink_cheaper_reading(backcopy_runs.to_dicts())
    if reading is None:
        both = {"sink", "diagonal"} <= set(backcopy_runs["pattern"].to_list())
        return [
            _row(
                SYNTHETIC,
                "-",
                "both patterns",
                "n/a",
                None,
                "sink < diagonal at the largest T",
                None,
                "no T with runs of both patterns"
                if both
                else "the runs do not include both patterns",
            )
        ]
    ratio = reading["ratio"]
    return [
        _row(
            SYNTHETIC,
            "-",
            f"T={reading['T']}",
            f"sink {reading['sink']:.1f} vs diagonal {reading['diagonal']:.1f} (ratio {ratio:.2f})",
            ratio,
            "diagonal / sink cost > 1 at the largest T",
            ratio > 1,
            f"sink cheaper at T in {reading['cheaper_T']} of {reading['T_values']}",
        )
    ]


def check_copypaste_trends(
    copypaste_runs: pl.DataFrame, flat_max_slope: float, growth_min_slope: float
) -> list[Row]:
    """§7 / Fig. 3 right (Theorem 7.2, App. D's Theorem D.1): the sink cost is flat in
    ``r_eff(Sigma_D)/delta^2`` and the diagonal cost grows with it.

    The verdict is decided at fixed dormant tokens per group ``n``: the log-log slope
    (:func:`sinkscope.costs.fit_slopes`) over ``delta`` of every ``n`` with at least two values of
    ``r_eff/delta^2`` must satisfy ``|slope| <= flat_max_slope`` (sink) or ``slope >=
    growth_min_slope`` (diagonal). Theorem D.1's sink bound depends on ``r_eta + C``, and
    ``r_eta`` (the rank of the noise vectors) grows with ``n``: a slope pooled over several ``n``
    mixes that growth into the trend (on the full offline grid the pooled sink slope is 0.07, on
    two of its ``n`` 0.11 to 0.19, while every fixed-``n`` slope is within +-0.04). The pooled
    slope is reported beside it. With no ``n`` swept over two ``delta``, the pooled slope decides.
    """
    from sinkscope.costs.copypaste import copypaste_slopes

    _require(copypaste_runs, ["pattern", "n", "reff_over_delta2", "cost_total"], "copypaste_runs")
    rows = []
    for pattern in ("sink", "diagonal"):
        runs = copypaste_runs.filter(pl.col("pattern") == pattern)
        flat = pattern == "sink"
        test = f"|slope| <= {flat_max_slope:g}" if flat else f"slope >= {growth_min_slope:g}"

        def passes(slope: float, flat: bool = flat) -> bool:
            return abs(slope) <= flat_max_slope if flat else slope >= growth_min_slope

        if runs["reff_over_delta2"].n_unique() < 2:
            rows.append(
                _row(
                    SYNTHETIC,
                    "-",
                    f"pattern={pattern}",
                    "n/a",
                    None,
                    test,
                    None,
                    "fewer than 2 values of r_eff/delta^2 to fit a slope",
                )
            )
            continue
        pooled, within = copypaste_slopes(runs.to_dicts(), pattern)
        if within:
            worst = max(within, key=lambda pair: abs(pair[1]) if flat else -pair[1])[1]
            slopes = ", ".join(f"n={n}: {slope:.3f}" for n, slope in within)
            measured = f"log-log slope at fixed n: {slopes}"
            passed = all(passes(slope) for _, slope in within)
            reason = (
                f"every fixed-n slope must pass (Theorem D.1's sink bound grows with n through "
                f"r_eta); {'all pass' if passed else 'not all pass'}; pooled over the sweep: "
                f"{pooled:.3f}"
            )
            value = worst
        else:
            measured, value, passed = f"log-log slope {pooled:.3f} (pooled)", pooled, passes(pooled)
            reason = "pooled over the sweep: no n has two values of delta"
        rows.append(
            _row(
                SYNTHETIC,
                "-",
                f"pattern={pattern}, {runs.height} runs",
                measured,
                value,
                test,
                passed,
                reason,
            )
        )
    return rows


def check_theorem_d1_bounds(copypaste_runs: pl.DataFrame) -> list[Row]:
    """Theorem D.1 (App. D): every measured copy-paste cost lies inside the theorem's lower and
    upper bounds for its pattern: ``lower_bound <= cost_total <= upper_bound`` for every run.

    A run counts as inside only if both its numbers and its ``in_bounds`` flag say so: the verdict
    follows the quantity the theorem is about, and a table whose flag and numbers disagree cannot
    pass on either alone."""
    _require(
        copypaste_runs,
        ["pattern", "in_bounds", "cost_total", "lower_bound", "upper_bound"],
        "copypaste_runs",
    )
    rows = []
    for pattern in sorted(set(copypaste_runs["pattern"].to_list()), reverse=True):
        runs = copypaste_runs.filter(pl.col("pattern") == pattern)
        inside = runs.filter(
            pl.col("in_bounds")
            & (pl.col("lower_bound") <= pl.col("cost_total"))
            & (pl.col("cost_total") <= pl.col("upper_bound"))
        ).height
        rows.append(
            _row(
                SYNTHETIC,
                "-",
                f"pattern={pattern}, {runs.height} runs",
                f"{inside}/{runs.height} runs inside the bounds",
                inside / runs.height,
                "every run: lower_bound <= cost_total <= upper_bound",
                inside == runs.height,
                f"cost / upper bound ranges {float((runs['cost_total'] / runs['upper_bound']).min()):.2f}"
                f"-{float((runs['cost_total'] / runs['upper_bound']).max()):.2f}",
            )
        )
    return rows


# =============================================================================== StreamingLLM notes


def check_eviction_raises_perplexity(sink_heads: pl.DataFrame, sharp_ppl_ratio: float) -> list[Row]:
    """StreamingLLM notes: evicting the first tokens (window-only cache) raises perplexity sharply:
    window-only / dense perplexity on the evicting positions ``>= sharp_ppl_ratio`` (2 = doubles)."""
    _require(
        sink_heads, ["model", "dataset", "window", "window_log_ppl_ratio"], "streaming sink_heads"
    )
    rows = []
    table = sink_heads.unique(["model", "dataset", "window"]).sort("model", "dataset", "window")
    for r in table.iter_rows(named=True):
        ratio = math.exp(r["window_log_ppl_ratio"])
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                f"window L={r['window']}",
                f"perplexity x{ratio:.2f} vs dense",
                ratio,
                f"window-only ppl / dense ppl >= {sharp_ppl_ratio:g}",
                ratio >= sharp_ppl_ratio,
                f"evicting all but the last {r['window']} tokens multiplies perplexity by {ratio:.2f}",
            )
        )
    return rows


def check_sink_tokens_restore(
    recompute: pl.DataFrame,
    max_sink_tokens: int,
    min_recovered_fraction: float,
    baseline: str = "recompute_bos",
) -> list[Row]:
    """StreamingLLM notes: keeping a few (``<= max_sink_tokens``) first tokens next to the window
    puts the model back in its training distribution. The reference is StreamingLLM's own
    baseline, sliding window with re-computation (the same ``L`` recent tokens, encoded from
    scratch; ``baseline`` names the variant of
    :data:`sinkscope.streaming.recompute.RECOMPUTE_BASELINES`, by default with the BOS token in
    front, the regime the models were trained in): the sink cache must remove at least
    ``min_recovered_fraction`` of the window-only log-perplexity excess over it,
    ``recovered_fraction = (nll_window - nll_sink) / (nll_window - nll_recompute)`` on the same
    sampled tokens (the ``recompute`` table of :func:`sinkscope.streaming.summary.summarize`).
    Dense is not the reference: a window of ``L`` tokens loses real context that no sink can give
    back. Where re-computation is not better than window-only the claim is not applicable: the
    baseline itself is then out of the model's regime (e.g. Gemma 3 without its BOS)."""
    cols = [
        "model", "dataset", "baseline", "window", "kind", "n_sink", "policy_vs_recompute",
        "window_vs_recompute", "recompute_nll", "window_nll", "recovered_fraction",
    ]  # fmt: skip
    _require(recompute, cols, "streaming recompute")
    rows = []
    table = recompute.filter(
        (pl.col("baseline") == baseline)
        & (pl.col("kind") == "sink")
        & (pl.col("n_sink") <= max_sink_tokens)
    )
    for r in table.sort("model", "dataset", "window", "n_sink").iter_rows(named=True):
        w, s, recovered = (
            r["window_vs_recompute"],
            r["policy_vs_recompute"],
            r["recovered_fraction"],
        )
        setting = f"window L={r['window']}, k={r['n_sink']} sink tokens, vs {baseline}"
        test = f"recovered fraction vs re-computation >= {min_recovered_fraction:g}"
        if recovered is None or w <= 0:
            rows.append(
                _row(
                    r["model"],
                    r["dataset"],
                    setting,
                    "n/a",
                    None,
                    test,
                    None,
                    f"sliding window with re-computation ({baseline}) is not better than the "
                    f"window-only cache here (NLL {r['recompute_nll']:.3f} vs "
                    f"{r['window_nll']:.3f}): the baseline is itself out of the model's regime, "
                    "so there is no excess to restore",
                )
            )
            continue
        rows.append(
            _row(
                r["model"],
                r["dataset"],
                setting,
                f"ppl x{math.exp(s):.3f} with sinks vs x{math.exp(w):.3f} window-only "
                "(relative to re-computation)",
                recovered,
                test,
                recovered >= min_recovered_fraction,
                f"the sink tokens remove {_pct(recovered)} of the window-only log-perplexity "
                "excess over sliding window with re-computation",
            )
        )
    return rows


# =============================================================================== value-softmax paper


def _share_rows(
    by_variant: pl.DataFrame,
    loss: str,
    activations: Sequence[str],
    majority: float,
    polarizes: bool,
) -> list[Row]:
    _require(
        by_variant,
        ["experiment", "loss", "activation", "n", "d", "runs", "polarized_share"],
        "value_softmax by_variant",
    )
    rows = []
    part = by_variant.filter(
        (pl.col("experiment") == "untied")
        & (pl.col("loss") == loss)
        & pl.col("activation").is_in(list(activations))
    ).sort("activation", "n", "d")
    test = f"polarized share > {majority:g}" if polarizes else f"polarized share < {majority:g}"
    if part.height == 0:
        return [
            _row(
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
    for r in part.iter_rows(named=True):
        share = r["polarized_share"]
        passed = share > majority if polarizes else share < majority
        rows.append(
            _row(
                SYNTHETIC,
                "-",
                f"loss={loss}, phi={r['activation']}, n={r['n']}, d={r['d']}",
                f"{_pct(share)} of {r['runs']} runs polarized (top weight {r['top_weight_mean']:.3f})"
                if "top_weight_mean" in r
                else f"{_pct(share)} of {r['runs']} runs polarized",
                share,
                test,
                passed,
                f"{_pct(share)} of seeds end with a top attention weight >= 0.9",
            )
        )
    return rows


def check_logistic_polarizes(by_variant: pl.DataFrame, majority: float) -> list[Row]:
    """Value-softmax paper, Theorem 3.3 / Fig. 2: with the logistic loss gradient flow drives
    ``softmax(a)`` to a one-hot vector: most seeds polarize (top weight >= 0.9)."""
    return _share_rows(by_variant, "logistic", ["softmax"], majority, polarizes=True)


def check_square_does_not_polarize(by_variant: pl.DataFrame, majority: float) -> list[Row]:
    """Value-softmax paper, Fig. 13 caption: the square loss does not give rise to sparse
    solutions (the abstract's "universality ... including square loss" says otherwise): most
    seeds do not polarize."""
    return _share_rows(by_variant, "square", ["softmax"], majority, polarizes=False)


def check_unnormalized_do_not_polarize(by_variant: pl.DataFrame, majority: float) -> list[Row]:
    """Value-softmax paper, Fig. 13 caption: ``sum`` and ``sigmoid`` (no normalisation) do not
    converge to sparse solutions under the logistic loss: most seeds do not polarize."""
    return _share_rows(by_variant, "logistic", ["sum", "sigmoid"], majority, polarizes=False)


def check_softmax_sinks_emerge(
    by_setup: pl.DataFrame,
    softmax_min_sink_proportion: float,
    unnormalized_max_sink_proportion: float,
) -> list[Row]:
    """Value-softmax paper, Fig. 1 / Fig. 4 (and the "sinks are necessary" abstract): in the
    induction task sinks emerge in layer 2 with softmax attention but not with the attention
    functions trained without normalisation: per (positional encoding, weight decay), the softmax
    sink proportion is ``>= softmax_min_sink_proportion`` and every un-normalised variant's is
    ``<= unnormalized_max_sink_proportion``."""
    cols = [
        "variant",
        "attention",
        "normalize",
        "positional",
        "weight_decay",
        "runs",
        "sink_proportion_mean",
    ]
    _require(by_setup, cols, "induction by_setup")
    rows = []
    test = (
        f"softmax >= {softmax_min_sink_proportion:g} and every un-normalised variant <= "
        f"{unnormalized_max_sink_proportion:g}"
    )
    for (pe, wd), part in by_setup.sort("positional", "weight_decay").group_by(
        "positional", "weight_decay", maintain_order=True
    ):
        setting = f"positional={pe}, weight_decay={wd}"
        soft = part.filter(pl.col("attention") == "softmax")
        raw = part.filter((pl.col("attention") != "softmax") & ~pl.col("normalize"))
        if soft.height == 0 or raw.height == 0:
            rows.append(
                _row(
                    SYNTHETIC,
                    "-",
                    setting,
                    "n/a",
                    None,
                    test,
                    None,
                    "this setup lacks softmax or un-normalised runs",
                )
            )
            continue
        s = float(soft["sink_proportion_mean"][0])
        worst = raw.sort("sink_proportion_mean", descending=True).row(0, named=True)
        others = ", ".join(
            f"{v}: {p:.2f}"
            for v, p in zip(raw["variant"], raw["sink_proportion_mean"], strict=True)
        )
        rows.append(
            _row(
                SYNTHETIC,
                "-",
                setting,
                f"softmax {s:.2f} vs un-normalised max {worst['sink_proportion_mean']:.2f} ({worst['variant']})",
                s - float(worst["sink_proportion_mean"]),
                test,
                s >= softmax_min_sink_proportion
                and float(worst["sink_proportion_mean"]) <= unnormalized_max_sink_proportion,
                f"layer-2 sink-head proportion: softmax {s:.2f}; {others}",
            )
        )
    return rows


def check_flip_rate_decreases(final: pl.DataFrame, min_difference: float) -> list[Row]:
    """Value-softmax paper, Fig. 21: more heads or more layers make the classifier harder to flip
    with one adversarial token: the mean final flip rate at the largest number of heads (layers)
    is lower than at the smallest by more than ``min_difference``. Fig. 21's setup (|V| = 41, no
    MLP, no LayerNorm) is used when the runs include it with both levels, otherwise all runs
    pooled over the other factors."""
    from sinkscope.dynamics.classification import flip_rate_trend

    _require(final, ["n_heads", "n_layers", "flip_rate"], "classification final")
    rows = []
    for factor in ("n_heads", "n_layers"):
        trend = flip_rate_trend(final, factor)
        levels, scope = trend["levels"], trend["scope"]
        test = f"flip rate(min {factor}) - flip rate(max {factor}) > {min_difference:g}"
        if trend["low"] is None:
            rows.append(
                _row(
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
        lo, hi = trend["low"], trend["high"]
        rows.append(
            _row(
                SYNTHETIC,
                "-",
                f"{factor} {levels[0]} vs {levels[-1]} ({scope})",
                f"flip rate {lo:.3f} -> {hi:.3f}",
                lo - hi,
                test,
                lo - hi > min_difference,
                f"mean final flip rate {lo:.3f} with {factor}={levels[0]}, {hi:.3f} with "
                f"{factor}={levels[-1]} ({trend['n_runs']} runs)",
            )
        )
    return rows


# =============================================================================== registry


@dataclass(frozen=True)
class Claim:
    """One claim of the papers and its check (``check(tables, tolerances) -> rows``)."""

    id: str
    claim: str
    source: str
    paper_value: str
    inputs: tuple[str, ...]
    check: Callable[[Tables, Mapping[str, Any]], list[Row]]


CLAIMS: tuple[Claim, ...] = (
    # ---------------------------------------------------------------- §3 / §7 / Remark C.4: heads
    Claim(
        "heads.sinks_common",
        "Sink heads (>= 40% of the attention mass on BOS) are common and more prevalent than diagonal heads.",
        "Sink vs. diagonal, §1, §4 ('many heads per block'), §7 summary",
        "no single number; 'prevalent' vs 0.6-9.5% diagonal heads",
        ("head_classes",),
        lambda tb, t: check_sink_heads_common(tb["head_classes"], t["heads"]["sink_min_fraction"]),
    ),
    Claim(
        "heads.diagonals_exist_rarer",
        "Diagonal heads (>= 40% of the mass on the main diagonal) exist but are rarer than sink heads.",
        "Sink vs. diagonal, §7 ('diagonal attention is common'), §8 (v)",
        "6% / 0.6% / 9.5% (gpt2-medium / Llama 3.1-8B / Gemma 7B)",
        ("head_classes",),
        lambda tb, t: check_diagonal_heads_rarer(tb["head_classes"]),
    ),
    Claim(
        "heads.diagonal_fraction",
        "The share of diagonal heads lies in the range the paper reports across its models.",
        "Sink vs. diagonal, §7, first paragraph",
        "6% / 0.6% / 9.5% (gpt2-medium / Llama 3.1-8B / Gemma 7B)",
        ("head_classes",),
        lambda tb, t: check_diagonal_fraction_in_paper_range(
            tb["head_classes"], t["heads"]["diagonal_fraction_range"]
        ),
    ),
    Claim(
        "heads.sink_prev_fraction",
        "Sink + previous-token heads (>= 60% joint mass, >= 10% each) make up 13-21% of the heads.",
        "Sink vs. diagonal, Remark C.4 (App. C)",
        "16% / 13% / 21% (gpt2 / Llama 3.1-8B / Gemma 7B)",
        ("head_classes",),
        lambda tb, t: check_sink_prev_fraction_in_paper_range(
            tb["head_classes"], t["heads"]["sink_prev_fraction_range"]
        ),
    ),
    # ---------------------------------------------------------------- §4 / §6 / E.2: geometry
    Claim(
        "geometry.bos_cosine_below_zero",
        "In the middle layers the maximum cosine between BOS and every other token at the attention input stays below 0.",
        "Sink vs. diagonal, §4, Fig. 1",
        "max cosine < 0 in all middle layers (gpt2-small, Llama 3.1-8B, Gemma 7B)",
        ("geometry_bos_alignment",),
        lambda tb, t: check_bos_cosine_middle_layers(
            tb["geometry_bos_alignment"], t["geometry"]["bos_cosine_max"]
        ),
    ),
    Claim(
        "geometry.sink_representable",
        "Sinks are representable: the tokens attending to BOS satisfy Proposition 4.1's half-space condition (tested on T' > d_model tokens, where it can fail).",
        "Sink vs. diagonal, §4, Proposition 4.1, Fig. 1",
        "holds in all middle layers ('allowing each attention head to produce any sink pattern')",
        ("geometry_statements",),
        lambda tb, t: check_sink_representable(
            tb["geometry_statements"], t["geometry"]["representable_min_fraction"]
        ),
    ),
    Claim(
        "geometry.value_rank_full",
        "Value matrices have (near) full relative rank in the middle layers.",
        "Sink vs. diagonal, §6 (Prop. 6.1's condition), App. E.2, Fig. 12",
        "'very high ranks in the middle layers' (tolerance 1e-3)",
        ("geometry_value_rank",),
        lambda tb, t: check_value_rank_middle_layers(
            tb["geometry_value_rank"], t["geometry"]["near_full_rank"]
        ),
    ),
    Claim(
        "geometry.sink_bos_value_small",
        "Sink heads have a small BOS value-output vector compared with the other heads (the hard switch assumes W_VO x_0 = 0).",
        "Sink vs. diagonal, §6 (assumption from [13], Fig. 1(b) there)",
        "W_VO x_0 = 0 (assumed; supported empirically in [13])",
        ("geometry_bos_value_norm_classes",),
        lambda tb, t: check_sink_bos_value_norm(
            tb["geometry_bos_value_norm_classes"], t["geometry"]["bos_value_ratio_max"]
        ),
    ),
    # ---------------------------------------------------------------- §5 / E.1: oversmoothing
    Claim(
        "oversmoothing.approximation_every_head",
        "The approximation (2) of Theorem 5.1 is within 0.1 of the empirical average cosine for every head (X and X+WZ).",
        "Sink vs. diagonal, §5, App. E.1, Fig. 7",
        "|error| < 0.1 for every head shown (T' = 512)",
        ("oversmoothing_per_head",),
        lambda tb, t: check_approximation_every_head(
            tb["oversmoothing_per_head"], t["oversmoothing"]["approximation_error"]
        ),
    ),
    Claim(
        "oversmoothing.approximation_most_heads",
        "The approximation (2) stays accurate for most individual heads.",
        "Sink vs. diagonal, §5 ('for most individual attention heads'), Fig. 7",
        "most heads within 0.1",
        ("oversmoothing_per_head",),
        lambda tb, t: check_approximation_most_heads(
            tb["oversmoothing_per_head"],
            t["oversmoothing"]["approximation_error"],
            t["oversmoothing"]["most"],
        ),
    ),
    Claim(
        "oversmoothing.approximation_mean",
        "Averaged over heads, the approximation (2) agrees with the empirical average cosine for X and X+WZ (head update not rescaled) across context lengths.",
        "Sink vs. diagonal, §5, Fig. 2 left, Fig. 5",
        "'excellent agreement' (curves overlap)",
        ("oversmoothing_summary",),
        lambda tb, t: check_mean_approximation(
            tb["oversmoothing_summary"], t["oversmoothing"]["approximation_relative_offset"]
        ),
    ),
    Claim(
        "oversmoothing.w_decreases",
        "Applying W (value-output with the norm gain; head update rescaled by s_l, eq. 11, as in Fig. 2 right) decreases the average cosine similarity.",
        "Sink vs. diagonal, §5, Fig. 2 right, Fig. 6, App. E.1 eq. (11)",
        "rho(X+WZ) < rho(X) on average (rescaled head update)",
        ("oversmoothing_summary",),
        lambda tb, t: check_w_decreases_similarity(
            tb["oversmoothing_summary"], t["oversmoothing"]["min_difference"]
        ),
    ),
    Claim(
        "oversmoothing.attention_raises",
        "Attention raises the average cosine similarity on average (rho(X+WZA^T) > rho(X)).",
        "Sink vs. diagonal, §5, Fig. 2 right, Fig. 6",
        "'slightly stronger than W': rho(X+WZA^T) > rho(X)",
        ("oversmoothing_summary",),
        lambda tb, t: check_attention_raises_similarity(
            tb["oversmoothing_summary"], t["oversmoothing"]["min_difference"]
        ),
    ),
    Claim(
        "oversmoothing.dense_heads_raise_more",
        "The increase is larger for heads with uniformity above 0.6.",
        "Sink vs. diagonal, §5, Fig. 2 right (fourth plot), Fig. 6, Fig. 10",
        "bigger gap rho(X+WZA^T) - rho(X) for u > 0.6",
        ("oversmoothing_summary",),
        lambda tb, t: check_dense_heads_raise_more(
            tb["oversmoothing_summary"], t["oversmoothing"]["min_difference"]
        ),
    ),
    Claim(
        "oversmoothing.uniform_raises_more",
        "Uniform attention raises the average cosine more than the learned attention.",
        "Sink vs. diagonal, §5, Fig. 2 right, Fig. 6",
        "'significant increase' for X+WZA_u^T over X+WZA^T",
        ("oversmoothing_summary",),
        lambda tb, t: check_uniform_raises_more(
            tb["oversmoothing_summary"], t["oversmoothing"]["min_difference"]
        ),
    ),
    Claim(
        "oversmoothing.condition_i_half",
        "Roughly half of the (non-sink) heads of Figs. 8-9 satisfy condition (i) of Theorem 5.1 (beta tr(BW) > 0).",
        "Sink vs. diagonal, §5, Figs. 8-9",
        "'roughly half'",
        ("oversmoothing_summary",),
        lambda tb, t: check_condition_i_about_half(
            tb["oversmoothing_summary"], t["oversmoothing"]["half_band"]
        ),
    ),
    Claim(
        "oversmoothing.condition_ii_few",
        "Few (non-sink) heads of Figs. 8-9 satisfy condition (ii) of Theorem 5.1 (beta tr(BW) + tr(BW^T W) < 0, for the rescaled map s_l W).",
        "Sink vs. diagonal, §5, Figs. 8-9, App. E.1",
        "'few' / 'rare in all models except GPT2-XL'",
        ("oversmoothing_summary",),
        lambda tb, t: check_condition_ii_few(
            tb["oversmoothing_summary"], t["oversmoothing"]["few_max_fraction"]
        ),
    ),
    Claim(
        "oversmoothing.predicted_signs",
        "The monotonicity predicted by Theorem 5.1 mostly holds for the heads it makes a prediction for.",
        "Sink vs. diagonal, §5, Figs. 8-9, App. E.1",
        "'replicates well in practice'",
        ("oversmoothing_summary",),
        lambda tb, t: check_predicted_signs(
            tb["oversmoothing_summary"], t["oversmoothing"]["most"]
        ),
    ),
    Claim(
        "oversmoothing.similarity_positive",
        "Token representations keep a positive average cosine similarity across layers.",
        "Sink vs. diagonal, §5, App. E.1, Fig. 4",
        "positive in all cases",
        ("oversmoothing_summary",),
        lambda tb, t: check_similarity_stays_positive(tb["oversmoothing_summary"]),
    ),
    # ---------------------------------------------------------------- §7 / App. D: costs
    Claim(
        "costs.toy_nuclear_norm",
        "On X = I the sink's query-key matrix has nuclear norm kappa sqrt(T+1), the diagonal's kappa (T+1).",
        "Sink vs. diagonal, §7, first trade-off paragraph",
        "ratio diagonal / sink = sqrt(T+1)",
        ("costs_toy",),
        lambda tb, t: check_toy_nuclear_norms(tb["costs_toy"], t["costs"]["toy_rtol"]),
    ),
    Claim(
        "costs.backcopy_slopes",
        "Backcopy task: on a log-log scale the sink cost grows with slope about 1 in T, the diagonal cost with about 3/2.",
        "Sink vs. diagonal, §7, Theorem 7.1, Fig. 3 left",
        "slopes about 1 (sink) and 3/2 (diagonal)",
        ("costs_backcopy_slopes",),
        lambda tb, t: check_backcopy_slopes(
            tb["costs_backcopy_slopes"], t["costs"]["slope_tolerance"]
        ),
    ),
    Claim(
        "costs.backcopy_sink_cheaper",
        "Backcopy task: large context lengths favour sinks (the sink block is cheaper).",
        "Sink vs. diagonal, §7, Theorem 7.1, Fig. 3 left",
        "sink cheaper, gap growing like T^(1/2)",
        ("costs_backcopy_runs",),
        lambda tb, t: check_backcopy_sink_cheaper(tb["costs_backcopy_runs"]),
    ),
    Claim(
        "costs.copypaste_trends",
        "Copy-paste task: the sink cost is flat in r_eff(Sigma_D)/delta^2 while the diagonal cost grows with it.",
        "Sink vs. diagonal, §7, Theorem 7.2, Fig. 3 right",
        "sink independent of r_eff/delta^2; diagonal grows log-linearly",
        ("costs_copypaste_runs",),
        lambda tb, t: check_copypaste_trends(
            tb["costs_copypaste_runs"], t["costs"]["flat_max_slope"], t["costs"]["growth_min_slope"]
        ),
    ),
    Claim(
        "costs.theorem_d1_bounds",
        "Measured copy-paste costs lie inside the lower and upper bounds of Theorem D.1.",
        "Sink vs. diagonal, App. D, Theorem D.1",
        "L <= cost <= U for both patterns",
        ("costs_copypaste_runs",),
        lambda tb, t: check_theorem_d1_bounds(tb["costs_copypaste_runs"]),
    ),
    # ---------------------------------------------------------------- StreamingLLM notes
    Claim(
        "streaming.eviction_hurts",
        "Evicting the first tokens from the KV cache (window-only attention) raises perplexity sharply.",
        "StreamingLLM notes, 'sink removal event'",
        "model breaks (perplexity explodes) once the sinks are evicted",
        ("streaming_sink_heads",),
        lambda tb, t: check_eviction_raises_perplexity(
            tb["streaming_sink_heads"], t["streaming"]["sharp_ppl_ratio"]
        ),
    ),
    Claim(
        "streaming.sinks_restore",
        "Keeping a few first (sink) tokens next to the window restores the perplexity.",
        "StreamingLLM notes, 'StreamingLLM's insight' (sinks {0..k-1} + window)",
        "the model back in its training distribution with a few sink tokens (k = 4 in "
        "StreamingLLM), i.e. as good as sliding window with re-computation",
        ("streaming_recompute",),
        lambda tb, t: check_sink_tokens_restore(
            tb["streaming_recompute"],
            t["streaming"]["max_sink_tokens"],
            t["streaming"]["min_recovered_fraction"],
        ),
    ),
    # ---------------------------------------------------------------- value-softmax paper
    Claim(
        "dynamics.logistic_polarizes",
        "Gradient flow on L(V softmax(a)) with the logistic loss drives softmax(a) to a one-hot vector.",
        "Value-softmax paper, Theorem 3.3, Fig. 2",
        "attention converges to one-hot",
        ("dynamics_value_softmax_by_variant",),
        lambda tb, t: check_logistic_polarizes(
            tb["dynamics_value_softmax_by_variant"], t["dynamics"]["majority"]
        ),
    ),
    Claim(
        "dynamics.square_no_polarization",
        "With the square loss softmax(a) does not polarize.",
        "Value-softmax paper, Fig. 13 caption (the abstract claims universality incl. square loss)",
        "'square loss does not give rise to sparse solutions'",
        ("dynamics_value_softmax_by_variant",),
        lambda tb, t: check_square_does_not_polarize(
            tb["dynamics_value_softmax_by_variant"], t["dynamics"]["majority"]
        ),
    ),
    Claim(
        "dynamics.unnormalized_no_polarization",
        "Without normalisation (sum, sigmoid) the logistic loss does not polarize the attention either.",
        "Value-softmax paper, Fig. 13 caption",
        "'sum and sigmoid do not converge to sparse solutions'",
        ("dynamics_value_softmax_by_variant",),
        lambda tb, t: check_unnormalized_do_not_polarize(
            tb["dynamics_value_softmax_by_variant"], t["dynamics"]["majority"]
        ),
    ),
    Claim(
        "dynamics.softmax_sinks_emerge",
        "In the induction task sinks emerge with softmax attention and not with the non-normalised alternatives.",
        "Value-softmax paper, Fig. 1, Fig. 4, Table 1; trigger-conditional abstract",
        "sink clearly emerges for softmax but not for sigmoid / linear without normalisation",
        ("dynamics_induction_by_setup",),
        lambda tb, t: check_softmax_sinks_emerge(
            tb["dynamics_induction_by_setup"],
            t["dynamics"]["softmax_min_sink_proportion"],
            t["dynamics"]["unnormalized_max_sink_proportion"],
        ),
    ),
    Claim(
        "dynamics.flip_rate_decreases",
        "More heads or layers make the classifier harder to flip with one adversarial token.",
        "Value-softmax paper, Fig. 21 caption",
        "'increasing the number of heads or layers leads to the diminishing flip rate'",
        ("dynamics_classification_final",),
        lambda tb, t: check_flip_rate_decreases(
            tb["dynamics_classification_final"], t["dynamics"]["min_difference"]
        ),
    ),
)


def _not_run_rows(claim: Claim, missing: Sequence[str], models: Sequence[str]) -> list[Row]:
    analyses = sorted({TABLE_ANALYSIS.get(key, key) for key in missing})
    per_model = all(a in PER_MODEL_ANALYSES for a in analyses)
    reason = f"{NOT_RUN} (no {', '.join(analyses)} summary table: {', '.join(missing)})"
    return [
        _row(model, "-", "-", "-", None, "-", None, reason)
        for model in (list(models) if per_model and models else [SYNTHETIC])
    ]


def _no_rows_row(claim: Claim) -> Row:
    """The one row of a claim whose check found nothing to read in tables that exist (e.g. no
    sink count within ``max_sink_tokens``, no sink or diagonal back-copy runs): the claim stays
    in the table as not applicable instead of vanishing from it."""
    inputs = ", ".join(claim.inputs)
    return _row(
        "-", "-", "-", "-", None, "-", None,
        f"the input tables ({inputs}) hold no rows this claim can be read on",
    )


def evaluate_claims(
    tables: Mapping[str, pl.DataFrame | None],
    tolerances: Mapping[str, Mapping[str, Any]] | None = None,
    models: Sequence[str] = (),
    claims: Sequence[Claim] = CLAIMS,
) -> pl.DataFrame:
    """Run every claim's check on the summary ``tables`` (keys as in :data:`TABLE_ANALYSIS`).

    A claim whose input tables are absent (or ``None``) gets ``not applicable`` rows with reason
    :data:`NOT_RUN` -- one per model in ``models`` for the per-model analyses; a claim whose check
    finds no rows to read in tables that exist gets one ``not applicable`` row that says so. ``tolerances``:
    the config's ``claims`` section (merged over :data:`DEFAULT_TOLERANCES`). Returns the table
    with :data:`COLUMNS`, in registry order.
    """
    unknown = sorted(set(tables) - set(TABLE_ANALYSIS))
    if unknown:
        raise KeyError(f"claims: unknown input table(s) {unknown}; known: {sorted(TABLE_ANALYSIS)}")
    tol = resolve_tolerances(tolerances)
    rows: list[Row] = []
    for claim in claims:
        missing = [key for key in claim.inputs if tables.get(key) is None]
        found = (
            _not_run_rows(claim, missing, models)
            if missing
            else claim.check({k: v for k, v in tables.items() if v is not None}, tol)
        ) or [_no_rows_row(claim)]
        meta = {
            "claim_id": claim.id,
            "claim": claim.claim,
            "source": claim.source,
            "paper_value": claim.paper_value,
        }
        rows.extend({**meta, **row} for row in found)
    return pl.DataFrame(rows, schema=COLUMNS).select(list(COLUMNS))


# =============================================================================== writers


def _cell(text: Any) -> str:
    if text is None:
        return ""
    return str(text).replace("|", "\\|").replace("\n", " ")


def compare_runs(tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """The per-claim-and-model verdict (:func:`_overview`'s ``summary``: reproduced, not
    reproduced, mixed (k/n), not applicable) of several runs side by side, e.g. the short
    default scale against ``config/offline-full.yaml``: one row per claim and model, one column
    per run (``tables``' keys), ``differs`` where the runs disagree. Claims missing from a run
    read ``absent``."""
    merged: pl.DataFrame | None = None
    for label, table in tables.items():
        overview = _overview(table).select(
            "claim_id",
            "model",
            "claim",
            pl.when(pl.col("summary") == "mixed")
            .then(
                pl.format(
                    "mixed ({}/{})",
                    pl.col("n_reproduced"),
                    pl.col("n_reproduced") + pl.col("n_not_reproduced"),
                )
            )
            .otherwise(pl.col("summary"))
            .alias(label),
        )
        if merged is None:
            merged = overview
        else:
            merged = merged.join(
                overview, on=["claim_id", "model"], how="full", coalesce=True, suffix="_other"
            )
            merged = merged.with_columns(pl.coalesce("claim", "claim_other").alias("claim")).drop(
                "claim_other"
            )
    if merged is None:
        raise ValueError("compare_runs needs at least one claims table")
    labels = list(tables)
    merged = merged.with_columns(pl.col(labels).fill_null("absent"))
    differs = pl.lit(False)
    for label in labels[1:]:
        differs = differs | (pl.col(label) != pl.col(labels[0]))
    return merged.with_columns(differs.alias("differs")).select(
        "claim_id", "model", "claim", *labels, "differs"
    )


def compare_runs_markdown(comparison: pl.DataFrame) -> str:
    """:func:`compare_runs` as a Markdown table, the rows that differ first."""
    labels = [c for c in comparison.columns if c not in ("claim_id", "model", "claim", "differs")]
    ordered = comparison.sort("differs", descending=True, maintain_order=True)
    n_diff = int(comparison["differs"].sum())
    lines = [
        (
            f"{n_diff} of {comparison.height} claim × model verdicts differ between "
            f"{', '.join(labels)}."
        ),
        "",
    ]
    lines += _md_table(ordered, ["claim_id", "model", *labels, "differs"])
    return "\n".join(lines) + "\n"


def _md_table(frame: pl.DataFrame, columns: Sequence[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in frame.iter_rows(named=True):
        lines.append("| " + " | ".join(_cell(r[c]) for c in columns) + " |")
    return lines


def _overview(table: pl.DataFrame) -> pl.DataFrame:
    """One row per claim and model: counts of verdicts over datasets/settings."""
    return (
        table.group_by("claim_id", "model", maintain_order=True)
        .agg(
            pl.col("claim").first(),
            (pl.col("verdict") == REPRODUCED).sum().alias("n_reproduced"),
            (pl.col("verdict") == NOT_REPRODUCED).sum().alias("n_not_reproduced"),
            (pl.col("verdict") == NOT_APPLICABLE).sum().alias("n_not_applicable"),
            pl.col("reason").first(),
        )
        .with_columns(
            summary=pl.when(pl.col("n_reproduced") + pl.col("n_not_reproduced") == 0)
            .then(pl.lit(NOT_APPLICABLE))
            .when(pl.col("n_not_reproduced") == 0)
            .then(pl.lit(REPRODUCED))
            .when(pl.col("n_reproduced") == 0)
            .then(pl.lit(NOT_REPRODUCED))
            .otherwise(pl.lit("mixed"))
        )
    )


def _summary_cell(r: Mapping[str, Any]) -> str:
    n = r["n_reproduced"] + r["n_not_reproduced"]
    if r["summary"] == NOT_APPLICABLE:
        return NOT_APPLICABLE
    text = f"{r['summary']} ({r['n_reproduced']}/{n})"
    return f"**{text}**" if r["summary"] in (NOT_REPRODUCED, "mixed") else text


def _md_by_claim(frame: pl.DataFrame, columns: Sequence[str]) -> list[str]:
    """One block per claim: its sentence, where the paper makes it and its value, then the rows."""
    lines: list[str] = []
    for (claim_id,), part in frame.group_by("claim_id", maintain_order=True):
        first = part.row(0, named=True)
        lines += [
            f"### `{claim_id}`: {first['claim']}",
            "",
            f"Paper: {first['source']}. Paper's value: {first['paper_value']}.",
            "",
            *_md_table(part, columns),
            "",
        ]
    return lines


def claims_markdown(table: pl.DataFrame, observations: pl.DataFrame | None = None) -> str:
    """``claims.md``: counts, the not-reproduced rows first (per claim), an overview of verdicts
    per claim and model, every row (per claim), then -- given ``observations``
    (:func:`sinkscope.observations.evaluate_observations`) -- the section "Observations (shown by
    the figures; not claims of the paper)"."""
    counts = {v: int((table["verdict"] == v).sum()) for v in VERDICTS}
    n_not_run = int(table["reason"].str.starts_with(NOT_RUN).sum())
    lines = [
        "# Claims of the papers, checked against this run",
        "",
        (
            f"{table.height} checks: **{counts[NOT_REPRODUCED]} not reproduced**, "
            f"{counts[REPRODUCED]} reproduced, {counts[NOT_APPLICABLE]} not applicable "
            f"({n_not_run} of them because the analysis did not run in this config)."
        ),
        "",
        (
            "Each row is one claim x model (x dataset or setting). `dataset` = `all` pools the "
            "model's datasets (the paper pools its four); `synthetic` rows need no pretrained "
            "model. `value` in claims.csv is the number the test compares; the tolerances are in "
            "the config's `claims` section (documented in `workflow/schemas/config.schema.yaml`)."
        ),
        "",
        f"## Not reproduced ({counts[NOT_REPRODUCED]})",
        "",
    ]
    bad = table.filter(pl.col("verdict") == NOT_REPRODUCED)
    short = ["model", "dataset", "setting", "measured", "test", "reason"]
    lines += _md_by_claim(bad, short) if bad.height else ["None.", ""]
    overview = _overview(table)
    models = list(dict.fromkeys(overview["model"].to_list()))
    lines += ["## Overview: verdict per claim and model (reproduced / tested rows)", ""]
    lines += ["| claim | " + " | ".join(models) + " |", "|" + "---|" * (len(models) + 1)]
    for (claim_id,), part in overview.group_by("claim_id", maintain_order=True):
        cells = {r["model"]: _summary_cell(r) for r in part.iter_rows(named=True)}
        text = f"`{claim_id}` {part['claim'][0]}"
        lines.append("| " + " | ".join([_cell(text)] + [cells.get(m, "") for m in models]) + " |")
    lines += ["", "## All checks", ""]
    lines += _md_by_claim(table, ["model", "dataset", "setting", "verdict", *short[3:]])
    if observations is not None:
        from sinkscope.observations import observations_markdown

        lines += ["", observations_markdown(observations)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _rst_cell(text: Any) -> str:
    """Plain text made inert for reStructuredText (no emphasis, references or substitutions)."""
    out = str(text).replace("\n", " ").replace("\\", "\\\\").replace("`", "'")
    for char in "*|":
        out = out.replace(char, "\\" + char)
    return re.sub(r"_(?=\W|$)", r"\\_", out)


def claims_rst(table: pl.DataFrame) -> str:
    """``claims.rst``: the section included at the top of the report's main page (overview per
    claim and model, then the not-reproduced rows)."""
    counts = {v: int((table["verdict"] == v).sum()) for v in VERDICTS}
    overview = _overview(table)
    models = list(dict.fromkeys(overview["model"].to_list()))
    lines = [
        "Claims",
        "------",
        "",
        (
            f"{table.height} checks of the papers' claims: **{counts[NOT_REPRODUCED]} not reproduced**, "
            f"{counts[REPRODUCED]} reproduced, {counts[NOT_APPLICABLE]} not applicable. Every row with "
            "its measured value, test and tolerance is in ``results/claims.md`` (and ``claims.csv``)."
        ),
        "",
        ".. list-table::",
        "   :header-rows: 1",
        f"   :widths: {' '.join(['40'] + [str(max(1, 60 // max(1, len(models))))] * len(models))}",
        "",
        "   * - claim",
    ]
    lines += [f"     - {_rst_cell(m)}" for m in models]
    for (claim_id,), part in overview.group_by("claim_id", maintain_order=True):
        cells = {r["model"]: _summary_cell(r) for r in part.iter_rows(named=True)}
        lines.append(f"   * - ``{claim_id}`` {_rst_cell(part['claim'][0])}")
        lines += [f"     - {cells.get(m, '')}" for m in models]
    bad = table.filter(pl.col("verdict") == NOT_REPRODUCED)
    lines += ["", "Not reproduced:", ""]
    if bad.height == 0:
        lines.append("none.")
    for r in bad.iter_rows(named=True):
        lines.append(
            f"* ``{r['claim_id']}`` -- {_rst_cell(r['model'])} / {_rst_cell(r['dataset'])} "
            f"({_rst_cell(r['setting'])}): {_rst_cell(r['measured'])}; paper: "
            f"{_rst_cell(r['paper_value'])}; test: {_rst_cell(r['test'])}"
        )
    return "\n".join(lines) + "\n"


def write_claims(
    table: pl.DataFrame,
    markdown_path: str | Path,
    parquet_path: str | Path,
    rst_path: str | Path | None = None,
    observations: pl.DataFrame | None = None,
    observations_path: str | Path | None = None,
) -> None:
    """Write ``claims.md``, ``claims.parquet`` + ``.csv`` (:func:`sinkscope.io.write_table`) and,
    if given, the report snippet ``claims.rst`` -- all atomically. ``observations``
    (:func:`sinkscope.observations.evaluate_observations`) add their section to ``claims.md``
    and, given ``observations_path``, are written there (parquet + CSV): a table of their own,
    since their columns are not :data:`COLUMNS` (no verdict)."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"write_claims: the table lacks the column(s) {missing}")
    write_table(table, parquet_path)
    if observations is not None and observations_path is not None:
        write_table(observations, observations_path)
    with atomic_path(markdown_path) as tmp:
        tmp.write_text(claims_markdown(table, observations))
    if rst_path is not None:
        with atomic_path(rst_path) as tmp:
            tmp.write_text(claims_rst(table))
