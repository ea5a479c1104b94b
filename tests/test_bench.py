"""bench/projection.py, section 7 of BENCHMARKS.md: the projection's bytes are the bytes an
extraction writes (checked on a real tiny extraction and against the issue's hand count for
Llama-3.1-8B), and its times follow from planted ratios and throughputs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import h5py
import pytest

from sinkscope.extraction import h5layout

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def bench_projection():
    sys.path.insert(0, str(BENCH))  # projection.py imports its siblings settings and codecs_bench
    try:
        spec = importlib.util.spec_from_file_location(
            "sinkscope_bench_projection", BENCH / "projection.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_stored_bytes_equal_the_datasets_of_a_real_extraction(
    bench_projection, tmp_path: Path
) -> None:
    """The model's own dimensions (not the file's) give each dataset's bytes in the file."""
    from tests.conftest import SETTINGS, extract_tiny

    _, path, model, ids = extract_tiny("llama", tmp_path)
    shape = {
        "n_layers": model.config.num_hidden_layers,
        "n_heads": model.config.num_attention_heads,
        "d_model": model.config.hidden_size,
    }
    projected = bench_projection.stored_bytes(
        shape, ids.shape[0], ids.shape[1], SETTINGS.storage_dtypes
    )
    with h5py.File(path, "r") as handle:
        written = {name: handle[name].nbytes for name in bench_projection.codec_bench.KINDS}
    assert projected == written


def test_llama_attention_maps_are_the_hand_counted_bytes(bench_projection) -> None:
    """32 layers x 50 sequences x 32 heads x 257^2 float16 probabilities: ~6.8 GB."""
    bytes_ = bench_projection.stored_bytes(
        bench_projection.PAPER_SHAPES["Llama-3.1-8B"],
        50,
        257,
        {"attention": "float16", "residual": "float32", "activations": "float16"},
    )
    assert bytes_[h5layout.ATTENTION_PROBS] == 32 * 50 * 32 * 257 * 257 * 2 == 6_763_417_600
    assert bytes_[h5layout.RESIDUAL_X] == 32 * 50 * 257 * 4096 * 4
    assert bytes_[h5layout.ATTENTION_RESIDUAL_UPDATE] == 32 * 50 * 257 * 4096 * 2


def test_projection_follows_planted_ratios_and_throughputs(bench_projection) -> None:
    """zstd halves the attention maps at 100 MB/s per thread; the default raw kinds are neither
    encoded nor shrunk; gzip encodes every kind at 10 MB/s per thread."""
    threads = 4
    rows = []
    for kind in bench_projection.codec_bench.KINDS:
        for codec, mb_s in (("zstd(1)", 100.0), ("gzip(1)", 10.0)):
            rows.append(
                {
                    "codec": f"{codec} sinkscope threaded",
                    "kind": kind,
                    "ratio": 0.5,
                    "write_mb_s": mb_s * threads,
                    "path": f"sinkscope.extraction.h5codec, {threads} threads",
                }
            )
    results = {"pairs": [{"model": "m", "codecs": {"rows": rows}}]}
    config = bench_projection.default_config()["extraction"]
    assert set(config["uncompressed"]) == {"residual", "activations"}
    for row in bench_projection.projection(results):
        raw = bench_projection.stored_bytes(
            bench_projection.PAPER_SHAPES[row["model"]],
            bench_projection.PAPER_N,
            bench_projection.PAPER_T1,
            config["storage_dtypes"],
        )
        attention = raw[h5layout.ATTENTION_PROBS]
        total = sum(raw.values())
        cpus = bench_projection.PROFILE_EXTRACTION_CPUS
        assert row["stored_gb"] == pytest.approx(total / 1e9)
        assert row["file_gb"] == pytest.approx((total - attention / 2) / 1e9)
        assert row["encoded_gb"] == pytest.approx(attention / 1e9)
        assert row["encode_one_core_s"] == pytest.approx(attention / 1e6 / 100.0)
        assert row["encode_s"] == pytest.approx(attention / 1e6 / 100.0 / cpus)
        assert row["encode_gzip_s"] == pytest.approx(total / 1e6 / 10.0 / cpus)
        assert row["write_s"] == pytest.approx(row["file_gb"] / bench_projection.FS_GB_S)
