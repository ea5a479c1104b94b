"""Shared fixtures: the repository root, the default config, and a download cache shared by tests."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sinkscope.extract import ExtractionSettings, extract_activations
from sinkscope.io import write_json
from sinkscope.models import load_model, prepare_model
from sinkscope.tokens import token_ids_sha256

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture()
def default_config() -> dict:
    return copy.deepcopy(yaml.safe_load((REPO / "config.yaml").read_text()))


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
    device="cpu",
)


def tiny_config(family: str):
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig

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
    return GPT2Config(vocab_size=97, n_embd=48, n_layer=2, n_head=4, n_positions=64, bos_token_id=0)


@pytest.fixture(params=["llama", "gemma3", "gpt2"])
def extracted(request, tmp_path: Path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(request.param))
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
    prepare_model(request.param, entry, prepared, tmp_path / "downloads")
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 97, size=(3, 21)).astype(np.int32)
    ids[:, 0] = model.config.bos_token_id
    tokens = tmp_path / "tokens.json"
    write_json(
        {
            "model_name": request.param,
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
    return request.param, out, reference, ids
