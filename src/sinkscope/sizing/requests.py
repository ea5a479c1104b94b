"""One request per job: memory, wall time, GPUs and partition, from the model's shape, the pair's
N and T, the rule's config and the measured per-unit costs (:mod:`sinkscope.sizing.costs`).

:func:`job_request` is the only source of the rules' ``resources`` (``workflow/rules/common.smk``
``job_resources``) and of ``sinkscope plan``. Every estimate is ``fixed + per-unit x units``:

* file-reading analyses (heads, geometry, oversmoothing, sinks, first positions): one layer's
  data as float32 (:func:`layer_bytes`) sets the memory, every layer's the time;
* model-running jobs (extraction, StreamingLLM caches and their re-computation baseline, the
  long-context geometry): the weights in the configured dtype plus the batch, and the forward's
  FLOPs (``2 x active parameters`` per token plus attention) at the GPU's or the CPU's throughput.
  They ask for ``resources.gpus`` GPUs on ``resources.gpu_partition``; with ``gpus: 0`` they are
  CPU jobs;
* the claims: a measured constant plus the per-sequence tables it resamples, which grow with
  every model's heads (:func:`per_sequence_table_bytes`);
* everything else: a measured constant (:data:`sinkscope.sizing.costs.MODEL_FREE_REQUESTS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sinkscope.outputs import REGISTRY, AnalysisCost
from sinkscope.sizing import costs
from sinkscope.sizing.shapes import ModelFacts, model_facts

__all__ = [
    "CONDA_ENV",
    "CONDA_ENV_CUDA",
    "MODEL_RUNNING_RULES",
    "MODEL_SIZED_RULES",
    "Estimate",
    "GpuTypeError",
    "Request",
    "claims_estimate",
    "conda_env",
    "estimate",
    "gpu_estimate_bytes",
    "gpu_type_for",
    "job_request",
    "job_threads",
    "layer_bytes",
    "layer_parts",
    "per_sequence_table_bytes",
    "rule_resources",
    "streaming_token_forwards",
]

#: Rules that load the model and run it: they go where the model fits (the GPU partition).
MODEL_RUNNING_RULES = (
    "extract_activations",
    "analyze_streaming",
    "analyze_streaming_recompute",
    "extract_long_context",
)
#: Rules whose request depends on the model's shape (the others' are measured constants).
#: The file-reading analyses: :data:`~sinkscope.sizing.costs.ANALYSIS_COSTS` and those the
#: registry of outputs gives an :class:`~sinkscope.outputs.AnalysisCost`
#: (:mod:`sinkscope.outputs`, a new analysis' ``cost``).
ANALYSIS_COSTS: dict[str, AnalysisCost] = {
    **{
        rule: outputs.cost
        for rule, outputs in REGISTRY.items()
        if isinstance(outputs.cost, AnalysisCost)
    },
    **costs.ANALYSIS_COSTS,
}
#: Jobs that do not depend on a model: :data:`~sinkscope.sizing.costs.MODEL_FREE_REQUESTS` and the
#: registered rules that state their (peak MB, minutes).
MODEL_FREE_REQUESTS: dict[str, tuple[float, float]] = {
    **{rule: outputs.cost for rule, outputs in REGISTRY.items() if isinstance(outputs.cost, tuple)},
    **costs.MODEL_FREE_REQUESTS,
}
MODEL_SIZED_RULES = (*MODEL_RUNNING_RULES, "analyze_geometry_long_context", *ANALYSIS_COSTS)
FLOAT32 = 4
FLOAT64 = 8
MB = 2**20


@dataclass(frozen=True)
class Estimate:
    """What one job is expected to use, before the margins: peak host memory and wall time."""

    peak_mb: float
    seconds: float
    gpus: int = 0
    #: peak memory on each of the job's GPUs (0 for a CPU job), :func:`gpu_estimate_bytes`
    gpu_mb: float = 0.0


@dataclass(frozen=True)
class Request:
    """What one job asks for: :class:`Estimate` x the margins x the attempt."""

    mem_mb: int
    runtime_min: int
    gpus: int
    partition: str
    estimate: Estimate
    #: the GPU type asked for (``resources.gpu_types``), "" when none is named
    gpu_type: str = ""

    def resources(self) -> dict[str, Any]:
        """The rule's ``resources`` (Snakemake names: ``mem_mb``, ``runtime`` in minutes,
        ``gpu``, ``slurm_partition``, and the GPU type under ``gpu_model`` and ``constraint``;
        :func:`rule_resources` passes the one that ``resources.gpu_type_resource`` names)."""
        return {
            "mem_mb": self.mem_mb,
            "runtime": self.runtime_min,
            "gpu": self.gpus,
            "slurm_partition": self.partition,
            "gpu_model": self.gpu_type,
            "constraint": self.gpu_type,
        }


class GpuTypeError(ValueError):
    """No GPU type of ``resources.gpu_types`` holds a job's GPU memory."""


