"""Snakemake script of rule dynamics_classification_run: see sinkscope.steps.dynamics_classification_run."""

from sinkscope.steps import run

run("dynamics_classification_run", snakemake)  # noqa: F821 - injected by Snakemake
