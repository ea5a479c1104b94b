"""Snakemake script of rule summarize_oversmoothing: see sinkscope.steps.summarize_oversmoothing."""
from sinkscope.steps import run

run("summarize_oversmoothing", snakemake)  # noqa: F821 - injected by Snakemake
