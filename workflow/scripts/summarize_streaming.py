"""Snakemake script of rule summarize_streaming: see sinkscope.steps.summarize_streaming."""
from sinkscope.steps import run

run("summarize_streaming", snakemake)  # noqa: F821 - injected by Snakemake
