"""Oversmoothing analysis of single attention heads (paper §5, Theorem 5.1, App. B.2, App. E.1).

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
    ``u(I) = 0``. :func:`uniformity` exposes both (``include_first_row``). Averaged over sequences.
Head map ``W`` (§5 "composition of learnable normalization scaling, value matrix and output
projection").
    The theory's ``Z`` is the *gain-free* normalised input ``Z~ = Z / norm_gain`` (``Z`` from
    :func:`~sinkscope.h5layout.read_Z`)
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
    off them (condition counts, sign agreement) use one basis, :data:`CONDITION_BASIS`: non-sink
    heads, conditions for ``s_l W``, computed once by :func:`condition_exprs`.
Prefixes.
    With causal attention the first ``t`` positions of a run equal a ``t``-token run, so context
    length ``T'`` uses positions ``0..T'`` of the stored sequences (``T'`` capped at the file's
    ``T``). The prefix's attention matrix is the top-left block of ``A``: its rows are already
    normalised because ``A`` is zero above the diagonal (checked per layer: ``probs_upper_max``,
    ``probs_row_sum_max_err`` in ``per_layer``). All head outputs of a prefix are therefore slices
    of the full-length outputs, computed once per layer.

Tables of :func:`analyze_file`
------------------------------
``per_head`` (one row per layer, head, context length; :data:`PER_HEAD_COLUMNS`): identifiers
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
``per_layer`` (one row per layer and context length; :data:`PER_LAYER_COLUMNS`): ``rho_before``
(``rho(X)``) and ``rho_after`` (``rho(X + U)``, the real full update; Fig. 4), ``rhohat_x``,
``beta``, ``s_l``, ``kappa``, ``tr_c``, ``tr_b``, the mean norms of the full and the single-head
updates, and integrity checks: ``post_norm_fit_rel_err`` (NaN without post-norm),
``head_sum_rel_err`` (``||U - sum_h head updates - b_O|| / ||U||``; computed on the first
:data:`SEQUENCE_CHUNK` sequences without post-norm; with a post-norm, through the fitted
norm, so it equals ``post_norm_fit_rel_err``), ``output_bias_norm`` (``||b_O||``, an
output-projection bias such as GPT-2's), ``probs_upper_max`` and ``probs_row_sum_max_err``.
``summary``, ``conditions`` and ``claims``: see :func:`summary_tables`.

Performance (issue 9): one layer at a time. A layer's stored tensors are decompressed once
and held (:class:`_LayerData`, about one layer's stored data, with the values recomputed once),
then processed in blocks of sequences (``block_size``, default :func:`default_block_size`:
1/16 of one layer's data) in up to three passes (:class:`_LayerAnalysis`: post-norm gain;
everything needing ``W_h``; the ``s_l``-rescaled ``rho``'s, since ``s_l`` pools all
sequences). Re-reading the layer in each pass instead (with a prefetch thread) took 1.8x the
time: three decompressions per layer, and h5py holds the GIL while it decompresses. Statistics
are kept per sequence (or as float64 sums: Gram matrices of the moments) and reduced at the
end, so the tables do not depend on the block size. Peak memory is the held layer, the weights,
``len(lengths)`` float64 ``D x D`` Gram matrices, ``O(N H T)`` cached norms and one block's
float32 work arrays. Heavy products run in torch (float32 for ``A V`` and ``X W_O``, float64 for
moments, closed forms and the cosine sums); per-head updates are never materialised in ``D``
dimensions: ``||Y_i||^2`` and ``sum_i Y_i/||Y_i||`` are expanded through the head dimension.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import mmap
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.h5layout import (
    InputProjection,
    default_block_size,
    open_activations,
    read_layer,
)

__all__ = [
    "DEFAULT_CONTEXT_LENGTHS",
    "LAMBDA_GRID",
    "POOLED",
    "MomentAccumulator",
    "TokenMoments",
    "TraceTerms",
    "analyze_file",
    "average_cosine_similarity",
    "closed_form_coefficients",
    "condition_labels",
    "default_block_size",
    "estimate_moments",
    "fit_post_norm_gain",
    "post_norm_sums",
    "rho_hat",
    "row_uniformity",
    "summarize",
    "theorem_gram",
    "trace_terms",
    "uniform_causal",
    "uniformity",
]

#: Paper: several context lengths up to 512; capped at the file's T.
DEFAULT_CONTEXT_LENGTHS: tuple[int, ...] = (32, 64, 128, 256)
#: lambda grid on which the monotonicity of rho_hat(Y(lambda)) is checked.
LAMBDA_GRID: np.ndarray = np.linspace(0.0, 1.0, 21)
#: Name of the pooled pseudo-dataset in :func:`summarize`.
POOLED = "all"
#: eps of the post-attention RMSNorm of Gemma 2/3 (not stored in the file).
POST_NORM_EPS = 1e-6
CONDITIONS: tuple[str, ...] = ("i", "ii", "neither")
F64 = torch.float64
F32 = torch.float32
#: sequences per chunk for the (N, H, T1, T1) attention tensors (bounds float32 temporaries)
SEQUENCE_CHUNK = 8


# --------------------------------------------------------------------------- basic quantities


def average_cosine_similarity(tokens: np.ndarray | torch.Tensor) -> np.ndarray:
    """``rho`` of §3 for token matrices stored row-wise: ``tokens`` ``(..., n, D)`` -> ``(...)``.

    Mean cosine similarity over the ``n (n - 1) / 2`` pairs ``i < j``, via the normalised Gram
    identity ``(||sum_i x_i/||x_i|| ||^2 - n) / (n (n - 1))`` (float64).
    """
    t = torch.as_tensor(tokens).to(F64)
    n = t.shape[-2]
    if n < 2:
        raise ValueError(f"average cosine similarity needs at least 2 tokens, got {n}")
    unit = t / torch.linalg.vector_norm(t, dim=-1, keepdim=True)
    total = unit.sum(dim=-2)
    return ((total * total).sum(-1) - n).div(n * (n - 1)).numpy()


def row_uniformity(probs: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Normalised entropy of every row of square causal matrices ``(..., n, n)`` -> ``(..., n)``.

    Row ``r`` (0-based) can attend to ``r + 1`` positions: ``h_r = H(A_r) / log(r + 1)``; the
    single-entry row 0 gets ``h_0 = 1`` (eq. 12's leading ``1 +``). Float64 result (entropies
    are summed in float64 for float64 input, else in float32).
    """
    a = torch.as_tensor(probs)
    a = a if a.dtype == F64 else a.to(F32)  # float16 storage is summed in float32
    n = a.shape[-1]
    entropy = -torch.special.xlogy(a, a).sum(-1).to(F64)
    norm = torch.log(torch.arange(1, n + 1, dtype=F64))
    out = torch.ones_like(entropy)
    out[..., 1:] = entropy[..., 1:] / norm[1:]
    return out


def uniformity(probs: np.ndarray | torch.Tensor, include_first_row: bool = True) -> np.ndarray:
    """Uniformity coefficient ``u(A)`` of eq. (12) for square causal matrices ``(..., n, n)``.

    ``include_first_row=True`` is eq. (12) literally, ``(1 + sum_{i>=2} H_i / log i) / n``:
    ``u(A_u) = 1`` and ``u(I) = 1/n``. ``False`` averages the ``n - 1`` rows with at least two
    entries: ``u(A_u) = 1`` and ``u(I) = 0``.
    """
    rows = row_uniformity(probs)
    return (rows if include_first_row else rows[..., 1:]).mean(-1).numpy()


def uniform_causal(n: int) -> np.ndarray:
    """The ``n x n`` uniform causal attention matrix ``(A_u)_ij = 1/i`` for ``j <= i`` (1-based)."""
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


# --------------------------------------------------------------------------- Theorem 5.1


@dataclass(frozen=True)
class TokenMoments:
    """Batch estimates of the token distribution of Theorem 5.1 (float64 tensors, gain-free Z)."""

    n_tokens: int
    n_sequences: int
    z_bar: torch.Tensor  # (D,)
    sigma_v: torch.Tensor  # (D, D)  E[eps_i eps_i^T]
    sigma_c: torch.Tensor  # (D, D)  E[eps_j eps_i^T], i != j
    beta: float  # least squares X ~ beta Z

    @property
    def tr_c(self) -> float:
        return float(self.z_bar @ self.z_bar + torch.trace(self.sigma_c))

    @property
    def tr_b(self) -> float:
        return float(torch.trace(self.sigma_v) - torch.trace(self.sigma_c))


