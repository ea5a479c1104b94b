"""Sink representability (§4, Proposition 4.1, Appendix A): the exact open-half-space test.

The exact condition is Proposition 4.1 (proof in Appendix A): a bilinear score ``W`` with
``z_j^T W z_0 > z_j^T W z_i`` for all ``j in J`` and ``i in [T]`` exists iff

* ``{z_0 - z_i : i in [T]}`` lies in an open half-space, and
* ``{z_j : j in J}`` lies in an open half-space,

where "a finite set ``S`` lies in an open half-space" means that some ``w`` has ``w . v > 0``
for every ``v in S`` (for ``J`` empty the proposition is vacuous). By Gordan's theorem this is
the case iff the origin is not in the convex hull of ``S``, and the largest achievable margin of
the unit-normalised set, ``gamma = max_{|w|=1} min_v w . v/|v|``, equals the distance from the
origin to ``conv{v/|v|}`` (:func:`halfspace_margin`). ``gamma`` is the cosine of the half-angle
of the narrowest cone around ``w`` that holds the set: a continuous measure of how comfortably
the condition holds. Both conditions are invariant under an invertible linear map of the
embeddings (``w -> A^{-T} w``), so testing ``Z`` with the learnable RMSNorm gain is the same as
testing the gain-free normalised input of the paper's §3 setting (gains are non-zero). The
proposition allows any ``W`` in ``R^{d x d}``; a real head's ``W_Q^T W_K`` has rank at most
``head_dim`` and rotary positions make it position dependent, so "representable" here is the
proposition's (necessary) geometric condition, not a statement about a particular head.

Note: when the set has at most ``dim`` points and full rank, the condition holds trivially
(solve ``V w = 1``); with ``T = 256`` tokens and ``d_model`` 576 (SmolLM2-135M) or 640
(Gemma-3-270M) *every* generic sequence satisfies it, so the Boolean answer carries little
information there and the margin is the informative number. The tables say so per row
(``n_points``, ``dim``, ``rank``, ``trivially_separable``); :func:`representability_counts`
counts the trivial (layer, sequence) pairs apart, and the claim is decided on the others
only (not applicable when none is left). On long sequences (``T' > d_model``, where the test can
fail; :mod:`sinkscope.geometry.long_context`) :func:`long_context_counts` counts the pairs, and the claim is decided there when the table
exists (:func:`sinkscope.claims.checks.geometry.sink_representable_statements`).

Sink-attending tokens ``J`` (configurable through ``attend_threshold``)
------------------------------------------------------------------------
In layer ``l`` and sequence ``n``, ``J`` is the set of tokens ``i >= 1`` whose attention
probability on BOS, ``A[n, h, i, 0]``, is ``>= attend_threshold`` (default :data:`ATTEND_THRESHOLD`) in at least one
head ``h`` of layer ``l`` that the head classification flags as a sink (``is_sink`` recomputed
from the masses with the given :class:`~sinkscope.heads.classify.HeadClassThresholds`). A layer
without sink heads has ``J`` empty in every sequence; such rows get a null ``halfspace``/``margin``
for the ``"attending"`` set and are left out of ``frac_sink_representable``. The point set
``"all_tokens"`` (``J = [T]``) asks whether *every* sink pattern is representable, the reading of
Figure 1 ("allowing each attention head to produce any sink pattern").

The test of one point set (the solver, its tolerance, time budget and nulls) is
:mod:`sinkscope.geometry.halfspace_solver`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.config_schema import schema_default
from sinkscope.geometry.alignment import blocks
from sinkscope.geometry.halfspace_solver import (
    HALFSPACE_TOL,
    HalfspaceResult,
    halfspace_from_unit,
    set_ranks,
    torch_threads,
    wendel_probability,
)
from sinkscope.geometry.names import (
    ALL_TOKENS,
    ATTENDING,
    BOS_MINUS_TOKEN,
    LONG_CONTEXT_POINT_SETS,
    POINT_SETS,
)
from sinkscope.text import plural

__all__ = [
    "ATTEND_THRESHOLD",
    "PAIR_KEY",
    "RESULT_COLUMNS",
    "attending_tokens",
    "halfspace_layer_rows",
    "long_context_counts",
    "long_context_statement",
    "null_pass_fraction",
    "representability_counts",
    "representability_statement",
]

#: Default BOS attention that puts a token in ``J`` (Prop. 4.1): the config schema's
#: ``geometry.attend_threshold``.
ATTEND_THRESHOLD: float = schema_default("geometry", "attend_threshold")

#: The columns that name one (layer, sequence) pair of the half-space tables (``halfspace`` of
#: :func:`sinkscope.geometry.analysis.analyze_file` and the long-context table).
PAIR_KEY: tuple[str, ...] = ("model", "dataset", "layer", "sequence")
#: The columns of one :class:`HalfspaceResult` in those tables: its fields, in order.
RESULT_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HalfspaceResult))


def attending_tokens(bos_attention: np.ndarray, threshold: float = ATTEND_THRESHOLD) -> np.ndarray:
    """The sink-attending set ``J`` per sequence as a mask ``(N, T)`` (module docstring).

    ``bos_attention``: ``(N, S, T)`` attention on BOS of tokens ``1..T`` in the ``S`` sink heads
    of one layer (``S`` may be 0). Token ``i`` is in ``J`` iff its BOS attention is
    ``>= threshold`` in at least one of them.
    """
    att = np.asarray(bos_attention)
    if att.ndim != 3:
        raise ValueError(f"BOS attention must have shape (N, S, T), got {att.shape}")
    if att.shape[1] == 0:
        return np.zeros((att.shape[0], att.shape[2]), dtype=bool)
    return (att.astype(np.float64) >= threshold).any(axis=1)


def _unit_rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows scaled to unit norm (zero rows left zero) and the mask of zero rows."""
    norms = np.linalg.norm(vectors, axis=-1)
    zero = norms == 0
    return vectors / np.where(zero, 1.0, norms)[..., None], zero


