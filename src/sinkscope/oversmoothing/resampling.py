"""Resampling of the oversmoothing analysis's per-sequence tables: the claims' intervals over
sequences (:mod:`sinkscope.claims.resampling`).

The pair's quantities that the claims read are means over its sequences: the per-head ``rho``
and eq. (2)'s coefficients (``approximation_by_sequence``, :mod:`.approximation`), each
layer's ``rho`` before and after its update (``layers_by_sequence``, Fig. 4) and Fig. 2 right's
``rho``'s and the uniformity per head (``heads_by_sequence``). A resample of
sequences weights each sequence by how often it was drawn
(:func:`sinkscope.stats.intervals.sample_and_resample_counts`), so a statistic is recomputed
as an analysis of the drawn sequences would compute it, with the layer constants that pool
every sequence held fixed (a post-norm model's gain and ``kappa``,
:mod:`sinkscope.oversmoothing.approximation`). Each function takes the
pair tables of a claims row as strata, resampled each on its own (a row pooled over datasets
draws each dataset's sequences from that dataset), and returns the statistic on the sample and
on every resample (or, for the per-head and per-layer functions, every head's or layer's
value on both).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import polars as pl

from sinkscope.oversmoothing.approximation import rho_hat_from_means
from sinkscope.oversmoothing.names import SEQUENCE_TERMS
from sinkscope.stats.intervals import sample_and_resample_counts

__all__ = [
    "RESAMPLE_CHUNK",
    "head_error_draws",
    "head_mean_draws",
    "layer_similarity_draws",
    "relative_offset_draws",
    "sequence_columns",
]


def sequence_columns(
    frame: pl.DataFrame, columns: Sequence[str], cells: Sequence[str], table: str
) -> dict[str, np.ndarray]:
    """``columns`` of one pair's per-sequence ``table`` as ``(N, C)`` arrays: one row per
    sequence, one column per cell (the distinct values of ``cells``, in sorted order). Every
    cell must hold every sequence once."""
    frame = frame.sort(*cells, "sequence")
    n_seq = frame["sequence"].n_unique()
    n_cells = frame.height // n_seq
    if n_cells * n_seq != frame.height:
        raise ValueError(f"{table}: every ({', '.join(cells)}) needs every sequence")
    return {c: frame[c].to_numpy().astype(np.float64).reshape(n_cells, n_seq).T for c in columns}


def head_error_draws(
    strata: Sequence[pl.DataFrame], n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Every head's ``|rho - rho_hat|`` (``X + W Z``) on the sample and on ``n_resamples``
    resamples of its sequences: ``(H,)`` and ``(n_resamples, H)``, the heads of every stratum in
    turn (a pooled row's heads are read once per dataset, as in the per-head table), for
    :func:`sinkscope.claims.resampling.simultaneous_sequence_intervals` (Fig. 7's largest error
    and §5's share of heads within the bound are read off the heads' simultaneous intervals).

    Each stratum is one pair's rows of the ``approximation_by_sequence`` table (columns
    ``layer, head, context_length, sequence, rho_xwz``, :data:`SEQUENCE_TERMS`, ``sum_xz,
    sum_zz``), read at its largest ``T'`` (Fig. 7's): per head the empirical ``rho`` is the mean
    of the drawn sequences' ``rho_xwz``, ``beta`` (per layer) is the ratio of their ``sum_xz``
    and ``sum_zz``, ``rho_hat`` is
    :func:`~sinkscope.oversmoothing.approximation.rho_hat_from_means` of their terms."""
    parts = []
    for frame in strata:
        frame = frame.filter(pl.col("context_length") == pl.col("context_length").max())
        n_heads = frame.select("layer", "head").n_unique()
        errors = np.empty((n_resamples + 1, n_heads))
        for rows, rho, rho_hat in _resampled_rho(frame, ["layer", "head"], n_resamples, rng):
            errors[rows] = np.abs(rho - rho_hat)
        parts.append(errors)
    if not parts:
        raise ValueError("head_error_draws needs at least one stratum")
    errors = np.hstack(parts)
    return errors[0], errors[1:]


