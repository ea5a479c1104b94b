"""sinkscope benchmarks: extraction and analyses measured against the model's own forward.

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

Writes ``bench/results.json`` and regenerates ``BENCHMARKS.md`` (``--json``, ``--markdown``;
written by ``bench/report.py``, with section 6's codecs from ``bench/codecs_bench.py`` and
section 7's GPU projection from ``bench/projection.py``; sizes and targets in ``bench/settings.py``);
work files go to ``results/bench/work`` (``--work``; deleted at the end unless ``--keep``). Needs
the prepared default models (``results/models/*``) and corpora (``results/corpora/*``) of the
default run; the analyses are also run on its activation files of the bench's dataset where they
exist in the current schema (``--skip-default-analyses``; never with ``--quick``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
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
from report import report  # bench/report.py
from settings import (  # bench/settings.py
    ANALYSES,
    BEFORE_CODEC,
    FULL,
    PATHS,
    PYTHON,
    QUICK,
    REPO,
    default_config,
)

from sinkscope.extraction import h5layout
from sinkscope.extraction.extract import extract_activations
from sinkscope.extraction.settings import ExtractionSettings
from sinkscope.prepare.models import PROVENANCE_FILE, base_model, load_model
from sinkscope.prepare.tokens import prepare_tokens, read_tokens, tokenize_corpus

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
