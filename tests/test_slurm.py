"""`snakemake --profile slurm` on a real single-node SLURM cluster (Debian's slurmctld/slurmd/munge).

`.ci/run` installs the daemons (tests/slurm/cluster.sh install). The cluster is started here and
stopped by the PIDs it recorded. The run uses the repository's own profile (profiles/slurm, linked
as ./slurm) with only what a CI cluster must override: the partition name, no account, and
`squeue` as the status command because this cluster keeps no accounting database for `sacct`.
Where the daemons are missing and cannot be installed the tests are skipped with a loud reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import polars as pl
import pytest
import yaml

from sinkscope.config import load_layered_config, validate_config
from sinkscope.sizing.requests import job_request
from tests.conftest import REPO, TINY, snakemake_command

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
TIMEOUT = "1200"  # a hang guard: 7-8 min measured on the 2-core AMD EPYC CI machine

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    missing = [
        name for name in ("slurmctld", "slurmd", "munged", "sbatch") if not shutil.which(name)
    ]
    if missing:
        pytest.skip(
            f"SLURM TEST SKIPPED: {missing} not installed on this machine "
            "(run `bash tests/slurm/cluster.sh install` as root where Debian packages can be "
            "installed; .ci/run does so)"
        )
    state = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        ["bash", str(CLUSTER), "start", str(state)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    try:
        if started.returncode != 0:
            logs = "\n".join(p.read_text() for p in (state / "log").glob("*") if p.is_file())
            raise AssertionError(f"SLURM did not start:\n{started.stderr}\n{logs[-4000:]}")
        yield {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], check=False, timeout=60)


def ci_profile(folder: Path) -> Path:
    """The repository's SLURM profile with only the settings a CI cluster must override (its
    partition is a config key: run_slurm sets it)."""
    profile = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    # the CI node has fewer CPUs than a cluster's extraction job gets (sinkscope.sizing); and
    # the tables are compared bit for bit with the local tiny run, whose extraction runs on half
    # the local cores (sinkscope.sizing.requests.job_threads): a float32 forward sums in another
    # order on another number of threads
    cores = len(os.sched_getaffinity(0))
    profile.setdefault("set-threads", {})["extract_activations"] = max(1, min(2, cores // 2))
    profile.update(
        {
            "slurm-no-account": True,
            "slurm-status-command": "squeue",  # no accounting database for sacct on this cluster
            "slurm-init-seconds-before-status-checks": 2,
            "latency-wait": 5,
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(profile))
    return folder


#: tiny.yaml without the model-free experiments: SLURM runs every job as its own sbatch job, and
#: those CPU-only jobs test nothing cluster-specific that the model pipeline does not.
MODEL_ONLY = REPO / "tests" / "configs" / "tiny_model_only.yaml"


def ci_partitions(path: Path) -> Path:
    """A config layer that puts every job on the CI cluster's one partition, ``ci`` (the
    partitions are config keys: sinkscope.sizing.requests)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("resources: {gpus: 0, gpu_partition: ci, cpu_partition: ci}\n")
    return path


def run_slurm(
    workdir: Path,
    env: dict[str, str],
    config: Path,
    download_dir: Path,
    layers: tuple[Path, ...] = (),
    extra: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    command = [
        "timeout",
        "-k",
        "10",
        TIMEOUT,
        *snakemake_command(
            workdir,
            "--profile",
            str(ci_profile(workdir / "profile")),
            "--configfile",
            str(config),
            str(MODEL_ONLY),
            str(ci_partitions(workdir / "ci_partitions.yaml")),
            *map(str, layers),
            *extra,
            "--config",
            f"download_dir={download_dir}",
        ),
    ]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, check=False)


def test_profile_is_found_by_name_from_the_repository_root() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "slurm", "-n", "--configfile", str(TINY)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    # a dry run with the slurm executor needs no cluster; it must parse the profile and the DAG
    assert result.returncode == 0, result.stdout + result.stderr


def test_tiny_config_on_slurm_matches_the_local_run(
    slurm_cluster: dict[str, str], tiny_run: Path, download_dir: Path, tmp_path: Path
) -> None:
    result = run_slurm(tmp_path, slurm_cluster, TINY, download_dir)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "sbatch" in result.stdout + result.stderr or "SLURM" in result.stdout + result.stderr
    rel = Path("results/heads/smollm2-135m/alice/heads_per_head.parquet")
    local, cluster = pl.read_parquet(tiny_run / rel), pl.read_parquet(tmp_path / rel)
    assert local.equals(cluster)
    rel_h5 = Path("results/activations/smollm2-135m/alice.h5")
    with h5py.File(tiny_run / rel_h5) as a, h5py.File(tmp_path / rel_h5) as b:
        for name in ("attention/probs", "residual/X", "tokens/input_ids"):
            np.testing.assert_array_equal(a[name][...], b[name][...])
    summary = Path("results/summary/head_classes.parquet")
    assert pl.read_parquet(tiny_run / summary).equals(pl.read_parquet(tmp_path / summary))


