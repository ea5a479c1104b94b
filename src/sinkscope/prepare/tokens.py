"""Cutting a tokenized corpus into the N sequences of T tokens that extraction feeds the model.

The paper (Fig. 1 caption) uses 50 sequences of 256 tokens after BOS per dataset. Here the cleaned
documents are tokenized without special tokens and concatenated (in document order) into one
stream; the stream is split into consecutive, non-overlapping blocks of ``T`` tokens, and ``N`` blocks
are drawn without replacement by a seeded generator and kept in corpus order. The model's BOS token
is then forced at position 0 of every sequence (SmolLM2's tokenizer does not add one, Gemma's does:
forcing it makes both behave the same and the text part identical in length); a model without one
needs ``models.<name>.bos_token_id`` in the config.

A no-BOS variant (``datasets.<name>.bos: both``, dataset id ``<name>.no-bos``; see
:mod:`sinkscope.variants`) is cut from the same stream with the same seed, so it draws the same
blocks: its sequences are ``[t_1 .. t_T]`` (``T`` positions), the BOS sequences ``[BOS, t_1 .. t_T]``
without their column 0.

The stream is made once per model and corpus (:func:`tokenize_corpus`, rule ``tokenize_corpus``)
and read by every job that cuts sequences or streams from it (:func:`read_token_stream`): this
module's :func:`prepare_tokens`, the StreamingLLM streams and the long-context geometry test.
Its file is one uncompressed ``.npz`` that numpy reads without this package: ``ids`` (the stream,
little-endian int32) and ``meta`` (a 0-d string array holding a JSON object: model, dataset,
tokenizer, ``vocab_size``, the corpus' ``text_sha256``, ``n_tokens``, ``ids_sha256``,
``sinkscope_version``), e.g. ``json.loads(numpy.load(path)["meta"].item())``.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from sinkscope import __version__
from sinkscope.io import atomic_path, read_json, write_json
from sinkscope.variants import BOS_DROP, BOS_KEEP

#: The dtype of a token stream file's ids: every vocabulary of the workflow fits int32 (checked).
STREAM_DTYPE = np.dtype("<i4")


def token_ids_sha256(token_ids: np.ndarray) -> str:
    """sha256 of token ids as little-endian int32 in C order (the same bytes the HDF5 stores)."""
    return hashlib.sha256(np.ascontiguousarray(token_ids, dtype="<i4").tobytes()).hexdigest()


def cut_sequences(
    stream: np.ndarray,
    n_sequences: int,
    context_length: int,
    seed: int,
    bos_token_id: int,
    keep_bos: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Cut ``n_sequences`` blocks of ``context_length`` tokens from ``stream``, BOS prepended.

    Returns ``(token_ids, block_starts)``: ``token_ids`` has shape (N, T + 1) with the BOS id in
    column 0; ``block_starts`` are the offsets of the blocks in the stream (sorted). With
    ``keep_bos=False`` (the no-BOS variant) the same blocks come without BOS: shape (N, T), equal
    to the ``keep_bos=True`` result without its column 0 (the blocks depend only on the stream,
    ``n_sequences``, ``context_length`` and ``seed``).
    Raises ``ValueError`` when the stream holds fewer than ``n_sequences`` blocks.
    """
    if n_sequences < 1 or context_length < 1:
        raise ValueError("n_sequences and context_length must be at least 1")
    stream = np.asarray(stream, dtype=np.int64)
    n_blocks = stream.size // context_length
    if n_blocks < n_sequences:
        raise ValueError(
            f"the corpus has {stream.size} tokens = {n_blocks} blocks of {context_length}, "
            f"fewer than the {n_sequences} sequences asked for"
        )
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(n_blocks, size=n_sequences, replace=False))
    starts = chosen * context_length
    windows = stream[starts[:, None] + np.arange(context_length)[None, :]]
    if not keep_bos:
        return windows.astype(np.int32), starts
    bos = np.full((n_sequences, 1), bos_token_id, dtype=np.int64)
    return np.concatenate([bos, windows], axis=1).astype(np.int32), starts


def tokenize_documents(tokenizer: Any, texts: Iterable[str], batch_size: int = 256) -> np.ndarray:
    """Tokenize documents without special tokens and concatenate them into one stream."""
    pieces: list[np.ndarray] = []
    batch: list[str] = []

    def flush() -> None:
        if batch:
            encoded = tokenizer(batch, add_special_tokens=False)["input_ids"]
            pieces.extend(np.asarray(ids, dtype=np.int64) for ids in encoded)
            batch.clear()

    for text in texts:
        batch.append(text)
        if len(batch) >= batch_size:
            flush()
    flush()
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)


def tokenize_corpus(
    documents_parquet: Path,
    corpus_provenance: Path,
    prepared_model_dir: Path,
    model_name: str,
    dataset_name: str,
    out_npz: Path,
) -> dict[str, Any]:
    """Tokenize one corpus with one model's tokenizer (:func:`tokenize_documents`) and write the
    stream with what identifies it (the module docstring's ``.npz``), atomically; returns the
    ``meta`` record. ``corpus_provenance`` is the corpus' ``documents.json`` (its ``text_sha256``
    is recorded). Raises ``ValueError`` when an id does not fit :data:`STREAM_DTYPE`."""
    from sinkscope.prepare.corpora import load_documents
    from sinkscope.prepare.models import load_tokenizer

    tokenizer = load_tokenizer(prepared_model_dir)
    stream = tokenize_documents(tokenizer, load_documents(documents_parquet)["text"])
    limits = np.iinfo(STREAM_DTYPE)
    if stream.size and (stream.min() < 0 or stream.max() > limits.max):
        raise ValueError(
            f"{model_name!r} tokenized {dataset_name!r} into ids outside 0..{limits.max} "
            f"({stream.min()}..{stream.max()}): they do not fit {STREAM_DTYPE}"
        )
    ids = stream.astype(STREAM_DTYPE)
    meta = {
        "model_name": model_name,
        "dataset_name": dataset_name,
        "tokenizer": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "text_sha256": read_json(corpus_provenance)["text_sha256"],
        "n_tokens": int(ids.size),
        "ids_sha256": token_ids_sha256(ids),
        "sinkscope_version": __version__,
    }
    with atomic_path(out_npz) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, ids=ids, meta=np.array(json.dumps(meta, sort_keys=True)))
    return meta


