"""Streaming evaluation under KV-cache eviction (:mod:`sinkscope.streaming.cache`, run by
:class:`sinkscope.streaming.evaluator.StreamingEvaluator`).

The evicting cache is checked against a brute-force recomputation: one full forward pass over the
whole stream (no cache) with an attention function that, for every (query, key) pair, applies the
policy's visibility and the StreamingLLM in-cache positions literally (the key's rank in the
query's kept set, the query at rank ``|kept| - 1``), by re-rotating each key per pair.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AttentionInterface

from sinkscope.streaming.cache import Policy, rope_rotate
from sinkscope.streaming.evaluator import StreamingEvaluator
from tests.streaming.tiny import (
    BF16_NLL_MAX_TOL,
    BF16_NLL_MEAN_TOL,
    SMALL_PARAMS,
    T,
    TorchSpy,
    reference_nll,
    streams,
    tiny_model,
)

# ------------------------------------------------------------------- brute-force reference


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class BruteForce:
    """Visibility and literal in-cache positions per (query, key) for one policy.

    The combined sequence is ``[neutral] * k + stream`` for neutral policies (the neutral tokens at
    positions 0..k-1, seeing only each other), else the stream.
    """

    def __init__(self, evaluator, policy: Policy, length: int, neutral: bool):
        self.policy = policy
        k, window = policy.n_sink, policy.window
        n_pre = k if neutral else 0
        total = n_pre + length
        pos = np.array(list(range(n_pre)) + list(range(length)))
        kept = []  # per combined query: the kept set (combined indices), sorted by position
        for a in range(total):
            if a < n_pre:
                kept.append(list(range(a + 1)))
                continue
            t = a - n_pre
            if window is None or t < k + window:
                keep = list(range(n_pre, a + 1))
            else:
                sinks = list(range(k)) if neutral else list(range(n_pre, n_pre + k))
                keep = sinks + [n_pre + s for s in range(t - window + 1, t + 1)]
            kept.append(keep)
        self.n_pre, self.position_ids = n_pre, torch.tensor(pos)[None]
        self.visible = {}
        self.delta = torch.zeros(total, total, dtype=torch.float64)
        for layer, native in enumerate(evaluator.native_windows):
            vis = torch.zeros(total, total, dtype=torch.bool)
            for a, keep in enumerate(kept):
                for b in keep:
                    if native is None or pos[a] - pos[b] < native:
                        vis[a, b] = True
            self.visible[layer] = vis
        for a, keep in enumerate(kept):
            for rank, b in enumerate(keep):
                if policy.positions == "cache":
                    pq, pk = len(keep) - 1, rank
                else:
                    pq, pk = pos[a], pos[b]
                # the model rotated q at pos[a] and k at pos[b]; the literal offset is pk - pq
                self.delta[a, b] = (pk - pq) - (pos[b] - pos[a])
        self.inv_freqs = evaluator.inv_freqs

    def attention(
        self, module, query, key, value, attention_mask, scaling=None, s_aux=None, **kwargs
    ):
        layer = module.layer_idx
        inv = self.inv_freqs[layer].double()
        angles = self.delta[..., None] * inv  # (A, B, hd/2)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(key.dtype), emb.sin().to(key.dtype)
        k_pair = key[:, :, None] * cos + _rotate_half(key)[:, :, None] * sin  # (b, K, A, B, hd)
        batch, heads, q_len, hd = query.shape
        group = heads // key.shape[1]
        q = query.reshape(batch, key.shape[1], group, q_len, hd)
        scores = torch.einsum("nkgad,nkabd->nkgab", q, k_pair) * scaling
        scores = scores.masked_fill(~self.visible[layer], float("-inf"))
        if s_aux is not None:  # gpt-oss: one more logit per head, dropped after the softmax
            sink = s_aux.reshape(1, key.shape[1], group, 1, 1).expand(*scores.shape[:-1], 1)
            scores = torch.cat([scores, sink.to(scores.dtype)], dim=-1)
        probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
        if s_aux is not None:
            probs = probs[..., :-1]
        out = torch.matmul(probs, value[:, :, None]).reshape(batch, heads, q_len, hd)
        return out.transpose(1, 2).contiguous(), None


def brute_force_nll(family, policy: Policy, ids: torch.Tensor, neutral_id: int | None):
    model = tiny_model(family)
    evaluator = StreamingEvaluator(model)  # only for layer types and RoPE frequencies
    neutral = policy.kind == "neutral"
    brute = BruteForce(evaluator, policy, ids.shape[1], neutral)
    AttentionInterface.register("sinkscope_test_bruteforce", brute.attention)
    model.set_attn_implementation("sinkscope_test_bruteforce")
    full = ids
    if neutral:
        prefix = torch.full((ids.shape[0], policy.n_sink), neutral_id, dtype=ids.dtype)
        full = torch.cat([prefix, ids], dim=1)
    with torch.no_grad():
        logits = model(full, position_ids=brute.position_ids).logits.float()
    logp = torch.log_softmax(logits[:, brute.n_pre :], dim=-1)
    return -logp[:, :-1].gather(2, ids[:, 1:, None])[..., 0]


POLICIES = [
    Policy("window_L8", "window", 0, 8),
    Policy("sink1_L8", "sink", 1, 8),
    Policy("sink3_L6", "sink", 3, 6),
    Policy("neutral2_L8", "neutral", 2, 8),
    Policy("sink2_L8_orig", "sink", 2, 8, positions="original"),
    Policy("sink2_L12", "sink", 2, 12),  # wider than the tiny Gemma's own window (8)
]


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_oss"])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_cache_matches_brute_force(family, policy):
    model = tiny_model(family)
    ids = streams(model)
    neutral_id = 5
    evaluator = StreamingEvaluator(model, chunk_size=7)
    states = evaluator.sink_states(neutral_id, 4)
    ours = evaluator.run(ids, policy, neutral_states=states).nll
    expected = brute_force_nll(family, policy, ids, neutral_id)
    torch.testing.assert_close(ours, expected, rtol=0, atol=2e-5)
    dense = reference_nll(tiny_model(family), ids)
    # the policy really evicts: after the first eviction it differs from dense
    t0 = policy.first_eviction
    assert torch.equal(ours[:, :t0].isnan(), torch.zeros_like(ours[:, :t0], dtype=torch.bool))
    torch.testing.assert_close(ours[:, :t0], dense[:, :t0], rtol=0, atol=2e-5)
    assert (ours[:, t0:] - dense[:, t0:]).abs().max() > 1e-3


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_oss"])
def test_policies_with_a_window_as_long_as_the_stream_equal_dense(family):
    ids = streams(tiny_model(family))
    kernels = ("eager",) if family == "gpt_oss" else ("eager", "sdpa")  # GptOss: no SDPA
    expected = {attn: reference_nll(tiny_model(family, attn), ids) for attn in kernels}
    for attn in kernels:
        torch.testing.assert_close(expected["eager"], expected[attn], rtol=0, atol=1e-5)
    evaluator = StreamingEvaluator(tiny_model(family), chunk_size=16)
    states = evaluator.sink_states(7, 4)
    for policy in (
        Policy("dense", "dense"),
        Policy("window", "window", 0, T),
        Policy("sink", "sink", 4, T),
        Policy("neutral", "neutral", 4, T),
        Policy("sink_orig", "sink", 1, T + 5, positions="original"),
    ):
        nll = evaluator.run(ids, policy, neutral_states=states).nll
        torch.testing.assert_close(nll, expected["eager"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_chunked_equals_token_by_token_and_snapshot_equals_scratch(family):
    model = tiny_model(family)
    ids = streams(model, n=3)
    evaluator = StreamingEvaluator(model)
    states = evaluator.sink_states(9, 2)
    dense = evaluator.run(ids, Policy("dense", "dense"), record=True, chunk_size=11)
    for policy in (
        Policy("w", "window", 0, 6),
        Policy("s", "sink", 2, 6),
        Policy("n", "neutral", 2, 6),
    ):
        step = evaluator.run(ids, policy, neutral_states=states, chunk_size=1).nll
        chunked = evaluator.run(ids, policy, neutral_states=states, chunk_size=13).nll
        torch.testing.assert_close(chunked, step, rtol=0, atol=1e-5)
        snap = evaluator.run(ids, policy, snapshot=dense.cache, neutral_states=states).nll
        t0 = policy.first_eviction
        assert bool(snap[:, :t0].isnan().all())
        torch.testing.assert_close(snap[:, t0:], step[:, t0:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_neutral_sink_made_of_the_bos_token_equals_the_bos_sink(family):
    """k = 1: the BOS run alone at position 0 has exactly the stream's own first entry."""
    model = tiny_model(family)
    ids = streams(model)
    evaluator = StreamingEvaluator(model, chunk_size=9)
    states = evaluator.sink_states(model.config.bos_token_id, 1)
    sink = evaluator.run(ids, Policy("s", "sink", 1, 7)).nll
    neutral = evaluator.run(ids, Policy("n", "neutral", 1, 7), neutral_states=states).nll
    torch.testing.assert_close(neutral, sink, rtol=0, atol=1e-6)
    states = evaluator.sink_states(5, 1)
    other = evaluator.run(ids, Policy("n", "neutral", 1, 7), neutral_states=states).nll
    assert (other[:, 8:] - sink[:, 8:]).abs().max() > 1e-4


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_cache_evicts_to_sinks_plus_window(family):
    model = tiny_model(family)
    evaluator = StreamingEvaluator(model, chunk_size=5)
    ids = streams(model, n=1)
    run = evaluator.run(ids, Policy("s", "sink", 3, 6), record=False)
    assert run.cache is None
    cache = evaluator.new_cache(Policy("s", "sink", 3, 6))
    for lo in range(0, 20, 5):
        evaluator.forward_chunk(cache, ids[:, lo : lo + 5], lo)
    for layer, native in zip(cache.layers, evaluator.native_windows, strict=True):
        recent = min(6, native or 6) - 1  # what the next query may still see
        assert layer.positions.tolist() == [0, 1, 2] + list(range(20 - recent, 20))
        assert layer.keys.shape[-2] == 3 + recent
    assert cache.get_seq_length() == 20


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_rerotated_key_equals_key_computed_at_that_position(family):
    """Position handling: RoPE rotations compose, so a cached key rotated at position a and
    re-rotated by p - a is the key the model computes at position p (and likewise queries)."""
    model = tiny_model(family)
    evaluator = StreamingEvaluator(model)
    base = model.model
    hidden = torch.randn(1, 1, model.config.hidden_size)
    for layer_index, attn in enumerate(layer.self_attn for layer in base.layers):
        layer_type = evaluator.layer_types[layer_index]

        def key_at(position, attn=attn, layer_type=layer_type):
            ids = torch.tensor([[position]])
            if family == "gemma3":
                cos, sin = base.rotary_emb(hidden, ids, layer_type)
            else:
                cos, sin = base.rotary_emb(hidden, ids)
            k = attn.k_proj(hidden).view(1, 1, -1, attn.head_dim).transpose(1, 2)
            if family == "gemma3":
                k = attn.k_norm(k)
            return k * cos[:, None] + _rotate_half(k) * sin[:, None]

        with torch.no_grad():
            for a, p in ((37, 3), (3, 37), (0, 12), (20, 0)):
                moved = rope_rotate(
                    key_at(a), torch.tensor([p - a]), evaluator.inv_freqs[layer_index]
                )
                torch.testing.assert_close(moved, key_at(p), rtol=0, atol=1e-5)


