"""Dress rehearsal at the paper's shapes: the real DAG on random-weight models with the exact
configuration of paper models (``sinkscope/prepare/model_configs``), cut to two depths (default 2
and 6 layers), at the paper's extraction scale (N = 50, T = 256), on this machine's CPU.

Every job writes its peak RSS and wall time at the end of its log (``sinkscope.sizing.usage``).
Per rule, the two depths give a fixed and a per-layer part (``v(L) = a + b L``), extrapolated to
the model's full depth and compared with what ``sinkscope.sizing`` requests for that depth under
the same settings (float32, CPU). The request must cover the extrapolated peak and should not
exceed it more than about 3x. Prints a Markdown table and writes ``bench/rehearsal.json``.

    .venv/bin/python bench/rehearsal.py                                  # Llama-3.1-8B, GPT-2 XL
    .venv/bin/python bench/rehearsal.py --models google/gemma-7b --depths 2 4 --out /tmp/rehearsal
    .venv/bin/python bench/rehearsal.py --models openai/gpt-oss-20b --depths 2 4 --dtype bfloat16

One and two layers are too close: their wall times differ by less than the jobs' noise (a job's
fixed part is 10-60 s on the CPU), so the default depths are 2 and 6. A model whose 6-layer cut
does not fit this machine's memory twice (the loading peak) takes ``--depths 2 4``.

Needs the default run's prepared SmolLM2 (its tokenizer; ``make run`` or
``snakemake results/models/smollm2-135m``). Random weights make no sinks, so the work that depends
on them (per-sink-head attention and the half-space test on the tokens that attend to BOS, the
secondary-sink table) is not rehearsed by a plain run. ``--sink-heavy`` bounds it: the thresholds
(``sinkscope.sizing.rehearsal.SINK_HEAVY``) make every head a sink head, every token one that
attends to BOS and every eligible position a secondary sink, the most of that work any data can
ask for.

    .venv/bin/python bench/rehearsal.py --models openai-community/gpt2-xl --sink-heavy The StreamingLLM jobs run the
short run's settings (one stream of 256 tokens): their times on the CPU say nothing about a GPU
node, their memory (weights + one chunk) is what is compared.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ("meta-llama/Llama-3.1-8B", "openai-community/gpt2-xl")


def rehearsal_config(
    model_dir: Path,
    facts: Any,
    download_dir: Path,
    rotary: bool,
    dtype: str = "float32",
    sink_heavy: bool = False,
) -> dict[str, Any]:
    """The config of one rehearsal: the cut model as a ``local`` float32 model on the CPU, the
    default run's ``alice`` corpus at N = 50 x T = 256, the short run's StreamingLLM settings,
    one long-context sequence just longer than d_model where the positions allow it. Without
    rotary positions (GPT-2) the StreamingLLM evaluation is off: it re-rotates cached keys and
    fails on learned absolute positions (found by this rehearsal; BENCHMARKS findings)."""
    from sinkscope.config import load_config

    default = load_config(REPO / "config.yaml")
    long_len = min(facts.d_model + 2, facts.max_positions)
    streaming = copy.deepcopy(default["streaming"]) if rotary else {"enabled": False}
    config: dict[str, Any] = {
        "download_dir": str(download_dir),
        "models": {
            "rehearsal": {"dtype": dtype, "source": {"kind": "local", "path": str(model_dir)}}
        },
        "datasets": {"alice": copy.deepcopy(default["datasets"]["alice"])},
        "extraction": {"n_sequences": 50, "context_length": 256, "seed": 0},
        "streaming": streaming,
        "geometry": {"long_context": {"n_sequences": 1, "seq_len": long_len}},
        "costs": {"enabled": False},
        "dynamics": {"enabled": False},
        "resources": {"gpus": 0},
    }
    if sink_heavy:
        from sinkscope.sizing.rehearsal import sink_heavy as heaviest

        config = heaviest(config)
    return config


def run_depth(
    hub_id: str,
    n_layers: int,
    out: Path,
    cores: int,
    dtype: str = "float32",
    sink_heavy: bool = False,
) -> dict[str, Any]:
    """Build the cut model, run the DAG, return ``{rule: usage}`` of its per-pair jobs."""
    from sinkscope.sizing.rehearsal import build_random_model
    from sinkscope.sizing.shapes import facts_from_config
    from sinkscope.sizing.usage import read_usage

    workdir = out / f"{hub_id.replace('/', '--')}-{n_layers}{'-sink-heavy' if sink_heavy else ''}"
    model_dir = workdir / "model"
    if not (model_dir / "config.json").is_file():
        build_random_model(
            hub_id, n_layers, REPO / "results" / "models" / "smollm2-135m", model_dir
        )
    config = json.loads((model_dir / "config.json").read_text())
    facts = facts_from_config("rehearsal", config, dtype, "rehearsal")
    configfile = workdir / "rehearsal.yaml"
    configfile.write_text(
        yaml.safe_dump(
            rehearsal_config(
                model_dir,
                facts,
                REPO / "resources" / "downloads",
                rotary=config["model_type"] != "gpt2",
                dtype=dtype,
                sink_heavy=sink_heavy,
            )
        )
    )
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(workdir),
            "--cores",
            str(cores),
            "--configfile",
            str(configfile),
            "--rerun-triggers",
            "mtime",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    if result.returncode != 0:
        raise SystemExit(
            f"rehearsal of {hub_id} at {n_layers} layers failed:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    usage = {}
    for log in sorted((workdir / "results" / "logs").rglob("rehearsal/*.log")):
        rule = log.relative_to(workdir / "results" / "logs").parts[0]
        found = read_usage(log)
        if found is not None and log.stem == "alice":
            usage[rule] = {"peak_rss_mb": found.peak_rss_mb, "wall_s": found.wall_s}
    return {
        "n_layers": n_layers,
        "wall_s": time.monotonic() - started,
        "usage": usage,
        "configfile": str(configfile),
    }


def extrapolate(v1: float, v2: float, depth: int, l1: int = 1, l2: int = 2) -> float:
    """``a + b L`` through the measurements ``v1`` at ``l1`` and ``v2`` at ``l2`` layers, at
    ``L = depth`` (a per-layer part below zero, i.e. noise, counts as zero)."""
    per_layer = max(0.0, (v2 - v1) / (l2 - l1))
    return v2 + per_layer * (depth - l2)


def extrapolate_model_job(peak_2: float, weights_2: int, weights_full: int) -> float:
    """The peak of a job that loads the model, at full depth: the deeper cut's peak plus the full
    model's extra weights, held twice while loading
    (:data:`sinkscope.sizing.costs.WEIGHT_COPIES_WHILE_LOADING`). A line through two shallow
    cuts hardly sees them: a few layers' weights are within the noise of the batch buffers."""
    from sinkscope.sizing.costs import WEIGHT_COPIES_WHILE_LOADING

    return peak_2 + WEIGHT_COPIES_WHILE_LOADING * (weights_full - weights_2) / 2**20


