"""Classification task and adversarial one-token flips (Table 3, Figures 5, 6, 9, 18-21 of the
value-softmax polarization paper).

Our copy of the paper has only Table 3 and the captions, so the task is our design. It is built so
that *one* token suffices to classify a clean sequence but the label is carried redundantly by
several: a model whose attention spreads over all label-carrying tokens is robust to changing one
token, a model whose attention has polarized onto a single token (the low-entropy solutions that
gradient flow on ``V softmax(a)`` drives to, Theorem 3.3) is not.

Task (Figure 9)
    Vocabulary ``|V| in {41, 81, 161}``: token 0 is ``CLS``; of the other ``|V| - 1`` tokens the
    first half are *signal* tokens, split into 4 label groups of ``(|V| - 1) / 8`` tokens (5, 10,
    20), the second half are *neutral* tokens. A sequence is ``CLS`` followed by 10 content tokens
    (length 11): a label ``y`` is drawn uniformly, ``n_signal = 3`` positions (uniform, distinct)
    get signal tokens of group ``y`` (uniform, with replacement), the other 7 get neutral tokens
    (uniform). The label is ``y``: every signal token in a clean sequence names it.
Model
    Non-causal transformer without positional encoding (Table 3: causal false, positional type
    no) made of :class:`.common.TransformerBlock` with softmax attention, hidden 128, feed-forward
    512, ``n_layers`` in {1, 2}, ``n_heads`` in {1, 2, 4}, MLP and LayerNorm switchable, a final
    LayerNorm (if on) and a linear 4-way readout of the final ``CLS`` state. AdamW lr 1e-3, no
    weight decay, batch 256, cross-entropy on the ``CLS`` output.
Adversarial one-token flip (Figures 6, 9, 18-21)
    Attacked: the first ``n_attack`` evaluation sequences the model classifies correctly. A
    candidate replaces one content token (any of the 10 positions) by a signal token of another
    label (all such (position, token) pairs, or ``max_candidates`` of them drawn with the run's
    seed when there are more). After any one replacement the sequence still holds at least two
    signal tokens of ``y`` and exactly one of another label, so its label by majority of the
    signal tokens is still ``y``: a model that weighs all signal tokens alike is never flipped.
    The flip succeeds when any candidate changes the prediction; ``flip_rate`` = successes /
    attacked sequences, measured after every epoch; ``flip_rate_neutral`` counts only
    replacements of neutral tokens (all 3 signal tokens of ``y`` left against 1).
Attention record (Figure 5)
    The ``CLS`` row of layer 1's attention (every head) for two evaluation samples with different
    labels, after every epoch; and, per epoch, the mean over evaluation sequences and heads of the
    ``CLS`` row's largest weight (``cls_top_weight``) and of its mass on signal tokens
    (``cls_signal_mass``).
"""

from __future__ import annotations

import sys
import time

import polars as pl
import torch
from torch import nn
from tqdm import tqdm

from sinkscope.dynamics.common import TransformerBlock
from sinkscope.dynamics.grids import PAPER_CLASSIFICATION, classification_grid

__all__ = [
    "PAPER_CLASSIFICATION",
    "classification_grid",
    "make_classification_data",
    "run_classification",
]

N_LABELS = 4


def signal_groups(vocab_size: int) -> int:
    """Tokens per label group: ``(vocab_size - 1) / 8`` (half the content vocabulary is signal)."""
    if vocab_size < 9 or (vocab_size - 1) % (2 * N_LABELS):
        raise ValueError(f"vocab_size - 1 must be a positive multiple of 8, got {vocab_size}")
    return (vocab_size - 1) // (2 * N_LABELS)


