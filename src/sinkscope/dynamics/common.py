"""Pieces shared by the training-dynamics experiments (:mod:`.induction`,
:mod:`.classification`): the attention functions of Table 1 and the transformer block built on
them (whose softmax heads can take one of the other switches of :mod:`.switches`). The grid
helpers (stable job ids, ``select_specs``, ``dynamics_jobs``) live in the torch-free
:mod:`.grids` and are re-exported here.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sinkscope.dynamics.grids import (
    ATTENTION_FUNCTIONS,
    DYNAMICS_PARTS,
    digest,
    dynamics_jobs,
    select_specs,
)

__all__ = [
    "ATTENTION_FUNCTIONS",
    "DYNAMICS_PARTS",
    "SelfAttention",
    "TransformerBlock",
    "attention_weights",
    "digest",
    "dynamics_jobs",
    "elu_plus_one",
    "key_mask",
    "rope",
    "scaled_dot",
    "select_specs",
]


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


class SelfAttention(nn.Module):
    """Multi-head self-attention with the attention function of Table 1 (returns the output and
    the weights ``(B, H, T, T)`` that multiply the values).

    ``switch`` (softmax only) gives every head one of the other switches of :mod:`.switches`
    (``"none"``: plain Table 1 attention). Its parameters are created after, and without drawing
    from, the random stream of the other parameters; the model initialises them last with
    :meth:`.switches.HeadSwitch.reset_parameters`, so that a seed gives the same other
    parameters with and without a switch.
    """

    def __init__(
        self,
        hidden: int,
        n_heads: int,
        attention: str,
        normalize: bool,
        rotary: bool = False,
        causal: bool = True,
        switch: str = "none",
    ) -> None:
        super().__init__()
        if hidden % n_heads:
            raise ValueError(f"hidden={hidden} is not a multiple of n_heads={n_heads}")
        if attention not in ATTENTION_FUNCTIONS:
            raise ValueError(f"unknown attention {attention!r}; known: {ATTENTION_FUNCTIONS}")
        self.h = n_heads
        self.dh = hidden // n_heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.attention = attention
        self.normalize = normalize or attention == "softmax"
        self.rotary = rotary
        self.causal = causal
        self.mlp = (
            nn.Sequential(nn.Linear(self.dh, self.dh), nn.ReLU(), nn.Linear(self.dh, self.dh))
            if attention == "mlp"
            else None
        )
        self.switch = None
        if switch != "none":
            if attention != "softmax":
                raise ValueError(f"switch {switch!r} needs softmax attention, not {attention!r}")
            from sinkscope.dynamics.switches import HeadSwitch  # it imports this module

            self.switch = HeadSwitch(switch, hidden, n_heads)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        if self.rotary:
            q, k = rope(q), rope(k)
        if self.switch is None:
            att = attention_weights(q, k, self.attention, self.normalize, self.mlp, self.causal)
            y = att @ v
        else:
            y, att = self.switch(x, q, k, v, self.causal)
        return self.out(y.transpose(1, 2).reshape(B, T, D)), att


class TransformerBlock(nn.Module):
    """Pre-LN block ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))`` (GELU, ``ffn`` wide); the
    LayerNorms become identities without ``use_layernorm``, the MLP is skipped without
    ``use_mlp``; ``switch`` is :class:`SelfAttention`'s. ``forward`` returns the new residual
    stream and the attention weights."""

    def __init__(
        self,
        hidden: int,
        ffn: int,
        n_heads: int,
        attention: str = "softmax",
        normalize: bool = True,
        rotary: bool = False,
        causal: bool = True,
        use_layernorm: bool = True,
        use_mlp: bool = True,
        switch: str = "none",
    ) -> None:
        super().__init__()
        norm = nn.LayerNorm if use_layernorm else nn.Identity
        self.ln1 = norm(hidden)
        self.attn = SelfAttention(hidden, n_heads, attention, normalize, rotary, causal, switch)
        self.use_mlp = use_mlp
        if use_mlp:
            self.ln2 = norm(hidden)
            self.mlp = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, att = self.attn(self.ln1(x))
        x = x + a
        if self.use_mlp:
            x = x + self.mlp(self.ln2(x))
        return x, att
