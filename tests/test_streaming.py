"""Streaming evaluation under KV-cache eviction (:mod:`sinkscope.streaming`).

The evicting cache is checked against a brute-force recomputation: one full forward pass over the
whole stream (no cache) with an attention function that, for every (query, key) pair, applies the
policy's visibility and the StreamingLLM in-cache positions literally (the key's rank in the
query's kept set, the query at rank ``|kept| - 1``), by re-rotating each key per pair.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
import pytest
import torch
from transformers import AttentionInterface, AutoModelForCausalLM

from sinkscope.streaming import (
    RECOMPUTE_BASELINES,
    RECOMPUTE_SCHEMA,
    RECOMPUTE_TIMINGS_SCHEMA,
    Policy,
    StreamingEvaluator,
    Streams,
    _check_nll_table,
    _check_same_streams,
    _evaluate_policies,
    _nll_at,
    _recompute_rows,
    build_policies,
    correlation,
    first_position_mass,
    recompute_queries,
    rope_rotate,
    summarize,
)

from .conftest import tiny_config

T = 40  # stream length of the tiny tests


def tiny_model(family: str, attn: str = "eager", global_layer: bool = True):
    config = tiny_config(family)
    if family == "gemma3" and global_layer:
        # the default pattern makes all 3 tiny layers sliding; put a global layer in the middle
        config.layer_types = ["sliding_attention", "full_attention", "sliding_attention"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    with torch.no_grad():  # break the symmetric init (as conftest does)
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    model.eval()
    return model


def streams(model, n: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    ids = torch.from_numpy(rng.integers(3, model.config.vocab_size, size=(n, length)))
    ids[:, 0] = model.config.bos_token_id
    return ids


def reference_nll(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits.float(), dim=-1)
    return -logp[:, :-1].gather(2, ids[:, 1:, None])[..., 0]


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

    def attention(self, module, query, key, value, attention_mask, scaling=None, **kwargs):
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
        probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
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


@pytest.mark.parametrize("family", ["llama", "gemma3"])
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


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_policies_with_a_window_as_long_as_the_stream_equal_dense(family):
    ids = streams(tiny_model(family))
    expected = {attn: reference_nll(tiny_model(family, attn), ids) for attn in ("eager", "sdpa")}
    torch.testing.assert_close(expected["eager"], expected["sdpa"], rtol=0, atol=1e-5)
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


#: A small policy grid for the tiny models (streams of T tokens).
SMALL_PARAMS = {
    "window_sizes": [4, 8],
    "sink_count": 2,
    "sink_counts": [1, 2],
    "neutral_counts": [1],
    "k_sweep_window": 8,
    "positions": "cache",
    "position_ablation": True,
    "layer_ablation_window": 6,
    "layer_ablation_length": 24,
    "tail_start": None,
    "recompute_samples": 5,
}


def _pair_tables(family: str, params: dict) -> tuple[dict[str, pl.DataFrame], list, Any]:
    """Every table of one tiny pair (model "m", dataset "d") under ``params``' policies."""
    model = tiny_model(family)
    policies = build_policies(params, T)
    evaluator = StreamingEvaluator(model, chunk_size=16)
    tables = _evaluate_policies(evaluator, streams(model), policies, 5, params)
    named = {n: t.with_columns(model=pl.lit("m"), dataset=pl.lit("d")) for n, t in tables.items()}
    return named, policies, model


