"""Which models StreamingLLM's cache policies and Theorem 5.1's claims apply to: read from the
models' own config.json (kept paper configs, prepared and local models), decided once, and
followed by the target list, the summary's inputs, the claims table and the evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from sinkscope.claims import registry as R
from sinkscope.claims import verdicts as V
from sinkscope.claims.applicability import (
    CACHE_POLICY_CLAIMS,
    THEOREM_CLAIMS,
    not_applicable_claims,
)
from sinkscope.config import bos_pairs, load_layered_config, validate_config
from sinkscope.paths import Paths
from sinkscope.prepare.model_config import (
    MODEL_CONFIGS,
    config_json,
    has_learned_sinks,
    has_rotary_positions,
)
from sinkscope.streaming.applicability import cache_pairs, cache_policies_problem
from tests.claims.test_claims import streaming_sink_heads
from tests.conftest import pair_sets, tiny_config

REPO = Path(__file__).resolve().parents[2]
PAPER = validate_config(load_layered_config([REPO / "config" / "paper.yaml"]))
GPT2_MODELS = {"gpt2", "gpt2-medium", "gpt2-xl"}


@pytest.mark.parametrize("path", sorted(MODEL_CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_kept_configs_say_which_positions_and_sinks_they_have(path: Path) -> None:
    """GPT-2 adds learned absolute positions to its inputs; Llama, Gemma, Mistral and gpt-oss
    rotate queries and keys (RoPE); only gpt-oss has learned sink logits."""
    kept = json.loads(path.read_text())
    assert has_rotary_positions(kept) == (kept["model_type"] != "gpt2")
    assert has_learned_sinks(kept) == (kept["model_type"] == "gpt_oss")


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_oss", "gpt2"])
def test_transformers_configs_agree_with_their_model(family: str) -> None:
    """The config keys agree with the model transformers builds from them: a rotary embedding
    module exactly where the keys say rotary positions (what the evaluator needs)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config(family)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    has_rotary = hasattr(model.base_model, "rotary_emb")
    assert has_rotary_positions(config.to_dict()) == has_rotary == (family != "gpt2")
    assert has_learned_sinks(config.to_dict()) == (family == "gpt_oss")


def test_paper_config_leaves_gpt2_out_of_the_cache_evaluation() -> None:
    for model in PAPER["models"]:
        problem = cache_policies_problem(PAPER, model)
        assert (problem is not None) == (model in GPT2_MODELS), model
        if problem:
            assert f"models.{model}" in problem and "rotary" in problem
    kept = cache_pairs(PAPER, bos_pairs(PAPER))
    assert {m for m, _ in kept} == set(PAPER["models"]) - GPT2_MODELS
    targets = Paths("results").registered_targets(PAPER, pair_sets(PAPER))
    targets = [t for t in targets if "/streaming/" in t]
    gpt2 = [t for t in targets if "/gpt2/" in t]
    assert gpt2 and all("first_position_mass" in t for t in gpt2)  # from the activation file
    assert any("/llama-3.1-8b/" in t and "perplexity" in t for t in targets)
    assert any(t.startswith("results/summary/streaming/") for t in targets)
    # only GPT-2: no pair under the caches, hence no summary (and no claims input of it)
    only_gpt2 = {**PAPER, "models": {m: PAPER["models"][m] for m in GPT2_MODELS}}
    sets = pair_sets(only_gpt2)
    assert sets["cache"] == []
    none = [t for t in Paths("results").registered_targets(only_gpt2, sets) if "streaming" in t]
    assert none and not any("/summary/" in t for t in none)
    assert "streaming_sink_heads" not in Paths("results").claims_inputs(only_gpt2, sets)


def test_unknown_configs_are_taken_to_apply(tmp_path: Path) -> None:
    """A hub model that is neither prepared nor kept has no config at hand: scheduled (the
    evaluator refuses it later with the reason); a local model's own config.json decides."""
    config = {"models": {"x": {"source": {"kind": "hub", "id": "org/x", "revision": "main"}}}}
    assert config_json(config, "x", tmp_path) is None
    assert cache_policies_problem(config, "x", tmp_path) is None
    folder = tmp_path / "local-gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(tiny_config("gpt2").to_json_string())
    local = {"models": {"y": {"source": {"kind": "local", "path": str(folder)}}}}
    assert config_json(local, "y", tmp_path)[1] == "local"
    assert "models.y" in cache_policies_problem(local, "y", tmp_path)


def test_claims_that_do_not_apply_are_replaced_with_their_reason() -> None:
    """Each claim row of a model a claim does not apply to becomes one not-applicable row with
    the reason: the planted reading (a reproduced eviction damage) is not reported for it."""
    na = not_applicable_claims(PAPER)
    assert set(na) == {*CACHE_POLICY_CLAIMS, *THEOREM_CLAIMS}
    assert all(set(na[c]) == GPT2_MODELS for c in CACHE_POLICY_CLAIMS)
    assert all(set(na[c]) == {"gpt-oss-20b"} for c in THEOREM_CLAIMS)
    sink_heads = streaming_sink_heads(3.0, 1.05)  # model "m": eviction hurts, reproduced
    both = pl.concat([sink_heads, sink_heads.with_columns(model=pl.lit("gpt2"))])
    claim = [c for c in R.CLAIMS if c.id == "streaming.eviction_hurts"]
    plain = R.evaluate_claims({"streaming_sink_heads": both}, None, claims=claim)
    assert plain["verdict"].to_list() == [V.REPRODUCED, V.REPRODUCED]
    table = R.evaluate_claims({"streaming_sink_heads": both}, None, claims=claim, not_applicable=na)
    # every configured GPT-2 model gets its row, whether or not the tables had one for it
    gpt2 = sorted(GPT2_MODELS)
    assert table.select("model", "verdict").rows() == [
        ("m", V.REPRODUCED),
        *((m, V.NOT_APPLICABLE) for m in gpt2),
    ]
    assert all("absolute position" in r for r in table["reason"][1:])
    # a missing summary (no pair under the caches): the reason, not "analysis not run"
    missing = R.evaluate_claims({}, None, gpt2, claims=claim, not_applicable=na)
    assert missing.select("model", "verdict").rows() == [(m, V.NOT_APPLICABLE) for m in gpt2]
    assert all("absolute position" in r for r in missing["reason"])


def test_default_config_has_no_claim_that_does_not_apply() -> None:
    """The offline default's models (SmolLM2, Gemma 3) are RoPE models without learned sinks:
    its claims table is unchanged by the applicability rules."""
    default = validate_config(load_layered_config([REPO / "config.yaml"]))
    assert not_applicable_claims(default) == {}


def test_evaluator_refuses_a_model_without_rotary_positions() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from sinkscope.streaming.evaluator import StreamingEvaluator

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("gpt2"))
    with pytest.raises(ValueError, match="absolute position embeddings.*run it again"):
        StreamingEvaluator(model)
