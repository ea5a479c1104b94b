"""Value-softmax dynamics (sinkscope.dynamics.value_softmax): gradients and polarization."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sinkscope.dynamics.summary import summarize_value_softmax
from sinkscope.dynamics.value_softmax import (
    _problem,
    _spec,
    loss_and_gradient,
    objective,
    run_value_softmax,
    value_softmax_grid,
)

CASES = [
    {"experiment": "untied", "loss": loss, "activation": act}
    for loss in ("logistic", "square", "kl")
    for act in ("softmax", "sum", "sigmoid", "sigmoid_norm")
] + [
    {"experiment": "tied", "loss": "logistic", "n": 4, "d": 4},
    {"experiment": "regression", "loss": "square", "kappa": 3.0, "target": 5.0},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_analytic_gradient_matches_autograd_and_fd(case: dict) -> None:
    spec = _spec({**case, "seed": 3, "init_v": 0.7, "init_a": 0.8})
    fixed_t = _problem(spec)
    fixed = {k: v.numpy() for k, v in fixed_t.items()}
    V, a = fixed["V"], fixed["a"]
    loss, gV, ga = loss_and_gradient(V, a, spec, fixed)
    Vt = torch.tensor(V, requires_grad=True)
    at = torch.tensor(a, requires_grad=True)
    lt = objective(Vt, at, spec, fixed_t)
    aV, aa = torch.autograd.grad(lt, (Vt, at))
    assert loss == pytest.approx(float(lt.detach()), rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(gV, aV.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ga, aa.numpy(), rtol=1e-9, atol=1e-12)
    # central finite differences on a few coordinates
    eps = 1e-6
    for idx in [(0, 0), (V.shape[0] - 1, V.shape[1] - 1)]:
        Vp, Vm = V.copy(), V.copy()
        Vp[idx] += eps
        Vm[idx] -= eps
        fd = loss_and_gradient(Vp, a, spec, fixed)[0] - loss_and_gradient(Vm, a, spec, fixed)[0]
        assert fd / (2 * eps) == pytest.approx(gV[idx], rel=1e-5, abs=1e-8)
    for i in range(a.size):
        ap, am = a.copy(), a.copy()
        ap[i] += eps
        am[i] -= eps
        fd = loss_and_gradient(V, ap, spec, fixed)[0] - loss_and_gradient(V, am, spec, fixed)[0]
        assert fd / (2 * eps) == pytest.approx(ga[i], rel=1e-5, abs=1e-8)


def test_two_entry_polarization_direction() -> None:
    """n=2, logistic loss, a=0: the entry whose value projection u_i = <w, v_i> is larger at
    initialisation takes all the attention (da_1 - da_2 ∝ (u_1 - u_2) at a = 0), and u keeps
    its order while both diverge."""
    spec = {"loss": "logistic", "n": 2, "d": 3, "seed": 5, "lr": 0.2, "steps": 20_000}
    out = run_value_softmax(spec)
    traj = out["trajectory"]
    u0 = traj.filter(traj["step"] == 0).sort("entry")["value_proj"].to_numpy()
    end = traj.filter(traj["step"] == spec["steps"]).sort("entry")
    winner = int(np.argmax(u0))
    assert u0[0] != u0[1]
    assert end["weight"].to_numpy()[winner] > 0.9
    assert int(out["final"]["top_entry"][0]) == winner
    assert out["final"]["order_preserved"][0] == 1.0
    u_end = end["value_proj"].to_numpy()
    assert np.argmax(u_end) == winner and u_end[winner] > 5 * max(abs(u0).max(), 0.1)
    # the entropy decreases monotonically along the flow
    ent = out["scalars"].sort("step")["entropy"].to_numpy()
    assert np.all(np.diff(ent) <= 1e-12)


def test_square_loss_does_not_polarize_and_grid_ids_are_stable() -> None:
    out = run_value_softmax({"loss": "square", "steps": 4000, "lr": 0.05})
    assert out["final"]["final_loss"][0] < 1e-10
    assert out["final"]["top_weight"][0] < 0.5
    grid = value_softmax_grid("default")
    assert [s["id"] for s in grid] == [s["id"] for s in value_softmax_grid("default")]
    assert len({s["id"] for s in grid}) == len(grid)
    assert len(value_softmax_grid("paper")) > len(grid)
    summary = summarize_value_softmax([out])
    assert summary["by_variant"].height == 1