def halfspace_layer_rows(
    z_layer: np.ndarray,
    attend: np.ndarray | None,
    tol: float = HALFSPACE_TOL,
    max_seconds: float | None = None,
) -> list[dict[str, Any]]:
    """Rows of the ``halfspace`` table for one layer: 3 point sets per sequence.

    ``attend``: the sink-attending mask ``(N, T)`` of :func:`attending_tokens`, or None for the two
    sets that need no attention (:data:`~sinkscope.geometry.names.LONG_CONTEXT_POINT_SETS`; the
    long-context test). Gram matrices and full-rank checks are batched over blocks of sequences
    (torch, one thread); the active-set solve runs per sequence and point set on the ``T x T`` Gram
    matrix, within ``max_seconds`` each (None: no budget).
    """
    z_all = np.asarray(z_layer)
    rows: list[dict[str, Any]] = []
    with torch_threads(1):
        for block in blocks(z_all.shape[0]):
            z = z_all[block].astype(np.float64)
            unit_tok, zero_tok = _unit_rows(z[:, 1:])
            unit_diff, zero_diff = _unit_rows(z[:, :1] - z[:, 1:])
            # both Gram matrices from one product R = Z Z^T (position 0 included):
            # (z0 - zi).(z0 - zj) = R00 - R0i - R0j + Rij; norms are computed on the vectors
            z_t = torch.from_numpy(z)
            r = torch.bmm(z_t, z_t.transpose(1, 2)).numpy()
            tok_norms = np.linalg.norm(z[:, 1:], axis=-1)
            diff_norms = np.linalg.norm(z[:, :1] - z[:, 1:], axis=-1)
            del z, z_t
            tok_scale = np.where(zero_tok, 1.0, tok_norms)
            diff_scale = np.where(zero_diff, 1.0, diff_norms)
            gram_tok = r[:, 1:, 1:] / (tok_scale[:, :, None] * tok_scale[:, None, :])
            r0 = r[:, 0, 1:]
            gram_diff = (r[:, :1, :1] - r0[:, :, None] - r0[:, None, :] + r[:, 1:, 1:]) / (
                diff_scale[:, :, None] * diff_scale[:, None, :]
            )
            del r
            rank_tok = set_ranks(unit_tok, gram_tok)
            rank_diff = set_ranks(unit_diff, gram_diff)
            for local, seq in enumerate(range(block.start, block.stop)):
                results = {
                    BOS_MINUS_TOKEN: halfspace_from_unit(
                        unit_diff[local],
                        gram_diff[local],
                        bool(zero_diff[local].any()),
                        tol,
                        int(rank_diff[local]),
                        max_seconds,
                    ),
                    ALL_TOKENS: halfspace_from_unit(
                        unit_tok[local],
                        gram_tok[local],
                        bool(zero_tok[local].any()),
                        tol,
                        int(rank_tok[local]),
                        max_seconds,
                    ),
                }

                if attend is not None:
                    members = np.flatnonzero(attend[seq])
                    # a subset of linearly independent vectors is independent: no factorisation
                    full = rank_tok[local] == unit_tok.shape[1]
                    results[ATTENDING] = halfspace_from_unit(
                        unit_tok[local, members],
                        gram_tok[local][np.ix_(members, members)],
                        bool(zero_tok[local, members].any()),
                        tol,
                        rank=int(members.size) if full else None,
                        max_seconds=max_seconds,
                    )
                for name in POINT_SETS if attend is not None else LONG_CONTEXT_POINT_SETS:
                    rows.append(
                        {"sequence": seq, "point_set": name, **dataclasses.asdict(results[name])}
                    )
    return rows


