"""Secondary sinks: positions after BOS that collect attention in some head, and their tokens.

A secondary sink of a sequence is a key position ``k > 0`` whose sink score
(:func:`sinkscope.sinks.rate.sink_scores`) exceeds ``eps`` in at least one head of at least one
layer. Only positions with at least ``min_queries`` queries that can see them count
(``P - k >= min_queries``): the score of a late position averages over a few queries, and a
diagonal or previous-token head alone exceeds ``eps`` there (the last position's score is the
last query's self-attention).

Per (sequence, position) :func:`secondary_sinks` gives the token (id and decoded text), the
first and last layer where some head is a sink at it, the number of such layers
(``n_layers``: how many layers it persists; ``n_layers == last - first + 1`` when it never
pauses), the most heads of one layer and the largest score, and at its first layer whether its
residual stream is special: its norm relative to the median of the other tokens
(:func:`sinkscope.geometry.alignment.relative_bos_norm` applied to the position) and its cosine
with BOS (:func:`sinkscope.geometry.alignment.bos_cosines`) against the other tokens' cosines.
:func:`secondary_tokens` counts, per token id, how often its eligible occurrences become
secondary sinks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from sinkscope.geometry.alignment import relative_bos_norm

__all__ = [
    "SECONDARY_COLUMNS",
    "TOKEN_COLUMNS",
    "Decode",
    "decode_ids",
    "eligible_positions",
    "secondary_mask",
    "secondary_sinks",
    "secondary_tokens",
    "token_text",
    "tokenizer_decoder",
]

#: Decoded text of each token id: ``decode([id, ...]) -> [text, ...]``.
Decode = Callable[[Sequence[int]], list[str]]

SECONDARY_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "eps",
    "sequence",
    "position",
    "token_id",
    "token",
    "first_layer",
    "last_layer",
    "n_layers",
    "n_sink_units",
    "max_heads",
    "max_score",
    "rel_norm",
    "cos_bos",
    "cos_bos_median",
    "cos_bos_quantile",
)

TOKEN_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "eps",
    "token_id",
    "token",
    "n_occurrences",
    "n_sink",
    "frac_sink",
    "mean_first_layer",
    "mean_n_layers",
)


def token_text(text: str) -> str:
    """A token's text made visible in one line: a JSON string, quotes included, so that spaces
    show and newlines, tabs and quotes are escaped (``"\\n"``, ``" the"``)."""
    return json.dumps(text, ensure_ascii=False)


def tokenizer_decoder(prepared_dir: str | Path) -> Decode:
    """The decoder of a prepared model's tokenizer (:func:`sinkscope.prepare.models.load_tokenizer`),
    one token at a time, texts made visible by :func:`token_text`."""
    from sinkscope.prepare.models import load_tokenizer

    tokenizer = load_tokenizer(Path(prepared_dir))
    return lambda ids: [token_text(tokenizer.decode([int(i)])) for i in ids]


def eligible_positions(n_positions: int, min_queries: int) -> np.ndarray:
    """Key positions ``k >= 1`` with at least ``min_queries`` queries ``q >= k`` (``P - k >= m``)."""
    return np.arange(1, max(1, n_positions - int(min_queries) + 1), dtype=np.int64)


def secondary_mask(scores: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Heads above ``eps`` per (layer, sequence, key) and the largest score there.

    ``scores``: ``(L, N, H, P)``. Returns ``(n_heads, max_score)``, both ``(L, N, P)``.
    """
    s = np.asarray(scores, dtype=np.float64)
    return (s > float(eps)).sum(axis=2), s.max(axis=2)


