"""``sinkscope.steps``: what a failing job shows on the console beside its log, and the one
script every rule runs (``run(snakemake.rule, snakemake)``) finds a step for every rule."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from types import SimpleNamespace
from sinkscope import steps

def broken(smk):
    print("progress on stderr", file=sys.stderr)
    raise ValueError("models.tiny.bos_token_id: 99 is outside the vocabulary\\nsecond line")

steps.STEPS["broken_step"] = broken
smk = SimpleNamespace(log=[sys.argv[1]], output=[sys.argv[2]], wildcards={"model": "tiny"})
steps.run("broken_step", smk)
"""


def test_a_failing_step_writes_its_sentence_to_the_console_and_the_traceback_to_the_log(
    tmp_path: Path,
) -> None:
    log, output = tmp_path / "logs" / "job.log", tmp_path / "out.parquet"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log), str(output)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode != 0
    assert result.stderr == (
        "sinkscope broken_step failed: ValueError: models.tiny.bos_token_id: 99 is outside the "
        f"vocabulary (traceback: {log})\n"
    )
    text = log.read_text()
    assert "progress on stderr" in text and "Traceback" in text and "second line" in text


REPO = Path(__file__).resolve().parents[1]
RULE = re.compile(r"^rule (\w+):$", re.MULTILINE)
SCRIPT_LINE = re.compile(r"^    script:\n        \"([^\"]+)\"$", re.MULTILINE)


def _rule_scripts() -> dict[str, list[str]]:
    """The ``script:`` of every rule of the Snakefile and workflow/rules/*.smk (none: a target)."""
    scripts: dict[str, list[str]] = {}
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        blocks = RULE.split(path.read_text())
        for name, body in zip(blocks[1::2], blocks[2::2], strict=True):
            scripts[name] = SCRIPT_LINE.findall(body)
    return scripts


