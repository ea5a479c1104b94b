"""The exact open-half-space test of one point set (Proposition 4.1, Appendix A): the solver,
its certified bracket, its time budget, and the two nulls (Wendel's probability and a Gaussian
sample of the same size, dimension and covariance).

A finite set ``S`` lies in an open half-space when some ``w`` has ``w . v > 0`` for every ``v``
in ``S``; by Gordan's theorem this is the case iff the origin is not in the convex hull of
``S``, and the largest margin of the unit-normalised set, ``gamma = max_{|w|=1} min_v w .
v/|v|``, is the distance from the origin to ``conv{v/|v|}``. The tables and counts built on this
test are :mod:`sinkscope.geometry.halfspace`.

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

Time budget
-----------
Entering and leaving the passive set updates the inverse of its block (``O(k^2)`` per step,
:class:`_PassiveInverse`), so a solve whose support grows to ``d`` costs ``O(d^3)`` rather than
``O(d^4)``. A solve may still be given ``max_seconds``: stopped there, it keeps its certified
bracket and reports ``solved`` False, and its ``halfspace`` is None (undecided) unless the
bracket's lower end already proves the set in a half-space. The budget is seconds on the
reference CPU of the job sizing, enforced as a number of active-set steps
(:func:`budget_steps`, :data:`STEP_S_PER_POINT2`), not by the clock: where a solve stops does
not depend on the machine or its load, so two runs of a config write the same table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

import numpy as np
import torch

__all__ = [
    "HALFSPACE_TOL",
    "NULL_STOP_FRACTION",
    "SET_RANK_RTOL",
    "STEP_S_PER_POINT2",
    "HalfspaceResult",
    "budget_steps",
    "gaussian_null_margin",
    "halfspace_from_unit",
    "halfspace_margin",
    "rank_from_singular_values",
    "set_ranks",
    "torch_threads",
    "wendel_probability",
]

#: A set lies in an open half-space iff its certified margin exceeds this (see module docstring).
HALFSPACE_TOL = 1e-9
#: Relative singular-value tolerance of the rank of a point set (``trivially_separable``).
SET_RANK_RTOL = 1e-6
#: A Gaussian-null solve stops once its certified margin bound is below this fraction of the
#: real set's certified margin (:func:`gaussian_null_margin`): the real margin then exceeds the
#: null's by at least a factor 2, decided, and the figures show the gap. Where the real set
#: lies in no half-space (margin 0) the null runs to its own budget. Measured on the default
#: run's long-context sets (margins 0.28-0.89): the bound falls below half the margin with 4-8
#: support points (0.1-0.3 s), where solving the null to its end takes 1.2-3 ``d_model`` steps.
NULL_STOP_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class HalfspaceResult:
    """Whether a finite point set lies in an open half-space, with its margin (Prop. 4.1).

    ``margin``: certified lower bound on ``gamma = max_{|w|=1} min_v w . v/|v|`` (0 when the set
    is not in an open half-space; None for an empty set); ``margin_upper``: upper bound (distance
    from the origin to the returned point of the hull); ``halfspace``: ``margin >
    HALFSPACE_TOL`` (None for an empty set: the condition is vacuous); ``rank``: numerical rank
    of the unit-normalised points (singular values ``> SET_RANK_RTOL * largest``);
    ``trivially_separable``: ``n_points <= dim`` and ``rank == n_points``; ``n_support``: points
    carrying the optimal hull point (the support vectors of the hard-margin separator);
    ``solved``: the solver reached its optimality conditions. A solve stopped by its budget
    (``max_seconds`` of :func:`halfspace_margin`, counted in steps) has ``solved`` False and keeps its certified
    bracket ``[margin, margin_upper]``; its ``halfspace`` is True when the bracket's lower end
    already proves it, None (undecided) otherwise.
    """

    n_points: int
    dim: int
    rank: int
    trivially_separable: bool
    halfspace: bool | None
    margin: float | None
    margin_upper: float | None
    n_support: int
    solved: bool = True


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


class _PassiveInverse:
    """The inverse of ``Q_PP``, the passive block of the active-set method, kept up to date as
    variables enter and leave the passive set ``P`` (``index``, in order of entry).

    Entry is a bordered-inverse update (Schur complement ``s = Q_jj - c^T Q_PP^-1 c``), departure
    the matching downdate; each costs ``O(k^2)`` for ``k`` passive variables, where solving
    ``Q_PP u_P = b_P`` from scratch costs ``O(k^3)`` (the whole solve: ``O(k^3)`` instead of
    ``O(k^4)``). A numerically singular entry (``s`` not above round-off) rebuilds the inverse
    with the pseudo-inverse, whose solution is the least-squares one; so does :meth:`rebuild`, called
    when the passive duals show drift.
    """

    def __init__(self, q: np.ndarray) -> None:
        self.q = q
        self.index = np.empty(0, dtype=np.int64)
        self.inverse = np.empty((0, 0))

    def add(self, j: int) -> None:
        c = self.q[self.index, j]
        v = self.inverse @ c
        s = float(self.q[j, j] - c @ v)
        self.index = np.append(self.index, j)
        if not s > 1e-12 * max(1.0, float(self.q[j, j])):
            self.rebuild()
            return
        k = v.size
        grown = np.empty((k + 1, k + 1))
        grown[:k, :k] = self.inverse + np.outer(v, v) / s
        grown[:k, k] = grown[k, :k] = -v / s
        grown[k, k] = 1.0 / s
        self.inverse = grown

    def remove(self, j: int) -> None:
        position = int(np.flatnonzero(self.index == j)[0])
        keep = np.arange(self.index.size) != position
        pivot = float(self.inverse[position, position])
        column = self.inverse[keep, position]
        self.index = self.index[keep]
        if pivot > 0:
            self.inverse = self.inverse[np.ix_(keep, keep)] - np.outer(column, column) / pivot
        else:  # cannot downdate a singular block's pseudo-inverse
            self.rebuild()

    def rebuild(self) -> None:
        sub = self.q[np.ix_(self.index, self.index)]
        try:
            self.inverse = np.linalg.inv(sub)
        except np.linalg.LinAlgError:
            self.inverse = np.linalg.pinv(sub)

    def solve(self, b: np.ndarray) -> np.ndarray:
        """``u_P`` with ``Q_PP u_P = b_P`` (least squares where ``Q_PP`` is singular)."""
        return self.inverse @ b[self.index]


#: Seconds of one active-set step of :func:`_nnls_gram` per squared point on the reference CPU
#: (the dual update ``b - Q u`` and the passive solves grow with ``n^2``). Measured on the
#: default run's long-context nulls (SmolLM2-135M, 1,440 points in d = 576, one thread of a
#: 2-core Intel Xeon shared with another job): 1.2-3.0 d steps in 2-11 s, 2.6e-9 s per step and
#: squared point; times the 2.2 the same jobs take on the reference CPU, rounded down to 4e-9
#: because that Intel machine was loaded.
STEP_S_PER_POINT2 = 4.0e-9


def budget_steps(max_seconds: float | None, n_points: int) -> int | None:
    """The active-set steps a solve of ``n_points`` may take within ``max_seconds`` on the
    reference CPU (None: no budget): ``floor(max_seconds / (STEP_S_PER_POINT2 n^2))``. A step
    count, unlike a clock, stops every run of a solve at the same place."""
    if max_seconds is None:
        return None
    return max(0, math.floor(max_seconds / (STEP_S_PER_POINT2 * max(n_points, 1) ** 2)))


def _nnls_gram(
    q: np.ndarray,
    b: np.ndarray,
    max_steps: int | None = None,
    stop_upper_below: float | None = None,
) -> tuple[np.ndarray, bool]:
    """Lawson-Hanson NNLS in normal-equation form: ``argmin_{u >= 0} u^T Q u / 2 - b^T u``.

    ``q`` symmetric positive semi-definite ``(n, n)`` (``E^T E`` of a least-squares problem
    ``min |E u - f|``), ``b = E^T f``. The active-set loop adds the variable of largest positive
    dual (``b - Q u``), solves the unconstrained problem on the passive set and steps back to
    the boundary when a passive variable would turn non-positive (Lawson & Hanson 1974, ch. 23;
    Bro & de Jong 1997, "FNNLS"), the passive solves by :class:`_PassiveInverse`. A variable
    whose own solution is non-positive on entry (possible only through round-off) is not admitted
    until the solution changes again. Returns ``(u, solved)``: ``solved`` is True when the loop
    stopped at the optimality conditions (no positive dual outside the passive set), False when
    it stopped after ``max_steps`` steps (one variable entering, or the final re-solve, per step)
    or at the cap of ``3 n + 10``; any ``u >= 0`` still gives a valid bracket (:func:`_certify`).

    ``stop_upper_below``: for the least-distance program of :func:`halfspace_from_unit` (``q = G +
    1 1^T``, ``b = 1``), also stop (``solved`` False) as soon as the hull point of the weights
    ``u`` is nearer the origin than this: ``|p|^2 = u^T G u / (1^T u)^2`` with ``u^T G u = u^T
    (b - dual) - (1^T u)^2``, read off the dual the loop keeps anyway (no extra product).
    """
    n = q.shape[0]
    u = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    dual = b.astype(np.float64).copy()
    scale = max(1.0, float(np.abs(q).max()), float(np.abs(b).max()))
    tol = 10.0 * np.finfo(np.float64).eps * n * scale
    system = _PassiveInverse(q)
    polished = False

    def settle() -> np.ndarray:
        """The passive solution, stepping back from ``u`` until every passive value is positive."""
        solution = system.solve(b)
        while system.index.size and solution.min() <= 0:
            # step from u towards the new solution until a passive variable hits zero
            blocking = solution <= 0
            current = u[system.index]
            step = float(np.min(current[blocking] / (current[blocking] - solution[blocking])))
            current = current + step * (solution - current)
            u[system.index] = current
            for leaving in system.index[current <= tol]:
                system.remove(int(leaving))
                passive[leaving] = False
            u[~passive] = 0.0
            solution = system.solve(b)
        return solution

    def spread(solution: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``u`` with the passive ``solution`` and its dual ``b - Q u``, from the passive columns
        of ``Q`` only (``n k`` for ``k`` passive variables instead of ``n^2``)."""
        full = np.zeros(n)
        full[system.index] = solution
        return full, b - q[:, system.index] @ solution

    for step in range(3 * n + 10):
        if max_steps is not None and step >= max_steps:
            return u, False
        candidates = np.where(passive, -np.inf, dual)
        j = int(np.argmax(candidates))
        if candidates[j] <= tol:
            if polished:
                return u, True
            # optimal on the updated inverse: solve the passive system afresh once, so that round-off
            # accumulated by the updates does not loosen the bracket, and go on if that moved
            polished = True
            system.rebuild()
            solution = settle()
            u, dual = spread(solution)
            continue
        system.add(j)
        passive[j] = True
        solution = system.solve(b)
        if solution[-1] <= 0:
            system.remove(j)
            passive[j] = False
            dual[j] = 0.0
            continue
        solution = settle()
        u, dual = spread(solution)
        if system.index.size and np.abs(dual[system.index]).max() > 1e3 * tol:
            # the updated inverse drifted: rebuild it and solve the passive system again
            system.rebuild()
            solution = settle()
            u, dual = spread(solution)
        if stop_upper_below is not None and _hull_norm(u, dual, b) < stop_upper_below:
            return u, False
    return u, False


