"""BOS alignment at the attention input (§4, Figure 1): cosines, exact histograms, both readings.

:func:`bos_cosines`: the cosine between the BOS embedding ``z_0`` and every ``z_i`` (``i >= 1``) at
the attention input. The paper's sufficient condition for a representable sink is
``z_0 . z_i <= 0`` for all ``i``; Figure 1 claims the maximum cosine stays below 0 in the
middle layers (:func:`middle_layers`). :func:`bos_max_readings` reads that maximum twice, over
all positions (the paper's statement) and over positions ``>= 2``: the first text token
(:data:`FIRST_TEXT_POSITION`) can be almost parallel to BOS (cosine ~0.99 in most layers of
SmolLM2-135M) and then alone decides the first reading. The exact condition, Proposition 4.1,
is tested in :mod:`sinkscope.geometry.halfspace`.

Exact pooling of the cosine distributions
-----------------------------------------
Figure 1 pools the cosines over four datasets. Each pair's table ``bos_cosine_hist`` holds a
fixed histogram (``COSINE_BINS = 2048`` equal bins on ``[-1, 1]``, width ``2^-10 ~ 9.8e-4``, only
non-empty bins stored), and ``bos_alignment`` holds the exact count, minimum, maximum, mean and
number of positive cosines. Summing histograms gives exactly the histogram of the pooled raw
cosines, so :func:`~sinkscope.geometry.summary.summarize` computes the pooled minimum, maximum,
mean, count and fraction above zero exactly and the pooled quartiles from the pooled histogram,
to within one bin width (never by averaging per-dataset quantiles). The per-pair quartiles are
exact (from the raw cosines). The histogram keeps the output size independent of ``N * T`` (at
most 2048 rows per layer) and CSV-friendly; storing raw cosines instead would give ``N * T * L``
rows per pair. Value ranks, half-space margins and norm ratios are small per-sequence tables and
are pooled from their raw rows.

Torch-free (numpy and polars only).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

__all__ = [
    "COSINE_BINS",
    "COSINE_SIGN_BOUND",
    "FIRST_TEXT_POSITION",
    "SPACES",
    "blocks",
    "bos_cosines",
    "bos_max_readings",
    "bos_max_statement",
    "cosine_histogram",
    "cosine_rows",
    "histogram_quantiles",
    "middle_layers",
    "relative_bos_norm",
    "row_norms",
]

#: Number of equal histogram bins of the cosines on [-1, 1] (bin width 2/2048 = 2^-10).
COSINE_BINS = 2048
#: §4 / Figure 1's bound on the cosine between BOS and a token: its sign. The tables' column
#: ``max_below_zero`` compares the maximum cosine with it, and it is the default ``bound`` of
#: :func:`bos_max_readings`; the claim ``geometry.bos_cosine_below_zero`` compares with its
#: tolerance ``claims.geometry.bos_cosine_max`` (default: this bound, 0).
COSINE_SIGN_BOUND = 0.0
#: Spaces of the cosine analysis: the attention input Z (Figure 1) and the residual stream X.
SPACES: tuple[str, ...] = ("Z", "X")
#: Position of the first text token (right after BOS). In SmolLM2-135M its normed input is
#: almost parallel to BOS (cosine ~0.99) in most layers although it draws little attention, so
#: Figure 1's maximum is read twice: over all positions and over positions >= 2.
FIRST_TEXT_POSITION = 1


def blocks(n: int, size: int = 8) -> Iterator[slice]:
    """Consecutive slices of at most ``size`` sequences: float64 work copies stay small."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def bos_cosines(z_layer: np.ndarray) -> np.ndarray:
    """Cosine between BOS and every other token of one layer (§4, Figure 1), shape ``(N, T)``.

    ``z_layer``: ``(N, T1, D)`` embeddings (``Z^(l)`` or ``X^(l)``, any float dtype), position 0
    the BOS token. Entry ``[n, i - 1]`` is ``z_0 . z_i / (|z_0| |z_i|)`` for ``i = 1..T``,
    computed in float64 (a few sequences at a time). A zero vector has no direction: its cosines
    are NaN.
    """
    z = np.asarray(z_layer)
    if z.ndim != 3 or z.shape[1] < 2:
        raise ValueError(f"embeddings must have shape (N, T1 >= 2, D), got {z.shape}")
    cos = np.empty((z.shape[0], z.shape[1] - 1), dtype=np.float64)
    for block in blocks(z.shape[0]):
        zb = z[block].astype(np.float64)
        norms = np.linalg.norm(zb, axis=-1)
        dots = np.einsum("nd,ntd->nt", zb[:, 0], zb[:, 1:])
        with np.errstate(divide="ignore", invalid="ignore"):
            cb = dots / (norms[:, :1] * norms[:, 1:])
        cb[(norms[:, :1] == 0) | (norms[:, 1:] == 0)] = np.nan
        cos[block] = np.clip(cb, -1.0, 1.0)
    return cos


