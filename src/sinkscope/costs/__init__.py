"""§7 of the paper: minimum l2 costs of sink vs diagonal attention blocks.

* :mod:`.toy` - the nuclear-norm toy on ``X = I_{T+1}``.
* :mod:`.qk_convex` - certified minimum-nuclear-norm query-key matrices under enumerated margins.
* :mod:`.backcopy` - the backcopy task of Theorem 7.1 (Figure 3 left), condition (3).
* :mod:`.copypaste` - the generic copy-paste task of Theorem 7.2 / D.1 (Figure 3 right).
* :mod:`.plots` - the figures.

The grids of the runs are the config's ``costs`` section (``workflow/schemas/config.schema.yaml``;
its defaults run on 2 CPU cores in minutes, ``config/paper.yaml`` sets the paper's).
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
    "DEFAULT_BACKCOPY_PARAMS",
    "DEFAULT_COPYPASTE_PARAMS",
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