#: The conda environments of the rules (``snakemake --sdm conda``), relative to the repository
#: root: every rule's, from requirements.lock (the CPU build of torch), and that of the rules
#: that run a model on a GPU, from requirements-cuda.lock (the same pins, torch's CUDA build).
CONDA_ENV = "envs/sinkscope.yaml"
CONDA_ENV_CUDA = "envs/sinkscope-cuda.yaml"


def conda_env(rule: str, config: Mapping[str, Any]) -> str:
    """The conda environment file of ``rule`` (relative to the repository root): the CUDA one
    for the rules that run a model (:data:`sinkscope.sizing.requests.MODEL_RUNNING_RULES`) when
    they ask for GPUs (``resources.gpus`` > 0), else the CPU one."""
    if rule in MODEL_RUNNING_RULES and int(config["resources"]["gpus"]) > 0:
        return CONDA_ENV_CUDA
    return CONDA_ENV


def layer_parts(facts: ModelFacts, n_sequences: int, positions: int) -> tuple[int, int]:
    """One layer's data of an activation file as the analyses hold it (float32), in two parts:
    the attention maps ``(N, H, T1, T1)``, and the rest: the residual stream and the attention
    update ``(N, T1, d)`` each and the per-head ``W_V``/``W_O`` (``2 H hd d``); ``positions`` =
    T1 (BOS included)."""
    maps = n_sequences * facts.n_heads * positions * positions
    rows = 2 * n_sequences * positions * facts.d_model
    weights = 2 * facts.n_heads * facts.head_dim * facts.d_model
    return FLOAT32 * maps, FLOAT32 * (rows + weights)


def layer_bytes(facts: ModelFacts, n_sequences: int, positions: int) -> int:
    """One layer's data of an activation file as the analyses hold it (float32): both
    :func:`layer_parts`."""
    return sum(layer_parts(facts, n_sequences, positions))


def forward_flops(facts: ModelFacts, tokens: int, context: int) -> float:
    """FLOPs of a forward over ``tokens`` tokens that each attend to ``context`` keys:
    ``2 x active parameters`` per token (every matrix product) plus ``4 L d context`` (scores and
    the weighted sum)."""
    return tokens * (2.0 * facts.active_params + 4.0 * facts.n_layers * facts.d_model * context)


def streaming_token_forwards(params: Mapping[str, Any], n_layers: int) -> tuple[int, int]:
    """Token-forwards of one pair's StreamingLLM evaluation (:mod:`sinkscope.streaming`):
    ``(cache evaluation, re-computation baseline)``. Every cache policy
    (:func:`sinkscope.streaming.cache.build_policies`) runs each stream once; the layer ablation
    runs ``layer_ablation_length`` tokens once per layer; the baseline re-encodes the last ``L``
    tokens twice (with and without BOS) for ``recompute_samples`` queries per window ``L``."""
    from sinkscope.streaming.cache import build_policies

    length, n_streams = int(params["stream_length"]), int(params["n_streams"])
    evaluation = len(build_policies(params, length)) * n_streams * length
    if params.get("layer_ablation_window") is not None:
        evaluation += (
            n_layers
            * int(params["layer_ablation_streams"])
            * min(length, int(params["layer_ablation_length"]))
        )
    samples = int(params.get("recompute_samples") or 0)
    recompute = sum(2 * samples * n_streams * (int(w) + 1) for w in params["window_sizes"])
    return evaluation, recompute


