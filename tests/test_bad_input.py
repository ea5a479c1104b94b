"""Bad input at the entry points: a malformed local ``config.json``, a missing local model, a
file where ``results/`` should be a folder, and a killed run's incomplete outputs. Each is
reported in one message naming the file, the config key and the fix, before any job runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import REPO, TINY, snakemake_command

MALFORMED = '{"model_type": "llama",\n  "max_position_embeddings": 64,\n'


def _layer(tmp_path: Path, path: Path) -> Path:
    layer = tmp_path / "bad.yaml"
    layer.write_text(
        yaml.safe_dump({"models": {"bad": {"source": {"kind": "local", "path": str(path)}}}})
    )
    return layer


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sinkscope.cli", *args],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def test_a_malformed_local_config_json_is_named_by_every_entry_point(tmp_path: Path) -> None:
    """``check-config`` (which called it valid), ``plan`` and the workflow's parse (which
    stopped on a bare JSONDecodeError) name the key, the file, the line and the fix."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(MALFORMED)
    layer = _layer(tmp_path, model)
    sentence = (
        f"{model / 'config.json'} is not valid JSON (Expecting property name enclosed in double "
        "quotes at line 3 column 1); fix the file or point models.bad.source.path at the "
        "model's own folder"
    )
    check = _cli("check-config", str(TINY), str(layer))
    assert check.returncode != 0 and sentence in check.stdout + check.stderr
    plan = _cli("plan", "--configfile", str(TINY), str(layer))
    assert plan.returncode == 2 and sentence in plan.stderr and "Traceback" not in plan.stderr
    parse = subprocess.run(
        snakemake_command(tmp_path / "run", "-n", "--configfile", str(TINY), str(layer)),
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    output = parse.stdout + parse.stderr
    assert parse.returncode != 0 and sentence in output and "JSONDecodeError" not in output


def test_plan_names_a_missing_local_model_in_one_message(tmp_path: Path) -> None:
    plan = _cli("plan", "--configfile", str(TINY), str(_layer(tmp_path, tmp_path / "nowhere")))
    assert plan.returncode == 2 and "Traceback" not in plan.stderr
    layer = tmp_path / "bad.yaml"
    assert (
        f"models.bad.source.path ({layer}, line 5): '{tmp_path / 'nowhere'}' does not exist"
        in plan.stderr
    )


def test_a_file_where_results_should_be_a_folder_is_named(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    workdir.mkdir()
    for blocked in (workdir / "results", workdir / "results" / "activations"):
        if blocked.parent != workdir:
            (workdir / "results").unlink()
            (workdir / "results").mkdir()
        blocked.write_text("not a folder")
        parse = subprocess.run(
            snakemake_command(workdir, "-n", "--configfile", str(TINY)),
            cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        output = parse.stdout + parse.stderr
        assert parse.returncode != 0, output[-2000:]
        assert (
            f"{blocked.relative_to(workdir)}: a file where the workflow writes a folder" in output
        )
        assert "NotADirectoryError" not in output


def test_make_run_redoes_a_killed_runs_incomplete_jobs_as_the_profile_does() -> None:
    """``docs/reproducibility.md`` says so: ``make run``, ``make run-full`` and the SLURM profile
    all pass ``--rerun-incomplete``."""
    makefile = (REPO / "Makefile").read_text()
    for target in ("run", "run-full"):
        recipe = makefile.split(f"\n{target}: ", 1)[1].split("\n\n", 1)[0]
        assert "snakemake --cores $(CORES) --rerun-incomplete" in recipe, target
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["rerun-incomplete"] is True
    assert "--rerun-incomplete" in (REPO / "docs" / "reproducibility.md").read_text()


def test_a_schema_error_names_the_file_and_line_that_set_the_key(tmp_path: Path) -> None:
    """``check-config`` and the workflow's parse: the layered key that breaks the schema comes
    with the file and line that set it (the last file that writes it)."""
    layer = tmp_path / "layer.yaml"
    layer.write_text("# a comment\nextraction:\n  seed: 1\n  n_sequences: -3\n")
    check = _cli("check-config", str(TINY), str(layer))
    assert check.returncode == 2
    assert f"extraction.n_sequences ({layer}, line 4): -3 is less than the minimum of 1" in (
        check.stderr
    )
    parse = subprocess.run(
        snakemake_command(tmp_path / "run", "-n", "--configfile", str(TINY), str(layer)),
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert f"extraction.n_sequences ({layer}, line 4): -3" in parse.stdout + parse.stderr
