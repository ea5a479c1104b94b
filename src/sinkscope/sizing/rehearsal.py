"""Dress rehearsals at the paper's shapes without the hub: random-weight models with the exact
configuration of a paper model (``model_configs/``), cut to a few layers, saved as ``local``
models that the real DAG runs like any other.

Random weights make no sinks: costs that depend on the data (secondary sinks, work per sink head)
are not rehearsed by the thresholds of a real run. :data:`SINK_HEAVY` sets them so that every head
is a sink head and every eligible position a secondary sink: the most of that work any data can
ask for, an upper bound a rehearsal can measure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sinkscope.prepare.model_config import fixture_config

__all__ = ["SINK_HEAVY", "build_random_model", "sink_heavy"]

#: Config overrides that put the most data-dependent work on every job, whatever the weights:
#: every head a sink head (BOS mass >= 0: the per-sink-head attention of ``analyze_geometry``),
#: every token in Prop. 4.1's set J (attention to BOS >= 0: the half-space test on all tokens),
#: every position with ``sinks.secondary_min_queries`` queries a secondary sink (a score above
#: 1e-6; the schema asks for eps > 0, and any softmax over a few hundred keys gives more).
SINK_HEAVY: dict[str, dict[str, float]] = {
    "head_classes": {"sink": 0.0},
    "geometry": {"attend_threshold": 0.0},
    "sinks": {"eps": 1e-6},
}


def sink_heavy(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a config file's mapping) with :data:`SINK_HEAVY` merged into its sections."""
    merged = dict(config)
    for section, keys in SINK_HEAVY.items():
        merged[section] = {**merged.get(section, {}), **keys}
    return merged


def build_random_model(
    hub_id: str,
    n_layers: int,
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    seed: int = 0,
    dtype: str = "float32",
    device: str = "cpu",
) -> dict[str, Any]:
    """Save a random-weight model of ``hub_id``'s kept configuration, cut to ``n_layers`` layers,
    with the tokenizer of ``tokenizer_dir`` (a prepared model folder), into ``out_dir``; returns
    its ``config.json``. ``device``: where the weights are drawn (``cuda`` draws a 7-8B model's
    in seconds; the saved file is the same kind either way).

    Only the depth changes (every width, the vocabulary and the positions stay), except where the
    tokenizer's ids do not fit: the vocabulary then grows to the tokenizer's length, so that real
    text can be tokenised (e.g. Mistral's 32,000 rows under a 49,152-token tokenizer)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kept = fixture_config(hub_id)
    if kept is None:
        raise KeyError(f"no kept config for {hub_id!r} in sinkscope/prepare/model_configs/")
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
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    return AutoConfig.from_pretrained(out).to_dict()
