"""HDF5 codecs measured on the real tensors of an activation file (section 6 of the bench).

    .venv/bin/python bench/codecs_bench.py results/activations/smollm2-135m/alice.h5 [--layers 3]

For every candidate filter pipeline (HDF5's own gzip and LZF, and the filters that ``hdf5plugin``
registers: Zstandard, LZ4, Bitshuffle, Blosc, Blosc2) and every per-layer tensor kind of the file
(attention maps, the float32 residual stream, the attention updates), some layers are written
through h5py with the layout's chunking, then read back, on one thread: bytes on disk over the
stored dtype's bytes, write and read throughput in MB/s of stored-dtype bytes per core. The
extraction's own parallel encoders (``sinkscope.extraction.h5codec``) are timed beside them on every core
the process may use. Every candidate is checked to round-trip bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np

from sinkscope.extraction import h5codec, h5layout, h5read

KINDS = (h5layout.ATTENTION_PROBS, h5layout.RESIDUAL_X, h5layout.ATTENTION_RESIDUAL_UPDATE)
#: the extraction's own encoders (sinkscope.extraction.h5codec) at the levels measured
THREADED = (("zstd", 1), ("gzip", 1), ("none", 0))


def candidates() -> list[tuple[str, dict[str, Any]]]:
    """(name, h5py create_dataset keyword arguments) of every pipeline measured."""
    blosc, blosc2 = hdf5plugin.Blosc, hdf5plugin.Blosc2
    return [
        ("none", {}),
        ("gzip(1)+shuffle", {"compression": "gzip", "compression_opts": 1, "shuffle": True}),
        ("lzf+shuffle", {"compression": "lzf", "shuffle": True}),
        ("zstd(1)", dict(hdf5plugin.Zstd(clevel=1))),
        ("zstd(1)+shuffle", {**hdf5plugin.Zstd(clevel=1), "shuffle": True}),
        ("zstd(3)+shuffle", {**hdf5plugin.Zstd(clevel=3), "shuffle": True}),
        ("lz4+shuffle", {**hdf5plugin.LZ4(), "shuffle": True}),
        ("bitshuffle+lz4", dict(hdf5plugin.Bitshuffle(cname="lz4"))),
        ("bitshuffle+zstd(1)", dict(hdf5plugin.Bitshuffle(cname="zstd", clevel=1))),
        ("blosc lz4+shuffle(5)", dict(blosc(cname="lz4", clevel=5, shuffle=blosc.SHUFFLE))),
        ("blosc lz4+bitshuffle(5)", dict(blosc(cname="lz4", clevel=5, shuffle=blosc.BITSHUFFLE))),
        ("blosc zstd+shuffle(1)", dict(blosc(cname="zstd", clevel=1, shuffle=blosc.SHUFFLE))),
        ("blosc2 lz4+shuffle(5)", dict(blosc2(cname="lz4", clevel=5, filters=blosc2.SHUFFLE))),
        ("blosc2 zstd+shuffle(1)", dict(blosc2(cname="zstd", clevel=1, filters=blosc2.SHUFFLE))),
    ]


def load_arrays(h5: Path, n_layers: int) -> dict[str, tuple[np.ndarray, tuple[int, ...]]]:
    """Evenly spaced layers of every per-layer tensor kind (as stored), with the layout's chunks."""
    out = {}
    with h5layout.open_activations(h5) as handle:
        total = int(h5layout.read_attr(handle, h5layout.ATTR_N_LAYERS))
        layers = sorted({round(i * (total - 1) / max(1, n_layers - 1)) for i in range(n_layers)})
        for name in KINDS:
            dataset = handle[name]
            out[name] = (np.stack([dataset[layer] for layer in layers]), dataset.chunks)
    return out


def _one_thread_env() -> None:
    # Blosc and Blosc2 may use threads of their own: per-core figures need one
    os.environ["BLOSC_NTHREADS"] = "1"


def measure_pipeline(
    array: np.ndarray, chunks: tuple[int, ...], filters: dict[str, Any], folder: Path
) -> dict[str, float]:
    """Write ``array`` through HDF5's filter pipeline to a real file, read it back (one thread)."""
    path = folder / "codec.h5"
    started = time.perf_counter()
    with h5py.File(path, "w") as handle:
        dataset = handle.create_dataset("a", data=array, chunks=chunks, **filters)
        handle.flush()
        stored = dataset.id.get_storage_size()
    write = time.perf_counter() - started
    started = time.perf_counter()
    with h5py.File(path, "r") as handle:
        back = handle["a"][...]
    read = time.perf_counter() - started
    if not np.array_equal(back.view(np.uint8), array.view(np.uint8)):
        raise AssertionError(f"{filters}: the round trip is not bit-exact")
    path.unlink()
    mb = array.nbytes / 1e6
    return {"ratio": stored / array.nbytes, "write_mb_s": mb / write, "read_mb_s": mb / read}


