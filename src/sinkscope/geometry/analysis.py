"""The per-pair geometry analysis: every table of one activation file (:func:`analyze_file`).

The three analyses (:mod:`sinkscope.geometry.alignment`, :mod:`sinkscope.geometry.halfspace`,
:mod:`sinkscope.geometry.values`) are streamed over the layers of one activation file
(:mod:`sinkscope.extraction.h5layout`) and, within a layer, over blocks of sequences (peak memory: a block's
float64 work arrays plus ``O(N T)`` per-sequence results), vectorised over heads and
sequences. :data:`TABLE_COLUMNS` names the columns of every per-pair table.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import polars as pl

from sinkscope.extraction.h5layout import (
    ATTENTION_PROBS,
    ATTR_DATASET_NAME,
    ATTR_HEAD_DIM,
    ATTR_MODEL_NAME,
    ATTR_N_KV_HEADS,
    RESIDUAL_X,
    TOKEN_IDS,
    WEIGHT_W_O,
    open_activations,
    read_attr,
)
from sinkscope.extraction.h5read import (
    InputProjection,
    default_block_size,
    read_layer,
    release_freed_memory,
)
from sinkscope.geometry.alignment import (
    COSINE_BINS,
    SPACES,
    blocks,
    bos_cosines,
    cosine_rows,
    relative_bos_norm,
    row_norms,
)
from sinkscope.geometry.halfspace import (
    ATTEND_THRESHOLD,
    PAIR_KEY,
    RESULT_COLUMNS,
    attending_tokens,
    halfspace_layer_rows,
)
from sinkscope.geometry.names import ALL_TOKENS, ATTENDING, BOS_MINUS_TOKEN, POINT_SETS
from sinkscope.geometry.values import (
    relative_rank,
    value_output_factor,
    value_output_norms,
)
from sinkscope.heads.classify import DEFAULT_THRESHOLDS, HeadClassThresholds, with_classes
from sinkscope.labels import POOLED

__all__ = ["ATTEND_THRESHOLD", "N_WORST", "TABLE_COLUMNS", "analyze_file", "halfspace_layer"]

#: Sequences listed in ``value_rank_worst`` per file (per model in the summary).
N_WORST = 5


#: Columns of every table of :func:`analyze_file` (and, where named alike,
#: :func:`~sinkscope.geometry.summary.summarize`).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "bos_alignment": (
        "model",
        "dataset",
        "space",
        "layer",
        "n_sequences",
        "context_length",
        "n_values",
        "min",
        "q1",
        "median",
        "q3",
        "max",
        "mean",
        "n_positive",
        "frac_positive",
        "max_below_zero",
        "max_sequence",
        "max_position",
        "max_excl_first",
    ),
    "bos_cosine_hist": (
        "model",
        "dataset",
        "space",
        "layer",
        "bin",
        "bin_lo",
        "bin_hi",
        "count",
    ),
    "halfspace": (*PAIR_KEY, "point_set", *RESULT_COLUMNS, "n_sink_heads", "attend_threshold"),
    "halfspace_layer": (
        "model",
        "dataset",
        "layer",
        "n_sequences",
        "context_length",
        "attend_threshold",
        "mean_n_sink_heads",
        "mean_n_attending",
        "n_with_attending",
        "frac_sink_representable",
        "frac_any_sink_representable",
        "frac_trivially_separable",
        "n_trivial_attending",
        "frac_sink_representable_nontrivial",
        *(f"{stat}_margin_{name}" for name in POINT_SETS for stat in ("min", "median")),
    ),
    "value_rank": (
        "model",
        "dataset",
        "layer",
        "kv_head",
        "sequence",
        "m",
        "n",
        "rank",
        "rel_rank",
        "sigma_ratio_min",
    ),
    "value_rank_worst": (
        "model",
        "dataset",
        "sequence",
        "m",
        "min_rel_rank",
        "mean_rel_rank",
        "min_layer",
        "min_kv_head",
        "n_unique_tokens",
        "n_repeated_tokens",
        "token_ids",
    ),
    "bos_value_norm": (
        "model",
        "dataset",
        "layer",
        "head",
        "kv_head",
        "n_sequences",
        "context_length",
        "bos_vo_norm",
        "median_vo_norm",
        "rel_bos_vo_norm",
        "rel_bos_vo_norm_min",
        "rel_bos_vo_norm_max",
        "rel_bos_value_norm",
        "bos_mass",
        "is_sink",
        "head_class",
    ),
    "bos_residual_norm": (
        "model",
        "dataset",
        "layer",
        "n_sequences",
        "context_length",
        "bos_norm",
        "median_norm",
        "rel_bos_norm",
        "rel_bos_norm_min",
        "rel_bos_norm_max",
    ),
}


def _head_classes(
    per_head: pl.DataFrame,
    model: str,
    dataset: str,
    n_layers: int,
    n_heads: int,
    thresholds: HeadClassThresholds,
) -> pl.DataFrame:
    """The file's rows of the head table with flags recomputed from the masses."""
    needed = ["layer", "head", "bos_mass", "diagonal_mass", "subdiagonal_mass"]
    missing = [c for c in needed if c not in per_head.columns]
    if missing:
        raise ValueError(f"per-head table lacks columns {missing}")
    frame = per_head
    for column, value in (("model", model), ("dataset", dataset)):
        if column in frame.columns:
            frame = frame.filter(pl.col(column) == value)
    frame = frame.select(needed).sort("layer", "head")
    expected = n_layers * n_heads
    if frame.height != expected or frame.select("layer", "head").is_duplicated().any():
        raise ValueError(
            f"per-head table has {frame.height} rows for {model}/{dataset}; expected one per "
            f"(layer, head), {expected} in all"
        )
    return with_classes(frame, thresholds).select(
        pl.col("layer", "head").cast(pl.Int64), *needed[2:], "is_sink", "head_class"
    )


