"""Caches vs sliding window with re-computation (:mod:`sinkscope.streaming.recompute`)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from sinkscope.streaming.evaluator import StreamingEvaluator
from sinkscope.streaming.recompute import (
    _check_nll_table,
    _check_same_streams,
    _nll_at,
    recompute_queries,
)
from tests.streaming.tiny import T, reference_nll, streams, tiny_model


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


def test_recompute_queries_spread_over_the_evicting_region():
    assert recompute_queries(40, 10, 5) == [10, 17, 24, 31, 38]
    assert recompute_queries(40, 36, 5) == [36, 37, 38]  # fewer positions than samples
    assert recompute_queries(40, 39, 5) == [] and recompute_queries(40, 10, 0) == []


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_oss"])
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
    plain = tiny_model(family, attn="eager" if family == "gpt_oss" else "sdpa")  # GptOss: no SDPA
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