def test_in_cache_positions_change_the_result():
    """'cache' and 'original' positions differ once sinks are far away (the rotation is live)."""
    model = tiny_model("llama")
    ids = streams(model)
    evaluator = StreamingEvaluator(model, chunk_size=8)
    cache = evaluator.run(ids, Policy("c", "sink", 2, 6)).nll
    orig = evaluator.run(ids, Policy("o", "sink", 2, 6, positions="original")).nll
    torch.testing.assert_close(cache[:, :8], orig[:, :8], rtol=0, atol=1e-6)
    assert (cache[:, 9:] - orig[:, 9:]).abs().max() > 1e-4


# ------------------------------------------------------ batched policies, dtype and device

#: Policies of every kind with different first evictions, sink counts, windows and position
#: handling, and one that evicts in a single layer: what one batched run has to keep apart.
BATCH = [
    *POLICIES,
    Policy("window_L6_layer1", "window", 0, 6, layers=(1,)),
    Policy("neutral1_L12", "neutral", 1, 12),
]


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_oss"])
@pytest.mark.parametrize("from_snapshot", [False, True])
def test_a_batch_of_policies_equals_each_policy_run_alone(family, from_snapshot):
    """run_batch (rows = policies x streams, one cache storing what any policy may still see)
    gives every policy the NLL of its own run, up to float rounding (2e-5 nats: the columns other
    policies keep are masked, so only the summation order can differ), the same NaN pattern
    (from a snapshot: NaN before each policy's own first eviction) and the same token counts."""
    model = tiny_model(family)
    ids = streams(model, n=2)
    evaluator = StreamingEvaluator(model, chunk_size=7)
    states = evaluator.sink_states(5, 4)
    snapshot = evaluator.run(ids, Policy("dense", "dense"), record=True).cache
    kwargs = {"snapshot": snapshot if from_snapshot else None, "neutral_states": states}
    batched = evaluator.run_batch(ids, BATCH, **kwargs)
    assert len(batched) == len(BATCH)
    for policy, together in zip(BATCH, batched, strict=True):
        alone = evaluator.run(ids, policy, **kwargs)
        assert together.nll.shape == alone.nll.shape == (2, T - 1)
        assert torch.equal(together.nll.isnan(), alone.nll.isnan()), policy.name
        torch.testing.assert_close(together.nll, alone.nll, rtol=0, atol=2e-5, equal_nan=True)
        assert together.n_tokens == alone.n_tokens
    with pytest.raises(ValueError, match="single policy"):
        evaluator.run_batch(ids, BATCH[:2], record=True)


