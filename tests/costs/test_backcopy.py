"""Backcopy task of Theorem 7.1 (sinkscope.costs.backcopy): the task and the sink construction."""

from __future__ import annotations

import math

import pytest
import torch

from sinkscope.costs.backcopy import (
    FRAME_EXTRA,
    all_sequences,
    make_task,
    margin_program,
    sink_construction,
    value_inputs,
)
from sinkscope.costs.backcopy_runs import _block_tail, factor_qk
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


def test_task_frame_and_sequences() -> None:
    """``d = T + |D| + |C| + FRAME_EXTRA``, an orthonormal frame, |D| |V|^(T-1) sequences."""
    task = make_task(3, n_dormant=2, n_copy=1, seed=4)
    assert task.d == 3 + 2 + 1 + FRAME_EXTRA
    assert torch.allclose(task.E.T @ task.E, torch.eye(task.d, dtype=torch.float64), atol=1e-12)
    X, Y = all_sequences(task)
    assert X.shape == (2 * 3**2, 4, task.d) and Y.shape == X.shape
    assert torch.allclose(X[:, 0], X[0, 0].expand_as(X[:, 0]))  # BOS first in every sequence
    assert torch.allclose(Y[:, 1], 2 * X[:, 1])  # position 1 holds a dormant token: x -> 2x
    with pytest.raises(ValueError, match="T >= 2"):
        make_task(1)
