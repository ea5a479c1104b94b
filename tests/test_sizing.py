"""sinkscope.sizing: model shapes, per-job requests, the plan, and the rehearsal that checks every
job's measured peak (the usage line at the end of its log) against what it asked for."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
import yaml

from sinkscope.config import load_layered_config, validate_config
from sinkscope.prepare.model_config import MODEL_CONFIGS, fixture_config
from sinkscope.sizing import costs
from sinkscope.sizing.plan import activation_file_bytes
from sinkscope.sizing.requests import MODEL_SIZED_RULES, Request, job_request, layer_bytes
from sinkscope.sizing.shapes import facts_from_config
from sinkscope.sizing.usage import JobUsage, read_usage
from tests.conftest import REPO, SETTINGS, TINY, job_counts, snakemake

#: Parameter counts published with each model (model cards and papers), an independent check of
#: the kept configs and of the count on the meta device.
PUBLISHED_PARAMS = {
    "openai-community/gpt2": 124_439_808,
    "openai-community/gpt2-medium": 354_823_168,
    "openai-community/gpt2-xl": 1_557_611_200,
    "meta-llama/Llama-3.1-8B": 8_030_261_248,
    "google/gemma-7b": 8_537_680_896,
    "mistralai/Mistral-7B-v0.1": 7_241_732_096,
}
#: gpt-oss-20b: "21B parameters with 3.6B active" (OpenAI's model card); the active count there
#: leaves out the input embedding (201,088 x 2,880), which is a lookup, not a product.
GPT_OSS = ("openai/gpt-oss-20b", 20.9e9, 3.6e9, 201_088 * 2_880)


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED_PARAMS))
def test_kept_configs_give_the_published_parameter_counts(hub_id: str) -> None:
    facts = facts_from_config(hub_id, fixture_config(hub_id), "bfloat16", "kept")
    assert facts.n_params == PUBLISHED_PARAMS[hub_id]
    assert facts.active_params == facts.n_params
    assert facts.weight_bytes == 2 * facts.n_params


def test_gpt_oss_counts_its_experts_once_per_token() -> None:
    hub_id, total, active, embedding = GPT_OSS
    facts = facts_from_config(hub_id, fixture_config(hub_id), "bfloat16", "kept")
    assert abs(facts.n_params - total) / total < 0.02
    assert abs(facts.active_params - embedding - active) / active < 0.03
    assert facts.learned_sinks and facts.n_heads == 64 and facts.n_kv_heads == 8
    # its bf16 weights (about 42 GB) fit the extraction's host request with room for the batch
    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    request = job_request("extract_activations", config, "gpt-oss-20b")
    assert 41e9 < facts.weight_bytes < 43e9
    assert request.mem_mb * 2**20 > 1.2 * facts.weight_bytes and request.gpus == 1


def test_every_paper_model_has_a_kept_config() -> None:
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    hub_ids = {entry["source"]["id"] for entry in paper["models"].values()}
    assert hub_ids == {p.stem.replace("--", "/") for p in MODEL_CONFIGS.glob("*.json")}


def test_layer_bytes_by_hand_at_llama_width() -> None:
    facts = facts_from_config(
        "llama", fixture_config("meta-llama/Llama-3.1-8B"), "bfloat16", "kept"
    )
    n, t1 = 50, 257
    by_hand = 4 * (50 * 32 * 257 * 257 + 2 * 50 * 257 * 4096 + 2 * 32 * 128 * 4096)
    assert layer_bytes(facts, n, t1) == by_hand == 978_000_128  # 0.98 GB


def test_activation_file_bytes_equal_a_real_extraction(extracted) -> None:
    """The plan's disk bound is the datasets' uncompressed bytes: equal to the sum of the dataset
    sizes of a real (tiny) extraction, which h5py reports independently."""
    import h5py

    from sinkscope.extraction import h5layout
    from sinkscope.prepare.models import model_shape

    family, path, model, _ = extracted
    names = {spec.name for spec in h5layout.DATASETS}
    with h5py.File(path) as handle:
        n_seq, t1 = handle["tokens/input_ids"].shape
        real = sum(handle[name].size * handle[name].dtype.itemsize for name in names)
    facts = facts_from_config("tiny", model.config, "float32", "test")
    assert facts.n_layers == model_shape(model.config).n_layers
    assert activation_file_bytes(facts, n_seq, t1, SETTINGS.storage_dtypes) == real, family


def test_requests_grow_with_the_attempt_and_the_model() -> None:
    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    small = job_request("analyze_oversmoothing", config, "gpt2")
    large = job_request("analyze_oversmoothing", config, "llama-3.1-8b")
    assert large.mem_mb > small.mem_mb and large.runtime_min > small.runtime_min
    again = job_request("analyze_oversmoothing", config, "llama-3.1-8b", attempt=2)
    assert again.mem_mb == 2 * large.mem_mb and again.runtime_min == 2 * large.runtime_min
    for rule in (
        "extract_activations",
        "analyze_streaming",
        "analyze_streaming_recompute",
        "extract_long_context",
    ):
        request = job_request(rule, config, "mistral-7b")
        assert request.gpus == 1 and request.partition == "gpu", rule
        # on a GPU node the host holds the bf16 weights once, while they load ...
        bf16_weights = 2 * 7_241_732_096
        assert request.estimate.peak_mb * 2**20 > bf16_weights, rule
        # ... and never a float32 copy (29 GB for Mistral-7B), which a float32 model would need
        as_float32 = {**config["models"]["mistral-7b"], "dtype": "float32"}
        fp32 = job_request(rule, {**config, "models": {"mistral-7b": as_float32}}, "mistral-7b")
        assert fp32.estimate.peak_mb * 2**20 > 2 * bf16_weights, rule
        if rule == "extract_activations":  # its batches are smaller than the weights
            assert request.estimate.peak_mb * 2**20 < 2 * bf16_weights, rule
            # one copy of the weights: float32 adds exactly 2 bytes per parameter (its buffers
            # are in the storage dtypes, not the model's)
            added = (fp32.estimate.peak_mb - request.estimate.peak_mb) * 2**20
            assert added == pytest.approx(bf16_weights, rel=0.01), rule
    assert job_request("classify_heads", config, "mistral-7b").partition == "cpu"


def test_the_oversmoothing_request_pays_for_the_value_maps_it_multiplies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The per-sequence terms of eq. (2) cost ``N T (G + H) k D`` multiply-adds a layer (each
    token through the G value maps and the H heads' output maps): Gemma-7B's 16 + 16 maps of
    256 dimensions cost 1.2 x as many per layer as Llama-3.1-8B's 8 + 32 of 128 at 3/4 the width
    (hand count: 32 x 256 x 3072 against 40 x 128 x 4096), and switching the rate off takes
    exactly that time out of the estimate."""
    from sinkscope.sizing import costs

    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    n, t = config["extraction"]["n_sequences"], config["extraction"]["context_length"]
    added = {}
    for model, (layers, maps, heads, k, d) in {
        "llama-3.1-8b": (32, 8, 32, 128, 4096),
        "gemma-7b": (28, 16, 16, 256, 3072),
    }.items():
        with_terms = job_request("analyze_oversmoothing", config, model).estimate.seconds
        monkeypatch.setattr(costs, "APPROXIMATION_TERMS_S_PER_GMAC", 0.0)
        without = job_request("analyze_oversmoothing", config, model).estimate.seconds
        monkeypatch.undo()
        rate = costs.APPROXIMATION_TERMS_S_PER_GMAC
        hand = rate * layers * n * t * (maps + heads) * k * d / 1e9
        assert with_terms - without == pytest.approx(hand, rel=1e-9), model
        added[model] = hand / layers
    assert added["gemma-7b"] / added["llama-3.1-8b"] == pytest.approx(1.2)


