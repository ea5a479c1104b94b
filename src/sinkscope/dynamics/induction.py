"""Induction task and attention sinks per attention function (Section 4, Figures 1, 4, 8, 14-17,
Tables 1-2 of the value-softmax polarization paper).

The paper text we have holds only captions and Tables 1-2; the rest is our reconstruction:

Task (Figure 8, Table 2)
    Length 13 = BOS + two halves of 6: position 0 is a BOS token (id 0); positions 1-6 hold 6
    *distinct* tokens ``t_1..t_6`` drawn uniformly from ``1..50``; positions 7-12 repeat them
    rotated by a random shift ``s`` (``t_{s+1}, .., t_6, t_1, .., t_s``). The repeat is the same
    token (``t_i' = t_i``, vocabulary 51 = 50 + BOS) or, with ``repeat_distinct=True``, a paired
    token ``t_i' = t_i + 50`` (vocabulary 101; Table 2's footnote prints "+50 if t_i' = t_i", we
    read it as the distinct case). The random shift is our addition: with an unshifted repeat
    every second-half token is found 6 positions back, and a first trial (RoPE) solved it with
    a fixed-offset positional head in 100 steps instead of an induction head. With the shift the
    next token of a second-half token ``t_j'`` is ``t_{j+1}'``, found only by matching ``t_j`` in
    the first half and copying its successor: the *induction positions* are the second-half
    positions but the last and the one holding ``t_6'`` (4-5 per sequence).
Objective
    Plain next-token cross-entropy at every position (``loss_positions="all"``, the default and
    the usual language-model training of induction-head studies): the first-half rows, which
    have nothing earlier to copy, are trained too, so a layer-2 head must learn a "do nothing"
    state there, the setting in which the paper's sinks appear. ``"induction"`` trains only the
    induction positions (an ablation: the other rows of layer 2 then get no gradient at all).
    The accuracy is the arg-max accuracy at the induction positions of 1,000 held-out sequences
    (own seed); chance is ~1/50.
Model
    Causal 2-layer pre-LN transformer, hidden 128, ``n_heads`` heads (default 8, head dim 16),
    GELU MLP 512, LayerNorm and MLP switchable (``use_layernorm``, ``use_mlp``), a final
    LayerNorm (if on) and an untied unembedding. Positional encodings: ``none`` (causal masking
    alone carries position), ``absolute`` (learned, added to the token embedding, initialised
    ``N(0, pos_init_std^2)`` with ``pos_init_std = 0.02`` as in GPT-2 / nanoGPT; see
    *Convergence* below) or ``rope`` (rotary on queries and keys, base 10,000). Every other
    parameter has PyTorch's default initialisation (token embedding ``N(0, 1)``).
Attention functions (Table 1)
    Scores ``s_ij`` for ``j <= i`` (causal; masked entries are 0), with ``d = sqrt(d_h)``:
    ``softmax`` ``exp(q k / d)`` normalised; ``sigmoid`` ``sigmoid(q k / d)``; ``elu``
    ``elu(q k / d) + 1``; ``elu_elu`` ``(elu(q) + 1)(elu(k) + 1) / d``; ``mlp``
    ``mlp(q) mlp(k) / d`` (one 2-layer ReLU MLP ``d_h -> d_h -> d_h`` per layer, shared by
    queries, keys and heads); ``linear`` ``q k / d``. The table's scale prints as ``d_h`` in our
    copy; we read it as ``1/sqrt(d_h)`` for all. With normalisation (``normalize=True``) the
    positive scores (sigmoid, elu, elu_elu) are divided by ``sum_j s_ij`` and mlp/linear by
    ``max(sum_j s_ij, 1)`` exactly as printed; softmax is always normalised. Without it the raw
    scores multiply the values.
Optimisation
    AdamW (lr ``lr``, betas 0.9/0.999, decoupled weight decay ``weight_decay`` = Table 2's
    lambda in {0, 0.2}), batch ``batch_size``, ``epochs`` passes over ``n_train`` sequences drawn
    once from the run's seed, gradient clipping at norm 1, float32, one CPU thread
    (``threads``) so a run is bit-for-bit deterministic.

Convergence and the default scale (measured: seed 0, one thread, train loss every 100 steps)
    The default scale (:data:`.grids.DEFAULT_SIZE`) is 2,500 AdamW steps (160,000 fresh
    sequences, batch 64, lr 3e-3), 2-3 min of CPU per run (measured on a shared 2-core machine).
    Two reference points: the loss floor of the task is 2.08 nats (:func:`loss_floor`); a model
    that only knows *which* first-half tokens have not been repeated yet (one attention layer
    suffices, no induction) guesses among them: loss 2.48, accuracy 0.46 at the induction
    positions. Runs that do not learn sit near this plateau. The first default grid (1,000 steps, position init ``N(0, 1)``)
    left 6 of 26 setups there; short runs found why:

    * softmax with ``absolute`` positions and PyTorch's ``N(0, 1)`` position init: loss 2.83,
      accuracy 0.34 (lambda 0) / 0.35 (0.2) at step 1,000; with 3,000 steps (32,000 sequences
      seen 6 times) it escapes late (accuracy 0.20 / 0.27 / 0.70 / 0.84 / 0.93 at steps 1,000 /
      1,500 / 2,000 / 2,500 / 3,000). Random unit-scale position vectors, as large as the token
      embeddings, slow the query-key matching. Both lr 1e-3 (Table 2's value; accuracy 0.999,
      loss 2.48 at step 300) and a 0.02 position init at lr 3e-3 (0.997, loss 2.32 at step 300)
      learn within 1,000 steps; we keep the lr and initialise the positions at 0.02
      (``pos_init_std``; 1.0 restores the old behaviour).
    * mlp with normalisation (RoPE) needs more steps: flat at loss 2.55-2.58 from step ~500 to
      ~1,700, then it escapes (accuracy 0.46 / 0.46 / 0.46 / 0.94 / 1.00 / 0.99 at steps 500 /
      1,000 / ... / 3,000, loss 2.11 at the end; lr 1e-3 does not help: 0.43 at step 1,000).
      Hence 2,500 steps rather than 1,000, which keeps the 26 runs at about an hour of CPU
      time (~35 min on 2 free cores). The escape time varies: in the default grid (fresh data)
      lambda 0 escapes at step ~2,200 (accuracy 0.90) and lambda 0.2 not by step 2,500 (0.45,
      loss flat at 2.56), so at this scale mlp_norm is a borderline, seed-dependent case.
    * elu without normalisation (RoPE) does not learn with 3,000 steps either: accuracy 0.41 /
      0.44 / 0.45 / 0.45 / 0.45 / 0.44 at steps 500 / 1,000 / ... / 3,000 while the loss creeps
      from 2.72 (step 1,000) to 2.61 (step 3,000), still above the plateau's 2.48; lr 1e-3:
      0.44 (loss 2.67). No divergence and no blow-up: the loss decreases steadily, it just does
      not leave the plateau.
    * elu_elu and mlp without normalisation (RoPE) stay on the plateau through the default
      2,500 steps (accuracy 0.45-0.47; final loss 2.60 / 2.62 for elu_elu, 2.53 / 2.56 and flat
      from step ~500 for mlp, lambda 0 / 0.2), as does elu (0.45, loss 2.64 / 2.66).

    ``loss_positions="induction"`` (ablation, measured once at 1,000 steps, softmax / RoPE /
    lambda 0): accuracy 0.998 (loss below 0.03 from step 200 on) and *no* layer-2 sink head (0
    of 8, mean sink mass 0.09) against 8 of 8 (0.42) with the default ``"all"``: sinks appear
    only when the heads are trained on rows with nothing to copy (the first-half rows, which
    the ablation leaves untrained).

Sink criterion (``sink_mass`` / ``is_sink``)
    For a head, take its attention matrix ``A`` (the weights that multiply the values, i.e. after
    the normalisation if any) on the 1,000 evaluation sequences, take every query row ``i >= 1``
    as ``|A_ij| / max(sum_j |A_ij|, 1)`` (a distribution for softmax and for any row of total
    weight >= 1; an unnormalised row of small weights stays small, so a head that "does nothing"
    by giving every key a weight near 0 is not counted as a sink - a scale-free ``|A| / sum``
    would call the largest of its tiny weights a sink) and average the mass on position 0 over
    rows and sequences.
    A head is a sink head when this mean is ``>= SINK_THRESHOLD = 0.3``: uniform causal
    attention gives 0.18, and an induction head that parks its 6 first-half rows on position 0
    and none of its second-half rows gives 0.5 (measured: 0.35-0.50 for softmax/RoPE).
    ``idle_sink_mass`` is the same mean over the first-half rows only. Row 0 is excluded (it can
    only attend to itself).
Other switches (``switch_mass`` / ``switched_off``)
    With ``switch`` (a spec key, default ``"none"``; softmax only) every head gets one of the
    switches of :mod:`.switches`: a learned sink logit, a head-wise or element-wise sigmoid
    output gate, softpick instead of softmax, or a learnable key/value slot. Their weights on
    the real positions may sum to less than 1; the *switch mass* of row ``i`` is the mass
    :func:`attention_mass` leaves over, ``1 - sum_j |A_ij| / max(sum_j |A_ij|, 1)`` (the sink's
    ``p_sink``, ``1 - gate``, softpick's missing mass, the bias slot's weight; 0 for plain
    softmax, and the small-weights switch of an unnormalised Table 1 head). The row's *off mass*
    is its BOS mass plus its switch mass, the part of the row that delivers no value (BOS's
    value output is ~0, §6), and the head is *switched off* on the row when the off mass is
    ``>= OFF_THRESHOLD = 0.5``: most of its unit goes nowhere. An induction head that parks its
    first-half rows (row off mass ~1) and copies on the induction rows (~0) is off on the
    former and on on the latter whatever the threshold between; uniform causal attention is off
    on rows 0 and 1 only (BOS mass 1 and 1/2). Every run writes the ``switches`` table:
    per (layer, head) and row set (the first-half rows, which have nothing to copy, and the
    induction rows), the mean BOS mass, the mean switch mass, the share of rows switched off and
    the mean *BOS share*, BOS's part of the mass the row does deliver (``BOS mass / (1 - switch
    mass)``, 0 for a row that delivers nothing). For the gates the BOS mass is that of the gated
    weights and the BOS share that of the softmax before the gate, the "attention sink" of
    gated attention's own measurements.
Learning flag
    ``learned = accuracy >= LEARNED_THRESHOLD = 0.5`` (chance ~0.02); runs that fail keep their
    rows and are marked, not dropped.
"""

