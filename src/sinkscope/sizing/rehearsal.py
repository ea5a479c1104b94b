"""Dress rehearsals at the paper's shapes without the hub: random-weight models with the exact
configuration of a paper model (``model_configs/``), cut to a few layers, saved as ``local``
models that the real DAG runs like any other.

Random weights make no sinks: costs that depend on the data (secondary sinks, work per sink head)
are not rehearsed, and the measured times of those parts are lower bounds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sinkscope.sizing.shapes import fixture_config

__all__ = ["build_random_model"]


def build_random_model(
    hub_id: str,
    n_layers: int,
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    seed: int = 0,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Save a random-weight model of ``hub_id``'s kept configuration, cut to ``n_layers`` layers,
    with the tokenizer of ``tokenizer_dir`` (a prepared model folder), into ``out_dir``; returns
    its ``config.json``.

    Only the depth changes (every width, the vocabulary and the positions stay), except where the
    tokenizer's ids do not fit: the vocabulary then grows to the tokenizer's length, so that real
    text can be tokenised (e.g. Mistral's 32,000 rows under a 49,152-token tokenizer)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kept = fixture_config(hub_id)
    if kept is None:
        raise KeyError(f"no kept config for {hub_id!r} in sinkscope/sizing/model_configs/")
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    values = {k: v for k, v in kept.items() if k != "quantization_config"}
    model_type = values.pop("model_type")
    for key in ("num_hidden_layers", "n_layer"):
        if key in values:
            values[key] = n_layers
    if "layer_types" in values:
        values["layer_types"] = values["layer_types"][:n_layers]
    values["vocab_size"] = max(int(values["vocab_size"]), len(tokenizer))
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        values.pop(key, None)
    config = AutoConfig.for_model(model_type, **values)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    return AutoConfig.from_pretrained(out).to_dict()
