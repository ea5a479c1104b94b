"""What the extraction reads off a model besides its outputs: the hooks that keep each layer's
mid residual, the input norm's kind, epsilon and rounding (so that ``h5read`` recomputes ``Z``
exactly), and the learned sink logits of gpt-oss-like heads with their probabilities."""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sinkscope.extraction import h5layout as layout
from sinkscope.extraction import h5read
from sinkscope.prepare.models import (
    architecture_of,
    decoder_layers,
    model_shape,
)

log = logging.getLogger(__name__)

__all__ = [
    "LayerCapture",
    "capture_hooks",
    "has_learned_sinks",
    "input_norm_settings",
    "rms_norm_cast",
    "sink_probabilities",
]


@dataclass
class LayerCapture:
    """Per-layer tensors captured by forward hooks during one batch."""

    mid_residual: list[torch.Tensor | None]


@contextlib.contextmanager
def capture_hooks(model: torch.nn.Module) -> Iterator[LayerCapture]:
    """Register hooks that keep each layer's mid residual (the input of its pre-MLP norm)."""
    arch = architecture_of(model)
    layers = decoder_layers(model)
    capture = LayerCapture([None] * len(layers))
    handles = []
    for index, layer in enumerate(layers):

        def keep_mid(_module, inputs, _output, index=index):
            capture.mid_residual[index] = inputs[0].detach()

        handles.append(getattr(layer, arch.pre_mlp_norm).register_forward_hook(keep_mid))
    try:
        yield capture
    finally:
        for handle in handles:
            handle.remove()


def input_norm_settings(model: torch.nn.Module) -> dict[str, Any]:
    """File attributes ``input_norm``, ``input_norm_eps``, ``input_norm_cast`` of the model's
    attention input norms (:func:`sinkscope.extraction.h5read.input_norm` recomputes ``Z`` with them).

    ``torch.nn.LayerNorm`` (GPT-2) is ``"layer"`` (it rounds its output once: ``"after_gain"``);
    the RMS norms of Llama-style models and Gemma are ``"rms"``, and where they round in a 16-bit
    forward is measured, not assumed from the family (:func:`rms_norm_cast`). Every layer must
    agree.
    """
    arch = architecture_of(model)
    settings = []
    for layer in decoder_layers(model):
        norm = getattr(layer, arch.input_norm)
        if isinstance(norm, torch.nn.LayerNorm):
            if not norm.elementwise_affine:
                raise ValueError(f"{type(model).__name__}: a LayerNorm without gain")
            kind, eps, cast = "layer", float(norm.eps), "after_gain"
        else:
            eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
            if eps is None:
                raise ValueError(f"{type(norm).__name__}: cannot find the norm's epsilon")
            kind, cast = "rms", rms_norm_cast(norm, float(eps), arch.gain_offset)
        settings.append(
            {
                layout.ATTR_INPUT_NORM: kind,
                layout.ATTR_INPUT_NORM_EPS: float(eps),
                layout.ATTR_INPUT_NORM_CAST: cast,
            }
        )
    if any(entry != settings[0] for entry in settings):
        raise ValueError(f"{type(model).__name__}: the layers' input norms differ: {settings}")
    return settings[0]


def rms_norm_cast(norm: torch.nn.Module, eps: float, gain_offset: float) -> str:
    """Where an RMS norm module rounds in a 16-bit forward: ``"before_gain"`` (``LlamaRMSNorm``:
    ``w * norm(x).to(dtype)``) or ``"after_gain"`` (``Gemma3RMSNorm``: ``(norm(x) * (1 + w))
    .to(dtype)``), found by running a bfloat16 copy of the module on a fixed probe and comparing
    its output with :func:`sinkscope.extraction.h5read.input_norm` under each cast.

    The cast that reproduces the module (at least 99 % of the entries bit for bit, as the
    extraction tests require of ``Z``) is returned; when both do (a gain that rounding commutes
    with, e.g. all ones), they give the same ``Z`` and the first is returned. A norm that neither
    reproduces raises ValueError naming its class.
    """
    module = copy.deepcopy(norm).to(device="cpu", dtype=torch.bfloat16)  # the probe's device
    weight = getattr(module, "weight", None)
    if weight is None:
        raise ValueError(f"{type(norm).__name__}: an RMS norm without gain")
    gain = weight.detach().float().numpy() + gain_offset
    generator = torch.Generator().manual_seed(0)
    probe = (4 * torch.randn(64, gain.shape[0], generator=generator)).to(torch.bfloat16)
    with torch.no_grad():
        output = module(probe).float().numpy()
    x, bias = probe.float().numpy(), np.zeros_like(gain)
    agreement = {
        cast: float(
            np.mean(h5read.input_norm(x, gain, bias, "rms", eps, cast, "bfloat16") == output)
        )
        for cast in layout.NORM_CASTS
    }
    best = max(layout.NORM_CASTS, key=lambda cast: agreement[cast])  # first on a tie
    if agreement[best] < 0.99:
        raise ValueError(
            f"{type(norm).__name__}: no input_norm_cast reproduces its bfloat16 output "
            f"(agreement {agreement}); sinkscope.extraction.h5read.input_norm needs a new case"
        )
    return best


def has_learned_sinks(model: torch.nn.Module) -> bool:
    """Whether every layer's attention has a learned per-head sink logit: a tensor ``sinks`` of
    shape ``(H,)`` on its attention module (transformers' ``GptOssAttention``), which eager
    attention appends as one more column of each row's scores before the softmax and then drops.

    A model where only some layers have one is refused (the dataset is per layer).
    """
    n_heads = model_shape(model.config).n_heads
    found = []
    for layer in decoder_layers(model):
        attention = getattr(layer, "self_attn", None)
        sinks = getattr(attention, "sinks", None)
        found.append(isinstance(sinks, torch.Tensor) and tuple(sinks.shape) == (n_heads,))
    if any(found) and not all(found):
        raise ValueError(
            f"{type(model).__name__}: only layers {[i for i, f in enumerate(found) if f]} have "
            "learned attention sinks; sinkscope stores attention/sink_probs for all layers or none"
        )
    return bool(found) and all(found)


def sink_probabilities(probs: torch.Tensor) -> torch.Tensor:
    """Each row's probability of the learned sink, ``p_sink = 1 - sum_k A[q, k]``, for attention
    probabilities ``probs`` ``(B, H, T1, T1)`` whose sink column was dropped after the softmax
    (gpt-oss: ``softmax([scores, s_h])[..., :-1]``). Summed in float64, clamped to [0, 1] (float
    rounding of an almost-full row); shape ``(B, H, T1)``, float64.
    """
    return (1.0 - probs.to(torch.float64).sum(dim=-1)).clamp_(0.0, 1.0)
