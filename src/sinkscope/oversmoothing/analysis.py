"""Oversmoothing analysis of one activation file (paper §5, Theorem 5.1, App. B.2, App. E.1).

For every layer ``l``, head ``h`` and context length ``T'`` (a prefix of the stored sequences) this
module measures the average cosine similarity of the token matrix before and after one head's
attention update, under the head's learned attention ``A``, no mixing (``I``) and uniform causal
attention (``A_u``), and compares it with Theorem 5.1's closed-form approximation.

Modelling decisions (each one is a choice the paper leaves open or a detail of the real models)
--------------------------------------------------------------------------------------------
Token set (``include_bos``, default ``False``).
    §3 defines ``rho`` for ``X in R^{d x T}``; §4/Figure 1 count BOS separately from "the other
    256 tokens"; §5 indexes tokens ``i in [T]`` and uses the ``T x T`` uniform matrix
    ``(A_u)_ij = 1/i``. So by default the token set is the ``T'`` text tokens (positions
    ``1..T'``) and BOS (position 0, massive activations) is not one of the tokens whose similarity
    is measured. The head still *reads* BOS: the update of token ``i`` under the learned ``A`` is
    the head's real output, including ``A[i, 0] W z_0``. ``A_u`` and ``I`` act on the token set
    (uniform over text tokens ``1..i``). ``include_bos=True`` makes positions ``0..T'`` the token
    set (``T' + 1`` tokens, ``A_u`` uniform over ``0..i``).
Average cosine similarity ``rho`` (§3).
    Mean of ``cos(Y_i, Y_j)`` over pairs ``i < j`` of the token set, computed per sequence as
    ``(||sum_i Y_i/||Y_i|| ||^2 - n) / (n (n - 1))`` and then averaged over the ``N`` sequences.
Uniformity ``u`` (eq. 12).
    Average over the rows of the token set of the normalised row entropy
    ``-sum_j A_ij log A_ij / log(n_i)``, ``n_i`` = number of positions row ``i`` can attend to
    (BOS included: text token at position ``i`` sees ``i + 1`` positions). A single-entry row
    (only BOS's own row) counts as 1, which is eq. 12's leading ``1 +``. Hence eq. 12 literally:
    ``u(A_u) = 1`` and ``u(I_n) = 1/n``; without the single-entry row (the default token set)
    ``u(I) = 0``. :func:`~sinkscope.oversmoothing.theory.uniformity` exposes both
    (``include_first_row``). Averaged over sequences.
Head map ``W`` (§5 "composition of learnable normalization scaling, value matrix and output
projection").
    The theory's ``Z`` is the *gain-free* normalised input ``Z~ = Z / norm_gain`` (``Z`` from
    :func:`~sinkscope.extraction.h5read.read_Z`)
    (``= RMS(X)`` for RMSNorm models), and ``W = W_O[h] W_V[h] diag(norm_gain)`` acts on it, so
    ``W Z~ = W_O[h] W_V[h] Z`` exactly. The value bias is part of the value map: the update is the
    affine ``W Z~ A^T + c 1^T`` with ``c = W_O[h] b_V[h]`` (rows of any attention matrix sum to 1,
    so ``c`` is added to every token whatever ``A`` is). Its effect on eq. (2) is exact: every
    entry of ``E[Y_i^T Y_j]`` gains the ``lambda``-free constant
    ``2 beta c^T zbar + 2 c^T W zbar + ||c||^2`` (column ``bias_term``), so conditions (i)/(ii)
    are unchanged. An output-projection bias (GPT-2) belongs to no head: it stays in the full update.
Post-attention norm (Gemma 2/3, file attribute ``post_attention_norm``).
    The block adds ``U_i = gamma * O_i / r_i`` with ``O_i = sum_h W_O[h] (A_h V_h)_i`` (the output
    projection), ``r_i = sqrt(mean(O_i^2) + eps)`` and the norm's per-dimension gain ``gamma``.
    ``gamma`` is not stored; it is recovered per layer by least squares per dimension from ``U``
    and ``O / r`` (the fit's relative residual, ``post_norm_fit_rel_err`` in ``per_layer``, is at
    float16 storage precision, ~3e-4, on Gemma 3). ``gamma`` is far from uniform (0 to ~500 in
    Gemma 3 270M), so it changes directions and is folded into the head map:
    ``W_h = diag(gamma) W_O[h] W_V[h] diag(norm_gain) / rbar``. The per-token factor ``1/r_i``
    is shared by all heads (the contributions ``gamma * W_O[h] (A_h V_h)_i / r_i`` sum exactly to
    ``U_i``) but depends on every head and on ``A``; it is replaced by the layer-global
    ``1/rbar`` (``rbar`` = mean of ``r_i`` over the token set and sequences, per ``T'``; column
    ``kappa = 1/rbar``), so that a head's update is a fixed linear map, applicable to ``I`` and
    ``A_u`` too, as Theorem 5.1 requires. The head contributions then sum to ``U_i r_i / rbar``:
    ``U`` up to a per-token scale shared by the heads. Rescaled quantities (``*_s``) are invariant
    to any global factor on ``W`` (``s_l`` absorbs it); only unscaled ones use ``kappa``.
Rescaling ``s_l`` (eq. 11).
    ``s_l = mean_i ||U_i|| / (mean_h mean_i ||ATTN_h(Z)_i||)`` with ``U`` = ``attention/
    residual_update`` (the real full update), ``ATTN_h`` the head's update under its learned
    ``A`` (as defined above), means over the token set and the ``N`` sequences, per ``T'``.
    Columns without suffix use ``X + W Z M^T`` (the quantity of the theory, App. E.1, used for
    Fig. 2 left / 5 / 7); columns with ``_s`` use ``X + s_l W Z M^T`` ("effect after the skip
    connection": Fig. 2 right / 6 / 8-11).
Moments of Theorem 5.1 (estimated from the batch for every ``T'``, App. E.1).
    ``zbar`` = mean of ``Z~_i`` over all sequences and tokens of the token set (``E[Z_i]``);
    ``Sigma_V = E[eps_i eps_i^T]`` = covariance of one token over the batch (all sequences and
    positions pooled, ``eps = Z~ - zbar``), ``Sigma_C = E[eps_j eps_i^T], i != j`` = average over
    sequences and ordered pairs ``i != j`` of the same sequence (cross-token covariance);
    ``B = Sigma_V - Sigma_C`` (= half the covariance of token differences, Remark B.4, PSD by
    construction), ``C = zbar zbar^T + Sigma_C``. ``beta`` is the least-squares fit of
    ``X ~ beta Z~`` over all tokens (``sum <X_i, Z~_i> / sum ||Z~_i||^2``; for RMSNorm the mean
    token RMS). Eq. (2) then gives ``E[Y_i^T Y_j]`` and ``E||Y_k||^2`` and eq. (1) ``rho_hat``.
    ``rho_hat(X)`` is the ``W = 0`` case ``tr C / tr(B + C)``; ``rho_hat(X + W Z)`` is
    ``lambda = 0`` and ``rho_hat(X + W Z A_u^T)`` is ``lambda = 1`` of the path
    ``Y(lambda) = beta Z + W Z ((1 - lambda) I + lambda A_u)^T``.
Conditions (Theorem 5.1): (i) ``beta tr(BW) > 0``, (ii) ``beta tr(BW) + tr(B W^T W) < 0`` (they
    are exclusive since ``tr(B W^T W) >= 0``), else ``"neither"``. ``condition`` is evaluated for
    ``W``, ``condition_s`` for ``s_l W`` (the map whose effect the ``_s`` deltas measure).
    ``predicted_sign`` is +1 / -1 / 0 for (i) / (ii) / neither; observed signs are those of
    ``delta_attn = rho(X+WZA^T) - rho(X+WZ)`` and ``delta_unif = rho(X+WZA_u^T) - rho(X+WZA^T)``
    (App. E.1's heuristic reading ``lambda_A in [0, 1]``). As in the paper, agreement rates
    exclude sink heads (``is_sink`` of the head classification). Figs. 8-9 and the claims read
    off them (condition counts, sign agreement) use one basis,
    :data:`~sinkscope.oversmoothing.summary.CONDITION_BASIS`: non-sink heads, conditions for
    ``s_l W``, computed once by :func:`~sinkscope.oversmoothing.summary.condition_exprs`.
Prefixes.
    With causal attention the first ``t`` positions of a run equal a ``t``-token run, so context
    length ``T'`` uses positions ``0..T'`` of the stored sequences (``T'`` capped at the file's
    ``T``). The prefix's attention matrix is the top-left block of ``A``: its rows are already
    normalised because ``A`` is zero above the diagonal (checked per layer: ``probs_upper_max``,
    ``probs_row_sum_max_err`` in ``per_layer``). All head outputs of a prefix are therefore slices
    of the full-length outputs, computed once per layer.

Tables of :func:`analyze_file`
------------------------------
``per_head`` (one row per layer, head, context length;
:data:`~sinkscope.oversmoothing.names.PER_HEAD_COLUMNS`): identifiers
(``model, dataset, n_sequences, layer, head, context_length, n_tokens`` = size of the token set),
the head classification (``head_class, is_sink, is_diagonal, bos_mass, diagonal_mass``),
``uniformity`` (eq. 12), ``beta``, ``s_l`` (eq. 11), ``kappa`` (``1/rbar`` with a post-norm, else
1), empirical ``rho_x, rho_xwz, rho_xwza, rho_xwzau`` (``X``, ``X+WZ``, ``X+WZA^T``,
``X+WZA_u^T``) and their ``_s`` versions (update times ``s_l``), approximations ``rhohat_x``,
``rhohat_xwz`` (``lambda = 0``), ``rhohat_xwzau`` (``lambda = 1``) and ``abs_err_*``, the traces
``tr_c, tr_b, tr_cw, tr_bw, tr_cwtw, tr_bwtw`` (for ``W``, unscaled), ``bias_term``,
``cond_i_value`` (``beta tr(BW)``), ``cond_ii_value`` (``beta tr(BW) + tr(BW^TW)``) and
``cond_ii_value_s`` (same for ``s_l W``), ``condition``/``condition_s``,
``predicted_sign``/``predicted_sign_s``, ``delta_attn``, ``delta_unif`` (and ``_s``),
``rel_change_s`` (Fig. 10), ``rhohat_trend``/``rhohat_trend_s`` (monotonicity of
``rho_hat(Y(lambda))`` on :data:`LAMBDA_GRID`), ``expectation_positive`` (the theorem's
assumption ``E[Y_i^T Y_j] > 0``) and ``head_update_norm``.
``per_layer`` (one row per layer and context length;
:data:`~sinkscope.oversmoothing.names.PER_LAYER_COLUMNS`): ``rho_before``
(``rho(X)``) and ``rho_after`` (``rho(X + U)``, the real full update; Fig. 4), ``rhohat_x``,
``beta``, ``s_l``, ``kappa``, ``tr_c``, ``tr_b``, the mean norms of the full and the single-head
updates, and integrity checks: ``post_norm_fit_rel_err`` (NaN without post-norm),
``head_sum_rel_err`` (``||U - sum_h head updates - b_O|| / ||U||``; computed on the first
:data:`~sinkscope.oversmoothing.layer.SEQUENCE_CHUNK` sequences without post-norm; with a
post-norm, through the fitted
norm, so it equals ``post_norm_fit_rel_err``), ``output_bias_norm`` (``||b_O||``, an
output-projection bias such as GPT-2's), ``probs_upper_max`` and ``probs_row_sum_max_err``.
``summary`` and ``conditions``: see :func:`~sinkscope.oversmoothing.summary.summary_tables`
(the claims on them are decided in the ``claims`` rule alone).

Performance: one layer at a time. A layer's stored tensors are decompressed once
and held (:class:`_LayerData`, about one layer's stored data, with the values recomputed once),
then processed in blocks of sequences (``block_size``, default :func:`default_block_size`:
1/16 of one layer's data) in up to three passes
(:class:`~sinkscope.oversmoothing.layer.LayerAnalysis`: post-norm gain;
everything needing ``W_h``; the ``s_l``-rescaled ``rho``'s, since ``s_l`` pools all
sequences). Re-reading the layer in each pass instead (with a prefetch thread) took 1.8x the
time: three decompressions per layer, and h5py holds the GIL while it decompresses. The held
layer is then freed and the moments of Theorem 5.1 take one more pass over ``X`` alone, read
again block by block (stored uncompressed by default): their ``len(lengths)`` float64
``D x D`` Gram matrices (512 MiB at ``D = 4096``) never coexist with the held layer.
Statistics are kept per sequence (or as float64 sums: Gram matrices of the moments) and
reduced at the end, so the tables do not depend on the block size. Peak memory is the larger
of the held layer with the weights, ``O(N H T)`` cached norms and one block's float32 work
arrays, and of the Gram matrices with the closed forms' ``D x D`` work arrays (a fixed cost:
independent of ``N`` and ``T``). Heavy products run in torch (float32 for ``A V`` and
``X W_O``, float64 for moments, closed forms and the cosine sums); per-head updates are never
materialised in ``D`` dimensions: ``||Y_i||^2`` and ``sum_i Y_i/||Y_i||`` are expanded through
the head dimension, and the ``D x D`` products of the traces are taken once per distinct value
map (:func:`~sinkscope.oversmoothing.theory.distinct_maps`: 8 for Llama 3.1 8B's 32 heads).
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.config_schema import schema_default
from sinkscope.extraction.h5layout import (
    ATTENTION_PROBS,
    ATTENTION_RESIDUAL_UPDATE,
    ATTR_DATASET_NAME,
    ATTR_MODEL_NAME,
    ATTR_N_KV_HEADS,
    ATTR_POST_ATTENTION_NORM,
    RESIDUAL_X,
    WEIGHT_B_V,
    WEIGHT_NORM_GAIN,
    WEIGHT_W_O,
    WEIGHT_W_V,
    open_activations,
    read_attr,
)
from sinkscope.extraction.h5read import (
    InputProjection,
    default_block_size,
    read_layer,
    release_freed_memory,
)
from sinkscope.oversmoothing.layer import LayerAnalysis, LayerResult
from sinkscope.oversmoothing.names import (
    BY_SEQUENCE_COLUMNS,
    HEAD_INFO_COLUMNS,
    HEADS_BY_SEQUENCE_COLUMNS,
    LAYERS_BY_SEQUENCE_COLUMNS,
    PER_HEAD_COLUMNS,
    PER_LAYER_COLUMNS,
)
from sinkscope.oversmoothing.summary import UNIFORMITY_THRESHOLD, summary_tables

__all__ = [
    "DEFAULT_CONTEXT_LENGTHS",
    "LAMBDA_GRID",
    "UNIFORMITY_THRESHOLD",
    "analyze_file",
    "default_block_size",
    "resolve_context_lengths",
]

#: Paper: several context lengths up to 512; capped at the file's T. The config schema's
#: ``oversmoothing.context_lengths``.
DEFAULT_CONTEXT_LENGTHS: tuple[int, ...] = tuple(schema_default("oversmoothing", "context_lengths"))
#: lambda grid on which the monotonicity of rho_hat(Y(lambda)) is checked.
LAMBDA_GRID: np.ndarray = np.linspace(0.0, 1.0, 21)


# --------------------------------------------------------------------------- files and tables


def resolve_context_lengths(context_lengths: Iterable[int], text_tokens: int) -> list[int]:
    """Sorted unique context lengths capped at the file's ``T`` (each must be >= 2)."""
    lengths = sorted({min(int(t), int(text_tokens)) for t in context_lengths})
    if not lengths:
        raise ValueError("no context lengths given")
    if lengths[0] < 2:
        raise ValueError(f"context lengths must be >= 2 tokens, got {lengths}")
    return lengths


