# sinkscope: "Sink vs. diagonal patterns" reproduced for every model x dataset pair in config.yaml.
# The rules only declare inputs, outputs, resources and logs; all logic is in the sinkscope package.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# The workflow imports the sinkscope package from this repository's src/, and so do its jobs
# (PYTHONPATH, below), so the code always matches this checkout.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

# In a SLURM job, HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1 unless set: the hub's files were
# fetched on the login node (docs/cluster.md, step 2); set before anything imports huggingface_hub.
from sinkscope.cluster import hub_offline_in_jobs, package_on_pythonpath

hub_offline_in_jobs(os.environ)
# Jobs import this checkout's package whichever Python runs them (the .venv, or a conda env of
# --sdm conda, which holds the locked dependencies only): src/ goes first on their PYTHONPATH.
package_on_pythonpath(str(Path(workflow.basedir) / "src"), os.environ)

from sinkscope.config import check_config_files

# The config files in use are read strictly first (a key given twice, a tab, an unquoted all-digit
# sha256: file and line named), before Snakemake's own reading keeps the last of duplicate keys.
check_config_files(workflow.overwrite_configfiles or ["config.yaml"])


# config.yaml is the default config. A config given with --configfile REPLACES it (config.yaml is
# not read; several --configfile files are layered left to right, e.g. tests/configs/tiny.yaml
# tiny_model_only.yaml); --config KEY=VALUE edits whichever config is in use.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"



report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


rule all:
    input:
        all_targets(),
    default_target: True


include: "workflow/rules/prepare.smk"
include: "workflow/rules/extract.smk"
# one rule file per stage of the registry of outputs (sinkscope.outputs.STAGES)
include: "workflow/rules/heads.smk"
include: "workflow/rules/geometry.smk"
include: "workflow/rules/oversmoothing.smk"
include: "workflow/rules/sinks.smk"
include: "workflow/rules/streaming.smk"
include: "workflow/rules/costs.smk"
include: "workflow/rules/dynamics.smk"
include: "workflow/rules/claims.smk"