def token_label(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Label group of each token (``-1`` for ``CLS`` and neutral tokens)."""
    per = signal_groups(vocab_size)
    group = (tokens - 1) // per
    return torch.where((tokens >= 1) & (group < N_LABELS), group, torch.full_like(tokens, -1))


def make_classification_data(
    n: int, seed: int, vocab_size: int = 41, seq_len: int = 11, n_signal: int = 3
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (n, seq_len), labels (n,))`` of the task (module docstring)."""
    per = signal_groups(vocab_size)
    body = seq_len - 1
    if not 2 <= n_signal <= body:
        raise ValueError(f"n_signal must be in 2..{body}, got {n_signal}")
    gen = torch.Generator().manual_seed(int(seed))
    y = torch.randint(0, N_LABELS, (n,), generator=gen)
    n_neutral = vocab_size - 1 - N_LABELS * per
    content = 1 + N_LABELS * per + torch.randint(0, n_neutral, (n, body), generator=gen)
    signal = 1 + y[:, None] * per + torch.randint(0, per, (n, n_signal), generator=gen)
    where = torch.argsort(torch.rand(n, body, generator=gen), dim=1)[:, :n_signal]
    content.scatter_(1, where, signal)
    return torch.cat([torch.zeros(n, 1, dtype=torch.long), content], dim=1), y


class _Classifier(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["hidden"])
        self.blocks = nn.ModuleList(
            TransformerBlock(
                cfg["hidden"],
                cfg["ffn"],
                cfg["n_heads"],
                causal=False,
                use_layernorm=cfg["use_layernorm"],
                use_mlp=cfg["use_mlp"],
            )
            for _ in range(cfg["n_layers"])
        )
        self.ln_f = nn.LayerNorm(cfg["hidden"]) if cfg["use_layernorm"] else nn.Identity()
        self.head = nn.Linear(cfg["hidden"], N_LABELS)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        h = self.embed(x)
        atts = []
        for block in self.blocks:
            h, att = block(h)
            atts.append(att)
        return self.head(self.ln_f(h[:, 0])), atts


def flip_candidates(
    label: int, vocab_size: int, seq_len: int, max_candidates: int, gen: torch.Generator
) -> torch.Tensor:
    """``(K, 2)`` (position, token) replacements of the attack: every content position times
    every signal token of another label, subsampled to ``max_candidates`` with ``gen``."""
    per = signal_groups(vocab_size)
    tokens = [1 + g * per + j for g in range(N_LABELS) if g != label for j in range(per)]
    cands = torch.tensor([(pos, tok) for pos in range(1, seq_len) for tok in tokens])
    if len(cands) > max_candidates:
        cands = cands[torch.randperm(len(cands), generator=gen)[:max_candidates]]
    return cands


def flip_rate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: dict, gen: torch.Generator
) -> tuple[float, float, int]:
    """One-token attack on the first ``n_attack`` correctly classified rows of ``x``.

    Returns ``(flip rate, neutral-only flip rate, attacked)``: the share of attacked sequences
    whose prediction some candidate replacement changes, the same counting only replacements of
    *neutral* tokens (after which the sequence holds all ``n_signal`` signal tokens of its label
    and one of another label), and the number attacked.
    """
    model.eval()
    flipped = flipped_neutral = attacked = 0
    with torch.no_grad():
        pred = model(x)[0].argmax(-1)
        for seq, label in zip(x[pred == y], y[pred == y], strict=True):
            if attacked == cfg["n_attack"]:
                break
            cands = flip_candidates(
                int(label), cfg["vocab_size"], x.shape[1], cfg["max_candidates"], gen
            )
            batch = seq.repeat(len(cands), 1)
            batch[torch.arange(len(cands)), cands[:, 0]] = cands[:, 1]
            changed = model(batch)[0].argmax(-1) != label
            neutral = token_label(seq[cands[:, 0]], cfg["vocab_size"]) < 0
            attacked += 1
            flipped += int(changed.any())
            flipped_neutral += int((changed & neutral).any())
    model.train()
    if not attacked:
        return float("nan"), float("nan"), 0
    return flipped / attacked, flipped_neutral / attacked, attacked


