"""The config schema and its defaults, torch-free (the standard library and PyYAML only).

``workflow/schemas/config.schema.yaml`` states every default of the config once; the validator
(:func:`sinkscope.config.validate_config`) fills them into a config, and code that needs a default
outside a config (the claims' tolerances, the head-class thresholds of the paper §3) reads it here
with :func:`schema_default`, so no module restates a number of the schema. The file is read once
per process.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

__all__ = ["REPOSITORY_ROOT", "SCHEMA_PATH", "load_schema", "schema_default"]

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPOSITORY_ROOT / "workflow" / "schemas" / "config.schema.yaml"


@functools.cache
def _schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def load_schema() -> dict[str, Any]:
    """The config schema (a copy: callers may change it)."""
    return copy.deepcopy(_schema())


def _resolved(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with a local ``$ref`` (``#/$defs/...``) merged in; ``node``'s own keys win."""
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Any = _schema()
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**_resolved(target), **{k: v for k, v in node.items() if k != "$ref"}}


def _filled(node: dict[str, Any]) -> Any:
    """The default of ``node`` with its properties' defaults filled in, as the validator fills a
    config (:func:`sinkscope.config.validate_config`)."""
    value = copy.deepcopy(node["default"])
    if isinstance(value, dict):
        for name, sub in node.get("properties", {}).items():
            sub = _resolved(sub)
            if "default" in sub:
                value.setdefault(name, _filled(sub))
    return value


def schema_default(*path: str) -> Any:
    """The default of the config key ``path`` (``schema_default("claims")``,
    ``schema_default("head_classes", "sink")``), with nested defaults filled in; a fresh copy.

    Raises ``KeyError`` naming the dotted key when the schema has no such key or no default.
    """
    node = _resolved(_schema())
    for depth, name in enumerate(path):
        properties = node.get("properties", {})
        if name not in properties:
            raise KeyError(f"config schema has no key {'.'.join(path[: depth + 1])!r}")
        node = _resolved(properties[name])
    if "default" not in node:
        raise KeyError(f"config schema states no default for {'.'.join(path)!r}")
    return _filled(node)
