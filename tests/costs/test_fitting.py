"""The fitting helpers shared by the back-copy and copy-paste runs (:mod:`sinkscope.costs.fitting`)."""

from __future__ import annotations

import math

import pytest
import torch

from sinkscope.costs.fitting import init_weights, lbfgs


def test_init_weights_draws_each_shape_in_order_scaled_by_fan_in() -> None:
    shapes = {"W_V": (3, 4), "W_1": (5, 2)}
    W = init_weights(shapes, 0.5, torch.Generator().manual_seed(7))
    assert list(W) == ["W_V", "W_1"]
    gen = torch.Generator().manual_seed(7)
    for k, (rows, fan_in) in shapes.items():
        want = 0.5 * torch.randn((rows, fan_in), generator=gen, dtype=torch.float64)
        torch.testing.assert_close(W[k].detach(), want / math.sqrt(fan_in), rtol=0, atol=0)
        assert W[k].requires_grad and W[k].dtype == torch.float64


@pytest.mark.parametrize("tolerances", [{}, {"tolerance_grad": 1e-10, "tolerance_change": 1e-14}])
def test_lbfgs_minimises_a_quadratic_in_place(tolerances: dict[str, float]) -> None:
    target = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    lbfgs(lambda: ((x - target) ** 2).sum(), [x], 20, max_eval=40, **tolerances)
    torch.testing.assert_close(x.detach(), target)


def test_lbfgs_max_eval_bounds_the_evaluations() -> None:
    """A small ``max_eval`` stops the solve early (L-BFGS checks it after each iteration's line
    search); the default allows ``1.25 iters + 10``."""

    def evaluations(max_eval: int | None) -> int:
        calls = []
        x = torch.zeros(2, dtype=torch.float64, requires_grad=True)

        def loss() -> torch.Tensor:
            calls.append(1)
            return (torch.exp(x - 3.0) - x).sum()

        lbfgs(loss, [x], 100, max_eval=max_eval, tolerance_grad=0.0, tolerance_change=0.0)
        return len(calls)

    few, default = evaluations(3), evaluations(None)
    assert few < default <= int(100 * 1.25) + 10
