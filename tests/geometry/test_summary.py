"""Cross-pair summary (:mod:`sinkscope.geometry.summary`): pooling the cosine distributions over
datasets through their histograms is exact (quartiles within one bin width).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sinkscope.claims.tolerances import DEFAULT_TOLERANCES
from sinkscope.geometry.alignment import COSINE_SIGN_BOUND, cosine_rows
from sinkscope.geometry.summary import pool_bos_alignment


def _pair_from_cosines(model: str, dataset: str, cos: np.ndarray) -> dict[str, pl.DataFrame]:
    row, counts = cosine_rows("Z", 0, cos)
    nonzero = np.flatnonzero(counts)
    ids = {"model": model, "dataset": dataset}
    align = pl.DataFrame([{**ids, **row, "n_sequences": cos.shape[0], "context_length": 9}])
    hist = pl.DataFrame({**ids, "space": "Z", "layer": 0, "bin": nonzero, "count": counts[nonzero]})
    return {"bos_alignment": align, "bos_cosine_hist": hist}


def test_pooling_over_datasets_is_exact() -> None:
    rng = np.random.default_rng(1)
    a = np.clip(rng.normal(-0.3, 0.1, size=(20, 9)), -1, 1)
    b = np.clip(rng.normal(0.1, 0.3, size=(30, 9)), -1, 1)
    pooled = pool_bos_alignment([_pair_from_cosines("m", "a", a), _pair_from_cosines("m", "b", b)])
    row = pooled.row(0, named=True)
    raw = np.concatenate([a.ravel(), b.ravel()])
    assert row["dataset"] == "all" and row["n_datasets"] == 2 and row["n_sequences"] == 50
    assert row["n_values"] == raw.size
    assert row["min"] == raw.min() and row["max"] == raw.max()
    assert row["mean"] == pytest.approx(raw.mean(), abs=1e-12)
    assert row["n_positive"] == int((raw > 0).sum())
    assert row["frac_positive"] == pytest.approx((raw > 0).mean())
    assert row["max_below_zero"] == bool(raw.max() < 0)
    assert row["max_below_zero"] == (row["max"] < COSINE_SIGN_BOUND)
    q = np.quantile(raw, [0.25, 0.5, 0.75])
    for name, exact in zip(("q1", "median", "q3"), q, strict=True):
        assert abs(row[name] - exact) <= row["quantile_resolution"]
    # averaging per-dataset medians would be off by far more than the resolution here
    assert abs(np.mean([np.median(a), np.median(b)]) - q[1]) > 10 * row["quantile_resolution"]


def test_the_sign_bound_is_the_claims_default() -> None:
    """``max_below_zero`` states the sign; the claim's default tolerance is the same bound."""
    assert DEFAULT_TOLERANCES["geometry"]["bos_cosine_max"] == COSINE_SIGN_BOUND == 0.0


def test_weighted_median_is_the_median_of_the_repeated_values() -> None:
    """Brute force: each row of integer weights is the median of the values repeated that many
    times (np.median; even totals average the two middle values)."""
    from sinkscope.geometry.summary import weighted_median

    rng = np.random.default_rng(5)
    values = rng.choice([0.5, 0.75, 0.9, 1.0], size=13) + rng.normal(0, 1e-3, size=13)
    weights = rng.integers(0, 4, size=(200, 13))
    weights[:, 0] += 1  # no empty row
    expected = [np.median(np.repeat(values, w)) for w in weights]
    np.testing.assert_allclose(weighted_median(values, weights), expected, rtol=0, atol=0)
    ties = np.array([1.0, 1.0, 0.5, 0.5])  # unit weights: the mean of the two middle values
    assert weighted_median(ties, np.ones((1, 4)))[0] == 0.75


def test_lowest_median_draws_resample_sequences_within_each_dataset() -> None:
    """On the sample the statistic is the lowest middle-layer median of value_rank_stats (polars'
    median over kv heads and sequences); in the resamples each dataset's sequences are drawn on
    their own. Dataset d1 has full rank on every sequence, d2 half of its sequences at 0.5 in
    layer 1: the pooled median stays 1.0 on the sample (3 of 4 values are 1.0) and in every
    resample (d1's half is always there), while d2 alone swings from 0.5 to 1.0."""
    from sinkscope.geometry.summary import lowest_median_draws, value_rank_stats

    def table(dataset: str, low_sequences: int, n: int) -> pl.DataFrame:
        return pl.DataFrame(
            [
                {
                    "model": "m",
                    "dataset": dataset,
                    "layer": layer,
                    "kv_head": head,
                    "sequence": s,
                    "m": 8,
                    "rel_rank": 0.5 if layer == 1 and s < low_sequences else 1.0,
                }
                for layer in range(3)
                for head in range(2)
                for s in range(n)
            ]
        )

    d1, d2 = table("d1", 0, 20), table("d2", 5, 10)
    stats = value_rank_stats(pl.concat([d1, d2]))
    rng = np.random.default_rng(0)
    sample, draws = lowest_median_draws([d1, d2], [0, 1, 2], 500, rng)
    pooled = stats.filter(pl.col("dataset") == "all")["median"].min()
    assert sample == pooled == 1.0 and set(draws) == {1.0}
    sample, draws = lowest_median_draws([d2], [0, 1, 2], 500, rng)
    assert sample == stats.filter(pl.col("dataset") == "d2")["median"].min() == 0.75
    assert draws.min() == 0.5 and draws.max() == 1.0
