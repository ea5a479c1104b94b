"""h5layout.read_layer: a layer's chunks decoded by threads equal h5py's own reading."""

from __future__ import annotations

import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

import sinkscope.extraction.h5codec  # noqa: F401  (registers the Zstandard filter)
from sinkscope.extraction.h5layout import ActivationFileError, read_layer


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
            "d", data=data, chunks=(1, 1, 4, 6), compression=compression, shuffle=True
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


def test_dataset_names_are_stated_once_in_h5layout() -> None:
    """Every stored dataset's name is an h5layout constant, and no other module or benchmark
    spells the string out (a renamed dataset changes in one place)."""
    import re
    from pathlib import Path

    from sinkscope.extraction import h5layout

    names = {spec.name for spec in (*h5layout.DATASETS, *h5layout.CONDITIONAL_DATASETS)}
    constants = {v for k, v in vars(h5layout).items() if k.isupper() and isinstance(v, str)}
    assert names <= constants
    repo = Path(__file__).resolve().parents[2]
    literal = re.compile("|".join(re.escape(f'"{n}"') for n in sorted(names)))
    sources = [*(repo / "src" / "sinkscope").rglob("*.py"), *(repo / "bench").glob("*.py")]
    offenders = [
        str(p.relative_to(repo))
        for p in sources
        if p.name != "h5layout.py" and literal.search(p.read_text())
    ]
    assert not offenders, offenders


def test_read_attr_decodes_values_and_names_a_missing_one(tmp_path: Path) -> None:
    from sinkscope.extraction.h5layout import ATTR_AXES, ATTR_MODEL_NAME, read_attr

    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w") as f:
        f.attrs[ATTR_MODEL_NAME] = np.bytes_(b"tiny-model")
        f.attrs["count"] = np.int64(7)
        f.attrs["flag"] = np.bool_(True)
        f.attrs["scalar"] = np.array(0.25)
        f.attrs["profile"] = '{"forward": 1.5}'
        f.create_dataset("d", data=np.zeros(2)).attrs[ATTR_AXES] = "layer"
    with h5py.File(path, "r") as f:
        assert read_attr(f, ATTR_MODEL_NAME) == "tiny-model"
        count, flag, scalar = (read_attr(f, k) for k in ("count", "flag", "scalar"))
        assert (count, flag, scalar) == (7, True, 0.25)
        assert type(count) is int and type(flag) is bool and type(scalar) is float
        assert read_attr(f, "profile") == '{"forward": 1.5}'
        assert read_attr(f, "profile", as_json=True) == {"forward": 1.5}
        assert read_attr(f["d"], ATTR_AXES) == "layer"
        with pytest.raises(ActivationFileError, match=r"attrs\.h5: attribute 'dataset_name' is"):
            read_attr(f, "dataset_name")
        with pytest.raises(ActivationFileError, match="attribute 'symbol' of /d is missing"):
            read_attr(f["d"], "symbol")


def test_attribute_names_are_stated_once_in_h5layout() -> None:
    """Every file attribute (documented in FILE_ATTRIBUTES) is named by an h5layout ATTR_*
    constant. Readers read attributes with read_attr by the constant, and the writer,
    extraction.extract, writes them by the constant: no module or benchmark reads or writes an
    attribute by its string, and the writer builds no attribute dict keyed by the string."""
    import ast
    import re

    from sinkscope.extraction import h5layout

    constants = {k: v for k, v in vars(h5layout).items() if k.startswith("ATTR_")}
    dataset_attributes = {h5layout.ATTR_DESCRIPTION, h5layout.ATTR_AXES, h5layout.ATTR_SYMBOL}
    assert set(constants.values()) - dataset_attributes == set(h5layout.FILE_ATTRIBUTES)
    assert len(set(constants.values())) == len(constants)
    repo = Path(__file__).resolve().parents[2]
    by_string = re.compile(r"""attrs(\[|\.get\(|,)\s*["']|_attr\w*\([^)]*["']""")
    sources = [*(repo / "src" / "sinkscope").rglob("*.py"), *(repo / "bench").glob("*.py")]
    offenders = [
        str(p.relative_to(repo))
        for p in sources
        if p.name != "h5layout.py" and by_string.search(p.read_text())
    ]
    assert not offenders, offenders
    # the writer's attribute dicts; "d_model" and "head_dim" are also axis names (dataset sizes)
    axes = {axis for spec in h5layout.DATASETS for axis in spec.axes}
    attribute_names = set(h5layout.FILE_ATTRIBUTES) - axes
    writer = repo / "src" / "sinkscope" / "extraction" / "extract.py"
    spelled = sorted(
        key.value
        for node in ast.walk(ast.parse(writer.read_text()))
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant) and key.value in attribute_names
    )
    assert not spelled, spelled