def representability_counts(halfspace: pl.DataFrame) -> pl.DataFrame:
    """Proposition 4.1's test per model, trivial cases apart from the informative ones.

    ``halfspace``: per-sequence rows of :func:`~sinkscope.geometry.analysis.analyze_file` (any
    number of datasets, pooled per model). A *case* is a (dataset, layer, sequence) whose sink heads
    have sink-attending tokens (``J`` non-empty); it is *trivial* when both sets, ``{z_0 - z_i}``
    and ``{z_j : j in J}``, are ``trivially_separable`` (at most ``d_model`` points of full rank:
    some ``w`` solves ``V w = 1``, so the half-space condition holds for every such set and the test
    cannot fail). Only the non-trivial cases can tell a representable sink from a non-representable
    one. The same split is made for "every sink pattern" (``J = [T]``, ``{z_0 - z_i}`` with
    ``{z_i}``) over all (dataset, layer, sequence) pairs. Columns: ``model, n_pairs, n_cases,
    n_trivial, n_nontrivial, n_representable, n_representable_nontrivial,
    frac_representable_nontrivial`` (null when no case is non-trivial), ``n_any_trivial,
    n_any_nontrivial, n_any_representable, n_any_representable_nontrivial,
    frac_any_representable_nontrivial, min_margin`` (smallest margin of ``{z_0 - z_i}`` and
    ``{z_i}``). The half-space figure's panel titles print these numbers, and the claim
    ``geometry.sink_representable`` where no long-context table decides it
    (:func:`sinkscope.claims.checks.geometry.sink_representable_statements`; on long-context
    rows the "every sink pattern" columns are :func:`long_context_counts`').
    """
    values = ["halfspace", "trivially_separable", "n_points", "margin"]
    missing = [c for c in (*PAIR_KEY, "point_set", *values) if c not in halfspace.columns]
    if missing:
        raise ValueError(f"halfspace lacks columns {missing}")
    wide = halfspace.pivot(
        on="point_set",
        index=[*PAIR_KEY],
        values=values,
        separator="|",
    )
    for name in POINT_SETS:  # a table may lack a point set entirely (e.g. no sink heads)
        for value, dtype in (
            ("halfspace", pl.Boolean),
            ("trivially_separable", pl.Boolean),
            ("n_points", pl.Int64),
            ("margin", pl.Float64),
        ):
            column = f"{value}|{name}"
            if column not in wide.columns:
                wide = wide.with_columns(pl.lit(None, dtype=dtype).alias(column))

    def col(value: str, name: str) -> pl.Expr:
        return pl.col(f"{value}|{name}")

    case = col("n_points", ATTENDING).fill_null(0) > 0
    trivial = (
        col("trivially_separable", BOS_MINUS_TOKEN) & col("trivially_separable", ATTENDING)
    ).fill_null(False)
    rep = (col("halfspace", BOS_MINUS_TOKEN) & col("halfspace", ATTENDING)).fill_null(False)
    any_trivial = (
        col("trivially_separable", BOS_MINUS_TOKEN) & col("trivially_separable", ALL_TOKENS)
    ).fill_null(False)
    any_rep = (col("halfspace", BOS_MINUS_TOKEN) & col("halfspace", ALL_TOKENS)).fill_null(False)

    def count(expr: pl.Expr, name: str) -> pl.Expr:
        return expr.sum().cast(pl.Int64).alias(name)

    counts = (
        wide.group_by("model")
        .agg(
            pl.len().cast(pl.Int64).alias("n_pairs"),
            count(case, "n_cases"),
            count(case & trivial, "n_trivial"),
            count(case & ~trivial, "n_nontrivial"),
            count(case & rep, "n_representable"),
            count(case & ~trivial & rep, "n_representable_nontrivial"),
            count(any_trivial, "n_any_trivial"),
            count(~any_trivial, "n_any_nontrivial"),
            count(any_rep, "n_any_representable"),
            count(~any_trivial & any_rep, "n_any_representable_nontrivial"),
            pl.min_horizontal(
                col("margin", BOS_MINUS_TOKEN).min(), col("margin", ALL_TOKENS).min()
            ).alias("min_margin"),
        )
        .sort("model")
    )
    return counts.with_columns(
        frac_representable_nontrivial=pl.when(pl.col("n_nontrivial") > 0).then(
            pl.col("n_representable_nontrivial") / pl.col("n_nontrivial")
        ),
        frac_any_representable_nontrivial=pl.when(pl.col("n_any_nontrivial") > 0).then(
            pl.col("n_any_representable_nontrivial") / pl.col("n_any_nontrivial")
        ),
    ).select(
        "model",
        "n_pairs",
        "n_cases",
        "n_trivial",
        "n_nontrivial",
        "n_representable",
        "n_representable_nontrivial",
        "frac_representable_nontrivial",
        "n_any_trivial",
        "n_any_nontrivial",
        "n_any_representable",
        "n_any_representable_nontrivial",
        "frac_any_representable_nontrivial",
        "min_margin",
    )


