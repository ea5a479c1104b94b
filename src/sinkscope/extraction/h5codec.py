"""The HDF5 codecs of the activation files: one place that names them, encodes and decodes chunks.

The extraction compresses chunks itself, in a pool of threads, and hands the bytes to HDF5 with
``write_direct_chunk`` (HDF5 compresses one chunk at a time on one core); the analyses' block
reader (:func:`sinkscope.extraction.h5read.read_layer`) decodes raw chunks the same way. The bytes are
exactly what the dataset's declared HDF5 filter pipeline produces, so any HDF5 reader decodes
them: h5py with ``import hdf5plugin`` (which registers Zstandard and the other filters it
ships), command-line tools (``h5ls``, ``h5dump``) with ``HDF5_PLUGIN_PATH`` set to
``hdf5plugin.PLUGIN_PATH``.

Codecs (``extraction.codec``; chosen by measurement, ``bench/codecs_bench.py`` and BENCHMARKS.md):

* ``zstd`` (default): HDF5's byte shuffle, then Zstandard (registered filter 32015) at
  ``extraction.compression_level`` (1..22). At level 1 it stores the real tensors slightly smaller
  than gzip level 1 and writes 6-12x faster per core.
* ``gzip``: shuffle + deflate (HDF5's built-in filters, no plugin needed to read), level 1..9.
* ``none``: uncompressed chunks.

Every pipeline ends with HDF5's Fletcher-32 checksum filter (:func:`fletcher32`, appended to
each stored chunk): HDF5 verifies it on every read (h5py, ``h5dump``), and :func:`decode_chunk`
verifies it on the extraction's own reads, so a damaged chunk fails the read instead of being
analysed. Its cost, measured on real files, is in BENCHMARKS.md (capture and storage).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  (registers the Zstandard filter with h5py's HDF5)
import numpy as np
import zstandard
from h5py import h5z

CODECS = ("zstd", "gzip", "none")
#: compression level bounds per codec (the config's ``extraction.compression_level``)
LEVELS: Mapping[str, tuple[int, int]] = {"zstd": (1, 22), "gzip": (0, 9), "none": (0, 22)}

#: HDF5 filter id of Zstandard (registered by hdf5plugin; https://github.com/HDFGroup/hdf5_plugins)
FILTER_ZSTD = 32015
FILTER_DEFLATE = int(h5z.FILTER_DEFLATE)
FILTER_SHUFFLE = int(h5z.FILTER_SHUFFLE)
FILTER_FLETCHER32 = int(h5z.FILTER_FLETCHER32)

#: The filters a reader needs, with what provides them (for error messages).
FILTER_PROVIDERS: Mapping[int, str] = {
    FILTER_ZSTD: "Zstandard (HDF5 filter 32015): `pip install hdf5plugin`, then `import "
    "hdf5plugin` before opening the file (command-line HDF5 tools: set HDF5_PLUGIN_PATH to "
    "the folder `python -c 'import hdf5plugin; print(hdf5plugin.PLUGIN_PATH)'` prints)",
    FILTER_DEFLATE: "deflate/gzip (built into HDF5)",
    FILTER_SHUFFLE: "shuffle (built into HDF5)",
    FILTER_FLETCHER32: "Fletcher-32 checksum (built into HDF5)",
}

#: Filter pipelines (in application order) whose chunks :func:`decode_chunk` decodes itself.
PIPELINES: Mapping[str, tuple[int, ...]] = {
    "none": (FILTER_FLETCHER32,),
    "gzip": (FILTER_SHUFFLE, FILTER_DEFLATE, FILTER_FLETCHER32),
    "zstd": (FILTER_SHUFFLE, FILTER_ZSTD, FILTER_FLETCHER32),
}
_DECODABLE = {
    (FILTER_DEFLATE, FILTER_FLETCHER32),
    (FILTER_ZSTD, FILTER_FLETCHER32),
    *PIPELINES.values(),
}
#: Fletcher-32 in blocks of this many 16-bit words (exact in float64: sums below 2**40).
_FLETCHER_BLOCK = 4096
_FLETCHER_RAMP = np.arange(_FLETCHER_BLOCK, dtype=np.float64)


class CodecUnavailableError(ValueError):
    """A codec or HDF5 filter that this installation cannot encode or decode."""


def filter_available(filter_id: int) -> bool:
    return bool(h5z.filter_avail(filter_id))


def check_codec(codec: str, level: int, key: str = "extraction") -> None:
    """Raise :class:`CodecUnavailableError` naming the config key when ``codec`` is unknown, its
    ``level`` is out of range, or its HDF5 filter is not installed."""
    if codec not in CODECS:
        raise CodecUnavailableError(
            f"{key}.codec: {codec!r} is not one of {list(CODECS)} (measured in BENCHMARKS.md)"
        )
    low, high = LEVELS[codec]
    if codec != "none" and not low <= level <= high:
        raise CodecUnavailableError(
            f"{key}.compression_level: {level} is outside {low}..{high} for codec {codec!r}"
        )
    for filter_id in PIPELINES[codec]:
        if not filter_available(filter_id):
            raise CodecUnavailableError(
                f"{key}.codec: {codec!r} needs the HDF5 filter {FILTER_PROVIDERS[filter_id]}, "
                "which this installation does not provide"
            )


def dataset_filters(codec: str, level: int, itemsize: int) -> dict[str, Any]:
    """``h5py.Group.create_dataset`` keyword arguments that declare ``codec``'s pipeline, the
    Fletcher-32 checksum last (h5py puts it after the compression)."""
    if codec == "none" or (codec == "gzip" and level == 0):
        return {"fletcher32": True}
    shuffle = itemsize > 1
    if codec == "gzip":
        return {
            "compression": "gzip", "compression_opts": level, "shuffle": shuffle,
            "fletcher32": True,
        }  # fmt: skip
    if codec == "zstd":
        return {
            "compression": FILTER_ZSTD, "compression_opts": (level,), "shuffle": shuffle,
            "fletcher32": True,
        }  # fmt: skip
    raise CodecUnavailableError(f"unknown codec {codec!r}; expected one of {CODECS}")


def fletcher32(data: bytes | memoryview | np.ndarray) -> int:
    """HDF5's Fletcher-32 checksum of ``data`` (``H5_checksum_fletcher32``, which the filter
    appends to a chunk, little-endian): the bytes read as big-endian 16-bit words (an odd last
    byte as its own high half), ``sum1 = sum w_j`` and ``sum2 = sum_j (n - j) w_j`` modulo 65535
    in HDF5's end-around-carry form (a positive multiple of 65535 is 65535, not 0), returned as
    ``sum2 << 16 | sum1``. Computed per block of 4,096 words with two exact float64 reductions
    (about 1 GB/s on one core); tests hold it to the checksums HDF5 itself writes."""
    if isinstance(data, np.ndarray):
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    else:
        raw = np.frombuffer(data, dtype=np.uint8)
    even = raw.size - raw.size % 2
    words = raw[:even].view(">u2")
    n = words.size + raw.size % 2
    full = words.size - words.size % _FLETCHER_BLOCK
    sum1 = sum2 = 0
    step = 256 * _FLETCHER_BLOCK  # 2 MB of words at a time: the float64 copy stays small
    for low in range(0, full, step):
        block = words[low : min(full, low + step)].astype(np.float64).reshape(-1, _FLETCHER_BLOCK)
        sums = block.sum(axis=1).astype(np.int64)  # each below 2**28: exact
        ramps = (block @ _FLETCHER_RAMP).astype(np.int64)  # each below 2**40: exact
        starts = low + _FLETCHER_BLOCK * np.arange(block.shape[0], dtype=np.int64)
        sum1 += int(sums.sum())
        # sum over the block of (n - j) w_j = (n - start) * sum(w) - sum(i * w_i), mod 65535
        sum2 += int((((n - starts) % 65535) * (sums % 65535)).sum()) - int(ramps.sum())
    tail = words[full:].astype(np.int64)
    if raw.size % 2:
        tail = np.append(tail, np.int64(int(raw[-1]) << 8))
    positions = full + np.arange(tail.size, dtype=np.int64)
    sum1 += int(tail.sum())
    sum2 += int((tail * (n - positions)).sum())
    if sum1 == 0:  # every word zero: both sums are 0
        return 0
    return (((sum2 - 1) % 65535 + 1) << 16) | ((sum1 - 1) % 65535 + 1)


def _shuffle(data: np.ndarray) -> np.ndarray:
    """HDF5's shuffle filter (``H5Z_filter_shuffle``): byte ``j`` of every element stored
    together, plane after plane. One strided copy per byte plane (3x faster than a transpose)."""
    size = data.dtype.itemsize
    elements = np.ascontiguousarray(data).view(np.uint8).reshape(-1, size)
    if size == 1:
        return elements.reshape(-1)
    planes = np.empty((size, elements.shape[0]), dtype=np.uint8)
    for j in range(size):
        planes[j] = elements[:, j]
    return planes


def _unshuffle(data: bytes | np.ndarray, itemsize: int) -> np.ndarray:
    """Inverse of :func:`_shuffle`: the elements' bytes, element after element."""
    planes = np.frombuffer(data, dtype=np.uint8).reshape(itemsize, -1)
    elements = np.empty((planes.shape[1], itemsize), dtype=np.uint8)
    for j in range(itemsize):
        elements[:, j] = planes[j]
    return elements


