# Config validation and the target list. Runs when the workflow is parsed, before any job.
import re

from snakemake.utils import validate

from sinkscope.config import validate_config, pairs
from sinkscope.paths import Paths


validate(config, "../schemas/config.schema.yaml")
config.update(validate_config(config))
paths = Paths("results")


wildcard_constraints:
    model="|".join(map(re.escape, config["models"])),
    dataset="|".join(map(re.escape, config["datasets"])),


localrules:
    prepare_model,
    prepare_corpus,


def all_targets():
    return paths.all_targets(pairs(config))
