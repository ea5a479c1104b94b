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

:func:`sequence_terms` computes the coefficients of a block of sequences at every prefix
``T'`` from ``W``'s factors (:class:`HeadMaps`; ``(G + H) k D`` multiply-adds per token for ``G``
distinct value maps and ``H`` heads); :func:`rho_hat_from_means` evaluates ``a / d0``;
:mod:`sinkscope.oversmoothing.resampling` resamples sequences for the claims
``oversmoothing.approximation_every_head`` and ``oversmoothing.approximation_mean``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import torch

__all__ = ["HeadMaps", "rho_hat_from_means", "sequence_terms"]


@dataclass(frozen=True)
class HeadMaps:
    """A layer's head maps ``W_h = W_O[h] W_in[g(h)]`` laid out for :func:`sequence_terms`
    (built once per layer by :meth:`from_weights`: the layouts copy ``W_O``)."""

    flat_in: torch.Tensor  # (G k, D) float32: the distinct input maps' rows
    members: tuple[torch.Tensor, ...]  # the heads of each distinct map
    out_flat: torch.Tensor  # (D, H k) float64: W_O^T of every head, for W_O^T S
    out_flat32: torch.Tensor  # the same in float32, for W_O^T z_i of every token
    in_heads: torch.Tensor  # (H,) the map of each head
    gram_out: torch.Tensor  # (H, k, k) float64: W_O^T W_O
    bias: torch.Tensor  # (H, k) float64: the value bias b_V (c = W_O b_V)
    #: per map: its heads' W_O^T W_O, (r, k, k) (gathered once: a gather per token block costs
    #: milliseconds each, as much as the block's products at small widths)
    gram_members: tuple[torch.Tensor, ...]

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
        gram_out = out_t @ w_out64
        return cls(
            flat_in=w_in.to(torch.float32).reshape(n_maps * k, dim).contiguous(),
            members=members,
            out_flat=w_out64.permute(1, 0, 2).reshape(dim, n_heads * k).contiguous(),
            out_flat32=w_out64.permute(1, 0, 2).reshape(dim, n_heads * k).to(torch.float32),
            in_heads=in_heads,
            gram_out=gram_out,
            bias=b_v.to(torch.float64).reshape(n_heads, k),
            gram_members=tuple(gram_out[m].contiguous() for m in members),
        )


