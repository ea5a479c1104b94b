"""Checks of the StreamingLLM notes: read the ``streaming_*`` summary tables.

Evicting the first tokens raises perplexity; a few sink tokens restore it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from sinkscope.claims.tolerances import DEFAULT_TOLERANCES
from sinkscope.claims.verdicts import (
    INCONCLUSIVE,
    Interval,
    Reading,
    Row,
    decide,
    needed_text,
    not_applicable,
    require,
    rows_per,
)
from sinkscope.stats.intervals import (
    block_bootstrap_interval,
    fieller_interval,
    needed_units,
    student_t_quantile,
)

# sinkscope.streaming.summary imports torch: the checks import its number formats when they run,
# so importing this module does not load torch.

__all__ = [
    "check_eviction_raises_perplexity",
    "check_sink_tokens_restore",
    "recovered_fraction",
]


def check_eviction_raises_perplexity(
    sink_heads: pl.DataFrame, sharp_ppl_ratio: float, intervals: Mapping[str, Any] | None = None
) -> list[Row]:
    """StreamingLLM notes: evicting the first tokens (window-only cache) raises perplexity sharply:
    window-only / dense perplexity on the evicting positions ``>= sharp_ppl_ratio`` (2 = doubles).
    The measured factor is the summary figure's bar label
    (:func:`sinkscope.streaming.summary.eviction_label`).

    The sampling unit is the scored position (its NLL excess averaged over the streams,
    ``window_excess_by_position``, :func:`sinkscope.streaming.summary.eviction_excess`); the
    log ratio is their mean. Neighbouring tokens' NLLs are correlated, so its interval is a
    moving-block bootstrap over runs of ``intervals["block_tokens"]`` positions
    (:func:`sinkscope.stats.intervals.block_bootstrap_interval`), exponentiated to the ratio,
    and the verdict is decided on it: its t counts the blocks' degrees of freedom."""
    from sinkscope.streaming.summary import eviction_label, perplexity_factor

    settings = {**DEFAULT_TOLERANCES["intervals"], **(intervals or {})}
    require(
        sink_heads,
        ["model", "dataset", "window", "window_log_ppl_ratio", "window_excess_by_position"],
        "streaming sink_heads",
    )

    def reading(r: Mapping[str, Any]) -> Reading:
        ratio = math.exp(r["window_log_ppl_ratio"])
        setting = f"window L={r['window']}"
        measured = f"perplexity {eviction_label(r['window_log_ppl_ratio'])} vs dense"
        text = (
            f"evicting all but the last {r['window']} tokens multiplies perplexity by "
            f"{perplexity_factor(r['window_log_ppl_ratio'])}"
        )
        excess = np.asarray(r["window_excess_by_position"] or [], dtype=np.float64)
        block = int(settings["block_tokens"])
        if excess.size < 2 * block:
            return Reading(
                setting,
                measured,
                ratio,
                None,
                f"{text}; {excess.size} scored positions, fewer than two blocks of {block}: "
                "no interval (longer streams: streaming.params.stream_length)",
                verdict=INCONCLUSIVE,
            )
        low, high = block_bootstrap_interval(
            excess,
            np.mean,
            block,
            int(settings["n_resamples"]),
            int(settings["seed"]),
            float(settings["level"]),
        )
        interval = Interval(
            math.exp(low),
            math.exp(high),
            f"t ({excess.size // block - 1} df), moving-block bootstrap SE over {excess.size} "
            f"scored positions ({excess.size // block} blocks of {block}, mean over streams), "
            f"{int(settings['n_resamples'])} resamples",
            float(settings["level"]),
            n_units=excess.size // block,
        )
        verdict = decide(interval, sharp_ppl_ratio, above=True)
        if verdict == INCONCLUSIVE:
            blocks = needed_units(
                excess.size // block,
                float(excess.mean()),
                low,
                high,
                math.log(sharp_ppl_ratio),
                float(settings["level"]),
            )
            text += (
                f"; the interval straddles x{sharp_ppl_ratio:g}: needs more scored tokens "
                f"({needed_text(None if blocks is None else blocks * block, 'scored positions')}"
                "; streaming.params.n_streams or stream_length)"
            )
        return Reading(setting, measured, ratio, None, text, interval, verdict)

    table = sink_heads.unique(["model", "dataset", "window"]).sort("model", "dataset", "window")
    return rows_per(
        table.iter_rows(named=True), f"window-only ppl / dense ppl >= {sharp_ppl_ratio:g}", reading
    )


def recovered_fraction(units: np.ndarray) -> float:
    """``(mean window - mean policy) / (mean window - mean re-computation)`` of the rows of
    ``units`` (one row per sampled query: window-only, policy and re-computation NLL); NaN when
    re-computation is not better than window-only."""
    window, policy, recompute = units.mean(axis=0)
    gap = window - recompute
    return float((window - policy) / gap) if gap > 0 else float("nan")


