"""Configuration: validation against the JSON schema, defaults, and the target matrix.

``workflow/schemas/config.schema.yaml`` is the single definition of what a config may hold; this
module applies it (filling defaults) and adds the checks a schema cannot express. Every error names
the offending key as a dotted path (``extraction.n_sequences``), and all of it runs when the
Snakefile is parsed -- before any job, download or model load.

Config files are read strictly (:func:`check_config_files`, :func:`read_config_file`): a key given
twice in one mapping, a YAML syntax error (e.g. a tab in the indentation) and an unquoted number
where the schema wants a string (an all-digit sha256 or revision) are rejected naming the file and
line. Snakemake reads the files itself, silently keeping the last of duplicate keys, so the
Snakefile runs :func:`check_config_files` on the files in use before Snakemake reads config.yaml.
"""

from __future__ import annotations

import codecs
import copy
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sinkscope.config_schema import load_schema
from sinkscope.variants import NO_BOS_SUFFIX, is_no_bos, no_bos_id, source_dataset


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


NUMBER_FOR_STRING = (
    "YAML reads unquoted digits as a number, losing how they were written (0123 becomes 83, 1.10 "
    "becomes 1.1), so write the value in quotes"
)
"""Advice for a number where the schema wants a string (e.g. an all-digit sha256 or revision)."""


def _number_for_string(error: jsonschema.ValidationError) -> bool:
    """Whether ``error`` is a number given where the schema allows a string but no number."""
    if error.validator != "type" or isinstance(error.instance, bool):
        return False
    allowed = error.validator_value
    allowed = [allowed] if isinstance(allowed, str) else list(allowed)
    return isinstance(error.instance, (int, float)) and "string" in allowed


def _describe(error: jsonschema.ValidationError) -> str:
    path = _dotted(error.absolute_path)
    if _number_for_string(error):
        return f"{path}: {error.instance!r} is a number, not a string; {NUMBER_FOR_STRING}"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        return f"{path}: {error.message}; allowed keys here: {allowed}"
    if error.validator == "enum" and error.absolute_path and error.absolute_path[-1] == "kind":
        return f"{path}: unknown source kind {error.instance!r}; known: {error.validator_value}"
    if error.validator in ("oneOf", "anyOf"):
        forms = " or ".join(_form(option) for option in error.validator_value)
        about = error.schema.get("description")
        return f"{path}: {error.instance!r} is not {forms}" + (f" ({about})" if about else "")
    if error.validator == "minItems":
        count = len(error.instance)
        return (
            f"{path}: {error.instance!r} has {count} item{'s' * (count != 1)}; at least "
            f"{error.validator_value} are needed"
        )
    return f"{path}: {error.message}"


def _form(schema: Mapping[str, Any]) -> str:
    """A schema alternative in words: ``{type: integer, minimum: 1}`` -> 'an integer >= 1'."""
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(map(repr, schema["enum"]))
    kind = schema.get("type")
    words = {"integer": "an integer", "number": "a number", "string": "a string",
             "array": "a list", "object": "a mapping", "boolean": "true or false",
             "null": "null"}  # fmt: skip
    text = words.get(kind, str(kind)) if isinstance(kind, str) else "a value"
    bounds = [f">= {schema['minimum']}"] if "minimum" in schema else []
    bounds += [f"<= {schema['maximum']}"] if "maximum" in schema else []
    return " ".join([text, *bounds])


