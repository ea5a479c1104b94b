"""The claims table (sinkscope.claims): every check on constructed tables where the claim holds,
where it fails and at the boundary of its tolerance; the registry's not-applicable handling; the
writers; and the agreement of the tolerances' defaults with the config schema.

Where an analysis module defines the summary table (heads.summarize, oversmoothing.summary.summary_tables,
streaming.summary.summarize, costs.fit_slopes / toy_table), the tables are produced by calling it on
planted inputs, so a change of their format breaks these tests; the expected numbers are computed
here by hand from the planted inputs.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from docutils.core import publish_parts

from sinkscope.claims import registry as R
from sinkscope.claims import render as RD
from sinkscope.claims import tolerances as TL
from sinkscope.claims import verdicts as V
from sinkscope.claims.checks import costs as CC
from sinkscope.claims.checks import dynamics as DC
from sinkscope.claims.checks import geometry as GC
from sinkscope.claims.checks import heads as HC
from sinkscope.claims.checks import oversmoothing as OC
from sinkscope.claims.checks import oversmoothing_conditions as OCC
from sinkscope.claims.checks import streaming as SC
from sinkscope.config import ConfigError, analysis_runs, load_config, load_schema, validate_config
from sinkscope.costs.summary import fit_slopes
from sinkscope.costs.toy import toy_table
from sinkscope.heads.classify import HeadClassThresholds, with_classes
from sinkscope.heads.names import PER_HEAD_COLUMNS
from sinkscope.heads.summary import summarize
from sinkscope.oversmoothing import names as ov_names
from sinkscope.oversmoothing import summary as ov_summary
from sinkscope.paths import Paths
from sinkscope.stats.intervals import newcombe_difference, wilson_interval
from sinkscope.streaming.recompute import RECOMPUTE_SCHEMA
from sinkscope.streaming.summary import summarize as summarize_streaming
from tests.conftest import ONE_PAIR

REPO = Path(__file__).resolve().parents[2]
TH = HeadClassThresholds()


def verdicts(rows: list[dict]) -> list[str]:
    return [r["verdict"] for r in rows]


def by(rows: list[dict], **keys: object) -> dict:
    (match,) = [r for r in rows if all(r[k] == v for k, v in keys.items())]
    return match


# =============================================================================== heads


def head_table(model: str, dataset: str, masses: list[tuple[float, float, float]]) -> pl.DataFrame:
    """A per-head table (heads.classify_file format) with planted (bos, diagonal, subdiag) masses."""
    frame = pl.DataFrame(
        {
            "model": model,
            "dataset": dataset,
            "layer": [i // 4 for i in range(len(masses))],
            "head": [i % 4 for i in range(len(masses))],
            "n_sequences": 10,
            "bos_mass": [m[0] for m in masses],
            "bos_mass_std": 0.0,
            "diagonal_mass": [m[1] for m in masses],
            "subdiagonal_mass": [m[2] for m in masses],
        }
    )
    return with_classes(frame, TH).select(PER_HEAD_COLUMNS)


SINK, DIAG, PREV, OTHER = (0.9, 0.05, 0.0), (0.05, 0.9, 0.0), (0.45, 0.05, 0.3), (0.1, 0.1, 0.1)


@pytest.fixture()
def head_classes() -> pl.DataFrame:
    # model "a": 20 heads, 8 sinks + 3 sink+prev (which are also sinks: bos 0.45), 1 diagonal
    a = [SINK] * 8 + [PREV] * 3 + [DIAG] + [OTHER] * 8
    # model "b": 20 heads, 1 sink, 2 diagonal, no sink+prev
    b = [SINK] + [DIAG] * 2 + [OTHER] * 17
    # model "c": 10 heads, no diagonal head, 2 sinks
    c = [SINK] * 2 + [OTHER] * 8
    return summarize([head_table("a", "d1", a), head_table("b", "d1", b), head_table("c", "d1", c)])


def test_head_fractions_come_from_the_planted_heads(head_classes: pl.DataFrame) -> None:
    a = head_classes.filter((pl.col("model") == "a") & (pl.col("dataset") == "all")).row(
        0, named=True
    )
    assert (a["frac_sink"], a["frac_diagonal"], a["frac_sink_prev"]) == (0.55, 0.05, 0.15)


def test_sinks_common(head_classes: pl.DataFrame) -> None:
    rows = HC.check_sink_heads_common(head_classes, sink_min_fraction=0.1)
    assert by(rows, model="a", dataset="all")["verdict"] == V.REPRODUCED
    # b: 5% sinks < 10% floor and fewer sinks than diagonals
    assert by(rows, model="b", dataset="all")["verdict"] == V.NOT_REPRODUCED
    # boundary: c has exactly 20% sinks; a floor of 0.2 still passes (>=), 0.21 fails
    c = head_classes.filter(pl.col("model") == "c")
    assert verdicts(HC.check_sink_heads_common(c, 0.2)) == [V.REPRODUCED] * 2
    assert verdicts(HC.check_sink_heads_common(c, 0.21)) == [V.NOT_REPRODUCED] * 2


def test_diagonals_exist_but_rarer(head_classes: pl.DataFrame) -> None:
    rows = HC.check_diagonal_heads_rarer(head_classes)
    assert by(rows, model="a", dataset="all")["verdict"] == V.REPRODUCED
    assert by(rows, model="b", dataset="all")["verdict"] == V.NOT_REPRODUCED  # 10% > 5% sinks
    c = by(rows, model="c", dataset="all")
    assert c["verdict"] == V.NOT_REPRODUCED and "no head" in c["reason"]
    # boundary: as many diagonal as sink heads is not "rarer"
    equal = summarize([head_table("e", "d1", [SINK, DIAG, OTHER, OTHER])])
    assert verdicts(HC.check_diagonal_heads_rarer(equal)) == [V.NOT_REPRODUCED] * 2


def test_paper_ranges_are_inclusive(head_classes: pl.DataFrame) -> None:
    a = head_classes.filter(pl.col("model") == "a")  # 5% diagonal, 15% sink+prev
    assert (
        verdicts(HC.check_diagonal_fraction_in_paper_range(a, [0.006, 0.095])) == [V.REPRODUCED] * 2
    )
    assert (
        verdicts(HC.check_diagonal_fraction_in_paper_range(a, [0.05, 0.05])) == [V.REPRODUCED] * 2
    )
    assert (
        verdicts(HC.check_diagonal_fraction_in_paper_range(a, [0.051, 0.2]))
        == [V.NOT_REPRODUCED] * 2
    )
    rows = HC.check_sink_prev_fraction_in_paper_range(head_classes, [0.13, 0.21])
    assert by(rows, model="a", dataset="all")["verdict"] == V.REPRODUCED
    b = by(rows, model="b", dataset="all")
    assert b["verdict"] == V.NOT_REPRODUCED and "below" in b["reason"]
    assert (
        verdicts(HC.check_sink_prev_fraction_in_paper_range(a, [0.1, 0.15])) == [V.REPRODUCED] * 2
    )
    with pytest.raises(ValueError, match="empty"):
        HC.check_sink_prev_fraction_in_paper_range(a, [0.2, 0.1])


# =============================================================================== geometry


def bos_alignment(
    maxima: list[float], from2: list[float] | None = None, n_sequences: int | None = None
) -> pl.DataFrame:
    """Pooled ``bos_alignment`` rows; ``from2``: maxima over positions >= 2 (default: the same,
    the maximum at a later position), otherwise the maximum sits at position 1;
    ``n_sequences``: the rows' sequences (None: no such column)."""
    n = len(maxima)
    from2 = list(maxima) if from2 is None else from2
    rows = [
        {
            "model": "m",
            "dataset": "all",
            "space": space,
            "layer": layer,
            "max": mx,
            "max_excl_first": m2,
            "max_position": 5 if m2 == mx else 1,
            "n_positive": int(mx > 0),
            "n_values": 10,
        }
        for layer, (mx, m2) in enumerate(zip(maxima, from2, strict=True))
        for space in ("X", "Z")
    ]
    frame = pl.DataFrame(rows)
    if n_sequences is not None:
        frame = frame.with_columns(n_sequences=pl.lit(n_sequences))
    # the X space is never read: make it positive everywhere
    return frame.with_columns(
        max=pl.when(pl.col("space") == "X").then(0.9).otherwise(pl.col("max"))
    ).filter(pl.col("layer") < n)


@pytest.mark.parametrize("n", [8, 30, 200])
def test_the_unseen_share_bound_covers_as_stated(n: int) -> None:
    """Simulated samples of ``n`` sequences, each holding a counterexample with probability
    ``p``: a sample without one arises less often than 1 - level where ``p`` lies above the bound
    (the bound then excludes ``p`` too seldom to break its coverage), and more often where ``p``
    lies below it; at the bound itself it arises with probability exactly 1 - level."""
    from sinkscope.claims.checks.geometry import unseen_share_bound

    rng = np.random.default_rng(n)
    bound = unseen_share_bound(n, 0.95)
    draws = 200_000
    for p, side in ((1.15 * bound, "under"), (0.85 * bound, "over")):
        none_seen = (rng.binomial(n, p, size=draws) == 0).mean()
        assert (none_seen < 0.05) if side == "under" else (none_seen > 0.05), (p, none_seen)
    at_bound = (rng.binomial(n, bound, size=draws) == 0).mean()
    assert at_bound == pytest.approx(0.05, abs=4 * (0.05 * 0.95 / draws) ** 0.5)


def test_bos_cosine_is_a_universal_claim_refuted_by_one_counterexample() -> None:
    """Over 30 sequences: all middle-layer cosines below 0 reproduce it, with the exact bound
    1 - 0.05^(1/30) = 9.5% on the share of sequences that could hold a positive one unseen;
    one positive maximum refutes it on an exact interval [max, 1] (no sampling interval can
    rescue a universal claim from a counterexample)."""
    from sinkscope.claims.checks.geometry import unseen_share_bound

    assert unseen_share_bound(30, 0.95) == pytest.approx(1 - 0.05 ** (1 / 30))
    assert unseen_share_bound(1000, 0.95) == pytest.approx(3 / 1000, rel=0.01)  # rule of three
    holds = bos_alignment([0.5, 0.5, -0.1, -0.2, -0.3, -0.01, 0.7, 0.8], n_sequences=30)
    (row,) = GC.check_bos_cosine_middle_layers(holds, 0.0)
    assert row["verdict"] == V.REPRODUCED and row["interval"] == ""
    assert "no counterexample among the 30 sequences: fewer than 9.5% of sequences" in row["reason"]
    fails = bos_alignment([0.5, 0.5, -0.1, 0.02, -0.3, -0.01, 0.7, 0.8], n_sequences=30)
    (row,) = GC.check_bos_cosine_middle_layers(fails, 0.0)
    assert row["verdict"] == V.NOT_REPRODUCED and (row["ci_low"], row["ci_high"]) == (0.02, 1.0)
    assert "one counterexample refutes a universal claim" in row["interval"]


def test_bos_cosine_uses_the_middle_layers_of_z() -> None:
    # 8 layers: middle = 2..5 (L/4 <= l < 3L/4); outer layers may be positive
    holds = bos_alignment([0.5, 0.5, -0.1, -0.2, -0.3, -0.01, 0.7, 0.8])
    (row,) = GC.check_bos_cosine_middle_layers(holds, 0.0)
    assert row["verdict"] == V.REPRODUCED and row["value"] == pytest.approx(-0.01)
    assert "2..5" in row["setting"]
    fails = bos_alignment([0.5, 0.5, -0.1, 0.3, -0.3, -0.01, 0.7, 0.8])
    (row,) = GC.check_bos_cosine_middle_layers(fails, 0.0)
    assert row["verdict"] == V.NOT_REPRODUCED and "3/4 middle layers" in row["measured"]
    boundary = bos_alignment([0.5, 0.5, -0.1, 0.0, -0.3, -0.01, 0.7, 0.8])  # max == 0 is not < 0
    assert verdicts(GC.check_bos_cosine_middle_layers(boundary, 0.0)) == [V.NOT_REPRODUCED]
    assert verdicts(GC.check_bos_cosine_middle_layers(boundary, 0.01)) == [V.REPRODUCED]


def test_bos_cosine_reports_both_readings_and_position_one() -> None:
    # the first text token is almost parallel to BOS in every middle layer; without it the
    # maximum is negative: the claim (all positions) fails, and the row says why
    full = [0.5, 0.5, 0.99, 0.98, 0.97, 0.99, 0.7, 0.8]
    from2 = [0.5, 0.5, -0.1, -0.2, -0.3, -0.05, 0.7, 0.8]
    (row,) = GC.check_bos_cosine_middle_layers(bos_alignment(full, from2), 0.0)
    assert row["verdict"] == V.NOT_REPRODUCED and row["value"] == pytest.approx(0.99)
    assert "all positions: max 0.99 (layer 2), 0/4" in row["measured"]
    assert "positions >= 2: max -0.05 (layer 5), 4/4 below" in row["measured"]
    assert "position 1 holds the maximum in 4/4" in row["measured"]
    assert "first text token" in row["reason"]
    # flip: the first token no longer aligned -> the all-positions reading holds too
    (row,) = GC.check_bos_cosine_middle_layers(bos_alignment(from2, from2), 0.0)
    assert row["verdict"] == V.REPRODUCED and "holds the maximum in 0/4" in row["measured"]