class MomentAccumulator:
    """Streaming estimator of ``zbar, Sigma_V, Sigma_C, beta`` (Theorem 5.1, App. E.1).

    Blocks of sequences are added one at a time (:meth:`add`); :meth:`moments` then gives the
    estimates for prefix size ``lengths[index]``, equal (to float64 rounding) to a single pass
    over all sequences. All sums run in float64: the Gram matrices per prefix segment
    ``sum_i (z_i - c)(z_i - c)^T`` around a fixed shift ``c`` (the mean of the first sequence's
    tokens; any fixed ``c`` gives the same moments, a nearby one avoids cancellation), the token
    sums per sequence and prefix (for ``Sigma_C``), and ``sum <x_i, z_i>``, ``sum ||z_i||^2``
    per sequence and prefix (for ``beta``). Memory: ``len(lengths)`` ``D x D`` matrices and
    ``O(N len(lengths) D)`` numbers, independent of the number of tokens per sequence, allocated
    up front for ``n_sequences`` (allocations kept from block to block would pin the heap
    between the blocks' freed work arrays: measured +70 MiB peak on a 72 MiB layer).
    """

    def __init__(self, lengths: Sequence[int], dim: int, n_sequences: int) -> None:
        lengths = [int(n) for n in lengths]
        if not lengths or any(b <= a for a, b in itertools.pairwise(lengths)):
            raise ValueError(f"lengths must be increasing, got {lengths}")
        if lengths[0] < 2:
            raise ValueError(f"lengths must be >= 2, got {lengths}")
        if n_sequences < 1:
            raise ValueError(f"n_sequences must be >= 1, got {n_sequences}")
        self.lengths = lengths
        self.dim = int(dim)
        self.shift: torch.Tensor | None = None
        self.grams = [torch.zeros(dim, dim, dtype=F64) for _ in lengths]  # per segment
        n_len = len(lengths)
        # per sequence and prefix: sum_{i < n} (z_i - c), sum <x_i, z_i>, sum ||z_i||^2
        self.seq_sums = torch.empty(n_sequences, n_len, self.dim, dtype=F64)
        self.xz = torch.empty(n_sequences, n_len, dtype=F64)
        self.zz = torch.empty(n_sequences, n_len, dtype=F64)
        self.added = 0  # sequences added so far
        self.has_x: bool | None = None

    def add(self, z: np.ndarray | torch.Tensor, x: np.ndarray | torch.Tensor | None = None) -> None:
        """Add the tokens ``z`` ``(B, n >= lengths[-1], D)`` of ``B`` sequences (and ``x``)."""
        zt = torch.as_tensor(z)
        zt = zt if zt.dtype in (F32, F64) else zt.to(F32)
        n_max = self.lengths[-1]
        if zt.ndim != 3 or zt.shape[1] < n_max or zt.shape[2] != self.dim:
            raise ValueError(f"z must have shape (B, >= {n_max}, {self.dim}), got {zt.shape}")
        if self.has_x is None:
            self.has_x = x is not None
        elif self.has_x != (x is not None):
            raise ValueError("x must be given for every block or for none")
        rows = slice(self.added, self.added + zt.shape[0])
        if rows.stop > self.seq_sums.shape[0]:
            raise ValueError(f"more than n_sequences = {self.seq_sums.shape[0]} sequences added")
        if self.shift is None:
            self.shift = zt[0, :n_max].sum(0, dtype=F64) / n_max
        if x is not None:
            xt = torch.as_tensor(x).to(zt.dtype)
            stops = torch.as_tensor(self.lengths) - 1
            self.xz[rows] = (xt[:, :n_max] * zt[:, :n_max]).sum(-1, dtype=F64).cumsum(1)[:, stops]
            self.zz[rows] = (zt[:, :n_max] * zt[:, :n_max]).sum(-1, dtype=F64).cumsum(1)[:, stops]
        sums = self.seq_sums[rows]
        running = torch.zeros(zt.shape[0], self.dim, dtype=F64)
        previous = 0
        for index, n in enumerate(self.lengths):
            segment = zt[:, previous:n].to(F64) - self.shift  # (B, n - previous, D)
            running += segment.sum(1)
            sums[:, index] = running
            segment = segment.reshape(-1, self.dim)
            self.grams[index] += segment.T @ segment
            del segment
            previous = n
        self.added = rows.stop

    def moments(self, index: int) -> TokenMoments:
        """The estimates for prefix size ``lengths[index]`` from every block added so far."""
        if self.shift is None:
            raise ValueError("no tokens added")
        n = self.lengths[index]
        seq_sums = self.seq_sums[: self.added, index]  # (N, D)
        n_seq = seq_sums.shape[0]
        gram = self.grams[0].clone()
        for part in self.grams[1 : index + 1]:
            gram += part
        count = n_seq * n
        mean = seq_sums.sum(0) / count
        sigma_v = gram / count - torch.outer(mean, mean)
        sums = seq_sums - n * mean  # (N, D): sum_i eps_i per sequence
        sigma_c = (sums.T @ sums - count * sigma_v) / (n_seq * n * (n - 1))
        if self.has_x:
            added = slice(0, self.added)
            beta = float(self.xz[added, index].sum() / self.zz[added, index].sum())
        else:
            beta = 1.0
        return TokenMoments(
            n,
            n_seq,
            self.shift + mean,
            0.5 * (sigma_v + sigma_v.T),
            0.5 * (sigma_c + sigma_c.T),
            beta,
        )


def estimate_moments(
    z: np.ndarray | torch.Tensor,
    x: np.ndarray | torch.Tensor | None,
    lengths: Sequence[int],
) -> list[TokenMoments]:
    """Estimate ``zbar, Sigma_V, Sigma_C, beta`` for every prefix size in ``lengths``.

    ``z``: gain-free normalised tokens ``(N, n_max, D)`` (sequence, token, feature) of the token
    set; ``x``: the matching residual tokens for ``beta`` (``None``: ``beta = 1``). ``lengths``:
    increasing prefix sizes (numbers of tokens, each >= 2). Definitions in the module docstring;
    one pass of :class:`MomentAccumulator` over all sequences.
    """
    zt = torch.as_tensor(z)
    lengths = [int(n) for n in lengths]
    if lengths and (lengths[0] < 2 or lengths[-1] > zt.shape[1]):
        raise ValueError(f"lengths must lie in [2, {zt.shape[1]}], got {lengths}")
    acc = MomentAccumulator(lengths, zt.shape[-1], zt.shape[0])
    acc.add(zt, x)
    return [acc.moments(index) for index in range(len(lengths))]


@dataclass(frozen=True)
class TraceTerms:
    """Traces of Theorem 5.1 for a batch of maps ``W_h`` (arrays of shape ``(H,)``, float64).

    ``c_z = c^T zbar``, ``c_wz = c^T W zbar``, ``c_c = ||c||^2`` for the update's constant ``c``.
    """

    tr_c: float
    tr_b: float
    tr_cw: np.ndarray
    tr_bw: np.ndarray
    tr_cwtw: np.ndarray
    tr_bwtw: np.ndarray
    c_z: np.ndarray
    c_wz: np.ndarray
    c_c: np.ndarray


def trace_terms(
    moments: TokenMoments,
    w_out: np.ndarray | torch.Tensor,
    w_in: np.ndarray | torch.Tensor,
    bias_in: np.ndarray | torch.Tensor | None = None,
) -> TraceTerms:
    """Traces ``tr(CW), tr(BW), tr(CW^TW), tr(BW^TW)`` for ``W_h = w_out[h] @ w_in[h]``.

    ``w_out``: ``(H, D, k)``, ``w_in``: ``(H, k, D)`` (a full ``D x D`` map: ``w_out = W[None]``,
    ``w_in = I[None]``); ``bias_in``: ``(H, k)``, the update's constant is
    ``c_h = w_out[h] @ bias_in[h]``. Uses ``tr(Sigma W) = tr(w_in Sigma w_out)`` and
    ``tr(Sigma W^T W) = tr(w_out^T w_out w_in Sigma w_in^T)``, never forming ``D x D`` maps.
    """
    wo = torch.as_tensor(w_out).to(F64)
    wi = torch.as_tensor(w_in).to(F64)
    heads, k, dim = wi.shape
    gram_out = wo.transpose(1, 2) @ wo  # (H, k, k)
    flat = wi.reshape(heads * k, dim)
    tr_w: dict[str, torch.Tensor] = {}
    tr_wtw: dict[str, torch.Tensor] = {}
    for name, sigma in (("v", moments.sigma_v), ("c", moments.sigma_c)):
        in_sigma = (flat @ sigma).reshape(heads, k, dim)
        tr_w[name] = (in_sigma * wo.transpose(1, 2)).sum((1, 2))
        quad = in_sigma @ wi.transpose(1, 2)  # (H, k, k) = w_in Sigma w_in^T
        tr_wtw[name] = (gram_out * quad).sum((1, 2))
    zb = moments.z_bar
    wz = wi @ zb  # (H, k)
    zw = torch.einsum("hdk,d->hk", wo, zb)
    z_w_z = (zw * wz).sum(-1)
    wz_norm2 = torch.einsum("hk,hkl,hl->h", wz, gram_out, wz)
    if bias_in is None:
        b = torch.zeros(heads, k, dtype=F64)
    else:
        b = torch.as_tensor(bias_in).to(F64).reshape(heads, k)
    return TraceTerms(
        tr_c=moments.tr_c,
        tr_b=moments.tr_b,
        tr_cw=(z_w_z + tr_w["c"]).numpy(),
        tr_bw=(tr_w["v"] - tr_w["c"]).numpy(),
        tr_cwtw=(wz_norm2 + tr_wtw["c"]).numpy(),
        tr_bwtw=(tr_wtw["v"] - tr_wtw["c"]).numpy(),
        c_z=(b * zw).sum(-1).numpy(),
        c_wz=torch.einsum("hk,hkl,hl->h", b, gram_out, wz).numpy(),
        c_c=torch.einsum("hk,hkl,hl->h", b, gram_out, b).numpy(),
    )


