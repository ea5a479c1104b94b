"""Snakemake script of rule classify_heads: see sinkscope.steps.classify_heads."""
from sinkscope.steps import run

run("classify_heads", snakemake)  # noqa: F821 - injected by Snakemake
