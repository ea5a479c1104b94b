"""Geometry analyses: closed-form and planted checks, and one integration run per model family.

Every quantity of :mod:`sinkscope.geometry` is checked on inputs whose answer is known (cosines
of constructed vectors, point sets that do or do not lie in an open half-space, matrices of
planted rank, a planted value-output map with ``W_VO z_0 = 0``), and ``analyze_file`` is compared
with a direct recomputation from the arrays of a real extracted file.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sinkscope import geometry as geo
from sinkscope import geometry_plots as gplots
from sinkscope.geometry import (
    COSINE_BINS,
    HALFSPACE_TOL,
    RANK_RTOL,
    TABLE_COLUMNS,
    analyze_file,
    attending_tokens,
    bos_cosines,
    cosine_histogram,
    halfspace_margin,
    histogram_quantiles,
    pool_bos_alignment,
    rank_from_singular_values,
    relative_bos_norm,
    relative_rank,
    summarize,
    value_output_norms,
)
from sinkscope.h5layout import open_activations, read_values, read_Z
from sinkscope.heads import HeadClassThresholds, classify_file

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- cosines


def test_bos_cosines_on_constructed_vectors() -> None:
    e = np.eye(4)
    tokens = [3.0 * e[0], -0.5 * e[0], e[1], e[0] + e[1], np.zeros(4), e[0] - 2 * e[2]]
    z = np.stack([2.0 * e[0], *tokens])[None].astype(np.float16)
    cos = bos_cosines(z)
    expected = [1.0, -1.0, 0.0, 1 / math.sqrt(2), np.nan, 1 / math.sqrt(5)]
    assert cos.shape == (1, 6)
    np.testing.assert_allclose(cos[0], expected, atol=1e-3)  # float16 input
    assert np.isnan(cos[0, 4])
    # invariant to positive scaling of any token, computed per sequence
    z2 = np.concatenate([z, 7.0 * z]).astype(np.float32)
    np.testing.assert_allclose(bos_cosines(z2)[1], bos_cosines(z2)[0], atol=1e-6)


def test_histogram_bins_and_quantiles() -> None:
    counts = cosine_histogram(np.array([-1.0, 0.0, 1.0, np.nan, 2.0 / COSINE_BINS]))
    assert counts.sum() == 4 and counts[0] == 1 and counts[-1] == 1
    assert counts[COSINE_BINS // 2] == 1 and counts[COSINE_BINS // 2 + 1] == 1
    rng = np.random.default_rng(0)
    values = np.tanh(rng.normal(-0.2, 0.4, size=5000))
    quantiles = histogram_quantiles(
        cosine_histogram(values), [0.0, 0.25, 0.5, 0.75, 1.0], values.min(), values.max()
    )
    exact = np.quantile(values, [0.0, 0.25, 0.5, 0.75, 1.0])
    assert np.all(np.abs(quantiles - exact) <= 2.0 / COSINE_BINS)
    assert quantiles[0] == values.min() and quantiles[-1] == values.max()
    assert np.isnan(histogram_quantiles(np.zeros(COSINE_BINS, int), [0.5], 0, 0)).all()


def _pair_from_cosines(model: str, dataset: str, cos: np.ndarray) -> dict[str, pl.DataFrame]:
    row, counts = geo._cosine_rows("Z", 0, cos)
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
    q = np.quantile(raw, [0.25, 0.5, 0.75])
    for name, exact in zip(("q1", "median", "q3"), q, strict=True):
        assert abs(row[name] - exact) <= row["quantile_resolution"]
    # averaging per-dataset medians would be off by far more than the resolution here
    assert abs(np.mean([np.median(a), np.median(b)]) - q[1]) > 10 * row["quantile_resolution"]


# ----------------------------------------------------------------------------- half-spaces


def _cone(theta: float, dim: int, n_inner: int, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors at angle exactly ``theta`` from e_0 in four opposing directions, plus
    ``n_inner`` random points strictly inside the cone: the optimal margin is cos(theta)."""
    e = np.eye(dim)
    rim = [math.cos(theta) * e[0] + s * math.sin(theta) * e[k] for k in (1, 2) for s in (1, -1)]
    inner = []
    for _ in range(n_inner):
        u = rng.normal(size=dim)
        u[0] = 0.0
        u /= np.linalg.norm(u)
        angle = rng.uniform(0.0, 0.9 * theta)
        inner.append(rng.uniform(0.5, 3.0) * (math.cos(angle) * e[0] + math.sin(angle) * u))
    return np.array(rim + inner)


