"""Reproducibility: lock files, environment files, byte-identical tables, and the report."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import polars as pl
import pytest

from sinkscope.config import load_layered_config, validate_config
from tests.conftest import REPO, TINY, snakemake


def _pins(lock: Path) -> dict[str, str]:
    return dict(
        re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s\\]+)", lock.read_text(), flags=re.MULTILINE)
    )


def test_every_lock_entry_is_hash_pinned() -> None:
    for lock in ("requirements.lock", "requirements-cuda.lock"):
        text = (REPO / lock).read_text()
        entries = re.findall(r"^[A-Za-z0-9_.\-]+==\S+", text, flags=re.MULTILINE)
        assert entries and text.count("--hash=sha256:") >= len(entries), lock
        assert "file://" not in text and "/opt/" not in text, f"{lock} names local paths"


def test_cpu_and_cuda_locks_pin_the_same_versions() -> None:
    cpu, cuda = _pins(REPO / "requirements.lock"), _pins(REPO / "requirements-cuda.lock")
    assert cpu["torch"] == "2.13.0+cpu" and cuda["torch"] == "2.13.0"
    gpu_only = {name for name in cuda if name.startswith(("nvidia-", "triton", "cuda-"))}
    assert set(cpu) == set(cuda) - gpu_only
    differing = {name for name in cpu if name != "torch" and cpu[name] != cuda[name]}
    assert not differing


def test_every_rule_names_its_conda_env_and_each_resolves_as_snakemake_and_conda_do() -> None:
    """``--sdm conda``: every rule names its environment through ``conda_env("<its own name>")``
    (:func:`sinkscope.sizing.requests.conda_env`), a path that Snakemake resolves from the rule file's
    folder; the rules that run a model get the CUDA environment when they ask for GPUs and the
    CPU one at ``resources.gpus: 0``. Each environment's pip requirements name a lock file that
    exists from the environment file's folder (where conda resolves ``-r``), with the torch build
    of that lock, and there is no post-deploy script (Snakemake copies one under .snakemake/, so
    a path computed from its own location points nowhere)."""
    from sinkscope.sizing.requests import CONDA_ENV, CONDA_ENV_CUDA, MODEL_RUNNING_RULES, conda_env

    rules_dir = REPO / "workflow" / "rules"
    named: dict[str, str] = {}
    for rule_file in rules_dir.glob("*.smk"):
        text = rule_file.read_text()
        for block in re.split(r"\n(?=rule |checkpoint )", text)[1:]:
            name = re.match(r"(?:rule|checkpoint) (\w+):", block).group(1)
            match = re.search(r'conda:\s*\n\s*conda_env\("(\w+)"\)', block)
            assert match and match.group(1) == name, (rule_file.name, name)
            named[name] = match.group(1)
    assert len(named) > 30 and set(MODEL_RUNNING_RULES) <= set(named)
    gpu = validate_config(load_layered_config([TINY]) | {"resources": {"gpus": 1}})
    cpu = validate_config(load_layered_config([TINY]) | {"resources": {"gpus": 0}})
    for rule in named:
        expected = CONDA_ENV_CUDA if rule in MODEL_RUNNING_RULES else CONDA_ENV
        assert conda_env(rule, gpu) == expected and conda_env(rule, cpu) == CONDA_ENV, rule
    common = (rules_dir / "common.smk").read_text()
    assert 'return f"../../{rule_conda_env(rule, config)}"' in common
    for env, lock, torch in (
        (CONDA_ENV, "requirements.lock", "torch==2.13.0+cpu"),
        (CONDA_ENV_CUDA, "requirements-cuda.lock", "torch==2.13.0 "),
    ):
        env_file = (rules_dir / ".." / ".." / env).resolve()
        requirements = [
            line.split("-r", 1)[1].strip()
            for line in env_file.read_text().splitlines()
            if line.strip().startswith("- -r")
        ]
        assert len(requirements) == 1, env
        resolved = (env_file.parent / requirements[0]).resolve()
        assert resolved == REPO / lock and torch in resolved.read_text(), env
    assert not list((REPO / "envs").glob("*post-deploy*"))


def test_jobs_import_the_checkouts_package_whichever_python_runs_them() -> None:
    """The Snakefile puts the checkout's ``src/`` first on ``PYTHONPATH`` for its jobs (a conda
    environment holds the dependencies only), once, keeping what was there."""
    from sinkscope.cluster import package_on_pythonpath

    environ = {"PYTHONPATH": "/site/extra"}
    assert package_on_pythonpath("/repo/src", environ)
    assert environ["PYTHONPATH"] == os.pathsep.join(["/repo/src", "/site/extra"])
    assert not package_on_pythonpath("/repo/src", environ)
    empty: dict[str, str] = {}
    assert package_on_pythonpath("/repo/src", empty) and empty == {"PYTHONPATH": "/repo/src"}
    snakefile = (REPO / "Snakefile").read_text()
    assert 'package_on_pythonpath(str(Path(workflow.basedir) / "src"), os.environ)' in snakefile


def _digests(root: Path) -> dict[str, str]:
    tables = [p for p in (root / "results").rglob("*") if p.suffix in {".parquet", ".csv"}]
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in tables}


@pytest.mark.integration
def test_two_runs_give_byte_identical_tables(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    """Every table is byte-identical across two identical runs, except tables that record
    wall-clock times (columns ``wall_*``): those must be equal once those columns are dropped."""
    snakemake(tmp_path, "--configfile", str(TINY), download_dir=download_dir)
    first, second = _digests(tiny_run), _digests(tmp_path)
    assert len(first) > 20 and first.keys() == second.keys()
    differing = sorted(name for name in first if first[name] != second[name])
    for name in differing:
        parquet = str(Path(name).with_suffix(".parquet"))
        a, b = (pl.read_parquet(root / parquet) for root in (tiny_run, tmp_path))
        timed = [c for c in a.columns if c.startswith("wall_")]
        assert timed, f"{name} differs between two identical runs and has no wall_* column"
        assert a.drop(timed).equals(b.drop(timed)), name


@pytest.mark.integration
def test_report_holds_every_figure(tiny_run: Path, download_dir: Path) -> None:
    report = tiny_run / "report.html"
    snakemake(
        tiny_run, "--configfile", str(TINY), "--report", str(report), download_dir=download_dir
    )
    html = report.read_text()
    figures = sorted((tiny_run / "results").rglob("*.png"))
    assert len(figures) >= 2 + 5 + 8 + 1 + 5 + 8
    missing = [str(p.relative_to(tiny_run)) for p in figures if p.name not in html]
    assert not missing
    for category in ("Head classification", "Sink geometry", "Oversmoothing", "Summary"):
        assert category in html