from __future__ import annotations

import math
import sys
import time

import polars as pl
import torch
from torch import nn
from tqdm import tqdm

from sinkscope.dynamics.common import TransformerBlock
from sinkscope.dynamics.grids import (
    ATTENTION_VARIANTS,
    DEFAULT_SIZE,
    LOSS_POSITIONS,
    PAPER_INDUCTION,
    POSITIONAL,
    SWITCHES,
    induction_grid,
    induction_spec,
    variant_name,
)
from sinkscope.dynamics.names import IDLE_ROWS, INDUCTION_ROWS

__all__ = [
    "ATTENTION_VARIANTS",
    "DEFAULT_SIZE",
    "LEARNED_THRESHOLD",
    "LOSS_POSITIONS",
    "OFF_THRESHOLD",
    "PAPER_INDUCTION",
    "POSITIONAL",
    "SINK_THRESHOLD",
    "InductionTransformer",
    "attention_mass",
    "induction_grid",
    "induction_spec",
    "loss_and_accuracy",
    "loss_floor",
    "make_induction_data",
    "run_induction",
    "sink_mass",
    "switch_mass",
    "switch_measures",
    "switched_off",
    "variant_name",
]

SINK_THRESHOLD = 0.3
OFF_THRESHOLD = 0.5
LEARNED_THRESHOLD = 0.5
_spec = induction_spec


