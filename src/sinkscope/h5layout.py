"""The layout of the activation HDF5 files: the one place that defines every dataset.

One file per model x dataset pair, ``results/activations/{model}/{dataset}.h5``. Symbols:
``L`` layers, ``N`` sequences, ``H`` query heads, ``K`` key/value heads, ``T1 = T + 1`` positions
(position 0 is the BOS token, followed by ``T`` text tokens), ``D`` model width, ``hd`` head width.
The writer (``sinkscope.extract``), the readers (analyses, ``sinkscope inspect``) and the README
all use :data:`DATASETS`; ``sinkscope inspect --layout`` prints it.

Every dataset carries the attributes ``description``, ``axes`` and ``symbol`` (the paper's name); the
file carries the provenance attributes listed in :data:`FILE_ATTRIBUTES`. Files are written under a
temporary name and renamed when complete, and the root attribute ``complete`` is set last, so a file
without it (or with a foreign ``format``) is rejected by :func:`open_activations`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

FORMAT = "sinkscope-activations"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of the activation file."""

    name: str
    axes: tuple[str, ...]
    dtype_key: str  # key into the config's extraction.storage_dtypes, or a fixed numpy dtype
    symbol: str
    description: str
    chunk_axes: tuple[str, ...]  # axes kept whole in one chunk; the others get chunk size 1

    @property
    def fixed_dtype(self) -> str | None:
        return None if self.dtype_key in STORAGE_DTYPE_KEYS else self.dtype_key


STORAGE_DTYPE_KEYS = ("attention", "residual", "activations", "weights")

DATASETS: tuple[DatasetSpec, ...] = (
    DatasetSpec(
        "tokens/input_ids",
        ("sequence", "position"),
        "int32",
        "x",
        "Token ids fed to the model; position 0 is the model's BOS token.",
        ("sequence", "position"),
    ),
    DatasetSpec(
        "residual/X",
        ("layer", "sequence", "position", "d_model"),
        "residual",
        "X^(l)",
        "Residual stream entering layer l (hidden_states[l] of transformers; layer 0 is the "
        "embedding output), unnormalised.",
        ("position", "d_model"),
    ),
    DatasetSpec(
        "attention/Z",
        ("layer", "sequence", "position", "d_model"),
        "activations",
        "Z^(l)",
        "Normed attention input of layer l, with the learnable norm gain: exactly what the "
        "query/key/value projections see (output of the layer's input norm).",
        ("position", "d_model"),
    ),
    DatasetSpec(
        "attention/probs",
        ("layer", "sequence", "head", "query", "key"),
        "attention",
        "A^(l,h)",
        "Attention probabilities (softmax output, causal: zero above the diagonal, rows sum to 1).",
        ("head", "query", "key"),
    ),
    DatasetSpec(
        "attention/values",
        ("layer", "sequence", "kv_head", "position", "head_dim"),
        "activations",
        "V^(l,k)",
        "Value vectors of each key/value head, Z W_V^T + b_V (query head h uses kv_head "
        "h // (H / K)).",
        ("kv_head", "position", "head_dim"),
    ),
    DatasetSpec(
        "attention/residual_update",
        ("layer", "sequence", "position", "d_model"),
        "activations",
        "ATTN(Z)",
        "What the attention block adds to the residual stream of layer l (all heads, after the "
        "post-attention norm where the model has one, e.g. Gemma 2/3).",
        ("position", "d_model"),
    ),
    DatasetSpec(
        "weights/W_V",
        ("layer", "head", "head_dim", "d_model"),
        "weights",
        "W_V^(l,h)",
        "Value map of query head h (grouped-query attention expanded): acts on attention/Z.",
        ("head", "head_dim", "d_model"),
    ),
    DatasetSpec(
        "weights/b_V",
        ("layer", "head", "head_dim"),
        "weights",
        "b_V^(l,h)",
        "Value bias of query head h (zeros where the model has none).",
        ("head", "head_dim"),
    ),
    DatasetSpec(
        "weights/W_O",
        ("layer", "head", "d_model", "head_dim"),
        "weights",
        "W_O^(l,h)",
        "Output map of query head h: the head's slice of the output projection. "
        "W_VO = W_O[l,h] @ W_V[l,h] acts on attention/Z; W_O @ W_V @ diag(norm_gain) acts on the "
        "gain-free RMS-normalised input (the paper's W_VO with a non-learnable RMSNorm).",
        ("head", "d_model", "head_dim"),
    ),
    DatasetSpec(
        "weights/norm_gain",
        ("layer", "d_model"),
        "weights",
        "g^(l)",
        "Effective gain of layer l's input norm (w for Llama-style norms, 1 + w for Gemma).",
        ("d_model",),
    ),
)

DATASET_BY_NAME: dict[str, DatasetSpec] = {spec.name: spec for spec in DATASETS}

