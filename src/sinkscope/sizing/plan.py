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

from sinkscope.sizing.requests import (
    MB,
    MODEL_SIZED_RULES,
    GpuTypeError,
    job_request,
    job_threads,
)
from sinkscope.sizing.shapes import ModelFacts, UnknownModelShape, model_facts

__all__ = [
    "DiskNeed",
    "PlanRow",
    "activation_file_bytes",
    "dag_jobs",
    "disk_lines",
    "disk_need",
    "plan_rows",
    "render_plan",
]


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
    #: estimated GPU memory per job (MB) and the GPU types asked for (resources.gpu_types)
    gpu_mb: list[float] = field(default_factory=list)
    gpu_types: set[str] = field(default_factory=set)
    #: jobs that no GPU type of resources.gpu_types holds, with the reason
    refused: list[str] = field(default_factory=list)


def activation_file_bytes(
    facts: ModelFacts,
    n_sequences: int,
    positions: int,
    storage_dtypes: Mapping[str, str],
    kinds: Iterable[str] | None = None,
) -> int:
    """Bytes of one activation file's datasets in their storage dtypes, before compression
    (:func:`sinkscope.extraction.h5layout.uncompressed_bytes` at the model's shape); ``kinds``:
    only the datasets of these kinds of tensor (``extraction.storage_dtypes`` keys), or, with a
    leading ``"!"`` on every kind, all but those (None: every dataset)."""
    from sinkscope.extraction import h5layout

    specs = h5layout.DATASETS
    if kinds is not None:
        chosen = list(kinds)
        if chosen and all(k.startswith("!") for k in chosen):
            excluded = {k[1:] for k in chosen}
            specs = tuple(spec for spec in specs if spec.dtype_key not in excluded)
        else:
            specs = tuple(spec for spec in specs if spec.dtype_key in set(chosen))
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
    return h5layout.uncompressed_bytes(sizes, storage_dtypes, specs)


def activation_file_stored_bytes(
    facts: ModelFacts, n_sequences: int, positions: int, extraction: Mapping[str, Any]
) -> tuple[int, int]:
    """``(raw, compressed)``: the bytes one activation file stores as they are (the datasets of
    ``extraction.uncompressed``, or every one with codec ``none`` or level 0) and the bytes the
    codec stores of the others, :data:`~sinkscope.sizing.costs.CODEC_STORED_FRACTION` of their
    raw size (measured). ``extraction``: a validated config's ``extraction``."""
    from sinkscope.sizing import costs

    dtypes = extraction["storage_dtypes"]
    if extraction["codec"] == "none" or int(extraction["compression_level"]) == 0:
        return activation_file_bytes(facts, n_sequences, positions, dtypes), 0
    plain = list(extraction["uncompressed"])
    raw = activation_file_bytes(facts, n_sequences, positions, dtypes, plain) if plain else 0
    rest = activation_file_bytes(
        facts, n_sequences, positions, dtypes, [f"!{k}" for k in plain] or None
    )
    return raw, round(costs.CODEC_STORED_FRACTION * rest)


def long_context_file_bytes(config: Mapping[str, Any], facts: ModelFacts) -> int:
    """Bytes of one pair's long-context inputs file (rule ``extract_long_context``, temporary):
    ``Z`` of every layer in float32, ``n_sequences x seq_len x d_model`` each; 0 when the test
    is off."""
    from sinkscope.config import long_context_params, long_context_seq_len

    lc = long_context_params(config)
    if not config["geometry"]["long_context"].get("enabled", True):
        return 0
    seq_len = long_context_seq_len(
        lc["seq_len"], lc["points_per_dim"], facts.d_model, facts.max_positions
    )
    return int(lc["n_sequences"]) * seq_len * facts.d_model * 4 * facts.n_layers


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
            # resources.gpus = 0 spares the dry run the GPU types (plan_rows prices them, and
            # names every job that no type holds); the DAG is the same: GPUs change resources only
            config_settings=ConfigSettings(
                configfiles=[Path(p) for p in configfiles], config={"resources": {"gpus": 0}}
            ),
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
    from sinkscope.config import load_layered_config, validate_config

    # the files' own resources (the override above was for the dry run alone)
    config["resources"] = validate_config(load_layered_config(configfiles))["resources"]
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
    for rule, wildcards, _threads in jobs:
        row = rows.setdefault(rule, PlanRow(rule))
        row.jobs += 1
        # what sbatch is asked for (--cpus-per-task): the rule's cluster threads, not the
        # dry run's (its one core caps them)
        row.threads = job_threads(rule, None)
        part = rule.removeprefix("dynamics_").removesuffix("_run")
        known = (
            minutes.get(part) if rule.startswith("dynamics_") and rule.endswith("_run") else None
        )
        model = wildcards.get("model")
        try:
            request = job_request(rule, config, model, minutes=known, results=results)
        except GpuTypeError as error:
            row.refused.append(str(error))
            continue
        except UnknownModelShape:
            # a rule without a model (the claims) is unknown through the models' own rows
            if model is not None and model not in row.unknown:
                row.unknown.append(str(model))
            continue
        row.mem_mb.append(request.mem_mb)
        row.runtime_min.append(request.runtime_min)
        row.gpus = max(row.gpus, request.gpus)
        if request.gpus:
            row.gpu_mb.append(request.estimate.gpu_mb)
            if request.gpu_type:
                row.gpu_types.add(request.gpu_type)
        hours = request.runtime_min / 60
        if request.gpus:
            row.gpu_hours += hours * request.gpus
        row.cpu_hours += hours * row.threads
        row.expected_hours += request.estimate.seconds / 3600 * max(row.threads, request.gpus)
    return sorted(rows.values(), key=lambda r: (-r.gpu_hours, -r.cpu_hours, r.rule))


