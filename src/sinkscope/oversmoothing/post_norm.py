"""The post-attention RMSNorm of Gemma 2/3 (paper §5's head map ``W``, App. E.1): recovering its
per-dimension gain ``gamma`` by least squares from the stored update and the output projection.

Why and how the gain enters the head map: the docstring of :mod:`sinkscope.oversmoothing.analysis`
("Post-attention norm").
"""

from __future__ import annotations

import torch

__all__ = ["POST_NORM_EPS", "fit_post_norm_gain", "post_norm_residual_sq", "post_norm_sums"]

#: eps of the post-attention RMSNorm of Gemma 2/3 (not stored in the file).
POST_NORM_EPS = 1e-6


def post_norm_sums(
    update: torch.Tensor, pre_norm: torch.Tensor, eps: float = POST_NORM_EPS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sequence sums of the post-norm gain fit (:func:`fit_post_norm_gain`), float64.

    ``update``, ``pre_norm``: ``(B, P, D)``. Returns ``(sum_t u q, sum_t q^2)`` per dimension,
    each ``(B, D)``, and ``r`` ``(B, P)``, with ``q = pre_norm / r``,
    ``r = sqrt(mean(pre_norm^2) + eps)``; summed over sequences they give ``gamma``.
    """
    q = pre_norm.to(torch.float64, copy=True)
    r = torch.sqrt((q * q).mean(-1) + eps)
    q.div_(r[..., None])
    uq = update.to(torch.float64, copy=True).mul_(q).sum(1)
    return uq, q.square_().sum(1), r


def post_norm_residual_sq(
    gamma: torch.Tensor, uq: torch.Tensor, qq: torch.Tensor, uu: torch.Tensor
) -> torch.Tensor:
    """Squared residual ``sum_t ||u_t - gamma * q_t||^2`` per sequence from the per-dimension
    sums of :func:`post_norm_sums` (``uq``, ``qq``) and ``uu = sum_t u^2`` (each ``(B, D)``,
    float64): ``sum_d gamma^2 qq - 2 gamma uq + uu``. The expansion's rounding is ~1e-16 of
    ``||u||^2``, far below any fit residual of stored (16-bit or float32) updates."""
    return (gamma * gamma * qq - 2 * gamma * uq + uu).sum(-1).clamp_min_(0)


def fit_post_norm_gain(
    update: torch.Tensor, pre_norm: torch.Tensor, eps: float = POST_NORM_EPS
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Recover the gain of a post-attention RMSNorm: ``update ~ gamma * pre_norm / r``.

    ``update``, ``pre_norm``: ``(..., D)``. Returns ``(gamma (D,), r (...), relative residual)``
    with ``r = sqrt(mean(pre_norm^2) + eps)``; ``gamma`` is the per-dimension least-squares fit
    ``sum u q / sum q^2`` (``q = pre_norm / r``, sums over every token).
    """
    dim = pre_norm.shape[-1]
    uq, qq, r = post_norm_sums(update.reshape(1, -1, dim), pre_norm.reshape(1, -1, dim), eps)
    gamma = uq[0] / qq[0].clamp_min(1e-300)
    u = update.to(torch.float64)
    resid = u - gamma * (pre_norm.to(torch.float64) / r.reshape(pre_norm.shape[:-1])[..., None])
    err = float(torch.linalg.norm(resid) / torch.linalg.norm(u).clamp_min(1e-300))
    return gamma, r.reshape(pre_norm.shape[:-1]), err
