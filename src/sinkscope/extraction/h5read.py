"""The readers of the activation files: a layer's tensors, rebuilt or decoded from what is stored.

The layout they read (dataset and attribute names, :func:`~sinkscope.extraction.h5layout.open_activations`)
is :mod:`sinkscope.extraction.h5layout`. Inside:

* recomputed arrays (``DERIVED`` of the layout): :func:`read_Z` and :func:`read_values` rebuild the
  attention input ``Z`` and the value vectors from ``residual/X`` and the stored weights, through
  :class:`InputProjection` (one layer's norm and value projection, read once) and
  :func:`input_norm` / :func:`round_to_dtype` (the forward's norm and roundings); :func:`w_vo`
  gives the heads' value-output maps;
* block-wise reading: :func:`read_layer` decodes a block of sequences of one layer in threads
  (:mod:`sinkscope.extraction.h5codec`), :func:`default_block_size` sizes the blocks
  (:data:`BLOCK_LAYER_FRACTION`, :data:`BLOCK_MAX_BYTES`, :func:`sequence_layer_bytes`), and
  :func:`release_freed_memory` returns a layer's freed heap to the OS.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from sinkscope.extraction import h5codec
from sinkscope.extraction.h5layout import (
    ATTR_DTYPE,
    ATTR_INPUT_NORM,
    ATTR_INPUT_NORM_CAST,
    ATTR_INPUT_NORM_EPS,
    ATTR_N_HEADS,
    ATTR_N_KV_HEADS,
    DERIVED,
    FORWARD_DTYPES,
    NORM_CASTS,
    NORM_KINDS,
    PER_LAYER_DATASETS,
    RESIDUAL_X,
    WEIGHT_B_V,
    WEIGHT_NORM_BIAS,
    WEIGHT_NORM_GAIN,
    WEIGHT_W_O,
    WEIGHT_W_V,
    ActivationFileError,
    damaged_file_error,
    file_sizes,
    read_attr,
)

# ------------------------------------------------------------------ recomputed arrays


def round_to_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` rounded to the forward dtype ``dtype`` (round to nearest even), as float64.

    ``float32`` rounds to float32, ``float16`` to float16, ``bfloat16`` keeps the upper 16 bits
    of the float32 value after rounding (what ``tensor.to(torch.bfloat16)`` does).
    """
    if dtype == "float32":
        return np.asarray(a, dtype=np.float32).astype(np.float64)
    if dtype == "float16":
        return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":
        bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    raise ValueError(f"forward dtype {dtype!r} is not one of {FORWARD_DTYPES}")


def input_norm(
    x: np.ndarray,
    gain: np.ndarray,
    bias: np.ndarray,
    kind: str,
    eps: float,
    cast: str = "after_gain",
    dtype: str = "float32",
) -> np.ndarray:
    """A layer's input norm as transformers computes it, ``Z = norm(X) * gain + bias``, float32.

    ``kind="rms"``: ``norm(x) = x / sqrt(mean(x^2) + eps)`` (Llama, Gemma); ``"layer"``:
    ``(x - mean(x)) / sqrt(var(x) + eps)`` with the biased variance (GPT-2's LayerNorm). The
    arithmetic is float32, in place, as transformers computes these norms. For a 16-bit forward
    (``dtype``) the model rounds where ``cast`` says: ``"before_gain"`` (``LlamaRMSNorm``:
    ``w * norm(x).to(dtype)``, the product in ``dtype``; a product of two 16-bit numbers is exact
    in float32, so rounding it once is the 16-bit product) or ``"after_gain"``
    (``Gemma3RMSNorm``: ``(norm(x) * (1 + w)).to(dtype)``; LayerNorm rounds its output once);
    both are reproduced with :func:`round_to_dtype`.
    """
    if kind not in NORM_KINDS:
        raise ValueError(f"input_norm {kind!r} is not one of {NORM_KINDS}")
    if cast not in NORM_CASTS:
        raise ValueError(f"input_norm_cast {cast!r} is not one of {NORM_CASTS}")
    v = np.array(x, dtype=np.float32)  # a copy: the caller's X stays as read
    if kind == "layer":
        v -= v.mean(axis=-1, keepdims=True)
    variance = np.mean(np.square(v), axis=-1, keepdims=True)
    variance += np.float32(eps)
    v *= np.float32(1.0) / np.sqrt(variance)
    if cast == "before_gain" and dtype != "float32":
        v = round_to_dtype(v, dtype).astype(np.float32)
    v *= np.asarray(gain, dtype=np.float32)
    v += np.asarray(bias, dtype=np.float32)
    if dtype != "float32":
        v = round_to_dtype(v, dtype).astype(np.float32)
    return v


