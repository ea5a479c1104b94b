"""The glue between Snakemake jobs and the package: one function per rule.

Every rule's script, ``workflow/scripts/step.py``, calls :func:`run` with the rule's name and its
``snakemake`` object; :data:`STEPS` maps the name to the function here, which unpacks inputs,
outputs and params and calls the typed functions that hold the logic. Figures are drawn by
:func:`_draw` from the ``{figure name: Draw}`` dict of the stage's ``plots`` module, each into the
rule's output ``figure_<name>``. Nothing in this module computes anything itself.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import polars as pl

from sinkscope.io import remove_stale_partials, write_table
from sinkscope.outputs import entry

if TYPE_CHECKING:  # the figures' type only: plotting (matplotlib) loads with a stage's plots
    from sinkscope.plotting import Draw


def redirect_to_log(log_path: str) -> TextIO:
    """Send stderr (Python and C level, progress bars included) and logging to the rule's log;
    returns a stream to the job's original stderr (Snakemake's console, or the SLURM job log)."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    console = os.fdopen(os.dup(2), "w", buffering=1)
    handle = open(log_path, "w", buffering=1)  # noqa: SIM115 - lives as long as the job
    os.dup2(handle.fileno(), 2)
    sys.stderr = handle
    logging.basicConfig(
        stream=handle,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    return console


def _draw(figures: Mapping[str, Draw], outputs: Any) -> None:
    """Draw every figure of ``figures`` (a stage's ``{name: Draw}``) into output ``figure_<name>``."""
    for name, draw in figures.items():
        draw(getattr(outputs, f"figure_{name}"))


def prepare_model(smk: Any) -> None:
    from sinkscope.prepare.models import prepare_model as prepare

    # download_dir is a cache of checksummed files, not a param: it cannot change the output
    prepare(
        smk.wildcards.model,
        smk.params.entry,
        Path(smk.output.model_dir),
        Path(smk.config["download_dir"]),
    )


def prepare_corpus(smk: Any) -> None:
    from sinkscope.prepare.corpora import prepare_corpus as prepare

    prepare(
        smk.wildcards.dataset,
        smk.params.entry,
        Path(smk.output.documents),
        Path(smk.config["download_dir"]),
    )


def tokenize_corpus(smk: Any) -> None:
    from sinkscope.prepare.tokens import tokenize_corpus as tokenize

    tokenize(
        Path(smk.input.documents),
        Path(smk.input.provenance),
        Path(smk.input.model_dir),
        smk.wildcards.model,
        smk.wildcards.dataset,
        Path(smk.output.stream),
    )


def cut_tokens(smk: Any) -> None:
    """A pair's sequences; a no-BOS variant's id (``<dataset>.no-bos``) cuts them without BOS."""
    from sinkscope.prepare.tokens import prepare_tokens
    from sinkscope.variants import bos_of

    extraction = smk.params.extraction
    prepare_tokens(
        Path(smk.input.stream),
        Path(smk.input.provenance),
        Path(smk.input.model_dir),
        smk.wildcards.model,
        smk.wildcards.dataset,
        extraction["n_sequences"],
        extraction["context_length"],
        extraction["seed"],
        Path(smk.output.tokens),
        bos_of(smk.wildcards.dataset),
    )


def extract_activations(smk: Any) -> None:
    import torch

    from sinkscope.extraction.extract import extract_activations as extract
    from sinkscope.extraction.h5write import config_digest
    from sinkscope.extraction.settings import ExtractionSettings

    torch.set_num_threads(max(1, int(smk.threads)))
    extraction = smk.params.extraction
    run = smk.config["extraction"]  # how it runs, not a param: changing it re-runs nothing
    settings = ExtractionSettings(
        batch_size=run["batch_size"],
        storage_dtypes=extraction["storage_dtypes"],
        compression_level=extraction["compression_level"],
        codec=extraction["codec"],
        uncompressed=tuple(extraction["uncompressed"]),
        device=run["device"],
        overlap_writes=run.get("overlap_writes", "auto"),
    )
    digest = config_digest(smk.params.model_entry, smk.params.dataset_entry, extraction)
    content = {
        "model": smk.params.model_entry,
        "dataset": smk.params.dataset_entry,
        "extraction": extraction,
    }  # sinkscope.config.content_settings of the run's config: the rule's params
    extract(
        Path(smk.input.model_dir),
        Path(smk.input.tokens),
        Path(smk.output.activations),
        smk.params.model_entry,
        settings,
        digest,
        content_settings=content,
    )


def _activations(smk: Any) -> Path:
    """The job's activation file, checked to be its pair's (``{model}``, ``{dataset}``) and made
    with this run's settings (:func:`sinkscope.config.content_settings` of its config)."""
    from sinkscope.config import content_settings
    from sinkscope.extraction.h5layout import check_pair

    model, dataset = smk.wildcards.model, smk.wildcards.dataset
    expected = content_settings(smk.config, model, dataset)
    return check_pair(smk.input.activations, model, dataset, expected)


def classify_heads(smk: Any) -> None:
    from sinkscope.heads.classify import HeadClassThresholds, classify_file
    from sinkscope.heads.names import PER_HEAD, PER_SEQUENCE
    from sinkscope.heads.plots import pair_figures

    thresholds = HeadClassThresholds(**smk.params.thresholds)
    per_sequence, per_head = classify_file(_activations(smk), thresholds)
    _write_tables({PER_HEAD: per_head, PER_SEQUENCE: per_sequence}, smk)
    _draw(pair_figures(per_head, _pair_title(smk), thresholds), smk.output)


def summarize_heads(smk: Any) -> None:
    from sinkscope.heads.classify import HeadClassThresholds
    from sinkscope.heads.names import SEQUENCE_MASSES, SUMMARY
    from sinkscope.heads.plots import summary_figures
    from sinkscope.heads.summary import masses_by_sequence, summarize

    thresholds = HeadClassThresholds(**smk.params.thresholds)
    tables = [pl.read_parquet(path) for path in smk.input.per_head]
    summary = summarize(tables, thresholds)
    per_sequence = [pl.read_parquet(path) for path in smk.input.per_sequence]
    _write_tables({SUMMARY: summary, SEQUENCE_MASSES: masses_by_sequence(per_sequence)}, smk)
    _draw(summary_figures(summary, thresholds), smk.output)


def _pair_title(smk: Any) -> str:
    """The title of a pair's figures: model, dataset, N and T (param ``extraction``)."""
    extraction = smk.params.extraction
    return (
        f"{smk.wildcards.model} on {smk.wildcards.dataset} "
        f"(N={extraction['n_sequences']}, T={extraction['context_length']})"
    )


def _write_tables(tables: Mapping[str, pl.DataFrame], smk: Any) -> None:
    """Write each table the job's rule registers (:mod:`sinkscope.outputs`) to its output
    ``table_<name>`` (parquet, plus CSV beside it); a registered table the analysis did not
    return is named."""
    names = entry(smk.rule).tables
    missing = [name for name in names if name not in tables]
    if missing:
        raise KeyError(f"the analysis of rule {smk.rule} returned no table(s) {missing}")
    for name in names:
        write_table(tables[name], getattr(smk.output, f"table_{name}"))


def _figure_names(smk: Any) -> tuple[str, ...]:
    """The figures the job's rule registers."""
    return entry(smk.rule).figure_names


def _read_tables(paths: list[str], *rules: str) -> list[dict[str, pl.DataFrame]]:
    """Per-pair table dicts from the parquet inputs that hold the tables of the per-pair ``rules``
    (``results/<analysis>/<model>/<dataset>/<name>.parquet``)."""
    names = {name for rule in rules for name in entry(rule).tables}
    by_pair: dict[str, dict[str, pl.DataFrame]] = {}
    for path in map(Path, paths):
        if path.suffix == ".parquet" and path.stem in names:
            by_pair.setdefault(str(path.parent), {})[path.stem] = pl.read_parquet(path)
    return list(by_pair.values())


def analyze_geometry(smk: Any) -> None:
    from sinkscope.geometry.analysis import analyze_file
    from sinkscope.geometry.plots import pair_figures
    from sinkscope.heads.classify import HeadClassThresholds

    tables = analyze_file(
        _activations(smk),
        pl.read_parquet(smk.input.per_head),
        HeadClassThresholds(**smk.params.thresholds),
        attend_threshold=smk.params.attend_threshold,
    )
    _write_tables(tables, smk)
    _draw(pair_figures(tables, _pair_title(smk), smk.params.intervals), smk.output)


def extract_long_context(smk: Any) -> None:
    """The model's part of the long-context test: ``Z`` of every layer to the pair's file."""
    from sinkscope.geometry.long_context import long_context_inputs
    from sinkscope.geometry.long_context_file import write_long_context_inputs

    settings = smk.params.long_context
    inputs = long_context_inputs(
        smk.input.model_dir,
        smk.input.stream,
        smk.input.provenance,
        n_sequences=settings["n_sequences"],
        seq_len=settings["seq_len"],
        seed=smk.params.stream_seed,
        model_name=smk.wildcards.model,
        dataset_name=smk.wildcards.dataset,
        threads=smk.threads,
        points_per_dim=settings["points_per_dim"],
        **_model_run(smk),
    )
    write_long_context_inputs(inputs, smk.output.inputs)


def analyze_geometry_long_context(smk: Any) -> None:
    """The CPU part: the half-space solves on the pair's file, its table and figure."""
    from sinkscope.geometry.long_context import solve_deadline, solve_long_context
    from sinkscope.geometry.long_context_file import open_long_context_inputs
    from sinkscope.geometry.names import LONG_CONTEXT_TABLE
    from sinkscope.geometry.plots import long_context_figures

    settings = smk.params.long_context
    with open_long_context_inputs(smk.input.inputs) as inputs:
        if (inputs.model, inputs.dataset) != (smk.wildcards.model, smk.wildcards.dataset):
            raise ValueError(
                f"{smk.input.inputs} holds {inputs.model}/{inputs.dataset}, not the job's pair "
                f"{smk.wildcards.model}/{smk.wildcards.dataset}"
            )
        table = solve_long_context(
            inputs,
            smk.params.stream_seed,
            solve_seconds=settings["solve_seconds"],
            gaussian_null=settings["gaussian_null"],
            null_solve_seconds=settings["null_solve_seconds"],
            threads=smk.threads,
            # the solves share the job's own time request: it ends inside it, never killed
            deadline_seconds=solve_deadline(getattr(smk.resources, "runtime", None)),
        )
    _write_tables({LONG_CONTEXT_TABLE: table}, smk)
    title = f"{smk.wildcards.model} on {smk.wildcards.dataset}: Prop. 4.1 on long sequences"
    _draw(long_context_figures(table, title), smk.output)


def summarize_geometry(smk: Any) -> None:
    from sinkscope.claims.checks.geometry import geometry_statements
    from sinkscope.geometry.plots import summary_figures
    from sinkscope.geometry.summary import long_context_table, summarize

    pairs = _read_tables(list(smk.input), "analyze_geometry", "analyze_geometry_long_context")
    summary = summarize(pairs, smk.params.intervals)
    summary["statements"] = geometry_statements(summary, pairs)
    _write_tables(summary, smk)
    figures = summary_figures(
        summary, pairs, long_context_table(pairs), "pooled over datasets", smk.params.intervals
    )
    _draw(figures, smk.output)


def analyze_sinks(smk: Any) -> None:
    from sinkscope.sinks.analysis import SinkSettings, analyze_file
    from sinkscope.sinks.plots import pair_figures
    from sinkscope.sinks.secondary import tokenizer_decoder

    settings = SinkSettings.from_config(smk.params.sinks)
    tables = analyze_file(_activations(smk), settings, tokenizer_decoder(smk.input.model_dir))
    _write_tables(tables, smk)
    _draw(pair_figures(tables, settings.eps, _pair_title(smk)), smk.output)


def summarize_sinks(smk: Any) -> None:
    from sinkscope.sinks.plots import summary_figures
    from sinkscope.sinks.summary import summarize

    pairs = _read_tables(list(smk.input), "analyze_sinks")
    summary = summarize(pairs)
    _write_tables(summary, smk)
    _draw(summary_figures(summary, pairs, smk.params.eps), smk.output)


def analyze_oversmoothing(smk: Any) -> None:
    from sinkscope.oversmoothing.analysis import analyze_file

    settings = smk.params.oversmoothing
    tables = analyze_file(
        _activations(smk),
        pl.read_parquet(smk.input.per_head),
        settings["context_lengths"],
        settings["uniformity_threshold"],
        include_bos=settings["include_bos"],
    )
    _write_tables(tables, smk)
    _plot_oversmoothing(tables, smk, settings["uniformity_threshold"])


def summarize_oversmoothing(smk: Any) -> None:
    from sinkscope.oversmoothing.summary import summarize

    summary = summarize(_read_tables(list(smk.input), "analyze_oversmoothing"))
    _write_tables(summary, smk)
    _plot_oversmoothing(summary, smk, smk.params.uniformity_threshold)


def _plot_oversmoothing(
    tables: dict[str, pl.DataFrame], smk: Any, uniformity_threshold: float
) -> None:
    """The paper-numbered figures of a pair or of the summary (the same figures)."""
    from sinkscope.heads.classify import HeadClassThresholds
    from sinkscope.oversmoothing.plots import figures

    thresholds = HeadClassThresholds(**smk.params.thresholds)
    _draw(figures(tables, uniformity_threshold, thresholds), smk.output)


def _model_run(smk: Any) -> dict[str, str]:
    """How a job that runs the model outside the extraction loads it, as the extraction does: the
    model entry's ``dtype`` and ``attn_implementation`` (``models.<name>``; the entry is rule
    prepare_model's param, so a change re-prepares the model and re-runs these jobs) and
    ``extraction.device``, read from the config and not a param: the device does not change what a
    table means, so changing it re-runs nothing."""
    entry = smk.config["models"][smk.wildcards.model]
    return {
        "dtype": entry["dtype"],
        "attn_implementation": entry["attn_implementation"],
        "device": smk.config["extraction"]["device"],
    }


def analyze_streaming(smk: Any) -> None:
    from sinkscope.streaming.experiment import evaluate_pair
    from sinkscope.streaming.plots import figures

    model, dataset = smk.wildcards.model, smk.wildcards.dataset
    tables = evaluate_pair(
        smk.input.model_dir,
        smk.input.stream,
        smk.input.provenance,
        {**smk.params.params, "model_name": model, "dataset_name": dataset},
        **_model_run(smk),
    )
    _write_tables(tables, smk)
    _draw(figures(_figure_names(smk), tables, f"{model} / {dataset}"), smk.output)


def analyze_streaming_recompute(smk: Any) -> None:
    from sinkscope.streaming.plots import figures
    from sinkscope.streaming.recompute import recompute_pair

    model, dataset = smk.wildcards.model, smk.wildcards.dataset
    tables = recompute_pair(
        smk.input.model_dir,
        smk.input.stream,
        smk.input.provenance,
        smk.input.nll_by_position,
        smk.input.settings,
        {**smk.params.params, "model_name": model, "dataset_name": dataset},
        **_model_run(smk),
    )
    _write_tables(tables, smk)
    _draw(figures(_figure_names(smk), tables, f"{model} / {dataset}"), smk.output)


def analyze_streaming_first_positions(smk: Any) -> None:
    from sinkscope.streaming.first_positions import first_position_mass
    from sinkscope.streaming.plots import figures

    tables = {
        "first_position_mass": first_position_mass(_activations(smk), smk.params.first_positions)
    }
    _write_tables(tables, smk)
    title = f"{smk.wildcards.model} / {smk.wildcards.dataset}"
    _draw(figures(_figure_names(smk), tables, title), smk.output)


def summarize_streaming(smk: Any) -> None:
    from sinkscope.streaming.plots import figures
    from sinkscope.streaming.summary import summarize

    heads = [pl.read_parquet(path) for path in smk.input.per_head]
    per_pair = _read_tables(
        list(smk.input.tables),
        "analyze_streaming",
        "analyze_streaming_recompute",
        "analyze_streaming_first_positions",
    )
    summary = summarize(per_pair, heads)
    _write_tables(summary, smk)
    title = "StreamingLLM caches, all pairs"
    _draw(figures(_figure_names(smk), summary, title), smk.output)


def cost_toy(smk: Any) -> None:
    from sinkscope.costs.plots import toy_figures
    from sinkscope.costs.toy import toy_table

    rows = toy_table(smk.params.T)
    _write_tables({"toy": pl.DataFrame(rows)}, smk)
    _draw(toy_figures(rows), smk.output)


def cost_backcopy_run(smk: Any) -> None:
    from sinkscope.costs.backcopy_runs import run_backcopy
    from sinkscope.io import write_json

    wc = smk.wildcards
    write_json(run_backcopy(int(wc.T), wc.pattern, int(wc.seed), smk.params.params), smk.output.row)


def cost_backcopy_e2e(smk: Any) -> None:
    from sinkscope.costs.backcopy_runs import run_backcopy_end_to_end
    from sinkscope.io import write_json

    wc = smk.wildcards
    row = run_backcopy_end_to_end(int(wc.T), wc.pattern, int(wc.seed), smk.params.params)
    write_json(row, smk.output.row)


def cost_copypaste_run(smk: Any) -> None:
    from sinkscope.costs.copypaste import run_copypaste
    from sinkscope.io import write_json

    wc = smk.wildcards
    row = run_copypaste(int(wc.n), float(wc.delta), wc.pattern, int(wc.seed), smk.params.params)
    write_json(row, smk.output.row)


def _rows(paths: list[str]) -> list[dict[str, Any]]:
    from sinkscope.io import read_json

    return [read_json(path) for path in paths]


def summarize_backcopy(smk: Any) -> None:
    from sinkscope.costs.condition3 import condition3_grid, condition3_panel, condition3_vs_measured
    from sinkscope.costs.plots import backcopy_figures
    from sinkscope.costs.summary import slopes_table

    rows = _rows(list(smk.input.rows))
    grid = condition3_grid(**smk.params.condition3)
    tables = {
        "backcopy_runs": pl.DataFrame(rows),
        "backcopy_slopes": pl.DataFrame(slopes_table(rows)),
        "condition3": pl.DataFrame(grid),
        "condition3_measured": pl.DataFrame(condition3_vs_measured(rows)),
    }
    _write_tables(tables, smk)
    panel = condition3_panel(
        smk.params.condition3["sizes"], smk.params.condition3["d_offsets"], smk.params.n_dormant
    )
    _draw(backcopy_figures(rows, grid, panel), smk.output)


def summarize_backcopy_e2e(smk: Any) -> None:
    rows = pl.DataFrame(_rows(list(smk.input.rows)))
    _write_tables({"backcopy_end_to_end": rows}, smk)


def summarize_copypaste(smk: Any) -> None:
    from sinkscope.costs.plots import copypaste_figures

    rows = _rows(list(smk.input.rows))
    _write_tables({"copypaste_runs": pl.DataFrame(rows)}, smk)
    _draw(copypaste_figures(rows), smk.output)


def claims(smk: Any) -> None:
    from sinkscope.claims.applicability import not_applicable_claims
    from sinkscope.claims.observations import evaluate_observations
    from sinkscope.claims.registry import evaluate_claims, with_bos_only
    from sinkscope.claims.render import write_claims
    from sinkscope.claims.sanity import sanity_checks
    from sinkscope.claims.tolerances import resolve_tolerances

    tables = {key: pl.read_parquet(path) for key, path in smk.input.items()}
    # from the models' configs, prepared by now (the results folder of every rule: Paths("results"))
    not_applicable = not_applicable_claims(smk.config, "results")
    table = evaluate_claims(
        tables,
        smk.params.tolerances,
        smk.params.models,
        not_applicable=not_applicable,
        head_classes=smk.config["head_classes"],
    )
    tolerances = resolve_tolerances(smk.params.tolerances)
    near_full_rank = tolerances["geometry"]["near_full_rank"]
    # the observations are about BOS, like the papers' claims
    observations = evaluate_observations(with_bos_only(tables), near_full_rank)
    write_claims(
        table,
        smk.output.markdown,
        smk.output.table,
        smk.output.rst,
        observations=observations,
        observations_path=smk.output.observations,
        sanity=sanity_checks(with_bos_only(tables), tolerances["costs"]["toy_rtol"]),
        config=smk.config,
    )


# --- training dynamics of the companion paper (workflow/rules/dynamics.smk)


def _dynamics_module(part: str) -> Any:
    """The module of a dynamics experiment: ``sinkscope.dynamics.<part>`` (it imports torch, so
    only the job that runs it loads it)."""
    return importlib.import_module(f"sinkscope.dynamics.{part}")


def _dynamics_run(smk: Any, part: str) -> None:
    """Rule ``dynamics_<part>_run``: one job of the ``part`` experiment (``run_<part>`` of
    ``sinkscope.dynamics.<part>``), its tables and its timing."""
    from sinkscope.dynamics.names import RUN_TABLES
    from sinkscope.io import write_json

    run_fn: Callable[[dict], dict[str, pl.DataFrame]] = getattr(
        _dynamics_module(part), f"run_{part}"
    )
    tables = run_fn(dict(smk.params.spec))
    for name in RUN_TABLES[part]:
        write_table(tables[name], getattr(smk.output, name))
    timing = tables["timing"].row(0, named=True)
    write_json({**timing, "spec": dict(smk.params.spec)}, smk.output.timing)


def _summarize_dynamics(smk: Any, part: str) -> None:
    """Rule ``summarize_dynamics_<part>``: the ``part`` experiment's runs summarized
    (``sinkscope.dynamics.summary.SUMMARIZE[part]``), its tables, figures and timings."""
    from sinkscope.dynamics.names import RUN_TABLES
    from sinkscope.dynamics.plots import figures
    from sinkscope.dynamics.summary import SUMMARIZE
    from sinkscope.io import write_json

    names = RUN_TABLES[part]
    runs = [
        {name: pl.read_parquet(path) for name, path in zip(names, files, strict=True)}
        for files in zip(*(getattr(smk.input, name) for name in names), strict=True)
    ]
    tables = SUMMARIZE[part](runs)
    _write_tables(tables, smk)
    _draw(figures(part, tables), smk.output)
    write_json(_rows(list(smk.input.timing)), smk.output.timing)


#: The function of every rule, by rule name (the workflow's one script runs
#: ``STEPS[snakemake.rule]``; tests/test_steps.py checks that the rules and the keys agree).
STEPS: dict[str, Callable[[Any], None]] = {
    "dynamics_value_softmax_run": partial(_dynamics_run, part="value_softmax"),
    "dynamics_induction_run": partial(_dynamics_run, part="induction"),
    "dynamics_classification_run": partial(_dynamics_run, part="classification"),
    "summarize_dynamics_value_softmax": partial(_summarize_dynamics, part="value_softmax"),
    "summarize_dynamics_induction": partial(_summarize_dynamics, part="induction"),
    "summarize_dynamics_classification": partial(_summarize_dynamics, part="classification"),
    "claims": claims,
    "cost_toy": cost_toy,
    "cost_backcopy_run": cost_backcopy_run,
    "cost_copypaste_run": cost_copypaste_run,
    "cost_backcopy_e2e": cost_backcopy_e2e,
    "summarize_backcopy_e2e": summarize_backcopy_e2e,
    "summarize_backcopy": summarize_backcopy,
    "summarize_copypaste": summarize_copypaste,
    "prepare_model": prepare_model,
    "prepare_corpus": prepare_corpus,
    "tokenize_corpus": tokenize_corpus,
    "cut_tokens": cut_tokens,
    "extract_activations": extract_activations,
    "classify_heads": classify_heads,
    "summarize_heads": summarize_heads,
    "analyze_geometry": analyze_geometry,
    "extract_long_context": extract_long_context,
    "analyze_geometry_long_context": analyze_geometry_long_context,
    "summarize_geometry": summarize_geometry,
    "analyze_sinks": analyze_sinks,
    "summarize_sinks": summarize_sinks,
    "analyze_oversmoothing": analyze_oversmoothing,
    "summarize_oversmoothing": summarize_oversmoothing,
    "analyze_streaming": analyze_streaming,
    "analyze_streaming_recompute": analyze_streaming_recompute,
    "analyze_streaming_first_positions": analyze_streaming_first_positions,
    "summarize_streaming": summarize_streaming,
}


def _function(reference: str) -> Callable[..., Any]:
    """The function of a registry reference ``"module:function"``."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def analyze_registered(smk: Any) -> None:
    """The step of a registered rule without a bespoke one here (:mod:`sinkscope.outputs`,
    ``compute`` and ``draw``): its tables are ``compute(**inputs, **params)``, every named input
    passed as a :class:`~pathlib.Path` (an activation file checked to be the job's pair's) and
    every param as given (a named list of inputs, e.g. a summary's ``pooled_tables``, as a list
    of paths); its figures ``draw(tables, title)``, titled with the pair (and, with a param
    ``extraction``, its N and T), or with the rule's report category where it has no pair."""
    outputs = entry(smk.rule)
    inputs: dict[str, Path | list[Path]] = {
        name: _activations(smk)
        if name == "activations"
        else Path(path)
        if isinstance(path, str)
        else [Path(p) for p in path]
        for name, path in smk.input.items()
    }
    params = {name: value for name, value in smk.params.items() if name != "extraction"}
    tables = _function(outputs.compute)(**inputs, **params)
    _write_tables(tables, smk)
    if outputs.figures:
        if "extraction" in smk.params.keys():  # noqa: SIM118 - a Namedlist: `in` reads values
            title = _pair_title(smk)
        else:
            title = " on ".join(str(value) for value in smk.wildcards) or outputs.category
        _draw(_function(outputs.draw)(tables, title), smk.output)


def step_of(rule: str) -> Callable[[Any], None]:
    """The function that runs a job of ``rule``: its :data:`STEPS` entry, or
    :func:`analyze_registered` for a registered rule that names its ``compute``; a rule with
    neither is named."""
    if rule in STEPS:
        return STEPS[rule]
    from sinkscope.outputs import REGISTRY

    if rule in REGISTRY and REGISTRY[rule].compute:
        return analyze_registered
    raise KeyError(
        f"rule {rule!r} has no step: neither sinkscope.steps.STEPS nor a registry "
        "entry with compute (sinkscope.outputs)"
    )


def run(step: str, smk: Any) -> None:
    """Entry point of the workflow's script (``step``: the rule's name, a key of :data:`STEPS`):
    log to the rule's log; on a cluster, stop a job that asked for a GPU and cannot use one
    (:func:`sinkscope.prepare.models.check_requested_gpu`); delete what killed earlier jobs of
    the same outputs left behind (their temporary files and folders; Snakemake runs one job per
    output, so all are stale), then run the step."""
    from sinkscope.config import RULE_LENGTH_KEYS
    from sinkscope.prepare.models import check_model_positions
    from sinkscope.sizing.usage import usage_line

    started = time.monotonic()
    console = redirect_to_log(smk.log[0])
    logger = logging.getLogger("sinkscope")
    logger.info("%s: %s", step, dict(smk.wildcards.items()))
    try:
        gpus = int(getattr(getattr(smk, "resources", None), "gpu", 0) or 0)
        if gpus:  # a cluster job that asked for a GPU and cannot use one stops here, in seconds
            from sinkscope.prepare.models import check_requested_gpu

            check_requested_gpu(step, gpus)
        model_dir = getattr(getattr(smk, "input", None), "model_dir", None)
        if step in RULE_LENGTH_KEYS and model_dir:  # beyond the prepared model's positions
            check_model_positions(smk.config, smk.wildcards.model, model_dir, step)
        for output in smk.output:
            remove_stale_partials(output)
        step_of(step)(smk)
        # what the job used, against what it asked for (sinkscope.sizing)
        logger.info(usage_line(time.monotonic() - started))
    except Exception as error:
        # the traceback goes to the log; the console gets the one sentence, so that a user sees
        # what to change without opening the log
        console.write(f"{failure_summary(step, error)} (traceback: {smk.log[0]})\n")
        raise


def failure_summary(step: str, error: BaseException) -> str:
    """One line for the console: the step, the error's class and the first line of its message."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else "(no message)"
    return f"sinkscope {step} failed: {type(error).__name__}: {first}"
