"""Check of the StreamingLLM statement on runs without BOS: read the ``head_classes`` summary.

StreamingLLM (seed 003 of the companion notes) says the first tokens become attention sinks
whatever they are, so without BOS the first text token should take over BOS's sink role; the main
study and Barbero et al. (2025) say BOS itself matters. A dataset with ``bos: both``
(:mod:`sinkscope.variants`) gives, per model, the same sequences with BOS (dataset ``<name>``) and
without it (``<name>.no-bos``), and the head classes of both: a "sink head" puts at least
``head_classes.sink`` of its attention mass on position 0 -- BOS in the first pair, the first text
token in the second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from sinkscope.claims.verdicts import (
    INCONCLUSIVE,
    NOT_RUN,
    Interval,
    Reading,
    Row,
    decide,
    needed_text,
    not_applicable,
    pct,
    require,
    row,
    rows_per,
)
from sinkscope.stats.intervals import needed_units
from sinkscope.variants import NO_BOS_SUFFIX, source_dataset

__all__ = ["check_first_token_becomes_sink"]

_NO_PAIR = (
    f"{NOT_RUN} (no no-BOS pair: set datasets.<name>.bos: both to extract a dataset's "
    "sequences without BOS too)"
)


def _ratio_interval(r: Mapping[str, Any] | None) -> Interval | None:
    """The interval of the row's ratio from simultaneous per-head intervals
    (:func:`sinkscope.heads.summary.sink_ratio_intervals`), None where there is none."""
    if r is None:
        return None
    return Interval(
        r["ratio_lo"],
        r["ratio_hi"],
        f"the fewest to the most sink heads that simultaneous per-head intervals of BOS mass "
        f"allow (t ({r['n_units'] - 1} df), Bonferroni over the heads of both pairs), bootstrap "
        f"SE over the {r['n_units']} sequences (the same with and without BOS), "
        f"{r['n_resamples']} resamples",
        r["level"],
        n_units=r["n_units"],
    )


def check_first_token_becomes_sink(
    head_classes: pl.DataFrame, ratio_min: float, intervals: pl.DataFrame | None = None
) -> list[Row]:
    """StreamingLLM: without BOS, the first token becomes the sink.

    Per model and dataset with a no-BOS variant: ``r = frac_sink(no-BOS) / frac_sink(BOS)``, the
    share of heads with at least ``head_classes.sink`` of their mass on position 0 without BOS
    (the first text token ``t_1``) over the share with it on BOS, over the SAME text tokens;
    reproduced when ``r >= ratio_min`` (``claims.streaming.no_bos_sink_ratio_min``). Not
    applicable when the BOS pair has no sink head (nothing to take over), or, one row per model
    of the table, when the config has no no-BOS pair. The row's ``dataset``
    is the no-BOS id. Given ``intervals`` (:func:`sinkscope.heads.summary.sink_ratio_intervals`:
    simultaneous per-head intervals over the sequences), the verdict is decided on the ratio's interval;
    without them, on the ratio itself.
    """
    require(head_classes, ["model", "dataset", "n_heads", "frac_sink"], "head_classes")
    no_bos = head_classes.filter(pl.col("dataset").str.ends_with(NO_BOS_SUFFIX))
    if no_bos.is_empty():
        models = sorted(set(head_classes["model"].to_list()))
        return [row(m, "-", "-", "n/a", None, "-", None, _NO_PAIR) for m in models]
    frac = {(r["model"], r["dataset"]): r["frac_sink"] for r in head_classes.iter_rows(named=True)}
    ratio_rows = (
        {}
        if intervals is None
        else {(r["model"], r["dataset"]): r for r in intervals.iter_rows(named=True)}
    )

    def reading(r: Mapping[str, Any]) -> Reading:
        base = source_dataset(r["dataset"])
        with_bos = frac.get((r["model"], base))
        setting = f"{r['n_heads']} heads, {base} with / without BOS"
        if with_bos is None:
            return not_applicable(setting, f"no BOS pair {r['model']} x {base} to compare with")
        without = r["frac_sink"]
        measured = f"sink heads at position 0: {pct(with_bos)} with BOS, {pct(without)} without"
        if with_bos == 0:
            return not_applicable(setting, "no sink head at BOS: nothing to take over", measured)
        ratio = without / with_bos
        verb = "takes over" if ratio >= ratio_min else "does not take over"
        reason = (
            f"without BOS the first text token {verb} the sink role: {pct(without)} of the heads "
            f"put their mass on it vs {pct(with_bos)} on BOS (ratio {ratio:.2f})"
        )
        interval = _ratio_interval(ratio_rows.get((r["model"], r["dataset"])))
        if interval is None:
            return Reading(setting, measured, ratio, ratio >= ratio_min, reason)
        verdict = decide(interval, ratio_min, above=True)
        if verdict == INCONCLUSIVE:
            # a resample without a sink head at BOS makes the upper end infinite: no count then
            size = (
                needed_text(
                    needed_units(
                        interval.n_units or 0,
                        ratio,
                        interval.low,
                        interval.high,
                        ratio_min,
                        interval.level,
                    ),
                    "sequences",
                )
                + "; "
                if math.isfinite(interval.high)
                else ""
            )
            reason += (
                f"; the interval straddles {ratio_min:g}: needs more sequences "
                f"({size}extraction.n_sequences)"
            )
        return Reading(setting, measured, ratio, None, reason, interval, verdict)

    return rows_per(
        no_bos.sort("model", "dataset").iter_rows(named=True),
        f"frac_sink(no BOS) / frac_sink(BOS) >= {ratio_min:g}",
        reading,
    )
