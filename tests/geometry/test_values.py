"""Value ranks and value-output norms (:mod:`sinkscope.geometry.values`): matrices of planted rank
and a planted value-output map with ``W_VO z_0 = 0``.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from sinkscope.geometry.alignment import relative_bos_norm
from sinkscope.geometry.halfspace_solver import rank_from_singular_values
from sinkscope.geometry.values import (
    RANK_RTOL,
    relative_rank,
    value_output_factor,
    value_output_norms,
    vo_classes,
)
from sinkscope.labels import DIAGONAL, OTHER, SINK, SINK_PREV

# ----------------------------------------------------------------------------- ranks


def _planted(m: int, n: int, sigma: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(m, m)))
    v, _ = np.linalg.qr(rng.normal(size=(n, n)))
    s = np.zeros((m, n))
    s[np.arange(sigma.size), np.arange(sigma.size)] = sigma
    return u @ s @ v.T


@pytest.mark.parametrize(("m", "n", "rank"), [(16, 16, 16), (16, 16, 5), (10, 24, 7), (30, 8, 8)])
def test_relative_rank_of_planted_matrices(m: int, n: int, rank: int) -> None:
    sigma = np.concatenate([np.geomspace(10.0, 0.1, rank), np.zeros(min(m, n) - rank)])
    mats = np.stack([_planted(m, n, sigma, seed) for seed in range(3)])
    got_rank, rel, ratio = relative_rank(mats)
    np.testing.assert_array_equal(got_rank, rank)
    np.testing.assert_allclose(rel, rank / min(m, n))
    expected_ratio = 0.01 if rank == min(m, n) else 0.0
    np.testing.assert_allclose(ratio, expected_ratio, atol=1e-12)


def test_rank_tolerance_edge() -> None:
    # exactly at the tolerance: not counted (strictly greater is required)
    assert rank_from_singular_values(np.array([1.0, RANK_RTOL, 0.5]), RANK_RTOL) == 2
    assert rank_from_singular_values(np.array([2.0, 2.0 * RANK_RTOL]), RANK_RTOL) == 1
    assert rank_from_singular_values(np.zeros(4), RANK_RTOL) == 0
    # just above / just below, through an SVD of a rotated matrix
    for factor, expected in ((1.0 + 1e-6, 3), (1.0 - 1e-6, 2)):
        sigma = np.array([1.0, 0.3, RANK_RTOL * factor, 0.0])
        rank, rel, _ = relative_rank(_planted(6, 4, sigma, 7))
        assert rank == expected and rel == expected / 4
    # a diagonal matrix has exact singular values: exactly at the tolerance is excluded
    rank, _, _ = relative_rank(np.diag([1.0, RANK_RTOL, 0.25]))
    assert rank == 2
    assert relative_rank(np.zeros((3, 3)))[0] == 0


# ----------------------------------------------------------------------------- norms


def test_value_output_norms_with_planted_switch() -> None:
    rng = np.random.default_rng(8)
    n_seq, n_kv, n_heads, t1, hd, d = 3, 2, 4, 7, 5, 9
    values = rng.normal(size=(n_seq, n_kv, t1, hd))
    values[:, 0, 0] = 0.0  # kv head 0 (query heads 0, 1): W_V z_0 + b_V = 0 -> W_VO z_0 = 0
    w_o = rng.normal(size=(n_heads, d, hd))
    value_norms, vo_norms = value_output_norms(values, w_o)
    for h in range(n_heads):
        direct = np.linalg.norm(values[:, h // 2] @ w_o[h].T, axis=-1)
        np.testing.assert_allclose(vo_norms[:, h], direct, rtol=1e-12)
        np.testing.assert_allclose(value_norms[:, h], np.linalg.norm(values[:, h // 2], axis=-1))
    rel = relative_bos_norm(vo_norms)
    assert rel.shape == (n_seq, n_heads)
    np.testing.assert_array_equal(rel[:, :2], 0.0)
    assert np.all(rel[:, 2:] > 0)
    # an output map with orthonormal columns scaled by 2 doubles every norm
    q, _ = np.linalg.qr(rng.normal(size=(d, hd)))
    _, doubled = value_output_norms(values[:, :1], 2.0 * q[None])
    np.testing.assert_allclose(doubled[:, 0], 2.0 * np.linalg.norm(values[:, 0], axis=-1))


def test_value_output_norms_need_only_the_shape_of_w_o_with_a_factor() -> None:
    """With the factors ``R_h`` given, ``W_O`` is not read (no float64 copy of it per block):
    the norms equal those computed from ``W_O`` itself."""
    rng = np.random.default_rng(9)
    for d, hd in ((40, 6), (4, 6)):
        w_o = rng.normal(size=(4, d, hd)).astype(np.float32)
        values = rng.normal(size=(2, 2, 3, hd))
        factor = value_output_factor(w_o)
        assert factor.shape == (4, min(d, hd), hd)
        with_factor = value_output_norms(values, w_o, factor)
        without = value_output_norms(values, w_o)
        assert all(np.array_equal(a, b) for a, b in zip(with_factor, without))
        with pytest.raises(ValueError, match="incompatible"):
            value_output_norms(values, w_o[:3], factor)


def test_relative_bos_norm_closed_form() -> None:
    norms = np.array([[10.0, 1.0, 2.0, 3.0], [0.0, 1.0, 1.0, 5.0], [1.0, 0.0, 0.0, 0.0]])
    rel = relative_bos_norm(norms)
    np.testing.assert_allclose(rel[:2], [5.0, 0.0])
    assert np.isnan(rel[2])


def test_vo_class_groups_are_the_class_map_legend_names() -> None:
    """The exclusive head classes are named as in the class map's legend (the "sink" class is
    "sink (not sink+previous)"); only the is_sink / not_sink groups are the flag's."""
    labels = [SINK, SINK_PREV, DIAGONAL, OTHER]
    frame = pl.DataFrame(
        {
            "model": ["m"] * 4,
            "dataset": ["d"] * 4,
            "layer": [0] * 4,
            "head": [0, 1, 2, 3],
            "rel_bos_vo_norm": [0.1, 0.2, 1.0, 1.2],
            "rel_bos_value_norm": [0.3, 0.4, 1.0, 1.1],
            "bos_mass": [0.9, 0.5, 0.1, 0.0],
            "is_sink": [True, True, False, False],
            "head_class": labels,
        }
    )
    table = vo_classes(frame).filter(pl.col("dataset") == "d")
    by_group = dict(zip(table["group"], table["n_heads"], strict=True))
    assert by_group == {
        "sink (not sink+previous)": 1,
        "sink+previous": 1,
        "diagonal": 1,
        "other (no pattern)": 1,
        "is_sink": 2,
        "not_sink": 2,
    }


