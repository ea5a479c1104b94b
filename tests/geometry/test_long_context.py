"""Proposition 4.1 where it can fail: the long-context half-space test.

With ``T' <= d_model`` tokens of full rank both point sets are trivially separable, so the
extraction's ``T = 256`` cannot tell a representable sink from a non-representable one. The
rule ``analyze_geometry_long_context`` tests ``T' > d_model`` tokens. Checked here: planted
sets with more points than dimensions that are (not) in an open half-space, decided by
construction, and the claim's verdict on them; ``Z`` equals what the query/key/value projections
multiply (forward pre-hooks); the rule end to end on a tiny model through Snakemake.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib.colors as mcolors
import numpy as np
import polars as pl
import pytest
import torch
import yaml

from sinkscope.claims import verdicts as V
from sinkscope.claims.checks import geometry as GC
from sinkscope.claims.checks.geometry import geometry_statements, sink_representable_statements
from sinkscope.config import (
    LONG_CONTEXT_INPUT_KEYS,
    ConfigError,
    long_context_params,
    validate_config,
)
from sinkscope.config_schema import schema_default
from sinkscope.geometry import figure_parts
from sinkscope.geometry import halfspace_plots as hplots
from sinkscope.geometry.analysis import analyze_file
from sinkscope.geometry.halfspace import long_context_counts
from sinkscope.geometry.halfspace_solver import NULL_STOP_FRACTION, HalfspaceResult
from sinkscope.geometry.long_context import (
    LONG_CONTEXT_COLUMNS,
    NULL_COLUMNS,
    attention_inputs,
    long_context_frame,
    long_context_inputs,
    long_context_layer_rows,
    solve_budgets,
    solve_deadline,
    solve_long_context,
)
from sinkscope.geometry.names import (
    ALL_TOKENS,
    BASIS_ATTENDING,
    BASIS_LONG_CONTEXT,
    BOS_MINUS_TOKEN,
    LONG_CONTEXT_POINT_SETS,
    LONG_CONTEXT_TABLE,
    POINT_SETS,
)
from sinkscope.geometry.summary import long_context_table, summarize
from sinkscope.plotting import figure_problems
from sinkscope.prepare.corpora import prepare_corpus
from sinkscope.prepare.models import decoder_layers, prepare_model
from tests.conftest import ONE_PAIR, TINY, snakemake_command, tiny_config, token_stream


def _long_rows(
    z: np.ndarray, model: str = "m", dataset: str = "d", gaussian_null: bool = False
) -> pl.DataFrame:
    """The long-context table of one layer's ``Z`` ``(N, T1, D)``, as the rule builds it."""
    rows = long_context_layer_rows(z, 0, seed=0, gaussian_null=gaussian_null)
    return long_context_frame(rows, model, dataset, z.shape[1])


def _trivial_short(model: str = "m") -> pl.DataFrame:
    """A ``halfspace`` table at the extraction's T where every set is trivially separable."""
    rows = [
        {
            "model": model,
            "dataset": "d",
            "layer": 0,
            "sequence": 0,
            "point_set": name,
            "n_points": 3,
            "dim": 8,
            "rank": 3,
            "trivially_separable": True,
            "halfspace": True,
            "margin": 0.5,
            "margin_upper": 0.5,
            "n_support": 3,
            "n_sink_heads": 1,
            "attend_threshold": 0.5,
        }
        for name in POINT_SETS
    ]
    return pl.DataFrame(rows)


def _verdict(short: pl.DataFrame, long: pl.DataFrame | None) -> dict:
    (row,) = GC.check_sink_representable(sink_representable_statements(short, long), 1.0)
    return row


def halfspace_long_context(*args: Any, **kwargs: Any) -> pl.DataFrame:
    """The long-context test in one process: the forward (:func:`long_context_inputs`, its
    arguments), then the solves (:func:`solve_long_context`, seeded by the streams' seed), as the
    two rules run it through their file."""
    return solve_long_context(long_context_inputs(*args, **kwargs), args[5])


def test_long_context_columns_are_the_keys_and_the_halfspace_result() -> None:
    """Built from :class:`HalfspaceResult`'s fields; the table's columns stay these, in order."""
    assert LONG_CONTEXT_COLUMNS == (
        "model",
        "dataset",
        "layer",
        "sequence",
        "seq_len",
        "point_set",
        "n_points",
        "dim",
        "rank",
        "trivially_separable",
        "halfspace",
        "margin",
        "margin_upper",
        "n_support",
        "solved",
        "null_halfspace",
        "null_margin",
        "null_margin_upper",
        "null_solved",
    )
    assert LONG_CONTEXT_COLUMNS[6:-4] == tuple(HalfspaceResult.__dataclass_fields__)
    assert LONG_CONTEXT_COLUMNS[-4:] == NULL_COLUMNS