def config_warnings(config: Mapping[str, Any]) -> list[str]:
    """What a valid config probably did not mean, said when the workflow is parsed and by
    ``sinkscope check-config``: two model names with the same source are prepared, extracted and
    counted as two models in every summary and claim (intended only to compare, e.g., dtypes)."""
    warnings = []
    seen: dict[str, str] = {}
    for name, entry in config["models"].items():
        key = json.dumps(entry["source"], sort_keys=True, default=str)
        if key in seen:
            first = seen[key]
            same = model_entry(config, name) == model_entry(config, first)
            warnings.append(
                f"models.{first} and models.{name} have the same source: the model is prepared, "
                "extracted and counted twice in the summaries and claims"
                + (" with identical settings; remove one" if same else "")
            )
        else:
            seen[key] = name
    return warnings


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
        if is_no_bos(name):
            problems.append(
                f"datasets.{name}: a dataset name may not end with {NO_BOS_SUFFIX!r}, the suffix "
                f"of no-BOS variants; rename it and set datasets.<name>.bos: both for a no-BOS pair"
            )
        if "mediawiki" in entry["cleaning"] and source["kind"] != "registry_archive":
            problems.append(
                f"datasets.{name}.cleaning: 'mediawiki' needs a registry_archive source"
            )
        if source["kind"] == "local" and not Path(source["path"]).exists():
            problems.append(f"datasets.{name}.source.path: {source['path']!r} does not exist")
        if "encoding" in source and not _is_text_encoding(source["encoding"]):
            problems.append(
                f"datasets.{name}.source.encoding: {source['encoding']!r} is not a text encoding "
                "Python knows; use a codec name such as utf-8, latin-1 or cp1252"
            )
    costs = config.get("costs", {})
    if costs.get("enabled"):
        from sinkscope.defaults import BACKCOPY_E2E_PARAMS, BACKCOPY_PARAMS, COPYPASTE_PARAMS

        e2e_key = "costs.backcopy.end_to_end.params"
        for key, given, known in (
            ("costs.backcopy.params", costs["backcopy"]["params"], BACKCOPY_PARAMS),
            (e2e_key, costs["backcopy"]["end_to_end"]["params"], BACKCOPY_E2E_PARAMS),
            ("costs.copypaste.params", costs["copypaste"]["params"], COPYPASTE_PARAMS),
        ):
            unknown = sorted(set(given) - set(known))
            if unknown:
                misplaced = sorted(set(unknown) & set(BACKCOPY_E2E_PARAMS))
                hint = f" ({misplaced} belong in {e2e_key})" if misplaced else ""
                problems.append(f"{key}: unknown keys {unknown}; known: {sorted(known)}{hint}")
    dynamics = config.get("dynamics", {})
    if dynamics.get("enabled"):
        from sinkscope.dynamics.grids import dynamics_jobs

        try:
            dynamics_jobs(dynamics)
        except ValueError as error:
            problems.append(str(error))
    extraction = config["extraction"]
    from sinkscope.extraction.h5codec import CodecUnavailableError, check_codec

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
    sinks = config["sinks"]
    if sinks["max_key_position"] > text_tokens:
        problems.append(
            f"sinks.max_key_position: {sinks['max_key_position']} exceeds "
            f"extraction.context_length = {text_tokens} (key positions run 0..T)"
        )
    too_long = [p for p in sinks["prefix_positions"] if p > text_tokens + 1]
    if too_long:
        problems.append(
            f"sinks.prefix_positions: {too_long} exceed the {text_tokens + 1} positions of the "
            f"extracted sequences (extraction.context_length + 1, BOS included)"
        )
    short = [p for p in sinks["prefix_positions"] if p <= sinks["max_key_position"]]
    if short:
        problems.append(
            f"sinks.prefix_positions: {short} do not reach key position "
            f"sinks.max_key_position = {sinks['max_key_position']} (need P > K)"
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
            params = streaming_params(config)
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
    problems.extend(_gpu_type_problems(config["resources"]))
    problems.extend(_position_problems(config))
    return problems


#: GPU type names that snakemake-executor-plugin-slurm passes as ``gpu_model`` (its own check)
GPU_MODEL_NAME = re.compile(r"^[a-zA-Z0-9_.]+$")


def _gpu_type_problems(resources: Mapping[str, Any]) -> list[str]:
    """``resources.gpu_types`` names that the SLURM plugin would refuse as ``gpu_model``."""
    if resources["gpu_type_resource"] != "gpu_model":
        return []
    return [
        f"resources.gpu_types.{name}: the SLURM plugin passes a GPU type to sbatch --gpus only "
        "when its name has letters, digits, '_' and '.' alone; use the GRES type name SLURM "
        "knows (sinfo -o %G), or set resources.gpu_type_resource: constraint to ask for it as "
        "a node feature"
        for name in resources.get("gpu_types", {})
        if not GPU_MODEL_NAME.match(name)
    ]


def analysis_runs(config: Mapping[str, Any], analysis: str) -> bool:
    """Whether ``analysis`` runs in ``config``: heads, geometry, oversmoothing and sinks always; another
    section when its ``enabled`` is true; a dotted ``section.part`` when both the section and the
    part are enabled (a part without ``enabled`` follows its section)."""
    section, _, part = analysis.partition(".")
    entry = config.get(section)
    enabled = entry.get("enabled") if isinstance(entry, Mapping) else None
    always = ("heads", "geometry", "oversmoothing", "sinks")
    runs = section in always if enabled is None else bool(enabled)
    if runs and part:
        sub = entry.get(part) if isinstance(entry, Mapping) else None
        runs = bool(sub.get("enabled", True)) if isinstance(sub, Mapping) else True
    return runs


#: The token lengths each model-running rule asks of a model (the config keys of
#: :func:`model_lengths`): checked against the prepared model's positions before any work
#: (:func:`check_model_positions`).
RULE_LENGTH_KEYS: Mapping[str, tuple[str, ...]] = {
    "extract_activations": ("extraction.context_length",),
    "analyze_streaming": ("streaming.params.stream_length",),
    "analyze_streaming_recompute": ("streaming.params.stream_length",),
    "extract_long_context": ("geometry.long_context.seq_len",),
}


def model_lengths(config: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """``{config key: (tokens, extra)}``: the token lengths the config runs a model at, plus the
    positions added (BOS): ``extraction.context_length`` (+ 1), ``geometry.long_context.seq_len``
    (unless ``"auto"``, which is never beyond the positions: :func:`long_context_seq_len`) and
    ``streaming.params.stream_length`` (whose "dense" reference would otherwise silently be a
    window of the model's positions), each where its analysis runs."""
    lengths = {"extraction.context_length": (int(config["extraction"]["context_length"]), 1)}
    seq_len = config["geometry"]["long_context"]["seq_len"]
    if analysis_runs(config, "geometry.long_context") and seq_len != AUTO_SEQ_LEN:
        lengths["geometry.long_context.seq_len"] = (int(seq_len), 0)
    if analysis_runs(config, "streaming"):
        length = streaming_params(config)["stream_length"]
        lengths["streaming.params.stream_length"] = (int(length), 0)
    return lengths


def position_problems(
    config: Mapping[str, Any],
    model: str,
    limit: tuple[str, int],
    where: str | Path,
    keys: Iterable[str] | None = None,
) -> list[str]:
    """One sentence per length of :func:`model_lengths` (only ``keys``, when given) beyond the
    positions ``limit`` (``(attribute, value)`` of the model's ``config.json`` at ``where``):
    the key, the length, the model, the file and the largest length that fits. The config
    check gives it for ``local`` models; every model-running job for its own model once
    ``prepare_model`` has read the positions (:func:`check_model_positions`)."""
    wanted = None if keys is None else set(keys)
    problems = []
    for key, (length, extra) in model_lengths(config).items():
        if (wanted is None or key in wanted) and length + extra > limit[1]:
            plus = f" + {extra} (BOS)" if extra else ""
            problems.append(
                f"{key}: {length}{plus} exceeds the {limit[1]} positions of models.{model} "
                f"({limit[0]} in {where}); set it to at most {limit[1] - extra}"
            )
    return problems


def _position_problems(config: Mapping[str, Any]) -> list[str]:
    """:func:`position_problems` of every model whose ``config.json`` is readable now (a
    ``local`` source; the others are checked by their jobs once prepared); a ``config.json``
    that is not JSON is a problem of its own, naming the file and the line."""
    from sinkscope.prepare.model_config import ModelConfigError, local_position_limit

    problems = []
    for name, entry in config["models"].items():
        try:
            limit = local_position_limit(entry["source"], f"models.{name}.source.path")
        except ModelConfigError as error:
            problems.append(str(error))
            continue
        if limit is not None:
            where = Path(entry["source"]["path"]) / "config.json"
            problems.extend(position_problems(config, name, limit, where))
    return problems


def backcopy_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """``costs.backcopy.params`` of a validated config over
    :data:`sinkscope.defaults.BACKCOPY_PARAMS` (what every back-copy run uses)."""
    from sinkscope.defaults import BACKCOPY_PARAMS

    section = config.get("costs", {}).get("backcopy", {})
    return {**BACKCOPY_PARAMS, **(section.get("params") or {})}


#: The extraction settings a pair's figure titles name (N and T): the only part of the
#: ``extraction`` section that can change what ``classify_heads`` and ``analyze_geometry`` write.
EXTRACTION_SCALE_KEYS = ("n_sequences", "context_length")
#: The ``geometry.long_context`` settings that decide which sequences rule
#: ``extract_long_context`` runs the model on (its attention-inputs file).
LONG_CONTEXT_INPUT_KEYS = ("n_sequences", "seq_len", "points_per_dim")
#: Those that decide only how rule ``analyze_geometry_long_context`` solves on that file: a
#: change re-runs the solves, not the model.
LONG_CONTEXT_SOLVE_KEYS = ("solve_seconds", "gaussian_null", "null_solve_seconds")
#: Every ``geometry.long_context`` setting that can change the long-context table (``enabled``
#: only decides whether the rules run).
LONG_CONTEXT_KEYS = (*LONG_CONTEXT_INPUT_KEYS, *LONG_CONTEXT_SOLVE_KEYS)
#: The ``geometry.long_context.seq_len`` that takes each model's length from its ``d_model``.
AUTO_SEQ_LEN = "auto"


def long_context_seq_len(
    seq_len: int | str, points_per_dim: float, d_model: int, max_positions: int | None
) -> int:
    """The long-context length of one model, BOS included (config ``geometry.long_context``).

    A number is taken as it is. :data:`AUTO_SEQ_LEN` asks for ``ceil(points_per_dim x d_model)``
    tokens after BOS, so that the half-space test of Prop. 4.1 can fail and random points would
    fail it too (Wendel's probability,
    :func:`sinkscope.geometry.halfspace_solver.wendel_probability`, falls fast beyond ``2 d``), at most
    ``max_positions`` (None or 0: no limit known). A model whose positions cannot hold that many
    gets its positions, and its claim row says whether random points would pass at that length.
    """
    if seq_len != AUTO_SEQ_LEN:
        return int(seq_len)
    wanted = math.ceil(points_per_dim * d_model) + 1
    return min(wanted, int(max_positions)) if max_positions else wanted


def extraction_scale(config: Mapping[str, Any]) -> dict[str, Any]:
    """N and T of a validated config's extraction (:data:`EXTRACTION_SCALE_KEYS`): the param of
    the per-pair rules whose figures name them."""
    return {key: config["extraction"][key] for key in EXTRACTION_SCALE_KEYS}


def long_context_params(
    config: Mapping[str, Any], keys: tuple[str, ...] = LONG_CONTEXT_KEYS
) -> dict[str, Any]:
    """The ``keys`` (:data:`LONG_CONTEXT_KEYS`, or the input or solve part) of a validated
    config's ``geometry.long_context``."""
    return {key: config["geometry"]["long_context"][key] for key in keys}


def backcopy_end_to_end_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides of the end-to-end back-copy check: ``costs.backcopy.params`` (the runs'
    settings it shares) with ``costs.backcopy.end_to_end.params`` (its own ``e2e_*`` keys) on
    top; :func:`sinkscope.costs.backcopy_runs.run_backcopy_end_to_end` takes both."""
    backcopy = config["costs"]["backcopy"]
    return {**backcopy["params"], **backcopy["end_to_end"]["params"]}


#: The ``streaming.params`` keys that only rule ``analyze_streaming_recompute`` reads: a change
#: re-runs the re-computation, not the caches' evaluation (:func:`streaming_cache_params`).
RECOMPUTE_ONLY_KEYS = ("recompute_samples",)


def streaming_cache_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config's own ``streaming.params`` without :data:`RECOMPUTE_ONLY_KEYS`: the params of
    rule ``analyze_streaming``, so that more or fewer re-computed queries do not re-run it."""
    own = config.get("streaming", {}).get("params", {})
    return {key: value for key, value in own.items() if key not in RECOMPUTE_ONLY_KEYS}


def streaming_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """``streaming.params`` of a validated config over :data:`sinkscope.defaults.STREAMING_PARAMS`
    (the StreamingLLM streams' settings; the long-context geometry test reuses their seed)."""
    from sinkscope.defaults import STREAMING_PARAMS

    return {**STREAMING_PARAMS, **config.get("streaming", {}).get("params", {})}


def _is_text_encoding(name: str) -> bool:
    try:
        return bool(getattr(codecs.lookup(name), "_is_text_encoding", True))
    except LookupError:
        return False


# --------------------------------------------------------------------------------------------
# Reading config files strictly
# --------------------------------------------------------------------------------------------


def _where(path: Path, mark: yaml.Mark) -> str:
    return f"{path}, line {mark.line + 1}, column {mark.column + 1}"


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping (merge keys ``<<``
    still override as usual)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool, type(None))):
                continue  # SafeLoader's own construct_mapping reports unhashable keys
            if key in first:
                raise _DuplicateKey(
                    problem=f"key {key!r} is given twice in one mapping (first at line "
                    f"{first[key].line + 1}; YAML would silently keep only the last value), so "
                    "remove or merge one of them",
                    problem_mark=key_node.start_mark,
                )
            first[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _scalar_nodes(node: yaml.Node, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple, Any]]:
    """``(key path, node)`` of every scalar of a composed YAML document."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                yield from _scalar_nodes(value_node, (*path, key_node.value))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _scalar_nodes(item, (*path, index))
    elif isinstance(node, yaml.ScalarNode):
        yield path, node


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"keys {twice} are given twice in one object")
    return dict(pairs)


def read_config_file(path: str | Path) -> Any:
    """The content of one config file, read strictly; raises :class:`ConfigError` in one sentence
    naming the file (and line and column, for YAML) for a key given twice, a YAML syntax error,
    or an unquoted number where the schema wants a string.

    JSON files are read as JSON first, as Snakemake does.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text, object_pairs_hook=_json_object)
    except json.JSONDecodeError:
        pass  # not JSON: YAML
    except ValueError as error:
        raise ConfigError(f"{path}: {error}; remove or merge one of them") from None
    loader = _StrictLoader(text)
    loader.name = str(path)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = _where(path, mark) if mark is not None else str(path)
        problem = error.problem or error.context or "not valid YAML"
        advice = "indent with spaces, not tabs" if "'\\t'" in problem else "fix the YAML syntax"
        if isinstance(error, _DuplicateKey):
            raise ConfigError(f"{where}: {problem}") from None
        raise ConfigError(f"{where}: not valid YAML ({problem}), so {advice}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error}); fix the YAML syntax") from None
    finally:
        loader.dispose()
    if isinstance(data, dict) and node is not None:
        _check_numbers_for_strings(path, data, dict(_scalar_nodes(node)))
    return data