def measure_threaded(
    array: np.ndarray, chunks: tuple[int, ...], codec: str, level: int, folder: Path
) -> dict[str, float]:
    """The extraction's encoder (:func:`sinkscope.extraction.h5codec.encode_chunk` in a thread pool,
    ``write_direct_chunk``) and the analyses' reader (:func:`sinkscope.extraction.h5read.read_layer`), on
    every core this process may use; the result is checked against h5py's own reader."""
    from concurrent.futures import ThreadPoolExecutor

    path = folder / "threaded.h5"
    threads = len(os.sched_getaffinity(0))
    rows = [(i, j) for i in range(array.shape[0]) for j in range(array.shape[1])]
    started = time.perf_counter()
    with h5py.File(path, "w") as handle, ThreadPoolExecutor(threads) as pool:
        dataset = handle.create_dataset(
            "a", shape=array.shape, dtype=array.dtype, chunks=chunks,
            **h5codec.dataset_filters(codec, level, array.dtype.itemsize),
        )  # fmt: skip
        payloads = pool.map(lambda ij: h5codec.encode_chunk(array[ij], codec, level), rows)
        zeros = (0,) * (array.ndim - 2)
        for (i, j), payload in zip(rows, payloads, strict=True):
            dataset.id.write_direct_chunk((i, j, *zeros), payload)
        stored = dataset.id.get_storage_size()
    write = time.perf_counter() - started
    started = time.perf_counter()
    with h5py.File(path, "r") as handle:
        back = np.stack(
            [h5read.read_layer(handle["a"], i, threads=threads) for i in range(array.shape[0])]
        )
    read = time.perf_counter() - started
    with h5py.File(path, "r") as handle:
        reference = handle["a"][...]
    if not (np.array_equal(back.view(np.uint8), array.view(np.uint8))
            and np.array_equal(reference.view(np.uint8), array.view(np.uint8))):  # fmt: skip
        raise AssertionError(f"{codec}: the threaded round trip is not bit-exact")
    path.unlink()
    mb = array.nbytes / 1e6
    return {
        "ratio": stored / array.nbytes,
        "write_mb_s": mb / write,
        "read_mb_s": mb / read,
        "threads": threads,
    }


def _row(codec: str, kind: str, array: np.ndarray, runs: list[dict], path: str) -> dict:
    """One measured (codec, tensor kind): the first run's ratio, the best run's throughputs."""
    row = {
        "codec": codec,
        "kind": kind,
        "dtype": str(array.dtype),
        "mb": array.nbytes / 1e6,
        "ratio": runs[0]["ratio"],
        "write_mb_s": max(r["write_mb_s"] for r in runs),
        "read_mb_s": max(r["read_mb_s"] for r in runs),
        "path": path,
    }
    print(json.dumps(row), flush=True)
    return row


def measure(
    h5: Path, n_layers: int = 3, repeats: int = 2, pipelines: bool = True
) -> dict[str, Any]:
    """Every candidate on every kind; the best (fastest) of ``repeats`` timings is kept.
    ``pipelines=False`` times the extraction's threaded encoders alone."""
    _one_thread_env()
    arrays = load_arrays(h5, n_layers)
    rows = []
    with tempfile.TemporaryDirectory(dir=h5.parent) as tmp:
        folder = Path(tmp)
        for name, filters in candidates() if pipelines else ():
            for kind, (array, chunks) in arrays.items():
                runs = [measure_pipeline(array, chunks, filters, folder) for _ in range(repeats)]
                rows.append(_row(name, kind, array, runs, "HDF5 filter pipeline, 1 thread"))
        for codec, level in THREADED:
            for kind, (array, chunks) in arrays.items():
                runs = [
                    measure_threaded(array, chunks, codec, level, folder) for _ in range(repeats)
                ]
                path = f"sinkscope.extraction.h5codec, {runs[0]['threads']} threads"
                rows.append(_row(f"{codec}({level}) sinkscope threaded", kind, array, runs, path))
    return {"file": str(h5), "layers_per_kind": n_layers, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("h5", type=Path, help="an activation file of the current schema")
    parser.add_argument("--layers", type=int, default=3, help="layers per tensor kind")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument(
        "--threaded-only", action="store_true", help="only the extraction's own encoders"
    )
    args = parser.parse_args(argv)
    result = measure(args.h5, args.layers, pipelines=not args.threaded_only)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
