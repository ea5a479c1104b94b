"""Backcopy task of Theorem 7.1 (§7, Figure 3 left): minimum cost of a sink vs a diagonal block.

The task, its attention patterns and margin programs are :mod:`.backcopy`. Choices made here (all
recorded in the result row):

* Scores are ``(W_Q z_q)^T (W_K z_k) / s`` with ``s = sqrt(d)`` (§3) or ``s = d`` (the extra
  ``1/sqrt(d)`` normalisation of §7's Figure 3), parameter ``score_norm``.
* Block (§3): ``B = (id + W_2 ReLU(W_1 .)) o (id + ATTN o RMS)``. The pre-attention RMSNorm is
  kept (it is the identity here: every input has norm sqrt(d)); the RMSNorm before the MLP is
  dropped, because on this task it only creates bad local minima for the value/MLP fit (the
  proof's construction never uses it either) and it is not part of the cost. MLP without biases
  (the construction of Theorem 7.1 uses none).
* Cost = ``||W_Q||^2 + ||W_K||^2 + ||W_V||^2 + ||W_O||^2 + ||W_1||^2 + ||W_2||^2`` (squared
  Frobenius). For balanced factorisations the first two sum to ``2 ||W_QK||_*`` and the next two to
  ``2 ||W_VO||_*`` (the paper's proof counts ``||W_QK||_*`` and ``||W_VO||_*`` once; condition (3)
  is evaluated with the paper's own bookkeeping, see :func:`.condition3.condition3`).

Minimum cost by decomposition (hard attention, "kappa large enough" as in §7): (a) the
query-key part is the convex margin program of :mod:`.qk_convex` with a dual certificate;
(b) the value/MLP part is fitted on every distinct (query, attended key) input with attention fixed
to the pattern, by an augmented Lagrangian with full-batch L-BFGS in float64 to a tight relative
squared error. :func:`run_backcopy_end_to_end` trains all six matrices jointly (softmax attention
on sampled sequences) as a check of the decomposition at small T.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from sinkscope.costs.backcopy import (
    BackcopyTask,
    all_sequences,
    make_task,
    margin_program,
    sample_sequences,
    value_inputs,
    worst_case_attention,
)
from sinkscope.costs.fitting import (
    balance_vo,
    balanced_mlp_cost,
    fit_with_penalties,
    init_weights,
    lbfgs,
    seed_run,
)
from sinkscope.costs.qk_convex import MarginProgram, exact_margins, solve_margin_program
from sinkscope.defaults import BACKCOPY_E2E_PARAMS, BACKCOPY_PARAMS

__all__ = [
    "DEFAULT_BACKCOPY_PARAMS",
    "block_forward",
    "factor_qk",
    "fit_value_mlp",
    "run_backcopy",
    "run_backcopy_end_to_end",
    "solve_backcopy",
    "solve_qk",
]

#: Defaults of ``params`` for :func:`run_backcopy` (a run overrides any subset).
DEFAULT_BACKCOPY_PARAMS = BACKCOPY_PARAMS


def _params(
    params: Mapping[str, Any] | None, defaults: Mapping[str, Any] = BACKCOPY_PARAMS
) -> dict[str, Any]:
    """``params`` over ``defaults``; a key without a default is refused (a typo would be ignored)."""
    merged = dict(defaults)
    if params:
        unknown = set(params) - set(merged)
        if unknown:
            raise ValueError(
                f"unknown backcopy parameters {sorted(unknown)}; known: {sorted(merged)}"
            )
        merged.update(params)
    return merged


def _score_divisor(d: int, score_norm: str) -> float:
    if score_norm == "d":
        return float(d)
    if score_norm == "sqrt_d":
        return math.sqrt(d)
    raise ValueError(f"score_norm must be 'd' or 'sqrt_d', not {score_norm!r}")


# --------------------------------------------------------------------------------------------
# value / MLP part
# --------------------------------------------------------------------------------------------


def _block_tail(params: dict[str, Tensor], xq: Tensor, xa: Tensor) -> Tensor:
    """Residual attention update with given attended vector, then residual ReLU MLP (no biases)."""
    y = xq + (xa @ params["W_V"].T) @ params["W_O"].T
    return y + torch.relu(y @ params["W_1"].T) @ params["W_2"].T


def _cost(params: Mapping[str, Tensor]) -> Tensor:
    return sum((p**2).sum() for p in params.values())  # type: ignore[return-value]


def fit_value_mlp(
    task: BackcopyTask, pattern: str, seed: int, p: Mapping[str, Any]
) -> dict[str, Any]:
    """Minimum-cost value/MLP weights with attention fixed to ``pattern`` (hard attention).

    Augmented Lagrangian on the per-input residuals ``r_n = (out_n - y_n)/||Y||_F`` (so that
    ``sum ||r_n||^2`` is the relative squared error), penalty stages ``fit_penalties`` with
    multiplier updates, each stage solved by full-batch L-BFGS (float64) from small weights.
    Returns the weights, the cost split and the final relative squared error.
    """
    xq, xa, y = (v @ task.E.T for v in value_inputs(task, pattern))  # in R^d (seeded frame)
    d = task.d
    width = int(p["mlp_width_factor"]) * d
    ynorm = float(torch.linalg.norm(y))
    best: dict[str, Any] | None = None
    for restart in range(int(p["fit_restarts"])):
        gen = torch.Generator().manual_seed(1000 * seed + restart)
        s = float(p["init_scale"])
        shapes = {"W_V": (d, d), "W_O": (d, d), "W_1": (width, d), "W_2": (d, width)}
        W = init_weights(shapes, s, gen)

        def residual(W: dict[str, Tensor] = W) -> Tensor:
            return (_block_tail(W, xq, xa) - y) / ynorm

        fit_with_penalties(list(W.values()), lambda W=W: _cost(W), residual, p)
        with torch.no_grad():
            err = float((residual() ** 2).sum())
            Wd = {k: v.detach().clone() for k, v in W.items()}
        cand = {"weights": Wd, "fit_relerr": err, "cost_raw": float(_cost(Wd))}
        # balance the value/output factorisation (same function, minimal cost 2||W_VO||_*)
        cand["weights"] = balance_vo(Wd)
        cand["cost_ov"] = float(
            (cand["weights"]["W_V"] ** 2).sum() + (cand["weights"]["W_O"] ** 2).sum()
        )
        cand["cost_mlp"] = balanced_mlp_cost(cand["weights"])
        ok = err <= float(p["fit_tol"])
        key = (not ok, cand["cost_ov"] + cand["cost_mlp"])
        if best is None or key < best["_key"]:
            best = {**cand, "_key": key}
    assert best is not None
    best.pop("_key")
    return best


# --------------------------------------------------------------------------------------------
# a full run
# --------------------------------------------------------------------------------------------


def solve_qk(task: BackcopyTask, pattern: str, p: Mapping[str, Any]) -> dict[str, Any]:
    """Certified minimum query-key cost for ``pattern`` at margin ``kappa`` (both normalisations).

    The normalised program (vectors ``h_i + p_t``, margin 1) is solved once; with scores
    ``x^T W x / s`` and ``x = sqrt(d/2)(h + p)``, margin ``kappa`` needs ``W = kappa s (2/d) W~``,
    so ``2 ||W||_* = 4 kappa s ||W~||_* / d``.
    """
    reduced = margin_program(task, pattern, reduced=True)
    prog = margin_program(task, pattern)
    sol = solve_margin_program(
        reduced,
        method=str(p["qk_method"]),
        rho=float(p["qk_rho"]),
        tol=float(p["qk_gap_tol"]),
        max_outer=int(p["qk_max_outer"]),
        inner_iters=int(p["qk_inner_iters"]),
    )
    full_margin = float(exact_margins(prog, sol.W).min())
    if abs(full_margin - 1.0) > 1e-8:
        raise RuntimeError(f"symmetrised query-key solution has full-program margin {full_margin}")
    s = _score_divisor(task.d, p["score_norm"])
    factor = float(p["kappa"]) * s * 2.0 / task.d
    Wc = factor * sol.W  # coordinates
    Wqk = task.E @ Wc @ task.E.T
    return {
        "program": prog,
        "solution": sol,
        "W_QK": Wqk,
        "cost_qk": 2.0 * factor * sol.primal,
        "cost_qk_lower": 2.0 * factor * sol.dual,
        "qk_gap": sol.gap,
        "n_pairs": prog.n_pairs,
    }


def factor_qk(Wqk: Tensor) -> tuple[Tensor, Tensor]:
    """Balanced factorisation ``W_Q^T W_K = W_QK`` with ``||W_Q||^2 + ||W_K||^2 = 2||W_QK||_*``."""
    U, s, Vh = torch.linalg.svd(Wqk)
    return s.sqrt()[:, None] * U.T, s.sqrt()[:, None] * Vh


def block_forward(W: Mapping[str, Tensor], X: Tensor, divisor: float) -> tuple[Tensor, Tensor]:
    """Full block of §3 (pre-attention RMSNorm, causal softmax head, residual ReLU MLP) on (B, L, d).

    Returns the output and the attention matrix (B, L, L).
    """
    d = X.shape[-1]
    Z = X / torch.sqrt((X**2).mean(-1, keepdim=True))  # RMSNorm without learnable gain
    q = Z @ W["W_Q"].T
    k = Z @ W["W_K"].T
    S = q @ k.transpose(1, 2) / divisor
    L = X.shape[1]
    causal = torch.tril(torch.ones((L, L), dtype=torch.bool))
    S = S.masked_fill(~causal, -float("inf"))
    A = torch.softmax(S, dim=-1)
    Y = X + (A @ Z) @ (W["W_O"] @ W["W_V"]).T
    del d
    return Y + torch.relu(Y @ W["W_1"].T) @ W["W_2"].T, A


def _verify(
    task: BackcopyTask,
    pattern: str,
    weights: Mapping[str, Tensor],
    p: Mapping[str, Any],
    seed: int,
    prog: MarginProgram,
) -> dict[str, float]:
    """Exact margin enumeration, worst-case attention, hard-attention and soft-attention fit."""
    divisor = _score_divisor(task.d, p["score_norm"])
    Xr = task.vectors @ task.E.T  # (N, d) in R^d
    scores = (Xr @ weights["W_Q"].T) @ (Xr @ weights["W_K"].T).T / divisor
    unit = math.sqrt(task.d / 2.0)
    Wc = task.E.T @ (weights["W_Q"].T @ weights["W_K"]) @ task.E * (unit**2 / divisor)
    margins = exact_margins(prog, Wc)
    att = worst_case_attention(task, pattern, scores)
    xq, xa, y = value_inputs(task, pattern)
    out = _block_tail(weights, xq @ task.E.T, xa @ task.E.T)
    hard = float(((out - y @ task.E.T) ** 2).sum() / (y**2).sum())
    Xs, Ys, _ = sample_sequences(task, int(p["check_sequences"]), seed)
    with torch.no_grad():
        out_s, _ = block_forward(weights, Xs, divisor)
    soft = float(((out_s - Ys) ** 2).sum() / (Ys**2).sum())
    return {
        "min_margin": float(margins.min()),
        "attn_min_weight": float(att.min()),
        "attn_accuracy": float((att >= float(p["attn_level"])).to(torch.float64).mean()),
        "fit_relerr_hard": hard,
        "fit_relerr_soft": soft,
    }


def solve_backcopy(
    T: int, pattern: str, seed: int, params: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Tensor], BackcopyTask]:
    """:func:`run_backcopy` that also returns the block weights (in R^d) and the task."""
    p = _params(params)
    seed_run(seed, p)
    t0 = time.perf_counter()
    task = make_task(T, int(p["n_dormant"]), int(p["n_copy"]), int(p["d_extra"]), seed)
    qk = solve_qk(task, pattern, p)
    t1 = time.perf_counter()
    fit = fit_value_mlp(task, pattern, seed, p)
    t2 = time.perf_counter()
    W_Q, W_K = factor_qk(qk["W_QK"])
    weights = {"W_Q": W_Q, "W_K": W_K, **fit["weights"]}
    check = _verify(task, pattern, weights, p, seed, qk["program"])
    cost_qk = float((W_Q**2).sum() + (W_K**2).sum())
    s_sqrt, s_d = math.sqrt(task.d), float(task.d)
    s_used = _score_divisor(task.d, p["score_norm"])
    row = {
        "T": T,
        "pattern": pattern,
        "seed": seed,
        "d": task.d,
        "n_dormant": task.n_dormant,
        "n_copy": task.n_copy,
        "kappa": float(p["kappa"]),
        "score_norm": p["score_norm"],
        "cost_total": cost_qk + fit["cost_ov"] + fit["cost_mlp"],
        "cost_qk": cost_qk,
        "cost_ov": fit["cost_ov"],
        "cost_mlp": fit["cost_mlp"],
        "cost_qk_lower": qk["cost_qk_lower"],
        "qk_gap": qk["qk_gap"],
        "cost_qk_sqrt_d": qk["cost_qk"] * s_sqrt / s_used,
        "cost_qk_d": qk["cost_qk"] * s_d / s_used,
        "cost_total_sqrt_d": qk["cost_qk"] * s_sqrt / s_used + fit["cost_ov"] + fit["cost_mlp"],
        "cost_total_d": qk["cost_qk"] * s_d / s_used + fit["cost_ov"] + fit["cost_mlp"],
        **check,
        "fit_ok": bool(check["fit_relerr_hard"] <= float(p["fit_tol"])),
        "n_pairs": qk["n_pairs"],
        "wall_qk_s": t1 - t0,
        "wall_fit_s": t2 - t1,
        "wall_s": time.perf_counter() - t0,
    }
    if not row["fit_ok"]:
        raise RuntimeError(
            f"backcopy T={T} {pattern} seed={seed}: fit error {row['fit_relerr_hard']:.2e} > fit_tol"
        )
    return row, weights, task


def run_backcopy(
    T: int, pattern: str, seed: int, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One run (one Snakemake job): minimum block cost of ``pattern`` on the task of Theorem 7.1.

    Returns a flat table row: ``T, pattern, seed, d, n_dormant, n_copy, kappa, score_norm,
    cost_total, cost_qk, cost_ov, cost_mlp, cost_qk_lower (certified), qk_gap, cost_qk_sqrt_d,
    cost_qk_d`` (query-key cost under both score normalisations; the value/MLP part does not
    depend on it, so ``cost_total_sqrt_d``/``cost_total_d`` are the totals for either),
    ``min_margin`` (exact enumeration, equals kappa), ``attn_min_weight`` (worst case over all
    sequences), ``attn_accuracy`` (fraction of situations whose worst-case weight on the
    required key is >= ``attn_level``), ``fit_relerr_hard`` (all distinct inputs, one-hot
    attention), ``fit_relerr_soft`` (``check_sequences`` sampled sequences, softmax), ``fit_ok``,
    ``n_pairs``, ``wall_qk_s``, ``wall_fit_s``, ``wall_s``. Raises if the fit misses ``fit_tol``.
    See :data:`DEFAULT_BACKCOPY_PARAMS` for ``params``.
    """
    return solve_backcopy(T, pattern, seed, params)[0]