def test_the_device_argument_reaches_every_tensor_the_streaming_code_creates(
    monkeypatch: pytest.MonkeyPatch,
):
    """Every tensor factory called by the cache, the evaluator and the pair's tables (torch.zeros,
    arange, full, as_tensor, ...) is given the evaluator's device explicitly, so a CUDA run
    creates nothing on the CPU: ``torch`` is replaced in those modules by a spy that records the
    ``device`` of each factory call (none at all would fail the test, as would one without a
    device or with another one). The NLL comes back to the CPU as float32."""
    from sinkscope.streaming import cache, evaluator, experiment, recompute

    spy = TorchSpy()
    for module in (cache, evaluator, experiment, recompute):
        monkeypatch.setattr(module, "torch", spy)
    model = tiny_model("gemma3")
    ids = streams(model)
    run = StreamingEvaluator(model, chunk_size=9, device="cpu")
    states = run.sink_states(5, 2)
    dense = run.run(ids, Policy("dense", "dense"), record=True)
    results = run.run_batch(
        ids,
        [Policy("s", "sink", 2, 6), Policy("n", "neutral", 2, 8), Policy("w", "window", 0, 6)],
        snapshot=dense.cache,
        neutral_states=states,
    )
    again = run.recompute_nll(ids, [10, 20], 6, bos_token_id=int(ids[0, 0]))
    policies = [Policy("dense", "dense"), Policy("s", "sink", 2, 6), Policy("n", "neutral", 1, 6)]
    experiment._evaluate_policies(run, ids, policies, 5, SMALL_PARAMS, policy_batch=2)
    called = {name for name, _ in spy.calls}
    assert {"arange", "full", "as_tensor"} <= called, called
    wrong = [(name, device) for name, device in spy.calls if device != torch.device("cpu")]
    assert not wrong, wrong
    for result in (dense, *results, again):
        assert result.nll.device.type == "cpu" and result.nll.dtype == torch.float32
    assert all(layer.keys.device.type == "cpu" for layer in dense.cache.layers)


