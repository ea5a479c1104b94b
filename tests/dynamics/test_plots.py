"""``sinkscope.dynamics.plots``: the label both classification figures give a setup; the full
scale's induction grid draws readable figures."""

from __future__ import annotations

import polars as pl

from sinkscope.dynamics.plots import _setup_label, unlearned_label


def test_setup_label_names_vocabulary_mlp_and_layernorm() -> None:
    frame = pl.DataFrame(
        {"vocab_size": [41, 7], "use_mlp": [False, True], "use_layernorm": [True, False]}
    )
    labels = frame.select(setup=_setup_label())["setup"].to_list()
    assert labels == ["|V|=41 mlp=0 ln=1", "|V|=7 mlp=1 ln=0"]


def test_the_full_scale_induction_grid_draws_readable_figures(tmp_path) -> None:
    """Every induction figure of the full offline scale's grid (``induction_grid("default")``: 16
    attention functions, 3 positional encodings, 2 weight decays; tiny runs of the same specs)
    passes the readability rules that ``save_figure`` enforces: the sinks and accuracy panels
    stack by weight decay, the layer-2 patterns wrap into rows (3,060 and 3,696 pixels wide in
    one row, refused, before)."""
    from sinkscope.dynamics.grids import induction_grid
    from sinkscope.dynamics.induction import run_induction
    from sinkscope.dynamics.plots import figures
    from sinkscope.dynamics.summary import summarize_induction

    tiny = {"hidden": 16, "ffn": 32, "n_heads": 2, "n_train": 64, "n_eval": 16}
    tiny |= {"batch_size": 32, "curve_every": 1}
    specs = induction_grid("default", overrides=tiny)
    assert len(specs) == 60
    summary = summarize_induction([run_induction(spec) for spec in specs])
    assert summary["by_setup"]["variant"].n_unique() == 16
    for name, draw in figures("induction", summary).items():
        draw(tmp_path / f"{name}.png")  # raises if a figure breaks a rule
        assert (tmp_path / f"{name}.png").stat().st_size > 0


def test_a_grid_cell_says_how_many_seeds_did_not_learn() -> None:
    """The induction grids' red box marks a setup where a run did not learn; of several seeds
    the cell says how many (the full offline grid's elu_elu_raw at lambda 0: 1 of 3)."""
    assert unlearned_label(3, 3) == ""
    assert unlearned_label(3, 2) == "\n1/3 not\nlearned"
    assert unlearned_label(3, 0) == "\n3/3 not\nlearned"
    assert unlearned_label(1, 0) == "\nnot\nlearned"  # one seed: no count to give