def test_halfspace_infeasible_with_opposite_vectors() -> None:
    v = np.array([1.0, 2.0, -0.5, 0.0])
    result = halfspace_margin(np.stack([v, np.ones(4), -3.0 * v]))
    assert result.halfspace is False and result.margin == 0.0
    assert result.margin_upper is not None and result.margin_upper < 1e-12
    assert not result.trivially_separable and result.rank == 2
    # origin in the hull of three vectors in a plane (n <= d but rank-deficient)
    e = np.eye(5)
    assert halfspace_margin(np.stack([e[0], e[1], -(e[0] + e[1])])).halfspace is False


@pytest.mark.parametrize(("theta", "dim", "n_inner"), [(0.3, 3, 60), (1.2, 3, 200), (1.0, 8, 5)])
def test_halfspace_cone_has_the_planted_margin(theta: float, dim: int, n_inner: int) -> None:
    points = _cone(theta, dim, n_inner, np.random.default_rng(2))
    result = halfspace_margin(points)
    assert result.halfspace is True
    assert result.margin == pytest.approx(math.cos(theta), abs=1e-10)
    assert result.margin_upper == pytest.approx(math.cos(theta), abs=1e-10)
    assert result.n_points == points.shape[0] and result.dim == dim
    # more points than dimensions: never trivially separable
    assert result.trivially_separable is (points.shape[0] <= dim)


def test_halfspace_more_points_than_dimensions_around_the_origin() -> None:
    rng = np.random.default_rng(3)
    result = halfspace_margin(rng.normal(size=(60, 4)))
    assert result.halfspace is False and result.margin == 0.0
    assert result.margin_upper < HALFSPACE_TOL
    # the same points shifted far along e_0 all lie in a half-space
    shifted = rng.normal(size=(60, 4)) + np.array([20.0, 0, 0, 0])
    assert halfspace_margin(shifted).halfspace is True


def test_halfspace_trivial_when_few_independent_points() -> None:
    rng = np.random.default_rng(4)
    points = rng.normal(size=(10, 30))
    result = halfspace_margin(points)
    assert result.rank == 10 and result.trivially_separable and result.halfspace
    assert 0 < result.margin <= result.margin_upper + 1e-12
    # a duplicated point leaves the answer unchanged but removes triviality
    dup = halfspace_margin(np.vstack([points, points[:1]]))
    assert dup.rank == 10 and not dup.trivially_separable and dup.halfspace
    assert dup.margin == pytest.approx(result.margin, abs=1e-10)


def test_halfspace_zero_vector_and_empty_set() -> None:
    zero = halfspace_margin(np.array([[1.0, 0.0], [0.0, 0.0]]))
    assert zero.halfspace is False and zero.margin == 0.0 and not zero.trivially_separable
    empty = halfspace_margin(np.zeros((0, 3)))
    assert empty.halfspace is None and empty.margin is None and empty.n_points == 0


