"""The long-context half-space solves timed at the default models' sizes (Prop. 4.1).

    .venv/bin/python bench/halfspace_bench.py [--dims 576 640 1024] [--points-per-dim 2.5]

For each ``d`` the sets of ``seq_len: auto`` (``N = ceil(points_per_dim x d)`` points, unit
norm) are solved on one thread by :func:`sinkscope.geometry.halfspace_solver.halfspace_margin`:

- *shifted*: Gaussian points around a common direction (they lie in an open half-space and keep
  the support small, as the real residual streams do);
- *centred*: Gaussian points around the origin (Wendel: almost surely in no half-space; the
  support grows to about ``d``), the case of the Gaussian null and of a failing layer;
- *null*: :func:`~sinkscope.geometry.halfspace_solver.gaussian_null_margin` of the shifted set
  (Gaussian points with its covariance), what the long-context rule runs beside each set.

Each time is printed with its ratio to a baseline measured in the same run on the same thread:
one float64 Gram matrix ``V V^T`` of the set, so the ratios compare across machines.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sinkscope.geometry.halfspace_solver import (
    gaussian_null_margin,
    halfspace_margin,
    torch_threads,
)


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Seconds ``fn(*args)`` took, and what it returned."""
    began = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - began, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[576, 640, 1024])
    parser.add_argument("--points-per-dim", type=float, default=2.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    print(f"CPU: {cpu}; one thread; N = ceil({args.points_per_dim:g} x d) unit points")
    print("| d | N | set | seconds | x Gram | in a half-space | margin | support |")
    print("|---:|---:|---|---:|---:|---|---:|---:|")
    rng = np.random.default_rng(args.seed)
    with torch_threads(1):
        for d in args.dims:
            n = math.ceil(args.points_per_dim * d)
            direction = np.zeros(d)
            direction[0] = 1.0
            sets = {
                "shifted": unit_rows(rng.standard_normal((n, d)) / math.sqrt(d) + 0.5 * direction),
                "centred": unit_rows(rng.standard_normal((n, d))),
            }
            gram_s, _ = timed(lambda v: v @ v.T, sets["shifted"])
            runs = [(name, *timed(halfspace_margin, v)) for name, v in sets.items()]
            runs.append(("null", *timed(gaussian_null_margin, sets["shifted"], rng)))
            for name, seconds, r in runs:
                print(
                    f"| {d} | {n} | {name} | {seconds:.2f} | {seconds / gram_s:.0f} | "
                    f"{r.halfspace} | {r.margin:.3g} | {r.n_support} |"
                )


if __name__ == "__main__":
    main()
