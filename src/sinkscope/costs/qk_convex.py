"""Minimum-nuclear-norm query-key matrices under enumerated attention margins (convex, certified).

With (near) one-hot attention, the query-key part of a block's cost decouples from the rest
(§7, proof of Theorem 7.1; Theorem D.1 parts 2 and 4): by the variational form of the nuclear
norm, ``min ||W_Q||_F^2 + ||W_K||_F^2`` over factorisations ``W_Q^T W_K = W`` equals
``2 ||W||_*``, so the query-key cost of a pattern is ``2 min ||W||_*`` subject to every
required logit margin.

A *margin program* lists "situations" ``g``: a query vector ``q_g``, a set of target keys
``T_g`` and a set of competing keys ``O_g`` that can all occur together with that query. It asks

    minimise ||W||_*  s.t.  x_q^T W x_k* - x_q^T W x_k >= 1   for all g, k* in T_g, k in O_g,
                            W[i, j] = 0                       for (i, j) in a fixed zero pattern.

Scores depend only on the (query vector, key vector) pair, so enumerating every pair that can
co-occur certifies the margin on *every* sequence. The solver is an augmented-Lagrangian method
whose inner problems are solved with FISTA (proximal step = singular value thresholding), on an
epigraph form ``S[q, k*] >= a_g``, ``S[q, k] <= b_g``, ``a_g - b_g >= 1``. After solving, the
matrix is projected onto the zero pattern, its worst margin is computed exactly by enumeration
and it is rescaled so that the minimum margin is exactly 1 (a certified feasible point, hence an
upper bound). The multipliers give a dual lower bound: for any weights ``w_g >= 0`` and
probability vectors ``alpha_g`` on ``T_g``, ``beta_g`` on ``O_g``, every feasible ``W`` satisfies
``<W, G> >= sum_g w_g`` with ``G = sum_g w_g x_q (sum alpha x_k* - sum beta x_k)^T`` (modified
arbitrarily on the zero pattern), hence ``||W||_* >= sum_g w_g / ||G||_2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sinkscope.costs.fitting import lbfgs

__all__ = ["MarginProgram", "MarginSolution", "exact_margins", "solve_margin_program"]


@dataclass(frozen=True)
class MarginProgram:
    """Enumerated margin constraints on a bilinear score ``S = X W X^T`` (float64 tensors).

    ``vectors``: (N, m) coordinates of the distinct embedding vectors (queries and keys).
    ``query``: (G,) index of the query vector of each situation.
    ``tgt``/``tgt_mask``: (G, A) padded indices of the target keys (all must win).
    ``oth``/``oth_mask``: (G, B) padded indices of the competing keys.
    ``zero_mask``: optional (m, m) bool, entries of ``W`` forced to zero (row = query side).
    ``orbits``: optional (m, m) long labels of the orbits of a permutation group acting on the
    coordinates under which the *full* program is invariant. Then ``W`` is restricted to the
    invariant matrices (orbit means; an optimal invariant solution exists because the program is
    convex and invariant) and the situations may be orbit representatives only: a feasible
    invariant ``W`` for the representatives is feasible for every situation, and the dual matrix
    is replaced by its group average (weights spread uniformly over each orbit).
    """

    vectors: Tensor
    query: Tensor
    tgt: Tensor
    tgt_mask: Tensor
    oth: Tensor
    oth_mask: Tensor
    zero_mask: Tensor | None = None
    orbits: Tensor | None = None

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def n_pairs(self) -> int:
        """Number of (situation, target key, competing key) constraints."""
        return int((self.tgt_mask.sum(1) * self.oth_mask.sum(1)).sum())


@dataclass(frozen=True)
class MarginSolution:
    """Result of :func:`solve_margin_program` for unit margin.

    ``W``: feasible matrix with minimum margin exactly 1; ``primal = ||W||_*`` (upper bound);
    ``dual``: certified lower bound on the optimum; ``gap = primal / dual - 1``.
    """

    W: Tensor
    primal: float
    dual: float
    gap: float
    min_margin_before_rescale: float
    outer_iterations: int
    inner_iterations: int


def padded(rows: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Pad a ragged list of index lists to a (len, max) long tensor and its validity mask."""
    width = max(1, max((len(r) for r in rows), default=1))
    idx = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for g, r in enumerate(rows):
        idx[g, : len(r)] = torch.as_tensor(r, dtype=torch.long)
        mask[g, : len(r)] = True
    return idx, mask