def compare(
    hub_id: str, runs: list[dict[str, Any]], dtype: str = "float32"
) -> list[dict[str, Any]]:
    """Per rule: measured at the two depths, extrapolated to the full depth, the request there
    (same settings, full depth) and the ratios."""
    from sinkscope.config import load_layered_config, validate_config
    from sinkscope.prepare.model_config import fixture_config
    from sinkscope.sizing.requests import MODEL_RUNNING_RULES, job_request
    from sinkscope.sizing.shapes import facts_from_config

    one, two = sorted(runs, key=lambda run: run["n_layers"])
    depths = (one["n_layers"], two["n_layers"])
    full = facts_from_config("rehearsal", fixture_config(hub_id), dtype, "kept")
    cut = facts_from_config(
        "rehearsal",
        json.loads((Path(two["configfile"]).parent / "model" / "config.json").read_text()),
        dtype,
        "rehearsal",
    )
    config = validate_config(load_layered_config([two["configfile"]]))
    rows = []
    for rule in sorted(set(one["usage"]) & set(two["usage"])):
        a, b = one["usage"][rule], two["usage"][rule]
        if rule in MODEL_RUNNING_RULES:
            peak = extrapolate_model_job(b["peak_rss_mb"], cut.weight_bytes, full.weight_bytes)
        else:
            peak = extrapolate(a["peak_rss_mb"], b["peak_rss_mb"], full.n_layers, *depths)
        wall = extrapolate(a["wall_s"], b["wall_s"], full.n_layers, *depths)
        try:
            request = job_request(rule, config, facts=full)
        except KeyError:  # a rule sinkscope.sizing does not know
            continue
        rows.append(
            {
                "model": hub_id,
                "rule": rule,
                "layers": full.n_layers,
                "depths": list(depths),
                "peak_1": a["peak_rss_mb"],
                "peak_2": b["peak_rss_mb"],
                "peak_full": peak,
                "wall_1": a["wall_s"],
                "wall_2": b["wall_s"],
                "wall_full": wall,
                "mem_mb": request.mem_mb,
                "runtime_min": request.runtime_min,
                "mem_ratio": request.mem_mb / peak,
                "time_ratio": 60 * request.runtime_min / wall,
            }
        )
    return rows


