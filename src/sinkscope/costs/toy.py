"""The nuclear-norm toy of §7 (first paragraphs): sink vs diagonal ``W_QK`` on ``X = I_{T+1}``.

With the sequence equal to the identity ``I_{T+1}``, the sink is represented by
``W_QK = kappa 1 e_1^T`` (one singular value ``kappa sqrt(T+1)``) and the diagonal pattern by
``W_QK = kappa I`` (``T+1`` singular values ``kappa``); the regularisation cost of ``W_QK`` is its
nuclear norm, so the costs are ``kappa sqrt(T+1)`` and ``kappa (T+1)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["toy_matrices", "toy_ratio_deviation", "toy_table"]


def toy_matrices(T: int, kappa: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``(W_sink, W_diag)`` of §7 for context length ``T`` (both ``(T+1) x (T+1)``)."""
    n = T + 1
    sink = np.zeros((n, n))
    sink[:, 0] = kappa  # kappa * 1 e_1^T
    return sink, kappa * np.eye(n)


def toy_table(T_values: Sequence[int], kappa: float = 1.0) -> list[dict[str, Any]]:
    """One row per ``T``: numerical singular values / nuclear norms vs the closed forms of §7.

    Columns: ``T, kappa, sink_rank, sink_sigma_max, sink_nuclear, sink_nuclear_formula
    (kappa sqrt(T+1)), diag_rank, diag_nuclear, diag_nuclear_formula (kappa (T+1)),
    ratio_diag_over_sink (= sqrt(T+1))``.
    """
    rows = []
    for T in T_values:
        sink, diag = toy_matrices(int(T), kappa)
        s_sink = np.linalg.svd(sink, compute_uv=False)
        s_diag = np.linalg.svd(diag, compute_uv=False)
        tol = 1e-12 * max(1.0, abs(kappa)) * (T + 1)
        rows.append(
            {
                "T": int(T),
                "kappa": float(kappa),
                "sink_rank": int((s_sink > tol).sum()),
                "sink_sigma_max": float(s_sink[0]),
                "sink_nuclear": float(s_sink.sum()),
                "sink_nuclear_formula": kappa * math.sqrt(T + 1),
                "diag_rank": int((s_diag > tol).sum()),
                "diag_nuclear": float(s_diag.sum()),
                "diag_nuclear_formula": kappa * (T + 1),
                "ratio_diag_over_sink": float(s_diag.sum() / s_sink.sum()),
            }
        )
    return rows


def toy_ratio_deviation(table: Sequence[Mapping[str, Any]]) -> float:
    """Largest relative deviation ``|ratio_diag_over_sink / sqrt(T+1) - 1|`` over the rows of
    :func:`toy_table` (the number of the sanity check in ``claims.md``,
    :mod:`sinkscope.claims.sanity`, and of the toy figure's title)."""
    if not table:
        raise ValueError("toy_ratio_deviation needs at least one row")
    return max(
        abs(float(r["ratio_diag_over_sink"]) / math.sqrt(float(r["T"]) + 1.0) - 1.0) for r in table
    )
