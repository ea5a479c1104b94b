"""Reproducibility: lock files, environment files, byte-identical tables, and the report."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import polars as pl
import pytest

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


def test_every_conda_env_file_named_by_a_rule_exists() -> None:
    named = set()
    for rule_file in (REPO / "workflow" / "rules").glob("*.smk"):
        for match in re.finditer(r'conda:\s*\n\s*"([^"]+)"', rule_file.read_text()):
            named.add((rule_file.parent / match.group(1)).resolve())
    assert named, "no rule names a conda environment"
    for path in named:
        assert path.is_file(), path
        assert "requirements.lock" in path.read_text()


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