def test_failing_job_is_reported_failed_and_retried(
    slurm_cluster: dict[str, str], download_dir: Path, tmp_path: Path
) -> None:
    failing = tmp_path / "too_many_sequences.yaml"
    # one failing job (the tiny config's no-BOS pair would be a second cut_tokens job failing)
    text = TINY.read_text().replace("n_sequences: 2", "n_sequences: 100000")
    failing.write_text(text.replace("bos: both", "bos: keep"))
    result = run_slurm(tmp_path / "run", slurm_cluster, failing, download_dir)
    output = result.stdout + result.stderr
    assert result.returncode not in (0, 124, 137), output[-5000:]  # failed, not hung
    # retries: 2 in the profile -> three attempts, each reported FAILED by SLURM, each asking
    # for more memory (sinkscope.sizing: the request times the attempt)
    assert output.count("Error in rule cut_tokens") == 3, output[-5000:]
    assert output.count("SLURM status is: 'FAILED'") == 3
    assert output.count("Trying to restart job") == 2
    config = validate_config(load_layered_config([failing]))
    for attempt in (1, 2, 3):
        assert f"mem_mb={job_request('cut_tokens', config, attempt=attempt).mem_mb}," in output
    logs = list((tmp_path / "run" / "results" / "logs" / "cut_tokens").rglob("*.log"))
    assert logs and "fewer than the 100000 sequences" in logs[0].read_text()


def test_a_model_job_lands_on_the_gpu_partition_with_its_type_and_stops_without_cuda(
    slurm_cluster: dict[str, str], download_dir: Path, tmp_path: Path
) -> None:
    """The CI cluster's partition ``gpu`` has one GPU of type ``fake`` that SLURM schedules and no
    device backs (tests/slurm/cluster.sh). With ``resources.gpus: 1`` and ``gpu_types: {fake:
    16}`` the extraction is submitted there with ``--gpus=fake:1``, and the job stops in seconds
    with the message of :func:`sinkscope.prepare.models.check_requested_gpu` (this machine's
    torch has no CUDA) instead of running the model on the CPU; its file is never written. The
    CPU jobs before it run on ``ci`` without a GPU. Fails if a rule's GPU request, its type or
    the check is removed: the extraction would then run on the CPU and succeed."""
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(
        "resources: {gpus: 1, gpu_partition: gpu, cpu_partition: ci, gpu_types: {fake: 16}}\n"
    )
    target = "results/activations/smollm2-135m/alice.h5"
    workdir = tmp_path / "run"
    result = run_slurm(
        workdir, slurm_cluster, TINY, download_dir, (gpu,), ("--retries", "0", target)
    )
    output = result.stdout + result.stderr
    assert result.returncode not in (0, 124, 137), output[-5000:]  # failed, not hung
    submitted = [line for line in output.splitlines() if "rule extract_activations" in line]
    assert submitted, output[-5000:]
    assert "gpu=1" in output and "gpu_model=fake" in output and "slurm_partition=gpu" in output
    assert "slurm_partition=ci" in output  # the CPU jobs before it
    logs = list((workdir / "results" / "logs" / "extract_activations").rglob("*.log"))
    assert logs, output[-5000:]
    text = "\n".join(log.read_text() for log in logs)
    assert "extract_activations: this SLURM job (job " in text, text[-3000:]
    assert "asked for 1 GPU(s) (resources.gpus) but cannot use one" in text
    assert "set resources.gpus: 0" in text
    accounting = subprocess.run(
        ["squeue", "--states=all", "-h", "-O", "Partition,tres-per-job,State"],
        env=slurm_cluster, capture_output=True, text=True, check=False,
    )  # fmt: skip
    jobs = [line.split() for line in accounting.stdout.splitlines()]
    assert ["gpu", "gres:gpu:fake:1", "FAILED"] in jobs, accounting.stdout  # SLURM's own record
    assert not (workdir / target).exists()


def _path_without_slurm(folder: Path) -> str:
    """A PATH folder with every command of this PATH except SLURM's client tools."""
    from sinkscope.cluster import SLURM_STATUS_TOOLS, SLURM_SUBMIT_TOOLS

    hidden = {*SLURM_SUBMIT_TOOLS, *SLURM_STATUS_TOOLS, "sinfo", "srun", "scontrol"}
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not Path(directory).is_dir():
            continue
        for command in Path(directory).iterdir():
            target = folder / command.name
            if command.name not in hidden and not target.exists():
                target.symlink_to(command)
    return str(folder)


