"""The numbers the oversmoothing figures print are the claim rows' values.

On a tiny extracted model (fixture ``extracted``, llama family) with planted sink heads, each
figure-claim pair is compared: Fig. 2 left vs ``approximation_mean``, Fig. 2 right vs
``w_decreases``, Figs. 8-9 vs ``condition_i_half``, ``condition_ii_few`` and ``predicted_signs``
(both :mod:`sinkscope.claims` and the stage's per-pair ``claims`` table). The planted
tables that flip each of these claims' verdicts are in ``tests/claims/test_claims.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from matplotlib.image import imread

from sinkscope.claims import registry as R
from sinkscope.heads.classify import HeadClassThresholds, classify_file
from sinkscope.oversmoothing import plots
from sinkscope.oversmoothing.analysis import analyze_file
from sinkscope.oversmoothing.names import FIGURES
from sinkscope.oversmoothing.summary import summarize
from sinkscope.plotting import MAX_FIGURE_PIXELS


@pytest.fixture()
def combined(extracted_llama) -> dict[str, pl.DataFrame]:
    """One family's tables suffice for the figures (their shapes are tested at the paper's)."""
    _, path, _, _ = extracted_llama
    _, per_head = classify_file(path)
    # plant: head 0 of every layer is a sink head (BOS mass 0.9), no other head is
    per_head = per_head.with_columns(
        bos_mass=pl.when(pl.col("head") == 0).then(0.9).otherwise(pl.col("bos_mass").clip(0, 0.3))
    ).with_columns(is_sink=pl.col("bos_mass") >= HeadClassThresholds().sink)
    tables = analyze_file(path, per_head, [4, 8])
    other = {k: v.with_columns(dataset=pl.lit("other")) for k, v in tables.items()}
    return summarize([tables, other])


def _claim(claims: pl.DataFrame, claim_id: str, model: str, dataset: str) -> float | None:
    row = claims.filter(
        (pl.col("claim_id") == claim_id)
        & (pl.col("model") == model)
        & (pl.col("dataset") == dataset)
    )
    assert row.height == 1, (claim_id, model, dataset)
    return row["value"].item()


def test_figure_numbers_equal_the_claim_rows(combined, tmp_path: Path) -> None:
    claims = R.evaluate_claims(
        {
            "oversmoothing_summary": combined["summary"],
            "oversmoothing_per_head": combined["per_head"],
        }
    )
    per_head = combined["per_head"]
    assert per_head["is_sink"].any() and (~per_head["is_sink"]).any()

    fig8 = plots.plot_condition_deltas(per_head, tmp_path / "f8.png", "attention")
    fig9 = plots.plot_condition_deltas(per_head, tmp_path / "f9.png", "uniform")
    offsets = plots.plot_approximation(per_head, tmp_path / "f2l.png")
    components = plots.plot_components(per_head, tmp_path / "f2r.png")
    pairs = set(fig8)
    assert pairs == set(fig9) == set(offsets) == set(components) and len(pairs) == 2
    for model, dataset in pairs:
        s8, s9 = fig8[(model, dataset)], fig9[(model, dataset)]
        assert s8["n_predicted_s"] > 0  # the agreement rates are numbers, not n/a
        assert s8 == s9  # both figures show the same heads, counts and agreement rates
        n_non_sink = s8["n_non_sink"]
        assert n_non_sink == int(
            (
                ~per_head.filter((pl.col("dataset") == dataset) & (pl.col("context_length") == 8))[
                    "is_sink"
                ]
            ).sum()
        )
        for claim_id, column in (
            ("oversmoothing.condition_i_half", "frac_cond_i_s_non_sink"),
            ("oversmoothing.condition_ii_few", "frac_cond_ii_s_non_sink"),
            ("oversmoothing.predicted_signs", "agree_both_s"),
        ):
            value = _claim(claims, claim_id, model, dataset)
            assert value == s8[column], claim_id
        # brute force: the condition (i) share of the non-sink heads at the largest T'
        heads = per_head.filter(
            (pl.col("dataset") == dataset) & (pl.col("context_length") == 8) & ~pl.col("is_sink")
        )
        assert s8["frac_cond_i_s_non_sink"] == pytest.approx(
            float(np.mean(heads["condition_s"].to_numpy() == "i"))
        )

        rel = offsets[(model, dataset)]["rel_offset"]
        assert _claim(claims, "oversmoothing.approximation_mean", model, dataset) == rel
        means = components[(model, dataset)]
        drop = means["mean_rho_x"] - means["mean_rho_xwz_s"]
        assert _claim(claims, "oversmoothing.w_decreases", model, dataset) == pytest.approx(
            drop, rel=1e-12, abs=1e-15
        )
        # brute force: head means at the largest T' straight from the per-head table
        pair = per_head.filter((pl.col("dataset") == dataset) & (pl.col("context_length") == 8))
        assert drop == pytest.approx(
            float(pair["rho_x"].mean()) - float(pair["rho_xwz_s"].mean()), abs=1e-12
        )


def test_condition_figure_legend_lists_only_present_conditions(combined, tmp_path, monkeypatch):
    captured = []
    original = plots.save_figure

    def keep(fig, out_png):
        captured.append([t.get_text() for legend in fig.legends for t in legend.get_texts()])
        original(fig, out_png)

    monkeypatch.setattr(plots, "save_figure", keep)
    per_head = combined["per_head"].with_columns(
        condition_s=pl.when(pl.col("condition_s") == "ii")
        .then(pl.lit("neither"))
        .otherwise(pl.col("condition_s"))
    )
    plots.plot_condition_deltas(per_head, tmp_path / "f8.png", "attention")
    (labels,) = captured
    present = set(per_head.filter(~pl.col("is_sink"))["condition_s"].unique().to_list())
    assert len(labels) == len(present)
    assert not any(label.startswith("(ii)") for label in labels)


def test_sink_heads_of_figs_8_to_10_are_is_sink(combined, tmp_path) -> None:
    """Fig. 10's colours are ``is_sink`` / ``is_diagonal`` (a BOS mass of 0.45 is a sink head,
    not the paper's 0.5 cut), and a table made with other thresholds is refused."""
    frame = pl.DataFrame(
        {
            "bos_mass": [0.45, 0.2, 0.5, 0.1],
            "diagonal_mass": [0.1, 0.45, 0.45, 0.2],
            "is_sink": [True, False, True, False],
            "is_diagonal": [False, True, True, False],
        }
    )
    assert plots._pattern(frame).tolist() == ["sink", "diagonal", "sink", "neither"]
    assert plots.sink_rule(frame) == "is_sink: BOS mass >= 0.4"
    with pytest.raises(ValueError, match="is_sink does not follow"):
        plots.sink_rule(frame, HeadClassThresholds(sink=0.5))
    with pytest.raises(ValueError, match="is_sink does not follow"):
        plots.plot_uniformity(
            combined["per_head"], tmp_path / "f10.png", HeadClassThresholds(sink=0.95)
        )