def test_halfspace_margin_matches_a_dense_angle_scan_in_2d() -> None:
    rng = np.random.default_rng(5)
    angles = np.linspace(-np.pi, np.pi, 400_001)
    directions = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    for trial in range(12):
        centre = rng.uniform(-np.pi, np.pi)
        spread = rng.uniform(0.2, 2.0) if trial % 3 else rng.uniform(3.2, 6.0)
        phis = centre + rng.uniform(-spread / 2, spread / 2, size=rng.integers(2, 25))
        points = np.stack([np.cos(phis), np.sin(phis)], axis=1) * rng.uniform(
            0.1, 5, (phis.size, 1)
        )
        units = points / np.linalg.norm(points, axis=1, keepdims=True)
        scan = float((directions @ units.T).min(axis=1).max())
        result = halfspace_margin(points)
        # the scan's spacing is 1.6e-5 rad: its maximum is within 1e-5 of the true margin
        if abs(scan) > 2e-5:
            assert result.halfspace is (scan > 0)
        assert result.margin == pytest.approx(max(scan, 0.0), abs=2e-5)


def test_proposition_41_witness_from_both_conditions() -> None:
    """If both sets lie in half-spaces (witnesses u and v), W = u v^T realises the sink."""
    rng = np.random.default_rng(6)
    d = 6
    z0 = -4.0 * np.eye(d)[0]
    tokens = _cone(0.8, d, 30, rng)  # all tokens in a cone around e_0, BOS opposite
    diff = halfspace_margin(z0[None] - tokens)
    attend = halfspace_margin(tokens)
    assert diff.halfspace and attend.halfspace
    u = tokens.mean(axis=0)  # a witness for the cone
    v = (z0[None] - tokens).mean(axis=0)
    assert np.all(tokens @ u > 0) and np.all((z0[None] - tokens) @ v > 0)
    w = np.outer(u, v)
    scores_bos = tokens @ w @ z0
    scores = tokens @ w @ tokens.T
    assert np.all(scores_bos[:, None] > scores)
    # an attending token opposite to the others breaks the second condition
    broken = np.vstack([tokens, -tokens[:1]])
    assert halfspace_margin(broken).halfspace is False


def test_attending_tokens() -> None:
    att = np.array([[[0.5, 0.49, 0.1], [0.0, 0.2, 0.9]]])  # (N=1, S=2, T=3)
    np.testing.assert_array_equal(attending_tokens(att, 0.5), [[True, False, True]])
    np.testing.assert_array_equal(attending_tokens(att, 0.95), [[False, False, False]])
    assert attending_tokens(np.zeros((2, 0, 4))).shape == (2, 4)
    assert not attending_tokens(np.zeros((2, 0, 4))).any()


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


def test_relative_bos_norm_closed_form() -> None:
    norms = np.array([[10.0, 1.0, 2.0, 3.0], [0.0, 1.0, 1.0, 5.0], [1.0, 0.0, 0.0, 0.0]])
    rel = relative_bos_norm(norms)
    np.testing.assert_allclose(rel[:2], [5.0, 0.0])
    assert np.isnan(rel[2])


def test_middle_layers() -> None:
    assert geo.middle_layers(30) == list(range(8, 23))
    assert geo.middle_layers(18) == list(range(5, 14))
    assert geo.middle_layers(2) == [1]


# ----------------------------------------------------------------------------- integration


def _direct_values(handle, layer: int, head: int) -> np.ndarray:
    """W_O[h] (W_V[h] z + b_V[h]) for every sequence and position, from the stored factors."""
    z = read_Z(handle, layer, slice(None)).astype(np.float64)
    w_v = handle["weights/W_V"][layer, head].astype(np.float64)
    b_v = handle["weights/b_V"][layer, head].astype(np.float64)
    w_o = handle["weights/W_O"][layer, head].astype(np.float64)
    return (z @ w_v.T + b_v) @ w_o.T