def closed_form_coefficients(
    terms: TraceTerms, beta: float, scale: float | np.ndarray = 1.0
) -> dict[str, np.ndarray]:
    """Coefficients of eq. (2) for the map ``scale * W`` (and constant ``scale * c``).

    ``E[Y_i^T Y_j] = a + lambda b / j`` (``i < j``) and
    ``E||Y_k||^2 = d0 - 2 (1 - 1/k) b lambda + (1 - 1/k) e lambda^2`` with
    ``a = beta^2 tr C + 2 beta tr(CW) + tr(C W^T W) + bias``,
    ``b = beta tr(BW) + tr(B W^T W)``, ``e = tr(B W^T W)``,
    ``d0 = beta^2 tr(B+C) + 2 beta tr((B+C)W) + tr((B+C) W^T W) + bias``,
    ``bias = 2 beta c^T zbar + 2 c^T W zbar + ||c||^2``. Also returns ``beta_tr_bw``.
    """
    s = np.asarray(scale, dtype=np.float64)
    tr_cw, tr_bw = s * terms.tr_cw, s * terms.tr_bw
    tr_cwtw, tr_bwtw = s**2 * terms.tr_cwtw, s**2 * terms.tr_bwtw
    bias = 2 * beta * s * terms.c_z + 2 * s**2 * terms.c_wz + s**2 * terms.c_c
    a = beta**2 * terms.tr_c + 2 * beta * tr_cw + tr_cwtw + bias
    d0 = (
        beta**2 * (terms.tr_b + terms.tr_c)
        + 2 * beta * (tr_bw + tr_cw)
        + (tr_bwtw + tr_cwtw)
        + bias
    )
    return {
        "a": a,
        "b": beta * tr_bw + tr_bwtw,
        "d0": d0,
        "e": tr_bwtw,
        "bias": bias,
        "beta_tr_bw": beta * tr_bw,
    }


def theorem_gram(coef: Mapping[str, Any], n: int, lam: float) -> np.ndarray:
    """Expected Gram matrix ``E[Y_i^T Y_j]`` (``n x n``, 1-based ``i, j``) of eq. (2), scalar coefs."""
    j = np.arange(1, n + 1, dtype=np.float64)
    a, b, d0, e = (float(coef[key]) for key in ("a", "b", "d0", "e"))
    gram = a + lam * b / np.maximum.outer(j, j)
    diag = d0 - 2 * (1 - 1 / j) * b * lam + (1 - 1 / j) * e * lam**2
    gram[np.diag_indices(n)] = diag
    return gram


def rho_hat(coef: Mapping[str, Any], n: int, lambdas: Iterable[float] | float) -> np.ndarray:
    """Approximation (1) of ``rho(Y(lambda))`` for coefficient arrays of shape ``S``.

    Returns shape ``S + (len(lambdas),)`` (or ``S`` for a scalar ``lambda``). Evaluated in
    ``O(n)`` per point: ``2/(n(n-1)) sum_j N_j / sqrt(D_j) sum_{i<j} 1 / sqrt(D_i)``.
    """
    scalar = np.ndim(lambdas) == 0
    lam = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
    a, b, d0, e = (
        np.asarray(coef[key], dtype=np.float64)[..., None, None] for key in ("a", "b", "d0", "e")
    )
    j = np.arange(1, n + 1, dtype=np.float64)
    lam_ = lam[:, None]
    numer = a + lam_ * b / j
    denom = d0 - 2 * (1 - 1 / j) * b * lam_ + (1 - 1 / j) * e * lam_**2
    inv = 1.0 / np.sqrt(denom)
    before = np.cumsum(inv, axis=-1) - inv  # sum_{i<j} 1/sqrt(D_i)
    out = 2.0 / (n * (n - 1)) * (numer * inv * before).sum(-1)
    return out[..., 0] if scalar else out


def condition_labels(beta_tr_bw: np.ndarray, tr_bwtw: np.ndarray) -> np.ndarray:
    """Theorem 5.1: ``"i"`` if ``beta tr(BW) > 0``; ``"ii"`` if ``beta tr(BW) + tr(BW^TW) < 0``."""
    first = np.asarray(beta_tr_bw) > 0
    second = (np.asarray(beta_tr_bw) + np.asarray(tr_bwtw)) < 0
    return np.select([first, second], ["i", "ii"], default="neither")


def _trend(values: np.ndarray, tol: float = 1e-12) -> np.ndarray:
    """``"increasing"``/``"decreasing"``/``"non-monotone"`` along the last axis."""
    diff = np.diff(values, axis=-1)
    up = (diff > tol).all(-1)
    down = (diff < -tol).all(-1)
    return np.select([up, down], ["increasing", "decreasing"], default="non-monotone")


# --------------------------------------------------------------------------- post-norm


