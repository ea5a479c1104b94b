"""Snakemake script of rule summarize_geometry: see sinkscope.steps.summarize_geometry."""
from sinkscope.steps import run

run("summarize_geometry", snakemake)  # noqa: F821 - injected by Snakemake
