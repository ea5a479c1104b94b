"""Gradient-flow dynamics of the value-softmax model ``L(V phi(a))`` (Theorem 3.3, Figures 2, 3,
10-13 of the value-softmax polarization paper).

The paper text we have holds only the abstract and the figure captions, so the setups below are
our reconstruction; every choice the captions leave open is written down here.

Models (``spec["experiment"]``)
-------------------------------
``untied`` (Figures 2, 10, 13)
    ``V in R^{d x n}`` and ``a in R^n`` are learned, the output is ``z = V phi(a) in R^d``.
``tied`` (Figure 11)
    ``U in R^{D x D}`` and ``a in R^D`` are learned, the output is ``z = U softmax(U a)``
    (the logits of the softmax are ``U a``). The caption's ``U^(m)`` is the column of ``U``
    at the entry the softmax converges to (arg-max of the final ``softmax(U a)``).
``regression`` (Figures 3, 12)
    ``beta = V softmax(a) in R^d`` is the coefficient vector of a linear regression with
    population loss ``1/2 (beta - beta*)^T Sigma (beta - beta*)``; ``Sigma`` has eigenvalues
    ``linspace(1/kappa, 1, d)`` (condition number ``kappa``, largest eigenvalue 1 so that one step
    size is stable for every ``kappa``) in a random orthonormal basis, ``beta*`` is a random
    vector of norm ``spec["target"]`` (5 in the grid: with norm 1 and ``V`` initialised at scale
    0.1 the fit is reached before the logits move at all, for every ``kappa``).

Losses (on ``z``; ``w`` is a fixed random unit vector in ``R^d``)
-----------------------------------------------------------------
``logistic``  ``log(1 + exp(-<w, z>))`` (binary label +1); value projections ``u_i = <w, v_i>``.
``square``    ``1/2 (<w, z> - y)^2`` with target ``y = spec["target"]`` (default 1);
              ``u_i = <w, v_i>``.
``kl``        ``KL(p || softmax(z))`` with a fixed *soft* target ``p = softmax(s g)``
              (``s = spec["kl_sharpness"]``, 2 by default, 8 in a second grid entry),
              ``g ~ N(0, I_d)`` (so the optimum is attained at finite parameters, unlike the
              logistic loss); ``u_i = <c, v_i>`` with ``c`` the centred ``log p`` normalised to
              unit length (the direction the logits must grow along).

Activations ``phi`` (Figure 13; only the untied model)
-------------------------------------------------------
``softmax``  ``exp(a_i) / sum_j exp(a_j)``.
``sum``      ``phi(a) = a``: the values are summed with the raw scores, no normalisation
             (the caption's "sum"; our reading).
``sigmoid``  ``phi(a)_i = sigmoid(a_i)``, elementwise and not normalised.
``sigmoid_norm``  ``sigmoid(a_i) / sum_j sigmoid(a_j)`` (Table 1's normalised sigmoid; extra).

The attention "distribution" reported for every activation is ``|phi(a)| / sum |phi(a)|`` and
its Shannon entropy (nats) measures polarization: 0 for one-hot, ``log n`` for uniform.

Initial logits: ``a = 0`` (uniform attention; for ``sum``, ``a = 1/n``, because ``phi(0) = 0``
is a saddle point), plus ``init_a`` times Gaussian noise (0 by default).

Optimisation: plain full-batch gradient descent in float64 with a small step ``lr``
(``lr * steps`` is the gradient-flow time), ``V ~ N(0, init_v^2)``, ``a ~ N(0, init_a^2)``.
Snapshots are taken at ``n_snapshots`` log-spaced steps (plus step 0).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.dynamics.grids import (
    VALUE_SOFTMAX_DEFAULTS,
    value_softmax_grid,
    value_softmax_spec,
)

__all__ = [
    "DEFAULTS",
    "loss_and_gradient",
    "objective",
    "run_value_softmax",
    "value_softmax_grid",
]

#: A run counts as polarized when its final top attention weight reaches this value.
POLARIZED = 0.9
DEFAULTS = VALUE_SOFTMAX_DEFAULTS
_spec = value_softmax_spec


def _phi(a: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "softmax":
        return torch.softmax(a, dim=-1)
    if activation == "sum":
        return a
    if activation == "sigmoid":
        return torch.sigmoid(a)
    s = torch.sigmoid(a)
    return s / s.sum()


def _problem(spec: dict) -> dict[str, torch.Tensor]:
    """Fixed (non-learned) tensors and the initial parameters, all from ``spec["seed"]``."""
    gen = torch.Generator().manual_seed(int(spec["seed"]))
    f64 = torch.float64
    exp = spec["experiment"]
    d = int(spec["n"]) if exp == "tied" else int(spec["d"])
    n = int(spec["n"])
    w = torch.randn(d, generator=gen, dtype=f64)
    w = w / w.norm()
    g = torch.randn(d, generator=gen, dtype=f64)
    p = torch.softmax(float(spec["kl_sharpness"]) * g, dim=0)
    c = torch.log(p) - torch.log(p).mean()
    c = c / c.norm()
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=f64))
    eig = torch.linspace(1.0 / float(spec["kappa"]), 1.0, d, dtype=f64)
    sigma = q @ torch.diag(eig) @ q.T
    beta = torch.randn(d, generator=gen, dtype=f64)
    beta = float(spec["target"]) * beta / beta.norm()
    V = float(spec["init_v"]) * torch.randn(d, n, generator=gen, dtype=f64)
    a = float(spec["init_a"]) * torch.randn(n, generator=gen, dtype=f64)
    if spec["activation"] == "sum":
        a = a + 1.0 / n  # phi(a) = a starts at the uniform weights 1/n (phi(0) = 0 is a saddle)
    return {"w": w, "p": p, "c": c, "sigma": sigma, "beta": beta, "V": V, "a": a}


def _weights_logits(V: torch.Tensor, a: torch.Tensor, spec: dict) -> tuple[torch.Tensor, ...]:
    """(phi, logits) where logits are the softmax inputs (``a`` or ``U a`` for the tied model)."""
    if spec["experiment"] == "tied":
        logits = V @ a
        return torch.softmax(logits, dim=-1), logits
    return _phi(a, spec["activation"]), a


def objective(V: torch.Tensor, a: torch.Tensor, spec: dict, fixed: dict) -> torch.Tensor:
    """The training loss of the (completed) ``spec`` at parameters ``(V, a)``."""
    phi, _ = _weights_logits(V, a, spec)
    z = V @ phi
    if spec["experiment"] == "regression":
        diff = z - fixed["beta"]
        return 0.5 * diff @ fixed["sigma"] @ diff
    loss = spec["loss"]
    if loss == "logistic":
        return torch.nn.functional.softplus(-(fixed["w"] @ z))
    if loss == "square":
        return 0.5 * (fixed["w"] @ z - float(spec["target"])) ** 2
    p = fixed["p"]
    return (p * (torch.log(p) - torch.log_softmax(z, dim=0))).sum()


def _np_phi(a: np.ndarray, activation: str) -> tuple[np.ndarray, Any]:
    """``phi(a)`` and a function applying its (symmetric or diagonal) Jacobian to a vector."""
    if activation == "softmax":
        e = np.exp(a - a.max())
        s = e / e.sum()
        return s, lambda h: s * (h - s @ h)
    if activation == "sum":
        return a, lambda h: h
    sig = 1.0 / (1.0 + np.exp(-a))
    if activation == "sigmoid":
        return sig, lambda h: sig * (1.0 - sig) * h
    tot = sig.sum()
    s = sig / tot
    # d s_i / d a_k = sig'_k (delta_ik - s_i) / tot; J^T h = sig' (h - s.h) / tot
    return s, lambda h: sig * (1.0 - sig) * (h - s @ h) / tot


def loss_and_gradient(
    V: np.ndarray, a: np.ndarray, spec: dict, fixed: dict
) -> tuple[float, np.ndarray, np.ndarray]:
    """Closed-form ``(L, dL/dV, dL/da)`` of every model (numpy, float64).

    With ``z = V phi`` and ``g = dL/dz``: ``dL/dV = g phi^T`` and ``dL/da = J_phi^T V^T g``, where
    ``g = -sigmoid(-<w,z>) w`` (logistic), ``(<w,z> - y) w`` (square), ``softmax(z) - p`` (KL),
    ``Sigma (z - beta*)`` (regression); ``J_softmax = diag(s) - s s^T``. For the tied model
    ``z = U s(U a)``: ``r = J_s^T U^T g``, ``dL/dU = g s^T + r a^T`` and ``dL/da = U^T r``.
    """
    spec = _spec(spec)
    exp = spec["experiment"]
    if exp == "tied":
        phi, jac = _np_phi(V @ a, "softmax")
    else:
        phi, jac = _np_phi(a, spec["activation"])
    z = V @ phi
    if exp == "regression":
        diff = z - fixed["beta"]
        g = fixed["sigma"] @ diff
        loss = 0.5 * diff @ g
    elif spec["loss"] == "logistic":
        m = fixed["w"] @ z
        loss = float(np.logaddexp(0.0, -m))
        g = -fixed["w"] * 0.5 * (1.0 - np.tanh(0.5 * m))  # -sigmoid(-m) w, overflow-free
    elif spec["loss"] == "square":
        r = fixed["w"] @ z - float(spec["target"])
        loss = 0.5 * r * r
        g = r * fixed["w"]
    else:
        p = fixed["p"]
        logq = z - z.max() - np.log(np.exp(z - z.max()).sum())
        loss = float((p * (np.log(p) - logq)).sum())
        g = np.exp(logq) - p
    r = jac(V.T @ g)
    if exp == "tied":
        return float(loss), np.outer(g, phi) + np.outer(r, a), V.T @ r
    return float(loss), np.outer(g, phi), r


def _snapshot_steps(steps: int, count: int) -> list[int]:
    grid = np.unique(np.round(np.geomspace(1, steps, count)).astype(int))
    return [0, *grid.tolist()]


def _entropy(prob: np.ndarray) -> float:
    nz = prob[prob > 0]
    return float(-(nz * np.log(nz)).sum())


def run_value_softmax(spec: dict) -> dict[str, pl.DataFrame]:
    """Gradient descent on one value-softmax problem (one job).

    Returns ``{"trajectory", "scalars", "final", "timing"}``:

    * ``trajectory`` - one row per (snapshot, entry ``i``): ``step, time, entry, weight``
      (``|phi_i| / sum |phi|``), ``logit`` (softmax input), ``value_proj`` (``u_i``, see the
      module docstring), ``value_norm`` (``||v_i||``).
    * ``scalars`` - one row per snapshot: ``step, time, loss_value, v_norm`` (Frobenius),
      ``entropy``, ``top_weight``, ``top_entry``, ``top_value_norm`` (``||U^(m)||`` for tied).
    * ``final`` - one row: the spec, final entropy/top weight/``||V||``/loss, ``polarized``
      (``top_weight >= POLARIZED = 0.9``), ``order_preserved`` (fraction of entry pairs whose value
      projections keep their initial order).
    * ``timing`` - one row: ``wall_s`` (the only table that differs between identical runs).

    Every table carries the spec's ``id`` as ``run_id``.
    """
    t0 = time.perf_counter()
    spec = _spec(spec)
    run_id = str(spec.get("id", "run"))
    fixed = {k: v.numpy() for k, v in _problem(spec).items()}
    V, a = fixed["V"].copy(), fixed["a"].copy()
    lr, steps = float(spec["lr"]), int(spec["steps"])
    snaps = set(_snapshot_steps(steps, int(spec["n_snapshots"])))
    if spec["experiment"] == "regression":
        direction = fixed["beta"] / np.linalg.norm(fixed["beta"])
    elif spec["loss"] == "kl":
        direction = fixed["c"]
    else:
        direction = fixed["w"]
    traj: list[dict] = []
    scal: list[dict] = []
    for step in range(steps + 1):
        loss, gV, ga = loss_and_gradient(V, a, spec, fixed)
        if step in snaps:
            logits = V @ a if spec["experiment"] == "tied" else a
            phi = _np_phi(
                logits, "softmax" if spec["experiment"] == "tied" else spec["activation"]
            )[0]
            prob = np.abs(phi) / np.abs(phi).sum()
            u = V.T @ direction
            col_norm = np.linalg.norm(V, axis=0)
            top = int(np.argmax(prob))
            for i in range(prob.size):
                traj.append(
                    {
                        "step": step,
                        "time": step * lr,
                        "entry": i,
                        "weight": float(prob[i]),
                        "logit": float(logits[i]),
                        "value_proj": float(u[i]),
                        "value_norm": float(col_norm[i]),
                    }
                )
            scal.append(
                {
                    "step": step,
                    "time": step * lr,
                    "loss_value": loss,
                    "v_norm": float(np.linalg.norm(V)),
                    "entropy": _entropy(prob),
                    "top_weight": float(prob[top]),
                    "top_entry": top,
                    "top_value_norm": float(col_norm[top]),
                }
            )
        if step == steps:
            break
        if not (np.isfinite(gV).all() and np.isfinite(ga).all()):
            raise FloatingPointError(f"{run_id}: non-finite gradient at step {step}")
        V -= lr * gV
        a -= lr * ga
    trajectory = pl.DataFrame(traj).with_columns(run_id=pl.lit(run_id))
    scalars = pl.DataFrame(scal).with_columns(run_id=pl.lit(run_id))
    first = trajectory.filter(pl.col("step") == 0)["value_proj"].to_numpy()
    last = trajectory.filter(pl.col("step") == steps)["value_proj"].to_numpy()
    iu = np.triu_indices(first.size, 1)
    same = (
        np.sign(first[:, None] - first[None, :])[iu] == np.sign(last[:, None] - last[None, :])[iu]
    )
    end = scal[-1]
    final = pl.DataFrame(
        [
            {
                "run_id": run_id,
                **{k: spec[k] for k in DEFAULTS if k != "n_snapshots"},
                "final_loss": end["loss_value"],
                "entropy": end["entropy"],
                "max_entropy": math.log(len(first)),
                "top_weight": end["top_weight"],
                "top_entry": end["top_entry"],
                "v_norm": end["v_norm"],
                "top_value_norm": end["top_value_norm"],
                "polarized": end["top_weight"] >= POLARIZED,
                "order_preserved": float(same.mean()) if same.size else 1.0,
            }
        ]
    )
    timing = pl.DataFrame([{"run_id": run_id, "wall_s": time.perf_counter() - t0}])
    return {"trajectory": trajectory, "scalars": scalars, "final": final, "timing": timing}
