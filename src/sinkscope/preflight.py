"""``sinkscope preflight``: what a cluster run needs, checked on the login node before anything is
submitted (docs/cluster.md, step 3). Each check gives :class:`Finding` lines, one per thing
checked, each failure with its fix:

* SLURM (:func:`slurm_findings`): the client commands, the config's partitions among
  ``sinfo``'s, the GPU types of ``resources.gpu_types`` among the GPU partition's GRES, and an
  account's association where one is named (``sacctmgr``);
* torch (:func:`torch_findings`): a CUDA build when the model jobs ask for GPUs, and, only when
  asked (``--srun``: it queues a one-minute job), the GPU nodes' driver against
  :data:`sinkscope.prepare.models.MIN_DRIVER`;
* the hub (:func:`hub_findings`): every hub model and dataset at its revision in the hub cache,
  or else reachable with the user's token (a gated repository is named with its licence page);
* the disk (:func:`disk_findings`): free space under ``results/`` and ``HF_HOME`` against the
  plan's disk (:func:`sinkscope.sizing.plan.disk_need`).

Every command runs through the injectable ``run``/``which`` arguments, so the checks are tested
with stand-in commands.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Finding",
    "disk_findings",
    "hub_findings",
    "preflight",
    "render_findings",
    "slurm_findings",
    "torch_findings",
]

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


@dataclass(frozen=True)
class Finding:
    """One thing checked: ``ok``, what was found (one line) and, for a failure, the fix."""

    ok: bool
    what: str
    fix: str = ""

    def line(self) -> str:
        if self.ok:
            return f"ok    {self.what}"
        return f"FAIL  {self.what}; fix: {self.fix}"


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, check=False, timeout=120)


def _model_rules_run(config: Mapping[str, Any]) -> bool:
    return bool(config["models"]) and int(config["resources"]["gpus"]) > 0


def slurm_findings(
    config: Mapping[str, Any],
    account: str | None = None,
    run: Runner = _run,
    which: Callable[[str], str | None] = shutil.which,
) -> list[Finding]:
    """SLURM's client commands, the partitions, the GPU types and the account."""
    from sinkscope.cluster import missing_slurm_tools

    missing = missing_slurm_tools(None, which)
    if missing:
        return [
            Finding(
                False,
                f"SLURM: no {', '.join(missing)} on PATH",
                "run on the cluster's login node (or after `module load slurm`)",
            )
        ]
    findings = [Finding(True, "SLURM: sbatch, scancel and sacct or squeue on PATH")]
    listed = run(["sinfo", "-h", "-o", "%P %G"])
    if listed.returncode != 0:
        reason = (listed.stderr or listed.stdout).strip().splitlines()[-1:] or ["no output"]
        return [
            *findings,
            Finding(False, f"SLURM: sinfo failed ({reason[0]})", "check the cluster's SLURM"),
        ]
    gres: dict[str, list[str]] = {}
    for line in listed.stdout.splitlines():
        name, _, resources = line.strip().partition(" ")
        if name:
            gres.setdefault(name.rstrip("*"), []).extend(
                r for r in resources.split(",") if r and r != "(null)"
            )
    resources = config["resources"]
    wanted = [("resources.cpu_partition", resources["cpu_partition"])]
    if _model_rules_run(config):
        wanted.append(("resources.gpu_partition", resources["gpu_partition"]))
    for key, partition in wanted:
        if partition in gres:
            findings.append(Finding(True, f"{key} = {partition!r}: a partition of this cluster"))
        else:
            findings.append(
                Finding(
                    False,
                    f"{key} = {partition!r} is not a partition of this cluster (sinfo lists "
                    f"{', '.join(sorted(gres)) or 'none'})",
                    f"set {key} to one of them",
                )
            )
    partition = resources["gpu_partition"]
    if _model_rules_run(config) and resources.get("gpu_types") and partition in gres:
        offered = {
            parts[1]
            for entry in gres[partition]
            if len(parts := re.sub(r"\(.*\)$", "", entry).split(":")) >= 3 and parts[0] == "gpu"
        }
        for name in resources["gpu_types"]:
            if resources["gpu_type_resource"] == "constraint" or name in offered:
                findings.append(Finding(True, f"resources.gpu_types.{name}: on {partition!r}"))
            else:
                findings.append(
                    Finding(
                        False,
                        f"resources.gpu_types.{name}: no GPU of that type on partition "
                        f"{partition!r} (its GRES: {', '.join(gres[partition]) or 'none'})",
                        "name the types as the GRES does, or set resources.gpu_type_resource: "
                        "constraint for node features",
                    )
                )
    if account:
        user = os.environ.get("USER", "")
        shown = run(
            ["sacctmgr", "-nP", "show", "assoc", f"where user={user}", f"account={account}",
             "format=account"]
        )  # fmt: skip
        if shown.returncode != 0:
            findings.append(
                Finding(
                    False,
                    f"SLURM account {account!r}: sacctmgr failed "
                    f"({(shown.stderr or '').strip() or 'no output'})",
                    "ask your cluster's support which account to use",
                )
            )
        elif account in shown.stdout.split():
            findings.append(Finding(True, f"SLURM account {account!r}: {user} may use it"))
        else:
            findings.append(
                Finding(
                    False,
                    f"SLURM account {account!r}: no association for user {user!r}",
                    "set slurm_account in the profile to an account of yours "
                    "(sacctmgr show assoc where user=$USER)",
                )
            )
    return findings


