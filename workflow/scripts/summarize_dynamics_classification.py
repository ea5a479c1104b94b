"""Snakemake script of rule summarize_dynamics_classification: see sinkscope.steps.summarize_dynamics_classification."""

from sinkscope.steps import run

run("summarize_dynamics_classification", snakemake)  # noqa: F821 - injected by Snakemake
