"""Snakemake script of rule cost_backcopy_run: see sinkscope.steps.cost_backcopy_run."""
from sinkscope.steps import run

run("cost_backcopy_run", snakemake)  # noqa: F821 - injected by Snakemake
