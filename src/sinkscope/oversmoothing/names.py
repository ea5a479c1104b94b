"""Names of the oversmoothing stage: its tables, figures, pooled rows and table columns.

No computation and no imports: :mod:`sinkscope.paths`
(and through it the workflow's rules) reads
:data:`TABLES` and :data:`FIGURES` here without loading numpy or torch;
:func:`sinkscope.oversmoothing.plots.figures` draws the figures of :data:`FIGURES`.
"""

from __future__ import annotations

__all__ = [
    "BY_SEQUENCE_COLUMNS",
    "FIGURES",
    "HEADS_BY_SEQUENCE_COLUMNS",
    "HEAD_INFO_COLUMNS",
    "HEAD_SEQUENCE_KEY",
    "LAYERS_BY_SEQUENCE_COLUMNS",
    "PER_HEAD_COLUMNS",
    "PER_LAYER_COLUMNS",
    "SEQUENCE_TERMS",
    "TABLES",
]

#: Tables of one pair (rule ``analyze_oversmoothing``) and of the summary (rule
#: ``summarize_oversmoothing``): the keys of
#: :func:`~sinkscope.oversmoothing.analysis.analyze_file` and
#: :func:`~sinkscope.oversmoothing.summary.summarize` (the claims on them are decided in the
#: ``claims`` rule alone, :mod:`sinkscope.claims.checks.oversmoothing` and
#: :mod:`sinkscope.claims.checks.oversmoothing_conditions`).
TABLES = (
    "per_head",
    "per_layer",
    "summary",
    "conditions",
    "approximation_by_sequence",
    "layers_by_sequence",
    "heads_by_sequence",
)
#: Figures of one pair and of the summary (``paths.OVERSMOOTHING_FIGURES``), named after the
#: paper's figures; each is written to ``<name>.png``.
FIGURES = (
    "fig2_left_approximation",
    "fig2_right_components",
    "fig4_layer_similarity",
    "fig7_head_errors",
    "fig8_attention_deltas",
    "fig9_uniform_deltas",
    "fig10_uniformity",
    "fig11_deviating_heads",
)
#: Columns of the head classification copied into ``per_head``, and the columns of the tables
#: ``per_head`` and ``per_layer`` of :func:`~sinkscope.oversmoothing.analysis.analyze_file`.
HEAD_INFO_COLUMNS: tuple[str, ...] = (
    "head_class",
    "is_sink",
    "is_diagonal",
    "bos_mass",
    "diagonal_mass",
)

PER_HEAD_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "n_sequences",
    "layer",
    "head",
    "context_length",
    "n_tokens",
    *HEAD_INFO_COLUMNS,
    "uniformity",
    "beta",
    "s_l",
    "kappa",
    "rho_x",
    "rho_xwz",
    "rho_xwza",
    "rho_xwzau",
    "rho_xwz_s",
    "rho_xwza_s",
    "rho_xwzau_s",
    "rhohat_x",
    "rhohat_xwz",
    "rhohat_xwzau",
    "abs_err_x",
    "abs_err_xwz",
    "abs_err_xwzau",
    "tr_c",
    "tr_b",
    "tr_cw",
    "tr_bw",
    "tr_cwtw",
    "tr_bwtw",
    "bias_term",
    "cond_i_value",
    "cond_ii_value",
    "cond_ii_value_s",
    "condition",
    "condition_s",
    "predicted_sign",
    "predicted_sign_s",
    "delta_attn",
    "delta_unif",
    "delta_attn_s",
    "delta_unif_s",
    "rel_change_s",
    "rhohat_trend",
    "rhohat_trend_s",
    "expectation_positive",
    "head_update_norm",
)

PER_LAYER_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "n_sequences",
    "layer",
    "context_length",
    "n_tokens",
    "rho_before",
    "rho_after",
    "rhohat_x",
    "beta",
    "s_l",
    "kappa",
    "tr_c",
    "tr_b",
    "full_update_norm",
    "head_update_norm",
    "post_norm_fit_rel_err",
    "head_sum_rel_err",
    "output_bias_norm",
    "probs_upper_max",
    "probs_row_sum_max_err",
)

#: The coefficients of eq. (2)'s ``a(beta) = a2 beta^2 + a1 beta + a0`` and
#: ``d0(beta) = d2 beta^2 + d1 beta + d0c`` on one sequence (``rho_hat = a / d0`` at
#: ``lambda = 0`` from their means over sequences; :mod:`sinkscope.oversmoothing.approximation`).
SEQUENCE_TERMS: tuple[str, ...] = (
    "a_beta2",
    "a_beta1",
    "a_beta0",
    "d0_beta2",
    "d0_beta1",
    "d0_beta0",
)

#: The key of a per-head, per-sequence table's rows (``approximation_by_sequence``,
#: ``heads_by_sequence``).
HEAD_SEQUENCE_KEY: tuple[str, ...] = (
    "model",
    "dataset",
    "layer",
    "head",
    "context_length",
    "sequence",
)

#: Columns of ``approximation_by_sequence``: one row per head, ``T'`` and sequence, so that the
#: error ``|rho - rho_hat|`` of ``X + W Z`` and the head-averaged curves can be resampled over
#: sequences
#: (``rho_xwz``: that sequence's average cosine; ``sum_xz, sum_zz``: its ``sum <x_i, z_i>`` and
#: ``sum ||z_i||^2``, whose ratio over sequences is the layer's ``beta``).
BY_SEQUENCE_COLUMNS: tuple[str, ...] = (
    *HEAD_SEQUENCE_KEY,
    "rho_xwz",
    *SEQUENCE_TERMS,
    "sum_xz",
    "sum_zz",
)

#: Columns of ``layers_by_sequence``: one row per layer, ``T'`` and sequence, that sequence's
#: average cosine of the layer's tokens before (``rho_before``: ``X``) and after the attention
#: update (``rho_after``); the per-layer table's ``rho_before`` / ``rho_after`` are their means
#: over sequences (Fig. 4), which the claims resample.
LAYERS_BY_SEQUENCE_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "layer",
    "context_length",
    "sequence",
    "rho_before",
    "rho_after",
)

#: Columns of ``heads_by_sequence``: one row per head and sequence at the largest ``T'``, that
#: sequence's average cosines of Fig. 2 right (``rho_x``: ``X``; the ``_s`` columns: ``X`` plus
#: the head's update rescaled by the layer's ``s_l``, eq. (11), without attention, with the
#: learned and with uniform attention) and the head's uniformity on it. ``per_head``'s values
#: at that ``T'`` are their means over sequences; the claims on §5's head means resample them.
HEADS_BY_SEQUENCE_COLUMNS: tuple[str, ...] = (
    *HEAD_SEQUENCE_KEY,
    "rho_x",
    "rho_xwz_s",
    "rho_xwza_s",
    "rho_xwzau_s",
    "uniformity",
)
