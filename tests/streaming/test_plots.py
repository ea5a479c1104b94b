"""The StreamingLLM figures (:mod:`sinkscope.streaming.plots`)."""

from __future__ import annotations

import numpy as np
import polars as pl

from sinkscope.streaming.summary import summarize
from tests.streaming.tiny import SMALL_PARAMS, pair_tables, recompute_tables, streams


def test_figures(tmp_path):
    from PIL import Image

    from sinkscope.streaming import plots as sp

    params = {**SMALL_PARAMS, "sink_counts": [1, 2, 4], "neutral_counts": [1, 2]}
    tables, _, model = pair_tables("llama", params)
    tables["recompute"] = recompute_tables(tables, model, streams(model))[0]
    written = sp.plot_all(tables, tmp_path, "tiny")
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