def _model_job(
    facts: ModelFacts, tokens: int, context: int, batch_bytes: float, gpus: int, write_bytes: float
) -> Estimate:
    """A job that loads the weights and runs ``tokens`` token-forwards; time = load + forward (+
    writing ``write_bytes``). Host memory: on the CPU the weights (their copies while loading) +
    the batch's host tensors ``batch_bytes``; on a GPU the larger of the weights while loading and
    the batch's host tensors, since the weights leave the host once loaded
    (:data:`~sinkscope.sizing.costs.WEIGHT_COPIES_WHILE_LOADING_ON_GPU`)."""
    flops = forward_flops(facts, tokens, context)
    throughput = costs.GPU_TFLOPS * 1e12 if gpus else costs.CPU_FORWARD_FLOP_S
    load_s = facts.weight_bytes / (costs.FS_GB_S * 1e9)
    seconds = (
        costs.MODEL_JOB_FIXED_S + load_s + flops / throughput + write_bytes / (costs.FS_GB_S * 1e9)
    )
    if gpus:
        host = max(costs.WEIGHT_COPIES_WHILE_LOADING_ON_GPU * facts.weight_bytes, batch_bytes)
    else:
        host = costs.WEIGHT_COPIES_WHILE_LOADING * facts.weight_bytes + batch_bytes
    peak = costs.JOB_FIXED_MB + host / MB
    return Estimate(peak, seconds, gpus)


def _eager_attention_bytes(facts: ModelFacts, rows: int, queries: int, keys: int) -> int:
    """One layer's eager attention on the GPU for ``rows`` sequences: the scores and the masked
    scores in the model's dtype, their float32 softmax and its cast back (``3 x dtype + 4``
    bytes a weight; transformers' eager attention)."""
    from sinkscope.sizing.shapes import DTYPE_BYTES

    per_weight = 3 * DTYPE_BYTES[facts.dtype] + FLOAT32
    return rows * facts.n_heads * queries * keys * per_weight


def gpu_estimate_bytes(rule: str, config: Mapping[str, Any], facts: ModelFacts) -> int:
    """Peak memory of one GPU job of ``rule`` on its device (an upper estimate): the weights in
    their dtype, the CUDA context (:data:`~sinkscope.sizing.costs.CUDA_CONTEXT_BYTES`) and what
    the forward holds at once.

    * ``extract_activations``: the smallest batch the job can run (``extraction.batch_size``;
      with ``auto`` one sequence, in the half of the free memory the job leaves to a batch:
      :func:`sinkscope.extraction.batching.auto_batch_size`) at
      :func:`~sinkscope.extraction.batching.batch_bytes_per_sequence` each;
    * ``extract_long_context``: one sequence of the long-context length at a time, every
      layer's hidden state kept (``output_hidden_states``) and one layer's eager attention;
    * ``analyze_streaming``: :data:`~sinkscope.streaming.evaluator.BATCHING`'s policies per
      forward, each over every stream, with their caches, one chunk's attention weights and the
      dense run's cache snapshot; ``analyze_streaming_recompute``: its bound on attention
      weights per batch, twice (weights and scores) in float32.

    Measured on one H200 (bench/gpu_rehearsal.json, random-weight Llama-3.1-8B): 17.6 GB for the
    extraction and 50.5 GB for the long-context inputs; ``tests/test_sizing.py`` holds these
    estimates to cover both and to ask at most 1.3x them."""
    from sinkscope.config import long_context_params, long_context_seq_len, streaming_params
    from sinkscope.sizing.shapes import DTYPE_BYTES

    held = facts.weight_bytes + costs.CUDA_CONTEXT_BYTES
    dtype = DTYPE_BYTES[facts.dtype]
    if rule == "extract_activations":
        from sinkscope.extraction.batching import batch_bytes_per_sequence

        extraction = config["extraction"]
        n, t1 = int(extraction["n_sequences"]), int(extraction["context_length"]) + 1
        requested = extraction["batch_size"]
        per_sequence = batch_bytes_per_sequence(facts, t1)
        if requested == "auto":
            return held + 2 * per_sequence
        return held + min(n, int(requested)) * per_sequence
    if rule == "extract_long_context":
        lc = long_context_params(config)
        seq_len = long_context_seq_len(
            lc["seq_len"], lc["points_per_dim"], facts.d_model, facts.max_positions
        )
        states = (facts.n_layers + 1) * seq_len * facts.d_model * dtype
        normed = seq_len * facts.d_model * FLOAT32  # one layer's Z in float32 on its way out
        return held + states + normed + _eager_attention_bytes(facts, 1, seq_len, seq_len)
    if rule in ("analyze_streaming", "analyze_streaming_recompute"):
        from sinkscope.streaming.evaluator import BATCHING

        params = streaming_params(config)
        batching = BATCHING["cuda"]
        kv_per_token = 2 * facts.n_layers * facts.n_kv_heads * facts.head_dim * dtype
        if rule == "analyze_streaming_recompute":
            return held + 2 * FLOAT32 * batching.recompute_attention
        n_streams, length = int(params["n_streams"]), int(params["stream_length"])
        chunk = int(params["chunk_size"])
        keys = max(int(w) for w in params["window_sizes"]) + int(params["sink_count"]) + chunk
        rows = batching.policies * n_streams
        caches = kv_per_token * (rows * keys + n_streams * length)
        attention = _eager_attention_bytes(facts, rows, chunk, keys)
        return held + caches + attention
    raise KeyError(f"{rule!r} does not run a model on a GPU")