def _recompute_tables(
    tables: dict[str, pl.DataFrame], model: Any, ids: torch.Tensor, n_samples: int = 5
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What rule analyze_streaming_recompute computes from the pair's ``nll_by_position``."""
    streams_ = Streams(model, None, ids, [0, 1], int(model.config.bos_token_id))
    evaluator = StreamingEvaluator(model, chunk_size=16)
    rows, times = _recompute_rows(evaluator, streams_, tables["nll_by_position"], n_samples)
    recompute = pl.DataFrame(rows, schema=RECOMPUTE_SCHEMA)
    named = recompute.with_columns(model=pl.lit("m"), dataset=pl.lit("d"))
    return named, pl.DataFrame(times, schema=RECOMPUTE_TIMINGS_SCHEMA)


def test_recompute_needs_the_streams_of_the_cache_run():
    settings = pl.DataFrame({"stream_offsets": ["0,1"], "stream_length": [T]})
    _check_same_streams(settings, [0, 1], T, "settings.parquet")  # the same: no error
    with pytest.raises(ValueError, match="settings.parquet.*re-run analyze_streaming"):
        _check_same_streams(settings, [0, 2], T, "settings.parquet")
    with pytest.raises(ValueError, match="re-run analyze_streaming"):
        _check_same_streams(settings, [0, 1], T + 1, "settings.parquet")


def test_recompute_errors_name_the_nll_file():
    table = pl.DataFrame(
        {
            "policy": ["dense", "dense", "window_L4"],
            "kind": ["dense", "dense", "window"],
            "n_sink": [0, 0, 0],
            "window": [None, None, 4],
            "positions": ["cache"] * 3,
            "position": [5, 6, 5],
            "nll": [1.0, 2.0, 3.0],
        }
    )
    _check_nll_table(table, "a/nll_by_position.parquet")  # complete: no error
    np.testing.assert_array_equal(_nll_at(table, "dense", [6, 5], "f"), [2.0, 1.0])
    with pytest.raises(ValueError, match=r"a/nll.parquet: no NLL of policy window_L4 at .*\[6\]"):
        _nll_at(table, "window_L4", [5, 6], "a/nll.parquet")
    with pytest.raises(ValueError, match="a/nll.parquet: no dense policy"):
        _check_nll_table(table.filter(pl.col("kind") != "dense"), "a/nll.parquet")
    with pytest.raises(ValueError, match=r"a/nll.parquet: columns \['nll'\] are missing"):
        _check_nll_table(table.drop("nll"), "a/nll.parquet")


def test_policy_grid_and_pair_tables():
    params = {**SMALL_PARAMS, "window_sizes": [4, 8, 64]}
    tables, policies, model = _pair_tables("gemma3", params)
    names = [p.name for p in policies]
    assert names[0] == "dense" and len(names) == len(set(names))
    assert "window_L64" not in names  # never evicts in a stream of 40
    assert {"window_L4", "sink2_L4", "neutral2_L4", "sink1_L8", "neutral1_L8"} <= set(names)
    assert next(p for p in policies if p.name == "sink2_L8_pos-original").positions == "original"
    ids = streams(model)
    nll = tables["nll_by_position"]
    assert nll.height == len(policies) * (T - 1)
    assert not nll["nll"].is_nan().any()
    ppl = tables["perplexity"]
    dense = ppl.filter(pl.col("policy") == "dense", pl.col("region") == "all")
    assert dense["log_ppl_ratio"][0] == pytest.approx(0.0)
    expected = reference_nll(tiny_model("gemma3"), ids).mean().item()
    assert dense["nll"][0] == pytest.approx(expected, abs=1e-5)
    assert dense["ppl"][0] == pytest.approx(math.exp(expected), rel=1e-5)
    evicting = ppl.filter(pl.col("policy") == "sink2_L4", pl.col("region") == "evicting")
    assert evicting["first_position"][0] == 2 + 4 + 1
    assert tables["layer_ablation"].height == model.config.num_hidden_layers
    assert set(tables["timings"]["policy"]) == set(names)
    # the re-computation baseline: every sink/neutral policy at L against the same tokens
    recompute, recompute_timings = _recompute_tables(tables, model, ids)
    tables["recompute"] = recompute
    assert set(recompute["policy"]) == {
        "window_L4",
        "sink2_L4",
        "neutral2_L4",
        "window_L8",
        "sink1_L8",
        "sink2_L8",
        "neutral1_L8",
        "neutral2_L8",
    }
    assert recompute.height == 2 * 8  # both baselines
    assert set(recompute_timings["baseline"]) == set(RECOMPUTE_BASELINES)
    assert set(recompute["n_tokens"]) == {2 * 5}
    assert recompute.filter(pl.col("window") == 8)["first_position"].unique().to_list() == [
        8 + 2 + 1  # the first query t = L + k_max predicts position t + 1
    ]
    assert np.allclose(
        recompute["policy_vs_recompute"], recompute["policy_nll"] - recompute["recompute_nll"]
    )
    for row in recompute.iter_rows(named=True):
        gap = row["window_nll"] - row["recompute_nll"]
        if gap > 0:
            expected = (row["window_nll"] - row["policy_nll"]) / gap
            assert row["recovered_fraction"] == pytest.approx(expected)
        else:
            assert row["recovered_fraction"] is None
        if row["kind"] == "window":
            assert row["policy_nll"] == row["window_nll"]
            assert row["recovered_fraction"] in (None, pytest.approx(0.0))
    # brute force: the caches' NLL read at the sampled positions of nll_by_position equals a
    # fresh run of the policy scored at the sampled queries (no off-by-one between query t and
    # the token t + 1 it predicts); the baselines equal recompute_nll run directly
    evaluator = StreamingEvaluator(model, chunk_size=16)
    queries = recompute_queries(T, 8 + 2, 5)
    sink = next(p for p in policies if p.name == "sink1_L8")
    direct = evaluator.run(ids, sink).nll[:, queries].double()
    for baseline, bos in (("recompute_bos", model.config.bos_token_id), ("recompute", None)):
        row = recompute.filter((pl.col("policy") == "sink1_L8") & (pl.col("baseline") == baseline))
        base = evaluator.recompute_nll(ids, queries, 8, bos).nll.double()
        assert row["policy_nll"][0] == pytest.approx(direct.mean().item(), abs=1e-5)
        assert row["recompute_nll"][0] == pytest.approx(base.mean().item(), abs=1e-5)
        per_position = (direct - base).mean(dim=0)  # the pairing unit: a sampled position
        se = per_position.std().item() / math.sqrt(len(queries))
        assert row["policy_vs_recompute_se"][0] == pytest.approx(se, rel=1e-4)
    heads = pl.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "layer": [0, 0, 1, 1, 2, 2],
            "head": [0, 1, 0, 1, 0, 1],
            "is_sink": [True, False, True, True, False, False],
            "bos_mass": [0.9, 0.1, 0.8, 0.7, 0.2, 0.1],
        }
    )
    summary = summarize([tables], [heads])
    assert set(summary) == {
        "perplexity",
        "overview",
        "sink_heads",
        "layers",
        "correlations",
        "recompute",
    }
    assert summary["recompute"].height == tables["recompute"].height
    layer_rows = summary["correlations"].filter(pl.col("level") == "layer")
    assert layer_rows.height == 4 and set(layer_rows["n"]) == {3}
    # the permutation p-values do not depend on the order of the head rows (joins reorder)
    shuffled = summarize([tables], [heads.sample(fraction=1.0, shuffle=True, seed=3)])
    assert shuffled["correlations"].equals(summary["correlations"])


