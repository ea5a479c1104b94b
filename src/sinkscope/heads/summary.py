"""The paper's head percentages: pooling over datasets and the cross-pair summary (paper §3).

:func:`summarize` gives, per model and dataset and pooled over datasets (``"all"``), the share of
heads flagged sink, diagonal and sink+previous and of heads with none of these patterns
(:mod:`sinkscope.heads.classify` defines the masses and flags), with a sentence per row, and
(:func:`share_intervals`) the intervals of those shares over the sequences the masses average.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from sinkscope.heads.classify import (
    DEFAULT_THRESHOLDS,
    HeadClassThresholds,
    classify,
    with_classes,
)
from sinkscope.heads.names import (
    INTERVAL_SHARES,
    LEARNED_SINK_MASS,
    PER_HEAD_COLUMNS,
    SEQUENCE_MASS_COLUMNS,
    SUMMARY_COLUMNS,
)
from sinkscope.heads.order import sort_pooled_last
from sinkscope.labels import OTHER, POOLED
from sinkscope.stats.intervals import interval_settings
from sinkscope.variants import NO_BOS_SUFFIX, is_no_bos

__all__ = [
    "masses_by_sequence",
    "pool_datasets",
    "share_intervals",
    "sink_ratio_intervals",
    "summarize",
]

#: The mass columns of a per-sequence table that the flags are computed from.
_MASSES = ("bos_mass", "diagonal_mass", "subdiagonal_mass")


def _with_learned_sink_mass(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with a null ``learned_sink_mass`` where it has none (a table written before the
    column existed; models without learned sinks have it, null)."""
    if LEARNED_SINK_MASS in frame.columns:
        return frame
    return frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(LEARNED_SINK_MASS))


def _check_per_head(frame: pl.DataFrame) -> None:
    missing = [c for c in PER_HEAD_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"per-head table lacks columns {missing}")
    keys = ["model", "dataset", "layer", "head"]
    if frame.select(keys).is_duplicated().any():
        raise ValueError("per-head table has duplicate (model, dataset, layer, head) rows")


def pool_datasets(
    per_head: pl.DataFrame, thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS
) -> pl.DataFrame:
    """Pool a per-head table (as from :func:`~sinkscope.heads.classify.classify_file`) over its
    datasets, per model.

    Each head's masses are averaged over datasets weighted by ``n_sequences`` (so the result is
    the mean over all pooled sequences); ``bos_mass_std`` is the pooled population standard
    deviation over all sequences; flags and label are recomputed from the pooled masses.
    ``learned_sink_mass`` is pooled the same way, and is null where any dataset's is null. The
    result has the per-head columns with ``dataset`` set to ``"all"``.
    """
    per_head = _with_learned_sink_mass(per_head)
    _check_per_head(per_head)
    weight = pl.col("n_sequences").cast(pl.Float64)

    def wmean(expr: pl.Expr) -> pl.Expr:
        return (expr * weight).sum() / weight.sum()

    pooled = (
        per_head.group_by("model", "layer", "head")
        .agg(
            pl.col("n_sequences").sum(),
            wmean(pl.col("bos_mass")).alias("bos_mass"),
            wmean(pl.col("bos_mass_std") ** 2 + pl.col("bos_mass") ** 2).alias("_bos_sq"),
            wmean(pl.col("diagonal_mass")).alias("diagonal_mass"),
            wmean(pl.col("subdiagonal_mass")).alias("subdiagonal_mass"),
            pl.when(pl.col(LEARNED_SINK_MASS).is_null().any())
            .then(pl.lit(None, dtype=pl.Float64))
            .otherwise(wmean(pl.col(LEARNED_SINK_MASS)))
            .alias(LEARNED_SINK_MASS),
        )
        .with_columns(
            dataset=pl.lit(POOLED),
            bos_mass_std=(pl.col("_bos_sq") - pl.col("bos_mass") ** 2).clip(lower_bound=0.0).sqrt(),
        )
        .drop("_bos_sq")
        .sort("model", "layer", "head")
    )
    return with_classes(pooled, thresholds).select(PER_HEAD_COLUMNS)


