"""Facts of a model's ``config.json`` that are read both with and without transformers.

Standard library only: :mod:`sinkscope.config` checks a config against a ``local`` model's
``config.json`` without importing torch or transformers, and
:func:`sinkscope.prepare.models.model_shape` reads the same attributes from the transformers
config object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "LEARNED_SINK_MODEL_TYPES",
    "MODEL_CONFIGS",
    "POSITION_LIMIT_ATTRIBUTES",
    "ROTARY_KEYS",
    "ModelConfigError",
    "config_json",
    "config_json_of_entry",
    "fixture_config",
    "has_learned_sinks",
    "has_rotary_positions",
    "local_position_limit",
    "position_limit",
    "read_config_json",
]


class ModelConfigError(ValueError):
    """A model's ``config.json`` that cannot be read; the message names the config key, the
    file, where in it, and the fix."""


def read_config_json(path: Path, key: str) -> dict[str, Any]:
    """The mapping in the ``config.json`` at ``path`` (``key``: the config key that points to
    it, e.g. ``models.<name>.source.path``), or :class:`ModelConfigError` naming the key, the
    file, the line and column of a JSON error, and the fix."""
    try:
        raw = json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise ModelConfigError(
            f"{key}: {path} is not valid JSON ({error.msg} at line {error.lineno} column "
            f"{error.colno}); fix the file or point {key} at the model's own folder"
        ) from error
    except (OSError, UnicodeDecodeError) as error:
        raise ModelConfigError(f"{key}: {path} cannot be read ({error})") from error
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{key}: {path} holds a {type(raw).__name__}, not a JSON object")
    return raw


def position_limit(raw: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(attribute, value)`` of the position limit in a ``config.json`` mapping
    (:data:`POSITION_LIMIT_ATTRIBUTES`, the first that is a positive integer; the text config of
    a multimodal model); None when it does not say."""
    text = raw.get("text_config") or raw
    if not isinstance(text, dict):
        return None
    for attribute in POSITION_LIMIT_ATTRIBUTES:
        value = text.get(attribute)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return attribute, value
    return None


#: The kept ``config.json`` files of the paper's hub models (``<org>--<name>.json``): their shapes
#: and position handling are known without the hub (:mod:`sinkscope.sizing`, the applicability of
#: the claims and the StreamingLLM caches).
MODEL_CONFIGS = Path(__file__).with_name("model_configs")

#: Attributes that hold a model's position limit, in the order they are read:
#: ``max_position_embeddings`` (Llama, Gemma), GPT-2's ``n_positions``.
POSITION_LIMIT_ATTRIBUTES = ("max_position_embeddings", "n_positions")


def local_position_limit(
    source: Mapping[str, Any], key: str = "models.<name>.source.path"
) -> tuple[str, int] | None:
    """:func:`position_limit` of a ``local`` model's ``config.json``, read without transformers;
    None for other sources, without the file, or when it does not say; a file that is not JSON
    raises :class:`ModelConfigError` naming ``key``."""
    if source["kind"] != "local" or not (Path(source["path"]) / "config.json").is_file():
        return None
    return position_limit(read_config_json(Path(source["path"]) / "config.json", key))


def fixture_config(hub_id: str) -> dict[str, Any] | None:
    """The kept ``config.json`` of a paper model (``model_configs/<org>--<name>.json``), if any."""
    path = MODEL_CONFIGS / f"{hub_id.replace('/', '--')}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def config_json(
    config: Mapping[str, Any], name: str, results: str | Path = "results"
) -> tuple[dict[str, Any], str] | None:
    """``models.<name>``'s ``config.json`` as a mapping and where it came from (as in
    :attr:`ModelFacts.source`), read without transformers and without the network: the prepared
    model's own file, a kept paper config (``model_configs/``), a ``local`` source's folder, or a
    kept config of a registry GGUF; ``None`` where none is at hand (a hub model not prepared
    yet, outside ``model_configs/``)."""
    return config_json_of_entry(
        name, json.dumps(config["models"][name], sort_keys=True, default=str), str(results)
    )


def config_json_of_entry(
    name: str, entry_json: str, results: str
) -> tuple[dict[str, Any], str] | None:
    """:func:`config_json` of the model entry ``entry_json`` (the entry as sorted JSON, so that a
    caller can cache on it)."""
    source = json.loads(entry_json)["source"]
    prepared = Path(results) / "models" / name
    if (prepared / "sinkscope_model.json").is_file() and (prepared / "config.json").is_file():
        return read_config_json(prepared / "config.json", f"models.{name}"), "prepared"
    if source["kind"] == "hub" and (kept := fixture_config(source["id"])) is not None:
        return kept, f"model_configs/{source['id']}"
    if source["kind"] == "local" and (Path(source["path"]) / "config.json").is_file():
        key = f"models.{name}.source.path"
        return read_config_json(Path(source["path"]) / "config.json", key), "local"
    if source["kind"] == "registry_gguf":
        kept = fixture_config(f"gguf/{source['gguf_sha256']}")
        if kept is not None:
            return kept, "model_configs/gguf"
    return None


#: Keys that only the configs of models with rotary position embeddings (RoPE) carry, at the
#: top or in ``text_config`` (Llama, Mistral, Gemma, gpt-oss, SmolLM2: ``rope_theta`` or
#: ``rope_parameters``; GPT-NeoX and Phi: ``rotary_*``, ``partial_rotary_factor``).
ROTARY_KEYS = frozenset(
    {
        "rope_theta",
        "rope_parameters",
        "rope_scaling",
        "rotary_dim",
        "rotary_pct",
        "rotary_emb_base",
        "partial_rotary_factor",
    }
)


#: ``model_type`` of the models whose heads have a learned sink logit (gpt-oss's ``sinks``): their
#: attention rows over the tokens sum to ``1 - p_sink``.
LEARNED_SINK_MODEL_TYPES = frozenset({"gpt_oss"})


def has_learned_sinks(config_json: Mapping[str, Any]) -> bool:
    """Whether the model of ``config_json`` has learned sink logits
    (:data:`LEARNED_SINK_MODEL_TYPES`, at the top or in ``text_config``)."""
    types = {
        config_json.get("model_type"),
        (config_json.get("text_config") or {}).get("model_type"),
    }
    return bool(types & LEARNED_SINK_MODEL_TYPES)


def has_rotary_positions(config_json: Mapping[str, Any]) -> bool:
    """Whether the model of ``config_json`` encodes positions by rotating queries and keys
    (RoPE), which StreamingLLM's in-cache re-positioning needs; GPT-2 adds learned absolute
    position embeddings to its inputs instead (its config has none of :data:`ROTARY_KEYS`)."""
    keys = set(config_json) | set(config_json.get("text_config") or {})
    return bool(keys & ROTARY_KEYS)
