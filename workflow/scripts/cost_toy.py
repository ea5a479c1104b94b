"""Snakemake script of rule cost_toy: see sinkscope.steps.cost_toy."""
from sinkscope.steps import run

run("cost_toy", snakemake)  # noqa: F821 - injected by Snakemake
