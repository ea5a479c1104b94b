"""Names of the sinks-beyond-BOS stage: its tables and figures.

No computation and no imports: :mod:`sinkscope.paths` (and through it the workflow) reads the
table and figure names here without loading numpy, polars or h5py.
"""

from __future__ import annotations

__all__ = ["FIGURES", "SUMMARY_FIGURES", "SUMMARY_TABLES", "TABLES"]

#: Tables of the per-pair analysis (rule analyze_sinks,
#: :func:`sinkscope.sinks.analysis.analyze_file`); ``sinkscope.paths`` exports them as
#: ``SINKS_TABLES``.
TABLES = (
    "sink_rate",
    "sink_rate_layer",
    "sink_score_head",
    "secondary_sinks",
    "secondary_tokens",
    "massive_top",
    "massive_layer",
)
#: Figures of one pair (rule analyze_sinks).
FIGURES = ("sink_rate", "secondary_sinks", "massive_activations")
#: Tables of the cross-pair summary (rule summarize_sinks,
#: :func:`sinkscope.sinks.summary.summarize`).
SUMMARY_TABLES = ("sink_rate", "secondary_tokens", "massive_layer", "massive_onset")
#: Figures of the cross-pair summary.
SUMMARY_FIGURES = ("sink_rate", "secondary_tokens", "massive_activations")
