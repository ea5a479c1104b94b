"""The per-pair analysis read from HDF5 equals the analysis of the same arrays in memory, for any
block size; the summary pools the pairs exactly; the figures are drawn."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import polars as pl
import pytest

from sinkscope.extraction import h5layout
from sinkscope.heads.classify import classify_file
from sinkscope.sinks.analysis import TABLE_COLUMNS, SinkSettings, analyze_arrays, analyze_file
from sinkscope.sinks.names import FIGURES, SUMMARY_FIGURES, SUMMARY_TABLES, TABLES
from sinkscope.sinks.plots import pair_figures, summary_figures
from sinkscope.sinks.summary import summarize
from tests.sinks.planted import plant_sink, random_maps, write_activation_file

SETTINGS = SinkSettings(max_key_position=3, prefix_positions=(8,), secondary_min_queries=4)


def assert_same_tables(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> None:
    assert set(a) == set(b) == set(TABLES)
    for name, table in a.items():
        other = b[name]
        assert table.columns == list(TABLE_COLUMNS[name]) == other.columns, name
        assert table.shape == other.shape, name
        for column in table.columns:
            if table[column].dtype.is_float():
                np.testing.assert_allclose(
                    other[column].to_numpy(), table[column].to_numpy(), rtol=1e-12, err_msg=name
                )
            else:
                assert other[column].equals(table[column]), (name, column)


def planted_file(
    tmp_path: Path, dataset: str = "synthetic"
) -> tuple[Path, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    n_layers, n_seq, n_heads, n_pos, d = 4, 5, 3, 14, 8
    probs = random_maps(rng, (n_layers, n_seq, n_heads), n_pos)
    plant_sink(probs[1:3, 2, 1], 3, 0.8)  # a secondary sink at k = 3 of sequence 2
    x = rng.normal(size=(n_layers, n_seq, n_pos, d)).astype(np.float32)
    x[2:, :, 0, 5] = 300.0
    ids = rng.integers(2, 60, size=(n_seq, n_pos))
    ids[:, 0] = 1
    path = tmp_path / f"{dataset}.h5"
    write_activation_file(path, probs, x, ids, dataset=dataset)
    return path, probs.astype(np.float32), x, ids


def test_hdf5_round_trip_and_block_size(tmp_path: Path) -> None:
    path, probs, x, ids = planted_file(tmp_path)
    expected = analyze_arrays(probs, x, ids, SETTINGS, model="planted", dataset="synthetic")
    for size in (None, 1, 2, 5):
        assert_same_tables(expected, analyze_file(path, SETTINGS, block_size=size))
    found = expected["secondary_sinks"].filter(pl.col("sequence") == 2)
    assert (found["position"] == 3).any()
    row = found.filter(pl.col("position") == 3).row(0, named=True)
    assert row["first_layer"] <= 1 and row["last_layer"] >= 2
    onset_layer = expected["massive_layer"].filter(pl.col("n_massive") > 0)["layer"].min()
    assert onset_layer == 2


def test_real_extracted_file(extracted) -> None:
    """A file written by the extraction (tiny random model): the analysis of the file equals
    that of its arrays, and the BOS mass implied by the k = 0 score is the head table's."""
    _family, path, _model, _ids = extracted
    with h5layout.open_activations(path) as handle:
        probs = handle[h5layout.ATTENTION_PROBS][:]
        x = handle[h5layout.RESIDUAL_X][:]
        token_ids = handle[h5layout.TOKEN_IDS][:]
        model = str(h5layout.read_attr(handle, h5layout.ATTR_MODEL_NAME))
        dataset = str(h5layout.read_attr(handle, h5layout.ATTR_DATASET_NAME))
    settings = SinkSettings(max_key_position=4, prefix_positions=(10,), secondary_min_queries=4)
    tables = analyze_file(path, settings, block_size=2)
    assert_same_tables(analyze_arrays(probs, x, token_ids, settings, None, model, dataset), tables)
    _, per_head = classify_file(path)
    heads = tables["sink_score_head"].filter(pl.col("eps") == settings.eps).sort("layer", "head")
    np.testing.assert_allclose(
        heads["bos_mass"].to_numpy(),
        per_head.sort("layer", "head")["bos_mass"].to_numpy(),
        atol=1e-9,
    )


def test_summary_pools_pairs_and_figures_draw(tmp_path: Path) -> None:
    pairs = []
    for dataset in ("one", "two"):
        path, *_ = planted_file(tmp_path, dataset)
        pairs.append(analyze_file(path, SETTINGS))
    summary = summarize(pairs)
    assert set(summary) == set(SUMMARY_TABLES)
    rate = summary["sink_rate"]
    pooled = rate.filter(pl.col("dataset") == "all")
    for key in ((14, 0, 0.3), (8, 3, 0.1)):
        select = (
            (pl.col("n_positions") == key[0])
            & (pl.col("key_position") == key[1])
            & (pl.col("eps") == key[2])
        )
        parts = rate.filter(select & (pl.col("dataset") != "all"))
        row = pooled.filter(select).row(0, named=True)
        assert row["n_sink"] == parts["n_sink"].sum() and row["n_units"] == parts["n_units"].sum()
        assert row["rate"] == pytest.approx(parts["n_sink"].sum() / parts["n_units"].sum())
    ranked = summary["secondary_tokens"]
    assert ranked["rank"].to_list() == list(range(1, ranked.height + 1))
    assert ranked["n_sink"].to_list() == sorted(ranked["n_sink"].to_list(), reverse=True)
    per_pair = pl.concat([p["secondary_tokens"] for p in pairs])
    assert ranked["n_sink"].sum() == per_pair["n_sink"].sum()
    assert summary["massive_onset"].height == 2
    for name, draw in pair_figures(pairs[0], SETTINGS.eps, "planted").items():
        draw(tmp_path / f"{name}.png")
    for name, draw in summary_figures(summary, pairs, SETTINGS.eps).items():
        draw(tmp_path / f"summary_{name}.png")
    assert all((tmp_path / f"{n}.png").stat().st_size > 0 for n in FIGURES)
    assert all((tmp_path / f"summary_{n}.png").stat().st_size > 0 for n in SUMMARY_FIGURES)


def test_unfinished_file_rejected(tmp_path: Path) -> None:
    path, *_ = planted_file(tmp_path)
    with h5py.File(path, "a") as handle:
        handle.attrs[h5layout.ATTR_COMPLETE] = False
    with pytest.raises(h5layout.ActivationFileError, match="never completed"):
        analyze_file(path, SETTINGS)
