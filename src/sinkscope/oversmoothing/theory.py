"""Theorem 5.1 of the paper (§3, §5, eq. 12, App. B.2): the average cosine similarity ``rho``,
the uniformity ``u`` of attention maps, the traces of the theorem for per-head maps ``W_h``, the
coefficients of eq. (2), the approximation ``rho_hat`` of eq. (1) and the conditions (i)/(ii).

Definitions and modelling decisions: the docstring of :mod:`sinkscope.oversmoothing.analysis`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sinkscope.oversmoothing.moments import TokenMoments

__all__ = [
    "CONDITIONS",
    "TraceTerms",
    "average_cosine_similarity",
    "closed_form_coefficients",
    "condition_labels",
    "distinct_maps",
    "rho_hat",
    "row_uniformity",
    "theorem_gram",
    "trace_terms",
    "trend",
    "uniform_causal",
    "uniformity",
]

CONDITIONS: tuple[str, ...] = ("i", "ii", "neither")


# --------------------------------------------------------------------------- basic quantities


def average_cosine_similarity(tokens: np.ndarray | torch.Tensor) -> np.ndarray:
    """``rho`` of §3 for token matrices stored row-wise: ``tokens`` ``(..., n, D)`` -> ``(...)``.

    Mean cosine similarity over the ``n (n - 1) / 2`` pairs ``i < j``, via the normalised Gram
    identity ``(||sum_i x_i/||x_i|| ||^2 - n) / (n (n - 1))`` (float64).
    """
    t = torch.as_tensor(tokens).to(torch.float64)
    n = t.shape[-2]
    if n < 2:
        raise ValueError(f"average cosine similarity needs at least 2 tokens, got {n}")
    unit = t / torch.linalg.vector_norm(t, dim=-1, keepdim=True)
    total = unit.sum(dim=-2)
    return ((total * total).sum(-1) - n).div(n * (n - 1)).numpy()


def row_uniformity(probs: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Normalised entropy of every row of square causal matrices ``(..., n, n)`` -> ``(..., n)``.

    Row ``r`` (0-based) can attend to ``r + 1`` positions: ``h_r = H(A_r) / log(r + 1)``; the
    single-entry row 0 gets ``h_0 = 1`` (eq. 12's leading ``1 +``). Float64 result (entropies
    are summed in float64 for float64 input, else in float32).
    """
    a = torch.as_tensor(probs)
    a = (
        a if a.dtype == torch.float64 else a.to(torch.float32)
    )  # float16 storage is summed in float32
    n = a.shape[-1]
    entropy = -torch.special.xlogy(a, a).sum(-1).to(torch.float64)
    norm = torch.log(torch.arange(1, n + 1, dtype=torch.float64))
    out = torch.ones_like(entropy)
    out[..., 1:] = entropy[..., 1:] / norm[1:]
    return out


def uniformity(probs: np.ndarray | torch.Tensor, include_first_row: bool = True) -> np.ndarray:
    """Uniformity coefficient ``u(A)`` of eq. (12) for square causal matrices ``(..., n, n)``.

    ``include_first_row=True`` is eq. (12) literally, ``(1 + sum_{i>=2} H_i / log i) / n``:
    ``u(A_u) = 1`` and ``u(I) = 1/n``. ``False`` averages the ``n - 1`` rows with at least two
    entries: ``u(A_u) = 1`` and ``u(I) = 0``.
    """
    rows = row_uniformity(probs)
    return (rows if include_first_row else rows[..., 1:]).mean(-1).numpy()


def uniform_causal(n: int) -> np.ndarray:
    """The ``n x n`` uniform causal attention matrix ``(A_u)_ij = 1/i`` for ``j <= i`` (1-based)."""
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


# --------------------------------------------------------------------------- Theorem 5.1


@dataclass(frozen=True)
class TraceTerms:
    """Traces of Theorem 5.1 for a batch of maps ``W_h`` (arrays of shape ``(H,)``, float64).

    ``c_z = c^T zbar``, ``c_wz = c^T W zbar``, ``c_c = ||c||^2`` for the update's constant ``c``.
    """

    tr_c: float
    tr_b: float
    tr_cw: np.ndarray
    tr_bw: np.ndarray
    tr_cwtw: np.ndarray
    tr_bwtw: np.ndarray
    c_z: np.ndarray
    c_wz: np.ndarray
    c_c: np.ndarray


