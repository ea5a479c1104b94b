"""The per-pair analysis of sinks beyond BOS: every table of one activation file
(:func:`analyze_file`).

Streams over the layers of the file; within a layer the attention maps are read a block of
sequences at a time (:func:`sinkscope.extraction.h5read.read_layer`, block size
:func:`~sinkscope.extraction.h5read.default_block_size`) and reduced to their sink scores
(``(N, H, P)`` per layer, kept for the secondary sinks), and the residual stream of the layer is
read once for its norms, cosines with BOS and largest entries (one layer's ``|X|``: the exact
median of :mod:`sinkscope.sinks.massive`). Peak memory: one layer's residual stream, one block
of maps and the ``O(L N H P)`` scores.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from sinkscope.config_schema import schema_default
from sinkscope.extraction.h5layout import (
    ATTENTION_PROBS,
    ATTR_DATASET_NAME,
    ATTR_MODEL_NAME,
    RESIDUAL_X,
    TOKEN_IDS,
    open_activations,
    read_attr,
)
from sinkscope.extraction.h5read import default_block_size, read_layer, release_freed_memory
from sinkscope.geometry.alignment import blocks, bos_cosines, row_norms
from sinkscope.sinks.massive import LAYER_COLUMNS, TOP_COLUMNS, layer_statistics
from sinkscope.sinks.rate import (
    RATE_COLUMNS,
    bos_mass_from_score,
    exceed_counts,
    rate_frame,
    sink_scores,
)
from sinkscope.sinks.secondary import (
    SECONDARY_COLUMNS,
    TOKEN_COLUMNS,
    Decode,
    secondary_sinks,
    secondary_tokens,
)

__all__ = ["TABLE_COLUMNS", "SinkSettings", "analyze_arrays", "analyze_file"]

_DEFAULTS: dict[str, Any] = schema_default("sinks")

HEAD_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "n_positions",
    "layer",
    "head",
    "eps",
    "n_sequences",
    "n_sink",
    "frac_sink",
    "mean_score",
    "bos_mass",
)

#: Columns of every table of :func:`analyze_file`.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "sink_rate": RATE_COLUMNS,
    "sink_rate_layer": (*RATE_COLUMNS[:3], "layer", *RATE_COLUMNS[3:]),
    "sink_score_head": HEAD_COLUMNS,
    "secondary_sinks": SECONDARY_COLUMNS,
    "secondary_tokens": TOKEN_COLUMNS,
    "massive_top": TOP_COLUMNS,
    "massive_layer": LAYER_COLUMNS,
}


@dataclass(frozen=True)
class SinkSettings:
    """The config section ``sinks`` (defaults and meanings: the config schema)."""

    max_key_position: int = _DEFAULTS["max_key_position"]
    eps: float = _DEFAULTS["eps"]
    eps_sweep: tuple[float, ...] = field(default=tuple(_DEFAULTS["eps_sweep"]))
    prefix_positions: tuple[int, ...] = field(default=tuple(_DEFAULTS["prefix_positions"]))
    secondary_min_queries: int = _DEFAULTS["secondary_min_queries"]
    top_k: int = _DEFAULTS["top_k"]
    massive_ratio: float = _DEFAULTS["massive_ratio"]

    @classmethod
    def from_config(cls, section: dict[str, Any]) -> SinkSettings:
        values = dict(section)
        for key in ("eps_sweep", "prefix_positions"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)

    @property
    def thresholds(self) -> tuple[float, ...]:
        """The sweep with the reference ``eps``, sorted."""
        return tuple(sorted({float(e) for e in (*self.eps_sweep, self.eps)}))


def _ids(frame: pl.DataFrame, name: str, model: str, dataset: str) -> pl.DataFrame:
    return frame.with_columns(
        model=pl.lit(model, dtype=pl.String), dataset=pl.lit(dataset, dtype=pl.String)
    ).select(TABLE_COLUMNS[name])


def analyze_file(
    h5_path: str | os.PathLike[str],
    settings: SinkSettings = SinkSettings(),
    decode: Decode | None = None,
    block_size: int | None = None,
) -> dict[str, pl.DataFrame]:
    """Every table of one activation file (columns: :data:`TABLE_COLUMNS`).

    ``decode``: token texts (:func:`sinkscope.sinks.secondary.tokenizer_decoder`; default the
    ids). ``block_size``: sequences of maps read at a time (the tables do not depend on it).
    Tables, each with ``model`` and ``dataset``:

    * ``sink_rate``: the sink rate of Gu et al. per ``n_positions`` (the full length ``T + 1``
      and each prefix), key position ``k = 0..K`` and ``eps``, pooled over layers
      (:mod:`sinkscope.sinks.rate`); ``sink_rate_layer``: the same per layer.
    * ``sink_score_head``: per (layer, head, eps) at ``k = 0`` over the full length: the share of
      sequences whose score exceeds ``eps``, the mean score and the BOS mass it implies (equal
      to :mod:`sinkscope.heads.classify`'s ``bos_mass``).
    * ``secondary_sinks``, ``secondary_tokens``: :mod:`sinkscope.sinks.secondary` at ``eps``.
    * ``massive_top``, ``massive_layer``: :mod:`sinkscope.sinks.massive`.
    """
    with open_activations(h5_path) as handle:
        model = str(read_attr(handle, ATTR_MODEL_NAME))
        dataset = str(read_attr(handle, ATTR_DATASET_NAME))
        probs_ds, x_ds = handle[ATTENTION_PROBS], handle[RESIDUAL_X]
        n_layers, n_seq, n_heads, n_pos, _ = probs_ds.shape
        token_ids = handle[TOKEN_IDS][:]
        size = default_block_size(handle) if block_size is None else int(block_size)
        if size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        prefixes = _prefixes(settings, n_pos)
        scores = np.empty((n_layers, n_seq, n_heads, n_pos))
        prefix_scores = {
            p: np.empty((n_layers, n_seq, n_heads, settings.max_key_position + 1))
            for p in prefixes[1:]
        }
        norms = np.empty((n_layers, n_seq, n_pos))
        cosines = np.empty((n_layers, n_seq, n_pos - 1))
        massive: list[tuple[dict[str, np.ndarray], dict[str, object]]] = []
        x = np.empty(x_ds.shape[1:], dtype=x_ds.dtype)
        for layer in range(n_layers):
            for block in blocks(n_seq, size):
                probs = read_layer(probs_ds, layer, block)
                scores[layer, block] = sink_scores(probs)
                for p, out in prefix_scores.items():
                    out[layer, block] = sink_scores(probs, p)[..., : settings.max_key_position + 1]
                del probs
            read_layer(x_ds, layer, out=x)
            norms[layer] = row_norms(x)
            cosines[layer] = bos_cosines(x)
            massive.append(layer_statistics(x, settings.top_k, settings.massive_ratio))
            release_freed_memory()
        del x
    return analyze_scores(
        model,
        dataset,
        scores,
        prefix_scores,
        norms,
        cosines,
        massive,
        token_ids,
        settings,
        decode,
    )


def analyze_arrays(
    probs: np.ndarray,
    x: np.ndarray,
    token_ids: np.ndarray,
    settings: SinkSettings = SinkSettings(),
    decode: Decode | None = None,
    model: str = "model",
    dataset: str = "dataset",
) -> dict[str, pl.DataFrame]:
    """:func:`analyze_file` on arrays in memory: ``probs`` ``(L, N, H, P, P)``, ``x``
    ``(L, N, P, D)``, ``token_ids`` ``(N, P)`` (tests, small inputs)."""
    n_pos = probs.shape[-1]
    prefixes = _prefixes(settings, n_pos)
    scores = sink_scores(probs)
    prefix_scores = {
        p: sink_scores(probs, p)[..., : settings.max_key_position + 1] for p in prefixes[1:]
    }
    norms = np.stack([row_norms(layer) for layer in x])
    cosines = np.stack([bos_cosines(layer) for layer in x])
    massive = [layer_statistics(layer, settings.top_k, settings.massive_ratio) for layer in x]
    return analyze_scores(
        model, dataset, scores, prefix_scores, norms, cosines, massive, token_ids, settings, decode
    )


def _prefixes(settings: SinkSettings, n_pos: int) -> list[int]:
    """The full length first, then the distinct shorter prefixes."""
    k = settings.max_key_position
    if k >= n_pos:
        raise ValueError(
            f"sinks.max_key_position = {k} needs more than the file's {n_pos} positions"
        )
    bad = [p for p in settings.prefix_positions if not k < p <= n_pos]
    if bad:
        raise ValueError(
            f"sinks.prefix_positions: {bad} not in ({k}, {n_pos}] (max_key_position, positions)"
        )
    return [n_pos, *sorted({int(p) for p in settings.prefix_positions} - {n_pos})]


def analyze_scores(
    model: str,
    dataset: str,
    scores: np.ndarray,
    prefix_scores: dict[int, np.ndarray],
    norms: np.ndarray,
    cosines: np.ndarray,
    massive: Sequence[tuple[dict[str, np.ndarray], dict[str, object]]],
    token_ids: np.ndarray,
    settings: SinkSettings,
    decode: Decode | None,
) -> dict[str, pl.DataFrame]:
    """The tables of :func:`analyze_file` from the reduced arrays (scores ``(L, N, H, P)``,
    prefix scores ``{P': (L, N, H, K + 1)}``, norms, cosines, per-layer massive statistics)."""
    n_layers, n_seq, n_heads, n_pos = scores.shape
    kk = settings.max_key_position + 1
    eps = settings.thresholds
    per_length = {n_pos: scores[..., :kk], **prefix_scores}
    layer_parts, pooled_parts = [], []
    for p, s in per_length.items():
        counts = [exceed_counts(s[layer], eps) for layer in range(n_layers)]
        sums = s.sum(axis=(1, 2))  # (L, K + 1)
        for layer in range(n_layers):
            frame = rate_frame(counts[layer], sums[layer], n_seq * n_heads, eps, p)
            layer_parts.append(frame.with_columns(layer=pl.lit(layer, dtype=pl.Int64)))
        pooled_parts.append(
            rate_frame(sum(counts), sums.sum(axis=0), n_layers * n_seq * n_heads, eps, p)
        )
    tables = {
        "sink_rate": _ids(pl.concat(pooled_parts), "sink_rate", model, dataset),
        "sink_rate_layer": _ids(pl.concat(layer_parts), "sink_rate_layer", model, dataset),
        "sink_score_head": _ids(
            _head_table(scores[..., 0], eps, n_pos), "sink_score_head", model, dataset
        ),
    }
    secondary = secondary_sinks(
        scores,
        settings.eps,
        settings.secondary_min_queries,
        token_ids,
        norms,
        cosines,
        decode,
    )
    tables["secondary_sinks"] = _ids(secondary, "secondary_sinks", model, dataset)
    tokens = secondary_tokens(
        secondary, token_ids, settings.eps, settings.secondary_min_queries, decode
    )
    tables["secondary_tokens"] = _ids(tokens, "secondary_tokens", model, dataset)
    tables.update(_massive_tables(massive, token_ids, decode, model, dataset))
    return tables


def _head_table(score0: np.ndarray, eps: Sequence[float], n_pos: int) -> pl.DataFrame:
    """Per (layer, head, eps): sequences with ``score(0) > eps``, mean score, implied BOS mass."""
    n_layers, n_seq, n_heads = score0.shape
    mean = score0.mean(axis=1)  # (L, H)
    parts = []
    for e in eps:
        n_sink = (score0 > e).sum(axis=1)
        parts.append(
            pl.DataFrame(
                {
                    "n_positions": np.full(n_layers * n_heads, n_pos, dtype=np.int64),
                    "layer": np.repeat(np.arange(n_layers, dtype=np.int64), n_heads),
                    "head": np.tile(np.arange(n_heads, dtype=np.int64), n_layers),
                    "eps": np.full(n_layers * n_heads, float(e)),
                    "n_sequences": np.full(n_layers * n_heads, n_seq, dtype=np.int64),
                    "n_sink": n_sink.ravel().astype(np.int64),
                    "frac_sink": n_sink.ravel() / n_seq,
                    "mean_score": mean.ravel(),
                    "bos_mass": bos_mass_from_score(mean.ravel(), n_pos),
                }
            )
        )
    return pl.concat(parts).sort("layer", "head", "eps")


def _massive_tables(
    massive: Sequence[tuple[dict[str, np.ndarray], dict[str, object]]],
    token_ids: np.ndarray,
    decode: Decode | None,
    model: str,
    dataset: str,
) -> dict[str, pl.DataFrame]:
    from sinkscope.sinks.secondary import decode_ids

    tops, stats = [], []
    for layer, (top, layer_stats) in enumerate(massive):
        ids = token_ids[top["sequence"], top["position"]].astype(np.int64)
        tops.append(
            pl.DataFrame(top).with_columns(
                layer=pl.lit(layer, dtype=pl.Int64),
                token_id=pl.Series(ids, dtype=pl.Int64),
                token=pl.Series(decode_ids(ids, decode), dtype=pl.String),
                median_abs=pl.lit(layer_stats["median_abs"], dtype=pl.Float64),
            )
        )
        stats.append({"layer": layer, **layer_stats})
    return {
        "massive_top": _ids(pl.concat(tops), "massive_top", model, dataset),
        "massive_layer": _ids(pl.DataFrame(stats), "massive_layer", model, dataset),
    }
