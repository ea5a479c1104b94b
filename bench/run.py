"""sinkscope benchmarks (issue 9): extraction and analyses measured against the model's own forward.

    .venv/bin/python bench/run.py [--quick] [--skip-dag]

Everything is measured in one run on this machine, and every target is a ratio to a baseline
measured in the same run (the machines this runs on are shared and noisy):

1. capture overhead: extraction of N x T sequences into HDF5 / a plain forward of the same
   batches (SDPA attention, no outputs kept), with the extraction's stage profile;
2. storage: bytes on disk per HDF5 dataset / the same tensors as raw float32 (the tensors the
   file provides: stored datasets and the ones recomputed on reading, ``h5layout.DERIVED``), and
   alternative encodings of the attention maps (packed triangle, fixed point, other filters);
3. analysis throughput: wall time and peak RSS of each analysis (own process) / the extraction,
   on the bench's files and on the default run's N = 50 files where they exist;
4. scaling in T: extraction, analyses and file size for a doubling series of T, growth exponents;
5. DAG overhead: snakemake no-op re-run and the dry-run of a 10 models x 6 datasets config.

Writes ``bench/results.json`` and regenerates ``BENCHMARKS.md`` (``--json``, ``--markdown``);
work files go to ``results/bench/work`` (``--work``; deleted at the end unless ``--keep``). Needs
the prepared default models (``results/models/*``) and corpora (``results/corpora/*``) of the
default run; the analyses are also run on its activation files of the bench's dataset where they
exist in the current schema (``--skip-default-analyses``; never with ``--quick``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import codecs_bench as codec_bench  # bench/codecs_bench.py
import h5py
import numpy as np
import torch
import yaml

from sinkscope.config import load_config
from sinkscope.extraction import h5layout
from sinkscope.extraction.extract import ExtractionSettings, extract_activations
from sinkscope.paths import Paths
from sinkscope.prepare.models import PROVENANCE_FILE, base_model, load_model
from sinkscope.prepare.tokens import prepare_tokens, read_tokens, tokenize_corpus

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
#: The default run's config and outputs (the workflow's own reader and path templates).
CONFIG_FILE = REPO / "config.yaml"
PATHS = Paths(str(REPO / "results"))
ANALYSES = ("classify_heads", "analyze_geometry", "analyze_oversmoothing")
TARGETS = {
    "capture": 1.5,
    "storage": 0.40,
    "analysis_time": 1.0,
    "analysis_rss": 2.0,
    "noop": 5.0,
    "analysis_vs_gzip": 1.0,  # issue 17: reading the new codec is no slower than gzip's files
}
#: the codec of the files before issue 17, measured beside the default in the same run
BEFORE_CODEC = ("gzip", 1)

FULL = {
    "models": ["smollm2-135m", "gemma3-270m"],
    "dataset": "alice",
    "n_sequences": 16,
    "context_length": 256,
    "scaling_model": "smollm2-135m",
    "scaling_n": 4,
    "scaling_T": [64, 128, 256, 512],
}
QUICK = {
    "models": ["smollm2-135m"],
    "dataset": "alice",
    "n_sequences": 4,
    "context_length": 64,
    "scaling_model": "smollm2-135m",
    "scaling_n": 2,
    "scaling_T": [32, 64, 128],
}


# --------------------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    import transformers

    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem = int(line.split()[1]) * 1024
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cpu": cpu,
        "cores_visible": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "ram_gib": round(mem / 2**30, 1),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        "git_commit": commit + ("+uncommitted changes" if dirty else ""),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load_average_at_start": os.getloadavg()[0],
    }


# --------------------------------------------------------------------------- helpers


@functools.cache
def default_config() -> dict[str, Any]:
    """config.yaml read and validated as the workflow reads it (defaults filled in)."""
    return load_config(CONFIG_FILE)


def model_dir(name: str) -> Path:
    path = Path(PATHS.model_dir.format(model=name))
    if not (path / PROVENANCE_FILE).exists():
        raise SystemExit(f"{path}: prepared model missing; run the default pipeline first")
    return path


def cut(work: Path, model: str, dataset: str, n: int, t: int) -> Path:
    documents = Path(PATHS.corpus.format(dataset=dataset))
    if not documents.exists():
        raise SystemExit(f"{documents}: corpus missing; run the default pipeline first")
    provenance = Path(PATHS.corpus_provenance.format(dataset=dataset))
    stream = Path(PATHS.token_stream.format(model=model, dataset=dataset))
    if not stream.exists():  # the workflow's, else one of this bench's own
        stream = work / "tokens" / f"{model}_{dataset}.stream.npz"
        if not stream.exists():
            tokenize_corpus(documents, provenance, model_dir(model), model, dataset, stream)
    out = work / "tokens" / f"{model}_{dataset}_N{n}_T{t}.json"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        prepare_tokens(stream, provenance, model_dir(model), model, dataset, n, t, 0, out)
    return out


def model_entry(model: str) -> dict[str, Any]:
    return default_config()["models"][model]


def default_settings(batch_size: int | str, overlap: str = "off") -> ExtractionSettings:
    config = default_config()["extraction"]
    return ExtractionSettings(
        batch_size=batch_size,
        storage_dtypes=config["storage_dtypes"],
        compression_level=config["compression_level"],
        codec=config["codec"],
        uncompressed=tuple(config["uncompressed"]),
        device="cpu",
        overlap_writes=overlap,
    )


def plain_forward_seconds(
    model: torch.nn.Module, token_ids: np.ndarray, batch_size: int, **outputs: bool
) -> float:
    """Wall seconds of the transformer body over all batches (no logits, nothing kept)."""
    body = base_model(model)
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(token_ids), batch_size):
            ids = torch.as_tensor(token_ids[start : start + batch_size], dtype=torch.long)
            out = body(input_ids=ids, use_cache=False, **outputs)
            del out
    return time.perf_counter() - started


def extract(work: Path, model: str, tokens: Path, tag: str, settings: ExtractionSettings) -> Path:
    out = work / "h5" / f"{model}_{tag}.h5"
    out.parent.mkdir(parents=True, exist_ok=True)
    extract_activations(
        model_dir(model), tokens, out, model_entry(model), settings, "bench", progress=False
    )
    return out


def file_profile(path: Path) -> dict[str, Any]:
    with h5layout.open_activations(path) as handle:
        profile = h5layout.read_attr(handle, h5layout.ATTR_EXTRACTION_PROFILE, as_json=True)
        profile["total"] = float(h5layout.read_attr(handle, h5layout.ATTR_EXTRACTION_SECONDS))
    return profile


def run_analysis(step: str, h5: Path, out_dir: Path, per_head: Path | None) -> dict[str, float]:
    command = [PYTHON, str(REPO / "bench" / "analysis_job.py"), step, str(h5), str(out_dir)]
    if per_head is not None:
        command.append(str(per_head))
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{step} on {h5} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_analyses(h5: Path, out_dir: Path) -> dict[str, dict[str, float]]:
    results = {}
    per_head = out_dir / "classify_heads" / "per_head.parquet"
    for step in ANALYSES:
        results[step] = run_analysis(
            step, h5, out_dir / step, None if step == "classify_heads" else per_head
        )
    return results


def layer_bytes(h5: Path, itemsize: int | None = None) -> int:
    """Bytes of one layer of the per-layer activations.

    ``itemsize=None``: the stored per-layer datasets in their stored dtypes (the denominator of
    the peak-RSS target). ``itemsize=4``: every per-layer tensor the file provides, stored or
    recomputed on reading (``Z``, values), as float32 (the same tensors whatever the schema).
    """
    with h5layout.open_activations(h5) as handle:
        n_seq = int(h5layout.read_attr(handle, h5layout.ATTR_N_SEQUENCES))
        sizes = h5layout.file_sizes(handle)
        total = 0
        for name in h5layout.PER_LAYER_DATASETS:
            dataset = handle[name]
            total += int(np.prod(dataset.shape[1:])) * (itemsize or dataset.dtype.itemsize)
        if itemsize is not None:
            for spec in h5layout.DERIVED:
                total += n_seq * int(np.prod([sizes[a] for a in spec.axes[2:]])) * itemsize
    return total


def storage(h5: Path) -> dict[str, Any]:
    """Bytes on disk per dataset against the same tensors as raw float32.

    The raw total counts every tensor the file provides, the recomputed ``Z`` and values too
    (stored bytes 0), so that the ratio compares schemas on the same tensors; ``ratio_stored``
    is the file against the raw float32 of the stored datasets alone.
    """
    rows = {}
    stored_total = raw_total = raw_stored = 0
    with h5layout.open_activations(h5) as handle:
        for spec in h5layout.DATASETS:
            dataset = handle[spec.name]
            stored = dataset.id.get_storage_size()
            raw = dataset.size * 4
            rows[spec.name] = {
                "dtype": str(dataset.dtype),
                "stored_bytes": stored,
                "raw_fp32_bytes": raw,
                "ratio": stored / raw if raw else None,
            }
            stored_total += stored
            raw_total += raw
        raw_stored = raw_total
        sizes = h5layout.file_sizes(handle)
        for derived in h5layout.DERIVED:
            raw = 4 * int(np.prod([sizes[a] for a in derived.axes]))
            rows[derived.name] = {
                "dtype": f"recomputed ({derived.reader})",
                "stored_bytes": 0,
                "raw_fp32_bytes": raw,
                "ratio": 0.0,
            }
            raw_total += raw
    file_bytes = h5.stat().st_size
    return {
        "datasets": rows,
        "stored_bytes": stored_total,
        "raw_fp32_bytes": raw_total,
        "file_bytes": file_bytes,
        "ratio": file_bytes / raw_total,
        "ratio_stored": file_bytes / raw_stored,
    }


def _rss_target_row(label: str, analysis: dict[str, Any]) -> str:
    """The peak-RSS target row of one analysis run."""
    value = analysis["peak_increase_over_layer"]
    return (
        f"| peak RSS above imports / one layer's data, {label} | {value:.2f}× | "
        f"≤ {TARGETS['analysis_rss']}× | {_ok(value, TARGETS['analysis_rss'])} |"
    )


def _storage_target_rows(label: str, storage_row: dict[str, Any]) -> list[str]:
    """The storage target, read both ways: against every tensor the file provides (the stored
    ones and Z and V, which the readers recompute exactly) and against the stored ones alone."""
    rows = []
    for key, what in (
        ("ratio", "raw fp32 of the tensors it provides (stored + recomputed Z, V)"),
        ("ratio_stored", "raw fp32 of the stored tensors alone"),
    ):
        value = storage_row.get(key)
        if value is None:
            continue
        rows.append(
            f"| HDF5 file / {what}, {label} | {value:.2f}× | ≤ {TARGETS['storage']}× | "
            f"{_ok(value, TARGETS['storage'])} |"
        )
    return rows


def default_run_files(sizes: dict[str, Any]) -> dict[str, Path]:
    """The default run's files of the bench's dataset (N = 50, T = 256) that this code reads;
    files of another schema are reported and skipped."""
    found = {}
    for model in sizes["models"]:
        path = Path(PATHS.activations.format(model=model, dataset=sizes["dataset"]))
        if not path.exists():
            continue
        try:
            with h5layout.open_activations(path):
                pass
        except h5layout.ActivationFileError as error:
            print(f"[{model}] default run's file skipped: {error}", flush=True)
            continue
        found[model] = path
    return found


def default_run_storage(files: dict[str, Path]) -> dict[str, Any]:
    """Storage of the default run's own files."""
    found = {}
    for model, path in files.items():
        with h5layout.open_activations(path) as handle:
            n = int(h5layout.read_attr(handle, h5layout.ATTR_N_SEQUENCES))
            t = int(h5layout.read_attr(handle, h5layout.ATTR_CONTEXT_LENGTH))
        found[model] = {"path": str(path.relative_to(REPO)), "N": n, "T": t, **storage(path)}
    return found