FILE_ATTRIBUTES: dict[str, str] = {
    "format": f"always {FORMAT!r}",
    "schema_version": "integer version of this layout",
    "complete": "set to True as the last write; absent in a file that was not finished",
    "sinkscope_version": "version of the package that wrote the file",
    "model_name": "the model's key in config.yaml",
    "model_source": "the model's source entry (JSON)",
    "model_sha256": "content hash of the model (GGUF sha256, or hub id@revision)",
    "model_class": "transformers class that ran the forward pass",
    "model_type": "transformers model_type",
    "dtype": "dtype of the forward pass",
    "attn_implementation": "attention kernel transformers actually used",
    "device": "device of the forward pass",
    "library_versions": "torch, transformers, h5py, numpy versions (JSON)",
    "dataset_name": "the dataset's key in config.yaml",
    "dataset_sha256": "sha256 of the cleaned corpus text",
    "token_ids_sha256": "sha256 of tokens/input_ids (int32, C order)",
    "n_sequences": "N",
    "context_length": "T (tokens after BOS); sequences have T + 1 positions",
    "seed": "seed of the sequence cut",
    "config_sha256": "sha256 of the config sections this file depends on",
    "n_layers": "L",
    "n_heads": "H",
    "n_kv_heads": "K",
    "head_dim": "hd",
    "d_model": "D",
    "bos_token_id": "id of the BOS token at position 0",
    "post_attention_norm": "True where the attention output is normed before the residual add",
    "extraction_seconds": "wall seconds of the extraction (not byte-stable)",
    "extraction_profile": "wall seconds per stage: forward, to_host (cast + device-to-host copy), "
    "write (compression + writing), write_io (the writing alone), write_wait (forward waiting "
    "for the writer); batch_size, overlap_writes (JSON)",
}


def dataset_shape(spec: DatasetSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(int(sizes[axis]) for axis in spec.axes)


def chunk_shape(spec: DatasetSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """One chunk per (layer, sequence): readers stream a layer at a time, or one head's map."""
    return tuple(int(sizes[a]) if a in spec.chunk_axes else 1 for a in spec.axes)


class ActivationFileError(ValueError):
    """A file that is not a complete sinkscope activation file."""


def open_activations(path: str | os.PathLike[str]) -> h5py.File:
    """Open an activation file read-only, rejecting truncated, unfinished or foreign files.

    Use it as a context manager (``with open_activations(p) as f:``) so that no file stays open
    across jobs. On cluster file systems without working locks set ``HDF5_USE_FILE_LOCKING=FALSE``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such activation file")
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise ActivationFileError(f"{path}: not a readable HDF5 file ({error})") from error
    attrs = handle.attrs
    if attrs.get("format") != FORMAT:
        handle.close()
        raise ActivationFileError(
            f"{path}: not a sinkscope activation file (format attribute "
            f"is {attrs.get('format')!r}, expected {FORMAT!r})"
        )
    if int(attrs.get("schema_version", -1)) != SCHEMA_VERSION:
        handle.close()
        raise ActivationFileError(
            f"{path}: schema version {attrs.get('schema_version')} is not "
            f"{SCHEMA_VERSION}; re-run the extraction"
        )
    if not bool(attrs.get("complete", False)):
        handle.close()
        raise ActivationFileError(f"{path}: the file was never completed (killed extraction?)")
    return handle


def w_vo(handle: h5py.File, layer: int, with_norm_gain: bool = False) -> np.ndarray:
    """Per-head value-output maps ``W_VO[h] = W_O[h] @ W_V[h]`` of one layer, shape (H, D, D).

    ``with_norm_gain=True`` composes them with ``diag(norm_gain)`` (acting on the gain-free
    RMS-normalised input, the paper's §3 setting).
    """
    w_v = handle["weights/W_V"][layer].astype(np.float64)
    w_o = handle["weights/W_O"][layer].astype(np.float64)
    product = np.einsum("hdk,hke->hde", w_o, w_v)
    if with_norm_gain:
        product = product * handle["weights/norm_gain"][layer].astype(np.float64)[None, None, :]
    return product


def describe_layout() -> str:
    """The layout as text (used by ``sinkscope inspect --layout`` and the README)."""
    lines = [f"{FORMAT} schema version {SCHEMA_VERSION}", "", "Datasets:"]
    for spec in DATASETS:
        dtype = spec.fixed_dtype or f"extraction.storage_dtypes.{spec.dtype_key}"
        lines.append(f"  {spec.name}  ({', '.join(spec.axes)})  [{dtype}]  {spec.symbol}")
        lines.append(f"      {spec.description}")
    lines += ["", "File attributes:"]
    lines += [f"  {key}: {meaning}" for key, meaning in FILE_ATTRIBUTES.items()]
    return "\n".join(lines)


# ------------------------------------------------------------------ block-wise reading

#: Bytes of stored activations per block of sequences: at most this fraction of one layer's
#: data (every per-layer dataset, as ``bench/run.py`` counts it) ...
BLOCK_LAYER_FRACTION = 1 / 16
#: ... and at most this many bytes; at least one sequence per block.
BLOCK_MAX_BYTES = 32 * 2**20


def default_block_size(handle: h5py.File | h5py.Group) -> int:
    """Sequences per block: :data:`BLOCK_LAYER_FRACTION` of one layer's stored bytes, capped
    at :data:`BLOCK_MAX_BYTES` (at least 1, at most ``N``).

    The float32/float64 work arrays of a block take up to about 10 times its stored bytes
    (measured: oversmoothing ~11x before heap fragmentation, ~20x with it), so the working
    set stays near one layer's stored data. Used by :mod:`sinkscope.oversmoothing` and :mod:`sinkscope.geometry`.
    """
    n_seq = int(handle["residual/X"].shape[1])
    per_sequence = 0
    for name in _PER_LAYER_DATASETS:
        dataset = handle[name]
        per_sequence += int(np.prod(dataset.shape[2:])) * dataset.dtype.itemsize
    budget = min(BLOCK_LAYER_FRACTION * n_seq * per_sequence, BLOCK_MAX_BYTES)
    return int(min(n_seq, max(1, budget // per_sequence)))


_PER_LAYER_DATASETS: tuple[str, ...] = (
    "residual/X",
    "attention/Z",
    "attention/probs",
    "attention/values",
    "attention/residual_update",
)
