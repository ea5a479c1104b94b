"""What the Fletcher-32 checksums of the activation files cost, measured on a real file's tensors.

    .venv/bin/python bench/checksum_bench.py results/activations/smollm2-135m/alice.h5 [--layers 3]

For every per-layer tensor kind (attention maps, residual stream, attention updates), some layers'
chunks are encoded as the extraction stores them (``sinkscope.extraction.h5codec.encode_chunk``:
zstd level 1 for the maps, raw for the others, the checksum appended) and decoded as the
analyses' reader does (``decode_chunk``: the checksum verified), on one thread. The checksum's
own time (``h5codec.fletcher32``) is reported as a share of each. HDF5's own reads of the same
chunks with and without its Fletcher-32 filter are timed beside them. Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import h5py
import hdf5plugin  # noqa: F401  (registers Zstandard)
import numpy as np

from sinkscope.extraction import h5codec, h5layout
from sinkscope.sizing.usage import cpu_model

#: each kind as the default config stores it (extraction.codec zstd(1); residual and
#: activations in extraction.uncompressed)
KINDS = {
    h5layout.ATTENTION_PROBS: ("zstd", 1),
    h5layout.RESIDUAL_X: ("none", 0),
    h5layout.ATTENTION_RESIDUAL_UPDATE: ("none", 0),
}


def best_of(seconds: list[float]) -> float:
    return min(seconds)


def timed(function, repeats: int = 3) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        runs.append(time.perf_counter() - started)
    return best_of(runs)


def measure_kind(chunks: list[np.ndarray], codec: str, level: int) -> dict[str, float]:
    """Seconds (best of 3) to encode, decode and checksum ``chunks`` as ``codec`` stores them,
    and HDF5's reads of them with and without its Fletcher-32 filter."""
    payloads = [h5codec.encode_chunk(c, codec, level) for c in chunks]
    itemsize = chunks[0].dtype.itemsize
    filters = h5codec.PIPELINES[codec]
    if codec != "none" and itemsize == 1:
        filters = filters[1:]  # no shuffle for single bytes
    seconds = {
        "encode": timed(lambda: [h5codec.encode_chunk(c, codec, level) for c in chunks]),
        "decode": timed(
            lambda: [
                h5codec.decode_chunk(p, filters, 0, c.dtype)
                for p, c in zip(payloads, chunks, strict=True)
            ]
        ),
        "checksum": timed(lambda: [h5codec.fletcher32(memoryview(p)[:-4]) for p in payloads]),
    }
    stacked = np.stack(chunks)
    with tempfile.TemporaryDirectory() as folder:
        for flag in (False, True):
            kwargs = {**h5codec.dataset_filters(codec, level, itemsize), "fletcher32": flag}
            file = Path(folder) / f"{flag}.h5"
            with h5py.File(file, "w") as out:
                out.create_dataset("d", data=stacked, chunks=(1, *stacked.shape[1:]), **kwargs)
            with h5py.File(file, "r") as back:
                data = back["d"]
                seconds[f"hdf5 {flag}"] = timed(lambda d=data: [d[i] for i in range(len(d))])
    return seconds


def measure(path: Path, n_layers: int) -> list[dict[str, float | str]]:
    rows = []
    with h5py.File(path, "r") as handle:
        for name, (codec, level) in KINDS.items():
            dataset = handle[name]
            layers = np.linspace(0, dataset.shape[0] - 1, n_layers).round().astype(int)
            chunks = [
                dataset[int(layer), sequence]
                for layer in layers
                for sequence in range(dataset.shape[1])
            ]
            megabytes = sum(c.nbytes for c in chunks) / 1e6
            s = measure_kind(chunks, codec, level)
            rows.append({
                "kind": name, "stored as": f"{codec}({level})" if codec != "none" else "raw",
                "MB": megabytes,
                "encode MB/s": megabytes / s["encode"],
                "checksum share of encode": s["checksum"] / s["encode"],
                "decode MB/s": megabytes / s["decode"],
                "checksum share of decode": s["checksum"] / s["decode"],
                "checksum MB/s": megabytes / s["checksum"],
                "HDF5 read with/without": s["hdf5 True"] / s["hdf5 False"],
            })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = measure(args.file, args.layers)
    print(
        f"Fletcher-32 checksums on {args.file} ({args.layers} layers per kind), one thread, {cpu_model()}"
    )
    print()
    print(
        "| kind | stored as | MB | encode MB/s | checksum share | decode MB/s | checksum share | checksum MB/s | HDF5 read with / without |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['stored as']} | {r['MB']:.1f} | {r['encode MB/s']:,.0f} | "
            f"{r['checksum share of encode']:.0%} | {r['decode MB/s']:,.0f} | "
            f"{r['checksum share of decode']:.0%} | {r['checksum MB/s']:,.0f} | "
            f"{r['HDF5 read with/without']:.2f} |"
        )


if __name__ == "__main__":
    main()
