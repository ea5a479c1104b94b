"""Head pattern summary: pooling over datasets weighted by sequences, percentages, statements."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sinkscope.heads.classify import HeadClassThresholds
from sinkscope.heads.names import PER_HEAD_COLUMNS, SUMMARY_COLUMNS
from sinkscope.heads.summary import pool_datasets, summarize

TH = HeadClassThresholds()


def per_head_table(model: str, dataset: str, n_seq: int, bos: list[float]) -> pl.DataFrame:
    """A per-head table with one layer; heads' diagonal mass is 1 - bos."""
    frame = pl.DataFrame(
        {
            "model": model,
            "dataset": dataset,
            "layer": 0,
            "head": list(range(len(bos))),
            "n_sequences": n_seq,
            "bos_mass": bos,
            "bos_mass_std": 0.0,
            "diagonal_mass": [1.0 - b for b in bos],
            "subdiagonal_mass": 0.0,
            "sink_prev_mass": bos,
            "is_sink": False,  # deliberately stale: summarize recomputes
            "is_diagonal": False,
            "is_sink_prev": False,
            "head_class": "other",
        }
    )
    return frame.with_columns(pl.col("layer", "head", "n_sequences").cast(pl.Int64))


def test_pool_and_summarize() -> None:
    tables = [
        per_head_table("m1", "d1", 10, [1.0, 0.0, 0.3, 0.3]),
        per_head_table("m1", "d2", 30, [1.0, 0.0, 0.5, 0.2]),
        per_head_table("m2", "d1", 5, [0.45, 0.1]),
    ]
    pooled = pool_datasets(pl.concat(tables), TH)
    assert pooled.columns == list(PER_HEAD_COLUMNS)
    m1 = pooled.filter(pl.col("model") == "m1").sort("head")
    # weighted by sequences: (10*0.3 + 30*0.5)/40 = 0.45 and (10*0.3 + 30*0.2)/40 = 0.225
    np.testing.assert_allclose(m1["bos_mass"], [1.0, 0.0, 0.45, 0.225], atol=1e-12)
    pooled_std = [
        np.sqrt((10 * a**2 + 30 * b**2) / 40 - ((10 * a + 30 * b) / 40) ** 2)
        for a, b in [(1.0, 1.0), (0.0, 0.0), (0.3, 0.5), (0.3, 0.2)]
    ]
    np.testing.assert_allclose(m1["bos_mass_std"], pooled_std, atol=1e-9)
    assert m1["n_sequences"].to_list() == [40] * 4
    assert m1["head_class"].to_list() == ["sink", "diagonal", "diagonal", "diagonal"]

    summary = summarize(tables, TH)
    assert summary.columns == list(SUMMARY_COLUMNS)
    assert summary.select("model", "dataset").rows() == [
        ("m1", "d1"),
        ("m1", "d2"),
        ("m1", "all"),
        ("m2", "d1"),
        ("m2", "all"),
    ]
    rows = {(r["model"], r["dataset"]): r for r in summary.iter_rows(named=True)}
    assert rows[("m1", "d1")]["frac_sink"] == 0.25
    assert rows[("m1", "d1")]["frac_diagonal"] == 0.75  # diagonal masses 0, 1, 0.7, 0.7
    assert rows[("m1", "d2")]["frac_sink"] == 0.5
    assert rows[("m1", "all")]["frac_sink"] == 0.5  # pooled head 2: bos 0.45
    assert rows[("m1", "all")]["n_datasets"] == 2 and rows[("m1", "all")]["n_sequences"] == 40
    assert rows[("m1", "all")]["n_heads"] == 4
    assert rows[("m2", "all")]["frac_sink"] == 0.5
    assert rows[("m2", "all")]["frac_other"] == 0.0
    assert (
        "50.0% of heads of m1 put >= 40% of their attention mass on BOS"
        in (rows[("m1", "all")]["statement"])
    )
    assert "pooled over 2 datasets" in rows[("m1", "all")]["statement"]
    assert "on d2" in rows[("m1", "d2")]["statement"]

    strict = summarize(tables, HeadClassThresholds(sink=1.0))
    assert strict.filter(pl.col("dataset") == "all")["frac_sink"].to_list() == [0.25, 0.0]

    with pytest.raises(ValueError, match="reserved"):
        summarize([per_head_table("m", "all", 1, [0.5])])
    with pytest.raises(ValueError, match="duplicate"):
        summarize([tables[0], tables[0]])


