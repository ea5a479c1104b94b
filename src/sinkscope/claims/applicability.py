"""Claims that do not apply to a model, and why, decided from the model's own config.

* StreamingLLM's cache claims (:data:`CACHE_POLICY_CLAIMS`) need rotary positions
  (:mod:`sinkscope.streaming.applicability`): GPT-2's learned absolute positions have none, so
  its pairs are not evaluated under the caches.
* Theorem 5.1's claims (:data:`THEOREM_CLAIMS`: its approximation (2) and its conditions) assume
  attention rows that sum to 1 (the update's constant ``c = W_O b_V`` is added to every token,
  and the moments of ``Z A^T`` are those of a convex combination). A model with learned sink
  logits (gpt-oss: :func:`sinkscope.sizing.shapes.has_learned_sinks`) sends ``p_sink`` of each
  row to a value-free slot, so its rows over the tokens sum to ``1 - p_sink``: the closed form
  and its conditions are not stated for it. The empirical quantities stay: the analysis takes
  ``A V`` as the model computes it (the stored values carry the bias, so the bias enters each
  row scaled by its sum), and the claims read on them keep their rows; the comparisons with the
  row-stochastic ``I`` and ``A_u`` then include the mass a head gives its learned sink.

Decided when rule ``claims`` runs, from each model's ``config.json``
(:func:`sinkscope.sizing.shapes.config_json`: the prepared model's by then); a model whose config
is not at hand is taken to be like the paper's (rows sum to 1, rotary positions).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sinkscope.prepare.model_config import config_json, has_learned_sinks
from sinkscope.streaming.applicability import not_applicable_models as no_cache_policies

__all__ = [
    "CACHE_POLICY_CLAIMS",
    "LEARNED_SINKS_REASON",
    "THEOREM_CLAIMS",
    "not_applicable_claims",
]

#: The claims read on the StreamingLLM cache policies (not on the first-position mass).
CACHE_POLICY_CLAIMS = ("streaming.eviction_hurts", "streaming.sinks_restore")
#: The claims that rest on Theorem 5.1's closed form or its conditions (i)/(ii).
THEOREM_CLAIMS = (
    "oversmoothing.approximation_every_head",
    "oversmoothing.approximation_most_heads",
    "oversmoothing.approximation_mean",
    "oversmoothing.condition_i_half",
    "oversmoothing.condition_ii_few",
    "oversmoothing.predicted_signs",
)
#: Why :data:`THEOREM_CLAIMS` do not apply to a model with learned sink logits.
LEARNED_SINKS_REASON = (
    "learned sink logits: each attention row over the tokens sums to 1 - p_sink, and Theorem 5.1 "
    "assumes rows that sum to 1 (its closed form and conditions are not stated for this model)"
)


def not_applicable_claims(
    config: Mapping[str, Any], results: str | Path = "results"
) -> dict[str, dict[str, str]]:
    """``{claim_id: {model: reason}}`` for every configured model a claim does not apply to."""
    out: dict[str, dict[str, str]] = {}
    for model, reason in no_cache_policies(config, results).items():
        for claim_id in CACHE_POLICY_CLAIMS:
            out.setdefault(claim_id, {})[model] = reason
    for model in config["models"]:
        found = config_json(config, model, results)
        if found is not None and has_learned_sinks(found[0]):
            for claim_id in THEOREM_CLAIMS:
                out.setdefault(claim_id, {})[model] = f"models.{model}: {LEARNED_SINKS_REASON}"
    return out