def gpu_type_for(
    gpu_bytes: float, gpu_types: Mapping[str, float], job: str, attempt: int = 1
) -> str:
    """The GPU type of ``gpu_types`` (name -> GB of memory, ``resources.gpu_types``) that a job
    needing ``gpu_bytes`` asks for: the smallest that holds them with
    :data:`~sinkscope.sizing.costs.GPU_MEM_MARGIN`; each retry moves one type up (a job killed
    for GPU memory gets a larger card), up to the largest. "" when no types are configured.
    Raises :class:`GpuTypeError` naming ``job`` when no type holds it."""
    if not gpu_types:
        return ""
    needed_gb = gpu_bytes * costs.GPU_MEM_MARGIN / 1e9
    fitting = sorted((gb, name) for name, gb in gpu_types.items() if float(gb) >= needed_gb)
    if not fitting:
        listed = ", ".join(f"{name} ({gb:g} GB)" for name, gb in sorted(gpu_types.items()))
        raise GpuTypeError(
            f"{job} needs about {needed_gb:,.1f} GB of GPU memory (its estimate x "
            f"{costs.GPU_MEM_MARGIN:g}), more than any type of resources.gpu_types holds: "
            f"{listed}; add a type with more memory, or shorten the job in the config (its batch or its length)"
        )
    return fitting[min(attempt, len(fitting)) - 1][1]