def post_norm_sums(
    update: torch.Tensor, pre_norm: torch.Tensor, eps: float = POST_NORM_EPS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sequence sums of the post-norm gain fit (:func:`fit_post_norm_gain`), float64.

    ``update``, ``pre_norm``: ``(B, P, D)``. Returns ``(sum_t u q, sum_t q^2)`` per dimension,
    each ``(B, D)``, and ``r`` ``(B, P)``, with ``q = pre_norm / r``,
    ``r = sqrt(mean(pre_norm^2) + eps)``; summed over sequences they give ``gamma``.
    """
    q = pre_norm.to(F64, copy=True)
    r = torch.sqrt((q * q).mean(-1) + eps)
    q.div_(r[..., None])
    uq = update.to(F64, copy=True).mul_(q).sum(1)
    return uq, q.square_().sum(1), r


def post_norm_residual_sq(
    gamma: torch.Tensor, uq: torch.Tensor, qq: torch.Tensor, uu: torch.Tensor
) -> torch.Tensor:
    """Squared residual ``sum_t ||u_t - gamma * q_t||^2`` per sequence from the per-dimension
    sums of :func:`post_norm_sums` (``uq``, ``qq``) and ``uu = sum_t u^2`` (each ``(B, D)``,
    float64): ``sum_d gamma^2 qq - 2 gamma uq + uu``. The expansion's rounding is ~1e-16 of
    ``||u||^2``, far below any fit residual of stored (16-bit or float32) updates."""
    return (gamma * gamma * qq - 2 * gamma * uq + uu).sum(-1).clamp_min_(0)


def fit_post_norm_gain(
    update: torch.Tensor, pre_norm: torch.Tensor, eps: float = POST_NORM_EPS
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Recover the gain of a post-attention RMSNorm: ``update ~ gamma * pre_norm / r``.

    ``update``, ``pre_norm``: ``(..., D)``. Returns ``(gamma (D,), r (...), relative residual)``
    with ``r = sqrt(mean(pre_norm^2) + eps)``; ``gamma`` is the per-dimension least-squares fit
    ``sum u q / sum q^2`` (``q = pre_norm / r``, sums over every token).
    """
    dim = pre_norm.shape[-1]
    uq, qq, r = post_norm_sums(update.reshape(1, -1, dim), pre_norm.reshape(1, -1, dim), eps)
    gamma = uq[0] / qq[0].clamp_min(1e-300)
    u = update.to(F64)
    resid = u - gamma * (pre_norm.to(F64) / r.reshape(pre_norm.shape[:-1])[..., None])
    err = float(torch.linalg.norm(resid) / torch.linalg.norm(u).clamp_min(1e-300))
    return gamma, r.reshape(pre_norm.shape[:-1]), err


# --------------------------------------------------------------------------- one layer


@dataclass
class _LayerResult:
    heads: dict[str, np.ndarray]  # arrays of shape (n_lengths, H)
    layer: dict[str, np.ndarray]  # arrays of shape (n_lengths,)


def _prefix_sums(values: torch.Tensor, lengths: Sequence[int], dim: int) -> torch.Tensor:
    """Sums of ``values`` over its first ``n`` entries along ``dim``, one for each ``n`` of the
    increasing ``lengths``; float64, with ``dim`` replaced by an axis of size ``len(lengths)``.

    Each segment between two lengths is summed with a float64 accumulator and the segments are
    added in float64, per sequence (so a sequence's sums do not depend on its block).
    """
    out: list[torch.Tensor] = []
    running: torch.Tensor | None = None
    previous = 0
    for n in lengths:
        part = values.narrow(dim, previous, n - previous).sum(dim, dtype=F64)
        running = part if running is None else running + part
        out.append(running)
        previous = n
    return torch.stack(out, dim)


def _rho_terms(
    x: torch.Tensor,
    xx: torch.Tensor,
    xo: torch.Tensor,
    oo: torch.Tensor,
    o: torch.Tensor,
    w_out: torch.Tensor,
    lengths: Sequence[int],
    scales: np.ndarray,
) -> torch.Tensor:
    """``rho`` of ``X + s w_out[h] o_h`` on the first ``n`` tokens of each sequence, for every
    pair ``(n, s)`` of ``lengths`` and ``scales`` at once (Eq. 1 of §5 on ``Y_i = x_i + s W o_i``).

    ``x`` ``(B, n_max, D)``; ``xx`` ``(B, n_max)`` = ``||x||^2``; ``xo`` ``(B, H, n_max)`` =
    ``x^T w_out o``; ``oo`` ``(B, H, n_max)`` = ``||w_out o||^2``; ``o`` ``(B, H, n_max, k)``;
    ``w_out`` ``(H, D, k)`` float64. ``||Y_i||`` is expanded in float64; the sums of unit
    vectors ``sum_i Y_i / ||Y_i||`` run in float32 (relative error ~1e-7) as one masked product
    per sequence for all lengths (tokens ``i >= n`` get weight 0). Returns ``(B, H, L)``
    float64 (one value per sequence, head and length).
    """
    n_max = x.shape[1]
    scale = torch.as_tensor(np.asarray(scales, dtype=np.float64))[:, None]  # (L, 1)
    norm2 = (
        xx[:, None, None, :] + 2 * scale * xo[:, :, None, :] + scale * scale * oo[:, :, None, :]
    )  # (B, H, L, n_max)
    sizes = torch.as_tensor(list(lengths))
    inside = torch.arange(n_max)[None, :] < sizes[:, None]  # (L, n_max)
    w = torch.where(inside, norm2.rsqrt_(), 0.0).to(F32)
    b, n_heads, n_len, _ = w.shape
    total = (w.reshape(b, n_heads * n_len, n_max) @ x).reshape(b, n_heads, n_len, -1).to(F64)
    inner = (w @ o).to(F64)  # (B, H, L, k)
    # the small map back to D dimensions in float64: a float32 product whose row count is the
    # number of sequences rounds differently for one row than for several
    total += scale * torch.einsum("hdk,bhlk->bhld", w_out, inner)
    n = sizes.to(F64)
    return (total.square_().sum(-1) - n) / (n * (n - 1))


def _rho_of_units(units: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """``rho`` per sequence of unit rows ``(B, n_max, D)`` on the first ``n`` of each of
    ``lengths`` (float64, ``(B, L)``; segment sums in float32: relative error ~1e-7)."""
    total = _prefix_sums(units, lengths, 1)  # (B, L, D)
    n = torch.as_tensor(list(lengths), dtype=F64)
    return (total.square_().sum(-1) - n) / (n * (n - 1))


def _release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``; a no-op elsewhere)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _sum_squares(a: torch.Tensor) -> torch.Tensor:
    """Sum of squares per sequence of ``(B, ...)`` float32 values, accumulated in float64."""
    return torch.linalg.vector_norm(a.reshape(a.shape[0], -1), dim=1, dtype=F64).square()


class _LayerAnalysis:
    """All per-head and per-layer quantities of one layer, computed block by block (§5, App. E.1).

    The token set is positions ``start..start + n - 1`` for each ``n`` in ``lengths``; positions
    ``0..stop - 1`` (``stop = start + lengths[-1]``) are read. Every block of sequences is a
    dict of tensors (:func:`_block`): ``x, z, update`` ``(B, stop, D)``, ``probs``
    ``(B, H, stop, stop)``, ``values`` ``(B, H, stop, k)`` (GQA expanded). Quantities that pool
    over sequences need statistics of earlier passes, so a layer takes up to three passes over
    its sequences (:attr:`passes`), each fed by :meth:`add` in sequence order:

    * ``"norm"`` (post-attention norm only): the least-squares sums of the gain ``gamma`` and
      the per-token ``r_i`` (so the map ``W_h``, hence ``||W_h o||`` and ``kappa``, are known),
      and the fit's residual, which is also the head-sum check;
    * ``"main"``: everything that needs ``W_h`` but not ``s_l``: the unscaled ``rho`` terms,
      ``rho(X)``, ``rho(X + U)``, head and full update norms (hence ``s_l``), uniformity, the
      moments of Theorem 5.1, the head-sum check without post-norm; caches ``||x||^2``,
      ``x^T W o`` and
      ``||W o||^2`` per token (``O(N H T)`` numbers);
    * ``"scaled"``: the ``rho`` terms of ``X + s_l W Z M^T`` (``s_l`` pools every sequence).

    Per-sequence results are stored per sequence and reduced over sequences at the end, so the
    outputs do not depend on the block size (pooled float64 sums: up to float64 rounding).
    """

    def __init__(
        self,
        weights: Mapping[str, torch.Tensor],
        n_seq: int,
        post_norm: bool,
        start: int,
        lengths: Sequence[int],
        lambdas: np.ndarray,
    ) -> None:
        self.w_v, self.b_v = weights["w_v"], weights["b_v"]
        self.gain = weights["gain"]
        self.w_o32 = weights["w_o"].to(F32)
        n_heads, d_model, _k = self.w_o32.shape
        self.w_o_flat = self.w_o32.permute(0, 2, 1).reshape(-1, d_model)  # (H k, D)
        self.n_seq, self.n_heads, self.d_model = n_seq, n_heads, d_model
        self.post_norm, self.start = post_norm, start
        self.lengths = [int(n) for n in lengths]
        self.lambdas = lambdas
        self.n_max = self.lengths[-1]
        self.token_counts = torch.as_tensor(self.lengths, dtype=F64)
        self.stop = start + self.n_max
        n_len = len(self.lengths)
        # the output projection is checked on every sequence with a post-norm (it is needed
        # for r_i anyway), else on the first SEQUENCE_CHUNK sequences
        self.checked = n_seq if post_norm else min(n_seq, SEQUENCE_CHUNK)
        self.passes = ("norm", "main", "scaled") if post_norm else ("main", "scaled")
        self.upper = self.row_err = 0.0
        self.uniformity = torch.empty(n_seq, n_heads, n_len, dtype=F64)
        self.head_sum = torch.empty(n_seq, n_heads, n_len, dtype=F64)
        self.full_sum = torch.empty(n_seq, n_len, dtype=F64)
        self.rho_x = torch.empty(n_seq, n_len, dtype=F64)
        self.rho_after = torch.empty(n_seq, n_len, dtype=F64)
        self.rho = {
            f"rho_{tag}{suffix}": torch.empty(n_seq, n_heads, n_len, dtype=F64)
            for suffix in ("", "_s")
            for tag in ("xwz", "xwza", "xwzau")
        }
        self.xx = torch.empty(n_seq, self.n_max, dtype=F64)
        self.xo = {name: torch.empty(n_seq, n_heads, self.n_max, dtype=F64) for name in VARIANTS}
        self.oo = {name: torch.empty(n_seq, n_heads, self.n_max, dtype=F64) for name in VARIANTS}
        self.moments = MomentAccumulator(self.lengths, d_model, n_seq)
        # integrity checks: sums of squares per sequence (float64)
        self.check_err2 = torch.zeros(n_seq, dtype=F64)
        self.check_ref2 = torch.zeros(n_seq, dtype=F64)
        if post_norm:
            self.uq = torch.empty(n_seq, d_model, dtype=F64)
            self.qq = torch.empty(n_seq, d_model, dtype=F64)
            self.uu = torch.empty(n_seq, d_model, dtype=F64)
            self.r = torch.empty(n_seq, self.stop, dtype=F64)
        else:
            self._set_gain(torch.ones(d_model, dtype=F64))
            self.kappa = np.ones(n_len)
            self.bias_sum = torch.zeros(self.checked, d_model, dtype=F64)

    def _set_gain(self, gamma: torch.Tensor) -> None:
        self.gamma = gamma
        self.w_out = gamma.to(F32)[None, :, None] * self.w_o32  # (H, D, k), before 1/rbar
        self.w_out_flat = self.w_out.permute(1, 0, 2).reshape(self.d_model, -1)  # (D, H k)
        self.gram_out = self.w_out.transpose(1, 2) @ self.w_out  # (H, k, k)
        self.w_out64 = self.w_out.to(F64)

    # ------------------------------------------------------------------ per block

    def _outputs(self, block: dict[str, Any], first: bool) -> torch.Tensor:
        """``A V`` at all positions ``(B, H, stop, k)`` (float32); probability checks and row
        uniformities on the first pass that reads the maps."""
        probs = block.pop("probs").to(F32)  # the stored maps are not needed again
        sl = block["sequences"]
        if first:
            self.upper = max(self.upper, float(torch.triu(probs, diagonal=1).amax()))
            self.row_err = max(self.row_err, float((probs.sum(-1) - 1).abs().amax()))
            rows = row_uniformity(probs)[:, :, self.start : self.stop]
            self.uniformity[sl] = _prefix_sums(rows, self.lengths, 2) / self.token_counts
            del rows
        # all positions: the rows of a prefix's A V are rows of the full product
        return probs @ block["values"].to(F32)

    def _variants(self, o_full: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Head outputs on the token set under ``I``, ``A`` and ``A_u``: ``(B, H, n_max, k)``."""
        o_id = values[:, :, self.start : self.stop].to(F32)
        counts = torch.arange(1, self.n_max + 1, dtype=F32)[:, None]
        return {
            "id": o_id,
            "attn": o_full[:, :, self.start : self.stop],
            "unif": o_id.cumsum(2) / counts,
        }

    def _projection(self, o_full: torch.Tensor) -> torch.Tensor:
        """The output projection ``sum_h W_O[h] (A_h V_h)`` at all positions ``(B, stop, D)``."""
        b = o_full.shape[0]
        return o_full.permute(0, 2, 1, 3).reshape(b, self.stop, -1) @ self.w_o_flat

    def add(self, name: str, block: dict[str, Any]) -> None:
        """Feed one block (``block["sequences"]``: its slice of sequences) to pass ``name``."""
        getattr(self, f"_pass_{name}")(block)

    def _pass_norm(self, block: dict[str, Any]) -> None:
        sl = block["sequences"]
        o_proj = self._projection(self._outputs(block, first=True))
        update = block["update"]
        self.uq[sl], self.qq[sl], self.r[sl] = post_norm_sums(update, o_proj)
        self.uu[sl] = update.to(F64).square_().sum(1)

    def _finish_norm(self) -> None:
        gamma = self.uq.sum(0) / self.qq.sum(0).clamp_min(1e-300)
        self._set_gain(gamma)
        self.check_err2 = post_norm_residual_sq(gamma, self.uq, self.qq, self.uu)
        self.check_ref2 = self.uu.sum(-1)
        del self.uq, self.qq, self.uu
        r_tok = self.r[:, self.start : self.stop]
        self.kappa = np.array(
            [1.0 / float(r_tok[:, :n].sum(1).sum() / (self.n_seq * n)) for n in self.lengths]
        )

    def _pass_main(self, block: dict[str, Any]) -> None:
        sl = block["sequences"]
        first_seq = sl.start
        o_full = self._outputs(block, first=not self.post_norm)
        update = block["update"].to(F32)
        # with a post-norm the head sum was checked in the norm pass (its fit residual)
        if not self.post_norm and first_seq < self.checked:
            local = slice(0, min(sl.stop, self.checked) - first_seq)
            resid = update[local] - self._projection(o_full[local])
            self.bias_sum[first_seq : first_seq + resid.shape[0]] = resid.sum(1, dtype=F64)
            del resid
        variants = self._variants(o_full, block["values"])

        # expansions of ||X + s u||^2 through the head dimension
        x = block["x"][:, self.start : self.stop].to(F32)
        b = x.shape[0]
        proj = (x.reshape(-1, self.d_model) @ self.w_out_flat).reshape(
            b, self.n_max, self.n_heads, -1
        )
        proj = proj.permute(0, 2, 1, 3)  # (B, H, n_max, k) = w_out^T x
        self.xx[sl] = torch.linalg.vecdot(x, x).to(F64)
        for name, o in variants.items():
            self.xo[name][sl] = torch.linalg.vecdot(proj, o).to(F64)
            self.oo[name][sl] = torch.linalg.vecdot(o @ self.gram_out, o).to(F64)
        del proj
        head_norm = self.oo["attn"][sl].clamp_min(0).sqrt()  # (B, H, n_max), before kappa
        update_tok = update[:, self.start : self.stop]
        full_norm = torch.linalg.vector_norm(update_tok, dim=-1, dtype=F64)  # (B, n_max)
        self.head_sum[sl] = _prefix_sums(head_norm, self.lengths, 2)
        self.full_sum[sl] = _prefix_sums(full_norm, self.lengths, 1)
        del head_norm, full_norm

        # theory: gain-free Z, W = kappa diag(gamma) W_O W_V diag(g)
        g = self.gain.to(F32)
        safe_g = torch.where(g == 0, torch.ones_like(g), g)
        z_tilde = torch.where(g == 0, 0.0, block["z"][:, self.start : self.stop].to(F32) / safe_g)
        self.moments.add(z_tilde, x)
        del z_tilde

        x_unit = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        after = x + update_tok
        after_unit = after.div_(torch.linalg.vector_norm(after, dim=-1, keepdim=True))
        self.rho_x[sl] = _rho_of_units(x_unit, self.lengths)
        self.rho_after[sl] = _rho_of_units(after_unit, self.lengths)
        del x_unit, after_unit, update, update_tok
        self._rho_block(sl, x, variants, "", self.kappa)

    def _finish_main(self) -> None:
        n_seq, n_heads = self.n_seq, self.n_heads
        tokens = np.asarray(self.lengths, dtype=np.float64)
        self.mean_head = (
            self.head_sum.sum((0, 1)).numpy() / (n_seq * n_heads * tokens)
        ) * self.kappa
        self.mean_full = self.full_sum.sum(0).numpy() / (n_seq * tokens)
        self.s_l = self.mean_full / self.mean_head
        if self.post_norm:
            ref = self.check_ref2.sum().sqrt().clamp_min(1e-300)
            self.fit_err = float(self.check_err2.sum().sqrt() / ref)
            self.out_bias = 0.0
        else:
            self.fit_err = float("nan")
            self.bias = self.bias_sum.sum(0) / (self.checked * self.stop)  # output bias (GPT-2)
            self.out_bias = float(torch.linalg.norm(self.bias))

    def _pass_scaled(self, block: dict[str, Any]) -> None:
        sl = block["sequences"]
        o_full = self._outputs(block, first=False)
        if not self.post_norm and sl.start < self.checked:
            local = slice(0, min(sl.stop, self.checked) - sl.start)
            update = block["update"][local].to(F32)
            resid = update - self._projection(o_full[local])
            rows = slice(sl.start, sl.start + resid.shape[0])
            self.check_err2[rows] = _sum_squares(resid.sub_(self.bias.to(F32)))
            self.check_ref2[rows] = _sum_squares(update)
            del update, resid
        variants = self._variants(o_full, block["values"])
        x = block["x"][:, self.start : self.stop].to(F32)
        self._rho_block(sl, x, variants, "_s", self.kappa * self.s_l)

    def _rho_block(
        self,
        sl: slice,
        x: torch.Tensor,
        variants: Mapping[str, torch.Tensor],
        suffix: str,
        scales: np.ndarray,
    ) -> None:
        for name, tag in (("id", "xwz"), ("attn", "xwza"), ("unif", "xwzau")):
            self.rho[f"rho_{tag}{suffix}"][sl] = _rho_terms(
                x,
                self.xx[sl],
                self.xo[name][sl],
                self.oo[name][sl],
                variants[name],
                self.w_out64,
                self.lengths,
                scales,
            )

    def finish(self, name: str) -> None:
        """Close pass ``name`` (all its blocks added)."""
        finisher = getattr(self, f"_finish_{name}", None)
        if finisher is not None:
            finisher()

    # ------------------------------------------------------------------ result

    def result(self) -> _LayerResult:
        """Per-head and per-layer values for every prefix size (after all passes)."""
        w_in = self.w_v.to(F64) * self.gain.to(F64)[None, None, :]
        w_out64 = self.w_out64
        if self.post_norm:
            head_sum_err = self.fit_err  # the head sum through the fitted norm (norm pass)
        else:
            ref = self.check_ref2[: self.checked].sum().sqrt().clamp_min(1e-30)
            head_sum_err = float(self.check_err2[: self.checked].sum().sqrt() / ref)
        heads: dict[str, list[np.ndarray]] = {}
        layer: dict[str, list[float]] = {}

        def put(store: dict, key: str, value: Any) -> None:
            store.setdefault(key, []).append(value)

        for index, n in enumerate(self.lengths):
            mom = self.moments.moments(index)
            kappa = float(self.kappa[index])
            s_l = float(self.s_l[index])
            for key, values in self.rho.items():
                put(heads, key, values[..., index].mean(0).numpy())
            terms = trace_terms(mom, w_out64, w_in, self.b_v)
            coef = closed_form_coefficients(terms, mom.beta, kappa)
            coef_s = closed_form_coefficients(terms, mom.beta, kappa * s_l)
            path = rho_hat(coef, n, self.lambdas)
            path_s = rho_hat(coef_s, n, self.lambdas)
            ends = rho_hat(coef, n, [0.0, 1.0])
            # smallest E[Y_i^T Y_j] over i < j and lambda in [0, 1]: a + min(b, 0) / 2 (j = 2)
            min_numer = coef["a"] + np.minimum(coef["b"], 0.0) / 2.0
            put(heads, "uniformity", self.uniformity[..., index].mean(0).numpy())
            put(heads, "rhohat_xwz", ends[:, 0])
            put(heads, "rhohat_xwzau", ends[:, 1])
            put(heads, "tr_cw", kappa * terms.tr_cw)
            put(heads, "tr_bw", kappa * terms.tr_bw)
            put(heads, "tr_cwtw", kappa**2 * terms.tr_cwtw)
            put(heads, "tr_bwtw", kappa**2 * terms.tr_bwtw)
            put(heads, "bias_term", coef["bias"])
            put(heads, "cond_i_value", coef["beta_tr_bw"])
            put(heads, "cond_ii_value", coef["b"])
            put(heads, "cond_ii_value_s", coef_s["b"])
            put(heads, "condition", condition_labels(coef["beta_tr_bw"], coef["e"]))
            put(heads, "condition_s", condition_labels(coef_s["beta_tr_bw"], coef_s["e"]))
            put(heads, "rhohat_trend", _trend(path))
            put(heads, "rhohat_trend_s", _trend(path_s))
            put(heads, "expectation_positive", min_numer > 0)
            head_norm = self.head_sum[..., index].sum(0) / (self.n_seq * n) * kappa
            put(heads, "head_update_norm", head_norm.numpy())
            for key, value in (
                ("n_tokens", n),
                ("beta", mom.beta),
                ("s_l", s_l),
                ("kappa", kappa),
                ("tr_c", mom.tr_c),
                ("tr_b", mom.tr_b),
                ("rho_before", float(self.rho_x[:, index].mean())),
                ("rho_after", float(self.rho_after[:, index].mean())),
                ("rhohat_x", mom.tr_c / (mom.tr_c + mom.tr_b)),
                ("full_update_norm", float(self.mean_full[index])),
                ("head_update_norm", float(self.mean_head[index])),
                ("post_norm_fit_rel_err", self.fit_err),
                ("head_sum_rel_err", head_sum_err),
                ("output_bias_norm", self.out_bias),
                ("probs_upper_max", self.upper),
                ("probs_row_sum_max_err", self.row_err),
            ):
                put(layer, key, value)
            del mom, terms
        return _LayerResult(
            heads={key: np.stack(value) for key, value in heads.items()},
            layer={key: np.asarray(value) for key, value in layer.items()},
        )


#: The mixing matrices of the per-head updates: identity, learned A, uniform causal A_u.
VARIANTS: tuple[str, ...] = ("id", "attn", "unif")


# --------------------------------------------------------------------------- files and tables


def _attr(handle: Any, name: str) -> Any:
    value = handle.attrs[name]
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    return value.decode() if isinstance(value, bytes) else value


def resolve_context_lengths(context_lengths: Iterable[int], text_tokens: int) -> list[int]:
    """Sorted unique context lengths capped at the file's ``T`` (each must be >= 2)."""
    lengths = sorted({min(int(t), int(text_tokens)) for t in context_lengths})
    if not lengths:
        raise ValueError("no context lengths given")
    if lengths[0] < 2:
        raise ValueError(f"context lengths must be >= 2 tokens, got {lengths}")
    return lengths


HEAD_INFO_COLUMNS: tuple[str, ...] = (
    "head_class",
    "is_sink",
    "is_diagonal",
    "bos_mass",
    "diagonal_mass",
)

PER_HEAD_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "n_sequences",
    "layer",
    "head",
    "context_length",
    "n_tokens",
    *HEAD_INFO_COLUMNS,
    "uniformity",
    "beta",
    "s_l",
    "kappa",
    "rho_x",
    "rho_xwz",
    "rho_xwza",
    "rho_xwzau",
    "rho_xwz_s",
    "rho_xwza_s",
    "rho_xwzau_s",
    "rhohat_x",
    "rhohat_xwz",
    "rhohat_xwzau",
    "abs_err_x",
    "abs_err_xwz",
    "abs_err_xwzau",
    "tr_c",
    "tr_b",
    "tr_cw",
    "tr_bw",
    "tr_cwtw",
    "tr_bwtw",
    "bias_term",
    "cond_i_value",
    "cond_ii_value",
    "cond_ii_value_s",
    "condition",
    "condition_s",
    "predicted_sign",
    "predicted_sign_s",
    "delta_attn",
    "delta_unif",
    "delta_attn_s",
    "delta_unif_s",
    "rel_change_s",
    "rhohat_trend",
    "rhohat_trend_s",
    "expectation_positive",
    "head_update_norm",
)

PER_LAYER_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "n_sequences",
    "layer",
    "context_length",
    "n_tokens",
    "rho_before",
    "rho_after",
    "rhohat_x",
    "beta",
    "s_l",
    "kappa",
    "tr_c",
    "tr_b",
    "full_update_norm",
    "head_update_norm",
    "post_norm_fit_rel_err",
    "head_sum_rel_err",
    "output_bias_norm",
    "probs_upper_max",
    "probs_row_sum_max_err",
)


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
    :func:`~sinkscope.h5layout.read_values`). About one layer's stored data: each dataset is
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

    x = read("residual/X", (slice(stop),))
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
        update=read("attention/residual_update", (slice(stop),)),
        probs=read("attention/probs", (slice(None), slice(stop), slice(stop))),
        values=values,
    )