def _frame(
    rows: list[dict[str, Any]] | dict[str, Any], name: str, ids: dict[str, Any]
) -> pl.DataFrame:
    frame = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    frame = frame.with_columns(*(pl.lit(v).alias(k) for k, v in ids.items()))
    return frame.select(TABLE_COLUMNS[name])


def halfspace_layer(halfspace: pl.DataFrame, pooled: bool = False) -> pl.DataFrame:
    """Per-layer summary of ``halfspace`` rows per (model, dataset) or, ``pooled``, per model
    over all its datasets (``dataset = "all"``)."""
    if halfspace.height == 0:
        return pl.DataFrame(schema={c: pl.Null for c in TABLE_COLUMNS["halfspace_layer"]})
    wide = halfspace.pivot(
        on="point_set",
        index=[*PAIR_KEY, "n_sink_heads", "attend_threshold"],
        values=["halfspace", "margin", "n_points", "trivially_separable"],
        separator="|",
    )
    if pooled:
        wide = wide.with_columns(dataset=pl.lit(POOLED))
    keys = ["model", "dataset"]
    has_attending = pl.col(f"n_points|{ATTENDING}") > 0
    representable = pl.col(f"halfspace|{BOS_MINUS_TOKEN}") & pl.col(f"halfspace|{ATTENDING}")
    trivial_attending = pl.col(f"trivially_separable|{BOS_MINUS_TOKEN}") & pl.col(
        f"trivially_separable|{ATTENDING}"
    )
    aggs = [
        pl.len().cast(pl.Int64).alias("n_sequences"),
        pl.col("attend_threshold").first(),
        pl.col("n_sink_heads").cast(pl.Float64).mean().alias("mean_n_sink_heads"),
        pl.col(f"n_points|{ATTENDING}").cast(pl.Float64).mean().alias("mean_n_attending"),
        has_attending.sum().cast(pl.Int64).alias("n_with_attending"),
        (representable.filter(has_attending).cast(pl.Float64).mean()).alias(
            "frac_sink_representable"
        ),
        (pl.col(f"halfspace|{BOS_MINUS_TOKEN}") & pl.col(f"halfspace|{ALL_TOKENS}"))
        .cast(pl.Float64)
        .mean()
        .alias("frac_any_sink_representable"),
        (
            pl.col(f"trivially_separable|{BOS_MINUS_TOKEN}")
            & pl.col(f"trivially_separable|{ALL_TOKENS}")
        )
        .cast(pl.Float64)
        .mean()
        .alias("frac_trivially_separable"),
        (has_attending & trivial_attending).sum().cast(pl.Int64).alias("n_trivial_attending"),
        (
            representable.filter(has_attending & ~trivial_attending)
            .cast(pl.Float64)
            .mean()
            .alias("frac_sink_representable_nontrivial")
        ),
    ]
    for name in POINT_SETS:
        aggs += [
            pl.col(f"margin|{name}").min().alias(f"min_margin_{name}"),
            pl.col(f"margin|{name}").median().alias(f"median_margin_{name}"),
        ]
    return wide.group_by(*keys, "layer").agg(aggs).sort(*keys, "layer")