def test_sink_representable() -> None:
    statements = pl.DataFrame(
        {
            "model": ["a", "b", "c", "d"],
            "claim": "sink_representable",
            "value": [1.0, 0.99, None, None],
            "statement": "s",
            "n_cases": [10, 10, 0, 10],
            "n_trivial": [4, 0, 0, 10],
        },
        schema_overrides={"value": pl.Float64},
    )
    rows = GC.check_sink_representable(statements, 1.0)
    assert verdicts(rows) == [
        V.REPRODUCED,
        V.NOT_REPRODUCED,
        V.NOT_APPLICABLE,
        V.NOT_APPLICABLE,
    ]
    assert "6 non-trivial pairs (4 of 10 trivially separable" in rows[0]["measured"]
    assert "no BOS-attending" in rows[2]["reason"]
    assert rows[3]["reason"].startswith("not applicable - all cases trivially separable")
    assert verdicts(GC.check_sink_representable(statements, 0.99))[:2] == [V.REPRODUCED] * 2


def test_sink_representable_counts_only_non_trivial_cases() -> None:
    """Planted halfspace rows -> geometry's counts and statement -> the claim's verdict."""
    from sinkscope.geometry.halfspace import representability_counts, representability_statement
    from sinkscope.geometry.names import ATTENDING, POINT_SETS

    def halfspace(trivial: list[bool], representable: list[bool]) -> pl.DataFrame:
        rows = []
        for seq, (triv, rep) in enumerate(zip(trivial, representable, strict=True)):
            for name in POINT_SETS:
                rows.append(
                    {
                        "model": "m",
                        "dataset": "d",
                        "layer": 0,
                        "sequence": seq,
                        "point_set": name,
                        "n_points": 3,
                        "halfspace": rep or name == ATTENDING,
                        "trivially_separable": triv,
                        "margin": 0.5 if rep else 0.0,
                    }
                )
        return pl.DataFrame(rows)

    def verdict(frame: pl.DataFrame) -> dict:
        (r,) = representability_counts(frame).iter_rows(named=True)
        statements = pl.DataFrame(
            {
                "model": ["m"],
                "claim": "sink_representable",
                "value": [r["frac_representable_nontrivial"]],
                "statement": representability_statement(r),
                "n_cases": [r["n_cases"]],
                "n_trivial": [r["n_trivial"]],
            },
            schema_overrides={"value": pl.Float64},
        )
        (row,) = GC.check_sink_representable(statements, 1.0)
        return row

    # the one failure is a trivial case -> cannot happen for real, but it must not count
    row = verdict(halfspace([True, True, False, False], [True, False, True, True]))
    assert row["verdict"] == V.REPRODUCED and row["value"] == 1.0
    # the failure in a non-trivial case flips the verdict
    row = verdict(halfspace([True, True, False, False], [True, True, True, False]))
    assert row["verdict"] == V.NOT_REPRODUCED and row["value"] == 0.5
    # all trivial: not applicable, whatever the half-space answers
    row = verdict(halfspace([True] * 4, [True] * 4))
    assert row["verdict"] == V.NOT_APPLICABLE and "trivially separable" in row["reason"]


def test_value_rank_middle_layers() -> None:
    medians = [0.2, 0.5, 0.95, 0.9, 1.0, 1.0, 0.97, 0.3]  # middle layers 2..5
    table = pl.DataFrame(
        {"model": "m", "dataset": "d", "layer": range(8), "median": medians, "min": [0.1] * 8}
    )
    assert verdicts(GC.check_value_rank_middle_layers(table, 0.9)) == [V.REPRODUCED]  # 0.9 >= 0.9
    (row,) = GC.check_value_rank_middle_layers(table, 0.91)
    assert row["verdict"] == V.NOT_REPRODUCED and row["value"] == 0.9 and "3 of 4" in row["reason"]


def test_sink_bos_value_norm_reads_the_graded_relation() -> None:
    """§6 on the paper's basis: a negative Spearman interval and a high / low BOS-mass ratio
    interval under the tolerance reproduce it; a ratio interval wholly above fails it; intervals
    across a bound are inconclusive; without a relation to rank it is not applicable."""
    from tests.claims.test_claims_flips import value_norm_classes

    def claim(**planted: object) -> dict:
        (row,) = GC.check_sink_bos_value_norm(
            value_norm_classes(**planted)["geometry_bos_value_norm_classes"], 0.5
        )
        return row

    row = claim(ratio=0.3)
    assert row["verdict"] == V.REPRODUCED and row["value"] == pytest.approx(-0.4)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((-0.6, -0.2)) and "Spearman" in row[
        "interval"
    ]
    assert "Reported reading, sink vs other heads" in row["reason"]
    assert claim(ratio=0.7)["verdict"] == V.NOT_REPRODUCED
    assert claim(ratio=0.5)["verdict"] == V.INCONCLUSIVE  # [0.45, 0.55] across 0.5
    assert claim(ratio=0.3, spearman=0.4)["verdict"] == V.NOT_REPRODUCED  # positive relation
    row = claim(ratio=0.3, spearman=-0.05)  # [-0.25, 0.15]: across 0
    assert row["verdict"] == V.INCONCLUSIVE and "needs more heads" in row["reason"]
    row = claim(ratio=None)  # no heads at one end: the correlation decides alone
    assert row["verdict"] == V.REPRODUCED and "decides alone" in row["reason"]
    assert claim(ratio=0.3, spearman=None)["verdict"] == V.NOT_APPLICABLE
    # 4 distinct heads at an end: the ratio's t has 3 degrees of freedom, and the row says so;
    # its interval (planted) lies under the tolerance, so it decides
    table = value_norm_classes(ratio=0.3, heads_at_ends=4)["geometry_bos_value_norm_classes"]
    (row,) = GC.check_sink_bos_value_norm(table, 0.5)
    assert row["verdict"] == V.REPRODUCED
    assert "(t, 3 df: the heads at its fewer end)" in row["reason"]


def test_sink_bos_value_norm_from_planted_heads() -> None:
    """Planted per-head norms -> geometry's summary table -> the claim: the verdict follows how
    the norm falls with BOS mass, not the sink heads' absolute level."""
    from sinkscope.geometry.values import vo_classes

    rng = np.random.default_rng(1)

    def heads(norm_at: Callable[[float], float]) -> pl.DataFrame:
        rows = []
        for dataset in ("a", "b"):
            for layer in range(6):
                for head in range(8):
                    mass = head / 7
                    rows.append(
                        {
                            "model": "m",
                            "dataset": dataset,
                            "layer": layer,
                            "head": head,
                            "rel_bos_vo_norm": norm_at(mass) * float(rng.uniform(0.9, 1.1)),
                            "rel_bos_value_norm": 1.0,
                            "bos_mass": mass,
                            "is_sink": mass >= 0.4,
                            "head_class": "sink" if mass >= 0.4 else "other",
                        }
                    )
        return pl.DataFrame(rows)

    def claim(frame: pl.DataFrame) -> list[dict]:
        return GC.check_sink_bos_value_norm(vo_classes(frame), 0.5)

    graded = claim(heads(lambda mass: 1.0 - 0.9 * mass))  # 0.1-0.2 at the top, ~1 at the bottom
    assert verdicts(graded) == [V.REPRODUCED] * 3
    assert graded[-1]["dataset"] == "all" and graded[-1]["value"] < -0.8
    # the same small level at the top, but every head about as small: no relation
    flat = claim(heads(lambda mass: 0.12))
    assert V.REPRODUCED not in verdicts(flat)


# =============================================================================== oversmoothing


