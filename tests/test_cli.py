"""``sinkscope inspect`` on a real activation file and on bad files."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from sinkscope.cli import main
from sinkscope.extraction import h5layout


def test_inspect_prints_provenance_and_datasets(extracted, capsys) -> None:
    _, path, _, _ = extracted
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    for spec in h5layout.DATASETS:
        assert spec.name in out
    recomputed = out.split("Recomputed on reading (not stored):")[1]
    for derived in h5layout.DERIVED:
        assert derived.name in recomputed and f"{derived.reader}()" in recomputed
    assert "input norm: input_norm=" in recomputed
    assert "attn_implementation: eager" in out and "shuffle+zstd(1)" in out and "MiB" in out


def test_inspect_attention_map(extracted, capsys) -> None:
    _, path, _, _ = extracted
    assert main(["inspect", str(path), "--attention", "1", "0", "2"]) == 0
    out = capsys.readouterr().out
    with h5layout.open_activations(path) as f:
        bos = f["attention/probs"][1, 0, 2, 1:, 0].mean()
    assert f"bos_mass={bos:.4f}" in out
    with pytest.raises(SystemExit, match="head 99 is out of range"):
        main(["inspect", str(path), "--attention", "1", "0", "99"])


def test_inspect_rejects_foreign_and_missing_files(tmp_path: Path, capsys) -> None:
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.zeros(2)
    assert main(["inspect", str(foreign)]) == 2
    assert "not a sinkscope activation file" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "nope.h5")]) == 2


def test_inspect_advises_deleting_only_a_damaged_activation_file(tmp_path: Path, capsys) -> None:
    """A folder or a file that is not HDF5 gets one line and no `rm` (it may be the claims
    table); an empty file where the extraction writes is a damaged activation file."""
    (tmp_path / "claims.md").write_text("# claims\n")
    for path in (tmp_path, tmp_path / "claims.md"):
        assert main(["inspect", str(path)]) == 2
        err = capsys.readouterr().err
        assert "rm " not in err and "Traceback" not in err and len(err.splitlines()) == 1, err
        assert "results/activations/<model>/<dataset>.h5" in err
    empty = tmp_path / "results" / "activations" / "m" / "d.h5"
    empty.parent.mkdir(parents=True)
    empty.touch()
    assert main(["inspect", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "not an HDF5 file" in err and f"rm {empty}" in err


def test_layout(capsys) -> None:
    assert main(["inspect", "--layout"]) == 0
    out = capsys.readouterr().out
    assert "attention/probs" in out and f"schema version {h5layout.SCHEMA_VERSION}" in out
    recomputed = out.split("Recomputed on reading (not stored):")[1]
    assert "attention/Z" in recomputed and "read_Z()" in recomputed
    assert "attention/values" in recomputed and "read_values()" in recomputed
    assert "input_norm_cast" in out


def test_inspect_of_a_file_without_attention_says_so_in_one_sentence(
    extracted, tmp_path: Path, capsys
) -> None:
    _, path, _, _ = extracted
    damaged = tmp_path / "no_probs.h5"
    shutil.copy(path, damaged)
    with h5py.File(damaged, "a") as f:
        del f["attention/probs"]
    assert main(["inspect", str(damaged)]) == 1
    captured = capsys.readouterr()
    assert "attention/probs: MISSING" in captured.out
    assert f"{damaged} lacks attention/probs of the layout" in captured.err
    assert main(["inspect", str(damaged), "--attention", "0", "0", "0"]) == 2
    err = capsys.readouterr().err
    assert f"{damaged}: has no attention/probs dataset, so --attention has nothing" in err
    assert "Traceback" not in err and "KeyError" not in err


def test_inspect_into_a_closed_pipe_ends_without_a_traceback() -> None:
    """`sinkscope inspect --layout | head -1`: the reader is gone before the first write."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sinkscope.cli", "inspect", "--layout"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # before the command has imported its modules (about a second)
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE, stderr
    assert stderr == ""


def test_outputs_lists_every_registered_rule_with_its_files(capsys) -> None:
    """``sinkscope outputs``: one row per rule of the registry of outputs, with the folder the
    workflow writes to and the claims keys it feeds."""
    from sinkscope.outputs import REGISTRY
    from sinkscope.paths import Paths

    assert main(["outputs"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(REGISTRY)
    (streaming,) = [row for row in rows if row.startswith("| `summarize_streaming`")]
    assert "summary (cache pairs)" in streaming and "streaming_sink_heads" in streaming
    (heads,) = [row for row in rows if row.startswith("| `classify_heads`")]
    folder = Paths().heads_table("per_head").rsplit("/", 1)[0]
    assert f"`{folder}/`" in heads and "heads_per_head" in heads
