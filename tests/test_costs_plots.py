"""Smoke tests of the §7 figures (synthetic tables)."""

from __future__ import annotations

from pathlib import Path

from sinkscope.costs.backcopy import condition3_grid
from sinkscope.costs.plots import plot_backcopy_costs, plot_condition3, plot_copypaste_costs


def _backcopy_rows() -> list[dict]:
    rows = []
    for T in (4, 8, 16):
        for pattern, power in (("sink", 1.0), ("diagonal", 1.5)):
            for seed in (0, 1):
                c = 10.0 * T**power * (1 + 0.01 * seed)
                rows.append(
                    {
                        "T": T,
                        "pattern": pattern,
                        "seed": seed,
                        "kappa": 10.0,
                        "score_norm": "d",
                        "cost_total": c,
                        "cost_qk": 0.9 * c,
                        "cost_qk_lower": 0.89 * c,
                        "cost_total_d": c,
                        "cost_total_sqrt_d": c / 3,
                    }
                )
    return rows


def test_figures_are_written(tmp_path: Path) -> None:
    rows = _backcopy_rows()
    plot_backcopy_costs(rows, tmp_path / "a.png")
    grid = condition3_grid([4, 8, 16], [5], [1.0, 10.0], d_offsets=[2])
    plot_condition3(grid, tmp_path / "b.png", measured=rows)
    cp = [
        {
            "pattern": p,
            "n": n,
            "reff_over_delta2": x,
            "cost_total": c,
            "lower_bound": c / 2,
            "upper_bound": 2 * c,
            "C": 3,
            "d": 100,
            "kappa": 10.0,
        }
        for p, f in (("sink", lambda x: 30.0), ("diagonal", lambda x: 3.0 * x))
        for n, x in ((2, 10.0), (2, 100.0), (4, 50.0))
        for c in [f(x)]
    ]
    plot_copypaste_costs(cp, tmp_path / "c.png")
    for name in ("a.png", "b.png", "c.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
