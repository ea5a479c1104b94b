"""Plots: each function writes a non-empty, deterministic PNG from a small synthetic table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sinkscope.heads import PER_HEAD_COLUMNS, pool_datasets, summarize
from sinkscope.plotting import plot_class_map, plot_mass_heatmaps, plot_summary_bars

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def synthetic_per_head(
    model: str, dataset: str, seed: int, layers: int = 4, heads: int = 3
) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    bos = rng.uniform(0.0, 1.0, size=layers * heads)
    diag = (1.0 - bos) * rng.uniform(0.0, 1.0, size=bos.size)
    sub = (1.0 - bos - diag) * rng.uniform(0.0, 1.0, size=bos.size)
    frame = pl.DataFrame(
        {
            "model": model,
            "dataset": dataset,
            "layer": np.repeat(np.arange(layers), heads),
            "head": np.tile(np.arange(heads), layers),
            "n_sequences": 5,
            "bos_mass": bos,
            "bos_mass_std": 0.01,
            "diagonal_mass": diag,
            "subdiagonal_mass": sub,
            "sink_prev_mass": bos + sub,
            "is_sink": False,
            "is_diagonal": False,
            "is_sink_prev": False,
            "head_class": "other",
        }
    ).with_columns(pl.col("layer", "head", "n_sequences").cast(pl.Int64))
    # recompute flags and labels consistently
    return pool_datasets(frame).with_columns(dataset=pl.lit(dataset)).select(PER_HEAD_COLUMNS)


@pytest.fixture
def tables() -> list[pl.DataFrame]:
    return [
        synthetic_per_head("m1", "d1", 0),
        synthetic_per_head("m1", "d2", 1),
        synthetic_per_head("m2", "d1", 2),
    ]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000
    assert b"Software" not in data
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


def test_plot_mass_heatmaps(tmp_path: Path, tables: list[pl.DataFrame]) -> None:
    out = tmp_path / "sub" / "masses.png"
    plot_mass_heatmaps(tables[0], out, "m1 on d1")
    assert_png(out)
    first = out.read_bytes()
    plot_mass_heatmaps(tables[0], out, "m1 on d1")
    assert out.read_bytes() == first  # deterministic
    # a missing (layer, head) cell is left blank, not an error
    plot_mass_heatmaps(tables[0].slice(1), tmp_path / "gap.png", "gap")
    assert_png(tmp_path / "gap.png")


def test_plot_class_map(tmp_path: Path, tables: list[pl.DataFrame]) -> None:
    out = tmp_path / "classes.png"
    plot_class_map(tables[0], out, "m1 on d1")
    assert_png(out)
    with pytest.raises(ValueError, match="several rows"):
        plot_class_map(pl.concat(tables[:2]), tmp_path / "bad.png", "two datasets")
    assert not (tmp_path / "bad.png").exists()


def test_plot_summary_bars(tmp_path: Path, tables: list[pl.DataFrame]) -> None:
    out = tmp_path / "bars.png"
    plot_summary_bars(summarize(tables), out)
    assert_png(out)
    plot_summary_bars(summarize(tables[:1]), tmp_path / "one.png", title="one model")
    assert_png(tmp_path / "one.png")