# --------------------------------------------------------------------------------------------
# end-to-end check
# --------------------------------------------------------------------------------------------


def run_backcopy_end_to_end(
    T: int, pattern: str, seed: int, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Train all six matrices jointly (softmax attention) and compare with the decomposition.

    Objective: cost + augmented-Lagrangian terms for (i) the relative squared error of the full
    block (softmax attention, §3) on every sequence if there are at most ``e2e_sequences`` of
    them (T <= 4 by default), else on that many sampled sequences, and (ii) every
    enumerated margin ``>= kappa`` (hinge). Full-batch L-BFGS in float64 from small weights,
    penalty stages ``e2e_penalties``. Afterwards the query-key pair is rescaled so the exact
    minimum margin is ``kappa``, all factorisations are balanced, and the hard-attention fit is
    checked on every distinct input. The decomposition is rerun with the query-key gap tolerance
    ``e2e_qk_gap_tol`` (when smaller than ``qk_gap_tol``) so that the comparison is sharper than
    the runs' certified gap. ``params``: the keys of :data:`DEFAULT_BACKCOPY_PARAMS` and of
    :data:`sinkscope.defaults.BACKCOPY_E2E_PARAMS` (the ``e2e_*`` keys, with their defaults).
    Returns cost columns for the end-to-end weights plus ``fit_ok`` (hard-attention fit within
    ``fit_tol``), ``cost_total_decomp``, ``cost_qk_decomp_lower`` (certified) and
    ``e2e_gap = cost_e2e / cost_decomp - 1``. Raises if the trained query-key cost falls below
    the certified lower bound (impossible unless the program or the certificate is wrong).
    """
    p = _params(params, {**BACKCOPY_PARAMS, **BACKCOPY_E2E_PARAMS})
    n_seq = int(p["e2e_sequences"])
    penalties = list(p["e2e_penalties"])
    penalties += [penalties[-1]] * int(p["fit_extra_stages"])
    iters = int(p["e2e_lbfgs_iters"])
    seed_run(seed, p)
    t0 = time.perf_counter()
    task = make_task(T, int(p["n_dormant"]), int(p["n_copy"]), int(p["d_extra"]), seed)
    prog = margin_program(task, pattern)
    divisor = _score_divisor(task.d, p["score_norm"])
    kappa = float(p["kappa"])
    d = task.d
    width = int(p["mlp_width_factor"]) * d
    gen = torch.Generator().manual_seed(5000 + seed)
    s = float(p["init_scale"])
    shapes = {
        "W_Q": (d, d),
        "W_K": (d, d),
        "W_V": (d, d),
        "W_O": (d, d),
        "W_1": (width, d),
        "W_2": (d, width),
    }
    W = init_weights(shapes, s, gen)
    n_all = task.n_dormant * task.V ** (T - 1)
    Xs, Ys = all_sequences(task) if n_all <= n_seq else sample_sequences(task, n_seq, seed + 7)[:2]
    ynorm = float(torch.linalg.norm(Ys))
    c = (d / 2.0) / divisor  # scores of the unit program = c * coordinate-bilinear form

    def pieces() -> tuple[Tensor, Tensor, Tensor]:
        out, _ = block_forward(W, Xs, divisor)
        r = (out - Ys) / ynorm
        Wc = task.E.T @ (W["W_Q"].T @ W["W_K"]) @ task.E * c
        st = prog.vectors[prog.query] @ Wc
        s_t = torch.einsum("gm,gam->ga", st, prog.vectors[prog.tgt])
        s_o = torch.einsum("gm,gbm->gb", st, prog.vectors[prog.oth])
        viol = (s_t[:, :, None] - s_o[:, None, :]) - kappa  # (G, A, B) >= 0 required
        mask = prog.tgt_mask[:, :, None] & prog.oth_mask[:, None, :]
        return r, viol, mask

    lam_r = torch.zeros_like(Ys)
    with torch.no_grad():
        _, v0, mask = pieces()
    lam_m = torch.zeros_like(v0)
    mscale = 1.0 / max(1.0, kappa)
    for mu in penalties:

        def loss(mu: float = mu, lam_m: Tensor = lam_m, lam_r: Tensor = lam_r) -> Tensor:
            r, viol, _ = pieces()
            g = viol * mscale
            hinge = torch.clamp(lam_m - mu * g, min=0.0) * mask
            return (
                _cost(W)
                + (lam_r * r).sum()
                + 0.5 * mu * (r**2).sum()
                + ((hinge**2 - lam_m**2 * mask) / (2 * mu)).sum()
            )

        lbfgs(loss, list(W.values()), iters)
        with torch.no_grad():
            r, viol, _ = pieces()
            lam_r = lam_r + mu * r
            lam_m = torch.clamp(lam_m - mu * viol * mscale, min=0.0) * mask
            done = (
                float((r**2).sum()) <= float(p["fit_tol"])
                and float((viol * mask).amin()) >= -1e-6 * kappa
            )
        if mu == penalties[-1] and done:
            break
    t1 = time.perf_counter()
    Wd = {k: v.detach().clone() for k, v in W.items()}
    # exact margin rescale of the query-key pair, then balanced factorisations
    unit = math.sqrt(task.d / 2.0)
    Wc = task.E.T @ (Wd["W_Q"].T @ Wd["W_K"]) @ task.E * (unit**2 / divisor)
    mmin = float(exact_margins(prog, Wc).min())
    if mmin <= 0:
        raise RuntimeError(
            f"end-to-end T={T} {pattern}: attention pattern not represented (min margin {mmin:.3g})"
        )
    Wqk = (Wd["W_Q"].T @ Wd["W_K"]) * (kappa / mmin)
    W_Q, W_K = factor_qk(Wqk)
    rest = balance_vo({k: Wd[k] for k in ("W_V", "W_O", "W_1", "W_2")})
    weights = {"W_Q": W_Q, "W_K": W_K, **rest}
    check = _verify(task, pattern, weights, p, seed, prog)
    cost_qk = float((W_Q**2).sum() + (W_K**2).sum())
    cost_ov = float((rest["W_V"] ** 2).sum() + (rest["W_O"] ** 2).sum())
    cost_mlp = balanced_mlp_cost(rest)
    dp = {k: v for k, v in p.items() if k not in BACKCOPY_E2E_PARAMS}
    dp["qk_gap_tol"] = min(float(p["qk_gap_tol"]), float(p["e2e_qk_gap_tol"]))
    decomp = run_backcopy(T, pattern, seed, dp)
    if cost_qk < decomp["cost_qk_lower"] * (1 - 1e-6):
        raise RuntimeError(
            f"end-to-end T={T} {pattern}: query-key cost {cost_qk:.6g} below the certified lower "
            f"bound {decomp['cost_qk_lower']:.6g} of the convex program (a bug in one of them)"
        )
    total = cost_qk + cost_ov + cost_mlp
    return {
        "T": T,
        "pattern": pattern,
        "seed": seed,
        "d": d,
        "kappa": kappa,
        "cost_total": total,
        "cost_qk": cost_qk,
        "cost_ov": cost_ov,
        "cost_mlp": cost_mlp,
        "margin_rescale": kappa / mmin,
        **check,
        "fit_ok": check["fit_relerr_hard"] <= float(p["fit_tol"]),
        "cost_total_decomp": decomp["cost_total"],
        "cost_qk_decomp": decomp["cost_qk"],
        "cost_qk_decomp_lower": decomp["cost_qk_lower"],
        "e2e_gap": total / decomp["cost_total"] - 1.0,
        "wall_e2e_s": t1 - t0,
    }