def _block(
    data: _LayerData, sequences: slice, expand: torch.Tensor, with_z: bool
) -> dict[str, Any]:
    """The tensors of one block of sequences for :class:`_LayerAnalysis` (views of ``data``).

    Keys: ``x``, ``update`` ``(B, stop, D)``, ``probs`` ``(B, H, stop, stop)``, ``values``
    ``(B, H, stop, k)`` (expanded to query heads), ``sequences`` (the slice) and, with
    ``with_z``, ``z`` ``(B, stop, D)`` (:meth:`~sinkscope.h5layout.InputProjection.Z`).
    """
    x = data.x[sequences]
    block: dict[str, Any] = {
        "sequences": sequences,
        "x": torch.from_numpy(x),
        "update": torch.from_numpy(data.update[sequences]),
        "probs": torch.from_numpy(data.probs[sequences]),
        "values": torch.from_numpy(data.values[sequences])[:, expand],
    }
    if with_z:
        block["z"] = torch.from_numpy(data.projection.Z(x))
    return block


def _read_weights(handle: Any, layer: int) -> dict[str, torch.Tensor]:
    return {
        "w_v": torch.from_numpy(handle["weights/W_V"][layer]),
        "b_v": torch.from_numpy(handle["weights/b_V"][layer]),
        "w_o": torch.from_numpy(handle["weights/W_O"][layer]),
        "gain": torch.from_numpy(handle["weights/norm_gain"][layer]),
    }


