"""Generic copy-paste task, Theorem D.1 (sinkscope.costs.copypaste)."""

from __future__ import annotations

import math

import pytest
import torch

from sinkscope.costs.copypaste import (
    _t_base,
    construction_label_error,
    construction_margin,
    construction_weights,
    diag_construction,
    make_copypaste_task,
    run_copypaste,
    sink_construction,
    theorem_d1_bounds,
)


def _nuc(M: torch.Tensor) -> float:
    return float(torch.linalg.svdvals(M).sum())


@pytest.mark.parametrize(("C", "n", "d", "delta"), [(3, 4, 100, 0.3), (2, 3, 30, 0.5)])
@pytest.mark.parametrize("rms", [False, True])
def test_appendix_d_constructions(C: int, n: int, d: int, delta: float, rms: bool) -> None:
    """Sink (part 1) and diagonal (part 3) constructions: margins, stated costs, relaxed labels."""
    kappa, eps = 7.0, 0.25
    task = make_copypaste_task(C, n, d, delta, seed=3)
    lam, sd = task.lam, math.sqrt(d)
    bounds = theorem_d1_bounds(task, kappa)
    assert _nuc(_t_base(task)) == pytest.approx(
        task.r_eta + C
    )  # ||T_base||_* = r_eta + C beta, beta = 1
    # sink
    sink = sink_construction(task, kappa, eps)
    assert construction_margin(task, "sink", sink["W_QK"]) == pytest.approx(kappa, rel=1e-9)
    qk = 2 * _nuc(sink["W_QK"])
    assert qk <= 2 * kappa / sd * (math.sqrt(2 * C) / lam + C * (1 + lam) / lam**2) * (1 + 1e-12)
    assert qk <= 12 * kappa * C / sd
    w = construction_weights(task, sink, rms)
    ov = float((w["W_V"] ** 2).sum() + (w["W_O"] ** 2).sum())
    mlp = float((w["W_1"] ** 2).sum() + (w["W_2"] ** 2).sum())
    assert ov + mlp == pytest.approx((3 + 2 * eps) * (task.r_eta + C), rel=1e-9)
    assert qk + ov + mlp <= bounds["U_sink"]
    assert construction_label_error(task, "sink", w, eps, rms) < 1e-9
    assert qk >= bounds["L_sink"]
    # diagonal
    diag = diag_construction(task, kappa, eps)
    assert construction_margin(task, "diagonal", diag["W_QK"]) >= kappa * (1 - 1e-9)
    qk = 2 * _nuc(diag["W_QK"])
    assert qk <= (
        2 * kappa * C / sd * (1 + 1 / lam) ** 2 + 4 * kappa * sd / bounds["delta_diag"] * task.r_eta
    ) * (1 + 1e-12)
    w = construction_weights(task, diag, rms)
    ov = float((w["W_V"] ** 2).sum() + (w["W_O"] ** 2).sum())
    assert ov == pytest.approx(2 * (1 - eps) * (task.r_eta + C), rel=1e-9)
    assert qk + ov <= bounds["U_diag"]
    assert construction_label_error(task, "diagonal", w, eps, rms) < 1e-9
    assert qk >= bounds["L_diag"]


def test_theorem_d1_bounds_contain_measured_costs() -> None:
    """Small config: measured minimum costs lie in [L, U] of Theorem D.1 (run_copypaste raises otherwise)."""
    params = {"C": 2, "d": 16, "T": 10, "mlp_width": 16, "qk_gap_tol": 1e-2}
    rows = {pattern: run_copypaste(2, 0.3, pattern, 0, params) for pattern in ("sink", "diagonal")}
    for pattern, row in rows.items():
        assert row["in_bounds"] and row["fit_ok"]
        # the run records its setting, which the figure's title reads (not the defaults)
        assert (row["C"], row["d"], row["T"]) == (2, 16, 10)
        assert row["min_margin"] == pytest.approx(row["kappa"], rel=1e-9)
        lo = row["L_sink"] if pattern == "sink" else row["L_diag"]
        hi = row["U_sink"] if pattern == "sink" else row["U_diag"]
        assert lo <= row["cost_qk_lower"] <= row["cost_qk"] <= row["cost_total"] <= hi
    assert rows["sink"]["cost_total"] < rows["diagonal"]["cost_total"]
