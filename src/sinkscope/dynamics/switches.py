"""Other attention switches than a sink (§6, Proposition 6.1's prediction): softmax heads that can turn themselves off
without parking their mass on BOS.

The main study's thesis (§6, Proposition 6.1) is that a sink is the head's attention switch:
softmax must put a whole unit of mass on the keys, and a head with nothing to do parks it on
BOS, whose value output is ~0. Each variant here gives a softmax head another way to deliver
less than a unit of value mass; the induction model (:mod:`.induction`) takes one through its
``switch`` spec key (``"none"``, the default, is Table 1's softmax unchanged). With scores
``s_ij = q_i k_j / sqrt(d_h)`` over the causal keys ``j <= i``:

``sink_logit`` (gpt-oss's learned attention sinks)
    A learned logit ``b_h`` per head is appended to every row's scores, softmaxed with them and
    dropped: ``A_ij = e^{s_ij} / (e^{b_h} + sum_k e^{s_ik})``, so the row sums to
    ``1 - p_sink`` with ``p_sink = e^{b_h} / (e^{b_h} + sum_k e^{s_ik})``
    (:func:`softmax_with_slot`). ``b_h = 0`` is the "softmax plus one" of the off-by-one
    proposal. Initialised at 0.
``gate_head`` / ``gate_element`` (gated attention, Qwen3-Next)
    The head's output is multiplied by a sigmoid gate computed from the token's attention input
    ``x_i`` (after the block's first LayerNorm): ``o_i = sigma(x_i W_g + c) * sum_j A_ij v_j``
    with ``A`` plain softmax; one gate per head and token (``gate_head``, ``W_g`` is
    ``hidden x H``) or one per head dimension (``gate_element``, ``hidden x hidden``)
    (:func:`output_gate`). ``W_g, c`` have PyTorch's ``nn.Linear`` initialisation (gates start
    near 0.5).
``softpick`` (rectified softmax)
    Softmax is replaced by ``relu(e^{s_ij} - 1) / (sum_k |e^{s_ik} - 1| + eps)``
    (:func:`softpick`, ``eps`` = :data:`SOFTPICK_EPS`): scores ``<= 0`` get no weight, rows sum
    to at most 1 and to 0 when every score is ``<= 0``. No parameters.
``kv_bias`` (a learnable key/value bias: an explicit extra token)
    Every head has a learned key ``k_0`` and value ``v_0`` in a slot that every query sees (also
    under causal masking): ``o_i = a_i0 v_0 + sum_j A_ij v_j`` with
    ``(a_i0, A_i.) = softmax(q_i k_0 / sqrt(d_h), s_i.)``, so the real keys receive
    ``1 - a_i0`` (:func:`softmax_with_slot`). ``k_0, v_0`` start ``N(0, 1 / hidden)``, as
    PyTorch's ``add_bias_kv`` (``xavier_normal_`` of a ``(1, 1, hidden)`` tensor).

The weights a switched head returns (and :mod:`.induction` measures) are, as for Table 1, the
weights that multiply the values of the real positions: their missing row mass
``1 - sum_j A_ij`` is the mass the head sends to its switch (``p_sink``, ``a_i0``, softpick's
missing mass). For the gates the returned weights are the gated ones, ``g_i A_ij`` with ``g_i``
the head's gate (its mean over the head dimensions for ``gate_element``), whose row sum is the
(mean) gate: the switch mass is ``1 - g_i``, and ``gate_head``'s weights multiply the values
exactly (``o_i = sum_j g_i A_ij v_j``).

Positional encodings
    Rotary phases are applied to the real queries and keys only: the sink logit, the gate and
    the bias slot's key ``k_0`` have no position (the slot is not a token of the sequence), as
    in gpt-oss, whose sinks are per-head scalars. Absolute positions enter through ``x``.
Weight decay
    The switch parameters are decayed with the rest: the study's AdamW applies ``lambda`` to
    every parameter (biases, LayerNorms and embeddings included), so a switch gets the same
    regularisation as the BOS route it competes with. With ``lambda > 0`` the decay pulls
    ``b_h`` and ``k_0`` towards 0, i.e. towards ``p_sink`` and ``a_i0`` of a slot scored like a
    key orthogonal to the query, and ``W_g`` towards a gate of ``sigma(c)``.
Random stream
    The switch parameters are created without drawing random numbers and initialised by
    :meth:`HeadSwitch.reset_parameters` after all other parameters of the model, so a seed gives
    the other parameters the same initial values with and without a switch (and a model without
    a switch is the one of Table 1, bit for bit).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sinkscope.dynamics.attention import attention_weights, key_mask, scaled_dot
from sinkscope.dynamics.grids import SWITCHES

__all__ = [
    "SOFTPICK_EPS",
    "HeadSwitch",
    "output_gate",
    "softmax_with_slot",
    "softpick",
]

#: Softpick's ``eps`` (the reference implementation's default), in the units of the naive form.
SOFTPICK_EPS = 1e-8


def softmax_with_slot(
    logits: torch.Tensor, mask: torch.Tensor, slot: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax of every row's scores together with one extra slot logit, the slot dropped.

    ``logits (..., T, S)`` with ``mask (T, S)`` (masked keys get no weight), ``slot`` broadcast
    to ``(..., T, 1)`` (a per-head sink logit ``b_h`` of shape ``(H, 1, 1)``, or the bias key's
    scores ``q_i k_0 / sqrt(d_h)``). Returns the weights of the keys ``(..., T, S)``, which sum
    to ``1 - p``, and the slot's weight ``p (..., T, 1)``,
    ``p = e^{slot} / (e^{slot} + sum_j e^{s_ij})``.
    """
    masked = logits.masked_fill(~mask, float("-inf"))
    full = torch.softmax(torch.cat([masked, slot.expand(*logits.shape[:-1], 1)], dim=-1), dim=-1)
    return full[..., :-1], full[..., -1:]


