"""Resampling of the oversmoothing analysis's per-sequence tables: the claims' intervals over
sequences (:mod:`sinkscope.claims.resampling`).

The pair's quantities that the claims read are means over its sequences: the per-head ``rho``
and eq. (2)'s coefficients (``approximation_by_sequence``, :mod:`.approximation`) and each
layer's ``rho`` before and after its update (``layers_by_sequence``, Fig. 4). A resample of
sequences weights each sequence by how often it was drawn
(:func:`sinkscope.claims.intervals.sample_and_resample_counts`), so a statistic is recomputed
exactly as an analysis of the drawn sequences would compute it. Each function takes the
pair tables of a claims row as strata, resampled each on its own (a row pooled over datasets
draws each dataset's sequences from that dataset), and returns the statistic on the sample and
on every resample.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from sinkscope.claims.intervals import sample_and_resample_counts
from sinkscope.oversmoothing.approximation import rho_hat_from_means
from sinkscope.oversmoothing.names import SEQUENCE_TERMS

__all__ = [
    "lowest_similarity_draws",
    "max_error_draws",
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


def max_error_draws(
    strata: Sequence[pl.DataFrame], n_resamples: int, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """The largest ``|rho - rho_hat|`` over the heads of ``strata`` (``X + W Z``), on the
    sample and on ``n_resamples`` resamples of its sequences.

    Each stratum is one pair's rows of the ``approximation_by_sequence`` table (columns
    ``layer, head, context_length, sequence, rho_xwz``, :data:`SEQUENCE_TERMS`, ``sum_xz,
    sum_zz``), read at its largest ``T'`` (Fig. 7's): per head
    the empirical ``rho`` is the mean of the drawn sequences' ``rho_xwz``, ``beta`` (per layer)
    is the ratio of their ``sum_xz`` and ``sum_zz``, ``rho_hat`` is
    :func:`~sinkscope.oversmoothing.approximation.rho_hat_from_means` of their terms. The
    maximum runs over every head of every stratum (a pooled row's heads are read once per
    dataset, as in the per-head table). Returns the sample's maximum and the
    ``(n_resamples,)`` maxima of the resamples."""
    lowest = -np.inf
    largest = np.full(n_resamples + 1, lowest)
    for frame in strata:
        frame = frame.filter(pl.col("context_length") == pl.col("context_length").max())
        rho, rho_hat = _resampled_rho(frame, ["layer", "head"], n_resamples, rng)  # (1 + B, P)
        largest = np.maximum(largest, np.abs(rho - rho_hat).max(axis=1))
    return float(largest[0]), largest[1:]


def _resampled_rho(
    frame: pl.DataFrame, cells: Sequence[str], n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of ``approximation_by_sequence`` (a head, or a head at one ``T'``): the empirical
    ``rho`` and eq. (2)'s ``rho_hat`` of ``X + W Z`` on the sample and on ``n_resamples``
    resamples of the sequences, ``(1 + B, C)`` each: ``rho`` the mean of the drawn sequences'
    ``rho_xwz``, ``beta`` the ratio of their ``sum_xz`` and ``sum_zz``, ``rho_hat``
    :func:`~sinkscope.oversmoothing.approximation.rho_hat_from_means` of their terms."""
    cols = sequence_columns(
        frame, ["rho_xwz", *SEQUENCE_TERMS, "sum_xz", "sum_zz"], cells, "approximation_by_sequence"
    )
    n_seq = cols["rho_xwz"].shape[0]
    terms = np.stack([cols[c] for c in SEQUENCE_TERMS], axis=-1)  # (N, C, 6)
    counts = sample_and_resample_counts(n_seq, n_resamples, rng)  # (1 + B, N)
    mean_terms = np.einsum("bn,nct->bct", counts, terms) / n_seq
    beta = (counts @ cols["sum_xz"]) / (counts @ cols["sum_zz"])  # per layer and T', per cell
    return counts @ cols["rho_xwz"] / n_seq, rho_hat_from_means(mean_terms, beta)


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
    rho_sum = rho_hat_sum = None
    n_heads = 0
    for frame in strata:
        found = sorted(frame["context_length"].unique().to_list())
        if lengths is not None and found != lengths:
            raise ValueError(
                f"approximation_by_sequence: the strata's T' differ ({lengths}, {found})"
            )
        lengths = found
        rho, rho_hat = _resampled_rho(frame, ["context_length", "layer", "head"], n_resamples, rng)
        per_length = (rho.shape[0], len(found), -1)  # cells sorted by T' first
        heads = rho.reshape(per_length).shape[-1]
        rho_part, hat_part = rho.reshape(per_length).sum(-1), rho_hat.reshape(per_length).sum(-1)
        rho_sum = rho_part if rho_sum is None else rho_sum + rho_part
        rho_hat_sum = hat_part if rho_hat_sum is None else rho_hat_sum + hat_part
        n_heads += heads
    if rho_sum is None or rho_hat_sum is None:
        raise ValueError("relative_offset_draws needs at least one stratum")
    curve, approximation = rho_sum / n_heads, rho_hat_sum / n_heads  # (1 + B, L)
    offset = np.abs(curve - approximation).max(axis=1)
    span = curve.max(axis=1) - curve.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(span > 0, offset / span, np.where(offset == 0, 0.0, np.inf))
    return float(ratio[0]), ratio[1:]


def lowest_similarity_draws(
    strata: Sequence[pl.DataFrame], n_resamples: int, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """The smallest layer ``rho`` (App. E.1, Fig. 4: the average cosine of a layer's tokens
    before and after its attention update, a mean over sequences) over every layer, ``T'`` and
    stratum, on the sample and on ``n_resamples`` resamples of the sequences: the summary's
    ``min_rho_layers`` and its bootstrap draws.

    Each stratum is one pair's ``layers_by_sequence`` rows; a drawn sequence brings its
    ``rho_before`` and ``rho_after`` at every layer and ``T'``."""
    lowest = np.full(n_resamples + 1, np.inf)
    for frame in strata:
        cols = sequence_columns(
            frame, ["rho_before", "rho_after"], ["layer", "context_length"], "layers_by_sequence"
        )
        values = np.hstack([cols["rho_before"], cols["rho_after"]])  # (N, 2 x cells)
        n_seq = values.shape[0]
        counts = sample_and_resample_counts(n_seq, n_resamples, rng)
        lowest = np.minimum(lowest, (counts @ values / n_seq).min(axis=1))
    return float(lowest[0]), lowest[1:]
