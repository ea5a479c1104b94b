"""The verdict vocabulary of the claims table and the helpers every check builds its rows with.

Verdicts (:data:`VERDICTS`): ``reproduced`` / ``not reproduced`` when the measured number passes /
fails the test; where the check has an interval (:class:`Interval`, from the value's sampling
unit), when the whole interval lies on the claim's / the other side of the tolerance, and
``inconclusive`` when it straddles it (:func:`decide`); ``not applicable`` when the claim cannot
be tested here -- the analysis did not run in this config (:data:`NOT_RUN`), or the model has
nothing the claim speaks about. A row
(:data:`Row`, built by :func:`row`) holds the columns of :data:`COLUMNS` after the claim's own
(``claim_id``, ``claim``, ``source``, ``paper_value``). A check that gives one row per row of a
table states its reading as a function returning a :class:`Reading` (or :func:`not_applicable`)
and leaves the loop to :func:`rows_per`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

__all__ = [
    "COLUMNS",
    "INCONCLUSIVE",
    "NOT_APPLICABLE",
    "NOT_REPRODUCED",
    "NOT_RUN",
    "REPRODUCED",
    "SYNTHETIC",
    "VERDICTS",
    "Interval",
    "Reading",
    "Row",
    "Tables",
    "combine",
    "decide",
    "head_count",
    "needed_text",
    "not_applicable",
    "num",
    "pct",
    "require",
    "row",
    "rows_per",
    "where_heads",
]

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_APPLICABLE = "not applicable"
INCONCLUSIVE = "inconclusive"
VERDICTS = (NOT_REPRODUCED, INCONCLUSIVE, REPRODUCED, NOT_APPLICABLE)
#: Reason of a claim whose analysis is not part of this config.
NOT_RUN = "analysis not run in this config"
#: ``model`` of the claims about synthetic experiments (no pretrained model involved).
SYNTHETIC = "synthetic"
#: Columns of the claims table, in order.
COLUMNS: dict[str, Any] = {
    "claim_id": pl.String,
    "claim": pl.String,
    "source": pl.String,
    "paper_value": pl.String,
    "model": pl.String,
    "dataset": pl.String,
    "setting": pl.String,
    "measured": pl.String,
    "value": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "interval": pl.String,
    "test": pl.String,
    "verdict": pl.String,
    "reason": pl.String,
}
Row = dict[str, Any]
Tables = Mapping[str, pl.DataFrame]


@dataclass(frozen=True)
class Interval:
    """An interval of a measured value at ``level`` (0.95: a 95% interval) and how it was made:
    ``unit`` names the method and the sampling unit with its count, e.g. "Newcombe score
    interval over 800 + 800 attacked sequences" (:mod:`sinkscope.stats.intervals`)."""

    low: float
    high: float
    unit: str
    level: float = 0.95
    #: the sampling units a bootstrap interval resamples (None: a closed-form interval)
    n_units: int | None = None
    #: the min to max of a few runs (the seeds of a setup): it has no coverage level to state
    range_of_runs: bool = False
    #: a share whose row states it in percent (the measured column): its ends print the same way
    percent: bool = False

    def text(self) -> str:
        """The interval in words: its level (none for a range of runs; "exact" for a bound that
        holds with certainty, level 1), its ends (in percent for a share its row states in
        percent) and its method."""
        show = pct if self.percent else num
        bounds = f"[{show(self.low)}, {show(self.high)}]"
        if self.range_of_runs:
            return f"{bounds}, {self.unit}"
        if self.level >= 1.0:
            return f"exact {bounds}, {self.unit}"
        return f"{100 * self.level:.0f}% {bounds}, {self.unit}"


def decide(interval: Interval, tolerance: float, above: bool, strict: bool = False) -> str:
    """The verdict of a claim "value >= tolerance" (``above``; ``strict``: ">") or "value <=
    tolerance" (not ``above``; ``strict``: "<") on an interval of the value: reproduced when
    the whole interval satisfies it, not reproduced when none of it does, inconclusive when the
    interval straddles the tolerance (more data could turn it either way). Every interval is
    valid at the sample it was made from (:mod:`sinkscope.stats.intervals`), so a few units
    widen it; they never veto it."""

    def holds(x: float) -> bool:
        if above:
            return x > tolerance if strict else x >= tolerance
        return x < tolerance if strict else x <= tolerance

    low_holds, high_holds = holds(interval.low), holds(interval.high)
    if low_holds and high_holds:
        return REPRODUCED
    if not low_holds and not high_holds:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def needed_text(needed: int | None, units: str) -> str:
    """The power statement of an inconclusive row, from
    :func:`sinkscope.stats.intervals.needed_units`: "about 240 heads at this effect"."""
    if needed is None:
        return "no sample decides a value on the tolerance"
    return f"about {needed:,} {units} at this effect"


