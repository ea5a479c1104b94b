"""Snakemake script of rule prepare_corpus: see sinkscope.steps.prepare_corpus."""
from sinkscope.steps import run

run("prepare_corpus", snakemake)  # noqa: F821 - injected by Snakemake