def long_context_counts(halfspace_long: pl.DataFrame) -> pl.DataFrame:
    """Proposition 4.1's test on long sequences per model
    (:func:`~sinkscope.geometry.long_context.solve_long_context` rows).

    A *pair* is a (dataset, layer, sequence); the sink is representable for every pattern
    (``J = [T']``) when both ``{z_0 - z_i}`` and ``{z_i}`` lie in an open half-space. The counts
    are :func:`representability_counts`' "every sink pattern" columns (trivial pairs apart;
    with ``T' > d_model`` there are none), plus the necessary condition alone
    (``{z_0 - z_i}`` in a half-space: without it no non-empty ``J`` is representable). Columns:
    ``model, n_datasets, n_sequences`` (summed over datasets), ``seq_len, dim, n_pairs,
    n_trivial, n_nontrivial, n_representable_nontrivial, frac_representable_nontrivial`` (null
    when no pair is non-trivial), ``n_bos_halfspace_nontrivial, min_margin``, ``n_undecided``
    (pairs with a set whose solve ran out of its time budget before deciding it, ``halfspace``
    null; counted among the non-trivial pairs, not among the representable ones) and the Gaussian
    null's sets (:data:`~sinkscope.geometry.long_context.NULL_COLUMNS`; zero and null where none
    ran): ``n_null`` (sets with a null draw), ``n_null_halfspace`` (null draws in an open
    half-space), ``n_null_undecided``, ``max_null_margin_upper`` (the largest upper bound of a
    null margin) and ``n_margin_above_null`` (sets whose certified margin exceeds their null's
    upper bound).
    """
    needed = ["dataset", "sequence", "seq_len", "dim", "point_set", "halfspace"]
    missing = [c for c in needed if c not in halfspace_long.columns]
    if missing:
        raise ValueError(f"long-context halfspace table lacks columns {missing}")
    counts = representability_counts(halfspace_long)
    undecided = (
        halfspace_long.filter(pl.col("halfspace").is_null() & (pl.col("n_points") > 0))
        .select(PAIR_KEY)
        .unique()
        .group_by("model")
        .agg(pl.len().cast(pl.Int64).alias("n_undecided"))
    )
    with_null = (
        halfspace_long.filter(pl.col("null_margin_upper").is_not_null())
        if "null_margin_upper" in halfspace_long.columns
        else halfspace_long.clear()
    )
    nulls = with_null.group_by("model").agg(
        pl.len().cast(pl.Int64).alias("n_null"),
        pl.col("null_halfspace").fill_null(False).sum().cast(pl.Int64).alias("n_null_halfspace"),
        pl.col("null_halfspace").is_null().sum().cast(pl.Int64).alias("n_null_undecided"),
        pl.col("null_margin_upper").max().alias("max_null_margin_upper"),
        (pl.col("margin").fill_null(0.0) > pl.col("null_margin_upper"))
        .sum()
        .cast(pl.Int64)
        .alias("n_margin_above_null"),
    )
    bos = halfspace_long.filter(pl.col("point_set") == BOS_MINUS_TOKEN)
    extra = bos.group_by("model").agg(
        pl.col("dataset").n_unique().cast(pl.Int64).alias("n_datasets"),
        pl.struct("dataset", "sequence").n_unique().cast(pl.Int64).alias("n_sequences"),
        pl.col("seq_len").max().cast(pl.Int64),
        pl.col("dim").max().cast(pl.Int64),
        (pl.col("halfspace").fill_null(False) & ~pl.col("trivially_separable"))
        .sum()
        .cast(pl.Int64)
        .alias("n_bos_halfspace_nontrivial"),
    )
    return (
        counts.join(extra, on="model", how="left")
        .join(undecided, on="model", how="left")
        .join(nulls, on="model", how="left")
        .with_columns(
            pl.col(
                "n_undecided",
                "n_null",
                "n_null_halfspace",
                "n_null_undecided",
                "n_margin_above_null",
            )
            .fill_null(0)
            .cast(pl.Int64)
        )
        .select(
            "model",
            "n_datasets",
            "n_sequences",
            "seq_len",
            "dim",
            "n_pairs",
            pl.col("n_any_trivial").alias("n_trivial"),
            pl.col("n_any_nontrivial").alias("n_nontrivial"),
            pl.col("n_any_representable_nontrivial").alias("n_representable_nontrivial"),
            pl.col("frac_any_representable_nontrivial").alias("frac_representable_nontrivial"),
            "n_bos_halfspace_nontrivial",
            "min_margin",
            "n_undecided",
            "n_null",
            "n_null_halfspace",
            "n_null_undecided",
            pl.col("max_null_margin_upper").cast(pl.Float64),
            "n_margin_above_null",
        )
        .sort("model")
    )