def _statement(row: dict[str, Any], th: HeadClassThresholds) -> str:
    def pct(fraction: float) -> str:
        return f"{100.0 * fraction:.1f}%"

    def at_least(fraction: float) -> str:
        return f">= {100.0 * fraction:g}%"

    if row["dataset"] == POOLED:
        scope = f"pooled over {row['n_datasets']} datasets"
    else:
        scope = f"on {row['dataset']}"
    scope += f", {row['n_sequences']} sequences, {row['n_heads']} heads"
    # a no-BOS pair (sinkscope.variants): position 0 is the first text token
    sink = "position 0 (the first text token; no BOS)" if is_no_bos(row["dataset"]) else "BOS"
    learned = row["mean_learned_sink_mass"]
    sinks = (
        ""
        if learned is None
        else f"; the heads give on average {pct(learned)} of each row to their learned sinks"
    )
    return (
        f"{pct(row['frac_sink'])} of heads of {row['model']} put {at_least(th.sink)} of their "
        f"attention mass on {sink}, {pct(row['frac_diagonal'])} put {at_least(th.diagonal)} on "
        f"the main diagonal, and {pct(row['frac_sink_prev'])} put "
        f"{at_least(th.sink_prev_joint)} on {sink} plus the previous token with "
        f"{at_least(th.sink_prev_min_part)} of that on each; {pct(row['frac_other'])} show "
        f"none of these patterns{sinks} ({scope})"
    )


def _shares(
    bos: np.ndarray, diag: np.ndarray, sub: np.ndarray, th: HeadClassThresholds
) -> np.ndarray:
    """``(B, 4)``: per row of ``(B, H)`` masses the :data:`INTERVAL_SHARES`."""
    flags, _ = classify(bos, diag, sub, th)
    sink, diagonal = flags["is_sink"].mean(axis=1), flags["is_diagonal"].mean(axis=1)
    return np.column_stack([sink, diagonal, flags["is_sink_prev"].mean(axis=1), sink - diagonal])