def encode_chunk(chunk: np.ndarray, codec: str, level: int) -> bytes:
    """One chunk as ``codec``'s declared pipeline (:func:`dataset_filters`) stores it, for
    ``write_direct_chunk``. ``zlib`` and ``zstandard`` release the GIL, so threads encode chunks
    in parallel."""
    data = np.ascontiguousarray(chunk)
    filters = dataset_filters(codec, level, data.dtype.itemsize)
    if "compression" not in filters:
        stored = data.tobytes()
    else:
        payload = _shuffle(data) if filters["shuffle"] else data.view(np.uint8).reshape(-1)
        if codec == "gzip":
            stored = zlib.compress(payload, level)
        else:
            stored = zstandard.ZstdCompressor(level=level).compress(payload)
    return stored + fletcher32(stored).to_bytes(4, "little")


def pipeline(dataset: h5py.Dataset) -> tuple[int, ...]:
    """The filter ids of ``dataset``'s pipeline, in application order."""
    plist = dataset.id.get_create_plist()
    return tuple(int(plist.get_filter(i)[0]) for i in range(plist.get_nfilters()))


_FILTER_NAMES = {
    FILTER_SHUFFLE: "shuffle",
    FILTER_DEFLATE: "gzip",
    FILTER_ZSTD: "zstd",
    FILTER_FLETCHER32: "fletcher32",
}


