"""Induction task and attention functions (sinkscope.dynamics.induction, .common)."""

from __future__ import annotations

import math

import polars as pl
import pytest
import torch

from sinkscope.dynamics.attention import attention_weights, elu_plus_one
from sinkscope.dynamics.induction import (
    ATTENTION_VARIANTS,
    InductionTransformer,
    attention_mass,
    induction_grid,
    loss_and_accuracy,
    loss_floor,
    make_induction_data,
    run_induction,
    sink_mass,
)
from sinkscope.dynamics.summary import summarize_induction

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


def test_task_format_and_induction_positions_by_brute_force() -> None:
    x, mask = make_induction_data(400, seed=0)
    assert x.shape == mask.shape == (400, 13) and (x[:, 0] == 0).all()
    first = x[:, 1:7]
    assert ((first >= 1) & (first <= 50)).all()
    assert all(len(set(row.tolist())) == 6 for row in first)  # distinct tokens
    shifts = set()
    for row, m in zip(x.tolist(), mask.tolist(), strict=True):
        half = row[1:7]
        # the second half is the first half rotated
        s = half.index(row[7])
        shifts.add(s)
        assert row[7:] == half[s:] + half[:s]
        for i in range(13):
            # an induction position: second half, its token has a successor in the first half,
            # and that successor is the next token
            expect = 7 <= i < 12 and half.index(row[i]) < 5
            assert m[i] == expect
            if expect:
                assert row[i + 1] == half[half.index(row[i]) + 1]
    assert shifts == set(range(6))  # every rotation occurs: no fixed-offset shortcut
    xd, md = make_induction_data(400, seed=0, repeat_distinct=True)
    assert torch.equal(xd[:, :7], x[:, :7]) and torch.equal(xd[:, 7:], x[:, 7:] + 50)
    assert torch.equal(md, mask)
    with pytest.raises(ValueError, match="seq_len"):
        make_induction_data(3, seed=0, seq_len=12)


def test_loss_and_accuracy_on_planted_logits() -> None:
    x, mask = make_induction_data(50, seed=3)
    perfect = torch.full((50, 13, 51), -30.0)
    perfect[:, :-1].scatter_(2, x[:, 1:, None], 30.0)  # always predicts the next token
    loss, acc = loss_and_accuracy(perfect, x, mask, "all")
    assert acc == 1.0 and loss < 1e-6
    wrong = perfect.roll(1, dims=2)
    assert loss_and_accuracy(wrong, x, mask, "induction")[1] == 0.0
    # "induction" averages over the masked positions only: spoil an unmasked one
    spoiled = perfect.clone()
    spoiled[:, 2] = 0.0
    assert loss_and_accuracy(spoiled, x, mask, "induction")[0] < 1e-6
    assert loss_and_accuracy(spoiled, x, mask, "all")[0] > 0.1


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
    elif normalize:  # mlp / linear: divided by max(sum, 1)
        scores = attention_weights(q, k, attention, False, mlp)
        raw = scores.sum(-1)
        expect = torch.where(raw >= 1, torch.ones_like(raw), raw)
        torch.testing.assert_close(rows, expect)


def test_sink_mass_on_planted_attention() -> None:
    T = 13
    B, H = 4, 4
    att = torch.zeros(B, H, T, T)
    att[:, 0, :, 0] = 1.0  # head 0: perfect sink
    causal = torch.ones(T, T).tril()
    att[:, 1] = causal / causal.sum(-1, keepdim=True)  # head 1: uniform causal
    att[:, 2] = torch.eye(T)  # head 2: diagonal
    att[:, 2, :, 0] = -3.0  # ... plus a negative (unnormalised) weight on position 0
    att[:, 2, 0, 0] = 1.0
    att[:, 3] = 1e-3 * causal  # head 3: "does nothing" with tiny unnormalised weights
    att[:, 3, :, 0] = 2e-3
    mean0, idle0 = sink_mass(att, idle_rows=6)
    assert mean0[0] == pytest.approx(1.0) and idle0[0] == pytest.approx(1.0)
    uniform = sum(1.0 / (i + 1) for i in range(1, T)) / (T - 1)
    assert mean0[1] == pytest.approx(uniform) and 0.18 < uniform < 0.19
    assert idle0[1] == pytest.approx(sum(1.0 / (i + 1) for i in range(1, 7)) / 6)
    assert mean0[2] == pytest.approx(0.75)  # |-3| / (|-3| + 1) on every row i >= 1
    assert mean0[3] == pytest.approx(2e-3)  # small rows stay small: not a sink
    # rows of total weight >= 1 are measured as distributions whatever their scale
    m2, _ = sink_mass(7.0 * att[:, :3], idle_rows=6)
    torch.testing.assert_close(m2, mean0[:3])
    assert attention_mass(att).shape == att.shape


