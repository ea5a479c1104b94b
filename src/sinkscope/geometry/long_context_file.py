"""The long-context attention-inputs file: rule ``extract_long_context`` writes it where the model
runs (the GPU partition), rule ``analyze_geometry_long_context`` solves on it on the CPU.

The half-space solves of Prop. 4.1 on ``T' = 2.5 d_model`` tokens take minutes to hours per pair
at the paper's widths and use no GPU; the forward takes seconds. Writing ``Z`` of every layer to
a file lets the two run where each belongs. The file is self-describing (``h5ls -v`` or
``sinkscope inspect``): one float32 dataset per decoder layer,
:data:`~sinkscope.geometry.names.LONG_CONTEXT_Z`, and the root attributes
:data:`~sinkscope.geometry.names.LONG_CONTEXT_FILE_ATTRS`. It is written to a temporary name and
renamed when complete (:func:`sinkscope.io.atomic_path`), so a killed job leaves no file that
looks finished. The workflow marks it temporary: it is deleted once the pair's table exists.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import h5py
import numpy as np

from sinkscope.geometry.names import (
    LC_ATTR_D_MODEL,
    LC_ATTR_DATASET,
    LC_ATTR_DESCRIPTION,
    LC_ATTR_DEVICE,
    LC_ATTR_DTYPE,
    LC_ATTR_MODEL,
    LC_ATTR_N_LAYERS,
    LC_ATTR_N_SEQUENCES,
    LC_ATTR_OFFSETS,
    LC_ATTR_SEQ_LEN,
    LONG_CONTEXT_FILE_ATTRS,
    LONG_CONTEXT_Z,
)
from sinkscope.io import atomic_path

__all__ = [
    "LongContextInputs",
    "describe_long_context_file",
    "is_long_context_file",
    "open_long_context_inputs",
    "write_long_context_inputs",
]

_DESCRIPTION = (
    "Attention inputs Z (the residual stream through each decoder layer's input norm, what its "
    "query/key/value projections multiply; paper section 3) on the long-context sequences of "
    "geometry.long_context: one float32 dataset per layer, shape (n_sequences, seq_len, "
    "d_model), BOS at position 0; offsets are each sequence's first corpus token in the token "
    "stream. Read by the half-space test of Proposition 4.1 (sinkscope.geometry.long_context)."
)


@dataclass(frozen=True)
class LongContextInputs:
    """The attention inputs ``Z^(l)`` of every layer on a pair's long-context sequences: what
    rule ``extract_long_context`` computes where the model runs
    (:func:`sinkscope.geometry.long_context.long_context_inputs`) and writes to its file
    (:func:`write_long_context_inputs`), and rule ``analyze_geometry_long_context`` solves on, on
    the CPU (:func:`sinkscope.geometry.long_context.solve_long_context`).

    ``layers[l]``: ``(n_sequences, seq_len, d_model)`` float32 (BOS at position 0), a list or a
    sequence that reads each layer from the file when indexed; ``offsets``: each sequence's
    first corpus token in the token stream; ``dtype``/``device``: how the model ran."""

    layers: Sequence[np.ndarray]
    model: str
    dataset: str
    seq_len: int
    d_model: int
    offsets: tuple[int, ...]
    dtype: str
    device: str


def write_long_context_inputs(inputs: LongContextInputs, path: str | os.PathLike[str]) -> None:
    """Write ``inputs`` to ``path``, one layer at a time (never a half-written file at ``path``)."""
    attrs = {
        LC_ATTR_DESCRIPTION: _DESCRIPTION,
        LC_ATTR_MODEL: inputs.model,
        LC_ATTR_DATASET: inputs.dataset,
        LC_ATTR_N_LAYERS: len(inputs.layers),
        LC_ATTR_N_SEQUENCES: int(np.shape(inputs.layers[0])[0]) if len(inputs.layers) else 0,
        LC_ATTR_SEQ_LEN: inputs.seq_len,
        LC_ATTR_D_MODEL: inputs.d_model,
        LC_ATTR_OFFSETS: np.asarray(inputs.offsets, dtype=np.int64),
        LC_ATTR_DTYPE: inputs.dtype,
        LC_ATTR_DEVICE: inputs.device,
    }
    assert tuple(attrs) == LONG_CONTEXT_FILE_ATTRS
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs.update(attrs)
        for layer, z in enumerate(inputs.layers):
            data = np.asarray(z, np.float32)
            # one chunk per sequence, each with HDF5's Fletcher-32 checksum, verified on read
            chunks = (1, *data.shape[1:]) if data.ndim == 3 and data.size else None
            f.create_dataset(
                LONG_CONTEXT_Z.format(layer=layer), data=data, chunks=chunks, fletcher32=True
            )


class _FileLayers(Sequence[np.ndarray]):
    """The layers of an open file, each read when indexed (one layer in memory at a time)."""

    def __init__(self, f: h5py.File, n_layers: int) -> None:
        self._f, self._n = f, n_layers

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice) -> list[np.ndarray]: ...
    def __getitem__(self, index: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        if not -self._n <= index < self._n:
            raise IndexError(index)
        name = LONG_CONTEXT_Z.format(layer=index % self._n)
        try:
            return self._f[name][...]
        except OSError as error:  # a chunk that fails its checksum, or unreadable bytes
            raise ValueError(
                f"{self._f.filename}: {name} cannot be read ({error}); the file is damaged: "
                f"delete it (rm {shlex.quote(self._f.filename)}) and run snakemake again "
                "(rule extract_long_context writes it anew)"
            ) from error


@contextlib.contextmanager
def open_long_context_inputs(path: str | os.PathLike[str]) -> Iterator[LongContextInputs]:
    """The :class:`~sinkscope.geometry.long_context.LongContextInputs` of a file written by
    :func:`write_long_context_inputs`; its layers are read from the file when indexed. A file
    without the attributes or a layer names what it lacks."""
    with h5py.File(path, "r") as f:
        missing = [name for name in LONG_CONTEXT_FILE_ATTRS if name not in f.attrs]
        if missing:
            raise ValueError(f"{path}: not a long-context inputs file (no attribute(s) {missing})")
        n_layers = int(f.attrs[LC_ATTR_N_LAYERS])
        absent = [
            LONG_CONTEXT_Z.format(layer=i)
            for i in range(n_layers)
            if LONG_CONTEXT_Z.format(layer=i) not in f
        ]
        if absent:
            raise ValueError(f"{path}: {len(absent)} layer(s) missing, first {absent[0]}")
        yield LongContextInputs(
            layers=_FileLayers(f, n_layers),
            model=str(f.attrs[LC_ATTR_MODEL]),
            dataset=str(f.attrs[LC_ATTR_DATASET]),
            seq_len=int(f.attrs[LC_ATTR_SEQ_LEN]),
            d_model=int(f.attrs[LC_ATTR_D_MODEL]),
            offsets=tuple(int(o) for o in f.attrs[LC_ATTR_OFFSETS]),
            dtype=str(f.attrs[LC_ATTR_DTYPE]),
            device=str(f.attrs[LC_ATTR_DEVICE]),
        )


def is_long_context_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an HDF5 file with the root attributes of a long-context inputs file."""
    try:
        with h5py.File(path, "r") as f:
            return all(name in f.attrs for name in LONG_CONTEXT_FILE_ATTRS)
    except OSError:
        return False


def describe_long_context_file(path: str | os.PathLike[str]) -> str:
    """What a long-context inputs file holds, in words (``sinkscope inspect FILE.h5``): its
    attributes, then each layer's dataset with its shape and size."""
    lines = [f"{Path(path)}: long-context attention inputs"]
    with h5py.File(path, "r") as f:
        for name in LONG_CONTEXT_FILE_ATTRS:
            value = f.attrs[name]
            shown = list(value) if isinstance(value, np.ndarray) else value
            lines.append(f"  {name}: {shown}")
        for layer in range(int(f.attrs[LC_ATTR_N_LAYERS])):
            name = LONG_CONTEXT_Z.format(layer=layer)
            if name in f:
                data = f[name]
                size = data.size * data.dtype.itemsize / 2**20
                lines.append(f"  {name}: {data.shape} {data.dtype} ({size:.1f} MiB)")
            else:
                lines.append(f"  {name}: MISSING")
    return "\n".join(lines)
