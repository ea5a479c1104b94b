"""The sink score and sink rate of Gu et al. (ICLR 2025), per key position, layer and threshold.

Definition (Gu et al., "When Attention Sink Emerges in Language Models: An Empirical View",
§3.2; the reference code is ``compute_attention_sink`` of ``sail-sg/Attention-Sink``). For a
sequence of ``P`` positions (BOS included: Gu et al. count every token the model sees, and the
tokenizers of Llama, Mistral and OPT put a BOS first), the sink score of head ``h`` of layer ``l``
at key position ``k`` is the mean attention on ``k`` over the queries that can see it::

    score_{l,h}(k) = 1 / (P - k) * sum_{q = k}^{P - 1} A_{l,h}[q, k]        (k = 0 .. P - 1)

(0-based positions; the ``P - k`` queries ``q >= k``; query ``q = k`` itself is included, so at
``k = 0`` the BOS row ``A[0, 0] = 1`` counts). The reference code divides every column by
``P - k`` and sums over *all* queries, which is the same sum because the causal maps are 0 above
the diagonal; :func:`sink_scores` sums only ``q >= k`` and does not rely on it. A head is a sink
at ``k`` when ``score > eps`` (strictly; Gu et al.: ``eps = 0.3``), and the sink rate at ``k`` is
the share of (sequence, layer, head) units above ``eps`` (Gu et al.'s ``Sink_k^eps``, reported in
percent; here a fraction), per layer and pooled over layers.

Relation to the BOS mass of the head classes (:mod:`sinkscope.heads.classify`): ``bos_mass``
averages ``A[i, 0]`` over the ``T = P - 1`` queries ``i = 1..T`` (query 0 left out), so per
sequence and head ``score(0) = (1 + T * bos_mass) / (T + 1)`` exactly
(:func:`bos_mass_from_score`); ``score(0) > eps`` is ``bos_mass > (eps (T + 1) - 1) / T``
(:func:`bos_mass_threshold`), and the head classes compare the *mean over sequences* of
``bos_mass`` with 0.4, while the rate counts every sequence on its own.

Prefixes: causal attention on the first ``P' < P`` positions of a sequence is the attention of the
sequence cut to ``P'`` positions, so the scores of a shorter probe (Gu et al. use 64 tokens) are
those of the top-left ``P' x P'`` block of the stored maps (``n_positions`` column of the tables).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

__all__ = [
    "RATE_COLUMNS",
    "bos_mass_from_score",
    "bos_mass_threshold",
    "exceed_counts",
    "rate_frame",
    "sink_scores",
]

#: Columns of the rate tables (``sink_rate_layer`` has ``layer`` after ``n_positions``).
RATE_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "n_positions",
    "key_position",
    "eps",
    "n_units",
    "n_sink",
    "rate",
    "mean_score",
)


def sink_scores(probs: np.ndarray, n_positions: int | None = None) -> np.ndarray:
    """Sink scores ``score(k)`` of every map in ``probs`` (module docstring), float64.

    ``probs``: ``(..., P, P)`` attention maps (query, key), any float dtype. ``n_positions``: use
    only the first ``P'`` positions (the prefix's own maps; default all). Returns ``(..., P')``:
    entry ``k`` is ``sum_{q >= k} A[q, k] / (P' - k)``. The sum over ``q >= k`` is the column sum
    of the lower triangle, taken without a float64 copy of the maps.
    """
    a = np.asarray(probs)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attention maps must have shape (..., P, P), got {a.shape}")
    p = a.shape[-1] if n_positions is None else int(n_positions)
    if not 1 <= p <= a.shape[-1]:
        raise ValueError(f"n_positions must be in [1, {a.shape[-1]}], got {n_positions}")
    a = a[..., :p, :p]
    total = a.sum(axis=-2, dtype=np.float64)
    # subtract what lies above the diagonal (q < k): zero in causal maps, so usually nothing
    upper = np.triu(np.ones((p, p), dtype=bool), k=1)
    if np.any(a[..., upper]):
        total -= np.where(upper, a, 0).sum(axis=-2, dtype=np.float64)
    return total / np.arange(p, 0, -1, dtype=np.float64)


def exceed_counts(scores: np.ndarray, eps: Sequence[float]) -> np.ndarray:
    """Units with ``score > eps`` per threshold and key position: ``(len(eps), P)`` int64.

    ``scores``: ``(..., P)``; every leading axis is a unit axis (sequences, heads).
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1, np.shape(scores)[-1])
    return np.stack([(s > float(e)).sum(axis=0) for e in eps]).astype(np.int64)


def rate_frame(
    counts: np.ndarray,
    score_sums: np.ndarray,
    n_units: int,
    eps: Sequence[float],
    n_positions: int,
) -> pl.DataFrame:
    """Long table of sink rates from counts: one row per (key position, eps).

    ``counts``: ``(len(eps), K + 1)`` units above each threshold (:func:`exceed_counts`);
    ``score_sums``: ``(K + 1,)`` sums of the scores over the same units; ``n_units``: their
    number. Columns ``n_positions, key_position, eps, n_units, n_sink, rate, mean_score``.
    """
    n_eps, n_keys = counts.shape
    return pl.DataFrame(
        {
            "n_positions": np.full(n_eps * n_keys, n_positions, dtype=np.int64),
            "key_position": np.tile(np.arange(n_keys, dtype=np.int64), n_eps),
            "eps": np.repeat(np.asarray(eps, dtype=np.float64), n_keys),
            "n_units": np.full(n_eps * n_keys, n_units, dtype=np.int64),
            "n_sink": counts.ravel().astype(np.int64),
            "rate": counts.ravel() / float(n_units),
            "mean_score": np.tile(np.asarray(score_sums, dtype=np.float64) / n_units, n_eps),
        }
    )


def bos_mass_from_score(score0: np.ndarray | float, n_positions: int) -> np.ndarray:
    """``bos_mass`` of :mod:`sinkscope.heads.classify` from the score at ``k = 0`` of the same
    map: ``(P score(0) - 1) / (P - 1)`` (``P = T + 1`` positions, module docstring)."""
    p = float(n_positions)
    return (p * np.asarray(score0, dtype=np.float64) - 1.0) / (p - 1.0)


def bos_mass_threshold(eps: float, n_positions: int) -> float:
    """The ``bos_mass`` above which ``score(0) > eps``: ``(eps P - 1) / (P - 1)``."""
    return float(bos_mass_from_score(eps, n_positions))
