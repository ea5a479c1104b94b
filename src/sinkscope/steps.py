"""The glue between Snakemake jobs and the package: one function per rule.

Each ``workflow/scripts/<rule>.py`` calls :func:`run` with its ``snakemake`` object; the function
here unpacks inputs, outputs and params and calls the typed functions that hold the logic. Nothing
in this module computes anything itself.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import torch


def redirect_to_log(log_path: str) -> None:
    """Send stderr (Python and C level, progress bars included) and logging to the rule's log."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    handle = open(log_path, "w", buffering=1)  # noqa: SIM115 - lives as long as the job
    os.dup2(handle.fileno(), 2)
    sys.stderr = handle
    logging.basicConfig(
        stream=handle,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def prepare_model(smk: Any) -> None:
    from sinkscope.models import prepare_model as prepare

    prepare(
        smk.wildcards.model,
        smk.params.entry,
        Path(smk.output.model_dir),
        Path(smk.params.download_dir),
    )


def prepare_corpus(smk: Any) -> None:
    from sinkscope.corpora import prepare_corpus as prepare

    prepare(
        smk.wildcards.dataset,
        smk.params.entry,
        Path(smk.output.documents),
        Path(smk.params.download_dir),
    )


def cut_tokens(smk: Any) -> None:
    from sinkscope.tokens import prepare_tokens

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
    from sinkscope.extract import ExtractionSettings, config_digest
    from sinkscope.extract import extract_activations as extract

    torch.set_num_threads(max(1, int(smk.threads)))
    extraction = smk.params.extraction
    settings = ExtractionSettings(
        batch_size=extraction["batch_size"],
        storage_dtypes=extraction["storage_dtypes"],
        compression_level=extraction["compression_level"],
        device=extraction["device"],
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
    from sinkscope.heads import HeadClassThresholds, classify_file
    from sinkscope.io import write_table
    from sinkscope.plotting import plot_class_map, plot_mass_heatmaps

    thresholds = HeadClassThresholds(**smk.params.thresholds)
    per_sequence, per_head = classify_file(Path(smk.input.activations), thresholds)
    write_table(per_sequence, smk.output.per_sequence)
    write_table(per_head, smk.output.per_head)
    extraction = smk.params.extraction
    title = (
        f"{smk.wildcards.model} on {smk.wildcards.dataset} "
        f"(N={extraction['n_sequences']}, T={extraction['context_length']})"
    )
    plot_mass_heatmaps(per_head, Path(smk.output.mass_heatmaps), title)
    plot_class_map(per_head, Path(smk.output.class_map), title)


def summarize_heads(smk: Any) -> None:
    from sinkscope.heads import HeadClassThresholds, summarize
    from sinkscope.io import write_table
    from sinkscope.plotting import plot_summary_bars

    thresholds = HeadClassThresholds(**smk.params.thresholds)
    tables = [pl.read_parquet(path) for path in smk.input.per_head]
    summary = summarize(tables, thresholds)
    write_table(summary, smk.output.table)
    plot_summary_bars(summary, Path(smk.output.figure))


STEPS: dict[str, Callable[[Any], None]] = {
    name: function
    for name, function in globals().items()
    if name
    in {
        "prepare_model",
        "prepare_corpus",
        "cut_tokens",
        "extract_activations",
        "classify_heads",
        "summarize_heads",
    }
}


def run(step: str, smk: Any) -> None:
    """Entry point of every workflow script: log to the rule's log, then run the step."""
    redirect_to_log(smk.log[0])
    logging.getLogger("sinkscope").info("%s: %s", step, dict(smk.wildcards.items()))
    STEPS[step](smk)
