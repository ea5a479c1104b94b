"""Shared fixtures: the repository root, the default config, and a download cache shared by tests."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

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
