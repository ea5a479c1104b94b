"""Classification task and one-token flips (sinkscope.dynamics.classification)."""

from __future__ import annotations

import polars as pl
import torch

from sinkscope.dynamics.classification import (
    classification_grid,
    make_classification_data,
    run_classification,
    summarize_classification,
)


def test_task_labels_are_majority_groups() -> None:
    for vocab in (41, 81, 161):
        x, y, margin = make_classification_data(300, seed=1, vocab_size=vocab)
        per = (vocab - 1) // 4
        assert x.shape == (300, 11) and (x[:, 0] == 0).all()
        assert ((x[:, 1:] >= 1) & (x[:, 1:] < vocab)).all()
        counts = torch.nn.functional.one_hot((x[:, 1:] - 1) // per, 4).sum(1)
        assert torch.equal(counts.argmax(1), y)
        second = counts.sort(1, descending=True).values[:, 1]
        assert torch.equal(counts.max(1).values - second, margin)
        assert (margin >= 2).all()


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
    assert a["curve"].equals(b["curve"]) and a["attention"].equals(b["attention"])
    rate = a["final"]["flip_rate"][0]
    assert 0.0 <= rate <= 1.0
    att = a["attention"].group_by("epoch", "sample", "head").agg(w=pl.col("weight").sum())
    assert ((att["w"] - 1.0).abs() < 1e-5).all()  # non-causal softmax rows over all 11 tokens
    assert summarize_classification([a])["curve"].height == 2
    ids = [s["id"] for s in classification_grid("default")]
    assert len(set(ids)) == len(ids) == 6
    assert len(classification_grid("paper")) == 216
