"""Head-class figures: each function writes a non-empty, deterministic PNG from a small synthetic
table, and the built figures say what a reader needs (counts, flags, every layer and head)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from matplotlib.figure import Figure

from sinkscope.heads.classify import HeadClassThresholds, with_classes
from sinkscope.heads.names import PER_HEAD_COLUMNS
from sinkscope.heads.plots import (
    class_map_figure,
    mass_heatmaps_figure,
    plot_class_map,
    plot_mass_heatmaps,
    plot_summary_bars,
    summary_bars_figure,
)
from sinkscope.heads.summary import pool_datasets, summarize
from sinkscope.labels import HEAD_CLASSES, SINK
from sinkscope.plotting import CLASS_LEGEND_NAMES, figure_problems
from tests.test_plotting import PNG_SIGNATURE


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


# --- readability: what a reader needs, checked on the built figures ---------------


def planted_per_head(layers: int, heads: int, seed: int = 0) -> pl.DataFrame:
    """A per-head table with every class present, flags and labels as the pipeline computes them."""
    table = synthetic_per_head("m", "d", seed, layers=layers, heads=heads)
    # one planted head per exclusive class, plus a sink+previous head that is also is_sink and
    # one diagonal head that is also is_sink, so the two sink counts differ
    masses = {
        (0, 0): (0.9, 0.05, 0.0),  # sink
        (0, 1): (0.05, 0.9, 0.0),  # diagonal
        (1, 0): (0.5, 0.0, 0.3),  # sink+previous, is_sink
        (1, 1): (0.0, 0.0, 0.1),  # other
        (2, 0): (0.42, 0.55, 0.0),  # diagonal, is_sink
    }
    bos, diag, sub = (
        table[c].to_numpy().copy() for c in ("bos_mass", "diagonal_mass", "subdiagonal_mass")
    )
    for (layer, head), (b, g, s) in masses.items():
        index = layer * heads + head
        bos[index], diag[index], sub[index] = b, g, s
    frame = table.with_columns(
        bos_mass=pl.Series(bos), diagonal_mass=pl.Series(diag), subdiagonal_mass=pl.Series(sub)
    )
    return with_classes(frame, HeadClassThresholds()).select(PER_HEAD_COLUMNS)


def legend_texts(fig: Figure) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def test_class_map_legend_counts_equal_the_table() -> None:
    table = planted_per_head(layers=30, heads=9)
    fig = class_map_figure(table, "m on d", HeadClassThresholds())
    texts = legend_texts(fig)
    counts = dict(table["head_class"].value_counts().iter_rows())
    for name in HEAD_CLASSES:
        [entry] = [t for t in texts if t.startswith(CLASS_LEGEND_NAMES[name] + ":")]
        assert int(entry.rsplit(":", 1)[1]) == counts.get(name, 0), entry
    # the exclusive "sink" label is named as such, and the is_sink total is given and split
    assert CLASS_LEGEND_NAMES[SINK] == "sink (not sink+previous)"
    [note] = [t for t in texts if "is_sink" in t]
    n_sink = int(table["is_sink"].sum())
    assert n_sink != counts[SINK]  # the planted table tells the two counts apart
    assert "BOS mass >= 0.4" in note
    total, split = re.search(r"(\d+) heads = (.*)$", note).groups()  # type: ignore[union-attr]
    assert int(total) == n_sink
    parts = {name: int(n) for n, name in re.findall(r"(\d+) ([a-z+]+)", split)}
    flagged = dict(table.filter(pl.col("is_sink"))["head_class"].value_counts().iter_rows())
    assert parts == flagged and sum(parts.values()) == n_sink


@pytest.mark.parametrize("shape", [(4, 3), (18, 4), (30, 9), (32, 32), (48, 25)])
def test_grid_figures_label_every_layer_and_head_and_are_readable(shape: tuple[int, int]) -> None:
    layers, heads = shape
    table = planted_per_head(layers, heads)
    for fig in (mass_heatmaps_figure(table, "m on d"), class_map_figure(table, "m on d")):
        grid_axes = [ax for ax in fig.axes if ax.get_xlabel() == "head"]
        assert grid_axes
        for ax in grid_axes:
            assert [t.get_text() for t in ax.get_yticklabels()] == [str(i) for i in range(layers)]
            assert [t.get_text() for t in ax.get_xticklabels()] == [str(i) for i in range(heads)]
        assert figure_problems(fig) == []


def test_summary_bars_state_the_flags_and_wrap(tables: list[pl.DataFrame]) -> None:
    fig = summary_bars_figure(summarize(tables), thresholds=HeadClassThresholds())
    texts = legend_texts(fig)
    assert any(t.startswith("sink: is_sink, BOS mass >= 0.4") for t in texts)
    assert figure_problems(fig) == []
    # the paper's grid (6 models x 4 datasets + pooled) stays within the size bound, in rows
    many = [
        synthetic_per_head(f"model-{m}-7b", f"dataset-{d}", 10 * m + d)
        for m in range(6)
        for d in range(4)
    ]
    fig = summary_bars_figure(summarize(many))
    facets = [ax for ax in fig.axes if ax.get_visible()]
    assert len(facets) == 5
    assert len({ax.get_position().y0 for ax in facets}) > 1  # wrapped into rows
    assert figure_problems(fig) == []
