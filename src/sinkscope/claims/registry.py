"""The claims table: every claim of the three studies checked against what the pipeline measured.

One :class:`Claim` per statement of the papers (``/work/shared/papers``: *Sink vs. diagonal
patterns* (§3-§7, App. C-E), the value-softmax polarization abstracts and figure captions, and the
StreamingLLM notes). Each claim names the section / figure / number where the paper makes it, the
paper's value, the summary tables it reads, and a small, named, typed ``check_*`` function that
takes those tables and the claim's tolerances (config section ``claims``; defaults in
:data:`~sinkscope.claims.tolerances.DEFAULT_TOLERANCES`, documented per key in
``workflow/schemas/config.schema.yaml``) and returns one row per model (x dataset, or per setting
for the synthetic experiments) with

* ``measured`` (a short human-readable statement) and ``value`` (the number the test compares),
* ``test`` (the comparison, tolerance included),
* ``verdict`` in :data:`~sinkscope.claims.verdicts.VERDICTS` and a ``reason``.

Verdicts: ``reproduced`` / ``not reproduced`` when the measured number passes / fails the test;
``not applicable`` when the claim cannot be tested here -- the analysis did not run in this config
(its summary table is not an input: :data:`~sinkscope.claims.verdicts.NOT_RUN`), or the model has
nothing the claim speaks about (e.g. no sink heads), with the reason spelled out. Tolerances come
from the paper's own numbers where it states them (0.1 in Fig. 7, 40 % / 60 % thresholds,
13-21 %, slopes 1 and 3/2); where the paper only uses words ("most", "few", "roughly half",
"sharply") the tolerance is a fixed reading of that word, chosen once and documented, never tuned
to turn a verdict.

Inputs are the summary tables of the analyses, keyed as in :data:`TABLE_ANALYSIS` (the rule reads
the parquet files that :meth:`sinkscope.paths.Paths.claims_inputs` lists for this config).
:func:`evaluate_claims` runs every claim; :func:`~sinkscope.claims.render.write_claims` writes
``claims.md`` (not-reproduced claims first), ``claims.parquet`` / ``.csv`` and ``claims.rst``
(included at the top of the Snakemake report's main page). What the figures show about the models
but no claim states (sink-head profile over depth, BOS-norm jump, sign of the BOS cosines, lowest
value ranks) is computed by :mod:`sinkscope.claims.observations` and rendered after the claims in
``claims.md`` ("Observations (shown by the figures; not claims of the paper)"), with its own table
``summary/observations.parquet``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from sinkscope.claims.checks.costs import (
    check_backcopy_sink_cheaper,
    check_backcopy_slopes,
    check_copypaste_trends,
    check_theorem_d1_bounds,
)
from sinkscope.claims.checks.dynamics import (
    check_flip_rate_decreases,
    check_logistic_polarizes,
    check_other_switch_replaces_sink,
    check_softmax_sinks_emerge,
    check_square_does_not_polarize,
    check_unnormalized_do_not_polarize,
)
from sinkscope.claims.checks.geometry import (
    check_bos_cosine_middle_layers,
    check_sink_bos_value_norm,
    check_sink_representable,
    check_value_rank_middle_layers,
)
from sinkscope.claims.checks.heads import (
    check_diagonal_fraction_in_paper_range,
    check_diagonal_heads_rarer,
    check_sink_heads_common,
    check_sink_prev_fraction_in_paper_range,
)
from sinkscope.claims.checks.no_bos import check_first_token_becomes_sink
from sinkscope.claims.checks.oversmoothing import (
    check_approximation_every_head,
    check_approximation_most_heads,
    check_mean_approximation,
    check_similarity_stays_positive,
)
from sinkscope.claims.checks.oversmoothing_conditions import (
    check_attention_raises_similarity,
    check_condition_i_about_half,
    check_condition_ii_few,
    check_dense_heads_raise_more,
    check_predicted_signs,
    check_uniform_raises_more,
    check_w_decreases_similarity,
)
from sinkscope.claims.checks.streaming import (
    check_eviction_raises_perplexity,
    check_sink_tokens_restore,
)
from sinkscope.claims.events import events_by_pair
from sinkscope.claims.names import INPUTS
from sinkscope.claims.tolerances import resolve_tolerances
from sinkscope.claims.verdicts import COLUMNS, NOT_RUN, SYNTHETIC, Row, Tables, row
from sinkscope.config_schema import schema_default
from sinkscope.variants import NO_BOS_SUFFIX

__all__ = [
    "CLAIMS",
    "PER_MODEL_ANALYSES",
    "TABLE_ANALYSIS",
    "Claim",
    "evaluate_claims",
    "with_bos_only",
]

#: Summary table key -> the analysis that writes it (the ``model`` axis of a missing table's
#: rows: per-model analyses get one not-applicable row per model, synthetic ones a single row);
#: the tables are listed in :data:`sinkscope.claims.names.INPUTS`.
TABLE_ANALYSIS: dict[str, str] = {key: table.analysis for key, table in INPUTS.items()}
PER_MODEL_ANALYSES = ("heads", "geometry", "oversmoothing", "streaming")


@dataclass(frozen=True)
class Claim:
    """One claim of the papers and its check (``check(tables, tolerances) -> rows``). ``claim``
    may name the head-class thresholds as ``{sink}``, ``{diagonal}``, ``{sink_prev_joint}`` and
    ``{sink_prev_min_part}`` (format specs allowed): :func:`evaluate_claims` fills in the run's
    (:func:`claim_sentence`), so the sentence states the thresholds the run used."""

    id: str
    claim: str
    source: str
    paper_value: str
    inputs: tuple[str, ...]
    check: Callable[[Tables, Mapping[str, Any]], list[Row]]
    #: Whether the check reads the no-BOS pairs (:mod:`sinkscope.variants`); every other check
    #: gets its tables without them (:func:`with_bos_only`): the papers' claims are about BOS.
    reads_no_bos: bool = False


def with_bos_only(tables: Mapping[str, pl.DataFrame | None]) -> dict[str, pl.DataFrame | None]:
    """``tables`` without the rows of no-BOS pairs (a ``dataset`` ending in ``.no-bos``)."""
    return {
        key: (
            table.filter(~pl.col("dataset").cast(pl.String).str.ends_with(NO_BOS_SUFFIX))
            if table is not None and "dataset" in table.columns
            else table
        )
        for key, table in tables.items()
    }


#: Input of the value-softmax polarization claims (the runs summarized per variant).
_BY_VARIANT = "dynamics_value_softmax_by_variant"


def _polarization(
    check: Callable[[pl.DataFrame, float, float], list[Row]],
) -> Callable[[Tables, Mapping[str, Any]], list[Row]]:
    """The check of a polarization claim (value-softmax paper, Theorem 3.3, Fig. 13): ``check``
    on the :data:`_BY_VARIANT` table with the tolerance ``dynamics.majority`` and the level of
    ``claims.intervals``."""
    return lambda tb, t: check(
        tb[_BY_VARIANT], t["dynamics"]["majority"], float(t["intervals"]["level"])
    )


def _head_share_intervals(tables: Tables, tolerances: Mapping[str, Any]) -> pl.DataFrame | None:
    """The head shares' intervals over sequences (:func:`sinkscope.heads.summary.share_intervals`)
    from the per-sequence masses, with the run's head-class thresholds (``tolerances
    ["head_classes"]``, put there by :func:`evaluate_claims`) and ``claims.intervals``; None
    without the masses (the shares are then decided as they stand)."""
    return _from_masses("share_intervals", tables, tolerances)


def _sink_ratio_intervals(tables: Tables, tolerances: Mapping[str, Any]) -> pl.DataFrame | None:
    """The paired intervals over sequences of the no-BOS / BOS sink-share ratio
    (:func:`sinkscope.heads.summary.sink_ratio_intervals`), made as :func:`_head_share_intervals`
    makes the shares' ones; None without the per-sequence masses."""
    return _from_masses("sink_ratio_intervals", tables, tolerances)


