"""Sink representability (§4, Proposition 4.1, Appendix A): the exact open-half-space test.

The exact condition is Proposition 4.1 (proof in Appendix A): a bilinear score ``W`` with
``z_j^T W z_0 > z_j^T W z_i`` for all ``j in J`` and ``i in [T]`` exists iff

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
only (not applicable when none is left). On long sequences (``T' > d_model``, where the test can
fail; :mod:`sinkscope.geometry.long_context`) :func:`long_context_counts` counts the pairs, and the claim is decided there when the table
exists (:func:`sinkscope.claims.checks.geometry.sink_representable_statements`).

Sink-attending tokens ``J`` (configurable through ``attend_threshold``)
------------------------------------------------------------------------
In layer ``l`` and sequence ``n``, ``J`` is the set of tokens ``i >= 1`` whose attention
probability on BOS, ``A[n, h, i, 0]``, is ``>= attend_threshold`` (default :data:`ATTEND_THRESHOLD`) in at least one
head ``h`` of layer ``l`` that the head classification flags as a sink (``is_sink`` recomputed
from the masses with the given :class:`~sinkscope.heads.classify.HeadClassThresholds`). A layer
without sink heads has ``J`` empty in every sequence; such rows get a null ``halfspace``/``margin``
for the ``"attending"`` set and are left out of ``frac_sink_representable``. The point set
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
:func:`~sinkscope.extraction.h5read.read_Z`; schema-1 files stored it in float16, relative rounding
``2^-11 ~ 4.9e-4``: compare the margin with such roundings to judge robustness). A zero vector
in the set (``z_i == z_0`` exactly, e.g. a repeated BOS token in layer 0 of a model without
absolute positions) makes the set infeasible by definition.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.config_schema import schema_default
from sinkscope.geometry.alignment import blocks
from sinkscope.geometry.names import (
    ALL_TOKENS,
    ATTENDING,
    BOS_MINUS_TOKEN,
    LONG_CONTEXT_POINT_SETS,
    NULL_PROBABILITY_MAX,
    POINT_SETS,
)
from sinkscope.text import plural

__all__ = [
    "ATTEND_THRESHOLD",
    "HALFSPACE_TOL",
    "PAIR_KEY",
    "RESULT_COLUMNS",
    "SET_RANK_RTOL",
    "HalfspaceResult",
    "attending_tokens",
    "halfspace_layer_rows",
    "halfspace_margin",
    "long_context_counts",
    "long_context_statement",
    "rank_from_singular_values",
    "representability_counts",
    "representability_statement",
    "torch_threads",
    "wendel_probability",
]

#: Default BOS attention that puts a token in ``J`` (Prop. 4.1): the config schema's
#: ``geometry.attend_threshold``.
ATTEND_THRESHOLD: float = schema_default("geometry", "attend_threshold")
#: A set lies in an open half-space iff its certified margin exceeds this (see module docstring).
HALFSPACE_TOL = 1e-9
#: Relative singular-value tolerance of the rank of a point set (``trivially_separable``).
SET_RANK_RTOL = 1e-6


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


#: The columns that name one (layer, sequence) pair of the half-space tables (``halfspace`` of
#: :func:`sinkscope.geometry.analysis.analyze_file` and the long-context table).
PAIR_KEY: tuple[str, ...] = ("model", "dataset", "layer", "sequence")
#: The columns of one :class:`HalfspaceResult` in those tables: its fields, in order.
RESULT_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HalfspaceResult))


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
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
        with torch_threads(1):
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


def wendel_probability(n_points: int, dim: int) -> float:
    """The chance that ``n_points`` random points in ``dim`` dimensions lie in an open half-space
    through the origin (Wendel 1962, "A problem in geometric probability", Math. Scand. 11:109-111):
    ``2^-(N-1) sum_{k<d} C(N-1, k)`` for any distribution symmetric about the origin with points
    in general position. It is 1 while ``N <= d``, about 1 up to ``N`` near ``2d``, and falls
    fast beyond: a half-space test on ``N`` tokens in ``d_model`` dimensions tells geometry from
    chance only where this null probability is small. Summed in log space (exact for any ``N``)."""
    if n_points < 1 or dim < 1:
        raise ValueError(f"need n_points >= 1 and dim >= 1, got {n_points}, {dim}")
    m = n_points - 1
    if dim > m:
        return 1.0
    log_terms = [
        math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1) for k in range(dim)
    ]
    top = max(log_terms)
    log_sum = top + math.log(sum(math.exp(t - top) for t in log_terms))
    return min(1.0, math.exp(log_sum - m * math.log(2.0)))


def attending_tokens(bos_attention: np.ndarray, threshold: float = ATTEND_THRESHOLD) -> np.ndarray:
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


def halfspace_layer_rows(
    z_layer: np.ndarray, attend: np.ndarray | None, tol: float = HALFSPACE_TOL
) -> list[dict[str, Any]]:
    """Rows of the ``halfspace`` table for one layer: 3 point sets per sequence.

    ``attend``: the sink-attending mask ``(N, T)`` of :func:`attending_tokens`, or None for the two
    sets that need no attention (:data:`~sinkscope.geometry.names.LONG_CONTEXT_POINT_SETS`; the
    long-context test). Gram matrices and full-rank checks are batched over blocks of sequences
    (torch, one thread); the active-set solve runs per sequence and point set on the ``T x T`` Gram
    matrix.
    """
    z_all = np.asarray(z_layer)
    rows: list[dict[str, Any]] = []
    with torch_threads(1):
        for block in blocks(z_all.shape[0]):
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


def representability_counts(halfspace: pl.DataFrame) -> pl.DataFrame:
    """Proposition 4.1's test per model, trivial cases apart from the informative ones.

    ``halfspace``: per-sequence rows of :func:`~sinkscope.geometry.analysis.analyze_file` (any
    number of datasets, pooled per model). A *case* is a (dataset, layer, sequence) whose sink heads
    have sink-attending tokens (``J`` non-empty); it is *trivial* when both sets, ``{z_0 - z_i}``
    and ``{z_j : j in J}``, are ``trivially_separable`` (at most ``d_model`` points of full rank:
    some ``w`` solves ``V w = 1``, so the half-space condition holds for every such set and the test
    cannot fail). Only the non-trivial cases can tell a representable sink from a non-representable
    one. The same split is made for "every sink pattern" (``J = [T]``, ``{z_0 - z_i}`` with
    ``{z_i}``) over all (dataset, layer, sequence) pairs. Columns: ``model, n_pairs, n_cases,
    n_trivial, n_nontrivial, n_representable, n_representable_nontrivial,
    frac_representable_nontrivial`` (null when no case is non-trivial), ``n_any_trivial,
    n_any_nontrivial, n_any_representable, n_any_representable_nontrivial,
    frac_any_representable_nontrivial, min_margin`` (smallest margin of ``{z_0 - z_i}`` and
    ``{z_i}``). The half-space figure's panel titles print these numbers, and the claim
    ``geometry.sink_representable`` where no long-context table decides it
    (:func:`sinkscope.claims.checks.geometry.sink_representable_statements`; on long-context
    rows the "every sink pattern" columns are :func:`long_context_counts`').
    """
    values = ["halfspace", "trivially_separable", "n_points", "margin"]
    missing = [c for c in (*PAIR_KEY, "point_set", *values) if c not in halfspace.columns]
    if missing:
        raise ValueError(f"halfspace lacks columns {missing}")
    wide = halfspace.pivot(
        on="point_set",
        index=[*PAIR_KEY],
        values=values,
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
    """Proposition 4.1's test on long sequences per model
    (:func:`~sinkscope.geometry.long_context.halfspace_long_context` rows).

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
        f"{r['n_sequences']} sequences over {plural(r['n_datasets'], 'dataset')}; every sink "
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
    null = wendel_probability(int(r["seq_len"]) - 1, int(r["dim"]))
    text += (
        f"; null: {r['seq_len'] - 1} random points in {r['dim']} dimensions lie in an open "
        f"half-space with probability {null:.3g} (Wendel)"
    )
    if null > NULL_PROBABILITY_MAX:
        text += ", so this length cannot tell the geometry from chance"
    return text


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
