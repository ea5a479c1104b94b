"""Facts of a model's ``config.json`` that are read both with and without transformers.

Standard library only: :mod:`sinkscope.config` checks a config against a ``local`` model's
``config.json`` without importing torch or transformers, and
:func:`sinkscope.prepare.models.model_shape` reads the same attributes from the transformers
config object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["POSITION_LIMIT_ATTRIBUTES", "local_position_limit"]

#: Attributes that hold a model's position limit, in the order they are read:
#: ``max_position_embeddings`` (Llama, Gemma), GPT-2's ``n_positions``.
POSITION_LIMIT_ATTRIBUTES = ("max_position_embeddings", "n_positions")


def local_position_limit(source: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(attribute, value)`` of the position limit (:data:`POSITION_LIMIT_ATTRIBUTES`, the first
    that is a positive integer) in a ``local`` model's ``config.json`` (the text config of a
    multimodal one), read without transformers; None for other sources or when the file does not
    say."""
    if source["kind"] != "local":
        return None
    try:
        raw = json.loads((Path(source["path"]) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = (raw.get("text_config") or raw) if isinstance(raw, dict) else {}
    if not isinstance(text, dict):
        return None
    for attribute in POSITION_LIMIT_ATTRIBUTES:
        value = text.get(attribute)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return attribute, value
    return None