def softpick(scores: torch.Tensor, mask: torch.Tensor, eps: float = SOFTPICK_EPS) -> torch.Tensor:
    """Softpick weights ``relu(e^{s_j} - 1) / (sum_k |e^{s_k} - 1| + eps)`` of every row of
    ``scores (..., T, S)``; masked keys (``mask (T, S)`` False) add nothing to either sum.

    Computed as ``relu(e^{s_j - m} - e^{-m}) / (sum_k |e^{s_k - m} - e^{-m}| + eps e^{-m})`` with
    ``m`` the row's largest unmasked score clamped at 0: numerator and denominator are the naive
    ones times ``e^{-m}``, so the value is the same (``eps`` included, which the reference
    implementation adds after the rescaling) while no exponential exceeds 1. ``m`` is a
    constant of the identity, so it is detached.
    """
    s = scores.masked_fill(~mask, 0.0)
    m = s.amax(dim=-1, keepdim=True).clamp_min(0.0).detach()
    shift = torch.exp(-m)
    e = (torch.exp(s - m) - shift).masked_fill(~mask, 0.0)
    return torch.relu(e) / (e.abs().sum(dim=-1, keepdim=True) + eps * shift)


def output_gate(x: torch.Tensor, gate: nn.Linear, n_heads: int) -> torch.Tensor:
    """Gated attention's gate ``sigma(x W_g + c)`` as ``(B, H, T, n)`` from the attention input
    ``x (B, T, hidden)``: ``n = 1`` for a head-wise gate (``gate`` maps to ``H``), ``d_h`` for an
    element-wise one (``gate`` maps to ``hidden``, head ``h`` owns dims ``h d_h .. (h+1) d_h``)."""
    B, T, _ = x.shape
    return torch.sigmoid(gate(x)).view(B, T, n_heads, -1).transpose(1, 2)


class HeadSwitch(nn.Module):
    """The per-head switch of a softmax attention layer (module docstring): its parameters and
    the attention it replaces, ``forward(x, q, k, v, causal) -> (output (B, H, T, d_h), weights
    (B, H, T, T))``, the weights being those of the real positions (their missing row mass is
    the switch mass)."""

    def __init__(self, switch: str, hidden: int, n_heads: int) -> None:
        super().__init__()
        if switch not in SWITCHES[1:]:
            raise ValueError(f"unknown switch {switch!r}; known: {SWITCHES}")
        self.kind = switch
        self.h = n_heads
        self.hidden = hidden
        dh = hidden // n_heads
        # created without drawing random numbers; reset_parameters draws them
        self.sink = nn.Parameter(torch.zeros(n_heads)) if switch == "sink_logit" else None
        self.gate = (
            nn.utils.skip_init(nn.Linear, hidden, n_heads if switch == "gate_head" else hidden)
            if switch in ("gate_head", "gate_element")
            else None
        )
        self.kv = nn.Parameter(torch.zeros(2, n_heads, dh)) if switch == "kv_bias" else None

    def reset_parameters(self) -> None:
        """Initialise the switch (module docstring): sink logits 0, the gate as ``nn.Linear``,
        the bias key and value ``N(0, 1 / hidden)``."""
        if self.sink is not None:
            nn.init.zeros_(self.sink)
        if self.gate is not None:
            self.gate.reset_parameters()
        if self.kv is not None:
            nn.init.normal_(self.kv, std=1.0 / math.sqrt(self.hidden))

    def forward(
        self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.gate is not None:
            att = attention_weights(q, k, "softmax", True, causal=causal)
            g = output_gate(x, self.gate, self.h)
            return g * (att @ v), g.mean(dim=-1, keepdim=True) * att
        logits = scaled_dot(q, k)
        mask = key_mask(q.shape[-2], causal, q.device)
        if self.kind == "softpick":
            att = softpick(logits, mask)
            return att @ v, att
        if self.kind == "sink_logit":
            att, _ = softmax_with_slot(logits, mask, self.sink.view(-1, 1, 1))
            return att @ v, att
        k0, v0 = self.kv[0][:, None, :], self.kv[1][:, None, :]  # kv_bias: (H, 1, d_h) each
        att, a0 = softmax_with_slot(logits, mask, scaled_dot(q, k0))
        return att @ v + a0 * v0, att