D, T = 6, 20  # more points than dimensions: no set can be trivially separable


def test_the_solves_share_the_jobs_request_and_end_inside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sets that no solve decides (each runs to its budget) end inside the job's request: each
    layer's solves get an equal share of what is left of the deadline (here 80 s over 4 layers
    of 2 sequences x 2 point sets, a Gaussian null beside each: 2.5 s a solve, not the
    configured 300 s), and a layer that uses less leaves its time to the ones after it. The
    clock is simulated: each solve "takes" the budget it was given (half of it in layer 0 of
    the second run)."""
    import sinkscope.geometry.long_context as module
    from sinkscope.geometry.long_context_file import LongContextInputs

    rng = np.random.default_rng(0)
    layers = [rng.standard_normal((2, T + 1, D)).astype(np.float32) for _ in range(4)]
    inputs = LongContextInputs(layers, "m", "d", T + 1, D, (0, 1), "float32", "cpu")
    real_rows = module.long_context_layer_rows

    def run(used_in_layer_0: float) -> tuple[float, list[tuple[float, float]]]:
        now = [0.0]
        budgets: list[tuple[float, float]] = []

        def spending(z, layer, seed, tol, real, null_flag, null):
            budgets.append((real, null))
            share = used_in_layer_0 if layer == 0 else 1.0
            now[0] += share * len(z) * len(LONG_CONTEXT_POINT_SETS) * (real + null)
            return real_rows(z, layer, seed, tol, 5.0, null_flag, 5.0)

        monkeypatch.setattr(module, "long_context_layer_rows", spending)
        table = solve_long_context(
            inputs, 0, solve_seconds=300.0, null_solve_seconds=300.0,
            deadline_seconds=80.0, clock=lambda: now[0],
        )  # fmt: skip
        assert table.height == 4 * 2 * 2
        return now[0], budgets

    spent, budgets = run(1.0)
    assert spent == pytest.approx(80.0) and budgets == [(2.5, 2.5)] * 4
    spent, budgets = run(0.5)
    assert spent == pytest.approx(80.0)
    assert budgets[0] == (2.5, 2.5) and budgets[1][0] == pytest.approx(70.0 / 24)
    # without a deadline each solve keeps its configured budget
    assert solve_budgets(None, 4, 4, 300.0, 60.0, True) == (300.0, 60.0)
    assert solve_budgets(1e6, 4, 4, 300.0, 60.0, True) == (300.0, 60.0)
    assert solve_budgets(32.0, 4, 4, 300.0, None, False) == (2.0, None)
    # the job's request: 90% of it less 2 minutes for reading, the table and the figure
    assert solve_deadline(230) == pytest.approx(0.9 * 230 * 60 - 120)
    assert solve_deadline(1) == 0.0 and solve_deadline(None) is None


def test_a_bos_inside_the_hull_is_not_representable_and_the_claim_fails() -> None:
    """z_0 = mean of z_1..z_T: the vectors z_0 - z_i sum to 0, so 0 is in their convex hull and
    no open half-space holds them (Gordan), whatever the z_i are."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2, T + 1, D))
    z[:, 0] = z[:, 1:].mean(axis=1)
    long = _long_rows(z)
    bos = long.filter(pl.col("point_set") == BOS_MINUS_TOKEN)
    assert bos["n_points"].to_list() == [T, T] and bos["dim"].to_list() == [D, D]
    assert not bos["trivially_separable"].any()  # T > d: the test can fail ...
    assert not bos["halfspace"].any()  # ... and does
    assert bos["margin"].to_list() == [0.0, 0.0]
    counts = long_context_counts(long).row(0, named=True)
    assert counts["n_pairs"] == 2 and counts["n_trivial"] == 0
    assert counts["n_representable_nontrivial"] == 0
    assert counts["n_bos_halfspace_nontrivial"] == 0
    # the extraction's T says nothing (all trivial, n/a); the long sequences decide: not reproduced
    assert _verdict(_trivial_short(), None)["verdict"] == V.NOT_APPLICABLE
    row = _verdict(_trivial_short(), long)
    assert row["verdict"] == V.NOT_REPRODUCED and row["value"] == 0.0
    assert "long context" in row["reason"] and "at the extraction's T" in row["reason"]


