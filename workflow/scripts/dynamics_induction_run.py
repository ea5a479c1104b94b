"""Snakemake script of rule dynamics_induction_run: see sinkscope.steps.dynamics_induction_run."""

from sinkscope.steps import run

run("dynamics_induction_run", snakemake)  # noqa: F821 - injected by Snakemake