def secondary_sinks(
    scores: np.ndarray,
    eps: float,
    min_queries: int,
    token_ids: np.ndarray,
    norms: np.ndarray,
    cosines: np.ndarray,
    decode: Decode | None = None,
) -> pl.DataFrame:
    """The secondary sinks of one file (module docstring), one row per (sequence, position).

    ``scores``: ``(L, N, H, P)`` sink scores; ``token_ids``: ``(N, P)``; ``norms``:
    ``(L, N, P)`` residual-stream norms (:func:`sinkscope.geometry.alignment.row_norms`);
    ``cosines``: ``(L, N, P - 1)`` cosines with BOS of positions ``1..P-1``
    (:func:`sinkscope.geometry.alignment.bos_cosines`). ``decode``: token texts (default: the
    id in angle brackets). Columns :data:`SECONDARY_COLUMNS` without ``model``/``dataset``:
    ``rel_norm`` is ``|x_k| / median_{i >= 1, i != k} |x_i|``, ``cos_bos`` is ``cos(x_0, x_k)``,
    ``cos_bos_median`` the median over the other tokens ``i >= 1`` and ``cos_bos_quantile`` the
    share of them with a smaller cosine (1: the token most aligned with BOS), all at the first
    layer; ``n_sink_units`` counts the (layer, head) pairs above ``eps``.
    """
    n_layers, _n_seq, _, n_pos = scores.shape
    keep = eligible_positions(n_pos, min_queries)
    n_heads, max_score = secondary_mask(scores[..., keep], eps)
    active = n_heads > 0  # (L, N, K')
    any_layer = active.any(axis=0)
    seqs, cols = np.nonzero(any_layer)
    positions = keep[cols]
    first = active[:, seqs, cols].argmax(axis=0)
    last = n_layers - 1 - active[::-1, seqs, cols].argmax(axis=0)
    rel_norm = np.empty(seqs.size)
    cos_k = np.empty(seqs.size)
    cos_median = np.empty(seqs.size)
    cos_quantile = np.empty(seqs.size)
    for row, (n, k, layer) in enumerate(zip(seqs, positions, first, strict=True)):
        others = np.delete(np.arange(1, n_pos), k - 1)
        layer_norms = norms[layer, n]
        # relative_bos_norm compares entry 0 with the median of the rest: put k first
        rel_norm[row] = relative_bos_norm(np.concatenate([[layer_norms[k]], layer_norms[others]]))
        cos = cosines[layer, n]
        cos_k[row] = cos[k - 1]
        rest = cos[others - 1]
        cos_median[row] = np.nanmedian(rest) if rest.size else np.nan
        cos_quantile[row] = np.mean(rest < cos[k - 1]) if rest.size else np.nan
    ids = token_ids[seqs, positions].astype(np.int64)
    texts = decode_ids(ids, decode)
    return pl.DataFrame(
        {
            "eps": np.full(seqs.size, float(eps)),
            "sequence": seqs.astype(np.int64),
            "position": positions,
            "token_id": ids,
            "token": pl.Series(texts, dtype=pl.String),
            "first_layer": first.astype(np.int64),
            "last_layer": last.astype(np.int64),
            "n_layers": active[:, seqs, cols].sum(axis=0).astype(np.int64),
            "n_sink_units": n_heads[:, seqs, cols].sum(axis=0).astype(np.int64),
            "max_heads": n_heads[:, seqs, cols].max(axis=0).astype(np.int64),
            "max_score": max_score[:, seqs, cols].max(axis=0),
            "rel_norm": rel_norm,
            "cos_bos": cos_k,
            "cos_bos_median": cos_median,
            "cos_bos_quantile": cos_quantile,
        }
    )


def decode_ids(ids: np.ndarray, decode: Decode | None) -> list[str]:
    unique = sorted(set(ids.tolist()))
    texts = decode(unique) if decode is not None else [f"<{i}>" for i in unique]
    table = dict(zip(unique, texts, strict=True))
    return [table[i] for i in ids.tolist()]


def secondary_tokens(
    secondary: pl.DataFrame,
    token_ids: np.ndarray,
    eps: float,
    min_queries: int,
    decode: Decode | None = None,
) -> pl.DataFrame:
    """Per token id that became a secondary sink at least once: its eligible occurrences
    (positions of :func:`eligible_positions` in every sequence), how many of them are secondary
    sinks (``n_sink``, ``frac_sink``), and the mean first layer and layer count of those; sorted
    by ``n_sink`` (descending), then ``token_id``. Columns :data:`TOKEN_COLUMNS` without
    ``model``/``dataset``."""
    keep = eligible_positions(token_ids.shape[1], min_queries)
    ids, counts = np.unique(token_ids[:, keep].astype(np.int64), return_counts=True)
    occurrences = pl.DataFrame({"token_id": ids, "n_occurrences": counts.astype(np.int64)})
    per_token = secondary.group_by("token_id").agg(
        pl.len().cast(pl.Int64).alias("n_sink"),
        pl.col("first_layer").cast(pl.Float64).mean().alias("mean_first_layer"),
        pl.col("n_layers").cast(pl.Float64).mean().alias("mean_n_layers"),
    )
    frame = per_token.join(occurrences, on="token_id", how="left")
    texts = decode_ids(frame["token_id"].to_numpy(), decode) if frame.height else []
    return (
        frame.with_columns(
            eps=pl.lit(float(eps), dtype=pl.Float64),
            token=pl.Series(texts, dtype=pl.String),
            frac_sink=pl.col("n_sink") / pl.col("n_occurrences"),
        )
        .sort(["n_sink", "token_id"], descending=[True, False])
        .select(TOKEN_COLUMNS[2:])
    )