def _hull_norm(u: np.ndarray, dual: np.ndarray, b: np.ndarray) -> float:
    """``|p|`` of the hull point of the least-distance weights ``u`` (:func:`_nnls_gram` with ``q
    = G + 1 1^T``): ``sqrt(u^T G u) / 1^T u``, ``u^T G u = u^T (b - dual) - (1^T u)^2``; inf
    for no weight. Only a stopping rule: the bracket is certified on the vectors
    (:func:`_certify`)."""
    total = float(u.sum())
    if total <= 0:
        return math.inf
    return math.sqrt(max(0.0, float(u @ (b - dual)) - total * total)) / total


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


def set_ranks(unit: np.ndarray, grams: np.ndarray) -> np.ndarray:
    """Numerical ranks of the point sets ``unit`` ``(B, n, d)`` (unit rows) whose Gram matrices
    are ``grams`` ``(B, n, n)``: from the Gram matrices while ``n <= d``
    (:func:`_gram_ranks`), from the ``d x d`` second-moment matrices ``U^T U`` otherwise (the same
    non-zero eigenvalues; ``O(n d^2)`` instead of ``O(n^3)``, which matters on the long
    sequences, ``n`` about 2.5 ``d``)."""
    _, n, d = unit.shape
    if n <= d:
        return _gram_ranks(grams)
    u = torch.from_numpy(np.ascontiguousarray(unit, dtype=np.float64))
    eig = torch.linalg.eigvalsh(u.transpose(1, 2) @ u).numpy()
    return rank_from_singular_values(np.sqrt(np.clip(eig, 0.0, None)), SET_RANK_RTOL)


