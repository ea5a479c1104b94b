"""Which models StreamingLLM's cache policies apply to, known when the workflow is parsed.

The policies keep the first tokens next to a window and give them positions *within the cache*
(:mod:`sinkscope.streaming.cache`): a rotation of the query, which exists only where positions
are rotary (RoPE). A model with learned absolute position embeddings (GPT-2: added to the
inputs, so every layer's keys carry their stream positions) cannot be re-positioned without
re-running it, and the StreamingLLM paper evaluates RoPE and ALiBi models only. Its pairs keep
the first-position mass (read from the activation file), and the claims read on the cache
policies are *not applicable* to it, with :func:`cache_policies_problem` as the reason.

torch-free: read by the workflow's target list and the claims rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sinkscope.prepare.model_config import config_json, has_rotary_positions

__all__ = [
    "ABSOLUTE_POSITIONS",
    "absolute_positions_reason",
    "cache_pairs",
    "cache_policies_problem",
    "not_applicable_models",
]


def cache_policies_problem(
    config: Mapping[str, Any], model: str, results: str | Path = "results"
) -> str | None:
    """Why StreamingLLM's cache policies do not apply to ``models.<model>``, or ``None`` when
    they do or when its config is not at hand yet (a hub model neither prepared nor kept in
    ``prepare/model_configs``: scheduled, and refused by the evaluator with the same reason)."""
    found = config_json(config, model, results)
    if found is None or has_rotary_positions(found[0]):
        return None
    return absolute_positions_reason(model)


#: What a model without rotary positions lacks for the cache policies (the claims table's reason
#: and the evaluator's refusal).
ABSOLUTE_POSITIONS = (
    "learned absolute position embeddings (no rotary positions): StreamingLLM's caches give the "
    "kept first tokens positions within the cache, a rotation that only RoPE models allow"
)


def absolute_positions_reason(model: str) -> str:
    """:data:`ABSOLUTE_POSITIONS`, said of ``models.<model>``."""
    return f"models.{model} has {ABSOLUTE_POSITIONS}"


def cache_pairs(
    config: Mapping[str, Any], pairs: Sequence[tuple[str, str]], results: str | Path = "results"
) -> list[tuple[str, str]]:
    """The ``(model, dataset)`` pairs among ``pairs`` whose model the cache policies apply to."""
    return [(m, d) for m, d in pairs if cache_policies_problem(config, m, results) is None]


def not_applicable_models(
    config: Mapping[str, Any], results: str | Path = "results"
) -> dict[str, str]:
    """``{model: reason}`` of the configured models the cache policies do not apply to."""
    found = {m: cache_policies_problem(config, m, results) for m in config["models"]}
    return {m: reason for m, reason in found.items() if reason is not None}
