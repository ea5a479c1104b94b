"""Sequence cutting is deterministic, BOS sits at position 0 (the no-BOS variant is the same cut
without it), and bad lengths fail early."""

from __future__ import annotations

import numpy as np
import pytest

from sinkscope.prepare.tokens import cut_sequences, read_tokens, token_ids_sha256


def test_cut_is_deterministic_and_bos_first() -> None:
    stream = np.arange(1000) + 10
    a, starts_a = cut_sequences(stream, 5, 32, seed=3, bos_token_id=1)
    b, starts_b = cut_sequences(stream, 5, 32, seed=3, bos_token_id=1)
    assert a.shape == (5, 33) and a.dtype == np.int32
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(starts_a, starts_b)
    assert (a[:, 0] == 1).all()
    # each row is the stream window it claims to be, blocks do not overlap and are in corpus order
    for row, start in zip(a, starts_a):
        np.testing.assert_array_equal(row[1:], stream[start : start + 32])
    assert (np.diff(starts_a) >= 32).all()
    assert (starts_a % 32 == 0).all()


def test_no_bos_cut_is_the_bos_cut_without_its_first_column() -> None:
    """bos = drop (the no-BOS variant): the same blocks, the same T content tokens, no BOS."""
    stream = np.random.default_rng(5).integers(2, 500, size=3000)
    with_bos, starts = cut_sequences(stream, 7, 40, seed=11, bos_token_id=1)
    without, starts_drop = cut_sequences(stream, 7, 40, seed=11, bos_token_id=1, keep_bos=False)
    assert without.shape == (7, 40) and without.dtype == np.int32
    np.testing.assert_array_equal(starts_drop, starts)
    np.testing.assert_array_equal(without, with_bos[:, 1:])
    for row, start in zip(without, starts):  # against the stream itself, not the BOS cut
        np.testing.assert_array_equal(row, stream[start : start + 40])
    assert 1 not in without


def test_other_seed_other_blocks() -> None:
    stream = np.arange(10_000)
    a, _ = cut_sequences(stream, 4, 16, seed=0, bos_token_id=1)
    b, _ = cut_sequences(stream, 4, 16, seed=1, bos_token_id=1)
    assert not np.array_equal(a, b)


def test_exactly_enough_tokens_and_one_short() -> None:
    stream = np.arange(64)
    ids, _ = cut_sequences(stream, 2, 32, seed=0, bos_token_id=7)
    np.testing.assert_array_equal(ids[:, 1:].ravel(), stream)
    with pytest.raises(ValueError, match="fewer than the 2 sequences"):
        cut_sequences(stream[:63], 2, 32, seed=0, bos_token_id=7)


def test_token_hash_is_checked_on_read(tmp_path) -> None:
    from sinkscope.io import write_json

    ids = np.arange(12, dtype=np.int32).reshape(3, 4)
    path = tmp_path / "tokens.json"
    write_json({"token_ids": ids.tolist(), "token_ids_sha256": token_ids_sha256(ids)}, path)
    read_back, _ = read_tokens(path)
    np.testing.assert_array_equal(read_back, ids)
    write_json({"token_ids": ids.tolist(), "token_ids_sha256": "0" * 64}, path)
    with pytest.raises(ValueError, match="sha256"):
        read_tokens(path)


def test_context_longer_than_the_model_allows_fails_before_loading(tmp_path) -> None:
    from transformers import LlamaConfig

    from sinkscope.prepare.models import prepare_model
    from sinkscope.prepare.tokens import prepare_tokens

    weights = tmp_path / "weights"
    weights.mkdir()
    LlamaConfig(
        max_position_embeddings=64,
        hidden_size=16,
        num_attention_heads=2,
        num_hidden_layers=1,
        intermediate_size=32,
        vocab_size=50,
    ).save_pretrained(weights)
    entry = {"source": {"kind": "local", "path": str(weights)}, "dtype": "float32"}
    prepared = tmp_path / "prepared"
    prepare_model("tiny", entry, prepared, tmp_path)
    with pytest.raises(ValueError, match=r"extraction.context_length = 64 \(\+1 for BOS\) exceeds"):
        prepare_tokens(
            tmp_path / "no-stream.npz",
            tmp_path / "no-corpus.json",
            prepared,
            "tiny",
            "none",
            2,
            64,
            0,
            tmp_path / "tokens.json",
        )