def _from_masses(
    function: str, tables: Tables, tolerances: Mapping[str, Any]
) -> pl.DataFrame | None:
    """``sinkscope.heads.summary.<function>`` of the per-sequence masses with the run's
    head-class thresholds and ``claims.intervals`` (imported when a check runs: it loads numpy)."""
    from sinkscope.heads import summary
    from sinkscope.heads.classify import HeadClassThresholds

    masses = tables.get("head_masses_by_sequence")
    if masses is None:
        return None
    thresholds = HeadClassThresholds(**tolerances["head_classes"])
    return getattr(summary, function)(masses, thresholds, tolerances["intervals"])


CLAIMS: tuple[Claim, ...] = (
    # ---------------------------------------------------------------- §3 / §7 / Remark C.4: heads
    Claim(
        "heads.sinks_common",
        "Sink heads (>= {sink:.0%} of the attention mass on BOS) are common and more prevalent than diagonal heads.",
        "Sink vs. diagonal, §1, §4 ('many heads per block'), §7 summary",
        "no single number; 'prevalent' vs 0.6-9.5% diagonal heads",
        ("head_classes",),
        lambda tb, t: check_sink_heads_common(
            tb["head_classes"], t["heads"]["sink_min_fraction"], _head_share_intervals(tb, t)
        ),
    ),
    Claim(
        "heads.diagonals_exist_rarer",
        "Diagonal heads (>= {diagonal:.0%} of the mass on the main diagonal) exist but are rarer than sink heads.",
        "Sink vs. diagonal, §7 ('diagonal attention is common'), §8 (v)",
        "6% / 0.6% / 9.5% (gpt2-medium / Llama 3.1-8B / Gemma 7B)",
        ("head_classes",),
        lambda tb, t: check_diagonal_heads_rarer(tb["head_classes"], _head_share_intervals(tb, t)),
    ),
    Claim(
        "heads.diagonal_fraction",
        "The share of diagonal heads lies in the range the paper reports across its models.",
        "Sink vs. diagonal, §7, first paragraph",
        "6% / 0.6% / 9.5% (gpt2-medium / Llama 3.1-8B / Gemma 7B)",
        ("head_classes",),
        lambda tb, t: check_diagonal_fraction_in_paper_range(
            tb["head_classes"], t["heads"]["diagonal_fraction_range"], _head_share_intervals(tb, t)
        ),
    ),
    Claim(
        "heads.sink_prev_fraction",
        "Sink + previous-token heads (>= {sink_prev_joint:.0%} joint mass, >= {sink_prev_min_part:.0%} each) make up 13-21% of the heads.",
        "Sink vs. diagonal, Remark C.4 (App. C)",
        "16% / 13% / 21% (gpt2 / Llama 3.1-8B / Gemma 7B)",
        ("head_classes",),
        lambda tb, t: check_sink_prev_fraction_in_paper_range(
            tb["head_classes"], t["heads"]["sink_prev_fraction_range"], _head_share_intervals(tb, t)
        ),
    ),
    # ---------------------------------------------------------------- §4 / §6 / E.2: geometry
    Claim(
        "geometry.bos_cosine_below_zero",
        "In the middle layers the maximum cosine between BOS and every other token at the attention input stays below 0.",
        "Sink vs. diagonal, §4, Fig. 1",
        "max cosine < 0 in all middle layers (gpt2-small, Llama 3.1-8B, Gemma 7B)",
        ("geometry_bos_alignment",),
        lambda tb, t: check_bos_cosine_middle_layers(
            tb["geometry_bos_alignment"],
            t["geometry"]["bos_cosine_max"],
            float(t["intervals"]["level"]),
        ),
    ),
    Claim(
        "geometry.sink_representable",
        "Sinks are representable: the tokens attending to BOS satisfy Proposition 4.1's half-space condition (tested on T' > d_model tokens, where it can fail).",
        "Sink vs. diagonal, §4, Proposition 4.1, Fig. 1",
        "holds in all middle layers ('allowing each attention head to produce any sink pattern')",
        ("geometry_statements",),
        lambda tb, t: check_sink_representable(
            tb["geometry_statements"],
            t["geometry"]["representable_min_fraction"],
            float(t["intervals"]["level"]),
            t["geometry"]["null_probability_max"],
        ),
    ),
    Claim(
        "geometry.value_rank_full",
        "Value matrices have (near) full relative rank in the middle layers.",
        "Sink vs. diagonal, §6 (Prop. 6.1's condition), App. E.2, Fig. 12",
        "'very high ranks in the middle layers' (tolerance 1e-3)",
        ("geometry_value_rank",),
        lambda tb, t: check_value_rank_middle_layers(
            tb["geometry_value_rank"],
            t["geometry"]["near_full_rank"],
            tb.get("geometry_value_rank_by_sequence"),
            t["intervals"],
        ),
    ),
    Claim(
        "geometry.sink_bos_value_small",
        "The more a head sinks, the smaller its BOS value-output vector (the hard switch assumes W_VO x_0 = 0 where a head sinks).",
        "Sink vs. diagonal, §6 (assumption from [13], Fig. 1(b) there)",
        "W_VO x_0 = 0 (assumed; supported empirically in [13])",
        ("geometry_bos_value_norm_classes",),
        lambda tb, t: check_sink_bos_value_norm(
            tb["geometry_bos_value_norm_classes"],
            t["geometry"]["bos_value_ratio_max"],
        ),
    ),
    # ---------------------------------------------------------------- §5 / E.1: oversmoothing
    Claim(
        "oversmoothing.approximation_every_head",
        "The approximation (2) of Theorem 5.1 is within 0.1 of the empirical average cosine for every head (X+WZ; for X it is an identity here, a sanity check).",
        "Sink vs. diagonal, §5, App. E.1, Fig. 7",
        "|error| < 0.1 for every head shown (T' = 512)",
        ("oversmoothing_per_head",),
        lambda tb, t: check_approximation_every_head(
            tb["oversmoothing_per_head"],
            t["oversmoothing"]["approximation_error"],
            events_by_pair(tb),
            tb.get("oversmoothing_approximation_by_sequence"),
            t["intervals"],
        ),
    ),
    Claim(
        "oversmoothing.approximation_most_heads",
        "The approximation (2) stays accurate for most individual heads.",
        "Sink vs. diagonal, §5 ('for most individual attention heads'), Fig. 7",
        "most heads within 0.1",
        ("oversmoothing_per_head",),
        lambda tb, t: check_approximation_most_heads(
            tb["oversmoothing_per_head"],
            t["oversmoothing"]["approximation_error"],
            t["oversmoothing"]["most"],
            float(t["intervals"]["level"]),
            tb.get("oversmoothing_approximation_by_sequence"),
            t["intervals"],
        ),
    ),
    Claim(
        "oversmoothing.approximation_mean",
        "Averaged over heads, the approximation (2) agrees with the empirical average cosine for X+WZ (head update not rescaled) across context lengths (for X it is an identity here, a sanity check).",
        "Sink vs. diagonal, §5, Fig. 2 left, Fig. 5",
        "'excellent agreement' (curves overlap)",
        ("oversmoothing_summary",),
        lambda tb, t: check_mean_approximation(
            tb["oversmoothing_summary"],
            t["oversmoothing"]["approximation_relative_offset"],
            tb.get("oversmoothing_approximation_by_sequence"),
            t["intervals"],
        ),
    ),
    Claim(
        "oversmoothing.w_decreases",
        "Applying W (value-output with the norm gain; head update rescaled by s_l, eq. 11, as in Fig. 2 right) decreases the average cosine similarity.",
        "Sink vs. diagonal, §5, Fig. 2 right, Fig. 6, App. E.1 eq. (11)",
        "rho(X+WZ) < rho(X) on average (rescaled head update)",
        ("oversmoothing_summary",),
        lambda tb, t: check_w_decreases_similarity(
            tb["oversmoothing_summary"],
            t["oversmoothing"]["min_difference"],
            tb.get("oversmoothing_heads_by_sequence"),
            t["intervals"],
        ),
    ),
    Claim(
        "oversmoothing.attention_raises",
        "Attention raises the average cosine similarity on average (rho(X+WZA^T) > rho(X)).",
        "Sink vs. diagonal, §5, Fig. 2 right, Fig. 6",
        "'slightly stronger than W': rho(X+WZA^T) > rho(X)",
        ("oversmoothing_summary",),
        lambda tb, t: check_attention_raises_similarity(
            tb["oversmoothing_summary"],
            t["oversmoothing"]["min_difference"],
            tb.get("oversmoothing_heads_by_sequence"),
            t["intervals"],
        ),
    ),
    Claim(
        "oversmoothing.dense_heads_raise_more",
        "The increase is larger for heads with uniformity above 0.6.",
        "Sink vs. diagonal, §5, Fig. 2 right (fourth plot), Fig. 6, Fig. 10",
        "bigger gap rho(X+WZA^T) - rho(X) for u > 0.6",
        ("oversmoothing_summary",),
        lambda tb, t: check_dense_heads_raise_more(
            tb["oversmoothing_summary"],
            t["oversmoothing"]["min_difference"],
            tb.get("oversmoothing_heads_by_sequence"),
            t["intervals"],
        ),
    ),
    Claim(
        "oversmoothing.uniform_raises_more",
        "Uniform attention raises the average cosine more than the learned attention.",
        "Sink vs. diagonal, §5, Fig. 2 right, Fig. 6",
        "'significant increase' for X+WZA_u^T over X+WZA^T",
        ("oversmoothing_summary",),
        lambda tb, t: check_uniform_raises_more(
            tb["oversmoothing_summary"],
            t["oversmoothing"]["min_difference"],
            tb.get("oversmoothing_heads_by_sequence"),
            t["intervals"],
        ),
    ),
    Claim(
        "oversmoothing.condition_i_half",
        "Roughly half of the (non-sink) heads of Figs. 8-9 satisfy condition (i) of Theorem 5.1 (beta tr(BW) > 0).",
        "Sink vs. diagonal, §5, Figs. 8-9",
        "'roughly half'",
        ("oversmoothing_summary",),
        lambda tb, t: check_condition_i_about_half(
            tb["oversmoothing_summary"], t["oversmoothing"]["half_band"], t["intervals"]["level"]
        ),
    ),
    Claim(
        "oversmoothing.condition_ii_few",
        "Few (non-sink) heads of Figs. 8-9 satisfy condition (ii) of Theorem 5.1 (beta tr(BW) + tr(BW^T W) < 0, for the rescaled map s_l W).",
        "Sink vs. diagonal, §5, Figs. 8-9, App. E.1",
        "'few' / 'rare in all models except GPT2-XL'",
        ("oversmoothing_summary",),
        lambda tb, t: check_condition_ii_few(
            tb["oversmoothing_summary"],
            t["oversmoothing"]["few_max_fraction"],
            t["intervals"]["level"],
        ),
    ),
    Claim(
        "oversmoothing.predicted_signs",
        "The monotonicity predicted by Theorem 5.1 mostly holds for the heads it makes a prediction for.",
        "Sink vs. diagonal, §5, Figs. 8-9, App. E.1",
        "'replicates well in practice'",
        ("oversmoothing_summary",),
        lambda tb, t: check_predicted_signs(
            tb["oversmoothing_summary"], t["oversmoothing"]["most"], t["intervals"]["level"]
        ),
    ),
    Claim(
        "oversmoothing.similarity_positive",
        "Token representations keep a positive average cosine similarity across layers.",
        "Sink vs. diagonal, §5, App. E.1, Fig. 4",
        "positive in all cases",
        ("oversmoothing_summary",),
        lambda tb, t: check_similarity_stays_positive(
            tb["oversmoothing_summary"], tb.get("oversmoothing_layers_by_sequence"), t["intervals"]
        ),
    ),
    # ---------------------------------------------------------------- §7 / App. D: costs
    Claim(
        "costs.backcopy_slopes",
        "Backcopy task: on a log-log scale the sink cost grows with slope about 1 in T, the diagonal cost with about 3/2.",
        "Sink vs. diagonal, §7, Theorem 7.1, Fig. 3 left",
        "slopes about 1 (sink) and 3/2 (diagonal)",
        ("costs_backcopy_slopes",),
        lambda tb, t: check_backcopy_slopes(
            tb["costs_backcopy_slopes"], t["costs"]["slope_tolerance"]
        ),
    ),
    Claim(
        "costs.backcopy_sink_cheaper",
        "Backcopy task: large context lengths favour sinks (the sink block is cheaper).",
        "Sink vs. diagonal, §7, Theorem 7.1, Fig. 3 left",
        "sink cheaper, gap growing like T^(1/2)",
        ("costs_backcopy_runs",),
        lambda tb, t: check_backcopy_sink_cheaper(tb["costs_backcopy_runs"]),
    ),
    Claim(
        "costs.copypaste_trends",
        "Copy-paste task: the sink cost is flat in r_eff(Sigma_D)/delta^2 while the diagonal cost grows with it.",
        "Sink vs. diagonal, §7, Theorem 7.2, Fig. 3 right",
        "sink independent of r_eff/delta^2; diagonal grows log-linearly",
        ("costs_copypaste_runs",),
        lambda tb, t: check_copypaste_trends(
            tb["costs_copypaste_runs"], t["costs"]["flat_max_slope"], t["costs"]["growth_min_slope"]
        ),
    ),
    Claim(
        "costs.theorem_d1_bounds",
        "Measured copy-paste costs lie inside the lower and upper bounds of Theorem D.1.",
        "Sink vs. diagonal, App. D, Theorem D.1",
        "L <= cost <= U for both patterns",
        ("costs_copypaste_runs",),
        lambda tb, t: check_theorem_d1_bounds(tb["costs_copypaste_runs"]),
    ),
    # ---------------------------------------------------------------- StreamingLLM notes
    Claim(
        "streaming.eviction_hurts",
        "Evicting the first tokens from the KV cache (window-only attention) raises perplexity sharply.",
        "StreamingLLM notes, 'sink removal event'",
        "model breaks (perplexity explodes) once the sinks are evicted",
        ("streaming_sink_heads",),
        lambda tb, t: check_eviction_raises_perplexity(
            tb["streaming_sink_heads"], t["streaming"]["sharp_ppl_ratio"], intervals=t["intervals"]
        ),
    ),
    Claim(
        "streaming.first_token_sink",
        "Without BOS, the first token becomes the sink: the heads that sink on BOS sink on the first text token instead.",
        "StreamingLLM notes (the first tokens become sinks whatever they are); against: main study §3-§4 and Barbero et al. 2025 (BOS matters)",
        "no number; 'the first tokens' attract the sink mass whatever their content",
        ("head_classes",),
        lambda tb, t: check_first_token_becomes_sink(
            tb["head_classes"],
            t["streaming"]["no_bos_sink_ratio_min"],
            _sink_ratio_intervals(tb, t),
        ),
        reads_no_bos=True,
    ),
    Claim(
        "streaming.sinks_restore",
        "Keeping a few first (sink) tokens next to the window restores the perplexity.",
        "StreamingLLM notes, 'StreamingLLM's insight' (sinks {0..k-1} + window)",
        "the model back in its training distribution with a few sink tokens (k = 4 in "
        "StreamingLLM), i.e. as good as sliding window with re-computation",
        ("streaming_recompute",),
        lambda tb, t: check_sink_tokens_restore(
            tb["streaming_recompute"],
            t["streaming"]["max_sink_tokens"],
            t["streaming"]["min_recovered_fraction"],
            intervals=t["intervals"],
        ),
    ),
    # ---------------------------------------------------------------- value-softmax paper
    Claim(
        "dynamics.logistic_polarizes",
        "Gradient flow on L(V softmax(a)) with the logistic loss drives softmax(a) to a one-hot vector.",
        "Value-softmax paper, Theorem 3.3, Fig. 2",
        "attention converges to one-hot",
        (_BY_VARIANT,),
        _polarization(check_logistic_polarizes),
    ),
    Claim(
        "dynamics.square_no_polarization",
        "With the square loss softmax(a) does not polarize.",
        "Value-softmax paper, Fig. 13 caption (the abstract claims universality incl. square loss)",
        "'square loss does not give rise to sparse solutions'",
        (_BY_VARIANT,),
        _polarization(check_square_does_not_polarize),
    ),
    Claim(
        "dynamics.unnormalized_no_polarization",
        "Without normalisation (sum, sigmoid) the logistic loss does not polarize the attention either.",
        "Value-softmax paper, Fig. 13 caption",
        "'sum and sigmoid do not converge to sparse solutions'",
        (_BY_VARIANT,),
        _polarization(check_unnormalized_do_not_polarize),
    ),
    Claim(
        "dynamics.softmax_sinks_emerge",
        "In the induction task sinks emerge with softmax attention and not with the non-normalised alternatives.",
        "Value-softmax paper, Fig. 1, Fig. 4, Table 1; trigger-conditional abstract",
        "sink clearly emerges for softmax but not for sigmoid / linear without normalisation",
        ("dynamics_induction_by_setup",),
        lambda tb, t: check_softmax_sinks_emerge(
            tb["dynamics_induction_by_setup"],
            t["dynamics"]["softmax_min_sink_proportion"],
            t["dynamics"]["unnormalized_max_sink_proportion"],
        ),
    ),
    Claim(
        "dynamics.other_switch_replaces_sink",
        "When a softmax head has another way to switch off, the BOS sink share falls while the task is still solved.",
        "Main study §6, Prop. 6.1 (the sink is the head's attention switch): its prediction that another switch replaces the sink",
        "not stated by the papers: derived from the thesis (gpt-oss sinks, gated attention, "
        "softpick and a key/value bias as the other switches)",
        ("dynamics_induction_by_setup",),
        lambda tb, t: check_other_switch_replaces_sink(
            tb["dynamics_induction_by_setup"],
            t["dynamics"]["switch_min_sink_share_drop"],
            t["dynamics"]["switch_min_bos_share_drop"],
            t["dynamics"]["switch_max_accuracy_drop"],
        ),
    ),
    Claim(
        "dynamics.flip_rate_decreases",
        "More heads or layers make the classifier harder to flip with one adversarial token.",
        "Value-softmax paper, Fig. 21 caption",
        "'increasing the number of heads or layers leads to the diminishing flip rate'",
        ("dynamics_classification_final",),
        lambda tb, t: check_flip_rate_decreases(
            tb["dynamics_classification_final"],
            t["dynamics"]["min_difference"],
            t["intervals"]["level"],
            t["intervals"],
        ),
    ),
)


