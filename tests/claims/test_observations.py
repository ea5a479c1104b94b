"""Observations (sinkscope.claims.observations): planted tables with a known layer profile,
BOS-norm jump, cosine signs and value ranks; the section of claims.md."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from sinkscope.claims import observations as O
from sinkscope.claims import registry as R
from sinkscope.claims import render as RD
from sinkscope.claims import verdicts as V
from sinkscope.paths import Paths
from tests.conftest import ONE_PAIR

# per layer (sink heads among 4 heads in d1, in d2, bos_mass): levels collapsed, sub-threshold,
# weak (1 of 8), collapsed, dominant (8 of 8), dominant (4 of 8)
PROFILE = [(0, 0, 0.02), (0, 0, 0.2), (1, 0, 0.3), (0, 0, 0.01), (4, 4, 0.7), (2, 2, 0.5)]


@pytest.fixture()
def per_head() -> pl.DataFrame:
    rows = []
    for context_length in (32, 64):  # the oversmoothing table repeats every head per length
        for dataset, index in (("d1", 0), ("d2", 1)):
            for layer, (*n_sink, mass) in enumerate(PROFILE):
                for head in range(4):
                    rows.append(
                        {
                            "model": "m",
                            "dataset": dataset,
                            "context_length": context_length,
                            "layer": layer,
                            "head": head,
                            # a shorter length gets other classes: only the longest may count
                            "is_sink": head < n_sink[index] if context_length == 64 else True,
                            "bos_mass": mass if context_length == 64 else 0.9,
                        }
                    )
    return pl.DataFrame(rows)


@pytest.fixture()
def bos_residual_norm() -> pl.DataFrame:
    norms = [1.0, 2.0, 4.0, 5.0, 500.0, 520.0]
    return pl.DataFrame(
        {
            "model": "m",
            "dataset": "all",
            "layer": list(range(6)),
            "bos_norm": norms,
            "median_norm": 2.0,
            "rel_bos_norm": [x / 2.0 for x in norms],
        }
    )


@pytest.fixture()
def bos_alignment() -> pl.DataFrame:
    rows = []
    for model, negatives in (("m", {}), ("n", {3: 25})):
        for layer in range(8):  # middle layers 2..5
            n_neg = negatives.get(layer, 0) if 2 <= layer <= 5 else (7 if layer == 0 else 0)
            for space in ("X", "Z"):
                rows.append(
                    {
                        "model": model,
                        "dataset": "all",
                        "space": space,
                        "layer": layer,
                        "n_values": 100,
                        "n_positive": 100 - n_neg if space == "Z" else 0,
                        "min": -0.2 if n_neg else 0.1 + layer / 100,
                    }
                )
    return pl.DataFrame(rows)


@pytest.fixture()
def value_rank() -> pl.DataFrame:
    rows = []
    for dataset in ("d1", "d2", "all"):
        for layer in range(8):  # middle layers 2..5
            low = dataset == "d2" and layer == 3
            rows.append(
                {
                    "model": "m",
                    "dataset": dataset,
                    "layer": layer,
                    "min": 0.7 if low else (0.5 if layer == 0 else 0.95),
                    "median": 0.85 if low else 0.98,
                    "mean": 0.6 if layer == 0 else (0.8 if low else 0.97),
                }
            )
    return pl.DataFrame(rows)


@pytest.fixture()
def value_rank_worst() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "model": "m",
            "dataset": ["d2", "d2", "d1"],
            "m": 100,
            "min_rel_rank": [0.3, 0.4, 0.5],
            "mean_rel_rank": [0.81, 0.85, 0.9],
            "n_repeated_tokens": [70, 60, 40],
        }
    )


def _by_id(rows: list[dict], oid: str, dataset: str = "all", model: str = "m") -> dict:
    found = [
        r
        for r in rows
        if r["observation_id"] == oid and r["dataset"] == dataset and r["model"] == model
    ]
    assert len(found) == 1, (oid, dataset, model, rows)
    return found[0]


def test_layer_levels_follow_the_thresholds() -> None:
    assert O.layer_level(O.DOMINANT_SHARE, 0.0) == "dominant"
    assert O.layer_level(O.WEAK_SHARE, 0.0) == "partial"
    assert O.layer_level(0.01, 0.0) == "weak"
    assert O.layer_level(0.0, O.SUB_THRESHOLD_BOS_MASS) == "sub-threshold"
    assert O.layer_level(0.0, O.COLLAPSED_BOS_MASS) == "none"
    assert O.layer_level(0.0, O.COLLAPSED_BOS_MASS - 1e-9) == "collapsed"


def test_sink_layer_profile(per_head: pl.DataFrame) -> None:
    shares = O.sink_layer_shares(per_head)
    assert shares["n_heads"].to_list() == [8] * 6
    assert shares["sink_share"].to_list() == [0.0, 0.0, 0.125, 0.0, 1.0, 0.5]
    assert shares["level"].to_list() == [
        "collapsed",
        "sub-threshold",
        "weak",
        "collapsed",
        "dominant",
        "dominant",
    ]
    rows = O.sink_layer_profile(per_head)
    first = _by_id(rows, "sinks.first_layer")
    assert first["value"] == 2.0
    assert first["measured"].startswith("first sink head in layer 2 of 6 (12% of its 8 head")
    phases = _by_id(rows, "sinks.layer_phases")
    assert phases["value"] == 4.0
    assert phases["measured"] == (
        "layer 0 collapsed (BOS mass 0.02); layer 1 sub-threshold (BOS mass 0.20); "
        "layer 2 weak (sink share 12%); layer 3 collapsed (BOS mass 0.01); "
        "layers 4-5 dominant (sink share 50%-100%). 2 of 6 layers have dominant sinks"
    )


def test_no_sink_head_at_all(per_head: pl.DataFrame) -> None:
    rows = O.sink_layer_profile(per_head.with_columns(is_sink=pl.lit(False)))
    assert _by_id(rows, "sinks.first_layer")["value"] is None
    assert _by_id(rows, "sinks.layer_phases")["value"] is None


def test_bos_norm_jump(bos_residual_norm: pl.DataFrame, per_head: pl.DataFrame) -> None:
    # a per-dataset row with a larger jump must not count: the pooled rows are read
    extra = bos_residual_norm.with_columns(
        dataset=pl.lit("d1"), bos_norm=pl.Series([1.0, 1e6, 1e6, 1e6, 1e6, 1e6])
    )
    rows = O.bos_norm_jump(pl.concat([bos_residual_norm, extra]), per_head)
    jump = _by_id(rows, "bos_norm.largest_jump")
    assert jump["value"] == pytest.approx(100.0)
    assert jump["measured"] == "x100.0 from layer 3 to 4 (5 -> 500)"
    rel = _by_id(rows, "bos_norm.relative_at_jump")
    assert rel["value"] == pytest.approx(250.0)
    assert "at layer 4 (2.50x at layer 3)" in rel["measured"]
    after = _by_id(rows, "sinks.dominate_after_jump")
    assert after["value"] == 1.0
    assert after["measured"].startswith("from layer 4 on: 2 of 2 layers dominant")
    assert after["measured"].endswith("sinks dominate in every layer from there on")
    # a jump one layer earlier: layer 3 (collapsed) breaks the dominance
    early = bos_residual_norm.with_columns(bos_norm=pl.Series([1.0, 2.0, 4.0, 500.0, 510.0, 520.0]))
    after = _by_id(O.bos_norm_jump(early, per_head), "sinks.dominate_after_jump")
    assert after["value"] == pytest.approx(2 / 3)
    assert after["measured"].endswith("in 67% of the layers from there on, not in all")
    assert not [
        r for r in O.bos_norm_jump(bos_residual_norm) if r["observation_id"].startswith("sinks")
    ]


def test_bos_cosine_sign(bos_alignment: pl.DataFrame) -> None:
    rows = O.bos_cosine_sign(bos_alignment)
    positive = _by_id(rows, "bos_cosine.middle_positive_share")
    assert positive["value"] == 1.0  # layer 0 (not middle) has negatives: ignored
    assert positive["measured"].startswith(
        "all positive: 100% of 400 cosines > 0 in middle layers 2-5"
    )
    mixed = _by_id(rows, "bos_cosine.middle_positive_share", model="n")
    assert mixed["value"] == pytest.approx(375 / 400)
    assert mixed["measured"].startswith("mixed signs: 94% of 400 cosines")
    assert "3 of 4 middle layers all positive; lowest cosine -0.200 (layer 3)" in mixed["measured"]


def test_value_rank_lowest(value_rank: pl.DataFrame, value_rank_worst: pl.DataFrame) -> None:
    rows = O.value_rank_lowest(value_rank, value_rank_worst, near_full_rank=0.9)
    assert _by_id(rows, "value_rank.middle_min", "d1")["value"] == 0.95
    d2 = _by_id(rows, "value_rank.middle_min", "d2")
    assert d2["value"] == 0.7
    assert d2["measured"].startswith("lowest 0.700 (layer 3); lowest layer median 0.850 (layer 3)")
    pooled = _by_id(rows, "value_rank.middle_min")
    assert pooled["value"] == 0.7
    assert pooled["measured"] == (
        "lowest 0.700 on d2 (layer 3); per-dataset minima 0.700-0.950; below 0.9"
    )
    assert "immune to repeated tokens" in pooled["paper"]
    assert _by_id(rows, "value_rank.low_layers", "d1")["value"] == 1.0
    low = _by_id(rows, "value_rank.low_layers", "d2")
    assert low["value"] == 2.0
    assert low["measured"] == "2 of 8 layers below 0.9 (layer: mean) 0: 0.600, 3: 0.800"
    worst = _by_id(rows, "value_rank.worst_sequences", "d1, d2")
    assert worst["value"] == 0.81
    assert "mean relative rank 0.810-0.900, lowest single matrix 0.300" in worst["measured"]
    assert worst["measured"].endswith("40%-70% of their tokens are repeats")


def test_evaluate_observations_skips_absent_tables(
    per_head: pl.DataFrame, bos_alignment: pl.DataFrame
) -> None:
    table = O.evaluate_observations({"oversmoothing_per_head": per_head})
    assert list(table.columns) == list(O.COLUMNS)
    assert set(table["observation_id"]) == {"sinks.first_layer", "sinks.layer_phases"}
    table = O.evaluate_observations({"geometry_bos_alignment": bos_alignment})
    assert table["observation_id"].to_list() == ["bos_cosine.middle_positive_share"] * 2
    assert O.evaluate_observations({}).height == 0


def test_claims_markdown_has_the_section(
    tmp_path: Path,
    per_head: pl.DataFrame,
    bos_residual_norm: pl.DataFrame,
    value_rank: pl.DataFrame,
) -> None:
    tables = {
        "oversmoothing_per_head": per_head,
        "geometry_bos_residual_norm": bos_residual_norm,
        "geometry_value_rank": value_rank,
    }
    claims = R.evaluate_claims({}, None, models=["m"])
    observations = O.evaluate_observations(tables)
    md, parquet, obs = tmp_path / "claims.md", tmp_path / "claims.parquet", tmp_path / "obs.parquet"
    RD.write_claims(claims, md, parquet, observations=observations, observations_path=obs)
    text = md.read_text()
    header = f"## {O.OBSERVATIONS_TITLE}"
    assert header == "## Observations (shown by the figures; not claims of the paper)"
    assert text.index("## All checks") < text.index(header)
    assert "### `bos_norm.largest_jump`" in text
    assert "| m | all | x100.0 from layer 3 to 4 (5 -> 500) | 100 |" in text
    assert pl.read_parquet(obs).equals(observations)
    assert (tmp_path / "obs.csv").exists()
    assert pl.read_parquet(parquet).columns == list(V.COLUMNS)  # the claims schema is unchanged
    assert header not in RD.claims_markdown(claims)


def test_rule_inputs_and_outputs() -> None:
    paths = Paths("results")
    inputs = paths.claims_inputs({}, ONE_PAIR)
    for key in (
        "geometry_bos_residual_norm",
        "geometry_value_rank_worst",
        "oversmoothing_per_head",
    ):
        assert key in inputs and key in R.TABLE_ANALYSIS
    assert (
        inputs["geometry_bos_residual_norm"] == "results/summary/geometry/bos_residual_norm.parquet"
    )
    assert paths.observations() in paths.claims_targets()
    assert paths.observations("csv") in paths.claims_targets()