def _span(values: Sequence[float], unit: str) -> str:
    if not values:
        return "TBD"
    low, high = min(values), max(values)
    return f"{low:,} {unit}" if low == high else f"{low:,}-{high:,} {unit}"


@dataclass(frozen=True)
class DiskNeed:
    """Bytes a run writes: the activation files stored raw and compressed, the long-context
    inputs if every pair's temporary file existed at once (all under ``results/``), and the hub
    cache (under ``HF_HOME``)."""

    raw: int
    compressed: int
    long_context: int
    hub: int

    @property
    def results(self) -> int:
        """What ``results/`` holds at most: the activation files and the long-context inputs."""
        return self.raw + self.compressed + self.long_context

    @property
    def total(self) -> int:
        return self.results + self.hub


def disk_need(config: Mapping[str, Any], unknown: Sequence[str] = ()) -> DiskNeed:
    """The run's disk (:class:`DiskNeed`): the activation files
    (:func:`activation_file_stored_bytes` per pair), the long-context inputs
    (:func:`long_context_file_bytes`), the hub cache (each hub model's weights in its configured
    dtype: an upper bound where the checkpoint is smaller, as gpt-oss-20b's MXFP4). Models in
    ``unknown`` (shape unknown until prepared) are left out."""
    from sinkscope.config import pairs

    extraction = config["extraction"]
    raw = compressed = long_context = 0
    for model, _dataset in pairs(config):
        if model in unknown:
            continue
        facts = model_facts(config, model)
        plain, packed = activation_file_stored_bytes(
            facts, int(extraction["n_sequences"]), int(extraction["context_length"]) + 1, extraction
        )
        raw, compressed = raw + plain, compressed + packed
        long_context += long_context_file_bytes(config, facts)
    hub = sum(
        model_facts(config, name).weight_bytes
        for name, entry in config["models"].items()
        if name not in unknown and entry["source"]["kind"] == "hub"
    )
    return DiskNeed(raw, compressed, long_context, hub)


def disk_lines(config: Mapping[str, Any], unknown: Sequence[str] = ()) -> list[str]:
    """The plan's disk (:func:`disk_need`), in lines: the activation files, the long-context
    inputs, the hub cache and their sum."""
    from sinkscope.sizing import costs

    need = disk_need(config, unknown)
    raw, compressed, long_context, hub = need.raw, need.compressed, need.long_context, need.hub
    total = need.total
    activations = (
        f"Disk under results/activations: about {(raw + compressed) / 1e9:,.1f} GB "
        f"({raw / 1e9:,.1f} GB stored raw, extraction.uncompressed; the other datasets at "
        f"{costs.CODEC_STORED_FRACTION:g} of their raw size, as the codec stored the default "
        "run's attention maps)."
    )
    temporary = (
        f"Temporary, under results/long_context: up to {long_context / 1e9:,.1f} GB if every "
        "pair's long-context inputs exist at once (Z of every layer, float32)."
    )
    cache = (
        f"Hub cache (HF_HOME, step 2 of docs/cluster.md): up to {hub / 1e9:,.1f} GB, the hub "
        "models' weights in their configured dtypes."
    )
    return [activations, temporary, cache, f"Disk in all: about {total / 1e9:,.1f} GB."]


def render_plan(
    config: Mapping[str, Any], rows: Sequence[PlanRow], configfiles: Sequence[str | Path]
) -> str:
    """The plan as a Markdown table, with the totals and the disk (:func:`disk_lines`)."""
    from sinkscope.config import pairs

    lines = [
        (
            f"Plan of `{' + '.join(map(str, configfiles))}` (requests per job, attempt 1; "
            "hours = request x jobs; expected = the estimate before the margins)"
        ),
        "",
        (
            "| rule | jobs | memory per job | time per job | GPUs | GPU memory per job | "
            "GPU type | GPU-hours | CPU-hours | expected h |"
        ),
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for row in rows:
        gpu_memory = _span([round(mb * MB / 1e9, 1) for mb in row.gpu_mb], "GB") if row.gpus else ""
        lines.append(
            f"| {row.rule} | {row.jobs} | {_span(row.mem_mb, 'MB')} | "
            f"{_span(row.runtime_min, 'min')} | {row.gpus} | {gpu_memory} | "
            f"{', '.join(sorted(row.gpu_types)) or 'any' if row.gpus else ''} | {row.gpu_hours:,.1f} | "
            f"{row.cpu_hours:,.1f} | {row.expected_hours:,.1f} |"
        )
    total_jobs = sum(r.jobs for r in rows)
    lines.append(
        f"| **total** | {total_jobs} | | | | | | {sum(r.gpu_hours for r in rows):,.1f} | "
        f"{sum(r.cpu_hours for r in rows):,.1f} | {sum(r.expected_hours for r in rows):,.1f} |"
    )
    unknown = sorted({m for r in rows for m in r.unknown})
    lines += ["", *disk_lines(config, unknown)]
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
