"""Table and figure names of the §7 cost stage, by rule.

No computation and no imports: :mod:`sinkscope.paths` (and through it the workflow) lists the
stage's targets from these names, and :mod:`sinkscope.costs.plots` keys its figures by them,
without loading numpy or cvxpy.
"""

from __future__ import annotations

__all__ = [
    "BACKCOPY_FIGURES",
    "BACKCOPY_TABLES",
    "COPYPASTE_FIGURES",
    "COPYPASTE_TABLES",
    "END_TO_END_TABLES",
    "FIGURES",
    "FIGURE_LABELS",
    "TABLES",
    "TOY_FIGURES",
    "TOY_TABLES",
]

#: Rule ``cost_toy``: the nuclear-norm toy on ``X = I_{T+1}``.
TOY_TABLES = ("toy",)
TOY_FIGURES = ("toy",)
#: Rule ``summarize_backcopy``: the back-copy runs of Theorem 7.1 and their log-log slopes,
#: condition (3) on a grid and beside the measured costs; Figure 3 left and condition (3).
BACKCOPY_TABLES = ("backcopy_runs", "backcopy_slopes", "condition3", "condition3_measured")
BACKCOPY_FIGURES = ("backcopy_costs", "condition3")
#: Rule ``summarize_copypaste``: the copy-paste runs of Theorem 7.2 / D.1; Figure 3 right.
COPYPASTE_TABLES = ("copypaste_runs",)
COPYPASTE_FIGURES = ("copypaste_costs",)
#: Rule ``summarize_backcopy_e2e``: the end-to-end check of the decomposition, made only when the
#: config's ``costs.backcopy.end_to_end.T`` lists sizes.
END_TO_END_TABLES = ("backcopy_end_to_end",)
#: Every table and figure the stage makes whenever it is enabled (the end-to-end table apart).
TABLES = (*TOY_TABLES, *BACKCOPY_TABLES, *COPYPASTE_TABLES)
FIGURES = (*TOY_FIGURES, *BACKCOPY_FIGURES, *COPYPASTE_FIGURES)
#: The report label of each figure (its caption is ``workflow/report/costs_<name>.rst``).
FIGURE_LABELS: dict[str, str] = {
    "toy": "nuclear-norm toy",
    "backcopy_costs": "backcopy cost vs T (Fig. 3 left)",
    "condition3": "condition (3) of Theorem 7.1",
    "copypaste_costs": "copy-paste cost and Theorem D.1 bounds (Fig. 3 right)",
}
