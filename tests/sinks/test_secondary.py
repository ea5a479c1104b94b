"""Secondary sinks on planted maps: a sink at k = 3 in some heads and layers is found with its
token, first layer and layer span; late positions seen by few queries do not count."""

from __future__ import annotations

import numpy as np
import pytest

from sinkscope.geometry.alignment import bos_cosines, row_norms
from sinkscope.sinks.analysis import SinkSettings, analyze_arrays
from sinkscope.sinks.rate import sink_scores
from sinkscope.sinks.secondary import (
    eligible_positions,
    secondary_sinks,
    secondary_tokens,
    token_text,
)
from tests.sinks.planted import plant_sink, uniform_maps

N_LAYERS, N_SEQ, N_HEADS, N_POS, D = 8, 3, 4, 40, 6


def planted() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    maps = uniform_maps(N_LAYERS, N_SEQ, N_HEADS, N_POS)
    # sequence 1: key 3 is a sink of head 2 in layers 2, 3, 4 and again in layer 6 (a pause in
    # layer 5), and of head 0 in layer 3 too
    for layer in (2, 3, 4, 6):
        plant_sink(maps[layer, 1, 2], 3, 0.8)
    plant_sink(maps[3, 1, 0], 3, 0.5)
    # a diagonal head everywhere in layer 7: score(k) = 1 / (P - k), above 0.3 only at the end
    maps[7, :, 3] = np.eye(N_POS)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_LAYERS, N_SEQ, N_POS, D))
    ids = rng.integers(10, 50, size=(N_SEQ, N_POS))
    ids[:, 0] = 1
    ids[1, 3] = 7
    ids[2, 10] = 7  # the same token elsewhere, not a sink
    return maps, x, ids


def test_planted_sink_found_with_its_layer_span() -> None:
    maps, x, ids = planted()
    settings = SinkSettings(max_key_position=4, secondary_min_queries=8, prefix_positions=())
    tables = analyze_arrays(maps, x, ids, settings, decode=lambda t: [f"tok{i}" for i in t])
    found = tables["secondary_sinks"]
    assert found.height == 1
    row = found.row(0, named=True)
    assert (row["sequence"], row["position"], row["token_id"], row["token"]) == (1, 3, 7, "tok7")
    assert (row["first_layer"], row["last_layer"], row["n_layers"]) == (2, 6, 4)
    assert row["max_heads"] == 2 and row["n_sink_units"] == 5
    assert row["max_score"] == pytest.approx(sink_scores(maps)[:, 1, :, 3].max())
    # its residual stream at the first layer, against the direct formulas
    xs = x[2, 1]
    norms = np.linalg.norm(xs, axis=-1)
    others = [i for i in range(1, N_POS) if i != 3]
    assert row["rel_norm"] == pytest.approx(norms[3] / np.median(norms[others]))
    cos = xs @ xs[0] / (norms * norms[0])
    assert row["cos_bos"] == pytest.approx(cos[3])
    assert row["cos_bos_median"] == pytest.approx(np.median(cos[others]))
    assert row["cos_bos_quantile"] == pytest.approx(np.mean(cos[others] < cos[3]))
    tokens = tables["secondary_tokens"].row(0, named=True)
    # token 7 occurs twice at eligible positions (sequence 1 position 3, sequence 2 position 10)
    assert (tokens["token_id"], tokens["n_sink"], tokens["n_occurrences"]) == (7, 1, 2)
    assert tokens["frac_sink"] == pytest.approx(0.5)
    assert tokens["mean_first_layer"] == 2.0 and tokens["mean_n_layers"] == 4.0


def test_late_positions_need_enough_queries() -> None:
    maps, x, ids = planted()
    scores = sink_scores(maps)
    norms = np.stack([row_norms(layer) for layer in x])
    cosines = np.stack([bos_cosines(layer) for layer in x])
    # every query: the diagonal head's last positions (score 1 / (P - k) > 0.3 for P - k <= 3)
    everything = secondary_sinks(scores, 0.3, 1, ids, norms, cosines)
    late = everything.filter(everything["position"] > N_POS - 4)
    assert sorted(set(late["position"].to_list())) == [N_POS - 3, N_POS - 2, N_POS - 1]
    assert (late["first_layer"] == 7).all()
    assert eligible_positions(N_POS, 8).tolist() == list(range(1, N_POS - 7))
    assert secondary_sinks(scores, 0.3, 8, ids, norms, cosines)["position"].to_list() == [3]


def test_no_secondary_sinks_gives_empty_tables() -> None:
    maps = uniform_maps(2, 2, 2, 12)
    x = np.random.default_rng(1).normal(size=(2, 2, 12, 3))
    ids = np.arange(24).reshape(2, 12)
    tables = analyze_arrays(maps, x, ids, SinkSettings(max_key_position=3, prefix_positions=()))
    assert tables["secondary_sinks"].height == 0 and tables["secondary_tokens"].height == 0
    tokens = secondary_tokens(tables["secondary_sinks"], ids, 0.3, 4)
    assert tokens.height == 0


def test_token_text_shows_spaces_and_newlines() -> None:
    assert token_text(" the") == '" the"'
    assert token_text("\n") == '"\\n"'