def test_tiny_run_is_deterministic_and_complete() -> None:
    spec = {**TINY, "attention": "elu", "normalize": False, "positional": "rope", "id": "t"}
    a = run_induction(spec)
    b = run_induction(spec)
    for name in ("final", "curve", "heads", "pattern"):
        assert a[name].equals(b[name]), name
    assert [c for c in a["timing"].columns if c != "run_id"] == ["wall_s", "wall_cpu_s"]
    final = a["final"].row(0, named=True)
    assert final["steps"] == 8 and final["learned"] == (final["accuracy"] >= 0.5)
    assert final["loss_positions"] == "all"
    assert a["heads"].height == 2 * 4
    assert a["curve"]["eval_accuracy"].drop_nulls().len() == 2
    assert a["pattern"]["weight"].min() >= 0.0
    c = run_induction({**spec, "seed": 1})
    assert not c["curve"].equals(a["curve"])
    summary = summarize_induction([a, c])
    assert summary["by_setup"].height == 1 and summary["by_setup"]["runs"][0] == 2
    s = run_induction({**TINY, "attention": "softmax", "id": "s"})
    pat = s["pattern"].group_by("kind", "head", "query").agg(pl.col("weight").sum())
    assert (pat["weight"] - 1.0).abs().max() < 1e-6  # softmax rows are distributions


def test_model_variants_build_and_grids() -> None:
    for pe in ("none", "absolute", "rope"):
        for distinct in (False, True):
            model = InductionTransformer({**TINY, "positional": pe, "repeat_distinct": distinct})
            x, _ = make_induction_data(5, 0, repeat_distinct=distinct)
            logits, atts = model(x)
            assert logits.shape == (5, 13, 101 if distinct else 51) and len(atts) == 2
    default, paper = induction_grid("default"), induction_grid("paper")
    # 26 setups of seed 0, seeds 1 and 2 of the sink claim's 12 (softmax and the 5 un-normalised
    # variants x 2 weight decays, RoPE), 5 switches x 2 weight decays
    assert len({s["id"] for s in default}) == len(default) == 26 + 12 * 2 + 5 * 2
    later = [s for s in default if s["seed"] > 0]
    assert {s["seed"] for s in later} == {1, 2}
    assert all(s["attention"] == "softmax" or not s["normalize"] for s in later)
    assert all(s["positional"] == "rope" and "switch" not in s for s in later)
    assert len({(s["attention"], s["normalize"], s["weight_decay"]) for s in later}) == 12
    assert len({s["id"] for s in paper}) == len(paper) == 11 * 3 * 2 * 3 + 5 * 3 * 2 * 3
    assert [s["id"] for s in default] == [s["id"] for s in induction_grid("default")]
    small = induction_grid("default", {"n_train": 640})
    assert all(s["n_train"] == 640 for s in small)
    assert {s["id"] for s in small}.isdisjoint(s["id"] for s in default)
    with pytest.raises(KeyError, match="colour"):
        induction_grid("default", {"colour": 1})


@pytest.mark.parametrize("attention", ["sigmoid", "elu", "elu_elu"])
def test_normalised_positive_scores_survive_underflow(attention: str) -> None:
    """Scores far below 0 underflow (elu(x) + 1 = (exp(x) - 1) + 1 is exactly 0 in float32 for
    x < -17); the normalised weights must stay finite and sum to one."""
    q = torch.full((1, 1, 5, 4), 30.0)
    k = torch.full((1, 1, 5, 4), -30.0)
    att = attention_weights(q, k, attention, True)
    assert torch.isfinite(att).all()
    x = torch.linspace(-10, 10, 101)
    torch.testing.assert_close(elu_plus_one(x), torch.nn.functional.elu(x) + 1.0)


def test_loss_floor_equals_the_conditional_entropy_of_an_enumerated_task() -> None:
    """vocab 4, length 5: the 4 * 3 ordered first halves x 2 shifts are equally likely; the
    floor is the mean over positions of H(next token | prefix), counted by enumeration."""
    vocab, seq_len, m = 4, 5, 2
    seqs = [
        (0, a, b, *((a, b)[s:] + (a, b)[:s]))
        for a in range(1, vocab + 1)
        for b in range(1, vocab + 1)
        if a != b
        for s in range(m)
    ]
    total = 0.0
    for k in range(seq_len - 1):  # predict token k + 1 from tokens 0..k
        prefixes: dict[tuple, list[int]] = {}
        for seq in seqs:
            prefixes.setdefault(seq[: k + 1], []).append(seq[k + 1])
        for nxt in prefixes.values():
            counts = [nxt.count(t) for t in set(nxt)]
            p_prefix = len(nxt) / len(seqs)
            total += p_prefix * -sum(c / len(nxt) * math.log(c / len(nxt)) for c in counts)
    assert loss_floor(vocab, seq_len) == pytest.approx(total / (seq_len - 1), rel=1e-12)
    assert loss_floor(vocab, seq_len, "induction") == 0.0
    # the data generator draws exactly this support
    x, _ = make_induction_data(2000, seed=1, vocab=vocab, seq_len=seq_len)
    assert {tuple(r) for r in x.tolist()} == set(seqs)


def test_absolute_positions_start_at_pos_init_std_and_nothing_else_moves() -> None:
    cfg = {**TINY, "hidden": 128, "n_heads": 4, "positional": "absolute"}
    models = {}
    for std in (0.02, 1.0):
        torch.manual_seed(0)
        models[std] = InductionTransformer({**cfg, "pos_init_std": std})
    for std, model in models.items():
        assert model.pos is not None
        assert float(model.pos.weight.detach().std()) == pytest.approx(std, rel=0.1)
    small, large = (dict(m.named_parameters()) for m in models.values())
    assert all(torch.equal(small[k], large[k]) for k in small if k != "pos.weight")
