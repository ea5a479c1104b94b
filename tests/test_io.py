"""Atomic writes: the temporary files of killed writers are removed by the next write."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from sinkscope.io import (
    atomic_path,
    format_bytes,
    partial_path,
    partial_siblings,
    remove_stale_partials,
)


def test_stale_partials_of_the_same_output_are_removed_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    final = tmp_path / "alice.h5"
    stale_file = tmp_path / ".alice.h5.partial-4242"
    stale_file.write_bytes(b"x" * 2_500_000)
    stale_folder = tmp_path / ".alice.h5.partial-77"  # prepare_model stages a folder this way
    (stale_folder / "sub").mkdir(parents=True)
    (stale_folder / "sub" / "weights").write_bytes(b"x" * 1_000_000)
    others = [  # not temporary files of alice.h5: kept
        tmp_path / ".alice.h5x.partial-1",
        tmp_path / ".alice.h5.partial-1x",
        tmp_path / "alice.h5.partial-1",
        tmp_path / ".bob.h5.partial-1",
    ]
    for other in others:
        other.write_text("keep")
    final.write_text("the finished file")
    assert partial_siblings(final) == [stale_file, stale_folder]
    with caplog.at_level(logging.INFO, logger="sinkscope.io"):
        assert remove_stale_partials(final) == [stale_file, stale_folder]
    assert not stale_file.exists() and not stale_folder.exists()
    assert all(other.exists() for other in others) and final.read_text() == "the finished file"
    assert f"removed {stale_file} (2.5 MB), left by an earlier write of {final}" in caplog.text
    assert f"removed {stale_folder} (1.0 MB)" in caplog.text
    assert remove_stale_partials(tmp_path / "missing" / "x.h5") == []  # no folder: nothing to do


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (0, 999, 2_500_000, 31_400_000_000)] == [
        "0 bytes",
        "999 bytes",
        "2.5 MB",
        "31.4 GB",
    ]


def test_atomic_path_removes_stale_partials_unless_told_not_to(tmp_path: Path) -> None:
    final = tmp_path / "table.parquet"
    stale = tmp_path / ".table.parquet.partial-4242"
    stale.write_text("left by a killed job")
    with atomic_path(final, remove_stale=False) as tmp:  # a shared cache: another writer's file
        assert tmp == partial_path(final) and tmp.name == f".table.parquet.partial-{os.getpid()}"
        tmp.write_text("one")
    assert stale.exists() and final.read_text() == "one"
    with atomic_path(final) as tmp:
        assert not stale.exists()
        tmp.write_text("two")
    assert final.read_text() == "two" and partial_siblings(final) == []


def test_write_table_writes_a_list_column_to_csv_as_its_joined_values(tmp_path: Path) -> None:
    import polars as pl

    from sinkscope.io import write_table

    frame = pl.DataFrame(
        {"pair": ["a", "b"], "nll_by_query": [[0.5, 1.25], [2.0]]},
        schema={"pair": pl.String, "nll_by_query": pl.List(pl.Float64)},
    )
    write_table(frame, tmp_path / "t.parquet")
    assert pl.read_parquet(tmp_path / "t.parquet").equals(frame)
    assert (tmp_path / "t.csv").read_text() == "pair,nll_by_query\na,0.5 1.25\nb,2.0\n"
