"""Snakemake script of rule claims: see sinkscope.steps.claims."""
from sinkscope.steps import run

run("claims", snakemake)  # noqa: F821 - injected by Snakemake