def test_spearman_and_average_ranks_against_known_values() -> None:
    from sinkscope.geometry.values import average_ranks, spearman

    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert spearman(x, x**3) == pytest.approx(1.0)
    assert spearman(x, -x) == pytest.approx(-1.0)
    # by the textbook formula: rank differences d = (0, -1, 1, -1, 1), rho = 1 - 6 sum d^2 / (n (n^2 - 1))
    y = np.array([1.0, 3.0, 2.0, 5.0, 4.0])
    assert spearman(x, y) == pytest.approx(1 - 6 * (0 + 1 + 1 + 1 + 1) / (5 * 24))
    assert math.isnan(spearman(x, np.ones(5)))


def test_bos_mass_relation_finds_a_planted_graded_relation() -> None:
    """Planted heads whose relative BOS value norm falls with their BOS mass (plus noise): a
    negative Spearman with an interval below 0 and a high / low median ratio well below 1; with
    no monotone relation (Spearman exactly 0), the interval covers 0."""
    from sinkscope.geometry.values import HIGH_BOS_MASS, LOW_BOS_MASS, bos_mass_relation

    rng = np.random.default_rng(3)
    n_layers, n_heads = 12, 8
    mass = rng.uniform(0, 1, size=n_layers * n_heads)
    rows = {
        "model": "m", "dataset": "d",
        "layer": np.repeat(np.arange(n_layers), n_heads), "head": np.tile(np.arange(n_heads), n_layers),
        "bos_mass": mass,
    }  # fmt: skip
    graded = pl.DataFrame({**rows, "rel_bos_vo_norm": 1.5 - mass + 0.1 * rng.random(mass.size)})
    (r,) = bos_mass_relation(graded, with_pooled=False, n_boot=300).iter_rows(named=True)
    assert r["spearman"] < -0.9 and r["spearman_hi"] < 0 and r["spearman_lo"] <= r["spearman"]
    high, low = mass >= HIGH_BOS_MASS, mass < LOW_BOS_MASS
    norm = graded["rel_bos_vo_norm"].to_numpy()
    assert r["ratio_high_low"] == pytest.approx(np.median(norm[high]) / np.median(norm[low]))
    assert r["ratio_high_low_hi"] < 0.6 and (r["n_high"], r["n_low"]) == (high.sum(), low.sum())
    # the ratio's units: one dataset, so every head instance is its own head
    assert (r["n_high_heads"], r["n_low_heads"]) == (high.sum(), low.sum())
    # the same heads on a second dataset: twice the instances, the same distinct heads
    twice = pl.concat([graded, graded.with_columns(dataset=pl.lit("e"))])
    (p,) = (
        bos_mass_relation(twice, n_boot=0).filter(pl.col("dataset") == "all").iter_rows(named=True)
    )
    assert (p["n_high"], p["n_low"]) == (2 * high.sum(), 2 * low.sum())
    assert (p["n_high_heads"], p["n_low_heads"]) == (high.sum(), low.sum())
    # no monotone relation: a norm symmetric about the middle BOS mass has Spearman exactly 0
    steps = np.arange(mass.size, dtype=np.float64)  # exact ties: norm(i) == norm(n - 1 - i)
    flat = graded.with_columns(
        bos_mass=pl.Series(steps / steps[-1]),
        rel_bos_vo_norm=pl.Series((steps - steps[-1] / 2) ** 2 + 1.0),
    )
    (f,) = bos_mass_relation(flat, with_pooled=False, n_boot=300).iter_rows(named=True)
    assert f["spearman"] == pytest.approx(0.0, abs=1e-12)
    assert f["spearman_lo"] < 0 < f["spearman_hi"]


