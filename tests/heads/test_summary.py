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


def test_share_intervals_are_the_exact_resampling_distribution_of_two_sequences() -> None:
    """Two sequences: a resample draws both (1/4), one of each (1/2) or the other twice (1/4),
    so the shares take three values with known probabilities, and with 2,000 resamples the 95%
    percentile interval is their smallest and largest. Head 0 is a sink on both; head 1 has BOS
    mass 0.5 then 0.2, so it is a sink (>= 0.4) only when the first is drawn twice; it is
    diagonal (1 - mass >= 0.4) every time."""
    from sinkscope.heads.summary import share_intervals

    table = per_sequence_table("m", "d", [[1.0, 0.5], [1.0, 0.2]])
    (row,) = share_intervals([table], TH).filter(pl.col("dataset") == "d").iter_rows(named=True)
    assert (row["frac_sink_lo"], row["frac_sink_hi"]) == (0.5, 1.0)
    assert (row["frac_diagonal_lo"], row["frac_diagonal_hi"]) == (0.5, 0.5)
    assert (row["sink_minus_diagonal_lo"], row["sink_minus_diagonal_hi"]) == (0.0, 0.5)
    assert row["n_resamples"] == 2000 and row["level"] == 0.95
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
    heads.sinks_common. Head 1 is a sink on one sequence and not on the other, so the sink share
    is 1/2 or 1/4 by the resample and its interval straddles a floor between the two; a floor
    below it is reproduced. The masses table is the summary's (masses_by_sequence)."""
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
    # two sequences are below the floor of min_units: they decide nothing, wherever the interval
    few = share_intervals(masses, TH)
    (below,) = [r for r in check_sink_heads_common(summary, 0.2, few) if r["dataset"] == "d"]
    assert below["verdict"] == V.INCONCLUSIVE
    assert "a bootstrap over 2 sequences decides nothing" in below["reason"]
    intervals = share_intervals(masses, TH, {"min_units": 2})
    found = intervals.filter(pl.col("dataset") == "d").row(0, named=True)
    assert (found["frac_sink_lo"], found["frac_sink_hi"]) == (0.25, 0.5)
    assert (found["n_units"], found["min_units"]) == (2, 2)
    (straddling,) = [
        r for r in check_sink_heads_common(summary, 0.3, intervals) if r["dataset"] == "d"
    ]
    assert straddling["value"] == 0.5 and straddling["verdict"] == V.INCONCLUSIVE
    assert "needs more sequences" in straddling["reason"]
    assert "bootstrap over the 2 sequences" in straddling["interval"]
    (holds,) = [r for r in check_sink_heads_common(summary, 0.2, intervals) if r["dataset"] == "d"]
    assert holds["verdict"] == V.REPRODUCED
    (point,) = [r for r in check_sink_heads_common(summary, 0.3) if r["dataset"] == "d"]
    assert point["verdict"] == V.REPRODUCED and not point["interval"]


def test_the_pooled_floor_is_per_dataset() -> None:
    """A pooled row resamples each dataset's own sequences, so its floor of ``min_units`` is
    per dataset: two datasets of 3 sequences are 6 in all but 3 per stratum, under a floor of
    4, and decide nothing; with a floor of 3 the same row is decided. Every head is a sink on
    every sequence, so the interval lies wholly above the floor either way."""
    from sinkscope.claims import verdicts as V
    from sinkscope.claims.checks.heads import check_sink_heads_common
    from sinkscope.heads.summary import share_intervals

    bos = [[0.9, 0.9]] * 3
    tables = [per_sequence_table("m", d, bos) for d in ("d1", "d2")]
    heads = [per_head_table("m", d, 3, [0.9, 0.9]) for d in ("d1", "d2")]
    summary = summarize(heads, TH)
    for floor, verdict in ((4, V.INCONCLUSIVE), (3, V.REPRODUCED)):
        intervals = share_intervals(tables, TH, {"min_units": floor})
        pooled = intervals.filter(pl.col("dataset") == "all").row(0, named=True)
        assert pooled["n_units"] == 3
        (row,) = [
            r for r in check_sink_heads_common(summary, 0.2, intervals) if r["dataset"] == "all"
        ]
        assert row["verdict"] == verdict, row
        assert "stratified by dataset (at fewest 3 per dataset)" in row["interval"]
        if verdict == V.INCONCLUSIVE:
            assert "a bootstrap over 3 sequences per dataset decides nothing" in row["reason"]


def test_sink_ratio_intervals_resample_the_same_sequences_with_and_without_bos() -> None:
    """Two sequences, as above: head 0 is a sink on both, head 1 (BOS mass 0.5 then 0.2) only
    when the first is drawn twice (1/4). Without BOS the same two masses give the same share in
    every resample, so the paired ratio is 1 in all of them (two independent resamples would
    spread it from 0.5 to 2). With the masses swapped without BOS, the ratio is 0.5 (first
    sequence twice), 1 (one of each) or 2 (second twice), each tail 1/4: the interval is
    [0.5, 2]."""
    from sinkscope.heads.summary import sink_ratio_intervals

    with_bos = per_sequence_table("m", "d", [[1.0, 0.5], [1.0, 0.2]])
    same = per_sequence_table("m", "d.no-bos", [[1.0, 0.5], [1.0, 0.2]])
    (row,) = sink_ratio_intervals([with_bos, same], TH).iter_rows(named=True)
    assert (row["model"], row["dataset"], row["n_units"]) == ("m", "d.no-bos", 2)
    assert (row["ratio_lo"], row["ratio_hi"]) == (1.0, 1.0)
    swapped = per_sequence_table("m", "d.no-bos", [[1.0, 0.2], [1.0, 0.5]])
    (row,) = sink_ratio_intervals([with_bos, swapped], TH).iter_rows(named=True)
    assert (row["ratio_lo"], row["ratio_hi"]) == (0.5, 2.0)
    assert sink_ratio_intervals([with_bos, swapped], TH).equals(
        sink_ratio_intervals([with_bos, swapped], TH)
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


def test_sink_ratio_resamples_with_nothing_to_take_over_are_left_out() -> None:
    """A resample with no sink head with BOS and none without has no ratio (the point reading
    calls such a pair not applicable): it is left out, not counted as an infinite ratio. Here
    the first sequence twice (1/4) has a sink on both sides (ratio 1), the second twice (1/4)
    on neither, one of each (1/2) a sink without BOS only (inf): the ends are 1 and inf."""
    from sinkscope.heads.summary import sink_ratio_intervals

    with_bos = per_sequence_table("m", "d", [[0.5], [0.2]])
    without = per_sequence_table("m", "d.no-bos", [[0.9], [0.0]])
    (row,) = sink_ratio_intervals([with_bos, without], TH).iter_rows(named=True)
    assert row["ratio_lo"] == 1.0 and row["ratio_hi"] == np.inf
