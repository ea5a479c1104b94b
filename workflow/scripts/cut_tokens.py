"""Snakemake script of rule cut_tokens: see sinkscope.steps.cut_tokens."""
from sinkscope.steps import run

run("cut_tokens", snakemake)  # noqa: F821 - injected by Snakemake