def oversmoothing_tables(
    rho_x: list[float], rho_xwza_s: list[float], err_xwz: list[float], context_lengths=(8, 16)
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-head / per-layer tables in oversmoothing's format (other columns random) for heads with
    the given values at every context length."""
    rng = np.random.default_rng(0)
    n = len(rho_x)
    per_head = []
    for t in context_lengths:
        cols: dict[str, object] = {}
        for name in ov_names.PER_HEAD_COLUMNS:
            cols[name] = rng.uniform(0.1, 0.9, n)
        cols.update(
            model="m",
            dataset="d",
            n_sequences=[4] * n,
            layer=list(range(n)),
            head=[0] * n,
            context_length=[t] * n,
            n_tokens=[t] * n,
            head_class=["other"] * n,
            is_sink=[False] * n,
            is_diagonal=[False] * n,
            condition=(["i", "ii", "neither"] * n)[:n],
            condition_s=(["i", "ii", "neither"] * n)[:n],
            predicted_sign=([1, -1, 0] * n)[:n],
            predicted_sign_s=([1, -1, 0] * n)[:n],
            rhohat_trend=["increasing"] * n,
            rhohat_trend_s=["increasing"] * n,
            expectation_positive=[True] * n,
            rho_x=rho_x,
            rho_xwza_s=rho_xwza_s,
            abs_err_xwz=err_xwz,
            abs_err_x=[0.0] * n,
            uniformity=np.linspace(0.1, 0.9, n),
        )
        per_head.append(pl.DataFrame(cols).select(ov_names.PER_HEAD_COLUMNS))
    per_layer = pl.DataFrame(
        {name: [0.5] * len(context_lengths) for name in ov_names.PER_LAYER_COLUMNS}
    ).with_columns(
        model=pl.lit("m"),
        dataset=pl.lit("d"),
        layer=0,
        n_sequences=4,
        context_length=pl.Series(list(context_lengths)),
        n_tokens=8,
    )
    return pl.concat(per_head), per_layer


def test_oversmoothing_claims_read_the_module_summary() -> None:
    rho_x = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    after = [0.25, 0.28, 0.5, 0.5, 0.9, 0.75]
    per_head, per_layer = oversmoothing_tables(rho_x, after, [0.01, 0.02, 0.05, 0.09, 0.099, 0.2])
    summary = ov_summary.summary_tables(per_head, per_layer, 0.6)["summary"]
    (row,) = OCC.check_attention_raises_similarity(summary, 0.0)
    assert row["value"] == pytest.approx(np.mean(np.subtract(after, rho_x)))
    assert row["verdict"] == V.REPRODUCED and "T'=16" in row["setting"]  # the largest T'
    (row,) = OCC.check_attention_raises_similarity(summary, row["value"])  # boundary: not > itself
    assert row["verdict"] == V.NOT_REPRODUCED
    # 2 of 6 heads satisfy (i), 2 of 6 (ii): on 6 heads the Wilson interval [0.10, 0.70]
    # straddles every bound, so neither share decides anything (the flips use 400 heads)
    (row,) = OCC.check_condition_i_about_half(summary, 0.25)
    assert row["value"] == pytest.approx(1 / 3) and row["verdict"] == V.INCONCLUSIVE
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson_interval(2, 6))
    assert "needs more heads" in row["reason"]
    assert verdicts(OCC.check_condition_i_about_half(summary, 0.16)) == [V.INCONCLUSIVE]
    (row,) = OCC.check_condition_ii_few(summary, 0.1)
    assert row["verdict"] == V.INCONCLUSIVE
    assert verdicts(OCC.check_condition_ii_few(summary, 0.75)) == [V.REPRODUCED]
    # every-head vs most-heads reading of Fig. 7 on the per-head table: one head at 0.2
    every, pooled = OC.check_approximation_every_head(per_head, 0.1)
    assert (every["dataset"], pooled["dataset"]) == ("d", "all")
    assert every["verdict"] == V.NOT_REPRODUCED and every["value"] == pytest.approx(0.2)
    assert verdicts(OC.check_approximation_every_head(per_head, 0.2)) == [V.NOT_REPRODUCED] * 2
    assert verdicts(OC.check_approximation_every_head(per_head, 0.21)) == [V.REPRODUCED] * 2
    # the most-heads share is read on a Wilson interval over the heads: 5 of 6 is too few heads
    # to tell 5/6 from 1/2 (95%: 0.44-0.97)
    most, _ = OC.check_approximation_most_heads(per_head, 0.1, 0.5)
    assert most["value"] == pytest.approx(5 / 6) and most["verdict"] == V.INCONCLUSIVE
    assert "needs more heads" in most["reason"]
    assert (most["ci_low"], most["ci_high"]) == pytest.approx((0.436, 0.970), abs=1e-3)
    assert verdicts(OC.check_approximation_most_heads(per_head, 0.1, 0.3)) == [V.REPRODUCED] * 2
    assert (
        verdicts(OC.check_approximation_most_heads(per_head, 0.1, 0.98)) == [V.NOT_REPRODUCED] * 2
    )


def test_the_most_heads_interval_counts_each_head_once_when_datasets_are_pooled() -> None:
    """The pooled row reads the same heads on every dataset: its Wilson interval is over the
    distinct heads, as wide as one dataset's, not over heads x datasets."""
    a, _ = oversmoothing_tables([0.5] * 6, [0.5] * 6, [0.01] * 5 + [0.5])
    b = a.with_columns(dataset=pl.lit("e"))
    d, _, pooled = OC.check_approximation_most_heads(pl.concat([a, b]), 0.1, 0.5)
    assert pooled["dataset"] == "all" and pooled["value"] == pytest.approx(5 / 6)
    assert (pooled["ci_low"], pooled["ci_high"]) == (d["ci_low"], d["ci_high"])
    assert pooled["verdict"] == V.INCONCLUSIVE and "each read on 2 datasets" in pooled["reason"]


def test_every_head_check_pools_datasets() -> None:
    a, _ = oversmoothing_tables([0.5] * 3, [0.5] * 3, [0.01, 0.02, 0.03])
    b = a.with_columns(dataset=pl.lit("e"), abs_err_xwz=pl.lit(0.5))
    rows = OC.check_approximation_every_head(pl.concat([a, b]), 0.1)
    assert [(r["dataset"], r["verdict"]) for r in rows] == [
        ("d", V.REPRODUCED),
        ("e", V.NOT_REPRODUCED),
        ("all", V.NOT_REPRODUCED),
    ]


def summary_row(**values: float | None) -> pl.DataFrame:
    base = {
        "model": "m",
        "dataset": "d",
        "context_length": 16,
        "n_heads": 10,
        "n_dense": 3,
        "mean_rho_x": 0.5,
        "mean_rho_xwz_s": 0.4,
        "mean_increase_attn_s": 0.02,
        "mean_increase_attn_s_dense": 0.05,
        "mean_increase_unif_s": 0.1,
        "mean_abs_err_x": 0.01,
        "mean_abs_err_xwz": 0.02,
        "agree_both_s": 0.8,
        "agree_attn_s": 0.9,
        "agree_unif_s": 0.85,
        "n_predicted_s": 100,  # enough heads for the intervals to decide
        "n_unpredicted_s": 100,
        "base_agree_both_s": 0.2,
        "agree_both": 0.7,
        "min_rho_layers": 0.1,
        "frac_cond_i": 0.5,
        "frac_cond_ii": 0.0,
        "n_non_sink": 8,
        "n_cond_i_s_non_sink": 4,
        "frac_cond_i_s_non_sink": 0.5,
        "n_cond_ii_s_non_sink": 0,
        "frac_cond_ii_s_non_sink": 0.0,
        "frac_cond_ii_non_sink": 0.125,
        "mean_rhohat_x": 0.5,
        "mean_rho_xwz": 0.45,
        "mean_rhohat_xwz": 0.45,
    }
    base.update(values)
    short = pl.DataFrame([{**base, "context_length": 8, "mean_abs_err_x": 0.3}])
    return pl.concat([short, pl.DataFrame([base])], how="vertical_relaxed")


@pytest.mark.parametrize(
    ("check", "column", "holds", "fails", "boundary"),
    [
        (OCC.check_w_decreases_similarity, "mean_rho_xwz_s", 0.4, 0.6, 0.5),
        (OCC.check_dense_heads_raise_more, "mean_increase_attn_s_dense", 0.05, 0.01, 0.02),
        (OCC.check_uniform_raises_more, "mean_increase_unif_s", 0.1, 0.0, 0.02),
    ],
)
def test_difference_claims(check, column: str, holds: float, fails: float, boundary: float) -> None:
    assert verdicts(check(summary_row(**{column: holds}), 0.0)) == [V.REPRODUCED]
    assert verdicts(check(summary_row(**{column: fails}), 0.0)) == [V.NOT_REPRODUCED]
    assert verdicts(check(summary_row(**{column: boundary}), 0.0)) == [V.NOT_REPRODUCED]


def test_dense_claim_without_dense_heads_is_not_applicable() -> None:
    (row,) = OCC.check_dense_heads_raise_more(
        summary_row(n_dense=0, mean_increase_attn_s_dense=None), 0.0
    )
    assert row["verdict"] == V.NOT_APPLICABLE and "n_dense = 0" in row["reason"]


def approximation_curves(gap: float, slope: float, lengths=(8, 16, 32)) -> pl.DataFrame:
    """Summary rows whose X+WZ curve falls by ``slope`` per T' step (range ``slope * (n - 1)``)
    with the approximation ``gap`` below it; X is matched exactly."""
    rows = []
    for k, t in enumerate(lengths):
        rho = 0.6 - slope * k
        rows.append(
            {
                "model": "m",
                "dataset": "d",
                "context_length": t,
                "mean_rho_x": 0.5 - slope * k,
                "mean_rhohat_x": 0.5 - slope * k,
                "mean_rho_xwz": rho,
                "mean_rhohat_xwz": rho - gap if k == 1 else rho - gap / 2,
            }
        )
    return pl.DataFrame(rows)


def test_mean_approximation_compares_the_offset_with_the_curve_range() -> None:
    # the X+WZ curve changes by 0.02 across T'; the largest gap (at T'=16) is 0.004 = 0.2 x range
    (row,) = OC.check_mean_approximation(approximation_curves(0.004, 0.01), 0.25)
    assert row["value"] == pytest.approx(0.2) and row["verdict"] == V.REPRODUCED
    assert "+0.004" in row["measured"] and "0.2 x the curve's range 0.02" in row["measured"]
    # a constant offset as large as the whole curve (Gemma 3 here: 0.011 vs 0.013) fails, although
    # it is far below the per-head bound 0.1
    (row,) = OC.check_mean_approximation(approximation_curves(0.02, 0.01), 0.25)
    assert row["value"] == pytest.approx(1.0) and row["verdict"] == V.NOT_REPRODUCED
    assert verdicts(OC.check_mean_approximation(approximation_curves(0.004, 0.01), 0.19)) == [
        V.NOT_REPRODUCED
    ]
    # a flat curve with a gap cannot be tracked; one context length is no curve
    (flat,) = OC.check_mean_approximation(approximation_curves(0.001, 0.0), 0.25)
    assert flat["verdict"] == V.NOT_REPRODUCED and flat["value"] == math.inf
    (one,) = OC.check_mean_approximation(approximation_curves(0.001, 0.01, lengths=(8,)), 0.25)
    assert one["verdict"] == V.NOT_APPLICABLE


def test_condition_claims_use_the_heads_and_map_of_figs_8_9() -> None:
    """Planted: 2 sink heads satisfying (ii) for W, 4 non-sink heads: (i), (i), (ii) for W only
    (neither for s_l W), neither. The claims count the 4 non-sink heads for s_l W."""
    per_head, per_layer = oversmoothing_tables([0.5] * 6, [0.6] * 6, [0.01] * 6)
    plant = {
        "is_sink": [True, True, False, False, False, False],
        "condition": ["ii", "ii", "i", "i", "ii", "neither"],
        "condition_s": ["ii", "ii", "i", "i", "neither", "neither"],
        "predicted_sign_s": [-1, -1, 1, 1, 0, 0],
        # heads 2, 3 (condition (i)): Fig. 8 agrees for both, Fig. 9 for head 2 only
        "delta_attn_s": [0.1, 0.1, 0.2, 0.1, -0.1, 0.3],
        "delta_unif_s": [0.1, 0.1, 0.1, -0.1, 0.1, 0.1],
    }
    n = per_head.height // 6
    per_head = per_head.with_columns(
        **{k: pl.Series(v * n, dtype=per_head[k].dtype) for k, v in plant.items()}
    )
    summary = ov_summary.summary_tables(per_head, per_layer, 0.6)["summary"]
    (half,) = OCC.check_condition_i_about_half(summary, 0.25)
    assert half["value"] == pytest.approx(2 / 4) and "2 of 4 non-sink heads" in half["measured"]
    # the share is the band's centre, but 4 heads give a Wilson interval wider than the band
    assert half["verdict"] == V.INCONCLUSIVE
    assert (half["ci_low"], half["ci_high"]) == pytest.approx(wilson_interval(2, 4))
    (few,) = OCC.check_condition_ii_few(summary, 0.1)
    assert few["value"] == 0.0 and few["verdict"] == V.INCONCLUSIVE
    assert (few["ci_low"], few["ci_high"]) == pytest.approx(wilson_interval(0, 4))
    assert "unscaled head map W (not plotted): 25.0%" in few["reason"]
    (signs,) = OCC.check_predicted_signs(summary, 0.5)
    # 1 of 2 heads: the Wilson interval spans most of [0, 1], so nothing is decided on it
    assert signs["value"] == pytest.approx(0.5) and signs["verdict"] == V.INCONCLUSIVE
    assert "Fig. 8 alone: 100.0%, Fig. 9 alone: 50.0%" in signs["measured"]
    # the base rate: of the 2 heads without a prediction, head 5 increases in both figures
    assert "base rate: 1 of the 2 heads without a prediction" in signs["reason"]
    # 0.5 sits on the tolerance 0.5: no sample decides it
    assert "no sample decides a value on the tolerance" in signs["reason"]
    assert (signs["ci_low"], signs["ci_high"]) == pytest.approx(wilson_interval(1, 2))
    # flip: (ii) for s_l W on the non-sink head 4 and (i) on head 5 -> 1 of 4 satisfy (ii)
    flipped = per_head.with_columns(
        condition_s=pl.Series(["ii", "ii", "i", "i", "ii", "i"] * n),
        predicted_sign_s=pl.Series([-1, -1, 1, 1, -1, 1] * n),
    )
    summary = ov_summary.summary_tables(flipped, per_layer, 0.6)["summary"]
    (few,) = OCC.check_condition_ii_few(summary, 0.1)
    assert few["value"] == pytest.approx(0.25) and few["verdict"] == V.INCONCLUSIVE
    assert (few["ci_low"], few["ci_high"]) == pytest.approx(wilson_interval(1, 4))
    (half,) = OCC.check_condition_i_about_half(summary, 0.2)
    assert half["value"] == pytest.approx(0.75) and half["verdict"] == V.INCONCLUSIVE


def test_condition_claims_without_non_sink_heads_are_not_applicable() -> None:
    none = summary_row(n_non_sink=0, frac_cond_i_s_non_sink=None, frac_cond_ii_s_non_sink=None)
    assert verdicts(OCC.check_condition_i_about_half(none, 0.25)) == [V.NOT_APPLICABLE]
    assert verdicts(OCC.check_condition_ii_few(none, 0.1)) == [V.NOT_APPLICABLE]


def test_predicted_signs_and_positive_similarity() -> None:
    assert verdicts(OCC.check_predicted_signs(summary_row(), 0.5)) == [V.REPRODUCED]
    assert verdicts(OCC.check_predicted_signs(summary_row(agree_both_s=0.3), 0.5)) == [
        V.NOT_REPRODUCED
    ]
    assert verdicts(OCC.check_predicted_signs(summary_row(agree_both_s=None), 0.5)) == [
        V.NOT_APPLICABLE
    ]
    assert verdicts(OC.check_similarity_stays_positive(summary_row())) == [V.REPRODUCED]
    assert verdicts(OC.check_similarity_stays_positive(summary_row(min_rho_layers=0.0))) == [
        V.NOT_REPRODUCED
    ]


# =============================================================================== costs


def test_toy_nuclear_norms_are_a_sanity_check_not_a_claim() -> None:
    """The §7 toy's ratio is sqrt(T+1) by construction, so it is a sanity
    check (its own section of claims.md) and no claim row; a ratio 1% off fails the default
    bound and passes a looser one."""
    from sinkscope.claims.sanity import sanity_checks

    toy = pl.DataFrame(toy_table([4, 8]))
    assert "costs.toy_nuclear_norm" not in {claim.id for claim in R.CLAIMS}
    assert (
        R.evaluate_claims({"costs_toy": toy}).filter(pl.col("claim_id").str.contains("toy")).height
        == 0
    )
    (row,) = sanity_checks({"costs_toy": toy}).to_dicts()
    assert row["holds"] and row["value"] < 1e-12 and row["bound"] == 1e-6
    off = toy.with_columns(ratio_diag_over_sink=pl.col("ratio_diag_over_sink") * 1.01)
    (row,) = sanity_checks({"costs_toy": off}).to_dicts()
    assert not row["holds"] and row["value"] == pytest.approx(0.01)
    assert sanity_checks({"costs_toy": off}, toy_rtol=0.011)["holds"].to_list() == [True]


def slopes_table(sink_power: float, diagonal_power: float) -> pl.DataFrame:
    """backcopy_slopes as summarize_backcopy writes it, from runs with planted power laws."""
    runs = [
        {"T": t, "pattern": p, "seed": s, "cost_total": 3.0 * t**power * (1 + 0.001 * s)}
        for t in (4, 8, 16, 32)
        for s in (0, 1)
        for p, power in (("sink", sink_power), ("diagonal", diagonal_power))
    ]
    return pl.DataFrame(
        [{"cost": "cost_total", "pattern": p, **fit} for p, fit in fit_slopes(runs).items()]
    )


def test_backcopy_slopes() -> None:
    rows = CC.check_backcopy_slopes(slopes_table(1.0, 1.5), 0.25)
    assert [r["setting"].split(",")[0] for r in rows] == ["pattern=sink", "pattern=diagonal"]
    assert verdicts(rows) == [V.REPRODUCED] * 2
    assert (
        verdicts(CC.check_backcopy_slopes(slopes_table(1.3, 1.2), 0.25)) == [V.NOT_REPRODUCED] * 2
    )
    exact = pl.DataFrame(
        {"cost": "cost_total", "pattern": ["sink", "diagonal"], "slope": [1.25, 1.75], "n": 4.0}
    )
    assert verdicts(CC.check_backcopy_slopes(exact, 0.25)) == [V.REPRODUCED] * 2  # boundary
    assert verdicts(CC.check_backcopy_slopes(exact, 0.24)) == [V.NOT_REPRODUCED] * 2
    one = pl.DataFrame(
        {"cost": "cost_total", "pattern": ["sink"], "slope": [float("nan")], "n": 1.0}
    )
    assert verdicts(CC.check_backcopy_slopes(one, 0.25)) == [V.NOT_APPLICABLE]


def test_backcopy_sink_cheaper() -> None:
    runs = pl.DataFrame(
        {
            "T": [4, 4, 8, 8],
            "pattern": ["sink", "diagonal"] * 2,
            "cost_total": [5.0, 4.0, 9.0, 12.0],
        }
    )
    (row,) = CC.check_backcopy_sink_cheaper(runs)
    assert row["verdict"] == V.REPRODUCED and row["value"] == pytest.approx(12 / 9)
    assert "[8]" in row["reason"]
    equal = runs.with_columns(cost_total=pl.lit(3.0))
    assert verdicts(CC.check_backcopy_sink_cheaper(equal)) == [V.NOT_REPRODUCED]
    assert verdicts(CC.check_backcopy_sink_cheaper(runs.filter(pl.col("pattern") == "sink"))) == [
        V.NOT_APPLICABLE
    ]


def copypaste_runs(
    sink_power: float, diagonal_power: float, in_bounds: bool = True
) -> pl.DataFrame:
    rows = []
    for n in (2, 4):
        for delta in (0.2, 0.4):
            x = n / delta**2
            for pattern, power in (("sink", sink_power), ("diagonal", diagonal_power)):
                cost = 10.0 * x**power
                rows.append(
                    {
                        "pattern": pattern,
                        "n": n,
                        "delta": delta,
                        "reff_over_delta2": x,
                        "cost_total": cost,
                        "lower_bound": cost / 2,
                        "upper_bound": cost * 2,
                        "in_bounds": in_bounds,
                    }
                )
    return pl.DataFrame(rows)


def test_copypaste_trends() -> None:
    rows = CC.check_copypaste_trends(copypaste_runs(0.0, 0.5), 0.1, 0.1)
    assert verdicts(rows) == [V.REPRODUCED] * 2
    assert rows[0]["value"] == pytest.approx(0.0, abs=1e-9)
    assert rows[1]["value"] == pytest.approx(0.5)
    assert (
        verdicts(CC.check_copypaste_trends(copypaste_runs(0.3, 0.05), 0.1, 0.1))
        == [V.NOT_REPRODUCED] * 2
    )
    # boundary (the fitted slope equals the tolerance up to rounding)
    boundary = copypaste_runs(0.1, 0.1)
    assert (
        verdicts(CC.check_copypaste_trends(boundary, 0.1 + 1e-9, 0.1 - 1e-9)) == [V.REPRODUCED] * 2
    )
    assert (
        verdicts(CC.check_copypaste_trends(boundary, 0.1 - 1e-9, 0.1 + 1e-9))
        == [V.NOT_REPRODUCED] * 2
    )
    single = copypaste_runs(0.0, 0.5).filter((pl.col("n") == 2) & (pl.col("delta") == 0.2))
    assert verdicts(CC.check_copypaste_trends(single, 0.1, 0.1)) == [V.NOT_APPLICABLE] * 2


def test_copypaste_trends_are_decided_at_fixed_dormant_tokens() -> None:
    """A sink cost flat in delta at each n but higher for larger n (Theorem D.1: the sink bound
    grows with n through r_eta) is flat; the pooled slope alone would call it growing."""
    runs = copypaste_runs(0.0, 0.5).with_columns(
        pl.when(pl.col("pattern") == "sink")
        .then(pl.col("cost_total") * pl.col("n") ** 3)
        .otherwise(pl.col("cost_total"))
        .alias("cost_total")
    )
    sink, diagonal = CC.check_copypaste_trends(runs, 0.1, 0.1)
    assert sink["verdict"] == V.REPRODUCED and diagonal["verdict"] == V.REPRODUCED
    assert sink["value"] == pytest.approx(0.0, abs=1e-9)
    pooled = float(sink["reason"].rsplit("pooled over the sweep: ", 1)[1])
    assert pooled > 0.1  # what a pooled test would have failed on
    # one n whose sink cost does grow with r_eff/delta^2 fails the claim
    grows = runs.with_columns(
        pl.when((pl.col("pattern") == "sink") & (pl.col("n") == 4))
        .then(pl.col("cost_total") * pl.col("reff_over_delta2") ** 0.5)
        .otherwise(pl.col("cost_total"))
        .alias("cost_total")
    )
    assert CC.check_copypaste_trends(grows, 0.1, 0.1)[0]["verdict"] == V.NOT_REPRODUCED


def test_theorem_d1_bounds() -> None:
    assert verdicts(CC.check_theorem_d1_bounds(copypaste_runs(0.0, 0.5))) == [V.REPRODUCED] * 2
    broken = copypaste_runs(0.0, 0.5).with_columns(
        in_bounds=pl.when((pl.col("pattern") == "sink") & (pl.col("n") == 2))
        .then(False)
        .otherwise(True)
    )
    rows = CC.check_theorem_d1_bounds(broken)
    assert by(rows, setting="pattern=sink, 4 runs")["verdict"] == V.NOT_REPRODUCED
    assert by(rows, setting="pattern=diagonal, 4 runs")["verdict"] == V.REPRODUCED


# =============================================================================== streaming


def streaming_sink_heads(
    window_ratio: float, sink_ratio: float, spread: float = 0.0, n_positions: int = 320
) -> pl.DataFrame:
    """streaming.summary.summarize's ``sink_heads`` for one pair with planted perplexity ratios:
    the window-only NLL exceeds the dense one by ``log(window_ratio)`` on average over
    ``n_positions`` scored positions, each position off by centred Gaussian noise of sd
    ``spread`` (nats; seeded)."""
    rows, by_position = [], []
    noise = np.random.default_rng(0).normal(scale=spread, size=n_positions) if spread else None
    excess = np.zeros(n_positions) if noise is None else noise - noise.mean()
    for kind, n_sink, window, ratio in (
        ("dense", 0, None, 1.0),
        ("window", 0, 64, window_ratio),
        ("sink", 4, 64, sink_ratio),
        ("sink", 8, 64, 1.0),
    ):
        nll = 2.0 + math.log(ratio)
        policy = {
            "model": "m",
            "dataset": "d",
            "policy": f"{kind}{n_sink}",
            "kind": kind,
            "n_sink": n_sink,
            "window": window,
            "positions": "cache",
        }
        for region in ("all", "evicting", "tail"):
            rows.append(
                {
                    **policy,
                    "region": region,
                    "first_position": 1,
                    "n_tokens": n_positions,
                    "nll": nll,
                    "ppl": math.exp(nll),
                    "dense_nll": 2.0,
                    "dense_ppl": math.exp(2.0),
                    "log_ppl_ratio": nll - 2.0,
                }
            )
        parts = excess if kind == "window" else np.zeros(n_positions)
        for position, part in enumerate(parts, start=1):
            by_position.append({**policy, "position": position, "nll": nll + part, "nll_sd": 0.0})
    pair = {
        "perplexity": pl.DataFrame(rows, schema_overrides={"window": pl.Int64}),
        "nll_by_position": pl.DataFrame(by_position, schema_overrides={"window": pl.Int64}),
    }
    return summarize_streaming([pair])["sink_heads"]


def test_eviction_raises_perplexity() -> None:
    (row,) = SC.check_eviction_raises_perplexity(streaming_sink_heads(3.0, 1.05), 2.0)
    assert row["verdict"] == V.REPRODUCED and row["value"] == pytest.approx(3.0)
    assert verdicts(SC.check_eviction_raises_perplexity(streaming_sink_heads(2.0, 1.0), 2.0)) == [
        V.REPRODUCED
    ]
    assert verdicts(SC.check_eviction_raises_perplexity(streaming_sink_heads(1.5, 1.0), 2.0)) == [
        V.NOT_REPRODUCED
    ]
    # x3 on average, but position by position the excess scatters by 6 nats over 320 positions
    (row,) = SC.check_eviction_raises_perplexity(streaming_sink_heads(3.0, 1.0, 6.0, 320), 2.0)
    assert row["verdict"] == V.INCONCLUSIVE and "needs more scored tokens" in row["reason"]
    needed = int(re.search(r"about ([\d,]+) scored positions", row["reason"])[1].replace(",", ""))
    assert needed > 320  # more than the 320 it has
    assert row["ci_low"] < 2.0 < row["ci_high"] and "blocks of 16" in row["interval"]
    (row,) = SC.check_eviction_raises_perplexity(streaming_sink_heads(3.0, 1.0, 2.0, 20), 2.0)
    assert row["verdict"] == V.INCONCLUSIVE and "fewer than two blocks" in row["reason"]


def test_eviction_on_a_few_blocks_decides_where_its_interval_lies() -> None:
    """x3 without scatter on 100 positions: 6 blocks of 16, a t with 5 degrees of freedom, and
    the interval lies far above x2: reproduced (no floor on the blocks)."""
    (row,) = SC.check_eviction_raises_perplexity(streaming_sink_heads(3.0, 1.0, 0.0, 100), 2.0)
    assert row["ci_low"] > 2.0 and row["verdict"] == V.REPRODUCED
    assert (
        "t (5 df), moving-block bootstrap SE over 100 scored positions (6 blocks of 16"
        in (row["interval"])
    )
    assert verdicts(
        SC.check_eviction_raises_perplexity(streaming_sink_heads(1.5, 1.0, 0.0, 100), 2.0)
    ) == [V.NOT_REPRODUCED]
    # x1.9 with a nat of scatter per position: 6 blocks reach across x2, and say how many more
    (row,) = SC.check_eviction_raises_perplexity(streaming_sink_heads(1.9, 1.0, 1.0, 100), 2.0)
    assert row["ci_low"] < 2.0 < row["ci_high"] and row["verdict"] == V.INCONCLUSIVE
    assert "needs more scored tokens" in row["reason"]


def test_eviction_excess_averages_to_the_log_ratio() -> None:
    """The per-position parts the interval resamples are those of the pair's ratio: their mean
    is ``window_log_ppl_ratio``, over the evicting positions only."""
    table = streaming_sink_heads(3.0, 1.0, 0.5, 60).unique(["model", "dataset", "window"])
    (r,) = table.iter_rows(named=True)
    assert len(r["window_excess_by_position"]) == 60
    assert np.mean(r["window_excess_by_position"]) == pytest.approx(r["window_log_ppl_ratio"])


def streaming_recompute(
    window_excess: float,
    sink_excess: float,
    other_baseline_excess: float = -0.5,
    spread: float = 0.0,
    n_queries: int = 32,
) -> pl.DataFrame:
    """A ``recompute`` summary table: NLL 2.0 under re-computation with BOS, window-only and the
    sink caches (k = 4 and 8) ``*_excess`` nats above it; under re-computation without BOS the
    window-only excess is ``other_baseline_excess`` (the sinks keep their NLL). Per query
    (``n_queries``), each of the three NLLs scatters around its mean by ``spread`` times its own
    zero-mean pattern (0: every query equals the mean)."""
    rng = np.random.default_rng(0)
    patterns = rng.standard_normal((3, n_queries))
    patterns -= patterns.mean(axis=1, keepdims=True)

    def per_query(mean: float, which: int) -> list[float]:
        return (mean + spread * patterns[which]).tolist()

    rows = []
    for baseline, recompute_nll in (
        ("recompute_bos", 2.0),
        ("recompute", 2.0 + window_excess - other_baseline_excess),
    ):
        window_nll = 2.0 + window_excess
        gap = window_nll - recompute_nll
        for kind, n_sink, excess in (
            ("window", 0, window_excess),
            ("sink", 4, sink_excess),
            ("sink", 8, sink_excess),
        ):
            policy_nll = 2.0 + excess
            rows.append(
                {
                    "model": "m",
                    "dataset": "d",
                    "baseline": baseline,
                    "window": 64,
                    "kind": kind,
                    "n_sink": n_sink,
                    "policy": f"{kind}{n_sink}_L64",
                    "first_position": 73,
                    "n_queries": 32,
                    "n_tokens": 64,
                    "dense_nll": 1.5,
                    "window_nll": window_nll,
                    "recompute_nll": recompute_nll,
                    "policy_nll": policy_nll,
                    "window_vs_recompute": gap,
                    "policy_vs_recompute": policy_nll - recompute_nll,
                    "policy_vs_recompute_se": 0.01,
                    "recovered_fraction": (window_nll - policy_nll) / gap if gap > 0 else None,
                    "window_nll_by_query": per_query(window_nll, 0),
                    "policy_nll_by_query": per_query(policy_nll, 1 if kind != "window" else 0),
                    "recompute_nll_by_query": per_query(recompute_nll, 2),
                }
            )
    return pl.DataFrame(rows, schema=RECOMPUTE_SCHEMA | {"model": pl.String, "dataset": pl.String})


def test_sink_tokens_restore() -> None:
    rows = SC.check_sink_tokens_restore(streaming_recompute(1.0, 0.05), 4, 0.9)
    # k=8 > 4 is left out; the reference is re-computation with the BOS token
    assert [r["setting"] for r in rows] == ["window L=64, k=4 sink tokens, vs recompute_bos"]
    assert rows[0]["value"] == pytest.approx(0.95)
    assert verdicts(rows) == [V.REPRODUCED]
    # better than re-computation counts as restored
    assert verdicts(SC.check_sink_tokens_restore(streaming_recompute(1.0, -0.2), 4, 0.9)) == [
        V.REPRODUCED
    ]
    # boundary: recovering exactly 90% of the excess passes
    exact = streaming_recompute(1.0, 0.1)
    assert SC.check_sink_tokens_restore(exact, 4, 0.9)[0]["value"] == pytest.approx(0.9)
    assert verdicts(SC.check_sink_tokens_restore(exact, 4, 0.9 - 1e-9)) == [V.REPRODUCED]
    assert verdicts(SC.check_sink_tokens_restore(exact, 4, 0.9 + 1e-9)) == [V.NOT_REPRODUCED]
    assert verdicts(SC.check_sink_tokens_restore(streaming_recompute(1.0, 0.5), 4, 0.9)) == [
        V.NOT_REPRODUCED
    ]
    # the other baseline is read only when asked for: re-computation without BOS is worse than
    # window-only here (as for Gemma 3), which makes the claim not applicable, with the numbers
    (row,) = SC.check_sink_tokens_restore(streaming_recompute(1.0, 0.05), 4, 0.9, "recompute")
    assert row["verdict"] == V.NOT_APPLICABLE
    assert "out of the model's regime" in row["reason"] and "NLL 3.500 vs 3.000" in row["reason"]
    (row,) = SC.check_sink_tokens_restore(streaming_recompute(-0.1, 0.0), 4, 0.9)
    assert row["verdict"] == V.NOT_APPLICABLE and "no excess to restore" in row["reason"]
    with pytest.raises(Exception, match="recovered_fraction"):
        SC.check_sink_tokens_restore(
            streaming_recompute(1.0, 0.1).drop("recovered_fraction"), 4, 0.9
        )


def test_sink_tokens_restore_is_decided_on_fiellers_interval_over_queries() -> None:
    """The recovered fraction's interval comes from the re-computed queries: 24 scattered queries
    leave 95% recovered inconclusive against 0.9, 400 less scattered ones decide it. The interval
    is Fieller's, checked by its definition: at each end ``rho`` the paired t statistic of ``a -
    rho b`` over the queries (``a`` = window - sink NLL, ``b`` = window - re-computation NLL),
    computed directly from the per-query lists, is Student's t with 23 degrees of freedom (a
    table's 2.068658), and between the ends it is smaller. 8 queries that agree decide: the
    interval is valid at their number. A re-computation advantage that is itself noise leaves
    the interval unbounded."""
    few = streaming_recompute(1.0, 0.05, spread=0.5, n_queries=24)
    (row,) = SC.check_sink_tokens_restore(few, 4, 0.9)
    assert row["verdict"] == V.INCONCLUSIVE and "needs more re-computed queries" in row["reason"]
    assert row["ci_low"] < 0.9 < row["ci_high"] and "24 re-computed queries" in row["interval"]
    assert re.search(r"\(about [\d,]+ queries at this effect;", row["reason"])
    r = few.filter((pl.col("baseline") == "recompute_bos") & (pl.col("n_sink") == 4)).row(
        0, named=True
    )
    window, policy, recompute = (
        np.asarray(r[f"{c}_nll_by_query"]) for c in ("window", "policy", "recompute")
    )
    a, b = window - policy, window - recompute

    def paired_t(rho: float) -> float:
        d = a - rho * b
        return abs(d.mean()) / (d.std(ddof=1) / np.sqrt(24))

    assert paired_t(row["ci_low"]) == pytest.approx(2.068658, rel=1e-5)
    assert paired_t(row["ci_high"]) == pytest.approx(2.068658, rel=1e-5)
    inside = np.linspace(row["ci_low"], row["ci_high"], 7)[1:-1]
    assert all(paired_t(rho) < 2.068658 for rho in inside)
    assert row["ci_low"] < a.mean() / b.mean() < row["ci_high"]
    many = streaming_recompute(1.0, 0.05, spread=0.2, n_queries=400)
    assert verdicts(SC.check_sink_tokens_restore(many, 4, 0.9)) == [V.REPRODUCED]
    worse = streaming_recompute(1.0, 0.3, spread=0.5, n_queries=400)
    assert verdicts(SC.check_sink_tokens_restore(worse, 4, 0.9)) == [V.NOT_REPRODUCED]
    one = streaming_recompute(1.0, 0.05, n_queries=1)
    (row,) = SC.check_sink_tokens_restore(one, 4, 0.9)
    assert row["verdict"] == V.INCONCLUSIVE and "no interval" in row["reason"]
    eight = streaming_recompute(1.0, 0.05, spread=0.01, n_queries=8)
    (row,) = SC.check_sink_tokens_restore(eight, 4, 0.9)
    assert row["ci_low"] > 0.9 and row["verdict"] == V.REPRODUCED
    assert "Fieller's interval (t, 7 df)" in row["interval"]
    # an excess of 0.05 nats under a spread of 2: re-computation's advantage is not resolved
    unresolved = streaming_recompute(0.05, 0.0, spread=2.0, n_queries=8)
    (row,) = SC.check_sink_tokens_restore(unresolved, 4, 0.9)
    assert row["verdict"] == V.INCONCLUSIVE
    assert (row["ci_low"], row["ci_high"]) == (-math.inf, math.inf)
    assert "the ratio's interval is unbounded" in row["reason"]


# =============================================================================== dynamics


def by_variant(shares: dict[tuple[str, str], float], runs: int = 5) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "experiment": "untied",
                "loss": loss,
                "activation": act,
                "n": 8,
                "d": 4,
                "runs": runs,
                "polarized_share": share,
                "top_weight_mean": share,
            }
            for (loss, act), share in shares.items()
        ]
    )