def per_sequence_table(model: str, dataset: str, bos: list[list[float]]) -> pl.DataFrame:
    """A per-sequence table with one layer: ``bos[s][h]`` is head h's BOS mass on sequence s,
    its diagonal mass ``1 - bos``."""
    rows = [
        {
            "model": model,
            "dataset": dataset,
            "layer": 0,
            "head": h,
            "sequence": s,
            "bos_mass": b,
            "diagonal_mass": 1.0 - b,
            "subdiagonal_mass": 0.0,
        }
        for s, masses in enumerate(bos)
        for h, b in enumerate(masses)
    ]
    return pl.DataFrame(rows)


def _bonferroni_half_width(values: np.ndarray, family: int, level: float = 0.95) -> np.ndarray:
    """By hand: each head's t-interval half-width ``t s / sqrt(n)`` at the Bonferroni level
    ``1 - (1 - level) / family``, Student's quantile found by Simpson's rule on the density
    (independent of the project's series and of the bootstrap)."""
    from tests.claims.test_intervals import _t_within

    n = values.shape[0]
    target, low, high = 1.0 - (1.0 - level) / family, 0.0, 1000.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _t_within(middle, n - 1) < target else (low, middle)
    return high * values.std(axis=0, ddof=1) / np.sqrt(n)


def test_share_intervals_are_shares_of_simultaneous_head_intervals() -> None:
    """Six sequences, four heads: head 0 sinks on every one (BOS mass about 0.9), heads 1 and 3
    never (0.1, 0.3), head 2 hovers about the threshold 0.4 (0.25 to 0.6). By hand, each head's
    BOS-mass interval at the Bonferroni level over the 3 x 4 masses: head 2's reaches both sides
    of 0.4, the others lie on one side by many half-widths (far beyond the resamples' noise), so
    the sink share lies in [1/4, 2/4]. No head is diagonal (its mass is 1 - BOS, under 0.4 only
    for heads 0 and 2, the interval of the gap follows)."""
    from sinkscope.heads.summary import share_intervals

    bos = np.array(
        [[0.90, 0.10, 0.25, 0.30], [0.91, 0.11, 0.60, 0.31], [0.89, 0.09, 0.35, 0.29],
         [0.90, 0.10, 0.55, 0.30], [0.92, 0.12, 0.30, 0.31], [0.88, 0.08, 0.50, 0.29]]
    )  # fmt: skip
    table = per_sequence_table("m", "d", bos.tolist()).with_columns(diagonal_mass=pl.lit(0.0))
    half = _bonferroni_half_width(bos, family=12)
    low, high = bos.mean(axis=0) - half, bos.mean(axis=0) + half
    assert low[2] < TH.sink < high[2]
    assert high[1] < TH.sink and high[3] < TH.sink and low[0] > TH.sink
    (row,) = share_intervals([table], TH).filter(pl.col("dataset") == "d").iter_rows(named=True)
    assert (row["frac_sink_lo"], row["frac_sink_hi"]) == (0.25, 0.5)
    assert (row["frac_diagonal_lo"], row["frac_diagonal_hi"]) == (0.0, 0.0)
    assert (row["sink_minus_diagonal_lo"], row["sink_minus_diagonal_hi"]) == (0.25, 0.5)
    assert (row["n_units"], row["dof"], row["n_resamples"], row["level"]) == (6, 5, 2000, 0.95)
    assert share_intervals([table], TH).equals(share_intervals([table], TH))  # seeded