def analyze_file(
    h5_path: str | os.PathLike[str],
    per_head: pl.DataFrame,
    thresholds: HeadClassThresholds = DEFAULT_THRESHOLDS,
    attend_threshold: float = ATTEND_THRESHOLD,
    block_size: int | None = None,
) -> dict[str, pl.DataFrame]:
    """All geometry tables of one activation file (one model x dataset pair).

    Streams over layers and, within a layer, over blocks of ``block_size`` sequences (default
    :func:`default_block_size`; the tables do not depend on it): ``Z``, ``X``, values and the
    BOS column of the sink heads' maps are read a block at a time, and only per-sequence
    results (``O(N T)`` numbers) are kept for the layer. ``per_head``: the head
    classification of this file
    (:func:`sinkscope.heads.classify.classify_file`); rows of other model/dataset pairs are ignored
    and ``is_sink``/``head_class`` are recomputed from its masses with ``thresholds``.
    ``attend_threshold``: BOS attention that puts a token in ``J``
    (:mod:`sinkscope.geometry.halfspace`).

    Returns tables (columns in :data:`TABLE_COLUMNS`), each with ``model`` and ``dataset``:

    * ``bos_alignment``: per space (``"Z"`` attention input, Figure 1; ``"X"`` residual stream,
      whose cosines equal those of the gain-free RMS-normalised input) and layer, the
      distribution of ``cos(z_0, z_i)`` over all sequences and tokens (exact quartiles; whiskers
      min/max), its mean, the count and fraction of positive cosines, ``max_below_zero`` (§4's
      claim) and where the maximum occurs.
    * ``bos_cosine_hist``: the non-empty bins of the fixed cosine histogram (exact pooling).
    * ``halfspace``: per (layer, sequence, point set) the Prop. 4.1 test
      (:class:`~sinkscope.geometry.halfspace_solver.HalfspaceResult` fields, plus ``n_sink_heads`` of the
      layer and ``attend_threshold``).
    * ``halfspace_layer``: per layer the fraction of sequences (with ``J`` non-empty) whose sink
      is representable, the fraction where every sink pattern is (``J = [T]``), the fraction
      that is trivially separable, ``n_trivial_attending`` (sequences with ``J`` non-empty whose
      two sets are both trivially separable), ``frac_sink_representable_nontrivial`` (the
      representable fraction among the other sequences with ``J`` non-empty; null if none) and
      min/median margins per point set.
    * ``value_rank``: per (layer, kv_head, sequence) the value-matrix rank (Appendix E.2).
    * ``value_rank_worst``: the ``N_WORST`` sequences of lowest mean relative rank with their
      first ``m`` token ids (space-separated) and repeated-token counts.
    * ``bos_value_norm``: per (layer, head) BOS value-output norm vs. the other tokens (§6),
      with ``n_sequences``, ``context_length``, joined with ``bos_mass``, ``is_sink`` and
      ``head_class``.
    * ``bos_residual_norm``: per layer BOS residual-stream norm vs. the other tokens.
    """
    if not 0.0 <= attend_threshold <= 1.0:
        raise ValueError(f"attend_threshold must be in [0, 1], got {attend_threshold}")
    with open_activations(h5_path) as handle:
        model = str(read_attr(handle, ATTR_MODEL_NAME))
        dataset = str(read_attr(handle, ATTR_DATASET_NAME))
        x_ds, probs_ds = handle[RESIDUAL_X], handle[ATTENTION_PROBS]
        n_layers, n_seq, t1, _ = x_ds.shape
        n_heads = probs_ds.shape[2]
        n_kv = int(read_attr(handle, ATTR_N_KV_HEADS))
        head_dim = int(read_attr(handle, ATTR_HEAD_DIM))
        context_length = t1 - 1
        ids = {"model": model, "dataset": dataset}
        heads = _head_classes(per_head, model, dataset, n_layers, n_heads, thresholds)
        sink = heads["is_sink"].to_numpy().reshape(n_layers, n_heads)
        token_ids = handle[TOKEN_IDS][:]
        m = min(t1, head_dim)

        align_rows: list[dict[str, Any]] = []
        hist_rows: list[pl.DataFrame] = []
        half_rows: list[dict[str, Any]] = []
        rank_parts: list[pl.DataFrame] = []
        vo_parts: list[pl.DataFrame] = []
        resid_rows: list[dict[str, Any]] = []
        size = default_block_size(handle) if block_size is None else int(block_size)
        if size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        for layer in range(n_layers):
            sink_heads = np.flatnonzero(sink[layer])
            w_o = handle[WEIGHT_W_O][layer]
            vo_factor = value_output_factor(w_o)
            projection = InputProjection.read(handle, layer)
            # per-sequence results of the layer, filled block by block (a few sequences of Z,
            # X, values and BOS attention are read at a time); the layer's statistics are
            # taken from the complete arrays, so they do not depend on the block size
            cos = {space: np.empty((n_seq, context_length)) for space in SPACES}
            x_norms = np.empty((n_seq, t1))
            rank = np.empty((n_seq, n_kv), dtype=np.int64)
            rel_rank = np.empty((n_seq, n_kv))
            ratio = np.empty((n_seq, n_kv))
            value_norms = np.empty((n_seq, n_heads, t1))
            vo_norms = np.empty((n_seq, n_heads, t1))
            for block in blocks(n_seq, size):
                x = read_layer(x_ds, layer, block)
                z = projection.Z(x)  # float32; float64 copies made per block
                # 1. cosines in both spaces
                cos["Z"][block] = bos_cosines(z)
                cos["X"][block] = bos_cosines(x)
                # half-space test on Z with J from the layer's sink heads
                bos_att = np.zeros((z.shape[0], sink_heads.size, context_length), np.float32)
                if sink_heads.size:
                    bos_att[:] = read_layer(
                        probs_ds, layer, block, (slice(None), slice(1, None), 0)
                    )[:, sink_heads]
                attend = attending_tokens(bos_att, attend_threshold)
                for row in halfspace_layer_rows(z, attend):
                    row.update(
                        sequence=row["sequence"] + block.start,
                        layer=layer,
                        n_sink_heads=int(sink_heads.size),
                        attend_threshold=attend_threshold,
                    )
                    half_rows.append(row)
                # massive activations on X
                x_norms[block] = row_norms(x)
                # 2. value ranks and 3. BOS value-output norms
                values = projection.values(z)  # (B, K, T1, hd)
                del z, x, bos_att, attend
                rank[block], rel_rank[block], ratio[block] = relative_rank(values[:, :, :m])
                value_norms[block], vo_norms[block] = value_output_norms(values, w_o, vo_factor)
                del values
            for space in SPACES:
                row, counts = cosine_rows(space, layer, cos[space])
                align_rows.append(row)
                nonzero = np.flatnonzero(counts)
                hist_rows.append(
                    pl.DataFrame(
                        {
                            "space": [space] * nonzero.size,
                            "layer": np.full(nonzero.size, layer, dtype=np.int64),
                            "bin": nonzero.astype(np.int64),
                            "bin_lo": -1.0 + nonzero * (2.0 / COSINE_BINS),
                            "bin_hi": -1.0 + (nonzero + 1) * (2.0 / COSINE_BINS),
                            "count": counts[nonzero].astype(np.int64),
                        }
                    )
                )
            rel = relative_bos_norm(x_norms)
            resid_rows.append(
                {
                    "layer": layer,
                    "n_sequences": n_seq,
                    "context_length": context_length,
                    "bos_norm": float(x_norms[:, 0].mean()),
                    "median_norm": float(np.median(x_norms[:, 1:], axis=1).mean()),
                    "rel_bos_norm": float(np.nanmean(rel)),
                    "rel_bos_norm_min": float(np.nanmin(rel)),
                    "rel_bos_norm_max": float(np.nanmax(rel)),
                }
            )
            rank_parts.append(
                pl.DataFrame(
                    {
                        "layer": np.full(n_seq * n_kv, layer, dtype=np.int64),
                        "kv_head": np.tile(np.arange(n_kv, dtype=np.int64), n_seq),
                        "sequence": np.repeat(np.arange(n_seq, dtype=np.int64), n_kv),
                        "m": pl.Series([m] * (n_seq * n_kv), dtype=pl.Int64),
                        "n": pl.Series([head_dim] * (n_seq * n_kv), dtype=pl.Int64),
                        "rank": rank.ravel(),
                        "rel_rank": rel_rank.ravel(),
                        "sigma_ratio_min": ratio.ravel(),
                    }
                )
            )
            rel_vo = relative_bos_norm(vo_norms)  # (N, H)
            rel_v = relative_bos_norm(value_norms)
            vo_parts.append(
                pl.DataFrame(
                    {
                        "layer": np.full(n_heads, layer, dtype=np.int64),
                        "head": np.arange(n_heads, dtype=np.int64),
                        "kv_head": np.arange(n_heads, dtype=np.int64) // (n_heads // n_kv),
                        "n_sequences": np.full(n_heads, n_seq, dtype=np.int64),
                        "context_length": np.full(n_heads, context_length, dtype=np.int64),
                        "bos_vo_norm": vo_norms[:, :, 0].mean(axis=0),
                        "median_vo_norm": np.median(vo_norms[:, :, 1:], axis=-1).mean(axis=0),
                        "rel_bos_vo_norm": np.nanmean(rel_vo, axis=0),
                        "rel_bos_vo_norm_min": np.nanmin(rel_vo, axis=0),
                        "rel_bos_vo_norm_max": np.nanmax(rel_vo, axis=0),
                        "rel_bos_value_norm": np.nanmean(rel_v, axis=0),
                    }
                )
            )
            del cos, x_norms, value_norms, vo_norms
            release_freed_memory()

    tables: dict[str, pl.DataFrame] = {}
    tables["bos_alignment"] = _frame(
        [{**r, "n_sequences": n_seq, "context_length": context_length} for r in align_rows],
        "bos_alignment",
        ids,
    )
    tables["bos_cosine_hist"] = (
        pl.concat(hist_rows)
        .with_columns(*(pl.lit(v).alias(k) for k, v in ids.items()))
        .select(TABLE_COLUMNS["bos_cosine_hist"])
    )
    halfspace = _frame(half_rows, "halfspace", ids).with_columns(
        pl.col("halfspace").cast(pl.Boolean),
        pl.col("margin", "margin_upper").cast(pl.Float64),
    )
    tables["halfspace"] = halfspace
    tables["halfspace_layer"] = (
        halfspace_layer(halfspace)
        .with_columns(context_length=pl.lit(context_length, dtype=pl.Int64))
        .select(TABLE_COLUMNS["halfspace_layer"])
    )
    value_rank = (
        pl.concat(rank_parts)
        .with_columns(*(pl.lit(v).alias(k) for k, v in ids.items()))
        .select(TABLE_COLUMNS["value_rank"])
    )
    tables["value_rank"] = value_rank
    tables["value_rank_worst"] = _worst_sequences(value_rank, token_ids[:, :m], N_WORST)
    tables["bos_value_norm"] = (
        pl.concat(vo_parts)
        .join(
            heads.select("layer", "head", "bos_mass", "is_sink", "head_class"), on=["layer", "head"]
        )
        .with_columns(*(pl.lit(v).alias(k) for k, v in ids.items()))
        .select(TABLE_COLUMNS["bos_value_norm"])
        .sort("layer", "head")
    )
    tables["bos_residual_norm"] = _frame(resid_rows, "bos_residual_norm", ids)
    return tables