def test_the_long_context_solves_run_on_the_cpu_after_a_short_gpu_forward() -> None:
    """The long-context test at Mistral-7B's width: the forward holds a GPU for minutes, the
    half-space solves (10,240 points in 4,096 dimensions, 2 x 2 x 32 of them and their nulls)
    run on the CPU partition, holding one layer of Z and the Gram matrices, not the weights."""
    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    forward = job_request("extract_long_context", config, "mistral-7b")
    solves = job_request("analyze_geometry_long_context", config, "mistral-7b")
    assert (forward.gpus, forward.partition) == (1, "gpu")
    assert (solves.gpus, solves.partition) == (0, "cpu")
    assert solves.runtime_min > 10 * forward.runtime_min
    assert solves.mem_mb < forward.mem_mb
    # every solve within its budget: 2 sequences x 2 sets x 32 layers, real and null
    lc = config["geometry"]["long_context"]
    budget = 2 * 2 * 32 * (lc["solve_seconds"] + lc["null_solve_seconds"])
    assert solves.estimate.seconds < budget + 600


def test_plan_lists_every_job_of_the_dry_run() -> None:
    """``sinkscope plan`` counts the same jobs per rule as Snakemake's own dry run."""
    plan = subprocess.run(
        [sys.executable, "-m", "sinkscope.cli", "plan", "--configfile", str(TINY)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert plan.returncode == 0, plan.stderr
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", str(TINY), "--forceall"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    expected = {
        rule: n for rule, n in job_counts(dry.stdout).items() if rule not in ("all", "total")
    }
    rows = {
        cells[1]: int(cells[2])
        for line in plan.stdout.splitlines()
        if line.startswith("| ")
        and (cells := [c.strip() for c in line.split("|")])[2].isdigit()
        and not cells[1].startswith("**")
    }
    assert rows == expected
    assert "Disk under results/activations" in plan.stdout
    unknown = [line for line in plan.stdout.splitlines() if line.startswith("Shape unknown")]
    if unknown:  # a clone where prepare_model has not run: the line names the models, no rule
        names = unknown[0].split(": ", 1)[1].rstrip(".").split(", ")
        assert names == ["smollm2-135m"], unknown


def test_plan_refuses_a_missing_config_file(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sinkscope.cli", "plan", "--configfile", str(tmp_path / "no.yaml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 2 and "no.yaml" in result.stderr


def test_gpu_jobs_cover_what_the_gpu_rehearsal_measured() -> None:
    """bench/gpu_rehearsal.py's run on one H200 (random-weight Llama-3.1-8B at full depth, the
    paper config's settings): every GPU rule's request covers the measured wall time and peak
    host memory, and asks at most 3x the peak (the CPU rehearsal's bound, below)."""
    import json

    from sinkscope.prepare.model_config import fixture_config
    from sinkscope.sizing.shapes import facts_from_config

    measured = json.loads((REPO / "bench" / "gpu_rehearsal.json").read_text())
    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    facts = facts_from_config(
        "rehearsal", fixture_config(measured["hub_id"]), measured["dtype"], "kept"
    )
    assert {row["rule"] for row in measured["rows"]} == {
        "extract_activations",
        "extract_long_context",
    }
    for row in measured["rows"]:
        request = job_request(row["rule"], config, facts=facts)
        assert request.gpus == 1, row["rule"]
        assert request.runtime_min * 60 > row["wall_s"], row["rule"]
        assert row["peak_rss_mb"] < request.mem_mb <= 3 * row["peak_rss_mb"], row["rule"]


def test_gpu_memory_estimates_cover_what_the_gpu_rehearsal_measured() -> None:
    """The GPU memory each GPU job is sized with (weights, CUDA context, what its forward holds)
    covers the peak torch measured on the H200 (bench/gpu_rehearsal.json: 17.6 GB for the
    extraction, 50.5 GB for the long-context inputs) and overstates it by at most 1.3x; with the
    margin, the long-context job then needs an 80 GB card, as the measurement says."""
    import json

    from sinkscope.sizing.requests import MB, gpu_estimate_bytes, gpu_type_for

    measured = json.loads((REPO / "bench" / "gpu_rehearsal.json").read_text())
    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    facts = facts_from_config(
        "rehearsal", fixture_config(measured["hub_id"]), measured["dtype"], "kept"
    )
    types = {"l40s": 48, "a100": 80}
    for row in measured["rows"]:
        peak = row["gpu_peak_mb"] * MB
        estimate = gpu_estimate_bytes(row["rule"], config, facts)
        assert peak <= estimate <= 1.3 * peak, (row["rule"], peak / 1e9, estimate / 1e9)
        asked = gpu_type_for(estimate, types, row["rule"])
        assert types[asked] * 1e9 > peak, row["rule"]
        assert asked == ("a100" if peak > 48e9 else "l40s"), row["rule"]


def test_a_gpu_type_is_the_smallest_that_holds_the_job_and_grows_on_retry() -> None:
    from sinkscope.sizing.requests import GpuTypeError, gpu_type_for

    types = {"v100": 32, "a100_80": 80, "l40s": 48}
    need = 40e9 / costs.GPU_MEM_MARGIN  # 40 GB with the margin
    assert gpu_type_for(need, types, "job") == "l40s"
    assert gpu_type_for(need, types, "job", attempt=2) == "a100_80"
    assert gpu_type_for(need, types, "job", attempt=3) == "a100_80"  # the largest stays
    assert gpu_type_for(need, {}, "job") == ""  # no types named: any GPU
    with pytest.raises(GpuTypeError, match=r"extract_long_context \(big\) needs about 88\.0 GB"):
        gpu_type_for(80e9, types, "extract_long_context (big)")


def test_gpu_types_reach_the_model_jobs_and_a_name_slurm_refuses_is_named() -> None:
    """With ``resources.gpu_types``, the rules that run a model ask for a type through the
    resource ``resources.gpu_type_resource`` names (``gpu_model``: sbatch --gpus=<type>:<n>,
    ``constraint``: --constraint), the others ask for none; a name with a hyphen, which the SLURM
    plugin refuses as ``gpu_model``, is refused by the config check with its key."""
    from sinkscope.config import ConfigError
    from sinkscope.sizing.requests import MODEL_RUNNING_RULES, rule_resources

    base = load_layered_config([TINY])
    config = validate_config(base | {"resources": {"gpu_types": {"a100": 80}}})
    for rule in MODEL_RUNNING_RULES:
        assert "gpu_model" in rule_resources(rule, config), rule
        assert "constraint" not in rule_resources(rule, config), rule
    assert "gpu_model" not in rule_resources("classify_heads", config)
    assert "gpu_model" not in rule_resources("extract_activations", validate_config(base))
    with pytest.raises(ConfigError, match=r"resources\.gpu_types\.a100-sxm4-80gb: .*constraint"):
        validate_config(base | {"resources": {"gpu_types": {"a100-sxm4-80gb": 80}}})
    hyphen = validate_config(
        base
        | {"resources": {"gpu_types": {"a100-sxm4-80gb": 80}, "gpu_type_resource": "constraint"}}
    )
    assert "constraint" in rule_resources("extract_activations", hyphen)


def test_plan_names_the_gpu_type_of_each_job_and_refuses_one_that_fits_none(
    tmp_path: Path,
) -> None:
    """``sinkscope plan`` of config/paper.yaml shows each GPU job's memory and type; with a
    type too small for some jobs it still prints the plan, names each of them on stderr and
    exits 1. Llama-3.1-8B's long-context job needs more than 48 GB (measured 50.5 GB),
    gpt-oss-20b's more than 80 GB (42 GB of weights in bfloat16 and 64 heads' attention)."""

    def plan(types: dict[str, float]) -> subprocess.CompletedProcess[str]:
        extra = tmp_path / "types.yaml"
        extra.write_text(yaml.safe_dump({"resources": {"gpu_types": types}}))
        command = ["plan", "--configfile", "config/paper.yaml", str(extra)]
        return subprocess.run(
            [sys.executable, "-m", "sinkscope.cli", *command],
            capture_output=True, text=True, cwd=REPO, check=False,
        )  # fmt: skip

    fits = plan({"l40s": 48, "a100": 80, "h200": 141})
    assert fits.returncode == 0, fits.stderr
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in fits.stdout.splitlines()
            if line.startswith("| ")}  # fmt: skip
    assert rows["extract_long_context"][6] == "a100, h200, l40s"
    assert rows["extract_activations"][5].endswith(" GB")
    assert rows["classify_heads"][6] == ""
    refused = plan({"l40s": 48})
    assert refused.returncode == 1
    assert "| extract_activations |" in refused.stdout
    lines = [line for line in refused.stderr.splitlines() if "refused" in line]
    assert any("extract_long_context (llama-3.1-8b) needs about" in line for line in lines)
    assert all("resources.gpu_types holds: l40s (48 GB)" in line for line in lines)
    assert not any("(gpt2)" in line for line in lines)


def test_the_cluster_guide_quotes_the_gpu_rehearsal_and_this_commits_requests() -> None:
    """docs/cluster.md's sentence on the one run on a GPU quotes bench/gpu_rehearsal.json (wall
    seconds, host and GPU peaks in GB) and the requests the sizing gives those two jobs now, so
    a new measurement or a change to the sizing that moves them moves the guide too."""
    import json
    import re

    from sinkscope.config import long_context_seq_len

    measured = json.loads((REPO / "bench" / "gpu_rehearsal.json").read_text())
    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    facts = facts_from_config(
        "rehearsal", fixture_config(measured["hub_id"]), measured["dtype"], "kept"
    )
    long_context_config = config["geometry"]["long_context"]
    seq_len = long_context_seq_len(
        long_context_config["seq_len"],
        long_context_config["points_per_dim"],
        facts.d_model,
        facts.max_positions,
    )
    rows = {row["rule"]: row for row in measured["rows"]}
    extraction, long_context = rows["extract_activations"], rows["extract_long_context"]
    requests = [
        job_request(rule, config, facts=facts)
        for rule in ("extract_activations", "extract_long_context")
    ]
    guide = re.sub(r"\s+", " ", (REPO / "docs" / "cluster.md").read_text())
    quoted = [
        f"took {extraction['wall_s']:.0f} s for the extraction",
        f"forward at {extraction['forward_tflop_s']:.0f}-",
        f"and {long_context['wall_s']:.0f} s for the long-context inputs",
        f"inside their {requests[0].runtime_min}-minute requests",
        (
            f"host peaks of {extraction['peak_rss_mb'] / 1000:.1f} and "
            f"{long_context['peak_rss_mb'] / 1000:.1f} GB"
        ),
        f"(requests {requests[0].mem_mb / 1000:.1f} and {requests[1].mem_mb / 1000:.1f} GB)",
        (
            f"GPU peaks of {extraction['gpu_peak_mb'] / 1000:.1f} and "
            f"{long_context['gpu_peak_mb'] / 1000:.1f} GB"
        ),
        f"{facts.n_heads} x {seq_len:,}^2 scores",
    ]
    assert requests[0].runtime_min == requests[1].runtime_min
    assert [text for text in quoted if text not in guide] == []


def test_the_claims_job_covers_what_the_claims_bench_measured() -> None:
    """bench/claims_bench.py at config/paper.yaml's scale (every interval over sequences that the
    claims take from the per-sequence tables, at the paper models' shapes): the claims job's
    request covers
    the measured peak and wall time and asks at most 3x the peak; the fixed request it had
    before (1,100 MB) did not cover it."""
    import json

    from sinkscope.sizing.costs import MODEL_FREE_REQUESTS

    measured = json.loads((REPO / "bench" / "claims_bench.json").read_text())
    config = validate_config(load_layered_config([REPO / path for path in measured["configfiles"]]))
    request = job_request("claims", config)
    assert measured["peak_rss_mb"] < request.mem_mb <= 3 * measured["peak_rss_mb"]
    assert request.runtime_min * 60 > measured["wall_s"]
    assert MODEL_FREE_REQUESTS["claims"][0] * 1.5 < measured["peak_rss_mb"]


def test_the_claims_request_grows_with_the_per_sequence_tables() -> None:
    """By hand at one model of 2 layers x 3 heads (3 kv heads), N = 10, 2 BOS datasets (one with
    its no-BOS pair) and 4 T': every cell of the five per-sequence tables counted at 8 bytes."""
    from sinkscope.geometry.names import VALUE_RANK_BY_SEQUENCE_COLUMNS
    from sinkscope.heads.names import SEQUENCE_MASS_COLUMNS
    from sinkscope.oversmoothing.names import (
        BY_SEQUENCE_COLUMNS,
        HEADS_BY_SEQUENCE_COLUMNS,
        LAYERS_BY_SEQUENCE_COLUMNS,
    )
    from sinkscope.sizing.requests import per_sequence_table_bytes
    from sinkscope.sizing.shapes import ModelFacts

    facts = ModelFacts("m", 2, 3, 3, 4, 12, 100, 1000, 1000, 64, "float32", False, "test")
    config = {
        "extraction": {"n_sequences": 10},
        "oversmoothing": {"context_lengths": [8, 16, 32, 64]},
        "datasets": {"a": {"bos": "both"}, "b": {}},
    }
    cells = (
        2 * 10 * 6 * 4 * len(BY_SEQUENCE_COLUMNS)
        + 2 * 10 * 6 * len(HEADS_BY_SEQUENCE_COLUMNS)
        + 2 * 10 * 2 * 4 * len(LAYERS_BY_SEQUENCE_COLUMNS)
        + 3 * 10 * 6 * len(SEQUENCE_MASS_COLUMNS)
        + 3 * 10 * 2 * 3 * len(VALUE_RANK_BY_SEQUENCE_COLUMNS)
    )
    assert per_sequence_table_bytes(config, {"m": facts}) == 8 * cells
    assert per_sequence_table_bytes(config, {"m": facts, "n": facts}) == 16 * cells


# --- rehearsal: every job's measured peak against its request


def _usages(workdir: Path) -> list[tuple[str, str | None, JobUsage]]:
    """``(rule, model or None, usage)`` of every job of a finished run, from the usage line at
    the end of its log (``results/logs/<rule>/<model>/...``)."""
    logs = workdir / "results" / "logs"
    rows = []
    for path in sorted(logs.rglob("*.log")):
        rule, *rest = path.relative_to(logs).parts
        usage = read_usage(path)
        if usage is not None:
            rows.append((rule, rest[0] if rule in MODEL_SIZED_RULES else None, usage))
    return rows


#: The request may exceed the measured peak by at most this factor (issue: "about 3x"); a request
#: set back to a constant sized for another model breaks it.
MAX_OVER_REQUEST = 3.0
#: What a job with no data asks for (its fixed part with the margin, or the minimum): a request at
#: this floor is never an over-request, however small the tiny run's peak (0.24 GB in CI).
FLOOR_MB = max(costs.MIN_MEM_MB, math.ceil(costs.JOB_FIXED_MB * costs.MEM_MARGIN / 100) * 100)


def check_requests_cover_measurements(
    workdir: Path, configfiles: list[Path], request_of: Callable[..., Request] = job_request
) -> list[str]:
    """Problems of a finished run: a job that used more memory or time than it asked for, or a
    model-sized job that asked for more than :data:`MAX_OVER_REQUEST` x its measured peak
    (``request_of``: what each job asked for, :func:`job_request` unless a test says otherwise)."""
    config = validate_config(load_layered_config(configfiles))
    problems, measured = [], 0
    for rule, model, usage in _usages(workdir):
        measured += 1
        peak, seconds = usage.peak_rss_mb, usage.wall_s
        request = request_of(rule, config, model, results=str(workdir / "results"))
        where = f"{rule} ({model or '-'}): peak {peak:.0f} MB, {seconds:.0f} s"
        if peak > request.mem_mb:
            problems.append(f"{where} > request {request.mem_mb} MB")
        if seconds > 60 * request.runtime_min:
            problems.append(f"{where} > request {request.runtime_min} min")
        if rule in MODEL_SIZED_RULES and request.mem_mb > max(MAX_OVER_REQUEST * peak, FLOOR_MB):
            problems.append(f"{where}: request {request.mem_mb} MB is over {MAX_OVER_REQUEST}x")
    assert measured > 10, "the run's logs hold almost no usage lines"
    return problems


@pytest.mark.integration
def test_tiny_run_jobs_stay_within_their_requests(tiny_run: Path) -> None:
    assert check_requests_cover_measurements(tiny_run, [TINY]) == []


@pytest.mark.integration
@pytest.mark.parametrize(
    ("rule", "constant_mb"), [("classify_heads", 4000), ("analyze_streaming", 6000)]
)
def test_a_request_set_back_to_a_constant_fails(
    tiny_run: Path, rule: str, constant_mb: int
) -> None:
    """The check above is not vacuous: the constant requests the rules had before
    sinkscope.sizing (sized for no model in particular) are reported as over-requests."""

    def constant(rule_: str, *args, **kwargs) -> Request:
        request = job_request(rule_, *args, **kwargs)
        return dataclasses.replace(request, mem_mb=constant_mb) if rule_ == rule else request

    problems = check_requests_cover_measurements(tiny_run, [TINY], constant)
    assert problems and all(p.startswith(f"{rule} ") for p in problems), problems


def test_usage_line_reports_the_peak_of_a_known_allocation(tmp_path: Path) -> None:
    """The peak RSS a job logs grows by (at least) a block of known size that it touched (in a
    fresh process: the test session's own high-water mark may already be higher)."""
    probe = (
        "import numpy as np; from sinkscope.sizing.usage import peak_rss_mb, usage_line\n"
        "before = peak_rss_mb(); block = np.ones(300 * 2**20 // 8)\n"
        "print(before, peak_rss_mb()); print(usage_line(12.5))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    numbers, line = out.stdout.splitlines()
    before, after = map(float, numbers.split())
    assert after - before >= 290
    log = tmp_path / "job.log"
    log.write_text(f"earlier line\n2026-12-03 INFO sinkscope: {line}\n")
    usage = read_usage(log)
    assert usage is not None and usage.wall_s == 12.5 and abs(usage.peak_rss_mb - after) < 1
    assert read_usage(tmp_path / "missing.log") is None


@pytest.mark.integration
def test_rehearsal_at_gpt2_width_stays_within_requests(
    tmp_path_factory: pytest.TempPathFactory, tiny_run: Path, download_dir: Path
) -> None:
    """Two layers of GPT-2 small's exact configuration (random weights, SmolLM2's tokenizer)
    through the DAG: extraction, heads, geometry (and its long-context test, T' > d_model),
    oversmoothing, sinks and the first-position mass (GPT-2 has no rotary positions: no cache
    policies, see sinkscope.streaming.applicability). Every job must stay within its request,
    and no model-sized request may exceed its measured peak by more than 3x.

    Random weights make no sinks, so the thresholds are the sink-heavy ones
    (sinkscope.sizing.rehearsal.SINK_HEAVY): the work that depends on the data is at its most,
    and the test checks that it ran (every head a sink head, every eligible position a
    secondary sink)."""
    from sinkscope.paths import Paths
    from sinkscope.sinks.secondary import eligible_positions
    from sinkscope.sizing.rehearsal import build_random_model, sink_heavy

    workdir = tmp_path_factory.mktemp("rehearsal")
    model_dir = workdir / "gpt2-2-layers"
    build_random_model(
        "openai-community/gpt2", 2, tiny_run / "results" / "models" / "smollm2-135m", model_dir
    )
    tiny = yaml.safe_load(TINY.read_text())
    min_queries = 4  # 29 of the 33 positions can be secondary sinks (the default 32: one)
    config = sink_heavy(
        {
            **tiny,
            "models": {"gpt2-2-layers": {"source": {"kind": "local", "path": str(model_dir)}}},
            "datasets": {"alice": {**tiny["datasets"]["alice"], "bos": "keep"}},
            "geometry": {"long_context": {"n_sequences": 1, "seq_len": 800}},  # > d_model = 768
            "sinks": {**tiny["sinks"], "secondary_min_queries": min_queries},
            "costs": {"enabled": False},
            "dynamics": {"enabled": False},
        }
    )
    configfile = workdir / "rehearsal.yaml"
    configfile.write_text(yaml.safe_dump(config))
    snakemake(workdir, "--configfile", str(configfile), download_dir=download_dir)
    assert check_requests_cover_measurements(workdir, [configfile]) == []

    pair = {"model": "gpt2-2-layers", "dataset": "alice"}
    paths = Paths(str(workdir / "results"))
    per_head = pl.read_parquet(paths.heads_table("per_head").format(**pair))
    assert per_head.height == 2 * 12 and per_head["is_sink"].all()
    n_sequences, context_length = (
        tiny["extraction"]["n_sequences"],
        tiny["extraction"]["context_length"],
    )
    secondary = pl.read_parquet(paths.table("sinks", "secondary_sinks").format(**pair))
    eligible = eligible_positions(context_length + 1, min_queries)
    assert secondary.height == n_sequences * eligible.size


def test_an_unreachable_hub_is_not_retried_for_a_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub model's shape without network: one request without retries, then UnknownModelShape
    naming the key; transformers' config download (about 30 s of retries) is never started."""
    import huggingface_hub
    import transformers

    from sinkscope.sizing import shapes

    def unreachable(*args, **kwargs):
        raise ConnectionError("Name or service not known")

    class Retried(BaseException):  # not an Exception: no handler in the code under test hides it
        pass

    def retrying(*args, **kwargs):
        raise Retried("the config download ran: it retries for about 30 s")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", retrying)
    config = {"models": {"x": {"source": {"kind": "hub", "id": "org/unknown", "revision": "v1"}}}}
    shapes._cached_facts.cache_clear()
    with pytest.raises(shapes.UnknownModelShape, match=r"models\.x: .*no hub access"):
        shapes.model_facts(config, "x", results="/nonexistent")


def test_threads_come_from_the_sizing_on_a_cluster_and_on_one_machine() -> None:
    """The extraction's 4 threads on a cluster (encoding while the GPU runs; no profile
    setting any more), 2 for oversmoothing, both at submission and inside the job; on one
    machine at most half its cores."""
    from sinkscope.sizing.requests import job_threads

    assert job_threads("extract_activations", None) == 4
    assert job_threads("analyze_oversmoothing", None) == 2
    assert job_threads("classify_heads", None) == 1
    local = {"PATH": "/usr/bin"}
    by_cores = [job_threads("extract_activations", c, local) for c in (1, 2, 3, 4, 16)]
    assert by_cores == [1, 1, 1, 2, 2]
    assert job_threads("analyze_sinks", 16, local) == 1
    # inside the SLURM job (Snakemake's --cores are the job's 4 CPUs): every CPU it asked for
    in_job = {"SLURM_JOB_ID": "7"}
    assert job_threads("extract_activations", 4, in_job) == 4
    assert job_threads("analyze_oversmoothing", 2, in_job) == 2
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert "set-threads" not in profile


def test_time_by_rule_adds_up_the_jobs_logs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``sinkscope usage`` (make run's last line): per rule the jobs, their summed minutes and
    the largest peak, from the usage lines of planted logs; a log without one (a failed job) is
    not counted, and a run without any is an error."""
    from sinkscope.cli import main
    from sinkscope.sizing.usage import USAGE_PREFIX, time_by_rule

    logs = tmp_path / "logs"
    planted = {
        "extract_activations/m/a.log": (600.0, 2000.0),
        "extract_activations/m/b.log": (300.0, 2500.0),
        "claims/all.log": (6.0, 300.0),
    }
    for name, (wall_s, peak_mb) in planted.items():
        path = logs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        line = f"{USAGE_PREFIX} peak_rss_mb={peak_mb:.1f} wall_s={wall_s:.1f}"
        path.write_text(f"INFO starting\n2026-12-03 INFO sinkscope: {line}\n")
    (logs / "classify_heads").mkdir()
    (logs / "classify_heads" / "failed.log").write_text("Traceback ...\n")
    rows = time_by_rule(logs)
    assert [(r["rule"], r["jobs"], r["minutes"], r["peak_mb"]) for r in rows] == [
        ("extract_activations", 2, 15.0, 2500.0),
        ("claims", 1, 0.1, 300.0),
    ]
    assert main(["usage", str(logs)]) == 0
    out = capsys.readouterr().out
    assert "| extract_activations | 2 | 15.0 | 99% | 2,500 MB |" in out
    assert "| **total** | 3 | 15.1 | 100% | |" in out
    assert main(["usage", str(tmp_path / "empty")]) == 1


def test_the_cluster_guide_shows_this_commits_paper_plan() -> None:
    """docs/cluster.md prints the plan of config/paper.yaml "for this commit": every row of
    ``sinkscope plan --configfile config/paper.yaml`` must be in it as printed, so a change to
    the sizing that moves a request also moves the guide."""
    plan = subprocess.run(
        [sys.executable, "-m", "sinkscope.cli", "plan", "--configfile", "config/paper.yaml"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout
    rows = [line for line in plan.splitlines() if line.startswith("| ") and "rule" not in line]
    disk = [
        line
        for line in plan.splitlines()
        if line.startswith(("Disk under", "Temporary, under", "Hub cache", "Disk in all"))
    ]
    guide = (REPO / "docs" / "cluster.md").read_text()
    assert len(rows) > 20 and len(disk) == 4
    assert [line for line in rows + disk if line not in guide] == []


def test_the_plans_disk_holds_the_measured_paper_shape_file_and_every_part() -> None:
    """The activation file of a Llama-3.1-8B pair of config/paper.yaml (N = 50, T = 257), with
    its raw datasets (``extraction.uncompressed``) and the others at the codec's measured
    fraction, is within 10% of the file the GPU rehearsal wrote at those widths: 13.9 GB
    (BENCHMARKS.md), where the raw sum is 21.2 GB. The long-context inputs of one such pair are 2
    sequences x 10,241 tokens x 4,096 x 4 bytes x 32 layers (10.7 GB); the plan adds them for
    every pair, the hub cache and the sum."""
    from sinkscope.sizing.plan import (
        activation_file_stored_bytes,
        disk_lines,
        long_context_file_bytes,
    )
    from sinkscope.sizing.shapes import model_facts

    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    facts = model_facts(config, "llama-3.1-8b")
    extraction = config["extraction"]
    raw, packed = activation_file_stored_bytes(facts, 50, 257, extraction)
    whole = activation_file_bytes(facts, 50, 257, extraction["storage_dtypes"])
    assert whole / 1e9 == pytest.approx(21.2, abs=0.1)
    assert abs((raw + packed) / 13.9e9 - 1) < 0.10
    plain = activation_file_bytes(
        facts, 50, 257, extraction["storage_dtypes"], extraction["uncompressed"]
    )
    assert raw == plain and packed == round(costs.CODEC_STORED_FRACTION * (whole - plain))
    assert long_context_file_bytes(config, facts) == 2 * 10241 * 4096 * 4 * 32
    none = {**extraction, "codec": "none"}
    assert activation_file_stored_bytes(facts, 50, 257, none) == (whole, 0)
    lines = disk_lines(config)
    assert [line.split(":")[0] for line in lines] == [
        "Disk under results/activations",
        "Temporary, under results/long_context",
        "Hub cache (HF_HOME, step 2 of docs/cluster.md)",
        "Disk in all",
    ]
    parts = [
        float(
            line.split("about " if "about" in line else "up to ")[1]
            .split(" GB")[0]
            .replace(",", "")
        )
        for line in lines
    ]
    assert parts[3] == pytest.approx(sum(parts[:3]), abs=0.2)
