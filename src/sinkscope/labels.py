"""Labels every stage shares: the head classes of the paper's §3 and the name of the pooled
pseudo-dataset. No imports, so any module, base or stage, reads them without loading anything.
"""

from __future__ import annotations

__all__ = ["CLASS_LEGEND_NAMES", "DIAGONAL", "HEAD_CLASSES", "OTHER", "POOLED", "SINK", "SINK_PREV"]

SINK = "sink"
DIAGONAL = "diagonal"
SINK_PREV = "sink+previous"
OTHER = "other"
#: Every label :func:`~sinkscope.heads.classify.classify` can return, in a fixed order (used for
#: legends and colours).
HEAD_CLASSES: tuple[str, ...] = (SINK, DIAGONAL, SINK_PREV, OTHER)
#: Names of the *exclusive* labels ``head_class`` wherever a figure or table shows them (the class
#: map's legend, the groups of ``bos_value_norm_classes``). The label "sink" excludes the sink
#: heads labelled sink+previous (and the few where the diagonal mass is larger), so it is not the
#: ``is_sink`` flag that the summary, the claims and the oversmoothing figures count.
CLASS_LEGEND_NAMES: dict[str, str] = {
    SINK: "sink (not sink+previous)",
    DIAGONAL: "diagonal",
    SINK_PREV: "sink+previous",
    OTHER: "other (no pattern)",
}

#: Name of the pooled pseudo-dataset in :func:`~sinkscope.heads.summary.pool_datasets` and
#: :func:`~sinkscope.heads.summary.summarize`, and of every stage's rows pooled over datasets.
POOLED = "all"
