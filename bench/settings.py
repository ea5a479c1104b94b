"""What the benchmarks measure and against which targets (bench/run.py measures, bench/report.py
writes BENCHMARKS.md, bench/projection.py projects to a GPU node): the sizes, the targets, the
default run's config and paths."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from sinkscope.config import load_config
from sinkscope.paths import Paths

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
#: The default run's config and outputs (the workflow's own reader and path templates).
CONFIG_FILE = REPO / "config.yaml"
PATHS = Paths(str(REPO / "results"))
ANALYSES = ("classify_heads", "analyze_geometry", "analyze_oversmoothing")
TARGETS = {
    "capture": 1.5,
    "storage": 0.40,
    "analysis_time": 1.0,
    "analysis_rss": 2.0,
    "noop": 5.0,
    "analysis_vs_gzip": 1.0,  # reading the new codec is no slower than gzip's files
}
#: the files' former codec (gzip), measured beside the default in the same run
BEFORE_CODEC = ("gzip", 1)

FULL = {
    "models": ["smollm2-135m", "gemma3-270m"],
    "dataset": "alice",
    "n_sequences": 16,
    "context_length": 256,
    "scaling_model": "smollm2-135m",
    "scaling_n": 4,
    "scaling_T": [64, 128, 256, 512],
}
QUICK = {
    "models": ["smollm2-135m"],
    "dataset": "alice",
    "n_sequences": 4,
    "context_length": 64,
    "scaling_model": "smollm2-135m",
    "scaling_n": 2,
    "scaling_T": [32, 64, 128],
}


@functools.cache
def default_config() -> dict[str, Any]:
    """config.yaml read and validated as the workflow reads it (defaults filled in)."""
    return load_config(CONFIG_FILE)
