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