def describe_pipeline(dataset: h5py.Dataset) -> str:
    """The dataset's filters in application order, e.g. ``shuffle+zstd(1)`` (``none``)."""
    plist = dataset.id.get_create_plist()
    parts = []
    for index in range(plist.get_nfilters()):
        filter_id, _flags, values, _name = plist.get_filter(index)
        name = _FILTER_NAMES.get(int(filter_id), f"filter{int(filter_id)}")
        if int(filter_id) in (FILTER_DEFLATE, FILTER_ZSTD) and len(values):
            name += f"({int(values[0])})"
        parts.append(name)
    return "+".join(parts) or "none"


def decodable(filters: tuple[int, ...]) -> bool:
    """Whether :func:`decode_chunk` decodes chunks of this pipeline."""
    return filters in _DECODABLE


def decode_chunk(raw: bytes, filters: tuple[int, ...], mask: int, dtype: np.dtype) -> np.ndarray:
    """Inverse of the filters that were applied (bit ``i`` of ``mask`` set: filter ``i`` skipped),
    last first: the Fletcher-32 checksum verified and removed, inflate or Zstandard (both release
    the GIL), then un-shuffle. Raises
    ``ValueError`` on damaged bytes."""
    data: bytes | np.ndarray = raw
    for index in reversed(range(len(filters))):
        if mask & (1 << index):
            continue
        if filters[index] == FILTER_FLETCHER32:
            if len(data) < 4:
                raise ValueError(f"{len(data)} bytes cannot hold a Fletcher-32 checksum")
            view = memoryview(data).cast("B")
            body, stored = view[:-4], int.from_bytes(view[-4:], "little")
            computed = fletcher32(body)
            if computed != stored:
                raise ValueError(
                    f"Fletcher-32 checksum mismatch (stored {stored:#010x}, computed "
                    f"{computed:#010x}): the bytes changed after they were written"
                )
            data = body
        elif filters[index] == FILTER_DEFLATE:
            try:
                data = zlib.decompress(data)
            except zlib.error as error:
                raise ValueError(f"inflate: {error}") from error
        elif filters[index] == FILTER_ZSTD:
            try:
                data = zstandard.ZstdDecompressor().decompress(data)
            except zstandard.ZstdError as error:
                raise ValueError(f"zstd: {error}") from error
        elif filters[index] == FILTER_SHUFFLE:
            data = _unshuffle(data, np.dtype(dtype).itemsize)
        else:
            raise ValueError(f"filter {filters[index]} is not decoded here")
    return np.frombuffer(data, dtype=np.uint8).view(dtype)


