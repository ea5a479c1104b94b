"""What a job's size depends on: the model's shape, known before any job runs.

:func:`model_facts` reads a configured model's transformers config from, in this order, the
prepared model (``results/models/<name>``, once ``prepare_model`` has run), the config files of the
paper's hub models kept in ``model_configs/`` (the hub is out of reach where the plan is often
made), a ``local`` source's own folder, and last the hub (``config.json`` only). Its parameter count
is exact: the model is built on PyTorch's ``meta`` device, which allocates nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from sinkscope.prepare.model_config import (
    LEARNED_SINK_MODEL_TYPES,
    MODEL_CONFIGS,
    config_json_of_entry,
)

__all__ = [
    "DTYPE_BYTES",
    "ModelFacts",
    "UnknownModelShape",
    "facts_from_config",
    "model_facts",
]

#: The folder of the paper's hub models' ``config.json`` files, one per hub id (``/`` -> ``--``).

#: Bytes per parameter of each ``models.<name>.dtype`` (schema enum).
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class UnknownModelShape(LookupError):
    """A model whose config is neither prepared, nor kept in ``model_configs/``, nor reachable."""


@dataclass(frozen=True)
class ModelFacts:
    """The shape of one configured model, what every job's request is computed from."""

    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int
    vocab_size: int
    n_params: int
    #: parameters used per token (a mixture of experts runs ``top_k`` of its experts): the
    #: forward's FLOPs are ``2 x active_params`` per token, plus attention
    active_params: int
    max_positions: int
    dtype: str
    learned_sinks: bool
    source: str  # where the config came from: "prepared", "model_configs/<file>", "local", "hub"

    @property
    def weight_bytes(self) -> int:
        """The weights in the configured dtype (what a job that loads the model holds)."""
        return self.n_params * DTYPE_BYTES[self.dtype]


def _count_params(config: Any) -> tuple[int, int]:
    """``(all parameters, parameters active per token)`` of the model of ``config``,
    built on the meta device (no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_experts = getattr(text, "num_local_experts", None)
    top_k = getattr(text, "num_experts_per_tok", None)
    if not n_experts or not top_k:
        return int(total), int(total)
    expert = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    return int(total), int(total - expert + expert * top_k / n_experts)


def facts_from_config(name: str, config: Any, dtype: str, source: str) -> ModelFacts:
    """:class:`ModelFacts` of a transformers config object (or a ``config.json`` mapping)."""
    from transformers import AutoConfig

    from sinkscope.prepare.models import model_shape

    if isinstance(config, Mapping):
        values = {k: v for k, v in config.items() if k not in ("quantization_config",)}
        config = AutoConfig.for_model(values.pop("model_type"), **values)
    shape = model_shape(config)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_params, active = _count_params(config)
    return ModelFacts(
        name=name,
        n_layers=shape.n_layers,
        n_heads=shape.n_heads,
        n_kv_heads=shape.n_kv_heads,
        head_dim=shape.head_dim,
        d_model=shape.d_model,
        vocab_size=int(text.vocab_size),
        n_params=n_params,
        active_params=active,
        max_positions=int(shape.max_positions),
        dtype=dtype,
        learned_sinks=getattr(text, "model_type", "") in LEARNED_SINK_MODEL_TYPES,
        source=source,
    )


@cache
def _cached_facts(name: str, entry_json: str, results: str) -> ModelFacts:
    entry = json.loads(entry_json)
    source, dtype = entry["source"], entry.get("dtype", "float32")
    prepared = Path(results) / "models" / name
    if (prepared / "sinkscope_model.json").is_file():
        from sinkscope.prepare.models import load_config

        return facts_from_config(name, load_config(prepared), dtype, "prepared")
    found = config_json_of_entry(name, entry_json, results)
    if found is not None:
        return facts_from_config(name, found[0], dtype, found[1])
    if source["kind"] == "hub":
        from huggingface_hub import HfApi, is_offline_mode
        from transformers import AutoConfig

        try:
            if not is_offline_mode():
                # one request without retries: no network fails here at once, where the config
                # download below retries for about 30 s (1 + 2 + 4 + 8 + 8 s)
                HfApi().model_info(source["id"], revision=source["revision"])
            config = AutoConfig.from_pretrained(source["id"], revision=source["revision"])
        except Exception as error:
            raise UnknownModelShape(
                f"models.{name}: the shape of {source['id']} is unknown until prepare_model has "
                f"run (no hub access: {error.__class__.__name__}); run "
                f"`snakemake results/models/{name}` first, or keep its config.json in "
                f"{MODEL_CONFIGS}"
            ) from error
        return facts_from_config(name, config, dtype, "hub")
    raise UnknownModelShape(
        f"models.{name}: the shape of this {source['kind']} model is unknown until prepare_model "
        f"has run; run `snakemake results/models/{name}` first"
    )


def model_facts(
    config: Mapping[str, Any], name: str, results: str | Path = "results"
) -> ModelFacts:
    """The shape of ``models.<name>`` (see the module docstring for where it comes from).

    Raises :class:`UnknownModelShape` naming the key when no source knows it."""
    entry = config["models"][name]
    return _cached_facts(name, json.dumps(entry, sort_keys=True, default=str), str(results))
