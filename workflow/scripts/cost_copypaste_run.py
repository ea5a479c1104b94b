"""Snakemake script of rule cost_copypaste_run: see sinkscope.steps.cost_copypaste_run."""
from sinkscope.steps import run

run("cost_copypaste_run", snakemake)  # noqa: F821 - injected by Snakemake
