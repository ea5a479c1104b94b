"""Names of the head classification stage: table columns and figures (the class labels and the
pooled dataset's name, which every stage reads, are in :mod:`sinkscope.labels`).

No computation and no imports: :mod:`sinkscope.paths` (and through it the workflow) reads the
figure names here without loading numpy, polars or torch.
"""

from __future__ import annotations

__all__ = [
    "FIGURES",
    "FLAG_COLUMNS",
    "INTERVAL_SHARES",
    "LEARNED_SINK_MASS",
    "MASS_COLUMNS",
    "PER_HEAD",
    "PER_HEAD_COLUMNS",
    "PER_SEQUENCE",
    "SEQUENCE_MASSES",
    "SEQUENCE_MASS_COLUMNS",
    "SUMMARY",
    "SUMMARY_COLUMNS",
    "TABLES",
]

#: Tables of one pair (rule classify_heads, :func:`sinkscope.heads.classify.classify_file`):
#: one row per (layer, head), and one per (sequence, layer, head); written as
#: ``heads_<name>.parquet`` (the registry of outputs, :mod:`sinkscope.outputs`).
PER_HEAD = "per_head"
PER_SEQUENCE = "per_sequence"
TABLES = (PER_HEAD, PER_SEQUENCE)
#: Figures of one pair (rule classify_heads).
FIGURES = ("mass_heatmaps", "class_map")
#: Name of the cross-pair summary (rule summarize_heads): its table and its figure, the class
#: fractions of every pair as bars; ``sinkscope.paths`` places them under ``summary/``.
SUMMARY = "head_classes"

MASS_COLUMNS: tuple[str, ...] = ("bos_mass", "diagonal_mass", "subdiagonal_mass", "sink_prev_mass")
#: Mean probability of the head's learned sink logit (gpt-oss's ``self_attn.sinks``) over the rows
#: ``bos_mass`` averages; null for a model without learned sinks. Not used by the flags.
LEARNED_SINK_MASS = "learned_sink_mass"
FLAG_COLUMNS: tuple[str, ...] = ("is_sink", "is_diagonal", "is_sink_prev")
PER_HEAD_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "layer",
    "head",
    "n_sequences",
    "bos_mass",
    "bos_mass_std",
    "diagonal_mass",
    "subdiagonal_mass",
    "sink_prev_mass",
    LEARNED_SINK_MASS,
    *FLAG_COLUMNS,
    "head_class",
)

SUMMARY_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "n_datasets",
    "n_sequences",
    "n_heads",
    "frac_sink",
    "frac_diagonal",
    "frac_sink_prev",
    "frac_other",
    "mean_learned_sink_mass",
    "statement",
)
#: Name of the summary table of every pair's per-sequence masses (rule summarize_heads), from
#: which the claims rule bootstraps the shares over sequences
#: (:func:`sinkscope.heads.summary.share_intervals`).
SEQUENCE_MASSES = "head_masses_by_sequence"
#: Its columns.
SEQUENCE_MASS_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "layer",
    "head",
    "sequence",
    "bos_mass",
    "diagonal_mass",
    "subdiagonal_mass",
)
#: The shares :func:`sinkscope.heads.summary.share_intervals` gives intervals of: the three
#: flags' and the sink share's excess over the diagonal share (the claims' quantities).
INTERVAL_SHARES: tuple[str, ...] = (
    "frac_sink",
    "frac_diagonal",
    "frac_sink_prev",
    "sink_minus_diagonal",
)
