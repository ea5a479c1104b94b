"""Condition (3) of Theorem 7.1 (§7, Figure 3 left): when the sink block is provably cheaper.

The theorem's sufficient condition compares the cost of the explicit sink solution of its proof
(:func:`.backcopy.sink_construction`, equations (7)-(10)) with a lower bound on every diagonal
block. :func:`condition3` evaluates both sides, :func:`condition3_grid` over a grid of the task's
sizes and margins (under two readings of kappa), :func:`condition3_vs_measured` beside the
measured minimum costs of :mod:`.backcopy_runs`, and :func:`condition3_panel` picks the slice the
figure draws (:func:`.plots.plot_condition3`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sinkscope.costs.backcopy import PATTERNS

__all__ = [
    "READING_COST_COLUMN",
    "condition3",
    "condition3_grid",
    "condition3_panel",
    "condition3_vs_measured",
]


def condition3(
    T: float, n_dormant: float, n_copy: float, d: float, kappa: float, c1: float | None = None
) -> dict[str, float]:
    """Both sides of condition (3) of Theorem 7.1 (the paper's cost bookkeeping).

    LHS = sink upper bound ``2 kappa/sqrt(d) (sqrt(2|D|) + T - 1) + 3T + 3|D| + |C| +
    4 c1 (T+|C|+|D|+2)|C| - 2``; RHS = diagonal lower bound
    ``kappa/sqrt(3d) min(|C|,|D|)^{1/2} T^{3/2}``; ``c1`` defaults to its smallest admissible
    value ``d/(T+|C|+|D|+2)``. ``kappa`` is the margin of the standard ``1/sqrt(d)`` scores; for
    the extra normalisation pass ``kappa * sqrt(d)``.
    """
    if c1 is None:
        c1 = d / (T + n_copy + n_dormant + 2)
    lhs = (
        2 * kappa / math.sqrt(d) * (math.sqrt(2 * n_dormant) + T - 1)
        + 3 * T
        + 3 * n_dormant
        + n_copy
    )
    lhs += 4 * c1 * (T + n_copy + n_dormant + 2) * n_copy - 2
    rhs = kappa / math.sqrt(3 * d) * math.sqrt(min(n_copy, n_dormant)) * T**1.5
    return {"lhs": lhs, "rhs": rhs, "holds": float(lhs < rhs)}


def condition3_grid(
    T_values: Sequence[int],
    sizes: Sequence[int],
    kappas: Sequence[float],
    d_offsets: Sequence[int] = (2,),
) -> list[dict[str, Any]]:
    """Condition (3) over a grid of (T, |D| = |C| or mixed sizes, d = T+|D|+|C|+offset, kappa).

    Two readings of kappa (see the notes): ``literal`` (kappa is the margin of the ``1/sqrt(d)``
    scores) and ``folded`` (the extra ``1/sqrt(d)`` normalisation folded in: margin kappa of
    scores ``/d`` equals margin ``kappa sqrt(d)`` of scores ``/sqrt(d)``).
    """
    rows = []
    for T in T_values:
        for nd in sizes:
            for nc in sizes:
                for off in d_offsets:
                    d = T + nd + nc + off
                    for kappa in kappas:
                        for reading, k_eff in (
                            ("literal", kappa),
                            ("folded", kappa * math.sqrt(d)),
                        ):
                            c = condition3(T, nd, nc, d, k_eff)
                            rows.append(
                                {
                                    "T": T,
                                    "n_dormant": nd,
                                    "n_copy": nc,
                                    "d": d,
                                    "kappa": kappa,
                                    "reading": reading,
                                    **c,
                                    "holds": bool(c["holds"]),
                                }
                            )
    return rows


def condition3_panel(
    sizes: Sequence[int], d_offsets: Sequence[int], n_dormant: int
) -> dict[str, int]:
    """The slice of the condition-(3) grid drawn beside the measured runs.

    ``|D| = |C|`` = the measured runs' ``n_dormant`` when the grid holds that size, else the
    grid's first size (the figure then shows the condition without measured marks); the largest
    ``d`` offset (the measured runs use ``d = T + |D| + |C| + FRAME_EXTRA``).
    """
    if not sizes or not d_offsets:
        raise ValueError("costs.condition3: sizes and d_offsets must not be empty")
    size = n_dormant if n_dormant in sizes else sizes[0]
    return {"n_dormant": size, "n_copy": size, "d_offset": max(d_offsets)}


#: Which measured total answers which reading of kappa in condition (3) (see condition3_grid).
READING_COST_COLUMN = {"literal": "cost_total_sqrt_d", "folded": "cost_total_d"}


def condition3_vs_measured(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Condition (3) of Theorem 7.1 side by side with the measured costs (Figure 3 left).

    For every measured ``(T, d, |D|, |C|, kappa)`` with both patterns present and each reading of
    kappa (``literal``: margin of ``1/sqrt(d)`` scores, compared with ``cost_total_sqrt_d``;
    ``folded``: margin kappa of scores ``/d``, i.e. ``kappa sqrt(d)`` of ``1/sqrt(d)`` scores,
    compared with ``cost_total_d``), returns the mean measured totals over seeds, whether the
    sink is cheaper, both sides of (3), and ``sink_cheaper_without_condition``: the sink was
    measured cheaper although the sufficient condition (3) does not hold.
    """
    keys = sorted(
        {
            (int(r["T"]), int(r["d"]), int(r["n_dormant"]), int(r["n_copy"]), float(r["kappa"]))
            for r in table
        }
    )
    out: list[dict[str, Any]] = []
    for T, d, nd, nc, kappa in keys:
        sel = [
            r
            for r in table
            if (int(r["T"]), int(r["d"]), int(r["n_dormant"]), int(r["n_copy"]), float(r["kappa"]))
            == (T, d, nd, nc, kappa)
        ]
        for reading, column in READING_COST_COLUMN.items():
            costs = {
                pattern: [float(r[column]) for r in sel if r["pattern"] == pattern]
                for pattern in PATTERNS
            }
            if not all(costs.values()):
                continue
            k_eff = kappa if reading == "literal" else kappa * math.sqrt(d)
            c = condition3(T, nd, nc, d, k_eff)
            sink, diagonal = float(np.mean(costs["sink"])), float(np.mean(costs["diagonal"]))
            holds = bool(c["holds"])
            out.append(
                {
                    "T": T,
                    "d": d,
                    "n_dormant": nd,
                    "n_copy": nc,
                    "kappa": kappa,
                    "reading": reading,
                    "cost_column": column,
                    "n_seeds": min(len(v) for v in costs.values()),
                    "cost_sink": sink,
                    "cost_diagonal": diagonal,
                    "sink_cheaper": sink < diagonal,
                    "lhs": c["lhs"],
                    "rhs": c["rhs"],
                    "condition_holds": holds,
                    "sink_cheaper_without_condition": sink < diagonal and not holds,
                }
            )
    return out
