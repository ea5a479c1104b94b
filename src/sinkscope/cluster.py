"""What a SLURM run (``snakemake --profile slurm``) needs from the machine it starts on.

Snakemake's SLURM executor submits every job with ``sbatch``, cancels with ``scancel`` and polls
with ``sacct`` or ``squeue`` (the profile's ``slurm-status-command``). Without them it fails only
when the first job is submitted, and then resubmits it "with more memory" as if the job had
failed. :func:`check_slurm_client` runs first (the workflow's ``onstart``) and says in one sentence
what is missing.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

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