def halfspace_from_unit(
    unit: np.ndarray,
    gram: np.ndarray,
    has_zero: bool,
    tol: float,
    rank: int | None = None,
    max_seconds: float | None = None,
    stop_below: float | None = None,
) -> HalfspaceResult:
    """:func:`halfspace_margin` on unit vectors ``(n, d)`` with their Gram matrix given.

    ``stop_below``: stop the solve (``solved`` False) as soon as its certified upper bound on the
    margin falls below this number: all that a comparison with a margin of at least it needs
    (:func:`gaussian_null_margin`). The returned bracket is certified as ever."""
    n, dim = unit.shape
    if n == 0:
        return HalfspaceResult(0, dim, 0, False, None, None, None, 0)
    if rank is None:
        with torch_threads(1):
            rank = int(set_ranks(unit[None], gram[None])[0])
    trivial = bool(n <= dim and rank == n and not has_zero)
    if has_zero:
        return HalfspaceResult(n, dim, rank, False, False, 0.0, 0.0, 0)
    # LDP min |w| s.t. V w >= 1 via NNLS on E = [V^T; 1^T], f = e_{d+1}: E^T E = G + 1 1^T,
    # E^T f = 1; the solution u is proportional to the hull weights of the min-norm point.
    weights, solved = _nnls_gram(
        gram + 1.0, np.ones(n), budget_steps(max_seconds, n), stop_upper_below=stop_below
    )
    if not weights.any():  # no step in the budget: only the trivial bracket [0, 1]
        return HalfspaceResult(n, dim, rank, trivial, None, 0.0, 1.0, 0, False)
    feasible, lower, upper = _certify(unit, weights, tol)
    return HalfspaceResult(
        n,
        dim,
        rank,
        trivial,
        feasible if (solved or feasible) else None,
        lower,
        upper,
        int(np.count_nonzero(weights)),
        solved,
    )


