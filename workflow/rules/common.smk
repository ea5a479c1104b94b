# Config validation and the target list. Runs when the workflow is parsed, before any job.
import re
import sys
from pathlib import Path

from snakemake.utils import validate

# The workflow imports the sinkscope package from this repository's src/ (jobs get it from the
# environment, where `make install` or envs/sinkscope.post-deploy.sh installs it in editable mode,
# so the code always matches this checkout).
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from sinkscope.config import validate_config, pairs
from sinkscope.paths import (
    GEOMETRY_FIGURES,
    GEOMETRY_SUMMARY_TABLES,
    GEOMETRY_TABLES,
    OVERSMOOTHING_FIGURES,
    OVERSMOOTHING_TABLES,
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


wildcard_constraints:
    model="|".join(map(re.escape, config["models"])),
    dataset="|".join(map(re.escape, config["datasets"])),
    pattern="sink|diagonal",
    T=r"\d+",
    n=r"\d+",
    seed=r"\d+",
    delta=r"\d+(\.\d+)?",


localrules:
    prepare_model,
    prepare_corpus,


def all_targets():
    return (
        paths.all_targets(pairs(config), config["costs"])
        + paths.streaming_targets(pairs(config), config["streaming"])
        + paths.dynamics_targets(config["dynamics"])
    )


def claims_inputs():
    """The summary tables of the analyses this config runs (inputs of rule claims)."""
    return paths.claims_inputs(config)


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
    """Every pair's parquet tables of one analysis (inputs of its summary rule)."""
    return [
        paths.table(analysis, name).format(model=model, dataset=dataset)
        for model, dataset in pairs(config)
        for name in names
    ]