def distinct_maps(w_in: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct maps among ``w_in`` ``(H, k, D)``: ``(first, heads)`` with
    ``w_in[h]`` equal bit for bit to ``w_in[first[heads[h]]]`` (``first``: ``(G,)`` increasing
    head indices, ``heads``: ``(H,)``).

    Grouped-query attention shares one value map ``W_V`` among the query heads of a key/value
    group (the activation file stores it per query head, paper §5's ``W_h = W_O[h] W_V[h]``), so
    Llama 3.1 8B has 8 distinct input maps for 32 heads; :func:`trace_terms` multiplies each
    distinct map once. A head is compared with the groups found so far, the latest first
    (groups are consecutive in every supported model).
    """
    w = torch.as_tensor(w_in)
    first: list[int] = []
    heads: list[int] = []
    for h in range(w.shape[0]):
        match = next(
            (g for g in reversed(range(len(first))) if torch.equal(w[h], w[first[g]])), None
        )
        if match is None:
            first.append(h)
            match = len(first) - 1
        heads.append(match)
    return torch.as_tensor(first, dtype=torch.long), torch.as_tensor(heads, dtype=torch.long)


def trace_terms(
    moments: TokenMoments,
    w_out: np.ndarray | torch.Tensor,
    w_in: np.ndarray | torch.Tensor,
    bias_in: np.ndarray | torch.Tensor | None = None,
    heads: torch.Tensor | None = None,
) -> TraceTerms:
    """Traces ``tr(CW), tr(BW), tr(CW^TW), tr(BW^TW)`` for ``W_h = w_out[h] @ w_in[h]``.

    ``w_out``: ``(H, D, k)``, ``w_in``: ``(H, k, D)`` (a full ``D x D`` map: ``w_out = W[None]``,
    ``w_in = I[None]``); ``bias_in``: ``(H, k)``, the update's constant is
    ``c_h = w_out[h] @ bias_in[h]``. Uses ``tr(Sigma W) = tr(w_in Sigma w_out)`` and
    ``tr(Sigma W^T W) = tr(w_out^T w_out w_in Sigma w_in^T)``, never forming ``D x D`` maps.

    ``heads``: ``(H,)``, then ``w_in`` ``(G, k, D)`` holds distinct maps and head ``h`` uses
    ``w_in[heads[h]]`` (:func:`distinct_maps`; without ``heads`` they are found here). The
    ``D x D`` products ``w_in Sigma`` (``O(G k D^2)``, the cost of this function) are taken
    once per distinct map and then indexed per head. The BLAS computes each row of a product
    alike whatever the other rows, so the traces equal those of the per-head products bit for
    bit (a property of the kernels, not of the algebra: checked on the paper's widths, the
    default run's and the test models' files, and in tests/oversmoothing/test_theory.py).
    """
    wo = torch.as_tensor(w_out).to(torch.float64)
    wi = torch.as_tensor(w_in).to(torch.float64)
    if heads is None:
        first, heads = distinct_maps(wi)
        wi = wi[first]
    n_heads = wo.shape[0]
    n_maps, k, dim = wi.shape
    if heads.shape != (n_heads,) or int(heads.max()) >= n_maps:
        raise ValueError(f"heads must index the {n_maps} maps for {n_heads} heads")
    gram_out = wo.transpose(1, 2) @ wo  # (H, k, k)
    flat = wi.reshape(n_maps * k, dim)
    tr_w: dict[str, torch.Tensor] = {}
    tr_wtw: dict[str, torch.Tensor] = {}
    for name, sigma in (("v", moments.sigma_v), ("c", moments.sigma_c)):
        in_sigma = (flat @ sigma).reshape(n_maps, k, dim)
        quad = (in_sigma @ wi.transpose(1, 2))[heads]  # (H, k, k) = w_in Sigma w_in^T
        tr_wtw[name] = (gram_out * quad).sum((1, 2))
        per_head = in_sigma[heads]  # (H, k, D), contiguous
        del in_sigma
        tr_w[name] = per_head.mul_(wo.transpose(1, 2)).sum((1, 2))
        del per_head
    zb = moments.z_bar
    wz = (wi @ zb)[heads]  # (H, k)
    zw = torch.einsum("hdk,d->hk", wo, zb)
    z_w_z = (zw * wz).sum(-1)
    wz_norm2 = torch.einsum("hk,hkl,hl->h", wz, gram_out, wz)
    if bias_in is None:
        b = torch.zeros(n_heads, k, dtype=torch.float64)
    else:
        b = torch.as_tensor(bias_in).to(torch.float64).reshape(n_heads, k)
    return TraceTerms(
        tr_c=moments.tr_c,
        tr_b=moments.tr_b,
        tr_cw=(z_w_z + tr_w["c"]).numpy(),
        tr_bw=(tr_w["v"] - tr_w["c"]).numpy(),
        tr_cwtw=(wz_norm2 + tr_wtw["c"]).numpy(),
        tr_bwtw=(tr_wtw["v"] - tr_wtw["c"]).numpy(),
        c_z=(b * zw).sum(-1).numpy(),
        c_wz=torch.einsum("hk,hkl,hl->h", b, gram_out, wz).numpy(),
        c_c=torch.einsum("hk,hkl,hl->h", b, gram_out, b).numpy(),
    )


def closed_form_coefficients(
    terms: TraceTerms, beta: float, scale: float | np.ndarray = 1.0
) -> dict[str, np.ndarray]:
    """Coefficients of eq. (2) for the map ``scale * W`` (and constant ``scale * c``).

    ``E[Y_i^T Y_j] = a + lambda b / j`` (``i < j``) and
    ``E||Y_k||^2 = d0 - 2 (1 - 1/k) b lambda + (1 - 1/k) e lambda^2`` with
    ``a = beta^2 tr C + 2 beta tr(CW) + tr(C W^T W) + bias``,
    ``b = beta tr(BW) + tr(B W^T W)``, ``e = tr(B W^T W)``,
    ``d0 = beta^2 tr(B+C) + 2 beta tr((B+C)W) + tr((B+C) W^T W) + bias``,
    ``bias = 2 beta c^T zbar + 2 c^T W zbar + ||c||^2``. Also returns ``beta_tr_bw``.
    """
    s = np.asarray(scale, dtype=np.float64)
    tr_cw, tr_bw = s * terms.tr_cw, s * terms.tr_bw
    tr_cwtw, tr_bwtw = s**2 * terms.tr_cwtw, s**2 * terms.tr_bwtw
    bias = 2 * beta * s * terms.c_z + 2 * s**2 * terms.c_wz + s**2 * terms.c_c
    a = beta**2 * terms.tr_c + 2 * beta * tr_cw + tr_cwtw + bias
    d0 = (
        beta**2 * (terms.tr_b + terms.tr_c)
        + 2 * beta * (tr_bw + tr_cw)
        + (tr_bwtw + tr_cwtw)
        + bias
    )
    return {
        "a": a,
        "b": beta * tr_bw + tr_bwtw,
        "d0": d0,
        "e": tr_bwtw,
        "bias": bias,
        "beta_tr_bw": beta * tr_bw,
    }


def theorem_gram(coef: Mapping[str, Any], n: int, lam: float) -> np.ndarray:
    """Expected Gram matrix ``E[Y_i^T Y_j]`` (``n x n``, 1-based ``i, j``) of eq. (2), scalar coefs."""
    j = np.arange(1, n + 1, dtype=np.float64)
    a, b, d0, e = (float(coef[key]) for key in ("a", "b", "d0", "e"))
    gram = a + lam * b / np.maximum.outer(j, j)
    diag = d0 - 2 * (1 - 1 / j) * b * lam + (1 - 1 / j) * e * lam**2
    gram[np.diag_indices(n)] = diag
    return gram


def rho_hat(coef: Mapping[str, Any], n: int, lambdas: Iterable[float] | float) -> np.ndarray:
    """Approximation (1) of ``rho(Y(lambda))`` for coefficient arrays of shape ``S``.

    Returns shape ``S + (len(lambdas),)`` (or ``S`` for a scalar ``lambda``). Evaluated in
    ``O(n)`` per point: ``2/(n(n-1)) sum_j N_j / sqrt(D_j) sum_{i<j} 1 / sqrt(D_i)``.
    """
    scalar = np.ndim(lambdas) == 0
    lam = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
    a, b, d0, e = (
        np.asarray(coef[key], dtype=np.float64)[..., None, None] for key in ("a", "b", "d0", "e")
    )
    j = np.arange(1, n + 1, dtype=np.float64)
    lam_ = lam[:, None]
    numer = a + lam_ * b / j
    denom = d0 - 2 * (1 - 1 / j) * b * lam_ + (1 - 1 / j) * e * lam_**2
    inv = 1.0 / np.sqrt(denom)
    before = np.cumsum(inv, axis=-1) - inv  # sum_{i<j} 1/sqrt(D_i)
    out = 2.0 / (n * (n - 1)) * (numer * inv * before).sum(-1)
    return out[..., 0] if scalar else out


def condition_labels(beta_tr_bw: np.ndarray, tr_bwtw: np.ndarray) -> np.ndarray:
    """Theorem 5.1: ``"i"`` if ``beta tr(BW) > 0``; ``"ii"`` if ``beta tr(BW) + tr(BW^TW) < 0``."""
    first = np.asarray(beta_tr_bw) > 0
    second = (np.asarray(beta_tr_bw) + np.asarray(tr_bwtw)) < 0
    return np.select([first, second], ["i", "ii"], default="neither")


def trend(values: np.ndarray, tol: float = 1e-12) -> np.ndarray:
    """``"increasing"``/``"decreasing"``/``"non-monotone"`` along the last axis."""
    diff = np.diff(values, axis=-1)
    up = (diff > tol).all(-1)
    down = (diff < -tol).all(-1)
    return np.select([up, down], ["increasing", "decreasing"], default="non-monotone")