def run_classification(spec: dict) -> dict[str, pl.DataFrame]:
    """Train one classifier (one job). Returns ``{"final", "curve", "attention", "timing"}``:

    * ``curve`` - per epoch: ``epoch, train_loss, eval_accuracy, flip_rate, flip_rate_neutral,
      attacked,
      cls_top_weight, cls_signal_mass`` (module docstring).
    * ``attention`` - ``epoch, sample, label, head, position, token, is_signal, weight``: the
      layer-1 ``CLS`` attention row for two evaluation samples with different labels.
    * ``final`` - one row: the spec, final accuracy, flip rate and attention statistics.
    * ``timing`` - one row: ``wall_s`` (the only table that differs between identical runs).

    A progress bar over epochs (with the loss and flip rate) goes to stderr.
    """
    t0 = time.perf_counter()
    unknown = sorted(set(spec) - set(PAPER_CLASSIFICATION) - {"id"})
    if unknown:
        raise KeyError(
            f"unknown classification keys {unknown}; known: {sorted(PAPER_CLASSIFICATION)}"
        )
    cfg = {**PAPER_CLASSIFICATION, **spec}
    run_id = str(spec.get("id", "run"))
    threads = torch.get_num_threads()
    torch.set_num_threads(int(cfg["threads"]))
    try:
        seed = int(cfg["seed"])
        args = {k: cfg[k] for k in ("vocab_size", "seq_len", "n_signal")}
        x_tr, y_tr = make_classification_data(cfg["n_train"], 2 * seed + 7, **args)
        x_ev, y_ev = make_classification_data(cfg["n_eval"], 2 * seed + 5_000_003, **args)
        signal_ev = token_label(x_ev, cfg["vocab_size"]) >= 0
        samples = [0, int((y_ev != y_ev[0]).nonzero()[0, 0])]
        torch.manual_seed(seed)
        model = _Classifier(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
        gen = torch.Generator().manual_seed(seed + 999)
        curve, att_rows = [], []
        bar = tqdm(total=int(cfg["epochs"]), desc=run_id, file=sys.stderr, ascii=True, unit="epoch")
        for epoch in range(int(cfg["epochs"])):
            order = torch.randperm(cfg["n_train"], generator=gen)
            losses = []
            for start in range(0, cfg["n_train"], cfg["batch_size"]):
                idx = order[start : start + cfg["batch_size"]]
                loss = nn.functional.cross_entropy(model(x_tr[idx])[0], y_tr[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            model.eval()
            with torch.no_grad():
                logits, atts = model(x_ev)
            model.train()
            cls_row = atts[0][:, :, 0, :]  # (N, H, T): layer-1 CLS attention
            # the same candidate subsets every epoch
            attack_gen = torch.Generator().manual_seed(seed + 4242)
            rate, rate_neutral, attacked = flip_rate(model, x_ev, y_ev, cfg, attack_gen)
            curve.append(
                {
                    "epoch": epoch + 1,
                    "train_loss": sum(losses) / len(losses),
                    "eval_accuracy": (logits.argmax(-1) == y_ev).double().mean().item(),
                    "flip_rate": rate,
                    "flip_rate_neutral": rate_neutral,
                    "attacked": attacked,
                    "cls_top_weight": cls_row.max(-1).values.double().mean().item(),
                    "cls_signal_mass": (cls_row * signal_ev[:, None, :])
                    .sum(-1)
                    .double()
                    .mean()
                    .item(),
                }
            )
            bar.update()
            bar.set_postfix(loss=f"{curve[-1]['train_loss']:.4f}", flip_rate=f"{rate:.3f}")
            for k, s in enumerate(samples):
                for h in range(atts[0].shape[1]):
                    for pos in range(x_ev.shape[1]):
                        att_rows.append(
                            {
                                "epoch": epoch + 1,
                                "sample": k,
                                "label": int(y_ev[s]),
                                "head": h,
                                "position": pos,
                                "token": int(x_ev[s, pos]),
                                "is_signal": bool(signal_ev[s, pos]),
                                "weight": float(atts[0][s, h, 0, pos]),
                            }
                        )
        bar.close()
    finally:
        torch.set_num_threads(threads)
    end = curve[-1]
    keys = [k for k in PAPER_CLASSIFICATION if k != "threads"]
    final = pl.DataFrame(
        [
            {
                "run_id": run_id,
                **{k: cfg[k] for k in keys},
                "accuracy": end["eval_accuracy"],
                "flip_rate": end["flip_rate"],
                "flip_rate_neutral": end["flip_rate_neutral"],
                "attacked": end["attacked"],
                "cls_top_weight": end["cls_top_weight"],
                "cls_signal_mass": end["cls_signal_mass"],
            }
        ]
    )
    return {
        "final": final,
        "curve": pl.DataFrame(curve).with_columns(run_id=pl.lit(run_id)),
        "attention": pl.DataFrame(att_rows).with_columns(run_id=pl.lit(run_id)),
        "timing": pl.DataFrame([{"run_id": run_id, "wall_s": time.perf_counter() - t0}]),
    }
