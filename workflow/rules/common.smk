# Config validation and the target list. Runs when the workflow is parsed, before any job.

from snakemake.logging import logger
from snakemake.utils import validate

# (the Snakefile puts this repository's src/ on sys.path)
from sinkscope.config import (
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
    streaming_params,
    validate_config,
)
from sinkscope.sizing.requests import job_threads as rule_threads
from sinkscope.sizing.requests import rule_resources
from sinkscope.streaming.applicability import cache_pairs
from sinkscope.paths import (
    GEOMETRY_FIGURES,
    GEOMETRY_LONG_CONTEXT_FIGURES,
    GEOMETRY_LONG_CONTEXT_TABLES,
    GEOMETRY_SUMMARY_TABLES,
    GEOMETRY_TABLES,
    OVERSMOOTHING_FIGURES,
    OVERSMOOTHING_TABLES,
    SINKS_FIGURES,
    SINKS_SUMMARY_FIGURES,
    SINKS_SUMMARY_TABLES,
    SINKS_TABLES,
    STREAMING_FIRST_POSITION_FIGURES,
    STREAMING_FIRST_POSITION_TABLES,
    STREAMING_POLICY_FIGURES,
    STREAMING_POLICY_TABLES,
    STREAMING_RECOMPUTE_FIGURES,
    STREAMING_RECOMPUTE_TABLES,
    STREAMING_SUMMARY_FIGURES,
    STREAMING_SUMMARY_TABLES,
    STREAMING_TABLES,
    Paths,
)


# sinkscope's validator first: its messages name every offending key as a dotted path; then
# Snakemake's own validate() against the same schema, as the workflow catalog expects.
config.update(validate_config(config))
validate(config, "../schemas/config.schema.yaml")
paths = Paths("results")
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


def job_threads(rule):
    """A rule's threads (sinkscope.sizing.requests.job_threads): on a cluster executor, which
    defines no local core count, the cluster's; on one machine at most half its cores."""
    return rule_threads(rule, workflow._cores)


# Scheduling order (Snakemake runs the ready job of highest priority first): the model path that
# users wait for -- prepare, tokenize, cut, extract, classify heads (the first table), geometry,
# oversmoothing, their summaries, then the sinks beyond BOS -- before the StreamingLLM
# evaluation and the model-free experiments (§7 costs, training dynamics), whose summaries go
# before their remaining runs.
# Every rule has an entry (a rule without one fails when the workflow is parsed).
PRIORITY = {
    "classify_heads": 100,
    **dict.fromkeys(
        (
            "prepare_model",
            "prepare_corpus",
            "tokenize_corpus",
            "cut_tokens",
            "extract_activations",
        ),
        90,
    ),
    "summarize_heads": 80,
    **dict.fromkeys(("analyze_geometry", "analyze_oversmoothing"), 70),
    **dict.fromkeys(("summarize_geometry", "summarize_oversmoothing", "claims"), 60),
    "analyze_sinks": 55,
    "summarize_sinks": 52,
    **dict.fromkeys(("analyze_streaming_first_positions", "analyze_geometry_long_context"), 50),
    # the longest model-free runs (1-3 minutes each) before the StreamingLLM pairs, so that none
    # of them is the last job of a run
    **dict.fromkeys(("cost_backcopy_e2e", "cost_copypaste_run", "dynamics_induction_run"), 45),
    **dict.fromkeys(
        ("analyze_streaming", "analyze_streaming_recompute", "summarize_streaming"), 40
    ),
    **dict.fromkeys(
        (
            "summarize_backcopy",
            "summarize_copypaste",
            "summarize_backcopy_e2e",
            "summarize_dynamics_value_softmax",
            "summarize_dynamics_induction",
            "summarize_dynamics_classification",
        ),
        10,
    ),
    **dict.fromkeys(
        (
            "cost_toy",
            "cost_backcopy_run",
            "dynamics_value_softmax_run",
            "dynamics_classification_run",
        ),
        0,
    ),
}


def job_resources(rule, minutes=None):
    """Every job's mem_mb, runtime, gpu and slurm_partition (sinkscope.sizing.requests)."""
    return rule_resources(rule, config, minutes)


# N and T of the extraction, named in the titles of the per-pair figures
EXTRACTION_SCALE = extraction_scale(config)
# The pairs with BOS evaluated under StreamingLLM's caches: those whose model has rotary positions
STREAMING_CACHE_PAIRS = cache_pairs(config, bos_pairs(config))


def all_targets():
    return (
        paths.all_targets(pairs(config), config["costs"])
        + paths.long_context_targets(pairs(config), config)
        + paths.streaming_targets(pairs(config), config["streaming"], STREAMING_CACHE_PAIRS)
        + paths.dynamics_targets(config["dynamics"])
    )


def claims_inputs():
    """The summary tables of the analyses this config runs (inputs of rule claims); no
    StreamingLLM summary when no pair is evaluated under the caches."""
    return paths.claims_inputs(config, () if STREAMING_CACHE_PAIRS else ("streaming",))


# Named outputs of the analysis rules: table_<name> (parquet), table_<name>_csv, figure_<name>.
def tables_of(analysis, names):
    outputs = {}
    for name in names:
        outputs[f"table_{name}"] = paths.table(analysis, name)
        outputs[f"table_{name}_csv"] = paths.table(analysis, name, "csv")
    return outputs


def figures_of(analysis, names, category):
    return {
        f"figure_{name}": report(
            paths.figure(analysis, name),
            caption=f"../report/{analysis}_{name}.rst",
            category=category,
            subcategory="{model}",
            labels={"model": "{model}", "dataset": "{dataset}", "figure": name},
        )
        for name in names
    }


def summary_tables_of(analysis, names):
    outputs = {}
    for name in names:
        outputs[f"table_{name}"] = paths.summary_table(analysis, name)
        outputs[f"table_{name}_csv"] = paths.summary_table(analysis, name, "csv")
    return outputs


def summary_figures_of(analysis, names, category):
    return {
        f"figure_{name}": report(
            paths.summary_figure(analysis, name),
            caption=f"../report/{analysis}_{name}_summary.rst",
            category="Summary",
            subcategory=category,
            labels={"model": "all", "dataset": "pooled", "figure": name},
        )
        for name in names
    }


def pair_tables(analysis, names):
    """Every BOS pair's parquet tables of one analysis (inputs of its summary rule: the pooled
    rows and the paper's claims are about BOS; no-BOS pairs have their own per-pair outputs)."""
    return [
        paths.table(analysis, name).format(model=model, dataset=dataset)
        for model, dataset in bos_pairs(config)
        for name in names
    ]

