"""``learned_sink_mass``: the mean probability of a head's learned sink logit (gpt-oss), against
the closed form of a planted head, through files, pooling and a real tiny extraction."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import polars as pl
import pytest

from sinkscope.extraction import h5layout
from sinkscope.heads.classify import classify_file, head_table_for_layer, learned_sink_masses
from sinkscope.heads.names import LEARNED_SINK_MASS, PER_HEAD_COLUMNS
from sinkscope.heads.summary import pool_datasets, summarize
from tests.conftest import extract_tiny
from tests.heads.test_classify import write_h5

T = 10
T1 = T + 1


def uniform_with_sink(s: float) -> tuple[np.ndarray, np.ndarray]:
    """A head whose scores are all equal (0) and whose sink logit is ``s``: row i gives
    ``1 / (e^s + i + 1)`` to each of its i + 1 keys and ``p_sink[i] = e^s / (e^s + i + 1)``."""
    rows = np.arange(T1)[:, None]
    denominator = np.exp(s) + rows + 1.0
    probs = np.where(np.arange(T1)[None, :] <= rows, 1.0 / denominator, 0.0)
    return probs, (np.exp(s) / denominator)[:, 0]


def closed_form(s: float) -> tuple[float, float]:
    """(learned_sink_mass, bos_mass) of :func:`uniform_with_sink` over rows 1..T."""
    i = np.arange(1, T1)
    return float(np.mean(np.exp(s) / (np.exp(s) + i + 1))), float(np.mean(1 / (np.exp(s) + i + 1)))


SINK_LOGITS = (2.0, 0.0, -30.0)


def planted_layer(n_seq: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(N, H, T1, T1) probabilities and (N, H, T1) sink probabilities, one head per sink logit."""
    heads = [uniform_with_sink(s) for s in SINK_LOGITS]
    probs = np.broadcast_to(np.stack([p for p, _ in heads]), (n_seq, len(heads), T1, T1))
    sinks = np.broadcast_to(np.stack([q for _, q in heads]), (n_seq, len(heads), T1))
    np.testing.assert_allclose(probs.sum(-1) + sinks, 1.0, atol=1e-12)
    return probs.copy(), sinks.copy()


def test_learned_sink_mass_of_planted_heads() -> None:
    probs, sinks = planted_layer()
    masses = learned_sink_masses(sinks)
    table = head_table_for_layer(0, probs, sink_probs=sinks)
    for head, s in enumerate(SINK_LOGITS):
        sink_mass, bos_mass = closed_form(s)
        np.testing.assert_allclose(masses[:, head], sink_mass, rtol=1e-12)
        rows = table.filter(pl.col("head") == head)
        np.testing.assert_allclose(rows[LEARNED_SINK_MASS], sink_mass, rtol=1e-12)
        np.testing.assert_allclose(rows["bos_mass"], bos_mass, rtol=1e-12)
    # the row BOS attends from (p_sink = e^s / (e^s + 1)) is excluded, as from bos_mass
    assert closed_form(2.0)[0] < np.exp(2.0) / (np.exp(2.0) + 1.0)
    assert head_table_for_layer(0, probs)[LEARNED_SINK_MASS].null_count() == table.height
    with pytest.raises(ValueError, match="do not match"):
        head_table_for_layer(0, probs, sink_probs=sinks[:, :2])


def _write_with_sinks(path: Path, probs: np.ndarray, sinks: np.ndarray, dataset: str) -> None:
    write_h5(path, probs, "toy-model", dataset)
    with h5py.File(path, "a") as handle:
        handle.create_dataset(h5layout.ATTENTION_SINK_PROBS, data=sinks.astype(np.float16))


def test_classify_file_reads_the_sink_dataset_or_gives_null(tmp_path: Path) -> None:
    probs, sinks = planted_layer()
    with_sinks, without = tmp_path / "sinks.h5", tmp_path / "plain.h5"
    _write_with_sinks(with_sinks, probs[None], sinks[None], "a")
    write_h5(without, probs[None], "toy-model", "b")
    _, per_head = classify_file(with_sinks)
    assert per_head.columns == list(PER_HEAD_COLUMNS)
    expected = [closed_form(s)[0] for s in SINK_LOGITS]
    np.testing.assert_allclose(per_head[LEARNED_SINK_MASS], expected, rtol=2e-3, atol=1e-4)
    _, plain = classify_file(without)
    assert plain[LEARNED_SINK_MASS].dtype == pl.Float64
    assert plain[LEARNED_SINK_MASS].null_count() == plain.height


def test_pooling_weights_sequences_and_keeps_null(tmp_path: Path) -> None:
    tables = []
    for name, n_seq, s in (("a", 1, 0.0), ("b", 3, 2.0)):
        p, q = uniform_with_sink(s)
        path = tmp_path / f"{name}.h5"
        _write_with_sinks(
            path,
            np.broadcast_to(p, (1, n_seq, 1, T1, T1)),
            np.broadcast_to(q, (1, n_seq, 1, T1)),
            name,
        )
        tables.append(classify_file(path)[1])
    pooled = pool_datasets(pl.concat(tables))
    expected = (1 * closed_form(0.0)[0] + 3 * closed_form(2.0)[0]) / 4
    np.testing.assert_allclose(pooled[LEARNED_SINK_MASS], [expected], rtol=2e-3)
    # a table of a model without sinks, and one written before the column existed: null
    plain = tables[0].with_columns(pl.lit(None, dtype=pl.Float64).alias(LEARNED_SINK_MASS))
    old = tables[1].drop(LEARNED_SINK_MASS)
    assert pool_datasets(pl.concat([plain, tables[1]]))[LEARNED_SINK_MASS].to_list() == [None]
    assert pool_datasets(old)[LEARNED_SINK_MASS].to_list() == [None]
    assert summarize([tables[0], old]).height == 3


def test_a_tiny_gpt_oss_extraction_gets_the_column(tmp_path: Path) -> None:
    _, path, _, _ = extract_tiny("gpt_oss", tmp_path)
    _, per_head = classify_file(path)
    with h5layout.open_activations(path) as f:
        probs = f[h5layout.ATTENTION_PROBS][...].astype(np.float64)  # (L, N, H, T1, T1)
    missing = 1.0 - probs[..., 1:, :].sum(axis=-1)  # rows 1..T
    expected = missing.mean(axis=(1, 3))  # (L, H)
    assert per_head[LEARNED_SINK_MASS].null_count() == 0
    got = per_head.sort("layer", "head")[LEARNED_SINK_MASS].to_numpy().reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    assert expected.min() > 0.01


def test_summary_reports_the_mean_learned_sink_mass(tmp_path: Path) -> None:
    probs, sinks = planted_layer()
    with_sinks, without = tmp_path / "sinks.h5", tmp_path / "plain.h5"
    _write_with_sinks(with_sinks, probs[None], sinks[None], "a")
    write_h5(without, probs[None], "plain-model", "a")
    summary = summarize([classify_file(with_sinks)[1], classify_file(without)[1]])
    rows = {(r["model"], r["dataset"]): r for r in summary.iter_rows(named=True)}
    expected = np.mean([closed_form(s)[0] for s in SINK_LOGITS])
    for dataset in ("a", "all"):
        row = rows[("toy-model", dataset)]
        assert row["mean_learned_sink_mass"] == pytest.approx(expected, rel=2e-3)
        assert f"{100 * expected:.1f}% of each row to their learned sinks" in row["statement"]
        plain = rows[("plain-model", dataset)]
        assert plain["mean_learned_sink_mass"] is None
        assert "learned sinks" not in plain["statement"]