def test_correlation_helper():
    x = np.arange(10.0)
    stats = correlation(x, 2 * x + 1, n_perm=2000)
    assert stats["pearson_r"] == pytest.approx(1.0) and stats["spearman_rho"] == pytest.approx(1.0)
    assert stats["p_permutation"] < 0.01
    assert math.isnan(correlation([1.0, 2.0], [3.0, 1.0])["spearman_rho"])


@pytest.mark.parametrize("extracted", ["llama", "gemma3"], indirect=True)
def test_first_position_mass(extracted):
    family, path, _, _ = extracted
    table = first_position_mass(path, max_k=4)
    from sinkscope.h5layout import open_activations

    with open_activations(path) as handle:
        probs = handle["attention/probs"][...].astype(np.float64)
    n_layers = probs.shape[0]
    assert table.height == n_layers * 4
    expected = probs[:, :, :, 4:, :4].mean(axis=(1, 2, 3))  # (L, 4)
    got = table.sort("layer", "key_position")["mass"].to_numpy().reshape(n_layers, 4)
    np.testing.assert_allclose(got, expected, atol=1e-9)
    cumulative = table.sort("layer", "key_position")["cumulative_mass"].to_numpy()
    np.testing.assert_allclose(cumulative.reshape(n_layers, 4), np.cumsum(expected, axis=1))
    assert (table["cumulative_mass"] <= 1 + 1e-6).all()
    assert set(table["model"]) == {family}


