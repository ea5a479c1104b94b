"""The claims' default tolerances come from the config schema (stated there once, with a reason)
and the config's ``claims`` section overrides them per key."""

from __future__ import annotations

import pytest

from sinkscope.claims.tolerances import DEFAULT_TOLERANCES, resolve_tolerances


def test_default_tolerances_are_the_schemas_numbers() -> None:
    # the paper's own numbers (§7, Fig. 1, Fig. 7) and StreamingLLM's four sink tokens
    assert DEFAULT_TOLERANCES["heads"]["diagonal_fraction_range"] == [0.006, 0.095]
    assert DEFAULT_TOLERANCES["heads"]["sink_prev_fraction_range"] == [0.13, 0.21]
    assert DEFAULT_TOLERANCES["geometry"]["bos_cosine_max"] == 0.0
    assert DEFAULT_TOLERANCES["oversmoothing"]["approximation_error"] == 0.1
    assert DEFAULT_TOLERANCES["streaming"]["max_sink_tokens"] == 4
    assert DEFAULT_TOLERANCES["costs"]["toy_rtol"] == 1e-6
    assert DEFAULT_TOLERANCES["intervals"]["level"] == 0.95
    assert list(DEFAULT_TOLERANCES) == [
        "intervals",
        "heads",
        "geometry",
        "oversmoothing",
        "costs",
        "streaming",
        "dynamics",
    ]


def test_resolve_tolerances_overrides_one_key_and_rejects_unknown_ones() -> None:
    resolved = resolve_tolerances({"oversmoothing": {"most": 0.75}})
    assert resolved["oversmoothing"]["most"] == 0.75
    assert DEFAULT_TOLERANCES["oversmoothing"]["most"] == 0.5  # the defaults stay as they are
    assert (
        resolved["oversmoothing"]["half_band"] == DEFAULT_TOLERANCES["oversmoothing"]["half_band"]
    )
    with pytest.raises(KeyError, match="claims.geometry.bos_cosine"):
        resolve_tolerances({"geometry": {"bos_cosine": 0.5}})
    with pytest.raises(KeyError, match="claims.head: unknown group"):
        resolve_tolerances({"head": {}})
