"""What a SLURM run (``snakemake --profile slurm``) needs from the machine it starts on.

Snakemake's SLURM executor submits every job with ``sbatch``, cancels with ``scancel`` and polls
with ``sacct`` or ``squeue`` (the profile's ``slurm-status-command``). Without them it fails only
when the first job is submitted, and then resubmits it "with more memory" as if the job had
failed. :func:`check_slurm_client` runs first (the workflow's ``onstart``) and says in one sentence
what is missing. :func:`hub_offline_in_jobs` keeps the jobs off the network: compute nodes
usually have none, and the hub's models and datasets are fetched once on the login node
(docs/cluster.md, step 2).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, MutableMapping

#: the commands the executor always runs: submission and cancellation
SLURM_SUBMIT_TOOLS: tuple[str, ...] = ("sbatch", "scancel")
#: the commands it may poll job states with; the profile's ``slurm-status-command`` picks one
SLURM_STATUS_TOOLS: tuple[str, ...] = ("sacct", "squeue")


class SlurmClientError(RuntimeError):
    """The machine that runs ``snakemake --profile slurm`` lacks SLURM's client commands."""


def missing_slurm_tools(
    status_command: str | None = None, which: Callable[[str], str | None] = shutil.which
) -> list[str]:
    """The SLURM client commands that are not on ``PATH``.

    ``status_command`` is the executor's ``slurm-status-command`` (``sacct`` or ``squeue``); when
    it is unset, either of the two will do and both are reported only when both are missing.
    """
    missing = [tool for tool in SLURM_SUBMIT_TOOLS if which(tool) is None]
    if status_command:
        if which(status_command) is None:
            missing.append(status_command)
    elif all(which(tool) is None for tool in SLURM_STATUS_TOOLS):
        missing.extend(SLURM_STATUS_TOOLS)
    return missing


def check_slurm_client(
    status_command: str | None = None, which: Callable[[str], str | None] = shutil.which
) -> None:
    """Raise :class:`SlurmClientError` naming the missing commands before any job is submitted."""
    missing = missing_slurm_tools(status_command, which)
    if missing:
        raise SlurmClientError(
            f"snakemake --profile slurm needs SLURM's client commands, and this machine has no "
            f"{', '.join(missing)} on PATH: run it on the cluster's login node (or after "
            f"`module load slurm` where your cluster uses modules), or run locally with "
            f"`snakemake --cores N` instead"
        )


#: The environment variable SLURM sets in every job: a process that has it runs in a job.
SLURM_JOB_VARIABLE = "SLURM_JOB_ID"
#: The variables that keep huggingface_hub and datasets on their local caches.
HUB_OFFLINE_VARIABLES: tuple[str, ...] = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def hub_offline_in_jobs(environ: MutableMapping[str, str]) -> list[str]:
    """In a SLURM job, set :data:`HUB_OFFLINE_VARIABLES` to ``1`` where the user has not set
    them (``=0`` keeps a job online), and return the names set. The workflow calls it first
    (``Snakefile``), before anything imports huggingface_hub, which reads them on import: every
    job, and its parse of the workflow (the models' shapes), then reads the hub cache that the
    login node filled and never waits on a network it does not have. The rules that download
    (``prepare_model``, ``prepare_corpus``) are local rules: they run with the controller."""
    if SLURM_JOB_VARIABLE not in environ:
        return []
    added = [name for name in HUB_OFFLINE_VARIABLES if name not in environ]
    for name in added:
        environ[name] = "1"
    return added


def package_on_pythonpath(source: str, environ: MutableMapping[str, str]) -> bool:
    """Put this checkout's package folder ``source`` (the repository's ``src/``) first on
    ``PYTHONPATH`` in ``environ``, so that every job imports the code of the checkout that
    built the DAG, whichever Python runs it: the ``.venv`` (whose editable install points there
    too) or a conda environment of :func:`conda_env`, which holds the locked dependencies and
    not the package. Jobs inherit it (a local job's process; sbatch exports the environment).
    Returns whether it was added (it is not added twice)."""
    entries = [e for e in environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    if source in entries:
        return False
    environ["PYTHONPATH"] = os.pathsep.join([source, *entries])
    return True