def test_tokens_rotated_against_bos_are_representable_and_the_claim_holds() -> None:
    """The paper's sufficient condition z_0 . z_i < 0: with z_0 = -u and every z_i . u > 0, the
    direction u puts both sets in an open half-space; the margin is at least u's."""
    rng = np.random.default_rng(1)
    u = rng.normal(size=D)
    u /= np.linalg.norm(u)
    tokens = rng.normal(size=(T, D))
    tokens += (1.0 - tokens @ u)[:, None] * u  # every z_i . u = 1
    z = np.concatenate([-3.0 * u[None], tokens])[None]
    assert (z[0, 1:] @ z[0, 0] < 0).all()
    long = _long_rows(z)
    assert long["halfspace"].all() and not long["trivially_separable"].any()
    # (z_0 - z_i) . (-u) = 3 + 1 > 0 and z_i . u = 1 > 0
    for name, vectors, direction in (
        (ALL_TOKENS, tokens, u),
        (BOS_MINUS_TOKEN, z[0, 0] - tokens, -u),
    ):
        r = long.filter(pl.col("point_set") == name).row(0, named=True)
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        by_u = float((unit @ direction).min())
        assert by_u > 0 and r["margin_upper"] >= by_u - 1e-12  # gamma >= u's margin
        assert 0 < r["margin"] <= r["margin_upper"] + 1e-12  # a certified bracket
    row = _verdict(_trivial_short(), long)
    assert row["verdict"] == V.REPRODUCED and row["value"] == 1.0


