"""Classification task and one-token flips (sinkscope.dynamics.classification)."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from torch import nn

from sinkscope.dynamics.classification import (
    N_LABELS,
    classification_grid,
    flip_candidates,
    flip_rate,
    make_classification_data,
    run_classification,
    signal_groups,
    token_label,
)
from sinkscope.dynamics.summary import summarize_classification


def test_task_has_n_signal_tokens_of_the_label_and_neutral_rest() -> None:
    for vocab in (41, 81, 161):
        x, y = make_classification_data(300, seed=1, vocab_size=vocab)
        per = (vocab - 1) // 8
        assert x.shape == (300, 11) and (x[:, 0] == 0).all()
        assert ((x[:, 1:] >= 1) & (x[:, 1:] < vocab)).all()
        for row, label in zip(x.tolist(), y.tolist(), strict=True):
            signal = [t for t in row[1:] if t <= 4 * per]
            assert len(signal) == 3  # exactly n_signal signal tokens ...
            assert all((t - 1) // per == label for t in signal)  # ... all of the label's group
        labels = token_label(x, vocab)
        assert (labels[:, 0] == -1).all() and ((labels >= 0).sum(1) == 3).all()
    assert set(make_classification_data(400, 2)[1].tolist()) == set(range(N_LABELS))
    with pytest.raises(ValueError, match="multiple of 8"):
        signal_groups(42)


def test_every_candidate_keeps_the_majority_label() -> None:
    x, y = make_classification_data(40, seed=4)
    gen = torch.Generator().manual_seed(0)
    for seq, label in zip(x, y, strict=True):
        cands = flip_candidates(int(label), 41, 11, 10_000, gen)
        assert len(cands) == 10 * 3 * 5  # positions x tokens of the 3 other labels
        for pos, tok in cands.tolist():
            attacked = seq.clone()
            attacked[pos] = tok
            labels = token_label(attacked, 41)[1:]
            counts = torch.bincount(labels[labels >= 0], minlength=4)
            assert counts.argmax() == label and counts[label] >= 2
            assert counts.sum() - counts[label] == 1
    assert len(flip_candidates(0, 161, 11, 400, gen)) == 400


class _Planted(nn.Module):
    """Classifies from token ids alone: ``count`` sums the votes of all signal tokens (never
    flipped by one replacement), ``first`` reads only the first signal token (always flipped)."""

    def __init__(self, rule: str) -> None:
        super().__init__()
        self.rule = rule

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list]:
        labels = token_label(x, 41)
        votes = nn.functional.one_hot(labels.clamp_min(0), N_LABELS).float()
        votes = votes * (labels >= 0)[..., None]
        if self.rule == "first":
            first = (labels >= 0).float().argmax(1)
            votes = votes[torch.arange(len(x)), first][:, None]
        return votes.sum(1), []


def test_flip_rate_on_planted_classifiers() -> None:
    x, y = make_classification_data(60, seed=5)
    cfg = {"vocab_size": 41, "n_attack": 50, "max_candidates": 1_000}
    counting = flip_rate(_Planted("count"), x, y, cfg, torch.Generator().manual_seed(0))
    assert counting == (0.0, 0.0, 50)
    first = flip_rate(_Planted("first"), x, y, cfg, torch.Generator().manual_seed(0))
    assert first[0] == 1.0 and first[2] == 50
    # neutral-only: a new signal token before the first one takes over the "first" reader
    assert 0.0 < first[1] <= 1.0


def test_tiny_classification_run() -> None:
    spec = {
        "hidden": 16,
        "ffn": 32,
        "n_heads": 2,
        "n_train": 256,
        "n_eval": 64,
        "epochs": 2,
        "batch_size": 64,
        "n_attack": 8,
        "max_candidates": 20,
        "id": "tiny",
    }
    a, b = run_classification(spec), run_classification(spec)
    for name in ("final", "curve", "attention"):
        assert a[name].equals(b[name]), name
    rate = a["final"]["flip_rate"][0]
    assert 0.0 <= a["final"]["flip_rate_neutral"][0] <= rate <= 1.0
    att = a["attention"].group_by("epoch", "sample", "head").agg(w=pl.col("weight").sum())
    assert ((att["w"] - 1.0).abs() < 1e-5).all()  # non-causal softmax rows over all 11 tokens
    assert a["attention"].filter(pl.col("is_signal")).height == 2 * 2 * 2 * 3
    summary = summarize_classification([a])
    assert summary["curve"].height == 2 and summary["by_setup"]["runs"][0] == 1
    ids = [s["id"] for s in classification_grid("default")]
    assert len(set(ids)) == len(ids) == 18
    assert len(classification_grid("paper")) == 216
    with pytest.raises(KeyError, match="p_label"):
        run_classification({"p_label": 0.5})