def render(rows: list[dict[str, Any]], cpu: str) -> str:
    lines = [
        (
            f"CPU: {cpu}. Measured at two depths (columns 'a / b': the shallower cut, then the "
            "deeper; N = 50, T = 256, the models' dtype as run, CPU), extrapolated to the full depth (a + b L; jobs "
            "that load the model: the deeper cut's peak plus the extra weights twice); request = "
            "sinkscope.sizing for the full depth, same settings."
        ),
        "",
        (
            "| model | cuts | rule | peak at the cuts | peak, full depth | request | request / peak "
            "| wall at the cuts | wall, full depth | request | request / wall |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {' / '.join(map(str, r.get('depths', (1, 2))))} layers "
            f"| {r['rule']} | {r['peak_1']:,.0f} / {r['peak_2']:,.0f} MB "
            f"| {r['peak_full']:,.0f} MB | {r['mem_mb']:,} MB | {r['mem_ratio']:.2f} "
            f"| {r['wall_1']:,.0f} / {r['wall_2']:,.0f} s | {r['wall_full'] / 60:,.1f} min "
            f"| {r['runtime_min']:,} min | {r['time_ratio']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--out", type=Path, default=Path("/tmp/sinkscope-rehearsal"))
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--depths",
        type=int,
        nargs=2,
        default=[2, 6],
        help="the two cut depths (layers) measured per model",
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16"],
        help="models.<name>.dtype of the cut models (gpt-oss-20b: bfloat16, the "
        "dtype its weights ship in; its float32 copy would not fit this machine)",
    )
    parser.add_argument(
        "--sink-heavy",
        action="store_true",
        help="thresholds that make every head a sink head and every position a "
        "secondary sink: the data-dependent work at its most "
        "(sinkscope.sizing.rehearsal.SINK_HEAVY)",
    )
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {}
    for hub_id in args.models:
        runs[hub_id] = [
            run_depth(hub_id, depth, args.out, args.cores, args.dtype, args.sink_heavy)
            for depth in args.depths
        ]
        rows += compare(hub_id, runs[hub_id], args.dtype)
    from sinkscope.sizing.usage import cpu_model

    cpu = cpu_model()
    print(render(rows, cpu))
    # the models not run this time keep their earlier measurements (and CPU)
    kept = REPO / "bench" / "rehearsal.json"
    earlier = json.loads(kept.read_text()) if kept.is_file() else {"models": {}}
    models = dict(earlier.get("models", {}))
    for hub_id in args.models:
        key = f"{hub_id} (sink-heavy)" if args.sink_heavy else hub_id
        models[key] = {
            "cpu": cpu,
            "dtype": args.dtype,
            "sink_heavy": args.sink_heavy,
            "runs": runs[hub_id],
            "rows": [r for r in rows if r["model"] == hub_id],
        }
    kept.write_text(json.dumps({"models": models}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
