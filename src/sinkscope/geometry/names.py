"""Names of the geometry stage: its tables and figures, point sets, statement bases, pooled rows.

No computation and no imports: :mod:`sinkscope.paths`
(and through it the workflow) reads the table and figure names here without loading numpy or
torch.
"""

from __future__ import annotations

__all__ = [
    "ALL_TOKENS",
    "ATTENDING",
    "BASIS_ATTENDING",
    "BASIS_LONG_CONTEXT",
    "BOS_MINUS_TOKEN",
    "FIGURES",
    "LC_ATTR_DATASET",
    "LC_ATTR_DESCRIPTION",
    "LC_ATTR_DEVICE",
    "LC_ATTR_DTYPE",
    "LC_ATTR_D_MODEL",
    "LC_ATTR_MODEL",
    "LC_ATTR_N_LAYERS",
    "LC_ATTR_N_SEQUENCES",
    "LC_ATTR_OFFSETS",
    "LC_ATTR_SEQ_LEN",
    "LONG_CONTEXT_FIGURES",
    "LONG_CONTEXT_FILE_ATTRS",
    "LONG_CONTEXT_POINT_SETS",
    "LONG_CONTEXT_TABLE",
    "LONG_CONTEXT_TABLES",
    "LONG_CONTEXT_Z",
    "POINT_SETS",
    "SUMMARY_TABLES",
    "TABLES",
    "VALUE_RANK_BY_SEQUENCE_COLUMNS",
]

#: Tables and figures of the per-pair analysis (rule analyze_geometry; paper sections in
#: workflow/rules/geometry.smk); ``sinkscope.paths`` exports them as ``GEOMETRY_TABLES`` etc.
TABLES = (
    "bos_alignment",
    "bos_cosine_hist",
    "halfspace",
    "halfspace_layer",
    "value_rank",
    "value_rank_worst",
    "bos_value_norm",
    "bos_residual_norm",
)
#: Proposition 4.1 on long sequences (T' > d_model, rule analyze_geometry_long_context; its own
#: model forward, no activation file), per pair; read by the geometry summary when enabled.
LONG_CONTEXT_TABLES = ("halfspace_long_context",)
#: Its figure: the pair's long-context margins (the summary's half-space figure pools them per model).
LONG_CONTEXT_FIGURES = ("halfspace_long_context",)
#: The long-context attention-inputs file of a pair (rule extract_long_context, read by rule
#: analyze_geometry_long_context; :mod:`sinkscope.geometry.long_context_file`): one dataset per
#: decoder layer, that layer's attention input ``Z`` on every sequence, float32
#: ``(n_sequences, seq_len, d_model)``, BOS at position 0.
LONG_CONTEXT_Z = "attention_inputs/layer_{layer:03d}"
#: Its root attributes: what was run, on what (``description`` in words; ``offsets``: each
#: sequence's first corpus token in the token stream; ``dtype``/``device``: how the model ran).
LC_ATTR_DESCRIPTION = "description"
LC_ATTR_MODEL = "model"
LC_ATTR_DATASET = "dataset"
LC_ATTR_N_LAYERS = "n_layers"
LC_ATTR_N_SEQUENCES = "n_sequences"
LC_ATTR_SEQ_LEN = "seq_len"
LC_ATTR_D_MODEL = "d_model"
LC_ATTR_OFFSETS = "offsets"
LC_ATTR_DTYPE = "dtype"
LC_ATTR_DEVICE = "device"
#: All of them, in the order the file lists them.
LONG_CONTEXT_FILE_ATTRS = (
    LC_ATTR_DESCRIPTION,
    LC_ATTR_MODEL,
    LC_ATTR_DATASET,
    LC_ATTR_N_LAYERS,
    LC_ATTR_N_SEQUENCES,
    LC_ATTR_SEQ_LEN,
    LC_ATTR_D_MODEL,
    LC_ATTR_OFFSETS,
    LC_ATTR_DTYPE,
    LC_ATTR_DEVICE,
)
#: Tables of the summary (rule ``summarize_geometry``): the keys of
#: :func:`~sinkscope.geometry.summary.summarize`, and ``statements``
#: (:func:`sinkscope.claims.checks.geometry.geometry_statements`).
SUMMARY_TABLES = (
    "bos_alignment",
    "halfspace_layer",
    "value_rank",
    "value_rank_by_sequence",
    "value_rank_worst",
    "bos_value_norm_classes",
    "bos_residual_norm",
    "statements",
)
FIGURES = (
    "bos_alignment",
    "halfspace_margins",
    "value_rank",
    "bos_value_norm",
    "bos_residual_norm",
)

#: The three point sets of the half-space test (:mod:`sinkscope.geometry.halfspace`).
BOS_MINUS_TOKEN = "bos_minus_token"
ATTENDING = "attending"
ALL_TOKENS = "all_tokens"
POINT_SETS: tuple[str, ...] = (BOS_MINUS_TOKEN, ATTENDING, ALL_TOKENS)
#: The point sets of the long-context test
#: (:func:`~sinkscope.geometry.long_context.solve_long_context`): those that need no
#: attention probabilities.
LONG_CONTEXT_POINT_SETS: tuple[str, ...] = (BOS_MINUS_TOKEN, ALL_TOKENS)
#: Name of the long-context table of a pair
#: (:func:`~sinkscope.geometry.long_context.solve_long_context`).
LONG_CONTEXT_TABLE = LONG_CONTEXT_TABLES[0]
#: ``basis`` of a ``sink_representable`` statement: decided on the long sequences (every sink
#: pattern) or, without them, on the extraction's sequences (the sink-attending tokens).
BASIS_LONG_CONTEXT = "long_context"
BASIS_ATTENDING = "attending"


#: Columns of the summary's ``value_rank_by_sequence`` table: each sequence's relative rank of
#: one layer's value vectors per kv head (:mod:`sinkscope.geometry.summary`).
VALUE_RANK_BY_SEQUENCE_COLUMNS = ("model", "dataset", "layer", "kv_head", "sequence", "rel_rank")
