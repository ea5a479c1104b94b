"""Snakemake script of rule summarize_copypaste: see sinkscope.steps.summarize_copypaste."""
from sinkscope.steps import run

run("summarize_copypaste", snakemake)  # noqa: F821 - injected by Snakemake
