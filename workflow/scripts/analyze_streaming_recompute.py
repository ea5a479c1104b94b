"""Snakemake script of rule analyze_streaming_recompute: see sinkscope.steps.analyze_streaming_recompute."""

from sinkscope.steps import run

run("analyze_streaming_recompute", snakemake)  # noqa: F821 - injected by Snakemake
