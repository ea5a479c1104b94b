"""Snakemake script of rule analyze_streaming_first_positions: see sinkscope.steps.analyze_streaming_first_positions."""

from sinkscope.steps import run

run("analyze_streaming_first_positions", snakemake)  # noqa: F821 - injected by Snakemake
