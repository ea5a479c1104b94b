# Config validation and the target list. Runs when the workflow is parsed, before any job.

from snakemake.logging import logger
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# (the Snakefile puts this repository's src/ on sys.path)
from sinkscope.config import (
    ConfigError,
    locate_problems,
    LONG_CONTEXT_INPUT_KEYS,
    LONG_CONTEXT_SOLVE_KEYS,
    backcopy_end_to_end_params,
    backcopy_params,
    bos_pairs,
    config_warnings,
    dataset_entry,
    corpus_ids,
    dataset_ids,
    extraction_content,
    extraction_scale,
    id_pattern,
    long_context_params,
    model_entry,
    pairs,
    streaming_cache_params,
    streaming_params,
    validate_config,
)
from sinkscope.sizing.requests import job_threads as rule_threads
from sinkscope.sizing.requests import rule_resources
from sinkscope.sizing.requests import conda_env as rule_conda_env
from sinkscope.streaming.applicability import cache_pairs
from sinkscope.outputs import priority
from sinkscope.paths import Paths


# sinkscope's validator first: its messages name every offending key as a dotted path; then
# Snakemake's own validate() against the same schema, as the workflow catalog expects.
try:
    config.update(validate_config(config))
except ConfigError as error:  # one message naming every offending key and where it is set
    files = [Path(f) for f in workflow.overwrite_configfiles or ["config.yaml"]]
    raise WorkflowError(locate_problems(str(error), files)) from None
validate(config, "../schemas/config.schema.yaml")
paths = Paths("results")
if paths.folder_problems():  # a file where results/ (or one of its folders) should be
    raise WorkflowError("; ".join(paths.folder_problems()))
for warning in config_warnings(config):
    logger.warning(f"sinkscope: warning: {warning}")
logger.info(
    f"sinkscope: config {' + '.join(map(str, workflow.overwrite_configfiles)) or 'config.yaml'}"
    f": {len(config['models'])} models x {len(config['datasets'])} datasets, "
    f"N = {config['extraction']['n_sequences']}, T = {config['extraction']['context_length']}"
)


wildcard_constraints:
    model=id_pattern(config["models"]),
    dataset=id_pattern(dataset_ids(config)),
    pattern="sink|diagonal",
    T=r"\d+",
    n=r"\d+",
    seed=r"\d+",
    delta=r"\d+(\.\d+)?",


localrules:
    prepare_model,
    prepare_corpus,


# A SLURM run checks for sbatch/scancel/sacct|squeue before the first submission (without them the
# executor fails at submission and resubmits "with more memory"). onstart runs once the executor is
# known, before any job starts; not in dry runs.
onstart:
    if workflow.executor_plugin is not None and workflow.executor_plugin.name == "slurm":
        from sinkscope.cluster import check_slurm_client

        check_slurm_client(getattr(workflow.executor_settings, "status_command", None))


def local_cores():
    """--cores of a local run; None for executors that submit jobs (no local core count)."""
    try:
        return workflow.cores
    except WorkflowError:
        return None


def job_threads(rule):
    """A rule's threads (sinkscope.sizing.requests.job_threads): on a cluster executor, which
    defines no local core count, the cluster's; on one machine at most half its cores."""
    return rule_threads(rule, local_cores())


# Scheduling order (Snakemake runs the ready job of highest priority first): every rule's
# priority: is sinkscope.outputs.priority(rule), stated once in the registry of outputs -- the
# model path users wait for first, then the StreamingLLM evaluation and the model-free experiments.


def conda_env(rule):
    """The rule's conda environment for --sdm conda (sinkscope.sizing.requests.conda_env), from here."""
    return f"../../{rule_conda_env(rule, config)}"


def job_resources(rule, minutes=None):
    """Every job's mem_mb, runtime, gpu and slurm_partition (sinkscope.sizing.requests)."""
    return rule_resources(rule, config, minutes)


# N and T of the extraction, named in the titles of the per-pair figures
EXTRACTION_SCALE = extraction_scale(config)
# The pairs that each registered job runs for (sinkscope.outputs.PAIR_SETS): every pair, the pairs
# with BOS, and those evaluated under StreamingLLM's caches (whose model has rotary positions)
PAIR_SETS = {
    "all": pairs(config),
    "bos": bos_pairs(config),
    "cache": cache_pairs(config, bos_pairs(config)),
}


def all_targets():
    """Every final output (sinkscope.paths.Paths.all_targets: the registry's, for this config)."""
    return paths.all_targets(config, PAIR_SETS)


def claims_inputs():
    """The summary tables of the analyses this config runs (inputs of rule claims)."""
    return paths.claims_inputs(config, PAIR_SETS)


def outputs_of(rule):
    """A registered rule's tables and figures (sinkscope.outputs), figures with their captions."""
    return paths.rule_outputs(rule, report)


def pooled_tables(summary, *rules, table=None):
    """The inputs of the summary ``summary`` (sinkscope.paths.Paths.pooled_tables)."""
    return paths.pooled_tables(summary, rules, config, PAIR_SETS, table)
