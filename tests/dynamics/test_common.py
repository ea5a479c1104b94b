"""Grid selection, the dynamics config section and the rule paths (sinkscope.dynamics.grids,
sinkscope.config, sinkscope.paths)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sinkscope.config import ConfigError, validate_config
from sinkscope.dynamics import grids
from sinkscope.dynamics.common import dynamics_jobs, select_specs
from sinkscope.paths import Paths
from tests.conftest import ONE_PAIR


def test_select_specs_uses_defaults_and_rejects_unknown_keys() -> None:
    specs = [{"loss": "kl", "seed": 0}, {"loss": "square", "activation": "sum", "seed": 1}]
    defaults = {"activation": "softmax", "loss": "logistic", "seed": 0}
    assert select_specs(specs, {"activation": ["softmax"]}, defaults) == specs[:1]
    assert select_specs(specs, {"seed": [0, 1], "loss": ["square"]}, defaults) == specs[1:]
    assert select_specs(specs, {}, defaults) == specs
    with pytest.raises(KeyError, match="colour"):
        select_specs(specs, {"colour": ["red"]}, defaults)
    # a listed value that no job of the grid has is a typo (or another scale's value)
    with pytest.raises(KeyError, match=r"loss: no job of the grid has \['sqaure'\]"):
        select_specs(specs, {"loss": ["square", "sqaure"]}, defaults)


def test_dynamics_jobs_of_the_default_and_paper_scales() -> None:
    default = dynamics_jobs({})
    assert {part: len(jobs) for part, jobs in default.items()} == {
        "value_softmax": 63,  # 9 untied runs x 5 seeds, 9 tied and regression runs x 2
        "induction": 60,  # 26 of Table 1 and the PE axis, 24 later seeds, 10 switches
        "classification": 18,
    }
    assert all(spec["id"] == run for jobs in default.values() for run, spec in jobs.items())
    # Table 1's 26 runs keep their ids (seed 0); each other switch is a softmax run of the same
    # setups
    switched = [spec for spec in default["induction"].values() if "switch" in spec]
    assert len(switched) == 10
    assert {s["switch"] for s in switched} == set(grids.SWITCHES[1:])
    assert all(
        s["attention"] == "softmax" and s["positional"] == "rope" and s["seed"] == 0
        for s in switched
    )
    assert "softmax-pe=rope-wd=0.0-seed=0-" in " ".join(default["induction"])
    paper = dynamics_jobs({"induction": {"scale": "paper"}})["induction"]
    assert len(paper) == 198 + 5 * 3 * 2 * 3
    off = dynamics_jobs({"enabled": False})
    assert all(not jobs for jobs in off.values())
    softmax = {"attention": ["softmax"], "positional": ["rope"]}
    one = dynamics_jobs(
        {
            "induction": {"select": {**softmax, "switch": ["none"]}},
            "classification": {"enabled": False},
        }
    )
    # softmax at RoPE: 2 weight decays x the sink claim's 3 seeds
    assert len(one["induction"]) == 2 * len(grids.INDUCTION_SINK_SEEDS)
    assert not one["classification"]
    # softmax selects its other switches too (the same softmax head with another switch)
    # and with its 5 other switches x 2 weight decays
    assert len(dynamics_jobs({"induction": {"select": softmax}})["induction"]) == 6 + 10


def test_bad_dynamics_sections_are_rejected_naming_the_key(default_config: dict) -> None:
    for section, key in (
        ({"induction": {"overrides": {"colour": 1}}}, "dynamics.induction.overrides"),
        ({"induction": {"overrides": {"attention": "nope"}}}, "dynamics.induction.overrides"),
        ({"induction": {"overrides": {"switch": "softpik"}}}, "induction.overrides: switch"),
        ({"induction": {"select": {"switch": ["softpik"]}}}, 'induction.select: "switch'),
        ({"induction": {"overrides": {"pos_init_std": 0.0}}}, "induction.overrides: pos_init_std"),
        ({"induction": {"overrides": {"lr": -1e-3}}}, "induction.overrides: lr"),
        ({"induction": {"overrides": {"epochs": 2.5}}}, "induction.overrides: epochs"),
        ({"induction": {"overrides": {"use_mlp": 1}}}, "induction.overrides: use_mlp"),
        ({"classification": {"overrides": {"seed": -1}}}, "classification.overrides: seed"),
        ({"value_softmax": {"overrides": {"steps": 0}}}, "value_softmax.overrides: steps"),
        ({"classification": {"select": {"colour": [1]}}}, "dynamics.classification.select"),
        ({"value_softmax": {"select": {"seed": [99]}}}, "dynamics.value_softmax.select"),
        ({"value_softmax": {"scale": "huge"}}, "dynamics.value_softmax.scale"),
        ({"bogus": True}, "dynamics"),
    ):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            validate_config({**default_config, "dynamics": section})
    # zero where zero means something, any sign where the sign is free, ints for floats
    validate_config(
        {
            **default_config,
            "dynamics": {
                "induction": {"overrides": {"lr": 1, "curve_every": 10}},
                "classification": {"overrides": {"weight_decay": 0}},
                "value_softmax": {"overrides": {"init_a": -0.5}},
            },
        }
    )
    without = {key: value for key, value in default_config.items() if key != "dynamics"}
    filled = validate_config(without)["dynamics"]
    assert filled["enabled"] and filled["induction"] == {
        "enabled": True,
        "scale": "default",
        "overrides": {},
        "select": {},
    }


def test_grids_are_torch_free_and_re_exported() -> None:
    """The workflow parses the grids on every call: importing them must not import torch."""
    code = (
        "import sys; from sinkscope.dynamics.grids import dynamics_jobs; "
        "jobs = dynamics_jobs({}); print(len(jobs['induction']), 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["60", "False"]
    from sinkscope.dynamics import classification, common, induction, value_softmax

    assert induction.PAPER_INDUCTION is grids.PAPER_INDUCTION
    assert induction.induction_grid is grids.induction_grid
    assert value_softmax.DEFAULTS is grids.VALUE_SOFTMAX_DEFAULTS
    assert classification.classification_grid is grids.classification_grid
    assert common.dynamics_jobs is grids.dynamics_jobs


def test_dynamics_rule_paths_and_minutes() -> None:
    paths = Paths("R")
    run = paths.dynamics_run_outputs()
    assert run["induction"] == {
        "final": "R/dynamics/induction/runs/{run}/final.parquet",
        "curve": "R/dynamics/induction/runs/{run}/curve.parquet",
        "heads": "R/dynamics/induction/runs/{run}/heads.parquet",
        "pattern": "R/dynamics/induction/runs/{run}/pattern.parquet",
        "switches": "R/dynamics/induction/runs/{run}/switches.parquet",
        "timing": "R/dynamics/induction/runs/{run}/timing.json",
    }
    inputs = paths.dynamics_summary_inputs({"induction": {"b": {}, "a": {}}})
    assert inputs["induction"]["timing"] == [
        "R/dynamics/induction/runs/a/timing.json",
        "R/dynamics/induction/runs/b/timing.json",
    ]
    assert inputs["value_softmax"]["final"] == [] and set(inputs) == set(run)

    calls: list[tuple[str, dict]] = []

    def report(path: str, **kwargs: object) -> str:
        calls.append((path, kwargs))
        return f"report:{path}"

    out = {
        part: paths.rule_outputs(f"summarize_dynamics_{part}", report)
        for part in ("value_softmax", "induction", "classification")
    }
    assert list(out["classification"]) == [
        "table_final",
        "table_final_csv",
        "table_by_setup",
        "table_by_setup_csv",
        "table_curve",
        "table_curve_csv",
        "table_attention",
        "table_attention_csv",
        "figure_flips",
        "figure_flips_by_size",
        "figure_attention",
    ]
    assert out["classification"]["table_curve_csv"] == "R/dynamics/classification/curve.csv"
    assert out["induction"]["figure_sinks"] == "report:R/dynamics/induction/sinks.png"
    assert len(calls) == 13  # 5 value-softmax + 5 induction + 3 classification figures
    rules = Path(__file__).parents[2] / "workflow" / "rules"
    for path, kwargs in calls:
        assert kwargs["category"] == "Training dynamics (companion paper)"
        assert (rules / str(kwargs["caption"])).is_file(), kwargs["caption"]
        assert path.endswith(f"{kwargs['labels']['figure']}.png")  # type: ignore[index]
    plain = paths.rule_outputs("summarize_dynamics_value_softmax")
    assert plain["figure_tied"] == "R/dynamics/value_softmax/tied.png"
    # the summary rules write exactly the workflow's dynamics targets
    config = {"dynamics": {"enabled": True}}
    targets = [t for t in paths.registered_targets(config, ONE_PAIR) if "/dynamics/" in t]
    written = [p.removeprefix("report:") for part in out.values() for p in part.values()]
    assert sorted(targets) == sorted(written)

    assert grids.dynamics_minutes({}) == {"value_softmax": 5, "induction": 10, "classification": 10}
    assert grids.dynamics_minutes({"induction": {"scale": "paper"}})["induction"] == 180
