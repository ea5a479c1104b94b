"""Table and figure names of the StreamingLLM stage (read by :mod:`sinkscope.paths`, the rules
and :mod:`sinkscope.streaming.plots`; no imports, so the workflow parses them without torch).

Per pair, by rule: the cache policies (``analyze_streaming``), sliding window with
re-computation as the reference for the caches (``analyze_streaming_recompute``) and the
attention mass on the first positions, read from the extraction's HDF5 file
(``analyze_streaming_first_positions``). Only the last one depends on the activation file, so a
re-extraction does not re-run the hours of cache evaluation.
"""

from __future__ import annotations

POLICY_TABLES = ("nll_by_position", "perplexity", "timings", "layer_ablation", "settings")
POLICY_FIGURES = ("nll_by_position", "perplexity_vs_window", "sink_count")
RECOMPUTE_TABLES = ("recompute", "recompute_timings")
RECOMPUTE_FIGURES = ("recompute",)
FIRST_POSITION_TABLES = ("first_position_mass",)
FIRST_POSITION_FIGURES = ("first_position_mass",)
#: Every per-pair table and figure of the stage.
TABLES = (*POLICY_TABLES, *RECOMPUTE_TABLES, *FIRST_POSITION_TABLES)
FIGURES = (*POLICY_FIGURES, *RECOMPUTE_FIGURES, *FIRST_POSITION_FIGURES)
#: Tables and figure of rule ``summarize_streaming``
#: (:func:`sinkscope.streaming.summary.summarize`).
SUMMARY_TABLES = ("perplexity", "overview", "sink_heads", "layers", "correlations", "recompute")
SUMMARY_FIGURES = ("eviction_damage",)