def test_summary_figures_of_the_paper_grid_stay_readable(combined, tmp_path, monkeypatch) -> None:
    """6 models x 4 datasets (the paper's configs; planted by relabelling the tiny model's pairs):
    every summary figure is laid out as a grid within MAX_FIGURE_PIXELS, passes figure_problems
    (save_figure refuses one that does not), and each panel's title names its model and dataset."""
    models = [f"model-{m}-7b" for m in range(6)]
    datasets = [f"dataset-{d}" for d in range(4)]
    tables = {}
    for key in ("per_head", "per_layer"):
        table = combined[key].filter(pl.col("dataset") == "other")
        tables[key] = pl.concat(
            [
                table.with_columns(model=pl.lit(m), dataset=pl.lit(d))
                for m in models
                for d in datasets
            ]
        )
    titles: dict[str, list[str]] = {}
    original = plots.save_figure

    def keep(fig, out_png):
        titles[Path(out_png).stem] = [ax.get_title() for ax in fig.axes if ax.get_visible()]
        original(fig, out_png)

    monkeypatch.setattr(plots, "save_figure", keep)
    figures = plots.figures(tables, thresholds=HeadClassThresholds())
    assert tuple(figures) == FIGURES
    written = [tmp_path / f"{name}.png" for name in figures]
    for draw, path in zip(figures.values(), written, strict=True):
        draw(path)
    for path in written:
        height, width = imread(path).shape[:2]
        assert max(width, height) <= MAX_FIGURE_PIXELS, (path.name, width, height)
    # one panel (Fig. 2 right: two) per pair, titled with the pair
    for name, per_pair in (
        ("fig2_right_components", 2),
        ("fig7_head_errors", 1),
        ("fig8_attention_deltas", 1),
        ("fig10_uniformity", 1),
        ("fig4_layer_similarity", 1),
    ):
        shown = titles[name]
        assert len(shown) == per_pair * len(models) * len(datasets), name
        for m in models:
            for d in datasets:
                assert sum(t.startswith(f"{m} · {d} (N=") for t in shown) == per_pair, (name, m, d)