def symmetrize(prog: MarginProgram, W: Tensor) -> Tensor:
    """Orbit mean of ``W`` (the group average; identity when ``prog.orbits`` is None)."""
    if prog.orbits is None:
        return W
    lab = prog.orbits.reshape(-1)
    n = int(lab.max()) + 1
    sums = torch.zeros(n, dtype=W.dtype).scatter_add(0, lab, W.reshape(-1))
    counts = torch.zeros(n, dtype=W.dtype).scatter_add(0, lab, torch.ones_like(W.reshape(-1)))
    return (sums / counts)[lab].reshape(W.shape)


def _scores(prog: MarginProgram, W: Tensor) -> tuple[Tensor, Tensor]:
    """Target and competitor scores per situation: (G, A) and (G, B) (masked entries undefined)."""
    X = prog.vectors
    full = (X[prog.query] @ W) @ X.T  # (G, N)
    return torch.gather(full, 1, prog.tgt), torch.gather(full, 1, prog.oth)


def exact_margins(prog: MarginProgram, W: Tensor) -> Tensor:
    """Worst-case margin of each situation, ``min_{k* in T_g} S - max_{k in O_g} S``, exactly."""
    st, so = _scores(prog, W)
    inf = torch.tensor(float("inf"), dtype=W.dtype)
    tmin = torch.where(prog.tgt_mask, st, inf).amin(1)
    omax = torch.where(prog.oth_mask, so, -inf).amax(1)
    return tmin - omax


def _adjoint(prog: MarginProgram, gt: Tensor, go: Tensor) -> Tensor:
    """``sum_g x_q (sum_a gt[g,a] x_tgt + sum_b go[g,b] x_oth)^T`` (masked entries ignored)."""
    X = prog.vectors
    full = torch.zeros((prog.query.shape[0], X.shape[0]), dtype=X.dtype)
    full = full.scatter_add(1, prog.tgt, gt * prog.tgt_mask)
    full = full.scatter_add(1, prog.oth, go * prog.oth_mask)
    return X[prog.query].T @ (full @ X)


def _svt(W: Tensor, tau: float) -> Tensor:
    U, s, Vh = torch.linalg.svd(W)
    return (U * torch.clamp(s - tau, min=0.0)) @ Vh


def _nuclear(W: Tensor) -> float:
    return float(torch.linalg.svdvals(W).sum())


def _spectral(W: Tensor) -> float:
    return float(torch.linalg.svdvals(W)[0])


def dual_bound(
    prog: MarginProgram, w: Tensor, alpha: Tensor, beta: Tensor, zeta: Tensor | None
) -> float:
    """Certified lower bound ``sum w / ||G||_2`` from weights ``w >= 0`` and distributions.

    ``alpha`` (G, A) and ``beta`` (G, B) are normalised here over the valid entries; ``zeta`` is
    an optional (m, m) matrix added on the zero pattern (it does not change ``<W, G>``).
    """
    w = torch.clamp(w, min=0.0)
    a = torch.clamp(alpha, min=0.0) * prog.tgt_mask
    b = torch.clamp(beta, min=0.0) * prog.oth_mask
    a = a / torch.clamp(a.sum(1, keepdim=True), min=1e-300)
    b = b / torch.clamp(b.sum(1, keepdim=True), min=1e-300)
    # situations whose distributions are empty contribute nothing
    ok = (a.sum(1) > 0.5) & (b.sum(1) > 0.5)
    w = torch.where(ok, w, torch.zeros_like(w))
    G = symmetrize(prog, _adjoint(prog, w[:, None] * a, -w[:, None] * b))
    best = 0.0
    candidates = [G]
    if prog.zero_mask is not None:
        candidates.append(torch.where(prog.zero_mask, torch.zeros_like(G), G))
        if zeta is not None:
            candidates.append(torch.where(prog.zero_mask, G + zeta, G))
    for cand in candidates:
        norm = _spectral(cand)
        if norm > 0:
            best = max(best, float(w.sum()) / norm)
    return best