def test_an_evaluator_on_another_device_than_the_model_is_refused():
    """The evaluator never copies the model: a device its weights are not on is an error."""
    model = tiny_model("llama")
    assert StreamingEvaluator(model, device="cpu").device == torch.device("cpu")
    with pytest.raises(ValueError, match="weights are on cpu, not on device cuda:0"):
        StreamingEvaluator(model, device="cuda:0")


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_oss"])
def test_bfloat16_runs_agree_with_float32_runs(family):
    """The same tiny model in bfloat16 and in float32 (dense, window, sink, neutral from the dense
    snapshot, and re-computation with BOS): the per-token NLL differs by at most the stated
    tolerance, and does differ (the bfloat16 run is really bfloat16: weights, cache and
    attention; the NLL itself is float32 from float32 logits)."""
    policies = [
        Policy("w", "window", 0, 8),
        Policy("s", "sink", 2, 8),
        Policy("n", "neutral", 2, 8),
    ]
    runs = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = tiny_model(family).to(dtype)
        ids = streams(model)
        evaluator = StreamingEvaluator(model, chunk_size=16, device="cpu")
        dense = evaluator.run(ids, Policy("dense", "dense"), record=True)
        assert {layer.keys.dtype for layer in dense.cache.layers} == {dtype}
        states = evaluator.sink_states(5, 2)
        nll = [dense.nll]
        nll += [
            run.nll
            for run in evaluator.run_batch(
                ids, policies, snapshot=dense.cache, neutral_states=states
            )
        ]
        nll.append(evaluator.recompute_nll(ids, [10, 20, 30], 8, int(ids[0, 0])).nll)
        assert all(values.dtype == torch.float32 for values in nll)
        runs[dtype] = torch.cat([values[~values.isnan()] for values in nll])
    difference = (runs[torch.float32] - runs[torch.bfloat16]).abs()
    assert 0 < difference.mean() <= BF16_NLL_MEAN_TOL, difference.mean()
    assert difference.max() <= BF16_NLL_MAX_TOL, difference.max()