def halfspace_margin(
    points: np.ndarray,
    tol: float = HALFSPACE_TOL,
    max_seconds: float | None = None,
    stop_below: float | None = None,
    rank: int | None = None,
) -> HalfspaceResult:
    """Does ``{v_k}`` (rows of ``points``, shape ``(n, d)``) lie in an open half-space? (Prop. 4.1)

    Decides ``exists w: w . v_k > 0 for all k`` exactly (up to ``tol``, see the module
    docstring) and returns the optimal normalised margin ``gamma`` (the distance from the origin
    to the convex hull of the unit-normalised points) with a certified bracket. A zero row makes
    the set infeasible; an empty set is vacuous (``halfspace`` None). ``max_seconds``: a time
    budget for the solve in seconds on the reference CPU, enforced as a step count
    (:func:`budget_steps`; None: none); a solve that runs out of it reports ``solved`` False and
    its bracket, and leaves ``halfspace`` None unless the bracket's lower end proves it.
    ``stop_below`` and ``rank``: as :func:`halfspace_from_unit` (a given ``rank`` is not
    computed).
    """
    v = np.asarray(points, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"points must have shape (n, d), got {v.shape}")
    norms = np.linalg.norm(v, axis=1)
    has_zero = bool((norms == 0).any())
    unit = v / np.where(norms == 0, 1.0, norms)[:, None]
    return halfspace_from_unit(
        unit, unit @ unit.T, has_zero, tol, rank, max_seconds=max_seconds, stop_below=stop_below
    )


def gaussian_null_margin(
    points: np.ndarray,
    rng: np.random.Generator,
    tol: float = HALFSPACE_TOL,
    max_seconds: float | None = None,
    stop_below: float | None = None,
) -> HalfspaceResult:
    """The half-space test on a null sample of the same size and dimension as ``points``
    ``(n, d)``: ``n`` Gaussian points, centred at the origin, with the set's own empirical
    covariance (``G = R (V - mean V) / sqrt(n - 1)``, ``R`` an ``n x n`` standard normal matrix
    from ``rng``; given ``V``, each row of ``G`` is ``N(0, cov V)``).

    Such points are symmetric about the origin, so whether they lie in an open half-space has
    Wendel's probability (:func:`wendel_probability`) whatever the covariance; the margin does
    depend on it, and this sample gives the margin that chance alone reaches for the set's own
    spread. A real set's margin well above it is evidence of a common direction (Prop. 4.1's
    condition held by geometry); the same Boolean outcome at a similar margin is not.
    ``max_seconds``: the time budget of the solve (:func:`halfspace_margin`); ``stop_below``: stop
    it once its certified upper bound is below this (:func:`halfspace_from_unit`), e.g. a
    fraction of the real set's margin (:data:`NULL_STOP_FRACTION`): the comparison is then
    decided, and whether the sample lies in a half-space is Wendel's closed form anyway."""
    v = np.asarray(points, dtype=np.float64)
    n = v.shape[0]
    centred = v - v.mean(axis=0, keepdims=True)
    sample = rng.standard_normal((n, n)) @ centred / math.sqrt(max(n - 1, 1))
    return halfspace_margin(sample, tol, max_seconds, stop_below)


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
