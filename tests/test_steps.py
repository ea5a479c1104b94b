"""``sinkscope.steps``: what a failing job shows on the console beside its log, and the one
script every rule runs (``run(snakemake.rule, snakemake)``) finds a step for every rule."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

SCRIPT = """
import sys
from types import SimpleNamespace

import pytest
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


from sinkscope.costs import names as cost_names
from tests.conftest import TINY

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
    from sinkscope.outputs import REGISTRY
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
    generic = {rule for rule, e in REGISTRY.items() if e.compute}
    assert with_script == set(STEPS) | generic, with_script ^ (set(STEPS) | generic)
    assert {found[0] for found in scripts.values() if found} == {"../scripts/step.py"}
    targets = set(scripts) - with_script
    assert targets == {"all"}, f"rules with neither a step nor a target's role: {targets}"
    assert (REPO / "workflow" / "scripts" / "step.py").is_file()
    assert sorted(p.name for p in (REPO / "workflow" / "scripts").iterdir()) == ["step.py"]


def test_every_figure_a_rule_writes_has_one_drawing_function() -> None:
    """The ``{name: Draw}`` dicts of the stages' plots modules name exactly the figures of the
    stage's ``names.py``, the one place each name is stated (the registry of outputs reads it
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
    from sinkscope.outputs import entry
    from sinkscope.oversmoothing import names as oversmoothing_names
    from sinkscope.oversmoothing import plots as oversmoothing
    from sinkscope.streaming import names as streaming_names
    from sinkscope.streaming import plots as streaming

    none = dict.fromkeys(("per_head", "per_layer"))
    assert tuple(heads.pair_figures(None, "", None)) == heads_names.FIGURES
    assert tuple(heads.summary_figures(None, None)) == (heads_names.SUMMARY,)
    assert paths.Paths("r").registered_figure("summarize_heads", "head_classes") == (
        "r/summary/head_classes.png"
    )
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
    # the costs rules write the figures of their names (outputs: the registry's)
    for draws, rule in (
        (costs.toy_figures([]), "cost_toy"),
        (costs.backcopy_figures([], [], {}), "summarize_backcopy"),
        (costs.copypaste_figures([]), "summarize_copypaste"),
    ):
        assert tuple(draws) == entry(rule).figure_names
    assert [
        n
        for r in ("cost_toy", "summarize_backcopy", "summarize_copypaste")
        for n in entry(r).figure_names
    ] == list(cost_names.FIGURES)


def _record(calls: list[tuple[str, dict]], path: str, **kwargs: object) -> str:
    """A stand-in for Snakemake's ``report()``: records its arguments, returns the path."""
    calls.append((path, kwargs))
    return path


def test_every_registered_output_has_its_rule_caption_and_step() -> None:
    """The registry of outputs (:mod:`sinkscope.outputs`) against the workflow: each registered
    rule is a rule of its stage's rule file whose ``output:`` is the registry's
    (``outputs_of``), with its priority from the registry; each figure's caption file exists and
    every caption file of ``workflow/report/`` is some figure's or the claims'; each rule has a
    step; and each rule's outputs are ``table_<name>`` (parquet), ``table_<name>_csv`` and
    ``figure_<name>`` wrapped in ``report()`` with that caption."""
    from sinkscope import outputs
    from sinkscope.paths import Paths
    from sinkscope.steps import step_of

    captions = set()
    for rule, registered in outputs.REGISTRY.items():
        text = (REPO / "workflow" / "rules" / f"{registered.stage}.smk").read_text()
        assert f"rule {rule}:" in text, rule
        body = text.split(f"rule {rule}:")[1].split("\nrule ")[0]
        assert f'**outputs_of("{rule}")' in body, rule
        assert f'priority: priority("{rule}")' in body, rule
        assert callable(step_of(rule))
        calls: list[tuple[str, dict]] = []
        named = Paths("r").rule_outputs(rule, partial(_record, calls))
        assert list(named) == [
            *(f"table_{n}{s}" for n in registered.tables for s in ("", "_csv")),
            *(f"figure_{n}" for n in registered.figure_names),
        ]
        for figure, (path, kwargs) in zip(registered.figures, calls, strict=True):
            assert kwargs["caption"] == f"../report/{figure.caption}"
            assert path.endswith(f"/{figure.name}.png")
            assert (REPO / "workflow" / "report" / figure.caption).is_file(), figure.caption
            captions.add(figure.caption)
    claims_rule = (REPO / "workflow" / "rules" / "claims.smk").read_text()
    report_files = {p.name for p in (REPO / "workflow" / "report").glob("*.rst")}
    unused = {c for c in report_files - captions if f"../report/{c}" not in claims_rule}
    assert unused == {"workflow.rst"}, unused  # the report's front page (Snakefile)
    snakefile = (REPO / "Snakefile").read_text()
    for stage in outputs.STAGES:
        assert f'include: "workflow/rules/{stage}.smk"' in snakefile, stage
    for rule in outputs.PIPELINE_PRIORITY:
        assert rule not in outputs.REGISTRY and callable(step_of(rule))
    # a registry entry's own functions resolve (a rule without a bespoke step runs them)
    from sinkscope.steps import _function

    for registered in outputs.REGISTRY.values():
        for reference in filter(None, (registered.compute, registered.draw)):
            assert callable(_function(reference)), (registered.rule, reference)