def _worst_sequences(value_rank: pl.DataFrame, prefixes: np.ndarray, k: int) -> pl.DataFrame:
    """The ``k`` sequences of lowest mean relative value rank, with their first ``m`` tokens."""
    per_seq = (
        value_rank.sort("rel_rank", "layer", "kv_head")
        .group_by("model", "dataset", "sequence")
        .agg(
            pl.col("m").first(),
            pl.col("rel_rank").min().alias("min_rel_rank"),
            pl.col("rel_rank").mean().alias("mean_rel_rank"),
            pl.col("layer").first().alias("min_layer"),
            pl.col("kv_head").first().alias("min_kv_head"),
        )
        .sort("mean_rel_rank", "min_rel_rank", "sequence")
        .head(k)
    )
    seqs = per_seq["sequence"].to_numpy()
    unique = [int(np.unique(prefixes[s]).size) for s in seqs]
    return per_seq.with_columns(
        n_unique_tokens=pl.Series(unique, dtype=pl.Int64),
        n_repeated_tokens=pl.Series([int(prefixes.shape[1]) - u for u in unique], dtype=pl.Int64),
        token_ids=pl.Series(
            [" ".join(map(str, prefixes[s].tolist())) for s in seqs], dtype=pl.String
        ),
    ).select(TABLE_COLUMNS["value_rank_worst"])
