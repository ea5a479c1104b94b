"""The sink score and rate of Gu et al. against python loops over the definition, and its exact
relation to the head classes' BOS mass."""

from __future__ import annotations

import numpy as np
import pytest

from sinkscope.heads.classify import attention_masses
from sinkscope.sinks.analysis import SinkSettings, analyze_arrays
from sinkscope.sinks.rate import (
    bos_mass_from_score,
    bos_mass_threshold,
    exceed_counts,
    sink_scores,
)
from tests.sinks.planted import plant_sink, random_maps


def brute_score(a: np.ndarray, k: int, n_pos: int) -> float:
    """score(k) = 1 / (P - k) * sum_{q = k}^{P - 1} A[q, k], one term at a time."""
    total = 0.0
    for q in range(k, n_pos):
        total += float(a[q, k])
    return total / (n_pos - k)


def test_scores_match_the_definition_term_by_term() -> None:
    rng = np.random.default_rng(0)
    maps = random_maps(rng, (2, 3, 2), 11)  # (L, N, H, P, P)
    plant_sink(maps[1, :, 0], 3, 0.7)
    for n_pos in (11, 6):
        scores = sink_scores(maps, n_pos)
        assert scores.shape == (2, 3, 2, n_pos)
        for index in np.ndindex(*maps.shape[:3]):
            for k in range(n_pos):
                assert scores[index][k] == pytest.approx(
                    brute_score(maps[index], k, n_pos), abs=1e-12
                )
    # the planted sink: every query from 3 on puts >= 0.7 on key 3
    assert (sink_scores(maps)[1, :, 0, 3] >= 0.7 - 1e-12).all()


def test_entries_above_the_diagonal_do_not_count() -> None:
    rng = np.random.default_rng(1)
    maps = random_maps(rng, (4,), 7)
    noisy = maps + np.triu(np.full((7, 7), 0.5), k=1)
    np.testing.assert_allclose(sink_scores(noisy), sink_scores(maps), atol=1e-12)


def test_rate_counts_units_above_eps_like_a_loop() -> None:
    rng = np.random.default_rng(2)
    n_layers, n_seq, n_heads, n_pos = 3, 4, 2, 9
    maps = random_maps(rng, (n_layers, n_seq, n_heads), n_pos)
    plant_sink(maps[:, :2, 1], 2, 0.5)
    eps = [0.1, 0.3, 0.5]
    settings = SinkSettings(
        max_key_position=4, eps=0.3, eps_sweep=tuple(eps), prefix_positions=(6,)
    )
    x = rng.normal(size=(n_layers, n_seq, n_pos, 5))
    tables = analyze_arrays(maps, x, np.zeros((n_seq, n_pos), dtype=np.int64), settings)
    for n_positions in (n_pos, 6):
        for e in eps:
            for k in range(5):
                per_layer = []
                for layer in range(n_layers):
                    n = 0
                    for s in range(n_seq):
                        for h in range(n_heads):
                            n += brute_score(maps[layer, s, h], k, n_positions) > e
                    per_layer.append(n)
                    row = tables["sink_rate_layer"].filter(
                        (tables["sink_rate_layer"]["n_positions"] == n_positions)
                        & (tables["sink_rate_layer"]["eps"] == e)
                        & (tables["sink_rate_layer"]["key_position"] == k)
                        & (tables["sink_rate_layer"]["layer"] == layer)
                    )
                    assert row["n_sink"].to_list() == [n]
                    assert row["rate"][0] == pytest.approx(n / (n_seq * n_heads))
                pooled = tables["sink_rate"].filter(
                    (tables["sink_rate"]["n_positions"] == n_positions)
                    & (tables["sink_rate"]["eps"] == e)
                    & (tables["sink_rate"]["key_position"] == k)
                )
                assert pooled["n_sink"].to_list() == [sum(per_layer)]
                assert pooled["rate"][0] == pytest.approx(
                    sum(per_layer) / (n_layers * n_seq * n_heads)
                )
    # the planted sink at k = 2 (weight 0.5) is above 0.3 in those units at every layer
    assert (sink_scores(maps)[:, :2, 1, 2] > 0.3).all()


def test_exceed_is_strict() -> None:
    assert exceed_counts(np.array([[0.3, 0.30001]]), [0.3]).tolist() == [[0, 1]]


def test_score_at_bos_is_the_bos_mass_of_the_head_classes() -> None:
    rng = np.random.default_rng(3)
    n_pos = 13
    maps = random_maps(rng, (5, 3), n_pos)
    plant_sink(maps[:2], 0, 0.6)
    score0 = sink_scores(maps)[..., 0]
    np.testing.assert_allclose(
        bos_mass_from_score(score0, n_pos), attention_masses(maps)["bos_mass"], atol=1e-12
    )
    # score(0) > eps exactly when bos_mass > (eps P - 1) / (P - 1)
    threshold = bos_mass_threshold(0.3, n_pos)
    assert threshold == pytest.approx((0.3 * n_pos - 1) / (n_pos - 1))
    bos = attention_masses(maps)["bos_mass"]
    assert ((score0 > 0.3) == (bos > threshold)).all()


def test_head_table_reports_the_bos_mass_of_classify() -> None:
    rng = np.random.default_rng(4)
    n_pos = 10
    maps = random_maps(rng, (2, 3, 2), n_pos)
    x = rng.normal(size=(2, 3, n_pos, 4))
    tables = analyze_arrays(
        maps,
        x,
        np.zeros((3, n_pos), dtype=np.int64),
        SinkSettings(max_key_position=3, prefix_positions=()),
    )
    heads = (
        tables["sink_score_head"]
        .filter(tables["sink_score_head"]["eps"] == 0.3)
        .sort("layer", "head")
    )
    expected = np.stack(
        [attention_masses(maps[layer])["bos_mass"].mean(axis=0) for layer in range(2)]
    )
    np.testing.assert_allclose(heads["bos_mass"].to_numpy(), expected.ravel(), atol=1e-12)
    frac = np.stack([(sink_scores(maps[layer])[..., 0] > 0.3).mean(axis=0) for layer in range(2)])
    np.testing.assert_allclose(heads["frac_sink"].to_numpy(), frac.ravel())


def test_bad_lengths_rejected() -> None:
    with pytest.raises(ValueError, match="n_positions"):
        sink_scores(np.zeros((3, 3)), 4)
    with pytest.raises(ValueError, match="prefix_positions"):
        analyze_arrays(
            np.zeros((1, 1, 1, 5, 5)),
            np.ones((1, 1, 5, 2)),
            np.zeros((1, 5), dtype=np.int64),
            SinkSettings(max_key_position=2, prefix_positions=(9,)),
        )
