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
from sinkscope.paths import Paths


# sinkscope's validator first: its messages name every offending key as a dotted path; then
# Snakemake's own validate() against the same schema, as the workflow catalog expects.
config.update(validate_config(config))
validate(config, "../schemas/config.schema.yaml")
paths = Paths("results")


wildcard_constraints:
    model="|".join(map(re.escape, config["models"])),
    dataset="|".join(map(re.escape, config["datasets"])),


localrules:
    prepare_model,
    prepare_corpus,


def all_targets():
    return paths.all_targets(pairs(config))