def damaged_chunks(handle: h5py.File | h5py.Group, limit: int | None = None) -> list[str]:
    """Every chunk of every dataset under ``handle`` that fails its read (its Fletcher-32
    checksum, or its decoding), as ``"<dataset> chunk <offset>: <reason>"``; at most ``limit``.
    Reads each chunk once (``sinkscope inspect --verify``, and the error of a failed read in
    :class:`sinkscope.extraction.h5layout.ActivationFile`). A dataset stored without a checksum
    is named as such: its damage could not be seen."""
    found: list[str] = []

    def visit(name: str, item: Any) -> None:
        if not isinstance(item, h5py.Dataset) or (limit is not None and len(found) >= limit):
            return
        if item.chunks is None:
            try:
                item[()]
            except OSError as error:
                found.append(f"/{name}: {error}")
            return
        filters = pipeline(item)
        if FILTER_FLETCHER32 not in filters:
            found.append(f"/{name}: stored without a checksum (filters {filters})")
        dtype = np.dtype(item.dtype)
        for index in range(item.id.get_num_chunks()):
            info = item.id.get_chunk_info(index)
            offset = tuple(int(o) for o in info.chunk_offset)
            try:
                if decodable(filters):
                    mask, raw = item.id.read_direct_chunk(offset)
                    decode_chunk(raw, filters, int(mask), dtype)
                else:
                    item[tuple(slice(o, o + c) for o, c in zip(offset, item.chunks, strict=True))]
            except (ValueError, OSError) as error:
                found.append(f"/{name} chunk {offset}: {error}")
                if limit is not None and len(found) >= limit:
                    return

    handle.visititems(visit)
    return found


def missing_filters(handle: h5py.File | h5py.Group) -> dict[str, int]:
    """``{dataset name: filter id}`` of the datasets whose filters this HDF5 cannot decode."""
    missing: dict[str, int] = {}

    def visit(name: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset) and item.chunks is not None:
            for filter_id in pipeline(item):
                if not filter_available(filter_id):
                    missing[name] = filter_id
                    return

    handle.visititems(visit)
    return missing


def describe_missing(path: str, missing: Mapping[str, int]) -> str:
    """One sentence naming the undecodable datasets, their filter and what provides it."""
    by_filter: dict[int, list[str]] = {}
    for name, filter_id in missing.items():
        by_filter.setdefault(filter_id, []).append(name)
    parts = [
        f"{', '.join(sorted(names))} use HDF5 filter {filter_id}, which this h5py/HDF5 cannot "
        f"decode; it is {FILTER_PROVIDERS.get(filter_id, 'a third-party filter: install its plugin')}"
        for filter_id, names in sorted(by_filter.items())
    ]
    return f"{path}: " + "; ".join(parts)
