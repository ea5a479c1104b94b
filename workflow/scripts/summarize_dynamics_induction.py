"""Snakemake script of rule summarize_dynamics_induction: see sinkscope.steps.summarize_dynamics_induction."""

from sinkscope.steps import run

run("summarize_dynamics_induction", snakemake)  # noqa: F821 - injected by Snakemake
