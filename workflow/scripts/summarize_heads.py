"""Snakemake script of rule summarize_heads: see sinkscope.steps.summarize_heads."""
from sinkscope.steps import run

run("summarize_heads", snakemake)  # noqa: F821 - injected by Snakemake
