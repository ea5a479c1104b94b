"""The config section ``sinks``: defaults from the schema, bad values rejected naming the key."""

from __future__ import annotations

import pytest

from sinkscope.config import ConfigError, validate_config
from sinkscope.config_schema import schema_default
from sinkscope.sinks.analysis import SinkSettings


def test_settings_defaults_are_the_schema_defaults(default_config: dict) -> None:
    defaults = schema_default("sinks")
    assert SinkSettings() == SinkSettings.from_config(defaults)
    assert SinkSettings.from_config(validate_config(default_config)["sinks"]) == SinkSettings()
    assert 0.3 in SinkSettings().thresholds and defaults["eps"] == 0.3
    assert SinkSettings(eps=0.25, eps_sweep=(0.5, 0.1)).thresholds == (0.1, 0.25, 0.5)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("prefix_positions", [64, 300], "[300]"),
        ("prefix_positions", [4], "need P > K"),
        ("max_key_position", 257, "extraction.context_length"),
        ("eps", 0.0, "sinks.eps"),
        ("massive_ratio", 1, "sinks.massive_ratio"),
    ],
)
def test_bad_values_rejected_naming_the_key(
    default_config: dict, key: str, value, words: str
) -> None:
    default_config.setdefault("sinks", {})[key] = value
    with pytest.raises(ConfigError) as caught:
        validate_config(default_config)
    message = str(caught.value)
    assert f"sinks.{key}" in message and words in message
