"""Fitting machinery shared by the §7 cost experiments (backcopy and copy-paste tasks).

The value/MLP part of a block's minimum cost is found by an augmented Lagrangian: minimise the
squared Frobenius cost subject to ``residual = 0``, with penalty stages and multiplier updates,
each stage solved by full-batch L-BFGS in float64. Afterwards the factorisations are balanced
(the variational forms behind the costs: ``min ||W_V||^2 + ||W_O||^2 = 2 ||W_O W_V||_*`` and
the per-unit rescaling of ReLU units), which never changes the block's function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "balance_vo",
    "balanced_mlp_cost",
    "fit_with_penalties",
    "init_weights",
    "lbfgs",
    "seed_run",
]


def seed_run(seed: int, p: Mapping[str, Any]) -> None:
    """Determinism for one run: seed, deterministic algorithms, fixed thread count."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    if p.get("threads"):
        torch.set_num_threads(int(p["threads"]))


def lbfgs(
    loss_fn: Callable[[], Tensor],
    tensors: list[Tensor],
    iters: int,
    *,
    max_eval: int | None = None,
    tolerance_grad: float = 1e-12,
    tolerance_change: float = 1e-15,
) -> None:
    """Full-batch L-BFGS with strong-Wolfe line search, ``iters`` iterations, in place, from an
    empty history; at most ``max_eval`` loss evaluations (default ``1.25 iters + 10``)."""
    opt = torch.optim.LBFGS(
        tensors,
        lr=1.0,
        max_iter=iters,
        max_eval=int(iters * 1.25) + 10 if max_eval is None else max_eval,
        history_size=50,
        tolerance_grad=tolerance_grad,
        tolerance_change=tolerance_change,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    opt.step(closure)


def init_weights(
    shapes: Mapping[str, tuple[int, int]], scale: float, gen: torch.Generator
) -> dict[str, Tensor]:
    """Small random float64 weights to fit, one per entry of ``shapes`` (drawn in its order from
    ``gen``): ``scale * N(0, 1) / sqrt(fan_in)``, with gradients."""
    return {
        k: (
            scale * torch.randn(sh, generator=gen, dtype=torch.float64) / math.sqrt(sh[1])
        ).requires_grad_()
        for k, sh in shapes.items()
    }


def fit_with_penalties(
    tensors: list[Tensor],
    cost: Callable[[], Tensor],
    residual: Callable[[], Tensor],
    p: Mapping[str, Any],
) -> float:
    """Minimise ``cost()`` subject to ``residual() = 0`` (augmented Lagrangian), in place.

    Stages ``p["fit_penalties"]`` then ``p["fit_extra_stages"]`` more at the last penalty, each
    an L-BFGS solve of ``cost + <lam, r> + mu/2 ||r||^2`` (``p["fit_lbfgs_iters"]``) followed by
    the multiplier update ``lam += mu r``; stops once past the penalty ramp with
    ``||r||^2 <= p["fit_tol"]``. Returns the final ``||r||^2``.
    """
    with torch.no_grad():
        lam = torch.zeros_like(residual())
    penalties = list(p["fit_penalties"])
    stages = penalties + [penalties[-1]] * int(p["fit_extra_stages"])
    err = float("inf")
    for k, mu in enumerate(stages):
        lbfgs(
            lambda lam=lam, mu=mu: (
                cost() + (lam * residual()).sum() + 0.5 * mu * (residual() ** 2).sum()
            ),
            tensors,
            int(p["fit_lbfgs_iters"]),
        )
        with torch.no_grad():
            r = residual()
            lam = lam + mu * r
            err = float((r**2).sum())
        if k >= len(penalties) - 1 and err <= float(p["fit_tol"]):
            break
    return err


def balance_vo(W: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Replace (W_V, W_O) by the balanced SVD factorisation of W_O W_V; rescale each ReLU unit."""
    U, s, Vh = torch.linalg.svd(W["W_O"] @ W["W_V"])
    out = dict(W)
    out["W_O"] = U * s.sqrt()[None, :]
    out["W_V"] = s.sqrt()[:, None] * Vh
    # ReLU is positively homogeneous: unit j can be rescaled (a w1_j, w2_j / a); the optimal a
    # balances ||w1_j|| = ||w2_j|| and gives 2 ||w1_j|| ||w2_j||.
    n1 = torch.linalg.norm(W["W_1"], dim=1)
    n2 = torch.linalg.norm(W["W_2"], dim=0)
    a = torch.where(
        (n1 > 0) & (n2 > 0), (n2 / torch.clamp(n1, min=1e-300)).sqrt(), torch.ones_like(n1)
    )
    out["W_1"] = W["W_1"] * a[:, None]
    out["W_2"] = W["W_2"] / a[None, :]
    return out


def balanced_mlp_cost(W: Mapping[str, Tensor]) -> float:
    """``||W_1||_F^2 + ||W_2||_F^2`` (of balanced weights: the MLP's minimum over rescalings)."""
    return float((W["W_1"] ** 2).sum() + (W["W_2"] ** 2).sum())