def _head_info(per_head: pl.DataFrame, model: str, dataset: str) -> pl.DataFrame:
    missing = [c for c in ("layer", "head", *HEAD_INFO_COLUMNS) if c not in per_head.columns]
    if missing:
        raise ValueError(f"head classification table lacks columns {missing}")
    table = per_head
    if "model" in table.columns and "dataset" in table.columns:
        table = table.filter((pl.col("model") == model) & (pl.col("dataset") == dataset))
        if table.is_empty():
            raise ValueError(f"head classification table has no rows for {model}/{dataset}")
    table = table.select(
        pl.col("layer").cast(pl.Int64), pl.col("head").cast(pl.Int64), *HEAD_INFO_COLUMNS
    )
    if table.select("layer", "head").is_duplicated().any():
        raise ValueError("head classification table has duplicate (layer, head) rows")
    return table


@dataclass
class _LayerData:
    """One layer's tensors, positions ``0..stop - 1``, held in memory for all passes over it.

    ``x`` ``(N, stop, D)`` float32 and ``update`` ``(N, stop, D)`` and ``probs``
    ``(N, H, stop, stop)`` as stored, ``values`` ``(N, K, stop, k)`` float32 (recomputed once,
    :func:`~sinkscope.extraction.h5read.read_values`). About one layer's stored data: each dataset is
    decompressed once per layer instead of once per pass.
    """

    projection: InputProjection
    x: np.ndarray
    update: np.ndarray
    probs: np.ndarray
    values: np.ndarray