def test_every_rule_runs_the_one_script_and_has_a_step() -> None:
    from sinkscope.steps import STEPS

    listed = subprocess.run(
        [sys.executable, "-m", "snakemake", "--list-rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout.split()
    scripts = _rule_scripts()
    assert sorted(scripts) == sorted(listed)  # the parsing above saw every rule
    with_script = {name for name, found in scripts.items() if found}
    assert with_script == set(STEPS), with_script ^ set(STEPS)
    assert {found[0] for found in scripts.values() if found} == {"../scripts/step.py"}
    targets = set(scripts) - with_script
    assert targets == {"all"}, f"rules with neither a step nor a target's role: {targets}"
    assert (REPO / "workflow" / "scripts" / "step.py").is_file()
    assert sorted(p.name for p in (REPO / "workflow" / "scripts").iterdir()) == ["step.py"]


def test_every_figure_a_rule_writes_has_one_drawing_function() -> None:
    """The ``{name: Draw}`` dicts of the stages' plots modules name exactly the figures of the
    stage's ``names.py``, the one place each name is stated (:mod:`sinkscope.paths` reads it
    too), so :func:`sinkscope.steps._draw` fills every output ``figure_<name>`` (the drawing is
    lazy: nothing is drawn here)."""
    from sinkscope import paths
    from sinkscope.costs import names as cost_names
    from sinkscope.costs import plots as costs
    from sinkscope.dynamics import names as dynamics_names
    from sinkscope.dynamics import plots as dynamics
    from sinkscope.geometry import names as geometry_names
    from sinkscope.geometry import plots as geometry
    from sinkscope.heads import names as heads_names
    from sinkscope.heads import plots as heads
    from sinkscope.oversmoothing import names as oversmoothing_names
    from sinkscope.oversmoothing import plots as oversmoothing
    from sinkscope.streaming import names as streaming_names
    from sinkscope.streaming import plots as streaming

    none = dict.fromkeys(("per_head", "per_layer"))
    assert tuple(heads.pair_figures(None, "", None)) == heads_names.FIGURES
    assert tuple(heads.summary_figures(None, None)) == (heads_names.SUMMARY,)
    assert paths.Paths("r").heads_summary_figure == "r/summary/head_classes.png"
    assert tuple(geometry.pair_figures({}, "")) == geometry_names.FIGURES
    assert tuple(geometry.summary_figures({}, [], None, "")) == geometry_names.FIGURES
    assert tuple(oversmoothing.figures(none)) == oversmoothing_names.FIGURES
    for names in (
        streaming_names.POLICY_FIGURES,
        streaming_names.RECOMPUTE_FIGURES,
        streaming_names.FIRST_POSITION_FIGURES,
        streaming_names.SUMMARY_FIGURES,
    ):
        assert tuple(streaming.figures(names, {}, "")) == names
    # one drawing function per named figure of each part, none unused
    assert tuple(dynamics.PLOTS) == dynamics_names.PARTS
    for part, names in dynamics_names.FIGURES.items():
        assert tuple(dynamics.PLOTS[part]) == names
        assert tuple(dynamics.figures(part, {})) == names
    # the costs rules write the figures of their names (outputs: paths.Paths.cost_outputs)
    for draws, names in (
        (costs.toy_figures([]), cost_names.TOY_FIGURES),
        (costs.backcopy_figures([], [], {}), cost_names.BACKCOPY_FIGURES),
        (costs.copypaste_figures([]), cost_names.COPYPASTE_FIGURES),
    ):
        assert tuple(draws) == names
    layout = paths.Paths("r")
    figure_paths = [p for p in layout.cost_targets({"enabled": True}) if p.endswith(".png")]
    assert figure_paths == [f"r/costs/{name}.png" for name in cost_names.FIGURES]


def test_the_costs_rules_take_their_outputs_from_costs_names() -> None:
    """Each §7 summary rule's outputs are ``paths.cost_outputs`` of its names in
    :mod:`sinkscope.costs.names` (the ``table_<name>`` keys the steps write, the figures with a
    caption file and a report label each), and those are what
    :meth:`sinkscope.paths.Paths.cost_targets` requests."""
    from sinkscope.costs import names as cost_names
    from sinkscope.paths import Paths

    costs_rules = (REPO / "workflow" / "rules" / "costs.smk").read_text()
    for tables, figures in (
        ("TOY_TABLES", "TOY_FIGURES"),
        ("BACKCOPY_TABLES", "BACKCOPY_FIGURES"),
        ("COPYPASTE_TABLES", "COPYPASTE_FIGURES"),
    ):
        assert f"cost_names.{tables}, cost_names.{figures}, report" in costs_rules
    assert "paths.cost_outputs(cost_names.END_TO_END_TABLES)" in costs_rules
    layout = Paths("r")
    calls: list[tuple[str, dict]] = []
    outputs = layout.cost_outputs(
        cost_names.BACKCOPY_TABLES,
        cost_names.BACKCOPY_FIGURES,
        lambda path, **kw: calls.append((path, kw)) or path,
        "§7",
    )
    assert list(outputs) == [
        *(f"table_{n}{s}" for n in cost_names.BACKCOPY_TABLES for s in ("", "_csv")),
        *(f"figure_{n}" for n in cost_names.BACKCOPY_FIGURES),
    ]
    assert outputs["table_condition3_csv"] == "r/costs/condition3.csv"
    assert set(cost_names.FIGURE_LABELS) == set(cost_names.FIGURES)
    for name in cost_names.FIGURES:
        assert (REPO / "workflow" / "report" / f"costs_{name}.rst").is_file(), name
    assert [kw["caption"] for _, kw in calls] == [
        f"../report/costs_{n}.rst" for n in cost_names.BACKCOPY_FIGURES
    ]
    with_e2e = {"enabled": True, "backcopy": {"end_to_end": {"T": [8]}}}
    tables = [p for p in layout.cost_targets(with_e2e) if p.endswith(".parquet")]
    expected = (*cost_names.TABLES, *cost_names.END_TO_END_TABLES)
    assert tables == [f"r/costs/{name}.parquet" for name in expected]
    assert layout.cost_targets({"enabled": False}) == []


def test_every_dynamics_part_has_its_two_steps_and_functions() -> None:
    """The rules ``dynamics_<part>_run`` and ``summarize_dynamics_<part>`` run the shared steps
    with their part; ``sinkscope.dynamics.<part>`` has the ``run_<part>`` and
    ``sinkscope.dynamics.summary`` the ``summarize_<part>`` those steps call."""
    from sinkscope.dynamics import summary
    from sinkscope.paths import DYNAMICS_RUN_TABLES
    from sinkscope.steps import STEPS, _dynamics_module, _dynamics_run, _summarize_dynamics

    assert tuple(summary.SUMMARIZE) == tuple(DYNAMICS_RUN_TABLES)
    for part in DYNAMICS_RUN_TABLES:
        for rule, step in (
            (f"dynamics_{part}_run", _dynamics_run),
            (f"summarize_dynamics_{part}", _summarize_dynamics),
        ):
            assert STEPS[rule].func is step and STEPS[rule].keywords == {"part": part}
        assert callable(getattr(_dynamics_module(part), f"run_{part}"))
        assert summary.SUMMARIZE[part] is getattr(summary, f"summarize_{part}")