def _norm_settings(handle: h5py.File | h5py.Group) -> tuple[str, float, str, str]:
    """(kind, eps, cast, forward dtype) of the file's input norm, checked."""
    names = (ATTR_INPUT_NORM, ATTR_INPUT_NORM_EPS, ATTR_INPUT_NORM_CAST, ATTR_DTYPE)
    missing = [k for k in names if k not in handle.attrs]
    if missing:
        raise damaged_file_error(handle.file.filename, f"attributes {missing} are missing")
    kind = str(read_attr(handle, ATTR_INPUT_NORM))
    cast = str(read_attr(handle, ATTR_INPUT_NORM_CAST))
    dtype = str(read_attr(handle, ATTR_DTYPE))
    for key, value, allowed in (
        (ATTR_INPUT_NORM, kind, NORM_KINDS),
        (ATTR_INPUT_NORM_CAST, cast, NORM_CASTS),
        (ATTR_DTYPE, dtype, FORWARD_DTYPES),
    ):
        if value not in allowed:
            raise ActivationFileError(
                f"{handle.file.filename}: attribute {key} = {value!r} is not one of {allowed}"
            )
    return kind, float(read_attr(handle, ATTR_INPUT_NORM_EPS)), cast, dtype


@dataclass(frozen=True)
class InputProjection:
    """One layer's input norm and value projection, read once from a file (:meth:`read`).

    :meth:`Z` and :meth:`values` recompute ``Z`` and the value vectors of any block of
    ``residual/X`` without reading the weights again; :func:`read_Z` and :func:`read_values` are
    the one-call forms. Loops over blocks of one layer build this once.
    """

    kind: str
    eps: float
    cast: str
    dtype: str
    gain: np.ndarray  # (D,)
    bias: np.ndarray  # (D,)
    w_v: np.ndarray  # (D, K * hd) float64: W_V^T of the key/value heads
    b_v: np.ndarray  # (K * hd,) float64
    n_kv_heads: int

    @classmethod
    def read(cls, handle: h5py.File | h5py.Group, layer: int) -> InputProjection:
        kind, eps, cast, dtype = _norm_settings(handle)
        n_heads = int(read_attr(handle, ATTR_N_HEADS))
        n_kv = int(read_attr(handle, ATTR_N_KV_HEADS))
        group = n_heads // n_kv
        # the key/value heads' rows only (the file repeats them per query head)
        w_v = handle[WEIGHT_W_V][layer, ::group].astype(np.float64)  # (K, hd, D)
        b_v = handle[WEIGHT_B_V][layer, ::group].astype(np.float64)  # (K, hd)
        k, hd, d = w_v.shape
        return cls(
            kind=kind,
            eps=eps,
            cast=cast,
            dtype=dtype,
            gain=handle[WEIGHT_NORM_GAIN][layer],
            bias=handle[WEIGHT_NORM_BIAS][layer],
            w_v=np.ascontiguousarray(w_v.reshape(k * hd, d).T),
            b_v=b_v.reshape(-1),
            n_kv_heads=k,
        )

    def Z(self, x: np.ndarray) -> np.ndarray:
        """``Z`` of a block ``x`` ``(B, P, D)`` of ``residual/X``: ``(B, P, D)`` float32
        (:func:`input_norm` with the stored gain, bias and the file's ``input_norm*`` and
        ``dtype`` attributes: what the layer's query/key/value projections saw in the forward,
        paper §3's attention input with the learnable gain)."""
        return input_norm(x, self.gain, self.bias, self.kind, self.eps, self.cast, self.dtype)

    def values(self, z: np.ndarray) -> np.ndarray:
        """Value vectors ``V = Z W_V^T + b_V`` per key/value head: ``(B, K, P, hd)`` float32.

        Each sequence's product runs in float64 on its own (the result does not depend on the
        block), then is rounded to float32 (and to the forward dtype, where the model's
        projection rounds).
        """
        d = self.w_v.shape[0]
        if z.ndim != 3 or z.shape[-1] != d:
            raise ValueError(f"z has shape {z.shape}; expected (sequences, positions, {d})")
        k = self.n_kv_heads
        hd = self.w_v.shape[1] // k
        out = np.empty((z.shape[0], k, z.shape[1], hd), dtype=np.float32)
        for row in range(z.shape[0]):
            v = z[row].astype(np.float64) @ self.w_v + self.b_v  # (P, K * hd)
            out[row] = round_to_dtype(v, self.dtype).reshape(z.shape[1], k, hd).transpose(1, 0, 2)
        return out


