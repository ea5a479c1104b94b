"""Snakemake script of rule summarize_backcopy: see sinkscope.steps.summarize_backcopy."""
from sinkscope.steps import run

run("summarize_backcopy", snakemake)  # noqa: F821 - injected by Snakemake
