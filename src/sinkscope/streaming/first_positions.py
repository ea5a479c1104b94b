"""Attention mass on the first key positions, per layer, read from an activation file (rule
``analyze_streaming_first_positions``): :func:`first_position_mass`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from sinkscope.streaming.streams import with_names

__all__ = ["first_position_mass"]


def first_position_mass(h5_path: str | Path, max_k: int = 8) -> pl.DataFrame:
    """Attention mass on the first ``max_k`` key positions, per layer, from an activation file.

    Reads ``attention/probs`` (``L, N, H, T1, T1``) one layer at a time and averages over
    sequences, heads and the queries ``q >= max_k`` (earlier queries see only the first positions
    and would trivially put all their mass there). Returns one row per ``(layer, key_position)``
    with ``mass`` (mean attention on that key), ``cumulative_mass`` (on keys ``0..key_position``,
    i.e. on the first ``k = key_position + 1`` positions), ``mass_head_min``/``mass_head_max``
    (the range over heads of the per-head means), plus ``model``, ``dataset`` and ``n_queries``.
    """
    from sinkscope.extraction.h5layout import (
        ATTENTION_PROBS,
        ATTR_DATASET_NAME,
        ATTR_MODEL_NAME,
        open_activations,
        read_attr,
    )

    rows = []
    with open_activations(h5_path) as handle:
        probs = handle[ATTENTION_PROBS]
        n_layers, _, _, t1, _ = probs.shape
        k = int(min(max_k, t1 - 1))
        if k < 1:
            raise ValueError(f"{h5_path}: sequences of {t1} positions are too short")
        model = str(read_attr(handle, ATTR_MODEL_NAME))
        dataset = str(read_attr(handle, ATTR_DATASET_NAME))
        for layer in range(n_layers):
            block = np.asarray(probs[layer, :, :, k:, :k], dtype=np.float64)  # (N, H, Q, k)
            per_head = block.mean(axis=(0, 2))  # (H, k)
            mass = per_head.mean(axis=0)
            cumulative = np.cumsum(mass)
            for position in range(k):
                rows.append(
                    {
                        "layer": layer,
                        "key_position": position,
                        "mass": float(mass[position]),
                        "cumulative_mass": float(cumulative[position]),
                        "mass_head_min": float(per_head[:, position].min()),
                        "mass_head_max": float(per_head[:, position].max()),
                        "n_queries": int(t1 - k),
                    }
                )
    return with_names(pl.DataFrame(rows), model, dataset)