#: Resamples evaluated at a time by :func:`_resampled_rho`: its work arrays are this many rows
#: of one number per cell (8 MB each at the 4,096 cells of Llama-3.1-8B's 32 x 32 heads at four
#: T'), not the whole ``(1 + B, cells, 6)`` (0.4 GB at B = 2,000).
RESAMPLE_CHUNK = 256


def _resampled_rho(
    frame: pl.DataFrame, cells: Sequence[str], n_resamples: int, rng: np.random.Generator
) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """Per cell of ``approximation_by_sequence`` (a head, or a head at one ``T'``): the empirical
    ``rho`` and eq. (2)'s ``rho_hat`` of ``X + W Z`` on the sample (row 0) and on
    ``n_resamples`` resamples of the sequences (rows 1..B), :data:`RESAMPLE_CHUNK` rows at a
    time: ``(rows, rho, rho_hat)`` with ``(len(rows), C)`` arrays. ``rho`` is the mean of the
    drawn sequences' ``rho_xwz``, ``beta`` the ratio of their ``sum_xz`` and ``sum_zz``,
    ``rho_hat`` :func:`~sinkscope.oversmoothing.approximation.rho_hat_from_means` of their
    terms' means (one matrix product per term)."""
    cols = sequence_columns(
        frame, ["rho_xwz", *SEQUENCE_TERMS, "sum_xz", "sum_zz"], cells, "approximation_by_sequence"
    )
    n_seq = cols["rho_xwz"].shape[0]
    counts = sample_and_resample_counts(n_seq, n_resamples, rng)  # (1 + B, N)
    for start in range(0, counts.shape[0], RESAMPLE_CHUNK):
        rows = slice(start, min(start + RESAMPLE_CHUNK, counts.shape[0]))
        part = counts[rows]
        mean_terms = np.stack([part @ cols[c] / n_seq for c in SEQUENCE_TERMS], axis=-1)
        beta = (part @ cols["sum_xz"]) / (part @ cols["sum_zz"])  # per layer and T', per cell
        yield rows, part @ cols["rho_xwz"] / n_seq, rho_hat_from_means(mean_terms, beta)


