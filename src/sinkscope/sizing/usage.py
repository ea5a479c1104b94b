"""What a job actually used, written by the job itself at its end and read back by rehearsals.

Snakemake's ``benchmark:`` samples the process tree (every second at first, then every 30 s) and
misses short peaks, e.g. a model load; the kernel's high-water mark does not. :func:`usage_line` is the last line of every job's log
(:func:`sinkscope.steps.run`); :func:`read_usage` reads it back.
"""

from __future__ import annotations

import re
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "USAGE_PREFIX",
    "JobUsage",
    "cpu_model",
    "peak_rss_mb",
    "read_usage",
    "time_by_rule",
    "time_by_rule_markdown",
    "usage_line",
]

#: How the usage line of a job's log starts.
USAGE_PREFIX = "sinkscope job usage:"


@dataclass(frozen=True)
class JobUsage:
    """A finished job's peak resident memory (MB, the job's process and its children) and the
    wall seconds of its step (from the step's start, after Python's imports)."""

    peak_rss_mb: float
    wall_s: float


def peak_rss_mb() -> float:
    """The high-water mark of resident memory of this process image (``VmHWM`` of
    ``/proc/self/status``, which starts anew at ``exec``: ``getrusage``'s own ``ru_maxrss`` also
    keeps the peak of the process this one was forked from, e.g. Snakemake's) and of its
    waited-for children (``RUSAGE_CHILDREN``), in MB."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    try:
        status = Path("/proc/self/status").read_text()
        own_kb = float(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]
    except (OSError, AttributeError):  # not Linux: ru_maxrss (bytes on macOS)
        unit = 1 / 1024 if sys.platform == "darwin" else 1
        own_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
        children *= unit
    return max(own_kb, children) / 1024


def usage_line(wall_s: float) -> str:
    """The log line of :class:`JobUsage` for this process now."""
    return f"{USAGE_PREFIX} peak_rss_mb={peak_rss_mb():.1f} wall_s={wall_s:.1f}"


def read_usage(log: str | Path) -> JobUsage | None:
    """The usage a job wrote at the end of its log, or None (a failed or older job)."""
    path = Path(log)
    if not path.is_file():
        return None
    found = None
    for line in path.read_text(errors="replace").splitlines():
        if USAGE_PREFIX in line:
            match = re.search(r"peak_rss_mb=([\d.]+) wall_s=([\d.]+)", line)
            if match:
                found = JobUsage(float(match.group(1)), float(match.group(2)))
    return found


def cpu_model() -> str:
    """The CPU's model name (times are stated with it: CPUs of one core count differ about 2x)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def time_by_rule(logs: str | Path) -> list[dict[str, float | int | str]]:
    """Where a run's time went: per rule (the first folder under ``logs``, i.e.
    ``results/logs/<rule>/...``) the jobs that wrote a usage line, their summed wall minutes and
    the largest peak memory; sorted by minutes, largest first."""
    rules: dict[str, dict[str, float | int | str]] = {}
    root = Path(logs)
    for log in sorted(root.rglob("*.log")):
        usage = read_usage(log)
        if usage is None:
            continue
        rule = log.relative_to(root).parts[0]
        entry = rules.setdefault(rule, {"rule": rule, "jobs": 0, "minutes": 0.0, "peak_mb": 0.0})
        entry["jobs"] = int(entry["jobs"]) + 1
        entry["minutes"] = float(entry["minutes"]) + usage.wall_s / 60.0
        entry["peak_mb"] = max(float(entry["peak_mb"]), usage.peak_rss_mb)
    return sorted(rules.values(), key=lambda r: (-float(r["minutes"]), str(r["rule"])))


def time_by_rule_markdown(rows: list[dict[str, float | int | str]], cpu: str) -> str:
    """:func:`time_by_rule` as a Markdown table, with the total job-minutes and the CPU."""
    total = sum(float(r["minutes"]) for r in rows)
    lines = [
        (
            f"Where the time went (job-minutes: each job's step, after its imports, from the "
            f"usage line of its log; CPU: {cpu}):"
        ),
        "",
        "| rule | jobs | job-minutes | share | largest peak memory |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        share = float(r["minutes"]) / total if total else 0.0
        lines.append(
            f"| {r['rule']} | {r['jobs']} | {float(r['minutes']):.1f} | {100 * share:.0f}% "
            f"| {float(r['peak_mb']):,.0f} MB |"
        )
    jobs = sum(int(r["jobs"]) for r in rows)
    lines.append(f"| **total** | {jobs} | {total:.1f} | 100% | |")
    return "\n".join(lines)