def combine(verdicts: Sequence[str]) -> str:
    """One verdict from the :func:`decide` verdicts of a claim's several tests: not reproduced
    when any test fails on its whole interval, reproduced when all hold on theirs, inconclusive
    otherwise."""
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    return REPRODUCED if all(v == REPRODUCED for v in verdicts) else INCONCLUSIVE


def _verdict(passed: bool | None) -> str:
    if passed is None:
        return NOT_APPLICABLE
    return REPRODUCED if passed else NOT_REPRODUCED


def _number(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def row(
    model: str,
    dataset: str,
    setting: str,
    measured: str,
    value: float | None,
    test: str,
    passed: bool | None,
    reason: str,
    interval: Interval | None = None,
    verdict: str | None = None,
) -> Row:
    """One claims row. The verdict is ``verdict`` where given (a decision on ``interval``,
    :func:`decide`), else read from ``passed`` (None: not applicable)."""
    if verdict is not None and verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; known: {VERDICTS}")
    return {
        "model": model,
        "dataset": dataset,
        "setting": setting,
        "measured": measured,
        "value": _number(value),
        "ci_low": None if interval is None else _number(interval.low),
        "ci_high": None if interval is None else _number(interval.high),
        "interval": "" if interval is None else interval.text(),
        "test": test,
        "verdict": _verdict(passed) if verdict is None else verdict,
        "reason": reason,
    }


@dataclass(frozen=True)
class Reading:
    """What a check reads off one table row: the columns of :func:`row` after ``model`` and
    ``dataset`` but the ``test`` (which :func:`rows_per` takes once per check); ``passed`` None
    makes the row not applicable; ``interval`` and ``verdict`` as in :func:`row`."""

    setting: str
    measured: str
    value: float | None
    passed: bool | None
    reason: str
    interval: Interval | None = None
    verdict: str | None = None


def not_applicable(setting: str, reason: str, measured: str = "n/a") -> Reading:
    """A :class:`Reading` whose claim cannot be tested (no value, no verdict)."""
    return Reading(setting, measured, None, None, reason)


def rows_per(
    records: Iterable[Mapping[str, Any]],
    test: str,
    reading: Callable[[Mapping[str, Any]], Reading],
) -> list[Row]:
    """One claims row per record (a mapping with ``model`` and ``dataset``): its ``reading``
    under the check's ``test``."""
    rows = []
    for record in records:
        r = reading(record)
        rows.append(
            row(
                str(record["model"]),
                str(record["dataset"]),
                r.setting,
                r.measured,
                r.value,
                test,
                r.passed,
                r.reason,
                r.interval,
                r.verdict,
            )
        )
    return rows


def pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}g}"


def head_count(n: int) -> str:
    return f"{n} head" if n == 1 else f"{n} heads"


def where_heads(failing: pl.DataFrame, heads_per_layer: Mapping[int, int], limit: int = 6) -> str:
    """Where a per-head check fails, in words: the failing ``(layer, head)`` rows grouped by
    layer ("layer 1: all 4 heads; layer 7: heads 2, 5"), a layer's whole set said as such
    (``heads_per_layer``: the number of heads each layer has in the check), at most ``limit``
    layers named, then how many more."""
    if failing.height == 0:
        return "no head"
    parts = []
    by_layer = failing.group_by("layer").agg(pl.col("head").unique().sort()).sort("layer")
    for r in by_layer.head(limit).iter_rows(named=True):
        heads, layer = r["head"], int(r["layer"])
        if len(heads) == heads_per_layer.get(layer, -1):
            whole = "its only head" if len(heads) == 1 else f"all {len(heads)} heads"
            parts.append(f"layer {layer}: {whole}")
        else:
            parts.append(
                f"layer {layer}: head{'s' if len(heads) > 1 else ''} {', '.join(map(str, heads))}"
            )
    if by_layer.height > limit:
        parts.append(f"{by_layer.height - limit} more layers")
    return "; ".join(parts)


def require(table: pl.DataFrame, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"claims: table {name!r} lacks the column(s) {missing}")
