"""Names of the claims stage: the summary tables rule ``claims`` reads.

No computation, and no imports beyond the standard library and the stages' own ``names``
modules, which state each summary table's name: :mod:`sinkscope.paths` (and through it the
workflow) reads :data:`INPUTS` to list the rule's inputs, and :mod:`sinkscope.claims.registry`
reads it to know which analysis writes each table. An input that names a table its stage does not
make fails at import.
"""

from __future__ import annotations

from typing import NamedTuple

from sinkscope.costs import names as costs_names
from sinkscope.dynamics import names as dynamics_names
from sinkscope.geometry import names as geometry_names
from sinkscope.heads import names as heads_names
from sinkscope.oversmoothing import names as oversmoothing_names
from sinkscope.sinks import names as sinks_names
from sinkscope.streaming import names as streaming_names

__all__ = ["INPUTS", "ClaimsInput", "summary_tables"]


class ClaimsInput(NamedTuple):
    """One summary table of an analysis that the claims read."""

    #: The analysis that writes it (``heads``, ``geometry``, ... ``dynamics``).
    analysis: str
    #: The config section (a dotted ``section.part`` for a part) whose ``enabled`` decides whether
    #: the table is made (:func:`sinkscope.config.analysis_runs`).
    section: str
    #: The table's name among the analysis's summary tables (``sinkscope.paths.Paths``).
    name: str


def summary_tables(section: str) -> tuple[str, ...]:
    """The summary tables the analysis of config ``section`` (``heads``, ``geometry``, ...,
    ``dynamics.<part>``) writes, as its ``names`` module states them."""
    analysis, _, part = section.partition(".")
    if analysis == "dynamics":
        return dynamics_names.SUMMARY_TABLES[part]
    return {
        "heads": (heads_names.SUMMARY, heads_names.SEQUENCE_MASSES),
        "geometry": geometry_names.SUMMARY_TABLES,
        "oversmoothing": oversmoothing_names.TABLES,
        "costs": costs_names.TABLES,
        "streaming": streaming_names.SUMMARY_TABLES,
        "sinks": sinks_names.SUMMARY_TABLES,
    }[analysis]


def _input(section: str, name: str) -> ClaimsInput:
    """The summary table ``name`` of the analysis of config ``section`` (checked against
    :func:`summary_tables`)."""
    if name not in summary_tables(section):
        raise ValueError(f"claims input {name!r}: not a summary table of {section!r}")
    return ClaimsInput(section.partition(".")[0], section, name)


#: Summary table key (the key of the tables the checks get) -> where it comes from, in the order
#: rule ``claims`` lists its inputs.
INPUTS: dict[str, ClaimsInput] = {
    "head_classes": _input("heads", heads_names.SUMMARY),
    # the bootstrap of the head shares over sequences (sinkscope.heads.summary.share_intervals)
    "head_masses_by_sequence": _input("heads", heads_names.SEQUENCE_MASSES),
    "geometry_bos_alignment": _input("geometry", "bos_alignment"),
    "geometry_value_rank": _input("geometry", "value_rank"),
    "geometry_bos_value_norm_classes": _input("geometry", "bos_value_norm_classes"),
    "geometry_statements": _input("geometry", "statements"),
    # read by sinkscope.claims.observations (the "Observations" section of claims.md) and by the
    # reasons of per-head checks (sinkscope.claims.events)
    "geometry_bos_residual_norm": _input("geometry", "bos_residual_norm"),
    "geometry_value_rank_worst": _input("geometry", "value_rank_worst"),
    # read by the reasons of per-head checks (sinkscope.claims.events)
    "sinks_massive_onset": _input("sinks", "massive_onset"),
    "oversmoothing_summary": _input("oversmoothing", "summary"),
    "oversmoothing_per_head": _input("oversmoothing", "per_head"),
    "costs_toy": _input("costs", "toy"),
    "costs_backcopy_runs": _input("costs", "backcopy_runs"),
    "costs_backcopy_slopes": _input("costs", "backcopy_slopes"),
    "costs_copypaste_runs": _input("costs", "copypaste_runs"),
    "streaming_sink_heads": _input("streaming", "sink_heads"),
    "streaming_recompute": _input("streaming", "recompute"),
    "dynamics_value_softmax_by_variant": _input("dynamics.value_softmax", "by_variant"),
    "dynamics_induction_by_setup": _input("dynamics.induction", "by_setup"),
    "dynamics_classification_final": _input("dynamics.classification", "final"),
}