def _layer_frames(
    layer: int, lengths: Sequence[int], n_heads: int, result: _LayerResult
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
    uniformity_threshold: float = 0.6,
    *,
    include_bos: bool = False,
    lambdas: Sequence[float] | np.ndarray = LAMBDA_GRID,
    layers: Iterable[int] | None = None,
    block_size: int | None = None,
) -> dict[str, pl.DataFrame]:
    """Oversmoothing analysis of one activation file (one model x dataset pair).

    ``per_head``: the head classification table (``sinkscope.heads.classify_file(path)[1]``);
    ``context_lengths``: prefix lengths ``T'`` in text tokens (capped at the file's ``T``);
    ``uniformity_threshold``: the paper's 0.6 for "dense" heads (summary); ``include_bos``: put
    BOS into the token set (module docstring); ``layers``: restrict to some layers;
    ``block_size``: sequences read and processed at a time (default
    :func:`default_block_size`); the tables do not depend on it (to float64 rounding).

    Returns ``{"per_head", "per_layer", "summary", "conditions", "claims"}`` (columns in
    :data:`PER_HEAD_COLUMNS`, :data:`PER_LAYER_COLUMNS` and :func:`summary_tables`).
    """
    lam = np.asarray(lambdas, dtype=np.float64)
    if lam.ndim != 1 or lam.size < 2 or not np.all(np.diff(lam) > 0):
        raise ValueError("lambdas must be an increasing grid of at least 2 values")
    head_rows: list[pl.DataFrame] = []
    layer_rows: list[pl.DataFrame] = []
    with open_activations(h5_path) as handle:
        model = str(_attr(handle, "model_name"))
        dataset = str(_attr(handle, "dataset_name"))
        post_norm = bool(_attr(handle, "post_attention_norm"))
        x_ds = handle["residual/X"]
        n_layers, n_seq, t1, _ = x_ds.shape
        n_heads = handle["attention/probs"].shape[2]
        n_kv = int(_attr(handle, "n_kv_heads"))
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
            analysis = _LayerAnalysis(
                _read_weights(handle, layer), n_seq, post_norm, start, tokens, lam
            )
            data = _read_layer(handle, layer, stop, blocks)
            for name in analysis.passes:
                for sl in blocks:
                    analysis.add(name, _block(data, sl, expand, name == "main"))
                analysis.finish(name)
                # each pass allocates differently sized work arrays: without a trim the heap
                # keeps the previous pass's freed pages (measured: +25-40 % peak RSS)
                _release_freed_memory()
            del data
            _release_freed_memory()  # before the result's D x D float64 work arrays
            result = analysis.result()
            del analysis
            _release_freed_memory()
            heads_frame, layer_frame = _layer_frames(layer, lengths, n_heads, result)
            head_rows.append(heads_frame)
            layer_rows.append(layer_frame)
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
    tables = {"per_head": heads_table, "per_layer": layers_table}
    tables.update(summary_tables(heads_table, layers_table, uniformity_threshold))
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


# --------------------------------------------------------------------------- figure / claim bases
#
# Every number that a figure shows and a claim (sinkscope.claims, and this module's per-pair
# ``claims`` table) tests is computed by one of the functions below; the summary table, the
# figures and the claims all call them, so a figure's annotation and the claim row agree.

KEYS: tuple[str, ...] = ("model", "dataset", "context_length")

#: Basis of Figs. 8-9 and of the claims read off them (§5: "Figures 8-9 show that (a) the
#: monotonicity ... replicates well in practice, and that (b) roughly half of the heads satisfy
#: condition (i) ..., whereas few heads satisfy condition (ii)"). Heads: the non-sink heads
#: (``is_sink`` of the head classification; App. E.1: "Since sink attention patterns are far from
#: this interpolation, we exclude them from this analysis"). Map: ``s_l W``, the map whose effect
#: the plotted deltas measure (App. E.1, eq. 11; the deltas are of ``X + s_l W Z M^T``). Condition
#: (i) ``beta tr(BW) > 0`` is the same for ``W`` and ``s_l W`` (``s_l > 0``); condition (ii)
#: depends on the scale (``s_l`` multiplies ``tr(BW)`` by ``s_l`` and ``tr(BW^T W)`` by
#: ``s_l^2``). Context length: each pair's largest ``T'`` (the paper's figures: 512).
CONDITION_BASIS = "non-sink heads (is_sink), conditions for the rescaled map s_l W (eq. 11)"


def component_mean_exprs() -> list[pl.Expr]:
    """Head means of ``rho`` for Fig. 2 left / 5 (``X`` and ``X + WZ`` without rescaling,
    empirical ``mean_rho_*`` and approximation (2) ``mean_rhohat_*``: App. E.1, "the quantity
    captured by the theory") and Fig. 2 right / 6 (``X + s_l WZ``, ``X + s_l WZA^T``,
    ``X + s_l WZA_u^T``: ``mean_rho_*_s``, App. E.1 eq. (11))."""
    return [
        pl.col("rho_x").mean().alias("mean_rho_x"),
        pl.col("rhohat_x").mean().alias("mean_rhohat_x"),
        pl.col("rho_xwz").mean().alias("mean_rho_xwz"),
        pl.col("rhohat_xwz").mean().alias("mean_rhohat_xwz"),
        pl.col("rho_xwz_s").mean().alias("mean_rho_xwz_s"),
        pl.col("rho_xwza_s").mean().alias("mean_rho_xwza_s"),
        pl.col("rho_xwzau_s").mean().alias("mean_rho_xwzau_s"),
    ]


def component_means(per_head: pl.DataFrame, by: Sequence[str] = KEYS) -> pl.DataFrame:
    """:func:`component_mean_exprs` per group of ``by`` (plus ``n_heads``), sorted by ``by``."""
    return (
        per_head.group_by(*by, maintain_order=True)
        .agg(pl.len().cast(pl.Int64).alias("n_heads"), *component_mean_exprs())
        .sort(*by)
    )


