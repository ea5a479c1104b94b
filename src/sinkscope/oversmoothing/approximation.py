"""Approximation (2) of Theorem 5.1 per sequence, so that its error gets an interval over sequences.

At ``lambda = 0`` (the update ``Y = X + W Z`` with no mixing, column ``rhohat_xwz`` of the
per-head table) eq. (2) is ``rho_hat = a / d0``: ``a = E[Y_i^T Y_j]`` (``i != j``) and
``d0 = E||Y_i||^2`` (:func:`sinkscope.oversmoothing.theory.closed_form_coefficients`, with
``X ~ beta Z``). Both are averages over sequences of per-sequence statistics: with the token
sums ``S = sum_i z_i`` of a sequence of ``n`` tokens,

* ``B + C = E[z z^T]`` is the mean over sequences of ``(1/n) sum_i z_i z_i^T``;
* ``C = zbar zbar^T + Sigma_C`` is the mean over sequences of
  ``(S S^T - sum_i z_i z_i^T) / (n (n - 1))`` (the pooled mean's cross terms sum to zero), and
* ``zbar`` is the mean of ``S / n``,

and ``beta`` is a ratio of sums over sequences (``sum <x_i, z_i> / sum ||z_i||^2``). So for each
head ``a`` and ``d0`` are quadratics in ``beta`` whose coefficients are means over sequences:
``a(beta) = a2 beta^2 + a1 beta + a0`` and ``d0(beta) = d2 beta^2 + d1 beta + d0c`` with

* ``a2 = tr C_s``, ``a1 = 2 kappa (tr(C_s W) + c^T zbar_s)``,
  ``a0 = kappa^2 (tr(C_s W^T W) + 2 c^T W zbar_s + ||c||^2)``,
* ``d2 = E_s||z||^2``, ``d1 = 2 kappa (E_s[z^T W z] + c^T zbar_s)``,
  ``d0c = kappa^2 (E_s||W z||^2 + 2 c^T W zbar_s + ||c||^2)``

(``c = W_O b_V``, the head's constant; ``kappa`` the post-norm's ``1 / rbar``, held fixed: a
layer constant of the map, not a moment). A resample of sequences then recomputes ``rho_hat``
exactly as a fresh analysis of those sequences would (the identity is tested), next to the
empirical ``rho`` (the mean of the per-sequence ``rho``), without the ``D x D`` moments.

:func:`sequence_terms` computes the coefficients of a block of sequences from ``W``'s factors
(``O(H k D)`` per token, the cost of one projection); :func:`rho_hat_from_means` evaluates
``a / d0``; :func:`max_error_draws` resamples sequences for the claim
``oversmoothing.approximation_every_head`` (:mod:`sinkscope.claims.checks.oversmoothing`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import torch

from sinkscope.oversmoothing.names import SEQUENCE_TERMS

__all__ = ["max_error_draws", "rho_hat_from_means", "sequence_terms"]


def sequence_terms(
    z: torch.Tensor,
    w_in: torch.Tensor,
    in_heads: torch.Tensor,
    w_out: torch.Tensor,
    b_v: torch.Tensor,
    kappa: float,
) -> np.ndarray:
    """The coefficients :data:`~sinkscope.oversmoothing.names.SEQUENCE_TERMS` of ``a(beta)`` and
    ``d0(beta)`` for each sequence of a block and each head: ``(B, H, 6)`` float64.

    ``z``: gain-free tokens ``(B, n, D)`` of the token set (``n >= 2``); ``w_in``: the distinct
    input maps ``(G, k, D)`` (gain folded in) and ``in_heads`` ``(H,)`` the map of each head;
    ``w_out``: ``(H, D, k)`` (post-norm gain folded in); ``b_v``: ``(H, k)``; ``kappa``: the
    map's scale at this ``T'``. Projections in float32 (relative error ~1e-7), sums in float64,
    one sequence at a time (work arrays of ``n H k`` float64 numbers, and a sequence's terms do
    not depend on its block).
    """
    b, n, dim = z.shape
    if n < 2:
        raise ValueError(f"a sequence needs at least 2 tokens, got {n}")
    n_maps, k, _ = w_in.shape
    n_heads = w_out.shape[0]
    w_out64 = w_out.to(torch.float64)
    gram_out = w_out64.transpose(1, 2) @ w_out64  # (H, k, k)
    bias = b_v.to(torch.float64).reshape(n_heads, k)
    flat_in = w_in.to(torch.float32).reshape(n_maps * k, dim)
    flat_out = w_out.to(torch.float32).permute(1, 0, 2).reshape(dim, n_heads * k)
    c_c = torch.einsum("hk,hkl,hl->h", bias, gram_out, bias)  # ||c||^2
    pairs, kap = n * (n - 1), float(kappa)
    out = np.empty((b, n_heads, 6))
    for index in range(b):
        z32 = z[index].to(torch.float32)  # (n, D)
        u = (z32 @ flat_in.T).reshape(n, n_maps, k)[:, in_heads].to(torch.float64)  # W_in z
        v = (z32 @ flat_out).reshape(n, n_heads, k).to(torch.float64)  # W_out^T z
        zz = float(z32.to(torch.float64).square().sum())  # sum_i ||z_i||^2
        s = z32.sum(0, dtype=torch.float64)  # token sum S
        zwz = (u * v).sum((0, 2))  # (H,) sum_i z_i^T W z_i
        wzwz = torch.einsum("nhk,hkl,nhl->h", u, gram_out, u)  # sum_i ||W z_i||^2
        su, sv = u.sum(0), v.sum(0)  # (H, k): W_in S and W_out^T S
        s_zwz = (su * sv).sum(-1)  # S^T W S
        s_wzwz = torch.einsum("hk,hkl,hl->h", su, gram_out, su)  # ||W S||^2
        c_z = (bias * sv).sum(-1) / n  # c^T zbar_s
        c_wz = torch.einsum("hk,hkl,hl->h", bias, gram_out, su) / n  # c^T W zbar_s
        del u, v
        out[index, :, 0] = (float(s @ s) - zz) / pairs
        out[index, :, 1] = (2 * kap * ((s_zwz - zwz) / pairs + c_z)).numpy()
        out[index, :, 2] = (kap**2 * ((s_wzwz - wzwz) / pairs + 2 * c_wz + c_c)).numpy()
        out[index, :, 3] = zz / n
        out[index, :, 4] = (2 * kap * (zwz / n + c_z)).numpy()
        out[index, :, 5] = (kap**2 * (wzwz / n + 2 * c_wz + c_c)).numpy()
    return out


def rho_hat_from_means(terms: np.ndarray, beta: np.ndarray | float) -> np.ndarray:
    """Eq. (2) at ``lambda = 0``: ``a(beta) / d0(beta)`` from the means over sequences of the
    :data:`~sinkscope.oversmoothing.names.SEQUENCE_TERMS` (last axis, in that order); ``beta``
    broadcasts against ``terms[..., 0]``."""
    beta = np.asarray(beta, dtype=np.float64)
    a = (terms[..., 0] * beta + terms[..., 1]) * beta + terms[..., 2]
    d0 = (terms[..., 3] * beta + terms[..., 4]) * beta + terms[..., 5]
    return a / d0


def max_error_draws(
    strata: Sequence[pl.DataFrame], n_resamples: int, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """The largest ``|rho - rho_hat|`` over the heads of ``strata`` (``X + W Z``), on the
    sample and on ``n_resamples`` resamples of its sequences.

    Each stratum is one pair's rows of the ``approximation_by_sequence`` table (columns
    ``layer, head, sequence, rho_xwz``, :data:`SEQUENCE_TERMS`, ``sum_xz, sum_zz``) and is
    resampled on its own (its sequences drawn with replacement, as many as it has): per head
    the empirical ``rho`` is the mean of the drawn sequences' ``rho_xwz``, ``beta`` (per layer)
    is the ratio of their ``sum_xz`` and ``sum_zz``, ``rho_hat`` is :func:`rho_hat_from_means`
    of their terms. The maximum runs over every head of every stratum (a pooled row's heads are
    read once per dataset, as in the per-head table). Returns the sample's maximum and the
    ``(n_resamples,)`` maxima of the resamples."""
    sample_max = -np.inf
    draw_max = np.full(n_resamples, -np.inf)
    for frame in strata:
        frame = frame.sort("layer", "head", "sequence")
        n_seq = frame["sequence"].n_unique()
        n_cells = frame.height // n_seq
        if n_cells * n_seq != frame.height:
            raise ValueError("approximation_by_sequence: every head needs every sequence")

        def per_cell(
            column: str, frame: pl.DataFrame = frame, n_cells: int = n_cells
        ) -> np.ndarray:
            return frame[column].to_numpy().astype(np.float64).reshape(n_cells, -1).T  # (N, P)

        rho = per_cell("rho_xwz")
        terms = np.stack([per_cell(c) for c in SEQUENCE_TERMS], axis=-1)  # (N, P, 6)
        xz, zz = per_cell("sum_xz"), per_cell("sum_zz")  # per layer, repeated per head
        counts = np.vstack(
            [np.ones(n_seq), rng.multinomial(n_seq, np.full(n_seq, 1.0 / n_seq), n_resamples)]
        )  # (1 + B, N): the sample, then the resamples
        mean_rho = counts @ rho / n_seq
        mean_terms = np.einsum("bn,npt->bpt", counts, terms) / n_seq
        beta = (counts @ xz) / (counts @ zz)
        errors = np.abs(mean_rho - rho_hat_from_means(mean_terms, beta))  # (1 + B, P)
        sample_max = max(sample_max, float(errors[0].max()))
        draw_max = np.maximum(draw_max, errors[1:].max(axis=1))
    return sample_max, draw_max
