"""Head pattern labelling: planted heads, closed forms, threshold edges, brute force, HDF5 files."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from sinkscope.extraction import h5layout
from sinkscope.heads.classify import (
    HeadClassThresholds,
    attention_masses,
    classify,
    classify_file,
    head_table_for_layer,
)
from sinkscope.heads.names import PER_HEAD_COLUMNS

T = 10  # tokens after BOS
T1 = T + 1
TH = HeadClassThresholds()


def _causal_rows_ok(head: np.ndarray) -> None:
    assert np.allclose(head.sum(-1), 1.0)
    assert np.all(head >= 0)
    assert np.all(np.triu(head, 1) == 0)


def pure_sink() -> np.ndarray:
    head = np.zeros((T1, T1))
    head[:, 0] = 1.0
    return head


def pure_diagonal() -> np.ndarray:
    return np.eye(T1)


def sink_prev() -> np.ndarray:
    """Half on BOS, half on the previous token (row 1: both halves land on BOS)."""
    head = np.zeros((T1, T1))
    head[0, 0] = 1.0
    for i in range(1, T1):
        head[i, 0] += 0.5
        head[i, i - 1] += 0.5
    return head


def uniform() -> np.ndarray:
    rows = np.arange(T1)[:, None]
    return np.where(np.arange(T1)[None, :] <= rows, 1.0 / (rows + 1), 0.0)


def planted(bos: float, prev: float) -> np.ndarray:
    """Rows i >= 2: ``bos`` on column 0, ``prev`` on column i-1, the rest on the diagonal;
    row 1: ``bos`` on column 0, the rest on the diagonal."""
    head = np.zeros((T1, T1))
    head[0, 0] = 1.0
    head[1, 0] = bos
    head[1, 1] = 1.0 - bos
    for i in range(2, T1):
        head[i, 0] = bos
        head[i, i - 1] = prev
        head[i, i] = 1.0 - bos - prev
    _causal_rows_ok(head)
    return head


def stack(*heads: np.ndarray, n_seq: int = 1) -> np.ndarray:
    """(n_seq, H, T1, T1) with the same heads in every sequence."""
    return np.broadcast_to(np.stack(heads), (n_seq, len(heads), T1, T1)).copy()


def random_causal(rng: np.random.Generator, shape: tuple[int, ...], t1: int) -> np.ndarray:
    logits = rng.normal(scale=2.0, size=(*shape, t1, t1))
    logits = np.where(np.tril(np.ones((t1, t1), dtype=bool)), logits, -np.inf)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return probs / probs.sum(-1, keepdims=True)


# --- planted heads ---------------------------------------------------------------------------


def test_planted_heads_masses_and_labels() -> None:
    for head in (pure_sink(), pure_diagonal(), sink_prev(), uniform()):
        _causal_rows_ok(head)
    table = head_table_for_layer(3, stack(pure_sink(), pure_diagonal(), sink_prev(), uniform()))
    assert table.columns == [
        "layer",
        "head",
        "sequence",
        "bos_mass",
        "diagonal_mass",
        "subdiagonal_mass",
        "sink_prev_mass",
        "learned_sink_mass",
        "is_sink",
        "is_diagonal",
        "is_sink_prev",
        "head_class",
    ]
    assert table["layer"].to_list() == [3] * 4
    assert table["head_class"].to_list() == ["sink", "diagonal", "sink+previous", "other"]
    assert table["is_sink"].to_list() == [True, False, True, False]
    assert table["is_diagonal"].to_list() == [False, True, False, False]
    assert table["is_sink_prev"].to_list() == [False, False, True, False]

    harmonic_bos = sum(1.0 / (i + 1) for i in range(1, T1)) / T
    harmonic_sub = sum(1.0 / (i + 1) for i in range(2, T1)) / T
    expected = {
        "bos_mass": [1.0, 0.0, (1.0 + 0.5 * (T - 1)) / T, harmonic_bos],
        "diagonal_mass": [0.0, 1.0, 0.0, harmonic_bos],
        "subdiagonal_mass": [0.0, 0.0, 0.5 * (T - 1) / T, harmonic_sub],
    }
    for column, values in expected.items():
        np.testing.assert_allclose(table[column].to_numpy(), values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        table["sink_prev_mass"].to_numpy(),
        table["bos_mass"].to_numpy() + table["subdiagonal_mass"].to_numpy(),
    )
    # the sink+prev head's masses add up to the whole mass: nothing counted twice
    assert table["sink_prev_mass"][2] == pytest.approx(1.0, abs=1e-12)


def test_row_ordering_and_float16_input() -> None:
    probs = np.stack([stack(pure_sink(), uniform())[0], stack(pure_diagonal(), sink_prev())[0]])
    table = head_table_for_layer(0, probs.astype(np.float16))
    assert table.select("head", "sequence").rows() == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert table["head_class"].to_list() == ["sink", "diagonal", "other", "sink+previous"]


def test_both_sink_and_diagonal_label_goes_to_larger_mass() -> None:
    sinkish = planted(bos=0.6, prev=0.0)  # bos 0.6, diagonal 0.4
    diagish = planted(bos=0.45, prev=0.0)  # bos 0.45, diagonal 0.55
    table = head_table_for_layer(0, stack(sinkish, diagish))
    assert table["is_sink"].all() and table["is_diagonal"].all()
    assert table["head_class"].to_list() == ["sink", "diagonal"]
    _, tie = classify(0.5, 0.5, 0.0)
    assert tie == "sink"


# --- threshold edges -------------------------------------------------------------------------

EPS = 1e-6
SUB_SCALE = T / (T - 1)  # per-row prev weight giving a sub-diagonal mass of 1 (row 1 has none)


@pytest.mark.parametrize(
    ("head_at", "head_below", "flag"),
    [
        (planted(0.4, 0.0), planted(0.4 - EPS, 0.0), "is_sink"),
        (planted(0.6, 0.0), planted(0.6 + EPS, 0.0), "is_diagonal"),
        # joint = 0.3 + 0.3 = 0.6
        (
            planted(0.3, 0.3 * SUB_SCALE),
            planted(0.3 - EPS, 0.3 * SUB_SCALE),
            "is_sink_prev",
        ),
        # bos = 0.08 = 10% of joint 0.8
        (
            planted(0.08, 0.72 * SUB_SCALE),
            planted(0.08 - EPS, 0.72 * SUB_SCALE),
            "is_sink_prev",
        ),
        # sub-diagonal = 0.08 = 10% of joint 0.8
        (
            planted(0.72, 0.08 * SUB_SCALE),
            planted(0.72, (0.08 - EPS) * SUB_SCALE),
            "is_sink_prev",
        ),
    ],
    ids=["sink", "diagonal", "joint", "min-part-bos", "min-part-subdiagonal"],
)
def test_threshold_edges(head_at: np.ndarray, head_below: np.ndarray, flag: str) -> None:
    table = head_table_for_layer(0, stack(head_at, head_below))
    assert table[flag].to_list() == [True, False]


def test_threshold_edges_are_exact_in_masses() -> None:
    masses = attention_masses(stack(planted(0.3, 0.3 * SUB_SCALE)))
    assert masses["sink_prev_mass"][0, 0] == pytest.approx(0.6, abs=1e-12)
    masses = attention_masses(stack(planted(0.72, 0.08 * SUB_SCALE)))
    assert masses["subdiagonal_mass"][0, 0] == pytest.approx(0.08, abs=1e-12)


def test_classify_scalar_edges_and_custom_thresholds() -> None:
    flags, labels = classify(np.array([0.4, 0.4 - EPS]), 0.0, 0.0)
    assert flags["is_sink"].tolist() == [True, False]
    assert labels.tolist() == ["sink", "other"]
    th = HeadClassThresholds(sink=0.9, diagonal=0.2, sink_prev_joint=0.5, sink_prev_min_part=0.5)
    flags, labels = classify([[0.25, 0.24]], [[0.2, 0.1]], [[0.25, 0.26]], th)
    assert flags["is_sink_prev"].tolist() == [[True, False]]
    assert flags["is_diagonal"].tolist() == [[True, False]]
    assert labels.tolist() == [["sink+previous", "other"]]


@pytest.mark.parametrize("field", ["sink", "diagonal", "sink_prev_joint", "sink_prev_min_part"])
def test_thresholds_validated(field: str) -> None:
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=field):
            HeadClassThresholds(**{field: bad})
    with pytest.raises(TypeError, match=field):
        HeadClassThresholds(**{field: "0.4"})
    assert getattr(HeadClassThresholds(**{field: 1}), field) == 1


def test_default_thresholds_are_the_schemas_paper_values(default_config: dict) -> None:
    """The defaults are the config schema's head_classes defaults, the paper's §3 numbers, and
    what the default run uses (config.yaml leaves them to the schema)."""
    from sinkscope.config_schema import schema_default
    from sinkscope.heads.classify import DEFAULT_THRESHOLDS

    paper = {"sink": 0.40, "diagonal": 0.40, "sink_prev_joint": 0.60, "sink_prev_min_part": 0.10}
    assert schema_default("head_classes") == paper
    assert DEFAULT_THRESHOLDS == HeadClassThresholds() == HeadClassThresholds(**paper)
    assert HeadClassThresholds(**default_config["head_classes"]) == DEFAULT_THRESHOLDS


# --- vectorised vs brute force ---------------------------------------------------------------


def test_masses_match_brute_force_loop() -> None:
    rng = np.random.default_rng(7)
    n_seq, n_heads, t1 = 3, 5, 9
    probs = random_causal(rng, (n_seq, n_heads), t1)
    masses = attention_masses(probs)
    t = t1 - 1
    for s in range(n_seq):
        for h in range(n_heads):
            a = probs[s, h]
            bos = sum(a[i, 0] for i in range(1, t1)) / t
            diag = sum(a[i, i] for i in range(1, t1)) / t
            sub = sum(a[i, i - 1] for i in range(2, t1)) / t
            assert masses["bos_mass"][s, h] == pytest.approx(bos, abs=1e-12)
            assert masses["diagonal_mass"][s, h] == pytest.approx(diag, abs=1e-12)
            assert masses["subdiagonal_mass"][s, h] == pytest.approx(sub, abs=1e-12)
            assert masses["sink_prev_mass"][s, h] == pytest.approx(bos + sub, abs=1e-12)
            assert bos + diag + sub <= 1.0 + 1e-12  # disjoint entries of a probability row


def test_attention_masses_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="T1=2"):
        attention_masses(np.ones((1, 1, 2, 2)))
    with pytest.raises(ValueError, match="shape"):
        attention_masses(np.ones((1, 3, 3)))
    bad = stack(uniform())
    bad[0, 0, 3, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        attention_masses(bad)


# --- files ----------------------------------------------------------------------------------


def write_h5(path: Path, probs: np.ndarray, model: str, dataset: str) -> None:
    with h5py.File(path, "w") as handle:
        handle.create_dataset("attention/probs", data=probs.astype(np.float16))
        handle.attrs["model_name"] = model
        handle.attrs["dataset_name"] = dataset
        handle.attrs["n_sequences"] = probs.shape[1]
        handle.attrs["context_length"] = probs.shape[-1] - 1
        handle.attrs["format"] = h5layout.FORMAT
        handle.attrs["schema_version"] = h5layout.SCHEMA_VERSION
        handle.attrs["complete"] = True


def test_classify_file_matches_head_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    probs = random_causal(rng, (3, 4, 2), T1)  # L=3, N=4, H=2
    probs[1, :, 0] = pure_sink()
    probs[2, :, 1] = sink_prev()
    path = tmp_path / "acts.h5"
    write_h5(path, probs, "toy-model", "toy-data")

    per_sequence, per_head = classify_file(path, TH)
    expected = pl.concat(
        [head_table_for_layer(layer, probs[layer].astype(np.float16), TH) for layer in range(3)]
    )
    assert per_sequence.select("model", "dataset").unique().rows() == [("toy-model", "toy-data")]
    assert_frame_equal(per_sequence.drop("model", "dataset"), expected)

    assert per_head.columns == list(PER_HEAD_COLUMNS)
    assert per_head.height == 3 * 2
    assert per_head["n_sequences"].to_list() == [4] * 6
    by_head = expected.group_by("layer", "head").agg(
        pl.col("bos_mass").mean().alias("mean"), pl.col("bos_mass").std(ddof=0).alias("std")
    )
    joined = per_head.join(by_head, on=["layer", "head"])
    np.testing.assert_allclose(joined["bos_mass"], joined["mean"], atol=1e-12)
    np.testing.assert_allclose(joined["bos_mass_std"], joined["std"], atol=1e-12)
    classes = {(r["layer"], r["head"]): r["head_class"] for r in per_head.iter_rows(named=True)}
    assert classes[(1, 0)] == "sink" and classes[(2, 1)] == "sink+previous"

    only, only_heads = classify_file(path, TH, layers=[2])
    assert_frame_equal(only, per_sequence.filter(pl.col("layer") == 2))
    assert only_heads["layer"].unique().to_list() == [2]
    with pytest.raises(ValueError, match="out of range"):
        classify_file(path, TH, layers=[3])


def test_classify_file_checks_attributes(tmp_path: Path) -> None:
    path = tmp_path / "bad.h5"
    write_h5(path, stack(uniform())[None], "m", "d")
    with h5py.File(path, "a") as handle:
        handle.attrs["n_sequences"] = 5
    with pytest.raises(ValueError, match="n_sequences"):
        classify_file(path)
    with h5py.File(path, "a") as handle:
        del handle.attrs["model_name"]
    with pytest.raises(ValueError, match="model_name"):
        classify_file(path)
