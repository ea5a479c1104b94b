"""Geometry of the attention input: BOS alignment, sink representability, value ranks, switches.

Three analyses of the paper's geometric claims, each streamed over the layers of one activation
file (:mod:`sinkscope.h5layout`) and, within a layer, over blocks of sequences (peak memory:
a block's float64 work arrays plus ``O(N T)`` per-sequence results; issue 9), vectorised over
heads and sequences.

1. BOS alignment (§4, Figure 1, Proposition 4.1, Appendix A)
   ``bos_cosines``: the cosine between the BOS embedding ``z_0`` and every ``z_i`` (``i >= 1``) at
   the attention input. The paper's sufficient condition for a representable sink is
   ``z_0 . z_i <= 0`` for all ``i``; Figure 1 claims the maximum cosine stays below 0 in the
   middle layers. :func:`bos_max_readings` reads that maximum twice, over all positions (the
   paper's statement) and over positions ``>= 2``: the first text token
   (:data:`FIRST_TEXT_POSITION`) can be almost parallel to BOS (cosine ~0.99 in most layers of
   SmolLM2-135M) and then alone decides the first reading. The exact condition is Proposition 4.1 (proof in Appendix A): a bilinear score
   ``W`` with ``z_j^T W z_0 > z_j^T W z_i`` for all ``j in J`` and ``i in [T]`` exists iff

   * ``{z_0 - z_i : i in [T]}`` lies in an open half-space, and
   * ``{z_j : j in J}`` lies in an open half-space,

   where "a finite set ``S`` lies in an open half-space" means that some ``w`` has ``w . v > 0``
   for every ``v in S`` (for ``J`` empty the proposition is vacuous). By Gordan's theorem this is
   the case iff the origin is not in the convex hull of ``S``, and the largest achievable margin of
   the unit-normalised set, ``gamma = max_{|w|=1} min_v w . v/|v|``, equals the distance from the
   origin to ``conv{v/|v|}`` (:func:`halfspace_margin`). ``gamma`` is the cosine of the half-angle
   of the narrowest cone around ``w`` that holds the set: a continuous measure of how comfortably
   the condition holds. Both conditions are invariant under an invertible linear map of the
   embeddings (``w -> A^{-T} w``), so testing ``Z`` with the learnable RMSNorm gain is the same as
   testing the gain-free normalised input of the paper's §3 setting (gains are non-zero). The
   proposition allows any ``W`` in ``R^{d x d}``; a real head's ``W_Q^T W_K`` has rank at most
   ``head_dim`` and rotary positions make it position dependent, so "representable" here is the
   proposition's (necessary) geometric condition, not a statement about a particular head.

   Note: when the set has at most ``dim`` points and full rank, the condition holds trivially
   (solve ``V w = 1``); with ``T = 256`` tokens and ``d_model`` 576 (SmolLM2-135M) or 640
   (Gemma-3-270M) *every* generic sequence satisfies it, so the Boolean answer carries little
   information there and the margin is the informative number. The tables say so per row
   (``n_points``, ``dim``, ``rank``, ``trivially_separable``); :func:`representability_counts`
   counts the trivial (layer, sequence) pairs apart, and the claim is decided on the others
   only (not applicable when none is left).

   Long context (where the test can fail): :func:`halfspace_long_context` runs the model on a
   few sequences of ``T' > d_model`` tokens (default 2 x 1023, the StreamingLLM streams; config
   ``geometry.long_context``) and tests the two sets that need no attention probabilities,
   ``{z_0 - z_i}`` and ``{z_i : i in [T']}`` (every sink pattern, ``J = [T']``; a subset of a
   set in an open half-space is in it, so this implies the condition for every sink-attending
   ``J``; the attending set itself needs the sink heads' attention and is not tested there).
   With more points than dimensions no set is trivially separable, so the proposition is tested
   exactly as stated, any ``W`` in ``R^{d x d}``, and can fail (e.g. when ``z_0`` lies in the
   convex hull of the other tokens). :func:`sink_representable_statements` decides the claim
   there when the table exists (:func:`long_context_counts`), reporting the trivial and
   non-trivial counts at ``T`` beside it. Measured on the shared 2-core machine, one thread:
   ~40 s per pair for SmolLM2-135M (load 3 s, forward 11 s, 60 solves of 1023 points 19 s) and
   ~35 s for Gemma-3-270M; both hold in every (layer, sequence) pair on alice, with margins
   0.31-0.89 (the set is far from failing, not barely in a half-space).

2. Value-matrix rank (Appendix E.2, Figure 12): the numerical rank, at relative tolerance
   ``1e-3``, of each key/value head's matrix of value vectors over the first
   ``m = min(T + 1, head_dim)`` positions (BOS included; with causal attention a prefix is the
   same as a shorter sequence), divided by ``min(m, head_dim)``. Ranks are per key/value head:
   the query heads that share one have identical value matrices, so pooling over query heads
   would only repeat each matrix ``H / K`` times. Value vectors are recomputed in float32 from the
   stored float32 residual stream and weights (:func:`~sinkscope.h5layout.read_values`; schema 1
   stored them in float16, relative rounding ``2^-11``, already well below the ``1e-3`` tolerance).

3. Hard attention switch (§6, Proposition 6.1, Theorem C.1, Remark C.4): the norm of a head's
   BOS value-output vector ``W_O^h (W_V^h z_0 + b_V^h)`` relative to the median over the other
   tokens (the theory assumes ``W_VO x_0 = 0`` for sink heads), compared between sink and other
   heads by :func:`sink_value_norm_effect` (ratio of medians with a bootstrap interval over
   heads), and the BOS residual-stream norm relative to the other tokens (massive activations),
   per layer.

Sink-attending tokens ``J`` (configurable through ``attend_threshold``)
------------------------------------------------------------------------
In layer ``l`` and sequence ``n``, ``J`` is the set of tokens ``i >= 1`` whose attention
probability on BOS, ``A[n, h, i, 0]``, is ``>= attend_threshold`` (default 0.5) in at least one
head ``h`` of layer ``l`` that the head classification flags as a sink (``is_sink`` recomputed
from the masses with the given :class:`~sinkscope.heads.HeadClassThresholds`). A layer without
sink heads has ``J`` empty in every sequence; such rows get a null ``halfspace``/``margin`` for
the ``"attending"`` set and are left out of ``frac_sink_representable``. The point set
``"all_tokens"`` (``J = [T]``) asks whether *every* sink pattern is representable, the reading of
Figure 1 ("allowing each attention head to produce any sink pattern").

Feasibility test and tolerance
------------------------------
:func:`halfspace_margin` solves the minimum-norm-point problem over the convex hull exactly with
the Lawson-Hanson active-set method (finite termination; capped at ``3 n + 10`` steps, after
which the bracket below is still valid) applied to the least-distance program ``min |w| s.t.
V w >= 1`` (Lawson & Hanson, *Solving Least Squares Problems*, ch. 23), written on the Gram
matrix so that the cost depends on the number of points, not on ``d_model`` (scipy's LP solvers
are not a dependency of the project; this needs only numpy). It returns a certified bracket:
``margin`` is
``min_v w . v/|v|`` for the returned unit direction ``w`` (a lower bound on ``gamma`` that is
checked directly on the vectors), ``margin_upper`` is the norm of the returned hull point (an
upper bound). The set is declared to lie in an open half-space iff ``margin > HALFSPACE_TOL =
1e-9``: float64 round-off of the dot products of unit vectors is below ``d * eps ~ 1e-13``, four
orders of magnitude smaller, while any set that holds only with margin ``< 1e-9`` is degenerate
for all practical purposes (``Z`` is recomputed in float32 from ``X`` by
:func:`~sinkscope.h5layout.read_Z`; schema-1 files stored it in float16, relative rounding
``2^-11 ~ 4.9e-4``: compare the margin with such roundings to judge robustness). A zero vector
in the set (``z_i == z_0`` exactly, e.g. a repeated BOS token in layer 0 of a model without
absolute positions) makes the set infeasible by definition.

Exact pooling of the cosine distributions
-----------------------------------------
Figure 1 pools the cosines over four datasets. Each pair's table ``bos_cosine_hist`` holds a
fixed histogram (``COSINE_BINS = 2048`` equal bins on ``[-1, 1]``, width ``2^-10 ~ 9.8e-4``, only
non-empty bins stored), and ``bos_alignment`` holds the exact count, minimum, maximum, mean and
number of positive cosines. Summing histograms gives exactly the histogram of the pooled raw
cosines, so :func:`summarize` computes the pooled minimum, maximum, mean, count and fraction
above zero exactly and the pooled quartiles from the pooled histogram, to within one bin width
(never by averaging per-dataset quantiles). The per-pair quartiles are exact (from the raw
cosines). The histogram keeps the output size independent of ``N * T`` (at most 2048 rows per
layer) and CSV-friendly; storing raw cosines instead would give ``N * T * L`` rows per pair.
Value ranks, half-space margins and norm ratios are small per-sequence tables and are pooled
from their raw rows.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import h5py
import numpy as np
import polars as pl
import torch

from sinkscope.h5layout import (
    InputProjection,
    default_block_size,
    open_activations,
    read_layer,
)
from sinkscope.heads import DIAGONAL, OTHER, SINK, SINK_PREV, HeadClassThresholds, with_classes
from sinkscope.paths import GEOMETRY_LONG_CONTEXT_TABLES

__all__ = [
    "COSINE_BINS",
    "HALFSPACE_TOL",
    "LONG_CONTEXT_COLUMNS",
    "LONG_CONTEXT_POINT_SETS",
    "LONG_CONTEXT_TABLE",
    "POINT_SETS",
    "POOLED",
    "RANK_RTOL",
    "SET_RANK_RTOL",
    "TABLE_COLUMNS",
    "VO_CLASS_GROUPS",
    "VO_GROUP_DEFINITIONS",
    "HalfspaceResult",
    "analyze_file",
    "attending_tokens",
    "attention_inputs",
    "bos_cosines",
    "bos_max_readings",
    "bos_max_statement",
    "cosine_histogram",
    "halfspace_long_context",
    "halfspace_margin",
    "histogram_quantiles",
    "long_context_counts",
    "long_context_statement",
    "long_context_table",
    "middle_layers",
    "pool_bos_alignment",
    "rank_from_singular_values",
    "relative_bos_norm",
    "relative_rank",
    "representability_counts",
    "representability_statement",
    "row_norms",
    "sink_representable_statements",
    "sink_value_norm_effect",
    "summarize",
    "value_norm_statement",
    "value_output_factor",
    "value_output_norms",
    "value_rank_stats",
]

#: Name of the pooled pseudo-dataset (as in :mod:`sinkscope.heads`).
POOLED = "all"
#: Number of equal histogram bins of the cosines on [-1, 1] (bin width 2/2048 = 2^-10).
COSINE_BINS = 2048
#: A set lies in an open half-space iff its certified margin exceeds this (see module docstring).
HALFSPACE_TOL = 1e-9
#: Relative tolerance of the value-matrix rank (Appendix E.2): singular values > 1e-3 * largest.
RANK_RTOL = 1e-3
#: Relative singular-value tolerance of the rank of a point set (``trivially_separable``).
SET_RANK_RTOL = 1e-6
#: Sequences listed in ``value_rank_worst`` per file (per model in the summary).
N_WORST = 5
#: Spaces of the cosine analysis: the attention input Z (Figure 1) and the residual stream X.
SPACES: tuple[str, ...] = ("Z", "X")
#: The three point sets of the half-space test.
BOS_MINUS_TOKEN = "bos_minus_token"
ATTENDING = "attending"
ALL_TOKENS = "all_tokens"
POINT_SETS: tuple[str, ...] = (BOS_MINUS_TOKEN, ATTENDING, ALL_TOKENS)
#: The point sets of the long-context test (:func:`halfspace_long_context`): those that need no
#: attention probabilities.
LONG_CONTEXT_POINT_SETS: tuple[str, ...] = (BOS_MINUS_TOKEN, ALL_TOKENS)
#: Name of the long-context table of a pair (:func:`halfspace_long_context`).
LONG_CONTEXT_TABLE = GEOMETRY_LONG_CONTEXT_TABLES[0]
#: The config key of the long-context sequence length (named in errors).
LONG_CONTEXT_SEQ_LEN_KEY = "geometry.long_context.seq_len"
#: Position of the first text token (right after BOS). In SmolLM2-135M its normed input is
#: almost parallel to BOS (cosine ~0.99) in most layers although it draws little attention, so
#: Figure 1's maximum is read twice: over all positions and over positions >= 2.
FIRST_TEXT_POSITION = 1
#: Bootstrap of the sink / non-sink ratio of BOS value-output norms (:func:`sink_value_norm_effect`).
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0
BOOTSTRAP_LEVEL = 0.95


#: Columns of every table of :func:`analyze_file` (and, where named alike, :func:`summarize`).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "bos_alignment": (
        "model",
        "dataset",
        "space",
        "layer",
        "n_sequences",
        "context_length",
        "n_values",
        "min",
        "q1",
        "median",
        "q3",
        "max",
        "mean",
        "n_positive",
        "frac_positive",
        "max_below_zero",
        "max_sequence",
        "max_position",
        "max_excl_first",
    ),
    "bos_cosine_hist": (
        "model",
        "dataset",
        "space",
        "layer",
        "bin",
        "bin_lo",
        "bin_hi",
        "count",
    ),
    "halfspace": (
        "model",
        "dataset",
        "layer",
        "sequence",
        "point_set",
        "n_points",
        "dim",
        "rank",
        "trivially_separable",
        "halfspace",
        "margin",
        "margin_upper",
        "n_support",
        "n_sink_heads",
        "attend_threshold",
    ),
    "halfspace_layer": (
        "model",
        "dataset",
        "layer",
        "n_sequences",
        "context_length",
        "attend_threshold",
        "mean_n_sink_heads",
        "mean_n_attending",
        "n_with_attending",
        "frac_sink_representable",
        "frac_any_sink_representable",
        "frac_trivially_separable",
        "n_trivial_attending",
        "frac_sink_representable_nontrivial",
        *(f"{stat}_margin_{name}" for name in POINT_SETS for stat in ("min", "median")),
    ),
    "value_rank": (
        "model",
        "dataset",
        "layer",
        "kv_head",
        "sequence",
        "m",
        "n",
        "rank",
        "rel_rank",
        "sigma_ratio_min",
    ),
    "value_rank_worst": (
        "model",
        "dataset",
        "sequence",
        "m",
        "min_rel_rank",
        "mean_rel_rank",
        "min_layer",
        "min_kv_head",
        "n_unique_tokens",
        "n_repeated_tokens",
        "token_ids",
    ),
    "bos_value_norm": (
        "model",
        "dataset",
        "layer",
        "head",
        "kv_head",
        "n_sequences",
        "context_length",
        "bos_vo_norm",
        "median_vo_norm",
        "rel_bos_vo_norm",
        "rel_bos_vo_norm_min",
        "rel_bos_vo_norm_max",
        "rel_bos_value_norm",
        "bos_mass",
        "is_sink",
        "head_class",
    ),
    "bos_residual_norm": (
        "model",
        "dataset",
        "layer",
        "n_sequences",
        "context_length",
        "bos_norm",
        "median_norm",
        "rel_bos_norm",
        "rel_bos_norm_min",
        "rel_bos_norm_max",
    ),
}


# --------------------------------------------------------------------------------------------
# 1. BOS alignment (§4, Figure 1)


def _release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Layer after layer the float64 work arrays of a few MB each fragment glibc's heap (its mmap
    threshold adapts upwards), and the resident size creeps up by ~8 MB per layer although
    nothing is kept; trimming after each layer keeps the peak at about one layer's working set.
    """
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _blocks(n: int, size: int = 8) -> Iterator[slice]:
    """Consecutive slices of at most ``size`` sequences: float64 work copies stay small."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def row_norms(a: np.ndarray) -> np.ndarray:
    """Euclidean norms over the last axis, computed in float64 block by block (any float dtype)."""
    a = np.asarray(a)
    out = np.empty(a.shape[:-1], dtype=np.float64)
    for block in _blocks(a.shape[0]):
        out[block] = np.linalg.norm(a[block].astype(np.float64), axis=-1)
    return out


def bos_cosines(z_layer: np.ndarray) -> np.ndarray:
    """Cosine between BOS and every other token of one layer (§4, Figure 1), shape ``(N, T)``.

    ``z_layer``: ``(N, T1, D)`` embeddings (``Z^(l)`` or ``X^(l)``, any float dtype), position 0
    the BOS token. Entry ``[n, i - 1]`` is ``z_0 . z_i / (|z_0| |z_i|)`` for ``i = 1..T``,
    computed in float64 (a few sequences at a time). A zero vector has no direction: its cosines
    are NaN.
    """
    z = np.asarray(z_layer)
    if z.ndim != 3 or z.shape[1] < 2:
        raise ValueError(f"embeddings must have shape (N, T1 >= 2, D), got {z.shape}")
    cos = np.empty((z.shape[0], z.shape[1] - 1), dtype=np.float64)
    for block in _blocks(z.shape[0]):
        zb = z[block].astype(np.float64)
        norms = np.linalg.norm(zb, axis=-1)
        dots = np.einsum("nd,ntd->nt", zb[:, 0], zb[:, 1:])
        with np.errstate(divide="ignore", invalid="ignore"):
            cb = dots / (norms[:, :1] * norms[:, 1:])
        cb[(norms[:, :1] == 0) | (norms[:, 1:] == 0)] = np.nan
        cos[block] = np.clip(cb, -1.0, 1.0)
    return cos


def cosine_histogram(cos: np.ndarray, bins: int = COSINE_BINS) -> np.ndarray:
    """Counts of the finite values of ``cos`` in ``bins`` equal bins on ``[-1, 1]`` (int64).

    Bin ``k`` is ``[-1 + k w, -1 + (k + 1) w)`` with ``w = 2 / bins``; 1.0 falls in the last bin.
    """
    values = np.asarray(cos, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    index = np.floor((np.clip(values, -1.0, 1.0) + 1.0) * (bins / 2.0)).astype(np.int64)
    return np.bincount(np.clip(index, 0, bins - 1), minlength=bins)


def histogram_quantiles(
    counts: np.ndarray, probs: Sequence[float], vmin: float, vmax: float
) -> np.ndarray:
    """Quantiles (numpy's ``linear`` method) of data known only through a histogram on [-1, 1].

    The ``k``-th order statistic is placed at the centre of its share of its bin (values spread
    evenly within a bin), except the first and last, which are the exact ``vmin`` and ``vmax``;
    quantiles interpolate linearly between order statistics as :func:`numpy.quantile` does and
    are clipped to ``[vmin, vmax]``. The error is at most one bin width. Returns NaN for an
    empty histogram.
    """
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.full(len(probs), np.nan)
    width = 2.0 / counts.size
    cumulative = np.cumsum(counts)

    def order_statistic(rank: np.ndarray) -> np.ndarray:
        index = np.searchsorted(cumulative, rank, side="right")
        before = np.where(index > 0, cumulative[np.maximum(index - 1, 0)], 0)
        within = (rank - before + 0.5) / counts[index]
        value = -1.0 + (index + within) * width
        # the smallest and largest order statistics are known exactly
        return np.where(rank == 0, vmin, np.where(rank == total - 1, vmax, value))

    position = (total - 1) * np.asarray(probs, dtype=np.float64)
    lower = np.floor(position).astype(np.int64)
    upper = np.minimum(lower + 1, total - 1)
    frac = position - lower
    values = order_statistic(lower) * (1.0 - frac) + order_statistic(upper) * frac
    return np.clip(values, vmin, vmax)


def _cosine_rows(space: str, layer: int, cos: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """One ``bos_alignment`` row (exact statistics) and the histogram of one layer's cosines."""
    finite = np.isfinite(cos)
    values = cos[finite]
    row: dict[str, Any] = {"space": space, "layer": layer, "n_values": int(values.size)}
    if values.size:
        q1, median, q3 = np.quantile(values, [0.25, 0.5, 0.75])
        flat_max = int(np.nanargmax(np.where(finite, cos, -np.inf)))
        seq, pos = np.unravel_index(flat_max, cos.shape)
        n_positive = int((values > 0).sum())
        row.update(
            min=float(values.min()),
            q1=float(q1),
            median=float(median),
            q3=float(q3),
            max=float(values.max()),
            mean=float(values.mean()),
            n_positive=n_positive,
            frac_positive=n_positive / values.size,
            max_below_zero=bool(values.max() < 0.0),
            max_sequence=int(seq),
            max_position=int(pos) + 1,
        )
        rest = cos[:, 1:][np.isfinite(cos[:, 1:])]
        row["max_excl_first"] = float(rest.max()) if rest.size else None
    else:
        row.update(
            {k: None for k in ("min", "q1", "median", "q3", "max", "mean", "frac_positive")},
            n_positive=0,
            max_below_zero=None,
            max_sequence=None,
            max_position=None,
            max_excl_first=None,
        )
    return row, cosine_histogram(cos)


# --------------------------------------------------------------------------------------------
# Half-space test (Proposition 4.1, Appendix A)


@dataclasses.dataclass(frozen=True)
class HalfspaceResult:
    """Whether a finite point set lies in an open half-space, with its margin (Prop. 4.1).

    ``margin``: certified lower bound on ``gamma = max_{|w|=1} min_v w . v/|v|`` (0 when the set
    is not in an open half-space; None for an empty set); ``margin_upper``: upper bound (distance
    from the origin to the returned point of the hull); ``halfspace``: ``margin >
    HALFSPACE_TOL`` (None for an empty set: the condition is vacuous); ``rank``: numerical rank
    of the unit-normalised points (singular values ``> SET_RANK_RTOL * largest``);
    ``trivially_separable``: ``n_points <= dim`` and ``rank == n_points``; ``n_support``: points
    carrying the optimal hull point (the support vectors of the hard-margin separator).
    """

    n_points: int
    dim: int
    rank: int
    trivially_separable: bool
    halfspace: bool | None
    margin: float | None
    margin_upper: float | None
    n_support: int


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run torch linear algebra on ``n`` threads (restored afterwards).

    The analyses do many small and medium factorisations; on a shared 2-core machine a
    multi-threaded BLAS spends more time synchronising than computing (measured: a 256 x 256
    ``eigvalsh`` 4 ms single-threaded, 100 ms with two contended threads).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _passive_solve(
    q: np.ndarray, b: np.ndarray, passive: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the passive set and the unconstrained minimiser on it (``Q_PP u_P = b_P``)."""
    index = np.flatnonzero(passive)
    sub = q[np.ix_(index, index)]
    try:
        return index, np.linalg.solve(sub, b[index])
    except np.linalg.LinAlgError:
        return index, np.linalg.lstsq(sub, b[index], rcond=None)[0]


def _nnls_gram(q: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Lawson-Hanson NNLS in normal-equation form: ``argmin_{u >= 0} u^T Q u / 2 - b^T u``.

    ``q`` symmetric positive semi-definite ``(n, n)`` (``E^T E`` of a least-squares problem
    ``min |E u - f|``), ``b = E^T f``. The active-set loop adds the variable of largest positive
    dual (``b - Q u``), solves the unconstrained problem on the passive set and steps back to
    the boundary when a passive variable would turn non-positive (Lawson & Hanson 1974, ch. 23;
    Bro & de Jong 1997, "FNNLS"). A variable whose own solution is non-positive on entry
    (possible only through round-off) is not admitted until the solution changes again.
    """
    n = q.shape[0]
    u = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    dual = b.astype(np.float64).copy()
    scale = max(1.0, float(np.abs(q).max()), float(np.abs(b).max()))
    tol = 10.0 * np.finfo(np.float64).eps * n * scale
    for _ in range(3 * n + 10):
        candidates = np.where(passive, -np.inf, dual)
        j = int(np.argmax(candidates))
        if candidates[j] <= tol:
            break
        passive[j] = True
        index, solution = _passive_solve(q, b, passive)
        if solution[np.searchsorted(index, j)] <= 0:
            passive[j] = False
            dual[j] = 0.0
            continue
        while index.size and solution.min() <= 0:
            # step from u towards the new solution until a passive variable hits zero
            blocking = solution <= 0
            current = u[index]
            step = float(np.min(current[blocking] / (current[blocking] - solution[blocking])))
            current = current + step * (solution - current)
            u[index] = current
            passive[index[current <= tol]] = False
            u[~passive] = 0.0
            index, solution = _passive_solve(q, b, passive)
        u = np.zeros(n)
        u[index] = solution
        dual = b - q[:, index] @ solution
    return u


def _certify(vectors: np.ndarray, weights: np.ndarray, tol: float) -> tuple[bool, float, float]:
    """(halfspace, margin lower bound, margin upper bound) from hull weights ``weights >= 0``.

    The hull point ``p = sum_k weights_k v_k / sum_k weights_k`` bounds ``gamma <= |p|``; the
    direction ``w = p / |p|`` certifies ``gamma >= min_k w . v_k``, evaluated on the vectors.
    """
    total = float(weights.sum())
    if total <= 0:
        return False, 0.0, 0.0
    support = np.flatnonzero(weights)
    point = (weights[support] / total) @ vectors[support]
    upper = float(np.linalg.norm(point))
    if upper == 0.0:
        return False, 0.0, 0.0
    lower = float((vectors @ point).min()) / upper
    feasible = lower > tol
    return feasible, (lower if feasible else 0.0), upper


def rank_from_singular_values(sigma: np.ndarray, rtol: float) -> np.ndarray:
    """Number of singular values strictly greater than ``rtol`` times the largest (last axis).

    ``sigma``: ``(..., k)`` non-negative, any order. A zero (or empty) matrix has rank 0.
    """
    s = np.asarray(sigma, dtype=np.float64)
    if s.shape[-1] == 0:
        return np.zeros(s.shape[:-1], dtype=np.int64)
    largest = s.max(axis=-1, keepdims=True)
    return np.where(largest[..., 0] > 0, (s > rtol * largest).sum(axis=-1), 0).astype(np.int64)


def _gram_ranks(grams: np.ndarray) -> np.ndarray:
    """Numerical ranks of unit vectors from their Gram matrices ``(B, n, n)`` (SET_RANK_RTOL).

    A Cholesky factorisation of ``G - rtol^2 n I`` succeeds iff ``lambda_min(G) > rtol^2 n >=
    rtol^2 lambda_max`` (``lambda_max <= trace = n``), which proves full rank cheaply; the others
    get their eigenvalues (``sigma_k^2 = lambda_k``).
    """
    b, n, _ = grams.shape
    if n == 0:
        return np.zeros(b, dtype=np.int64)
    g = torch.from_numpy(np.ascontiguousarray(grams, dtype=np.float64))
    shift = (SET_RANK_RTOL**2) * n * torch.eye(n, dtype=torch.float64)
    _, info = torch.linalg.cholesky_ex(g - shift)
    ranks = np.full(b, n, dtype=np.int64)
    failed = np.flatnonzero(info.numpy() != 0)
    if failed.size:
        eig = torch.linalg.eigvalsh(g[torch.from_numpy(failed)]).numpy()
        sigma = np.sqrt(np.clip(eig, 0.0, None))
        ranks[failed] = rank_from_singular_values(sigma, SET_RANK_RTOL)
    return ranks


def _halfspace_from_unit(
    unit: np.ndarray,
    gram: np.ndarray,
    has_zero: bool,
    tol: float,
    rank: int | None = None,
) -> HalfspaceResult:
    """:func:`halfspace_margin` on unit vectors ``(n, d)`` with their Gram matrix given."""
    n, dim = unit.shape
    if n == 0:
        return HalfspaceResult(0, dim, 0, False, None, None, None, 0)
    if rank is None:
        with _torch_threads(1):
            rank = int(_gram_ranks(gram[None])[0])
    trivial = bool(n <= dim and rank == n and not has_zero)
    if has_zero:
        return HalfspaceResult(n, dim, rank, False, False, 0.0, 0.0, 0)
    # LDP min |w| s.t. V w >= 1 via NNLS on E = [V^T; 1^T], f = e_{d+1}: E^T E = G + 1 1^T,
    # E^T f = 1; the solution u is proportional to the hull weights of the min-norm point.
    weights = _nnls_gram(gram + 1.0, np.ones(n))
    feasible, lower, upper = _certify(unit, weights, tol)
    return HalfspaceResult(
        n, dim, rank, trivial, feasible, lower, upper, int(np.count_nonzero(weights))
    )


def halfspace_margin(points: np.ndarray, tol: float = HALFSPACE_TOL) -> HalfspaceResult:
    """Does ``{v_k}`` (rows of ``points``, shape ``(n, d)``) lie in an open half-space? (Prop. 4.1)

    Decides ``exists w: w . v_k > 0 for all k`` exactly (up to ``tol``, see the module
    docstring) and returns the optimal normalised margin ``gamma`` (the distance from the origin
    to the convex hull of the unit-normalised points) with a certified bracket. A zero row makes
    the set infeasible; an empty set is vacuous (``halfspace`` None).
    """
    v = np.asarray(points, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"points must have shape (n, d), got {v.shape}")
    norms = np.linalg.norm(v, axis=1)
    has_zero = bool((norms == 0).any())
    unit = v / np.where(norms == 0, 1.0, norms)[:, None]
    return _halfspace_from_unit(unit, unit @ unit.T, has_zero, tol)


def attending_tokens(bos_attention: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """The sink-attending set ``J`` per sequence as a mask ``(N, T)`` (module docstring).

    ``bos_attention``: ``(N, S, T)`` attention on BOS of tokens ``1..T`` in the ``S`` sink heads
    of one layer (``S`` may be 0). Token ``i`` is in ``J`` iff its BOS attention is
    ``>= threshold`` in at least one of them.
    """
    att = np.asarray(bos_attention)
    if att.ndim != 3:
        raise ValueError(f"BOS attention must have shape (N, S, T), got {att.shape}")
    if att.shape[1] == 0:
        return np.zeros((att.shape[0], att.shape[2]), dtype=bool)
    return (att.astype(np.float64) >= threshold).any(axis=1)


def _unit_rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows scaled to unit norm (zero rows left zero) and the mask of zero rows."""
    norms = np.linalg.norm(vectors, axis=-1)
    zero = norms == 0
    return vectors / np.where(zero, 1.0, norms)[..., None], zero


def _halfspace_layer_rows(
    z_layer: np.ndarray, attend: np.ndarray | None, tol: float = HALFSPACE_TOL
) -> list[dict[str, Any]]:
    """Rows of the ``halfspace`` table for one layer: 3 point sets per sequence.

    ``attend``: the sink-attending mask ``(N, T)`` of :func:`attending_tokens`, or None for the
    two sets that need no attention (:data:`LONG_CONTEXT_POINT_SETS`; the long-context test).
    Gram matrices and full-rank checks are batched over blocks of sequences (torch, one
    thread); the active-set solve runs per sequence and point set on the ``T x T`` Gram matrix.
    """
    z_all = np.asarray(z_layer)
    rows: list[dict[str, Any]] = []
    with _torch_threads(1):
        for block in _blocks(z_all.shape[0]):
            z = z_all[block].astype(np.float64)
            unit_tok, zero_tok = _unit_rows(z[:, 1:])
            unit_diff, zero_diff = _unit_rows(z[:, :1] - z[:, 1:])
            # both Gram matrices from one product R = Z Z^T (position 0 included):
            # (z0 - zi).(z0 - zj) = R00 - R0i - R0j + Rij; norms are computed on the vectors
            z_t = torch.from_numpy(z)
            r = torch.bmm(z_t, z_t.transpose(1, 2)).numpy()
            tok_norms = np.linalg.norm(z[:, 1:], axis=-1)
            diff_norms = np.linalg.norm(z[:, :1] - z[:, 1:], axis=-1)
            del z, z_t
            tok_scale = np.where(zero_tok, 1.0, tok_norms)
            diff_scale = np.where(zero_diff, 1.0, diff_norms)
            gram_tok = r[:, 1:, 1:] / (tok_scale[:, :, None] * tok_scale[:, None, :])
            r0 = r[:, 0, 1:]
            gram_diff = (r[:, :1, :1] - r0[:, :, None] - r0[:, None, :] + r[:, 1:, 1:]) / (
                diff_scale[:, :, None] * diff_scale[:, None, :]
            )
            del r
            rank_tok = _gram_ranks(gram_tok)
            rank_diff = _gram_ranks(gram_diff)
            for local, seq in enumerate(range(block.start, block.stop)):
                results = {
                    BOS_MINUS_TOKEN: _halfspace_from_unit(
                        unit_diff[local],
                        gram_diff[local],
                        bool(zero_diff[local].any()),
                        tol,
                        int(rank_diff[local]),
                    ),
                    ALL_TOKENS: _halfspace_from_unit(
                        unit_tok[local],
                        gram_tok[local],
                        bool(zero_tok[local].any()),
                        tol,
                        int(rank_tok[local]),
                    ),
                }
                if attend is not None:
                    members = np.flatnonzero(attend[seq])
                    # a subset of linearly independent vectors is independent: no factorisation
                    full = rank_tok[local] == unit_tok.shape[1]
                    results[ATTENDING] = _halfspace_from_unit(
                        unit_tok[local, members],
                        gram_tok[local][np.ix_(members, members)],
                        bool(zero_tok[local, members].any()),
                        tol,
                        rank=int(members.size) if full else None,
                    )
                for name in POINT_SETS if attend is not None else LONG_CONTEXT_POINT_SETS:
                    rows.append(
                        {"sequence": seq, "point_set": name, **dataclasses.asdict(results[name])}
                    )
    return rows


# --------------------------------------------------------------------------------------------
# 2. Value-matrix rank (Appendix E.2, Figure 12)


def relative_rank(
    matrices: np.ndarray, rtol: float = RANK_RTOL
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Numerical rank of a stack of matrices ``(..., m, n)`` at relative tolerance ``rtol``.

    Returns ``(rank, rel_rank, sigma_ratio_min)``: ``rank`` counts singular values strictly
    greater than ``rtol`` times the largest (0 for a zero matrix), ``rel_rank = rank / min(m,
    n)`` (Appendix E.2), ``sigma_ratio_min`` is the smallest over the largest singular value.
    Computed in float64.
    """
    a = np.asarray(matrices, dtype=np.float64)
    if a.ndim < 2 or min(a.shape[-2:]) == 0:
        raise ValueError(f"matrices must have shape (..., m, n) with m, n >= 1, got {a.shape}")
    with _torch_threads(1):
        sigma = torch.linalg.svdvals(torch.from_numpy(np.ascontiguousarray(a))).numpy()
    rank = rank_from_singular_values(sigma, rtol)
    largest = sigma.max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(largest > 0, sigma.min(axis=-1) / np.where(largest > 0, largest, 1), 0.0)
    return rank, rank / min(a.shape[-2:]), ratio


# --------------------------------------------------------------------------------------------
# 3. Hard attention switch (§6, Prop. 6.1, Remark C.4) and massive activations


def value_output_factor(w_o: np.ndarray) -> torch.Tensor:
    """Triangular factors ``R_h`` of ``W_O^h = Q_h R_h`` (float64, ``(H, min(D, hd), hd)``).

    ``|W_O^h v| = |R_h v|`` for every ``v``; computed once per layer and passed to
    :func:`value_output_norms` for each block of sequences.
    """
    w = torch.from_numpy(np.ascontiguousarray(w_o, dtype=np.float64))
    if w.ndim != 3:
        raise ValueError(f"W_O must have shape (H, D, hd), got {tuple(w.shape)}")
    with _torch_threads(1):
        return torch.linalg.qr(w, mode="r")[1]


def value_output_norms(
    values: np.ndarray, w_o: np.ndarray, factor: torch.Tensor | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Norms of every token's value and value-output vector per query head (§6).

    ``values``: ``(N, K, T1, hd)`` value vectors ``W_V z + b_V`` of the ``K`` key/value heads;
    ``w_o``: ``(H, D, hd)`` output maps (query head ``h`` uses kv head ``h // (H / K)``). Returns
    ``(value_norms, vo_norms)``, both ``(N, H, T1)`` float64: ``|v_t|`` and
    ``|W_O^h v_t| = |W_O^h (W_V^h z_t + b_V^h)|``, the latter through the triangular factor
    ``R_h`` of ``W_O^h = Q_h R_h`` (``|W_O v| = |R v|``, no ``D``-sized products); ``factor``:
    those ``R_h`` from :func:`value_output_factor`, if already computed for ``w_o``.
    """
    v = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    w = torch.from_numpy(np.ascontiguousarray(w_o, dtype=np.float64))
    if v.ndim != 4 or w.ndim != 3 or w.shape[2] != v.shape[3] or w.shape[0] % v.shape[1]:
        raise ValueError(f"incompatible values {tuple(v.shape)} and W_O {tuple(w.shape)}")
    n_kv, n_heads = v.shape[1], w.shape[0]
    group = n_heads // n_kv
    with _torch_threads(1):
        r = value_output_factor(w_o) if factor is None else factor  # (H, min(D, hd), hd)
        value_norms = torch.linalg.vector_norm(v, dim=-1)  # (N, K, T1)
        vo = [torch.linalg.vector_norm(v[:, h // group] @ r[h].T, dim=-1) for h in range(n_heads)]
        vo_norms = torch.stack(vo, dim=1)
    kv_of_head = np.arange(n_heads) // group
    return value_norms.numpy()[:, kv_of_head], vo_norms.numpy()


def relative_bos_norm(norms: np.ndarray) -> np.ndarray:
    """``norms[..., 0] / median(norms[..., 1:])``: BOS norm relative to the other tokens' median.

    ``norms``: ``(..., T1)`` with position 0 the BOS token. NaN where the median is 0.
    """
    a = np.asarray(norms, dtype=np.float64)
    median = np.median(a[..., 1:], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(median > 0, a[..., 0] / np.where(median > 0, median, 1.0), np.nan)


def middle_layers(n_layers: int) -> list[int]:
    """The "middle" layers of Figure 1's claim: all but the first and last quarter.

    Layers ``l`` with ``L/4 <= l < 3L/4`` (at least one layer).
    """
    lo, hi = math.ceil(n_layers / 4), math.ceil(3 * n_layers / 4)
    return list(range(lo, max(hi, lo + 1)))


# --------------------------------------------------------------------------------------------
# Per-file analysis


def _attr(attrs: h5py.AttributeManager, name: str) -> Any:
    if name not in attrs:
        raise ValueError(f"activation file lacks the attribute {name!r}")
    value = attrs[name]
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _head_classes(
    per_head: pl.DataFrame,
    model: str,
    dataset: str,
    n_layers: int,
    n_heads: int,
    thresholds: HeadClassThresholds,
) -> pl.DataFrame:
    """The file's rows of the head table with flags recomputed from the masses."""
    needed = ["layer", "head", "bos_mass", "diagonal_mass", "subdiagonal_mass"]
    missing = [c for c in needed if c not in per_head.columns]
    if missing:
        raise ValueError(f"per-head table lacks columns {missing}")
    frame = per_head
    for column, value in (("model", model), ("dataset", dataset)):
        if column in frame.columns:
            frame = frame.filter(pl.col(column) == value)
    frame = frame.select(needed).sort("layer", "head")
    expected = n_layers * n_heads
    if frame.height != expected or frame.select("layer", "head").is_duplicated().any():
        raise ValueError(
            f"per-head table has {frame.height} rows for {model}/{dataset}; expected one per "
            f"(layer, head), {expected} in all"
        )
    return with_classes(frame, thresholds).select(
        pl.col("layer", "head").cast(pl.Int64), *needed[2:], "is_sink", "head_class"
    )


def _frame(
    rows: list[dict[str, Any]] | dict[str, Any], name: str, ids: dict[str, Any]
) -> pl.DataFrame:
    frame = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    frame = frame.with_columns(*(pl.lit(v).alias(k) for k, v in ids.items()))
    return frame.select(TABLE_COLUMNS[name])


def _halfspace_layer(halfspace: pl.DataFrame, pooled: bool = False) -> pl.DataFrame:
    """Per-layer summary of ``halfspace`` rows per (model, dataset) or, ``pooled``, per model
    over all its datasets (``dataset = "all"``)."""
    if halfspace.height == 0:
        return pl.DataFrame(schema={c: pl.Null for c in TABLE_COLUMNS["halfspace_layer"]})
    wide = halfspace.pivot(
        on="point_set",
        index=["model", "dataset", "layer", "sequence", "n_sink_heads", "attend_threshold"],
        values=["halfspace", "margin", "n_points", "trivially_separable"],
        separator="|",
    )
    if pooled:
        wide = wide.with_columns(dataset=pl.lit(POOLED))
    keys = ["model", "dataset"]
    has_attending = pl.col(f"n_points|{ATTENDING}") > 0
    representable = pl.col(f"halfspace|{BOS_MINUS_TOKEN}") & pl.col(f"halfspace|{ATTENDING}")
    trivial_attending = pl.col(f"trivially_separable|{BOS_MINUS_TOKEN}") & pl.col(
        f"trivially_separable|{ATTENDING}"
    )
    aggs = [
        pl.len().cast(pl.Int64).alias("n_sequences"),
        pl.col("attend_threshold").first(),
        pl.col("n_sink_heads").cast(pl.Float64).mean().alias("mean_n_sink_heads"),
        pl.col(f"n_points|{ATTENDING}").cast(pl.Float64).mean().alias("mean_n_attending"),
        has_attending.sum().cast(pl.Int64).alias("n_with_attending"),
        (representable.filter(has_attending).cast(pl.Float64).mean()).alias(
            "frac_sink_representable"
        ),
        (pl.col(f"halfspace|{BOS_MINUS_TOKEN}") & pl.col(f"halfspace|{ALL_TOKENS}"))
        .cast(pl.Float64)
        .mean()
        .alias("frac_any_sink_representable"),
        (
            pl.col(f"trivially_separable|{BOS_MINUS_TOKEN}")
            & pl.col(f"trivially_separable|{ALL_TOKENS}")
        )
        .cast(pl.Float64)
        .mean()
        .alias("frac_trivially_separable"),
        (has_attending & trivial_attending).sum().cast(pl.Int64).alias("n_trivial_attending"),
        (
            representable.filter(has_attending & ~trivial_attending)
            .cast(pl.Float64)
            .mean()
            .alias("frac_sink_representable_nontrivial")
        ),
    ]
    for name in POINT_SETS:
        aggs += [
            pl.col(f"margin|{name}").min().alias(f"min_margin_{name}"),
            pl.col(f"margin|{name}").median().alias(f"median_margin_{name}"),
        ]
    return wide.group_by(*keys, "layer").agg(aggs).sort(*keys, "layer")


def analyze_file(
    h5_path: str | os.PathLike[str],
    per_head: pl.DataFrame,
    thresholds: HeadClassThresholds | None = None,
    attend_threshold: float = 0.5,
    block_size: int | None = None,
) -> dict[str, pl.DataFrame]:
    """All geometry tables of one activation file (one model x dataset pair).

    Streams over layers and, within a layer, over blocks of ``block_size`` sequences (default
    :func:`default_block_size`; the tables do not depend on it): ``Z``, ``X``, values and the
    BOS column of the sink heads' maps are read a block at a time, and only per-sequence
    results (``O(N T)`` numbers) are kept for the layer. ``per_head``: the head
    classification of this file
    (:func:`sinkscope.heads.classify_file`); rows of other model/dataset pairs are ignored and
    ``is_sink``/``head_class`` are recomputed from its masses with ``thresholds``.
    ``attend_threshold``: BOS attention that puts a token in ``J`` (module docstring).

    Returns tables (columns in :data:`TABLE_COLUMNS`), each with ``model`` and ``dataset``:

    * ``bos_alignment``: per space (``"Z"`` attention input, Figure 1; ``"X"`` residual stream,
      whose cosines equal those of the gain-free RMS-normalised input) and layer, the
      distribution of ``cos(z_0, z_i)`` over all sequences and tokens (exact quartiles; whiskers
      min/max), its mean, the count and fraction of positive cosines, ``max_below_zero`` (§4's
      claim) and where the maximum occurs.
    * ``bos_cosine_hist``: the non-empty bins of the fixed cosine histogram (exact pooling).
    * ``halfspace``: per (layer, sequence, point set) the Prop. 4.1 test (:class:`HalfspaceResult`
      fields, plus ``n_sink_heads`` of the layer and ``attend_threshold``).
    * ``halfspace_layer``: per layer the fraction of sequences (with ``J`` non-empty) whose sink
      is representable, the fraction where every sink pattern is (``J = [T]``), the fraction
      that is trivially separable, ``n_trivial_attending`` (sequences with ``J`` non-empty whose
      two sets are both trivially separable), ``frac_sink_representable_nontrivial`` (the
      representable fraction among the other sequences with ``J`` non-empty; null if none) and
      min/median margins per point set.
    * ``value_rank``: per (layer, kv_head, sequence) the value-matrix rank (Appendix E.2).
    * ``value_rank_worst``: the ``N_WORST`` sequences of lowest mean relative rank with their
      first ``m`` token ids (space-separated) and repeated-token counts.
    * ``bos_value_norm``: per (layer, head) BOS value-output norm vs. the other tokens (§6),
      with ``n_sequences``, ``context_length``, joined with ``bos_mass``, ``is_sink`` and
      ``head_class``.
    * ``bos_residual_norm``: per layer BOS residual-stream norm vs. the other tokens.
    """
    th = thresholds or HeadClassThresholds()
    if not 0.0 <= attend_threshold <= 1.0:
        raise ValueError(f"attend_threshold must be in [0, 1], got {attend_threshold}")
    with open_activations(h5_path) as handle:
        attrs = handle.attrs
        model, dataset = str(_attr(attrs, "model_name")), str(_attr(attrs, "dataset_name"))
        x_ds, probs_ds = handle["residual/X"], handle["attention/probs"]
        n_layers, n_seq, t1, _ = x_ds.shape
        n_heads = probs_ds.shape[2]
        n_kv, head_dim = int(attrs["n_kv_heads"]), int(attrs["head_dim"])
        context_length = t1 - 1
        ids = {"model": model, "dataset": dataset}
        heads = _head_classes(per_head, model, dataset, n_layers, n_heads, th)
        sink = heads["is_sink"].to_numpy().reshape(n_layers, n_heads)
        token_ids = handle["tokens/input_ids"][:]
        m = min(t1, head_dim)

        align_rows: list[dict[str, Any]] = []
        hist_rows: list[pl.DataFrame] = []
        half_rows: list[dict[str, Any]] = []
        rank_parts: list[pl.DataFrame] = []
        vo_parts: list[pl.DataFrame] = []
        resid_rows: list[dict[str, Any]] = []
        size = default_block_size(handle) if block_size is None else int(block_size)
        if size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        for layer in range(n_layers):
            sink_heads = np.flatnonzero(sink[layer])
            w_o = handle["weights/W_O"][layer]
            vo_factor = value_output_factor(w_o)
            projection = InputProjection.read(handle, layer)
            # per-sequence results of the layer, filled block by block (a few sequences of Z,
            # X, values and BOS attention are read at a time); the layer's statistics are
            # taken from the complete arrays, so they do not depend on the block size
            cos = {space: np.empty((n_seq, context_length)) for space in SPACES}
            x_norms = np.empty((n_seq, t1))
            rank = np.empty((n_seq, n_kv), dtype=np.int64)
            rel_rank = np.empty((n_seq, n_kv))
            ratio = np.empty((n_seq, n_kv))
            value_norms = np.empty((n_seq, n_heads, t1))
            vo_norms = np.empty((n_seq, n_heads, t1))
            for block in _blocks(n_seq, size):
                x = read_layer(x_ds, layer, block)
                z = projection.Z(x)  # float32; float64 copies made per block
                # 1. cosines in both spaces
                cos["Z"][block] = bos_cosines(z)
                cos["X"][block] = bos_cosines(x)
                # half-space test on Z with J from the layer's sink heads
                bos_att = np.zeros((z.shape[0], sink_heads.size, context_length), np.float32)
                if sink_heads.size:
                    bos_att[:] = read_layer(
                        probs_ds, layer, block, (slice(None), slice(1, None), 0)
                    )[:, sink_heads]
                attend = attending_tokens(bos_att, attend_threshold)
                for row in _halfspace_layer_rows(z, attend):
                    row.update(
                        sequence=row["sequence"] + block.start,
                        layer=layer,
                        n_sink_heads=int(sink_heads.size),
                        attend_threshold=attend_threshold,
                    )
                    half_rows.append(row)
                # massive activations on X
                x_norms[block] = row_norms(x)
                # 2. value ranks and 3. BOS value-output norms
                values = projection.values(z)  # (B, K, T1, hd)
                del z, x, bos_att, attend
                rank[block], rel_rank[block], ratio[block] = relative_rank(values[:, :, :m])
                value_norms[block], vo_norms[block] = value_output_norms(values, w_o, vo_factor)
                del values
            for space in SPACES:
                row, counts = _cosine_rows(space, layer, cos[space])
                align_rows.append(row)
                nonzero = np.flatnonzero(counts)
                hist_rows.append(
                    pl.DataFrame(
                        {
                            "space": [space] * nonzero.size,
                            "layer": np.full(nonzero.size, layer, dtype=np.int64),
                            "bin": nonzero.astype(np.int64),
                            "bin_lo": -1.0 + nonzero * (2.0 / COSINE_BINS),
                            "bin_hi": -1.0 + (nonzero + 1) * (2.0 / COSINE_BINS),
                            "count": counts[nonzero].astype(np.int64),
                        }
                    )
                )
            rel = relative_bos_norm(x_norms)
            resid_rows.append(
                {
                    "layer": layer,
                    "n_sequences": n_seq,
                    "context_length": context_length,
                    "bos_norm": float(x_norms[:, 0].mean()),
                    "median_norm": float(np.median(x_norms[:, 1:], axis=1).mean()),
                    "rel_bos_norm": float(np.nanmean(rel)),
                    "rel_bos_norm_min": float(np.nanmin(rel)),
                    "rel_bos_norm_max": float(np.nanmax(rel)),
                }
            )
            rank_parts.append(
                pl.DataFrame(
                    {
                        "layer": np.full(n_seq * n_kv, layer, dtype=np.int64),
                        "kv_head": np.tile(np.arange(n_kv, dtype=np.int64), n_seq),
                        "sequence": np.repeat(np.arange(n_seq, dtype=np.int64), n_kv),
                        "m": pl.Series([m] * (n_seq * n_kv), dtype=pl.Int64),
                        "n": pl.Series([head_dim] * (n_seq * n_kv), dtype=pl.Int64),
                        "rank": rank.ravel(),
                        "rel_rank": rel_rank.ravel(),
                        "sigma_ratio_min": ratio.ravel(),
                    }
                )
            )
            rel_vo = relative_bos_norm(vo_norms)  # (N, H)
            rel_v = relative_bos_norm(value_norms)
            vo_parts.append(
                pl.DataFrame(
                    {
                        "layer": np.full(n_heads, layer, dtype=np.int64),
                        "head": np.arange(n_heads, dtype=np.int64),
                        "kv_head": np.arange(n_heads, dtype=np.int64) // (n_heads // n_kv),
                        "n_sequences": np.full(n_heads, n_seq, dtype=np.int64),
                        "context_length": np.full(n_heads, context_length, dtype=np.int64),
                        "bos_vo_norm": vo_norms[:, :, 0].mean(axis=0),
                        "median_vo_norm": np.median(vo_norms[:, :, 1:], axis=-1).mean(axis=0),
                        "rel_bos_vo_norm": np.nanmean(rel_vo, axis=0),
                        "rel_bos_vo_norm_min": np.nanmin(rel_vo, axis=0),
                        "rel_bos_vo_norm_max": np.nanmax(rel_vo, axis=0),
                        "rel_bos_value_norm": np.nanmean(rel_v, axis=0),
                    }
                )
            )
            del cos, x_norms, value_norms, vo_norms
            _release_freed_memory()

    tables: dict[str, pl.DataFrame] = {}
    tables["bos_alignment"] = _frame(
        [{**r, "n_sequences": n_seq, "context_length": context_length} for r in align_rows],
        "bos_alignment",
        ids,
    )
    tables["bos_cosine_hist"] = (
        pl.concat(hist_rows)
        .with_columns(*(pl.lit(v).alias(k) for k, v in ids.items()))
        .select(TABLE_COLUMNS["bos_cosine_hist"])
    )
    halfspace = _frame(half_rows, "halfspace", ids).with_columns(
        pl.col("halfspace").cast(pl.Boolean),
        pl.col("margin", "margin_upper").cast(pl.Float64),
    )
    tables["halfspace"] = halfspace
    tables["halfspace_layer"] = (
        _halfspace_layer(halfspace)
        .with_columns(context_length=pl.lit(context_length, dtype=pl.Int64))
        .select(TABLE_COLUMNS["halfspace_layer"])
    )
    value_rank = (
        pl.concat(rank_parts)
        .with_columns(*(pl.lit(v).alias(k) for k, v in ids.items()))
        .select(TABLE_COLUMNS["value_rank"])
    )
    tables["value_rank"] = value_rank
    tables["value_rank_worst"] = _worst_sequences(value_rank, token_ids[:, :m], N_WORST)
    tables["bos_value_norm"] = (
        pl.concat(vo_parts)
        .join(
            heads.select("layer", "head", "bos_mass", "is_sink", "head_class"), on=["layer", "head"]
        )
        .with_columns(*(pl.lit(v).alias(k) for k, v in ids.items()))
        .select(TABLE_COLUMNS["bos_value_norm"])
        .sort("layer", "head")
    )
    tables["bos_residual_norm"] = _frame(resid_rows, "bos_residual_norm", ids)
    return tables


def _worst_sequences(value_rank: pl.DataFrame, prefixes: np.ndarray, k: int) -> pl.DataFrame:
    """The ``k`` sequences of lowest mean relative value rank, with their first ``m`` tokens."""
    per_seq = (
        value_rank.sort("rel_rank", "layer", "kv_head")
        .group_by("model", "dataset", "sequence")
        .agg(
            pl.col("m").first(),
            pl.col("rel_rank").min().alias("min_rel_rank"),
            pl.col("rel_rank").mean().alias("mean_rel_rank"),
            pl.col("layer").first().alias("min_layer"),
            pl.col("kv_head").first().alias("min_kv_head"),
        )
        .sort("mean_rel_rank", "min_rel_rank", "sequence")
        .head(k)
    )
    seqs = per_seq["sequence"].to_numpy()
    unique = [int(np.unique(prefixes[s]).size) for s in seqs]
    return per_seq.with_columns(
        n_unique_tokens=pl.Series(unique, dtype=pl.Int64),
        n_repeated_tokens=pl.Series([int(prefixes.shape[1]) - u for u in unique], dtype=pl.Int64),
        token_ids=pl.Series(
            [" ".join(map(str, prefixes[s].tolist())) for s in seqs], dtype=pl.String
        ),
    ).select(TABLE_COLUMNS["value_rank_worst"])


# --------------------------------------------------------------------------------------------
# Long-context half-space test (Proposition 4.1 where it can fail; issue 22)


#: Columns of :func:`halfspace_long_context`: those of ``halfspace`` without the two that describe
#: the sink heads' attention (``n_sink_heads``, ``attend_threshold``: no attention is computed),
#: plus ``seq_len`` (BOS included; ``n_points = seq_len - 1``).
LONG_CONTEXT_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "layer",
    "sequence",
    "seq_len",
    "point_set",
    "n_points",
    "dim",
    "rank",
    "trivially_separable",
    "halfspace",
    "margin",
    "margin_upper",
    "n_support",
)


@torch.no_grad()
def attention_inputs(model: torch.nn.Module, ids: torch.Tensor) -> list[np.ndarray]:
    """``Z^(l)`` of every decoder layer ``l``: what its query/key/value projections multiply.

    One forward pass of the transformer body (:func:`sinkscope.models.base_model`: no LM head,
    no cache, no gradients) over ``ids`` ``(B, T1)`` with ``output_hidden_states``;
    ``hidden_states[l]`` is the residual stream entering layer ``l`` and ``Z^(l) =
    norm_l(hidden_states[l])`` is computed by that layer's own input-norm module
    (``Architecture.input_norm``: ``input_layernorm``, GPT-2's ``ln_1``), i.e. the paper's §3
    attention input with the learnable gain (``Z`` of :meth:`sinkscope.h5layout.InputProjection.Z`).
    Returns one ``(B, T1, D)`` float32 array per layer.
    """
    from sinkscope.models import architecture_of, base_model, decoder_layers

    model.eval()
    norm_name = architecture_of(model).input_norm
    out = base_model(model)(input_ids=ids, output_hidden_states=True, use_cache=False)
    layers = decoder_layers(model)
    if len(out.hidden_states) != len(layers) + 1:
        raise ValueError(
            f"{type(model).__name__}: {len(out.hidden_states)} hidden states for "
            f"{len(layers)} layers; expected one per layer plus the final one"
        )
    return [
        getattr(layer, norm_name)(out.hidden_states[index]).float().cpu().numpy()
        for index, layer in enumerate(layers)
    ]


def halfspace_long_context(
    prepared_model_dir: str | os.PathLike[str],
    documents_parquet: str | os.PathLike[str],
    n_sequences: int,
    seq_len: int,
    seed: int,
    model_name: str,
    dataset_name: str,
    threads: int = 1,
    tol: float = HALFSPACE_TOL,
) -> pl.DataFrame:
    """Proposition 4.1's half-space test on ``n_sequences`` sequences of ``seq_len`` tokens.

    The sequences are the StreamingLLM analysis' streams (:func:`sinkscope.streaming.load_streams`
    with ``stream_length = seq_len``, ``n_streams = n_sequences`` and ``seed``: blocks of
    ``seq_len - 1`` corpus tokens, BOS prepended; the same streams when the three match); the
    model is loaded as that analysis loads it (float32, eager) and run once
    (:func:`attention_inputs`, ``threads`` torch threads). Per layer and sequence the sets
    ``{z_0 - z_i : i in [T']}`` and ``{z_i : i in [T']}`` (:data:`LONG_CONTEXT_POINT_SETS`,
    ``T' = seq_len - 1``) are tested exactly as at ``T = 256`` (:func:`halfspace_margin` on the
    Gram matrices). The sink-attending set ``J`` needs the sink heads' attention probabilities
    and is not tested here; ``{z_i : i in [T']}`` is the superset of every ``J`` (Figure 1's
    "any sink pattern": if it lies in an open half-space, so does every ``J``).

    With ``T' > d_model`` points no set can be trivially separable (its rank is at most
    ``d_model < n_points``), so the test can fail. A ``seq_len`` that does not exceed
    ``d_model + 1`` is not refused (GPT-2 medium and XL of the paper's config have ``d_model``
    >= their 1024 positions, so no ``seq_len`` could): the job logs a warning, every row says
    ``trivially_separable`` and :func:`sink_representable_statements` falls back to the
    extraction's sequences for that model. A ``seq_len`` beyond the model's
    ``max_position_embeddings`` is refused with an error that names
    :data:`LONG_CONTEXT_SEQ_LEN_KEY`. Returns the rows of :data:`LONG_CONTEXT_COLUMNS`.
    """
    import logging
    import time

    from sinkscope.models import model_shape
    from sinkscope.streaming import load_streams

    log = logging.getLogger(__name__)
    began = time.perf_counter()
    with _torch_threads(int(threads)):
        streams = load_streams(
            prepared_model_dir,
            documents_parquet,
            {"stream_length": int(seq_len), "n_streams": int(n_sequences), "seed": int(seed)},
        )
        shape = model_shape(streams.model.config)
        if seq_len - 1 <= shape.d_model:
            log.warning(
                "%s = %d: %s has d_model = %d, so %d tokens of full rank are trivially "
                "separable and the test cannot fail; the rows say so (trivially_separable) and "
                "the claim falls back to the extraction's sequences for this model",
                LONG_CONTEXT_SEQ_LEN_KEY,
                seq_len,
                model_name,
                shape.d_model,
                seq_len - 1,
            )
        if shape.max_positions and seq_len > shape.max_positions:
            raise ValueError(
                f"{LONG_CONTEXT_SEQ_LEN_KEY} = {seq_len} exceeds the {shape.max_positions} "
                f"positions of {model_name}; set it to at most {shape.max_positions}"
            )
        loaded = time.perf_counter()
        z_layers = attention_inputs(streams.model, streams.ids)
        forward = time.perf_counter()
        rows: list[dict[str, Any]] = []
        for layer, z in enumerate(z_layers):
            for row in _halfspace_layer_rows(z, None, tol):
                rows.append({**row, "layer": layer})
        solved = time.perf_counter()
    log.info(
        "%s/%s: %d sequences x %d tokens (offsets %s), d_model %d: load %.1f s, forward %.1f s, "
        "half-space solves %.1f s",
        model_name,
        dataset_name,
        streams.ids.shape[0],
        seq_len,
        streams.offsets,
        shape.d_model,
        loaded - began,
        forward - loaded,
        solved - forward,
    )
    return (
        pl.DataFrame(rows, infer_schema_length=None)
        .with_columns(
            model=pl.lit(model_name),
            dataset=pl.lit(dataset_name),
            seq_len=pl.lit(int(seq_len), dtype=pl.Int64),
            halfspace=pl.col("halfspace").cast(pl.Boolean),
            margin=pl.col("margin").cast(pl.Float64),
            margin_upper=pl.col("margin_upper").cast(pl.Float64),
        )
        .select(LONG_CONTEXT_COLUMNS)
        .sort("layer", "sequence", "point_set")
    )


# --------------------------------------------------------------------------------------------
# Cross-pair summaries


#: Columns of :func:`sink_value_norm_effect`.
EFFECT_SCHEMA: dict[str, Any] = {
    "model": pl.String,
    "dataset": pl.String,
    "n_datasets": pl.Int64,
    "n_sink": pl.Int64,
    "n_other": pl.Int64,
    "n_units": pl.Int64,
    "sink_median": pl.Float64,
    "other_median": pl.Float64,
    "ratio": pl.Float64,
    "ratio_lo": pl.Float64,
    "ratio_hi": pl.Float64,
    "ratio_dataset_min": pl.Float64,
    "ratio_dataset_max": pl.Float64,
    "n_boot": pl.Int64,
    "level": pl.Float64,
}


def _ordered_datasets(names: Sequence[str]) -> list[str]:
    """Distinct dataset names, sorted, the pooled ``"all"`` last."""
    return sorted(set(names), key=lambda name: (name == POOLED, name))


def bos_max_readings(
    bos_alignment: pl.DataFrame, bound: float = 0.0, space: str = "Z"
) -> pl.DataFrame:
    """Both readings of Figure 1's claim per model: the maximum cosine over all positions and
    over positions ``>= 2`` (without :data:`FIRST_TEXT_POSITION`), per layer pooled over the
    given rows' datasets (the maximum of maxima is exact), counted over all and middle layers.

    ``bos_alignment``: rows of :func:`analyze_file`'s or :func:`summarize`'s ``bos_alignment``
    (columns ``model, space, layer, max, max_excl_first, max_position, n_positive, n_values``).
    A layer is "below" when its maximum is ``< bound`` (paper: 0). Returns one row per model:
    ``n_layers``, ``middle_first``/``middle_last`` (:func:`middle_layers`), ``n_middle``;
    ``n_below_all``/``n_below_from2`` over all layers and ``n_mid_below_all``/
    ``n_mid_below_from2`` over the middle layers; the middle layers' largest maximum and its
    layer for each reading (``mid_max_all``, ``mid_max_all_layer``, ``mid_max_from2``,
    ``mid_max_from2_layer``); ``n_max_at_first`` / ``n_mid_max_at_first``: layers whose maximum
    over all positions sits at position 1; ``mid_frac_positive``: share of positive cosines in
    the middle layers. Figure 1's panel title and the claim ``geometry.bos_cosine_below_zero``
    both print these numbers.
    """
    needed = ["model", "space", "layer", "max", "max_excl_first", "max_position"]
    missing = [c for c in needed + ["n_positive", "n_values"] if c not in bos_alignment.columns]
    if missing:
        raise ValueError(f"bos_alignment lacks columns {missing}")
    frame = bos_alignment.filter(pl.col("space") == space)
    rows: list[dict[str, Any]] = []
    for model in sorted(set(frame["model"].to_list())):
        per_layer = (
            frame.filter(pl.col("model") == model)
            .sort("max", descending=True, nulls_last=True)
            .group_by("layer")
            .agg(
                pl.col("max").first(),
                pl.col("max_position").first(),
                pl.col("max_excl_first").cast(pl.Float64).fill_null(float("nan")).max(),
                pl.col("n_positive").sum(),
                pl.col("n_values").sum(),
            )
            .sort("layer")
        )
        layers = per_layer["layer"].to_list()
        middle = middle_layers(len(layers))
        mid = per_layer.filter(pl.col("layer").is_in(middle))
        full = per_layer["max"].to_numpy().astype(np.float64)
        from2 = per_layer["max_excl_first"].to_numpy().astype(np.float64)
        mid_full = mid["max"].to_numpy().astype(np.float64)
        mid_from2 = mid["max_excl_first"].to_numpy().astype(np.float64)
        at_first = per_layer["max_position"].to_numpy() == FIRST_TEXT_POSITION
        mid_at_first = mid["max_position"].to_numpy() == FIRST_TEXT_POSITION

        def worst(values: np.ndarray, frame: pl.DataFrame = mid) -> tuple[float | None, int | None]:
            if not np.isfinite(values).any():
                return None, None
            k = int(np.nanargmax(values))
            return float(values[k]), int(frame["layer"][k])

        mid_max_all, mid_max_all_layer = worst(mid_full)
        mid_max_from2, mid_max_from2_layer = worst(mid_from2)
        n_values = int(mid["n_values"].sum())
        rows.append(
            {
                "model": model,
                "space": space,
                "bound": float(bound),
                "n_layers": len(layers),
                "middle_first": middle[0],
                "middle_last": middle[-1],
                "n_middle": mid.height,
                "n_below_all": int((full < bound).sum()),
                "n_below_from2": int((from2 < bound).sum()),
                "n_mid_below_all": int((mid_full < bound).sum()),
                "n_mid_below_from2": int((mid_from2 < bound).sum()),
                "mid_max_all": mid_max_all,
                "mid_max_all_layer": mid_max_all_layer,
                "mid_max_from2": mid_max_from2,
                "mid_max_from2_layer": mid_max_from2_layer,
                "n_max_at_first": int(at_first.sum()),
                "n_mid_max_at_first": int(mid_at_first.sum()),
                "mid_frac_positive": (
                    float(mid["n_positive"].sum() / n_values) if n_values else None
                ),
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None)


def representability_counts(halfspace: pl.DataFrame) -> pl.DataFrame:
    """Proposition 4.1's test per model, trivial cases apart from the informative ones.

    ``halfspace``: per-sequence rows of :func:`analyze_file` (any number of datasets, pooled per
    model). A *case* is a (dataset, layer, sequence) whose sink heads have sink-attending
    tokens (``J`` non-empty); it is *trivial* when both sets, ``{z_0 - z_i}`` and ``{z_j : j
    in J}``, are ``trivially_separable`` (at most ``d_model`` points of full rank: some ``w``
    solves ``V w = 1``, so the half-space condition holds for every such set and the test
    cannot fail). Only the non-trivial cases can tell a representable sink from a
    non-representable one. The same split is made for "every sink pattern" (``J = [T]``,
    ``{z_0 - z_i}`` with ``{z_i}``) over all (dataset, layer, sequence) pairs. Columns:
    ``model, n_pairs, n_cases, n_trivial, n_nontrivial, n_representable,
    n_representable_nontrivial, frac_representable_nontrivial`` (null when no case is
    non-trivial), ``n_any_trivial, n_any_nontrivial, n_any_representable,
    n_any_representable_nontrivial, frac_any_representable_nontrivial, min_margin`` (smallest
    margin of ``{z_0 - z_i}`` and ``{z_i}``). The half-space figure's panel titles print these
    numbers, and the claim ``geometry.sink_representable`` where no long-context table decides
    it (:func:`sink_representable_statements`; on long-context rows the "every sink pattern"
    columns are :func:`long_context_counts`').
    """
    needed = [
        "model",
        "dataset",
        "layer",
        "sequence",
        "point_set",
        "n_points",
        "halfspace",
        "trivially_separable",
        "margin",
    ]
    missing = [c for c in needed if c not in halfspace.columns]
    if missing:
        raise ValueError(f"halfspace lacks columns {missing}")
    wide = halfspace.pivot(
        on="point_set",
        index=["model", "dataset", "layer", "sequence"],
        values=["halfspace", "trivially_separable", "n_points", "margin"],
        separator="|",
    )
    for name in POINT_SETS:  # a table may lack a point set entirely (e.g. no sink heads)
        for value, dtype in (
            ("halfspace", pl.Boolean),
            ("trivially_separable", pl.Boolean),
            ("n_points", pl.Int64),
            ("margin", pl.Float64),
        ):
            column = f"{value}|{name}"
            if column not in wide.columns:
                wide = wide.with_columns(pl.lit(None, dtype=dtype).alias(column))

    def col(value: str, name: str) -> pl.Expr:
        return pl.col(f"{value}|{name}")

    case = col("n_points", ATTENDING).fill_null(0) > 0
    trivial = (
        col("trivially_separable", BOS_MINUS_TOKEN) & col("trivially_separable", ATTENDING)
    ).fill_null(False)
    rep = (col("halfspace", BOS_MINUS_TOKEN) & col("halfspace", ATTENDING)).fill_null(False)
    any_trivial = (
        col("trivially_separable", BOS_MINUS_TOKEN) & col("trivially_separable", ALL_TOKENS)
    ).fill_null(False)
    any_rep = (col("halfspace", BOS_MINUS_TOKEN) & col("halfspace", ALL_TOKENS)).fill_null(False)

    def count(expr: pl.Expr, name: str) -> pl.Expr:
        return expr.sum().cast(pl.Int64).alias(name)

    counts = (
        wide.group_by("model")
        .agg(
            pl.len().cast(pl.Int64).alias("n_pairs"),
            count(case, "n_cases"),
            count(case & trivial, "n_trivial"),
            count(case & ~trivial, "n_nontrivial"),
            count(case & rep, "n_representable"),
            count(case & ~trivial & rep, "n_representable_nontrivial"),
            count(any_trivial, "n_any_trivial"),
            count(~any_trivial, "n_any_nontrivial"),
            count(any_rep, "n_any_representable"),
            count(~any_trivial & any_rep, "n_any_representable_nontrivial"),
            pl.min_horizontal(
                col("margin", BOS_MINUS_TOKEN).min(), col("margin", ALL_TOKENS).min()
            ).alias("min_margin"),
        )
        .sort("model")
    )
    return counts.with_columns(
        frac_representable_nontrivial=pl.when(pl.col("n_nontrivial") > 0).then(
            pl.col("n_representable_nontrivial") / pl.col("n_nontrivial")
        ),
        frac_any_representable_nontrivial=pl.when(pl.col("n_any_nontrivial") > 0).then(
            pl.col("n_any_representable_nontrivial") / pl.col("n_any_nontrivial")
        ),
    ).select(
        "model",
        "n_pairs",
        "n_cases",
        "n_trivial",
        "n_nontrivial",
        "n_representable",
        "n_representable_nontrivial",
        "frac_representable_nontrivial",
        "n_any_trivial",
        "n_any_nontrivial",
        "n_any_representable",
        "n_any_representable_nontrivial",
        "frac_any_representable_nontrivial",
        "min_margin",
    )


def long_context_counts(halfspace_long: pl.DataFrame) -> pl.DataFrame:
    """Proposition 4.1's test on long sequences per model (:func:`halfspace_long_context` rows).

    A *pair* is a (dataset, layer, sequence); the sink is representable for every pattern
    (``J = [T']``) when both ``{z_0 - z_i}`` and ``{z_i}`` lie in an open half-space. The counts
    are :func:`representability_counts`' "every sink pattern" columns (trivial pairs apart;
    with ``T' > d_model`` there are none), plus the necessary condition alone
    (``{z_0 - z_i}`` in a half-space: without it no non-empty ``J`` is representable). Columns:
    ``model, n_datasets, n_sequences`` (summed over datasets), ``seq_len, dim, n_pairs,
    n_trivial, n_nontrivial, n_representable_nontrivial, frac_representable_nontrivial`` (null
    when no pair is non-trivial), ``n_bos_halfspace_nontrivial, min_margin``.
    """
    needed = ["dataset", "sequence", "seq_len", "dim", "point_set", "halfspace"]
    missing = [c for c in needed if c not in halfspace_long.columns]
    if missing:
        raise ValueError(f"long-context halfspace table lacks columns {missing}")
    counts = representability_counts(halfspace_long)
    bos = halfspace_long.filter(pl.col("point_set") == BOS_MINUS_TOKEN)
    extra = bos.group_by("model").agg(
        pl.col("dataset").n_unique().cast(pl.Int64).alias("n_datasets"),
        pl.struct("dataset", "sequence").n_unique().cast(pl.Int64).alias("n_sequences"),
        pl.col("seq_len").max().cast(pl.Int64),
        pl.col("dim").max().cast(pl.Int64),
        (pl.col("halfspace").fill_null(False) & ~pl.col("trivially_separable"))
        .sum()
        .cast(pl.Int64)
        .alias("n_bos_halfspace_nontrivial"),
    )
    return (
        counts.join(extra, on="model", how="left")
        .select(
            "model",
            "n_datasets",
            "n_sequences",
            "seq_len",
            "dim",
            "n_pairs",
            pl.col("n_any_trivial").alias("n_trivial"),
            pl.col("n_any_nontrivial").alias("n_nontrivial"),
            pl.col("n_any_representable_nontrivial").alias("n_representable_nontrivial"),
            pl.col("frac_any_representable_nontrivial").alias("frac_representable_nontrivial"),
            "n_bos_halfspace_nontrivial",
            "min_margin",
        )
        .sort("model")
    )


def long_context_statement(counts: Mapping[str, Any]) -> str:
    """One row of :func:`long_context_counts` in words."""
    r = counts
    text = (
        f"long context (T' = {r['seq_len'] - 1} tokens > d_model = {r['dim']}; "
        f"{r['n_sequences']} sequences over {_count(r['n_datasets'], 'dataset')}; every sink "
        f"pattern, J = all tokens): {r['n_trivial']} of {r['n_pairs']} (layer, sequence) pairs "
        f"trivially separable; "
    )
    if r["n_nontrivial"]:
        text += (
            f"both sets lie in an open half-space in {r['n_representable_nontrivial']} of the "
            f"{r['n_nontrivial']} others ({100 * r['frac_representable_nontrivial']:.1f}%), "
            f"{{z_0 - z_i}} alone in {r['n_bos_halfspace_nontrivial']}"
        )
    else:
        text += "none is non-trivial"
    if r["min_margin"] is not None:
        text += f"; smallest margin {r['min_margin']:.3g}"
    return text


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


#: Columns of :func:`sink_representable_statements` (the ``sink_representable`` rows of the
#: summary's ``statements``).
STATEMENT_SCHEMA: dict[str, Any] = {
    "model": pl.String,
    "claim": pl.String,
    "value": pl.Float64,
    "statement": pl.String,
    "n_cases": pl.Int64,
    "n_trivial": pl.Int64,
    "basis": pl.String,
}
#: ``basis`` of a ``sink_representable`` statement: decided on the long sequences (every sink
#: pattern) or, without them, on the extraction's sequences (the sink-attending tokens).
BASIS_LONG_CONTEXT = "long_context"
BASIS_ATTENDING = "attending"


def sink_representable_statements(
    halfspace: pl.DataFrame, halfspace_long: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The ``sink_representable`` statement per model (read by ``geometry.sink_representable``).

    With long-context rows for a model (:func:`halfspace_long_context`) of which at least one
    pair is non-trivial, the statement is decided there (``basis = "long_context"``): ``value``
    = share of the non-trivial (dataset, layer, sequence) pairs where every sink pattern is
    representable (both sets in an open half-space; this implies it for every sink-attending
    ``J``), ``n_cases`` = pairs, ``n_trivial`` = trivially separable pairs
    (:func:`long_context_counts`); the sentence also gives the counts at the extraction's ``T``
    (:func:`representability_statement`, trivial cases apart). Otherwise (``basis =
    "attending"``) it is decided on the sink-attending tokens at ``T``
    (:func:`representability_counts`: ``value`` = share of non-trivial cases, null when none),
    and the sentence adds the long-context counts where there are any.
    """
    short = representability_counts(halfspace) if halfspace.height else None
    long = (
        long_context_counts(halfspace_long)
        if halfspace_long is not None and halfspace_long.height
        else None
    )
    models = set(short["model"].to_list()) if short is not None else set()
    models |= set(long["model"].to_list()) if long is not None else set()
    rows: list[dict[str, Any]] = []
    for model in sorted(models):
        s = short.filter(pl.col("model") == model) if short is not None else None
        at_t = (
            representability_statement(s.row(0, named=True)) if s is not None and s.height else None
        )
        lc = long.filter(pl.col("model") == model) if long is not None else None
        lr = lc.row(0, named=True) if lc is not None and lc.height else None
        if lr is not None and lr["n_nontrivial"]:
            r = lr
            text = long_context_statement(r)
            if at_t is not None:
                text += f"; at the extraction's T: {at_t}"
            rows.append(
                {
                    "model": model,
                    "claim": "sink_representable",
                    "value": r["frac_representable_nontrivial"],
                    "statement": f"{model}: {text}",
                    "n_cases": r["n_pairs"],
                    "n_trivial": r["n_trivial"],
                    "basis": BASIS_LONG_CONTEXT,
                }
            )
        elif s is not None and s.height:
            r = s.row(0, named=True)
            rows.append(
                {
                    "model": model,
                    "claim": "sink_representable",
                    "value": r["frac_representable_nontrivial"],
                    "statement": f"{model}: {at_t}"
                    + (f"; {long_context_statement(lr)}" if lr is not None else ""),
                    "n_cases": r["n_cases"],
                    "n_trivial": r["n_trivial"],
                    "basis": BASIS_ATTENDING,
                }
            )
    return pl.DataFrame(rows, schema=STATEMENT_SCHEMA)


def sink_value_norm_effect(
    bos_value_norm: pl.DataFrame,
    with_pooled: bool = True,
    n_boot: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = BOOTSTRAP_LEVEL,
) -> pl.DataFrame:
    """Effect size of §6's ``W_VO x_0 = 0``: sink heads' BOS value-output norm vs. other heads'.

    ``bos_value_norm``: per-head rows of :func:`analyze_file` (``rel_bos_vo_norm`` =
    ``|W_VO z_0| / median_i |W_VO z_i|`` averaged over sequences, ``is_sink`` from
    :func:`sinkscope.heads.with_classes`). Per (model, dataset) and, with ``with_pooled``, per
    model over all its datasets (``dataset = "all"``): the medians over sink and non-sink head
    instances, their ratio ``sink / other`` (the effect size; ``W_VO x_0 = 0`` is ratio 0, no
    difference is 1) and a percentile bootstrap interval at ``level`` from ``n_boot``
    resamples of the heads: the unit of resampling is the head ``(layer, head)`` with all its
    dataset instances (the same head measured on four datasets is one unit, not four
    independent ones), and a head keeps its per-dataset ``is_sink`` label. ``ratio_dataset_min``
    / ``ratio_dataset_max``: the smallest and largest per-dataset ratio (the spread across
    datasets; equal to ``ratio`` on a single dataset). Each group uses a fresh generator seeded
    with ``seed``, so the numbers do not depend on what else is in the table. Columns:
    ``model, dataset, n_datasets, n_sink, n_other, n_units, sink_median, other_median, ratio,
    ratio_lo, ratio_hi, ratio_dataset_min, ratio_dataset_max, n_boot, level`` (statistics null
    when a group has no sink or no other head).
    """
    needed = ["model", "dataset", "layer", "head", "rel_bos_vo_norm", "is_sink"]
    missing = [c for c in needed if c not in bos_value_norm.columns]
    if missing:
        raise ValueError(f"bos_value_norm lacks columns {missing}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    frame = bos_value_norm.select(needed).filter(
        pl.col("rel_bos_vo_norm").is_not_null() & pl.col("rel_bos_vo_norm").is_finite()
    )

    def ratio_of(values: np.ndarray, sink: np.ndarray) -> float:
        if not sink.any() or sink.all():
            return float("nan")
        return float(np.median(values[sink]) / np.median(values[~sink]))

    def effect(part: pl.DataFrame) -> dict[str, Any]:
        part = part.sort("dataset", "layer", "head")
        values = part["rel_bos_vo_norm"].to_numpy().astype(np.float64)
        sink = part["is_sink"].to_numpy().astype(bool)
        units = (
            part.select(pl.struct("layer", "head").rank("dense").cast(pl.Int64) - 1)
            .to_series()
            .to_numpy()
        )
        n_units = int(units.max()) + 1 if units.size else 0
        per_dataset = [
            ratio_of(
                g["rel_bos_vo_norm"].to_numpy().astype(np.float64),
                g["is_sink"].to_numpy().astype(bool),
            )
            for _, g in part.group_by("dataset", maintain_order=True)
        ]
        finite = [r for r in per_dataset if math.isfinite(r)]
        ratio = ratio_of(values, sink)
        lo = hi = float("nan")
        if math.isfinite(ratio) and n_boot > 0:
            rng = np.random.default_rng(seed)
            draws = np.empty(n_boot)
            for b in range(n_boot):
                weight = np.bincount(rng.integers(n_units, size=n_units), minlength=n_units)
                take = np.repeat(np.arange(values.size), weight[units])
                draws[b] = ratio_of(values[take], sink[take])
            alpha = (1.0 - level) / 2.0
            lo, hi = (float(q) for q in np.nanquantile(draws, [alpha, 1.0 - alpha]))
        return {
            "n_datasets": int(part["dataset"].n_unique()),
            "n_sink": int(sink.sum()),
            "n_other": int((~sink).sum()),
            "n_units": n_units,
            "sink_median": float(np.median(values[sink])) if sink.any() else None,
            "other_median": float(np.median(values[~sink])) if (~sink).any() else None,
            "ratio": ratio if math.isfinite(ratio) else None,
            "ratio_lo": lo if math.isfinite(lo) else None,
            "ratio_hi": hi if math.isfinite(hi) else None,
            "ratio_dataset_min": min(finite) if finite else None,
            "ratio_dataset_max": max(finite) if finite else None,
            "n_boot": int(n_boot),
            "level": float(level),
        }

    rows: list[dict[str, Any]] = []
    for model in sorted(set(frame["model"].to_list())):
        by_model = frame.filter(pl.col("model") == model)
        datasets = _ordered_datasets(by_model["dataset"].to_list())
        for dataset in datasets:
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    **effect(by_model.filter(pl.col("dataset") == dataset)),
                }
            )
        if with_pooled:
            rows.append({"model": model, "dataset": POOLED, **effect(by_model)})
    return pl.DataFrame(rows, schema=EFFECT_SCHEMA)


def bos_max_statement(reading: Mapping[str, Any]) -> str:
    """Both readings of Figure 1's maximum, one row of :func:`bos_max_readings` in words."""
    b = reading
    bound = f"{b['bound']:g}"

    def at(value: float | None, layer: int | None) -> str:
        return "n/a" if value is None else f"{value:.3f} (layer {layer})"

    pct = "n/a" if b["mid_frac_positive"] is None else f"{100 * b['mid_frac_positive']:.1f}%"
    return (
        f"max cos(BOS, token) at the attention input in the middle layers "
        f"{b['middle_first']}..{b['middle_last']}: over all positions "
        f"{at(b['mid_max_all'], b['mid_max_all_layer'])}, below {bound} in "
        f"{b['n_mid_below_all']}/{b['n_middle']} middle layers ({b['n_below_all']}/"
        f"{b['n_layers']} layers); over positions >= 2 "
        f"{at(b['mid_max_from2'], b['mid_max_from2_layer'])}, below {bound} in "
        f"{b['n_mid_below_from2']}/{b['n_middle']} middle layers ({b['n_below_from2']}/"
        f"{b['n_layers']} layers); the maximum over all positions is at position "
        f"{FIRST_TEXT_POSITION} (the first text token after BOS) in {b['n_mid_max_at_first']}/"
        f"{b['n_middle']} middle layers; {pct} of the middle layers' cosines are > 0"
    )


def representability_statement(counts: Mapping[str, Any]) -> str:
    """One row of :func:`representability_counts` in words (trivial cases apart)."""
    r = counts
    if not r["n_cases"]:
        return "no (layer, sequence) pair has sink-attending tokens"
    text = (
        f"{r['n_cases']} (layer, sequence) pairs have sink-attending tokens; {r['n_trivial']} of "
        f"them are trivially separable (both sets have at most d_model points of full rank, so "
        f"Proposition 4.1's condition holds whatever the geometry); "
    )
    if r["n_nontrivial"]:
        text += (
            f"the condition holds in {r['n_representable_nontrivial']} of the "
            f"{r['n_nontrivial']} non-trivial pairs "
            f"({100 * r['frac_representable_nontrivial']:.1f}%)"
        )
    else:
        text += "none is non-trivial, so the test cannot fail at this T and d_model"
    text += (
        f"; every sink pattern (J = all tokens): {r['n_any_trivial']} of {r['n_pairs']} pairs "
        f"trivial, the condition holds in {r['n_any_representable_nontrivial']} of the "
        f"{r['n_any_nontrivial']} others"
    )
    if r["min_margin"] is not None:
        text += f"; smallest margin {r['min_margin']:.3g}"
    return text


def value_norm_statement(effect: Mapping[str, Any]) -> str:
    """One row of :func:`sink_value_norm_effect` in words."""
    e = effect

    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3g}"

    text = (
        f"median |W_VO z_0| / median_i |W_VO z_i|: {num(e['sink_median'])} over {e['n_sink']} "
        f"sink head instances (is_sink) vs {num(e['other_median'])} over {e['n_other']} other "
        f"head instances; ratio {num(e['ratio'])}"
    )
    if e["ratio_lo"] is not None:
        text += (
            f" ({100 * e['level']:.0f}% bootstrap interval over heads {num(e['ratio_lo'])}-"
            f"{num(e['ratio_hi'])})"
        )
    if e["ratio_dataset_min"] is not None and e["ratio_dataset_min"] != e["ratio_dataset_max"]:
        text += f"; per dataset {num(e['ratio_dataset_min'])}-{num(e['ratio_dataset_max'])}"
    return text


def value_rank_stats(value_rank: pl.DataFrame, with_pooled: bool = True) -> pl.DataFrame:
    """Per (model, dataset, layer) distribution of ``rel_rank`` (Figure 12), exact from raw rows.

    Pooled over kv heads and sequences; with ``with_pooled`` each model also gets rows with
    ``dataset = "all"`` pooled over its datasets. Columns: ``model, dataset, layer, n_matrices,
    m, min, q1, median, q3, max, mean, frac_full_rank``.
    """

    def stats(frame: pl.DataFrame) -> pl.DataFrame:
        r = pl.col("rel_rank")
        return frame.group_by("model", "dataset", "layer").agg(
            pl.len().cast(pl.Int64).alias("n_matrices"),
            pl.col("m").min(),
            r.min().alias("min"),
            r.quantile(0.25, "linear").alias("q1"),
            r.median().alias("median"),
            r.quantile(0.75, "linear").alias("q3"),
            r.max().alias("max"),
            r.mean().alias("mean"),
            (r >= 1.0).mean().alias("frac_full_rank"),
        )

    parts = [stats(value_rank)]
    if with_pooled:
        parts.append(stats(value_rank.with_columns(dataset=pl.lit(POOLED))))
    return pl.concat(parts).sort("model", pl.col("dataset") == POOLED, "dataset", "layer")


def pool_bos_alignment(pairs: Sequence[Mapping[str, pl.DataFrame]]) -> pl.DataFrame:
    """Pooled ``bos_alignment`` per (model, space, layer) over the datasets of each model.

    ``pairs``: mappings holding the ``bos_alignment`` and ``bos_cosine_hist`` tables of
    :func:`analyze_file`. Count, minimum, maximum, mean, positive count and fraction are exact;
    quartiles come from the summed histograms (:func:`histogram_quantiles`, error at most
    ``quantile_resolution`` = one bin width). ``dataset`` is ``"all"``.
    """
    align = pl.concat([p["bos_alignment"] for p in pairs], how="vertical_relaxed")
    hist = pl.concat([p["bos_cosine_hist"] for p in pairs], how="vertical_relaxed")
    keys = ["model", "space", "layer"]
    exact = (
        align.with_columns(_sum=pl.col("mean") * pl.col("n_values"))
        .sort("max", descending=True, nulls_last=True)
        .group_by(keys)
        .agg(
            pl.col("dataset").n_unique().cast(pl.Int64).alias("n_datasets"),
            pl.col("n_sequences").sum(),
            pl.col("context_length").max(),
            pl.col("n_values").sum(),
            pl.col("min").min(),
            pl.col("max").max(),
            (pl.col("_sum").sum() / pl.col("n_values").sum()).alias("mean"),
            pl.col("n_positive").sum(),
            pl.col("dataset").first().alias("max_dataset"),
            pl.col("max_sequence").first(),
            pl.col("max_position").first(),
            pl.col("max_excl_first").max(),
        )
    )
    rows: list[dict[str, Any]] = []
    for (model, space, layer), group in hist.group_by(keys):
        counts = np.zeros(COSINE_BINS, dtype=np.int64)
        np.add.at(counts, group["bin"].to_numpy(), group["count"].to_numpy())
        rows.append({"model": model, "space": space, "layer": layer, "_counts": counts})
    quartiles = []
    for row in rows:
        match = exact.filter(
            (pl.col("model") == row["model"])
            & (pl.col("space") == row["space"])
            & (pl.col("layer") == row["layer"])
        )
        vmin, vmax = float(match["min"][0]), float(match["max"][0])
        q1, median, q3 = histogram_quantiles(row["_counts"], [0.25, 0.5, 0.75], vmin, vmax)
        quartiles.append(
            {
                "model": row["model"],
                "space": row["space"],
                "layer": row["layer"],
                "q1": q1,
                "median": median,
                "q3": q3,
            }
        )
    quart = pl.DataFrame(quartiles).with_columns(pl.col("layer").cast(pl.Int64))
    return (
        exact.with_columns(pl.col("layer").cast(pl.Int64))
        .join(quart, on=keys, how="left")
        .with_columns(
            dataset=pl.lit(POOLED),
            frac_positive=pl.col("n_positive") / pl.col("n_values"),
            max_below_zero=pl.col("max") < 0.0,
            quantile_resolution=pl.lit(2.0 / COSINE_BINS),
        )
        .select(
            "model",
            "dataset",
            "n_datasets",
            *TABLE_COLUMNS["bos_alignment"][2:-3],
            "max_dataset",
            "max_sequence",
            "max_position",
            "max_excl_first",
            "quantile_resolution",
        )
        .sort("model", "space", "layer")
    )


#: Columns of :func:`sink_value_norm_effect` carried by the ``"is_sink"`` rows of the summary
#: table ``bos_value_norm_classes`` (null on the other groups' rows).
_EFFECT_COLUMNS = (
    "n_sink",
    "n_other",
    "sink_median",
    "other_median",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "ratio_dataset_min",
    "ratio_dataset_max",
    "n_units",
    "n_boot",
    "level",
)


#: ``definition`` of the two kinds of ``bos_value_norm_classes`` groups.
VO_GROUP_DEFINITIONS: dict[str, str] = {
    "head_class": "exclusive head_class of the class map (its sink excludes sink+previous)",
    "is_sink": "is_sink flag: bos_mass >= the sink threshold, sink+previous included",
}
#: Group names of the exclusive ``head_class`` labels in ``bos_value_norm_classes``: the class
#: map's legend names (:data:`sinkscope.plotting.CLASS_LEGEND_NAMES`, tested equal), so that its
#: "sink (not sink+previous)" group cannot be read as the ``is_sink`` group that the claim
#: ``geometry.sink_bos_value_small`` and the value-norm figure use.
VO_CLASS_GROUPS: dict[str, str] = {
    SINK: "sink (not sink+previous)",
    DIAGONAL: "diagonal",
    SINK_PREV: "sink+previous",
    OTHER: "other (no pattern)",
}


def _vo_classes(bos_value_norm: pl.DataFrame) -> pl.DataFrame:
    """Distribution of ``rel_bos_vo_norm`` per model, dataset (and ``"all"``) and head group.

    Groups (column ``definition``, :data:`VO_GROUP_DEFINITIONS`): every exclusive
    ``head_class``, named as in the class map's legend (:data:`VO_CLASS_GROUPS`: its sink group
    is ``"sink (not sink+previous)"``), and ``"is_sink"`` / ``"not_sink"``
    (:func:`sinkscope.heads.is_sink`: every head with ``bos_mass`` at the sink threshold,
    sink+previous included; the claim and the value-norm figure use these). The ``"is_sink"``
    rows also carry the effect size of :func:`sink_value_norm_effect` (ratio of the sink to the
    non-sink median with its bootstrap interval and per-dataset spread).
    """

    def stats(frame: pl.DataFrame, group: pl.Expr, definition: str) -> pl.DataFrame:
        r = pl.col("rel_bos_vo_norm")
        return (
            frame.with_columns(group=group, definition=pl.lit(VO_GROUP_DEFINITIONS[definition]))
            .group_by("model", "dataset", "group", "definition")
            .agg(
                pl.len().cast(pl.Int64).alias("n_heads"),
                r.quantile(0.25, "linear").alias("q1_rel_bos_vo_norm"),
                r.median().alias("median_rel_bos_vo_norm"),
                r.quantile(0.75, "linear").alias("q3_rel_bos_vo_norm"),
                pl.col("rel_bos_value_norm").median().alias("median_rel_bos_value_norm"),
                pl.col("bos_mass").mean().alias("mean_bos_mass"),
            )
        )

    both = pl.concat([bos_value_norm, bos_value_norm.with_columns(dataset=pl.lit(POOLED))])
    parts = [
        stats(
            both,
            pl.col("head_class").replace_strict(VO_CLASS_GROUPS, return_dtype=pl.String),
            "head_class",
        ),
        stats(
            both,
            pl.when(pl.col("is_sink")).then(pl.lit("is_sink")).otherwise(pl.lit("not_sink")),
            "is_sink",
        ),
    ]
    effect = sink_value_norm_effect(bos_value_norm).select("model", "dataset", *_EFFECT_COLUMNS)
    return (
        pl.concat(parts)
        .join(effect, on=["model", "dataset"], how="left")
        .with_columns(
            *(
                pl.when(pl.col("group") == "is_sink").then(pl.col(c)).alias(c)
                for c in _EFFECT_COLUMNS
            )
        )
        .sort("model", pl.col("dataset") == POOLED, "dataset", "group")
    )


def _statements(
    alignment: pl.DataFrame,
    halfspace_layer: pl.DataFrame,
    value_rank: pl.DataFrame,
    vo_classes: pl.DataFrame,
    residual: pl.DataFrame,
    halfspace: pl.DataFrame,
    halfspace_long: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per (model, claim) with a number and a sentence (pooled over datasets); the
    ``sink_representable`` row is :func:`sink_representable_statements`'."""
    rows: list[dict[str, Any]] = []
    readings = bos_max_readings(alignment)
    representable = sink_representable_statements(halfspace, halfspace_long)
    for model in sorted(set(alignment["model"].to_list())):
        b = readings.filter(pl.col("model") == model).row(0, named=True)
        rows.append(
            {
                "model": model,
                "claim": "bos_cosine_max_below_zero_middle_layers",
                "value": b["n_mid_below_all"] / b["n_middle"],
                "statement": bos_max_statement(b),
            }
        )
        middle = middle_layers(b["n_layers"])
        rows += representable.filter(pl.col("model") == model).to_dicts()
        v = value_rank.filter((pl.col("model") == model) & (pl.col("dataset") == POOLED))
        vm = v.filter(pl.col("layer").is_in(middle))
        rows.append(
            {
                "model": model,
                "claim": "value_rank_middle_layers",
                "value": float(vm["median"].median()),
                "statement": (
                    f"{model}: the relative rank of the value matrices (tolerance {RANK_RTOL:g}) "
                    f"has median {float(vm['median'].median()):.3f} and minimum "
                    f"{float(vm['min'].min()):.3f} in the middle layers, minimum "
                    f"{float(v['min'].min()):.3f} over all layers"
                ),
            }
        )
        c = vo_classes.filter(
            (pl.col("model") == model)
            & (pl.col("dataset") == POOLED)
            & (pl.col("group") == "is_sink")
        )
        sink_row = c.row(0, named=True) if c.height else None
        rows.append(
            {
                "model": model,
                "claim": "sink_heads_switch_off",
                "value": sink_row["ratio"] if sink_row else None,
                "statement": f"{model}: "
                + (value_norm_statement(sink_row) if sink_row else "no sink heads"),
            }
        )
        r = residual.filter(pl.col("model") == model).sort("rel_bos_norm", descending=True)
        rows.append(
            {
                "model": model,
                "claim": "massive_bos_activation",
                "value": float(r["rel_bos_norm"][0]),
                "statement": (
                    f"{model}: the BOS residual-stream norm reaches {float(r['rel_bos_norm'][0]):.1f}"
                    f"x the median token norm (layer {int(r['layer'][0])})"
                ),
            }
        )
    return pl.DataFrame(rows, schema=STATEMENT_SCHEMA)


def summarize(tables_by_pair: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Cross-pair summary tables, pooled exactly over the datasets of each model.

    ``tables_by_pair``: outputs of :func:`analyze_file`, each optionally with the pair's
    long-context table under :data:`LONG_CONTEXT_TABLE` (:func:`halfspace_long_context`; it
    decides the ``sink_representable`` statement of its model). Returns:

    * ``bos_alignment``: per (model, space, layer) with ``dataset = "all"``: exact count, min,
      max, mean and fraction positive; quartiles from the summed histograms (resolution
      ``quantile_resolution``); ``n_datasets`` and where the maximum occurs.
    * ``halfspace_layer``: the per-layer half-space summary recomputed from the pooled
      per-sequence rows (``dataset = "all"``).
    * ``value_rank``: :func:`value_rank_stats` per dataset and pooled (Figure 12).
    * ``value_rank_worst``: the ``N_WORST`` sequences of lowest mean relative rank per model.
    * ``bos_value_norm_classes``: per model, dataset (and ``"all"``) and head group (each
      exclusive ``head_class`` under its class-map name, e.g. ``"sink (not sink+previous)"``,
      plus the ``is_sink`` flag's ``"is_sink"``/``"not_sink"``; column ``definition`` says which
      rule a group follows) the distribution of the relative BOS
      value-output norm over head instances; the ``"is_sink"`` rows also carry the effect size
      of :func:`sink_value_norm_effect` (``ratio``, ``ratio_lo``, ``ratio_hi``, per-dataset
      spread).
    * ``bos_residual_norm``: per (model, layer) pooled over datasets (means weighted by
      sequences, exact min/max).
    * ``statements``: one sentence per model and claim with its key number (the
      ``sink_representable`` rows also ``n_cases``, ``n_trivial`` and ``basis`` of
      :func:`sink_representable_statements`).
    """
    if not tables_by_pair:
        raise ValueError("summarize needs the tables of at least one model x dataset pair")
    for pair in tables_by_pair:
        missing = [name for name in TABLE_COLUMNS if name not in pair]
        if missing:
            raise ValueError(f"a pair's tables lack {missing}")
        if (pair["bos_alignment"]["dataset"] == POOLED).any():
            raise ValueError(f"dataset name {POOLED!r} is reserved for pooled summaries")

    def cat(name: str) -> pl.DataFrame:
        return pl.concat([p[name] for p in tables_by_pair], how="vertical_relaxed")

    out: dict[str, pl.DataFrame] = {}
    out["bos_alignment"] = pool_bos_alignment(tables_by_pair)
    halfspace = cat("halfspace")
    context = cat("halfspace_layer").group_by("model").agg(pl.col("context_length").max())
    out["halfspace_layer"] = (
        _halfspace_layer(halfspace, pooled=True)
        .join(context, on="model", how="left")
        .select(TABLE_COLUMNS["halfspace_layer"])
    )
    value_rank = cat("value_rank")
    out["value_rank"] = value_rank_stats(value_rank)
    out["value_rank_worst"] = (
        cat("value_rank_worst")
        .sort("model", "mean_rel_rank", "min_rel_rank", "dataset", "sequence")
        .group_by("model", maintain_order=True)
        .head(N_WORST)
    )
    bos_value_norm = cat("bos_value_norm")
    out["bos_value_norm_classes"] = _vo_classes(bos_value_norm)
    resid = cat("bos_residual_norm")
    w = pl.col("n_sequences").cast(pl.Float64)
    out["bos_residual_norm"] = (
        resid.group_by("model", "layer")
        .agg(
            pl.col("n_sequences").sum(),
            pl.col("context_length").max(),
            *(
                ((pl.col(c) * w).sum() / w.sum()).alias(c)
                for c in ("bos_norm", "median_norm", "rel_bos_norm")
            ),
            pl.col("rel_bos_norm_min").min(),
            pl.col("rel_bos_norm_max").max(),
        )
        .with_columns(dataset=pl.lit(POOLED))
        .select(TABLE_COLUMNS["bos_residual_norm"])
        .sort("model", "layer")
    )
    out["statements"] = _statements(
        out["bos_alignment"],
        out["halfspace_layer"],
        out["value_rank"],
        out["bos_value_norm_classes"],
        out["bos_residual_norm"],
        halfspace,
        long_context_table(tables_by_pair),
    )
    return out


def long_context_table(tables_by_pair: Sequence[Mapping[str, pl.DataFrame]]) -> pl.DataFrame | None:
    """The pairs' :data:`LONG_CONTEXT_TABLE` tables concatenated (None when no pair has one)."""
    frames = [p[LONG_CONTEXT_TABLE] for p in tables_by_pair if LONG_CONTEXT_TABLE in p]
    return pl.concat(frames, how="vertical_relaxed") if frames else None
