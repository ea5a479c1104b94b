"""The glue between Snakemake jobs and the package: one function per rule.

Each ``workflow/scripts/<rule>.py`` calls :func:`run` with its ``snakemake`` object; the function
here unpacks inputs, outputs and params and calls the typed functions that hold the logic. Nothing
in this module computes anything itself.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import polars as pl
import torch

from sinkscope.io import remove_stale_partials, write_table


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


def prepare_model(smk: Any) -> None:
    from sinkscope.prepare.models import prepare_model as prepare

    prepare(
        smk.wildcards.model,
        smk.params.entry,
        Path(smk.output.model_dir),
        Path(smk.params.download_dir),
    )


def prepare_corpus(smk: Any) -> None:
    from sinkscope.prepare.corpora import prepare_corpus as prepare

    prepare(
        smk.wildcards.dataset,
        smk.params.entry,
        Path(smk.output.documents),
        Path(smk.params.download_dir),
    )


def cut_tokens(smk: Any) -> None:
    from sinkscope.prepare.tokens import prepare_tokens

    extraction = smk.params.extraction
    prepare_tokens(
        Path(smk.input.documents),
        Path(smk.input.model_dir),
        smk.wildcards.model,
        smk.wildcards.dataset,
        extraction["n_sequences"],
        extraction["context_length"],
        extraction["seed"],
        Path(smk.output.tokens),
    )


def extract_activations(smk: Any) -> None:
    from sinkscope.extraction.extract import ExtractionSettings, config_digest
    from sinkscope.extraction.extract import extract_activations as extract

    torch.set_num_threads(max(1, int(smk.threads)))
    extraction = smk.params.extraction
    settings = ExtractionSettings(
        batch_size=extraction["batch_size"],
        storage_dtypes=extraction["storage_dtypes"],
        compression_level=extraction["compression_level"],
        codec=extraction["codec"],
        device=extraction["device"],
        overlap_writes=extraction.get("overlap_writes", "auto"),
    )
    digest = config_digest(smk.params.model_entry, smk.params.dataset_entry, extraction)
    extract(
        Path(smk.input.model_dir),
        Path(smk.input.tokens),
        Path(smk.output.activations),
        smk.params.model_entry,
        settings,
        digest,
    )


def classify_heads(smk: Any) -> None:
    from sinkscope.heads.classify import HeadClassThresholds, classify_file
    from sinkscope.heads.plots import plot_class_map, plot_mass_heatmaps

    thresholds = HeadClassThresholds(**smk.params.thresholds)
    per_sequence, per_head = classify_file(Path(smk.input.activations), thresholds)
    write_table(per_sequence, smk.output.per_sequence)
    write_table(per_head, smk.output.per_head)
    title = _pair_title(smk)
    plot_mass_heatmaps(per_head, Path(smk.output.mass_heatmaps), title)
    plot_class_map(per_head, Path(smk.output.class_map), title, thresholds)


def summarize_heads(smk: Any) -> None:
    from sinkscope.heads.classify import HeadClassThresholds
    from sinkscope.heads.plots import plot_summary_bars
    from sinkscope.heads.summary import summarize

    thresholds = HeadClassThresholds(**smk.params.thresholds)
    tables = [pl.read_parquet(path) for path in smk.input.per_head]
    summary = summarize(tables, thresholds)
    write_table(summary, smk.output.table)
    plot_summary_bars(summary, Path(smk.output.figure), thresholds=thresholds)


def _pair_title(smk: Any) -> str:
    extraction = smk.params.extraction
    return (
        f"{smk.wildcards.model} on {smk.wildcards.dataset} "
        f"(N={extraction['n_sequences']}, T={extraction['context_length']})"
    )


def _write_tables(tables: dict[str, pl.DataFrame], outputs: Any, names: tuple[str, ...]) -> None:
    """Write each named table to the output ``table_<name>`` (parquet, plus CSV beside it)."""
    missing = [name for name in names if name not in tables]
    if missing:
        raise KeyError(f"the analysis returned no table(s) {missing}")
    for name in names:
        write_table(tables[name], getattr(outputs, f"table_{name}"))


def _read_tables(paths: list[str], names: tuple[str, ...]) -> list[dict[str, pl.DataFrame]]:
    """Per-pair table dicts from the parquet inputs ``results/<analysis>/<model>/<dataset>/``."""
    by_pair: dict[str, dict[str, pl.DataFrame]] = {}
    for path in map(Path, paths):
        if path.suffix == ".parquet" and path.stem in names:
            by_pair.setdefault(str(path.parent), {})[path.stem] = pl.read_parquet(path)
    return list(by_pair.values())


def analyze_geometry(smk: Any) -> None:
    from sinkscope.geometry import plots
    from sinkscope.geometry.analysis import analyze_file
    from sinkscope.heads.classify import HeadClassThresholds
    from sinkscope.paths import GEOMETRY_TABLES

    tables = analyze_file(
        Path(smk.input.activations),
        pl.read_parquet(smk.input.per_head),
        HeadClassThresholds(**smk.params.thresholds),
        attend_threshold=smk.params.attend_threshold,
    )
    _write_tables(tables, smk.output, GEOMETRY_TABLES)
    title, out = _pair_title(smk), smk.output
    plots.plot_bos_alignment(tables["bos_alignment"], out.figure_bos_alignment, title)
    plots.plot_halfspace_margins(tables["halfspace"], out.figure_halfspace_margins, title)
    plots.plot_value_rank(tables["value_rank"], out.figure_value_rank, title)
    plots.plot_bos_value_norm(tables["bos_value_norm"], out.figure_bos_value_norm, title)
    plots.plot_bos_residual_norm(tables["bos_residual_norm"], out.figure_bos_residual_norm, title)


def analyze_geometry_long_context(smk: Any) -> None:
    from sinkscope.geometry.long_context import halfspace_long_context
    from sinkscope.geometry.names import LONG_CONTEXT_TABLE
    from sinkscope.paths import GEOMETRY_LONG_CONTEXT_TABLES

    settings = smk.params.long_context
    table = halfspace_long_context(
        smk.input.model_dir,
        smk.input.documents,
        n_sequences=settings["n_sequences"],
        seq_len=settings["seq_len"],
        seed=smk.params.stream_seed,
        model_name=smk.wildcards.model,
        dataset_name=smk.wildcards.dataset,
        threads=smk.threads,
    )
    _write_tables({LONG_CONTEXT_TABLE: table}, smk.output, GEOMETRY_LONG_CONTEXT_TABLES)


def summarize_geometry(smk: Any) -> None:
    from sinkscope.geometry import plots
    from sinkscope.geometry.summary import long_context_table, summarize
    from sinkscope.paths import (
        GEOMETRY_LONG_CONTEXT_TABLES,
        GEOMETRY_SUMMARY_TABLES,
        GEOMETRY_TABLES,
    )

    pairs = _read_tables(list(smk.input), GEOMETRY_TABLES + GEOMETRY_LONG_CONTEXT_TABLES)
    summary = summarize(pairs)
    _write_tables(summary, smk.output, GEOMETRY_SUMMARY_TABLES)
    title, out = "pooled over datasets", smk.output
    plots.plot_bos_alignment(summary["bos_alignment"], out.figure_bos_alignment, title)
    plots.plot_halfspace_margins(
        [p["halfspace"] for p in pairs],
        out.figure_halfspace_margins,
        title,
        long_context=long_context_table(pairs),
    )
    plots.plot_value_rank([p["value_rank"] for p in pairs], out.figure_value_rank, title)
    plots.plot_bos_value_norm(
        [p["bos_value_norm"] for p in pairs], out.figure_bos_value_norm, title
    )
    plots.plot_bos_residual_norm(summary["bos_residual_norm"], out.figure_bos_residual_norm, title)


def analyze_oversmoothing(smk: Any) -> None:
    from sinkscope.oversmoothing.analysis import analyze_file
    from sinkscope.paths import OVERSMOOTHING_TABLES

    settings = smk.params.oversmoothing
    tables = analyze_file(
        Path(smk.input.activations),
        pl.read_parquet(smk.input.per_head),
        settings["context_lengths"],
        settings["uniformity_threshold"],
        include_bos=settings["include_bos"],
    )
    _write_tables(tables, smk.output, OVERSMOOTHING_TABLES)
    _plot_oversmoothing(tables, smk, settings["uniformity_threshold"])


def summarize_oversmoothing(smk: Any) -> None:
    from sinkscope.oversmoothing.summary import summarize
    from sinkscope.paths import OVERSMOOTHING_TABLES

    summary = summarize(_read_tables(list(smk.input), OVERSMOOTHING_TABLES))
    _write_tables(summary, smk.output, OVERSMOOTHING_TABLES)
    _plot_oversmoothing(summary, smk, smk.params.oversmoothing["uniformity_threshold"])


def _plot_oversmoothing(
    tables: dict[str, pl.DataFrame], smk: Any, uniformity_threshold: float
) -> None:
    """``plot_all`` writes the paper-numbered figures into a folder; move them to the outputs."""
    from sinkscope.heads.classify import HeadClassThresholds
    from sinkscope.oversmoothing.names import FIGURE_FILES
    from sinkscope.oversmoothing.plots import plot_all
    from sinkscope.paths import OVERSMOOTHING_FIGURES

    outputs = smk.output
    thresholds = HeadClassThresholds(**smk.params.thresholds)
    folder = Path(getattr(outputs, f"figure_{OVERSMOOTHING_FIGURES[0]}")).parent
    staging = folder / f".figures-{os.getpid()}"
    try:
        plot_all(tables, staging, uniformity_threshold, thresholds)
        written = {Path(filename).stem: filename for filename in FIGURE_FILES.values()}
        for name in OVERSMOOTHING_FIGURES:
            os.replace(staging / written[name], getattr(outputs, f"figure_{name}"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def analyze_streaming(smk: Any) -> None:
    from sinkscope.paths import STREAMING_POLICY_TABLES
    from sinkscope.streaming import plots
    from sinkscope.streaming.experiment import evaluate_pair

    model, dataset = smk.wildcards.model, smk.wildcards.dataset
    tables = evaluate_pair(
        smk.input.model_dir,
        smk.input.documents,
        {**smk.params.params, "model_name": model, "dataset_name": dataset},
    )
    _write_tables(tables, smk.output, STREAMING_POLICY_TABLES)
    title = f"{model} / {dataset}"
    plots.plot_nll_by_position(tables, smk.output.figure_nll_by_position, title)
    plots.plot_perplexity_vs_window(tables, smk.output.figure_perplexity_vs_window, title)
    plots.plot_sink_count(tables, smk.output.figure_sink_count, title)


def analyze_streaming_recompute(smk: Any) -> None:
    from sinkscope.paths import STREAMING_RECOMPUTE_TABLES
    from sinkscope.streaming import plots
    from sinkscope.streaming.recompute import recompute_pair

    model, dataset = smk.wildcards.model, smk.wildcards.dataset
    tables = recompute_pair(
        smk.input.model_dir,
        smk.input.documents,
        smk.input.nll_by_position,
        smk.input.settings,
        {**smk.params.params, "model_name": model, "dataset_name": dataset},
    )
    _write_tables(tables, smk.output, STREAMING_RECOMPUTE_TABLES)
    plots.plot_recompute(tables, smk.output.figure_recompute, f"{model} / {dataset}")


def analyze_streaming_first_positions(smk: Any) -> None:
    from sinkscope.paths import STREAMING_FIRST_POSITION_TABLES
    from sinkscope.streaming import plots
    from sinkscope.streaming.first_positions import first_position_mass

    tables = {
        "first_position_mass": first_position_mass(
            smk.input.activations, smk.params.first_positions
        )
    }
    _write_tables(tables, smk.output, STREAMING_FIRST_POSITION_TABLES)
    title = f"{smk.wildcards.model} / {smk.wildcards.dataset}"
    plots.plot_first_position_mass(tables, smk.output.figure_first_position_mass, title)


def summarize_streaming(smk: Any) -> None:
    from sinkscope.paths import STREAMING_SUMMARY_TABLES, STREAMING_TABLES
    from sinkscope.streaming.plots import plot_summary
    from sinkscope.streaming.summary import summarize

    heads = [pl.read_parquet(path) for path in smk.input.per_head]
    summary = summarize(_read_tables(list(smk.input.tables), STREAMING_TABLES), heads)
    _write_tables(summary, smk.output, STREAMING_SUMMARY_TABLES)
    plot_summary(summary, smk.output.figure_eviction_damage, "StreamingLLM caches, all pairs")


def cost_toy(smk: Any) -> None:
    from sinkscope.costs import toy_table
    from sinkscope.costs.plots import plot_toy

    rows = toy_table(smk.params.T)
    write_table(pl.DataFrame(rows), smk.output.table)
    plot_toy(rows, smk.output.figure)


def cost_backcopy_run(smk: Any) -> None:
    from sinkscope.costs import run_backcopy
    from sinkscope.io import write_json

    wc = smk.wildcards
    write_json(run_backcopy(int(wc.T), wc.pattern, int(wc.seed), smk.params.params), smk.output.row)


def cost_backcopy_e2e(smk: Any) -> None:
    from sinkscope.costs import run_backcopy_end_to_end
    from sinkscope.io import write_json

    wc = smk.wildcards
    row = run_backcopy_end_to_end(int(wc.T), wc.pattern, int(wc.seed), smk.params.params)
    write_json(row, smk.output.row)


def cost_copypaste_run(smk: Any) -> None:
    from sinkscope.costs import run_copypaste
    from sinkscope.io import write_json

    wc = smk.wildcards
    row = run_copypaste(int(wc.n), float(wc.delta), wc.pattern, int(wc.seed), smk.params.params)
    write_json(row, smk.output.row)


def _rows(paths: list[str]) -> list[dict[str, Any]]:
    from sinkscope.io import read_json

    return [read_json(path) for path in paths]


def summarize_backcopy(smk: Any) -> None:
    from sinkscope.costs import condition3_grid, condition3_vs_measured, fit_slopes
    from sinkscope.costs.backcopy import condition3_panel
    from sinkscope.costs.plots import plot_backcopy_costs, plot_condition3

    rows = _rows(list(smk.input.rows))
    write_table(pl.DataFrame(rows), smk.output.table_runs)
    slopes = [
        {"cost": cost, "pattern": pattern, **fit}
        for cost in ("cost_total", "cost_qk", "cost_total_sqrt_d")
        for pattern, fit in fit_slopes(rows, "T", cost).items()
    ]
    write_table(pl.DataFrame(slopes), smk.output.table_slopes)
    grid = condition3_grid(**smk.params.condition3)
    write_table(pl.DataFrame(grid), smk.output.table_condition3)
    write_table(pl.DataFrame(condition3_vs_measured(rows)), smk.output.table_condition3_measured)
    plot_backcopy_costs(rows, smk.output.figure_costs, "backcopy task (Theorem 7.1)")
    panel = condition3_panel(
        smk.params.condition3["sizes"], smk.params.condition3["d_offsets"], smk.params.n_dormant
    )
    plot_condition3(grid, smk.output.figure_condition3, **panel, measured=rows)


def summarize_backcopy_e2e(smk: Any) -> None:
    write_table(pl.DataFrame(_rows(list(smk.input.rows))), smk.output.table)


def summarize_copypaste(smk: Any) -> None:
    from sinkscope.costs.plots import plot_copypaste_costs

    rows = _rows(list(smk.input.rows))
    write_table(pl.DataFrame(rows), smk.output.table_runs)
    plot_copypaste_costs(rows, smk.output.figure_costs)


def claims(smk: Any) -> None:
    from sinkscope.claims.observations import evaluate_observations
    from sinkscope.claims.registry import evaluate_claims
    from sinkscope.claims.render import write_claims
    from sinkscope.claims.tolerances import resolve_tolerances

    tables = {key: pl.read_parquet(path) for key, path in smk.input.items()}
    table = evaluate_claims(tables, smk.params.tolerances, smk.params.models)
    near_full_rank = resolve_tolerances(smk.params.tolerances)["geometry"]["near_full_rank"]
    observations = evaluate_observations(tables, near_full_rank)
    write_claims(
        table,
        smk.output.markdown,
        smk.output.table,
        smk.output.rst,
        observations=observations,
        observations_path=smk.output.observations,
    )


# --- training dynamics of the companion paper (workflow/rules/dynamics.smk)


def _dynamics_run(smk: Any, part: str, run_fn: Callable[[dict], dict[str, pl.DataFrame]]) -> None:
    from sinkscope.io import write_json
    from sinkscope.paths import DYNAMICS_RUN_TABLES

    tables = run_fn(dict(smk.params.spec))
    for name in DYNAMICS_RUN_TABLES[part]:
        write_table(tables[name], getattr(smk.output, name))
    timing = tables["timing"].row(0, named=True)
    write_json({**timing, "spec": dict(smk.params.spec)}, smk.output.timing)


def dynamics_value_softmax_run(smk: Any) -> None:
    from sinkscope.dynamics import run_value_softmax

    _dynamics_run(smk, "value_softmax", run_value_softmax)


def dynamics_induction_run(smk: Any) -> None:
    from sinkscope.dynamics import run_induction

    _dynamics_run(smk, "induction", run_induction)


def dynamics_classification_run(smk: Any) -> None:
    from sinkscope.dynamics import run_classification

    _dynamics_run(smk, "classification", run_classification)


def _summarize_dynamics(smk: Any, part: str, summarize: Callable[[list], dict]) -> None:
    from sinkscope.dynamics.plots import FIGURES
    from sinkscope.io import write_json
    from sinkscope.paths import DYNAMICS_RUN_TABLES, DYNAMICS_SUMMARY_TABLES

    names = DYNAMICS_RUN_TABLES[part]
    runs = [
        {name: pl.read_parquet(path) for name, path in zip(names, files, strict=True)}
        for files in zip(*(getattr(smk.input, name) for name in names), strict=True)
    ]
    tables = summarize(runs)
    for name in DYNAMICS_SUMMARY_TABLES[part]:
        write_table(tables[name], getattr(smk.output, f"table_{name}"))
    for name, plot in FIGURES[part].items():
        plot(tables, getattr(smk.output, f"figure_{name}"))
    write_json(_rows(list(smk.input.timing)), smk.output.timing)


def summarize_dynamics_value_softmax(smk: Any) -> None:
    from sinkscope.dynamics import summarize_value_softmax

    _summarize_dynamics(smk, "value_softmax", summarize_value_softmax)


def summarize_dynamics_induction(smk: Any) -> None:
    from sinkscope.dynamics import summarize_induction

    _summarize_dynamics(smk, "induction", summarize_induction)


def summarize_dynamics_classification(smk: Any) -> None:
    from sinkscope.dynamics import summarize_classification

    _summarize_dynamics(smk, "classification", summarize_classification)


STEPS: dict[str, Callable[[Any], None]] = {
    "dynamics_value_softmax_run": dynamics_value_softmax_run,
    "dynamics_induction_run": dynamics_induction_run,
    "dynamics_classification_run": dynamics_classification_run,
    "summarize_dynamics_value_softmax": summarize_dynamics_value_softmax,
    "summarize_dynamics_induction": summarize_dynamics_induction,
    "summarize_dynamics_classification": summarize_dynamics_classification,
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
    "cut_tokens": cut_tokens,
    "extract_activations": extract_activations,
    "classify_heads": classify_heads,
    "summarize_heads": summarize_heads,
    "analyze_geometry": analyze_geometry,
    "analyze_geometry_long_context": analyze_geometry_long_context,
    "summarize_geometry": summarize_geometry,
    "analyze_oversmoothing": analyze_oversmoothing,
    "summarize_oversmoothing": summarize_oversmoothing,
    "analyze_streaming": analyze_streaming,
    "analyze_streaming_recompute": analyze_streaming_recompute,
    "analyze_streaming_first_positions": analyze_streaming_first_positions,
    "summarize_streaming": summarize_streaming,
}


def run(step: str, smk: Any) -> None:
    """Entry point of every workflow script: log to the rule's log, delete what killed earlier
    jobs of the same outputs left behind (their temporary files and folders; Snakemake runs one
    job per output, so all are stale), then run the step."""
    console = redirect_to_log(smk.log[0])
    logging.getLogger("sinkscope").info("%s: %s", step, dict(smk.wildcards.items()))
    try:
        for output in smk.output:
            remove_stale_partials(output)
        STEPS[step](smk)
    except Exception as error:
        # the traceback goes to the log; the console gets the one sentence, so that a user sees
        # what to change without opening the log
        console.write(f"{failure_summary(step, error)} (traceback: {smk.log[0]})\n")
        raise


def failure_summary(step: str, error: BaseException) -> str:
    """One line for the console: the step, the error's class and the first line of its message."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else "(no message)"
    return f"sinkscope {step} failed: {type(error).__name__}: {first}"