def test_value_softmax_claims() -> None:
    """Each share is decided on its Wilson interval over the seeds: 5 of 5 (and 4 of 4, whose
    lower end is 4 / (4 + 1.96^2) = 0.510) lie above 0.5, 0 of 5 below; 4 of 5 and 1 of 5
    straddle it, and so does any share of 3 runs, whatever side it is on."""
    table = by_variant(
        {
            ("logistic", "softmax"): 1.0,
            ("square", "softmax"): 0.0,
            ("logistic", "sum"): 0.0,
            ("logistic", "sigmoid"): 0.0,
        }
    )
    assert verdicts(DC.check_logistic_polarizes(table, 0.5)) == [V.REPRODUCED]
    assert verdicts(DC.check_square_does_not_polarize(table, 0.5)) == [V.REPRODUCED]
    assert verdicts(DC.check_unnormalized_do_not_polarize(table, 0.5)) == [V.REPRODUCED] * 2
    (four,) = DC.check_logistic_polarizes(by_variant({("logistic", "softmax"): 1.0}, 4), 0.5)
    assert four["verdict"] == V.REPRODUCED and four["ci_low"] == pytest.approx(
        4 / (4 + 1.96**2), abs=1e-3
    )
    flipped = by_variant(
        {("logistic", "softmax"): 0.0, ("square", "softmax"): 1.0, ("logistic", "sum"): 1.0}
    )
    assert verdicts(DC.check_logistic_polarizes(flipped, 0.5)) == [V.NOT_REPRODUCED]
    assert verdicts(DC.check_square_does_not_polarize(flipped, 0.5)) == [V.NOT_REPRODUCED]
    assert verdicts(DC.check_unnormalized_do_not_polarize(flipped, 0.5)) == [V.NOT_REPRODUCED]
    # one seed against the others, or too few seeds: inconclusive, with the seeds it would need
    mixed = by_variant({("logistic", "softmax"): 0.8, ("square", "softmax"): 0.2})
    (row,) = DC.check_logistic_polarizes(mixed, 0.5)
    assert row["verdict"] == V.INCONCLUSIVE and row["ci_low"] < 0.5 < row["ci_high"]
    assert "4 of 5 seeds" in row["reason"] and "needs more seeds" in row["reason"]
    assert "POLARIZATION_SEEDS" in row["reason"]
    assert verdicts(DC.check_square_does_not_polarize(mixed, 0.5)) == [V.INCONCLUSIVE]
    three = by_variant({("logistic", "softmax"): 1.0}, runs=3)
    assert verdicts(DC.check_logistic_polarizes(three, 0.5)) == [V.INCONCLUSIVE]
    assert (
        "Wilson score interval over the 3 seeds' runs"
        in DC.check_logistic_polarizes(three, 0.5)[0]["interval"]
    )


