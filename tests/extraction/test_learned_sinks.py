"""Extraction of a model with learned attention sinks (transformers' GptOss: one sink logit per
head, appended to each row's scores, softmaxed with them, then dropped), on a tiny random
configuration built in-process (no download).

Checked against an independent float64 recomputation from the module's own inputs (its query
and key projections, rotary embedding, causal or sliding-window mask and ``sinks``): the stored
``attention/probs`` and ``attention/sink_probs`` are the softmax over ``[scores, s_h]``, and each
row of probabilities plus its sink probability sums to 1. A model without sinks gets no
``attention/sink_probs``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sinkscope.extraction import h5layout, h5read
from sinkscope.extraction.introspection import has_learned_sinks, sink_probabilities
from sinkscope.prepare.models import decoder_layers
from tests.conftest import extract_tiny
from tests.extraction.conftest import forward_with_hooks


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory: pytest.TempPathFactory):
    return extract_tiny("gpt_oss", tmp_path_factory.mktemp("gpt_oss"))


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """GptOss's rotary embedding (the two halves of each head's vector rotated as pairs)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def _project(hidden: np.ndarray, linear: torch.nn.Linear, heads: int, hd: int) -> np.ndarray:
    """``hidden @ W^T + b`` in float64, split into heads: (N, heads, T1, hd)."""
    n, t1, _ = hidden.shape
    w = linear.weight.detach().double().numpy()
    b = linear.bias.detach().double().numpy()
    return (hidden @ w.T + b).reshape(n, t1, heads, hd).transpose(0, 2, 1, 3)


