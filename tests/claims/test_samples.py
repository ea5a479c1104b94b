"""What sample decides each claim (sinkscope.claims.samples): every claim has one, its config
keys exist, claims.md states the run's values of them, and the power each config gives a claim
(units had against units needed) matches what the checks count and what docs/claims.md prints."""

from __future__ import annotations

from typing import Any

import polars as pl

from sinkscope.claims import verdicts as V
from sinkscope.claims.registry import CLAIMS
from sinkscope.claims.render import claims_markdown
from sinkscope.claims.samples import (
    SAMPLES,
    Power,
    config_value,
    power_of,
    power_table,
    power_text,
    unanimous_runs_needed,
)
from sinkscope.config import load_layered_config, validate_config
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
    assert config_value(short, "streaming.params.recompute_samples") == 64
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
        "- `heads.sinks_common`: the extraction's sequences per pair (bootstrap-SE t-interval; a "
        "pooled row resamples each dataset's own); this run: `extraction.n_sequences` = 2; "
        "needs 2 sequences per dataset, has 2 (enough)"
    ) in text
    assert "## What decides each claim" not in claims_markdown(table)


#: The scales docs/claims.md compares, as its table names them.
SCALES = {
    "short (`config.yaml`)": [REPO / "config.yaml"],
    "full offline (`+ config/offline-full.yaml`)": [
        REPO / "config.yaml",
        REPO / "config" / "offline-full.yaml",
    ],
    "paper (`config/paper.yaml`)": [REPO / "config" / "paper.yaml"],
}


def test_the_power_counts_what_the_checks_count() -> None:
    """Independent counts: the tiny config by hand (2 sequences; 96-token stream, largest window
    32, blocks of 16: (96 - 32 - 1) // 16 = 3 blocks; one seed per setup), Wilson's unanimous
    share first excluding 0.5 at 4 of 4 ([0.51, 1]), and the short run's by hand."""
    from sinkscope.stats.intervals import wilson_interval

    tiny = validate_config(load_layered_config([TINY]))
    # an interval needs two units for a spread; Student's t widens it at every count above
    assert power_of("heads.sinks_common", tiny) == Power(2, 2, "sequences per dataset")
    assert power_of("streaming.eviction_hurts", tiny) == Power(
        3, 2, "blocks of scored positions at the largest window (more at smaller ones)"
    )
    assert power_of("dynamics.flip_rate_decreases", tiny) == Power(1, 2, "seeds per setup")
    assert not power_of("dynamics.softmax_sinks_emerge", tiny).enough
    assert power_of("costs.backcopy_slopes", tiny) is None
    assert power_of("oversmoothing.predicted_signs", tiny).enough  # the model's heads
    # a bootstrap over a model's heads: every scale has them
    value_small = power_of("geometry.sink_bos_value_small", tiny)
    assert value_small.enough and value_small.need == 2
    assert "2 or more, else inconclusive" in power_text(value_small)
    assert unanimous_runs_needed() == 4
    assert wilson_interval(3, 3)[0] <= 0.5 < wilson_interval(4, 4)[0]
    # at a 99% level 5 seeds are too few (6 of 6: [0.47, 1]; 7 of 7: [0.51, 1])
    strict = validate_config(
        load_layered_config([REPO / "config.yaml"]) | {"claims": {"intervals": {"level": 0.99}}}
    )
    assert wilson_interval(6, 6, 0.99)[0] <= 0.5 < wilson_interval(7, 7, 0.99)[0]
    assert power_of("dynamics.logistic_polarizes", strict) == Power(5, 7, "seeds per setup")
    short = validate_config(load_layered_config([REPO / "config.yaml"]))
    # 256-token stream, windows 32 and 64: (256 - 64 - 1) // 16
    assert power_of("streaming.eviction_hurts", short).have == 11
    assert power_of("streaming.sinks_restore", short).have == 64
    assert power_of("dynamics.logistic_polarizes", short).have == 5
    # the short run selects seeds 0 and 1 and no switch; the full scale trains seeds 0-2 of the
    # sink claim's setups (and keeps one seed per switch)
    full = validate_config(
        load_layered_config([REPO / "config.yaml", REPO / "config" / "offline-full.yaml"])
    )
    assert power_of("dynamics.softmax_sinks_emerge", short).have == 2
    assert power_of("dynamics.softmax_sinks_emerge", full).have == 3
    assert power_of("dynamics.other_switch_replaces_sink", short).have == 0
    assert power_of("dynamics.other_switch_replaces_sink", full).have == 1


def test_the_tiny_runs_eviction_rows_have_the_blocks_the_power_counts(tiny_run) -> None:
    """The power of streaming.eviction_hurts is the fewest blocks any window's row resamples:
    read back from the tiny run's own claims table, whose rows name their scored positions."""
    import re

    claims = pl.read_csv(tiny_run / "results" / "claims.csv")
    rows = claims.filter(pl.col("claim_id") == "streaming.eviction_hurts")
    positions = [
        int(m.group(1))
        for text in rows["interval"].drop_nulls()
        if (m := re.search(r"over (\d+) scored positions", text))
    ]
    assert positions
    tiny = validate_config(load_layered_config([TINY]))
    block = tiny["claims"]["intervals"]["block_tokens"]
    assert min(positions) // block == power_of("streaming.eviction_hurts", tiny).have


def test_the_claims_guide_prints_each_scales_power() -> None:
    """docs/claims.md's table of what decides each claim at each scale is
    :func:`power_table` of the three configs: a change to a scale or a floor moves it."""
    configs = {name: validate_config(load_layered_config(files)) for name, files in SCALES.items()}
    table = power_table(configs, [claim.id for claim in CLAIMS])
    guide = (REPO / "docs" / "claims.md").read_text()
    assert table in guide, "docs/claims.md should hold this table:\n" + table
