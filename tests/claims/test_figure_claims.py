"""The numbers the figures print are the claim rows' values, for heads, §7 costs,
streaming and the training dynamics (oversmoothing and geometry: their own test modules).

Each test builds a tiny planted table, evaluates the claims on it (:func:`claims.evaluate_claims`
or the claim's ``check_*``), draws the figure from the same table and reads the drawn text back
(bar labels, titles, legend entries, annotations). Every comparison is run twice: on the figure
of the claims' table (must agree) and on the figure of a perturbed table (must disagree), so a
figure that printed another number, or nothing, fails. The planted numbers are also checked
against values computed by hand from the planted inputs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.text import Annotation

from sinkscope.claims import registry as R
from sinkscope.costs import plots as cplots
from sinkscope.costs.summary import fit_slopes
from sinkscope.costs.toy import toy_table
from sinkscope.dynamics import plots as dplots
from sinkscope.dynamics.summary import summarize_classification, summarize_value_softmax
from sinkscope.heads.classify import HeadClassThresholds
from sinkscope.heads.plots import summary_bars_figure
from sinkscope.heads.summary import summarize
from sinkscope.labels import DIAGONAL, POOLED, SINK, SINK_PREV
from sinkscope.plotting import CLASS_COLORS, figure_problems
from sinkscope.streaming import plots as sp
from sinkscope.streaming.recompute import RECOMPUTE_SCHEMA
from sinkscope.streaming.summary import summarize as summarize_streaming
from tests.heads.test_plots import synthetic_per_head


def _claim_rows(table: pl.DataFrame, claim_id: str) -> list[dict[str, Any]]:
    rows = table.filter(pl.col("claim_id") == claim_id).to_dicts()
    assert rows, claim_id
    return rows


def _legend_texts(fig: Figure) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [t.get_text() for legend in legends for t in legend.get_texts()]


@pytest.fixture()
def drawn(monkeypatch) -> Callable[[Any], list[Figure]]:
    """``drawn(module)``: the figures the module's plot functions hand to ``save_figure``,
    kept undrawn-to-disk and unclosed (checked for readability instead of written)."""
    figures: list[Figure] = []

    def capture(module: Any) -> list[Figure]:
        def keep(fig: Figure, out_png: Any) -> None:
            assert figure_problems(fig) == []
            figures.append(fig)

        monkeypatch.setattr(module, "save_figure", keep)
        return figures

    return capture


# =============================================================================== heads


def _bar_labels(fig: Figure, models: list[str]) -> dict[tuple[str, str, str], str]:
    """``(model, dataset, pattern) -> drawn bar label`` of :func:`summary_bars_figure` (each
    label is matched to its bar by position; the bar's colour names the pattern)."""
    column_of = {to_hex(CLASS_COLORS[p]): c for p, c in ((SINK, "frac_sink"),
                 (DIAGONAL, "frac_diagonal"), (SINK_PREV, "frac_sink_prev"))}  # fmt: skip
    out = {}
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        facet = ax.get_title().split(" (N=")[0]
        dataset = POOLED if facet == "pooled over datasets" else facet
        bars = {
            round(bar.get_x() + bar.get_width() / 2, 6): column_of[to_hex(bar.get_facecolor())]
            for bar in ax.patches
        }
        for text in ax.texts:
            x = float(text.xy[0])
            key = (models[round(x)], dataset, bars[round(x, 6)])
            assert key not in out
            out[key] = text.get_text()
    return out


def _heads_mismatches(labels: dict, claims: pl.DataFrame) -> list[str]:
    """Every claim row of the four head claims whose number is not the drawn bar's label (the
    share in the measured column; the value too where the row's value is that share:
    ``diagonals_exist_rarer``'s value is the sink minus diagonal gap it decides on)."""
    checks = (
        ("heads.sinks_common", "frac_sink", "sink {}%", True),
        ("heads.diagonals_exist_rarer", "frac_diagonal", "(diagonal {}%", False),
        ("heads.diagonal_fraction", "frac_diagonal", "diagonal heads {}%", True),
        ("heads.sink_prev_fraction", "frac_sink_prev", "sink+previous-token heads {}%", True),
    )
    bad = []
    for claim_id, column, statement, is_value in checks:
        for row in _claim_rows(claims, claim_id):
            label = labels[(row["model"], row["dataset"], column)]
            said = statement.format(label)
            shown = row["measured"].startswith(said) if is_value else said in row["measured"]
            if not shown or (is_value and abs(float(label) - 100 * row["value"]) > 0.05 + 1e-9):
                bad.append(f"{claim_id} {row['model']}/{row['dataset']}: {label} vs {row}")
    return bad


def test_head_summary_bars_show_the_claim_numbers() -> None:
    per_head = [
        synthetic_per_head("m1", "d1", 0, layers=4, heads=4),
        synthetic_per_head("m1", "d2", 1, layers=4, heads=4),
        synthetic_per_head("m2", "d1", 2, layers=4, heads=4),
    ]
    summary = summarize(per_head)
    claims = R.evaluate_claims({"head_classes": summary})
    models = sorted(set(summary["model"].to_list()))
    fig = summary_bars_figure(summary, thresholds=HeadClassThresholds())
    assert figure_problems(fig) == []
    labels = _bar_labels(fig, models)
    assert len(labels) == 3 * summary.height  # every (model, dataset) row has its three bars
    assert _heads_mismatches(labels, claims) == []
    # "sink" is the is_sink flag everywhere: the legend says so, and the share is that of
    # heads with BOS mass >= 0.4 (by hand, on one dataset's per-head table)
    assert any(t.startswith("sink: is_sink, BOS mass >= 0.4") for t in _legend_texts(fig))
    by_hand = float(np.mean(per_head[0]["bos_mass"].to_numpy() >= 0.4))
    assert labels[("m1", "d1", "frac_sink")] == f"{100 * by_hand:.1f}"
    # a figure of another table does not pass
    other = summary.with_columns(frac_sink=pl.col("frac_sink") + 0.05)
    wrong = _bar_labels(summary_bars_figure(other), models)
    assert len(_heads_mismatches(wrong, claims)) == summary.height


# =============================================================================== costs


def _backcopy_rows(powers=(1.0, 1.5), scale: float = 1.0) -> list[dict]:
    rows = []
    for T in (4, 8, 16, 32):
        for pattern, power in zip(("sink", "diagonal"), powers, strict=True):
            for seed in (0, 1):
                c = scale * 10.0 * T**power * (1 + 0.02 * seed)
                rows.append(
                    {
                        "T": T,
                        "d": T + 12,
                        "n_dormant": 5,
                        "n_copy": 5,
                        "pattern": pattern,
                        "seed": seed,
                        "kappa": 10.0,
                        "score_norm": "d",
                        "cost_total": c,
                        "cost_qk": 0.9 * c,
                        "cost_qk_lower": 0.89 * c,
                    }
                )
    return rows


def _slopes_table(rows: list[dict]) -> pl.DataFrame:
    """The ``backcopy_slopes`` table as rule summarize_backcopy writes it."""
    return pl.DataFrame(
        [
            {"cost": cost, "pattern": pattern, **fit}
            for cost in ("cost_total", "cost_qk")
            for pattern, fit in fit_slopes(rows, "T", cost).items()
        ]
    )


def _backcopy_mismatches(fig: Figure, claims: pl.DataFrame) -> list[str]:
    legend = " | ".join(t.get_text() for t in fig.axes[0].get_legend().get_texts())
    title = fig.axes[0].get_title()
    bad = []
    for row in _claim_rows(claims, "costs.backcopy_slopes"):
        pattern = row["setting"].split(",")[0].removeprefix("pattern=")
        shown = re.search(rf"(?:^| ){pattern} \(slope ([-0-9.]+)\)", legend)
        if not shown or row["measured"] != f"slope {shown.group(1)}":
            bad.append(f"slope {pattern}: {legend!r} vs {row['measured']!r}")
        elif abs(float(shown.group(1)) - row["value"]) > 5e-4 + 1e-12:
            bad.append(f"slope value {pattern}")
    (row,) = _claim_rows(claims, "costs.backcopy_sink_cheaper")
    if f"at {row['setting']}: {row['measured']}" not in title:
        bad.append(f"ratio: {title!r} vs {row['measured']!r}")
    return bad


def test_backcopy_figure_shows_the_claim_slopes_and_ratio() -> None:
    rows = _backcopy_rows()
    claims = R.evaluate_claims(
        {"costs_backcopy_slopes": _slopes_table(rows), "costs_backcopy_runs": pl.DataFrame(rows)}
    )
    fig = cplots.backcopy_costs_figure(rows, "backcopy")
    assert figure_problems(fig) == []
    assert _backcopy_mismatches(fig, claims) == []
    # by hand: exact power laws (the seed factor is the same at every T) have slopes 1 and 3/2,
    # and at T = 32 the diagonal / sink ratio is 32^(1/2)
    values = {
        r["setting"].split(",")[0]: r["value"] for r in _claim_rows(claims, "costs.backcopy_slopes")
    }
    assert values == {
        "pattern=sink": pytest.approx(1.0, abs=1e-9),
        "pattern=diagonal": pytest.approx(1.5, abs=1e-9),
    }
    (ratio,) = _claim_rows(claims, "costs.backcopy_sink_cheaper")
    assert ratio["setting"] == "T=32" and ratio["value"] == pytest.approx(math.sqrt(32))
    assert "(ratio 5.66)" in fig.axes[0].get_title()
    # the figure of other runs disagrees with these claim rows (slopes and ratio)
    other = cplots.backcopy_costs_figure(_backcopy_rows(powers=(1.1, 1.4)))
    assert len(_backcopy_mismatches(other, claims)) == 3


def test_toy_figure_shows_the_sanity_checks_deviation() -> None:
    from sinkscope.claims.sanity import sanity_checks

    rows = toy_table([4, 8, 16], kappa=2.0)
    (row,) = sanity_checks({"costs_toy": pl.DataFrame(rows)}).to_dicts()

    def shown(table: list[dict]) -> str:
        fig = cplots.toy_figure(table)
        assert figure_problems(fig) == []
        match = re.search(r"sqrt\(T\+1\) - 1\| = (\S+)$", fig.axes[0].get_title())
        assert match, fig.axes[0].get_title()
        return match.group(1)

    assert row["value"] < 1e-12
    assert f"{row['value']:.2g}" == shown(rows)
    # a ratio 1% off sqrt(T+1) at one T: the figure prints 0.01, not the check's number
    off = [dict(r) for r in rows]
    off[1]["ratio_diag_over_sink"] *= 1.01
    assert shown(off) == "0.01" != f"{row['value']:.2g}"


def _copypaste_rows(C_: int = 3, d: int = 100, T: int = 50, growth: float = 1.0) -> list[dict]:
    rows = []
    for pattern in ("sink", "diagonal"):
        for n, deltas in ((2, (0.5, 0.3, 0.2)), (4, (0.5, 0.3))):
            for delta in deltas:
                x = (2.0 + n) / delta**2
                # sink: flat in x up to a small n-dependent wiggle; diagonal: grows like x^growth
                cost = 40.0 * (1 + 0.01 * n * delta) if pattern == "sink" else 3.0 * x**growth
                rows.append(
                    {
                        "pattern": pattern,
                        "n": n,
                        "delta": delta,
                        "seed": 0,
                        "reff_over_delta2": x,
                        "cost_total": cost,
                        "lower_bound": cost / 2,
                        "upper_bound": 2 * cost,
                        "in_bounds": True,
                        "C": C_,
                        "d": d,
                        "T": T,
                        "kappa": 10.0,
                    }
                )
    return rows


def _copypaste_mismatches(fig: Figure, claims: pl.DataFrame) -> list[str]:
    legend = _legend_texts(fig)
    bad = []
    for row in _claim_rows(claims, "costs.copypaste_trends"):
        pattern = row["setting"].split(",")[0].removeprefix("pattern=")
        fixed = {
            int(m.group(1)): m.group(2)
            for t in legend
            if (m := re.fullmatch(rf"{pattern}, (\d+) dormant tokens/group \(slope (\S+)\)", t))
        }
        pooled = [
            m.group(1) for t in legend if (m := re.fullmatch(rf"{pattern}: pooled slope (\S+)", t))
        ]
        statement = "log-log slope at fixed n: " + ", ".join(
            f"n={n}: {s}" for n, s in sorted(fixed.items())
        )
        if row["measured"] != statement:
            bad.append(f"{pattern}: {fixed} vs {row['measured']!r}")
        if len(pooled) != 1 or not row["reason"].endswith(f"pooled over the sweep: {pooled[0]}"):
            bad.append(f"{pattern} pooled: {pooled} vs {row['reason']!r}")
        if f"{row['value']:.3f}" not in fixed.values():  # the value is the worst fixed-n slope
            bad.append(f"{pattern} value {row['value']} not drawn")
    return bad


def test_copypaste_figure_shows_the_claim_slopes_and_the_runs_setting() -> None:
    rows = _copypaste_rows()
    claims = R.evaluate_claims({"costs_copypaste_runs": pl.DataFrame(rows)})
    fig = cplots.copypaste_costs_figure(rows)
    assert figure_problems(fig) == []
    assert _copypaste_mismatches(fig, claims) == []
    # by hand: the diagonal cost 3 x has slope 1 at every n
    (diag,) = [
        r for r in _claim_rows(claims, "costs.copypaste_trends") if "diagonal" in r["setting"]
    ]
    assert diag["value"] == pytest.approx(1.0) and "n=2: 1.000, n=4: 1.000" in diag["measured"]
    assert cplots.copypaste_setting(rows) == "C=3, d=100, T=50, kappa=10"
    assert fig.axes[0].get_title().startswith("generic copy-paste, C=3, d=100, T=50, kappa=10")
    # other runs: other slopes, and the title states their C, d and T (not the defaults)
    other = _copypaste_rows(C_=5, d=64, T=20, growth=0.5)
    fig_other = cplots.copypaste_costs_figure(other)
    assert fig_other.axes[0].get_title().startswith("generic copy-paste, C=5, d=64, T=20, kappa=10")
    assert len(_copypaste_mismatches(fig_other, claims)) >= 2
    mixed = [*rows, *_copypaste_rows(C_=4)]
    assert cplots.copypaste_setting(mixed).startswith("C={3, 4}, d=100")


# =============================================================================== streaming


def _perplexity(model: str, dataset: str, window_ratio: dict[int, float]) -> pl.DataFrame:
    """A pair's ``perplexity`` table: dense, window-only and sink (k=2) at each window, with the
    window-only log perplexity ratio to dense on the evicting region ``log(window_ratio[L])``."""
    rows = []
    for kind, n_sink, window, factor in [
        ("dense", 0, None, 1.0),
        *(("window", 0, w, r) for w, r in window_ratio.items()),
        *(("sink", 2, w, 1.1) for w in window_ratio),
    ]:
        for region in ("evicting", "tail"):
            ratio = math.log(factor)
            rows.append(
                {
                    "policy": kind if window is None else f"{kind}{n_sink}_L{window}",
                    "kind": kind,
                    "n_sink": n_sink,
                    "window": window,
                    "positions": "cache",
                    "region": region,
                    "first_position": 9,
                    "n_tokens": 100,
                    "nll": 2.0 + ratio,
                    "ppl": math.exp(2.0 + ratio),
                    "dense_nll": 2.0,
                    "dense_ppl": math.exp(2.0),
                    "log_ppl_ratio": ratio,
                }
            )
    return pl.DataFrame(rows, schema_overrides={"window": pl.Int64}).with_columns(
        model=pl.lit(model), dataset=pl.lit(dataset)
    )


def _eviction_mismatches(fig: Figure, claims: pl.DataFrame, pairs: list[tuple]) -> list[str]:
    ax = fig.axes[0]
    title, note = ax.get_title().split("\n")
    assert note == "labels: window-only perplexity / dense perplexity"
    window = int(title.removeprefix("window L = "))
    labels = [t.get_text() for t in ax.texts]
    assert len(labels) == len(pairs)
    bad = []
    for (model, dataset), label in zip(pairs, labels, strict=True):
        (row,) = [
            r
            for r in _claim_rows(claims, "streaming.eviction_hurts")
            if (r["model"], r["dataset"], r["setting"]) == (model, dataset, f"window L={window}")
        ]
        if row["measured"] != f"perplexity {label} vs dense":
            bad.append(f"{model}/{dataset}: {label} vs {row['measured']!r}")
    return bad


def test_streaming_summary_labels_the_eviction_claim(drawn) -> None:
    figures = drawn(sp)
    pairs = [("m1", "d1"), ("m2", "d1")]
    tables = [
        {"perplexity": _perplexity("m1", "d1", {4: 3.0, 8: 1.5})},
        {"perplexity": _perplexity("m2", "d1", {4: 1.25, 8: 1.1})},
    ]
    summary = summarize_streaming(tables)
    claims = R.evaluate_claims({"streaming_sink_heads": summary["sink_heads"]})
    sp.plot_summary(summary, "unused.png", "tiny")
    (fig,) = figures
    assert _eviction_mismatches(fig, claims, pairs) == []
    assert [t.get_text() for t in fig.axes[0].texts] == ["x3.00", "x1.25"]  # planted, by hand
    swapped = summarize_streaming(
        [
            {"perplexity": _perplexity("m1", "d1", {4: 1.25, 8: 1.5})},
            {"perplexity": _perplexity("m2", "d1", {4: 3.0, 8: 1.1})},
        ]
    )
    sp.plot_summary(swapped, "unused.png", "tiny")
    assert len(_eviction_mismatches(figures[1], claims, pairs)) == 2


def _recompute(recovered: dict[int, float | None]) -> pl.DataFrame:
    """A pair's ``recompute`` table: per window, window-only and sink (k=2) against both
    baselines; the sink cache recovers ``recovered[L]`` (None: re-computation is not better
    than window-only there)."""
    rows = []
    for baseline in ("recompute_bos", "recompute"):
        for window, fraction in recovered.items():
            excess = 0.5 if fraction is not None else -0.1
            for kind, n_sink in (("window", 0), ("sink", 2)):
                policy_excess = excess if kind == "window" else excess * (1 - (fraction or 0))
                rows.append(
                    {
                        "baseline": baseline,
                        "window": window,
                        "kind": kind,
                        "n_sink": n_sink,
                        "policy": f"{kind}{n_sink}_L{window}",
                        "first_position": 9,
                        "n_queries": 5,
                        "n_tokens": 10,
                        "dense_nll": 1.8,
                        "window_nll": 2.0 + excess,
                        "recompute_nll": 2.0,
                        "policy_nll": 2.0 + policy_excess,
                        "window_vs_recompute": excess,
                        "policy_vs_recompute": policy_excess,
                        "policy_vs_recompute_se": 0.01,
                        "recovered_fraction": fraction if kind != "window" else 0.0,
                    }
                )
    return pl.DataFrame(rows, schema=RECOMPUTE_SCHEMA).with_columns(
        model=pl.lit("m"), dataset=pl.lit("d")
    )


def _recovered_mismatches(fig: Figure, claims: pl.DataFrame) -> list[str]:
    # axes: the top row (one per baseline), then the bottom row; column 0 is recompute_bos
    n_columns = len(fig.axes) // 2
    bottom = fig.axes[n_columns]
    shown = {int(t.xy[0]): t.get_text() for t in bottom.texts if isinstance(t, Annotation)}
    bad = []
    rows = _claim_rows(claims, "streaming.sinks_restore")
    for row in rows:
        window = int(re.match(r"window L=(\d+)", row["setting"]).group(1))
        if row["value"] is None:
            if window in shown:
                bad.append(f"L={window}: labelled {shown[window]} but the claim is n/a")
            continue
        label = shown.get(window)
        if label is None or f"remove {label} of" not in row["reason"]:
            bad.append(f"L={window}: {label} vs {row['reason']!r}")
        elif abs(float(label.rstrip("%")) - 100 * row["value"]) > 0.05 + 1e-9:
            bad.append(f"L={window}: value")
    return bad


def test_recompute_figure_labels_the_restore_claim(drawn) -> None:
    figures = drawn(sp)
    table = _recompute({4: 0.625, 8: 0.9375, 16: None})
    claims = R.evaluate_claims({"streaming_recompute": table})
    values = [r["value"] for r in _claim_rows(claims, "streaming.sinks_restore")]
    assert values[0] == pytest.approx(0.625) and values[1] == pytest.approx(0.9375)
    assert values[2] is None  # re-computation not better than window-only: not applicable
    sp.plot_recompute({"recompute": table}, "unused.png", "tiny")
    assert _recovered_mismatches(figures[0], claims) == []
    sp.plot_recompute({"recompute": _recompute({4: 0.5, 8: 0.9375, 16: 0.2})}, "unused.png", "t")
    assert len(_recovered_mismatches(figures[1], claims)) == 2


# =============================================================================== dynamics


def _value_softmax_results(top: dict[tuple[str, str], list[float]]) -> list[dict]:
    """Per-run tables of untied value-softmax runs with the planted final top weights
    ``top[(loss, activation)]`` (one per seed)."""
    results = []
    for (loss, activation), weights in top.items():
        for seed, weight in enumerate(weights):
            run_id = f"{loss}-{activation}-s{seed}"
            spec = {
                "experiment": "untied",
                "loss": loss,
                "activation": activation,
                "n": 3,
                "d": 2,
                "kappa": 1.0,
                "target": 1.0,
                "kl_sharpness": 2.0,
                "seed": seed,
            }
            final = pl.DataFrame(
                [
                    {
                        "run_id": run_id,
                        **spec,
                        "final_loss": 0.1,
                        "entropy": 0.5,
                        "max_entropy": math.log(3),
                        "top_weight": weight,
                        "top_entry": 0,
                        "v_norm": 1.0,
                        "top_value_norm": 1.0,
                        "polarized": weight >= 0.9,
                        "order_preserved": 1.0,
                    }
                ]
            )
            steps = [0, 1, 2]
            trajectory = pl.DataFrame(
                {
                    "run_id": run_id,
                    "step": np.repeat(steps, 3),
                    "entry": np.tile([0, 1, 2], 3),
                    "time": np.repeat([0.0, 0.1, 0.2], 3),
                    "weight": np.tile([weight, (1 - weight) / 2, (1 - weight) / 2], 3),
                    "value_proj": np.tile([0.3, 0.1, -0.1], 3),
                    "logit": np.tile([1.0, 0.0, 0.0], 3),
                }
            )
            scalars = pl.DataFrame(
                {
                    "run_id": run_id,
                    "step": steps,
                    "time": [0.0, 0.1, 0.2],
                    "entropy": [1.0, 0.8, 0.5],
                    "v_norm": [0.1, 0.5, 1.0],
                    "loss_value": [0.7, 0.5, 0.1],
                }
            )
            results.append({"final": final, "trajectory": trajectory, "scalars": scalars})
    return results


_POLARIZATION_CLAIMS = (
    "dynamics.logistic_polarizes",
    "dynamics.square_no_polarization",
    "dynamics.unnormalized_no_polarization",
)


def _polarization_mismatches(fig: Figure, claims: pl.DataFrame) -> list[str]:
    titles = {}
    for ax in fig.axes:
        match = re.match(
            r"(\w+) / (\w+):.*\nall seeds: polarized (\S+%) of (\d+) runs$", ax.get_title()
        )
        if match:
            titles[(match.group(1), match.group(2))] = (match.group(3), match.group(4))
    bad = []
    for claim_id in _POLARIZATION_CLAIMS:
        for row in _claim_rows(claims, claim_id):
            loss, activation = re.match(r"loss=(\w+), phi=(\w+)", row["setting"]).groups()
            pct, runs = titles[(loss, activation)]
            if not row["measured"].startswith(f"{pct} of {runs} runs polarized"):
                bad.append(f"{claim_id} {loss}/{activation}: {pct} vs {row['measured']!r}")
    return bad


def test_value_softmax_figures_show_the_polarization_claims(drawn) -> None:
    figures = drawn(dplots)
    planted = {
        ("square", "softmax"): [0.4, 0.95, 0.5],
        ("logistic", "softmax"): [0.99, 0.97, 0.6],
        ("logistic", "sum"): [0.3, 0.2, 0.1],
        ("logistic", "sigmoid"): [0.5, 0.92, 0.95],
        ("square", "sum"): [0.3, 0.3, 0.3],  # drawn (Fig. 13's grid), no claim about them
        ("square", "sigmoid"): [0.3, 0.3, 0.3],
    }
    summary = summarize_value_softmax(_value_softmax_results(planted))
    claims = R.evaluate_claims({"dynamics_value_softmax_by_variant": summary["by_variant"]})
    # by hand: the share of seeds with top weight >= 0.9
    assert [r["value"] for r in _claim_rows(claims, "dynamics.logistic_polarizes")] == [
        pytest.approx(2 / 3)
    ]
    dplots.plot_vs_activations(summary, "unused.png")
    dplots.plot_vs_polarization(summary, "unused.png")
    activations, polarization = figures
    assert _polarization_mismatches(activations, claims) == []
    (row,) = _claim_rows(claims, "dynamics.logistic_polarizes")
    share_of_runs = row["measured"].split(" runs polarized")[0]  # e.g. "66.7% of 3"
    assert polarization.get_suptitle().endswith(f"all seeds: polarized {share_of_runs} runs")
    # the figure of other runs does not match these claims
    planted[("logistic", "sum")] = [0.3, 0.2, 0.95]
    planted[("square", "softmax")] = [0.4, 0.5, 0.5]
    dplots.plot_vs_activations(summarize_value_softmax(_value_softmax_results(planted)), "x.png")
    assert len(_polarization_mismatches(figures[2], claims)) == 2


def _by_setup(shares: dict[tuple[str, str, float], float]) -> pl.DataFrame:
    """Induction ``by_setup`` rows: ``(variant, positional, weight_decay) -> sink share``."""
    attention = {"softmax": ("softmax", True), "sigmoid_raw": ("sigmoid", False),
                 "linear_raw": ("linear", False), "sigmoid_norm": ("sigmoid", True)}  # fmt: skip
    return pl.DataFrame(
        [
            {
                "variant": variant,
                "attention": attention[variant][0],
                "normalize": attention[variant][1],
                "switch": "none",
                "positional": pe,
                "weight_decay": wd,
                "runs": 2,
                "learned_runs": 2,
                "accuracy_mean": 0.9,
                "sink_proportion_mean": share,
                "sink_proportion_min": share,  # the two seeds agree
                "sink_proportion_max": share,
            }
            for (variant, pe, wd), share in shares.items()
        ]
    )


def _sink_cells(fig: Figure) -> dict[tuple[str, str, float], str]:
    """``(variant, positional, weight_decay) -> drawn cell text`` of the induction sinks figure."""
    cells = {}
    panels = [ax for ax in fig.axes if ax.get_title().startswith("lambda = ")]
    # the panels share their columns: the bottom one names them
    variants = [t.get_text() for t in panels[-1].get_xticklabels()]
    for ax in panels:
        wd = float(ax.get_title().removeprefix("lambda = "))
        pes = [t.get_text() for t in ax.get_yticklabels()]
        for text in ax.texts:
            x, y = text.get_position()
            cells[(variants[int(x)], pes[int(y)], wd)] = text.get_text().split("\n")[0]
    return cells


def _sinks_mismatches(fig: Figure, claims: pl.DataFrame) -> list[str]:
    cells = _sink_cells(fig)
    bad = []
    for row in _claim_rows(claims, "dynamics.softmax_sinks_emerge"):
        pe, wd = re.match(r"positional=(\w+), weight_decay=(\S+)", row["setting"]).groups()
        s, w, worst = re.match(
            r"softmax (\S+) vs un-normalised max (\S+) \((\w+)\)", row["measured"]
        ).groups()
        shown = (cells[("softmax", pe, float(wd))], cells[(worst, pe, float(wd))])
        if shown != (s, w) or abs(float(s) - float(w) - row["value"]) > 0.01 + 1e-9:
            bad.append(f"{pe}, {wd}: {shown} vs {row['measured']!r}")
    return bad


def test_induction_sinks_figure_shows_the_claim_shares(drawn) -> None:
    figures = drawn(dplots)
    shares = {
        ("softmax", "rope", 0.0): 0.75,
        ("sigmoid_raw", "rope", 0.0): 0.125,
        ("linear_raw", "rope", 0.0): 0.0,
        ("sigmoid_norm", "rope", 0.0): 0.5,  # normalised: not among the claim's alternatives
        ("softmax", "rope", 0.1): 0.25,
        ("sigmoid_raw", "rope", 0.1): 0.0,
        ("linear_raw", "rope", 0.1): 0.0625,
        ("sigmoid_norm", "rope", 0.1): 0.5,
    }
    by_setup = _by_setup(shares)
    claims = R.evaluate_claims({"dynamics_induction_by_setup": by_setup})
    values = [r["value"] for r in _claim_rows(claims, "dynamics.softmax_sinks_emerge")]
    assert values == [pytest.approx(0.75 - 0.125), pytest.approx(0.25 - 0.0625)]  # by hand
    dplots.plot_induction_sinks({"by_setup": by_setup}, "unused.png")
    assert _sinks_mismatches(figures[0], claims) == []
    shares[("softmax", "rope", 0.1)] = 0.5
    dplots.plot_induction_sinks({"by_setup": _by_setup(shares)}, "unused.png")
    assert len(_sinks_mismatches(figures[1], claims)) == 1


def _classification(flip: Callable[[int, int, int, int], float]) -> dict[str, pl.DataFrame]:
    """Summary of planted classification runs: ``flip(vocab, heads, layers, seed)``; Fig. 21's
    setup (|V|=41, no MLP, no LayerNorm) and |V|=81 with an MLP."""
    results = []
    for vocab, mlp in ((41, False), (81, True)):
        for heads in (1, 2, 4):
            for layers in (1, 2):
                for seed in (0, 1):
                    run_id = f"v{vocab}-h{heads}-l{layers}-s{seed}"
                    rate = flip(vocab, heads, layers, seed)
                    final = pl.DataFrame(
                        [
                            {
                                "run_id": run_id,
                                "vocab_size": vocab,
                                "use_mlp": mlp,
                                "use_layernorm": False,
                                "n_heads": heads,
                                "n_layers": layers,
                                "seed": seed,
                                "accuracy": 0.95,
                                "flip_rate": rate,
                                "flip_rate_neutral": rate / 2,
                                "attacked": 1000,  # the planted rates are multiples of 1/1000
                                "cls_top_weight": 0.5,
                            }
                        ]
                    )
                    curve = pl.DataFrame(
                        {
                            "run_id": [run_id],
                            "epoch": [1],
                            "flip_rate": [rate],
                            "eval_accuracy": [0.95],
                        }
                    )
                    attention = pl.DataFrame({"run_id": [run_id]})
                    results.append({"final": final, "curve": curve, "attention": attention})
    return summarize_classification(results)


def _flip_mismatches(fig: Figure, claims: pl.DataFrame) -> list[str]:
    subtitle = fig.get_suptitle().split("\n")[1:]  # one line per factor
    bad = []
    for row in _claim_rows(claims, "dynamics.flip_rate_decreases"):
        factor, lo, hi, scope = re.match(r"(\w+) (\d+) vs (\d+) \((.*)\)", row["setting"]).groups()
        name = {"n_heads": "H", "n_layers": "L"}[factor]
        if f"{name} {lo} -> {hi} ({scope}): {row['measured']}" not in subtitle:  # a whole line
            bad.append(f"{factor}: {subtitle!r} vs {row['measured']!r}")
    return bad


def test_flip_rate_figure_shows_the_claim_numbers(drawn) -> None:
    figures = drawn(dplots)

    def planted(vocab: int, heads: int, layers: int, seed: int) -> float:
        return 0.8 / heads - 0.1 * layers + 0.01 * seed + (0.05 if vocab == 81 else 0.0)

    summary = _classification(planted)
    claims = R.evaluate_claims({"dynamics_classification_final": summary["final"]})
    rows = _claim_rows(claims, "dynamics.flip_rate_decreases")
    # by hand, on Fig. 21's setup: mean over layers {1, 2} and seeds {0, 1}
    assert rows[0]["value"] == pytest.approx((0.8 - 0.15 + 0.005) - (0.2 - 0.15 + 0.005))
    assert rows[1]["value"] == pytest.approx(0.1)
    dplots.plot_classification_flips_by_size(summary, "unused.png")
    assert _flip_mismatches(figures[0], claims) == []
    # runs without Fig. 21's setup: both the figure and the claim pool all runs
    pooled = {k: v for k, v in summary.items()}
    pooled["final"] = summary["final"].filter(pl.col("vocab_size") == 81)
    pooled["by_setup"] = summary["by_setup"].filter(pl.col("vocab_size") == 81)
    pooled_claims = R.evaluate_claims({"dynamics_classification_final": pooled["final"]})
    dplots.plot_classification_flips_by_size(pooled, "unused.png")
    assert "all runs pooled" in figures[1].get_suptitle()
    assert _flip_mismatches(figures[1], pooled_claims) == []
    # other runs: the figure's numbers differ from these claim rows
    other = _classification(lambda v, h, n, s: planted(v, h, n, s) + 0.1 * (h == 4))
    dplots.plot_classification_flips_by_size(other, "unused.png")
    assert len(_flip_mismatches(figures[2], claims)) == 2  # both trends change