def _reference_softmax(model: torch.nn.Module, ids: np.ndarray) -> list[np.ndarray]:
    """Per layer, softmax([q k^T / sqrt(hd) + mask, s_h]) in float64 from the inputs each
    attention module receives in a plain forward: (N, H, T1, T1 + 1), the sink last."""
    inputs: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    handles = []
    for index, layer in enumerate(decoder_layers(model)):

        def keep(_module, args, kwargs, index=index):
            hidden = kwargs.get("hidden_states", args[0] if args else None)
            cos, sin = kwargs["position_embeddings"]
            inputs[index] = (hidden.detach(), cos.detach(), sin.detach())

        handles.append(layer.self_attn.register_forward_pre_hook(keep, with_kwargs=True))
    forward_with_hooks(model, ids, handles)
    config = model.config
    n_heads, n_kv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    references = []
    for index, layer in enumerate(decoder_layers(model)):
        attention = layer.self_attn
        hidden, cos, sin = (t.double().numpy() for t in inputs[index])
        n, t1, _ = hidden.shape

        q = _rotate(_project(hidden, attention.q_proj, n_heads, hd), cos[:, None], sin[:, None])
        k = _rotate(_project(hidden, attention.k_proj, n_kv, hd), cos[:, None], sin[:, None])
        k = np.repeat(k, n_heads // n_kv, axis=1)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
        query, key = np.arange(t1)[:, None], np.arange(t1)[None, :]
        allowed = key <= query
        if config.layer_types[index] == "sliding_attention":
            allowed &= query - key < config.sliding_window
        scores = np.where(allowed, scores, -np.inf)
        sinks = attention.sinks.detach().double().numpy()
        logits = np.concatenate(
            [scores, np.broadcast_to(sinks[None, :, None, None], (n, n_heads, t1, 1))], axis=-1
        )
        logits -= logits.max(axis=-1, keepdims=True)
        weights = np.exp(logits)
        references.append(weights / weights.sum(axis=-1, keepdims=True))
    return references


def test_probs_and_sink_probs_are_the_softmax_with_the_sink(gpt_oss) -> None:
    _, path, model, ids = gpt_oss
    references = _reference_softmax(model, ids)
    with h5layout.open_activations(path) as f:
        assert h5layout.ATTENTION_SINK_PROBS in f
        sink_ds = f[h5layout.ATTENTION_SINK_PROBS]
        n_layers, n_seq, n_heads, t1 = sink_ds.shape
        assert (n_layers, n_seq, n_heads, t1) == (2, 3, 4, 21)
        spec = h5layout.spec_of(h5layout.ATTENTION_SINK_PROBS)
        assert h5layout.read_attr(sink_ds, h5layout.ATTR_AXES) == ",".join(spec.axes)
        for layer in range(n_layers):
            probs = f[h5layout.ATTENTION_PROBS][layer].astype(np.float64)
            p_sink = sink_ds[layer].astype(np.float64)
            reference = references[layer]
            np.testing.assert_allclose(probs, reference[..., :-1], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(p_sink, reference[..., -1], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(probs.sum(axis=-1) + p_sink, 1.0, rtol=0, atol=1e-6)
            # the sink takes a real share (else the checks above would hold for p_sink = 0)
            assert p_sink[:, :, 0].min() > 0.2 and p_sink.mean() > 0.02
        # layer 0 slides (window 8): the rows far from BOS cannot see it
        assert np.all(f[h5layout.ATTENTION_PROBS][0][:, :, 8:, 0] == 0)
        assert np.any(f[h5layout.ATTENTION_PROBS][1][:, :, 8:, 0] > 0)


def test_head_decomposition_with_learned_sinks(gpt_oss) -> None:
    """sum_h W_O[h] (A_h V_h) + o_proj bias equals the stored residual update: the rows of A that
    miss the sink's mass carry exactly the head's output."""
    _, path, model, _ = gpt_oss
    with h5layout.open_activations(path) as f:
        for index, layer in enumerate(decoder_layers(model)):
            values = h5read.read_values(f, index, slice(None))
            group = int(f.attrs["n_heads"]) // int(f.attrs["n_kv_heads"])
            values = np.repeat(values, group, axis=1)
            probs = f[h5layout.ATTENTION_PROBS][index]
            w_o = f[h5layout.WEIGHT_W_O][index]
            heads = np.einsum("nhqk,nhkv,hdv->nqd", probs, values, w_o)
            expected = heads + layer.self_attn.o_proj.bias.detach().numpy()
            update = f[h5layout.ATTENTION_RESIDUAL_UPDATE][index]
            np.testing.assert_allclose(update, expected, rtol=1e-4, atol=1e-5)


def test_a_model_without_sinks_stores_none(tmp_path: Path) -> None:
    _, path, model, _ = extract_tiny("llama", tmp_path)
    assert not has_learned_sinks(model)
    with h5layout.open_activations(path) as f:
        assert h5layout.ATTENTION_SINK_PROBS not in f
        rows = f[h5layout.ATTENTION_PROBS][...].sum(axis=-1)
        np.testing.assert_allclose(rows, 1.0, atol=1e-6)


def test_sinks_on_some_layers_only_are_refused(gpt_oss) -> None:
    _, _, model, _ = gpt_oss
    assert has_learned_sinks(model)
    layer = decoder_layers(model)[1].self_attn
    sinks = layer.sinks
    del layer.sinks
    try:
        with pytest.raises(ValueError, match="only layers \\[0\\]"):
            has_learned_sinks(model)
    finally:
        layer.sinks = sinks


def test_sink_probabilities_is_the_missing_row_mass() -> None:
    rows = torch.tensor([[[[0.25, 0.5, 0.0], [1.0, 0.0, 0.0], [0.6, 0.4, 1e-9]]]])
    np.testing.assert_allclose(sink_probabilities(rows).numpy(), [[[0.25, 0.0, 0.0]]], atol=1e-8)
    assert sink_probabilities(rows).dtype == torch.float64


def test_the_other_families_checks_hold_for_gpt_oss(gpt_oss, tmp_path: Path) -> None:
    """X and A against a plain forward, Z and the values against the model's own modules (float32
    and a bfloat16 forward, whose norms transformers keeps in float32 for GptOss), W_VO's reader."""
    from tests.extraction import test_extract as generic

    generic.test_stored_tensors_match_a_plain_forward(gpt_oss)
    generic.test_recomputed_z_and_values_equal_the_models_own(gpt_oss)
    generic.test_recomputed_z_and_values_follow_a_bfloat16_forward(gpt_oss, tmp_path)
    generic.test_w_vo_reader_matches_factors(gpt_oss)
    with h5layout.open_activations(tmp_path / "bf16.h5") as f:  # the bfloat16 file
        rows = f[h5layout.ATTENTION_PROBS][...].astype(np.float64).sum(axis=-1)
        p_sink = f[h5layout.ATTENTION_SINK_PROBS][...].astype(np.float64)
        np.testing.assert_allclose(rows + p_sink, 1.0, rtol=0, atol=1e-6)