def read_Z(
    handle: h5py.File | h5py.Group,
    layer: int,
    sequences: slice,
    stop: int | None = None,
    x: np.ndarray | None = None,
) -> np.ndarray:
    """``Z`` of one layer for a block of sequences, positions ``0..stop - 1``: (B, stop, D) float32.

    Recomputed from ``residual/X`` (:meth:`InputProjection.Z`). ``x``:
    ``residual/X[layer, sequences, :stop]`` when the caller has read it already.
    """
    projection = InputProjection.read(handle, layer)
    if x is None:
        x = handle[RESIDUAL_X][layer, sequences, :stop]
    return projection.Z(x)


def read_values(
    handle: h5py.File | h5py.Group,
    layer: int,
    sequences: slice,
    stop: int | None = None,
    z: np.ndarray | None = None,
) -> np.ndarray:
    """Value vectors ``V = Z W_V^T + b_V`` per key/value head: (B, K, stop, hd) float32
    (:meth:`InputProjection.values`). ``z``: this block's :func:`read_Z` when the caller has it
    already (else it is read)."""
    projection = InputProjection.read(handle, layer)
    if z is None:
        x = handle[RESIDUAL_X][layer, sequences, :stop]
        z = projection.Z(x)
    return projection.values(z)


def w_vo(handle: h5py.File, layer: int, with_norm_gain: bool = False) -> np.ndarray:
    """Per-head value-output maps ``W_VO[h] = W_O[h] @ W_V[h]`` of one layer, shape (H, D, D).

    ``with_norm_gain=True`` composes them with ``diag(norm_gain)`` (acting on the gain-free
    RMS-normalised input, the paper's §3 setting).
    """
    w_v = handle[WEIGHT_W_V][layer].astype(np.float64)
    w_o = handle[WEIGHT_W_O][layer].astype(np.float64)
    product = np.einsum("hdk,hke->hde", w_o, w_v)
    if with_norm_gain:
        product = product * handle[WEIGHT_NORM_GAIN][layer].astype(np.float64)[None, None, :]
    return product


# ------------------------------------------------------------------ block-wise reading

#: Bytes per block of sequences: at most this fraction of one layer's data as the readers return
#: it (every stored per-layer dataset, plus ``Z`` and the values as float32) ...
BLOCK_LAYER_FRACTION = 1 / 16
#: ... and at most this many bytes; at least one sequence per block.
BLOCK_MAX_BYTES = 32 * 2**20


def _chunk_filters(dataset: h5py.Dataset) -> tuple[int, ...] | None:
    """The filter ids of ``dataset``'s pipeline when :func:`read_layer` can decode its chunks
    itself (one chunk per (layer, sequence), a pipeline of :mod:`sinkscope.extraction.h5codec`), else None."""
    chunks = dataset.chunks
    if (
        chunks is None
        or dataset.ndim < 2
        or chunks[:2] != (1, 1)
        or chunks[2:] != dataset.shape[2:]
    ):
        return None
    filters = h5codec.pipeline(dataset)
    return filters if h5codec.decodable(filters) else None