def default_run_analyses(work: Path, files: dict[str, Path]) -> dict[str, Any]:
    """Wall time and peak RSS of each analysis on the default run's files (N = 50), relative to
    one layer's data: at the bench's N = 16 a fixed ~90 MiB (imports' arenas, the head table,
    weights, Gram matrices) dominates the peak, at the default N it does not."""
    found = {}
    for model, path in files.items():
        print(f"[{model}] analyses of the default run's file {path.name}", flush=True)
        analyses = run_analyses(path, work / "default_run_analyses" / model)
        one_layer = layer_bytes(path)
        for result in analyses.values():
            result["peak_increase_over_layer"] = (
                result["peak_rss"] - result["rss_after_imports"]
            ) / one_layer
        with h5layout.open_activations(path) as handle:
            n = int(h5layout.read_attr(handle, h5layout.ATTR_N_SEQUENCES))
            t = int(h5layout.read_attr(handle, h5layout.ATTR_CONTEXT_LENGTH))
        found[model] = {
            "path": str(path.relative_to(REPO)),
            "N": n,
            "T": t,
            "one_layer_bytes": one_layer,
            "one_layer_fp32_bytes": layer_bytes(path, 4),
            "analyses": analyses,
        }
    return found


def fit_exponent(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def fit_quadratic(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least-squares ``y = a + b T + c T^2`` and the T where the quadratic term equals the linear.

    With only a few points of a doubling series the log-log slope mixes the fixed cost (model
    loading, weights, process start), the per-token cost (projections, MLP, rows of X, Z, ...)
    and the per-token-pair cost (attention maps); the three coefficients separate them.
    """
    t = np.asarray(xs, dtype=np.float64)
    design = np.stack([np.ones_like(t), t, t * t], axis=1)
    (a, b, c), *_ = np.linalg.lstsq(design, np.asarray(ys, dtype=np.float64), rcond=None)
    return {
        "a": float(a),
        "b": float(b),
        "c": float(c),
        "crossover_T": float(b / c) if c > 0 else None,
    }


# --------------------------------------------------------------------------- encodings


def _timed_write(array: np.ndarray, chunks: tuple[int, ...], **filters: Any) -> tuple[int, float]:
    """Stored bytes and seconds of writing ``array`` into an in-memory HDF5 file."""
    with h5py.File(f"bench-{id(array)}-{time.perf_counter_ns()}", "w", driver="core",
                   backing_store=False) as handle:  # fmt: skip
        started = time.perf_counter()
        dataset = handle.create_dataset("a", data=array, chunks=chunks, **filters)
        handle.flush()
        seconds = time.perf_counter() - started
        return dataset.id.get_storage_size(), seconds


def attention_encodings(h5: Path, layers: list[int]) -> list[dict[str, Any]]:
    """Attention maps of some layers stored in alternative encodings (evaluated, not adopted).

    The error column is the largest absolute error of a decoded probability; ``ratio`` is stored
    bytes over raw float32 bytes of the full (T1 x T1) maps.
    """
    with h5layout.open_activations(h5) as handle:
        probs = np.stack(
            [handle[h5layout.ATTENTION_PROBS][layer] for layer in layers]
        )  # (l, N, H, T, T)
    exact = probs.astype(np.float32)  # the stored float16 maps are the reference here
    _n_layers, _n_seq, n_heads, t1, _ = probs.shape
    rows_i, cols_i = np.tril_indices(t1)
    packed16 = probs[..., rows_i, cols_i]  # (l, N, H, T1(T1+1)/2)
    raw = exact.nbytes
    gzip1 = {"compression": "gzip", "compression_opts": 1, "shuffle": True}
    chunk_full = (1, 1, n_heads, t1, t1)
    chunk_head = (1, 1, 1, t1, t1)
    chunk_packed = (1, 1, n_heads, packed16.shape[-1])
    fixed16 = np.round(exact * 65535.0).astype(np.uint16)
    fixed8 = np.round(exact * 255.0).astype(np.uint8)
    candidates = [
        ("float16, gzip(1)+shuffle (current)", probs, chunk_full, gzip1, 0.0),
        ("float16, gzip(1)+shuffle, chunk per head", probs, chunk_head, gzip1, 0.0),
        ("float16, lzf+shuffle", probs, chunk_full, {"compression": "lzf", "shuffle": True}, 0.0),
        (
            "float16, gzip(6)+shuffle",
            probs,
            chunk_full,
            {"compression": "gzip", "compression_opts": 6, "shuffle": True},
            0.0,
        ),
        ("float16 packed lower triangle, gzip(1)+shuffle", packed16, chunk_packed, gzip1, 0.0),
        (
            "uint16 fixed point p*65535, gzip(1)+shuffle",
            fixed16,
            chunk_full,
            gzip1,
            float(np.abs(fixed16 / 65535.0 - exact).max()),
        ),
        (
            "uint16 fixed point packed, gzip(1)+shuffle",
            fixed16[..., rows_i, cols_i],
            chunk_packed,
            gzip1,
            float(np.abs(fixed16 / 65535.0 - exact).max()),
        ),
        (
            "uint8 fixed point p*255, gzip(1)+shuffle",
            fixed8,
            chunk_full,
            gzip1,
            float(np.abs(fixed8 / 255.0 - exact).max()),
        ),
    ]
    fp16_err = float(np.finfo(np.float16).eps / 2)  # relative; absolute <= 2.4e-4 for p <= 1
    out = []
    for name, array, chunks, filters, error in candidates:
        stored, seconds = _timed_write(array, chunks, **filters)
        out.append(
            {
                "encoding": name,
                "ratio_to_raw_fp32": stored / raw,
                "write_seconds": seconds,
                "max_abs_error_vs_stored_float16": error,
            }
        )
    out.append({"note": f"float16 itself: relative error <= {fp16_err:.2e} (abs <= 2.4e-4)"})
    del probs, exact, packed16, fixed16, fixed8
    return out


# --------------------------------------------------------------------------- sections


def bench_pair(work: Path, model: str, sizes: dict[str, Any], overlap_too: bool) -> dict[str, Any]:
    n, t = sizes["n_sequences"], sizes["context_length"]
    tokens = cut(work, model, sizes["dataset"], n, t)
    token_ids, _ = read_tokens(tokens)
    batch = 8
    entry = model_entry(model)
    print(f"[{model}] N={n} T={t}: plain forwards", flush=True)
    sdpa = load_model(model_dir(model), entry["dtype"], "sdpa")
    plain_forward_seconds(sdpa, token_ids[:batch], batch)  # warm-up
    plain = [plain_forward_seconds(sdpa, token_ids, batch) for _ in range(2)]
    del sdpa
    eager = load_model(model_dir(model), entry["dtype"], "eager")
    plain_forward_seconds(eager, token_ids[:batch], batch)  # warm-up
    eager_plain = plain_forward_seconds(eager, token_ids, batch)
    eager_outputs = plain_forward_seconds(
        eager, token_ids, batch, output_attentions=True, output_hidden_states=True
    )
    del eager
    gc.collect()
    print(f"[{model}] extraction", flush=True)
    settings = default_settings(batch, "off")
    # twice, keeping the least disturbed run, as for the plain forward (the machine is shared)
    h5 = extract(work, model, tokens, "serial", settings)
    first = file_profile(h5)
    h5 = extract(work, model, tokens, "serial", settings)
    profiles = {"serial": min(first, file_profile(h5), key=lambda profile: profile["total"])}
    profiles["serial"]["totals_of_both_runs"] = [first["total"], file_profile(h5)["total"]]
    before = dataclasses.replace(settings, codec=BEFORE_CODEC[0], compression_level=BEFORE_CODEC[1])
    h5_before = extract(work, model, tokens, "before", before)
    profiles[f"serial, {BEFORE_CODEC[0]}({BEFORE_CODEC[1]}) as before"] = file_profile(h5_before)
    if overlap_too:
        h5_overlap = extract(work, model, tokens, "overlap", default_settings(batch, "on"))
        profiles["overlap"] = file_profile(h5_overlap)
        h5_overlap.unlink()
    sdpa = load_model(model_dir(model), entry["dtype"], "sdpa")
    plain.append(plain_forward_seconds(sdpa, token_ids, batch))  # second baseline after
    del sdpa
    gc.collect()
    baseline = min(plain)  # the least disturbed run (the machine is shared)
    print(f"[{model}] analyses", flush=True)
    analyses = run_analyses(h5, work / "analyses" / model)
    analyses_before = run_analyses(h5_before, work / "analyses_before" / model)
    storage_before = storage(h5_before)
    h5_before.unlink()
    for step, result in analyses.items():
        result["seconds_before_codec"] = analyses_before[step]["seconds"]
        result["ratio_to_before_codec"] = result["seconds"] / analyses_before[step]["seconds"]
    one_layer = layer_bytes(h5)
    extraction_seconds = profiles["serial"]["total"]
    for result in analyses.values():
        result["time_ratio"] = result["seconds"] / extraction_seconds
        result["peak_rss_over_layer"] = result["peak_rss"] / one_layer
        result["peak_increase_over_layer"] = (
            result["peak_rss"] - result["rss_after_imports"]
        ) / one_layer
    with h5layout.open_activations(h5) as handle:
        n_layers = int(h5layout.read_attr(handle, h5layout.ATTR_N_LAYERS))
    result = {
        "model": model,
        "n_sequences": n,
        "context_length": t,
        "batch_size": batch,
        "n_layers": n_layers,
        "plain_sdpa_forward_seconds": plain,
        "eager_forward_seconds": eager_plain,
        "eager_forward_with_outputs_seconds": eager_outputs,
        "extraction": profiles,
        "capture_ratio": extraction_seconds / baseline,
        "storage": storage(h5),
        "storage_before_codec": storage_before,
        "before_codec": f"{BEFORE_CODEC[0]}({BEFORE_CODEC[1]})",
        "one_layer_bytes": one_layer,
        "one_layer_fp32_bytes": layer_bytes(h5, 4),
        "analyses": analyses,
    }
    if model == sizes["models"][0]:
        print(f"[{model}] attention encodings", flush=True)
        result["attention_encodings"] = attention_encodings(h5, [0, n_layers // 2])
        print(f"[{model}] codecs", flush=True)
        result["codecs"] = codec_bench.measure(h5, n_layers=2)
    return result


def bench_scaling(work: Path, sizes: dict[str, Any]) -> dict[str, Any]:
    model, n = sizes["scaling_model"], sizes["scaling_n"]
    entry = model_entry(model)
    rows = []
    for t in sizes["scaling_T"]:
        print(f"[scaling] T={t}", flush=True)
        tokens = cut(work, model, sizes["dataset"], n, t)
        token_ids, _ = read_tokens(tokens)
        sdpa = load_model(model_dir(model), entry["dtype"], "sdpa")
        plain_forward_seconds(sdpa, token_ids[:1], n)
        plain = plain_forward_seconds(sdpa, token_ids, n)
        del sdpa
        h5 = extract(work, model, tokens, f"T{t}", default_settings(n, "off"))
        analyses = run_analyses(h5, work / "scaling" / f"T{t}")
        rows.append(
            {
                "T": t,
                "plain_sdpa_forward_seconds": plain,
                "extraction_seconds": file_profile(h5)["total"],
                "file_bytes": h5.stat().st_size,
                **{f"{step}_seconds": analyses[step]["seconds"] for step in ANALYSES},
            }
        )
        h5.unlink()
    keys = [
        "plain_sdpa_forward_seconds",
        "extraction_seconds",
        "file_bytes",
        *(f"{step}_seconds" for step in ANALYSES),
    ]
    ts = [row["T"] for row in rows]
    upper = slice(len(ts) // 2 - 1 if len(ts) > 2 else 0, None)  # the larger T: asymptotic regime
    exponents = {
        key: {
            "all": fit_exponent(ts, [row[key] for row in rows]),
            "upper": fit_exponent(ts[upper], [row[key] for row in rows][upper]),
        }
        for key in keys
    }
    return {"model": model, "n_sequences": n, "rows": rows, "exponents": exponents}


def _timed(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done


def bench_dag(work: Path) -> dict[str, Any]:
    snakemake = str(Path(PYTHON).parent / "snakemake")
    result: dict[str, Any] = {}
    print("[dag] dry-run of the default config", flush=True)
    seconds, done = _timed([snakemake, "-n", "--nolock", "--quiet", "rules"], REPO)
    result["default_dry_run_seconds"] = seconds
    # the no-op re-run: the whole default target where results/ is complete, else the
    # model x dataset DAG (every pair's extraction and analyses and their summaries)
    for targets in ([], ["summarize_heads", "summarize_geometry", "summarize_oversmoothing"]):
        selection = ["--", *targets] if targets else []
        seconds, done = _timed([snakemake, "-n", "--nolock", "--quiet", "rules", *selection], REPO)
        if done.returncode == 0 and "Nothing to be done" in done.stdout + done.stderr:
            print(f"[dag] no-op re-run of {targets or 'the default target'}", flush=True)
            seconds, done = _timed(
                [snakemake, "--cores", "1", "--nolock", "--quiet", "rules", *selection], REPO
            )
            if done.returncode == 0:
                result["noop_rerun_seconds"] = seconds
                result["noop_targets"] = targets or ["all"]
                break
    else:
        result["noop_rerun_seconds"] = None
        result["noop_note"] = "results/ is not complete: a re-run would run jobs"
    config = default_config()
    big = copy.deepcopy(config)
    big["models"] = {
        f"{name}-{i}": entry for i in range(5) for name, entry in config["models"].items()
    }
    datasets = dict(config["datasets"])
    for i, (name, entry) in enumerate(list(config["datasets"].items())[:2]):
        datasets[f"{name}-copy{i}"] = entry
    big["datasets"] = datasets
    folder = work / "dag"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config_10x6.yaml"
    path.write_text(yaml.safe_dump(big, sort_keys=False))
    print("[dag] dry-run of 10 models x 6 datasets", flush=True)
    seconds, done = _timed(
        [
            snakemake,
            "-n",
            "--quiet",
            "rules",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(folder),
            "--configfile",
            str(path),
        ],
        REPO,
    )
    result["dry_run_10x6_seconds"] = seconds if done.returncode == 0 else None
    result["dry_run_10x6_models_datasets"] = [len(big["models"]), len(big["datasets"])]
    if done.returncode != 0:
        result["dry_run_10x6_error"] = (done.stdout + done.stderr)[-1500:]
    else:
        result["dry_run_10x6_summary"] = (done.stdout + done.stderr)[-1200:]
    return result


# --------------------------------------------------------------------------- report


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _ok(value: float | None, target: float) -> str:
    if value is None:
        return "not measured"
    return "meets" if value <= target else "MISSES"


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Benchmarks",
        "",
        "Regenerated by `.venv/bin/python bench/run.py"
        + (" --quick" if results["quick"] else "")
        + "` (`make bench`); raw numbers in `bench/results.json`. Every ratio is taken against a",
        "baseline measured in the same run on the same machine. The machine is shared with other",
        "jobs and noisy: expect ±15 % between runs.",
        "",
        "## Machine",
        "",
        (
            f"- CPU: {m['cpu']}, {m['cores_visible']} cores visible, torch threads "
            f"{m['torch_threads']}; RAM {m['ram_gib']} GiB; GPU: {m['gpu'] or 'none'}"
        ),
        (
            f"- Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}, "
            f"h5py {m['h5py']} (HDF5 {m['hdf5']})"
        ),
        (
            f"- git commit {m['git_commit']}, {m['date_utc']} UTC, load average at start "
            f"{m['load_average_at_start']:.2f}"
        ),
        "- GPU row: empty — no GPU was available to this run.",
        "",
        "## Targets",
        "",
        "| measure | value | target | |",
        "|---|---|---|---|",
    ]
    for pair in results["pairs"]:
        model = pair["model"]
        lines.append(
            f"| capture overhead, {model} (extraction / plain SDPA forward) | "
            f"{pair['capture_ratio']:.2f}× | ≤ {TARGETS['capture']}× | "
            f"{_ok(pair['capture_ratio'], TARGETS['capture'])} |"
        )
        lines += _storage_target_rows(model, pair["storage"])
        for step, a in pair["analyses"].items():
            lines.append(
                f"| {step} time / extraction time, {model} | {a['time_ratio']:.2f}× | "
                f"≤ {TARGETS['analysis_time']}× | {_ok(a['time_ratio'], TARGETS['analysis_time'])} |"
            )
            lines.append(_rss_target_row(f"{step}, {model}", a))
            if "ratio_to_before_codec" in a:
                lines.append(
                    f"| {step} time on the new file / on the {pair['before_codec']} file, "
                    f"{model} | {a['ratio_to_before_codec']:.2f}× | "
                    f"≤ {TARGETS['analysis_vs_gzip']}× | "
                    f"{_ok(a['ratio_to_before_codec'], TARGETS['analysis_vs_gzip'])} |"
                )
    for model, row in results.get("default_run_files", {}).items():
        lines += _storage_target_rows(f"{model}, default run's file (N = {row['N']})", row)
    for model, row in results.get("default_run_analyses", {}).items():
        for step, a in row["analyses"].items():
            label = f"{step}, {model}, default run's file (N = {row['N']})"
            lines.append(_rss_target_row(label, a))
    dag = results.get("dag")
    if dag:
        lines.append(
            "| snakemake no-op re-run, default config | "
            + (f"{dag['noop_rerun_seconds']:.1f} s" if dag["noop_rerun_seconds"] else "—")
            + f" | ≤ {TARGETS['noop']} s | {_ok(dag['noop_rerun_seconds'], TARGETS['noop'])} |"
        )
    lines += ["", "## 1. Capture overhead", ""]
    lines += [
        (
            "The plain forward is the fastest of three runs and the serial extraction the faster "
            "of two (the least disturbed runs on a shared machine); the other rows are single runs."
        ),
        "",
        (
            "| model | N × T | batch | plain SDPA forward (min) | eager forward | eager + attentions"
            " & hidden states | extraction | forward | to host | compress | write I/O | "
            "write wait | ratio |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for pair in results["pairs"]:
        for mode, prof in pair["extraction"].items():
            lines.append(
                f"| {pair['model']} ({mode}) | {pair['n_sequences']} × {pair['context_length']} | "
                f"{pair['batch_size']} | {min(pair['plain_sdpa_forward_seconds']):.1f} s | "
                f"{pair['eager_forward_seconds']:.1f} s | "
                f"{pair['eager_forward_with_outputs_seconds']:.1f} s | {prof['total']:.1f} s | "
                f"{prof.get('forward', 0):.1f} s | {prof.get('to_host', 0):.1f} s | "
                f"{prof.get('write', 0) - prof.get('write_io', 0):.1f} s | "
                f"{prof.get('write_io', 0):.1f} s | {prof.get('write_wait', 0):.1f} s | "
                f"{prof['total'] / min(pair['plain_sdpa_forward_seconds']):.2f}× |"
            )
    if not results["machine"]["gpu"]:
        lines.append("| GPU | not measured: no GPU was available | | | | | | | | | | | |")
    lines.append("")
    lines += ["", "## 2. Storage (bytes on disk / same tensors as raw float32)", ""]
    lines += [
        (
            "The raw float32 total counts every tensor the file provides, including those "
            "recomputed on reading (`Z`, values: stored bytes 0), so that schemas compare on the "
            "same tensors; in brackets, the file against the stored datasets alone."
        ),
        "",
    ]
    lines += ["| dataset | dtype | " + " | ".join(p["model"] for p in results["pairs"]) + " |"]
    lines += ["|---|---|" + "---|" * len(results["pairs"])]
    for name in results["pairs"][0]["storage"]["datasets"]:
        cells = []
        for pair in results["pairs"]:
            row = pair["storage"]["datasets"][name]
            cells.append(f"{row['ratio']:.3f} ({_mib(row['stored_bytes'])})")
        dtype = results["pairs"][0]["storage"]["datasets"][name]["dtype"]
        lines.append(f"| `{name}` | {dtype} | " + " | ".join(cells) + " |")
    lines.append(
        "| **file** | | "
        + " | ".join(
            f"**{p['storage']['ratio']:.3f}** ({_mib(p['storage']['file_bytes'])} of "
            f"{_mib(p['storage']['raw_fp32_bytes'])}; stored alone "
            f"{p['storage'].get('ratio_stored', p['storage']['ratio']):.3f})"
            for p in results["pairs"]
        )
        + " |"
    )
    for model, row in results.get("default_run_files", {}).items():
        lines.append(
            f"| **default run's file** `{row['path']}` (N = {row['N']}, T = {row['T']}) | | "
            + " | ".join(
                f"**{row['ratio']:.3f}** ({_mib(row['file_bytes'])})" if p["model"] == model else ""
                for p in results["pairs"]
            )
            + " |"
        )
    encodings = results["pairs"][0].get("attention_encodings")
    if encodings:
        lines += [
            "",
            (
                f"Attention maps in other encodings ({results['pairs'][0]['model']}, two layers; "
                "ratio to raw float32 maps, max abs error of a decoded probability against the "
                "stored float16):"
            ),
            "",
            "| encoding | ratio | write time | max abs error |",
            "|---|---|---|---|",
        ]
        for row in encodings:
            if "encoding" in row:
                lines.append(
                    f"| {row['encoding']} | {row['ratio_to_raw_fp32']:.3f} | "
                    f"{row['write_seconds']:.2f} s | {row['max_abs_error_vs_stored_float16']:.1e} |"
                )
    lines += ["", "## 3. Analysis throughput", ""]
    lines += [
        (
            "| model | analysis | wall | / extraction | peak RSS | RSS after imports | "
            "peak − imports | one layer's data, stored dtype / fp32 | (peak − imports) / layer, stored / fp32 |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for pair in results["pairs"]:
        for step, a in pair["analyses"].items():
            lines.append(
                f"| {pair['model']} | {step} | {a['seconds']:.1f} s | {a['time_ratio']:.2f}× | "
                f"{_mib(a['peak_rss'])} | {_mib(a['rss_after_imports'])} | "
                f"{_mib(a['peak_rss'] - a['rss_after_imports'])} | {_mib(pair['one_layer_bytes'])}"
                f" / {_mib(pair['one_layer_fp32_bytes'])} | {a['peak_increase_over_layer']:.2f}× / "
                f"{(a['peak_rss'] - a['rss_after_imports']) / pair['one_layer_fp32_bytes']:.2f}× |"
            )
    for model, row in results.get("default_run_analyses", {}).items():
        for step, a in row["analyses"].items():
            lines.append(
                f"| {model}, default run's file (N = {row['N']}, T = {row['T']}) | {step} | "
                f"{a['seconds']:.1f} s | — | {_mib(a['peak_rss'])} | "
                f"{_mib(a['rss_after_imports'])} | {_mib(a['peak_rss'] - a['rss_after_imports'])}"
                f" | {_mib(row['one_layer_bytes'])} / {_mib(row['one_layer_fp32_bytes'])} | "
                f"{a['peak_increase_over_layer']:.2f}× / "
                f"{(a['peak_rss'] - a['rss_after_imports']) / row['one_layer_fp32_bytes']:.2f}× |"
            )
    lines += [
        "",
        (
            "One layer's data: the stored per-layer datasets in their stored dtypes / every "
            "per-layer tensor the file provides (stored or recomputed: X, A, ATTN(Z), Z, V) "
            "as float32."
        ),
    ]
    scaling = results.get("scaling")
    if scaling:
        lines += [
            "",
            f"## 4. Scaling in T ({scaling['model']}, N = {scaling['n_sequences']})",
            "",
            "| T | plain forward | extraction | file | " + " | ".join(ANALYSES) + " |",
            "|---|---|---|---|" + "---|" * len(ANALYSES),
        ]
        for row in scaling["rows"]:
            lines.append(
                f"| {row['T']} | {row['plain_sdpa_forward_seconds']:.2f} s | "
                f"{row['extraction_seconds']:.2f} s | {_mib(row['file_bytes'])} | "
                + " | ".join(f"{row[f'{step}_seconds']:.2f} s" for step in ANALYSES)
                + " |"
            )
        lines += [
            "",
            "Growth exponents (slope of log y on log T; all points / the upper half):",
            "",
        ]
        ts = [row["T"] for row in scaling["rows"]]
        for key, value in scaling["exponents"].items():
            fit = fit_quadratic(ts, [row[key] for row in scaling["rows"]])
            unit = 2**20 if key == "file_bytes" else 1.0
            label = "MiB" if key == "file_bytes" else "s"
            crossover = (
                f"quadratic term = linear term at T ≈ {fit['crossover_T']:.0f}"
                if fit["crossover_T"] and fit["b"] > 0
                else "no positive linear + quadratic split (noise)"
            )
            lines.append(
                f"- {key}: {value['all']:.2f} / {value['upper']:.2f}; fit {fit['a'] / unit:.3g} "
                f"+ {fit['b'] / unit:.3g}·T + {fit['c'] / unit:.3g}·T² {label}; {crossover}"
            )
    if dag:
        lines += ["", "## 5. DAG overhead", ""]
        lines.append(f"- dry-run, default config: {dag['default_dry_run_seconds']:.1f} s")
        if dag["noop_rerun_seconds"] is not None:
            lines.append(
                f"- no-op re-run, default config, targets {' '.join(dag['noop_targets'])}: "
                f"{dag['noop_rerun_seconds']:.1f} s"
            )
        else:
            lines.append(f"- no-op re-run: {dag['noop_note']}")
        if dag.get("dry_run_10x6_seconds") is not None:
            lines.append(
                f"- dry-run, 10 models × 6 datasets (every job pending): "
                f"{dag['dry_run_10x6_seconds']:.1f} s"
            )
        else:
            lines.append("- dry-run, 10 models × 6 datasets: failed (see results.json)")
    lines += codec_section(results)
    lines += projection_section(results)
    lines += ["", f"Whole benchmark: {results.get('bench_seconds', 0) / 60:.1f} min."]
    notes = results.get("notes")
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- codecs, projection

#: Shapes of the paper's hub models (config.json of each: layers, query heads, width) for the
#: projection of section 7; N x T as in the paper.
PAPER_SHAPES = {
    "Llama-3.1-8B": {"n_layers": 32, "n_heads": 32, "d_model": 4096, "params": 8.0e9},
    "Gemma-7B": {"n_layers": 28, "n_heads": 16, "d_model": 3072, "params": 8.5e9},
    "gpt2-xl": {"n_layers": 48, "n_heads": 25, "d_model": 1600, "params": 1.56e9},
}
PAPER_N, PAPER_T1 = 50, 257
#: CPUs per extraction job that the SLURM profile requests (read from the profile itself)
PROFILE_EXTRACTION_CPUS = int(
    yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())["set-threads"][
        "extract_activations"
    ]
)
#: Assumptions of the forward-time and copy estimates (an H100/H200-class node), stated in the
#: table: sustained bf16 throughput of an eager forward, device-to-host bandwidth, file system.
GPU_TFLOPS, D2H_GB_S, FS_GB_S = 200.0, 10.0, 1.0


def codec_section(results: dict[str, Any]) -> list[str]:
    pair = next((p for p in results["pairs"] if "codecs" in p), None)
    if pair is None:
        return []
    rows = pair["codecs"]["rows"]
    lines = [
        "",
        (
            f"## 6. HDF5 codecs on the real tensors ({pair['model']}, 2 layers × N = "
            f"{pair['n_sequences']} × T = {pair['context_length']})"
        ),
        "",
        (
            "`bench/codecs_bench.py`: every candidate through h5py's filter pipeline on one thread "
            "(per-core figures; Blosc with `BLOSC_NTHREADS=1`), then the extraction's own threaded "
            "encoder and the analyses' threaded reader on every core. Ratio: bytes on disk / bytes in "
            "the stored dtype; MB/s of stored-dtype bytes. Every row round-trips bit for bit."
        ),
        "",
        "| codec | " + " | ".join(f"`{k}` ratio / write / read" for k in codec_bench.KINDS) + " |",
        "|---|" + "---|" * len(codec_bench.KINDS),
    ]
    by_codec: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_codec.setdefault(row["codec"], {})[row["kind"]] = row
    for codec, kinds in by_codec.items():
        cells = [
            f"{kinds[k]['ratio']:.3f} / {kinds[k]['write_mb_s']:.0f} / {kinds[k]['read_mb_s']:.0f}"
            for k in codec_bench.KINDS
        ]
        lines.append(f"| {codec} | " + " | ".join(cells) + " |")
    return lines


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
            "that `profiles/slurm` requests per extraction job "
            "(`set-threads: extract_activations`); on a GPU the encoding and writing of batch b "
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (a few minutes; a smoke run)"
    )
    parser.add_argument("--skip-dag", action="store_true", help="skip section 5")
    parser.add_argument("--skip-scaling", action="store_true", help="skip section 4")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--work", default=str(Path(PATHS.root) / "bench" / "work"), help="work folder"
    )
    parser.add_argument(
        "--skip-default-analyses",
        action="store_true",
        help="do not run the analyses on the default run's N = 50 files (never with --quick)",
    )
    parser.add_argument("--json", default=str(REPO / "bench" / "results.json"))
    parser.add_argument("--markdown", default=str(REPO / "BENCHMARKS.md"))
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite BENCHMARKS.md from the JSON (and bench/findings.md) without measuring",
    )
    args = parser.parse_args(argv)
    notes_file = REPO / "bench" / "findings.md"
    if args.report_only:
        results = json.loads(Path(args.json).read_text())
        if notes_file.exists() and not results["quick"]:
            results["notes"] = notes_file.read_text().strip()
        Path(args.markdown).write_text(report(results))
        return 0
    sizes = QUICK if args.quick else FULL
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"quick": args.quick, "sizes": sizes, "machine": machine()}
    results["pairs"] = [
        bench_pair(work, model, sizes, overlap_too=index == 0)
        for index, model in enumerate(sizes["models"])
    ]
    files = default_run_files(sizes)
    results["default_run_files"] = default_run_storage(files)
    if not (args.quick or args.skip_default_analyses):
        results["default_run_analyses"] = default_run_analyses(work, files)
    if not args.skip_scaling:
        results["scaling"] = bench_scaling(work, sizes)
    if not args.skip_dag:
        results["dag"] = bench_dag(work)
    if notes_file.exists() and not args.quick:  # the findings discuss the full run's numbers
        results["notes"] = notes_file.read_text().strip()
    results["bench_seconds"] = time.perf_counter() - started
    Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    text = report(results)
    Path(args.markdown).write_text(text)
    print(text)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
