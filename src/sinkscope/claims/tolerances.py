"""The claims' tolerances: the defaults and the config's ``claims`` section applied over them.

Each key is documented, with its reason, in ``workflow/schemas/config.schema.yaml``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_TOLERANCES",
    "resolve_tolerances",
]

#: Default tolerances of every claim (the config's ``claims`` section overrides them per key).
DEFAULT_TOLERANCES: dict[str, dict[str, Any]] = {
    "heads": {
        "sink_min_fraction": 0.1,
        "diagonal_fraction_range": [0.006, 0.095],
        "sink_prev_fraction_range": [0.13, 0.21],
    },
    "geometry": {
        "bos_cosine_max": 0.0,
        "representable_min_fraction": 1.0,
        "near_full_rank": 0.9,
        "bos_value_ratio_max": 0.5,
    },
    "oversmoothing": {
        "approximation_error": 0.1,
        "approximation_relative_offset": 0.25,
        "most": 0.5,
        "min_difference": 0.0,
        "half_band": 0.25,
        "few_max_fraction": 0.1,
    },
    "costs": {
        "toy_rtol": 1e-6,
        "slope_tolerance": 0.25,
        "flat_max_slope": 0.1,
        "growth_min_slope": 0.1,
    },
    "streaming": {
        "sharp_ppl_ratio": 2.0,
        "max_sink_tokens": 4,
        "min_recovered_fraction": 0.9,
    },
    "dynamics": {
        "majority": 0.5,
        "softmax_min_sink_proportion": 0.1,
        "unnormalized_max_sink_proportion": 0.05,
        "min_difference": 0.0,
    },
}


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