def masses_by_sequence(per_sequence_tables: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """The summary table :data:`~sinkscope.heads.names.SEQUENCE_MASSES`: every pair's
    per-sequence masses (:data:`~sinkscope.heads.names.SEQUENCE_MASS_COLUMNS`), sorted."""
    if not per_sequence_tables:
        raise ValueError("masses_by_sequence needs at least one per-sequence table")
    frame = pl.concat([t.select(SEQUENCE_MASS_COLUMNS) for t in per_sequence_tables])
    return frame.sort("model", "dataset", "layer", "head", "sequence")


def _mass_arrays(
    per_sequence: pl.DataFrame | Sequence[pl.DataFrame],
) -> dict[tuple[str, str], list[np.ndarray]]:
    """Per (model, dataset): the ``(N, H)`` arrays of :data:`_MASSES` (sequence x head, heads in
    (layer, head) order)."""
    tables = [per_sequence] if isinstance(per_sequence, pl.DataFrame) else list(per_sequence)
    arrays: dict[tuple[str, str], list[np.ndarray]] = {}
    for table in tables:
        frame = table.sort("model", "dataset", "layer", "head", "sequence")
        for (model, dataset), part in frame.group_by("model", "dataset", maintain_order=True):
            n_heads = part.select("layer", "head").n_unique()
            arrays[(str(model), str(dataset))] = [
                part[m].to_numpy().astype(np.float64).reshape(n_heads, -1).T for m in _MASSES
            ]
    return arrays


def _mass_bounds(
    sample: Sequence[np.ndarray],
    resampled: Sequence[np.ndarray],
    n_units: int,
    level: float,
    dof: int,
    family: int,
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """Simultaneous intervals (:func:`sinkscope.stats.intervals.simultaneous_t_intervals`,
    Bonferroni over ``family`` masses) of every head's mean masses: ``sample`` the ``(H,)``
    means of each mass over the sequences, ``resampled`` their ``(B, H)`` resampled means;
    returns the ``(low, high)`` ends, one ``(H,)`` array per mass."""
    from sinkscope.stats.intervals import simultaneous_t_intervals

    ends = [
        simultaneous_t_intervals(m, r, n_units, level, dof, family)
        for m, r in zip(sample, resampled, strict=True)
    ]
    return tuple(low for low, _ in ends), tuple(high for _, high in ends)


def share_intervals(
    per_sequence: pl.DataFrame | Sequence[pl.DataFrame],
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
    intervals: Mapping[str, Any] | None = None,
) -> pl.DataFrame:
    """Intervals over sequences of the head shares (:data:`INTERVAL_SHARES`), per model and
    dataset and pooled over the model's BOS datasets (``"all"``).

    A head's class comes from its masses averaged over the pair's N sequences (the per-head
    table), so the shares vary with which sequences were seen. Every head's three mean masses
    get simultaneous intervals over the sequences (a t-interval with a bootstrap standard error
    at the Bonferroni level over the 3 H masses, :func:`sinkscope.stats.intervals.
    simultaneous_t_intervals`; each resample draws N of the pair's sequences with replacement,
    pooled: each dataset's own N from that dataset, and the t has ``sum(n_h - 1)`` degrees of
    freedom), so that all of them hold together at ``level``. A share's interval then runs from
    the share of heads whose whole box of masses is in the class to the share of heads whose box
    reaches into it (:func:`sinkscope.heads.classify.flag_bounds`), and the sink minus diagonal
    gap's from the fewest sinks less the most diagonals to the most sinks less the fewest
    diagonals. A share's bootstrap interval would under-cover: the share is discontinuous in the
    masses (:mod:`sinkscope.claims.coverage`). ``per_sequence``: the :data:`~sinkscope.heads.
    names.SEQUENCE_MASSES` table (or the pairs' per-sequence tables); ``intervals``: the config's
    ``claims.intervals`` (level, n_resamples, seed; one generator per row, seeded from ``seed``,
    so the table is the same between runs). Called by the claims rule: the intervals are the
    claims' settings. Columns ``model, dataset, n_resamples, level``, ``n_units`` (the sequences
    a resample draws per stratum: the pair's N; pooled, the smallest dataset's N), ``dof`` and
    ``<share>_lo/_hi``."""
    from sinkscope.heads.classify import flag_bounds
    from sinkscope.stats.intervals import sample_and_resample_counts

    settings = interval_settings(intervals)
    level, n_resamples = float(settings["level"]), int(settings["n_resamples"])
    arrays = _mass_arrays(per_sequence)
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {key: [key] for key in arrays}
    for model in sorted({m for m, _ in arrays}):
        with_bos = [k for k in sorted(arrays) if k[0] == model and not is_no_bos(k[1])]
        if with_bos:
            groups[(model, POOLED)] = with_bos
    rows = []
    for row_index, ((model, dataset), members) in enumerate(sorted(groups.items())):
        rng = np.random.default_rng([int(settings["seed"]), row_index])
        sums = None
        total = 0
        sizes = [arrays[key][0].shape[0] for key in members]
        for key in members:
            masses = arrays[key]
            n = masses[0].shape[0]
            counts = sample_and_resample_counts(n, n_resamples, rng)  # the sample, then resamples
            part = [counts @ m for m in masses]  # (1 + B, H) sums over the drawn sequences
            sums = part if sums is None else [a + b for a, b in zip(sums, part, strict=True)]
            total += n
        assert sums is not None
        means = [x / total for x in sums]
        row: dict[str, Any] = {
            "model": model, "dataset": dataset, "n_resamples": n_resamples, "level": level,
            "n_units": min(sizes), "dof": sum(n - 1 for n in sizes),
        }  # fmt: skip
        if min(sizes) < 2:  # one sequence: no spread, no interval
            rows.append(
                row | {f"{share}_{end}": None for share in INTERVAL_SHARES for end in ("lo", "hi")}
            )
            continue
        low, high = _mass_bounds(
            [m[0] for m in means], [m[1:] for m in means], min(sizes), level, row["dof"],
            family=3 * means[0].shape[1],
        )  # fmt: skip
        certain, possible = flag_bounds(low, high, thresholds)
        for share, flag in zip(INTERVAL_SHARES, ("is_sink", "is_diagonal", "is_sink_prev")):
            row[f"{share}_lo"] = float(certain[flag].mean())
            row[f"{share}_hi"] = float(possible[flag].mean())
        gap = INTERVAL_SHARES[-1]  # sink minus diagonal
        row[f"{gap}_lo"] = float(certain["is_sink"].mean() - possible["is_diagonal"].mean())
        row[f"{gap}_hi"] = float(possible["is_sink"].mean() - certain["is_diagonal"].mean())
        rows.append(row)
    return pl.DataFrame(rows)


def _sink_share_bounds(
    low: np.ndarray, high: np.ndarray, thresholds: HeadClassThresholds
) -> tuple[float, float]:
    """The fewest and the most sink heads (as shares) that simultaneous intervals ``[low,
    high]`` of the heads' BOS masses allow (the sink flag reads BOS mass alone)."""
    from sinkscope.heads.classify import flag_bounds

    zeros = np.zeros(low.shape)
    certain, possible = flag_bounds((low, zeros, zeros), (high, zeros, zeros), thresholds)
    return float(certain["is_sink"].mean()), float(possible["is_sink"].mean())


def sink_ratio_intervals(
    per_sequence: pl.DataFrame | Sequence[pl.DataFrame],
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
    intervals: Mapping[str, Any] | None = None,
) -> pl.DataFrame:
    """Paired intervals over sequences of ``frac_sink(no-BOS) / frac_sink(BOS)``, the
    StreamingLLM claim's ratio (:func:`sinkscope.claims.checks.no_bos.check_first_token_becomes_sink`),
    per model and no-BOS pair with its BOS pair in ``per_sequence``.

    Both pairs hold the SAME N sequences, with and without BOS (:mod:`sinkscope.variants`), so a
    resample draws one set of sequence counts and applies it to both. Every head's BOS mass in
    both pairs gets a simultaneous interval over the sequences (Bonferroni over the 2 H masses,
    as :func:`share_intervals`), and the ratio's interval runs from the fewest sink heads
    without BOS over the most with it to the most without over the fewest with it (infinite
    when no head is certainly a sink with BOS; 0 when none can be one without it or, with some,
    when none can be one with it). Columns ``model, dataset`` (the no-BOS id), ``n_resamples,
    level, n_units`` (N), ``ratio_lo, ratio_hi``; the seed of a row is
    :func:`sinkscope.stats.intervals.row_seed` of ``claims.intervals.seed``, model, dataset and
    ``"sink_ratio"``."""
    from sinkscope.stats.intervals import row_seed, sample_and_resample_counts
    from sinkscope.variants import source_dataset

    settings = interval_settings(intervals)
    level, n_resamples = float(settings["level"]), int(settings["n_resamples"])
    arrays = _mass_arrays(per_sequence)
    rows = []
    for (model, dataset), without in sorted(arrays.items()):
        with_bos = arrays.get((model, source_dataset(dataset)))
        if not is_no_bos(dataset) or with_bos is None:
            continue
        n = without[0].shape[0]
        if with_bos[0].shape[0] != n:
            raise ValueError(
                f"{model} x {dataset}: {n} sequences without BOS against "
                f"{with_bos[0].shape[0]} with it; the pairs must hold the same sequences"
            )
        low = high = math.inf
        if n >= 2:
            rng = np.random.default_rng(
                row_seed(int(settings["seed"]), model, dataset, "sink_ratio")
            )
            counts = sample_and_resample_counts(n, n_resamples, rng) / n  # sample, resamples
            bos = [counts @ masses[0] for masses in (without, with_bos)]  # (1 + B, H) each
            n_heads = bos[0].shape[1]
            ends = _mass_bounds(
                [b[0] for b in bos], [b[1:] for b in bos], n, level, n - 1, 2 * n_heads
            )
            (c_without, p_without), (c_with, p_with) = (
                _sink_share_bounds(lo, hi, thresholds) for lo, hi in zip(*ends, strict=True)
            )
            low = c_without / p_with if p_with > 0 else (math.inf if c_without > 0 else 0.0)
            high = p_without / c_with if c_with > 0 else (math.inf if p_without > 0 else 0.0)
        rows.append(
            {
                "model": model,
                "dataset": dataset,
                "n_resamples": n_resamples,
                "level": level,
                "n_units": n,
                "ratio_lo": float(low) if n >= 2 else None,
                "ratio_hi": float(high) if n >= 2 else None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "model": pl.String,
            "dataset": pl.String,
            "n_resamples": pl.Int64,
            "level": pl.Float64,
            "n_units": pl.Int64,
            "ratio_lo": pl.Float64,
            "ratio_hi": pl.Float64,
        },
    )


def summarize(
    per_head_tables: Sequence[pl.DataFrame],
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
) -> pl.DataFrame:
    """The paper's head percentages, per model and dataset and pooled over datasets (``"all"``).

    ``per_head_tables``: per-head tables from :func:`~sinkscope.heads.classify.classify_file`
    (one per model x dataset). Flags are recomputed from the masses with ``thresholds``.
    Columns: ``model, dataset, n_datasets, n_sequences, n_heads, frac_sink, frac_diagonal,
    frac_sink_prev, frac_other``
    (fractions in [0, 1]; the pattern fractions overlap, ``frac_other`` is the share of heads
    with no pattern), ``mean_learned_sink_mass`` (the heads' mean ``learned_sink_mass``; null for
    a model without learned sinks) and ``statement`` (a sentence with the percentages). Rows are
    sorted by model, then dataset with ``"all"`` last. The pooled row classifies each head on its masses
    averaged over datasets weighted by ``n_sequences`` (:func:`pool_datasets`); it pools the
    datasets with BOS only: a no-BOS variant (``<name>.no-bos``, :mod:`sinkscope.variants`) has
    its own row, whose "sink" heads put their mass on position 0, the first text token.
    """
    if not per_head_tables:
        raise ValueError("summarize needs at least one per-head table")
    per_head = pl.concat(
        [_with_learned_sink_mass(t).select(PER_HEAD_COLUMNS) for t in per_head_tables],
        how="vertical",
    )
    _check_per_head(per_head)
    if (per_head["dataset"] == POOLED).any():
        raise ValueError(f"dataset name {POOLED!r} is reserved for the pooled summary")
    per_head = with_classes(per_head, thresholds).select(PER_HEAD_COLUMNS)
    with_bos = per_head.filter(~pl.col("dataset").str.ends_with(NO_BOS_SUFFIX))
    n_datasets = with_bos.group_by("model").agg(pl.col("dataset").n_unique().alias("n_datasets"))
    by_dataset = per_head.with_columns(n_datasets=pl.lit(1, dtype=pl.UInt32))
    pooled = pool_datasets(with_bos, thresholds).join(n_datasets, on="model")

    def fractions(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.group_by("model", "dataset").agg(
            pl.col("n_datasets").first(),
            # per dataset: sequences of one head; pooled: already summed over datasets
            pl.col("n_sequences").max(),
            pl.len().cast(pl.Int64).alias("n_heads"),
            pl.col("is_sink").mean().alias("frac_sink"),
            pl.col("is_diagonal").mean().alias("frac_diagonal"),
            pl.col("is_sink_prev").mean().alias("frac_sink_prev"),
            (pl.col("head_class") == OTHER).mean().alias("frac_other"),
            pl.col(LEARNED_SINK_MASS).mean().alias("mean_learned_sink_mass"),
        )

    summary = sort_pooled_last(
        pl.concat([fractions(by_dataset), fractions(pooled)]).with_columns(
            pl.col("n_datasets").cast(pl.Int64), pl.col("n_sequences").cast(pl.Int64)
        )
    )
    statements = [_statement(row, thresholds) for row in summary.iter_rows(named=True)]
    summary = summary.with_columns(statement=pl.Series(statements, dtype=pl.String))
    return summary.select(SUMMARY_COLUMNS)
