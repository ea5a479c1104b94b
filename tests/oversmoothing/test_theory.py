"""Oversmoothing theory (paper §3, §5, Theorem 5.1, eq. 12): closed forms and moment estimators.

Independent checks:
* ``u`` (eq. 12) and ``rho`` (§3) on matrices with known values;
* Theorem 5.1's expectations (eq. 2) against Monte Carlo sampling of ``Z_i = zbar + eps_i`` with
  chosen ``Sigma_V, Sigma_C``; the moment estimators against the same samples; the factored
  traces against explicit ``D x D`` products; the monotonicity claims (i)/(ii) on ``rho_hat``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sinkscope.oversmoothing.analysis import LAMBDA_GRID
from sinkscope.oversmoothing.moments import TokenMoments, estimate_moments
from sinkscope.oversmoothing.theory import (
    average_cosine_similarity,
    closed_form_coefficients,
    condition_labels,
    distinct_maps,
    rho_hat,
    row_uniformity,
    theorem_gram,
    trace_terms,
    uniform_causal,
    uniformity,
)

# --------------------------------------------------------------------------- u and rho


def test_uniformity_of_identity_and_uniform_attention() -> None:
    n = 7
    identity = np.eye(n)
    uniform = uniform_causal(n)
    np.testing.assert_allclose(uniform.sum(1), 1.0)
    assert uniformity(identity, include_first_row=False) == 0.0
    assert uniformity(uniform, include_first_row=False) == pytest.approx(1.0, abs=1e-14)
    # eq. (12) literally: the single-entry first row counts as 1
    assert uniformity(uniform) == pytest.approx(1.0, abs=1e-14)
    assert uniformity(identity) == pytest.approx(1.0 / n, abs=1e-15)
    # a half sink, half diagonal row has normalised entropy log 2 / log i
    mixed = 0.5 * (np.eye(n) + np.eye(n)[[0] * n])
    mixed[0, 0] = 1.0
    expected = np.r_[1.0, [np.log(2) / np.log(i) for i in range(2, n + 1)]]
    np.testing.assert_allclose(row_uniformity(mixed).numpy(), expected, atol=1e-14)


def test_average_cosine_similarity_on_constructed_matrices() -> None:
    n, dim = 6, 9
    basis = np.eye(dim)
    assert average_cosine_similarity(basis[:n]) == pytest.approx(0.0, abs=1e-14)
    assert average_cosine_similarity(np.tile(3.0 * basis[0], (n, 1))) == pytest.approx(1.0)
    theta = 0.7  # x_i = cos(theta) e_0 + sin(theta) e_i: pairwise cosine cos^2(theta)
    tokens = np.cos(theta) * basis[0] + np.sin(theta) * basis[1 : n + 1]
    scaled = tokens * np.arange(1, n + 1)[:, None]  # cosines ignore the norms
    assert average_cosine_similarity(scaled) == pytest.approx(np.cos(theta) ** 2, abs=1e-14)
    rng = np.random.default_rng(1)
    batch = rng.normal(size=(3, n, dim))
    brute = [
        np.mean(
            [
                x[i] @ x[j] / np.linalg.norm(x[i]) / np.linalg.norm(x[j])
                for i in range(n)
                for j in range(i + 1, n)
            ]
        )
        for x in batch
    ]
    np.testing.assert_allclose(average_cosine_similarity(batch), brute, atol=1e-14)


# --------------------------------------------------------------------------- Theorem 5.1


def _spd(rng: np.random.Generator, dim: int, scale: float) -> np.ndarray:
    a = rng.normal(size=(dim, dim))
    return scale * (a @ a.T / dim + 0.2 * np.eye(dim))


def _moments(z_bar, sigma_v, sigma_c, beta, n) -> TokenMoments:
    z_bar, sigma_v, sigma_c = (
        torch.as_tensor(a, dtype=torch.float64) for a in (z_bar, sigma_v, sigma_c)
    )
    return TokenMoments(n, 1, z_bar, sigma_v, sigma_c, beta)


def _sample_tokens(rng, z_bar, sigma_b, sigma_c, n_samples, n_tokens) -> np.ndarray:
    """Z_i = zbar + eta + xi_i: Cov(eps_i) = Sigma_C + B = Sigma_V, Cov(eps_i, eps_j) = Sigma_C."""
    dim = z_bar.size
    shared = rng.multivariate_normal(np.zeros(dim), sigma_c, size=n_samples)
    own = rng.multivariate_normal(np.zeros(dim), sigma_b, size=(n_samples, n_tokens))
    return z_bar + shared[:, None, :] + own


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(0)
    dim, n_tokens = 5, 6
    z_bar = rng.normal(size=dim)
    sigma_b = _spd(rng, dim, 0.6)  # B = Sigma_V - Sigma_C
    sigma_c = _spd(rng, dim, 0.3)
    z = _sample_tokens(rng, z_bar, sigma_b, sigma_c, 200_000, n_tokens)
    return {
        "rng": rng,
        "z_bar": z_bar,
        "sigma_v": sigma_b + sigma_c,
        "sigma_c": sigma_c,
        "z": z,
        "w": rng.normal(size=(dim, dim)) / np.sqrt(dim),
        "bias_in": rng.normal(size=dim) * 0.3,
        "beta": 0.8,
    }


@pytest.mark.parametrize("lam", [0.0, 0.35, 1.0])
def test_theorem_expectations_match_monte_carlo(synthetic, lam: float) -> None:
    z, w, beta = synthetic["z"], synthetic["w"], synthetic["beta"]
    n = z.shape[1]
    bias = w @ synthetic["bias_in"]  # the update's constant c = w_out @ bias_in
    mixing = (1 - lam) * np.eye(n) + lam * uniform_causal(n)
    y = beta * z + np.einsum("ik,skd,ed->sie", mixing, z, w) + bias  # (samples, n, D)
    products = np.einsum("sid,sjd->sij", y, y)
    empirical = products.mean(0)
    stderr = products.std(0) / np.sqrt(products.shape[0])
    moments = _moments(synthetic["z_bar"], synthetic["sigma_v"], synthetic["sigma_c"], beta, n)
    terms = trace_terms(moments, w[None], np.eye(w.shape[0])[None], synthetic["bias_in"][None])
    coef = {k: v[0] for k, v in closed_form_coefficients(terms, beta).items()}
    expected = theorem_gram(coef, n, lam)
    assert np.all(np.abs(empirical - expected) < 5 * stderr + 1e-12)
    assert np.max(np.abs(empirical - expected) / np.abs(expected)) < 0.02
    # eq. (1): rho_hat is the average of E[Y_i^T Y_j] / sqrt(E||Y_i||^2 E||Y_j||^2)
    d = np.sqrt(np.diag(expected))
    pairs = (expected / np.outer(d, d))[np.triu_indices(n, 1)]
    assert rho_hat(coef, n, lam) == pytest.approx(pairs.mean(), abs=1e-13)


def test_moment_estimators_recover_the_distribution(synthetic) -> None:
    z = synthetic["z"][:40_000]
    x = 2.5 * z  # X = beta Z exactly
    (moments,) = estimate_moments(z, x, [z.shape[1]])
    assert moments.beta == pytest.approx(2.5, abs=1e-12)
    np.testing.assert_allclose(moments.z_bar.numpy(), synthetic["z_bar"], atol=0.02)
    np.testing.assert_allclose(moments.sigma_v.numpy(), synthetic["sigma_v"], atol=0.03)
    np.testing.assert_allclose(moments.sigma_c.numpy(), synthetic["sigma_c"], atol=0.03)
    # prefixes accumulated segment by segment equal a direct estimate on the prefix
    short, full = estimate_moments(z[:500], None, [3, z.shape[1]])
    (direct,) = estimate_moments(z[:500, :3], None, [3])
    for name in ("z_bar", "sigma_v", "sigma_c"):
        np.testing.assert_allclose(getattr(short, name), getattr(direct, name), atol=1e-12)
    # the estimators are the plain sample definitions
    eps = z[:500] - full.z_bar.numpy()
    pairs = np.einsum("sid,sje->ijde", eps, eps) / 500
    off = ~np.eye(z.shape[1], dtype=bool)
    np.testing.assert_allclose(full.sigma_c.numpy(), pairs[off].mean(0), atol=1e-12)
    np.testing.assert_allclose(full.sigma_v.numpy(), pairs[~off].mean(0), atol=1e-12)


def test_factored_traces_equal_explicit_products(synthetic) -> None:
    rng = np.random.default_rng(3)
    dim, k, heads = 5, 2, 3
    w_out, w_in = rng.normal(size=(heads, dim, k)), rng.normal(size=(heads, k, dim))
    bias_in = rng.normal(size=(heads, k))
    moments = _moments(synthetic["z_bar"], synthetic["sigma_v"], synthetic["sigma_c"], 1.0, 4)
    terms = trace_terms(moments, w_out, w_in, bias_in)
    zb = synthetic["z_bar"]
    b = synthetic["sigma_v"] - synthetic["sigma_c"]
    c = np.outer(zb, zb) + synthetic["sigma_c"]
    for h in range(heads):
        w = w_out[h] @ w_in[h]
        bias = w_out[h] @ bias_in[h]
        assert terms.tr_bw[h] == pytest.approx(np.trace(b @ w))
        assert terms.tr_cw[h] == pytest.approx(np.trace(c @ w))
        assert terms.tr_bwtw[h] == pytest.approx(np.trace(b @ w.T @ w))
        assert terms.tr_cwtw[h] == pytest.approx(np.trace(c @ w.T @ w))
        assert terms.c_z[h] == pytest.approx(bias @ zb)
        assert terms.c_wz[h] == pytest.approx(bias @ w @ zb)
        assert terms.c_c[h] == pytest.approx(bias @ bias)
    assert terms.tr_c == pytest.approx(np.trace(c))
    assert terms.tr_b == pytest.approx(np.trace(b))


def test_traces_of_shared_value_maps_equal_the_per_head_products_bit_for_bit() -> None:
    """Grouped-query attention: heads of one key/value group share ``W_V`` (the file repeats it
    per query head). The ``D x D`` products are taken once per distinct map; the traces are
    those of one product per head, bit for bit."""
    rng = np.random.default_rng(7)
    dim, k, n_kv, group = 24, 4, 3, 4
    heads = n_kv * group
    shared = rng.normal(size=(n_kv, k, dim))
    w_in = np.repeat(shared, group, axis=0)  # (H, k, D), consecutive groups as in the files
    w_in[5] = rng.normal(size=(k, dim))  # one head of group 1 differs: a group of its own
    w_out = rng.normal(size=(heads, dim, k))
    bias_in = rng.normal(size=(heads, k))
    z = rng.normal(size=(6, 9, dim)) + rng.normal(size=dim)
    (moments,) = estimate_moments(z, 1.3 * z, [9])
    first, index = distinct_maps(w_in)
    assert first.tolist() == [0, 4, 5, 8]
    assert index.tolist() == [0, 0, 0, 0, 1, 2, 1, 1, 3, 3, 3, 3]
    np.testing.assert_array_equal(w_in[first.numpy()][index.numpy()], w_in)
    shared_terms = trace_terms(moments, w_out, w_in, bias_in)
    per_head = trace_terms(moments, w_out, w_in, bias_in, heads=torch.arange(heads))
    for field in ("tr_cw", "tr_bw", "tr_cwtw", "tr_bwtw", "c_z", "c_wz", "c_c"):
        assert getattr(shared_terms, field).tobytes() == getattr(per_head, field).tobytes(), field
    given = trace_terms(moments, w_out, w_in[first.numpy()], bias_in, heads=index)
    assert given.tr_bwtw.tobytes() == per_head.tr_bwtw.tobytes()
    with pytest.raises(ValueError, match="heads must index"):
        trace_terms(moments, w_out, w_in[first.numpy()], bias_in, heads=torch.arange(heads))


def test_conditions_give_the_predicted_monotonicity(synthetic) -> None:
    dim, n = synthetic["z_bar"].size, 64
    beta = 1.0
    moments = _moments(synthetic["z_bar"], synthetic["sigma_v"], synthetic["sigma_c"], beta, n)
    eye = np.eye(dim)
    maps = np.stack([0.5 * eye, -0.5 * eye, -1.5 * eye])  # (i); (ii); neither (0.5 * 1.5 > 0)
    terms = trace_terms(moments, maps, np.stack([eye] * 3))
    coef = closed_form_coefficients(terms, beta)
    labels = condition_labels(coef["beta_tr_bw"], coef["e"])
    assert labels.tolist() == ["i", "ii", "neither"]
    assert np.all(coef["a"] + np.minimum(coef["b"], 0) / 2 > 0)  # E[Y_i^T Y_j] > 0
    path = rho_hat(coef, n, LAMBDA_GRID)
    assert np.all(np.diff(path[0]) > 0)
    assert np.all(np.diff(path[1]) < 0)
