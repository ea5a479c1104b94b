"""Empirical head pattern labelling (paper §3, "Empirical head pattern labeling"; §7; Remark C.4).

The paper labels a head by the *relative attention mass* that falls on a pattern: a head is a
sink if BOS attention weights make up >= 40% of the total mass, a diagonal head if >= 40% of the
mass is on the main diagonal (§7), and a sink-lower-diagonal ("sink+previous") head if the joint
mass on BOS and the lower-1 diagonal is >= 60% and each of the two parts is >= 10% of that joint
mass (§3, Remark C.4).

Definitions implemented here
----------------------------
``probs`` holds one layer's attention probabilities, shape ``(N, H, T1, T1)`` (sequences, heads,
query, key), ``T1 = T + 1`` positions with position 0 the BOS token; rows are causal and sum to 1.
Query row 0 (BOS attending to itself) is excluded from every mass, as it is trivially 1 on both
the BOS column and the diagonal. Over the remaining rows ``i = 1..T`` (total mass ``T``)::

    bos_mass         = (1/T) sum_{i=1..T} A[i, 0]
    diagonal_mass    = (1/T) sum_{i=1..T} A[i, i]
    subdiagonal_mass = (1/T) sum_{i=2..T} A[i, i-1]
    sink_prev_mass   = bos_mass + subdiagonal_mass

For a model with learned attention sinks (gpt-oss: a per-head logit ``s_h`` appended to every
row's scores, softmaxed with them and dropped, so row ``i`` sums to ``1 - p_sink[i]``), the file's
``attention/sink_probs`` gives ``p_sink`` and::

    learned_sink_mass = (1/T) sum_{i=1..T} p_sink[i]

over the same rows as ``bos_mass`` (null for models without learned sinks). It is reported
beside the masses, not used by the flags: a head that parks its mass on its sink puts less on
BOS, and the thresholds stay the paper's fractions of the whole row.

Row 1's sub-diagonal entry ``A[1, 0]`` *is* the BOS column: it counts towards ``bos_mass`` only,
so the two parts of ``sink_prev_mass`` are disjoint and nothing is counted twice. Masses are
computed in float64 whatever the stored dtype (the activation files hold float16).

Flags (thresholds in :class:`HeadClassThresholds`; every comparison is ``>=`` with a tolerance of
``1e-9``, so a mass exactly at a threshold qualifies despite float rounding)::

    is_sink      : bos_mass >= sink
    is_diagonal  : diagonal_mass >= diagonal
    is_sink_prev : sink_prev_mass >= sink_prev_joint
                   and bos_mass >= sink_prev_min_part * sink_prev_mass
                   and subdiagonal_mass >= sink_prev_min_part * sink_prev_mass

The flags are not exclusive: the paper reports a percentage per pattern, so a head can count as
both a sink and a sink+previous head. For class maps a single label is assigned with precedence
``"sink+previous"`` (if ``is_sink_prev``), else whichever of ``"sink"`` / ``"diagonal"`` holds
(if both hold, the one with the larger mass; a tie goes to ``"sink"``), else ``"other"``. Hence
``"other"`` means exactly "none of the three flags".
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable

import numpy as np
import polars as pl

from sinkscope.config_schema import schema_default
from sinkscope.extraction.h5layout import (
    ATTENTION_PROBS,
    ATTENTION_SINK_PROBS,
    ATTR_DATASET_NAME,
    ATTR_MODEL_NAME,
    ATTR_N_SEQUENCES,
    open_activations,
    read_attr,
)
from sinkscope.heads.names import FLAG_COLUMNS, LEARNED_SINK_MASS, PER_HEAD_COLUMNS
from sinkscope.labels import DIAGONAL, OTHER, SINK, SINK_PREV

__all__ = [
    "DEFAULT_THRESHOLDS",
    "TOLERANCE",
    "HeadClassThresholds",
    "attention_masses",
    "classify",
    "classify_file",
    "flag_bounds",
    "head_table_for_layer",
    "learned_sink_masses",
    "with_classes",
]

#: Absolute tolerance of every threshold comparison.
TOLERANCE = 1e-9

#: The config's ``head_classes`` defaults, read from the config schema (the paper's §3 values).
_SCHEMA_THRESHOLDS: dict[str, float] = schema_default("head_classes")


@dataclasses.dataclass(frozen=True)
class HeadClassThresholds:
    """Fractions of the total attention mass (paper §3: 40% sink / diagonal, 60% joint, 10% part).

    ``sink``: minimum ``bos_mass``; ``diagonal``: minimum ``diagonal_mass``;
    ``sink_prev_joint``: minimum ``bos_mass + subdiagonal_mass``; ``sink_prev_min_part``: minimum
    share of that joint mass that each of BOS and the sub-diagonal must carry. The defaults are
    the config schema's ``head_classes`` defaults (:data:`DEFAULT_THRESHOLDS`).
    """

    sink: float = _SCHEMA_THRESHOLDS["sink"]
    diagonal: float = _SCHEMA_THRESHOLDS["diagonal"]
    sink_prev_joint: float = _SCHEMA_THRESHOLDS["sink_prev_joint"]
    sink_prev_min_part: float = _SCHEMA_THRESHOLDS["sink_prev_min_part"]

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(
                    f"HeadClassThresholds.{field.name} must be a number in [0, 1], got {value!r}"
                )
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(
                    f"HeadClassThresholds.{field.name} must be in [0, 1], got {value!r}"
                )


#: The paper's thresholds (§3), the config schema's ``head_classes`` defaults: what every function
#: here classifies with unless given the config's thresholds.
DEFAULT_THRESHOLDS = HeadClassThresholds()


def attention_masses(probs: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sequence, per-head masses of one layer's attention (definitions in the module docstring).

    ``probs``: shape ``(N, H, T1, T1)``, any float dtype, ``T1 >= 3``. Returns float64 arrays of
    shape ``(N, H)`` under the keys ``bos_mass``, ``diagonal_mass``, ``subdiagonal_mass`` and
    ``sink_prev_mass``. Only views of ``probs`` are reduced (no float64 copy of the tensor).
    Raises ``ValueError`` on a wrong shape or a non-finite mass.
    """
    probs = np.asarray(probs)
    if probs.ndim != 4 or probs.shape[-1] != probs.shape[-2]:
        raise ValueError(f"attention probs must have shape (N, H, T1, T1), got {probs.shape}")
    t1 = probs.shape[-1]
    if t1 < 3:
        raise ValueError(f"need at least 3 positions (BOS + 2 tokens), got T1={t1}")
    if not np.issubdtype(probs.dtype, np.floating):
        raise ValueError(f"attention probs must be floating point, got dtype {probs.dtype}")
    n_rows = t1 - 1
    bos = probs[..., 1:, 0].sum(axis=-1, dtype=np.float64) / n_rows
    diagonal = np.diagonal(probs, axis1=-2, axis2=-1)[..., 1:].sum(axis=-1, dtype=np.float64)
    # offset=-1 yields A[1,0], A[2,1], ..., A[T,T-1]; A[1,0] is the BOS column, counted in bos only.
    sub = np.diagonal(probs, offset=-1, axis1=-2, axis2=-1)[..., 1:].sum(axis=-1, dtype=np.float64)
    masses = {
        "bos_mass": bos,
        "diagonal_mass": diagonal / n_rows,
        "subdiagonal_mass": sub / n_rows,
    }
    masses["sink_prev_mass"] = masses["bos_mass"] + masses["subdiagonal_mass"]
    for name, values in masses.items():
        if not np.all(np.isfinite(values)):
            raise ValueError(f"non-finite {name} in attention probs (NaN or inf in the tensor)")
    return masses


