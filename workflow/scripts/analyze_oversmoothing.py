"""Snakemake script of rule analyze_oversmoothing: see sinkscope.steps.analyze_oversmoothing."""
from sinkscope.steps import run

run("analyze_oversmoothing", snakemake)  # noqa: F821 - injected by Snakemake
