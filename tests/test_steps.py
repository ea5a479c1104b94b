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
    stage's ``names.py`` (and the paths' figures), so :func:`sinkscope.steps._draw` fills every
    output ``figure_<name>`` (the drawing is lazy: nothing is drawn here)."""
    from sinkscope import paths
    from sinkscope.costs import plots as costs
    from sinkscope.dynamics import plots as dynamics
    from sinkscope.geometry import plots as geometry
    from sinkscope.heads import plots as heads
    from sinkscope.oversmoothing import plots as oversmoothing
    from sinkscope.streaming import plots as streaming

    none = dict.fromkeys(("per_head", "per_layer"))
    assert tuple(heads.pair_figures(None, "", None)) == paths.HEAD_FIGURES
    (summary_bars,) = heads.summary_figures(None, None)
    assert paths.Paths("r").heads_summary_figure == f"r/summary/{summary_bars}.png"
    assert tuple(geometry.pair_figures({}, "")) == paths.GEOMETRY_FIGURES
    assert tuple(geometry.summary_figures({}, [], None, "")) == paths.GEOMETRY_FIGURES
    assert tuple(oversmoothing.figures(none)) == paths.OVERSMOOTHING_FIGURES
    for names in (
        paths.STREAMING_POLICY_FIGURES,
        paths.STREAMING_RECOMPUTE_FIGURES,
        paths.STREAMING_FIRST_POSITION_FIGURES,
        paths.STREAMING_SUMMARY_FIGURES,
    ):
        assert tuple(streaming.figures(names, {}, "")) == names
    for part, names in paths.DYNAMICS_FIGURES.items():
        assert tuple(dynamics.figures(part, {})) == names
    cost_figures = [*costs.toy_figures([]), *costs.backcopy_figures([], [], {})]
    cost_figures += costs.copypaste_figures([])
    layout = paths.Paths("r")
    costs_config = {"enabled": True}
    figure_paths = [p for p in layout.cost_targets(costs_config) if p.endswith(".png")]
    assert [layout.cost_figure(name) for name in cost_figures] == figure_paths


def test_every_dynamics_part_has_its_two_steps_and_functions() -> None:
    """The rules ``dynamics_<part>_run`` and ``summarize_dynamics_<part>`` run the shared steps
    with their part, and :mod:`sinkscope.dynamics` has the ``run_<part>`` and
    ``summarize_<part>`` those steps look up."""
    import sinkscope.dynamics
    from sinkscope.paths import DYNAMICS_RUN_TABLES
    from sinkscope.steps import STEPS, _dynamics_run, _summarize_dynamics

    for part in DYNAMICS_RUN_TABLES:
        for rule, step, prefix in (
            (f"dynamics_{part}_run", _dynamics_run, "run_"),
            (f"summarize_dynamics_{part}", _summarize_dynamics, "summarize_"),
        ):
            assert STEPS[rule].func is step and STEPS[rule].keywords == {"part": part}
            assert callable(getattr(sinkscope.dynamics, prefix + part))
