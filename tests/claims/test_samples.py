"""What sample decides each claim (sinkscope.claims.samples): every claim has one, its config
keys exist, and claims.md states the run's values of them."""

from __future__ import annotations

from typing import Any

import polars as pl

from sinkscope.claims import verdicts as V
from sinkscope.claims.registry import CLAIMS
from sinkscope.claims.render import claims_markdown
from sinkscope.claims.samples import SAMPLES, config_value
from sinkscope.config import load_layered_config
from sinkscope.defaults import STREAMING_PARAMS
from tests.conftest import REPO, TINY


def _has(config: dict[str, Any], key: str) -> bool:
    if key.startswith("streaming.params."):
        return key.removeprefix("streaming.params.") in STREAMING_PARAMS
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_every_claim_states_its_sample_with_keys_of_the_config() -> None:
    assert set(SAMPLES) == {claim.id for claim in CLAIMS}
    config = load_layered_config([REPO / "config.yaml"])
    for claim_id, sample in SAMPLES.items():
        assert sample.unit, claim_id
        for key in sample.keys:
            assert _has(config, key), (claim_id, key)


def test_claims_md_states_the_runs_sample() -> None:
    """The short run and the tiny config differ in these keys, and claims.md says which."""
    tiny = load_layered_config([TINY])
    short = load_layered_config([REPO / "config.yaml"])
    assert config_value(tiny, "extraction.n_sequences") == 2
    assert config_value(short, "extraction.n_sequences") == 8
    assert config_value(short, "streaming.params.recompute_samples") == 8
    assert config_value(short, "dynamics.value_softmax.select") == "default"  # the whole grid
    assert config_value(short, "dynamics.induction.select")["attention"] == ["softmax", "sigmoid"]
    row = {c: None for c in V.COLUMNS} | {
        "claim_id": "heads.sinks_common",
        "claim": "c",
        "model": "m",
        "dataset": "d",
        "verdict": V.REPRODUCED,
        "value": 0.4,
    }
    table = pl.DataFrame([row], schema=V.COLUMNS)
    text = claims_markdown(table, config=tiny)
    assert "## What decides each claim" in text
    assert (
        "- `heads.sinks_common`: the extraction's sequences per pair (bootstrap over them; a "
        "pooled row resamples each dataset's own, so its floor is per dataset); "
        "this run: `extraction.n_sequences` = 2"
    ) in text
    assert "## What decides each claim" not in claims_markdown(table)
