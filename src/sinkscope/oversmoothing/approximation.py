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
``a(beta) = a2 beta^2 + a1 beta + a0`` and ``d0(beta) = d2 beta^2 + d1 beta + d0c`` (columns
``a_beta2, a_beta1, a_beta0, d0_beta2, d0_beta1, d0_beta0``) with

* ``a2 = tr C_s``, ``a1 = 2 kappa (tr(C_s W) + c^T zbar_s)``,
  ``a0 = kappa^2 (tr(C_s W^T W) + 2 c^T W zbar_s + ||c||^2)``,
* ``d2 = E_s||z||^2``, ``d1 = 2 kappa (E_s[z^T W z] + c^T zbar_s)``,
  ``d0c = kappa^2 (E_s||W z||^2 + 2 c^T W zbar_s + ||c||^2)``

(``c = W_O b_V``, the head's constant; ``kappa`` the post-norm's ``1 / rbar``, held fixed: a
layer constant of the map, not a moment). A resample of sequences then recomputes ``rho_hat``
exactly as a fresh analysis of those sequences would (the identity is tested), next to the
empirical ``rho`` (the mean of the per-sequence ``rho``), without the ``D x D`` moments.

:func:`sequence_terms` computes the coefficients of a block of sequences from ``W``'s factors
(:class:`HeadMaps`; ``O(G k D)`` per token for ``G`` distinct value maps, the cost of one
projection); :func:`rho_hat_from_means` evaluates
``a / d0``; :func:`sinkscope.oversmoothing.resampling.max_error_draws` resamples sequences for
the claim ``oversmoothing.approximation_every_head``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["HeadMaps", "rho_hat_from_means", "sequence_terms"]


@dataclass(frozen=True)
class HeadMaps:
    """A layer's head maps ``W_h = W_O[h] W_in[g(h)]`` laid out for :func:`sequence_terms`
    (built once per layer by :meth:`from_weights`: the layouts copy ``W_O``)."""

    flat_in: torch.Tensor  # (G k, D) float32: the distinct input maps' rows
    members: tuple[torch.Tensor, ...]  # the heads of each distinct map
    out_rows: tuple[torch.Tensor, ...]  # per map: its heads' W_O^T flattened, (r, k D) float64
    out_flat: torch.Tensor  # (D, H k) float64: W_O^T of every head, for W_O^T S
    in_heads: torch.Tensor  # (H,) the map of each head
    gram_out: torch.Tensor  # (H, k, k) float64: W_O^T W_O
    bias: torch.Tensor  # (H, k) float64: the value bias b_V (c = W_O b_V)

    @classmethod
    def from_weights(
        cls, w_in: torch.Tensor, in_heads: torch.Tensor, w_out: torch.Tensor, b_v: torch.Tensor
    ) -> HeadMaps:
        """``w_in``: the distinct input maps ``(G, k, D)`` (gain folded in), ``in_heads`` ``(H,)``
        the map of each head; ``w_out``: ``(H, D, k)`` (post-norm gain folded in); ``b_v``:
        ``(H, k)``."""
        n_maps, k, dim = w_in.shape
        n_heads = w_out.shape[0]
        w_out64 = w_out.to(torch.float64)
        out_t = w_out64.transpose(1, 2)  # (H, k, D)
        members = tuple(torch.nonzero(in_heads == g).flatten() for g in range(n_maps))
        return cls(
            flat_in=w_in.to(torch.float32).reshape(n_maps * k, dim).contiguous(),
            members=members,
            out_rows=tuple(out_t[m].reshape(len(m), k * dim).contiguous() for m in members),
            out_flat=w_out64.permute(1, 0, 2).reshape(dim, n_heads * k).contiguous(),
            in_heads=in_heads,
            gram_out=out_t @ w_out64,
            bias=b_v.to(torch.float64).reshape(n_heads, k),
        )


