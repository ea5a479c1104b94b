"""sinkscope.extraction.h5codec: chunks encoded by the extraction's threads decode bit for bit through HDF5's
own filter pipeline (h5py's reader), every dataset of a real extraction round-trips under every
codec, and a codec or filter that is not installed is named before any work starts."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import h5py
import numpy as np
import pytest

from sinkscope.config import ConfigError, validate_config
from sinkscope.extraction import h5codec, h5layout, h5read
from sinkscope.extraction.extract import extract_activations
from sinkscope.extraction.settings import ExtractionSettings


@pytest.mark.parametrize(
    "codec,level", [("zstd", 1), ("zstd", 9), ("gzip", 1), ("gzip", 6), ("gzip", 0), ("none", 0)]
)
@pytest.mark.parametrize("dtype", ["float16", "float32", "int32", "uint8"])
def test_encoded_chunks_decode_through_hdf5_own_pipeline(
    tmp_path: Path, codec: str, level: int, dtype: str
) -> None:
    rng = np.random.default_rng(1)
    chunk = (rng.standard_normal((3, 5, 7)) * 100).astype(dtype)
    filters = h5codec.dataset_filters(codec, level, np.dtype(dtype).itemsize)
    kwargs = {"shape": (2, 3, 5, 7), "dtype": dtype, "chunks": (1, 3, 5, 7), **filters}
    with h5py.File(tmp_path / "a.h5", "w") as f:
        own = f.create_dataset("own", **kwargs)
        direct = f.create_dataset("direct", **kwargs)
        own[1] = chunk
        direct.id.write_direct_chunk((1, 0, 0, 0), h5codec.encode_chunk(chunk, codec, level))
    with h5py.File(tmp_path / "a.h5", "r") as f:
        np.testing.assert_array_equal(f["direct"][1], chunk)  # HDF5's filters decode it
        np.testing.assert_array_equal(f["direct"][0], np.zeros_like(chunk))
        if codec == "gzip":  # deflate is deterministic: the very bytes HDF5 would write
            assert f["own"].id.read_direct_chunk((1, 0, 0, 0)) == f["direct"].id.read_direct_chunk(
                (1, 0, 0, 0)
            )
        # and HDF5's own encoding decodes through sinkscope's decoder
        mask, raw = f["own"].id.read_direct_chunk((1, 0, 0, 0))
        decoded = h5codec.decode_chunk(raw, h5codec.pipeline(f["own"]), mask, np.dtype(dtype))
        np.testing.assert_array_equal(decoded.reshape(chunk.shape), chunk)


@pytest.mark.parametrize("size", [1, 2, 3, 777, 8191, 8192, 8193, 100_001, 3_000_001])
def test_fletcher32_equals_the_checksum_hdf5_writes(tmp_path: Path, size: int) -> None:
    """:func:`h5codec.fletcher32` against HDF5's own Fletcher-32 filter: HDF5 writes a chunk of
    ``size`` random bytes (odd sizes, partial and whole blocks of 4,096 words), and the 4 bytes
    it appends equal the function of the chunk's bytes. Also the all-0xFF chunk, where a sum is
    a positive multiple of 65535 (HDF5 keeps 65535, not 0), and the all-zero one."""
    rng = np.random.default_rng(size)
    payloads = [rng.integers(0, 256, size, dtype=np.uint8)]
    if size > 1000:
        payloads += [np.full(size, 255, np.uint8), np.zeros(size, np.uint8)]
    for index, payload in enumerate(payloads):
        with h5py.File(tmp_path / "f.h5", "w") as f:
            f.create_dataset("d", data=payload[None], chunks=(1, max(size, 1)), fletcher32=True)
        with h5py.File(tmp_path / "f.h5", "r") as f:
            _mask, raw = f["d"].id.read_direct_chunk((0, 0))
        assert raw[:-4] == payload.tobytes(), index
        assert h5codec.fletcher32(raw[:-4]) == int.from_bytes(raw[-4:], "little"), index


def test_a_changed_byte_fails_the_checksum_in_both_readers(tmp_path: Path) -> None:
    """A chunk with one byte changed after it was written: h5py (HDF5's filter) refuses to read
    it, and :func:`h5codec.decode_chunk` raises naming the Fletcher-32 mismatch, for a raw and a
    compressed pipeline."""
    chunk = np.arange(4 * 6, dtype="float32").reshape(4, 6)
    for codec, level in (("none", 0), ("zstd", 1)):
        filters = h5codec.dataset_filters(codec, level, 4)
        payload = bytearray(h5codec.encode_chunk(chunk, codec, level))
        payload[len(payload) // 2] ^= 0x40
        with h5py.File(tmp_path / f"{codec}.h5", "w") as f:
            ds = f.create_dataset(
                "d", shape=(1, 4, 6), dtype="float32", chunks=(1, 4, 6), **filters
            )
            ds.id.write_direct_chunk((0, 0, 0), bytes(payload))
        with h5py.File(tmp_path / f"{codec}.h5", "r") as f:
            with pytest.raises(OSError):
                f["d"][0]
            mask, raw = f["d"].id.read_direct_chunk((0, 0, 0))
            with pytest.raises(ValueError, match="Fletcher-32 checksum mismatch"):
                h5codec.decode_chunk(raw, h5codec.pipeline(f["d"]), mask, np.dtype("float32"))
            assert h5codec.damaged_chunks(f) == [
                "/d chunk (0, 0, 0): " + next(iter(_decode_errors(f["d"])))
            ]


def _decode_errors(dataset: h5py.Dataset) -> list[str]:
    mask, raw = dataset.id.read_direct_chunk((0, 0, 0))
    try:
        h5codec.decode_chunk(raw, h5codec.pipeline(dataset), mask, np.dtype(dataset.dtype))
    except ValueError as error:
        return [str(error)]
    return []


def _assert_threaded_reader_equal(handle: h5py.File, reference: h5py.File, label: str) -> None:
    """Every layer of every per-layer dataset, read by the analyses' threaded reader from
    ``handle``, equals h5py's own read of ``reference``."""
    for name in h5layout.PER_LAYER_DATASETS:
        for layer in range(handle[name].shape[0]):
            np.testing.assert_array_equal(
                h5read.read_layer(handle[name], layer, threads=2),
                reference[name][layer],
                err_msg=f"{label} {name} layer {layer}",
            )


def test_every_dataset_round_trips_under_every_codec(extracted, tmp_path: Path) -> None:
    """The same extraction under zstd, gzip and no codec: every dataset equal bit for bit, read
    by h5py's own reader and by the analyses' threaded reader."""
    _, path, _, _ = extracted
    from tests.conftest import SETTINGS

    entry = {"dtype": "float32", "attn_implementation": "eager"}
    files = {}
    for codec, level in (("zstd", 1), ("gzip", 1), ("none", 0)):
        settings = dataclasses.replace(SETTINGS, codec=codec, compression_level=level)
        out = tmp_path / f"{codec}.h5"
        extract_activations(
            path.parent / "prepared", path.parent / "tokens.json", out, entry, settings, "c", False
        )
        files[codec] = out
    with h5layout.open_activations(files["none"]) as reference:
        for codec in ("zstd", "gzip"):
            with h5layout.open_activations(files[codec]) as handle:
                assert handle.attrs["codec"] == f"{codec}(1)"
                for spec in h5layout.DATASETS:
                    ds, ref = handle[spec.name], reference[spec.name]
                    *codecs, checksum = h5codec.pipeline(ds)
                    assert codecs[-1] in (h5codec.FILTER_ZSTD, h5codec.FILTER_DEFLATE)
                    assert checksum == h5codec.FILTER_FLETCHER32
                    np.testing.assert_array_equal(ds[...], ref[...], err_msg=f"{codec} {spec.name}")
                _assert_threaded_reader_equal(handle, reference, codec)


def test_uncompressed_kinds_are_stored_raw_and_read_back_bit_for_bit(
    extracted, tmp_path: Path, default_config: dict
) -> None:
    """``extraction.uncompressed`` (the config's default: residual and activations): those kinds'
    datasets carry no filter, the others the codec; every dataset equals the all-zstd file's."""
    _, path, _, _ = extracted
    from tests.conftest import SETTINGS

    entry = {"dtype": "float32", "attn_implementation": "eager"}
    kinds = tuple(default_config["extraction"]["uncompressed"])
    assert kinds == ("residual", "activations")
    files = {}
    for tag, uncompressed in (("all", ()), ("mixed", kinds)):
        settings = dataclasses.replace(SETTINGS, codec="zstd", uncompressed=uncompressed)
        files[tag] = tmp_path / f"{tag}.h5"
        extract_activations(
            path.parent / "prepared",
            path.parent / "tokens.json",
            files[tag],
            entry,
            settings,
            "c",
            False,
        )
    with (
        h5layout.open_activations(files["all"]) as reference,
        h5layout.open_activations(files["mixed"]) as handle,
    ):
        assert handle.attrs["codec"] == "zstd(1); uncompressed: residual, activations"
        raw = {spec.name for spec in h5layout.DATASETS if spec.dtype_key in kinds}
        assert raw == {h5layout.RESIDUAL_X, h5layout.ATTENTION_RESIDUAL_UPDATE}
        for spec in h5layout.DATASETS:
            ds = handle[spec.name]
            expected = h5codec.PIPELINES["none" if spec.name in raw else "zstd"]
            if spec.name not in raw and ds.dtype.itemsize == 1:
                expected = (h5codec.FILTER_ZSTD, h5codec.FILTER_FLETCHER32)
            assert h5codec.pipeline(ds) == expected, spec.name
            np.testing.assert_array_equal(ds[...], reference[spec.name][...], err_msg=spec.name)
        _assert_threaded_reader_equal(handle, reference, "mixed")
    assert files["mixed"].stat().st_size > files["all"].stat().st_size  # raw bytes: no free lunch


def test_settings_built_without_a_codec_follow_the_config_defaults(default_config: dict) -> None:
    """A caller that builds :class:`ExtractionSettings` by hand gets the files the default config
    writes: the same codec and the same raw kinds."""
    settings = ExtractionSettings(batch_size=1, storage_dtypes={}, compression_level=1)
    assert settings.codec == default_config["extraction"]["codec"]
    assert settings.uncompressed == tuple(default_config["extraction"]["uncompressed"])


def test_an_unknown_uncompressed_kind_is_rejected_naming_the_key(default_config: dict) -> None:
    config = copy.deepcopy(default_config)
    config["extraction"]["uncompressed"] = ["residual", "logits"]
    with pytest.raises(ConfigError, match=r"extraction.*uncompressed.*logits"):
        validate_config(config)


def test_unknown_codec_and_bad_level_are_rejected_naming_the_key(default_config: dict) -> None:
    config = copy.deepcopy(default_config)
    config["extraction"]["codec"] = "blosc"
    with pytest.raises(ConfigError, match=r"extraction\.codec: 'blosc' is not one of"):
        validate_config(config)
    config["extraction"].update(codec="zstd", compression_level=0)
    with pytest.raises(ConfigError, match=r"extraction\.compression_level: 0 is outside 1\.\.22"):
        validate_config(config)


def test_a_codec_whose_filter_is_missing_is_rejected(
    default_config: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(h5codec, "filter_available", lambda f: f != h5codec.FILTER_ZSTD)
    with pytest.raises(
        ConfigError, match=r"extraction\.codec: 'zstd' needs .*pip install hdf5plugin"
    ):
        validate_config(default_config)
    config = copy.deepcopy(default_config)
    config["extraction"]["codec"] = "gzip"
    validate_config(config)  # HDF5's own filters need no plugin


def test_a_file_whose_filter_cannot_be_decoded_names_filter_and_package(
    extracted, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, path, _, _ = extracted
    with h5layout.open_activations(path):
        pass
    monkeypatch.setattr(h5codec, "filter_available", lambda f: f != h5codec.FILTER_ZSTD)
    with pytest.raises(h5layout.ActivationFileError) as error:
        h5layout.open_activations(path)
    message = str(error.value)
    assert str(path) in message and "attention/probs" in message
    assert "32015" in message and "pip install hdf5plugin" in message
