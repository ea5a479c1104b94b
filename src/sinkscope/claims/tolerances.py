"""The claims' tolerances: the defaults and the config's ``claims`` section applied over them.

Each key, its default and the reason for that value are stated once, in
``workflow/schemas/config.schema.yaml`` (read by :func:`sinkscope.config_schema.schema_default`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sinkscope.config_schema import schema_default

__all__ = [
    "DEFAULT_TOLERANCES",
    "resolve_tolerances",
]

#: Default tolerances of every claim, ``{group: {key: value}}``: the config schema's ``claims``
#: defaults (the config's ``claims`` section overrides them per key).
DEFAULT_TOLERANCES: dict[str, dict[str, Any]] = schema_default("claims")


def resolve_tolerances(overrides: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """:data:`DEFAULT_TOLERANCES` with the config's ``claims`` section applied (unknown keys fail)."""
    out = copy.deepcopy(DEFAULT_TOLERANCES)
    for group, values in (overrides or {}).items():
        if group not in out:
            raise KeyError(f"claims.{group}: unknown group; known: {sorted(out)}")
        for key, value in values.items():
            if key not in out[group]:
                raise KeyError(f"claims.{group}.{key}: unknown key; known: {sorted(out[group])}")
            out[group][key] = value
    return out