def learned_sink_masses(sink_probs: np.ndarray) -> np.ndarray:
    """Per-sequence, per-head ``learned_sink_mass`` (module docstring): the mean of ``p_sink``
    over query rows ``1..T``. ``sink_probs``: ``(N, H, T1)`` (one layer of
    ``attention/sink_probs``), any float dtype; returns float64 ``(N, H)``."""
    sink_probs = np.asarray(sink_probs)
    if sink_probs.ndim != 3 or sink_probs.shape[-1] < 3:
        raise ValueError(
            f"sink probs must have shape (N, H, T1) with T1 >= 3, got {sink_probs.shape}"
        )
    mass = sink_probs[..., 1:].sum(axis=-1, dtype=np.float64) / (sink_probs.shape[-1] - 1)
    if not np.all(np.isfinite(mass)):
        raise ValueError(f"non-finite {LEARNED_SINK_MASS} (NaN or inf in the sink probs)")
    return mass


def classify(
    bos: np.ndarray | float,
    diag: np.ndarray | float,
    subdiag: np.ndarray | float,
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Flags and single labels for masses of any (broadcastable) shape.

    Returns ``({"is_sink", "is_diagonal", "is_sink_prev"} -> bool arrays, labels)`` where labels
    is a string array with values in :data:`~sinkscope.labels.HEAD_CLASSES` (precedence in
    the module docstring). ``sink_prev_mass`` is recomputed here as ``bos + subdiag``.
    """
    bos, diag, subdiag = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.float64) for x in (bos, diag, subdiag))
    )
    is_sink = bos >= thresholds.sink - TOLERANCE
    is_diagonal = diag >= thresholds.diagonal - TOLERANCE
    joint_ok, bos_part_ok, sub_part_ok = _sink_prev_conditions(
        bos, subdiag, bos, subdiag, thresholds
    )
    is_sink_prev = joint_ok & bos_part_ok & sub_part_ok
    labels = np.select(
        [is_sink_prev, is_sink & (~is_diagonal | (bos >= diag)), is_diagonal],
        [SINK_PREV, SINK, DIAGONAL],
        default=OTHER,
    )
    flags = {"is_sink": is_sink, "is_diagonal": is_diagonal, "is_sink_prev": is_sink_prev}
    return flags, labels


def _sink_prev_conditions(
    bos_joint: np.ndarray,
    sub_joint: np.ndarray,
    bos_part: np.ndarray,
    sub_part: np.ndarray,
    thresholds: HeadClassThresholds,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three conditions of ``is_sink_prev`` (module docstring): the joint mass ``bos +
    subdiag >= sink_prev_joint`` read at ``(bos_joint, sub_joint)``, and each part ``>=
    sink_prev_min_part`` of the joint mass read at ``(bos_part, sub_part)``. :func:`classify`
    reads all three at the head's masses; :func:`flag_bounds` at other corners of a box."""
    p = thresholds.sink_prev_min_part
    joint_ok = bos_joint + sub_joint >= thresholds.sink_prev_joint - TOLERANCE
    bos_part_ok = bos_part >= p * (bos_part + sub_part) - TOLERANCE
    sub_part_ok = sub_part >= p * (bos_part + sub_part) - TOLERANCE
    return joint_ok, bos_part_ok, sub_part_ok


def flag_bounds(
    low: tuple[np.ndarray, np.ndarray, np.ndarray],
    high: tuple[np.ndarray, np.ndarray, np.ndarray],
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The flags of heads whose masses ``(bos, diag, subdiag)`` are known to lie in the boxes
    ``[low, high]`` (simultaneous intervals over sequences): ``(certain, possible)``, the flags
    that hold at every point of a head's box and those that hold at some point of it.

    ``is_sink`` and ``is_diagonal`` are thresholds on one mass: certain at the low end, possible
    at the high end. ``is_sink_prev``'s three conditions are linear in ``(bos, subdiag)``, so
    the set where they hold is convex: it is certain when all four corners of the box satisfy
    it. It is possible only if each condition holds at the corner that favours it most (the joint
    mass at both high ends; BOS's part at high BOS and low sub-diagonal; the sub-diagonal's the
    other way round): a necessary condition, so "possible" may count a head that no point of its
    box makes sink+previous, which only widens a share's interval."""
    (bos_lo, diag_lo, sub_lo), (bos_hi, diag_hi, sub_hi) = low, high
    corners = [(b, s) for b in (bos_lo, bos_hi) for s in (sub_lo, sub_hi)]
    certain_prev = np.logical_and.reduce(
        [classify(b, diag_lo, s, thresholds)[0]["is_sink_prev"] for b, s in corners]
    )
    joint_ok, _, _ = _sink_prev_conditions(bos_hi, sub_hi, bos_hi, sub_hi, thresholds)
    _, bos_part_ok, _ = _sink_prev_conditions(bos_hi, sub_hi, bos_hi, sub_lo, thresholds)
    _, _, sub_part_ok = _sink_prev_conditions(bos_hi, sub_hi, bos_lo, sub_hi, thresholds)
    certain = {
        "is_sink": classify(bos_lo, diag_lo, sub_lo, thresholds)[0]["is_sink"],
        "is_diagonal": classify(bos_lo, diag_lo, sub_lo, thresholds)[0]["is_diagonal"],
        "is_sink_prev": certain_prev,
    }
    possible = {
        "is_sink": classify(bos_hi, diag_hi, sub_hi, thresholds)[0]["is_sink"],
        "is_diagonal": classify(bos_hi, diag_hi, sub_hi, thresholds)[0]["is_diagonal"],
        "is_sink_prev": joint_ok & bos_part_ok & sub_part_ok,
    }
    return certain, possible


def with_classes(frame: pl.DataFrame, thresholds: HeadClassThresholds) -> pl.DataFrame:
    """(Re)compute ``sink_prev_mass``, the flags and ``head_class`` from the mass columns; a table
    without a ``learned_sink_mass`` column (a model without learned sinks, a table written before
    the column existed) gets it as null."""
    if LEARNED_SINK_MASS not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(LEARNED_SINK_MASS))
    frame = frame.with_columns(sink_prev_mass=pl.col("bos_mass") + pl.col("subdiagonal_mass")).drop(
        [*FLAG_COLUMNS, "head_class"], strict=False
    )
    flags, labels = classify(
        frame["bos_mass"].to_numpy(),
        frame["diagonal_mass"].to_numpy(),
        frame["subdiagonal_mass"].to_numpy(),
        thresholds,
    )
    return frame.with_columns(
        *(pl.Series(name, values, dtype=pl.Boolean) for name, values in flags.items()),
        pl.Series("head_class", labels, dtype=pl.String),
    )


def head_table_for_layer(
    layer: int,
    probs: np.ndarray,
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
    sink_probs: np.ndarray | None = None,
) -> pl.DataFrame:
    """One row per (layer, head, sequence) of one layer's attention ``probs`` ``(N, H, T1, T1)``.

    Columns: ``layer, head, sequence`` (Int64), ``bos_mass, diagonal_mass, subdiagonal_mass,
    sink_prev_mass, learned_sink_mass`` (Float64; the last from ``sink_probs`` ``(N, H, T1)``,
    null without), ``is_sink, is_diagonal, is_sink_prev`` (Boolean), ``head_class`` (String).
    Rows are ordered by head, then sequence.
    """
    masses = attention_masses(probs)
    n_seq, n_heads = masses["bos_mass"].shape
    # (N, H) -> (H, N) so that rows run over sequences within each head.
    columns = {name: values.T.ravel() for name, values in masses.items()}
    if sink_probs is None:
        sink_column = pl.Series(LEARNED_SINK_MASS, [None] * (n_heads * n_seq), dtype=pl.Float64)
    else:
        if tuple(sink_probs.shape) != tuple(np.shape(probs)[:3]):
            raise ValueError(
                f"sink probs of shape {tuple(sink_probs.shape)} do not match attention probs "
                f"{tuple(np.shape(probs))}"
            )
        sink_column = pl.Series(LEARNED_SINK_MASS, learned_sink_masses(sink_probs).T.ravel())
    flags, labels = classify(
        columns["bos_mass"], columns["diagonal_mass"], columns["subdiagonal_mass"], thresholds
    )
    return pl.DataFrame(
        {
            "layer": np.full(n_heads * n_seq, layer, dtype=np.int64),
            "head": np.repeat(np.arange(n_heads, dtype=np.int64), n_seq),
            "sequence": np.tile(np.arange(n_seq, dtype=np.int64), n_heads),
            **columns,
            LEARNED_SINK_MASS: sink_column,
            **flags,
            "head_class": pl.Series(labels, dtype=pl.String),
        }
    )


def classify_file(
    h5_path: str | os.PathLike[str],
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
    layers: Iterable[int] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Classify every head of an activation file; returns ``(per_sequence, per_head)``.

    Reads ``attention/probs`` (shape ``(L, N, H, T1, T1)``) one layer at a time, so peak memory is
    about one layer's tensor; ``layers`` restricts to some layer indices (default: all). Model and
    dataset names come from the file attributes ``model_name`` and ``dataset_name``; if the file
    has an ``n_sequences`` attribute it must equal ``N``.

    ``per_sequence``: ``model, dataset`` + the columns of :func:`head_table_for_layer`.
    ``per_head``: one row per (layer, head): ``model, dataset, layer, head, n_sequences,
    bos_mass, bos_mass_std, diagonal_mass, subdiagonal_mass, sink_prev_mass, is_sink,
    is_diagonal, is_sink_prev, head_class``. Masses are means over sequences, ``bos_mass_std`` is
    the population standard deviation (ddof=0) of ``bos_mass`` over sequences, and flags and
    label are recomputed from the averaged masses (not a vote over per-sequence labels).
    ``learned_sink_mass`` (after ``sink_prev_mass``) is the mean over sequences of each
    sequence's :func:`learned_sink_masses` where the file has ``attention/sink_probs``, else null.
    """
    per_sequence: list[pl.DataFrame] = []
    per_head: list[pl.DataFrame] = []
    with open_activations(h5_path) as handle:
        model = str(read_attr(handle, ATTR_MODEL_NAME))
        dataset = str(read_attr(handle, ATTR_DATASET_NAME))
        if ATTENTION_PROBS not in handle:
            raise ValueError(f"{h5_path}: no dataset {ATTENTION_PROBS!r}")
        probs_ds = handle[ATTENTION_PROBS]
        if probs_ds.ndim != 5:
            raise ValueError(
                f"{h5_path}: {ATTENTION_PROBS} must have shape (L, N, H, T1, T1), "
                f"got {probs_ds.shape}"
            )
        n_layers, n_seq = probs_ds.shape[:2]
        n_attr = (
            int(read_attr(handle, ATTR_N_SEQUENCES)) if ATTR_N_SEQUENCES in handle.attrs else None
        )
        if n_attr is not None and n_attr != n_seq:
            raise ValueError(
                f"{h5_path}: attribute {ATTR_N_SEQUENCES}={n_attr} but {ATTENTION_PROBS} holds "
                f"{n_seq} sequences"
            )
        sink_ds = handle.get(ATTENTION_SINK_PROBS)  # only files of models with learned sinks
        selected = range(n_layers) if layers is None else [int(layer) for layer in layers]
        for layer in selected:
            if not 0 <= layer < n_layers:
                raise ValueError(f"{h5_path}: layer {layer} out of range [0, {n_layers})")
            sinks = None if sink_ds is None else sink_ds[layer]
            table = head_table_for_layer(layer, probs_ds[layer], thresholds, sinks)
            per_sequence.append(table)
            per_head.append(
                table.group_by("layer", "head", maintain_order=True).agg(
                    pl.len().cast(pl.Int64).alias("n_sequences"),
                    pl.col("bos_mass").mean(),
                    pl.col("bos_mass").std(ddof=0).alias("bos_mass_std"),
                    pl.col("diagonal_mass").mean(),
                    pl.col("subdiagonal_mass").mean(),
                    pl.col(LEARNED_SINK_MASS).mean(),
                )
            )
    if not per_sequence:
        raise ValueError(f"{h5_path}: no layers selected")
    ids = [pl.lit(model).alias("model"), pl.lit(dataset).alias("dataset")]
    sequences = pl.concat(per_sequence).select(*ids, pl.all())
    heads = with_classes(pl.concat(per_head), thresholds).select(*ids, *PER_HEAD_COLUMNS[2:])
    return sequences, heads
