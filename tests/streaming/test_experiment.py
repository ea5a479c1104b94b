"""The cache policies of one pair, their tables, the re-computation rows and the summary
(:mod:`sinkscope.streaming.experiment`, :mod:`.recompute`, :mod:`.summary`)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from sinkscope.streaming.cache import build_policies
from sinkscope.streaming.evaluator import StreamingEvaluator
from sinkscope.streaming.experiment import _evaluate_policies, _policy_batches
from sinkscope.streaming.recompute import RECOMPUTE_BASELINES, recompute_queries
from sinkscope.streaming.summary import summarize
from tests.streaming.tiny import (
    SMALL_PARAMS,
    T,
    pair_tables,
    recompute_tables,
    reference_nll,
    streams,
    tiny_model,
)


def test_policy_grid_andpair_tables():
    params = {**SMALL_PARAMS, "window_sizes": [4, 8, 64]}
    tables, policies, model = pair_tables("gemma3", params)
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
    recompute, recompute_timings = recompute_tables(tables, model, ids)
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


def test_batched_policies_give_the_tables_of_one_policy_at_a_time():
    """The pair's tables with 5 policies per forward (and the layer ablation 5 layers per
    forward, GPU-style) equal those of one policy at a time (the CPU's default) up to float
    rounding: the same rows, token counts and regions, NLL within 2e-5 nats (perplexities within
    a relative 2e-5)."""
    model = tiny_model("gemma3")
    policies = build_policies(SMALL_PARAMS, T)
    evaluator = StreamingEvaluator(model, chunk_size=16)
    ids = streams(model)
    one = _evaluate_policies(evaluator, ids, policies, 5, SMALL_PARAMS, policy_batch=1)
    five = _evaluate_policies(evaluator, ids, policies, 5, SMALL_PARAMS, policy_batch=5)
    assert len(_policy_batches(policies[1:], 5)) == math.ceil((len(policies) - 1) / 5) > 1
    for name, values in (
        ("nll_by_position", ["nll", "nll_sd"]),
        ("perplexity", ["nll", "ppl", "dense_nll", "dense_ppl", "log_ppl_ratio"]),
        ("layer_ablation", ["nll", "dense_nll", "log_ppl_ratio"]),
    ):
        a, b = one[name], five[name]
        assert a.drop(values, *[c for c in a.columns if c.startswith("wall_")]).equals(
            b.drop(values, *[c for c in b.columns if c.startswith("wall_")])
        ), name
        for column in values:  # nats (log_ppl_ratio too); perplexities relative (exp of nats)
            relative = column in ("ppl", "dense_ppl")
            tol = {"rtol": 2e-5, "atol": 0} if relative else {"rtol": 0, "atol": 2e-5}
            np.testing.assert_allclose(b[column], a[column], **tol, err_msg=f"{name}.{column}")
    assert one["timings"]["tokens"].equals(five["timings"]["tokens"])
    assert one["layer_ablation"].height == model.config.num_hidden_layers
