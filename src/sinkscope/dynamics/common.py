"""Pieces shared by the training-dynamics experiments (:mod:`.induction`,
:mod:`.classification`): the transformer block built on the attention functions of Table 1
(:mod:`.attention`), whose softmax heads can take one of the other switches of :mod:`.switches`.
The grid helpers (stable job ids, ``select_specs``, ``dynamics_jobs``) live in the torch-free
:mod:`.grids` and are re-exported here.
"""

from __future__ import annotations

import torch
from torch import nn

from sinkscope.dynamics.attention import attention_weights, rope
from sinkscope.dynamics.grids import (
    ATTENTION_FUNCTIONS,
    DYNAMICS_PARTS,
    digest,
    dynamics_jobs,
    select_specs,
)
from sinkscope.dynamics.switches import HeadSwitch

__all__ = [
    "ATTENTION_FUNCTIONS",
    "DYNAMICS_PARTS",
    "SelfAttention",
    "TransformerBlock",
    "digest",
    "dynamics_jobs",
    "select_specs",
]


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