def test_pooled_share_intervals_resample_within_each_dataset() -> None:
    """Two datasets whose sequences are each identical: within a dataset nothing varies, so the
    pooled interval is a point (the mean over all four sequences: head 1 at 0.35, not a sink).
    Resampling the four pooled sequences as one sample would draw d1's twice and reach 1.0."""
    from sinkscope.heads.summary import share_intervals

    d1 = per_sequence_table("m", "d1", [[1.0, 0.5], [1.0, 0.5]])
    d2 = per_sequence_table("m", "d2", [[1.0, 0.2], [1.0, 0.2]])
    found = share_intervals([d1, d2], TH)
    pooled = found.filter(pl.col("dataset") == "all").row(0, named=True)
    assert (pooled["frac_sink_lo"], pooled["frac_sink_hi"]) == (0.5, 0.5)
    d1_row = found.filter(pl.col("dataset") == "d1").row(0, named=True)
    assert (d1_row["frac_sink_lo"], d1_row["frac_sink_hi"]) == (1.0, 1.0)


def test_the_claim_is_decided_on_the_intervals_of_the_shares() -> None:
    """End to end: the summary's shares and the per-sequence masses' intervals decide
    heads.sinks_common. Head 1 is a sink on one sequence and not on the other, so on two
    sequences its interval reaches both sides of the threshold and the sink share lies in
    [1/4, 1/2]: a floor between the two straddles, a floor below is reproduced (two sequences
    decide wherever every other head agrees: no floor on the units). The masses table is the
    summary's (masses_by_sequence)."""
    from sinkscope.claims import verdicts as V
    from sinkscope.claims.checks.heads import check_sink_heads_common
    from sinkscope.heads.names import SEQUENCE_MASS_COLUMNS
    from sinkscope.heads.summary import masses_by_sequence, share_intervals

    bos = [[0.9, 0.9, 0.1, 0.1], [0.9, 0.3, 0.1, 0.1]]
    # no diagonal heads: the sink share decides
    per_sequence = per_sequence_table("m", "d", bos).with_columns(diagonal_mass=pl.lit(0.0))
    mean = [sum(col) / 2 for col in zip(*bos, strict=True)]
    per_head = per_head_table("m", "d", 2, mean).with_columns(diagonal_mass=pl.lit(0.0))
    summary = summarize([per_head], TH)
    masses = masses_by_sequence([per_sequence])
    assert masses.columns == list(SEQUENCE_MASS_COLUMNS)
    intervals = share_intervals(masses, TH)
    found = intervals.filter(pl.col("dataset") == "d").row(0, named=True)
    assert (found["frac_sink_lo"], found["frac_sink_hi"]) == (0.25, 0.5)
    (straddling,) = [
        r for r in check_sink_heads_common(summary, 0.3, intervals) if r["dataset"] == "d"
    ]
    assert straddling["value"] == 0.5 and straddling["verdict"] == V.INCONCLUSIVE
    assert "the interval straddles 0.3: needs more sequences" in straddling["reason"]
    assert "t (1 df), bootstrap SE over the 2 sequences" in straddling["interval"]
    (holds,) = [r for r in check_sink_heads_common(summary, 0.2, intervals) if r["dataset"] == "d"]
    assert holds["verdict"] == V.REPRODUCED
    (point,) = [r for r in check_sink_heads_common(summary, 0.3) if r["dataset"] == "d"]
    assert point["verdict"] == V.REPRODUCED and not point["interval"]


def test_a_pooled_row_counts_the_degrees_of_freedom_of_every_dataset() -> None:
    """A pooled row resamples each dataset's own sequences: two datasets of 3 sequences give a
    t with 2 + 2 degrees of freedom. Every head is a sink on every sequence, so the interval is
    the point 1 and the row is decided on 3 sequences per dataset."""
    from sinkscope.claims import verdicts as V
    from sinkscope.claims.checks.heads import check_sink_heads_common
    from sinkscope.heads.summary import share_intervals

    bos = [[0.9, 0.9]] * 3
    tables = [per_sequence_table("m", d, bos) for d in ("d1", "d2")]
    heads = [per_head_table("m", d, 3, [0.9, 0.9]) for d in ("d1", "d2")]
    summary = summarize(heads, TH)
    intervals = share_intervals(tables, TH)
    pooled = intervals.filter(pl.col("dataset") == "all").row(0, named=True)
    assert (pooled["n_units"], pooled["dof"]) == (3, 4)
    (row,) = [r for r in check_sink_heads_common(summary, 0.2, intervals) if r["dataset"] == "all"]
    assert row["verdict"] == V.REPRODUCED, row
    assert "t (4 df)" in row["interval"]
    assert "stratified by dataset (at fewest 3 per dataset)" in row["interval"]