def cosine_histogram(cos: np.ndarray, bins: int = COSINE_BINS) -> np.ndarray:
    """Counts of the finite values of ``cos`` in ``bins`` equal bins on ``[-1, 1]`` (int64).

    Bin ``k`` is ``[-1 + k w, -1 + (k + 1) w)`` with ``w = 2 / bins``; 1.0 falls in the last bin.
    """
    values = np.asarray(cos, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    index = np.floor((np.clip(values, -1.0, 1.0) + 1.0) * (bins / 2.0)).astype(np.int64)
    return np.bincount(np.clip(index, 0, bins - 1), minlength=bins)


def histogram_quantiles(
    counts: np.ndarray, probs: Sequence[float], vmin: float, vmax: float
) -> np.ndarray:
    """Quantiles (numpy's ``linear`` method) of data known only through a histogram on [-1, 1].

    The ``k``-th order statistic is placed at the centre of its share of its bin (values spread
    evenly within a bin), except the first and last, which are the exact ``vmin`` and ``vmax``;
    quantiles interpolate linearly between order statistics as :func:`numpy.quantile` does and
    are clipped to ``[vmin, vmax]``. The error is at most one bin width. Returns NaN for an
    empty histogram.
    """
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.full(len(probs), np.nan)
    width = 2.0 / counts.size
    cumulative = np.cumsum(counts)

    def order_statistic(rank: np.ndarray) -> np.ndarray:
        index = np.searchsorted(cumulative, rank, side="right")
        before = np.where(index > 0, cumulative[np.maximum(index - 1, 0)], 0)
        within = (rank - before + 0.5) / counts[index]
        value = -1.0 + (index + within) * width
        # the smallest and largest order statistics are known exactly
        return np.where(rank == 0, vmin, np.where(rank == total - 1, vmax, value))

    position = (total - 1) * np.asarray(probs, dtype=np.float64)
    lower = np.floor(position).astype(np.int64)
    upper = np.minimum(lower + 1, total - 1)
    frac = position - lower
    values = order_statistic(lower) * (1.0 - frac) + order_statistic(upper) * frac
    return np.clip(values, vmin, vmax)


def cosine_rows(space: str, layer: int, cos: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """One ``bos_alignment`` row (exact statistics) and the histogram of one layer's cosines."""
    finite = np.isfinite(cos)
    values = cos[finite]
    row: dict[str, Any] = {"space": space, "layer": layer, "n_values": int(values.size)}
    if values.size:
        q1, median, q3 = np.quantile(values, [0.25, 0.5, 0.75])
        flat_max = int(np.nanargmax(np.where(finite, cos, -np.inf)))
        seq, pos = np.unravel_index(flat_max, cos.shape)
        n_positive = int((values > 0).sum())
        row.update(
            min=float(values.min()),
            q1=float(q1),
            median=float(median),
            q3=float(q3),
            max=float(values.max()),
            mean=float(values.mean()),
            n_positive=n_positive,
            frac_positive=n_positive / values.size,
            max_below_zero=bool(values.max() < COSINE_SIGN_BOUND),
            max_sequence=int(seq),
            max_position=int(pos) + 1,
        )
        rest = cos[:, 1:][np.isfinite(cos[:, 1:])]
        row["max_excl_first"] = float(rest.max()) if rest.size else None
    else:
        row.update(
            {k: None for k in ("min", "q1", "median", "q3", "max", "mean", "frac_positive")},
            n_positive=0,
            max_below_zero=None,
            max_sequence=None,
            max_position=None,
            max_excl_first=None,
        )
    return row, cosine_histogram(cos)


def middle_layers(n_layers: int) -> list[int]:
    """The "middle" layers of Figure 1's claim: all but the first and last quarter.

    Layers ``l`` with ``L/4 <= l < 3L/4`` (at least one layer: a one-layer model's middle is its
    only layer, 0).
    """
    lo, hi = math.ceil(n_layers / 4), math.ceil(3 * n_layers / 4)
    lo = min(lo, max(n_layers - 1, 0))
    return list(range(lo, min(max(hi, lo + 1), n_layers)))


def bos_max_readings(
    bos_alignment: pl.DataFrame, bound: float = COSINE_SIGN_BOUND, space: str = "Z"
) -> pl.DataFrame:
    """Both readings of Figure 1's claim per model: the maximum cosine over all positions and
    over positions ``>= 2`` (without :data:`FIRST_TEXT_POSITION`), per layer pooled over the
    given rows' datasets (the maximum of maxima is exact), counted over all and middle layers.

    ``bos_alignment``: rows of :func:`~sinkscope.geometry.analysis.analyze_file`'s or
    :func:`~sinkscope.geometry.summary.summarize`'s ``bos_alignment`` (columns ``model, space,
    layer, max, max_excl_first, max_position, n_positive, n_values``).
    A layer is "below" when its maximum is ``< bound`` (paper: 0, :data:`COSINE_SIGN_BOUND`; the
    claim passes its tolerance ``claims.geometry.bos_cosine_max``). Returns one row per model:
    ``n_layers``, ``middle_first``/``middle_last`` (:func:`middle_layers`), ``n_middle``;
    ``n_below_all``/``n_below_from2`` over all layers and ``n_mid_below_all``/
    ``n_mid_below_from2`` over the middle layers; the middle layers' largest maximum and its
    layer for each reading (``mid_max_all``, ``mid_max_all_layer``, ``mid_max_from2``,
    ``mid_max_from2_layer``); ``n_max_at_first`` / ``n_mid_max_at_first``: layers whose maximum
    over all positions sits at position 1; ``mid_frac_positive``: share of positive cosines in
    the middle layers; ``n_sequences``: the sequences the cosines come from (None where the
    rows do not say). Figure 1's panel title and the claim ``geometry.bos_cosine_below_zero``
    both print these numbers.
    """
    needed = ["model", "space", "layer", "max", "max_excl_first", "max_position"]
    missing = [c for c in needed + ["n_positive", "n_values"] if c not in bos_alignment.columns]
    if missing:
        raise ValueError(f"bos_alignment lacks columns {missing}")
    frame = bos_alignment.filter(pl.col("space") == space)
    rows: list[dict[str, Any]] = []
    for model in sorted(set(frame["model"].to_list())):
        per_layer = (
            frame.filter(pl.col("model") == model)
            .sort("max", descending=True, nulls_last=True)
            .group_by("layer")
            .agg(
                pl.col("max").first(),
                pl.col("max_position").first(),
                pl.col("max_excl_first").cast(pl.Float64).fill_null(float("nan")).max(),
                pl.col("n_positive").sum(),
                pl.col("n_values").sum(),
                *([pl.col("n_sequences").sum()] if "n_sequences" in frame.columns else []),
            )
            .sort("layer")
        )
        layers = per_layer["layer"].to_list()
        middle = middle_layers(len(layers))
        mid = per_layer.filter(pl.col("layer").is_in(middle))
        full = per_layer["max"].to_numpy().astype(np.float64)
        from2 = per_layer["max_excl_first"].to_numpy().astype(np.float64)
        mid_full = mid["max"].to_numpy().astype(np.float64)
        mid_from2 = mid["max_excl_first"].to_numpy().astype(np.float64)
        at_first = per_layer["max_position"].to_numpy() == FIRST_TEXT_POSITION
        mid_at_first = mid["max_position"].to_numpy() == FIRST_TEXT_POSITION

        def worst(values: np.ndarray, frame: pl.DataFrame = mid) -> tuple[float | None, int | None]:
            if not np.isfinite(values).any():
                return None, None
            k = int(np.nanargmax(values))
            return float(values[k]), int(frame["layer"][k])

        mid_max_all, mid_max_all_layer = worst(mid_full)
        mid_max_from2, mid_max_from2_layer = worst(mid_from2)
        n_values = int(mid["n_values"].sum())
        rows.append(
            {
                "model": model,
                "space": space,
                "bound": float(bound),
                "n_layers": len(layers),
                "middle_first": middle[0],
                "middle_last": middle[-1],
                "n_middle": mid.height,
                "n_below_all": int((full < bound).sum()),
                "n_below_from2": int((from2 < bound).sum()),
                "n_mid_below_all": int((mid_full < bound).sum()),
                "n_mid_below_from2": int((mid_from2 < bound).sum()),
                "mid_max_all": mid_max_all,
                "mid_max_all_layer": mid_max_all_layer,
                "mid_max_from2": mid_max_from2,
                "mid_max_from2_layer": mid_max_from2_layer,
                "n_max_at_first": int(at_first.sum()),
                "n_mid_max_at_first": int(mid_at_first.sum()),
                "mid_frac_positive": (
                    float(mid["n_positive"].sum() / n_values) if n_values else None
                ),
                "n_sequences": (
                    int(per_layer["n_sequences"].max())
                    if "n_sequences" in per_layer.columns
                    else None
                ),
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None)


def bos_max_statement(reading: Mapping[str, Any]) -> str:
    """Both readings of Figure 1's maximum, one row of :func:`bos_max_readings` in words."""
    b = reading
    bound = f"{b['bound']:g}"

    def at(value: float | None, layer: int | None) -> str:
        return "n/a" if value is None else f"{value:.3f} (layer {layer})"

    pct = "n/a" if b["mid_frac_positive"] is None else f"{100 * b['mid_frac_positive']:.1f}%"
    return (
        f"max cos(BOS, token) at the attention input in the middle layers "
        f"{b['middle_first']}..{b['middle_last']}: over all positions "
        f"{at(b['mid_max_all'], b['mid_max_all_layer'])}, below {bound} in "
        f"{b['n_mid_below_all']}/{b['n_middle']} middle layers ({b['n_below_all']}/"
        f"{b['n_layers']} layers); over positions >= 2 "
        f"{at(b['mid_max_from2'], b['mid_max_from2_layer'])}, below {bound} in "
        f"{b['n_mid_below_from2']}/{b['n_middle']} middle layers ({b['n_below_from2']}/"
        f"{b['n_layers']} layers); the maximum over all positions is at position "
        f"{FIRST_TEXT_POSITION} (the first text token after BOS) in {b['n_mid_max_at_first']}/"
        f"{b['n_middle']} middle layers; {pct} of the middle layers' cosines are > 0"
    )


def row_norms(a: np.ndarray) -> np.ndarray:
    """Euclidean norms over the last axis, computed in float64 block by block (any float dtype)."""
    a = np.asarray(a)
    out = np.empty(a.shape[:-1], dtype=np.float64)
    for block in blocks(a.shape[0]):
        out[block] = np.linalg.norm(a[block].astype(np.float64), axis=-1)
    return out


def relative_bos_norm(norms: np.ndarray) -> np.ndarray:
    """``norms[..., 0] / median(norms[..., 1:])``: BOS norm relative to the other tokens' median.

    ``norms``: ``(..., T1)`` with position 0 the BOS token. NaN where the median is 0.
    """
    a = np.asarray(norms, dtype=np.float64)
    median = np.median(a[..., 1:], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(median > 0, a[..., 0] / np.where(median > 0, median, 1.0), np.nan)
