"""§7 nuclear-norm toy and the convex query-key margin program (sinkscope.costs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sinkscope.costs.backcopy import make_task, margin_program
from sinkscope.costs.qk_convex import MarginProgram, exact_margins, padded, solve_margin_program
from sinkscope.costs.toy import toy_matrices, toy_table


def test_toy_singular_values() -> None:
    for row in toy_table([1, 4, 31], kappa=2.5):
        T = row["T"]
        sink, diag = toy_matrices(T, 2.5)
        s = np.linalg.svd(sink, compute_uv=False)
        assert row["sink_rank"] == 1
        assert s[0] == pytest.approx(2.5 * math.sqrt(T + 1))
        assert np.allclose(s[1:], 0.0)
        assert np.allclose(np.linalg.svd(diag, compute_uv=False), 2.5)
        assert row["diag_rank"] == T + 1
        assert row["sink_nuclear"] == pytest.approx(row["sink_nuclear_formula"])
        assert row["diag_nuclear"] == pytest.approx(row["diag_nuclear_formula"])
        assert row["ratio_diag_over_sink"] == pytest.approx(math.sqrt(T + 1))


def _hand_program(n: int, zero: bool = False) -> MarginProgram:
    """Queries e_1..e_n must prefer key e_0 over key e_{n+1}: optimum ||W||_* = sqrt(n/2).

    Primal W = (sum_i e_i)(e_0 - e_{n+1})^T / 2; dual weights 1 give G = u (e_0 - e_{n+1})^T with
    ||G||_2 = sqrt(2n), so the bound n / sqrt(2n) = sqrt(n/2) is tight.
    """
    m = n + 3  # one unused coordinate
    X = torch.eye(m, dtype=torch.float64)
    tgt, tm = padded([[0]] * n)
    oth, om = padded([[n + 1]] * n)
    zm = None
    if zero:
        zm = torch.zeros((m, m), dtype=torch.bool)
        zm[:, n + 2] = True  # the unused key direction is forced to zero: optimum unchanged
    return MarginProgram(X, torch.arange(1, n + 1), tgt, tm, oth, om, zm)


@pytest.mark.parametrize("method", ["bm", "fista"])
@pytest.mark.parametrize("zero", [False, True])
def test_margin_program_hand_case(method: str, zero: bool) -> None:
    n = 6
    prog = _hand_program(n, zero)
    sol = solve_margin_program(prog, method=method, tol=1e-4)
    opt = math.sqrt(n / 2)
    assert float(exact_margins(prog, sol.W).min()) == pytest.approx(1.0, abs=1e-12)
    assert sol.dual <= opt + 1e-9 <= sol.primal + 2e-9
    assert sol.primal == pytest.approx(opt, rel=2e-4)
    assert float(torch.linalg.svdvals(sol.W).sum()) == pytest.approx(sol.primal, rel=1e-12)


def test_reduced_backcopy_program_matches_full() -> None:
    """Orbit reduction (permutations of D and C) gives the same certified optimum at T = 3."""
    task = make_task(3)
    for pattern in ("sink", "diagonal"):
        full = solve_margin_program(margin_program(task, pattern), method="fista", tol=2e-3)
        red = solve_margin_program(margin_program(task, pattern, reduced=True), tol=2e-3)
        # certified intervals [dual, primal] must overlap; the reduced W is feasible for all situations
        assert red.dual <= full.primal + 1e-9 and full.dual <= red.primal + 1e-9
        assert float(exact_margins(margin_program(task, pattern), red.W).min()) == pytest.approx(
            1.0, abs=1e-9
        )
