"""Checks of the oversmoothing claims (§5, App. E.1): read the ``oversmoothing_*`` summary tables.

The approximation of attention by its mean (Fig. 7), the similarity differences of Figs. 5-6,
conditions (i) and (ii) of Figs. 8-9, the predicted signs and the positive similarity.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import polars as pl

from sinkscope.claims.verdicts import Row, model_dataset_order, pct, require, row
from sinkscope.heads.names import POOLED

# sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use their helpers
# import them when they run, so importing this module (and rendering the claims that need none of
# them) does not load torch.

__all__ = [
    "check_approximation_every_head",
    "check_approximation_most_heads",
    "check_attention_raises_similarity",
    "check_condition_i_about_half",
    "check_condition_ii_few",
    "check_dense_heads_raise_more",
    "check_mean_approximation",
    "check_predicted_signs",
    "check_similarity_stays_positive",
    "check_uniform_raises_more",
    "check_w_decreases_similarity",
]


def _largest_context(summary: pl.DataFrame) -> pl.DataFrame:
    largest = summary.filter(
        pl.col("context_length") == pl.col("context_length").max().over("model", "dataset")
    )
    return model_dataset_order(largest)


def _with_pooled_heads(per_head: pl.DataFrame) -> pl.DataFrame:
    heads = per_head.filter(pl.col("dataset") != POOLED)
    return pl.concat([heads, heads.with_columns(dataset=pl.lit(POOLED))], how="vertical_relaxed")


def check_approximation_every_head(per_head: pl.DataFrame, approximation_error: float) -> list[Row]:
    """App. E.1 / Fig. 7: ``|rho - rho_hat|`` (approximation (2) of Theorem 5.1) is below
    ``approximation_error`` (paper: 0.1) for every head, for ``X`` and ``X + WZ``, at each pair's
    largest context length (the paper's Fig. 7 uses 512)."""
    require(
        per_head, ["model", "dataset", "context_length", "abs_err_x", "abs_err_xwz"], "per_head"
    )
    rows = []
    heads = _largest_context(_with_pooled_heads(per_head))
    for (model, dataset), h in heads.group_by("model", "dataset", maintain_order=True):
        err = h.select(pl.max_horizontal("abs_err_x", "abs_err_xwz").alias("e"))["e"]
        worst = float(err.max())
        n_over = int((err >= approximation_error).sum())
        rows.append(
            row(
                str(model),
                str(dataset),
                f"T'={int(h['context_length'][0])}, {h.height} heads",
                f"max error {worst:.3f} (X: {float(h['abs_err_x'].max()):.3g}, "
                f"X+WZ: {float(h['abs_err_xwz'].max()):.3g})",
                worst,
                f"max over heads of |rho - rho_hat| < {approximation_error:g}",
                worst < approximation_error,
                f"{n_over} of {h.height} heads have an error >= {approximation_error:g}",
            )
        )
    return rows


def check_approximation_most_heads(
    per_head: pl.DataFrame, approximation_error: float, most: float
) -> list[Row]:
    """§5: the approximation is accurate "for most individual attention heads": more than
    ``most`` of the heads have ``|rho - rho_hat| < approximation_error`` for both ``X`` and
    ``X + WZ``."""
    require(
        per_head, ["model", "dataset", "context_length", "abs_err_x", "abs_err_xwz"], "per_head"
    )
    rows = []
    heads = _largest_context(_with_pooled_heads(per_head))
    for (model, dataset), h in heads.group_by("model", "dataset", maintain_order=True):
        err = h.select(pl.max_horizontal("abs_err_x", "abs_err_xwz").alias("e"))["e"]
        frac = float((err < approximation_error).mean())
        rows.append(
            row(
                str(model),
                str(dataset),
                f"T'={int(h['context_length'][0])}, {h.height} heads",
                f"{pct(frac)} of heads within {approximation_error:g}",
                frac,
                f"fraction of heads with error < {approximation_error:g} > {most:g}",
                frac > most,
                f"{pct(frac)} of heads have both errors below {approximation_error:g}",
            )
        )
    return rows


def check_mean_approximation(
    summary: pl.DataFrame, approximation_relative_offset: float
) -> list[Row]:
    """§5 / Fig. 2 left: the head-averaged ``rho`` and approximation (2) are in "excellent
    agreement" for ``X`` and ``X + WZ`` (head update not rescaled) across context lengths.

    The figure's two curves are compared on the figure's own scale
    (:func:`sinkscope.oversmoothing.summary.approximation_offsets`): the largest gap over ``T'`` between
    the solid (empirical) and the dashed (approximation) curve, relative to the empirical curve's
    whole change across ``T'`` (``max - min``). Holds if that ratio is at most
    ``approximation_relative_offset`` for both components. An absolute bound would not do: the
    head-averaged curves change by only a few hundredths across ``T'`` here, so an offset as
    large as the whole curve would pass Fig. 7's per-head 0.1."""
    require(
        summary,
        [
            "model",
            "dataset",
            "context_length",
            "mean_rho_x",
            "mean_rhohat_x",
            "mean_rho_xwz",
            "mean_rhohat_xwz",
        ],
        "summary",
    )
    from sinkscope.oversmoothing.summary import approximation_offsets

    test = f"largest |gap| / range across T' <= {approximation_relative_offset:g} for X and X+WZ"
    rows = []
    offsets = model_dataset_order(approximation_offsets(summary))
    for r in offsets.iter_rows(named=True):
        lengths = sorted(
            summary.filter((pl.col("model") == r["model"]) & (pl.col("dataset") == r["dataset"]))[
                "context_length"
            ].to_list()
        )
        setting = f"T' in {lengths}"
        if r["rel_offset"] is None:
            rows.append(
                row(
                    r["model"],
                    r["dataset"],
                    setting,
                    "n/a",
                    None,
                    test,
                    None,
                    "one context length: no curve across T' to compare",
                )
            )
            continue
        parts = {
            c: f"{name}: largest gap {r[f'signed_offset_{c}']:+.2g} = "
            f"{r[f'rel_offset_{c}']:.2g} x the curve's range {r[f'range_{c}']:.2g}"
            for c, name in (("x", "X"), ("xwz", "X+WZ"))
        }
        worst = "xwz" if r["rel_offset_xwz"] >= r["rel_offset_x"] else "x"
        rows.append(
            row(
                r["model"],
                r["dataset"],
                setting,
                parts[worst],
                r["rel_offset"],
                test,
                r["rel_offset"] <= approximation_relative_offset,
                f"{parts['x']}; {parts['xwz']} (gap = empirical - approximation, head means; "
                "Fig. 2 left's second title line)",
            )
        )
    return rows


def _difference_rows(
    summary: pl.DataFrame,
    larger: str,
    smaller: str | None,
    min_difference: float,
    what: str,
    needs: str | None = None,
) -> list[Row]:
    """Rows testing ``larger - smaller > min_difference`` (``smaller=None``: 0) at the largest T'."""
    cols = ["model", "dataset", "context_length", "n_heads", larger]
    cols += [c for c in (smaller, needs) if c]
    require(summary, cols, "oversmoothing summary")
    rows = []
    test = f"{larger}{f' - {smaller}' if smaller else ''} > {min_difference:g}"
    for r in _largest_context(summary).iter_rows(named=True):
        a = r[larger]
        b = r[smaller] if smaller else 0.0
        setting = f"T'={r['context_length']}, {r['n_heads']} heads"
        if needs and not r[needs]:
            rows.append(
                row(
                    r["model"],
                    r["dataset"],
                    setting,
                    "n/a",
                    None,
                    test,
                    None,
                    f"no heads to average over ({needs} = 0)",
                )
            )
            continue
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            rows.append(
                row(r["model"], r["dataset"], setting, "n/a", None, test, None, "value missing")
            )
            continue
        diff = a - b
        measured = f"{what}: {a:.4f}" + (f" vs {b:.4f} (difference {diff:+.4f})" if smaller else "")
        rows.append(
            row(
                r["model"],
                r["dataset"],
                setting,
                measured,
                diff,
                test,
                diff > min_difference,
                f"{larger} = {a:.4f}" + (f", {smaller} = {b:.4f}" if smaller else ""),
            )
        )
    return rows


def check_w_decreases_similarity(summary: pl.DataFrame, min_difference: float) -> list[Row]:
    """§5 / Fig. 2 right: applying ``W`` decreases the average cosine:
    ``rho(X) > rho(X + s_l WZ)``, averaged over all heads. Basis of Fig. 2 right (§5: "The
    attention contribution is rescaled to match the magnitude of the original token matrix",
    App. E.1 eq. (11)); the unrescaled ``X + WZ`` of Fig. 2 left is the approximation's basis,
    not this claim's."""
    return _difference_rows(
        summary, "mean_rho_x", "mean_rho_xwz_s", min_difference, "rho(X) vs rho(X + s_l WZ)"
    )


def check_attention_raises_similarity(summary: pl.DataFrame, min_difference: float) -> list[Row]:
    """§5 / Figs. 2, 6: attention raises the average cosine on average:
    ``rho(X + WZA^T) - rho(X) > 0`` (rescaled), averaged over heads."""
    return _difference_rows(
        summary, "mean_increase_attn_s", None, min_difference, "mean rho(X+WZA^T) - rho(X)"
    )


def check_dense_heads_raise_more(summary: pl.DataFrame, min_difference: float) -> list[Row]:
    """§5 / Figs. 2, 6: the increase is larger for heads with uniformity above the threshold
    (paper: 0.6) than for all heads."""
    return _difference_rows(
        summary,
        "mean_increase_attn_s_dense",
        "mean_increase_attn_s",
        min_difference,
        "increase for dense heads vs all heads",
        needs="n_dense",
    )


def check_uniform_raises_more(summary: pl.DataFrame, min_difference: float) -> list[Row]:
    """§5 / Figs. 2, 6: uniform attention ``A_u`` raises the average cosine more than the learned
    attention: ``rho(X + WZA_u^T) > rho(X + WZA^T)`` on average (rescaled)."""
    return _difference_rows(
        summary,
        "mean_increase_unif_s",
        "mean_increase_attn_s",
        min_difference,
        "increase under uniform vs learned attention",
    )


def _condition_setting(r: dict[str, Any]) -> str:
    return f"T'={r['context_length']}, {r['n_non_sink']} non-sink heads of {r['n_heads']}"


def check_condition_i_about_half(summary: pl.DataFrame, half_band: float) -> list[Row]:
    """§5 / Figs. 8-9: "roughly half of the heads satisfy condition (i)" ``beta tr(BW) > 0``:
    ``|frac_cond_i_s_non_sink - 1/2| <= half_band``, on the heads Figs. 8-9 show
    (:data:`sinkscope.oversmoothing.summary.CONDITION_BASIS`; condition (i) does not depend on
    ``s_l``)."""
    cols = ["model", "dataset", "context_length", "n_heads", "n_non_sink"]
    cols += ["n_cond_i_s_non_sink", "frac_cond_i_s_non_sink"]
    require(summary, cols, "oversmoothing summary")
    test = f"|frac_cond_i_s_non_sink - 0.5| <= {half_band:g}"
    return _condition_rows(summary, "i", test, lambda x: abs(x - 0.5) <= half_band, lambda r: "")


def check_condition_ii_few(summary: pl.DataFrame, few_max_fraction: float) -> list[Row]:
    """§5 / Figs. 8-9, App. E.1: few heads satisfy condition (ii)
    ``beta tr(BW) + tr(BW^T W) < 0``: ``frac_cond_ii_s_non_sink <= few_max_fraction`` on the
    heads and map of Figs. 8-9 (:data:`sinkscope.oversmoothing.summary.CONDITION_BASIS`). Condition (ii)
    depends on the scale of the map; the reason also gives the share for the unscaled ``W``
    (named as such; not plotted)."""
    cols = ["model", "dataset", "context_length", "n_heads", "n_non_sink"]
    cols += ["n_cond_ii_s_non_sink", "frac_cond_ii_s_non_sink", "frac_cond_ii_non_sink"]
    require(summary, cols, "oversmoothing summary")
    test = f"frac_cond_ii_s_non_sink <= {few_max_fraction:g}"
    return _condition_rows(
        summary,
        "ii",
        test,
        lambda x: x <= few_max_fraction,
        lambda r: f"; for the unscaled head map W (not plotted): {pct(r['frac_cond_ii_non_sink'])}",
    )


def _condition_rows(
    summary: pl.DataFrame,
    condition: str,
    test: str,
    passes: Callable[[float], bool],
    extra_reason: Callable[[dict[str, Any]], str],
) -> list[Row]:
    """One row per model and dataset at the largest context length for condition ``(i)`` or
    ``(ii)`` of Theorem 5.1 on the non-sink heads and map of Figs. 8-9 (``n_cond_<c>_s_non_sink``
    of ``n_non_sink``); "n/a" where every head is a sink head."""
    from sinkscope.oversmoothing.summary import CONDITION_BASIS

    rows = []
    for r in _largest_context(summary).iter_rows(named=True):
        x = r[f"frac_cond_{condition}_s_non_sink"]
        if x is None or math.isnan(x):
            rows.append(
                row(
                    r["model"],
                    r["dataset"],
                    _condition_setting(r),
                    "n/a",
                    None,
                    test,
                    None,
                    "every head is a sink head",
                )
            )
            continue
        counts = f"{r[f'n_cond_{condition}_s_non_sink']} of {r['n_non_sink']} non-sink heads"
        rows.append(
            row(
                r["model"],
                r["dataset"],
                _condition_setting(r),
                f"{counts} ({pct(x)}) satisfy ({condition})",
                x,
                test,
                passes(x),
                f"{counts} satisfy condition ({condition}); basis: {CONDITION_BASIS} (Figs. 8-9 "
                f"titles){extra_reason(r)}",
            )
        )
    return rows


def check_predicted_signs(summary: pl.DataFrame, most: float) -> list[Row]:
    """§5 / Figs. 8-9: the monotonicity predicted by Theorem 5.1 mostly holds: among the non-sink
    heads with a prediction (condition (i) or (ii) for ``s_l W``), the share whose ``rho``
    changes with the predicted sign both from ``X+WZ`` to ``X+WZA^T`` (Fig. 8) and on to
    ``X+WZA_u^T`` (Fig. 9) is > ``most`` (App. E.1: "Both quantities should be positive when ...
    negative when ..."). The measured text also gives each figure's own share, as their titles
    do."""
    cols = ["model", "dataset", "context_length", "n_predicted_s"]
    cols += ["agree_attn_s", "agree_unif_s", "agree_both_s"]
    require(summary, cols, "oversmoothing summary")
    from sinkscope.oversmoothing.summary import CONDITION_BASIS

    rows = []
    test = f"agree_both_s > {most:g}"
    for r in _largest_context(summary).iter_rows(named=True):
        x = r["agree_both_s"]
        setting = f"T'={r['context_length']}, {r['n_predicted_s']} non-sink heads with a prediction"
        if x is None or math.isnan(x):
            rows.append(
                row(
                    r["model"],
                    r["dataset"],
                    setting,
                    "n/a",
                    None,
                    test,
                    None,
                    "no non-sink head satisfies condition (i) or (ii)",
                )
            )
            continue
        rows.append(
            row(
                r["model"],
                r["dataset"],
                setting,
                f"{pct(x)} follow both predicted signs (Fig. 8 alone: "
                f"{pct(r['agree_attn_s'])}, Fig. 9 alone: {pct(r['agree_unif_s'])})",
                x,
                test,
                x > most,
                f"{pct(x)} of the {r['n_predicted_s']} heads with a prediction change rho with "
                f"the predicted sign in both Figs. 8 and 9; basis: {CONDITION_BASIS}",
            )
        )
    return rows


def check_similarity_stays_positive(summary: pl.DataFrame) -> list[Row]:
    """App. E.1 / Fig. 4: the average token cosine similarity stays positive across layers (before
    and after each attention update): smallest per-layer ``rho`` > 0 (the paper's own bound)."""
    require(
        summary, ["model", "dataset", "context_length", "min_rho_layers"], "oversmoothing summary"
    )
    rows = []
    for (model, dataset), s in model_dataset_order(summary).group_by(
        "model", "dataset", maintain_order=True
    ):
        x = float(s["min_rho_layers"].min())
        rows.append(
            row(
                str(model),
                str(dataset),
                f"T' in {sorted(s['context_length'].to_list())}",
                f"smallest layer rho {x:.3f}",
                x,
                "min over layers and T' of rho > 0",
                x > 0,
                f"the smallest average cosine over layers and context lengths is {x:.3f}",
            )
        )
    return rows