def test_the_registry_refuses_what_would_break_a_rule() -> None:
    """A registry entry that names an output Snakemake cannot address, a level or pair set that
    does not exist, or a claims table its rule does not write fails when it is declared; an
    unregistered rule is named."""
    from sinkscope.outputs import RuleOutputs, entry, priority

    base = {"rule": "r", "stage": "s", "level": "pair", "priority": 1, "category": "C"}
    with pytest.raises(ValueError, match="'two words' is not an identifier"):
        RuleOutputs(**base, tables=("two words",))
    with pytest.raises(ValueError, match="level 'per_model'"):
        RuleOutputs(**{**base, "level": "per_model"})
    with pytest.raises(ValueError, match="pairs 'some'"):
        RuleOutputs(**base, pairs="some")
    with pytest.raises(ValueError, match="claims read tables it does not write"):
        RuleOutputs(**base, tables=("t",), claims={"key": "u"})
    with pytest.raises(KeyError, match="'nope' has no entry"):
        entry("nope")
    with pytest.raises(KeyError, match="'nope' has no priority"):
        priority("nope")


def test_registered_targets_follow_the_config_and_the_pair_sets() -> None:
    """Which registered rules run (:func:`sinkscope.outputs.rule_runs`): a disabled section, an
    empty ``requires`` key or an empty pair set leaves a rule's outputs out of the targets."""
    from sinkscope.outputs import entry, rule_runs
    from sinkscope.paths import Paths

    one = {"all": [("m", "d")], "bos": [("m", "d")], "cache": [("m", "d")]}
    costs = {"costs": {"enabled": True, "backcopy": {"end_to_end": {"T": []}}}}
    assert rule_runs(entry("summarize_backcopy"), costs, one)
    assert not rule_runs(entry("summarize_backcopy_e2e"), costs, one)
    costs["costs"]["backcopy"]["end_to_end"]["T"] = [8]
    assert rule_runs(entry("summarize_backcopy_e2e"), costs, one)
    tables = [p for p in Paths("r").registered_targets(costs, one) if "/costs/" in p]
    assert [p for p in tables if p.endswith(".parquet")] == [
        f"r/costs/{n}.parquet" for n in (*cost_names.TABLES, *cost_names.END_TO_END_TABLES)
    ]
    assert not [p for p in Paths("r").registered_targets({}, one) if "/costs/" in p]
    streaming = {"streaming": {"enabled": True}}
    no_cache = {**one, "cache": []}
    assert rule_runs(entry("analyze_streaming_first_positions"), streaming, no_cache)
    assert not rule_runs(entry("analyze_streaming"), streaming, no_cache)
    assert not rule_runs(entry("summarize_streaming"), streaming, no_cache)
    two = {"all": [("m", "d"), ("m", "d.no-bos")], "bos": [("m", "d")], "cache": []}
    heads = [p for p in Paths("r").registered_targets({}, two) if "heads_per_head.parquet" in p]
    assert heads == [
        "r/heads/m/d/heads_per_head.parquet",
        "r/heads/m/d.no-bos/heads_per_head.parquet",
    ]


def test_every_dynamics_part_has_its_two_steps_and_functions() -> None:
    """The rules ``dynamics_<part>_run`` and ``summarize_dynamics_<part>`` run the shared steps
    with their part; ``sinkscope.dynamics.<part>`` has the ``run_<part>`` and
    ``sinkscope.dynamics.summary`` the ``summarize_<part>`` those steps call."""
    from sinkscope.dynamics import summary
    from sinkscope.dynamics.names import RUN_TABLES as DYNAMICS_RUN_TABLES
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


def _toy_compute(tables: list[Path], scale: float) -> dict:
    """A registered rule's ``compute`` for the test below: one row per input path."""
    import polars as pl

    return {"toy": pl.DataFrame({"name": [p.name for p in tables], "scaled": [scale] * 2})}


def _toy_draw(tables: dict, title: str) -> dict:
    def draw(out: str) -> None:
        Path(out).write_text(f"{title}: {tables['toy'].height} rows")

    return {"toy": draw}


