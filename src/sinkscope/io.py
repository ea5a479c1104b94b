"""Small I/O helpers shared by every stage: atomic writes and content hashes.

Every output of the workflow is written to a temporary name in the same folder and renamed on
success, so that a killed job never leaves a file that looks complete (Snakemake also deletes
outputs of failed jobs, but a SIGKILL on a cluster node gives it no chance to). The temporary name
is :func:`partial_path`, ``.{name}.partial-{pid}``; a killed writer leaves it behind, and the next
write of the same output removes it (:func:`remove_stale_partials`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

log = logging.getLogger(__name__)

#: The temporary name of an output (file or folder) while it is written: ``.{name}.partial-{pid}``.
PARTIAL_NAME = ".{name}.partial-{pid}"


def partial_path(final: str | os.PathLike[str]) -> Path:
    """The temporary path of this process for ``final``: :data:`PARTIAL_NAME` in its folder."""
    final = Path(final)
    return final.with_name(PARTIAL_NAME.format(name=final.name, pid=os.getpid()))


def partial_siblings(final: str | os.PathLike[str]) -> list[Path]:
    """The temporary paths of ``final`` of any process (files or folders) that exist now."""
    final = Path(final)
    pattern = re.compile(re.escape(PARTIAL_NAME.format(name=final.name, pid="")) + r"\d+")
    try:
        return sorted(path for path in final.parent.iterdir() if pattern.fullmatch(path.name))
    except FileNotFoundError:
        return []


def _disk_size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def format_bytes(size: int) -> str:
    """``size`` for people: ``"512 bytes"``, ``"2.5 MB"``, ``"31.4 GB"`` (powers of 1000)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def remove_stale_partials(final: str | os.PathLike[str]) -> list[Path]:
    """Delete every temporary path of ``final`` (:func:`partial_siblings`, files or folders) and log
    each with its size; return them.

    They are what killed writers of ``final`` left behind (``kill -9``, a node lost or out of
    memory: the job had no chance to clean up). Call it when this process starts to write
    ``final`` and is its only writer: Snakemake runs at most one job per output at a time, so for
    an output of a job every such path is stale, whichever process or host made it (a check of
    process ids would be host-local, and SLURM jobs of one output may run on different nodes of a
    shared file system). Do not call it for a file that independent runs may write at the same
    time (a download cache shared by several working folders).
    """
    removed = []
    for path in partial_siblings(final):
        try:
            size = _disk_size(path)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:  # removed meanwhile
            continue
        log.info(
            "removed %s (%s), left by an earlier write of %s that did not finish",
            path,
            format_bytes(size),
            final,
        )
        removed.append(path)
    return removed


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str], *, remove_stale: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``final``; rename it to ``final`` only if the block succeeds.

    First the temporary files that killed writers of ``final`` left behind are deleted
    (:func:`remove_stale_partials`); pass ``remove_stale=False`` for a file that independent runs
    may write at the same time (a shared download cache).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if remove_stale:
        remove_stale_partials(final)
    tmp = partial_path(final)
    if tmp.exists():
        tmp.unlink()
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


class DiskFullError(OSError):
    """The disk under an output filled up while it was written (``ENOSPC``)."""


def _is_disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` or an error that caused it is the OS saying "No space left on device".
    HDF5 reports it inside another message (e.g. "Can't decrement id ref count (file write
    failed: ..., errno = 28, error message = 'No space left on device', ...)")."""
    while error is not None:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def naming_a_full_disk(final: str | os.PathLike[str], needed_bytes: int) -> Iterator[None]:
    """Turn a full disk while ``final`` is written into a :class:`DiskFullError` whose first line
    (the console's) names the folder, the bytes the file needs and the bytes free there now."""
    try:
        yield
    except Exception as error:
        if not _is_disk_full(error):
            raise
        folder = Path(final).resolve().parent
        free = shutil.disk_usage(folder).free
        raise DiskFullError(
            errno.ENOSPC,
            f"No space left on device in {folder} while writing {Path(final).name}: it needs up "
            f"to {needed_bytes / 1e9:,.2f} GB ({needed_bytes:,} bytes before compression), "
            f"{free / 1e9:,.2f} GB are free there now; free space or put results/ on a larger disk",
        ) from error


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

    The CSV gets the parquet path's stem with suffix ``.csv``. CSV holds no lists: a list column
    (e.g. the per-query NLLs of the streaming ``recompute`` table) is written there as its values
    joined by spaces.
    """
    parquet_path = Path(parquet_path)
    with atomic_path(parquet_path) as tmp:
        frame.write_parquet(tmp, statistics=False)
    lists = [name for name, dtype in frame.schema.items() if isinstance(dtype, pl.List)]
    flat = frame.with_columns(pl.col(c).cast(pl.List(pl.String)).list.join(" ") for c in lists)
    with atomic_path(parquet_path.with_suffix(".csv")) as tmp:
        flat.write_csv(tmp, float_precision=6)
