"""Configuration: validation against the JSON schema, defaults, and the target matrix.

``workflow/schemas/config.schema.yaml`` is the single definition of what a config may hold; this
module applies it (filling defaults) and adds the checks a schema cannot express. Every error names
the offending key as a dotted path (``extraction.n_sequences``), and all of it runs when the
Snakefile is parsed -- before any job, download or model load.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPOSITORY_ROOT / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A configuration that the workflow refuses to run."""


def _dotted(path: Any) -> str:
    return ".".join(str(part) for part in path) or "<config root>"


def _with_defaults(validator_class: type) -> type:
    """A validator that fills ``default`` values of properties into the instance as it validates."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: Any, instance: Any, schema: Any) -> Iterator:
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if isinstance(subschema, dict) and "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def load_schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def validate_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``config`` and return a copy with every default filled in.

    Raises :class:`ConfigError` listing every problem, each with the dotted key it concerns.
    """
    result = copy.deepcopy(dict(config))
    schema = load_schema()
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    # Two passes: the first fills defaults (nested defaults appear once their parent exists).
    list(validator.iter_errors(result))
    errors = sorted(validator.iter_errors(result), key=lambda e: list(e.absolute_path))
    problems = [_describe(error) for error in errors]
    if not problems:
        problems = _semantic_problems(result)
    if problems:
        raise ConfigError("invalid configuration:\n  - " + "\n  - ".join(dict.fromkeys(problems)))
    return result


def _describe(error: jsonschema.ValidationError) -> str:
    path = _dotted(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        return f"{path}: {error.message}; allowed keys here: {allowed}"
    if error.validator == "enum" and error.absolute_path and error.absolute_path[-1] == "kind":
        return f"{path}: unknown source kind {error.instance!r}; known: {error.validator_value}"
    return f"{path}: {error.message}"


def _semantic_problems(config: Mapping[str, Any]) -> list[str]:
    problems = []
    for name, entry in config["models"].items():
        for index, part in enumerate(entry["source"].get("parts", [])):
            if part["registry"] == "pypi" and not part["filename"].startswith(
                part["package"].replace("-", "_")
            ):
                problems.append(
                    f"models.{name}.source.parts.{index}.filename: {part['filename']!r} does not "
                    f"belong to package {part['package']!r}"
                )
    for name, entry in config["datasets"].items():
        source = entry["source"]
        if "mediawiki" in entry["cleaning"] and source["kind"] != "registry_archive":
            problems.append(
                f"datasets.{name}.cleaning: 'mediawiki' needs a registry_archive source"
            )
        if source["kind"] == "local" and not Path(source["path"]).exists():
            problems.append(f"datasets.{name}.source.path: {source['path']!r} does not exist")
    costs = config.get("costs", {})
    if costs.get("enabled"):
        from sinkscope.defaults import BACKCOPY_PARAMS, COPYPASTE_PARAMS

        for task, known in (
            ("backcopy", BACKCOPY_PARAMS),
            ("copypaste", COPYPASTE_PARAMS),
        ):
            unknown = sorted(set(costs[task]["params"]) - set(known))
            if unknown:
                problems.append(
                    f"costs.{task}.params: unknown keys {unknown}; known: {sorted(known)}"
                )
    dynamics = config.get("dynamics", {})
    if dynamics.get("enabled"):
        from sinkscope.dynamics.grids import dynamics_jobs

        try:
            dynamics_jobs(dynamics)
        except ValueError as error:
            problems.append(str(error))
    extraction = config["extraction"]
    from sinkscope.h5codec import CodecUnavailableError, check_codec

    try:
        check_codec(extraction["codec"], extraction["compression_level"])
    except CodecUnavailableError as error:
        problems.append(str(error))
    text_tokens = extraction["context_length"]
    too_long = [t for t in config["oversmoothing"]["context_lengths"] if t > text_tokens]
    if too_long:
        problems.append(
            f"oversmoothing.context_lengths: {too_long} exceed extraction.context_length = "
            f"{text_tokens} (every prefix T' must fit in the extracted sequences)"
        )
    streaming = config.get("streaming", {})
    if streaming.get("enabled"):
        from sinkscope.defaults import STREAMING_PARAMS

        unknown = sorted(set(streaming["params"]) - set(STREAMING_PARAMS))
        if unknown:
            problems.append(
                f"streaming.params: unknown keys {unknown}; known: {sorted(STREAMING_PARAMS)}"
            )
        else:
            params = {**STREAMING_PARAMS, **streaming["params"]}
            length, k = int(params["stream_length"]), int(params["sink_count"])
            if all(int(w) + k >= length - 1 for w in params["window_sizes"]):
                problems.append(
                    f"streaming.params.window_sizes: {params['window_sizes']} with sink_count "
                    f"{k} never evict in streams of stream_length {length} (need L + k < "
                    f"{length - 1}): nothing would be measured"
                )
    for name, entry in config["models"].items():
        source = entry["source"]
        if source["kind"] == "local" and not Path(source["path"]).exists():
            problems.append(f"models.{name}.source.path: {source['path']!r} does not exist")
    return problems


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file and validate it (errors name the file and the key)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error})") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the config must be a mapping")
    try:
        return validate_config(raw)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


def pairs(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (model, dataset) pair the config asks for, in config order."""
    return [(model, dataset) for model in config["models"] for dataset in config["datasets"]]
