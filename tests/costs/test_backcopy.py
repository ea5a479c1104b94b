"""Backcopy task of Theorem 7.1 (sinkscope.costs.backcopy): construction, fitted blocks, slopes."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sinkscope.costs.backcopy import (
    _block_tail,
    all_sequences,
    block_forward,
    condition3,
    condition3_panel,
    condition3_vs_measured,
    factor_qk,
    fit_slopes,
    make_task,
    margin_program,
    run_backcopy,
    run_backcopy_end_to_end,
    sink_construction,
    solve_backcopy,
    value_inputs,
)
from sinkscope.costs.qk_convex import exact_margins


@pytest.mark.parametrize("T", [3, 6])
def test_sink_construction_margins_and_costs(T: int) -> None:
    """Equations (7)-(10): every margin >= kappa, the stated costs, and the exact mapping."""
    kappa = 3.0
    task = make_task(T, seed=1)
    d, nD, nC = task.d, task.n_dormant, task.n_copy
    W = sink_construction(task, kappa)
    prog = margin_program(task, "sink")
    unit = math.sqrt(d / 2)
    Wc = task.E.T @ W["W_QK"] @ task.E * unit**2 / math.sqrt(d)  # program coordinates
    assert float(exact_margins(prog, Wc).min()) == pytest.approx(kappa, rel=1e-12)
    nuc = lambda M: float(torch.linalg.svdvals(M).sum())
    assert nuc(W["W_QK"]) == pytest.approx(
        2 * kappa / math.sqrt(d) * (math.sqrt(2 * nD) + T - 1), rel=1e-10
    )
    assert nuc(W["W_VO"]) == pytest.approx(
        d - 2, rel=1e-10
    )  # the paper's T+|D|+|C|-2 uses d = T+|D|+|C|
    assert float((W["W_1"] ** 2).sum()) == pytest.approx(4 * d * nC + T + nD, rel=1e-10)
    assert float((W["W_2"] ** 2).sum()) == pytest.approx(nD + T, rel=1e-10)
    # hard attention: the block represents the task exactly on every distinct input
    Vo, Vv = factor_qk(W["W_VO"].T)  # any factorisation W_O W_V = W_VO
    weights = {"W_V": Vv, "W_O": Vo.T, "W_1": W["W_1"], "W_2": W["W_2"]}
    assert torch.allclose(weights["W_O"] @ weights["W_V"], W["W_VO"], atol=1e-10)
    xq, xa, y = (v @ task.E.T for v in value_inputs(task, "sink"))
    assert torch.allclose(_block_tail(weights, xq, xa), y, atol=1e-9)


@pytest.mark.parametrize("pattern", ["sink", "diagonal"])
def test_fitted_block_meets_targets_on_every_sequence(pattern: str) -> None:
    T = 3
    row, weights, task = solve_backcopy(T, pattern, 0, {"check_sequences": 16})
    assert row["fit_ok"] and row["fit_relerr_hard"] <= 1e-5
    assert row["min_margin"] == pytest.approx(row["kappa"], rel=1e-9)
    assert row["cost_qk_lower"] <= row["cost_qk"] * (1 + 1e-9)
    assert row["attn_accuracy"] == 1.0
    # the real block (softmax attention) on all 5 * 10 * 10 sequences
    X, Y = all_sequences(task)
    assert X.shape[0] == 5 * 10 * 10
    out, A = block_forward(weights, X, float(task.d))
    rel = float(((out - Y) ** 2).sum() / (Y**2).sum())
    assert rel <= 1e-3  # softmax with margin kappa = 10 leaks ~T e^-10 of the mass
    # the attention pattern: BOS / self for dormant, previous position for copy-paste
    toks = list(itertools.product(*[task.allowed(t) for t in range(1, T + 1)]))
    for s, seq in enumerate(toks):
        for t, i in enumerate(seq, start=1):
            want = (0 if pattern == "sink" else t) if task.is_dormant(i) else t - 1
            assert int(A[s, t].argmax()) == want
            assert float(A[s, t, want]) > 0.99


def test_slopes_order_short_T() -> None:
    rows = [
        run_backcopy(T, pattern, 0, {"check_sequences": 8, "qk_gap_tol": 2e-2})
        for T in (3, 6)
        for pattern in ("sink", "diagonal")
    ]
    slopes = fit_slopes(rows)
    assert slopes["sink"]["slope"] < slopes["diagonal"]["slope"]
    for T in (3, 6):
        sink = next(r for r in rows if r["T"] == T and r["pattern"] == "sink")
        diag = next(r for r in rows if r["T"] == T and r["pattern"] == "diagonal")
        assert sink["cost_total"] < diag["cost_total"]
        assert sink["cost_qk"] < diag["cost_qk"]


def test_condition3_formula() -> None:
    c = condition3(T=100, n_dormant=5, n_copy=5, d=112, kappa=50.0)
    lhs = 2 * 50 / math.sqrt(112) * (math.sqrt(10) + 99) + 300 + 15 + 5 + 4 * 112 * 5 - 2
    rhs = 50 / math.sqrt(3 * 112) * math.sqrt(5) * 100**1.5
    assert c["lhs"] == pytest.approx(lhs) and c["rhs"] == pytest.approx(rhs)
    assert bool(c["holds"]) == (lhs < rhs)


def _measured(T: int, d: int, kappa: float, sink: float, diagonal: float) -> list[dict]:
    base = {"T": T, "d": d, "n_dormant": 5, "n_copy": 5, "kappa": kappa}
    return [
        {**base, "pattern": "sink", "seed": 0, "cost_total_d": sink, "cost_total_sqrt_d": sink},
        {**base, "pattern": "sink", "seed": 1, "cost_total_d": sink + 2, "cost_total_sqrt_d": sink},
        {
            **base,
            "pattern": "diagonal",
            "seed": 0,
            "cost_total_d": diagonal,
            "cost_total_sqrt_d": diagonal,
        },
    ]


def test_condition3_vs_measured_flags_sink_cheaper_where_condition_fails() -> None:
    # T = 4, d = 16, kappa = 10: (3) fails under both readings (lhs ~ 380 > rhs), sink cheaper
    rows = condition3_vs_measured(_measured(4, 16, 10.0, sink=100.0, diagonal=400.0))
    assert {r["reading"] for r in rows} == {"literal", "folded"}
    for r in rows:
        k_eff = 10.0 if r["reading"] == "literal" else 10.0 * math.sqrt(16)
        direct = condition3(4, 5, 5, 16, k_eff)
        assert r["lhs"] == pytest.approx(direct["lhs"]) and r["rhs"] == pytest.approx(direct["rhs"])
        assert not r["condition_holds"] and r["sink_cheaper"]
        assert r["sink_cheaper_without_condition"]
        assert r["n_seeds"] == 1
    folded = next(r for r in rows if r["reading"] == "folded")
    assert folded["cost_sink"] == pytest.approx(101.0)  # mean over the two sink seeds


def test_condition3_vs_measured_no_flag_when_condition_holds_or_diagonal_cheaper() -> None:
    # T = 1024, d = 1036, kappa = 100, folded: rhs ~ 4e6 >> lhs ~ 2.3e5, so (3) holds
    rows = condition3_vs_measured(_measured(1024, 1036, 100.0, sink=1.0, diagonal=5.0))
    folded = next(r for r in rows if r["reading"] == "folded")
    assert folded["condition_holds"] and folded["sink_cheaper"]
    assert not folded["sink_cheaper_without_condition"]
    rows = condition3_vs_measured(_measured(4, 16, 10.0, sink=500.0, diagonal=400.0))
    assert not any(r["sink_cheaper_without_condition"] for r in rows)
    # equal costs: the sink is not cheaper (strict comparison)
    rows = condition3_vs_measured(_measured(4, 16, 10.0, sink=400.0, diagonal=400.0))
    assert not any(r["sink_cheaper"] for r in rows if r["reading"] == "literal")
    # one pattern missing: nothing to compare
    one = [r for r in _measured(4, 16, 10.0, 1.0, 2.0) if r["pattern"] == "sink"]
    assert condition3_vs_measured(one) == []


def test_end_to_end_training_matches_the_decomposition() -> None:
    """All six matrices trained jointly reach the decomposed minimum (the independent check)."""
    row = run_backcopy_end_to_end(2, "diagonal", 0)
    assert row["fit_ok"] and row["attn_accuracy"] == 1.0
    assert row["min_margin"] == pytest.approx(row["kappa"], rel=1e-9)
    # the trained query-key cost is a feasible point: never below the certified lower bound
    assert row["cost_qk"] >= row["cost_qk_decomp_lower"] * (1 - 1e-6)
    assert abs(row["e2e_gap"]) <= 0.01


def test_condition3_panel_uses_the_measured_size_when_the_grid_has_it() -> None:
    assert condition3_panel([1, 5, 10], [0, 2], 5) == {"n_dormant": 5, "n_copy": 5, "d_offset": 2}
    assert condition3_panel([1, 10], [0], 5) == {"n_dormant": 1, "n_copy": 1, "d_offset": 0}
    with pytest.raises(ValueError, match="sizes"):
        condition3_panel([], [0], 5)
