"""Generic copy-paste task of Theorem 7.2 / Theorem D.1 (§7, Figure 3 right).

Distribution (§7, "Trade-off for a generic input-output mapping"): special vectors
``S = {b_BOS, dbar_1..dbar_C, c_1..c_C}`` of norm ``sqrt(d)``; here ``phi = 0`` (exactly
orthogonal, as in the paper's Figure 3). Dormant contexts ``d_ci = lambda dbar_c + eta_ci`` with
``eta_ci`` orthogonal to ``S``, ``||eta_ci|| = delta sqrt(d)``, ``lambda = sqrt(1 - delta^2)``;
the noise directions are drawn at random (seeded) in the orthogonal complement of ``S``.

Modelling choices (recorded in the rows): there are no positional embeddings in this task, so the
scores depend only on the (query, key) token pair; sequences start with BOS and contain distinct
tokens in any order, so every pair of tokens occurs in both relative orders (``P_c`` = all pairs
of group ``c``) and any subset ``R`` of group ``c`` can precede a copy-paste token ``c_c``. ``T``
therefore does not enter the constraints (it only bounds the subsets, ``|R| <= T - 1``).
Following the theorem, the score of a copy-paste query on a dormant key depends only on the
centroid (``c_c^T W_QK eta = 0`` is imposed as a zero pattern of the convex program).

Block: pre-attention RMSNorm (identity: all tokens have norm ``sqrt(d)``), attention with hard
pattern, value/output, then a residual ReLU MLP with unregularised biases (as in the proof of
Theorem D.1); the RMSNorm before the MLP is optional (``mlp_rmsnorm``, default off, see
:mod:`.backcopy_runs`). Relaxed labels with tolerance ``epsilon``: dormant ``(1 + phi_ci) d_ci``,
copy-paste ``c_c + phi_c mean(R)`` with ``phi in [1 - epsilon, 1 + epsilon]``.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from sinkscope.costs.fitting import (
    balance_vo,
    balanced_mlp_cost,
    fit_with_penalties,
    init_weights,
    seed_run,
)
from sinkscope.costs.qk_convex import MarginProgram, exact_margins, padded, solve_margin_program
from sinkscope.costs.summary import fit_slopes
from sinkscope.defaults import COPYPASTE_PARAMS

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_COPYPASTE_PARAMS",
    "CopyPasteTask",
    "copypaste_slopes",
    "diag_construction",
    "make_copypaste_task",
    "run_copypaste",
    "sink_construction",
    "theorem_d1_bounds",
]

#: Defaults of ``params`` for :func:`run_copypaste`.
DEFAULT_COPYPASTE_PARAMS = COPYPASTE_PARAMS


def copypaste_slopes(
    table: Sequence[Mapping[str, Any]], pattern: str
) -> tuple[float, list[tuple[int, float]]]:
    """Log-log slopes of ``cost_total`` in ``r_eff(Sigma_D)/delta^2`` for one ``pattern``
    (:func:`sinkscope.costs.summary.fit_slopes`, mean over seeds): ``(pooled, [(n, slope), ...])`` --
    the slope pooled over the whole sweep (NaN with fewer than two x values) and the slope at
    each fixed number ``n`` of dormant tokens per group that has at least two x values, by
    ascending ``n``. The numbers of claim ``costs.copypaste_trends`` and of the legend of
    Figure 3 right."""
    rows = [r for r in table if r["pattern"] == pattern]

    def fit(part: Sequence[Mapping[str, Any]]) -> float:
        slopes = fit_slopes(part, "reff_over_delta2", "cost_total")
        return slopes[pattern]["slope"] if pattern in slopes else float("nan")

    pooled = fit(rows) if len({float(r["reff_over_delta2"]) for r in rows}) >= 2 else float("nan")
    within = []
    for n in sorted({int(r["n"]) for r in rows}):
        part = [r for r in rows if int(r["n"]) == n]
        if len({float(r["reff_over_delta2"]) for r in part}) >= 2:
            within.append((n, fit(part)))
    return pooled, within


@dataclass(frozen=True)
class CopyPasteTask:
    """Token vectors in orthonormal coordinates ``[e_BOS, e_dbar_1..C, e_c_1..C, noise basis]``.

    ``vectors`` (N, m): row 0 BOS, rows ``1 + c n + i`` the dormant ``d_ci``, rows
    ``1 + C n + c`` the copy-paste ``c_c``. ``m = 2C + 1 + r_eta`` (unused directions of R^d are
    dropped: they cannot lower any cost).
    """

    C: int
    n: int
    d: int
    delta: float
    vectors: Tensor
    r_eta: int

    @property
    def lam(self) -> float:
        return math.sqrt(1.0 - self.delta**2)

    def dormant(self, c: int, i: int) -> int:
        return 1 + c * self.n + i

    def copy(self, c: int) -> int:
        return 1 + self.C * self.n + c


def make_copypaste_task(
    C: int, n: int, d: int, delta: float, seed: int = 0, phi: float = 0.0
) -> CopyPasteTask:
    """Seeded task with ``n`` dormant tokens per group (``phi = 0`` only)."""
    if phi != 0.0:
        raise NotImplementedError("only phi = 0 (orthogonal special vectors) is implemented")
    if not 0.0 < delta < 1.0:
        raise ValueError("delta must be in (0, 1)")
    k = 2 * C + 1
    free = d - k
    gen = torch.Generator().manual_seed(30_000 + seed)
    noise = torch.randn((C * n, free), generator=gen, dtype=torch.float64)
    noise = noise / torch.linalg.norm(noise, dim=1, keepdim=True)
    # orthonormal basis of the noise span (coordinates within the complement)
    _, s, Vh = torch.linalg.svd(noise, full_matrices=False)
    r = int((s > 1e-10 * s[0]).sum())
    basis = Vh[:r]  # (r, free)
    coords = noise @ basis.T  # (C n, r), rows of norm 1
    m = k + r
    sd = math.sqrt(d)
    lam = math.sqrt(1.0 - delta**2)
    X = torch.zeros((1 + C * n + C, m), dtype=torch.float64)
    X[0, 0] = sd
    for c in range(C):
        for i in range(n):
            row = 1 + c * n + i
            X[row, 1 + c] = lam * sd
            X[row, k:] = delta * sd * coords[c * n + i]
        X[1 + C * n + c, 1 + C + c] = sd
    return CopyPasteTask(C, n, d, delta, X, r)


def sigma_d(task: CopyPasteTask) -> Tensor:
    """``Sigma_D = sum_c sum_{i<j} (d_ci - d_cj)(d_ci - d_cj)^T`` (all pairs occur in both orders)."""
    X = task.vectors
    S = torch.zeros((X.shape[1], X.shape[1]), dtype=X.dtype)
    for c in range(task.C):
        for i, j in itertools.combinations(range(task.n), 2):
            v = X[task.dormant(c, i)] - X[task.dormant(c, j)]
            S += torch.outer(v, v)
    return S


def r_eff(task: CopyPasteTask) -> float:
    """Effective rank ``tr(Sigma_D) / ||Sigma_D||_2`` (NaN if fewer than two tokens per group)."""
    S = sigma_d(task)
    top = float(torch.linalg.eigvalsh(S)[-1])
    return float(torch.trace(S)) / top if top > 0 else float("nan")


def delta_diag(task: CopyPasteTask) -> float:
    """``Delta_diag`` of Appendix D: smallest squared distance of two same-group dormant tokens."""
    X = task.vectors
    vals = [
        float(((X[task.dormant(c, i)] - X[task.dormant(c, j)]) ** 2).sum())
        for c in range(task.C)
        for i, j in itertools.combinations(range(task.n), 2)
    ]
    return min(vals) if vals else float("inf")


def margin_program(task: CopyPasteTask, pattern: str) -> MarginProgram:
    """Situations of the sink / diagonal pattern (unit-norm vectors, margin 1)."""
    if pattern not in ("sink", "diagonal"):
        raise ValueError("pattern must be 'sink' or 'diagonal'")
    C, n = task.C, task.n
    dorm = [task.dormant(c, i) for c in range(C) for i in range(n)]
    cps = [task.copy(c) for c in range(C)]
    sit: list[tuple[int, list[int], list[int]]] = []
    for c in range(C):
        for i in range(n):
            q = task.dormant(c, i)
            others = [k for k in dorm + cps if k != q]
            sit.append((q, [0], others + [q]) if pattern == "sink" else (q, [q], [0] + others))
    for c in range(C):
        q = task.copy(c)
        own = [task.dormant(c, i) for i in range(n)]
        wrong = [k for k in dorm if k not in own] + [k for k in cps if k != q]
        sit.append((q, own, [0, q] + wrong))  # correct group present
        sit.append((q, [0], [q] + wrong) if pattern == "sink" else (q, [q], [0] + wrong))  # absent
    tgt, tmask = padded([s[1] for s in sit])
    oth, omask = padded([s[2] for s in sit])
    m = task.vectors.shape[1]
    zero = torch.zeros((m, m), dtype=torch.bool)
    k = 2 * C + 1
    zero[1 + C : k, k:] = True  # c_c^T W eta = 0 (query = copy-paste, key = noise directions)
    unit = task.vectors / math.sqrt(task.d)
    return MarginProgram(unit, torch.as_tensor([s[0] for s in sit]), tgt, tmask, oth, omask, zero)


def _divisor(d: int, score_norm: str) -> float:
    return float(d) if score_norm == "d" else math.sqrt(d)


def _kappa_sqrt_d(kappa: float, d: int, score_norm: str) -> float:
    """Margin in units of the standard ``1/sqrt(d)`` scores (the units of Theorem D.1)."""
    return kappa * math.sqrt(d) if score_norm == "d" else kappa


# --------------------------------------------------------------------------------------------
# Theorem D.1: bounds and explicit constructions
# --------------------------------------------------------------------------------------------


def theorem_d1_bounds(task: CopyPasteTask, kappa: float, phi: float = 0.0) -> dict[str, float]:
    """The four boxed bounds of Theorem D.1 (kappa in units of ``1/sqrt(d)`` scores).

    Also returns the unsimplified (tighter) lower bounds of the proof:
    ``L_diag_tight = kappa r_eff / (delta^2 sqrt d) + 2 C^2 kappa / (sqrt d (1+2C phi) s~)``,
    ``L_sink_tight = 2 C^2 kappa / (sqrt d (1 + 2 C phi) s_lambda)``.
    """
    C, d, delta = task.C, task.d, task.delta
    lam = task.lam
    sd = math.sqrt(d)
    reff = r_eff(task)
    s_lam = max(lam * (C + 1), math.sqrt(C + lam**2))
    s_tilde = math.sqrt(1 + lam**2 * (C + 1) ** 2)
    dd = delta_diag(task)
    return {
        "U_sink": 12 * kappa * C / sd + 5 * (task.r_eta + C),
        "L_diag": kappa / (delta**2 * sd) * reff + kappa * C / (2 * sd),
        "U_diag": 13 * kappa * C / sd + 4 * kappa * sd / dd * task.r_eta + 3 * (task.r_eta + C),
        "L_sink": kappa * C / (2 * sd),
        "L_diag_tight": kappa / (delta**2 * sd) * reff
        + 2 * C**2 * kappa / (sd * (1 + 2 * C * phi) * s_tilde),
        "L_sink_tight": 2 * C**2 * kappa / (sd * (1 + 2 * C * phi) * s_lam),
        "r_eff": reff,
        "r_eta": float(task.r_eta),
        "delta_diag": dd,
    }


def _t_base(task: CopyPasteTask) -> Tensor:
    """``T_base = P_eta + Q_cent`` (Step 2 of the sink upper bound), in task coordinates."""
    m = task.vectors.shape[1]
    k = 2 * task.C + 1
    T = torch.zeros((m, m), dtype=torch.float64)
    T[k:, k:] = torch.eye(m - k, dtype=torch.float64)
    for c in range(task.C):
        T[1 + c, 1 + c] = 1.0
    return T


def sink_construction(task: CopyPasteTask, kappa: float, epsilon: float) -> dict[str, Tensor]:
    """Explicit sink solution of Theorem D.1 part 1 (phi = 0, so Pi = U^T / sqrt(d)).

    ``W_QK = Pi^T M Pi`` with ``M = a r e_0^T + b sum_c e_{C+c} e_c^T``, ``a = kappa/(lambda sqrt d)``,
    ``b = kappa (1 + lambda)/(lambda^2 sqrt d)``; ``W_VO = T_base / 2``; MLP = linear map
    ``(1 + epsilon) T_base``. Scores ``x_q^T W_QK x_k / sqrt(d)``.
    """
    C, d = task.C, task.d
    lam = task.lam
    m = task.vectors.shape[1]
    k = 2 * C + 1
    sd = math.sqrt(d)
    a = kappa / (lam * sd)
    b = kappa * (1 + lam) / (lam**2 * sd)
    M = torch.zeros((k, k), dtype=torch.float64)
    M[1:, 0] = a  # r e_0^T, r = (0, 1, ..., 1)
    for c in range(C):
        M[1 + C + c, 1 + c] += b
    Pi = torch.zeros((k, m), dtype=torch.float64)
    Pi[:, :k] = torch.eye(k, dtype=torch.float64)  # Pi = (U^T U)^{-1} U^T = U^T for phi = 0
    Tb = _t_base(task)
    return {"W_QK": Pi.T @ M @ Pi, "W_VO": 0.5 * Tb, "L_MLP": (1 + epsilon) * Tb, "M": M}


def diag_construction(task: CopyPasteTask, kappa: float, epsilon: float) -> dict[str, Tensor]:
    """Explicit diagonal solution of Theorem D.1 part 3 (phi = 0).

    ``W_QK = Pi^T M_diag Pi + alpha P_eta``, ``M_diag = s sum e_c e_c^T + a sum e_{C+c} e_{C+c}^T +
    b sum e_{C+c} e_c^T`` with ``s = kappa/(lambda^2 sqrt d)``, ``a = kappa/sqrt d``,
    ``b = 2 kappa/(lambda sqrt d)``, ``alpha = 2 kappa sqrt(d) / Delta_diag``;
    ``W_VO = (1 - epsilon) T_base``; MLP zero.
    """
    C, d = task.C, task.d
    lam = task.lam
    m = task.vectors.shape[1]
    k = 2 * C + 1
    sd = math.sqrt(d)
    s, a, b = kappa / (lam**2 * sd), kappa / sd, 2 * kappa / (lam * sd)
    alpha = 2 * kappa * sd / delta_diag(task)
    M = torch.zeros((k, k), dtype=torch.float64)
    for c in range(C):
        M[1 + c, 1 + c] = s
        M[1 + C + c, 1 + C + c] = a
        M[1 + C + c, 1 + c] = b
    Pi = torch.zeros((k, m), dtype=torch.float64)
    Pi[:, :k] = torch.eye(k, dtype=torch.float64)  # Pi = (U^T U)^{-1} U^T = U^T for phi = 0
    P_eta = torch.zeros((m, m), dtype=torch.float64)
    P_eta[k:, k:] = torch.eye(m - k, dtype=torch.float64)
    Tb = _t_base(task)
    return {
        "W_QK": Pi.T @ M @ Pi + alpha * P_eta,
        "W_VO": (1 - epsilon) * Tb,
        "L_MLP": torch.zeros_like(Tb),
        "M": M,
    }


def construction_margin(
    task: CopyPasteTask, pattern: str, W_QK: Tensor, score_norm: str = "sqrt_d"
) -> float:
    """Exact minimum margin of ``W_QK`` (scores ``x_q^T W x_k / s``) over every situation."""
    prog = margin_program(task, pattern)
    # the program's vectors are x / sqrt(d): scores = unit^T (W d / s) unit
    scale = task.d / _divisor(task.d, score_norm)
    return float(exact_margins(prog, W_QK * scale).min())


# --------------------------------------------------------------------------------------------
# value / MLP part with relaxed labels
# --------------------------------------------------------------------------------------------


def value_inputs(task: CopyPasteTask, pattern: str) -> dict[str, Tensor]:
    """Every distinct (query, attended mean) input with hard attention and its label set.

    Returns tensors ``xq`` (query), ``xa`` (attended value input: a key or a mean of keys),
    ``base`` and ``dirn`` such that the admissible outputs are ``base + phi dirn`` with
    ``phi in [1 - eps, 1 + eps]``, and ``exact`` (bool) for inputs whose label is exact
    (``base``: BOS, copy-paste without its group).
    """
    X = task.vectors
    b = X[0]
    xq, xa, base, dirn, exact = [b], [b], [b], [torch.zeros_like(b)], [True]
    for c in range(task.C):
        for i in range(task.n):
            x = X[task.dormant(c, i)]
            xq.append(x)
            xa.append(b if pattern == "sink" else x)
            base.append(x)
            dirn.append(x)
            exact.append(False)
    for c in range(task.C):
        x = X[task.copy(c)]
        own = [X[task.dormant(c, i)] for i in range(task.n)]
        for size in range(1, task.n + 1):
            for subset in itertools.combinations(range(task.n), size):
                mu = torch.stack([own[i] for i in subset]).mean(0)
                xq.append(x)
                xa.append(mu)
                base.append(x)
                dirn.append(mu)
                exact.append(False)
        xq.append(x)
        xa.append(b if pattern == "sink" else x)
        base.append(x)
        dirn.append(torch.zeros_like(x))
        exact.append(True)
    return {
        "xq": torch.stack(xq),
        "xa": torch.stack(xa),
        "base": torch.stack(base),
        "dirn": torch.stack(dirn),
        "exact": torch.as_tensor(exact),
    }


def _tail(W: Mapping[str, Tensor], xq: Tensor, xa: Tensor, rms_d: int | None) -> Tensor:
    """Residual value update, then (optional RMSNorm over R^d, ``rms_d = d``) residual ReLU MLP.

    The coordinates drop unused directions of R^d, so the RMS uses ``||y|| / sqrt(d)``.
    """
    y = xq + (xa @ W["W_V"].T) @ W["W_O"].T
    z = y / torch.sqrt((y**2).sum(-1, keepdim=True) / rms_d) if rms_d else y
    return y + torch.relu(z @ W["W_1"].T + W["b_1"]) @ W["W_2"].T + W["b_2"]


def label_residual(out: Tensor, inp: Mapping[str, Tensor], eps: float) -> Tensor:
    """Distance vector from each output to its admissible label set (segment or point)."""
    delta = out - inp["base"]
    nn = (inp["dirn"] ** 2).sum(-1)
    coef = (delta * inp["dirn"]).sum(-1) / torch.clamp(nn, min=1e-300)
    coef = torch.clamp(coef, 1 - eps, 1 + eps)
    coef = torch.where(inp["exact"], torch.zeros_like(coef), coef)
    return delta - coef[:, None] * inp["dirn"]


def fit_value_mlp(
    task: CopyPasteTask, pattern: str, seed: int, p: Mapping[str, Any]
) -> dict[str, Any]:
    """Minimum-cost value/MLP weights (biases unregularised) meeting the relaxed labels.

    Same augmented-Lagrangian / L-BFGS scheme as :func:`.backcopy_runs.fit_value_mlp`; the residual
    is the distance to the admissible label set, normalised by the Frobenius norm of the bases.
    """
    inp = value_inputs(task, pattern)
    m = task.vectors.shape[1]
    h = int(p["mlp_width"])
    eps = float(p["epsilon"])
    scale = float(torch.linalg.norm(inp["base"] + inp["dirn"]))
    gen = torch.Generator().manual_seed(40_000 + seed)
    s = float(p["init_scale"])
    shapes = {"W_V": (m, m), "W_O": (m, m), "W_1": (h, m), "W_2": (m, h)}
    W = init_weights(shapes, s, gen)
    W["b_1"] = torch.zeros(h, dtype=torch.float64, requires_grad=True)
    W["b_2"] = torch.zeros(m, dtype=torch.float64, requires_grad=True)
    rms = task.d if p["mlp_rmsnorm"] else None

    def cost() -> Tensor:
        return sum((W[k] ** 2).sum() for k in shapes)  # type: ignore[return-value]

    def resid() -> Tensor:
        return label_residual(_tail(W, inp["xq"], inp["xa"], rms), inp, eps) / scale

    fit_with_penalties(list(W.values()), cost, resid, p)
    with torch.no_grad():
        Wd = {k: v.detach().clone() for k, v in W.items()}
        err = float((resid() ** 2).sum())
    bal = balance_vo({k: Wd[k] for k in shapes})
    # the per-unit ReLU rescaling (a w1_j, w2_j / a) must scale the hidden bias too
    n_old = torch.linalg.norm(Wd["W_1"], dim=1)
    scale_unit = torch.where(
        n_old > 0,
        torch.linalg.norm(bal["W_1"], dim=1) / torch.clamp(n_old, min=1e-300),
        torch.ones_like(n_old),
    )
    bal["b_1"], bal["b_2"] = Wd["b_1"] * scale_unit, Wd["b_2"]
    with torch.no_grad():
        err_bal = float(
            (label_residual(_tail(bal, inp["xq"], inp["xa"], rms), inp, eps) ** 2).sum() / scale**2
        )
    return {
        "weights": bal,
        "fit_relerr": max(err, err_bal),
        "cost_ov": float((bal["W_V"] ** 2).sum() + (bal["W_O"] ** 2).sum()),
        "cost_mlp": balanced_mlp_cost(bal),
        "n_inputs": int(inp["xq"].shape[0]),
    }


def run_copypaste(
    n: int, delta: float, pattern: str, seed: int, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One run: minimum block cost of ``pattern`` on the generic task, with Theorem D.1 check.

    Row columns: ``n`` (dormant tokens per group), ``delta``, ``pattern``, ``seed``, ``C``, ``d``,
    ``kappa``, ``score_norm``, ``r_eff``, ``r_eta``, ``reff_over_delta2``, ``cost_total``,
    ``cost_qk``, ``cost_qk_lower`` (certified), ``qk_gap``, ``cost_ov``, ``cost_mlp``,
    ``fit_relerr``, ``min_margin``, the bounds ``U_sink, L_sink, U_diag, L_diag`` (and tight
    lower bounds), ``lower_bound``/``upper_bound`` for this pattern, ``in_bounds``,
    ``certificate_above_lower`` (the certified query-key lower bound alone already exceeds the
    theorem's lower bound), wall times. A measured cost (the cost of an actual solution: an upper
    bound on the minimum) below the theorem's lower bound (a contradiction) or above its upper
    bound (then our solution is not minimal) is logged as a warning and recorded as
    ``in_bounds = False``: the claim ``costs.theorem_d1_bounds`` then reads "not reproduced"
    (the run is not failed, so the verdict can show it).
    """
    p = dict(DEFAULT_COPYPASTE_PARAMS)
    if params:
        unknown = set(params) - set(p)
        if unknown:
            raise ValueError(f"unknown copy-paste parameters {sorted(unknown)}")
        p.update(params)
    seed_run(seed, p)
    t0 = time.perf_counter()
    C, d = int(p["C"]), int(p["d"])
    if n + 1 > int(p["T"]):
        raise ValueError("a sequence must be able to hold a whole group before a copy-paste token")
    task = make_copypaste_task(C, n, d, float(delta), seed, float(p["phi"]))
    prog = margin_program(task, pattern)
    sol = solve_margin_program(
        prog,
        method=str(p["qk_method"]),
        tol=float(p["qk_gap_tol"]),
        max_outer=int(p["qk_max_outer"]),
    )
    kappa = float(p["kappa"])
    div = _divisor(d, p["score_norm"])
    factor = kappa * div / d  # W = factor * W~ gives margin kappa for scores x^T W x / div
    W_QK = factor * sol.W
    cost_qk = 2 * float(torch.linalg.svdvals(W_QK).sum())
    cost_qk_lower = 2 * factor * sol.dual
    t1 = time.perf_counter()
    fits = [fit_value_mlp(task, pattern, 100 * seed + k, p) for k in range(int(p["fit_restarts"]))]
    ok = [f for f in fits if f["fit_relerr"] <= float(p["fit_tol"])] or fits
    fit = min(ok, key=lambda f: f["cost_ov"] + f["cost_mlp"])
    t2 = time.perf_counter()
    margin = float(exact_margins(prog, W_QK * d / div).min())
    bounds = theorem_d1_bounds(task, _kappa_sqrt_d(kappa, d, p["score_norm"]), float(p["phi"]))
    total = cost_qk + fit["cost_ov"] + fit["cost_mlp"]
    lo = bounds["L_sink"] if pattern == "sink" else bounds["L_diag"]
    hi = bounds["U_sink"] if pattern == "sink" else bounds["U_diag"]
    row = {
        "n": n,
        "delta": float(delta),
        "pattern": pattern,
        "seed": seed,
        "C": C,
        "d": d,
        "T": int(p["T"]),
        "kappa": kappa,
        "score_norm": p["score_norm"],
        "reff_over_delta2": bounds["r_eff"] / float(delta) ** 2,
        **bounds,
        "cost_total": total,
        "cost_qk": cost_qk,
        "cost_qk_lower": cost_qk_lower,
        "qk_gap": sol.gap,
        "cost_ov": fit["cost_ov"],
        "cost_mlp": fit["cost_mlp"],
        "fit_relerr": fit["fit_relerr"],
        "fit_ok": bool(fit["fit_relerr"] <= float(p["fit_tol"])),
        "min_margin": margin,
        "lower_bound": lo,
        "upper_bound": hi,
        "in_bounds": bool(lo <= total <= hi),
        "certificate_above_lower": bool(cost_qk_lower >= lo),
        "wall_qk_s": t1 - t0,
        "wall_fit_s": t2 - t1,
        "wall_s": time.perf_counter() - t0,
    }
    if not row["fit_ok"]:
        raise RuntimeError(
            f"copy-paste n={n} delta={delta} {pattern}: fit error {row['fit_relerr']:.2e} > fit_tol"
        )
    if not row["in_bounds"]:
        log.warning(
            "Theorem D.1 violated for n=%s, delta=%s, %s: measured %.4g (certified query-key "
            "lower bound %.4g) outside [%.4g, %.4g]",
            n, delta, pattern, total, cost_qk_lower, lo, hi,
        )  # fmt: skip
    return row


