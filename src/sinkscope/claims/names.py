"""Names of the claims stage: the summary tables rule ``claims`` reads.

No computation and no imports beyond the standard library: :mod:`sinkscope.paths` (and through
it the workflow) reads :data:`INPUTS` to list the rule's inputs, and
:mod:`sinkscope.claims.registry` reads it to know which analysis writes each table.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["INPUTS", "ClaimsInput"]


class ClaimsInput(NamedTuple):
    """One summary table of an analysis that the claims read."""

    #: The analysis that writes it (``heads``, ``geometry``, ... ``dynamics``).
    analysis: str
    #: The config section (a dotted ``section.part`` for a part) whose ``enabled`` decides whether
    #: the table is made (:func:`sinkscope.paths.analysis_runs`).
    section: str
    #: The table's name among the analysis's summary tables (``sinkscope.paths.Paths``).
    name: str


#: Summary table key (the key of the tables the checks get) -> where it comes from, in the order
#: rule ``claims`` lists its inputs.
INPUTS: dict[str, ClaimsInput] = {
    "head_classes": ClaimsInput("heads", "heads", "head_classes"),
    "geometry_bos_alignment": ClaimsInput("geometry", "geometry", "bos_alignment"),
    "geometry_value_rank": ClaimsInput("geometry", "geometry", "value_rank"),
    "geometry_bos_value_norm_classes": ClaimsInput(
        "geometry", "geometry", "bos_value_norm_classes"
    ),
    "geometry_statements": ClaimsInput("geometry", "geometry", "statements"),
    # read only by sinkscope.claims.observations (the "Observations" section of claims.md)
    "geometry_bos_residual_norm": ClaimsInput("geometry", "geometry", "bos_residual_norm"),
    "geometry_value_rank_worst": ClaimsInput("geometry", "geometry", "value_rank_worst"),
    "oversmoothing_summary": ClaimsInput("oversmoothing", "oversmoothing", "summary"),
    "oversmoothing_per_head": ClaimsInput("oversmoothing", "oversmoothing", "per_head"),
    "costs_toy": ClaimsInput("costs", "costs", "toy"),
    "costs_backcopy_runs": ClaimsInput("costs", "costs", "backcopy_runs"),
    "costs_backcopy_slopes": ClaimsInput("costs", "costs", "backcopy_slopes"),
    "costs_copypaste_runs": ClaimsInput("costs", "costs", "copypaste_runs"),
    "streaming_sink_heads": ClaimsInput("streaming", "streaming", "sink_heads"),
    "streaming_recompute": ClaimsInput("streaming", "streaming", "recompute"),
    "dynamics_value_softmax_by_variant": ClaimsInput(
        "dynamics", "dynamics.value_softmax", "by_variant"
    ),
    "dynamics_induction_by_setup": ClaimsInput("dynamics", "dynamics.induction", "by_setup"),
    "dynamics_classification_final": ClaimsInput("dynamics", "dynamics.classification", "final"),
}
