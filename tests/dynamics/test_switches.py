"""Other attention switches (sinkscope.dynamics.switches) and their measurement in the induction
model (sinkscope.dynamics.induction: switch_mass, switched_off, switch_measures)."""

from __future__ import annotations

import math

import polars as pl
import pytest
import torch

from sinkscope.dynamics.attention import rope
from sinkscope.dynamics.common import SelfAttention
from sinkscope.dynamics.grids import SWITCHES
from sinkscope.dynamics.induction import (
    OFF_THRESHOLD,
    InductionTransformer,
    make_induction_data,
    run_induction,
    sink_mass,
    switch_mass,
    switch_measures,
    switched_off,
)
from sinkscope.dynamics.switches import (
    SOFTPICK_EPS,
    HeadSwitch,
    output_gate,
    softmax_with_slot,
    softpick,
)

CAUSAL = torch.ones(5, 5, dtype=torch.bool).tril()


def _scores(seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return 2.0 * torch.randn(2, 3, 5, 5, generator=gen, dtype=torch.float64)


def test_sink_logit_rows_sum_to_one_minus_p_sink_with_its_closed_form_gradient() -> None:
    s = _scores()
    b = torch.tensor([-1.0, 0.0, 2.5], dtype=torch.float64, requires_grad=True)
    att, p = softmax_with_slot(s, CAUSAL, b.view(-1, 1, 1))
    e = torch.exp(s) * CAUSAL
    eb = torch.exp(b.detach()).view(-1, 1)  # (H, 1) against the rows' (B, H, T)
    denom = eb + e.sum(-1)
    p_closed = eb / denom
    torch.testing.assert_close(p[..., 0], p_closed)
    torch.testing.assert_close(att, e / denom[..., None])
    torch.testing.assert_close(att.sum(-1), 1.0 - p_closed)
    assert (att[..., ~CAUSAL] == 0).all()
    # d p_sink / d b_h = p_sink (1 - p_sink), row by row
    (grad,) = torch.autograd.grad(p[1, 2, 3, 0], b)
    pp = p_closed[1, 2, 3]
    torch.testing.assert_close(grad, torch.tensor([0.0, 0.0, float(pp * (1 - pp))]).double())
    # b = 0 is "softmax plus one": e^s / (1 + sum e^s)
    att0, _ = softmax_with_slot(s, CAUSAL, torch.zeros(3, 1, 1, dtype=torch.float64))
    torch.testing.assert_close(att0, e / (1.0 + e.sum(-1, keepdim=True)))


def _naive_softpick(s: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    d = (torch.exp(s) - 1.0) * mask
    return torch.relu(d) / (d.abs().sum(-1, keepdim=True) + SOFTPICK_EPS)


def test_softpick_stable_form_equals_the_naive_one_and_keeps_its_bounds() -> None:
    s = _scores(1)
    w = softpick(s, CAUSAL)
    torch.testing.assert_close(w, _naive_softpick(s, CAUSAL), rtol=1e-12, atol=0.0)
    assert (w >= 0).all() and (w[..., ~CAUSAL] == 0).all() and (w[s <= 0] == 0).all()
    assert (w.sum(-1) <= 1.0).all()
    # a row with a single positive score: (e^s - 1) / (e^s - 1 + sum_{k<0} (1 - e^{s_k}))
    row = torch.tensor([[0.7, -1.0, -2.0]], dtype=torch.float64)
    expect = (math.exp(0.7) - 1) / (math.exp(0.7) - 1 + (1 - math.exp(-1)) + (1 - math.exp(-2)))
    assert float(softpick(row, torch.ones(1, 3, dtype=torch.bool))[0, 0]) == pytest.approx(expect)
    # all scores <= 0: the row sums to 0 (the head is off)
    neg = -s.abs()
    assert (softpick(neg, CAUSAL) == 0).all()
    # masked keys add nothing: the same as the row cut to its visible keys
    cut = softpick(s[..., 3:4, :4], torch.ones(1, 4, dtype=torch.bool))
    torch.testing.assert_close(w[..., 3:4, :4], cut, rtol=1e-12, atol=0.0)
    # large scores (float32): finite, where the naive form overflows to inf / inf
    big = torch.tensor([[100.0, 99.0, -3.0]])
    ok = softpick(big, torch.ones(1, 3, dtype=torch.bool))
    assert torch.isfinite(ok).all() and float(ok.sum()) == pytest.approx(1.0, abs=1e-6)
    assert torch.isnan(_naive_softpick(big, torch.ones(1, 3, dtype=torch.bool))).any()


def test_softpick_gradient_matches_its_closed_form() -> None:
    """d w_i / d s_j = [i = j] e^{s_i} / D - (e^{s_i} - 1) sign(e^{s_j} - 1) e^{s_j} / D^2 for
    s_i > 0 (else 0), D = sum_k |e^{s_k} - 1| + eps."""
    s = torch.tensor([0.9, -0.4, 1.3, -2.0], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(1, 4, dtype=torch.bool)
    jac = torch.autograd.functional.jacobian(lambda x: softpick(x[None], mask)[0], s)
    x = s.detach()
    e, d = torch.exp(x), (torch.exp(x) - 1).abs().sum() + SOFTPICK_EPS
    pos = (x > 0).double()
    closed = pos[:, None] * (
        torch.diag(e) / d - ((e - 1)[:, None] * torch.sign(e - 1)[None, :] * e[None, :]) / d**2
    )
    torch.testing.assert_close(jac, closed)


@pytest.mark.parametrize("switch", ["gate_head", "gate_element"])
def test_output_gate_multiplies_the_head_output_and_its_closed_form_gradient(switch: str) -> None:
    torch.manual_seed(0)
    B, T, hidden, H = 2, 5, 8, 2
    dh = hidden // H
    gate = torch.nn.Linear(hidden, H if switch == "gate_head" else hidden).double()
    x = torch.randn(B, T, hidden, dtype=torch.float64)
    g = output_gate(x, gate, H)
    assert g.shape == (B, H, T, 1 if switch == "gate_head" else dh)
    raw = (x @ gate.weight.T + gate.bias).view(B, T, H, -1).transpose(1, 2)
    torch.testing.assert_close(g, torch.sigmoid(raw))
    # through the switch: o = sigma(g) * (A v), A plain softmax; weights g-bar A
    sw = HeadSwitch(switch, hidden, H).double()
    sw.reset_parameters()
    q, k, v = (torch.randn(B, H, T, dh, dtype=torch.float64) for _ in range(3))
    out, att = sw(x, q, k, v, causal=True)
    soft = torch.softmax(
        (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(~CAUSAL, -math.inf), -1
    )
    gg = output_gate(x, sw.gate, H)
    torch.testing.assert_close(out, gg * (soft @ v))
    torch.testing.assert_close(att, gg.mean(-1, keepdim=True) * soft)
    torch.testing.assert_close(att.sum(-1), gg.mean(-1))  # switch mass = 1 - gate
    if switch == "gate_head":
        torch.testing.assert_close(out, att @ v)  # the weights multiply the values exactly
    # d o / d (pre-activation) = sigma (1 - sigma) (A v)
    pre = raw.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad((torch.sigmoid(pre) * (soft @ v)).sum(), pre)
    sig = torch.sigmoid(raw)
    expect = sig * (1 - sig) * (soft @ v)
    torch.testing.assert_close(
        grad, expect.sum(-1, keepdim=True) if grad.shape[-1] == 1 else expect
    )


def test_kv_bias_slot_is_seen_by_every_query_and_takes_the_missing_mass() -> None:
    torch.manual_seed(1)
    B, T, hidden, H = 2, 5, 8, 2
    dh = hidden // H
    sw = HeadSwitch("kv_bias", hidden, H).double()
    sw.reset_parameters()
    q, k, v = (torch.randn(B, H, T, dh, dtype=torch.float64) for _ in range(3))
    out, att = sw(torch.zeros(B, T, hidden, dtype=torch.float64), q, k, v, causal=True)
    k0, v0 = sw.kv.detach()
    s = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(~CAUSAL, -math.inf)
    s0 = (q @ k0[:, :, None]) / math.sqrt(dh)  # (B, H, T, 1): every row, row 0 included
    full = torch.softmax(torch.cat([s0, s], -1), -1)
    a0, real = full[..., :1], full[..., 1:]
    torch.testing.assert_close(att, real)
    torch.testing.assert_close(att.sum(-1), 1.0 - a0[..., 0])
    torch.testing.assert_close(out, real @ v + a0 * v0[:, None, :])
    assert (a0[..., 0, 0] > 0).all()  # row 0 sees the slot too
    # a zero bias key scores 0: the slot is then the sink logit b = 0
    with torch.no_grad():
        sw.kv[0].zero_()
    _, att0 = sw(torch.zeros(B, T, hidden, dtype=torch.float64), q, k, v, causal=True)
    ref, _ = softmax_with_slot(s.nan_to_num(neginf=0.0), CAUSAL, torch.zeros(H, 1, 1).double())
    torch.testing.assert_close(att0, ref)


@pytest.mark.parametrize("switch", SWITCHES[1:])
def test_switched_attention_with_rope_matches_its_closed_form(switch: str) -> None:
    """Rotary phases go to the real queries and keys only (the slot key, the sink logit and the
    gate have no position)."""
    torch.manual_seed(2)
    B, T, hidden, H = 2, 5, 8, 2
    dh = hidden // H
    layer = SelfAttention(hidden, H, "softmax", True, rotary=True, switch=switch).double()
    layer.switch.reset_parameters()
    if switch == "sink_logit":
        with torch.no_grad():
            layer.switch.sink.copy_(torch.tensor([0.5, -1.0]))
    x = torch.randn(B, T, hidden, dtype=torch.float64)
    out, att = layer(x)
    q, k, v = layer.qkv(x).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)
    q, k = rope(q), rope(k)
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    e = torch.exp(s) * CAUSAL
    soft = e / e.sum(-1, keepdim=True)
    extra = 0.0
    if switch == "sink_logit":
        expect = e / (torch.exp(layer.switch.sink).view(-1, 1, 1) + e.sum(-1, keepdim=True))
        y = expect @ v
    elif switch == "softpick":
        expect = _naive_softpick(s, CAUSAL)
        y = expect @ v
    elif switch == "kv_bias":
        k0, v0 = layer.switch.kv
        e0 = torch.exp(q @ k0[:, :, None] / math.sqrt(dh))  # no rotary phase on k_0
        expect = e / (e0 + e.sum(-1, keepdim=True))
        extra = e0 / (e0 + e.sum(-1, keepdim=True)) * v0[:, None, :]
        y = expect @ v
    else:
        g = torch.sigmoid(layer.switch.gate(x)).view(B, T, H, -1).transpose(1, 2)
        expect = g.mean(-1, keepdim=True) * soft
        y = g * (soft @ v)
    y = y + extra
    torch.testing.assert_close(att, expect)
    torch.testing.assert_close(out, layer.out(y.transpose(1, 2).reshape(B, T, hidden)))


def test_switch_options_are_checked_and_only_softmax_takes_one() -> None:
    with pytest.raises(ValueError, match="needs softmax"):
        SelfAttention(8, 2, "sigmoid", True, switch="sink_logit")
    with pytest.raises(ValueError, match="unknown switch"):
        SelfAttention(8, 2, "softmax", True, switch="dimmer")
    assert SelfAttention(8, 2, "softmax", True).switch is None


@pytest.mark.parametrize("positional", ["none", "absolute", "rope"])
def test_a_switch_leaves_the_other_parameters_of_a_seed_unchanged(positional: str) -> None:
    cfg = {"hidden": 16, "ffn": 32, "n_heads": 2, "positional": positional}
    torch.manual_seed(3)
    plain = dict(InductionTransformer(cfg).named_parameters())
    for switch in SWITCHES[1:]:
        torch.manual_seed(3)
        model = InductionTransformer({**cfg, "switch": switch})
        params = dict(model.named_parameters())
        new = sorted(set(params) - set(plain))
        assert all(".attn.switch." in name for name in new), switch
        assert bool(new) == (switch != "softpick"), switch  # softpick has no parameters
        assert all(torch.equal(plain[n], params[n]) for n in plain), switch
        for name in new:  # initialised (the sink logits at 0, the others at random)
            assert torch.isfinite(params[name]).all()
            assert (params[name] == 0).all() == (switch == "sink_logit"), name


def test_switch_measures_on_planted_attention() -> None:
    T = 13
    causal = torch.ones(T, T).tril()
    att = torch.zeros(1, 4, T, T, dtype=torch.float64)
    att[0, 0] = causal / causal.sum(-1, keepdim=True)  # plain softmax, uniform: no switch
    att[0, 1, :, 0] = 0.2  # a sink logit taking 0.7 of every row, 0.2 on BOS
    att[0, 1, :, 1:] = 0.1 * torch.eye(T)[:, 1:]
    att[0, 1, 0, 0] = 0.3
    att[0, 2] = 0.0  # softpick with every score <= 0: fully off
    att[0, 3] = 0.5 * torch.eye(T)  # a gate of 0.5 on a diagonal head
    mass = switch_mass(att)
    assert mass.shape == (1, 4, T) and ((mass >= 0) & (mass <= 1)).all()
    assert float(mass[0, 0].max()) < 1e-12
    torch.testing.assert_close(mass[0, 1], torch.full((T,), 0.7, dtype=torch.float64))
    assert (mass[0, 2] == 1).all()
    torch.testing.assert_close(mass[0, 3], torch.full((T,), 0.5, dtype=torch.float64))
    off = switched_off(att)
    # uniform causal attention is off on rows 0-1 only (BOS mass 1, 1/2)
    assert off[0, 0].tolist() == [True, True] + [False] * (T - 2)
    assert off[0, 1].all() and off[0, 2].all()  # 0.2 + 0.7; 0 + 1
    assert off[0, 3].tolist() == [True] * T  # 0.5 switch mass reaches OFF_THRESHOLD
    assert OFF_THRESHOLD == 0.5
    # unnormalised rows of small weights: the switch of Table 1's raw heads
    raw = 1e-3 * causal[None, None].double()
    assert float(switch_mass(raw)[0, 0, -1]) == pytest.approx(1 - 13e-3)
    # per head over marked rows
    rows = torch.zeros(1, T, dtype=torch.bool)
    rows[0, 1:7] = True
    bos, sw, share, bos_share = switch_measures(att, rows)
    assert float(bos[0]) == pytest.approx(sum(1 / (i + 1) for i in range(1, 7)) / 6)
    assert float(sw[1]) == pytest.approx(0.7) and float(bos[1]) == pytest.approx(0.2)
    assert float(share[0]) == pytest.approx(1 / 6) and float(share[2]) == 1.0
    assert float(bos[3]) == 0.0 and float(sw[3]) == pytest.approx(0.5)
    # BOS's part of what the row delivers: 0.2 / 0.3 for the sink; 0 for an empty row
    torch.testing.assert_close(bos_share[[0, 2, 3]], torch.stack([bos[0], bos[2], bos[3]]))
    assert float(bos_share[1]) == pytest.approx(2 / 3)
    # a gate scales the row, not the share: a gated sink head keeps its softmax BOS share
    gated = att.clone()
    gated[0, 0] *= 0.25
    moved = switch_measures(gated, rows)
    torch.testing.assert_close(moved[3][0], bos_share[0])
    torch.testing.assert_close(moved[0][0], 0.25 * bos[0])
    # the BOS mass is the sink mass of the same rows
    torch.testing.assert_close(bos, sink_mass(att, idle_rows=6)[1])


TINY = {
    "hidden": 32,
    "ffn": 64,
    "n_heads": 4,
    "n_train": 1024,
    "n_eval": 64,
    "epochs": 1,
    "batch_size": 32,
    "curve_every": 8,
    "lr": 1e-2,
    "positional": "rope",
}


@pytest.mark.parametrize("switch", SWITCHES[1:])
def test_tiny_run_per_switch_trains_and_measures_its_switch(switch: str) -> None:
    out = run_induction({**TINY, "switch": switch, "weight_decay": 0.2, "id": switch})
    train = out["curve"]["train_loss"].drop_nans().to_list()
    assert len(train) == 4 and train[-1] < train[0] - 0.05  # the loss decreases
    final = out["final"].row(0, named=True)
    assert final["switch"] == switch
    table = out["switches"]
    assert table.columns == [
        "run_id",
        "layer",
        "head",
        "rows",
        "bos_mass",
        "switch_mass",
        "off_share",
        "bos_share",
    ]
    assert table.height == 2 * 4 * 2 and set(table["rows"]) == {"idle", "induction"}
    for col in ("bos_mass", "switch_mass", "off_share", "bos_share"):
        assert table[col].min() >= 0.0 and table[col].max() <= 1.0, col
    assert (table["bos_mass"] + table["switch_mass"]).max() <= 1.0 + 1e-9
    assert (table["bos_share"] >= table["bos_mass"] - 1e-12).all()
    # the switch is in use from the start (sink at b = 0, gates near 0.5, softpick's zeros)
    assert table["switch_mass"].mean() > 0.01
    # same bos measure as the heads table's idle sink mass
    idle = table.filter(table["rows"] == "idle").sort("layer", "head")
    heads = out["heads"].sort("layer", "head")
    assert idle["bos_mass"].to_list() == pytest.approx(heads["idle_sink_mass"].to_list())


def test_a_run_without_switch_measures_softmax_switch_mass_zero() -> None:
    """Table 1's softmax run writes the same tables, with switch "none": its rows are
    distributions, so its switch mass is 0 and its BOS share equals its BOS mass."""
    out = run_induction({**TINY, "n_train": 64, "id": "plain"})
    assert set(out) == {"final", "curve", "heads", "pattern", "switches", "timing"}
    assert out["final"]["switch"].to_list() == [SWITCHES[0]]
    table = out["switches"]
    assert table["switch_mass"].abs().max() < 1e-6
    assert (table["bos_share"] - table["bos_mass"]).abs().max() < 1e-6
    x, _ = make_induction_data(3, 0)
    assert len(InductionTransformer(TINY)(x)[1]) == 2


def test_summary_compares_each_switch_with_softmax_and_draws_them(tmp_path) -> None:
    """``by_setup`` keeps each switch apart from Table 1's softmax at the same setup; its
    layer-2 switch columns are the means of the runs' ``switches`` tables (recomputed here by
    hand), and the switches figure draws one panel per variant (a placeholder without one)."""
    from sinkscope.dynamics.plots import figures
    from sinkscope.dynamics.summary import SWITCH_MEASURES, summarize_induction

    small = {**TINY, "n_train": 256}
    runs = [run_induction({**small, "id": "plain"})]  # two layers (Table 2)
    runs += [run_induction({**small, "switch": s, "id": s}) for s in ("sink_logit", "gate_head")]
    summary = summarize_induction(runs)
    by_setup = summary["by_setup"]
    assert by_setup["variant"].to_list() == ["softmax", "softmax+gate_head", "softmax+sink_logit"]
    assert by_setup["switch"].to_list() == ["none", "gate_head", "sink_logit"]
    for run in runs:
        run_id = run["final"]["run_id"][0]
        layer2 = run["switches"].filter(pl.col("layer") == 2)
        got = summary["final"].filter(pl.col("run_id") == run_id).row(0, named=True)
        for rows, measure in SWITCH_MEASURES:
            expected = layer2.filter(pl.col("rows") == rows)[measure].to_list()
            assert got[f"{rows}_{measure}"] == pytest.approx(sum(expected) / len(expected))
    assert summary["by_setup"].filter(pl.col("switch") == "none")["idle_switch_mass"][0] < 1e-6
    assert set(summary["switches"]["variant"]) == set(by_setup["variant"])
    figures("induction", summary)["switches"](tmp_path / "switches.png")
    assert (tmp_path / "switches.png").stat().st_size > 10_000
    alone = summarize_induction(runs[:1])
    figures("induction", alone)["switches"](tmp_path / "none.png")
    assert (tmp_path / "none.png").stat().st_size > 0
