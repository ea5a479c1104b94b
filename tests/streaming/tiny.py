"""Tiny models, token streams and pair tables shared by the StreamingLLM tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import torch
from transformers import AutoModelForCausalLM

from sinkscope.streaming.cache import build_policies
from sinkscope.streaming.evaluator import StreamingEvaluator
from sinkscope.streaming.experiment import _evaluate_policies
from sinkscope.streaming.recompute import (
    RECOMPUTE_SCHEMA,
    RECOMPUTE_TIMINGS_SCHEMA,
    _recompute_rows,
)
from sinkscope.streaming.streams import Streams
from tests.conftest import tiny_config

T = 40  # stream length of the tiny tests

#: bfloat16 against float32 NLL of the tiny models (nats per token): the mean absolute difference
#: over every token of every run, and the largest; measured 2e-3..4e-3 (mean) and 4e-3..1.6e-2
#: (max). Real models spread more per token (see "Device and dtype" in
#: sinkscope.streaming.experiment), their tables' averages less.
BF16_NLL_MEAN_TOL, BF16_NLL_MAX_TOL = 0.01, 0.05


def tiny_model(family: str, attn: str = "eager", global_layer: bool = True):
    config = tiny_config(family)
    if family == "gemma3" and global_layer:
        # the default pattern makes all 3 tiny layers sliding; put a global layer in the middle
        config.layer_types = ["sliding_attention", "full_attention", "sliding_attention"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    with torch.no_grad():  # break the symmetric init (as conftest does)
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    model.eval()
    return model


def streams(model, n: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    ids = torch.from_numpy(rng.integers(3, model.config.vocab_size, size=(n, length)))
    ids[:, 0] = model.config.bos_token_id
    return ids


class TorchSpy:
    """Stands for ``torch`` in a module under test (``monkeypatch.setattr(module, "torch", spy)``):
    everything is torch's own, except that each call of a tensor factory is recorded in
    ``calls`` as ``(name, device)``, the ``device`` it was given (None when none was; ``from_numpy``
    takes none, so it always records None)."""

    FACTORIES = frozenset(
        {"arange", "as_tensor", "empty", "from_numpy", "full", "ones", "rand", "randint",
         "randn", "tensor", "zeros"}
    )  # fmt: skip

    def __init__(self) -> None:
        self.calls: list[tuple[str, torch.device | None]] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(torch, name)
        if name not in self.FACTORIES:
            return value

        def factory(*args: Any, **kwargs: Any) -> torch.Tensor:
            device = kwargs.get("device")
            self.calls.append((name, None if device is None else torch.device(device)))
            return value(*args, **kwargs)

        return factory


def reference_nll(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits.float(), dim=-1)
    return -logp[:, :-1].gather(2, ids[:, 1:, None])[..., 0]


#: A small policy grid for the tiny models (streams of T tokens).
SMALL_PARAMS = {
    "window_sizes": [4, 8],
    "sink_count": 2,
    "sink_counts": [1, 2],
    "neutral_counts": [1],
    "k_sweep_window": 8,
    "positions": "cache",
    "position_ablation": True,
    "layer_ablation_window": 6,
    "layer_ablation_length": 24,
    "tail_start": None,
    "recompute_samples": 5,
}


def pair_tables(family: str, params: dict) -> tuple[dict[str, pl.DataFrame], list, Any]:
    """Every table of one tiny pair (model "m", dataset "d") under ``params``' policies."""
    model = tiny_model(family)
    policies = build_policies(params, T)
    evaluator = StreamingEvaluator(model, chunk_size=16)
    tables = _evaluate_policies(evaluator, streams(model), policies, 5, params)
    named = {n: t.with_columns(model=pl.lit("m"), dataset=pl.lit("d")) for n, t in tables.items()}
    return named, policies, model


def recompute_tables(
    tables: dict[str, pl.DataFrame], model: Any, ids: torch.Tensor, n_samples: int = 5
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What rule analyze_streaming_recompute computes from the pair's ``nll_by_position``."""
    streams_ = Streams(model, None, ids, [0, 1], int(model.config.bos_token_id))
    evaluator = StreamingEvaluator(model, chunk_size=16)
    rows, times = _recompute_rows(evaluator, streams_, tables["nll_by_position"], n_samples)
    recompute = pl.DataFrame(rows, schema=RECOMPUTE_SCHEMA)
    named = recompute.with_columns(model=pl.lit("m"), dataset=pl.lit("d"))
    return named, pl.DataFrame(times, schema=RECOMPUTE_TIMINGS_SCHEMA)
