"""``sinkscope plan``: what a run asks of the cluster, before anything is submitted.

:func:`dag_jobs` builds the real DAG of the workflow for the given config files with Snakemake's
API (a dry run: nothing runs, nothing is written), :func:`plan_rows` prices every job with
:func:`sinkscope.sizing.requests.job_request` (the same function the rules' ``resources`` call),
and :func:`render_plan` prints one row per rule: the job count, memory and time asked per job,
GPU-hours and CPU-hours asked (request x jobs) and expected (the estimate without the margins),
and the totals with the disk that the activation files will take under ``results/``.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sinkscope.sizing.requests import MODEL_SIZED_RULES, job_request
from sinkscope.sizing.shapes import ModelFacts, UnknownModelShape, model_facts

__all__ = ["PlanRow", "activation_file_bytes", "dag_jobs", "plan_rows", "render_plan"]


@dataclass
class PlanRow:
    """One rule's jobs in a plan (hours = the sum over its jobs)."""

    rule: str
    jobs: int = 0
    mem_mb: list[int] = field(default_factory=list)
    runtime_min: list[int] = field(default_factory=list)
    gpus: int = 0
    threads: int = 1
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    expected_hours: float = 0.0
    unknown: list[str] = field(default_factory=list)


def activation_file_bytes(
    facts: ModelFacts, n_sequences: int, positions: int, storage_dtypes: Mapping[str, str]
) -> int:
    """Bytes of one activation file's datasets in their storage dtypes, before compression
    (:func:`sinkscope.extraction.h5layout.uncompressed_bytes` at the model's shape)."""
    from sinkscope.extraction import h5layout

    sizes = {
        "layer": facts.n_layers,
        "sequence": n_sequences,
        "position": positions,
        "query": positions,
        "key": positions,
        "head": facts.n_heads,
        "kv_head": facts.n_kv_heads,
        "head_dim": facts.head_dim,
        "d_model": facts.d_model,
    }
    return h5layout.uncompressed_bytes(sizes, storage_dtypes)


def dag_jobs(
    configfiles: Sequence[str | Path], snakefile: str | Path = "Snakefile"
) -> tuple[dict[str, Any], list[tuple[str, dict[str, str], int]]]:
    """``(config, [(rule, wildcards, threads) for every job])`` of the workflow's DAG for
    ``configfiles``, as ``snakemake -n --configfile ...`` would build it (no job runs)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        OutputSettings,
        ResourceSettings,
    )

    snakefile = Path(snakefile).resolve()
    with (
        contextlib.redirect_stderr(io.StringIO()),
        contextlib.redirect_stdout(io.StringIO()),
        SnakemakeApi(OutputSettings()) as api,
    ):
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[Path(p) for p in configfiles]),
            snakefile=snakefile,
            workdir=snakefile.parent,
        )
        workflow_api.dag(DAGSettings()).execute_workflow(executor="dryrun")
        workflow = workflow_api._workflow  # the DAG the dry run built
        jobs = [
            (job.rule.name, dict(job.wildcards_dict), int(job.threads))
            for job in workflow.dag.jobs
            if job.rule.name != "all"
        ]
        config = dict(workflow.config)
    return config, jobs


def plan_rows(
    config: Mapping[str, Any],
    jobs: Iterable[tuple[str, Mapping[str, str], int]],
    results: str = "results",
) -> list[PlanRow]:
    """Price every job (:func:`~sinkscope.sizing.requests.job_request`, attempt 1)."""
    from sinkscope.dynamics.grids import dynamics_minutes

    minutes = dynamics_minutes(config["dynamics"])
    rows: dict[str, PlanRow] = {}
    for rule, wildcards, threads in jobs:
        row = rows.setdefault(rule, PlanRow(rule))
        row.jobs += 1
        row.threads = threads
        part = rule.removeprefix("dynamics_").removesuffix("_run")
        known = (
            minutes.get(part) if rule.startswith("dynamics_") and rule.endswith("_run") else None
        )
        model = wildcards.get("model")
        try:
            request = job_request(rule, config, model, minutes=known, results=results)
        except UnknownModelShape:
            # a rule without a model (the claims) is unknown through the models' own rows
            if model is not None and model not in row.unknown:
                row.unknown.append(str(model))
            continue
        row.mem_mb.append(request.mem_mb)
        row.runtime_min.append(request.runtime_min)
        row.gpus = max(row.gpus, request.gpus)
        hours = request.runtime_min / 60
        if request.gpus:
            row.gpu_hours += hours * request.gpus
        row.cpu_hours += hours * threads
        row.expected_hours += request.estimate.seconds / 3600 * max(threads, request.gpus)
    return sorted(rows.values(), key=lambda r: (-r.gpu_hours, -r.cpu_hours, r.rule))


def _span(values: list[int], unit: str) -> str:
    if not values:
        return "TBD"
    low, high = min(values), max(values)
    return f"{low:,} {unit}" if low == high else f"{low:,}-{high:,} {unit}"


def render_plan(
    config: Mapping[str, Any], rows: Sequence[PlanRow], configfiles: Sequence[str | Path]
) -> str:
    """The plan as a Markdown table, with the totals and the disk of the activation files."""
    from sinkscope.config import pairs

    lines = [
        (
            f"Plan of `{' + '.join(map(str, configfiles))}` (requests per job, attempt 1; "
            "hours = request x jobs; expected = the estimate before the margins)"
        ),
        "",
        "| rule | jobs | memory per job | time per job | GPUs | GPU-hours | CPU-hours | expected h |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.rule} | {row.jobs} | {_span(row.mem_mb, 'MB')} | "
            f"{_span(row.runtime_min, 'min')} | {row.gpus} | {row.gpu_hours:,.1f} | "
            f"{row.cpu_hours:,.1f} | {row.expected_hours:,.1f} |"
        )
    total_jobs = sum(r.jobs for r in rows)
    lines.append(
        f"| **total** | {total_jobs} | | | | {sum(r.gpu_hours for r in rows):,.1f} | "
        f"{sum(r.cpu_hours for r in rows):,.1f} | {sum(r.expected_hours for r in rows):,.1f} |"
    )
    extraction = config["extraction"]
    disk = 0
    unknown = sorted({m for r in rows for m in r.unknown})
    for model, _dataset in pairs(config):
        if model in unknown:
            continue
        facts = model_facts(config, model)
        disk += activation_file_bytes(
            facts,
            int(extraction["n_sequences"]),
            int(extraction["context_length"]) + 1,
            extraction["storage_dtypes"],
        )
    lines += [
        "",
        (
            f"Disk under results/activations: at most {disk / 1e9:,.1f} GB (the datasets in their "
            "storage dtypes before compression; zstd stores about 0.3-0.4 of it)."
        ),
    ]
    if unknown:
        lines.append(
            f"Shape unknown until prepare_model has run (TBD above): {', '.join(unknown)}."
        )
    models = sorted({m for m, _ in pairs(config)} - set(unknown))
    sized = [r.rule for r in rows if r.rule in MODEL_SIZED_RULES]
    if models and sized:
        shapes = [model_facts(config, m) for m in models]
        lines.append(
            "Model shapes from: "
            + ", ".join(
                f"{f.name} ({f.n_layers} layers, {f.n_heads} heads, d = {f.d_model}, "
                f"{f.n_params / 1e9:.2f} B parameters, {f.source})"
                for f in shapes
            )
            + "."
        )
    return "\n".join(lines)
