"""Snakemake script of every rule: runs the function of sinkscope.steps.STEPS named by the rule."""

from sinkscope.steps import run

run(snakemake.rule, snakemake)  # noqa: F821 - injected by Snakemake