def test_the_default_grid_gives_each_polarization_share_its_seeds() -> None:
    """The short run and the full offline scale both run the default grid's untied runs on every
    seed of POLARIZATION_SEEDS, enough for a unanimous share to exclude 0.5; the tied and
    regression runs keep their two seeds."""
    from sinkscope.dynamics.grids import POLARIZATION_SEEDS, value_softmax_grid
    from sinkscope.stats.intervals import wilson_interval

    grid = value_softmax_grid("default")
    untied = {s["seed"] for s in grid if s["experiment"] == "untied"}
    assert untied == set(POLARIZATION_SEEDS)
    assert {s["seed"] for s in grid if s["experiment"] != "untied"} == {0, 1}
    n = len(POLARIZATION_SEEDS)
    assert wilson_interval(n, n)[0] > 0.5 > wilson_interval(0, n)[1]
    assert len(grid) == 63


def test_polarization_rows_name_the_target_that_tells_two_runs_apart() -> None:
    """Two square-loss softmax runs at the same (n, d) and different regression targets are two
    rows with two settings, so (claim, model, dataset, setting) stays a key of the claims table."""
    table = pl.concat(
        [
            by_variant({("square", "softmax"): 0.0}).with_columns(target=pl.lit(target))
            for target in (5.0, 1.0)
        ]
    )
    rows = DC.check_square_does_not_polarize(table, 0.5)
    assert [r["setting"] for r in rows] == [
        "loss=square, phi=softmax, n=8, d=4, target=1",
        "loss=square, phi=softmax, n=8, d=4, target=5",
    ]
    single = DC.check_square_does_not_polarize(table.filter(pl.col("target") == 1.0), 0.5)
    assert [r["setting"] for r in single] == ["loss=square, phi=softmax, n=8, d=4"]


def test_softmax_sinks_emerge() -> None:
    """Three seeds that agree (each seed's proportion the mean): the bounds decide; the same
    readings from one seed per setup decide nothing (against the seed-to-seed
    spread)."""

    def setup(softmax: float, raw: float, runs: int = 3) -> pl.DataFrame:
        # a softmax head with another switch is not Table 1's softmax
        means = [softmax, raw, 0.9, 0.0]
        return pl.DataFrame(
            {
                "variant": ["softmax", "sigmoid_raw", "sigmoid_norm", "softmax+gate_head"],
                "attention": ["softmax", "sigmoid", "sigmoid", "softmax"],
                "normalize": [True, False, True, True],
                "switch": ["none", "none", "none", "gate_head"],
                "positional": "rope",
                "weight_decay": 0.2,
                "runs": runs,
                "sink_proportion_mean": means,
                "sink_proportion_min": means,
                "sink_proportion_max": means,
            }
        )

    for softmax, raw in ((0.5, 0.0), (0.05, 0.0)):  # one seed: inconclusive on either side
        (row,) = DC.check_softmax_sinks_emerge(setup(softmax, raw, runs=1), 0.1, 0.05)
        assert row["verdict"] == V.INCONCLUSIVE, (softmax, raw)
        assert "one training seed" in row["reason"] and "needs 2 or more seeds" in row["reason"]

    assert verdicts(DC.check_softmax_sinks_emerge(setup(0.5, 0.0), 0.1, 0.05)) == [V.REPRODUCED]
    assert verdicts(DC.check_softmax_sinks_emerge(setup(0.1, 0.05), 0.1, 0.05)) == [V.REPRODUCED]
    assert verdicts(DC.check_softmax_sinks_emerge(setup(0.05, 0.0), 0.1, 0.05)) == [
        V.NOT_REPRODUCED
    ]
    assert verdicts(DC.check_softmax_sinks_emerge(setup(0.5, 0.125), 0.1, 0.05)) == [
        V.NOT_REPRODUCED
    ]
    only_softmax = setup(0.5, 0.0).filter(pl.col("variant") == "softmax")
    assert verdicts(DC.check_softmax_sinks_emerge(only_softmax, 0.1, 0.05)) == [V.NOT_APPLICABLE]


