"""Snakemake script of rule cost_backcopy_e2e: see sinkscope.steps.cost_backcopy_e2e."""
from sinkscope.steps import run

run("cost_backcopy_e2e", snakemake)  # noqa: F821 - injected by Snakemake
