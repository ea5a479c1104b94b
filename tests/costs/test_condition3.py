"""Condition (3) of Theorem 7.1 (sinkscope.costs.condition3): formula, beside measured costs, panel."""

from __future__ import annotations

import math

import pytest

from sinkscope.costs.condition3 import condition3, condition3_panel, condition3_vs_measured


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


def test_condition3_panel_uses_the_measured_size_when_the_grid_has_it() -> None:
    assert condition3_panel([1, 5, 10], [0, 2], 5) == {"n_dormant": 5, "n_copy": 5, "d_offset": 2}
    assert condition3_panel([1, 10], [0], 5) == {"n_dormant": 1, "n_copy": 1, "d_offset": 0}
    with pytest.raises(ValueError, match="sizes"):
        condition3_panel([], [0], 5)
