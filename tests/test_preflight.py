"""``sinkscope preflight``: each check against stand-in commands, a planted hub cache and a
stand-in disk, and the command itself on a machine without SLURM (tests/test_slurm.py runs it
against the real single-node cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import httpx2
import pytest
from huggingface_hub.errors import GatedRepoError

from sinkscope.config import load_layered_config, validate_config
from sinkscope.preflight import (
    disk_findings,
    hub_findings,
    in_hub_cache,
    render_findings,
    slurm_findings,
    torch_findings,
)
from tests.conftest import REPO, TINY

SHA = "607a30d783dfa663caf39e06633721c8d4cfcd7e"


def config_with(resources: dict | None = None, models: dict | None = None) -> dict:
    base = load_layered_config([TINY])
    if resources:
        base["resources"] = resources
    if models is not None:
        base["models"] = models
    return validate_config(base)


def commands(outputs: dict[str, tuple[int, str]]):
    """A stand-in for subprocess: the first word of a command -> (status, stdout)."""

    def run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        status, out = outputs[command[0]]
        return subprocess.CompletedProcess(list(command), status, out, "" if status == 0 else out)

    return run


def every_tool(name: str) -> str | None:
    return f"/usr/bin/{name}"


SINFO = "cpu* (null)\ngpu gpu:a100:4(S:0-1),gpu:l40s:8\n"


def test_slurm_partitions_gpu_types_and_the_account_are_checked_against_the_cluster() -> None:
    config = config_with({"gpus": 1, "gpu_types": {"a100": 80, "h100": 80}})
    run = commands({"sinfo": (0, SINFO), "sacctmgr": (0, "proj\n")})
    findings = slurm_findings(config, "proj", run, every_tool)
    failed = [f for f in findings if not f.ok]
    assert [f.what for f in failed] == [
        (
            "resources.gpu_types.h100: no GPU of that type on partition 'gpu' (its GRES: "
            "gpu:a100:4(S:0-1), gpu:l40s:8)"
        )
    ]
    assert any("resources.gpu_partition = 'gpu': a partition" in f.what for f in findings)
    assert any("account 'proj'" in f.what and f.ok for f in findings)
    wrong = config_with({"gpus": 1, "gpu_partition": "a100q", "cpu_partition": "cpu"})
    failed = [f for f in slurm_findings(wrong, None, run, every_tool) if not f.ok]
    assert len(failed) == 1 and "'a100q' is not a partition" in failed[0].what
    assert failed[0].fix == "set resources.gpu_partition to one of them"
    other = commands({"sinfo": (0, SINFO), "sacctmgr": (0, "")})
    failed = [f for f in slurm_findings(config_with(), "nope", other, every_tool) if not f.ok]
    assert len(failed) == 1 and "no association" in failed[0].what
    none = slurm_findings(config, None, run, lambda name: None)
    assert len(none) == 1 and not none[0].ok and "no sbatch, scancel" in none[0].what


def test_torch_must_be_a_cuda_build_with_a_recent_driver_where_jobs_ask_for_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    gpu = config_with({"gpus": 1})
    if torch.version.cuda is None:  # this machine's build
        (finding,) = torch_findings(gpu)
        assert not finding.ok and "make install LOCK=requirements-cuda.lock" in finding.fix
    assert torch_findings(config_with({"gpus": 0}))[0].ok
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    old = commands({"srun": (0, "NVIDIA A100-SXM4-80GB, 535.104.05, 81920 MiB\n")})
    findings = torch_findings(gpu, srun=True, run=old)
    assert [f.ok for f in findings] == [True, False]
    assert "driver 535.104.05, older than 580" in findings[1].what
    new = commands({"srun": (0, "NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB\n")})
    assert all(f.ok for f in torch_findings(gpu, srun=True, run=new))


def plant(cache: Path, repo_type: str, repo_id: str, commit: str, ref: str | None = None) -> None:
    folder = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "snapshots" / commit / "config.json").write_text("{}")
    if ref:
        (folder / "refs").mkdir()
        (folder / "refs" / ref).write_text(commit)


def test_hub_repositories_are_found_in_the_cache_or_named_with_their_fix(tmp_path: Path) -> None:
    models = {
        "cached": {"source": {"kind": "hub", "id": "org/cached", "revision": SHA}},
        "by-branch": {"source": {"kind": "hub", "id": "org/branch", "revision": "main"}},
        "gated": {"source": {"kind": "hub", "id": "meta-llama/Llama-3.1-8B", "revision": SHA}},
    }
    config = config_with(models=models)
    plant(tmp_path, "model", "org/cached", SHA)
    plant(tmp_path, "model", "org/branch", SHA, ref="main")
    assert in_hub_cache("model", "org/branch", "main", tmp_path)
    assert not in_hub_cache("model", "org/branch", "other", tmp_path)

    def gated(repo_type: str, repo_id: str, revision: str) -> None:
        url = f"https://huggingface.co/api/models/{repo_id}"
        response = httpx2.Response(403, request=httpx2.Request("GET", url))
        raise GatedRepoError(f"{repo_id} is gated", response=response)

    online = {f.what.split(":")[0]: f for f in hub_findings(config, tmp_path, False, gated)}
    assert online["models.cached"].ok and online["models.by-branch"].ok
    assert not online["models.gated"].ok
    assert "https://huggingface.co/meta-llama/Llama-3.1-8B" in online["models.gated"].fix
    offline = {f.what.split(":")[0]: f for f in hub_findings(config, tmp_path, True, gated)}
    assert "docs/cluster.md, step 2" in offline["models.gated"].fix

    def reachable(repo_type: str, repo_id: str, revision: str) -> None:
        return None

    fine = {f.what.split(":")[0]: f for f in hub_findings(config, tmp_path, False, reachable)}
    assert fine["models.gated"].ok and "step 2 fetches it" in fine["models.gated"].what


def test_the_disk_is_held_to_the_plans(tmp_path: Path) -> None:
    """Paper models (shapes from their kept configs): the plan's disk against a stand-in disk
    whose free space is just below and just above it."""
    from sinkscope.sizing.plan import disk_need

    config = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
    need = disk_need(config).total
    (tmp_path / "hf").mkdir()

    def free(amount: int):
        return lambda path: SimpleNamespace(free=amount)

    (short,) = disk_findings(config, tmp_path / "results", tmp_path / "hf", free(need - 10**9))
    assert not short.ok and f"need about {need / 1e9:,.1f} GB" in short.what
    (enough,) = disk_findings(config, tmp_path / "results", tmp_path / "hf", free(need))
    assert enough.ok
    assert "preflight: 1 of 2 checks failed" in render_findings([short, enough])


def test_preflight_without_slurm_fails_with_one_line_per_problem(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    result = subprocess.run(
        [sys.executable, "-m", "sinkscope.cli", "preflight", "--configfile", str(TINY)],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "PATH": str(bin_dir), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("FAIL  SLURM: no sbatch, scancel, sacct, squeue on PATH; fix:")
    assert lines[-1].startswith("preflight: ") and "checks failed" in lines[-1]
    assert "Traceback" not in result.stderr