def test_softmax_sinks_emerge_over_seeds_needs_every_seed() -> None:
    """With three seeds per setup each bound is read on the range over the
    seeds. Softmax's mean 0.5 clears the floor 0.1, but one seed gave 0.05: the seeds disagree,
    inconclusive. Every seed above the floor and every un-normalised seed under the ceiling:
    reproduced; every softmax seed below the floor: not reproduced."""

    def setup(softmax: tuple[float, float, float], raw: tuple[float, float, float]) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "variant": ["softmax", "sigmoid_raw"],
                "attention": ["softmax", "sigmoid"],
                "normalize": [True, False],
                "switch": ["none", "none"],
                "positional": "rope",
                "weight_decay": 0.0,
                "runs": 3,
                "sink_proportion_mean": [softmax[1], raw[1]],
                "sink_proportion_min": [softmax[0], raw[0]],
                "sink_proportion_max": [softmax[2], raw[2]],
            }
        )

    (row,) = DC.check_softmax_sinks_emerge(setup((0.05, 0.5, 0.9), (0.0, 0.0, 0.0)), 0.1, 0.05)
    assert row["verdict"] == V.INCONCLUSIVE and "needs more seeds" in row["reason"]
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.05, 0.9))
    assert "range over the 3+ seeds" in row["interval"]
    assert row["interval"].startswith("[0.05, 0.9], range")  # a range of seeds: no coverage
    (row,) = DC.check_softmax_sinks_emerge(setup((0.3, 0.5, 0.9), (0.0, 0.01, 0.04)), 0.1, 0.05)
    assert row["verdict"] == V.REPRODUCED
    (row,) = DC.check_softmax_sinks_emerge(setup((0.0, 0.03, 0.08), (0.0, 0.0, 0.0)), 0.1, 0.05)
    assert row["verdict"] == V.NOT_REPRODUCED


def test_other_switch_replaces_sink_on_planted_setups() -> None:
    """The switches claim: per switch and setup, against softmax at the same PE and lambda, the
    sink-head share and the first-half BOS share fall by the tolerances while the accuracy
    stays; a switch that loses the task fails, a reference that did not learn decides nothing."""
    tolerances = (0.25, 0.125, 0.0625)  # exact in binary: the boundaries are tested exactly

    def by_setup(*switched: tuple[str, float, float, float, int]) -> pl.DataFrame:
        rows = [("none", 0.75, 0.875, 1.0, 1)] + list(switched)
        return pl.DataFrame(
            {
                "variant": [f"softmax+{r[0]}" if r[0] != "none" else "softmax" for r in rows],
                "attention": "softmax",
                "switch": [r[0] for r in rows],
                "positional": "rope",
                "weight_decay": 0.0,
                "runs": 2,
                "learned_runs": [2 * r[4] for r in rows],
                "accuracy_mean": [r[3] for r in rows],
                "sink_proportion_mean": [r[1] for r in rows],
                "sink_proportion_min": [r[1] for r in rows],  # the two seeds agree
                "sink_proportion_max": [r[1] for r in rows],
                "idle_bos_share": [r[2] for r in rows],
                "idle_switch_mass": [0.0] + [0.6] * len(switched),
            }
        )

    table = by_setup(
        ("sink_logit", 0.5, 0.75, 0.9375, 1),  # exactly at every tolerance: reproduced
        ("gate_head", 0.75, 0.25, 1.0, 1),  # BOS share falls, sink heads do not
        ("softpick", 0.0, 0.0, 0.5, 0),  # no sink, but the task is lost
        ("kv_bias", 0.125, 0.8125, 1.0, 1),  # sink heads fall, the BOS share barely
    )
    rows = DC.check_other_switch_replaces_sink(table, *tolerances)
    assert [r["setting"].split(",")[0] for r in rows] == [
        "softmax+gate_head",
        "softmax+kv_bias",
        "softmax+sink_logit",
        "softmax+softpick",
    ]
    assert verdicts(rows) == [
        V.NOT_REPRODUCED,
        V.NOT_REPRODUCED,
        V.REPRODUCED,
        V.NOT_REPRODUCED,
    ]
    assert [r["value"] for r in rows] == pytest.approx([0.0, 0.625, 0.25, 0.75])
    assert "accuracy +0.50" in rows[3]["reason"] and "0/2 runs learned" in rows[3]["reason"]
    # the same setups from one seed each: no seed-to-seed spread, nothing decided
    one_seed = DC.check_other_switch_replaces_sink(table.with_columns(runs=pl.lit(1)), *tolerances)
    assert set(verdicts(one_seed)) == {V.INCONCLUSIVE}
    assert all("one training seed" in r["reason"] for r in one_seed)
    # the softmax reference did not learn: nothing to compare with
    lost = table.with_columns(
        learned_runs=pl.when(pl.col("switch") == "none").then(0).otherwise(pl.col("learned_runs"))
    )
    assert set(verdicts(DC.check_other_switch_replaces_sink(lost, *tolerances))) == {
        V.NOT_APPLICABLE
    }
    # no softmax reference at this setup, or no switch run at all
    other_pe = table.with_columns(
        positional=pl.when(pl.col("switch") == "none")
        .then(pl.lit("none"))
        .otherwise(pl.col("positional"))
    )
    assert set(verdicts(DC.check_other_switch_replaces_sink(other_pe, *tolerances))) == {
        V.NOT_APPLICABLE
    }
    alone = DC.check_other_switch_replaces_sink(by_setup(), *tolerances)
    assert verdicts(alone) == [V.NOT_APPLICABLE] and "select: switch" in alone[0]["reason"]


def test_flip_rate_decreases_over_seeds_needs_every_seed() -> None:
    """Seed-to-seed spread: three seeds, two of which drop the flip rate by 0.8 while the third
    raises it by 0.1. Pooled over the 6,000 attacked sequences the drop is 0.5 with a narrow
    Newcombe interval, but over the seeds (equal counts: the pooled drop is their mean) the
    interval is the textbook t-interval of the three drops, 0.5 -+ t_2 s / sqrt(3) = 0.5 -+
    4.303 x 0.3, computed here by hand: it reaches below the tolerance, inconclusive, "needs
    more seeds". With the third seed like the others the claim is reproduced."""
    rates = {0: (0.9, 0.1), 1: (0.9, 0.1), 2: (0.5, 0.6)}
    final = pl.DataFrame(
        [
            {"n_heads": h, "n_layers": 1, "seed": seed, "flip_rate": rate, "attacked": 1000}
            for seed, (low, high) in rates.items()
            for h, rate in ((1, low), (4, high))
        ]
    )
    (heads,) = [r for r in DC.check_flip_rate_decreases(final, 0.1) if "n_heads" in r["setting"]]
    assert heads["value"] == pytest.approx(0.5)
    newcombe = newcombe_difference(2300, 3000, 800, 3000)
    assert newcombe[0] > 0.1  # the attacked sequences alone would decide it
    assert heads["verdict"] == V.INCONCLUSIVE and "needs more seeds" in heads["reason"]
    assert "t (2 df), bootstrap SE over 3 training seeds" in heads["interval"]
    drops = np.array([0.8, 0.8, -0.1])
    half = 4.302653 * drops.std(ddof=1) / np.sqrt(3)
    assert heads["ci_low"] == pytest.approx(0.5 - half, rel=0.03)
    assert heads["ci_high"] == pytest.approx(0.5 + half, rel=0.03)
    assert "the drop per seed: +0.800, +0.800, -0.100" in heads["reason"]
    steady = final.with_columns(
        flip_rate=pl.when(pl.col("seed") == 2)
        .then(pl.when(pl.col("n_heads") == 1).then(0.85).otherwise(0.15))
        .otherwise(pl.col("flip_rate"))
    )
    (heads,) = [r for r in DC.check_flip_rate_decreases(steady, 0.1) if "n_heads" in r["setting"]]
    assert heads["verdict"] == V.REPRODUCED
    # one seed of the steady runs: its 2,000 attacked sequences alone would reproduce it, but the
    # seed-to-seed spread is unknown
    (heads,) = [
        r
        for r in DC.check_flip_rate_decreases(steady.filter(pl.col("seed") == 0), 0.1)
        if "n_heads" in r["setting"]
    ]
    assert newcombe_difference(900, 1000, 100, 1000)[0] > 0.1
    assert heads["verdict"] == V.INCONCLUSIVE
    assert "one training seed" in heads["reason"] and "needs 2 or more seeds" in heads["reason"]
    assert "Newcombe score interval over 1000 + 1000" in heads["interval"]


def test_flip_rate_decreases() -> None:
    """Flips pooled over the runs of a level (sampling unit: the attacked sequence), the drop's
    Newcombe interval against the tolerance. With no seed recorded (one run per setting) it is
    shown but decides nothing; with two seeds that agree it decides: reproduced above the
    tolerance, not reproduced below it, inconclusive across it."""
    final = pl.DataFrame(
        {
            "n_heads": [1, 1, 4, 4],
            "n_layers": [1, 2, 1, 2],
            "flip_rate": [0.8, 0.6, 0.3, 0.1],
            "attacked": [1000] * 4,
        }
    )
    rows = DC.check_flip_rate_decreases(final, 0.0)
    assert [r["value"] for r in rows] == pytest.approx([0.5, 0.2])
    assert verdicts(rows) == [V.INCONCLUSIVE] * 2
    assert all("one training seed" in r["reason"] for r in rows)
    # n_heads: 1400/2000 vs 400/2000, the interval is Newcombe's on those counts
    assert (rows[0]["ci_low"], rows[0]["ci_high"]) == pytest.approx(
        newcombe_difference(1400, 2000, 400, 2000)
    )
    assert "2000 + 2000 attacked sequences" in rows[0]["interval"]
    two_seeds = pl.concat([final.with_columns(seed=pl.lit(s)) for s in (0, 1)])
    assert verdicts(DC.check_flip_rate_decreases(two_seeds, 0.1)) == [V.REPRODUCED] * 2
    assert verdicts(DC.check_flip_rate_decreases(two_seeds, 0.3)) == [
        V.REPRODUCED,
        V.NOT_REPRODUCED,
    ]
    # the same drop on 10 sequences a run: the attacked sequences' interval straddles 0.1
    few = DC.check_flip_rate_decreases(two_seeds.with_columns(attacked=pl.lit(10)), 0.1)
    assert verdicts(few) == [V.REPRODUCED, V.INCONCLUSIVE]
    assert "needs more attacked sequences" in few[1]["reason"]
    assert re.search(r"\(about [\d,]+ per setting at this effect;", few[1]["reason"])
    # Fig. 21's setup is preferred when it has both levels
    spec = {"vocab_size": [41, 41, 41, 41, 81, 81], "use_mlp": [False] * 4 + [True] * 2}
    other = {"n_heads": [1, 4], "n_layers": [1, 2], "flip_rate": [0.0, 0.9], "attacked": [1000] * 2}
    mixed = pl.concat([final, pl.DataFrame(other)]).with_columns(
        vocab_size=pl.Series(spec["vocab_size"]),
        use_mlp=pl.Series(spec["use_mlp"]),
        use_layernorm=pl.lit(False),
    )
    rows = DC.check_flip_rate_decreases(mixed, 0.0)
    assert [r["value"] for r in rows] == pytest.approx([0.5, 0.2])
    assert "|V|=41" in rows[0]["setting"]
    same = final.with_columns(n_layers=pl.lit(1))
    assert verdicts(DC.check_flip_rate_decreases(same, 0.0))[1] == V.NOT_APPLICABLE


# =============================================================================== registry


def test_missing_analyses_are_not_applicable(head_classes: pl.DataFrame) -> None:
    table = R.evaluate_claims({"head_classes": head_classes}, None, models=["a", "b", "c"])
    assert list(table.columns) == list(V.COLUMNS)
    heads = table.filter(pl.col("claim_id").str.starts_with("heads."))
    assert heads.filter(pl.col("verdict") == V.NOT_APPLICABLE).height == 0
    rest = table.filter(~pl.col("claim_id").str.starts_with("heads."))
    assert set(rest["verdict"]) == {V.NOT_APPLICABLE}
    assert rest["reason"].str.starts_with(V.NOT_RUN).all()
    # per-model analyses: one row per model; synthetic experiments: one row
    geometry = rest.filter(pl.col("claim_id") == "geometry.bos_cosine_below_zero")
    assert geometry["model"].to_list() == ["a", "b", "c"]
    streaming_rows = rest.filter(pl.col("claim_id") == "streaming.eviction_hurts")
    assert streaming_rows["model"].to_list() == ["a", "b", "c"]
    assert "streaming" in streaming_rows["reason"][0]
    costs = rest.filter(pl.col("claim_id") == "costs.backcopy_slopes")
    assert costs["model"].to_list() == [V.SYNTHETIC]
    # every claim appears, in registry order
    assert list(dict.fromkeys(table["claim_id"])) == [c.id for c in R.CLAIMS]