# --------------------------------------------------------------------------- data


def make_induction_data(
    n: int, seed: int, vocab: int = 50, seq_len: int = 13, repeat_distinct: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (n, seq_len) int64, induction mask (n, seq_len) bool)`` of the task (module
    docstring).

    Position 0 is BOS (id 0); positions ``1..m`` (``m = (seq_len - 1) / 2``) hold ``m`` distinct
    tokens ``t_1..t_m`` from ``1..vocab``; positions ``m+1..2m`` repeat them rotated by a shift
    ``s`` uniform in ``0..m-1`` (``t_{s+1}, .., t_m, t_1, .., t_s``), as ``t_i' = t_i`` or, with
    ``repeat_distinct``, ``t_i' = t_i + vocab``. The mask marks the *induction positions*: a
    second-half position whose next token is the successor of its token in the first half
    (every second-half position but the last and the one holding ``t_m'``).
    """
    if seq_len < 5 or (seq_len - 1) % 2:
        raise ValueError(f"seq_len must be odd and >= 5 (BOS + two halves), got {seq_len}")
    m = (seq_len - 1) // 2
    if m > vocab:
        raise ValueError(f"need vocab >= {m} distinct tokens, got vocab={vocab}")
    gen = torch.Generator().manual_seed(int(seed))
    first = torch.argsort(torch.rand(n, vocab, generator=gen), dim=1)[:, :m] + 1
    shift = torch.randint(0, m, (n, 1), generator=gen)
    index = (shift + torch.arange(m)[None, :]) % m  # first-half index of each repeated token
    second = first.gather(1, index) + (vocab if repeat_distinct else 0)
    tokens = torch.cat([torch.zeros(n, 1, dtype=torch.long), first, second], dim=1)
    mask = torch.zeros(n, seq_len, dtype=torch.bool)
    mask[:, m + 1 : 2 * m] = index[:, :-1] < m - 1
    return tokens, mask


class InductionTransformer(nn.Module):
    """The causal transformer of the induction experiment (see the module docstring)."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        cfg = _spec(cfg)
        self.vocab_size = cfg["vocab"] + 1 + (cfg["vocab"] if cfg["repeat_distinct"] else 0)
        self.embed = nn.Embedding(self.vocab_size, cfg["hidden"])
        self.pos = (
            nn.Embedding(cfg["seq_len"], cfg["hidden"]) if cfg["positional"] == "absolute" else None
        )
        self.blocks = nn.ModuleList(
            TransformerBlock(
                cfg["hidden"],
                cfg["ffn"],
                cfg["n_heads"],
                cfg["attention"],
                cfg["normalize"],
                rotary=cfg["positional"] == "rope",
                causal=True,
                use_layernorm=cfg["use_layernorm"],
                use_mlp=cfg["use_mlp"],
                switch=cfg.get("switch", SWITCHES[0]),
            )
            for _ in range(cfg["n_layers"])
        )
        self.ln_f = nn.LayerNorm(cfg["hidden"]) if cfg["use_layernorm"] else nn.Identity()
        self.unembed = nn.Linear(cfg["hidden"], self.vocab_size)
        if self.pos is not None:  # last, so the other modules' initialisation does not change
            nn.init.normal_(self.pos.weight, std=float(cfg["pos_init_std"]))
        for block in self.blocks:  # after the positions, for the same reason
            if block.attn.switch is not None:
                block.attn.switch.reset_parameters()

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits at every position ``(B, T, vocab)`` and per-layer attention ``(B, H, T, T)``."""
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos.weight[None, : tokens.shape[1]]
        atts = []
        for block in self.blocks:
            x, att = block(x)
            atts.append(att)
        return self.unembed(self.ln_f(x)), atts


# --------------------------------------------------------------------------- measurement


def attention_mass(att: torch.Tensor) -> torch.Tensor:
    """``|A_ij| / max(sum_j |A_ij|, 1)``: rows that sum to at least 1 become distributions, rows
    of small weights keep their (small) size, as in Table 1's ``max(sum, 1)`` normalisation."""
    mag = att.abs().double()
    return mag / mag.sum(dim=-1, keepdim=True).clamp_min(1.0)


def sink_mass(att: torch.Tensor, idle_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean mass on position 0 over rows i >= 1, the same over rows 1..idle_rows)`` per head.

    ``att``: ``(B, H, T, T)`` attention weights (any sign, normalised or not), measured with
    :func:`attention_mass`; returns two ``(H,)`` tensors averaged over the batch. ``idle_rows`` =
    the first half of the induction sequence, where nothing earlier can be copied.
    """
    first = attention_mass(att)[..., 1:, 0]  # (B, H, T - 1)
    return first.mean(dim=(0, 2)), first[..., :idle_rows].mean(dim=(0, 2))


def switch_mass(att: torch.Tensor) -> torch.Tensor:
    """The mass each row sends to the head's own switch, ``(B, H, T)`` from ``att (B, H, T, T)``:
    ``1 - sum_j`` of :func:`attention_mass` (module docstring, *Other switches*), in ``[0, 1]``
    (rounding below 0 is clamped)."""
    return (1.0 - attention_mass(att).sum(dim=-1)).clamp_min(0.0)


def switched_off(att: torch.Tensor) -> torch.Tensor:
    """``(B, H, T)`` bool: the head is switched off on the row, its BOS mass (:func:`attention_mass`
    on position 0) plus its :func:`switch_mass` being ``>= OFF_THRESHOLD``."""
    return attention_mass(att)[..., 0] + switch_mass(att) >= OFF_THRESHOLD


def switch_measures(
    att: torch.Tensor, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(mean BOS mass, mean switch mass, share of rows switched off, mean BOS share)`` per
    head, ``(H,)`` each, over the query rows marked in ``rows (B, T)`` (bool) of
    ``att (B, H, T, T)``; the BOS share is position 0's part of the row's :func:`attention_mass`
    (0 where the row has none; module docstring, *Other switches*)."""
    dist = attention_mass(att)
    delivered = dist.sum(dim=-1)
    share = dist[..., 0] / torch.where(delivered > 0, delivered, 1.0)
    w = rows[:, None, :].double()
    parts = (dist[..., 0], switch_mass(att), switched_off(att).double(), share)
    return tuple((x * w).sum(dim=(0, 2)) / w.sum() for x in parts)


# --------------------------------------------------------------------------- run


def loss_floor(vocab: int = 50, seq_len: int = 13, loss_positions: str = "all") -> float:
    """The smallest expected next-token cross-entropy (nats) of the task: the mean over the
    trained positions of the conditional entropy of the next token given the prefix.

    With ``loss_positions="all"`` the ``m = (seq_len - 1) / 2`` first-half tokens are uniform over
    the ``vocab - k + 1`` tokens not yet drawn (``ln(vocab - k + 1)`` for ``k = 1..m``), the first
    repeated token names the shift (``ln m``) and the rest of the repeat is determined: the sum
    over ``seq_len - 1`` positions (2.08 nats for the default 50 / 13). With ``"induction"`` every
    trained target is determined: 0.
    """
    if loss_positions == "induction":
        return 0.0
    m = (seq_len - 1) // 2
    total = sum(math.log(vocab - k + 1) for k in range(1, m + 1)) + math.log(m)
    return total / (seq_len - 1)


def loss_and_accuracy(
    logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor, loss_positions: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token cross-entropy and induction accuracy of ``logits (B, T, V)`` on ``tokens``.

    The loss is averaged over the query positions ``0..T-2`` (``loss_positions="all"``: plain
    next-token training, the default) or over the induction positions of ``mask`` only
    (``"induction"``); the accuracy is the arg-max accuracy at the induction positions.
    """
    pred, target, ind = logits[:, :-1], tokens[:, 1:], mask[:, :-1]
    if loss_positions == "all":
        loss = nn.functional.cross_entropy(pred.flatten(0, 1), target.flatten())
    else:
        loss = nn.functional.cross_entropy(pred[ind], target[ind])
    acc = (pred[ind].argmax(-1) == target[ind]).double().mean()
    return loss, acc


def _evaluate(
    model: InductionTransformer, tokens: torch.Tensor, mask: torch.Tensor, loss_positions: str
) -> tuple:
    model.eval()
    with torch.no_grad():
        logits, atts = model(tokens)
        loss, acc = loss_and_accuracy(logits, tokens, mask, loss_positions)
    model.train()
    return loss.item(), acc.item(), atts


def run_induction(spec: dict) -> dict[str, pl.DataFrame]:
    """Train and measure one induction model (one job). Returns ``{"final", "curve", "heads",
    "pattern", "timing"}``:

    * ``final`` - one row: the spec, ``accuracy`` (induction positions, evaluation set),
      ``eval_loss``, ``learned``, ``diverged`` (a non-finite training loss occurred),
      ``n_sink_heads``, ``sink_proportion`` and ``mean_sink_mass`` (last layer), ``steps``.
    * ``curve`` - the training log: ``step, epoch, train_loss`` (mean over the last
      ``curve_every`` steps), plus ``eval_loss`` / ``eval_accuracy`` at each epoch end.
    * ``heads`` - per (layer, head): ``sink_mass``, ``idle_sink_mass``, ``is_sink``.
    * ``pattern`` - last-layer attention as :func:`attention_mass`:
      ``kind, head, query, key, weight`` for every head, ``kind`` = ``"mean"`` (over the
      evaluation sequences) or ``"example"`` (evaluation sequence 0).
    * ``timing`` - one row: ``wall_s`` and ``wall_cpu_s`` (process CPU time; the run uses one
      thread). The only table that differs between two identical runs.

    * ``switches`` - per (layer, head) and ``rows`` (:data:`IDLE_ROWS`: the first-half rows
      1..m, :data:`INDUCTION_ROWS`: the induction positions), over the evaluation sequences:
      ``bos_mass``, ``switch_mass``, ``off_share`` and ``bos_share`` (:func:`switch_measures`;
      module docstring, *Other switches*). For a head without a switch the switch mass is the
      row mass it leaves over (0 for softmax).

    All tables carry the spec's ``id`` as ``run_id``. A progress bar goes to stderr.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    cfg = _spec(spec)
    run_id = str(spec.get("id", "run"))
    threads = torch.get_num_threads()
    torch.set_num_threads(int(cfg["threads"]))
    try:
        seed = int(cfg["seed"])
        data_args = {k: cfg[k] for k in ("vocab", "seq_len", "repeat_distinct")}
        x_train, m_train = make_induction_data(cfg["n_train"], 2 * seed + 1, **data_args)
        x_eval, m_eval = make_induction_data(cfg["n_eval"], 2 * seed + 1_000_001, **data_args)
        torch.manual_seed(seed)
        model = InductionTransformer(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
        gen = torch.Generator().manual_seed(seed + 12345)
        curve: list[dict] = []
        step, window, diverged = 0, [], False
        bs, every = int(cfg["batch_size"]), int(cfg["curve_every"])
        total = int(cfg["epochs"]) * math.ceil(cfg["n_train"] / bs)
        bar = tqdm(total=total, desc=run_id, file=sys.stderr, mininterval=5.0, ascii=True)
        for epoch in range(int(cfg["epochs"])):
            order = torch.randperm(cfg["n_train"], generator=gen)
            for start in range(0, cfg["n_train"], bs):
                idx = order[start : start + bs]
                batch = x_train[idx]
                loss, _ = loss_and_accuracy(
                    model(batch)[0], batch, m_train[idx], cfg["loss_positions"]
                )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                step += 1
                bar.update()
                window.append(loss.item())
                diverged = diverged or not math.isfinite(window[-1])
                if step % every == 0:
                    curve.append(
                        {"step": step, "epoch": epoch, "train_loss": sum(window) / len(window)}
                    )
                    bar.set_postfix(loss=f"{curve[-1]['train_loss']:.3f}", refresh=False)
                    window = []
            ev_loss, ev_acc, _ = _evaluate(model, x_eval, m_eval, cfg["loss_positions"])
            curve.append(
                {
                    "step": step,
                    "epoch": epoch,
                    "train_loss": sum(window) / len(window) if window else float("nan"),
                    "eval_loss": ev_loss,
                    "eval_accuracy": ev_acc,
                }
            )
            window = []
        bar.close()
        ev_loss, ev_acc, atts = _evaluate(model, x_eval, m_eval, cfg["loss_positions"])
    finally:
        torch.set_num_threads(threads)
    heads = []
    for layer, att in enumerate(atts, start=1):
        mean0, idle0 = sink_mass(att.detach(), (cfg["seq_len"] - 1) // 2)
        for h in range(att.shape[1]):
            heads.append(
                {
                    "run_id": run_id,
                    "layer": layer,
                    "head": h,
                    "sink_mass": float(mean0[h]),
                    "idle_sink_mass": float(idle0[h]),
                    "is_sink": bool(mean0[h] >= SINK_THRESHOLD),
                }
            )
    heads_df = pl.DataFrame(heads)
    switches: list[dict] = []
    idle = torch.zeros_like(m_eval)
    idle[:, 1 : (cfg["seq_len"] - 1) // 2 + 1] = True
    for layer, att in enumerate(atts, start=1):
        for rows, marked in ((IDLE_ROWS, idle), (INDUCTION_ROWS, m_eval)):
            bos, mass, off, share = switch_measures(att.detach(), marked)
            switches += [
                {
                    "run_id": run_id,
                    "layer": layer,
                    "head": h,
                    "rows": rows,
                    "bos_mass": float(bos[h]),
                    "switch_mass": float(mass[h]),
                    "off_share": float(off[h]),
                    "bos_share": float(share[h]),
                }
                for h in range(att.shape[1])
            ]
    dist = attention_mass(atts[-1].detach())
    H, T = dist.shape[1], dist.shape[2]
    frames = []
    for kind, mat in (("mean", dist.mean(dim=0)), ("example", dist[0])):
        frames.append(
            pl.DataFrame(
                {
                    "kind": [kind] * (H * T * T),
                    "head": [h for h in range(H) for _ in range(T * T)],
                    "query": [i for _ in range(H) for i in range(T) for _ in range(T)],
                    "key": [j for _ in range(H) for _ in range(T) for j in range(T)],
                    "weight": mat.reshape(-1).tolist(),
                }
            )
        )
    pattern = pl.concat(frames).with_columns(run_id=pl.lit(run_id))
    last = heads_df.filter(pl.col("layer") == cfg["n_layers"])
    keys = [k for k in PAPER_INDUCTION if k not in ("threads", "curve_every")]
    final = pl.DataFrame(
        [
            {
                "run_id": run_id,
                **{k: cfg[k] for k in keys},
                "accuracy": ev_acc,
                "eval_loss": ev_loss,
                "learned": ev_acc >= LEARNED_THRESHOLD,
                "diverged": diverged,
                "n_sink_heads": int(last["is_sink"].sum()),
                "sink_proportion": float(last["is_sink"].mean()),
                "mean_sink_mass": float(last["sink_mass"].mean()),
                "steps": step,
            }
        ]
    )
    timing = pl.DataFrame(
        [
            {
                "run_id": run_id,
                "wall_s": time.perf_counter() - t0,
                "wall_cpu_s": time.process_time() - c0,
            }
        ]
    )
    curve_df = pl.DataFrame(
        curve,
        schema={
            "step": pl.Int64,
            "epoch": pl.Int64,
            "train_loss": pl.Float64,
            "eval_loss": pl.Float64,
            "eval_accuracy": pl.Float64,
        },
    ).with_columns(run_id=pl.lit(run_id))
    return {
        "final": final,
        "curve": curve_df,
        "heads": heads_df,
        "pattern": pattern,
        "switches": pl.DataFrame(switches),
        "timing": timing,
    }
