"""Massive activations on a planted residual stream: a massive dimension at the sink token and
one elsewhere are found with their position, dimension and ratio to the layer's median."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sinkscope.sinks.analysis import SinkSettings, analyze_arrays
from sinkscope.sinks.massive import layer_statistics, onset, top_entries
from tests.sinks.planted import uniform_maps

N_LAYERS, N_SEQ, N_POS, D = 5, 3, 16, 32


def planted_x() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, size=(N_LAYERS, N_SEQ, N_POS, D)).astype(np.float32)
    # from layer 2 on: dimension 7 of the BOS token is massive in every sequence (-500 x ~0.5)
    x[2:, :, 0, 7] = -250.0
    # layer 3: dimension 20 of sequence 1, position 9 is larger still (not at the sink)
    x[3, 1, 9, 20] = 400.0
    # layer 1: large but below 100 x the median
    x[1, 0, 5, 3] = 20.0
    return x


def test_planted_massive_dimensions_found() -> None:
    x = planted_x()
    ids = np.arange(N_SEQ * N_POS).reshape(N_SEQ, N_POS)
    settings = SinkSettings(max_key_position=2, prefix_positions=(), top_k=3, massive_ratio=100.0)
    tables = analyze_arrays(uniform_maps(N_LAYERS, N_SEQ, 2, N_POS), x, ids, settings)
    top, layers = tables["massive_top"], tables["massive_layer"]
    for layer in range(N_LAYERS):
        median = float(np.median(np.abs(x[layer])))
        row = layers.filter(pl.col("layer") == layer).row(0, named=True)
        assert row["median_abs"] == pytest.approx(median, rel=1e-6)
        first = top.filter((pl.col("layer") == layer) & (pl.col("rank") == 1)).row(0, named=True)
        assert first["ratio"] == pytest.approx(np.abs(x[layer]).max() / median, rel=1e-6)
    layer3 = top.filter(pl.col("layer") == 3).sort("rank")
    # one row per dimension: 20 (at sequence 1, position 9), then 7 (at BOS, first sequence)
    assert layer3["dimension"].to_list()[:2] == [20, 7]
    assert layer3["position"].to_list()[:2] == [9, 0]
    assert layer3["sequence"].to_list()[:2] == [1, 0]
    assert layer3["at_sink"].to_list()[:2] == [False, True]
    assert layer3["value"].to_list()[:2] == [400.0, -250.0]
    assert layer3["token_id"].to_list()[:2] == [ids[1, 9], ids[0, 0]]
    assert layer3["is_massive"].to_list()[:2] == [True, True]
    stats = layers.sort("layer")
    assert stats["n_massive"].to_list() == [0, 0, N_SEQ, N_SEQ + 1, N_SEQ]
    assert stats["n_massive_at_sink"].to_list() == [0, 0, N_SEQ, N_SEQ, N_SEQ]
    assert stats["massive_dimensions"].to_list() == ["", "", "7", "7 20", "7"]
    assert stats["max_at_sink"].to_list()[2:] == [True, False, True]
    assert not layer3["is_massive"][2]  # the third dimension is ordinary
    first = onset(layers, top).row(0, named=True)
    assert (first["first_layer"], first["first_position"], first["first_dimension"]) == (2, 0, 7)
    assert first["first_at_sink"] and first["n_massive_layers"] == 3
    assert first["max_layer"] == 3 and first["massive_dimensions"] == "7 20"


def test_no_massive_entry_gives_null_onset() -> None:
    x = np.ones((2, 1, 4, 3), dtype=np.float32)
    _top, stats = layer_statistics(x[0], 2, 100.0)
    assert stats["n_massive"] == 0 and stats["max_ratio"] == 1.0
    tables = analyze_arrays(
        uniform_maps(2, 1, 1, 4),
        x,
        np.zeros((1, 4), dtype=np.int64),
        SinkSettings(max_key_position=1, prefix_positions=(), secondary_min_queries=1),
    )
    first = onset(tables["massive_layer"], tables["massive_top"]).row(0, named=True)
    assert first["first_layer"] is None and first["n_massive_layers"] == 0


def test_top_entries_one_per_dimension_ties_by_index() -> None:
    a = np.zeros((2, 3, 4), dtype=np.float32)
    a[1, 2, 0] = 5.0
    a[0, 1, 0] = 5.0  # the same dimension: the first in C order is its entry
    a[1, 0, 3] = 5.0  # a tie between dimensions: the smaller dimension first
    a[0, 0, 2] = 1.0
    index, magnitude = top_entries(a, 3)
    assert [np.unravel_index(i, a.shape) for i in index] == [(0, 1, 0), (1, 0, 3), (0, 0, 2)]
    assert magnitude.tolist() == [5.0, 5.0, 1.0]