def test_sink_ratio_intervals_bound_the_ratio_by_the_heads_intervals() -> None:
    """Two sequences, as above: head 0 is a sink on both, head 1 (BOS mass 0.5 then 0.2) on one;
    with and without BOS alike. Head 1's interval on two sequences reaches both sides of the
    threshold, so each share lies in [1/2, 1] and the ratio in [1/2 / 1, 1 / 1/2] = [0.5, 2].
    With a third sequence that makes head 1 a sink nowhere near the threshold on either side,
    the ratio is the point 1."""
    from sinkscope.heads.summary import sink_ratio_intervals

    with_bos = per_sequence_table("m", "d", [[1.0, 0.5], [1.0, 0.2]])
    same = per_sequence_table("m", "d.no-bos", [[1.0, 0.5], [1.0, 0.2]])
    (row,) = sink_ratio_intervals([with_bos, same], TH).iter_rows(named=True)
    assert (row["model"], row["dataset"], row["n_units"]) == ("m", "d.no-bos", 2)
    assert (row["ratio_lo"], row["ratio_hi"]) == (0.5, 2.0)
    steady = [[1.0, 0.05], [1.0, 0.06], [1.0, 0.05]]
    (row,) = sink_ratio_intervals(
        [per_sequence_table("m", "d", steady), per_sequence_table("m", "d.no-bos", steady)], TH
    ).iter_rows(named=True)
    assert (row["ratio_lo"], row["ratio_hi"]) == (1.0, 1.0)
    assert sink_ratio_intervals([with_bos, same], TH).equals(
        sink_ratio_intervals([with_bos, same], TH)
    )  # seeded


def test_sink_ratio_without_a_sink_at_bos_is_unbounded_and_pairs_must_match() -> None:
    """A resample whose BOS pair has no sink head has no finite ratio: 3 resamples in 4 here
    (head 0 is a sink at BOS only when the first sequence is drawn twice), so the upper end is
    infinite and the lower end is that one resample's ratio, 1. A no-BOS pair with other
    sequences than its BOS pair is refused, naming both counts."""
    from sinkscope.heads.summary import sink_ratio_intervals

    with_bos = per_sequence_table("m", "d", [[0.5], [0.2]])
    without = per_sequence_table("m", "d.no-bos", [[1.0], [1.0]])
    (row,) = sink_ratio_intervals([with_bos, without], TH).iter_rows(named=True)
    assert row["ratio_lo"] == 1.0 and row["ratio_hi"] == np.inf
    assert sink_ratio_intervals([with_bos], TH).height == 0  # no no-BOS pair: no row
    three = per_sequence_table("m", "d.no-bos", [[1.0], [1.0], [1.0]])
    with pytest.raises(ValueError, match="3 sequences without BOS against 2"):
        sink_ratio_intervals([with_bos, three], TH)


def test_sink_ratio_with_no_certain_sink_on_either_side_spans_everything() -> None:
    """A head that is possibly but not certainly a sink with and without BOS: the ratio may be 0
    (no sink without BOS) or unbounded (none with it): [0, inf], which decides nothing."""
    from sinkscope.heads.summary import sink_ratio_intervals

    with_bos = per_sequence_table("m", "d", [[0.5], [0.2]])
    without = per_sequence_table("m", "d.no-bos", [[0.9], [0.0]])
    (row,) = sink_ratio_intervals([with_bos, without], TH).iter_rows(named=True)
    assert row["ratio_lo"] == 0.0 and row["ratio_hi"] == np.inf