def condition_exprs() -> list[pl.Expr]:
    """Figs. 8-9 on the basis :data:`CONDITION_BASIS`: ``n_non_sink``, ``n_cond_{i,ii,neither}_s
    _non_sink`` and ``frac_cond_{i,ii}_s_non_sink`` (share of the non-sink heads),
    ``n_predicted_s`` (non-sink heads with condition (i) or (ii)) and, among those, the share
    whose ``rho`` changes with the predicted sign in Fig. 8 (``agree_attn_s``: ``delta_attn_s``),
    in Fig. 9 (``agree_unif_s``: ``delta_unif_s``) and in both (``agree_both_s``: App. E.1,
    "Both quantities should be positive when ... negative when ...")."""
    non_sink = ~pl.col("is_sink")
    pred = pl.col("predicted_sign_s")
    with_prediction = non_sink & (pred != 0)

    def agrees(delta: str) -> pl.Expr:
        return pl.col(delta).sign().cast(pl.Int64) == pred

    return [
        non_sink.sum().cast(pl.Int64).alias("n_non_sink"),
        *(
            (pl.col("condition_s") == c)
            .filter(non_sink)
            .sum()
            .cast(pl.Int64)
            .alias(f"n_cond_{c}_s_non_sink")
            for c in CONDITIONS
        ),
        *(
            (pl.col("condition_s") == c).filter(non_sink).mean().alias(f"frac_cond_{c}_s_non_sink")
            for c in ("i", "ii")
        ),
        with_prediction.sum().cast(pl.Int64).alias("n_predicted_s"),
        agrees("delta_attn_s").filter(with_prediction).mean().alias("agree_attn_s"),
        agrees("delta_unif_s").filter(with_prediction).mean().alias("agree_unif_s"),
        (agrees("delta_attn_s") & agrees("delta_unif_s"))
        .filter(with_prediction)
        .mean()
        .alias("agree_both_s"),
    ]


def condition_summary(per_head: pl.DataFrame, by: Sequence[str] = KEYS) -> pl.DataFrame:
    """:func:`condition_exprs` per group of ``by``, sorted by ``by`` (the numbers of Figs. 8-9
    and of the claims ``condition_i_half``, ``condition_ii_few`` and ``predicted_signs``)."""
    return per_head.group_by(*by, maintain_order=True).agg(*condition_exprs()).sort(*by)


def approximation_offsets(curves: pl.DataFrame) -> pl.DataFrame:
    """Fig. 2 left / 5: how far approximation (2) is from the empirical head-averaged curve.

    ``curves``: one row per ``model, dataset, context_length`` with ``mean_rho_x``,
    ``mean_rhohat_x``, ``mean_rho_xwz``, ``mean_rhohat_xwz`` (the summary table, or
    :func:`component_means`). Per ``model, dataset`` and component ``c`` in ``x``, ``xwz``:
    ``offset_c`` = largest ``|mean_rho_c - mean_rhohat_c|`` over ``T'`` (the gap between the
    solid and the dashed curve), ``signed_offset_c`` (that gap with its sign, empirical minus
    approximation), ``range_c`` = ``max - min`` over ``T'`` of the empirical curve (its whole
    change across ``T'``), ``rel_offset_c = offset_c / range_c`` (``inf`` for a flat curve with a
    gap; null with fewer than two context lengths), and ``rel_offset`` = the larger of the two.
    """
    rows = []
    ordered = curves.sort("model", "dataset", "context_length")
    for (model, dataset), part in ordered.group_by("model", "dataset", maintain_order=True):
        row: dict[str, Any] = {
            "model": str(model),
            "dataset": str(dataset),
            "n_context_lengths": part.height,
            "context_length_max": int(part["context_length"].max()),
        }
        rels = []
        for c in ("x", "xwz"):
            emp = part[f"mean_rho_{c}"].to_numpy().astype(np.float64)
            gap = emp - part[f"mean_rhohat_{c}"].to_numpy().astype(np.float64)
            worst = int(np.argmax(np.abs(gap)))
            offset = float(abs(gap[worst]))
            span = float(emp.max() - emp.min())
            if part.height < 2:
                rel = None
            elif span > 0:
                rel = offset / span
            else:
                rel = 0.0 if offset == 0 else math.inf
            row |= {
                f"offset_{c}": offset,
                f"signed_offset_{c}": float(gap[worst]),
                f"range_{c}": span,
                f"rel_offset_{c}": rel,
            }
            rels.append(rel)
        row["rel_offset"] = None if None in rels else max(rels)
        rows.append(row)
    schema = {"model": pl.String, "dataset": pl.String, "n_context_lengths": pl.Int64}
    schema["context_length_max"] = pl.Int64
    for c in ("x", "xwz"):
        for name in ("offset", "signed_offset", "range", "rel_offset"):
            schema[f"{name}_{c}"] = pl.Float64
    schema["rel_offset"] = pl.Float64
    return pl.DataFrame(rows, schema=schema)


# --------------------------------------------------------------------------- summaries


def summary_tables(
    per_head: pl.DataFrame,
    per_layer: pl.DataFrame,
    uniformity_threshold: float = 0.6,
) -> dict[str, pl.DataFrame]:
    """``summary``, ``conditions`` and ``claims`` from per-head and per-layer tables.

    ``summary`` (one row per model, dataset, context length): ``n_heads, n_non_sink,
    n_dense`` (``u > threshold``), approximation errors (``mean/max_abs_err_x``,
    ``mean/max_abs_err_xwz``, ``mean_abs_err_xwzau``, ``frac_err_xwz_below_0_1``), mean ``rho``
    of ``X, X+WZ, X+WZA^T, X+WZA_u^T`` (rescaled, all heads and dense heads), mean increases
    over ``rho(X)`` (``mean_increase_attn_s``, ``mean_increase_unif_s`` and ``_dense``),
    ``frac_unif_above_attn_s``, fractions of all heads per condition (``frac_cond_i``, ... for
    ``W`` and ``_s`` for ``s_l W``), of the non-sink heads for ``W`` (``frac_cond_i_non_sink``,
    ``frac_cond_ii_non_sink``), the Figs. 8-9 numbers of :func:`condition_exprs` (basis
    :data:`CONDITION_BASIS`: ``n_non_sink``, ``n_cond_*_s_non_sink``, ``frac_cond_*_s_non_sink``,
    ``n_predicted_s``, ``agree_attn_s``, ``agree_unif_s``, ``agree_both_s``), the same agreement
    for the unscaled ``W`` (``agree_attn``, ``agree_unif``, ``agree_both``),
    ``frac_rhohat_trend_as_predicted`` (a check of the theorem on the closed forms) and
    ``min_rho_layers`` (Fig. 4: smallest layer ``rho``). Head means of ``rho``:
    :func:`component_mean_exprs`.

    ``conditions`` (long): per model, dataset, context length, ``scaling`` (``unscaled`` /
    ``rescaled``) and condition: ``n_heads`` (non-sink), ``frac_heads``, ``frac_attn_positive``,
    ``frac_unif_positive``, ``mean_delta_attn``, ``mean_delta_unif``, ``agree_attn``,
    ``agree_unif`` (agreement with the predicted sign; null for ``neither``).

    ``claims``: the paper's §5/App. E.1 statements checked at the largest context length of each
    pair: ``claim``, ``value``, ``holds``.
    """
    thr = float(uniformity_threshold)
    dense = pl.col("uniformity") > thr
    non_sink = ~pl.col("is_sink")

    def agreement(delta: str, pred: str) -> pl.Expr:
        mask = non_sink & (pl.col(pred) != 0)
        return (pl.col(delta).sign().cast(pl.Int64) == pl.col(pred)).filter(mask).mean()

    def both(pred: str, d1: str, d2: str) -> pl.Expr:
        mask = non_sink & (pl.col(pred) != 0)
        ok = (pl.col(d1).sign().cast(pl.Int64) == pl.col(pred)) & (
            pl.col(d2).sign().cast(pl.Int64) == pl.col(pred)
        )
        return ok.filter(mask).mean()

    predicted = pl.when(pl.col("predicted_sign") == 1).then(pl.col("rhohat_trend") == "increasing")
    predicted = predicted.when(pl.col("predicted_sign") == -1).then(
        pl.col("rhohat_trend") == "decreasing"
    )
    summary = (
        per_head.group_by(*KEYS, maintain_order=True)
        .agg(
            pl.col("n_sequences").max(),
            pl.len().cast(pl.Int64).alias("n_heads"),
            dense.sum().cast(pl.Int64).alias("n_dense"),
            pl.col("abs_err_x").mean().alias("mean_abs_err_x"),
            pl.col("abs_err_x").max().alias("max_abs_err_x"),
            pl.col("abs_err_xwz").mean().alias("mean_abs_err_xwz"),
            pl.col("abs_err_xwz").max().alias("max_abs_err_xwz"),
            pl.col("abs_err_xwzau").mean().alias("mean_abs_err_xwzau"),
            (pl.col("abs_err_xwz") < 0.1).mean().alias("frac_err_xwz_below_0_1"),
            *component_mean_exprs(),
            (pl.col("rho_xwza_s") - pl.col("rho_x")).mean().alias("mean_increase_attn_s"),
            (pl.col("rho_xwzau_s") - pl.col("rho_x")).mean().alias("mean_increase_unif_s"),
            (pl.col("rho_xwza_s") - pl.col("rho_x"))
            .filter(dense)
            .mean()
            .alias("mean_increase_attn_s_dense"),
            (pl.col("rho_xwzau_s") - pl.col("rho_x"))
            .filter(dense)
            .mean()
            .alias("mean_increase_unif_s_dense"),
            (pl.col("rho_xwzau_s") > pl.col("rho_xwza_s")).mean().alias("frac_unif_above_attn_s"),
            *(
                (pl.col(f"condition{v}") == c).mean().alias(f"frac_cond_{c}{v}")
                for v in ("", "_s")
                for c in CONDITIONS
            ),
            *(
                (pl.col("condition") == c).filter(non_sink).mean().alias(f"frac_cond_{c}_non_sink")
                for c in ("i", "ii")
            ),
            agreement("delta_attn", "predicted_sign").alias("agree_attn"),
            agreement("delta_unif", "predicted_sign").alias("agree_unif"),
            both("predicted_sign", "delta_attn", "delta_unif").alias("agree_both"),
            *condition_exprs(),
            predicted.filter(pl.col("predicted_sign") != 0)
            .mean()
            .alias("frac_rhohat_trend_as_predicted"),
            pl.col("expectation_positive").mean().alias("frac_expectation_positive"),
        )
        .with_columns(uniformity_threshold=pl.lit(thr))
    )
    layer_min = per_layer.group_by(*KEYS).agg(
        pl.min_horizontal(pl.col("rho_before").min(), pl.col("rho_after").min()).alias(
            "min_rho_layers"
        )
    )
    summary = summary.join(layer_min, on=list(KEYS), how="left").sort(*KEYS)

    conditions = []
    for label, suffix in (("unscaled", ""), ("rescaled", "_s")):
        cond = f"condition{suffix}"
        d1, d2 = f"delta_attn{suffix}", f"delta_unif{suffix}"
        pred = f"predicted_sign{suffix}"
        frame = (
            per_head.filter(non_sink)
            .group_by(*KEYS, cond)
            .agg(
                pl.len().cast(pl.Int64).alias("n_heads"),
                (pl.col(d1) > 0).mean().alias("frac_attn_positive"),
                (pl.col(d2) > 0).mean().alias("frac_unif_positive"),
                pl.col(d1).mean().alias("mean_delta_attn"),
                pl.col(d2).mean().alias("mean_delta_unif"),
                (pl.col(d1).sign().cast(pl.Int64) == pl.col(pred)).mean().alias("agree_attn"),
                (pl.col(d2).sign().cast(pl.Int64) == pl.col(pred)).mean().alias("agree_unif"),
            )
            .rename({cond: "condition"})
            .with_columns(
                scaling=pl.lit(label),
                frac_heads=pl.col("n_heads") / pl.col("n_heads").sum().over(*KEYS),
                agree_attn=pl.when(pl.col("condition") == "neither")
                .then(None)
                .otherwise(pl.col("agree_attn")),
                agree_unif=pl.when(pl.col("condition") == "neither")
                .then(None)
                .otherwise(pl.col("agree_unif")),
            )
        )
        conditions.append(frame)
    conditions_table = (
        pl.concat(conditions)
        .select(
            *KEYS,
            "scaling",
            "condition",
            "n_heads",
            "frac_heads",
            "frac_attn_positive",
            "frac_unif_positive",
            "mean_delta_attn",
            "mean_delta_unif",
            "agree_attn",
            "agree_unif",
        )
        .sort(*KEYS, "scaling", "condition")
    )
    return {"summary": summary, "conditions": conditions_table, "claims": _claims(summary)}


