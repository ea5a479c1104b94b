"""Snakemake script of rule prepare_model: see sinkscope.steps.prepare_model."""
from sinkscope.steps import run

run("prepare_model", snakemake)  # noqa: F821 - injected by Snakemake