def read_token_stream(
    path: Path, corpus_provenance: Path, vocab_size: int | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """The token stream of :func:`tokenize_corpus` (int64) and its ``meta`` record.

    Refused with a ``ValueError`` naming ``path`` when it is not a readable ``.npz`` (truncated,
    damaged, another file), when its ids do not match their sha256, when it
    was tokenized from another text than the corpus of ``corpus_provenance`` (its
    ``documents.json``: a stale or wrong stream) or, with ``vocab_size``, by a tokenizer of
    another size."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            ids = archive["ids"]
            meta = json.loads(archive["meta"].item())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{path}: not a readable token stream ({type(error).__name__}: {error}); delete it "
            "and re-run tokenize_corpus"
        ) from error
    if token_ids_sha256(ids) != meta["ids_sha256"]:
        raise ValueError(f"{path}: token ids do not match their recorded sha256")
    corpus_sha = read_json(corpus_provenance)["text_sha256"]
    if meta["text_sha256"] != corpus_sha:
        raise ValueError(
            f"{path}: tokenized from a corpus with text_sha256 {meta['text_sha256']}, not the "
            f"one of {corpus_provenance} ({corpus_sha}); re-run tokenize_corpus"
        )
    if vocab_size is not None and meta["vocab_size"] != vocab_size:
        raise ValueError(
            f"{path}: tokenized with a vocabulary of {meta['vocab_size']} tokens, this model's "
            f"tokenizer has {vocab_size}; re-run tokenize_corpus"
        )
    return ids.astype(np.int64), meta


def prepare_tokens(
    token_stream: Path,
    corpus_provenance: Path,
    prepared_model_dir: Path,
    model_name: str,
    dataset_name: str,
    n_sequences: int,
    context_length: int,
    seed: int,
    out_json: Path,
    bos: str = BOS_KEEP,
) -> dict[str, Any]:
    """Cut one pair's sequences from its corpus' token stream (:func:`read_token_stream`) and
    write them as JSON.

    ``bos``: :data:`~sinkscope.variants.BOS_KEEP` (``[BOS, t_1 .. t_T]``) or
    :data:`~sinkscope.variants.BOS_DROP` (the same ``[t_1 .. t_T]`` without BOS; the record's
    ``bos_token_id`` is then the id that was left out), recorded as the record's ``bos``.

    Checks, before any model weights are loaded, that ``T + 1`` fits the model's context
    (``max_position_embeddings``), that the model has a BOS id (``models.<name>.bos_token_id``
    where set, else its own: :func:`sinkscope.prepare.models.bos_token_id`) inside its vocabulary, and
    that the corpus holds enough tokens; the errors name the config keys to change.
    """
    from sinkscope.prepare.models import (
        load_config,
        load_tokenizer,
        model_shape,
        resolve_bos_token_id,
    )

    config = load_config(prepared_model_dir)
    shape = model_shape(config)
    if context_length + 1 > shape.max_positions:
        raise ValueError(
            f"extraction.context_length = {context_length} (+1 for BOS) exceeds the "
            f"{shape.max_positions} positions model {model_name!r} allows"
        )
    tokenizer = load_tokenizer(prepared_model_dir)
    if bos not in (BOS_KEEP, BOS_DROP):
        raise ValueError(f"bos must be {BOS_KEEP!r} or {BOS_DROP!r}, not {bos!r}")
    bos_id, bos_source = resolve_bos_token_id(prepared_model_dir, tokenizer, config)
    stream, meta = read_token_stream(token_stream, corpus_provenance, len(tokenizer))
    try:
        token_ids, starts = cut_sequences(
            stream, n_sequences, context_length, seed, bos_id, keep_bos=bos == BOS_KEEP
        )
    except ValueError as error:
        raise ValueError(
            f"dataset {dataset_name!r} tokenized by {model_name!r}: {error}; lower "
            "extraction.n_sequences or extraction.context_length, or use a larger corpus"
        ) from error
    record = {
        "model_name": model_name,
        "dataset_name": dataset_name,
        "n_sequences": n_sequences,
        "context_length": context_length,
        "seed": seed,
        "bos": bos,
        "bos_token_id": bos_id,
        "bos_token_source": bos_source,
        "stream_length": int(stream.size),
        "block_starts": starts.tolist(),
        "dataset_sha256": meta["text_sha256"],
        "token_ids_sha256": token_ids_sha256(token_ids),
        "sinkscope_version": __version__,
        "token_ids": token_ids.tolist(),
    }
    write_json(record, out_json)
    return record


def read_tokens(path: Path) -> tuple[np.ndarray, dict[str, Any]]:
    """Token ids (N, T + 1) int32 (no-BOS variant: (N, T)) and the record they came with; the
    hash is re-checked. A record without ``bos`` (written before the key existed) kept BOS."""
    record = read_json(path)
    token_ids = np.asarray(record["token_ids"], dtype=np.int32)
    if token_ids_sha256(token_ids) != record["token_ids_sha256"]:
        raise ValueError(f"{path}: token ids do not match their recorded sha256")
    return token_ids, record