def _claims(summary: pl.DataFrame) -> pl.DataFrame:
    """The paper's oversmoothing statements, evaluated at each pair's largest context length.

    A quick per-pair view of the claims of :mod:`sinkscope.claims` (same columns, same bases, the
    default tolerances :data:`sinkscope.claims.DEFAULT_TOLERANCES`); ``sinkscope.claims`` applies
    the config's tolerances and gives the verdicts of record."""
    from sinkscope.claims import DEFAULT_TOLERANCES  # claims imports this module

    tol = DEFAULT_TOLERANCES["oversmoothing"]
    err, rel_max = tol["approximation_error"], tol["approximation_relative_offset"]
    gap, half, few, most = (
        tol["min_difference"],
        tol["half_band"],
        tol["few_max_fraction"],
        tol["most"],
    )
    offsets = {
        (r["model"], r["dataset"]): r["rel_offset"]
        for r in approximation_offsets(summary).iter_rows(named=True)
    }
    rows = []
    largest = summary.filter(
        pl.col("context_length") == pl.col("context_length").max().over("model", "dataset")
    )
    for row in largest.iter_rows(named=True):
        worst_err = max(row["max_abs_err_x"], row["max_abs_err_xwz"])
        rel = offsets[(row["model"], row["dataset"])]
        frac_i, frac_ii = row["frac_cond_i_s_non_sink"], row["frac_cond_ii_s_non_sink"]
        checks = [
            (
                f"Fig. 7: |rho - rho_hat| for X and X + WZ stays below {err:g} for every head",
                worst_err,
                worst_err < err,
            ),
            (
                (
                    "Fig. 2 left: largest gap between the head-averaged empirical curve and "
                    f"approximation (2) at most {rel_max:g} x the curve's range across T'"
                ),
                rel,
                None if rel is None else rel <= rel_max,
            ),
            (
                "Fig. 2 right: W decreases rho on average (rho(X) - rho(X + s_l WZ) > 0)",
                row["mean_rho_x"] - row["mean_rho_xwz_s"],
                row["mean_rho_x"] - row["mean_rho_xwz_s"] > gap,
            ),
            (
                "Fig. 2 right: attention raises rho on average (rho(X + s_l WZA^T) > rho(X))",
                row["mean_increase_attn_s"],
                row["mean_increase_attn_s"] > gap,
            ),
            (
                "Fig. 2 right: the increase is larger for heads with u > threshold",
                _diff(row["mean_increase_attn_s_dense"], row["mean_increase_attn_s"]),
                _gt(_diff(row["mean_increase_attn_s_dense"], row["mean_increase_attn_s"]), gap),
            ),
            (
                "Fig. 2 right: uniform attention raises rho more than learned attention",
                row["mean_increase_unif_s"] - row["mean_increase_attn_s"],
                row["mean_increase_unif_s"] - row["mean_increase_attn_s"] > gap,
            ),
            (
                "Figs. 8-9: roughly half of the non-sink heads satisfy condition (i)",
                frac_i,
                None if frac_i is None else abs(frac_i - 0.5) <= half,
            ),
            (
                "Figs. 8-9: few non-sink heads satisfy condition (ii) (for s_l W)",
                frac_ii,
                None if frac_ii is None else frac_ii <= few,
            ),
            (
                "Figs. 8-9: most non-sink heads with a prediction follow both predicted signs",
                row["agree_both_s"],
                _gt(row["agree_both_s"], most),
            ),
            (
                "Fig. 4: token cosine similarity stays positive across layers",
                row["min_rho_layers"],
                row["min_rho_layers"] > 0,
            ),
        ]
        for claim, value, holds in checks:
            rows.append(
                {
                    "model": row["model"],
                    "dataset": row["dataset"],
                    "context_length": row["context_length"],
                    "claim": claim,
                    "value": None if value is None else float(value),
                    "holds": None if holds is None else bool(holds),
                }
            )
    schema = {
        "model": pl.String,
        "dataset": pl.String,
        "context_length": pl.Int64,
        "claim": pl.String,
        "value": pl.Float64,
        "holds": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _gt(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None or math.isnan(a) else a > b


def summarize(
    tables: Sequence[Mapping[str, pl.DataFrame]], *, uniformity_threshold: float | None = None
) -> dict[str, pl.DataFrame]:
    """Combine :func:`analyze_file` outputs of several pairs.

    Returns ``per_head`` and ``per_layer`` (concatenated), and ``summary``, ``conditions`` and
    ``claims`` recomputed per pair plus one pooled pseudo-dataset ``"all"`` per model (every head
    of every dataset counted once). ``uniformity_threshold`` defaults to the one the tables were
    made with.
    """
    if not tables:
        raise ValueError("summarize needs at least one table dict")
    per_head = pl.concat([t["per_head"].select(PER_HEAD_COLUMNS) for t in tables])
    per_layer = pl.concat([t["per_layer"].select(PER_LAYER_COLUMNS) for t in tables])
    if (per_head["dataset"] == POOLED).any():
        raise ValueError(f"dataset name {POOLED!r} is reserved for the pooled summary")
    if per_head.select("model", "dataset", "layer", "head", "context_length").is_duplicated().any():
        raise ValueError("the same (model, dataset) pair appears twice")
    if uniformity_threshold is None:
        thresholds = {
            float(v) for t in tables for v in t["summary"]["uniformity_threshold"].to_list()
        }
        if len(thresholds) != 1:
            raise ValueError(f"tables use different uniformity thresholds {sorted(thresholds)}")
        uniformity_threshold = thresholds.pop()
    # the pooled pseudo-dataset counts the sequences of all of a model's datasets
    totals = (
        per_head.group_by("model", "dataset")
        .agg(pl.col("n_sequences").first())
        .group_by("model")
        .agg(pl.col("n_sequences").sum().alias("n_total"))
    )
    pooled_heads = (
        per_head.join(totals, on="model")
        .with_columns(n_sequences=pl.col("n_total"), dataset=pl.lit(POOLED))
        .drop("n_total")
    )
    pooled_layers = per_layer.with_columns(dataset=pl.lit(POOLED))
    by_pair = summary_tables(per_head, per_layer, uniformity_threshold)
    pooled = summary_tables(pooled_heads, pooled_layers, uniformity_threshold)
    out = {"per_head": per_head, "per_layer": per_layer}
    for key in ("summary", "conditions", "claims"):
        out[key] = pl.concat([by_pair[key], pooled[key]]).sort(
            "model", pl.col("dataset") == POOLED, "dataset", "context_length", maintain_order=True
        )
    return out
