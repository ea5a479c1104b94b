"""Intervals over sequences of a claims row's statistic, from per-sequence tables.

A claim whose value is a mean over the extraction's sequences (or a function of such means:
a median, a minimum over layers, a maximum over heads) takes its interval from a
bootstrap over those sequences: :func:`sequence_interval` cuts a per-sequence table into the
row's strata (one pair; for a row pooled over datasets, ``dataset = "all"``, every dataset of
the model, each resampled on its own), asks the analysis's ``draws`` function for the statistic
on the sample and on every resample, and returns the t-interval with that bootstrap standard
error (:func:`~sinkscope.stats.intervals.bootstrap_t_interval`; its degrees of freedom are
``sum(n_h - 1)`` over the strata) as an :class:`~sinkscope.claims.verdicts.Interval` with its
unit named; :func:`simultaneous_sequence_intervals` gives one such interval per head (or
layer) at a Bonferroni level, for a maximum, a minimum or a thresholded share over them;
:func:`sequence_reading` decides a row on it, and :func:`more_sequences_text` says what an
inconclusive row would need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from sinkscope.claims.tolerances import DEFAULT_TOLERANCES
from sinkscope.claims.verdicts import (
    INCONCLUSIVE,
    Interval,
    Reading,
    decide,
    needed_text,
)
from sinkscope.labels import POOLED
from sinkscope.stats.intervals import (
    bootstrap_t_interval,
    needed_units,
    row_seed,
    simultaneous_t_intervals,
)

__all__ = [
    "Draws",
    "Simultaneous",
    "UnitDraws",
    "more_sequences_text",
    "sequence_interval",
    "sequence_reading",
    "simultaneous_sequence_intervals",
]

#: An analysis's resampling function: ``(strata, n_resamples, rng) -> (sample value, draws)``.
Draws = Callable[[list[pl.DataFrame], int, np.random.Generator], tuple[float, np.ndarray]]
#: An analysis's per-unit resampling function (one statistic per head or layer):
#: ``(strata, n_resamples, rng) -> ((C,) sample values, (n_resamples, C) draws)``.
UnitDraws = Callable[[list[pl.DataFrame], int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def _strata(
    table: pl.DataFrame,
    model: str,
    dataset: str,
    datasets: Sequence[str] | None,
    accept: Callable[[list[pl.DataFrame]], bool] | None,
) -> list[pl.DataFrame] | None:
    """The row's strata of ``table``: ``datasets`` where given (all of them must be in it), else
    the row's dataset, or every dataset of the model for a pooled row; None where the table
    holds none (or, with ``datasets``, not all) of them, where ``accept`` refuses them, or where
    a stratum has one sequence (no spread)."""
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
    if min(part["sequence"].n_unique() for part in strata) < 2:
        return None
    return strata


def _drawn(
    table: pl.DataFrame,
    model: str,
    dataset: str,
    draws: Callable[[list[pl.DataFrame], int, np.random.Generator], tuple[Any, np.ndarray]],
    intervals: Mapping[str, Any],
    key: Sequence[str],
    datasets: Sequence[str] | None,
    accept: Callable[[list[pl.DataFrame]], bool] | None,
) -> tuple[list[pl.DataFrame], float, int, Any, np.ndarray] | None:
    """The row's strata (:func:`_strata`; None without them), its level and resamples (the
    config's ``claims.intervals`` over :data:`DEFAULT_TOLERANCES`) and ``draws`` on them with a
    generator seeded by :func:`~sinkscope.stats.intervals.row_seed` of the model, dataset and
    ``key``: ``(strata, level, n_resamples, sample, resampled)``."""
    strata = _strata(table, model, dataset, datasets, accept)
    if strata is None:
        return None
    settings = {**DEFAULT_TOLERANCES["intervals"], **intervals}
    level, n_resamples = float(settings["level"]), int(settings["n_resamples"])
    rng = np.random.default_rng(row_seed(settings["seed"], model, dataset, *key))
    sample, resampled = draws(strata, n_resamples, rng)
    return strata, level, n_resamples, sample, resampled


def _sequences_unit(strata: list[pl.DataFrame], n_resamples: int, kept: int) -> str:
    counts = [part["sequence"].n_unique() for part in strata]
    unit = f"bootstrap SE over the {sum(counts)} sequences"
    if len(strata) > 1:
        unit += f" stratified by dataset (at fewest {min(counts)} per dataset)"
    return unit + f", {n_resamples} resamples" + ("" if kept == n_resamples else f" ({kept} kept)")


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
    """The t-interval with the bootstrap standard error over sequences of ``draws``' statistic
    (:func:`~sinkscope.stats.intervals.bootstrap_t_interval`) for the row ``(model,
    dataset)``, from the per-sequence ``table`` (columns ``model, dataset, sequence`` and what
    ``draws`` reads). The strata are ``datasets`` where given (all of them must be in the table),
    else the row's dataset, or every dataset of the model for a pooled row; None where the table
    holds none (or, with ``datasets``, not all) of them. ``intervals``: the config's
    ``claims.intervals`` (over :data:`DEFAULT_TOLERANCES`); the generator is seeded with
    :func:`~sinkscope.stats.intervals.row_seed` of the model, dataset and ``key``. The t has
    ``sum(n_h - 1)`` degrees of freedom over the strata."""
    drawn = _drawn(table, model, dataset, draws, intervals, key, datasets, accept)
    if drawn is None:
        return None
    strata, level, n_resamples, sample, resampled = drawn
    if len(resampled) == 0:  # every resample left out (e.g. none with a dense head)
        return None
    counts = [part["sequence"].n_unique() for part in strata]
    dof = sum(c - 1 for c in counts)
    return Interval(
        *bootstrap_t_interval(sample, resampled, min(counts), level, dof),
        f"t ({dof} df), {_sequences_unit(strata, n_resamples, len(resampled))}",
        level,
        n_units=min(counts),
    )


@dataclass(frozen=True)
class Simultaneous:
    """Simultaneous intervals over sequences of many statistics (one per head or layer,
    :func:`simultaneous_sequence_intervals`): their values on the sample, their ends, and the
    words and counts an :class:`~sinkscope.claims.verdicts.Interval` made from them states."""

    values: np.ndarray
    low: np.ndarray
    high: np.ndarray
    level: float
    n_units: int
    unit: str

    def interval(self, low: float, high: float, what: str, percent: bool = False) -> Interval:
        """An :class:`~sinkscope.claims.verdicts.Interval` of a function of the statistics
        (``what``: "the largest of 72 heads' errors") whose ends ``low, high`` that function
        takes of the simultaneous ends (``percent``: a share its row states in percent)."""
        return Interval(
            low, high, f"{what}: {self.unit}", self.level, n_units=self.n_units, percent=percent
        )


def simultaneous_sequence_intervals(
    table: pl.DataFrame,
    model: str,
    dataset: str,
    draws: UnitDraws,
    intervals: Mapping[str, Any],
    what: str,
    key: Sequence[str] = (),
    datasets: Sequence[str] | None = None,
) -> Simultaneous | None:
    """Simultaneous intervals over sequences (:func:`~sinkscope.stats.intervals.
    simultaneous_t_intervals`, Bonferroni over the statistics) of every statistic ``draws``
    gives for the row ``(model, dataset)`` (``what`` names them in the unit: "heads"), with the
    strata, seed and degrees of freedom of :func:`sequence_interval`. A maximum, a minimum or a
    thresholded share of the statistics is then read off their ends, at ``level`` at least."""
    drawn = _drawn(table, model, dataset, draws, intervals, key, datasets, None)
    if drawn is None:
        return None
    strata, level, n_resamples, values, resampled = drawn
    counts = [part["sequence"].n_unique() for part in strata]
    dof = sum(c - 1 for c in counts)
    low, high = simultaneous_t_intervals(values, resampled, min(counts), level, dof)
    unit = f"t ({dof} df) per {what}, Bonferroni over {values.size} {what}s, " + _sequences_unit(
        strata, n_resamples, n_resamples
    )
    return Simultaneous(values, low, high, level, min(counts), unit)


def more_sequences_text(interval: Interval, value: float, tolerance: float, pooled: bool) -> str:
    """The reason an interval over sequences left its row inconclusive: it straddles
    ``tolerance``, with about how many sequences (per dataset where ``pooled``) would decide it
    at this effect (:func:`~sinkscope.stats.intervals.needed_units`)."""
    units = "sequences per dataset" if pooled else "sequences"
    more = needed_units(
        interval.n_units or 0, value, interval.low, interval.high, tolerance, interval.level
    )
    return (
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
