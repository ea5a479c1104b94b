"""Names of the claims stage: the summary tables rule ``claims`` reads.

No computation. Each table is declared where its rule is, in the registry of outputs
(:data:`sinkscope.outputs.ENTRIES`, the field ``claims``); this module lists them by key:
:mod:`sinkscope.paths` (and through it the workflow) reads :data:`INPUTS` to list the rule's
inputs, and :mod:`sinkscope.claims.registry` reads it to know which analysis writes each table.
"""

from __future__ import annotations

from typing import NamedTuple

from sinkscope.outputs import ENTRIES

__all__ = ["INPUTS", "ClaimsInput"]


class ClaimsInput(NamedTuple):
    """One summary table of an analysis that the claims read."""

    #: The rule that writes it (an entry of :data:`sinkscope.outputs.REGISTRY`).
    rule: str
    #: The analysis that writes it (the rule's stage: ``heads``, ``geometry``, ... ``dynamics``).
    analysis: str
    #: The table's name among the rule's tables.
    name: str


#: Summary table key (the key of the tables the checks get) -> where it comes from, in the order
#: rule ``claims`` lists its inputs (the registry's).
INPUTS: dict[str, ClaimsInput] = {
    key: ClaimsInput(outputs.rule, outputs.stage, name)
    for outputs in ENTRIES
    for key, name in outputs.claims.items()
}