def test_analyze_file_matches_direct_recomputation(extracted, tmp_path: Path) -> None:
    family, path, _, ids = extracted
    # every head counts as a sink so that J is non-empty in the tiny random models
    thresholds = HeadClassThresholds(sink=0.0)
    _, per_head = classify_file(path, thresholds)
    tables = analyze_file(path, per_head, thresholds, attend_threshold=0.15)
    assert set(tables) == set(TABLE_COLUMNS)
    for name, frame in tables.items():
        assert tuple(frame.columns) == TABLE_COLUMNS[name], name
        assert frame["model"].unique().to_list() == [family]
        assert frame["dataset"].unique().to_list() == ["random"]
        assert not {pl.Int32, pl.UInt32, pl.Float32} & set(frame.schema.values()), name

    with open_activations(path) as handle:
        n_layers, n_seq, t1, _ = handle["residual/X"].shape
        n_heads = handle["attention/probs"].shape[2]
        n_kv, hd = int(handle.attrs["n_kv_heads"]), int(handle.attrs["head_dim"])
        for layer in range(n_layers):
            z = read_Z(handle, layer, slice(None)).astype(np.float64)
            x = handle["residual/X"][layer].astype(np.float64)
            # cosines (Figure 1)
            for space, emb in (("Z", z), ("X", x)):
                cos = np.einsum("nd,ntd->nt", emb[:, 0], emb[:, 1:]) / (
                    np.linalg.norm(emb[:, :1], axis=-1) * np.linalg.norm(emb[:, 1:], axis=-1)
                )
                row = tables["bos_alignment"].filter(
                    (pl.col("space") == space) & (pl.col("layer") == layer)
                )
                assert row["n_values"][0] == cos.size
                assert row["min"][0] == pytest.approx(cos.min(), abs=1e-12)
                assert row["max"][0] == pytest.approx(cos.max(), abs=1e-12)
                assert row["median"][0] == pytest.approx(np.median(cos), abs=1e-12)
                assert row["frac_positive"][0] == pytest.approx((cos > 0).mean())
                assert row["max_excl_first"][0] == pytest.approx(cos[:, 1:].max(), abs=1e-12)
                hist = tables["bos_cosine_hist"].filter(
                    (pl.col("space") == space) & (pl.col("layer") == layer)
                )
                assert hist["count"].sum() == cos.size
            # Proposition 4.1 on every sequence, J from the BOS column of every (sink) head
            probs = handle["attention/probs"][layer]
            attend = (probs[:, :, 1:, 0] >= 0.15).any(axis=1)
            for seq in range(n_seq):
                sets = {
                    "bos_minus_token": z[seq, :1] - z[seq, 1:],
                    "attending": z[seq, 1:][attend[seq]],
                    "all_tokens": z[seq, 1:],
                }
                for name, points in sets.items():
                    expected = halfspace_margin(points)
                    row = (
                        tables["halfspace"]
                        .filter(
                            (pl.col("layer") == layer)
                            & (pl.col("sequence") == seq)
                            & (pl.col("point_set") == name)
                        )
                        .row(0, named=True)
                    )
                    assert row["n_points"] == points.shape[0]
                    assert row["n_sink_heads"] == n_heads
                    assert row["halfspace"] == expected.halfspace
                    assert row["rank"] == expected.rank
                    assert row["trivially_separable"] == expected.trivially_separable
                    if expected.margin is not None:
                        assert row["margin"] == pytest.approx(expected.margin, abs=1e-8)
            # value ranks (Appendix E.2)
            m = min(t1, hd)
            values = read_values(handle, layer, slice(None)).astype(np.float64)
            for seq in range(n_seq):
                for kv in range(n_kv):
                    s = np.linalg.svd(values[seq, kv, :m], compute_uv=False)
                    rank = int((s > RANK_RTOL * s[0]).sum())
                    got = tables["value_rank"].filter(
                        (pl.col("layer") == layer)
                        & (pl.col("kv_head") == kv)
                        & (pl.col("sequence") == seq)
                    )
                    assert got["rank"][0] == rank and got["m"][0] == m
                    assert got["rel_rank"][0] == pytest.approx(rank / min(m, hd))
            # BOS value-output norms (§6) from W_O (W_V z + b_V)
            for head in range(n_heads):
                vo = np.linalg.norm(_direct_values(handle, layer, head), axis=-1)
                ratio = vo[:, 0] / np.median(vo[:, 1:], axis=1)
                got = (
                    tables["bos_value_norm"]
                    .filter((pl.col("layer") == layer) & (pl.col("head") == head))
                    .row(0, named=True)
                )
                assert got["rel_bos_vo_norm"] == pytest.approx(ratio.mean(), rel=1e-4)
                assert got["rel_bos_vo_norm_min"] == pytest.approx(ratio.min(), rel=1e-4)
                assert got["bos_vo_norm"] == pytest.approx(vo[:, 0].mean(), rel=1e-4)
                assert got["is_sink"] is True
            # massive activations
            xn = np.linalg.norm(x, axis=-1)
            got = tables["bos_residual_norm"].filter(pl.col("layer") == layer)
            assert got["rel_bos_norm"][0] == pytest.approx(
                (xn[:, 0] / np.median(xn[:, 1:], axis=1)).mean(), rel=1e-10
            )
    attending = tables["halfspace"].filter(pl.col("point_set") == "attending")
    assert attending["n_points"].sum() > 0  # the J sets were exercised
    # worst sequences carry their first m token ids
    worst = tables["value_rank_worst"]
    assert 1 <= worst.height <= geo.N_WORST
    first = worst.row(0, named=True)
    m = min(t1, hd)
    assert first["token_ids"] == " ".join(map(str, ids[first["sequence"], :m].tolist()))
    assert first["n_repeated_tokens"] == m - np.unique(ids[first["sequence"], :m]).size

    # summaries over two "datasets" (the same file relabelled): exact pooling
    other = {name: frame.with_columns(dataset=pl.lit("copy")) for name, frame in tables.items()}
    summary = summarize([tables, other])
    pooled = summary["bos_alignment"].filter(pl.col("space") == "Z").sort("layer")
    single = tables["bos_alignment"].filter(pl.col("space") == "Z").sort("layer")
    assert (pooled["n_values"] == 2 * single["n_values"]).all()
    assert (pooled["max"] == single["max"]).all() and (pooled["min"] == single["min"]).all()
    assert (pooled["n_datasets"] == 2).all()
    half = summary["halfspace_layer"]
    assert (half["n_sequences"] == 2 * n_seq).all() and (half["dataset"] == "all").all()
    ranks = summary["value_rank"]
    assert set(ranks["dataset"].to_list()) == {"random", "copy", "all"}
    assert summary["statements"].height == 5

    # every figure renders from these tables
    out = tmp_path / "figs"
    gplots.plot_bos_alignment([tables["bos_alignment"]], out / "a.png", "alignment")
    gplots.plot_bos_alignment([summary["bos_alignment"]], out / "ax.png", "pooled", space="X")
    gplots.plot_halfspace_margins([tables["halfspace"], other["halfspace"]], out / "h.png", "h")
    gplots.plot_value_rank([tables["value_rank"], other["value_rank"]], out / "r.png", "rank")
    gplots.plot_bos_value_norm([tables["bos_value_norm"]], out / "v.png", "vo")
    gplots.plot_bos_residual_norm([summary["bos_residual_norm"]], out / "x.png", "x")
    for png in out.iterdir():
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000
    assert sorted(p.name for p in out.iterdir()) == [
        "a.png",
        "ax.png",
        "h.png",
        "r.png",
        "v.png",
        "x.png",
    ]


def test_analyze_file_rejects_a_foreign_head_table(extracted) -> None:
    _, path, _, _ = extracted
    _, per_head = classify_file(path)
    with pytest.raises(ValueError, match="per-head table"):
        analyze_file(path, per_head.head(3))
    with pytest.raises(ValueError, match="attend_threshold"):
        analyze_file(path, per_head, attend_threshold=1.5)