def test_tolerances_come_from_the_config(head_classes: pl.DataFrame) -> None:
    strict = R.evaluate_claims(
        {"head_classes": head_classes}, {"heads": {"sink_min_fraction": 0.6}}
    )
    loose = R.evaluate_claims({"head_classes": head_classes}, {"heads": {"sink_min_fraction": 0.5}})

    def a_all(frame: pl.DataFrame) -> str:
        return frame.filter(
            (pl.col("claim_id") == "heads.sinks_common")
            & (pl.col("model") == "a")
            & (pl.col("dataset") == "all")
        )["verdict"][0]

    assert (a_all(strict), a_all(loose)) == (V.NOT_REPRODUCED, V.REPRODUCED)
    with pytest.raises(KeyError, match="claims.heads.sink_min"):
        TL.resolve_tolerances({"heads": {"sink_min": 0.1}})
    with pytest.raises(KeyError, match="unknown input"):
        R.evaluate_claims({"head_class": head_classes})


def test_schema_defaults_equal_the_module_defaults() -> None:
    schema = load_schema()
    assert "claims" in schema["properties"]
    assert load_config(REPO / "config.yaml")["claims"] == TL.DEFAULT_TOLERANCES
    overridden = load_config(REPO / "config.yaml")
    overridden["claims"] = {"geometry": {"bos_cosine_max": 0.5}}
    resolved = validate_config(overridden)["claims"]
    assert resolved["geometry"]["bos_cosine_max"] == 0.5
    assert (
        resolved["geometry"]["near_full_rank"]
        == TL.DEFAULT_TOLERANCES["geometry"]["near_full_rank"]
    )
    bad = load_config(REPO / "config.yaml")
    bad["claims"] = {"geometry": {"bos_cosine": 0.5}}
    with pytest.raises(ConfigError, match="claims.geometry"):
        validate_config(bad)


def test_analysis_runs() -> None:
    assert analysis_runs({}, "heads") and analysis_runs({"geometry": {}}, "geometry")
    assert not analysis_runs({}, "streaming")
    assert analysis_runs({"streaming": {"enabled": True}}, "streaming")
    assert not analysis_runs({"oversmoothing": {"enabled": False}}, "oversmoothing")
    dynamics = {"enabled": True, "induction": {"enabled": False}, "classification": {}}
    assert analysis_runs({"dynamics": dynamics}, "dynamics.classification")
    assert analysis_runs({"dynamics": dynamics}, "dynamics.value_softmax")
    assert not analysis_runs({"dynamics": dynamics}, "dynamics.induction")
    assert not analysis_runs(
        {"dynamics": {**dynamics, "enabled": False}}, "dynamics.classification"
    )


def test_claims_inputs_follow_the_config() -> None:
    paths = Paths("results")
    full = paths.claims_inputs({"costs": {"enabled": True}}, ONE_PAIR)
    assert set(full) <= set(R.TABLE_ANALYSIS)
    for claim in R.CLAIMS:
        if R.TABLE_ANALYSIS[claim.inputs[0]] in ("heads", "geometry", "oversmoothing", "costs"):
            assert set(claim.inputs) <= set(full), claim.id
    assert full["head_classes"] == "results/summary/head_classes.parquet"
    no_costs = paths.claims_inputs(
        {"costs": {"enabled": False}, "streaming": {"enabled": True}}, ONE_PAIR
    )
    assert not [k for k in no_costs if k.startswith("costs_")]
    assert set(no_costs) == {k for k in full if not k.startswith("costs_")} | {
        "streaming_sink_heads",
        "streaming_recompute",
    }
    dynamics = paths.claims_inputs(
        {"dynamics": {"enabled": True, "induction": {"enabled": False}}}, ONE_PAIR
    )
    assert "dynamics_value_softmax_by_variant" in dynamics
    assert "dynamics_classification_final" in dynamics
    assert "dynamics_induction_by_setup" not in dynamics
    assert paths.claims() in paths.all_targets({"costs": {"enabled": False}}, ONE_PAIR)
    # no pair under StreamingLLM's caches: no summary of them, so no claims input from it
    no_cache = paths.claims_inputs({"streaming": {"enabled": True}}, {**ONE_PAIR, "cache": []})
    assert "streaming_sink_heads" not in no_cache and "head_classes" in no_cache


# =============================================================================== writers


@pytest.fixture()
def mixed_table(head_classes: pl.DataFrame) -> pl.DataFrame:
    return R.evaluate_claims({"head_classes": head_classes}, None, models=["a", "b", "c"])


def test_markdown_shows_not_reproduced_first(mixed_table: pl.DataFrame) -> None:
    md = RD.claims_markdown(mixed_table)
    n_bad = int((mixed_table["verdict"] == V.NOT_REPRODUCED).sum())
    assert n_bad > 0
    assert f"**{n_bad} not reproduced**" in md
    bad_section = md.split(f"## Not reproduced ({n_bad})")[1].split("## Overview")[0]
    assert "### `heads.sink_prev_fraction`" in bad_section
    assert "### `heads.sinks_common`" in bad_section  # model b
    assert (
        "| b | all |" in bad_section
        and "| a | all |" not in bad_section.split("sinks_common")[1].split("###")[0]
    )
    assert "not applicable" not in bad_section
    overview = md.split("## Overview")[1].split("## All checks")[0]
    (line,) = [x for x in overview.splitlines() if "`heads.sink_prev_fraction`" in x]
    # models a, b, c, then the synthetic column (empty for a per-model claim)
    assert line.endswith(
        "| reproduced (2 of 2) | **not reproduced (2 of 2)** | **not reproduced (2 of 2)** |  |"
    )
    assert md.index("## Not reproduced") < md.index("## Overview") < md.index("## All checks")
    # every not-applicable row keeps its reason
    assert md.count(V.NOT_RUN) >= int(mixed_table["reason"].str.starts_with(V.NOT_RUN).sum())


def test_the_header_counts_are_the_rows_counts(mixed_table: pl.DataFrame) -> None:
    """claims.md's header line and its sections' counts equal the verdicts of the rows it lists
    under "All checks" (parsed back from the Markdown), for a table with every verdict."""
    import re

    inconclusive = mixed_table.head(2).with_columns(
        verdict=pl.lit(V.INCONCLUSIVE), claim_id=pl.lit("x.planted")
    )
    table = pl.concat([mixed_table, inconclusive])
    md = RD.claims_markdown(table)
    header = re.search(
        r"(\d+) checks: (\d+) decided \(\*\*(\d+) not reproduced\*\*, (\d+) reproduced\), "
        r"(\d+) inconclusive \(the interval straddles the tolerance\), (\d+) not applicable\.",
        md,
    )
    assert header is not None, md[:400]
    total, decided, bad, good, unsure, na = map(int, header.groups())
    assert decided == bad + good
    listed = md.split("## All checks")[1]
    rows = [line for line in listed.splitlines() if line.startswith("| ") and "---" not in line]
    verdicts = [line.split(" | ")[3] for line in rows if not line.startswith("| model |")]
    assert total == len(verdicts) == table.height
    assert (bad, unsure, good, na) == tuple(
        verdicts.count(v)
        for v in (V.NOT_REPRODUCED, V.INCONCLUSIVE, V.REPRODUCED, V.NOT_APPLICABLE)
    )
    assert unsure == 2 and na > 0 and bad > 0 and good > 0
    assert f"## Inconclusive ({unsure})" in md and f"## Not applicable ({na}), by reason" in md
    reasons = md.split(f"## Not applicable ({na}), by reason")[1].split("## Overview")[0]
    assert sum(int(x) for x in re.findall(r"^\| (\d+) \|", reasons, flags=re.MULTILINE)) == na


def test_markdown_without_failures_says_none() -> None:
    table = R.evaluate_claims({}, None, models=["m"])
    md = RD.claims_markdown(table)
    assert "## Not reproduced (0)\n\nNone." in md
    assert set(table["verdict"]) == {V.NOT_APPLICABLE}


def test_write_claims_files_and_rst(mixed_table: pl.DataFrame, tmp_path: Path) -> None:
    RD.write_claims(
        mixed_table, tmp_path / "claims.md", tmp_path / "claims.parquet", tmp_path / "claims.rst"
    )
    assert pl.read_parquet(tmp_path / "claims.parquet").equals(mixed_table)
    csv = pl.read_csv(tmp_path / "claims.csv")
    assert csv["verdict"].to_list() == mixed_table["verdict"].to_list()
    assert (tmp_path / "claims.md").read_text() == RD.claims_markdown(mixed_table)
    rst = (tmp_path / "claims.rst").read_text()
    html = publish_parts(
        "Intro.\n\n" + rst,
        writer="html",
        settings_overrides={"halt_level": 2, "report_level": 5},
    )["html_body"]
    assert "heads.sink_prev_fraction" in html and "<table" in html
    assert not list(tmp_path.glob(".*partial*"))
    with pytest.raises(ValueError, match="lacks the column"):
        RD.write_claims(mixed_table.drop("verdict"), tmp_path / "x.md", tmp_path / "x.parquet")


def test_compare_runs_puts_verdicts_side_by_side_and_flags_differences(tmp_path, capsys) -> None:
    from sinkscope.claims.render import compare_runs, compare_runs_markdown
    from sinkscope.claims.verdicts import COLUMNS
    from sinkscope.cli import main as cli_main

    def table(verdicts: dict[tuple[str, str, str], str]) -> pl.DataFrame:
        rows = [
            {**dict.fromkeys(COLUMNS), "claim_id": c, "claim": f"claim {c}", "model": m,
             "dataset": d, "verdict": v}
            for (c, m, d), v in verdicts.items()
        ]  # fmt: skip
        return pl.DataFrame(rows, schema=COLUMNS)

    short = table({
        ("a", "m1", "x"): "reproduced", ("a", "m1", "y"): "reproduced",
        ("b", "m1", "x"): "reproduced", ("b", "m1", "y"): "not reproduced",
        ("c", "m1", "-"): "not applicable",
    })  # fmt: skip
    full = table({
        ("a", "m1", "x"): "reproduced", ("a", "m1", "y"): "reproduced",
        ("b", "m1", "x"): "reproduced", ("b", "m1", "y"): "reproduced",
        ("d", "m1", "-"): "not reproduced",
    })  # fmt: skip
    out = compare_runs({"short": short, "full": full}).sort("claim_id")
    assert out["short"].to_list() == [
        "reproduced (2 of 2)", "mixed: 1 reproduced, 1 not reproduced", "not applicable", "absent"
    ]  # fmt: skip
    assert out["full"].to_list() == [
        "reproduced (2 of 2)", "reproduced (2 of 2)", "absent", "not reproduced (1 of 1)"
    ]  # fmt: skip
    assert out["differs"].to_list() == [False, True, True, True]
    text = compare_runs_markdown(out)
    assert text.startswith("3 of 4 claim × model verdicts differ between short, full.")
    short.write_parquet(tmp_path / "s.parquet")
    full.write_parquet(tmp_path / "f.parquet")
    assert cli_main(["compare-claims", str(tmp_path / "s.parquet"), str(tmp_path / "f.parquet"),
                     "--labels", "short", "full"]) == 0  # fmt: skip
    assert cli_main(["compare-claims", str(tmp_path / "missing.parquet")]) == 2
    short.select("model", "verdict").write_parquet(tmp_path / "other.parquet")
    assert (
        cli_main(["compare-claims", str(tmp_path / "s.parquet"), str(tmp_path / "other.parquet")])
        == 2
    )
    assert f"{tmp_path / 'other.parquet'} is not a claims table (no column claim_id" in (
        capsys.readouterr().err
    )


def test_claims_inputs_name_tables_their_stages_make() -> None:
    """Every input of rule ``claims`` is a table its rule writes, as the registry of outputs
    declares it; a claims input naming a table the rule does not write fails when it is
    declared, and so does a claims key read from two rules."""
    from sinkscope import outputs
    from sinkscope.claims import names

    for key, table in names.INPUTS.items():
        assert table.name in outputs.entry(table.rule).tables, key
        assert table.analysis == outputs.entry(table.rule).stage
    geometry = outputs.entry("summarize_geometry")
    with pytest.raises(ValueError, match="bos_alignment_typo"):
        dataclasses.replace(geometry, claims={"x": "bos_alignment_typo"})
    twice = dataclasses.replace(geometry, rule="summarize_geometry_again")
    with pytest.raises(ValueError, match="claims key 'geometry_bos_alignment'"):
        outputs._index((geometry, twice))
    with pytest.raises(ValueError, match="registered twice"):
        outputs._index((geometry, geometry))


# =============================================================================== sanity checks