def test_a_registered_rule_without_a_step_runs_its_compute_and_draw(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``steps.analyze_registered``: a named list of inputs arrives as a list of paths, the
    params by keyword, the tables go to ``table_<name>`` (parquet and CSV) and the figures to
    ``figure_<name>``; a summary without wildcards is titled with its report category."""
    import polars as pl
    from snakemake.iocontainers import Namedlist

    from sinkscope import outputs
    from sinkscope.steps import analyze_registered, step_of

    toy = outputs.RuleOutputs(
        rule="summarize_toy",
        stage="toy",
        level="summary",
        priority=1,
        category="Toy",
        tables=("toy",),
        figures=(outputs.Figure("toy", "toy.rst"),),
        compute="tests.test_steps:_toy_compute",
        draw="tests.test_steps:_toy_draw",
    )
    monkeypatch.setitem(outputs.REGISTRY, "summarize_toy", toy)
    assert step_of("summarize_toy") is analyze_registered
    out = tmp_path / "out"
    smk = SimpleNamespace(
        rule="summarize_toy",
        input=Namedlist(fromdict={"tables": ["a/x.parquet", "b/y.parquet"]}),
        params=Namedlist(fromdict={"scale": 2.0}),
        wildcards=Namedlist(fromdict={}),
        output=Namedlist(
            fromdict={
                "table_toy": str(out / "toy.parquet"),
                "table_toy_csv": str(out / "toy.csv"),
                "figure_toy": str(out / "toy.png"),
            }
        ),
    )
    analyze_registered(smk)
    table = pl.read_parquet(out / "toy.parquet")
    assert table["name"].to_list() == ["x.parquet", "y.parquet"] and table["scaled"][0] == 2.0
    assert (out / "toy.csv").is_file()
    assert (out / "toy.png").read_text() == "Toy: 2 rows"
    with pytest.raises(KeyError, match="'nowhere' has no step"):
        step_of("nowhere")


def test_a_summary_pools_the_tables_of_its_pair_set_from_the_rules_that_run() -> None:
    """``Paths.pooled_tables``: the geometry summary reads the BOS pairs only, and the
    long-context tables only where that rule runs; the head summary reads every pair, one table
    at a time where asked."""
    from sinkscope.outputs import entry
    from sinkscope.paths import Paths

    sets = {"all": [("m", "d"), ("m", "d.no-bos")], "bos": [("m", "d")], "cache": []}
    rules = ("analyze_geometry", "analyze_geometry_long_context")
    off = {"geometry": {"long_context": {"enabled": False}}}
    tables = Paths("r").pooled_tables("summarize_geometry", rules, off, sets)
    assert tables == [f"r/geometry/m/d/{n}.parquet" for n in entry("analyze_geometry").tables]
    on = {"geometry": {"long_context": {"enabled": True}}}
    tables = Paths("r").pooled_tables("summarize_geometry", rules, on, sets)
    assert tables[-1] == "r/geometry/m/d/halfspace_long_context.parquet"
    heads = Paths("r").pooled_tables("summarize_heads", ["classify_heads"], {}, sets, "per_head")
    assert heads == [
        "r/heads/m/d/heads_per_head.parquet",
        "r/heads/m/d.no-bos/heads_per_head.parquet",
    ]


GPU_SCRIPT = """
import sys
from pathlib import Path
from types import SimpleNamespace

from sinkscope import steps

def loads_the_model(smk):
    Path(sys.argv[3]).write_text("the step ran")

steps.STEPS["extract_activations"] = loads_the_model
smk = SimpleNamespace(
    log=[sys.argv[1]], output=[sys.argv[2]], wildcards={"model": "tiny"},
    resources=SimpleNamespace(gpu=int(sys.argv[4])),
)
steps.run("extract_activations", smk)
"""


@pytest.mark.parametrize(("slurm", "gpus"), [(True, 1), (False, 1), (True, 0)])
def test_a_cluster_job_that_asked_for_a_gpu_stops_before_its_step_without_one(
    tmp_path: Path, slurm: bool, gpus: int
) -> None:
    """This machine's torch is the CPU build. A SLURM job (``SLURM_JOB_ID`` set) of a rule that
    asked for a GPU stops before its step runs, with one line that names the rule, the cause and
    both fixes; a local run (no SLURM job) keeps ``device: auto``'s fallback to the CPU, and so
    does a cluster job that asked for no GPU (``resources.gpus: 0``)."""
    import os

    import torch

    assert torch.version.cuda is None and not torch.cuda.is_available()
    log, output, ran = tmp_path / "job.log", tmp_path / "out.h5", tmp_path / "ran"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    if slurm:
        env["SLURM_JOB_ID"] = "4242"
    result = subprocess.run(
        [sys.executable, "-c", GPU_SCRIPT, str(log), str(output), str(ran), str(gpus)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )
    if not (slurm and gpus):
        assert result.returncode == 0, result.stderr
        assert ran.read_text() == "the step ran"
        return
    assert result.returncode != 0 and not ran.exists()
    line = result.stderr.strip()
    assert line.startswith(
        "sinkscope extract_activations failed: RuntimeError: extract_activations: this SLURM job "
        "(job 4242) asked for 1 GPU(s) (resources.gpus) but cannot use one: torch "
    )
    assert "is a CPU build" in line and "make install LOCK=requirements-cuda.lock" in line
    assert "set resources.gpus: 0" in line and len(result.stderr.splitlines()) == 1


POSITIONS_SCRIPT = """
import json, sys
from pathlib import Path
from types import SimpleNamespace

from sinkscope import steps

def runs_the_model(smk):
    Path(sys.argv[3]).write_text("the step ran")

steps.STEPS["analyze_streaming"] = runs_the_model
smk = SimpleNamespace(
    log=[sys.argv[1]], output=[sys.argv[2]], config=json.loads(sys.argv[5]),
    wildcards=SimpleNamespace(model="hubmodel", items=lambda: {"model": "hubmodel"}.items()),
    input=SimpleNamespace(model_dir=sys.argv[4]), resources=SimpleNamespace(gpu=0),
)
steps.run("analyze_streaming", smk)
"""


def test_a_length_beyond_a_prepared_models_positions_is_refused_before_the_model_runs(
    tmp_path: Path,
) -> None:
    """A hub model's positions are known once it is prepared: its StreamingLLM job refuses a
    ``stream_length`` beyond them before its step runs, with the sentence the config check
    gives a ``local`` model of the same ``config.json`` (only the file named differs)."""
    import json

    from transformers import AutoModelForCausalLM

    from sinkscope.config import ConfigError, load_layered_config, validate_config
    from sinkscope.prepare.models import prepare_model
    from tests.conftest import tiny_config

    weights, prepared = tmp_path / "weights", tmp_path / "prepared"
    AutoModelForCausalLM.from_config(tiny_config("llama")).save_pretrained(weights)
    assert json.loads((weights / "config.json").read_text())["max_position_embeddings"] == 64
    source = {"kind": "local", "path": str(weights)}
    prepare_model("hubmodel", {"source": source, "dtype": "float32"}, prepared, tmp_path / "dl")
    config = validate_config(load_layered_config([TINY]))
    config["streaming"]["params"]["stream_length"] = 96
    log, output, ran = tmp_path / "job.log", tmp_path / "out.parquet", tmp_path / "ran"
    result = subprocess.run(
        [sys.executable, "-c", POSITIONS_SCRIPT, str(log), str(output), str(ran), str(prepared),
         json.dumps(config)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0 and not ran.exists(), result.stderr
    sentence = (
        "streaming.params.stream_length: 96 exceeds the 64 positions of models.hubmodel "
        "(max_position_embeddings in {}); set it to at most 64"
    )
    assert sentence.format(f"the config of the prepared model {prepared}") in result.stderr
    local = dict(config)
    local["models"] = {"hubmodel": {**config["models"]["smollm2-135m"], "source": source}}
    with pytest.raises(ConfigError) as error:
        validate_config(local)
    assert sentence.format(weights / "config.json") in str(error.value)


def test_a_cuda_build_that_cannot_use_the_gpu_names_the_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CUDA build whose runtime refuses the device (an old driver) gets the runtime's own
    message and the driver the lock needs; one that sees no device names CUDA_VISIBLE_DEVICES
    and the partition; a usable GPU passes."""
    import torch

    from sinkscope.prepare import models

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def old_driver() -> None:
        raise RuntimeError("The NVIDIA driver on your system is too old (found version 12020).")

    monkeypatch.setattr(torch.cuda, "init", old_driver)
    with pytest.raises(RuntimeError) as error:
        models.check_requested_gpu("analyze_streaming", 1, {"SLURM_JOB_ID": "7"})
    text = str(error.value)
    assert "analyze_streaming: this SLURM job (job 7) asked for 1 GPU(s)" in text
    assert "The NVIDIA driver on your system is too old (found version 12020)." in text
    assert "580 or newer" in text
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "sees no GPU (CUDA_VISIBLE_DEVICES=)" in str(models.gpu_problem())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.gpu_problem() is None
    models.check_requested_gpu("analyze_streaming", 1, {"SLURM_JOB_ID": "7"})  # no error
