"""Induction task and attention functions (sinkscope.dynamics.induction)."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from sinkscope.dynamics.induction import (
    ATTENTION_VARIANTS,
    InductionTransformer,
    _elu1,
    attention_weights,
    induction_grid,
    make_induction_data,
    run_induction,
    sink_mass,
    summarize_induction,
)

TINY = {
    "hidden": 32,
    "ffn": 64,
    "n_heads": 4,
    "n_train": 256,
    "n_eval": 64,
    "epochs": 2,
    "batch_size": 64,
    "curve_every": 2,
}


def test_task_format() -> None:
    x, y = make_induction_data(500, seed=0)
    assert x.shape == (500, 13) and (x[:, 0] == 0).all()
    body = x[:, 1:12]
    assert ((body >= 1) & (body <= 50)).all()
    assert all(len(set(row.tolist())) == 11 for row in body)  # distinct tokens
    for row, target in zip(x, y, strict=True):
        i = int((row[1:12] == row[-1]).nonzero()[0, 0]) + 1
        assert i <= 10 and row[i + 1] == target
    xd, yd = make_induction_data(500, seed=0, repeat_distinct=True)
    assert ((xd[:, -1] > 50) & (xd[:, -1] <= 100)).all()
    assert torch.equal(xd[:, :-1], x[:, :-1]) and torch.equal(yd, y)
    assert torch.equal(xd[:, -1], x[:, -1] + 50)


@pytest.mark.parametrize("attention,normalize", ATTENTION_VARIANTS)
def test_attention_functions_normalisation(attention: str, normalize: bool) -> None:
    torch.manual_seed(0)
    q, k = torch.randn(3, 2, 7, 8), torch.randn(3, 2, 7, 8)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    att = attention_weights(q, k, attention, normalize, mlp)
    assert att.shape == (3, 2, 7, 7)
    future = ~torch.ones(7, 7, dtype=torch.bool).tril()
    assert (att[..., future] == 0).all()  # causal
    rows = att.sum(-1)
    if attention in ("softmax", "sigmoid", "elu", "elu_elu"):
        assert (att[..., ~future] > 0).all()
        if normalize:
            torch.testing.assert_close(rows, torch.ones_like(rows))
        else:
            assert not torch.allclose(rows, torch.ones_like(rows))
    elif normalize:  # mlp / linear: divided by max(sum, 1) -> |row sum| <= 1 where sum >= 1 ...
        scores = attention_weights(q, k, attention, False, mlp)
        raw = scores.sum(-1)
        expect = torch.where(raw >= 1, torch.ones_like(raw), raw)
        torch.testing.assert_close(rows, expect)


def test_sink_mass_on_planted_attention() -> None:
    T = 13
    B, H = 4, 3
    att = torch.zeros(B, H, T, T)
    att[:, 0, :, 0] = 1.0  # head 0: perfect sink
    causal = torch.ones(T, T).tril()
    att[:, 1] = causal / causal.sum(-1, keepdim=True)  # head 1: uniform causal
    att[:, 2] = torch.eye(T)  # head 2: diagonal
    att[:, 2, :, 0] = -3.0  # ... plus a negative (unnormalised) weight on position 0
    att[:, 2, 0, 0] = 1.0
    mean0, last0 = sink_mass(att)
    assert mean0[0] == pytest.approx(1.0) and last0[0] == pytest.approx(1.0)
    uniform = sum(1.0 / (i + 1) for i in range(1, T)) / (T - 1)
    assert mean0[1] == pytest.approx(uniform) and 0.18 < uniform < 0.19
    assert mean0[2] == pytest.approx(0.75)  # |-3| / (|-3| + 1) on every row i >= 1
    # scale invariance: unnormalised heads are measured as distributions
    m2, _ = sink_mass(7.0 * att)
    torch.testing.assert_close(m2, mean0)


def test_tiny_run_is_deterministic_and_complete() -> None:
    spec = {**TINY, "attention": "elu", "normalize": False, "positional": "rope", "id": "t"}
    a = run_induction(spec)
    b = run_induction(spec)
    for name in ("curve", "heads", "pattern"):
        assert a[name].equals(b[name]), name
    assert a["final"].drop("wall_s", "cpu_s").equals(b["final"].drop("wall_s", "cpu_s"))
    final = a["final"].row(0, named=True)
    assert final["steps"] == 8 and final["learned"] == (final["accuracy"] >= 0.5)
    assert a["heads"].height == 2 * 4
    assert a["curve"]["eval_accuracy"].drop_nulls().len() == 2
    pat = a["pattern"].group_by("kind", "head", "query").agg(pl.col("weight").sum())
    assert (pat["weight"] - 1.0).abs().max() < 1e-9
    c = run_induction({**spec, "seed": 1})
    assert not c["curve"].equals(a["curve"])
    summary = summarize_induction([a, c])
    assert summary["by_setup"].height == 1 and summary["by_setup"]["runs"][0] == 2


def test_model_variants_build_and_grids() -> None:
    for pe in ("none", "absolute", "rope"):
        for distinct in (False, True):
            model = InductionTransformer({**TINY, "positional": pe, "repeat_distinct": distinct})
            x, _ = make_induction_data(5, 0, repeat_distinct=distinct)
            logits, atts = model(x)
            assert logits.shape == (5, 101 if distinct else 51) and len(atts) == 2
    default, paper = induction_grid("default"), induction_grid("paper")
    assert len({s["id"] for s in default}) == len(default)
    assert len({s["id"] for s in paper}) == len(paper) == 11 * 3 * 2 * 3
    assert [s["id"] for s in default] == [s["id"] for s in induction_grid("default")]


@pytest.mark.parametrize("attention", ["sigmoid", "elu", "elu_elu"])
def test_normalised_positive_scores_survive_underflow(attention: str) -> None:
    """Scores far below 0 underflow (elu(x) + 1 = (exp(x) - 1) + 1 is exactly 0 in float32 for
    x < -17); the normalised weights must stay finite and sum to one."""
    q = torch.full((1, 1, 5, 4), 30.0)
    k = torch.full((1, 1, 5, 4), -30.0)
    att = attention_weights(q, k, attention, True)
    assert torch.isfinite(att).all()
    x = torch.linspace(-10, 10, 101)
    torch.testing.assert_close(_elu1(x), torch.nn.functional.elu(x) + 1.0)