def claim_sentence(claim: Claim, head_classes: Mapping[str, float] | None = None) -> str:
    """``claim.claim`` with the head-class thresholds filled in: ``head_classes`` (the config's
    section) over the schema's defaults."""
    from sinkscope.config_schema import schema_default

    return claim.claim.format(**{**schema_default("head_classes"), **(head_classes or {})})


def _not_run_rows(claim: Claim, missing: Sequence[str], models: Sequence[str]) -> list[Row]:
    analyses = sorted({TABLE_ANALYSIS.get(key, key) for key in missing})
    per_model = all(a in PER_MODEL_ANALYSES for a in analyses)
    reason = f"{NOT_RUN} (no {', '.join(analyses)} summary table: {', '.join(missing)})"
    return [
        row(model, "-", "-", "-", None, "-", None, reason)
        for model in (list(models) if per_model and models else [SYNTHETIC])
    ]


def _no_rows_row(claim: Claim) -> Row:
    """The one row of a claim whose check found nothing to read in tables that exist (e.g. no
    sink count within ``max_sink_tokens``, no sink or diagonal back-copy runs): the claim stays
    in the table as not applicable instead of vanishing from it."""
    inputs = ", ".join(claim.inputs)
    return row(
        "-",
        "-",
        "-",
        "-",
        None,
        "-",
        None,
        f"the input tables ({inputs}) hold no rows this claim can be read on",
    )