def test_a_universal_pass_states_the_share_of_sequences_it_could_miss() -> None:
    """Every pair of 4 long-context sequences holds: the row bounds the share of sequences that
    could hold a failing pair unseen, 1 - 0.05^(1/4) = 52.7% (exact one-sided, by hand); with a
    failing sequence there is nothing to bound."""
    row = _verdict(_trivial_short(), _long_rows(_rotated(4)))
    assert row["verdict"] == V.REPRODUCED
    assert 1 - 0.05 ** (1 / 4) == pytest.approx(0.527, abs=5e-4)
    assert "no failing pair among the 4 long-context sequences: fewer than 52.7%" in row["reason"]
    half = np.random.default_rng(0).normal(size=(T // 2, D))
    around = np.concatenate([[np.ones(D)], half, -half])[None]  # each token's negative too
    row = _verdict(_trivial_short(), _long_rows(np.concatenate([_rotated(3), around])))
    assert row["verdict"] == V.NOT_REPRODUCED and "fewer than" not in row["reason"]


def _rotated(n_sequences: int, seed: int = 1) -> np.ndarray:
    """``Z`` of ``n_sequences`` sequences whose tokens all have ``z_i . u = 1`` and BOS ``-3u``:
    both sets lie in an open half-space (the test above), with ``T = 20`` points in ``D = 6``
    dimensions, where random points would pass with Wendel's probability 0.03 only."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_sequences):
        u = rng.normal(size=D)
        u /= np.linalg.norm(u)
        tokens = rng.normal(size=(T, D))
        tokens += (1.0 - tokens @ u)[:, None] * u
        out.append(np.concatenate([-3.0 * u[None], tokens]))
    return np.stack(out)


def _undecided(long: pl.DataFrame, sequence: int, name: str = ALL_TOKENS) -> pl.DataFrame:
    """``long`` with one set's solve stopped by its time budget before it decided anything."""
    hit = (pl.col("sequence") == sequence) & (pl.col("point_set") == name)
    return long.with_columns(
        halfspace=pl.when(hit).then(None).otherwise(pl.col("halfspace")),
        solved=pl.when(hit).then(False).otherwise(pl.col("solved")),
        margin=pl.when(hit).then(0.0).otherwise(pl.col("margin")),
    )


def test_undecided_pairs_leave_the_claim_inconclusive_unless_a_decided_pair_fails() -> None:
    """A pair a solve left undecided is neither holding nor failing: the claim's interval runs
    from "it fails" to "it holds"; it is inconclusive while that straddles the tolerance (1: every
    pair) and not reproduced once a decided pair fails; with none undecided, reproduced."""
    long = _long_rows(_rotated(2))
    assert _verdict(_trivial_short(), long)["verdict"] == V.REPRODUCED
    one = _undecided(long, 1)
    counts = long_context_counts(one).row(0, named=True)
    assert counts["n_undecided"] == 1 and counts["n_representable_nontrivial"] == 1
    row = _verdict(_trivial_short(), one)
    assert row["verdict"] == V.INCONCLUSIVE and row["value"] == 1.0  # 1 of 1 decided pair
    assert (row["ci_low"], row["ci_high"]) == (0.5, 1.0)
    assert "geometry.long_context.solve_seconds" in row["reason"]
    assert "1 undecided" in row["measured"]
    failing = one.with_columns(
        halfspace=pl.when((pl.col("sequence") == 0) & (pl.col("point_set") == BOS_MINUS_TOKEN))
        .then(False)
        .otherwise(pl.col("halfspace"))
    )
    row = _verdict(_trivial_short(), failing)
    assert row["verdict"] == V.NOT_REPRODUCED and row["value"] == 0.0
    assert (row["ci_low"], row["ci_high"]) == (0.0, 0.5)


def test_the_gaussian_null_beside_the_real_sets_decides_whether_chance_passes_too() -> None:
    """With the null (same N, d and covariance) failing, the real pass is evidence: reproduced,
    and the statement compares the margins. Planted nulls that pass make it inconclusive, as
    Wendel's probability does for too few points."""
    long = _long_rows(_rotated(2), gaussian_null=True)
    # each null stopped once its certified bound fell below half its real set's margin
    assert long["null_margin_upper"].is_not_null().all() and not long["null_solved"].any()
    assert (long["null_margin_upper"] < NULL_STOP_FRACTION * long["margin"]).all()
    counts = long_context_counts(long).row(0, named=True)
    assert counts["n_null"] == 4 and counts["n_null_halfspace"] == 0
    assert counts["n_margin_above_null"] == 4  # every real margin above its null's bound
    row = _verdict(_trivial_short(), long)
    assert row["verdict"] == V.REPRODUCED
    assert "Gaussian null of the same size, dimension and covariance" in row["reason"]
    assert "4 of 4 solves stopped once their bound fell below half the real margin" in row["reason"]
    assert "the real margin exceeds its null's in 4 of 4 sets" in row["reason"]
    passing = long.with_columns(null_halfspace=pl.lit(True), null_margin=pl.lit(0.9))
    row = _verdict(_trivial_short(), passing)
    assert row["verdict"] == V.INCONCLUSIVE
    assert "the Gaussian null's share 1 > 0.05" in row["reason"]
    # too few points for the length: Wendel's probability alone makes it inconclusive
    short_rows = _long_rows(_rotated(2)[:, :8])  # 7 points in 6 dimensions
    assert not short_rows["trivially_separable"].any()
    assert _verdict(_trivial_short(), short_rows)["verdict"] == V.INCONCLUSIVE


def test_long_rows_without_a_non_trivial_pair_leave_the_claim_to_the_extraction() -> None:
    """seq_len <= d_model + 1 (no seq_len can exceed GPT-2 medium's d_model): the long rows are
    trivially separable, so the claim is decided on the extraction's sequences, and says so."""
    rng = np.random.default_rng(2)
    long = _long_rows(rng.normal(size=(1, 5, D)))
    assert long["trivially_separable"].all()
    statements = sink_representable_statements(_trivial_short(), long)
    assert statements["basis"].to_list() == [BASIS_ATTENDING]
    assert "none is non-trivial" in statements["statement"][0]
    assert _verdict(_trivial_short(), long)["verdict"] == V.NOT_APPLICABLE


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2"])
def test_z_is_what_the_query_key_value_projections_multiply(family: str) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(family)).eval()
    with torch.no_grad():  # break the symmetric init so that norm gains matter
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    seen: dict[tuple[int, str], list[torch.Tensor]] = {}
    hooks = []
    for index, layer in enumerate(decoder_layers(model)):
        names = ("c_attn",) if family == "gpt2" else ("q_proj", "k_proj", "v_proj")
        attention = layer.attn if family == "gpt2" else layer.self_attn
        for name in names:

            def keep(module, args, index=index, name=name):
                seen.setdefault((index, name), []).append(args[0].detach().clone())

            hooks.append(getattr(attention, name).register_forward_pre_hook(keep))
    ids = torch.randint(3, 97, (2, 24))
    z_layers = attention_inputs(model, ids)
    for hook in hooks:
        hook.remove()
    assert len(z_layers) == len(decoder_layers(model))
    for (index, _), calls in seen.items():  # one forward per sequence, in order
        assert np.array_equal(z_layers[index], torch.cat(calls).numpy())


# --- the rule end to end: a tiny Llama with a word-level tokenizer, a local text corpus

WORDS = ["[UNK]", "<s>", *(f"w{i}" for i in range(40))]


def _save_tiny_model(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", bos_token="<s>")
    config = LlamaConfig(
        vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    root = tmp_path_factory.mktemp("long-context")
    _save_tiny_model(root / "weights")
    rng = np.random.default_rng(0)
    (root / "text.txt").write_text(" ".join(f"w{i}" for i in rng.integers(0, 40, size=400)))
    entry = {"source": {"kind": "local", "path": str(root / "weights")}, "dtype": "float32"}
    prepare_model("tiny", entry, root / "prepared", root / "downloads")
    corpus = root / "corpus" / "documents.parquet"
    prepare_corpus("words", {"source": {"kind": "local", "path": str(root / "text.txt")}}, corpus,
                   root / "downloads")  # fmt: skip
    stream, provenance = token_stream(root / "prepared", corpus, root / "stream.npz")
    return root, root / "prepared", stream, provenance


def test_seq_len_beyond_the_positions_names_the_config_key(tiny_setup, tmp_path: Path) -> None:
    """Checked from the model's config before the weights or the corpus are read (a missing
    corpus does not get in the way)."""
    _, prepared, _, _ = tiny_setup
    missing = (tmp_path / "missing.npz", tmp_path / "missing.json")
    with pytest.raises(ValueError) as raised:
        halfspace_long_context(prepared, *missing, 1, 200, 0, "tiny", "words")
    assert str(raised.value) == (
        "geometry.long_context.seq_len = 200 exceeds the 128 positions of tiny (its "
        "max_position_embeddings); set it to at most 128"
    )


def _tiny_config(root: Path, long_context: dict) -> dict:
    config = yaml.safe_load(TINY.read_text())
    config["models"] = {"tiny": {"source": {"kind": "local", "path": str(root / "weights")}}}
    config["datasets"] = {"words": {"source": {"kind": "local", "path": str(root / "text.txt")}}}
    config["geometry"] = {"long_context": long_context}
    return config


def test_the_config_check_refuses_a_seq_len_beyond_a_local_models_positions(tiny_setup) -> None:
    """A local model's config.json is read by the config check, before any job; only the limit
    counts (seq_len <= d_model + 1 is allowed: its rows say trivially_separable)."""
    root, _, _, _ = tiny_setup
    with pytest.raises(ConfigError) as raised:
        validate_config(_tiny_config(root, {"n_sequences": 1, "seq_len": 200}))
    assert (
        "geometry.long_context.seq_len: 200 exceeds the 128 positions of models.tiny "
        f"(max_position_embeddings in {root / 'weights' / 'config.json'}); set it to at most 128"
    ) in str(raised.value)
    for allowed in ({"seq_len": 128}, {"seq_len": 8}, {"seq_len": 200, "enabled": False}):
        validate_config(_tiny_config(root, allowed))


def test_the_config_check_refuses_every_length_beyond_a_local_models_positions(tiny_setup) -> None:
    """The StreamingLLM streams and the extraction's sequences (BOS + T) too: a stream longer
    than the positions would make the "dense" reference silently a window."""
    root, _, _, _ = tiny_setup
    config = _tiny_config(root, {"seq_len": 8})
    config["streaming"]["params"]["stream_length"] = 200
    config["extraction"]["context_length"] = 128
    with pytest.raises(ConfigError) as raised:
        validate_config(config)
    where = f"(max_position_embeddings in {root / 'weights' / 'config.json'})"
    assert (
        f"streaming.params.stream_length: 200 exceeds the 128 positions of models.tiny {where}; "
        "set it to at most 128"
    ) in str(raised.value)
    assert (
        f"extraction.context_length: 128 + 1 (BOS) exceeds the 128 positions of models.tiny "
        f"{where}; set it to at most 127"
    ) in str(raised.value)
    config["streaming"] = {"enabled": False}
    config["extraction"]["context_length"] = 127
    validate_config(config)


def test_more_sequences_than_the_corpus_holds_fail_before_the_forward(
    tiny_setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """400 words = 400 tokens hold 400 // 39 = 10 streams of 40 tokens (BOS + 39)."""
    from sinkscope.geometry import long_context

    _, prepared, stream, provenance = tiny_setup

    def no_forward(*args: object) -> None:
        raise AssertionError("the model was run")

    monkeypatch.setattr(long_context, "attention_inputs", no_forward)
    with pytest.raises(ValueError) as raised:
        halfspace_long_context(prepared, stream, provenance, 11, 40, 0, "tiny", "words")
    assert str(raised.value).startswith(
        "geometry.long_context.n_sequences = 11 exceeds the 10 sequences of 40 tokens that corpus "
        f"words holds ({stream}: blocks of 39 tokens after BOS); set it to at most 10 or lower "
        "geometry.long_context.seq_len"
    )
    with pytest.raises(AssertionError, match="the model was run"):  # 10 fit
        halfspace_long_context(prepared, stream, provenance, 10, 40, 0, "tiny", "words")


def test_the_rule_on_a_tiny_model(tiny_setup, tmp_path: Path) -> None:
    root, prepared, stream, provenance = tiny_setup
    config = _tiny_config(root, {"n_sequences": 2, "seq_len": 40})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    target = "results/geometry/tiny/words/halfspace_long_context.parquet"
    command = snakemake_command(tmp_path, "--cores", "1", "--configfile", "config.yaml")
    result = subprocess.run(
        [*command, "--", target],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table = pl.read_parquet(tmp_path / target)
    assert table.columns == list(LONG_CONTEXT_COLUMNS)
    assert (tmp_path / target).with_suffix(".csv").exists()
    assert table.height == 2 * 2 * len(LONG_CONTEXT_POINT_SETS)  # layers x sequences x sets
    assert set(table["point_set"]) == set(LONG_CONTEXT_POINT_SETS)
    assert (table["n_points"] == 39).all() and (table["dim"] == 16).all()
    assert not table["trivially_separable"].any()  # 39 points in 16 dimensions
    log = tmp_path / "results/logs/analyze_geometry_long_context/tiny/words.log"
    assert "half-space solves" in log.read_text()
    # the forward ran in its own job; its file was temporary
    assert "forward" in (tmp_path / "results/logs/extract_long_context/tiny/words.log").read_text()
    assert not (tmp_path / "results/long_context/tiny/words.h5").exists()
    # the same numbers as a direct call on the same streams (StreamingLLM's default seed, 0)
    direct = halfspace_long_context(prepared, stream, provenance, 2, 40, 0, "tiny", "words")
    assert direct.equals(table)

    # the pair's own figure: the long-context panel alone, titled with the claim's counts
    long_counts = long_context_counts(table).row(0, named=True)
    png = tmp_path / "results/geometry/tiny/words/halfspace_long_context.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig, pair_counts = hplots.halfspace_long_context_figure(table, "t")
    assert figure_problems(fig) == []
    (ax,) = fig.axes
    assert "T'=39 > d_model=16" in ax.get_title()
    assert f"{long_counts['n_pairs']}, of which {long_counts['n_trivial']} trivially" in (
        ax.get_title()
    )
    assert pair_counts.row(0, named=True) == long_counts
    # 2 sequences per layer: boxes of some height; one sequence: flat, each median in its set's colour
    one = table.filter(pl.col("sequence") == 0)
    fig, _ = hplots.halfspace_long_context_figure(one, "t")
    colours = {mcolors.to_hex(line.get_color()) for line in fig.axes[0].lines}
    assert {mcolors.to_hex(figure_parts._SET_COLORS[n]) for n in LONG_CONTEXT_POINT_SETS} <= colours
    # the summary figure shows both tests, with the claim's numbers, and stays readable
    fig, counts = hplots.halfspace_margins_figure(_trivial_short("tiny"), "t", table)
    assert figure_problems(fig) == []
    assert len(fig.axes) == 2
    assert "T'=39 > d_model=16" in fig.axes[1].get_title()
    (c,) = counts.iter_rows(named=True)
    assert c["long_n_pairs"] == long_counts["n_pairs"] == 4
    assert c["long_frac_representable_nontrivial"] == long_counts["frac_representable_nontrivial"]
    statements = sink_representable_statements(_trivial_short("tiny"), table)
    assert statements["value"][0] == long_counts["frac_representable_nontrivial"]


def test_the_inputs_file_gives_the_table_of_one_process(
    tiny_setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule extract_long_context's file, read back by analyze_geometry_long_context: the same Z
    (bit for bit), attributes that say what it holds, and the same table as the forward and the
    solves in one process; a file that lacks a layer is refused, naming it."""
    import h5py

    from sinkscope.geometry.long_context import long_context_inputs, solve_long_context
    from sinkscope.geometry.long_context_file import (
        open_long_context_inputs,
        write_long_context_inputs,
    )
    from sinkscope.geometry.names import LONG_CONTEXT_FILE_ATTRS, LONG_CONTEXT_Z

    _, prepared, stream, provenance = tiny_setup
    inputs = long_context_inputs(prepared, stream, provenance, 2, 40, 0, "tiny", "words")
    path = tmp_path / "words.h5"
    write_long_context_inputs(inputs, path)
    with h5py.File(path) as f:
        assert set(f.attrs) == set(LONG_CONTEXT_FILE_ATTRS)
        assert (f.attrs["n_layers"], f.attrs["n_sequences"], f.attrs["seq_len"]) == (2, 2, 40)
        assert f[LONG_CONTEXT_Z.format(layer=1)].shape == (2, 40, 16)
        assert "Proposition 4.1" in f.attrs["description"]
    with open_long_context_inputs(path) as read:
        assert (read.model, read.dataset, read.offsets) == ("tiny", "words", inputs.offsets)
        for layer in range(2):
            np.testing.assert_array_equal(read.layers[layer], inputs.layers[layer])
        from_file = solve_long_context(read, 0)
    direct = halfspace_long_context(prepared, stream, provenance, 2, 40, 0, "tiny", "words")
    assert from_file.equals(direct)
    from sinkscope.cli import main

    assert main(["inspect", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "long-context attention inputs" in shown and "offsets: [" in shown
    assert "attention_inputs/layer_001: (2, 40, 16) float32" in shown
    with h5py.File(path, "a") as f:
        del f[LONG_CONTEXT_Z.format(layer=1)]
    with pytest.raises(ValueError, match="layer_001"), open_long_context_inputs(path):
        pass


@pytest.mark.parametrize("extracted", ["llama"], indirect=True)
def test_the_summary_decides_the_claim_on_the_long_table(extracted, tmp_path: Path) -> None:
    """summarize with a pair's long-context table: the statement (basis long_context), the claim
    row and the figure's long panel give the same numbers; a BOS inside the hull fails it."""
    from sinkscope.heads.classify import classify_file

    _, path, _, _ = extracted
    _, per_head = classify_file(path)
    tables = analyze_file(path, per_head)
    model, dataset = tables["halfspace"]["model"][0], tables["halfspace"]["dataset"][0]
    rng = np.random.default_rng(3)
    z = rng.normal(size=(2, T + 1, D))
    z[:, 0] = z[:, 1:].mean(axis=1)  # in the hull: not representable
    long = _long_rows(z, model, dataset)
    pairs = [{**tables, LONG_CONTEXT_TABLE: long}]
    statements = geometry_statements(summarize(pairs), pairs)
    statement = statements.filter(pl.col("claim") == "sink_representable")
    assert statement["basis"].to_list() == [BASIS_LONG_CONTEXT]
    assert statement["n_cases"].to_list() == [2] and statement["n_trivial"].to_list() == [0]
    (row,) = GC.check_sink_representable(statements, 1.0)
    assert row["verdict"] == V.NOT_REPRODUCED and row["setting"].startswith("long-context")
    counts = hplots.plot_halfspace_margins(
        [tables["halfspace"]], tmp_path / "h.png", "t", long_context=long_context_table(pairs)
    )
    (c,) = counts.iter_rows(named=True)
    assert c["long_frac_representable_nontrivial"] == row["value"] == 0.0
    # without the long table the same summary falls back to the extraction's sequences
    plain = geometry_statements(summarize([tables]), [tables]).filter(
        pl.col("claim") == "sink_representable"
    )
    assert plain["basis"].to_list() == [BASIS_ATTENDING]


def test_switching_the_long_context_off_removes_its_tables_from_the_summary() -> None:
    from sinkscope.outputs import entry, rule_runs
    from sinkscope.paths import Paths

    paths, sets = Paths(), ONE_PAIR
    long_context = entry("analyze_geometry_long_context")
    off = {"geometry": {"long_context": {"enabled": False}}}
    assert not rule_runs(long_context, off, sets)
    assert not [t for t in paths.registered_targets(off, sets) if "long_context" in t]
    on = {"geometry": {"long_context": {"enabled": True}}}
    assert rule_runs(long_context, on, sets)
    assert [t for t in paths.registered_targets(on, sets) if "long_context" in t] == [
        "results/geometry/m/d/halfspace_long_context.parquet",
        "results/geometry/m/d/halfspace_long_context.csv",
        "results/geometry/m/d/halfspace_long_context.png",
    ]
    # a no-BOS pair is in no set but "all": the test cuts its own streams, BOS first
    no_bos = {"all": [("m", "d.no-bos")], "bos": [], "cache": []}
    assert not [t for t in paths.registered_targets(on, no_bos) if "long_context" in t]


#: bfloat16 against float32 half-space margins (the cosine margins of every layer x sequence x
#: point set): at most this far apart, and the same verdicts. Measured: at most 5e-4 on the tiny
#: Llama below (39 points in 16 dimensions, margins 0.08-0.61), 3.4e-3 on SmolLM2-135M and 1.3e-3
#: on Gemma-3-270M (one sequence of 599 / 699 tokens, margins 0.30-0.87 and 0.41-0.80).
BF16_MARGIN_TOL = 0.01


def test_bfloat16_and_float32_give_the_same_half_spaces(
    tiny_setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model runs in the configured dtype on the given device (the forward sees bfloat16
    weights and ids on the CPU) and Z comes back as float32 numpy; the half-space verdicts are
    those of the float32 model and the margins are within :data:`BF16_MARGIN_TOL` of them (and not
    all equal: the bfloat16 model really ran)."""
    from sinkscope.geometry import long_context

    _, prepared, stream, provenance = tiny_setup
    seen: list[tuple[set, torch.device, set]] = []
    forward = long_context.attention_inputs

    def recording(model: torch.nn.Module, ids: torch.Tensor) -> list[np.ndarray]:
        z_layers = forward(model, ids)
        dtypes = {param.dtype for param in model.parameters()}
        seen.append((dtypes, ids.device, {z.dtype for z in z_layers}))
        return z_layers

    monkeypatch.setattr(long_context, "attention_inputs", recording)
    tables = {
        dtype: halfspace_long_context(
            prepared, stream, provenance, 2, 40, 0, "tiny", "words", dtype=dtype, device="cpu"
        )
        for dtype in ("float32", "bfloat16")
    }
    cpu = torch.device("cpu")
    assert seen == [
        ({torch.float32}, cpu, {np.dtype(np.float32)}),
        ({torch.bfloat16}, cpu, {np.dtype(np.float32)}),
    ]
    full, half = tables["float32"], tables["bfloat16"]
    keys = ["layer", "sequence", "point_set", "n_points", "dim", "rank", "halfspace"]
    assert full.select(keys).equals(half.select(keys))
    difference = (full["margin"] - half["margin"]).abs()
    assert 0 < difference.max() <= BF16_MARGIN_TOL, difference.to_list()
    # the default: the dtype the model was prepared in (float32), the same table
    assert halfspace_long_context(
        prepared, stream, provenance, 2, 40, 0, "tiny", "words", device="cpu"
    ).equals(full)


def test_the_long_context_step_loads_the_model_as_the_config_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rule extract_long_context passes the model entry's dtype and attention kernel and
    extraction.device from the config, not from its params (the device is no rerun trigger)."""
    from sinkscope import steps
    from sinkscope.geometry import long_context, long_context_file

    seen: dict = {}

    def forward(*args: object, **kwargs: object) -> str:
        seen.update(kwargs)
        return "inputs"

    monkeypatch.setattr(long_context, "long_context_inputs", forward)
    monkeypatch.setattr(long_context_file, "write_long_context_inputs", lambda *args: None)
    smk = SimpleNamespace(
        config={
            "models": {"m": {"dtype": "bfloat16", "attn_implementation": "eager"}},
            "extraction": {"device": "auto"},
        },
        wildcards=SimpleNamespace(model="m", dataset="d"),
        input=SimpleNamespace(model_dir="m", stream="s", provenance="p"),
        params=SimpleNamespace(
            long_context=long_context_params(
                {"geometry": {"long_context": {**schema_default("geometry", "long_context")}}},
                LONG_CONTEXT_INPUT_KEYS,
            ),
            stream_seed=0,
        ),
        output=SimpleNamespace(inputs="out.h5"),
        threads=1,
    )
    steps.extract_long_context(smk)
    assert {key: seen[key] for key in ("dtype", "attn_implementation", "device")} == {
        "dtype": "bfloat16",
        "attn_implementation": "eager",
        "device": "auto",
    }