def long_context_statement(counts: Mapping[str, Any]) -> str:
    """One row of :func:`long_context_counts` in words."""
    r = counts
    text = (
        f"long context (T' = {r['seq_len'] - 1} tokens > d_model = {r['dim']}; "
        f"{r['n_sequences']} sequences over {plural(r['n_datasets'], 'dataset')}; every sink "
        f"pattern, J = all tokens): {r['n_trivial']} of {r['n_pairs']} (layer, sequence) pairs "
        f"trivially separable; "
    )
    if r["n_nontrivial"]:
        text += (
            f"both sets lie in an open half-space in {r['n_representable_nontrivial']} of the "
            f"{r['n_nontrivial']} others ({100 * r['frac_representable_nontrivial']:.1f}%), "
            f"{{z_0 - z_i}} alone in {r['n_bos_halfspace_nontrivial']}"
        )
    else:
        text += "none is non-trivial"
    if r.get("n_undecided"):
        text += (
            f"; {r['n_undecided']} undecided (a solve ran out of "
            f"geometry.long_context.solve_seconds; neither counted as holding nor as failing)"
        )
    if r["min_margin"] is not None:
        text += f"; smallest margin {r['min_margin']:.3g}"
    null = wendel_probability(int(r["seq_len"]) - 1, int(r["dim"]))
    text += (
        f"; null: {r['seq_len'] - 1} random points in {r['dim']} dimensions lie in an open "
        f"half-space with probability {null:.3g} (Wendel)"
    )
    if r.get("n_null"):
        stopped = int(r["n_null_undecided"] or 0)
        solved = int(r["n_null"]) - stopped
        text += "; Gaussian null of the same size, dimension and covariance: "
        if solved:
            text += f"in an open half-space in {r['n_null_halfspace']} of {solved} solved sets; "
        if stopped:
            text += (
                f"{stopped} of {r['n_null']} solves stopped once their bound fell below half the "
                "real margin (or at geometry.long_context.null_solve_seconds); "
            )
        text += (
            f"its margin at most {r['max_null_margin_upper']:.3g}; the real margin exceeds its "
            f"null's in {r['n_margin_above_null']} of {r['n_null']} sets"
        )
    return text