def read_layer(
    dataset: h5py.Dataset,
    layer: int,
    sequences: slice = slice(None),
    trailing: tuple[Any, ...] = (),
    out: np.ndarray | None = None,
    threads: int | None = None,
    empty: Callable[[tuple[int, ...], np.dtype], np.ndarray] = np.empty,
) -> np.ndarray:
    """``dataset[layer, sequences, *trailing]`` (a block of sequences of one layer; ``trailing``:
    slices or integers), decoded by several threads.

    The layout stores one chunk per (layer, sequence), shuffled and compressed
    (:mod:`sinkscope.extraction.h5codec`); HDF5 decodes one chunk at a time while h5py holds the GIL. Here
    the raw chunks are read (``read_direct_chunk``) and decoded by ``threads`` threads (default:
    the cores this process may use); the values are identical. Any other chunking or filter
    falls back to h5py.
    ``out``: a C-contiguous array of the result's shape and the dataset's dtype to fill; else
    ``empty(shape, dtype)`` allocates it. A chunk that cannot be decoded raises
    :class:`ActivationFileError` naming the file, dataset and chunk.
    """
    first, stop, step = sequences.indices(dataset.shape[1])
    if step != 1:
        raise ValueError(f"sequences must be a contiguous slice, got {sequences}")
    selection = (layer, slice(first, stop), *trailing)
    shape = np.broadcast_to(np.empty((), dtype=bool), dataset.shape)[selection].shape
    if out is None:
        out = empty(shape, np.dtype(dataset.dtype))
    elif out.shape != shape or out.dtype != dataset.dtype:
        raise ValueError(f"out has {out.shape} {out.dtype}; expected {shape} {dataset.dtype}")
    filters = _chunk_filters(dataset)
    if filters is None:
        dataset.read_direct(out, source_sel=selection)
        return out
    dtype = np.dtype(dataset.dtype)
    chunk_shape = dataset.chunks[2:]
    zeros = (0,) * (dataset.ndim - 2)

    def decode(row: int, mask: int, raw: bytes) -> None:
        try:
            chunk = h5codec.decode_chunk(raw, filters, mask, dtype).reshape(chunk_shape)
        except ValueError as error:
            raise damaged_file_error(
                dataset.file.filename,
                f"{dataset.name} chunk (layer {layer}, sequence {first + row}) cannot be decoded "
                f"({error})",
            ) from error
        out[row] = chunk[trailing]

    workers = threads or len(os.sched_getaffinity(0))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        jobs = []
        for row, sequence in enumerate(range(first, stop)):
            mask, raw = dataset.id.read_direct_chunk((layer, sequence, *zeros))
            jobs.append(pool.submit(decode, row, mask, raw))
        for job in jobs:
            job.result()
    return out


def sequence_layer_bytes(handle: h5py.File | h5py.Group) -> dict[str, int]:
    """Bytes of one sequence of one layer: ``stored`` (the per-layer datasets in their stored
    dtypes) and ``derived`` (``Z`` and the values as float32, as :func:`read_Z` and
    :func:`read_values` return them)."""
    stored = 0
    for name in PER_LAYER_DATASETS:
        dataset = handle[name]
        stored += int(np.prod(dataset.shape[2:])) * dataset.dtype.itemsize
    sizes = file_sizes(handle)
    derived = sum(4 * int(np.prod([sizes[a] for a in spec.axes[2:]])) for spec in DERIVED)
    return {"stored": stored, "derived": derived}


def release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Readers that stream a file layer by layer call it after each layer: the float64 work arrays
    of a few MB each fragment glibc's heap (its mmap threshold adapts upwards), and the resident
    size creeps up by ~8 MB per layer although nothing is kept; trimming keeps the peak at about
    one layer's working set.
    """
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def default_block_size(handle: h5py.File | h5py.Group) -> int:
    """Sequences per block: :data:`BLOCK_LAYER_FRACTION` of one layer's data as read (stored
    datasets plus the recomputed ``Z`` and values, :func:`sequence_layer_bytes`), capped at
    :data:`BLOCK_MAX_BYTES` (at least 1, at most ``N``).

    The float32/float64 work arrays of a block take up to about 10 times its bytes (measured:
    oversmoothing ~11x before heap fragmentation, ~20x with it), so the working set stays near
    one layer's data. Used by :mod:`sinkscope.oversmoothing.analysis` and :mod:`sinkscope.geometry.analysis`.
    """
    n_seq = int(handle[RESIDUAL_X].shape[1])
    per_sequence = sum(sequence_layer_bytes(handle).values())
    budget = min(BLOCK_LAYER_FRACTION * n_seq * per_sequence, BLOCK_MAX_BYTES)
    return int(min(n_seq, max(1, budget // per_sequence)))