def estimate(rule: str, config: Mapping[str, Any], facts: ModelFacts | None) -> Estimate:
    """The expected peak memory and wall time of one job of ``rule`` under ``config`` for the model
    of ``facts`` (None for rules that do not depend on a model)."""
    from sinkscope.config import long_context_params, long_context_seq_len, streaming_params

    extraction = config["extraction"]
    n, t1 = int(extraction["n_sequences"]), int(extraction["context_length"]) + 1
    gpus = int(config["resources"]["gpus"])
    if rule in ANALYSIS_COSTS:
        assert facts is not None, rule
        cost = ANALYSIS_COSTS[rule]
        maps, rest = layer_parts(facts, n, t1)
        one_layer = maps + rest
        share_of_maps = cost.rss_layers if cost.rss_maps is None else cost.rss_maps
        held = (
            share_of_maps * maps
            + cost.rss_layers * rest
            + cost.rss_growth * facts.n_layers * one_layer
        )
        peak = costs.JOB_FIXED_MB + held / MB
        seconds = cost.fixed_s + cost.s_per_gb * facts.n_layers * one_layer / 1e9
        if rule == "analyze_oversmoothing":
            # eq. (2)'s terms per sequence at every T' (one pass over at most the extraction's T
            # tokens): each token through the G value maps and the H heads' W_O^T
            maps_and_heads = facts.n_kv_heads + facts.n_heads
            macs = n * (t1 - 1) * maps_and_heads * facts.head_dim * facts.d_model
            seconds += costs.APPROXIMATION_TERMS_S_PER_GMAC * facts.n_layers * macs / 1e9
        return Estimate(peak, seconds)
    if rule == "extract_activations":
        assert facts is not None
        from sinkscope.extraction.batching import CPU_BATCH_BUDGET_BYTES, batch_bytes_per_sequence

        data = facts.n_layers * layer_bytes(facts, n, t1)
        per_sequence = batch_bytes_per_sequence(facts, t1)
        requested = extraction["batch_size"]
        if requested != "auto":
            batch = min(n, int(requested))
        elif gpus:  # half the free GPU memory (extraction.batching.auto_batch_size): at most all N
            batch = n
        else:
            batch = max(1, min(n, CPU_BATCH_BUDGET_BYTES // per_sequence))
        # the host holds a batch's captured tensors while it is written; on a GPU the next
        # batch's arrive meanwhile (overlapped writes)
        in_flight = 2 if gpus else 1
        return _model_job(facts, n * t1, t1, in_flight * batch * per_sequence, gpus, data / 2)
    if rule in ("analyze_streaming", "analyze_streaming_recompute"):
        assert facts is not None
        params = streaming_params(config)
        evaluation, recompute = streaming_token_forwards(params, facts.n_layers)
        tokens = evaluation if rule == "analyze_streaming" else recompute
        window = max(int(w) for w in params["window_sizes"])
        kv_cache = 2 * facts.n_layers * facts.n_kv_heads * facts.head_dim * window * FLOAT32
        chunk = int(params["chunk_size"]) * facts.vocab_size * FLOAT32  # one chunk's logits
        return _model_job(facts, tokens, window, kv_cache + chunk, gpus, 0)
    if rule in ("extract_long_context", "analyze_geometry_long_context"):
        assert facts is not None
        lc = long_context_params(config)
        seq_len = long_context_seq_len(
            lc["seq_len"], lc["points_per_dim"], facts.d_model, facts.max_positions
        )
        n_seq, points = int(lc["n_sequences"]), seq_len - 1
        tokens = n_seq * seq_len
        one_layer = tokens * facts.d_model * FLOAT32  # Z of one layer, float32, in the file
        if rule == "extract_long_context":
            # the forward's hidden states (model dtype, at most float32) and their normed copies
            states = (facts.n_layers + 1) * one_layer * 2
            return _model_job(facts, tokens, seq_len, states, gpus, facts.n_layers * one_layer)
        # the half-space programs run on the CPU, one per (layer, sequence, point set), each
        # within its time budget, on one layer read from the file at a time; a block of up to
        # 8 sequences holds three float64 T' x T' products (R, two Gram matrices), a solve one
        # more (Q), a Gaussian null its n x n draw
        solves = facts.n_layers * n_seq * 2
        real = costs.HALFSPACE_S_PER_POINT_DIM * points * facts.d_model
        seconds = costs.HALFSPACE_JOB_FIXED_S + solves * min(real, float(lc["solve_seconds"]))
        seconds += facts.n_layers * one_layer / (costs.FS_GB_S * 1e9)
        square = points * points * FLOAT64
        held = 2 * one_layer + (3 * min(n_seq, 8) + 1) * square
        if lc["gaussian_null"]:
            null = costs.HALFSPACE_NULL_S_PER_POINT2_DIM * points * points * facts.d_model
            seconds += solves * min(null, float(lc["null_solve_seconds"]))
            held += 2 * square
        return Estimate(costs.JOB_FIXED_MB + held / MB, seconds)
    if rule in MODEL_FREE_REQUESTS:
        peak, minutes = MODEL_FREE_REQUESTS[rule]
        return Estimate(peak, 60.0 * minutes)
    raise KeyError(f"sinkscope.sizing has no estimate for rule {rule!r}")


def per_sequence_table_bytes(config: Mapping[str, Any], facts: Mapping[str, ModelFacts]) -> int:
    """Bytes in memory of the summary tables with one row per sequence and head (or layer) that
    the claims job reads whole and resamples: the oversmoothing stage's
    ``approximation_by_sequence`` (every configured ``T'``), ``heads_by_sequence`` and
    ``layers_by_sequence`` (every ``T'``) over the BOS pairs, and the heads stage's masses and
    the geometry stage's value ranks per sequence over every pair (an upper bound); 8 bytes a
    cell (``facts``: every model's shape). The columns are the tables' own
    (:mod:`sinkscope.oversmoothing.names`, :mod:`sinkscope.heads.names`,
    :mod:`sinkscope.geometry.summary`)."""
    from sinkscope.config import corpus_ids, dataset_ids
    from sinkscope.geometry.names import VALUE_RANK_BY_SEQUENCE_COLUMNS
    from sinkscope.heads.names import SEQUENCE_MASS_COLUMNS
    from sinkscope.oversmoothing.names import (
        BY_SEQUENCE_COLUMNS,
        HEADS_BY_SEQUENCE_COLUMNS,
        LAYERS_BY_SEQUENCE_COLUMNS,
    )

    n = int(config["extraction"]["n_sequences"])
    n_lengths = len(config["oversmoothing"]["context_lengths"])
    bos_pairs, all_pairs = len(corpus_ids(config)), len(dataset_ids(config))
    cells = 0
    for shape in facts.values():
        heads = shape.n_layers * shape.n_heads
        cells += bos_pairs * n * heads * n_lengths * len(BY_SEQUENCE_COLUMNS)
        cells += bos_pairs * n * heads * len(HEADS_BY_SEQUENCE_COLUMNS)
        cells += bos_pairs * n * shape.n_layers * n_lengths * len(LAYERS_BY_SEQUENCE_COLUMNS)
        cells += all_pairs * n * heads * len(SEQUENCE_MASS_COLUMNS)
        cells += (
            all_pairs * n * shape.n_layers * shape.n_kv_heads * len(VALUE_RANK_BY_SEQUENCE_COLUMNS)
        )
    return 8 * cells


def claims_estimate(config: Mapping[str, Any], facts: Mapping[str, ModelFacts]) -> Estimate:
    """The claims job: its measured fixed part plus what it holds and spends per MB of the
    per-sequence tables (:func:`per_sequence_table_bytes`,
    :data:`~sinkscope.sizing.costs.CLAIMS_BYTES_PER_TABLE_BYTE`,
    :data:`~sinkscope.sizing.costs.CLAIMS_S_PER_TABLE_MB`)."""
    peak, minutes = MODEL_FREE_REQUESTS["claims"]
    tables_mb = per_sequence_table_bytes(config, facts) / MB
    return Estimate(
        peak + costs.CLAIMS_BYTES_PER_TABLE_BYTE * tables_mb,
        60.0 * minutes + costs.CLAIMS_S_PER_TABLE_MB * tables_mb,
    )


def job_request(
    rule: str,
    config: Mapping[str, Any],
    model: str | None = None,
    attempt: int = 1,
    results: str = "results",
    minutes: float | None = None,
    facts: ModelFacts | None = None,
) -> Request:
    """What one job of ``rule`` asks for on attempt ``attempt`` (``model``: its model's config
    name, for rules that depend on one; ``minutes``: a run time known from elsewhere, e.g. a
    dynamics run's grid, used instead of the estimate's; ``facts``: the model's shape, given
    directly instead of looked up by name, e.g. a paper model's full depth in a rehearsal)."""
    if facts is None and rule in MODEL_SIZED_RULES and model is not None:
        facts = model_facts(config, model, results)
    if rule == "claims":  # every model's tables
        every = {name: model_facts(config, name, results) for name in config["models"]}
        guess = claims_estimate(config, every)
    else:
        guess = estimate(rule, config, facts)
    if minutes is not None:
        guess = Estimate(guess.peak_mb, 60.0 * minutes / costs.TIME_MARGIN, guess.gpus)
    settings = config["resources"]
    gpus = guess.gpus if rule in MODEL_RUNNING_RULES else 0
    mem = max(costs.MIN_MEM_MB, math.ceil(guess.peak_mb * costs.MEM_MARGIN / 100) * 100)
    runtime = max(costs.MIN_RUNTIME_MIN, math.ceil(guess.seconds * costs.TIME_MARGIN / 60))
    partition = settings["gpu_partition"] if gpus else settings["cpu_partition"]
    gpu_type = ""
    if gpus and facts is not None:
        gpu_bytes = gpu_estimate_bytes(rule, config, facts)
        guess = Estimate(guess.peak_mb, guess.seconds, guess.gpus, gpu_bytes / MB)
        job = f"{rule} ({facts.name})"
        gpu_type = gpu_type_for(gpu_bytes, settings.get("gpu_types") or {}, job, attempt)
    return Request(mem * attempt, runtime * attempt, gpus, partition, guess, gpu_type)


def job_threads(
    rule: str, local_cores: int | None, environ: Mapping[str, str] | None = None
) -> int:
    """Threads of one job of ``rule`` (its ``threads:``, and ``--cpus-per-task`` on SLURM).

    On a cluster (``local_cores`` None: executors that submit jobs define no local core count)
    :data:`~sinkscope.sizing.costs.CLUSTER_THREADS`, and the same inside the SLURM job itself
    (:data:`sinkscope.cluster.SLURM_JOB_VARIABLE` in ``environ``, by default the process's):
    there Snakemake runs with all the job's CPUs as its cores, and the job uses every CPU it
    asked for rather than the one-machine share. On one machine the multi-threaded rules get
    half its cores, at most 2: Snakemake reserves no cores for a waiting job, so a 2-thread job
    on a 2-core machine would wait whenever a 1-thread job of lower priority holds a core; with
    half the cores a ready model-path job always starts. Every other rule: 1."""
    import os

    from sinkscope.cluster import SLURM_JOB_VARIABLE

    most = costs.CLUSTER_THREADS.get(rule, 1)
    in_job = SLURM_JOB_VARIABLE in (os.environ if environ is None else environ)
    if local_cores is None or in_job:
        return most
    return min(most, max(1, min(2, local_cores // 2)))


def rule_resources(rule: str, config: Mapping[str, Any], minutes: float | None = None) -> dict:
    """A rule's ``resources:`` (``**rule_resources(...)`` in ``workflow/rules/*.smk``): one
    callable per resource over :func:`job_request`, with the job's ``{model}`` wildcard where it
    has one. A model whose shape is not known before ``prepare_model`` has run
    (:class:`~sinkscope.sizing.shapes.UnknownModelShape`) reads as a missing input file, which
    Snakemake shows as "TBD" in a dry run and evaluates again once the model is prepared."""
    import errno

    from sinkscope.sizing.shapes import UnknownModelShape

    def request(wildcards: Any, input: Any, attempt: int) -> Request:
        try:
            return job_request(
                rule, config, getattr(wildcards, "model", None), attempt, minutes=minutes
            )
        except UnknownModelShape as error:
            missing = str(getattr(input, "model_dir", "") or next(iter(input), ""))
            raise FileNotFoundError(errno.ENOENT, str(error), missing) from error

    names = ["mem_mb", "runtime", "gpu", "slurm_partition"]
    settings = config["resources"]
    if rule in MODEL_RUNNING_RULES and int(settings["gpus"]) and settings.get("gpu_types"):
        names.append(settings["gpu_type_resource"])  # gpu_model or constraint
    return {
        name: (
            lambda wildcards, input, attempt, name=name: request(
                wildcards, input, attempt
            ).resources()[name]
        )
        for name in names
    }
