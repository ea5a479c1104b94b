"""The attention functions of Table 1 of the companion paper (value-softmax polarization),
shared by the transformer block of :mod:`.common` and the other switches of :mod:`.switches`:
the scaled scores, the causal key mask, the normalised and unnormalised attention weights, and
rotary positions.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["attention_weights", "elu_plus_one", "key_mask", "rope", "scaled_dot"]


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    attention: str,
    normalize: bool,
    mlp: nn.Module | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """Attention weights ``(..., T, T)`` of Table 1 from ``q, k`` of shape ``(..., T, d_h)``.

    With ``causal`` the masked (future) entries are exactly 0 and the normalisation runs over
    ``j <= i``; otherwise over all ``T`` keys. ``mlp`` is the feature map of ``attention="mlp"``.
    """
    mask = key_mask(q.shape[-2], causal, q.device)
    if attention == "softmax":
        return torch.softmax(scaled_dot(q, k).masked_fill(~mask, float("-inf")), dim=-1)
    if attention == "sigmoid":
        s = torch.sigmoid(scaled_dot(q, k))
    elif attention == "elu":
        s = elu_plus_one(scaled_dot(q, k))
    elif attention == "elu_elu":
        s = scaled_dot(elu_plus_one(q), elu_plus_one(k))
    elif attention == "mlp":
        if mlp is None:
            raise ValueError("attention='mlp' needs its feature map")
        s = scaled_dot(mlp(q), mlp(k))
    elif attention == "linear":
        s = scaled_dot(q, k)
    else:
        raise ValueError(f"unknown attention {attention!r}")
    s = s.masked_fill(~mask, 0.0)
    if not normalize:
        return s
    total = s.sum(dim=-1, keepdim=True)
    if attention in ("mlp", "linear"):
        total = torch.clamp(total, min=1.0)  # max(sum, 1) of Table 1
    else:  # positive scores: guard rows whose scores all underflow to 0
        total = torch.clamp(total, min=1e-30)
    return s / total


def key_mask(T: int, causal: bool, device: torch.device) -> torch.Tensor:
    """``(T, T)`` bool: the keys ``j`` query ``i`` sees (``j <= i`` with ``causal``, else all)."""
    mask = torch.ones(T, T, dtype=torch.bool, device=device)
    return mask.tril() if causal else mask


def scaled_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Table 1's scaled scores ``a b^T / sqrt(d_h)``: ``(..., T, S)`` from ``a (..., T, d_h)`` and
    ``b (..., S, d_h)``."""
    return (a @ b.transpose(-1, -2)) * (1.0 / math.sqrt(a.shape[-1]))


def elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    """``elu(x) + 1`` without the cancellation of ``(exp(x) - 1) + 1``, which is exactly 0 in
    float32 for ``x < -17`` and made normalised elu attention divide 0 by 0."""
    return torch.where(x > 0, x + 1.0, torch.exp(torch.clamp(x, max=0.0)))


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding on the last dim of ``x`` (..., T, d_h), half-split convention."""
    T, dh = x.shape[-2], x.shape[-1]
    half = dh // 2
    freq = 10_000.0 ** (-torch.arange(half, dtype=x.dtype) / half)
    ang = torch.arange(T, dtype=x.dtype)[:, None] * freq[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
