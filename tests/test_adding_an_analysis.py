"""A new per-pair analysis is five files, following docs/adding-an-analysis.md.

The test takes the page's marked code blocks as they stand, applies them to a copy of the
repository and runs the copy on a copy of the tiny run. The registry entry goes into the
registry; the rule, caption, module and test are new or appended. Then:

- the page touches at most five files, none of them ``paths.py``, ``common.smk``, ``steps.py`` or
  the ``Snakefile``;
- the new rule's jobs, one per pair, are the only jobs scheduled;
- its table equals a direct computation from the activation file;
- its figure is written;
- the page's own test and the checks of every registered rule (``tests/test_steps.py``) pass in
  the copy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.conftest import REPO, TINY, job_counts, snakemake_command

pytestmark = pytest.mark.integration

DOC = REPO / "docs" / "adding-an-analysis.md"
#: A code block the page marks with its file: ```<language> file=<path> [insert=ENTRIES|append]
BLOCK = re.compile(
    r"^```\w+ file=(\S+)(?: (insert=ENTRIES|append))?\n(.*?)^```$", re.MULTILINE | re.DOTALL
)
#: The line of the registry above which new entries go.
ANCHOR = "    # new analyses: their entries go above this line (docs/adding-an-analysis.md)\n"
RULE = "analyze_attention_entropy"
#: The files an analysis may not need to edit beyond the registry entry.
UNTOUCHED = {
    "src/sinkscope/paths.py",
    "workflow/rules/common.smk",
    "src/sinkscope/steps.py",
    "Snakefile",
}


def doc_blocks() -> list[tuple[str, str, str]]:
    """The page's marked blocks: (file, how: "" (new file), "insert=ENTRIES" or "append", text)."""
    return [(m.group(1), m.group(2) or "", m.group(3)) for m in BLOCK.finditer(DOC.read_text())]


def apply_blocks(repo: Path, blocks: list[tuple[str, str, str]]) -> None:
    """Write each block into ``repo`` as the page says: a new file, appended, or inserted into the
    registry above :data:`ANCHOR`."""
    for name, how, text in blocks:
        path = repo / name
        if how == "insert=ENTRIES":
            source = path.read_text()
            assert source.count(ANCHOR) == 1, (
                f"{name}: the registry's anchor line is not there once"
            )
            path.write_text(source.replace(ANCHOR, text + ANCHOR))
        elif how == "append":
            path.write_text(path.read_text().rstrip("\n") + "\n\n\n" + text)
        else:
            assert not path.exists(), f"{name}: the page writes a new file that exists"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def test_the_page_touches_five_files_and_no_glue() -> None:
    blocks = doc_blocks()
    touched = [name for name, _, _ in blocks]
    assert len(touched) == len(set(touched)) <= 5, touched
    assert not set(touched) & UNTOUCHED
    assert [name for name, how, _ in blocks if how == "insert=ENTRIES"] == [
        "src/sinkscope/outputs.py"
    ]
    assert any(name.startswith("tests/") for name in touched)
    # the table of files at the top of the page is the blocks' list
    listed = re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), re.MULTILINE)
    assert listed == touched


def test_following_the_page_adds_one_analysis_and_reruns_nothing_else(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for part in (
        "Snakefile",
        "config.yaml",
        "config",
        "workflow",
        "src",
        "envs",
        "tests",
        "pyproject.toml",
    ):
        source = REPO / part
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(source, repo / part, ignore=ignore)
        else:
            shutil.copy2(source, repo / part)
    apply_blocks(repo, doc_blocks())
    # work on a copy of the run (mtimes and Snakemake's metadata kept): the shared run stays
    run = Path(shutil.copytree(tiny_run, tmp_path / "run", symlinks=True))
    env = {
        **os.environ,
        "PYTHONPATH": str(repo / "src"),  # the jobs import the copy's package
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    command = snakemake_command(
        run,
        *("--cores", "2", "--configfile", str(TINY), "--config", f"download_dir={download_dir}"),
        snakefile=repo / "Snakefile",
    )

    def snakemake(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*command, *args], capture_output=True, text=True, env=env, check=False, timeout=900
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    dry = snakemake("-n")
    assert job_counts(dry.stdout) == {RULE: 2, "all": 1, "total": 3}, dry.stdout[-3000:]
    snakemake()
    for dataset in ("alice", "alice.no-bos"):
        folder = run / "results" / "heads" / "smollm2-135m" / dataset
        table = pl.read_parquet(folder / "attention_entropy.parquet")
        assert (folder / "attention_entropy.csv").is_file()
        assert (folder / "attention_entropy.png").stat().st_size > 5_000
        expected = direct_entropy(
            run / "results" / "activations" / "smollm2-135m" / f"{dataset}.h5"
        )
        got = table.sort("layer", "head")["normalized_entropy"].to_numpy()
        assert got == pytest.approx(expected, abs=1e-9)
    assert "Nothing to be done" in snakemake("-n").stdout
    # the page's own test, and the workflow's checks of every registered rule, in the copy
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/heads/test_entropy.py",
            "tests/test_steps.py",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": f"{repo / 'src'}{os.pathsep}{repo}"},
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


def direct_entropy(activations: Path) -> np.ndarray:
    """Each head's normalized attention entropy, row by row from the file's maps with h5py
    alone: -sum p log p over the row's keys 0..q, over log(q + 1), averaged over rows 1..T and
    sequences; in (layer, head) order."""
    import h5py
    import hdf5plugin  # noqa: F401 - registers the file's codec

    with h5py.File(activations, "r") as handle:
        probs = handle["attention/probs"][...].astype(np.float64)
    n_layers, n_sequences, n_heads, t1, _ = probs.shape
    out = np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for head in range(n_heads):
            values = []
            for sequence in range(n_sequences):
                for q in range(1, t1):
                    row = probs[layer, sequence, head, q, : q + 1]
                    row = row[row > 0]
                    values.append(float(-(row * np.log(row)).sum()) / np.log(q + 1))
            out[layer, head] = np.mean(values)
    return out.ravel()