def test_the_value_norm_bootstraps_follow_claims_intervals() -> None:
    """The bootstraps over heads of ``bos_value_norm_classes`` (which decide the claim
    ``geometry.sink_bos_value_small``) take ``claims.intervals``' level, resamples and seed, like
    every other interval of the claims: at level 0.5 the Spearman interval lies inside the 0.95
    one, and the table says which level it was built at."""

    rng = np.random.default_rng(0)
    mass = rng.uniform(0, 1, size=40)
    frame = pl.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "layer": np.repeat(np.arange(8), 5),
            "head": np.tile(np.arange(5), 8),
            "rel_bos_vo_norm": 1.5 - mass + rng.normal(0, 0.3, size=40),
            "rel_bos_value_norm": 1.0,
            "bos_mass": mass,
            "is_sink": mass >= 0.4,
            "head_class": [SINK if m >= 0.4 else OTHER for m in mass],
        }
    )

    def sink_row(intervals: dict | None) -> dict:
        table = vo_classes(frame, intervals)
        return table.filter((pl.col("dataset") == "d") & (pl.col("group") == "is_sink")).row(
            0, named=True
        )

    wide, narrow = sink_row(None), sink_row({"level": 0.5})
    assert wide["level"] == 0.95 and narrow["level"] == 0.5
    assert wide["spearman"] == narrow["spearman"] < 0
    assert (
        wide["spearman_lo"] < narrow["spearman_lo"] <= narrow["spearman_hi"] < wide["spearman_hi"]
    )
