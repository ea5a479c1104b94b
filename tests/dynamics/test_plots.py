"""``sinkscope.dynamics.plots``: the label both classification figures give a setup."""

from __future__ import annotations

import polars as pl

from sinkscope.dynamics.plots import _setup_label


def test_setup_label_names_vocabulary_mlp_and_layernorm() -> None:
    frame = pl.DataFrame(
        {"vocab_size": [41, 7], "use_mlp": [False, True], "use_layernorm": [True, False]}
    )
    labels = frame.select(setup=_setup_label())["setup"].to_list()
    assert labels == ["|V|=41 mlp=0 ln=1", "|V|=7 mlp=1 ln=0"]