def _op_norm_sq(prog: MarginProgram, iters: int = 60) -> float:
    """Squared operator norm of (W, a, b) -> (S_t - a, b - S_o, a - b, W on zero pattern)."""
    G = prog.tgt.shape[0]
    m = prog.dim
    gen = torch.Generator().manual_seed(0)
    W = torch.randn((m, m), generator=gen, dtype=torch.float64)
    a = torch.randn(G, generator=gen, dtype=torch.float64)
    b = torch.randn(G, generator=gen, dtype=torch.float64)
    zm = prog.zero_mask
    est = 1.0
    for _ in range(iters):
        norm = math.sqrt(float((W**2).sum() + (a**2).sum() + (b**2).sum()))
        W, a, b = W / norm, a / norm, b / norm
        st, so = _scores(prog, W)
        rt = (st - a[:, None]) * prog.tgt_mask
        ro = (b[:, None] - so) * prog.oth_mask
        rm = a - b
        # adjoint
        W = _adjoint(prog, rt, -ro)
        a = -rt.sum(1) + rm
        b = ro.sum(1) - rm
        est = math.sqrt(float((W**2).sum() + (a**2).sum() + (b**2).sum()))
    # the zero-pattern equality term adds at most 1 to the squared operator norm
    return est + (1.0 if zm is not None else 0.0)


def solve_margin_program(
    prog: MarginProgram,
    *,
    method: str = "bm",
    rho: float | None = None,
    tol: float = 1e-3,
    max_outer: int | None = None,
    inner_iters: int | None = None,
    verbose: bool = False,
) -> MarginSolution:
    """Minimise ``||W||_*`` subject to all margins >= 1 (see module docstring); certified.

    Both methods are augmented-Lagrangian methods on the same convex program with multipliers for
    every epigraph constraint, and return a feasible point (exact margin rescale) with the dual
    certificate of the module docstring:

    * ``"fista"``: inner problems in ``W`` solved by FISTA with singular value thresholding (the
      proximal map of the nuclear norm) and adaptive restart. Plain convex first-order method;
      slow for ill-conditioned (diagonal, T >= 16) programs.
    * ``"bm"`` (default): inner problems solved by L-BFGS on the variational form
      ``||W||_* = min_{A^T B = W} (||A||_F^2 + ||B||_F^2)/2`` with full-rank factors (the inner
      objective has the same infimum as the convex one; the certificate does not depend on it).
    """
    solvers = {"bm": _solve_bm, "fista": _solve_fista}
    if method not in solvers:
        raise ValueError(f"method must be 'bm' or 'fista', not {method!r}")
    default = _SOLVER_DEFAULTS[method]
    return solvers[method](
        prog,
        rho=default.rho if rho is None else rho,
        tol=tol,
        max_outer=default.max_outer if max_outer is None else max_outer,
        inner_iters=default.inner_iters if inner_iters is None else inner_iters,
        verbose=verbose,
        overshoot=tol / 3,
    )


@dataclass(frozen=True)
class _SolverDefaults:
    """Penalty ``rho``, outer and inner iterations of a method of :func:`solve_margin_program`."""

    rho: float
    max_outer: int
    inner_iters: int


_SOLVER_DEFAULTS = {
    "bm": _SolverDefaults(rho=10.0, max_outer=100, inner_iters=200),
    "fista": _SolverDefaults(rho=1.0, max_outer=200, inner_iters=300),
}


