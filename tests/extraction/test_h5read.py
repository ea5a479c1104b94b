"""h5read.read_layer: a layer's chunks decoded by threads equal h5py's own reading."""

from __future__ import annotations

import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

import sinkscope.extraction.h5codec  # noqa: F401  (registers the Zstandard filter)
from sinkscope.extraction.h5layout import ActivationFileError
from sinkscope.extraction.h5read import read_layer


def _shuffled_deflated(chunk: np.ndarray) -> bytes:
    planes = np.ascontiguousarray(chunk.view(np.uint8).reshape(-1, chunk.dtype.itemsize).T)
    return zlib.compress(planes, 1)


@pytest.mark.parametrize(
    "options",
    [
        {"compression": "gzip", "shuffle": True},  # the layout's pipelines: threads
        {"compression": "gzip"},
        {"compression": 32015, "compression_opts": (1,), "shuffle": True},  # zstd
        {"compression": 32015, "compression_opts": (3,)},
        {},  # chunked, no filter
        {"compression": "lzf", "shuffle": True},  # not decoded here: h5py's reader
        {"chunks": None},  # contiguous: h5py's reader
    ],
)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_read_layer_equals_h5py(tmp_path: Path, options: dict, dtype: str) -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(size=(3, 5, 2, 7, 7)).astype(dtype)
    path = tmp_path / "a.h5"
    kwargs = {"chunks": (1, 1, 2, 7, 7), **options}
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=data, **kwargs)
    with h5py.File(path, "r") as f:
        ds = f["d"]
        for sequences, trailing in [
            (slice(None), ()),
            (slice(1, 4), (slice(None), slice(2, 6), slice(0, 5))),
            (slice(2, 5), (slice(None), slice(1, None), 0)),  # the BOS column of geometry
        ]:
            expected = ds[(1, sequences, *trailing)]
            got = read_layer(ds, 1, sequences, trailing, threads=2)
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)
        out = np.empty((5, 2, 7, 7), dtype=dtype)
        assert read_layer(ds, 2, out=out) is out
        np.testing.assert_array_equal(out, data[2])
        with pytest.raises(ValueError, match="expected"):
            read_layer(ds, 2, out=np.empty((4, 2, 7, 7), dtype=dtype))
        with pytest.raises(ValueError, match="contiguous"):
            read_layer(ds, 0, slice(0, 5, 2))


def test_chunks_with_skipped_filters_are_decoded(tmp_path: Path) -> None:
    """HDF5 marks a filter that was not applied to a chunk in its filter mask (bit i: filter i)."""
    rng = np.random.default_rng(1)
    data = rng.normal(size=(1, 3, 4, 6)).astype("float16")
    path = tmp_path / "b.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset(
            "d",
            shape=data.shape,
            dtype="float16",
            chunks=(1, 1, 4, 6),
            compression="gzip",
            shuffle=True,
        )
        ds.id.write_direct_chunk((0, 0, 0, 0), _shuffled_deflated(data[0, 0]))  # both filters
        ds.id.write_direct_chunk((0, 1, 0, 0), data[0, 1].tobytes(), filter_mask=0b11)  # none
        deflated = zlib.compress(data[0, 2].tobytes(), 1)
        ds.id.write_direct_chunk((0, 2, 0, 0), deflated, filter_mask=0b01)  # deflate only
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["d"][0], data[0])  # HDF5 agrees on the encoding
        np.testing.assert_array_equal(read_layer(f["d"], 0, threads=2), data[0])


@pytest.mark.parametrize("compression", ["gzip", 32015])
def test_a_damaged_chunk_names_the_file_and_chunk(tmp_path: Path, compression) -> None:
    data = np.ones((1, 2, 4, 6), dtype="float16")
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset(
            "d",
            data=data,
            chunks=(1, 1, 4, 6),
            compression=compression,
            shuffle=True,
            fletcher32=True,
        )
        ds.id.write_direct_chunk((0, 1, 0, 0), b"not deflate")
    with h5py.File(path, "r") as f:
        with pytest.raises(ActivationFileError, match=r"c.h5: /d chunk \(layer 0, sequence 1\)"):
            read_layer(f["d"], 0, threads=2)
        allocated = []

        def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
            allocated.append((shape, dtype))
            return np.empty(shape, dtype)

        read_layer(f["d"], 0, slice(0, 1), empty=empty)
        assert allocated == [((1, 4, 6), np.dtype("float16"))]
