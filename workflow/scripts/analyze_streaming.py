"""Snakemake script of rule analyze_streaming: see sinkscope.steps.analyze_streaming."""
from sinkscope.steps import run

run("analyze_streaming", snakemake)  # noqa: F821 - injected by Snakemake
