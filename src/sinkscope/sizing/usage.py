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

__all__ = ["USAGE_PREFIX", "JobUsage", "peak_rss_mb", "read_usage", "usage_line"]

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
