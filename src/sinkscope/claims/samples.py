"""What sample decides each claim (issue 34, power): the sampling unit its interval or reading
rests on and the config keys that set how many of them a run has.

:func:`sample_lines` states them with the values of the run's config, so ``claims.md`` says, per
claim, on how much data this run decided it (the short run's ``config.yaml`` and the full
offline scale differ exactly in these keys). An inconclusive row says, besides, about how many
more units would decide it (:func:`sinkscope.claims.intervals.needed_units`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from sinkscope.dynamics.grids import POLARIZATION_SEEDS

__all__ = ["SAMPLES", "Sample", "config_value", "sample_lines"]


class Sample(NamedTuple):
    """The sampling unit of a claim and the config keys that set its count."""

    unit: str
    keys: tuple[str, ...] = ()


_SEQUENCES = ("extraction.n_sequences",)
#: a bootstrap over fewer units than this decides nothing (sinkscope.claims.verdicts.Interval)
_MIN_UNITS = "claims.intervals.min_units"
_HEAD_SHARES = Sample(
    "the extraction's sequences per pair (bootstrap over them; a pooled row resamples each "
    "dataset's own, so its floor is per dataset)",
    (*_SEQUENCES, _MIN_UNITS),
)
_HEAD_DIFFERENCES = Sample(
    "the extraction's sequences per pair: a bootstrap over them of the mean over the model's "
    "heads, each head's value the mean over the drawn sequences, at the largest T' (a pooled row "
    "resamples each dataset's own, so its floor is per dataset)",
    (*_SEQUENCES, "oversmoothing.context_lengths", _MIN_UNITS),
)
_PREDICTIONS = Sample(
    "the non-sink heads of the model (Wilson / Newcombe intervals over heads), at the largest T'",
    ("oversmoothing.context_lengths",),
)
_POLARIZATION = Sample(
    "gradient-flow runs per variant, one per seed (Wilson interval over them; the untied runs "
    f"have the {len(POLARIZATION_SEEDS)} seeds of dynamics.grids.POLARIZATION_SEEDS, of which "
    "a unanimous share excludes 0.5)",
    ("dynamics.value_softmax.select",),
)
_INDUCTION = Sample(
    "induction runs per setup (one per seed) and their layer-2 heads",
    ("dynamics.induction.select", "dynamics.induction.overrides"),
)
_BACKCOPY = Sample(
    "backcopy runs per pattern over T and seeds", ("costs.backcopy.T", "costs.backcopy.seeds")
)
_COPYPASTE = Sample(
    "copy-paste runs per pattern over dormant tokens and delta",
    ("costs.copypaste.n_dormant", "costs.copypaste.delta"),
)

#: Claim id -> its :class:`Sample` (every claim of :data:`sinkscope.claims.registry.CLAIMS`).
SAMPLES: dict[str, Sample] = {
    "heads.sinks_common": _HEAD_SHARES,
    "heads.diagonals_exist_rarer": _HEAD_SHARES,
    "heads.diagonal_fraction": _HEAD_SHARES,
    "heads.sink_prev_fraction": _HEAD_SHARES,
    "geometry.bos_cosine_below_zero": Sample(
        "the extraction's sequences (the largest cosine over them, per middle layer: a "
        "universal claim, refuted by one cosine at the bound; without one, fewer than about "
        "3 / N of all sequences could hold one, the exact bound the row states)",
        _SEQUENCES,
    ),
    "geometry.sink_representable": Sample(
        "points of the long-context sequences (more than d_model for the test to be able to "
        "fail, about 2.5 x d_model so that random points fail it: Wendel's probability and a "
        "Gaussian null of the same size decide whether chance would pass too; a solve left "
        "undecided by its time budget makes it inconclusive)",
        (
            "geometry.long_context.n_sequences",
            "geometry.long_context.seq_len",
            "geometry.long_context.points_per_dim",
            "geometry.long_context.solve_seconds",
        ),
    ),
    "geometry.value_rank_full": Sample(
        "the extraction's sequences per pair: a bootstrap over them of the lowest middle-layer "
        "median of the value ranks per (layer, kv head, sequence) (a pooled row resamples each "
        "dataset's own, so its floor is per dataset)",
        (*_SEQUENCES, _MIN_UNITS),
    ),
    "geometry.sink_bos_value_small": Sample(
        "the model's heads pooled over datasets (bootstrap over heads); fixed by the model",
    ),
    "oversmoothing.approximation_every_head": Sample(
        "the extraction's sequences per pair: a bootstrap over them of the largest error over "
        "every head, each resample recomputing rho and rho_hat from its sequences (a pooled "
        "row resamples each dataset's own, so its floor is per dataset), at the largest T'",
        (*_SEQUENCES, "oversmoothing.context_lengths", _MIN_UNITS),
    ),
    "oversmoothing.approximation_most_heads": Sample(
        "the model's heads (Wilson interval over the heads, each counted once when datasets "
        "are pooled), at the largest T'; fixed by the model",
        ("oversmoothing.context_lengths",),
    ),
    "oversmoothing.approximation_mean": Sample(
        "the extraction's sequences per pair: a bootstrap over them of the head-averaged curves' "
        "largest gap over their range across T', each resample recomputing every head's rho and "
        "rho_hat at every T' (a pooled row resamples each dataset's own, so its floor is per "
        "dataset)",
        (*_SEQUENCES, "oversmoothing.context_lengths", _MIN_UNITS),
    ),
    "oversmoothing.w_decreases": _HEAD_DIFFERENCES,
    "oversmoothing.attention_raises": _HEAD_DIFFERENCES,
    "oversmoothing.dense_heads_raise_more": _HEAD_DIFFERENCES,
    "oversmoothing.uniform_raises_more": _HEAD_DIFFERENCES,
    "oversmoothing.condition_i_half": _PREDICTIONS,
    "oversmoothing.condition_ii_few": _PREDICTIONS,
    "oversmoothing.predicted_signs": _PREDICTIONS,
    "oversmoothing.similarity_positive": Sample(
        "the extraction's sequences per pair: a bootstrap over them of the smallest layer rho "
        "over layers and T' (a pooled row resamples each dataset's own, so its floor is per "
        "dataset)",
        (*_SEQUENCES, "oversmoothing.context_lengths", _MIN_UNITS),
    ),
    "costs.backcopy_slopes": _BACKCOPY,
    "costs.backcopy_sink_cheaper": _BACKCOPY,
    "costs.copypaste_trends": _COPYPASTE,
    "costs.theorem_d1_bounds": _COPYPASTE,
    "streaming.eviction_hurts": Sample(
        "scored positions of the streams (moving-block bootstrap)",
        (
            "streaming.params.n_streams",
            "streaming.params.stream_length",
            "claims.intervals.block_tokens",
            _MIN_UNITS,
        ),
    ),
    "streaming.first_token_sink": Sample(
        "the extraction's sequences of a corpus, the same with and without BOS (a paired "
        "bootstrap over them of the no-BOS / BOS sink-share ratio)",
        (*_SEQUENCES, _MIN_UNITS),
    ),
    "streaming.sinks_restore": Sample(
        "re-computed queries per window (bootstrap over them)",
        ("streaming.params.recompute_samples", "streaming.params.n_streams", _MIN_UNITS),
    ),
    "dynamics.logistic_polarizes": _POLARIZATION,
    "dynamics.square_no_polarization": _POLARIZATION,
    "dynamics.unnormalized_no_polarization": _POLARIZATION,
    "dynamics.softmax_sinks_emerge": _INDUCTION,
    "dynamics.other_switch_replaces_sink": _INDUCTION,
    "dynamics.flip_rate_decreases": Sample(
        "attacked sequences per run (Newcombe) and training seeds (bootstrap over seeds)",
        ("dynamics.classification.select",),
    ),
}


def config_value(config: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` in a validated ``config``; ``streaming.params.*`` over
    :data:`sinkscope.defaults.STREAMING_PARAMS`; ``"default"`` for a key the config leaves to
    its code's defaults (an empty ``select``, for example)."""
    from sinkscope.config import streaming_params

    if key.startswith("streaming.params."):
        return streaming_params(config).get(key.removeprefix("streaming.params."), "default")
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return "default"
        node = node[part]
    return node if node not in ({}, None) else "default"


def sample_lines(config: Mapping[str, Any], claim_ids: list[str]) -> list[str]:
    """One Markdown bullet per claim: its sampling unit and the run's values of the keys that
    set its count."""
    lines = []
    for claim_id in claim_ids:
        sample = SAMPLES[claim_id]
        values = ", ".join(f"`{key}` = {config_value(config, key)}" for key in sample.keys)
        lines.append(f"- `{claim_id}`: {sample.unit}" + (f"; this run: {values}" if values else ""))
    return lines
