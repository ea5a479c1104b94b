"""Classification task and adversarial one-token flips (Table 3, Figures 5, 6, 9, 18-21 of the
value-softmax polarization paper).

Our copy of the paper has only Table 3 and the captions, so the task is our design:

Task (Figure 9)
    Vocabulary ``|V| in {41, 81, 161}``: token 0 is a ``CLS`` token, the other ``|V| - 1`` tokens
    are split into 4 label groups of ``(|V| - 1) / 4`` tokens (10, 20, 40). A sequence is ``CLS``
    followed by 10 content tokens (length 11): a label ``y`` is drawn uniformly, every content
    token comes from group ``y`` with probability ``p_label = 0.5`` and otherwise from one of the
    three other groups uniformly; sequences in which ``y`` is not the strict majority group by a
    margin of at least 2 are redrawn. The label is ``y`` (the majority group). Cross-entropy on
    the ``CLS`` output.
Model
    The transformer of :mod:`.induction` without causal mask and without positional encoding
    (Table 3: causal false, positional type no), hidden 128, feed-forward 512, ``n_layers`` in
    {1, 2}, ``n_heads`` in {1, 2, 4}, MLP and LayerNorm switchable, softmax attention; a linear
    4-way readout of the final ``CLS`` state. AdamW lr 1e-3, no weight decay, batch 256.
Adversarial one-token flip (Figures 6, 18-21)
    On evaluation sequences with majority margin >= 3 (so that no single replacement can change
    the true label) that the model classifies correctly, try replacing one content token by a
    token of another group (all such (position, token) pairs, or ``max_candidates`` of them drawn
    at random when there are more). The flip succeeds when any candidate changes the model's
    prediction. ``flip_rate`` = successes / attacked sequences, measured after every epoch.
    A model whose ``CLS`` attention polarizes onto one token is flipped by replacing that token.
Attention record (Figure 5)
    The ``CLS`` row of layer 1's attention (every head) for two evaluation samples with different
    labels, after every epoch.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import polars as pl
import torch
from torch import nn

from sinkscope.dynamics.induction import _Block, _spec

__all__ = [
    "PAPER_CLASSIFICATION",
    "classification_grid",
    "make_classification_data",
    "run_classification",
    "summarize_classification",
]

N_LABELS = 4
PAPER_CLASSIFICATION: dict[str, Any] = {
    "n_layers": 1,
    "n_heads": 1,
    "hidden": 128,
    "ffn": 512,
    "vocab_size": 41,
    "seq_len": 11,
    "p_label": 0.5,
    "n_train": 10_000,
    "n_eval": 1_000,
    "epochs": 10,
    "batch_size": 256,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "use_layernorm": True,
    "use_mlp": True,
    "n_attack": 200,
    "max_candidates": 400,
    "seed": 0,
    "threads": 1,
}


def make_classification_data(
    n: int, seed: int, vocab_size: int = 41, seq_len: int = 11, p_label: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens (n, seq_len), labels (n,), margin (n,))`` of the task (module docstring)."""
    if (vocab_size - 1) % N_LABELS:
        raise ValueError("vocab_size - 1 must be a multiple of 4")
    per = (vocab_size - 1) // N_LABELS
    gen = torch.Generator().manual_seed(int(seed))
    body = seq_len - 1
    out_x, out_y, out_m = [], [], []
    have = 0
    while have < n:
        m = 2 * (n - have) + 16
        y = torch.randint(0, N_LABELS, (m,), generator=gen)
        own = torch.rand(m, body, generator=gen) < p_label
        other = (y[:, None] + torch.randint(1, N_LABELS, (m, body), generator=gen)) % N_LABELS
        group = torch.where(own, y[:, None], other)
        counts = nn.functional.one_hot(group, N_LABELS).sum(1)
        top2 = counts.topk(2, dim=1).values
        margin = counts[torch.arange(m), y] - torch.where(
            counts.argmax(1) == y, top2[:, 1], top2[:, 0]
        )
        keep = margin >= 2
        tok = 1 + group * per + torch.randint(0, per, (m, body), generator=gen)
        x = torch.cat([torch.zeros(m, 1, dtype=torch.long), tok], dim=1)
        out_x.append(x[keep])
        out_y.append(y[keep])
        out_m.append(margin[keep])
        have += int(keep.sum())
    return torch.cat(out_x)[:n], torch.cat(out_y)[:n], torch.cat(out_m)[:n]


class _Classifier(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        block_cfg = _spec(
            {
                "hidden": cfg["hidden"],
                "ffn": cfg["ffn"],
                "n_heads": cfg["n_heads"],
                "use_layernorm": cfg["use_layernorm"],
                "use_mlp": cfg["use_mlp"],
                "attention": "softmax",
                "positional": "none",
                "causal": False,
            }
        )
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["hidden"])
        self.blocks = nn.ModuleList(_Block(block_cfg) for _ in range(cfg["n_layers"]))
        self.ln_f = nn.LayerNorm(cfg["hidden"]) if cfg["use_layernorm"] else nn.Identity()
        self.head = nn.Linear(cfg["hidden"], N_LABELS)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        h = self.embed(x)
        atts = []
        for block in self.blocks:
            h, att = block(h)
            atts.append(att)
        return self.head(self.ln_f(h[:, 0])), atts