def _with_not_applicable(found: list[Row], models: Mapping[str, str]) -> list[Row]:
    """``found`` without the rows of the models in ``models`` (``{model: reason}``), and one
    not-applicable row per such model in their place, after the others."""
    kept = [r for r in found if r["model"] not in models]
    return kept + [row(m, "-", "-", "-", None, "-", None, reason) for m, reason in models.items()]


def evaluate_claims(
    tables: Mapping[str, pl.DataFrame | None],
    tolerances: Mapping[str, Mapping[str, Any]] | None = None,
    models: Sequence[str] = (),
    claims: Sequence[Claim] = CLAIMS,
    not_applicable: Mapping[str, Mapping[str, str]] | None = None,
    head_classes: Mapping[str, float] | None = None,
) -> pl.DataFrame:
    """Run every claim's check on the summary ``tables`` (keys as in :data:`TABLE_ANALYSIS`).

    A claim whose input tables are absent (or ``None``) gets ``not applicable`` rows with reason
    :data:`~sinkscope.claims.verdicts.NOT_RUN` -- one per model in ``models`` for the per-model analyses; a claim whose check
    finds no rows to read in tables that exist gets one ``not applicable`` row that says so.
    ``not_applicable``: ``{claim_id: {model: reason}}`` (:func:`sinkscope.claims.applicability.not_applicable_claims`),
    the models a claim does not apply to: one ``not applicable`` row each, with its reason, in place of
    whatever the check read for them. ``tolerances``:
    the config's ``claims`` section (merged over :data:`~sinkscope.claims.tolerances.DEFAULT_TOLERANCES`). Returns the table
    with :data:`~sinkscope.claims.verdicts.COLUMNS`, in registry order. ``head_classes``: the
    config's head-class thresholds, stated in the claims' sentences (:func:`claim_sentence`).
    """
    unknown = sorted(set(tables) - set(TABLE_ANALYSIS))
    if unknown:
        raise KeyError(f"claims: unknown input table(s) {unknown}; known: {sorted(TABLE_ANALYSIS)}")
    tol = resolve_tolerances(tolerances)
    # the head-class thresholds the run classified with, for the bootstrap of the head shares
    tol["head_classes"] = {**schema_default("head_classes"), **(head_classes or {})}
    bos_only = with_bos_only(tables)
    rows: list[Row] = []
    for claim in claims:
        given = tables if claim.reads_no_bos else bos_only
        missing = [key for key in claim.inputs if given.get(key) is None]
        found = (
            _not_run_rows(claim, missing, models)
            if missing
            else claim.check({k: v for k, v in given.items() if v is not None}, tol)
        )
        if not_applicable and claim.id in not_applicable:
            found = _with_not_applicable(found, not_applicable[claim.id])
        found = found or [_no_rows_row(claim)]
        meta = {
            "claim_id": claim.id,
            "claim": claim_sentence(claim, head_classes),
            "source": claim.source,
            "paper_value": claim.paper_value,
        }
        rows.extend({**meta, **row} for row in found)
    return pl.DataFrame(rows, schema=COLUMNS).select(list(COLUMNS))
