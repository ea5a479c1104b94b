"""Summaries of the measured backcopy runs (Figure 3 left): log-log slopes and the sink's advantage.

:func:`fit_slopes` fits the slope of a cost against ``T`` (or any size) per pattern; the copy-paste
runs (:mod:`.copypaste`) use it too. :func:`sink_cheaper_reading` is the number of claim
``costs.backcopy_sink_cheaper``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["SLOPE_COSTS", "fit_slopes", "sink_cheaper_reading", "slopes_table"]

#: The costs whose log-log slope against ``T`` the ``backcopy_slopes`` table reports: the total
#: (sink ~1, diagonal ~3/2), the QK part alone, and the total with the literal sqrt(d) reading.
SLOPE_COSTS = ("cost_total", "cost_qk", "cost_total_sqrt_d")


def fit_slopes(
    table: Sequence[Mapping[str, Any]], x: str = "T", y: str = "cost_total"
) -> dict[str, dict[str, float]]:
    """Least-squares slope and intercept of ``log y`` against ``log x`` per pattern (Figure 3 left).

    Uses the per-``x`` mean over seeds. Returns ``{pattern: {"slope", "intercept", "n"}}``; the
    paper reports slope ~1 (sink) and ~3/2 (diagonal).
    """
    out: dict[str, dict[str, float]] = {}
    for pattern in sorted({str(r["pattern"]) for r in table}):
        rows = [r for r in table if r["pattern"] == pattern]
        xs = sorted({float(r[x]) for r in rows})
        ys = [float(np.mean([float(r[y]) for r in rows if float(r[x]) == v])) for v in xs]
        if len(xs) < 2:
            out[pattern] = {"slope": float("nan"), "intercept": float("nan"), "n": float(len(xs))}
            continue
        slope, intercept = np.polyfit(np.log(xs), np.log(ys), 1)
        out[pattern] = {"slope": float(slope), "intercept": float(intercept), "n": float(len(xs))}
    return out


def slopes_table(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``backcopy_slopes`` table: one row per (cost of :data:`SLOPE_COSTS`, pattern) with
    :func:`fit_slopes`' slope, intercept and number of sizes."""
    return [
        {"cost": cost, "pattern": pattern, **fit}
        for cost in SLOPE_COSTS
        for pattern, fit in fit_slopes(table, "T", cost).items()
    ]


def sink_cheaper_reading(table: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Sink vs diagonal total cost at the largest ``T`` with runs of both patterns (claim
    ``costs.backcopy_sink_cheaper`` and the title of Figure 3 left).

    Mean ``cost_total`` over seeds per ``(T, pattern)``; returns ``{"T", "sink", "diagonal",
    "ratio" (diagonal / sink), "cheaper_T" (the T where the sink is cheaper), "T_values" (every T
    with both patterns)}``, or ``None`` when no ``T`` has runs of both patterns.
    """
    means: dict[tuple[int, str], list[float]] = {}
    for r in table:
        means.setdefault((int(r["T"]), str(r["pattern"])), []).append(float(r["cost_total"]))
    both = sorted(
        T for T in {T for T, _ in means} if (T, "sink") in means and (T, "diagonal") in means
    )
    if not both:
        return None
    mean = {key: float(np.mean(values)) for key, values in means.items()}
    last = both[-1]
    sink, diagonal = mean[(last, "sink")], mean[(last, "diagonal")]
    return {
        "T": last,
        "sink": sink,
        "diagonal": diagonal,
        "ratio": diagonal / sink,
        "cheaper_T": [T for T in both if mean[(T, "sink")] < mean[(T, "diagonal")]],
        "T_values": both,
    }
