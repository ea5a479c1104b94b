"""Section 7 of BENCHMARKS.md: the paper's models on a GPU node (N x T = 50 x 256), projected
from this run's measured codec ratios and per-core encoding throughput (section 6) and from the
CPUs that an extraction job gets on a cluster (sinkscope.sizing)."""

from __future__ import annotations

from typing import Any

import codecs_bench as codec_bench  # bench/codecs_bench.py
import numpy as np
from settings import default_config  # bench/settings.py

from sinkscope.extraction import h5layout
from sinkscope.prepare.model_config import fixture_config

# the jobs' requests assume them too
from sinkscope.sizing.costs import CLUSTER_THREADS, D2H_GB_S, FS_GB_S, GPU_TFLOPS
from sinkscope.sizing.shapes import facts_from_config

#: The paper's hub models of the projection of section 7 (their kept config.json files,
#: sinkscope/prepare/model_configs); N x T as in the paper.
PAPER_MODELS = {
    "Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "Gemma-7B": "google/gemma-7b",
    "gpt2-xl": "openai-community/gpt2-xl",
}


def _paper_shape(hub_id: str) -> dict[str, Any]:
    facts = facts_from_config(hub_id, fixture_config(hub_id), "bfloat16", "kept")
    return {
        "n_layers": facts.n_layers,
        "n_heads": facts.n_heads,
        "d_model": facts.d_model,
        "params": float(facts.n_params),
    }


PAPER_SHAPES = {name: _paper_shape(hub_id) for name, hub_id in PAPER_MODELS.items()}
PAPER_N, PAPER_T1 = 50, 257
#: CPUs per extraction job on a cluster (sinkscope.sizing: the rule's threads there)
PROFILE_EXTRACTION_CPUS = CLUSTER_THREADS["extract_activations"]


def _threaded_rows(pair: dict[str, Any], codec: str) -> dict[str, dict[str, Any]]:
    return {
        row["kind"]: row
        for row in pair["codecs"]["rows"]
        if row["codec"].startswith(f"{codec} sinkscope")
    }


