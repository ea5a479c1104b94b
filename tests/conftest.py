"""Shared fixtures: the repository root, the default config, and a download cache shared by tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sinkscope.extraction.extract import extract_activations
from sinkscope.extraction.settings import ExtractionSettings
from sinkscope.io import write_json
from sinkscope.prepare.models import load_model, prepare_model
from sinkscope.prepare.tokens import token_ids_sha256, tokenize_corpus

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture()
def default_config() -> dict:
    """config.yaml as the workflow sees it: validated, the schema's defaults filled in (the file
    itself states only what differs from them)."""
    from sinkscope.config import validate_config

    return validate_config(yaml.safe_load((REPO / "config.yaml").read_text()))


@pytest.fixture(scope="session")
def download_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Registry archives are fetched once per test session (or reused from SINKSCOPE_TEST_DOWNLOADS)."""
    shared = os.environ.get("SINKSCOPE_TEST_DOWNLOADS")
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        return Path(shared)
    return tmp_path_factory.mktemp("downloads")


# --- tiny randomly initialised models of each supported family, extracted to HDF5

SETTINGS = ExtractionSettings(
    batch_size=2,
    storage_dtypes={
        "attention": "float32",
        "residual": "float32",
        "activations": "float32",
        "weights": "float32",
    },
    compression_level=1,
    uncompressed=(),  # every dataset through the codec: the tiny files exercise its round trip
    device="cpu",
)


def tiny_config(family: str):
    from transformers import Gemma3TextConfig, GPT2Config, GptOssConfig, LlamaConfig

    if family == "llama":
        return LlamaConfig(
            vocab_size=97,
            hidden_size=48,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=12,
            max_position_embeddings=64,
            bos_token_id=1,
        )
    if family == "gemma3":
        return Gemma3TextConfig(
            vocab_size=97,
            hidden_size=48,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=64,
            sliding_window=8,
            bos_token_id=2,
        )
    if family == "gpt_oss":  # learned per-head sinks; alternating sliding-window and full layers
        return GptOssConfig(
            vocab_size=97,
            hidden_size=48,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=12,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            max_position_embeddings=64,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            bos_token_id=1,
        )
    return GPT2Config(vocab_size=97, n_embd=48, n_layer=2, n_head=4, n_positions=64, bos_token_id=0)


@pytest.fixture(params=["llama", "gemma3", "gpt2"])
def extracted(request, tmp_path: Path):
    return extract_tiny(request.param, tmp_path)


@pytest.fixture()
def extracted_llama(tmp_path: Path):
    """:func:`extract_tiny` of the Llama family alone, for tests that one family suffices for."""
    return extract_tiny("llama", tmp_path)


@pytest.fixture()
def extracted_gemma3(tmp_path: Path):
    """:func:`extract_tiny` of Gemma 3 alone (the one family with a post-attention norm)."""
    return extract_tiny("gemma3", tmp_path)


def extract_tiny(family: str, tmp_path: Path) -> tuple[str, Path, torch.nn.Module, np.ndarray]:
    """A tiny random model of ``family`` (:func:`tiny_config`), saved, prepared and extracted in
    ``tmp_path`` (3 sequences of 21 positions, float32): ``(family, file, reloaded model, ids)``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(family))
    with torch.no_grad():  # break the symmetric init so that norms and biases matter
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    weights = tmp_path / "weights"
    model.save_pretrained(weights)
    entry = {
        "source": {"kind": "local", "path": str(weights)},
        "dtype": "float32",
        "attn_implementation": "eager",
    }
    prepared = tmp_path / "prepared"
    prepare_model(family, entry, prepared, tmp_path / "downloads")
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 97, size=(3, 21)).astype(np.int32)
    ids[:, 0] = model.config.bos_token_id
    tokens = tmp_path / "tokens.json"
    write_json(
        {
            "model_name": family,
            "dataset_name": "random",
            "seed": 0,
            "bos_token_id": int(ids[0, 0]),
            "dataset_sha256": "0" * 64,
            "token_ids_sha256": token_ids_sha256(ids),
            "token_ids": ids.tolist(),
        },
        tokens,
    )
    out = tmp_path / "act.h5"
    extract_activations(prepared, tokens, out, entry, SETTINGS, "cfg", progress=False)
    reference = load_model(prepared, "float32", "eager")
    return family, out, reference, ids


def token_stream(prepared: Path, documents: Path, out: Path) -> tuple[Path, Path]:
    """Tokenize a prepared corpus (``documents.parquet``, its ``documents.json`` beside it) with a
    prepared model as rule tokenize_corpus does; returns ``(stream file, corpus provenance)``."""
    provenance = documents.with_suffix(".json")
    tokenize_corpus(documents, provenance, prepared, prepared.name, documents.parent.name, out)
    return out, provenance


# --- the real Snakemake DAG on the tiny config (one real model, one real corpus, 2 x 32 tokens)


def pair_sets(config: dict, results: str | Path = "results") -> dict[str, list[tuple[str, str]]]:
    """The pair sets of :data:`sinkscope.outputs.PAIR_SETS` for ``config``, as the workflow
    (``workflow/rules/common.smk``) builds them."""
    from sinkscope.config import bos_pairs, pairs
    from sinkscope.streaming.applicability import cache_pairs

    return {
        "all": pairs(config),
        "bos": bos_pairs(config),
        "cache": cache_pairs(config, bos_pairs(config), results),
    }


#: One pair with BOS, in every pair set.
ONE_PAIR = {"all": [("m", "d")], "bos": [("m", "d")], "cache": [("m", "d")]}


def snakemake_command(workdir: Path, *args: str, snakefile: Path = REPO / "Snakefile") -> list[str]:
    """``python -m snakemake`` on this repository's Snakefile (or ``snakefile``), run in
    ``workdir``."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(snakefile),
        "-d",
        str(workdir),
        *args,
    ]


def snakemake(
    workdir: Path, *args: str, download_dir: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    command = snakemake_command(workdir, "--cores", "2", *args)
    if download_dir is not None:
        command += ["--config", f"download_dir={download_dir}"]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {args} failed:\n{result.stdout}\n{result.stderr}")
    return result


def job_counts(stdout: str) -> dict[str, int]:
    """The 'Job stats' table of a Snakemake (dry) run as {rule: count}."""
    lines = stdout.splitlines()
    start = lines.index("Job stats:") + 3  # header, rule line, dashes
    counts = {}
    for line in lines[start:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, download_dir: Path) -> Path:
    workdir = tmp_path_factory.mktemp("tiny")
    snakemake(workdir, "--configfile", str(TINY), download_dir=download_dir)
    return workdir
