"""Minimum-cost blocks on the backcopy task (sinkscope.costs.backcopy_runs): fits, end-to-end check,
and the parameters the runs accept are those the config accepts."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from sinkscope.config import ConfigError, validate_config
from sinkscope.costs.backcopy import all_sequences
from sinkscope.costs.backcopy_runs import (
    block_forward,
    run_backcopy,
    run_backcopy_end_to_end,
    solve_backcopy,
)
from sinkscope.costs.summary import fit_slopes
from sinkscope.defaults import BACKCOPY_E2E_PARAMS, BACKCOPY_PARAMS


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


def test_end_to_end_training_matches_the_decomposition() -> None:
    """All six matrices trained jointly reach the decomposed minimum (the independent check)."""
    row = run_backcopy_end_to_end(2, "diagonal", 0)
    assert row["fit_ok"] and row["attn_accuracy"] == 1.0
    assert row["min_margin"] == pytest.approx(row["kappa"], rel=1e-9)
    # the trained query-key cost is a feasible point: never below the certified lower bound
    assert row["cost_qk"] >= row["cost_qk_decomp_lower"] * (1 - 1e-6)
    assert abs(row["e2e_gap"]) <= 0.01


def _config_accepts(default_config: dict, section: tuple[str, ...], key: str, value: Any) -> bool:
    """Whether the config check accepts ``{key: value}`` as ``costs.<section>``."""
    config = copy.deepcopy(default_config)
    where = config.setdefault("costs", {})
    where["enabled"] = True
    for name in section[:-1]:
        where = where.setdefault(name, {})
    where[section[-1]] = {key: value}
    try:
        validate_config(config)
    except ConfigError as error:
        assert f"costs.{'.'.join(section)}: unknown keys ['{key}']" in str(error)
        return False
    return True


def _run_accepts(run: Callable[..., Any], key: str, value: Any) -> bool:
    """Whether ``run`` accepts ``{key: value}``: T = 1 fails right after the parameter check."""
    with pytest.raises(ValueError) as raised:
        run(1, "sink", 0, {key: value})
    if "unknown backcopy parameters" in str(raised.value):
        return False
    assert "T >= 2" in str(raised.value)
    return True


@pytest.mark.parametrize(
    ("key", "value"), [*BACKCOPY_PARAMS.items(), *BACKCOPY_E2E_PARAMS.items(), ("e2e_typo", 1)]
)
def test_runs_accept_exactly_the_keys_the_config_accepts(
    default_config: dict, key: str, value: Any
) -> None:
    """``costs.backcopy.params`` reaches both rules, ``costs.backcopy.end_to_end.params`` only the
    end-to-end rule (rule ``cost_backcopy_e2e``): a key is accepted by a run function iff the
    config accepts it where that function's rule reads it."""
    runs = _config_accepts(default_config, ("backcopy", "params"), key, value)
    e2e = _config_accepts(default_config, ("backcopy", "end_to_end", "params"), key, value)
    assert _run_accepts(run_backcopy, key, value) == runs
    assert _run_accepts(run_backcopy_end_to_end, key, value) == (runs or e2e)
    assert runs == (key in BACKCOPY_PARAMS) and e2e == (key in BACKCOPY_E2E_PARAMS)
