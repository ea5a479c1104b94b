"""Snakemake script of rule extract_activations: see sinkscope.steps.extract_activations."""
from sinkscope.steps import run

run("extract_activations", snakemake)  # noqa: F821 - injected by Snakemake