def sequence_terms(z: torch.Tensor, maps: HeadMaps, kappa: float) -> np.ndarray:
    """The coefficients :data:`~sinkscope.oversmoothing.names.SEQUENCE_TERMS` of ``a(beta)`` and
    ``d0(beta)`` for each sequence of a block and each head: ``(B, H, 6)`` float64.

    ``z``: gain-free tokens ``(B, n, D)`` of the token set (``n >= 2``); ``maps``: the layer's
    :class:`HeadMaps`; ``kappa``: the map's scale at this ``T'``. The products over tokens in
    float32 (relative error ~1e-6), the rest in float64, one sequence at a time (a sequence's
    terms do not depend on its block). Every per-token sum is a trace against
    ``sum_i (W_in z_i) z_i^T`` or ``sum_i (W_in z_i)(W_in z_i)^T`` of a distinct map, so the
    cost is ``O(n G k D)``, the projection's, not ``O(n H k D)``: a grouped-query model pays for
    its ``G`` value maps.
    """
    b, n, dim = z.shape
    if n < 2:
        raise ValueError(f"a sequence needs at least 2 tokens, got {n}")
    n_maps = len(maps.members)
    k = maps.gram_out.shape[-1]
    n_heads = maps.gram_out.shape[0]
    gram_out, bias = maps.gram_out, maps.bias
    c_c = torch.einsum("hk,hkl,hl->h", bias, gram_out, bias)  # ||c||^2
    pairs, kap = n * (n - 1), float(kappa)
    # per sequence: sum_i (W_in z_i) z_i^T of each map (B, G, k D), sum_i ||W z_i||^2 per head,
    # ||z||^2 and the token sums; the traces with W_O^T below then read W_O once per block
    cross = torch.empty(b, n_maps, k * dim, dtype=torch.float64)
    wzwz = torch.empty(b, n_heads, dtype=torch.float64)  # sum_i ||W z_i||^2
    zz = torch.empty(b, dtype=torch.float64)  # sum_i ||z_i||^2
    s = torch.empty(b, dim, dtype=torch.float64)  # token sums S
    su = torch.empty(b, n_heads, k, dtype=torch.float64)  # W_in S per head
    for index in range(b):
        z32 = z[index].to(torch.float32)  # (n, D)
        u32 = z32 @ maps.flat_in.T  # (n, G k): W_in z_i per distinct map
        cross[index] = (u32.T @ z32).reshape(n_maps, k * dim)
        u = u32.to(torch.float64).reshape(n, n_maps, k)
        for g, m in enumerate(maps.members):
            inner = u[:, g].T @ u[:, g]  # (k, k): sum_i (W_in z_i)(W_in z_i)^T of map g
            wzwz[index, m] = (gram_out[m] * inner).sum((1, 2))
        zz[index] = z32.to(torch.float64).square().sum()
        s[index] = z32.sum(0, dtype=torch.float64)
        su[index] = u.sum(0)[maps.in_heads]
        del u, u32
    zwz = torch.empty(b, n_heads, dtype=torch.float64)  # sum_i z_i^T W z_i
    for g, m in enumerate(maps.members):
        zwz[:, m] = cross[:, g] @ maps.out_rows[g].T
    del cross
    sv = (s @ maps.out_flat).reshape(b, n_heads, k)  # W_O^T S
    s_zwz = (su * sv).sum(-1)  # S^T W S
    s_wzwz = torch.einsum("bhk,hkl,bhl->bh", su, gram_out, su)  # ||W S||^2
    c_z = (bias[None] * sv).sum(-1) / n  # c^T zbar_s
    c_wz = torch.einsum("hk,hkl,bhl->bh", bias, gram_out, su) / n  # c^T W zbar_s
    ss = s.square().sum(-1)[:, None]  # ||S||^2
    return torch.stack(
        [
            ((ss - zz[:, None]) / pairs).expand(b, n_heads),
            2 * kap * ((s_zwz - zwz) / pairs + c_z),
            kap**2 * ((s_wzwz - wzwz) / pairs + 2 * c_wz + c_c),
            (zz / n)[:, None].expand(b, n_heads),
            2 * kap * (zwz / n + c_z),
            kap**2 * (wzwz / n + 2 * c_wz + c_c),
        ],
        dim=-1,
    ).numpy()


def rho_hat_from_means(terms: np.ndarray, beta: np.ndarray | float) -> np.ndarray:
    """Eq. (2) at ``lambda = 0``: ``a(beta) / d0(beta)`` from the means over sequences of the
    :data:`~sinkscope.oversmoothing.names.SEQUENCE_TERMS` (last axis, in that order); ``beta``
    broadcasts against ``terms[..., 0]``."""
    beta = np.asarray(beta, dtype=np.float64)
    a = (terms[..., 0] * beta + terms[..., 1]) * beta + terms[..., 2]
    d0 = (terms[..., 3] * beta + terms[..., 4]) * beta + terms[..., 5]
    return a / d0
