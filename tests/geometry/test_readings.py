"""The numbers that geometry figures, summaries and claims share.

Each figure-claim pair reads one function of the geometry stage: Figure 1's two readings of the
maximum BOS cosine (:func:`~sinkscope.geometry.alignment.bos_max_readings`), Proposition 4.1's
trivial / non-trivial counts (:func:`~sinkscope.geometry.halfspace.representability_counts`) and the
sink / non-sink ratio of BOS value-output norms
(:func:`~sinkscope.geometry.values.sink_value_norm_effect`). Each is checked on planted tables whose
answer is known, and on a real extracted file the number a figure prints is compared with the claim
row's value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sinkscope.claims import tolerances as TL
from sinkscope.claims import verdicts as V
from sinkscope.claims.checks import geometry as GC
from sinkscope.geometry import halfspace_plots as hplots
from sinkscope.geometry import plots as gplots
from sinkscope.geometry.alignment import bos_max_readings, bos_max_statement
from sinkscope.geometry.analysis import analyze_file
from sinkscope.geometry.halfspace import representability_counts, representability_statement
from sinkscope.geometry.names import ATTENDING, BOS_MINUS_TOKEN, POINT_SETS
from sinkscope.geometry.summary import summarize
from sinkscope.geometry.values import (
    bos_mass_relation,
    sink_value_norm_effect,
    value_norm_statement,
)
from sinkscope.heads.classify import HeadClassThresholds, classify_file
from sinkscope.plotting import figure_problems

# ----------------------------------------------------------------------------- Figure 1


def test_bos_max_readings_on_a_planted_table() -> None:
    # two datasets, 4 layers (middle = 1..2); the maximum over datasets is taken per layer
    rows = []
    maxima = {"a": [0.5, 0.9, -0.2, 0.3], "b": [0.1, -0.1, 0.95, -0.4]}
    from2 = {"a": [0.5, -0.3, -0.2, 0.3], "b": [0.1, -0.1, -0.5, -0.4]}
    for dataset in maxima:
        for layer in range(4):
            mx, m2 = maxima[dataset][layer], from2[dataset][layer]
            rows.append(
                {
                    "model": "m",
                    "dataset": dataset,
                    "space": "Z",
                    "layer": layer,
                    "max": mx,
                    "max_excl_first": m2,
                    "max_position": 1 if m2 < mx else 7,
                    "n_positive": 3,
                    "n_values": 10,
                }
            )
    frame = pl.DataFrame(rows)
    (r,) = bos_max_readings(frame).iter_rows(named=True)
    # per-layer maxima: [0.5, 0.9, 0.95, 0.3]; over positions >= 2: [0.5, -0.1, -0.2, 0.3]
    assert (r["n_layers"], r["middle_first"], r["middle_last"], r["n_middle"]) == (4, 1, 2, 2)
    assert r["n_below_all"] == 0 and r["n_below_from2"] == 2
    assert r["n_mid_below_all"] == 0 and r["n_mid_below_from2"] == 2
    assert (r["mid_max_all"], r["mid_max_all_layer"]) == (0.95, 2)
    assert (r["mid_max_from2"], r["mid_max_from2_layer"]) == (-0.1, 1)
    # layer 1's max (0.9, dataset a) and layer 2's (0.95, dataset b) are at position 1
    assert r["n_max_at_first"] == 2 and r["n_mid_max_at_first"] == 2
    assert r["mid_frac_positive"] == pytest.approx(0.3)
    # a bound above every maximum: every layer is "below" in both readings
    (r,) = bos_max_readings(frame, bound=1.0).iter_rows(named=True)
    assert r["n_below_all"] == r["n_below_from2"] == 4
    assert "positions >= 2" in bos_max_statement(r)


# ----------------------------------------------------------------------------- Prop. 4.1


def _halfspace_rows(cases: list[tuple[int, bool, bool, bool]]) -> pl.DataFrame:
    """(n_attending, trivially separable, representable, any-pattern representable) per
    sequence; all three point sets share the trivial flag."""
    rows = []
    for seq, (n_att, trivial, rep, any_rep) in enumerate(cases):
        for name in POINT_SETS:
            n_points = n_att if name == ATTENDING else 4
            if name == BOS_MINUS_TOKEN:
                holds = rep and any_rep
            elif name == ATTENDING:
                holds = True if n_att else None
            else:
                holds = any_rep
            rows.append(
                {
                    "model": "m",
                    "dataset": "d" if seq % 2 else "e",
                    "layer": seq // 2,
                    "sequence": seq % 2,
                    "point_set": name,
                    "n_points": n_points,
                    "halfspace": holds,
                    "trivially_separable": trivial and n_points > 0,
                    "margin": (0.3 if holds else 0.0) if holds is not None else None,
                }
            )
    return pl.DataFrame(rows)


def test_representability_counts_separate_trivial_cases() -> None:
    frame = _halfspace_rows(
        [
            (3, True, True, True),  # trivial case
            (3, True, True, True),  # trivial case
            (2, False, True, True),  # non-trivial, representable
            (2, False, False, False),  # non-trivial, not representable
            (0, True, True, True),  # no attending tokens: not a case
            (0, False, True, True),  # not a case; any pattern non-trivial and holds
        ]
    )
    (r,) = representability_counts(frame).iter_rows(named=True)
    assert (r["n_pairs"], r["n_cases"], r["n_trivial"], r["n_nontrivial"]) == (6, 4, 2, 2)
    assert r["n_representable"] == 3 and r["n_representable_nontrivial"] == 1
    assert r["frac_representable_nontrivial"] == 0.5
    assert (r["n_any_trivial"], r["n_any_nontrivial"]) == (3, 3)
    assert r["n_any_representable_nontrivial"] == 2
    assert r["min_margin"] == 0.0
    text = representability_statement(r)
    assert "2 of them are trivially separable" in text and "1 of the 2 non-trivial" in text
    # all cases trivial: no fraction, and the statement says the test cannot fail
    (r,) = representability_counts(_halfspace_rows([(3, True, True, True)] * 2)).iter_rows(
        named=True
    )
    assert r["n_nontrivial"] == 0 and r["frac_representable_nontrivial"] is None
    assert "cannot fail" in representability_statement(r)


# ----------------------------------------------------------------------------- W_VO z_0


def _value_norms(
    sink: dict[str, list[float]], other: dict[str, list[float]], model: str = "m"
) -> pl.DataFrame:
    rows = []
    for dataset, sinks in sink.items():
        values = [(v, True) for v in sinks] + [(v, False) for v in other[dataset]]
        for head, (value, is_sink) in enumerate(values):
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "layer": 0,
                    "head": head,
                    "rel_bos_vo_norm": value,
                    "is_sink": is_sink,
                }
            )
    return pl.DataFrame(rows)


def test_sink_value_norm_effect_closed_form() -> None:
    frame = _value_norms(
        {"a": [0.1, 0.2, 0.3], "b": [0.2, 0.4, 0.6]},
        {"a": [1.0, 2.0, 3.0, 4.0], "b": [1.0, 1.0, 1.0, 1.0]},
    )
    effect = sink_value_norm_effect(frame, n_boot=400)
    a, b, pooled = effect.sort(pl.col("dataset") == "all", "dataset").iter_rows(named=True)
    assert (a["sink_median"], a["other_median"], a["ratio"]) == pytest.approx((0.2, 2.5, 0.08))
    assert (b["sink_median"], b["other_median"], b["ratio"]) == pytest.approx((0.4, 1.0, 0.4))
    # pooled: medians of all six / eight instances; the units are the 7 (layer, head) pairs
    assert pooled["sink_median"] == pytest.approx(np.median([0.1, 0.2, 0.3, 0.2, 0.4, 0.6]))
    assert pooled["other_median"] == pytest.approx(1.0)
    assert (pooled["n_sink"], pooled["n_other"], pooled["n_units"]) == (6, 8, 7)
    assert (pooled["ratio_dataset_min"], pooled["ratio_dataset_max"]) == pytest.approx((0.08, 0.4))
    for row in (a, b, pooled):
        assert row["ratio_lo"] <= row["ratio"] <= row["ratio_hi"]
    # deterministic, and independent of what else is in the table
    other_model = _value_norms({"x": [5.0]}, {"x": [1.0, 2.0]}, model="z")
    again = sink_value_norm_effect(pl.concat([other_model, frame]), n_boot=400)
    assert again.filter(pl.col("model") == "m").equals(effect)
    # no sink heads: no ratio
    none = sink_value_norm_effect(frame.with_columns(is_sink=pl.lit(False)), n_boot=10)
    assert none["ratio"].is_null().all() and (none["n_sink"] == 0).all()


def test_sink_value_norm_interval_reflects_the_spread() -> None:
    rng = np.random.default_rng(0)
    tight = _value_norms({"a": list(0.3 + 0.01 * rng.random(40))}, {"a": [1.0] * 40})
    loose = _value_norms({"a": list(0.3 * np.exp(rng.normal(0, 1, 40)))}, {"a": [1.0] * 40})
    t = sink_value_norm_effect(tight, with_pooled=False).row(0, named=True)
    lo = sink_value_norm_effect(loose, with_pooled=False).row(0, named=True)
    assert t["ratio_hi"] - t["ratio_lo"] < 0.02 < lo["ratio_hi"] - lo["ratio_lo"]


# ----------------------------------------------------------------------------- figure == claim


def test_figures_print_the_claim_numbers(extracted, tmp_path: Path) -> None:
    family, path, _, _ = extracted
    _, per_head = classify_file(path)
    # a sink threshold that splits the tiny model's heads into sink and non-sink heads
    threshold = float(np.median(per_head["bos_mass"].to_numpy()))
    thresholds = HeadClassThresholds(sink=threshold)
    _, per_head = classify_file(path, thresholds)
    tables = analyze_file(path, per_head, thresholds, attend_threshold=0.15)
    other = {name: frame.with_columns(dataset=pl.lit("copy")) for name, frame in tables.items()}
    summary = summarize([tables, other])
    tolerances = TL.resolve_tolerances(None)["geometry"]
    statements = GC.geometry_statements(summary, [tables, other])
    out = tmp_path / "figs"

    # Figure 1 <-> geometry.bos_cosine_below_zero
    fig, readings = gplots.bos_alignment_figure(summary["bos_alignment"], "t")
    assert figure_problems(fig) == []
    shown = gplots.plot_bos_alignment(summary["bos_alignment"], out / "a.png", "t")
    assert shown.equals(readings)
    (row,) = GC.check_bos_cosine_middle_layers(
        summary["bos_alignment"], tolerances["bos_cosine_max"]
    )
    (b,) = readings.iter_rows(named=True)
    assert row["value"] == b["mid_max_all"]
    assert row["reason"] == bos_max_statement(b)
    assert f"{b['n_mid_below_from2']}/{b['n_middle']} below" in row["measured"]
    # the statements table reads the claim's readings at Fig. 1's own bound, zero (the claim's
    # tolerance is the claims rule's alone); the claim reads them at its tolerance
    (statement,) = statements.filter(
        pl.col("claim") == "bos_cosine_max_below_zero_middle_layers"
    ).iter_rows(named=True)
    (at_zero,) = GC.bos_cosine_readings(summary["bos_alignment"], 0.0)[1].iter_rows(named=True)
    assert GC.STATEMENT_BOS_COSINE_BOUND == 0.0
    assert statement["statement"] == bos_max_statement(at_zero)
    assert statement["value"] == at_zero["n_mid_below_all"] / at_zero["n_middle"]
    for bound in (tolerances["bos_cosine_max"], 0.5):
        (claim_row,) = GC.check_bos_cosine_middle_layers(summary["bos_alignment"], bound)
        (reading,) = GC.bos_cosine_readings(summary["bos_alignment"], bound)[1].iter_rows(
            named=True
        )
        assert claim_row["reason"] == bos_max_statement(reading)
        assert claim_row["verdict"] == (
            V.REPRODUCED if reading["n_mid_below_all"] == reading["n_middle"] else V.NOT_REPRODUCED
        )

    # half-space figure <-> geometry.sink_representable
    halfspace = [tables["halfspace"], other["halfspace"]]
    fig, counts = hplots.halfspace_margins_figure(halfspace, "t")
    assert figure_problems(fig) == []
    assert hplots.plot_halfspace_margins(halfspace, out / "h.png", "t").equals(counts)
    (c,) = counts.iter_rows(named=True)
    assert c["n_cases"] > 0  # the attending sets were exercised
    (row,) = GC.check_sink_representable(statements, tolerances["representable_min_fraction"])
    assert row["value"] == c["frac_representable_nontrivial"]
    assert row["reason"].endswith(representability_statement(c))
    if c["n_nontrivial"] == 0:
        assert row["verdict"] == V.NOT_APPLICABLE

    # value-norm figure <-> geometry.sink_bos_value_small (pooled row)
    norms = [tables["bos_value_norm"], other["bos_value_norm"]]
    fig, effect = gplots.bos_value_norm_figure(norms, "t")
    assert figure_problems(fig) == []
    assert gplots.plot_bos_value_norm(norms, out / "v.png", "t").equals(effect)
    (e,) = effect.iter_rows(named=True)
    assert e["dataset"] == "all" and e["n_sink"] > 0 and e["n_other"] > 0
    rows = GC.check_sink_bos_value_norm(
        summary["bos_value_norm_classes"], tolerances["bos_value_ratio_max"]
    )
    pooled = [r for r in rows if r["dataset"] == "all"]
    # the claim decides on the graded relation over every head; the figure's sink / other
    # reading is the row's reported reading
    (relation,) = (
        bos_mass_relation(pl.concat(norms)).filter(pl.col("dataset") == "all").rows(named=True)
    )
    assert len(pooled) == 1 and pooled[0]["value"] == relation["spearman"]
    assert (
        f"Reported reading, sink vs other heads: {value_norm_statement(e)}" in pooled[0]["reason"]
    )
    # the legend's counts are the sets the medians are taken over
    frame = pl.concat(norms)
    assert e["n_sink"] == frame["is_sink"].sum() and e["n_other"] == (~frame["is_sink"]).sum()

    fig = gplots.bos_residual_norm_figure(summary["bos_residual_norm"], "t")
    assert figure_problems(fig) == []
    ticks = fig.axes[0].get_xticks()
    assert np.array_equal(ticks, np.round(ticks)), f"{family}: fractional layer ticks {ticks}"