def relative_offset_draws(
    strata: Sequence[pl.DataFrame], n_resamples: int, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """Fig. 2 left's agreement of the head-averaged curves across ``T'``
    (:func:`sinkscope.oversmoothing.summary.approximation_offsets`' ``rel_offset_xwz``), on the
    sample and on ``n_resamples`` resamples of the sequences: the largest gap over ``T'``
    between the mean over heads of ``rho`` and of ``rho_hat`` (``X + W Z``), over the range of
    the empirical curve across ``T'``.

    Each stratum is one pair's ``approximation_by_sequence`` rows at every ``T'``, resampled on
    its own; a pooled row's curves average the heads of every stratum, as the summary's pooled
    rows do. The strata must share their ``T'``. A flat empirical curve gives ``inf`` (0 without
    a gap)."""
    lengths: list[int] | None = None
    rho_sum = rho_hat_sum = np.zeros(0)
    n_heads = 0
    for frame in strata:
        found = sorted(frame["context_length"].unique().to_list())
        if lengths is not None and found != lengths:
            raise ValueError(
                f"approximation_by_sequence: the strata's T' differ ({lengths}, {found})"
            )
        if lengths is None:
            rho_sum = np.zeros((n_resamples + 1, len(found)))
            rho_hat_sum = np.zeros((n_resamples + 1, len(found)))
        lengths = found
        cells = ["context_length", "layer", "head"]  # T' first: (rows, T', heads)
        for rows, rho, rho_hat in _resampled_rho(frame, cells, n_resamples, rng):
            per_length = (rho.shape[0], len(found), -1)
            rho_sum[rows] += rho.reshape(per_length).sum(-1)
            rho_hat_sum[rows] += rho_hat.reshape(per_length).sum(-1)
        n_heads += frame.select("layer", "head").n_unique()
    if lengths is None:
        raise ValueError("relative_offset_draws needs at least one stratum")
    curve, approximation = rho_sum / n_heads, rho_hat_sum / n_heads  # (1 + B, L)
    offset = np.abs(curve - approximation).max(axis=1)
    span = curve.max(axis=1) - curve.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(span > 0, offset / span, np.where(offset == 0, 0.0, np.inf))
    return float(ratio[0]), ratio[1:]


def layer_similarity_draws(
    strata: Sequence[pl.DataFrame], n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Every layer ``rho`` (App. E.1, Fig. 4: the average cosine of a layer's tokens before and
    after its attention update, a mean over sequences) at every layer and ``T'`` of every
    stratum, on the sample and on ``n_resamples`` resamples of the sequences: ``(C,)`` and
    ``(n_resamples, C)``; the smallest of them is the summary's ``min_rho_layers``, bounded by
    their simultaneous intervals
    (:func:`sinkscope.claims.resampling.simultaneous_sequence_intervals`).

    Each stratum is one pair's ``layers_by_sequence`` rows; a drawn sequence brings its
    ``rho_before`` and ``rho_after`` at every layer and ``T'``."""
    parts = []
    for frame in strata:
        cols = sequence_columns(
            frame, ["rho_before", "rho_after"], ["layer", "context_length"], "layers_by_sequence"
        )
        values = np.hstack([cols["rho_before"], cols["rho_after"]])  # (N, 2 x cells)
        n_seq = values.shape[0]
        counts = sample_and_resample_counts(n_seq, n_resamples, rng)
        parts.append(counts @ values / n_seq)
    if not parts:
        raise ValueError("layer_similarity_draws needs at least one stratum")
    rho = np.hstack(parts)
    return rho[0], rho[1:]


def head_mean_draws(
    unit_value: pl.Expr, dense_threshold: float | None = None
) -> Callable[[Sequence[pl.DataFrame], int, np.random.Generator], tuple[float, np.ndarray]]:
    """The draws of one of §5's head means (Figs. 2 right, 6), for
    :func:`sinkscope.claims.resampling.sequence_interval`: the mean over the strata's heads of
    ``unit_value`` (an expression of ``heads_by_sequence``'s columns, e.g. the summary's
    :data:`~sinkscope.oversmoothing.summary.INCREASE_ATTN_S`), each head's value the mean of
    the drawn sequences' values; with ``dense_threshold``, the mean over the heads whose mean
    uniformity over the drawn sequences exceeds it minus the mean over all heads (a resample
    without such a head is left out).

    Each stratum is one pair's ``heads_by_sequence`` rows; a pooled row's heads are its pairs'
    heads together, as the summary's pooled row counts them. The ``_s`` values' ``s_l`` pools
    the pair's sequences and is held fixed (module docstring). On the sample (every sequence
    once) the statistic is the summary's."""

    def draws(
        strata: Sequence[pl.DataFrame], n_resamples: int, rng: np.random.Generator
    ) -> tuple[float, np.ndarray]:
        means, dense = [], []
        for frame in strata:
            cols = sequence_columns(
                frame.with_columns(unit_value.alias("unit_value")),
                ["unit_value", "uniformity"],
                ["layer", "head"],
                "heads_by_sequence",
            )
            n_seq = cols["unit_value"].shape[0]
            counts = sample_and_resample_counts(n_seq, n_resamples, rng)
            means.append(counts @ cols["unit_value"] / n_seq)  # (1 + B, heads)
            if dense_threshold is not None:
                dense.append(counts @ cols["uniformity"] / n_seq > dense_threshold)
        if not means:
            raise ValueError("head_mean_draws needs at least one stratum")
        values = np.hstack(means)
        statistic = values.mean(axis=1)
        if dense_threshold is not None:
            on = np.hstack(dense)
            n_on = on.sum(axis=1)
            dense_mean = np.divide(
                (values * on).sum(axis=1), n_on, out=np.full(len(n_on), np.nan), where=n_on > 0
            )
            statistic = dense_mean - statistic
        resampled = statistic[1:]
        return float(statistic[0]), resampled[np.isfinite(resampled)]

    return draws
