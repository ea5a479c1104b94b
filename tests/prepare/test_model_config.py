"""prepare.model_config: the torch-free config.json reader agrees with model_shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sinkscope.prepare.model_config import (
    POSITION_LIMIT_ATTRIBUTES,
    ModelConfigError,
    local_position_limit,
)
from sinkscope.prepare.models import model_shape
from tests.conftest import tiny_config


@pytest.mark.parametrize(
    ("family", "attribute"),
    [
        ("llama", "max_position_embeddings"),
        ("gemma3", "max_position_embeddings"),
        ("gpt2", "n_positions"),
    ],
)
def test_local_position_limit_is_model_shapes(family: str, attribute: str, tmp_path: Path) -> None:
    config = tiny_config(family)
    config.save_pretrained(tmp_path)
    assert attribute in POSITION_LIMIT_ATTRIBUTES
    limit = local_position_limit({"kind": "local", "path": str(tmp_path)})
    assert limit == (attribute, model_shape(config).max_positions) == (attribute, 64)


def test_local_position_limit_reads_the_text_config_and_skips_what_does_not_say(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"text_config": {"max_position_embeddings": True, "n_positions": 32}})
    )
    assert local_position_limit({"kind": "local", "path": str(tmp_path)}) == ("n_positions", 32)
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 0}))
    assert local_position_limit({"kind": "local", "path": str(tmp_path)}) is None
    (tmp_path / "config.json").write_text("not json")  # named, never skipped silently
    with pytest.raises(
        ModelConfigError,
        match=r"models\.m\.source\.path: .*config\.json is not valid JSON \(Expecting value at line 1 column 1\)",
    ):
        local_position_limit({"kind": "local", "path": str(tmp_path)}, "models.m.source.path")
    assert local_position_limit({"kind": "local", "path": str(tmp_path / "missing")}) is None
    assert local_position_limit({"kind": "hub", "id": "x/y", "revision": "main"}) is None


def test_the_config_check_does_not_load_torch() -> None:
    code = "import sys, sinkscope.config; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False", out.stderr
