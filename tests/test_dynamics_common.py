"""Grid selection and the dynamics config section (sinkscope.dynamics.common, sinkscope.config)."""

from __future__ import annotations

import pytest

from sinkscope.config import ConfigError, validate_config
from sinkscope.dynamics.common import dynamics_jobs, select_specs


def test_select_specs_uses_defaults_and_rejects_unknown_keys() -> None:
    specs = [{"loss": "kl", "seed": 0}, {"loss": "square", "activation": "sum", "seed": 1}]
    defaults = {"activation": "softmax", "loss": "logistic", "seed": 0}
    assert select_specs(specs, {"activation": ["softmax"]}, defaults) == specs[:1]
    assert select_specs(specs, {"seed": [0, 1], "loss": ["square"]}, defaults) == specs[1:]
    assert select_specs(specs, {}, defaults) == specs
    with pytest.raises(KeyError, match="colour"):
        select_specs(specs, {"colour": ["red"]}, defaults)


def test_dynamics_jobs_of_the_default_and_paper_scales() -> None:
    default = dynamics_jobs({})
    assert {part: len(jobs) for part, jobs in default.items()} == {
        "value_softmax": 36,
        "induction": 26,
        "classification": 18,
    }
    assert all(spec["id"] == run for jobs in default.values() for run, spec in jobs.items())
    off = dynamics_jobs({"enabled": False})
    assert all(not jobs for jobs in off.values())
    one = dynamics_jobs(
        {
            "induction": {"select": {"attention": ["softmax"], "positional": ["rope"]}},
            "classification": {"enabled": False},
        }
    )
    assert len(one["induction"]) == 2 and not one["classification"]


def test_bad_dynamics_sections_are_rejected_naming_the_key(default_config: dict) -> None:
    for section, key in (
        ({"induction": {"overrides": {"colour": 1}}}, "dynamics.induction.overrides"),
        ({"induction": {"overrides": {"attention": "nope"}}}, "dynamics.induction.overrides"),
        ({"classification": {"select": {"colour": [1]}}}, "dynamics.classification.select"),
        ({"value_softmax": {"select": {"seed": [99]}}}, "dynamics.value_softmax.select"),
        ({"value_softmax": {"scale": "huge"}}, "dynamics.value_softmax.scale"),
        ({"bogus": True}, "dynamics"),
    ):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            validate_config({**default_config, "dynamics": section})
    filled = validate_config(default_config)["dynamics"]
    assert filled["enabled"] and filled["induction"] == {
        "enabled": True,
        "scale": "default",
        "overrides": {},
        "select": {},
    }