@dataclass
class _AugmentedLagrangian:
    """Multipliers, masks and the best certified iterate shared by both solvers.

    ``mu`` (S_t - a >= 0), ``nu`` (b - S_o >= 0), ``pi`` (a - b - target >= 0), ``zeta``
    (W[zero] = 0); ``target = 1 + overshoot``: aiming slightly above the unit margin makes the
    rescaled iterate feasible at most (1 + overshoot) times its cost, instead of one violation
    dragging it down.
    """

    prog: MarginProgram
    rho: float
    target: float
    mu: Tensor
    nu: Tensor
    pi: Tensor
    zeta: Tensor
    tmask: Tensor
    omask: Tensor
    zm: Tensor | None
    zmf: Tensor | None
    best: tuple[float, float, Tensor] | None = None
    dual_best: float = 0.0

    @classmethod
    def start(cls, prog: MarginProgram, rho: float, overshoot: float) -> _AugmentedLagrangian:
        dtype = torch.float64
        G, A = prog.tgt.shape
        B = prog.oth.shape[1]
        m = prog.dim
        zm = prog.zero_mask
        return cls(
            prog=prog,
            rho=rho,
            target=1.0 + overshoot,
            mu=torch.zeros((G, A), dtype=dtype),
            nu=torch.zeros((G, B), dtype=dtype),
            pi=torch.zeros(G, dtype=dtype),
            zeta=torch.zeros((m, m), dtype=dtype),
            tmask=prog.tgt_mask.to(dtype),
            omask=prog.oth_mask.to(dtype),
            zm=zm,
            zmf=zm.to(dtype) if zm is not None else None,
        )

    def update(
        self, W: Tensor, a: Tensor, b: Tensor, outer: int, tol: float, verbose: bool
    ) -> bool:
        """Multiplier update, then the certificate: exact margin rescale of ``W`` (a feasible
        point) and the dual bound. Returns whether the certified gap is below ``tol``."""
        prog, rho = self.prog, self.rho
        st, so = _scores(prog, W)
        self.mu = torch.clamp(self.mu - rho * (st - a[:, None]), min=0.0) * self.tmask
        self.nu = torch.clamp(self.nu - rho * (b[:, None] - so), min=0.0) * self.omask
        self.pi = torch.clamp(self.pi - rho * (a - b - self.target), min=0.0)
        if self.zmf is not None:
            self.zeta = (self.zeta + rho * W) * self.zmf
        Wf = torch.where(self.zm, torch.zeros_like(W), W) if self.zm is not None else W
        mmin = float(exact_margins(prog, Wf).min())
        if mmin > 0:
            primal = _nuclear(Wf) / mmin
            if self.best is None or primal < self.best[0]:
                self.best = (primal, mmin, Wf / mmin)
        zeta = self.zeta if self.zm is not None else None
        self.dual_best = max(self.dual_best, dual_bound(prog, self.pi, self.mu, self.nu, zeta))
        if verbose:
            primal_best = self.best[0] if self.best else float("nan")
            print(
                f"outer {outer}: min margin {mmin:.4f} primal {primal_best:.5f} "
                f"dual {self.dual_best:.5f}"
            )
        return (
            self.best is not None
            and self.dual_best > 0
            and self.best[0] / self.dual_best - 1.0 < tol
        )


