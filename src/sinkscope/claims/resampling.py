"""Intervals over sequences of a claims row's statistic, from per-sequence tables.

A claim whose value is a mean over the extraction's sequences (or a function of such means:
a median, a minimum over layers, a maximum over heads) takes its interval from a percentile
bootstrap over those sequences: :func:`sequence_interval` cuts a per-sequence table into the
row's strata (one pair; for a row pooled over datasets, ``dataset = "all"``, every dataset of
the model, each resampled on its own), asks the analysis's ``draws`` function for the statistic
on every resample, and returns the :class:`~sinkscope.claims.verdicts.Interval` with its unit
named and its floor of ``claims.intervals.min_units`` (per dataset where pooled);
:func:`sequence_reading` decides a row on it, and :func:`more_sequences_text` says what an
inconclusive row would need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from sinkscope.claims.intervals import needed_units, percentile_interval, row_seed
from sinkscope.claims.tolerances import DEFAULT_TOLERANCES
from sinkscope.claims.verdicts import (
    INCONCLUSIVE,
    Interval,
    Reading,
    decide,
    needed_text,
    too_few_units_text,
)
from sinkscope.labels import POOLED

__all__ = ["Draws", "more_sequences_text", "sequence_interval", "sequence_reading"]

#: An analysis's resampling function: ``(strata, n_resamples, rng) -> (sample value, draws)``.
Draws = Callable[[list[pl.DataFrame], int, np.random.Generator], tuple[float, np.ndarray]]


def sequence_interval(
    table: pl.DataFrame,
    model: str,
    dataset: str,
    draws: Draws,
    intervals: Mapping[str, Any],
    key: Sequence[str] = (),
    datasets: Sequence[str] | None = None,
    accept: Callable[[list[pl.DataFrame]], bool] | None = None,
) -> Interval | None:
    """The percentile bootstrap interval over sequences of ``draws``' statistic for the row
    ``(model, dataset)``, from the per-sequence ``table`` (columns ``model, dataset, sequence``
    and what ``draws`` reads). The strata are ``datasets`` where given (all of them must be in
    the table), else the row's dataset, or every dataset of the model for a pooled row; None
    where the table holds none (or, with ``datasets``, not all) of them. ``intervals``: the
    config's ``claims.intervals`` (over :data:`DEFAULT_TOLERANCES`); the generator is seeded with
    :func:`~sinkscope.claims.intervals.row_seed` of the model, dataset and ``key``."""
    rows = table.filter(pl.col("model") == model)
    if datasets is not None:
        rows = rows.filter(pl.col("dataset").is_in(list(datasets)))
    elif dataset != POOLED:
        rows = rows.filter(pl.col("dataset") == dataset)
    strata = [part for _, part in rows.sort("dataset").group_by("dataset", maintain_order=True)]
    if not strata or (datasets is not None and len(strata) != len(set(datasets))):
        return None
    if accept is not None and not accept(strata):
        return None
    settings = {**DEFAULT_TOLERANCES["intervals"], **intervals}
    level, n_resamples = float(settings["level"]), int(settings["n_resamples"])
    rng = np.random.default_rng(row_seed(settings["seed"], model, dataset, *key))
    _sample, resampled = draws(strata, n_resamples, rng)
    if len(resampled) == 0:  # every resample left out (e.g. none with a dense head)
        return None
    counts = [part["sequence"].n_unique() for part in strata]
    unit = f"bootstrap over the {sum(counts)} sequences"
    if len(strata) > 1:
        unit += f" stratified by dataset (at fewest {min(counts)} per dataset)"
    kept = "" if len(resampled) == n_resamples else f" ({len(resampled)} kept)"
    return Interval(
        *percentile_interval(resampled, level),
        f"{unit}, {n_resamples} resamples{kept}",
        level,
        n_units=min(counts),
        min_units=int(settings["min_units"]),
    )


def more_sequences_text(interval: Interval, value: float, tolerance: float, pooled: bool) -> str:
    """The reason an interval over sequences left its row inconclusive: too few sequences (per
    dataset where ``pooled``) to decide anything, or an interval across ``tolerance``, with
    about how many sequences would decide it at this effect
    (:func:`~sinkscope.claims.intervals.needed_units`)."""
    units = "sequences per dataset" if pooled else "sequences"
    more = needed_units(interval.n_units or 0, value, interval.low, interval.high, tolerance)
    return too_few_units_text(interval, units, "extraction.n_sequences") or (
        f"; the interval straddles {tolerance:g}: needs more sequences "
        f"({needed_text(more, units)}; extraction.n_sequences)"
    )


def sequence_reading(
    reading: Reading,
    interval: Interval,
    tolerance: float,
    above: bool,
    pooled: bool,
    strict: bool = False,
) -> Reading:
    """``reading`` decided on its ``interval`` over sequences (:func:`~sinkscope.claims.verdicts.
    decide` with ``tolerance``, ``above``, ``strict``); an inconclusive one's reason says how many
    sequences would decide it (:func:`more_sequences_text`; per dataset where ``pooled``)."""
    verdict = decide(interval, tolerance, above=above, strict=strict)
    reason = reading.reason
    if verdict == INCONCLUSIVE:
        reason += more_sequences_text(interval, float(reading.value or 0.0), tolerance, pooled)
    return Reading(
        reading.setting, reading.measured, reading.value, None, reason, interval, verdict
    )