def construction_weights(
    task: CopyPasteTask, cons: Mapping[str, Tensor], rms: bool = False
) -> dict[str, Tensor]:
    """Block weights realising a construction: balanced factors of ``W_VO``, and the MLP's linear map
    ``L_MLP`` as ``W_2 ReLU(W_1 z + b_1) + b_2`` with a bias putting every relevant preactivation in
    the positive region (``b_2 = -W_2 b_1``), as in Step 3 of the proof of Theorem D.1.

    Costs: ``||W_V||^2 + ||W_O||^2 = 2 ||W_VO||_*`` and ``||W_1||^2 + ||W_2||^2 = 2 ||L_MLP||_*``.
    """

    def balanced(M: Tensor) -> tuple[Tensor, Tensor]:
        U, s, Vh = torch.linalg.svd(M)
        return s.sqrt()[:, None] * Vh, U * s.sqrt()[None, :]

    W_V, W_O = balanced(cons["W_VO"])
    W_1, W_2 = balanced(cons["L_MLP"])
    bound = (
        float(torch.linalg.norm(task.vectors, dim=1).max()) * 3.0
    )  # ||y|| <= 2 max ||x|| (+ margin)
    b_1 = torch.linalg.norm(W_1, dim=1) * bound + 1.0
    return {"W_V": W_V, "W_O": W_O, "W_1": W_1, "W_2": W_2, "b_1": b_1, "b_2": -(W_2 @ b_1)}


def construction_label_error(
    task: CopyPasteTask,
    pattern: str,
    weights: Mapping[str, Tensor],
    epsilon: float,
    rms: bool = False,
) -> float:
    """Largest relative distance of the block outputs (hard attention) to their admissible labels."""
    inp = value_inputs(task, pattern)
    out = _tail(weights, inp["xq"], inp["xa"], task.d if rms else None)
    r = label_residual(out, inp, epsilon)
    return float((torch.linalg.norm(r, dim=1) / torch.linalg.norm(inp["base"], dim=1)).max())
