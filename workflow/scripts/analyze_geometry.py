"""Snakemake script of rule analyze_geometry: see sinkscope.steps.analyze_geometry."""
from sinkscope.steps import run

run("analyze_geometry", snakemake)  # noqa: F821 - injected by Snakemake
