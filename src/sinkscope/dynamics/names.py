"""Table and figure names of the training-dynamics stage, per part of the ``dynamics`` config
section (rules in ``workflow/rules/dynamics.smk``).

No computation and no imports: :mod:`sinkscope.paths` (and through it the workflow) lists each
part's outputs from these names, :mod:`sinkscope.dynamics.grids` reads :data:`PARTS`, and
:mod:`sinkscope.dynamics.plots` draws :data:`FIGURES`, without loading torch.
"""

from __future__ import annotations

__all__ = ["FIGURES", "IDLE_ROWS", "INDUCTION_ROWS", "PARTS", "RUN_TABLES", "SUMMARY_TABLES"]

#: The parts of the ``dynamics`` config section, in workflow order: the gradient flow of
#: ``L(V phi(a))`` (Theorem 3.3), the induction task (Tables 1-2) and the classification task
#: (Table 3) of the companion paper.
PARTS = ("value_softmax", "induction", "classification")
#: The tables of one run (rule ``dynamics_<part>_run``: the ``run_*`` function of the part's
#: module).
RUN_TABLES: dict[str, tuple[str, ...]] = dict(
    zip(
        PARTS,
        (
            ("final", "trajectory", "scalars"),
            ("final", "curve", "heads", "pattern", "switches"),
            ("final", "curve", "attention"),
        ),
        strict=True,
    )
)
#: The tables of rule ``summarize_dynamics_<part>`` (the part's ``summarize_*`` function).
SUMMARY_TABLES: dict[str, tuple[str, ...]] = dict(
    zip(
        PARTS,
        (
            ("final", "by_variant", "trajectory", "scalars"),
            ("final", "by_setup", "curve", "heads", "pattern", "switches"),
            ("final", "by_setup", "curve", "attention"),
        ),
        strict=True,
    )
)
#: The figures of rule ``summarize_dynamics_<part>`` (:func:`sinkscope.dynamics.plots.figures`).
FIGURES: dict[str, tuple[str, ...]] = dict(
    zip(
        PARTS,
        (
            ("polarization", "losses", "activations", "tied", "regression"),
            ("sinks", "accuracy", "patterns", "curves", "switches"),
            ("flips", "flips_by_size", "attention"),
        ),
        strict=True,
    )
)
#: The ``rows`` of the induction ``switches`` table: the first-half rows 1..m, which have nothing
#: to copy (a head is idle there), and the induction rows (the switch claim compares the two).
IDLE_ROWS = "idle"
INDUCTION_ROWS = "induction"