def _solve_fista(
    prog: MarginProgram,
    *,
    rho: float,
    tol: float,
    max_outer: int,
    inner_iters: int,
    verbose: bool,
    overshoot: float,
) -> MarginSolution:
    """Augmented Lagrangian, inner FISTA with singular value thresholding and adaptive restart. Stops when the certified relative gap
    ``primal/dual - 1`` is below ``tol`` (or after ``max_outer`` outer iterations; the returned
    gap then says how far from optimal the feasible point may be).
    """
    dtype = torch.float64
    G = prog.tgt.shape[0]
    m = prog.dim
    L = rho * _op_norm_sq(prog) * 1.05
    step = 1.0 / L
    W = torch.zeros((m, m), dtype=dtype)
    a = torch.ones(G, dtype=dtype)
    b = torch.zeros(G, dtype=dtype)
    al = _AugmentedLagrangian.start(prog, rho, overshoot)

    def grad(W: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        st, so = _scores(prog, W)
        # psi(g, y) = (max(0, y - rho g)^2 - y^2) / (2 rho); d psi / d g = -max(0, y - rho g)
        lt = -torch.clamp(al.mu - rho * (st - a[:, None]), min=0.0) * al.tmask
        lo = -torch.clamp(al.nu - rho * (b[:, None] - so), min=0.0) * al.omask
        lm = -torch.clamp(al.pi - rho * (a - b - al.target), min=0.0)
        gW = symmetrize(prog, _adjoint(prog, lt, -lo))
        if al.zmf is not None:
            gW = gW + (al.zeta + rho * W) * al.zmf
        ga = -lt.sum(1) + lm
        gb = lo.sum(1) - lm
        return gW, ga, gb

    total_inner = 0
    outer = 0
    for outer in range(1, max_outer + 1):
        # inner FISTA on (W, a, b)
        Wy, ay, by = W.clone(), a.clone(), b.clone()
        t = 1.0
        for _ in range(inner_iters):
            gW, ga, gb = grad(Wy, ay, by)
            Wn = _svt(Wy - step * gW, step)
            an = ay - step * ga
            bn = by - step * gb
            # gradient-based adaptive restart (O'Donoghue & Candes)
            if (
                float(
                    ((Wy - Wn) * (Wn - W)).sum()
                    + ((ay - an) * (an - a)).sum()
                    + ((by - bn) * (bn - b)).sum()
                )
                > 0
            ):
                t = 1.0
            tn = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            c = (t - 1.0) / tn
            Wy, ay, by = Wn + c * (Wn - W), an + c * (an - a), bn + c * (bn - b)
            W, a, b, t = Wn, an, bn, tn
        total_inner += inner_iters
        if al.update(W, a, b, outer, tol, verbose):
            break
    return _solution(al.best, al.dual_best, outer, total_inner)


def _solve_bm(
    prog: MarginProgram,
    *,
    rho: float,
    tol: float,
    max_outer: int,
    inner_iters: int,
    verbose: bool,
    overshoot: float,
) -> MarginSolution:
    """Augmented Lagrangian with L-BFGS inner solves on full-rank factors ``W = A^T B``."""
    dtype = torch.float64
    G = prog.tgt.shape[0]
    m = prog.dim
    gen = torch.Generator().manual_seed(0)
    A = (0.01 * torch.randn((m, m), generator=gen, dtype=dtype)).requires_grad_()
    Bf = (0.01 * torch.randn((m, m), generator=gen, dtype=dtype)).requires_grad_()
    a = torch.ones(G, dtype=dtype).requires_grad_()
    b = torch.zeros(G, dtype=dtype).requires_grad_()
    al = _AugmentedLagrangian.start(prog, rho, overshoot)

    def alm() -> Tensor:
        W = symmetrize(prog, A.T @ Bf)
        st, so = _scores(prog, W)
        gt = st - a[:, None]
        go = b[:, None] - so
        gm = a - b - al.target
        mu, nu, pi = al.mu, al.nu, al.pi
        val = 0.5 * ((A**2).sum() + (Bf**2).sum())
        val = val + ((torch.clamp(mu - rho * gt, min=0.0) ** 2 - mu**2) * al.tmask).sum() / (
            2 * rho
        )
        val = val + ((torch.clamp(nu - rho * go, min=0.0) ** 2 - nu**2) * al.omask).sum() / (
            2 * rho
        )
        val = val + (torch.clamp(pi - rho * gm, min=0.0) ** 2 - pi**2).sum() / (2 * rho)
        if al.zmf is not None:
            e = W * al.zmf
            val = val + (al.zeta * e).sum() + 0.5 * rho * (e**2).sum()
        return val

    outer = 0
    total_inner = 0
    for outer in range(1, max_outer + 1):
        # a fresh L-BFGS history per outer step: the previous one refers to the old multipliers
        lbfgs(
            alm,
            [A, Bf, a, b],
            inner_iters,
            max_eval=inner_iters * 2,
            tolerance_grad=1e-10,
            tolerance_change=1e-14,
        )
        total_inner += inner_iters
        with torch.no_grad():
            done = al.update(
                symmetrize(prog, A.T @ Bf), a.detach(), b.detach(), outer, tol, verbose
            )
        if done:
            break
    return _solution(al.best, al.dual_best, outer, total_inner)


def _solution(
    best: tuple[float, float, torch.Tensor] | None, dual_best: float, outer: int, total_inner: int
) -> MarginSolution:
    """The best rescaled iterate ``(primal, min margin, W)`` with its certified gap."""
    if best is None:
        raise RuntimeError(
            "margin program: no positive-margin iterate found (infeasible or not converged)"
        )
    primal, mmin, w_best = best
    return MarginSolution(
        W=w_best,
        primal=primal,
        dual=dual_best,
        gap=primal / dual_best - 1.0 if dual_best > 0 else float("inf"),
        min_margin_before_rescale=mmin,
        outer_iterations=outer,
        inner_iterations=total_inner,
    )
