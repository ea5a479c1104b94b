"""Massive activations (Sun et al. 2024, "Massive Activations in Large Language Models").

Sun et al. find a few entries of the residual stream (hidden states) whose magnitude is about
100 to 10,000 times the median magnitude, at fixed feature dimensions, at the first token and at
delimiter tokens, appearing abruptly in an early layer and staying until the last layers. Here,
per layer ``l`` of ``residual/X`` (the residual stream *entering* layer ``l``; layer 0 is the
embedding output, as in :mod:`sinkscope.extraction.h5layout`):

* ``median_abs``: the median of ``|X^(l)[n, t, d]|`` over every sequence ``n``, position ``t``
  (BOS included) and dimension ``d`` of the layer (exact: one layer's ``|X|`` in float32);
* the ``top_k`` feature dimensions with the largest ``|X|``, each with the (sequence,
  position) of its largest entry, the signed value and ``ratio = |X| / median_abs``
  (:func:`top_entries`);
* ``n_massive``: entries with ``ratio >= massive_ratio`` (default 100, the lower end of Sun et
  al.'s range), how many of them sit at position 0 (the BOS / sink token), and their distinct
  positions and dimensions (:func:`layer_statistics`).

The first layer with a massive entry, and whether its largest entry is at the sink token, is
:func:`onset` (per file; the summary's ``massive_onset``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = [
    "LAYER_COLUMNS",
    "ONSET_COLUMNS",
    "TOP_COLUMNS",
    "layer_statistics",
    "onset",
    "top_entries",
]

TOP_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "layer",
    "rank",
    "sequence",
    "position",
    "dimension",
    "token_id",
    "token",
    "value",
    "abs_value",
    "median_abs",
    "ratio",
    "is_massive",
    "at_sink",
)
LAYER_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "layer",
    "median_abs",
    "max_abs",
    "max_ratio",
    "max_at_sink",
    "massive_ratio",
    "n_massive",
    "n_massive_at_sink",
    "n_massive_positions",
    "massive_dimensions",
)
ONSET_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "massive_ratio",
    "first_layer",
    "first_position",
    "first_dimension",
    "first_token",
    "first_at_sink",
    "first_ratio",
    "n_massive_layers",
    "max_ratio",
    "max_layer",
    "massive_dimensions",
)


def top_entries(abs_x: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``top_k`` feature dimensions of largest ``|X|`` and where each is largest.

    ``abs_x``: ``(N, P, D)``. Per dimension ``d`` the largest entry over sequences and positions
    (the first in C order where it ties); the dimensions are ranked by it, largest first (ties:
    smaller ``d`` first). One row per dimension, because the largest entries of a layer are
    otherwise copies of one (position, dimension) in every sequence (the BOS token's residual
    stream is the same in all of them). Returns the flat indices into ``abs_x`` and the
    magnitudes (float64).
    """
    a = np.asarray(abs_x)
    n, p, d = a.shape
    per_dim = a.reshape(n * p, d)
    where = per_dim.argmax(axis=0)  # (D,) first row of the maximum
    peak = per_dim[where, np.arange(d)].astype(np.float64)
    order = np.lexsort((np.arange(d), -peak))[: min(int(top_k), d)]
    return where[order] * d + order, peak[order]