def _per_core_by_kind(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each kind's encoding throughput per thread (MB/s of stored bytes)."""
    return {
        kind: r["write_mb_s"] / int(r["path"].split(", ")[1].split()[0]) for kind, r in rows.items()
    }


def stored_bytes(
    shape: dict[str, Any], n_sequences: int, positions: int, storage_dtypes: dict[str, str]
) -> dict[str, int]:
    """Bytes of each dataset of ``codec_bench.KINDS`` (those that grow with the model and the
    context) in its stored dtype, for a model of ``shape`` (``n_layers``, ``n_heads``, ``d_model``)
    over ``n_sequences`` x ``positions`` (BOS included): the product of the dataset's axes
    (:data:`sinkscope.extraction.h5layout.DATASETS`)."""
    sizes = {
        "layer": shape["n_layers"],
        "sequence": n_sequences,
        "head": shape["n_heads"],
        "position": positions,
        "query": positions,
        "key": positions,
        "d_model": shape["d_model"],
    }
    out = {}
    for name in codec_bench.KINDS:
        spec = h5layout.spec_of(name)
        itemsize = np.dtype(storage_dtypes[spec.dtype_key]).itemsize
        out[name] = int(np.prod([sizes[axis] for axis in spec.axes])) * itemsize
    return out


def projection(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Bytes, file size and extraction time of the paper's models at N x T = 50 x 256 on a GPU
    node, from this run's measured zstd ratios and per-core encoding throughput of each tensor
    kind, with the default config's ``extraction.uncompressed`` kinds stored raw (no encoding,
    ratio 1); the ``gzip(1)`` column compresses every kind, as before Zstandard."""
    pair = next((p for p in results["pairs"] if "codecs" in p), None)
    if pair is None:
        return []
    zstd = _threaded_rows(pair, "zstd(1)")
    per_core = _per_core_by_kind(zstd)
    per_core_gzip = _per_core_by_kind(_threaded_rows(pair, "gzip(1)"))
    uncompressed = set(default_config()["extraction"]["uncompressed"])
    storage_dtypes = default_config()["extraction"]["storage_dtypes"]
    out = []
    for name, shape in PAPER_SHAPES.items():
        L, D = shape["n_layers"], shape["d_model"]
        raw = stored_bytes(shape, PAPER_N, PAPER_T1, storage_dtypes)
        encoded = {
            k: n for k, n in raw.items() if h5layout.spec_of(k).dtype_key not in uncompressed
        }
        stored = sum(raw.values())
        on_disk = sum(n * (zstd[k]["ratio"] if k in encoded else 1.0) for k, n in raw.items())
        tokens = PAPER_N * PAPER_T1
        attention_flops = 4 * L * PAPER_N * PAPER_T1**2 * D  # QK^T and AV
        forward_s = (2 * shape["params"] * tokens + attention_flops) / (GPU_TFLOPS * 1e12)
        encode_one_core_s = sum(n / 1e6 / per_core[k] for k, n in encoded.items())
        gzip_one_core_s = sum(n / 1e6 / per_core_gzip[k] for k, n in raw.items())
        out.append(
            {
                "model": name,
                "stored_gb": stored / 1e9,
                "file_gb": on_disk / 1e9,
                "forward_s": forward_s,
                "copy_s": stored / (D2H_GB_S * 1e9),
                "encode_s": encode_one_core_s / PROFILE_EXTRACTION_CPUS,
                "encode_one_core_s": encode_one_core_s,
                "encode_gzip_s": gzip_one_core_s / PROFILE_EXTRACTION_CPUS,
                "write_s": on_disk / (FS_GB_S * 1e9),
                "encoded_gb": sum(encoded.values()) / 1e9,
            }
        )
    return out


def projection_section(results: dict[str, Any]) -> list[str]:
    rows = projection(results)
    if not rows:
        return []
    lines = [
        "",
        f"## 7. Projection: the paper's models on a GPU node (N × T = {PAPER_N} × {PAPER_T1 - 1})",
        "",
        (
            "From this run's zstd(1) ratios and per-core encoding throughput of each tensor kind "
            "(section 6); the kinds of the default `extraction.uncompressed` "
            f"({', '.join(default_config()['extraction']['uncompressed'])}) stored raw, so only "
            f"{rows[0]['encoded_gb']:.1f} of Llama's {rows[0]['stored_gb']:.1f} GB are encoded; "
            f"forward at an assumed {GPU_TFLOPS:.0f} TFLOP/s sustained (eager attention, bf16), "
            f"device-to-host copies at {D2H_GB_S:.0f} GB/s, the file written at {FS_GB_S:.0f} GB/s "
            f"(a parallel file system per client). Encoding with the {PROFILE_EXTRACTION_CPUS} CPUs "
            "that an extraction job gets on a cluster "
            "(`sinkscope.sizing.costs.CLUSTER_THREADS`); on a GPU the encoding and writing of batch b "
            "overlap the forward of batch b + 1 (`extraction.overlap_writes: auto`), so the "
            "extraction takes about the largest of the columns, not their sum."
        ),
        "",
        (
            "| model | stored bytes | file | forward | device → host | encode, 1 core | "
            f"encode, {PROFILE_EXTRACTION_CPUS} cores | write | bound by | gzip(1) instead, "
            f"{PROFILE_EXTRACTION_CPUS} cores |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        stages = {
            "forward": r["forward_s"],
            "copies": r["copy_s"],
            "encoding": r["encode_s"],
            "file system": r["write_s"],
        }
        bound = max(stages, key=stages.get)
        lines.append(
            f"| {r['model']} | {r['stored_gb']:.1f} GB | {r['file_gb']:.1f} GB | "
            f"{r['forward_s']:.1f} s | {r['copy_s']:.1f} s | {r['encode_one_core_s']:.0f} s | "
            f"{r['encode_s']:.1f} s | {r['write_s']:.1f} s | {bound} | "
            f"{r['encode_gzip_s']:.0f} s |"
        )
    return lines