def _check_numbers_for_strings(
    path: Path, data: dict[str, Any], scalars: Mapping[tuple, yaml.ScalarNode]
) -> None:
    """Reject an unquoted number where the schema wants a string (one file may be partial)."""
    validator = jsonschema.Draft202012Validator(load_schema())
    for error in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path)):
        node = scalars.get(tuple(error.absolute_path))
        if _number_for_string(error) and node is not None and node.style is None:
            key = error.absolute_path[-1]
            raise ConfigError(
                f"{_where(path, node.start_mark)}: {_dotted(error.absolute_path)} is the unquoted "
                f'number {node.value}; {NUMBER_FOR_STRING}: {key}: "{node.value}"'
            )


def check_config_files(paths: Iterable[str | Path]) -> None:
    """Read every config file of ``paths`` strictly (:func:`read_config_file`); files that do not
    exist are skipped (Snakemake reports them)."""
    for path in paths:
        if Path(path).is_file():
            read_config_file(path)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a config file strictly and validate it (errors name the file and the key)."""
    path = Path(path)
    raw = read_config_file(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the config must be a mapping")
    try:
        return validate_config(raw)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


def load_layered_config(paths: Iterable[str | Path]) -> dict[str, Any]:
    """Read config files strictly and layer them left to right as ``snakemake --configfile A B``
    does (``snakemake.utils.update_config``: mappings merge key by key, anything else replaces),
    then validate the result; errors name the file, or the key of the layered config."""
    from snakemake.utils import update_config

    paths = [Path(path) for path in paths]
    merged: dict[str, Any] = {}
    for path in paths:
        raw = read_config_file(path)
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the config must be a mapping")
        update_config(merged, raw)
    try:
        return validate_config(merged)
    except ConfigError as error:
        located = locate_problems(str(error), paths)
        raise ConfigError(f"{' + '.join(map(str, paths))}: {located}") from error


def _key_marks(path: Path) -> dict[tuple[str, ...], yaml.Mark]:
    """Where each key of a YAML config file is written: ``{key path: mark of the key}`` (JSON
    files and unreadable ones: empty)."""
    text = path.read_text(encoding="utf-8")
    try:
        json.loads(text)
        return {}  # JSON: no line marks
    except ValueError:
        pass
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    marks: dict[tuple[str, ...], yaml.Mark] = {}

    def visit(current: yaml.Node | None, prefix: tuple[str, ...]) -> None:
        if isinstance(current, yaml.MappingNode):
            for key_node, value_node in current.value:
                if isinstance(key_node, yaml.ScalarNode):
                    key = (*prefix, str(key_node.value))
                    marks[key] = key_node.start_mark
                    visit(value_node, key)
        elif isinstance(current, yaml.SequenceNode):
            for index, item in enumerate(current.value):
                marks[(*prefix, str(index))] = item.start_mark
                visit(item, (*prefix, str(index)))

    visit(node, ())
    return marks


def locate_problems(message: str, paths: Sequence[Path]) -> str:
    """``message`` (a :class:`ConfigError`'s ``"  - <dotted key>: <problem>"`` lines) with the
    file and line that set each key, or its nearest written parent (the last file that writes
    it wins, as in the layering), after the key."""
    marks: dict[tuple[str, ...], tuple[Path, yaml.Mark]] = {}
    for path in paths:
        marks.update({key: (path, mark) for key, mark in _key_marks(path).items()})
    lines = []
    for line in message.splitlines():
        head, sep, rest = line.partition(": ")
        if line.startswith("  - ") and sep:
            key = tuple(head[4:].split("."))
            while key and key not in marks:
                key = key[:-1]
            if key:
                path, mark = marks[key]
                line = f"{head} ({path}, line {mark.line + 1}){sep}{rest}"
        lines.append(line)
    return "\n".join(lines)


def dataset_ids(config: Mapping[str, Any]) -> list[str]:
    """Every dataset id of a validated config, in config order: each dataset's name, followed by
    its no-BOS variant ``<name>.no-bos`` where ``datasets.<name>.bos`` is ``both``
    (:mod:`sinkscope.variants`)."""
    ids = []
    for name, entry in config["datasets"].items():
        ids.append(name)
        if entry.get("bos", "keep") == "both":
            ids.append(no_bos_id(name))
    return ids


def corpus_ids(config: Mapping[str, Any]) -> list[str]:
    """The ids of the corpora of a validated config: the datasets' own names, never a no-BOS id
    (a no-BOS variant reads its dataset's corpus and token stream)."""
    return list(config["datasets"])


def id_pattern(ids: Iterable[str]) -> str:
    """A Snakemake wildcard constraint that matches exactly these ids (escaped alternatives):
    ``id_pattern(["alice", "a.b"])`` matches ``alice`` and ``a.b``, not ``aXb``."""
    return "|".join(map(re.escape, ids))


#: Keys of a model or dataset entry that change no output: left out of the rules' params, so
#: that editing them re-runs nothing (Snakemake re-runs a job whose params change).
DESCRIPTIVE_KEYS = ("description",)
#: ``extraction`` keys that change how a file is written, not what it holds (the device, the
#: batch and whether writes overlap the forward: the same tensors): not in the extraction's
#: params, read by the job from the config.
EXTRACTION_RUN_KEYS = ("device", "batch_size", "overlap_writes")


def model_entry(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """``models.<model>`` without :data:`DESCRIPTIVE_KEYS`: the param of the rules that read it."""
    return {k: v for k, v in config["models"][model].items() if k not in DESCRIPTIVE_KEYS}


def extraction_content(config: Mapping[str, Any]) -> dict[str, Any]:
    """``extraction`` without :data:`EXTRACTION_RUN_KEYS`: what an activation file depends on."""
    return {k: v for k, v in config["extraction"].items() if k not in EXTRACTION_RUN_KEYS}


def content_settings(config: Mapping[str, Any], model: str, dataset_id: str) -> dict[str, Any]:
    """Every setting a pair's activation file depends on, by config section: ``model``
    (:func:`model_entry`: the source and its revision, the dtype, the attention kernel),
    ``dataset`` (:func:`dataset_entry`: the source, its cleaning and cut) and ``extraction``
    (:func:`extraction_content`: N, T, the seed, the storage dtypes and codecs). The extraction
    records it in the file, and every rule that reads the file compares it with its own config
    (:func:`sinkscope.extraction.h5layout.check_pair`); descriptions and how the file was
    written (device, batch size) are not in it, so editing them changes nothing."""
    return {
        "model": model_entry(config, model),
        "dataset": dataset_entry(config, dataset_id),
        "extraction": extraction_content(config),
    }


def dataset_entry(config: Mapping[str, Any], dataset_id: str) -> dict[str, Any]:
    """The config entry a dataset id cuts its sequences from (a no-BOS variant: its dataset's),
    without its ``bos`` key and :data:`DESCRIPTIVE_KEYS`: the param of rules ``prepare_corpus``
    and ``extract_activations``. A pair's BOS choice is its id (and the ``bos`` of its token
    record), so the key, which the validation fills in, leaves the params of the BOS pairs as
    they were before it existed (Snakemake re-runs a job whose params change)."""
    entry = dict(config["datasets"][source_dataset(dataset_id)])
    entry.pop("bos", None)
    for key in DESCRIPTIVE_KEYS:
        entry.pop(key, None)
    return entry


def pairs(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (model, dataset id) pair the config asks for, in config order, no-BOS variants
    (:func:`dataset_ids`) included: the pairs of every analysis of the extracted sequences."""
    return [(model, dataset) for model in config["models"] for dataset in dataset_ids(config)]


def bos_pairs(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (model, dataset) pairs with BOS (:func:`pairs` without the no-BOS variants): the pairs
    of the analyses that cut their own streams from the corpus (StreamingLLM caches, long-context
    geometry) and of the cross-pair geometry, oversmoothing and StreamingLLM summaries, whose
    pooled rows and claims are the paper's, about BOS."""
    return [(model, dataset) for model in config["models"] for dataset in config["datasets"]]