def null_pass_fraction(counts: Mapping[str, Any]) -> float | None:
    """The share of decided Gaussian-null sets that lie in an open half-space (a row of
    :func:`long_context_counts`; None when no null draw was decided): the empirical counterpart
    of Wendel's probability for this run's sets."""
    decided = int(counts.get("n_null") or 0) - int(counts.get("n_null_undecided") or 0)
    return int(counts["n_null_halfspace"]) / decided if decided > 0 else None


def representability_statement(counts: Mapping[str, Any]) -> str:
    """One row of :func:`representability_counts` in words (trivial cases apart)."""
    r = counts
    if not r["n_cases"]:
        return "no (layer, sequence) pair has sink-attending tokens"
    text = (
        f"{r['n_cases']} (layer, sequence) pairs have sink-attending tokens; {r['n_trivial']} of "
        f"them are trivially separable (both sets have at most d_model points of full rank, so "
        f"Proposition 4.1's condition holds whatever the geometry); "
    )
    if r["n_nontrivial"]:
        text += (
            f"the condition holds in {r['n_representable_nontrivial']} of the "
            f"{r['n_nontrivial']} non-trivial pairs "
            f"({100 * r['frac_representable_nontrivial']:.1f}%)"
        )
    else:
        text += "none is non-trivial, so the test cannot fail at this T and d_model"
    text += (
        f"; every sink pattern (J = all tokens): {r['n_any_trivial']} of {r['n_pairs']} pairs "
        f"trivial, the condition holds in {r['n_any_representable_nontrivial']} of the "
        f"{r['n_any_nontrivial']} others"
    )
    if r["min_margin"] is not None:
        text += f"; smallest margin {r['min_margin']:.3g}"
    return text