def test_the_x_identity_is_a_sanity_check_not_half_of_a_verdict() -> None:
    """rho_hat(X) = rho(X) holds by construction: a large X error neither fails nor passes the
    approximation claims (they read X + WZ), and the sanity section flags it."""
    from sinkscope.claims.sanity import IDENTITY_TOLERANCE, sanity_checks, sanity_markdown

    # 30 heads: enough for the most-heads share's Wilson interval to clear its tolerance
    per_head, _ = oversmoothing_tables([0.5] * 30, [0.6] * 30, [0.01, 0.02, 0.03] * 10)
    broken = per_head.with_columns(abs_err_x=pl.lit(0.5))
    claims = [c for c in R.CLAIMS if c.id.startswith("oversmoothing.approximation_")]
    claims = [c for c in claims if c.inputs == ("oversmoothing_per_head",)]
    assert len(claims) == 2
    for table in (per_head, broken):
        verdict = R.evaluate_claims({"oversmoothing_per_head": table}, None, claims=claims)
        assert set(verdict["verdict"]) == {V.REPRODUCED}
    assert sanity_checks({"oversmoothing_per_head": per_head})["holds"].all()
    flagged = sanity_checks({"oversmoothing_per_head": broken})
    assert flagged.height == 1 and not flagged["holds"][0]
    assert flagged["value"][0] == 0.5 and flagged["bound"][0] == IDENTITY_TOLERANCE
    md = sanity_markdown(flagged)
    assert "**1 failing**" in md and "| m | d | 0.5 |" in md and "**no**" in md
    assert "None in this run." in sanity_markdown(sanity_checks({}))
    # the X + WZ error still decides
    worse = per_head.with_columns(abs_err_xwz=pl.lit(0.5))
    verdict = R.evaluate_claims({"oversmoothing_per_head": worse}, None, claims=claims)
    assert set(verdict["verdict"]) == {V.NOT_REPRODUCED}


def _layer_one_fails() -> pl.DataFrame:
    """A per-head table of 3 layers x 4 heads whose X+WZ error is 0.3 in every head of layer 1
    and 0.003 elsewhere (Gemma 3's case)."""
    rows = [
        {"layer": layer, "head": head, "abs_err_xwz": 0.3 if layer == 1 else 0.003}
        for layer in range(3)
        for head in range(4)
    ]
    per_head, _ = oversmoothing_tables([0.5] * 3, [0.6] * 3, [0.01, 0.02, 0.03])
    base = per_head.head(1).drop("layer", "head", "abs_err_xwz")
    return pl.DataFrame(rows).join(base, how="cross").select(per_head.columns)


def test_a_failing_per_head_check_names_where_it_fails() -> None:
    """Gemma 3's case: every head of one layer fails the approximation, the rest is close; the
    reason names the layer as a whole and gives the other layers' errors."""
    from sinkscope.claims.verdicts import where_heads

    planted = _layer_one_fails()
    rows = OC.check_approximation_every_head(planted, 0.1)
    (row,) = [r for r in rows if r["dataset"] == "d"]
    assert row["verdict"] == V.NOT_REPRODUCED
    assert "4 of 12 heads have an error >= 0.1 (layer 1: all 4 heads)" in row["reason"]
    assert "in the other layers the mean error is 0.003 and the largest 0.003" in row["reason"]
    some = pl.DataFrame({"layer": [2, 2, 5], "head": [3, 1, 0]})
    assert where_heads(some, {2: 4, 5: 1}) == "layer 2: heads 1, 3; layer 5: its only head"
    many = pl.DataFrame({"layer": list(range(9)), "head": [0] * 9})
    assert where_heads(many, {}, limit=2).endswith("layer 1: head 0; 7 more layers")


def _bos_residual_norm(model: str, dataset: str, norms: list[float]) -> pl.DataFrame:
    return pl.DataFrame(
        {"model": model, "dataset": dataset, "layer": range(len(norms)), "rel_bos_norm": norms}
    )


def test_a_failing_layer_is_matched_with_the_known_events_of_its_model() -> None:
    """The reason says whether the failing layer is where BOS's relative
    residual norm jumps (the largest rise over the previous layer) and where massive
    activations start; an event elsewhere is named as not a failing layer."""
    from sinkscope.claims.events import bos_norm_jumps, events_by_pair, massive_onsets

    planted = _layer_one_fails()
    # a rise x27.5 at layer 1 beats x1.5 at layer 2 (ratios, not differences: 27.5 -> 41)
    norms = _bos_residual_norm("m", "d", [1.0, 27.5, 41.0])
    assert bos_norm_jumps(norms) == {("m", "d"): (1, 1.0, 27.5)}
    onset = pl.DataFrame({"model": ["m", "m"], "dataset": ["d", "e"], "first_layer": [1, 1]})
    assert massive_onsets(onset) == {("m", "d"): 1, ("m", "e"): 1, ("m", "all"): 1}
    tables = {"geometry_bos_residual_norm": norms, "sinks_massive_onset": onset}
    (row,) = [
        r
        for r in OC.check_approximation_every_head(planted, 0.1, events_by_pair(tables))
        if r["dataset"] == "d"
    ]
    assert (
        "layer 1 is where BOS's relative residual norm jumps (x1 to x27.5 of the median "
        "token's) and where massive activations start" in row["reason"]
    )
    # a dataset without its own BOS norms takes the model's pooled ones, and says so
    pooled = {**tables, "geometry_bos_residual_norm": _bos_residual_norm("m", "all", [1.0, 27.5])}
    (row,) = [
        r
        for r in OC.check_approximation_every_head(planted, 0.1, events_by_pair(pooled))
        if r["dataset"] == "d"
    ]
    assert "(x1 to x27.5 of the median token's, pooled over datasets)" in row["reason"]
    # the same failures where both events are elsewhere
    tables = {
        "geometry_bos_residual_norm": _bos_residual_norm("m", "d", [1.0, 1.2, 30.0]),
        "sinks_massive_onset": onset.with_columns(first_layer=pl.lit(2)),
    }
    (row,) = [
        r
        for r in OC.check_approximation_every_head(planted, 0.1, events_by_pair(tables))
        if r["dataset"] == "d"
    ]
    assert "layer 1 is" not in row["reason"]
    assert (
        "BOS's relative residual norm jumps at layer 2 (x1.2 to x30 of the median token's) and "
        "massive activations start at layer 2, neither a failing layer" in row["reason"]
    )
    # no event tables: the reason stops at where the heads fail
    (row,) = [r for r in OC.check_approximation_every_head(planted, 0.1) if r["dataset"] == "d"]
    assert "massive" not in row["reason"] and "BOS's" not in row["reason"]


def _signs_summary(agree: float, n: int, base: float | None, m: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "model": ["m"], "dataset": ["d"], "context_length": [64], "n_predicted_s": [n],
            "agree_attn_s": [agree], "agree_unif_s": [agree], "agree_both_s": [agree],
            "n_unpredicted_s": [m], "base_agree_both_s": [base],
        },
        schema_overrides={"base_agree_both_s": pl.Float64},
    )  # fmt: skip


def test_predicted_signs_are_weighed_against_the_base_rate() -> None:
    """'Mostly holds' needs more than a majority: heads without a prediction set the base rate.
    90% agreement against a 90% base rate decides nothing; against 50% it is reproduced; below
    the base rate it is not; without unpredicted heads the majority test decides alone."""
    assert verdicts(OCC.check_predicted_signs(_signs_summary(0.9, 200, 0.5, 200), 0.5)) == [
        V.REPRODUCED
    ]
    (same,) = OCC.check_predicted_signs(_signs_summary(0.9, 200, 0.9, 200), 0.5)
    assert same["verdict"] == V.INCONCLUSIVE and "needs more heads" in same["reason"]
    assert verdicts(OCC.check_predicted_signs(_signs_summary(0.6, 200, 0.95, 200), 0.5)) == [
        V.NOT_REPRODUCED
    ]
    (alone,) = OCC.check_predicted_signs(_signs_summary(0.9, 200, None, 0), 0.5)
    assert alone["verdict"] == V.REPRODUCED and "no base rate" in alone["reason"]
    assert verdicts(OCC.check_predicted_signs(_signs_summary(0.3, 200, None, 0), 0.5)) == [
        V.NOT_REPRODUCED
    ]


def test_claim_sentences_state_the_runs_head_class_thresholds() -> None:
    """The heads claims' sentences quote the thresholds the run classified with (config
    head_classes), not the paper's fixed 40 % / 60 % / 10 %."""
    table = R.evaluate_claims({}, None, models=["m"], head_classes={"sink": 0.37, "diagonal": 0.5})
    sentences = dict(zip(table["claim_id"], table["claim"], strict=False))
    assert sentences["heads.sinks_common"].startswith("Sink heads (>= 37% of the attention mass")
    assert "(>= 50% of the mass on the main diagonal)" in sentences["heads.diagonals_exist_rarer"]
    default = R.evaluate_claims({}, None, models=["m"])
    assert "(>= 60% joint mass, >= 10% each)" in default["claim"].to_list()[3]
    assert not any("{" in sentence for sentence in default["claim"].to_list())


def test_a_pooled_condition_row_counts_each_head_once() -> None:
    """The pooled summary row reads each head once per dataset (n_heads 4 x 100): its Wilson
    interval is over the 100 heads, not the 400 readings, so it is as wide as one dataset's."""
    rows = [
        summary_row(dataset=d, n_heads=100, n_non_sink=100, n_cond_i_s_non_sink=30,
                    frac_cond_i_s_non_sink=0.3)
        for d in ("a", "b", "c", "d")
    ]  # fmt: skip
    pooled = summary_row(dataset="all", n_heads=400, n_non_sink=400, n_cond_i_s_non_sink=120,
                         frac_cond_i_s_non_sink=0.3)  # fmt: skip
    table = pl.concat([*rows, pooled], how="vertical_relaxed")
    found = {r["dataset"]: r for r in OCC.check_condition_i_about_half(table, 0.25)}
    assert (found["all"]["ci_low"], found["all"]["ci_high"]) == pytest.approx(
        wilson_interval(30, 100)
    )
    assert (found["a"]["ci_low"], found["a"]["ci_high"]) == pytest.approx(wilson_interval(30, 100))
    assert "each head counted once: 30 of 100" in found["all"]["reason"]


def test_the_prose_states_the_polarization_grid_as_the_code_makes_it() -> None:
    """config.yaml's comment, docs/configuration.md, docs/claims.md and the grid's docstring say
    how many value-softmax runs the default grid has and how many seeds the polarization
    shares rest on; a change to POLARIZATION_SEEDS or the grid must move them too."""
    from pathlib import Path

    from sinkscope.dynamics.grids import POLARIZATION_SEEDS, value_softmax_grid

    repo = Path(__file__).resolve().parents[2]
    runs, seeds = len(value_softmax_grid("default")), len(POLARIZATION_SEEDS)
    config = (repo / "config.yaml").read_text()
    assert f"({runs} runs of 1-4 s)" in config and f"its {seeds} seeds" in config
    guide = (repo / "docs" / "configuration.md").read_text()
    assert f"untied runs on {seeds} seeds" in guide and f"({runs} runs)" in guide
    assert f"the untied runs have {seeds} seeds" in (repo / "docs" / "claims.md").read_text()
    assert f"Default: {runs} jobs" in (value_softmax_grid.__doc__ or "")


def test_the_prose_states_the_induction_seeds_as_the_grid_makes_them() -> None:
    """README.md, docs/configuration.md, docs/claims.md and docs/analyses/dynamics.md say how
    many induction runs the sink claim's later seeds add to the full offline grid: counted here
    from the grid itself (runs past seed 0), so a change to INDUCTION_SINK_SEEDS moves them."""
    from pathlib import Path

    from sinkscope.dynamics.grids import INDUCTION_SINK_SEEDS, induction_grid

    repo = Path(__file__).resolve().parents[2]
    grid = induction_grid("default")
    added = sum(spec["seed"] != 0 for spec in grid)
    assert added == 12 * (len(INDUCTION_SINK_SEEDS) - 1)  # 6 compared variants x 2 weight decays
    for doc in (
        "README.md",
        "docs/configuration.md",
        "docs/claims.md",
        "docs/analyses/dynamics.md",
    ):
        text = " ".join((repo / doc).read_text().split())
        assert any(f in text for f in (f"{added} more runs", f"{added} runs", f"({added},")), doc
    # the docstring counts Table 1's runs with the later seeds, then the switches apart
    without_switch = sum("switch" not in spec for spec in grid)
    doc = " ".join((induction_grid.__doc__ or "").split())
    assert (
        f"({without_switch} jobs of 2-3 min" in doc
        and f"({len(grid) - without_switch} jobs)" in doc
    )


def test_an_interval_prints_in_the_units_of_its_row() -> None:
    """A share its row states in percent prints its ends in percent; an exact bound (level 1)
    reads "exact", never as a 100% interval; a range of runs has no level."""
    assert V.Interval(0.306, 0.486, "u", 0.95, percent=True).text() == "95% [30.6%, 48.6%], u"
    assert V.Interval(0.306, 0.486, "u", 0.95).text() == "95% [0.306, 0.486], u"
    assert V.Interval(0.996, 1.0, "u", 1.0).text() == "exact [0.996, 1], u"
    assert V.Interval(0.1, 0.2, "u", range_of_runs=True).text() == "[0.1, 0.2], u"
