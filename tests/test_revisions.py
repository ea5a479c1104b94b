"""`sinkscope pin-revisions`: hub revisions resolved through a stub of the hub's HTTP API."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import unquote

import pytest
import yaml

from sinkscope.config import validate_config
from sinkscope.revisions import find_hub_revisions, pin_text
from tests.conftest import REPO

#: what the stub hub holds: (repo type, repo id, revision) -> commit sha
HUB = {
    ("models", "openai-community/gpt2", "main"): "607a30d783dfa663caf39e06633721c8d4cfcd7e",
    ("models", "org/model-b", "v1.0"): "1111111111111111111111111111111111111111",
    ("datasets", "roneneldan/TinyStories", "main"): "f54c09fd23315a6f9c86f9dc80f725de7d8f9c64",
}

CONFIG = """\
# a comment that must survive
models:
  gpt2:
    source: {kind: hub, id: openai-community/gpt2, revision: main}   # trailing comment
  model-b:
    dtype: bfloat16
    source:
      kind: hub
      id: org/model-b
      revision: 'v1.0'
  pinned:
    source: {kind: hub, id: org/pinned, revision: "2222222222222222222222222222222222222222"}
datasets:
  tinystories:
    source: {kind: hub, path: roneneldan/TinyStories, split: validation, field: text,
             revision: main}
"""


class _StubHub(http.server.BaseHTTPRequestHandler):
    """Answers GET /api/{models,datasets}/{repo}/revision/{rev} as the hub does (id, sha)."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        parts = unquote(self.path.split("?")[0]).strip("/").split("/")
        # api / {models|datasets} / owner / name / revision / rev
        if len(parts) == 6 and parts[0] == "api" and parts[4] == "revision":
            repo_type, repo_id, revision = parts[1], f"{parts[2]}/{parts[3]}", parts[5]
            sha = HUB.get((repo_type, repo_id, revision))
            if sha:
                body = json.dumps({"id": repo_id, "_id": "x", "sha": sha, "private": False})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())
                return
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", "RepoNotFound")
        self.end_headers()
        self.wfile.write(b'{"error": "Repository not found"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub_hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StubHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _StubHub.requests = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _run(args: list[str], endpoint: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run(
        [sys.executable, "-m", "sinkscope.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
        timeout=120,
    )


def test_pin_revisions_writes_the_hub_shas_and_keeps_the_rest_of_the_file(
    stub_hub: str, tmp_path: Path
) -> None:
    config = tmp_path / "hub.yaml"
    config.write_text(CONFIG)
    check = _run(["pin-revisions", str(config), "--check"], stub_hub, tmp_path / "hf")
    assert check.returncode == 1
    assert "models.gpt2.source.revision = 'main' is not a commit sha" in check.stdout
    assert "pinned" not in check.stdout  # already a sha

    result = _run(["pin-revisions", str(config)], stub_hub, tmp_path / "hf")
    assert result.returncode == 0, result.stderr
    assert (
        "models.gpt2.source.revision: openai-community/gpt2@main -> "
        "607a30d783dfa663caf39e06633721c8d4cfcd7e" in result.stdout
    )
    pinned = yaml.safe_load(config.read_text())
    assert (
        pinned["models"]["gpt2"]["source"]["revision"]
        == HUB[("models", "openai-community/gpt2", "main")]
    )
    assert pinned["models"]["model-b"]["source"]["revision"] == "1" * 40
    assert pinned["models"]["pinned"]["source"]["revision"] == "2" * 40
    assert (
        pinned["datasets"]["tinystories"]["source"]["revision"]
        == HUB[("datasets", "roneneldan/TinyStories", "main")]
    )
    text = config.read_text()
    assert text.startswith("# a comment that must survive\n") and "# trailing comment" in text
    # exactly the three revision scalars changed, line by line
    changed = [
        (a, b) for a, b in zip(CONFIG.splitlines(), text.splitlines(), strict=True) if a != b
    ]
    assert len(changed) == 3 and all("revision" in a for a, _ in changed)
    # the model repos went to /api/models, the dataset to /api/datasets; the sha was not asked for
    assert any(
        r.startswith("/api/datasets/roneneldan/TinyStories/revision/main")
        for r in _StubHub.requests
    )
    assert not any("org/pinned" in r for r in _StubHub.requests)
    assert (
        _run(["pin-revisions", str(config), "--check"], stub_hub, tmp_path / "hf").returncode == 0
    )


def test_pin_revisions_changes_nothing_when_one_revision_does_not_resolve(
    stub_hub: str, tmp_path: Path
) -> None:
    config = tmp_path / "hub.yaml"
    broken = CONFIG.replace("org/model-b", "org/no-such-model")
    config.write_text(broken)
    result = _run(["pin-revisions", str(config)], stub_hub, tmp_path / "hf")
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message.startswith("sinkscope pin-revisions: models.model-b.source.revision: could not")
    assert "'org/no-such-model'" in message and "needs hub access" in message
    assert "Traceback" not in result.stderr
    assert config.read_text() == broken  # nothing written, not even the revisions that resolved
    assert not list(tmp_path.glob(".hub.yaml.partial-*"))


def test_pin_revisions_without_a_hub_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "hub.yaml"
    config.write_text(CONFIG)
    result = _run(["pin-revisions", str(config)], "http://127.0.0.1:9", tmp_path / "hf")
    assert result.returncode == 2
    assert "models.gpt2.source.revision: could not resolve model 'openai-community/gpt2'" in (
        result.stderr
    )
    assert config.read_text() == CONFIG


def test_paper_config_is_pinned_and_valid() -> None:
    """config/paper.yaml carries commit shas, so that two runs read the same weights; the one
    exception (no public record of its Parquet branch's commit) is named in the file."""
    paper = REPO / "config" / "paper.yaml"
    entries = find_hub_revisions(paper.read_text(), str(paper))
    assert len(entries) == 11
    open_ = {e.key: e.revision for e in entries if not e.pinned}
    assert open_ == {"datasets.tinyshakespeare.source.revision": "refs/convert/parquet"}
    assert "tiny_shakespeare\n# is the exception" in paper.read_text()
    validate_config(yaml.safe_load(paper.read_text()))


def test_pin_text_quotes_an_all_digit_sha() -> None:
    entries = find_hub_revisions(CONFIG)
    sha = "0123456789" * 4
    text = pin_text(CONFIG, [(entries[0], sha)])
    assert yaml.safe_load(text)["models"]["gpt2"]["source"]["revision"] == sha
