"""The two GPU rules at a paper model's full shape, on this machine's GPU, against their requests.

    .venv/bin/python bench/gpu_rehearsal.py                       # Llama-3.1-8B, every layer
    .venv/bin/python bench/gpu_rehearsal.py --hub-id google/gemma-7b --out /tmp/gpu-rehearsal

A random-weight model with the exact configuration of a paper model (``sinkscope/prepare/model_
configs``; :func:`sinkscope.sizing.rehearsal.build_random_model`, drawn on the GPU) is prepared as
a ``local`` model in the dtype ``config/paper.yaml`` gives it, and the steps of rules
``extract_activations`` (N x T = 50 x 256 of a default-run pair's cut sequences) and
``extract_long_context`` (the long-context length from the model's d_model) run through
:mod:`sinkscope.steps`, each in its own process, with the paper config's settings and the
threads a cluster job gets. Per rule it prints the wall time, the peak host RSS and the peak GPU
memory beside what :func:`sinkscope.sizing.requests.job_request` asks for, and for the extraction
the stage profile the file records (forward, device-to-host copies, compression + writing) and
the forward's FLOP rate against the sizing's assumed ``GPU_TFLOPS``. Random weights make no
sinks; neither rule's work depends on them.

Needs a CUDA GPU with room for the model and what a rule holds beside it (Llama-3.1-8B: 16 GB
of weights, 50.5 GB at the long-context job's peak), disk for the model and the activation file
(16 and 14 GB), and the default run's prepared SmolLM2 (its tokenizer) and its ``alice`` tokens
at N = 50 (``results/tokens/smollm2-135m/alice.json`` of a run with ``extraction.n_sequences:
50``, e.g. ``make run-full``). Writes ``gpu_rehearsal.json`` beside ``--out``, the work folder,
which is deleted at the end unless ``--keep``. ``--device cpu --layers 1`` runs the script
itself on a CPU, as a smoke check (its times say nothing about a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODEL = "rehearsal"
RULES = ("extract_activations", "extract_long_context")


def paper_config(hub_id: str, model_dir: Path, config_file: Path) -> dict[str, Any]:
    """The paper config (a file's mapping) with one model, ``rehearsal``: the random-weight model
    as a ``local`` source in the dtype and attention kernel of the paper's entry for ``hub_id``."""
    import yaml

    raw = yaml.safe_load(config_file.read_text())
    entries = [e for e in raw["models"].values() if e["source"].get("id") == hub_id]
    if not entries:
        raise SystemExit(f"{config_file} has no model with source.id {hub_id!r}")
    entry = {k: v for k, v in entries[0].items() if k != "source"}
    entry["source"] = {"kind": "local", "path": str(model_dir)}
    raw["models"] = {MODEL: entry}
    return raw


def step_smk(rule: str, config: dict[str, Any], work: Path, data: dict[str, Path]) -> Any:
    """The ``snakemake`` object the rule's step gets (``workflow/rules``): inputs, output, params,
    threads as on a cluster (:func:`sinkscope.sizing.requests.job_threads`)."""
    from sinkscope.config import (
        LONG_CONTEXT_INPUT_KEYS,
        extraction_content,
        long_context_params,
        model_entry,
        streaming_params,
    )
    from sinkscope.sizing.requests import job_threads

    prepared = work / "prepared"
    common = {
        "rule": rule,
        "config": config,
        "threads": job_threads(rule, None) if rule == "extract_activations" else 1,
        "wildcards": SimpleNamespace(model=MODEL, dataset="alice"),
    }
    if rule == "extract_activations":
        return SimpleNamespace(
            **common,
            input=SimpleNamespace(model_dir=str(prepared), tokens=str(data["tokens"])),
            output=SimpleNamespace(activations=str(work / "alice.h5")),
            params=SimpleNamespace(
                model_entry=model_entry(config, MODEL),
                dataset_entry={},
                extraction=extraction_content(config),
            ),
        )
    return SimpleNamespace(
        **common,
        input=SimpleNamespace(
            model_dir=str(prepared), stream=str(data["stream"]), provenance=str(data["provenance"])
        ),
        output=SimpleNamespace(inputs=str(work / "alice.long_context.h5")),
        params=SimpleNamespace(
            long_context=long_context_params(config, LONG_CONTEXT_INPUT_KEYS),
            stream_seed=streaming_params(config)["seed"],
        ),
    )


def run_step(rule: str, args: argparse.Namespace) -> dict[str, Any]:
    """Child process: one rule's step, its wall time and peaks."""
    import torch

    from sinkscope import steps
    from sinkscope.sizing.usage import peak_rss_mb

    work = Path(args.out)
    config = json.loads((work / "config.json").read_text())
    data = {k: Path(getattr(args, k)) for k in ("tokens", "stream", "provenance")}
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    steps.STEPS[rule](step_smk(rule, config, work, data))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return {
        "wall_s": time.perf_counter() - started,
        "peak_rss_mb": peak_rss_mb(),
        "gpu_peak_mb": torch.cuda.max_memory_allocated() / 2**20
        if torch.cuda.is_available()
        else 0,
    }


def measured_vs_requested(
    config: dict[str, Any], dtype: str, runs: dict[str, dict[str, Any]], work: Path
) -> list[dict[str, Any]]:
    """One row per rule: the run against :func:`~sinkscope.sizing.requests.job_request` for the
    built model (the paper model's full depth unless ``--layers`` cut it) under the paper config."""
    import h5py

    from sinkscope.extraction import h5layout
    from sinkscope.sizing import costs
    from sinkscope.sizing.requests import forward_flops, job_request
    from sinkscope.sizing.shapes import facts_from_config

    built = json.loads((work / "model" / "config.json").read_text())
    facts = facts_from_config(MODEL, built, dtype, "rehearsal")
    rows = []
    for rule, run in runs.items():
        request = job_request(rule, config, facts=facts)
        guess = request.estimate
        row = {
            "rule": rule,
            **run,
            "expected_s": guess.seconds,
            "request_min": request.runtime_min,
            "expected_peak_mb": guess.peak_mb,
            "request_mem_mb": request.mem_mb,
            "gpus": request.gpus,
        }
        if rule == "extract_activations":
            with h5py.File(work / "alice.h5", "r") as f:
                profile = json.loads(f.attrs[h5layout.ATTR_EXTRACTION_PROFILE])
                n = int(f.attrs[h5layout.ATTR_N_SEQUENCES])
                t1 = int(f.attrs[h5layout.ATTR_CONTEXT_LENGTH]) + 1
            row["profile"] = profile
            flops = forward_flops(facts, n * t1, t1)
            row["forward_tflop_s"] = flops / profile["forward"] / 1e12
            row["assumed_tflop_s"] = costs.GPU_TFLOPS
            row["file_gb"] = (work / "alice.h5").stat().st_size / 1e9
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| rule | wall s | expected s | request min | host peak MB | request MB | GPU peak MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rule']} | {r['wall_s']:.1f} | {r['expected_s']:.1f} | {r['request_min']} "
            f"| {r['peak_rss_mb']:,.0f} | {r['request_mem_mb']:,} | {r['gpu_peak_mb']:,.0f} |"
        )
    for r in rows:
        if "profile" in r:
            stages = ", ".join(
                f"{k} {v:.1f}" for k, v in r["profile"].items() if isinstance(v, float)
            )
            lines.append(
                f"\nextract_activations stages (s): {stages}; forward at "
                f"{r['forward_tflop_s']:.1f} TFLOP/s (sizing assumes {r['assumed_tflop_s']:.0f}); "
                f"file {r['file_gb']:.1f} GB"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hub-id", default="meta-llama/Llama-3.1-8B")
    parser.add_argument("--layers", type=int, help="cut to this depth (default: the model's)")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "paper.yaml")
    parser.add_argument("--tokenizer", default=str(REPO / "results/models/smollm2-135m"))
    parser.add_argument("--tokens", default=str(REPO / "results/tokens/smollm2-135m/alice.json"))
    parser.add_argument(
        "--stream", default=str(REPO / "results/tokens/smollm2-135m/alice.stream.npz")
    )
    parser.add_argument("--provenance", default=str(REPO / "results/corpora/alice/documents.json"))
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=RULES)
    parser.add_argument("--out", default=str(REPO / "results/bench/gpu-rehearsal"))
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--device", default="cuda", help="cpu: a smoke check of this script with --layers 1"
    )
    parser.add_argument("--child", choices=RULES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_step(args.child, args)), flush=True)
        return

    import torch
    import transformers

    from sinkscope.config import validate_config
    from sinkscope.prepare.model_config import fixture_config
    from sinkscope.prepare.models import prepare_model
    from sinkscope.sizing.rehearsal import build_random_model
    from sinkscope.sizing.usage import cpu_model

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device is visible: this benchmark measures the GPU rules on one")
    work = Path(args.out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    model_dir = work / "model"
    model_dir.mkdir()  # validation checks that a local model's folder exists
    config = validate_config(paper_config(args.hub_id, model_dir, args.config))
    dtype = config["models"][MODEL]["dtype"]
    (work / "config.json").write_text(json.dumps(config))
    kept = fixture_config(args.hub_id)
    depth = args.layers or int(kept.get("num_hidden_layers") or kept["n_layer"])
    started = time.perf_counter()
    build_random_model(
        args.hub_id, depth, args.tokenizer, model_dir, dtype=dtype, device=args.device
    )
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    built_s = time.perf_counter() - started
    prepare_model(MODEL, config["models"][MODEL], work / "prepared", work / "downloads")
    runs = {}
    for rule in args.rules:
        result = subprocess.run(
            [sys.executable, __file__, "--child", rule, "--out", str(work)]
            + [f"--{k}={getattr(args, k)}" for k in ("tokens", "stream", "provenance")],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        found = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
        if result.returncode != 0 or not found:  # the other rule still runs
            print(f"{rule} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}", flush=True)
            continue
        runs[rule] = json.loads(found[-1].removeprefix("RESULT "))
    rows = measured_vs_requested(config, dtype, runs, work)
    report = {
        "hub_id": args.hub_id,
        "layers": depth,
        "dtype": dtype,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model_built_s": built_s,
        "rows": rows,
    }
    (work.parent / "gpu_rehearsal.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))
    print(markdown(rows))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