def layer_statistics(
    x: np.ndarray, top_k: int, massive_ratio: float
) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """One layer's top entries and statistics (module docstring).

    ``x``: the layer's residual stream ``(N, P, D)`` (any float dtype; ``|x|`` is taken in
    float32, the stored dtype). Returns ``(top, stats)``: ``top`` holds arrays ``rank,
    sequence, position, dimension, value, abs_value, ratio, is_massive, at_sink`` of the
    ``top_k`` dimensions of :func:`top_entries`; ``stats`` the ``LAYER_COLUMNS`` fields from ``median_abs`` on
    (``massive_dimensions``: the distinct dimensions of the massive entries, space-separated).
    """
    x = np.asarray(x)
    abs_x = np.abs(x, dtype=np.float32)
    index, magnitude = top_entries(abs_x, top_k)
    seq, pos, dim = np.unravel_index(index, abs_x.shape)
    median = float(np.median(abs_x))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = magnitude / median if median > 0 else np.full(magnitude.shape, np.inf)
    massive = abs_x >= np.float32(massive_ratio * median) if median > 0 else abs_x > 0
    m_seq, m_pos, m_dim = np.nonzero(massive)
    top = {
        "rank": np.arange(1, index.size + 1, dtype=np.int64),
        "sequence": seq.astype(np.int64),
        "position": pos.astype(np.int64),
        "dimension": dim.astype(np.int64),
        "value": x.reshape(-1)[index].astype(np.float64),
        "abs_value": magnitude,
        "ratio": ratio,
        "is_massive": ratio >= massive_ratio,
        "at_sink": pos == 0,
    }
    stats: dict[str, object] = {
        "median_abs": median,
        "max_abs": float(magnitude[0]),
        "max_ratio": float(ratio[0]),
        "max_at_sink": bool(pos[0] == 0),
        "massive_ratio": float(massive_ratio),
        "n_massive": int(m_seq.size),
        "n_massive_at_sink": int(np.sum(m_pos == 0)),
        "n_massive_positions": int(np.unique(np.stack([m_seq, m_pos]), axis=1).shape[1])
        if m_seq.size
        else 0,
        "massive_dimensions": " ".join(map(str, np.unique(m_dim).tolist())),
    }
    return top, stats


def onset(massive_layer: pl.DataFrame, massive_top: pl.DataFrame) -> pl.DataFrame:
    """Per (model, dataset): the first layer with a massive entry (``n_massive > 0``), where its
    largest entry sits (position, dimension, token, whether at the sink token) and its ratio;
    the number of layers with massive entries, the largest ratio and its layer, and the distinct
    massive dimensions over all layers. Null ``first_*`` where no layer has one. Columns
    :data:`ONSET_COLUMNS`."""
    rows = []
    for (model, dataset), layers in massive_layer.group_by("model", "dataset", maintain_order=True):
        layers = layers.sort("layer")
        with_massive = layers.filter(pl.col("n_massive") > 0)
        best = layers.sort("max_ratio", "layer", descending=[True, False]).row(0, named=True)
        dims = sorted({int(d) for text in with_massive["massive_dimensions"] for d in text.split()})
        row: dict[str, object] = {
            "model": model,
            "dataset": dataset,
            "massive_ratio": float(layers["massive_ratio"][0]),
            "first_layer": None,
            "first_position": None,
            "first_dimension": None,
            "first_token": None,
            "first_at_sink": None,
            "first_ratio": None,
            "n_massive_layers": with_massive.height,
            "max_ratio": best["max_ratio"],
            "max_layer": best["layer"],
            "massive_dimensions": " ".join(map(str, dims)),
        }
        if with_massive.height:
            layer = int(with_massive["layer"][0])
            top = massive_top.filter(
                (pl.col("model") == model)
                & (pl.col("dataset") == dataset)
                & (pl.col("layer") == layer)
            ).sort("rank")
            entry = top.row(0, named=True)
            row.update(
                first_layer=layer,
                first_position=entry["position"],
                first_dimension=entry["dimension"],
                first_token=entry["token"],
                first_at_sink=entry["at_sink"],
                first_ratio=entry["ratio"],
            )
        rows.append(row)
    schema = {
        "model": pl.String,
        "dataset": pl.String,
        "massive_ratio": pl.Float64,
        "first_layer": pl.Int64,
        "first_position": pl.Int64,
        "first_dimension": pl.Int64,
        "first_token": pl.String,
        "first_at_sink": pl.Boolean,
        "first_ratio": pl.Float64,
        "n_massive_layers": pl.Int64,
        "max_ratio": pl.Float64,
        "max_layer": pl.Int64,
        "massive_dimensions": pl.String,
    }
    return pl.DataFrame(rows, schema=schema).select(ONSET_COLUMNS)