def test_profile_slurm_without_slurm_commands_says_what_is_missing_before_any_job(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PATH": _path_without_slurm(tmp_path / "bin")}
    workdir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "slurm", "--configfile", str(TINY)]
        + ["--directory", str(workdir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "snakemake --profile slurm needs SLURM's client commands" in output, output[-3000:]
    assert "no sbatch, scancel, sacct, squeue on PATH" in output
    assert "more memory" not in output  # failed before the first submission, not retried
    assert not (workdir / "results").exists()


def test_preflight_reads_the_real_clusters_partitions_and_gpu_types(
    slurm_cluster: dict[str, str],
) -> None:
    """``sinkscope preflight``'s SLURM part against the CI cluster's own ``sinfo``: partitions
    ``ci`` and ``gpu`` and the GPU type ``fake`` exist; a partition or type it lacks is named."""
    from sinkscope.preflight import slurm_findings

    def run(command):
        return subprocess.run(
            list(command), capture_output=True, text=True, check=False, env=slurm_cluster
        )

    base = load_layered_config([TINY])
    good = validate_config(
        base | {"resources": {"gpus": 1, "gpu_partition": "gpu", "cpu_partition": "ci",
                              "gpu_types": {"fake": 16}}}
    )  # fmt: skip
    findings = slurm_findings(good, run=run)
    assert all(f.ok for f in findings), [f.line() for f in findings]
    bad = validate_config(
        base | {"resources": {"gpus": 1, "gpu_partition": "a100", "cpu_partition": "ci"}}
    )
    failed = [f for f in slurm_findings(bad, run=run) if not f.ok]
    assert len(failed) == 1 and "'a100' is not a partition of this cluster" in failed[0].what
    assert "ci, gpu" in failed[0].what
    typed = validate_config(
        base | {"resources": {"gpus": 1, "gpu_partition": "gpu", "cpu_partition": "ci",
                              "gpu_types": {"h100": 80}}}
    )  # fmt: skip
    failed = [f for f in slurm_findings(typed, run=run) if not f.ok]
    assert len(failed) == 1 and "gpu_types.h100: no GPU of that type" in failed[0].what


def test_the_controller_job_runs_the_profile_with_the_arguments_it_is_given() -> None:
    """``slurm/controller.sbatch`` (docs/cluster.md, step 3) passes its arguments to
    ``snakemake --profile slurm``: a dry run of the tiny config through it builds the DAG with
    the SLURM executor, and its ``#SBATCH`` lines ask for one CPU and a day or more."""
    script = REPO / "slurm" / "controller.sbatch"
    header = [line for line in script.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --cpus-per-task=1" in header
    assert any(line.startswith("#SBATCH --time=2-") for line in header)
    result = subprocess.run(
        ["bash", str(script), "-n", "--configfile", str(TINY)],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "rule extract_activations" in output and "slurm_partition=" in output


def test_missing_slurm_tools_follow_the_status_command() -> None:
    from sinkscope.cluster import check_slurm_client, missing_slurm_tools

    def which(present: set[str]):
        return lambda name: f"/usr/bin/{name}" if name in present else None

    assert missing_slurm_tools("squeue", which({"sbatch", "scancel", "squeue"})) == []
    assert missing_slurm_tools("sacct", which({"sbatch", "scancel", "squeue"})) == ["sacct"]
    assert missing_slurm_tools(None, which({"sbatch", "scancel", "squeue"})) == []
    assert missing_slurm_tools(None, which({"sbatch"})) == ["scancel", "sacct", "squeue"]
    with pytest.raises(RuntimeError, match=r"no scancel, sacct, squeue on PATH"):
        check_slurm_client(None, which({"sbatch"}))


def test_jobs_read_the_hub_cache_and_never_the_network() -> None:
    """In a SLURM job (``SLURM_JOB_ID`` set) the workflow sets ``HF_HUB_OFFLINE`` and
    ``HF_DATASETS_OFFLINE`` to 1 unless the user set them (``0`` keeps a job online); outside a
    job (the controller on the login node, a local run) it sets nothing. The Snakefile does it
    before its first import of the package's config, so before huggingface_hub is imported."""
    from sinkscope.cluster import HUB_OFFLINE_VARIABLES, hub_offline_in_jobs

    job = {"SLURM_JOB_ID": "12", "HF_DATASETS_OFFLINE": "0"}
    assert hub_offline_in_jobs(job) == ["HF_HUB_OFFLINE"]
    assert job == {"SLURM_JOB_ID": "12", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "0"}
    login = {"PATH": "/usr/bin"}
    assert hub_offline_in_jobs(login) == [] and login == {"PATH": "/usr/bin"}
    assert HUB_OFFLINE_VARIABLES == ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    snakefile = (REPO / "Snakefile").read_text()
    assert snakefile.index("hub_offline_in_jobs(os.environ)") < snakefile.index(
        "from sinkscope.config import"
    )
