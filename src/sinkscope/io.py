"""Small I/O helpers shared by every stage: atomic writes and content hashes.

Every output of the workflow is written to a temporary name in the same folder and renamed on
success, so that a killed job never leaves a file that looks complete (Snakemake also deletes
outputs of failed jobs, but a SIGKILL on a cluster node gives it no chance to).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``final``; rename it to ``final`` only if the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.partial-{os.getpid()}")
    if tmp.exists():
        tmp.unlink()
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def sha256_file(path: str | os.PathLike[str], block_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(block_size):
            digest.update(block)
    return digest.hexdigest()


def sha256_json(value: Any) -> str:
    """Hex sha256 of a JSON-serialisable value in canonical form (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def write_json(value: Any, path: str | os.PathLike[str]) -> None:
    """Write ``value`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    return json.loads(Path(path).read_text())


def write_table(frame: pl.DataFrame, parquet_path: str | os.PathLike[str]) -> None:
    """Write ``frame`` as parquet and, next to it, the same table as CSV (both atomically).

    The CSV gets the parquet path's stem with suffix ``.csv``.
    """
    parquet_path = Path(parquet_path)
    with atomic_path(parquet_path) as tmp:
        frame.write_parquet(tmp, statistics=False)
    with atomic_path(parquet_path.with_suffix(".csv")) as tmp:
        frame.write_csv(tmp, float_precision=6)