def _flip_rate(
    model: _Classifier, x: torch.Tensor, y: torch.Tensor, cfg: dict, gen: torch.Generator
) -> tuple[float, int]:
    """Share of attacked sequences flipped by one replacement, and how many were attacked."""
    per = (cfg["vocab_size"] - 1) // N_LABELS
    body = x.shape[1] - 1
    model.eval()
    flipped = attacked = 0
    with torch.no_grad():
        pred = model(x)[0].argmax(-1)
        for seq, label, p in zip(x, y, pred, strict=True):
            if p != label:
                continue
            cands = [
                (pos, tok)
                for pos in range(1, body + 1)
                for tok in range(1, cfg["vocab_size"])
                if (tok - 1) // per != int(label)
            ]
            if len(cands) > cfg["max_candidates"]:
                pick = torch.randperm(len(cands), generator=gen)[: cfg["max_candidates"]]
                cands = [cands[i] for i in pick.tolist()]
            batch = seq.repeat(len(cands), 1)
            rows = torch.arange(len(cands))
            batch[rows, torch.tensor([c[0] for c in cands])] = torch.tensor([c[1] for c in cands])
            attacked += 1
            flipped += int((model(batch)[0].argmax(-1) != label).any())
    model.train()
    return (flipped / attacked if attacked else float("nan")), attacked


def run_classification(spec: dict) -> dict[str, pl.DataFrame]:
    """Train one classifier (one job). Returns ``{"final", "curve", "attention"}``:

    * ``curve`` - per epoch: ``epoch, train_loss, eval_accuracy, flip_rate, attacked``.
    * ``attention`` - ``epoch, sample, label, head, position, token, weight``: the layer-1
      ``CLS`` attention row for two evaluation samples with different labels.
    * ``final`` - one row: the spec, final accuracy and flip rate, ``wall_s``.
    """
    t0 = time.perf_counter()
    cfg = {**PAPER_CLASSIFICATION, **spec}
    run_id = str(spec.get("id", "run"))
    threads = torch.get_num_threads()
    torch.set_num_threads(int(cfg["threads"]))
    try:
        seed = int(cfg["seed"])
        args = {k: cfg[k] for k in ("vocab_size", "seq_len", "p_label")}
        x_tr, y_tr, _ = make_classification_data(cfg["n_train"], 2 * seed + 7, **args)
        x_ev, y_ev, m_ev = make_classification_data(cfg["n_eval"], 2 * seed + 5_000_003, **args)
        strong = (m_ev >= 3).nonzero()[:, 0][: cfg["n_attack"]]
        x_at, y_at = x_ev[strong], y_ev[strong]
        samples = [0, int((y_ev != y_ev[0]).nonzero()[0, 0])]
        torch.manual_seed(seed)
        model = _Classifier(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
        gen = torch.Generator().manual_seed(seed + 999)
        curve, att_rows = [], []
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
            rate, attacked = _flip_rate(model, x_at, y_at, cfg, gen)
            curve.append(
                {
                    "epoch": epoch + 1,
                    "train_loss": sum(losses) / len(losses),
                    "eval_accuracy": (logits.argmax(-1) == y_ev).double().mean().item(),
                    "flip_rate": rate,
                    "attacked": attacked,
                }
            )
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
                                "weight": float(atts[0][s, h, 0, pos]),
                            }
                        )
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
                "attacked": end["attacked"],
                "wall_s": time.perf_counter() - t0,
            }
        ]
    )
    return {
        "final": final,
        "curve": pl.DataFrame(curve).with_columns(run_id=pl.lit(run_id)),
        "attention": pl.DataFrame(att_rows).with_columns(run_id=pl.lit(run_id)),
    }


def classification_grid(scale: str = "default") -> list[dict]:
    """Classification jobs with stable ids.

    * ``"default"``: Figure 21's panel (|V| = 41, no MLP, no LayerNorm), heads {1, 2, 4} x
      layers {1, 2}, seed 0, 4 epochs of 10,000 sequences (6 jobs).
    * ``"paper"``: |V| in {41, 81, 161} x MLP x LayerNorm x heads {1, 2, 4} x layers {1, 2} x
      seeds {0, 1, 2}, 10 epochs (216 jobs).
    """
    if scale == "default":
        combos = [(41, False, False, h, n, 0) for h in (1, 2, 4) for n in (1, 2)]
        size: dict[str, Any] = {"epochs": 4}
    elif scale == "paper":
        combos = [
            (v, mlp, ln, h, n, s)
            for v in (41, 81, 161)
            for mlp in (True, False)
            for ln in (True, False)
            for h in (1, 2, 4)
            for n in (1, 2)
            for s in (0, 1, 2)
        ]
        size = {}
    else:
        raise ValueError(f"unknown scale {scale!r}")
    specs = []
    for v, mlp, ln, h, n, s in combos:
        spec = {
            "vocab_size": v,
            "use_mlp": mlp,
            "use_layernorm": ln,
            "n_heads": h,
            "n_layers": n,
            "seed": s,
            **size,
        }
        digest = hashlib.sha256(repr(sorted(size.items())).encode()).hexdigest()[:8]
        spec["id"] = f"V={v}-mlp={int(mlp)}-ln={int(ln)}-H={h}-L={n}-seed={s}-{digest}"
        specs.append(spec)
    return specs


def summarize_classification(results: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Concatenated ``final``, ``curve`` and ``attention`` tables (with the spec columns joined
    onto ``curve``)."""
    final = pl.concat([r["final"] for r in results], how="diagonal_relaxed").sort("run_id")
    cols = ["run_id", "vocab_size", "use_mlp", "use_layernorm", "n_heads", "n_layers", "seed"]
    curve = pl.concat([r["curve"] for r in results], how="diagonal_relaxed").join(
        final.select(cols), on="run_id"
    )
    attention = pl.concat([r["attention"] for r in results], how="diagonal_relaxed")
    return {"final": final, "curve": curve, "attention": attention}