def torch_findings(
    config: Mapping[str, Any], srun: bool = False, run: Runner = _run
) -> list[Finding]:
    """A CUDA build of torch where the model jobs ask for GPUs; with ``srun`` the GPU nodes'
    driver (a short job on ``resources.gpu_partition``)."""
    import torch

    from sinkscope.prepare.models import MIN_DRIVER

    if not _model_rules_run(config):
        return [Finding(True, "torch: the model jobs run on CPUs (resources.gpus: 0)")]
    if torch.version.cuda is None:
        return [
            Finding(
                False,
                f"torch {torch.__version__} is a CPU build, and the model jobs ask for GPUs",
                "make install LOCK=requirements-cuda.lock (docs/cluster.md, step 1)",
            )
        ]
    findings = [Finding(True, f"torch {torch.__version__}: CUDA {torch.version.cuda} build")]
    if not srun:
        return findings
    partition = config["resources"]["gpu_partition"]
    asked = run(
        ["srun", "-p", partition, "--gpus=1", "-t", "5", "nvidia-smi",
         "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    )  # fmt: skip
    if asked.returncode != 0:
        return [
            *findings,
            Finding(
                False,
                f"srun on {partition!r} failed: {(asked.stderr or '').strip()[:200]}",
                "check resources.gpu_partition and that nvidia-smi exists on its nodes",
            ),
        ]
    for line in asked.stdout.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 2:
            continue
        name, driver = parts[0], parts[1]
        major = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else 0
        if major >= int(MIN_DRIVER):
            findings.append(Finding(True, f"{partition!r}: {name}, driver {driver}"))
        else:
            findings.append(
                Finding(
                    False,
                    f"{partition!r}: {name}, driver {driver}, older than {MIN_DRIVER} (CUDA "
                    f"{torch.version.cuda})",
                    "use a partition with newer drivers, or ask for a driver update",
                )
            )
    return findings


def _hub_sources(config: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(config key, repo type, repo id, revision)`` of every hub model and dataset."""
    sources = []
    for name, entry in config["models"].items():
        source = entry["source"]
        if source["kind"] == "hub":
            sources.append((f"models.{name}", "model", source["id"], source["revision"]))
    for name, entry in config["datasets"].items():
        source = entry["source"]
        if source["kind"] == "hub":
            sources.append((f"datasets.{name}", "dataset", source["path"], source["revision"]))
    return sources


def in_hub_cache(repo_type: str, repo_id: str, revision: str, cache: Path) -> bool:
    """Whether the hub cache ``cache`` holds a snapshot of ``repo_id`` at ``revision`` (a commit
    sha, or a branch or tag whose ref the cache recorded)."""
    from huggingface_hub.file_download import repo_folder_name

    folder = cache / repo_folder_name(repo_id=repo_id, repo_type=repo_type)
    commit = revision
    ref = folder / "refs" / revision
    if ref.is_file():
        commit = ref.read_text().strip()
    snapshot = folder / "snapshots" / commit
    return snapshot.is_dir() and any(snapshot.iterdir())


def hub_findings(
    config: Mapping[str, Any],
    cache: Path | None = None,
    offline: bool | None = None,
    access: Callable[[str, str, str], None] | None = None,
) -> list[Finding]:
    """Every hub model and dataset of ``config``: in the hub cache at its revision, or reachable
    with the user's token (``access(repo_type, repo_id, revision)`` raises the hub's error;
    default :func:`huggingface_hub.HfApi.repo_info`, no retries). Offline (``HF_HUB_OFFLINE``)
    a repository not in the cache is a failure."""
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE) if cache is None else cache
    offline = constants.HF_HUB_OFFLINE if offline is None else offline
    if access is None:
        from huggingface_hub import HfApi

        api = HfApi()

        def access(repo_type: str, repo_id: str, revision: str) -> None:
            api.repo_info(repo_id, repo_type=repo_type, revision=revision, timeout=10)

    findings = []
    for key, repo_type, repo_id, revision in _hub_sources(config):
        shown = revision[:12] if re.fullmatch(r"[0-9a-f]{40}", revision) else revision
        label = f"{key}: {repo_id}@{shown}"
        if in_hub_cache(repo_type, repo_id, revision, cache):
            findings.append(Finding(True, f"{label} in the hub cache ({cache})"))
            continue
        if offline:
            findings.append(
                Finding(
                    False,
                    f"{label} is not in the hub cache ({cache}) and the hub is offline "
                    "(HF_HUB_OFFLINE)",
                    "fetch it on the login node: docs/cluster.md, step 2",
                )
            )
            continue
        findings.append(_access_finding(label, repo_type, repo_id, revision, access))
    return findings


def _access_finding(
    label: str, repo_type: str, repo_id: str, revision: str, access: Callable[[str, str, str], None]
) -> Finding:
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    page = f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"
    try:
        access(repo_type, repo_id, revision)
    except GatedRepoError:
        return Finding(
            False,
            f"{label} is gated and this token has no access",
            f"accept its licence at {page} and log in (hf auth login, or HF_TOKEN)",
        )
    except RevisionNotFoundError:
        return Finding(False, f"{label}: no such revision", f"pin an existing one ({page})")
    except RepositoryNotFoundError:
        return Finding(
            False,
            f"{label}: no such repository (or a private one this token cannot see)",
            f"check the id and the token ({page})",
        )
    except Exception as error:  # noqa: BLE001 - any failure to reach the hub: named, one line
        return Finding(
            False,
            f"{label}: the hub did not answer ({type(error).__name__})",
            "check the login node's network or proxy (HF_ENDPOINT), then fetch: step 2",
        )
    return Finding(True, f"{label} not cached yet, reachable: step 2 fetches it")


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent: the file system it will be on."""
    probe = path.resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def disk_findings(
    config: Mapping[str, Any],
    results: Path,
    hf_home: Path,
    disk_usage: Callable[[Path], Any] = shutil.disk_usage,
) -> list[Finding]:
    """Free space under ``results`` and ``hf_home`` against the plan's disk
    (:func:`sinkscope.sizing.plan.disk_need`; both on one file system: their sum)."""
    from sinkscope.sizing.plan import disk_need
    from sinkscope.sizing.shapes import UnknownModelShape, model_facts

    unknown = []
    for name in config["models"]:
        try:
            model_facts(config, name)
        except UnknownModelShape:
            unknown.append(name)
    need = disk_need(config, unknown)
    places = [(results, need.results, "results/"), (hf_home, need.hub, "the hub cache")]
    devices: dict[int, list[tuple[Path, int, str]]] = {}
    for path, needed, label in places:
        devices.setdefault(_existing(path).stat().st_dev, []).append((path, needed, label))
    findings = []
    for group in devices.values():
        needed = sum(n for _, n, _ in group)
        free = int(disk_usage(_existing(group[0][0])).free)
        where = " and ".join(f"{label} ({path})" for path, _, label in group)
        what = f"disk: {where} need about {needed / 1e9:,.1f} GB, {free / 1e9:,.1f} GB free"
        if free >= needed:
            findings.append(Finding(True, what))
        else:
            findings.append(
                Finding(
                    False,
                    what,
                    "free space, or point results/ (a link) or HF_HOME at a larger file system",
                )
            )
    if unknown:
        findings.append(
            Finding(True, f"disk: {', '.join(unknown)} left out (shape known once prepared)")
        )
    return findings


def preflight(
    config: Mapping[str, Any],
    results: Path,
    account: str | None = None,
    srun: bool = False,
) -> list[Finding]:
    """Every check, in order: SLURM, torch, the hub, the disk."""
    from huggingface_hub import constants

    return [
        *slurm_findings(config, account),
        *torch_findings(config, srun),
        *hub_findings(config),
        *disk_findings(config, results, Path(constants.HF_HOME)),
    ]


def render_findings(findings: Sequence[Finding]) -> str:
    failed = sum(not f.ok for f in findings)
    summary = (
        f"preflight: {failed} of {len(findings)} checks failed"
        if failed
        else f"preflight: all {len(findings)} checks passed"
    )
    return "\n".join([*(f.line() for f in findings), summary])