def test_figures(tmp_path):
    from PIL import Image

    from sinkscope import streaming_plots as sp

    params = {**SMALL_PARAMS, "sink_counts": [1, 2, 4], "neutral_counts": [1, 2]}
    tables, _, model = _pair_tables("llama", params)
    tables["recompute"] = _recompute_tables(tables, model, streams(model))[0]
    written = sp.plot_all(tables, tmp_path, "tiny")
    mass = pl.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "layer": np.repeat(np.arange(3), 4),
            "key_position": np.tile(np.arange(4), 3),
            "mass": np.full(12, 0.1),
            "cumulative_mass": np.tile(np.arange(1, 5) * 0.1, 3),
            "n_queries": 10,
        }
    )
    sp.plot_first_position_mass(mass, tmp_path / "mass.png", "tiny")
    heads = pl.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "layer": [0, 1, 2],
            "head": [0, 0, 0],
            "is_sink": [True, False, True],
            "bos_mass": [0.9, 0.1, 0.8],
        }
    )
    sp.plot_summary(summarize([tables], heads), tmp_path / "summary.png", "tiny")
    for path in [*written.values(), tmp_path / "mass.png", tmp_path / "summary.png"]:
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] > 300


def test_recompute_queries_spread_over_the_evicting_region():
    assert recompute_queries(40, 10, 5) == [10, 17, 24, 31, 38]
    assert recompute_queries(40, 36, 5) == [36, 37, 38]  # fewer positions than samples
    assert recompute_queries(40, 39, 5) == [] and recompute_queries(40, 10, 0) == []


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@pytest.mark.parametrize("window", [6, 12])
def test_recompute_equals_a_plain_forward_of_the_window(family, window):
    """Sliding window with re-computation = the unmodified model (its own attention code) run
    on the ``L`` most recent tokens alone; 12 exceeds the tiny Gemma's own sliding window (8)."""
    ids = streams(tiny_model(family))
    queries = [window - 1, 20, T - 2]
    evaluator = StreamingEvaluator(tiny_model(family))
    # a tiny attention budget forces one window per batch: batching must not change anything
    run = evaluator.recompute_nll(ids, queries, window, max_attention=1)
    bos = int(ids[0, 0])
    with_bos = evaluator.recompute_nll(ids, queries, window, bos_token_id=bos, max_attention=1)
    plain = tiny_model(family, attn="sdpa")
    for j, t in enumerate(queries):
        expected = reference_nll(plain, ids[:, t - window + 1 : t + 2])[:, -1]
        assert torch.allclose(run.nll[:, j], expected, atol=1e-5), (t, run.nll[:, j], expected)
        # [BOS] + the window, at positions 0..L
        behind_bos = torch.cat([ids[:, :1], ids[:, t - window + 1 : t + 2]], dim=1)
        expected = reference_nll(plain, behind_bos)[:, -1]
        assert torch.allclose(with_bos.nll[:, j], expected, atol=1e-5), (t, with_bos.nll[:, j])
    assert not torch.allclose(run.nll, with_bos.nll, atol=1e-3)  # the BOS changes the result
    assert run.n_tokens == ids.shape[0] * len(queries) * window
    assert with_bos.n_tokens == ids.shape[0] * len(queries) * (window + 1)
    with pytest.raises(ValueError, match="recompute queries"):
        evaluator.recompute_nll(ids, [window - 2], window)
