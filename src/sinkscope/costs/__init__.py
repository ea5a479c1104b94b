"""§7 of the paper: minimum l2 costs of sink vs diagonal attention blocks.

* :mod:`.toy` - the nuclear-norm toy on ``X = I_{T+1}``.
* :mod:`.qk_convex` - certified minimum-nuclear-norm query-key matrices under enumerated margins.
* :mod:`.backcopy` - the backcopy task of Theorem 7.1 (Figure 3 left), condition (3).
* :mod:`.copypaste` - the generic copy-paste task of Theorem 7.2 / D.1 (Figure 3 right).
* :mod:`.plots` - the figures.

The default grids below run on 2 CPU cores in minutes; ``PAPER_*`` grids are for a cluster.
"""

from __future__ import annotations

from sinkscope.costs.backcopy import (
    DEFAULT_BACKCOPY_PARAMS,
    condition3,
    condition3_grid,
    condition3_vs_measured,
    fit_slopes,
    run_backcopy,
    run_backcopy_end_to_end,
)
from sinkscope.costs.copypaste import (
    DEFAULT_COPYPASTE_PARAMS,
    run_copypaste,
    theorem_d1_bounds,
)
from sinkscope.costs.toy import toy_table

__all__ = [
    "DEFAULT_BACKCOPY_GRID",
    "DEFAULT_BACKCOPY_PARAMS",
    "DEFAULT_CONDITION3_GRID",
    "DEFAULT_COPYPASTE_GRID",
    "DEFAULT_COPYPASTE_PARAMS",
    "DEFAULT_E2E_GRID",
    "PAPER_BACKCOPY_GRID",
    "PAPER_COPYPASTE_GRID",
    "condition3",
    "condition3_grid",
    "condition3_vs_measured",
    "fit_slopes",
    "run_backcopy",
    "run_backcopy_end_to_end",
    "run_copypaste",
    "theorem_d1_bounds",
    "toy_table",
]

#: One ``run_backcopy(T, pattern, seed, params)`` job per combination.
DEFAULT_BACKCOPY_GRID: dict[str, list] = {
    "T": [4, 8, 16, 32],
    "pattern": ["sink", "diagonal"],
    "seed": [0, 1, 2],
}
PAPER_BACKCOPY_GRID: dict[str, list] = {
    "T": [4, 8, 16, 32, 64, 128],
    "pattern": ["sink", "diagonal"],
    "seed": [0, 1, 2],
}
#: End-to-end checks (``run_backcopy_end_to_end``) at small T.
DEFAULT_E2E_GRID: dict[str, list] = {"T": [4, 8], "pattern": ["sink", "diagonal"], "seed": [0]}
#: One ``run_copypaste(n, delta, pattern, seed, params)`` job per combination (C=3, d=100, T=50).
DEFAULT_COPYPASTE_GRID: dict[str, list] = {
    "n": [2, 4, 6],
    "delta": [0.1, 0.2, 0.3, 0.5],
    "pattern": ["sink", "diagonal"],
    "seed": [0],
}
PAPER_COPYPASTE_GRID: dict[str, list] = {
    "n": [2, 3, 4, 6, 8],
    "delta": [0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5],
    "pattern": ["sink", "diagonal"],
    "seed": [0, 1, 2],
}
#: ``condition3_grid(**DEFAULT_CONDITION3_GRID)``.
DEFAULT_CONDITION3_GRID: dict[str, list] = {
    "T_values": [4, 8, 16, 32, 64, 128, 256, 512, 1024],
    "sizes": [1, 2, 5, 10, 20],
    "kappas": [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0],
    "d_offsets": [0, 2],
}
