"""Snakemake script of rule summarize_dynamics_value_softmax: see sinkscope.steps.summarize_dynamics_value_softmax."""

from sinkscope.steps import run

run("summarize_dynamics_value_softmax", snakemake)  # noqa: F821 - injected by Snakemake
