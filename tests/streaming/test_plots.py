"""The StreamingLLM figures (:mod:`sinkscope.streaming.plots`)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from sinkscope.streaming.names import FIGURES, POLICY_FIGURES, RECOMPUTE_FIGURES, SUMMARY_FIGURES
from sinkscope.streaming.summary import summarize
from tests.streaming.tiny import SMALL_PARAMS, pair_tables, recompute_tables, streams


def test_figures(tmp_path):
    from PIL import Image

    from sinkscope.streaming import plots as sp

    params = {**SMALL_PARAMS, "sink_counts": [1, 2, 4], "neutral_counts": [1, 2]}
    tables, _, model = pair_tables("llama", params)
    tables["recompute"] = recompute_tables(tables, model, streams(model))[0]
    names = (*POLICY_FIGURES, *RECOMPUTE_FIGURES)
    figures = sp.figures(names, tables, "tiny")
    assert tuple(figures) == names
    written = {name: tmp_path / f"{name}.png" for name in names}
    for name, draw in figures.items():
        draw(written[name])
    mass = pl.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "layer": np.repeat(np.arange(3), 4),
            "key_position": np.tile(np.arange(4), 3),
            "mass": np.full(12, 0.1),
            "cumulative_mass": np.tile(np.arange(1, 5) * 0.1, 3),
            "n_queries": 10,
        }
    )
    sp.plot_first_position_mass(mass, tmp_path / "mass.png", "tiny")
    heads = pl.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "layer": [0, 1, 2],
            "head": [0, 0, 0],
            "is_sink": [True, False, True],
            "bos_mass": [0.9, 0.1, 0.8],
        }
    )
    sp.plot_summary(summarize([tables], heads), tmp_path / "summary.png", "tiny")
    for path in [*written.values(), tmp_path / "mass.png", tmp_path / "summary.png"]:
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] > 300


def test_every_figure_of_the_stage_has_a_drawing_function():
    from sinkscope.streaming import plots as sp

    assert set(sp.PLOTS) == {*FIGURES, *SUMMARY_FIGURES}


def test_the_labels_are_the_claims_number_formats() -> None:
    """The summary figure's bar labels and the recompute figure's annotations are the numbers of
    the claims ``streaming.eviction_hurts`` and ``streaming.sinks_restore``: one format each."""
    from sinkscope.claims.checks import streaming as SC
    from sinkscope.streaming import plots as sp
    from sinkscope.streaming.summary import eviction_label, recovered_label

    assert sp.eviction_label is eviction_label and sp.recovered_label is recovered_label
    assert eviction_label(math.log(2.314)) == "x2.31"
    assert eviction_label(None) == eviction_label(float("nan")) == ""
    assert recovered_label(0.9504) == "95.0%"
    assert recovered_label(None) == recovered_label(float("nan")) == ""
    sink_heads = pl.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "window": [64],
            "window_log_ppl_ratio": math.log(2.314),
            "window_excess_by_position": [[math.log(2.314)] * 320],
        }
    )
    (row,) = SC.check_eviction_raises_perplexity(sink_heads, 2.0)
    assert row["measured"] == "perplexity x2.31 vs dense"
    assert row["reason"].endswith("multiplies perplexity by 2.31")


def test_figure_titles_count_streams_in_words() -> None:
    """One stream is "1 stream", not "1 streams" (the short run's scale)."""
    from sinkscope.streaming.plots import _n_streams

    for n, words in ((1, "1 stream x"), (2, "2 streams x")):
        settings = pl.DataFrame({"n_streams": [n], "stream_length": [256]})
        assert _n_streams({"settings": settings}) == f" ({words} 256 tokens)"
