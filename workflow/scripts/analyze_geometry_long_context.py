"""Snakemake script of rule analyze_geometry_long_context: see sinkscope.steps.analyze_geometry_long_context."""

from sinkscope.steps import run

run("analyze_geometry_long_context", snakemake)  # noqa: F821 - injected by Snakemake