def check_sink_tokens_restore(
    recompute: pl.DataFrame,
    max_sink_tokens: int,
    min_recovered_fraction: float,
    baseline: str = "recompute_bos",
    intervals: Mapping[str, Any] | None = None,
) -> list[Row]:
    """StreamingLLM notes: keeping a few (``<= max_sink_tokens``) first tokens next to the window
    puts the model back in its training distribution. The reference is StreamingLLM's own
    baseline, sliding window with re-computation (the same ``L`` recent tokens, encoded from
    scratch; ``baseline`` names the variant of
    :data:`sinkscope.streaming.recompute.RECOMPUTE_BASELINES`, by default with the BOS token in
    front, the regime the models were trained in): the sink cache must remove at least
    ``min_recovered_fraction`` of the window-only log-perplexity excess over it,
    ``recovered_fraction = (nll_window - nll_sink) / (nll_window - nll_recompute)`` on the same
    sampled tokens (the ``recompute`` table of :func:`sinkscope.streaming.summary.summarize`; the
    recompute figure's annotations, :func:`sinkscope.streaming.summary.recovered_label`).
    Dense is not the reference: a window of ``L`` tokens loses real context that no sink can give
    back. Where re-computation is not better than window-only the claim is not applicable: the
    baseline itself is then out of the model's regime (e.g. Gemma 3 without its BOS).

    The sampling unit is the re-computed query (its NLL averaged over the streams): the
    recovered fraction, a ratio of two paired means over the sampled queries
    (:func:`recovered_fraction`), gets Fieller's interval (``intervals``: the config's
    ``claims.intervals``, :func:`sinkscope.stats.intervals.fieller_interval`), and the verdict
    is decided on it (:func:`sinkscope.claims.verdicts.decide`): the same decision as the paired
    t-test of ``(nll_window - nll_sink) - min_recovered_fraction (nll_window -
    nll_recompute)``, whose spread also sizes the queries an inconclusive row needs. Where
    re-computation's own advantage is not resolved from zero the interval is unbounded."""
    from sinkscope.streaming.summary import recovered_label

    settings = {**DEFAULT_TOLERANCES["intervals"], **(intervals or {})}
    cols = [
        "model", "dataset", "baseline", "window", "kind", "n_sink", "policy_vs_recompute",
        "window_vs_recompute", "recompute_nll", "window_nll", "recovered_fraction",
        "window_nll_by_query", "policy_nll_by_query", "recompute_nll_by_query",
    ]  # fmt: skip
    require(recompute, cols, "streaming recompute")

    def reading(r: Mapping[str, Any]) -> Reading:
        w, s, recovered = (
            r["window_vs_recompute"],
            r["policy_vs_recompute"],
            r["recovered_fraction"],
        )
        setting = f"window L={r['window']}, k={r['n_sink']} sink tokens, vs {baseline}"
        if recovered is None or w <= 0:
            return not_applicable(
                setting,
                f"sliding window with re-computation ({baseline}) is not better than the "
                f"window-only cache here (NLL {r['recompute_nll']:.3f} vs "
                f"{r['window_nll']:.3f}): the baseline is itself out of the model's regime, "
                "so there is no excess to restore",
            )
        by_query = [r["window_nll_by_query"], r["policy_nll_by_query"], r["recompute_nll_by_query"]]
        n_queries = len(by_query[0] or [])
        text = (
            f"the sink tokens remove {recovered_label(recovered)} of the window-only "
            "log-perplexity excess over sliding window with re-computation"
        )
        measured = (
            f"ppl x{math.exp(s):.3f} with sinks vs x{math.exp(w):.3f} window-only "
            "(relative to re-computation)"
        )
        if n_queries < 2:
            return Reading(
                setting,
                measured,
                recovered,
                None,
                f"{text}; fewer than two re-computed queries: no interval "
                "(streaming.params.recompute_samples)",
                verdict=INCONCLUSIVE,
            )
        window, policy, recomputed = (np.asarray(v, dtype=np.float64) for v in by_query)
        level = float(settings["level"])
        low, high = fieller_interval(window - policy, window - recomputed, level)
        interval = Interval(
            low,
            high,
            f"Fieller's interval (t, {n_queries - 1} df) over {n_queries} re-computed queries "
            "(mean over streams), paired",
            level,
            n_units=n_queries,
        )
        verdict = decide(interval, min_recovered_fraction, above=True)
        if verdict == INCONCLUSIVE:
            # rho >= rho_0 is the paired t-test of (window - policy) - rho_0 (window - recompute)
            linear = (window - policy) - min_recovered_fraction * (window - recomputed)
            mean = float(linear.mean())
            half = student_t_quantile(level, n_queries - 1) * float(linear.std(ddof=1))
            half /= math.sqrt(n_queries)
            needed = needed_units(n_queries, mean, mean - half, mean + half, 0.0, level)
            if not math.isfinite(high - low):
                text += (
                    "; re-computation's own advantage over the window-only cache is not resolved "
                    "from zero on these queries, so the ratio's interval is unbounded"
                )
            text += (
                f"; the interval straddles {min_recovered_fraction:g}: needs more re-computed "
                f"queries ({needed_text(needed, 'queries')}; streaming.params.recompute_samples) or "
                "streams"
            )
        return Reading(setting, measured, recovered, None, text, interval, verdict)

    table = recompute.filter(
        (pl.col("baseline") == baseline)
        & (pl.col("kind") == "sink")
        & (pl.col("n_sink") <= max_sink_tokens)
    )
    return rows_per(
        table.sort("model", "dataset", "window", "n_sink").iter_rows(named=True),
        f"recovered fraction vs re-computation >= {min_recovered_fraction:g}",
        reading,
    )