def _mapped_empty(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An uninitialised array in its own anonymous memory map, unmapped when the array is freed.

    For the held layer: from ``malloc``, arrays below 32 MiB come from the heap once glibc has
    raised its mmap threshold (it does after the first large free), and the small long-lived
    allocations made meanwhile pin the freed layer there (measured: the next layer's read and
    the result's work arrays then stacked on top, +50-70 MiB peak on a 72 MiB layer).
    """
    dtype = np.dtype(dtype)
    count = math.prod(int(n) for n in shape)
    buffer = mmap.mmap(-1, max(count * dtype.itemsize, 1))
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(tuple(shape))


def _read_layer(handle: Any, layer: int, stop: int, blocks: Sequence[slice]) -> _LayerData:
    def read(name: str, trailing: tuple[slice, ...]) -> np.ndarray:
        return read_layer(handle[name], layer, trailing=trailing, empty=_mapped_empty)

    x = read(RESIDUAL_X, (slice(stop),))
    projection = InputProjection.read(handle, layer)
    values: np.ndarray | None = None
    for sl in blocks:  # block by block: Z is a transient float32 copy of X
        part = projection.values(projection.Z(x[sl]))
        if values is None:
            values = _mapped_empty((x.shape[0], *part.shape[1:]), part.dtype)
        values[sl] = part
    assert values is not None  # blocks cover every sequence
    return _LayerData(
        projection=projection,
        x=x,
        update=read(ATTENTION_RESIDUAL_UPDATE, (slice(stop),)),
        probs=read(ATTENTION_PROBS, (slice(None), slice(stop), slice(stop))),
        values=values,
    )


def _block(data: _LayerData, sequences: slice, expand: torch.Tensor) -> dict[str, Any]:
    """The tensors of one block of sequences for the passes of
    :class:`~sinkscope.oversmoothing.layer.LayerAnalysis` over the held layer (views of ``data``).

    Keys: ``x``, ``update`` ``(B, stop, D)``, ``probs`` ``(B, H, stop, stop)``, ``values``
    ``(B, H, stop, k)`` (expanded to query heads) and ``sequences`` (the slice).
    """
    return {
        "sequences": sequences,
        "x": torch.from_numpy(data.x[sequences]),
        "update": torch.from_numpy(data.update[sequences]),
        "probs": torch.from_numpy(data.probs[sequences]),
        "values": torch.from_numpy(data.values[sequences])[:, expand],
    }


def _moment_block(
    handle: Any, layer: int, stop: int, sequences: slice, projection: InputProjection
) -> dict[str, Any]:
    """One block of :meth:`~sinkscope.oversmoothing.layer.LayerAnalysis.add_moments`, read
    from the file: ``x`` (positions ``0..stop - 1`` of ``residual/X``, as held by
    :class:`_LayerData`) and ``z`` (:meth:`~sinkscope.extraction.h5read.InputProjection.Z`)."""
    x = read_layer(handle[RESIDUAL_X], layer, sequences, trailing=(slice(stop),))
    return {
        "sequences": sequences,
        "x": torch.from_numpy(x),
        "z": torch.from_numpy(projection.Z(x)),
    }


def _read_weights(handle: Any, layer: int) -> dict[str, torch.Tensor]:
    return {
        "w_v": torch.from_numpy(handle[WEIGHT_W_V][layer]),
        "b_v": torch.from_numpy(handle[WEIGHT_B_V][layer]),
        "w_o": torch.from_numpy(handle[WEIGHT_W_O][layer]),
        "gain": torch.from_numpy(handle[WEIGHT_NORM_GAIN][layer]),
    }


def _sequence_frame(
    layer: int, lengths: Sequence[int], n_heads: int, result: LayerResult
) -> pl.DataFrame:
    """The layer's rows of ``approximation_by_sequence`` (sequence-major, then ``T'``, then
    head)."""
    n_seq, n_len = result.sequences["rho_xwz"].shape[:2]
    rows = n_seq * n_len * n_heads
    columns: dict[str, np.ndarray] = {
        "layer": np.full(rows, layer, dtype=np.int64),
        "head": np.tile(np.arange(n_heads, dtype=np.int64), n_seq * n_len),
        "context_length": np.tile(np.repeat(np.asarray(lengths, dtype=np.int64), n_heads), n_seq),
        "sequence": np.repeat(np.arange(n_seq, dtype=np.int64), n_len * n_heads),
    }
    for key, value in result.sequences.items():
        columns[key] = np.asarray(value, dtype=np.float64).reshape(-1)
    return pl.DataFrame(columns)


def _layer_sequence_frame(layer: int, lengths: Sequence[int], result: LayerResult) -> pl.DataFrame:
    """The layer's rows of ``layers_by_sequence`` (sequence-major, then ``T'``)."""
    n_seq = result.layer_sequences["rho_before"].shape[0]
    return pl.DataFrame(
        {
            "layer": np.full(n_seq * len(lengths), layer, dtype=np.int64),
            "context_length": np.tile(np.asarray(lengths, dtype=np.int64), n_seq),
            "sequence": np.repeat(np.arange(n_seq, dtype=np.int64), len(lengths)),
            **{
                key: np.asarray(value, dtype=np.float64).reshape(-1)
                for key, value in result.layer_sequences.items()
            },
        }
    )


def _head_sequence_frame(layer: int, length: int, result: LayerResult) -> pl.DataFrame:
    """The layer's rows of ``heads_by_sequence`` at the largest ``T'`` (``length``;
    sequence-major, then head)."""
    n_seq, n_heads = result.head_sequences["uniformity"].shape
    return pl.DataFrame(
        {
            "layer": np.full(n_seq * n_heads, layer, dtype=np.int64),
            "head": np.tile(np.arange(n_heads, dtype=np.int64), n_seq),
            "context_length": np.full(n_seq * n_heads, length, dtype=np.int64),
            "sequence": np.repeat(np.arange(n_seq, dtype=np.int64), n_heads),
            **{
                key: np.asarray(value, dtype=np.float64).reshape(-1)
                for key, value in result.head_sequences.items()
            },
        }
    )


def _layer_frames(
    layer: int, lengths: Sequence[int], n_heads: int, result: LayerResult
) -> tuple[pl.DataFrame, pl.DataFrame]:
    n_len = len(lengths)
    heads = {
        "layer": np.full(n_len * n_heads, layer, dtype=np.int64),
        "head": np.tile(np.arange(n_heads, dtype=np.int64), n_len),
        "context_length": np.repeat(np.asarray(lengths, dtype=np.int64), n_heads),
    }
    for key, value in result.heads.items():
        heads[key] = value.reshape(-1)
    shared = {"rho_x": "rho_before"} | {
        key: key for key in ("n_tokens", "beta", "s_l", "kappa", "tr_c", "tr_b", "rhohat_x")
    }
    for key, source in shared.items():
        heads[key] = np.repeat(result.layer[source], n_heads)
    per_layer = {
        "layer": np.full(n_len, layer, dtype=np.int64),
        "context_length": np.asarray(lengths, dtype=np.int64),
        **result.layer,
    }
    return pl.DataFrame(heads), pl.DataFrame(per_layer)


def analyze_file(
    h5_path: str | os.PathLike[str],
    per_head: pl.DataFrame,
    context_lengths: Sequence[int] = DEFAULT_CONTEXT_LENGTHS,
    uniformity_threshold: float = UNIFORMITY_THRESHOLD,
    *,
    include_bos: bool = False,
    lambdas: Sequence[float] | np.ndarray = LAMBDA_GRID,
    layers: Iterable[int] | None = None,
    block_size: int | None = None,
) -> dict[str, pl.DataFrame]:
    """Oversmoothing analysis of one activation file (one model x dataset pair).

    ``per_head``: the head classification table
    (``sinkscope.heads.classify.classify_file(path)[1]``);
    ``context_lengths``: prefix lengths ``T'`` in text tokens (capped at the file's ``T``);
    ``uniformity_threshold``: the paper's 0.6 for "dense" heads (summary); ``include_bos``: put
    BOS into the token set (module docstring); ``layers``: restrict to some layers;
    ``block_size``: sequences read and processed at a time (default
    :func:`default_block_size`); the tables do not depend on it (to float64 rounding).

    Returns ``{"per_head", "per_layer", "summary", "conditions", "approximation_by_sequence",
    "layers_by_sequence", "heads_by_sequence"}``
    (columns in :data:`~sinkscope.oversmoothing.names.PER_HEAD_COLUMNS`,
    :data:`~sinkscope.oversmoothing.names.PER_LAYER_COLUMNS`,
    :func:`~sinkscope.oversmoothing.summary.summary_tables` and
    :data:`~sinkscope.oversmoothing.names.BY_SEQUENCE_COLUMNS`: eq. (2)'s terms per sequence at
    every ``T'``, :mod:`sinkscope.oversmoothing.approximation`;
    :data:`~sinkscope.oversmoothing.names.LAYERS_BY_SEQUENCE_COLUMNS`: each layer's ``rho``
    before and after its update per sequence and ``T'``;
    :data:`~sinkscope.oversmoothing.names.HEADS_BY_SEQUENCE_COLUMNS`: Fig. 2 right's ``rho``'s
    and the uniformity per head and sequence at the largest ``T'``).
    """
    lam = np.asarray(lambdas, dtype=np.float64)
    if lam.ndim != 1 or lam.size < 2 or not np.all(np.diff(lam) > 0):
        raise ValueError("lambdas must be an increasing grid of at least 2 values")
    head_rows: list[pl.DataFrame] = []
    layer_rows: list[pl.DataFrame] = []
    sequence_rows: list[pl.DataFrame] = []
    layer_sequence_rows: list[pl.DataFrame] = []
    head_sequence_rows: list[pl.DataFrame] = []
    with open_activations(h5_path) as handle:
        model = str(read_attr(handle, ATTR_MODEL_NAME))
        dataset = str(read_attr(handle, ATTR_DATASET_NAME))
        post_norm = bool(read_attr(handle, ATTR_POST_ATTENTION_NORM))
        x_ds = handle[RESIDUAL_X]
        n_layers, n_seq, t1, _ = x_ds.shape
        n_heads = handle[ATTENTION_PROBS].shape[2]
        n_kv = int(read_attr(handle, ATTR_N_KV_HEADS))
        lengths = resolve_context_lengths(context_lengths, t1 - 1)
        start = 0 if include_bos else 1
        tokens = [t + 1 - start for t in lengths]
        stop = start + tokens[-1]
        info = _head_info(per_head, model, dataset)
        selected = list(range(n_layers)) if layers is None else [int(layer) for layer in layers]
        if not selected:
            raise ValueError("no layers selected")
        for layer in selected:
            if not 0 <= layer < n_layers:
                raise ValueError(f"{h5_path}: layer {layer} out of range [0, {n_layers})")
        expand = torch.arange(n_heads) // (n_heads // n_kv)
        size = default_block_size(handle) if block_size is None else int(block_size)
        if size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        blocks = [slice(first, min(first + size, n_seq)) for first in range(0, n_seq, size)]
        # one layer at a time, read once, then in passes over blocks of sequences
        for layer in selected:
            analysis = LayerAnalysis(
                _read_weights(handle, layer), n_seq, post_norm, start, tokens, lam
            )
            data = _read_layer(handle, layer, stop, blocks)
            for name in analysis.passes:
                for sl in blocks:
                    analysis.add(name, _block(data, sl, expand))
                analysis.finish(name)
                # each pass allocates differently sized work arrays: without a trim the heap
                # keeps the previous pass's freed pages (measured: +25-40 % peak RSS)
                release_freed_memory()
            projection = data.projection
            del data
            release_freed_memory()  # before the moments' D x D float64 Gram matrices
            for sl in blocks:
                analysis.add_moments(_moment_block(handle, layer, stop, sl, projection))
            del projection
            release_freed_memory()  # the blocks' freed pages, before the D x D work arrays
            result = analysis.result()
            del analysis
            release_freed_memory()
            heads_frame, layer_frame = _layer_frames(layer, lengths, n_heads, result)
            head_rows.append(heads_frame)
            layer_rows.append(layer_frame)
            sequence_rows.append(_sequence_frame(layer, lengths, n_heads, result))
            layer_sequence_rows.append(_layer_sequence_frame(layer, lengths, result))
            head_sequence_rows.append(_head_sequence_frame(layer, lengths[-1], result))
    ids = [
        pl.lit(model).alias("model"),
        pl.lit(dataset).alias("dataset"),
        pl.lit(n_seq, dtype=pl.Int64).alias("n_sequences"),
    ]
    heads_table = pl.concat(head_rows).with_columns(pl.col("n_tokens").cast(pl.Int64))
    heads_table = heads_table.join(info, on=["layer", "head"], how="left")
    if heads_table["head_class"].null_count():
        raise ValueError("head classification table lacks some (layer, head) of the file")
    heads_table = _derived_columns(heads_table).with_columns(*ids).select(PER_HEAD_COLUMNS)
    layers_table = (
        pl.concat(layer_rows)
        .with_columns(*ids, pl.col("n_tokens").cast(pl.Int64))
        .select(PER_LAYER_COLUMNS)
    )
    by_sequence = pl.concat(sequence_rows).with_columns(*ids[:2]).select(BY_SEQUENCE_COLUMNS)
    tables = {"per_head": heads_table, "per_layer": layers_table}
    tables.update(summary_tables(heads_table, layers_table, uniformity_threshold))
    tables["approximation_by_sequence"] = by_sequence
    tables["layers_by_sequence"] = (
        pl.concat(layer_sequence_rows).with_columns(*ids[:2]).select(LAYERS_BY_SEQUENCE_COLUMNS)
    )
    tables["heads_by_sequence"] = (
        pl.concat(head_sequence_rows).with_columns(*ids[:2]).select(HEADS_BY_SEQUENCE_COLUMNS)
    )
    return tables


def _derived_columns(frame: pl.DataFrame) -> pl.DataFrame:
    sign = {"i": 1, "ii": -1, "neither": 0}
    return frame.with_columns(
        abs_err_x=(pl.col("rho_x") - pl.col("rhohat_x")).abs(),
        abs_err_xwz=(pl.col("rho_xwz") - pl.col("rhohat_xwz")).abs(),
        abs_err_xwzau=(pl.col("rho_xwzau") - pl.col("rhohat_xwzau")).abs(),
        predicted_sign=pl.col("condition").replace_strict(sign, return_dtype=pl.Int64),
        predicted_sign_s=pl.col("condition_s").replace_strict(sign, return_dtype=pl.Int64),
        delta_attn=pl.col("rho_xwza") - pl.col("rho_xwz"),
        delta_unif=pl.col("rho_xwzau") - pl.col("rho_xwza"),
        delta_attn_s=pl.col("rho_xwza_s") - pl.col("rho_xwz_s"),
        delta_unif_s=pl.col("rho_xwzau_s") - pl.col("rho_xwza_s"),
        rel_change_s=(pl.col("rho_xwza_s") - pl.col("rho_x")) / pl.col("rho_x").abs(),
    )
