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