def _prefix_sums(values: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """``(L, ...)``: the sums of ``values``' first ``n`` rows for each ``n`` of ``sizes``
    (increasing), each the previous one plus its segment."""
    out = []
    previous = 0
    for n in sizes:
        part = values[previous:n].sum(0)
        out.append(part if not out else out[-1] + part)
        previous = n
    return torch.stack(out)


def sequence_terms(
    z: torch.Tensor,
    maps: HeadMaps,
    kappa: float | Sequence[float],
    lengths: Sequence[int] | None = None,
) -> np.ndarray:
    """The coefficients :data:`~sinkscope.oversmoothing.names.SEQUENCE_TERMS` of ``a(beta)`` and
    ``d0(beta)`` for each sequence of a block and each head: ``(B, H, 6)`` float64 on all of
    ``z``'s tokens, or, given the prefix sizes ``lengths`` (increasing, each ``>= 2``),
    ``(B, L, H, 6)``: the coefficients of each sequence's first ``n`` tokens for each ``n``.

    ``z``: gain-free tokens ``(B, n, D)`` of the token set; ``maps``: the layer's
    :class:`HeadMaps`; ``kappa``: the map's scale (one per length with ``lengths``). The
    projections of the tokens in float32 (relative error ~1e-6), their per-token products and
    every sum over tokens in float64, one sequence at a time (a sequence's terms do not depend on
    its block). Per token it projects ``z_i`` through the ``G`` distinct input maps and the
    ``H`` heads' ``W_O^T`` (``(G + H) k D`` multiply-adds, :data:`sinkscope.sizing.costs.
    APPROXIMATION_TERMS_S_PER_GMAC`); the rest are sums over tokens, so every prefix comes from
    the same projections (each token enters one segment).
    """
    b, n_tokens, dim = z.shape
    sizes = [n_tokens] if lengths is None else [int(n) for n in lengths]
    if sizes[0] < 2 or sizes[-1] > n_tokens or any(m <= n for n, m in pairwise(sizes)):
        raise ValueError(
            f"prefix sizes must increase from at least 2 tokens to at most {n_tokens}: {sizes}"
        )
    kappas = np.broadcast_to(np.asarray(kappa, dtype=np.float64), (len(sizes),))
    n_len, n_maps = len(sizes), len(maps.members)
    k = maps.gram_out.shape[-1]
    n_heads = maps.gram_out.shape[0]
    gram_out, bias = maps.gram_out, maps.bias
    c_c = torch.einsum("hk,hkl,hl->h", bias, gram_out, bias)  # ||c||^2
    # per sequence and prefix: sum_i z_i^T W z_i = sum_i (W_O^T z_i) . (W_in z_i) per head,
    # sum_i ||W z_i||^2 per head (from sum_i (W_in z_i)(W_in z_i)^T per map), ||z||^2 and the
    # token sums, each prefix the previous one plus its segment's tokens
    zwz = torch.empty(b, n_len, n_heads, dtype=torch.float64)
    wzwz = torch.empty(b, n_len, n_heads, dtype=torch.float64)
    zz = torch.empty(b, n_len, dtype=torch.float64)  # sum_i ||z_i||^2
    s = torch.empty(b, n_len, dim, dtype=torch.float64)  # token sums S
    su = torch.empty(b, n_len, n_heads, k, dtype=torch.float64)  # W_in S per head
    inner = torch.empty(n_len, n_maps, k, k, dtype=torch.float64)
    for index in range(b):
        z32 = z[index, : sizes[-1]].to(torch.float32)  # (n, D)
        u32 = z32 @ maps.flat_in.T  # (n, G k): W_in z_i per distinct map
        v32 = (z32 @ maps.out_flat32).reshape(-1, n_heads, k)  # (n, H, k): W_O^T z_i per head
        per_token = {
            "zwz": (v32 * u32.reshape(-1, n_maps, k)[:, maps.in_heads]).sum(
                -1, dtype=torch.float64
            ),  # (n, H)
            "zz": z32.to(torch.float64).square().sum(-1),
            "s": z32.to(torch.float64),
            "u": u32.to(torch.float64).reshape(-1, n_maps, k),
        }
        del v32
        sums = {key: _prefix_sums(value, sizes) for key, value in per_token.items()}
        u = per_token["u"]
        previous = 0
        for j, n in enumerate(sizes):
            part = torch.einsum("igk,igl->gkl", u[previous:n], u[previous:n])
            inner[j] = part if j == 0 else inner[j - 1] + part
            previous = n
        for g, m in enumerate(maps.members):
            # (k, k): sum_i (W_in z_i)(W_in z_i)^T of map g, traced with each head's W_O
            wzwz[index][:, m] = (maps.gram_members[g][None] * inner[:, g, None]).sum((-2, -1))
        zwz[index], zz[index], s[index] = sums["zwz"], sums["zz"], sums["s"]
        su[index] = sums["u"][:, maps.in_heads]
        del per_token, sums, u, u32
    n = torch.as_tensor(sizes, dtype=torch.float64)[None, :, None]  # (1, L, 1)
    kap = torch.tensor(kappas, dtype=torch.float64)[None, :, None]
    pairs = n * (n - 1)
    sv = (s @ maps.out_flat).reshape(b, n_len, n_heads, k)  # W_O^T S
    s_zwz = (su * sv).sum(-1)  # S^T W S
    s_wzwz = torch.einsum("blhk,hkm,blhm->blh", su, gram_out, su)  # ||W S||^2
    c_z = (bias[None, None] * sv).sum(-1) / n  # c^T zbar_s
    c_wz = torch.einsum("hk,hkm,blhm->blh", bias, gram_out, su) / n  # c^T W zbar_s
    ss = s.square().sum(-1)[..., None]  # ||S||^2
    zz = zz[..., None]
    terms = torch.stack(
        [
            ((ss - zz) / pairs).expand(b, n_len, n_heads),
            2 * kap * ((s_zwz - zwz) / pairs + c_z),
            kap**2 * ((s_wzwz - wzwz) / pairs + 2 * c_wz + c_c),
            (zz / n).expand(b, n_len, n_heads),
            2 * kap * (zwz / n + c_z),
            kap**2 * (wzwz / n + 2 * c_wz + c_c),
        ],
        dim=-1,
    ).numpy()
    return terms[:, 0] if lengths is None else terms


def rho_hat_from_means(terms: np.ndarray, beta: np.ndarray | float) -> np.ndarray:
    """Eq. (2) at ``lambda = 0``: ``a(beta) / d0(beta)`` from the means over sequences of the
    :data:`~sinkscope.oversmoothing.names.SEQUENCE_TERMS` (last axis, in that order); ``beta``
    broadcasts against ``terms[..., 0]``."""
    beta = np.asarray(beta, dtype=np.float64)
    a = (terms[..., 0] * beta + terms[..., 1]) * beta + terms[..., 2]
    d0 = (terms[..., 3] * beta + terms[..., 4]) * beta + terms[..., 5]
    return a / d0
