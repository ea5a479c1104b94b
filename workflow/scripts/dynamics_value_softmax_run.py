"""Snakemake script of rule dynamics_value_softmax_run: see sinkscope.steps.dynamics_value_softmax_run."""

from sinkscope.steps import run

run("dynamics_value_softmax_run", snakemake)  # noqa: F821 - injected by Snakemake
