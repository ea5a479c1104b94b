"""Snakemake script of rule summarize_backcopy_e2e: see sinkscope.steps.summarize_backcopy_e2e."""
from sinkscope.steps import run

run("summarize_backcopy_e2e", snakemake)  # noqa: F821 - injected by Snakemake
