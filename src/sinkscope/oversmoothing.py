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
    The theory's ``Z`` is the *gain-free* normalised input ``Z~ = attention/Z / norm_gain``
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
    exclude sink heads (``is_sink`` of the head classification).
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
:data:`SEQUENCE_CHUNK` sequences without post-norm), ``output_bias_norm`` (``||b_O||``, an
output-projection bias such as GPT-2's), ``probs_upper_max`` and ``probs_row_sum_max_err``.
``summary``, ``conditions`` and ``claims``: see :func:`summary_tables`.

Performance: one layer is read at a time (peak memory ~ one layer's tensors in float32); heavy
products run in torch (float32 for ``A V`` and ``X W_O``, float64 for moments, closed forms and
the cosine sums); per-head updates are never materialised in ``D`` dimensions: ``||Y_i||^2`` and
``sum_i Y_i/||Y_i||`` are expanded through the head dimension.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.h5layout import open_activations

__all__ = [
    "DEFAULT_CONTEXT_LENGTHS",
    "LAMBDA_GRID",
    "POOLED",
    "TokenMoments",
    "TraceTerms",
    "analyze_file",
    "average_cosine_similarity",
    "closed_form_coefficients",
    "condition_labels",
    "estimate_moments",
    "fit_post_norm_gain",
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


def estimate_moments(
    z: np.ndarray | torch.Tensor,
    x: np.ndarray | torch.Tensor | None,
    lengths: Sequence[int],
) -> list[TokenMoments]:
    """Estimate ``zbar, Sigma_V, Sigma_C, beta`` for every prefix size in ``lengths``.

    ``z``: gain-free normalised tokens ``(N, n_max, D)`` (sequence, token, feature) of the token
    set; ``x``: the matching residual tokens for ``beta`` (``None``: ``beta = 1``). ``lengths``:
    increasing prefix sizes (numbers of tokens, each >= 2). Definitions in the module docstring;
    the Gram matrix is accumulated segment by segment, so all prefixes cost one pass.
    """
    zt = torch.as_tensor(z)
    zt = zt if zt.dtype in (F32, F64) else zt.to(F32)
    n_seq, n_max, dim = zt.shape
    lengths = [int(n) for n in lengths]
    if not lengths or any(b <= a for a, b in itertools.pairwise(lengths)):
        raise ValueError(f"lengths must be increasing, got {lengths}")
    if lengths[0] < 2 or lengths[-1] > n_max:
        raise ValueError(f"lengths must lie in [2, {n_max}], got {lengths}")
    # float64 accumulation around a shift (the overall mean) avoids cancellation
    shift = zt[:, : lengths[-1]].sum((0, 1), dtype=F64) / (n_seq * lengths[-1])
    if x is not None:
        xt = torch.as_tensor(x).to(zt.dtype)
        xz = (xt * zt).sum(-1, dtype=F64).cumsum(1)
        zz = (zt * zt).sum(-1, dtype=F64).cumsum(1)
    gram = torch.zeros(dim, dim, dtype=F64)
    total = torch.zeros(dim, dtype=F64)
    seq_sums = torch.zeros(n_seq, dim, dtype=F64)
    previous = 0
    out = []
    for n in lengths:
        # shifted by the overall mean, a float32 Gram loses nothing that matters (~1e-7
        # relative); sums are accumulated in float64
        segment = zt[:, previous:n] - shift.to(zt.dtype)  # (N, n - previous, D)
        part = segment.sum(1, dtype=F64)
        seq_sums += part
        total += part.sum(0)
        segment = segment.reshape(-1, dim)
        gram += (segment.T @ segment).to(F64)
        previous = n
        count = n_seq * n
        mean = total / count
        sigma_v = gram / count - torch.outer(mean, mean)
        sums = seq_sums - n * mean  # (N, D): sum_i eps_i per sequence
        sigma_c = (sums.T @ sums - count * sigma_v) / (n_seq * n * (n - 1))
        beta = 1.0 if x is None else float(xz[:, n - 1].sum() / zz[:, n - 1].sum())
        out.append(
            TokenMoments(
                n,
                n_seq,
                shift + mean,
                0.5 * (sigma_v + sigma_v.T),
                0.5 * (sigma_c + sigma_c.T),
                beta,
            )
        )
    return out


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


def fit_post_norm_gain(
    update: torch.Tensor, pre_norm: torch.Tensor, eps: float = POST_NORM_EPS
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Recover the gain of a post-attention RMSNorm: ``update ~ gamma * pre_norm / r``.

    ``update``, ``pre_norm``: ``(..., D)``. Returns ``(gamma (D,), r (...), relative residual)``
    with ``r = sqrt(mean(pre_norm^2) + eps)``; ``gamma`` is the per-dimension least-squares fit.
    """
    o = pre_norm.to(F64)
    u = update.to(F64)
    r = torch.sqrt((o * o).mean(-1) + eps)
    q = (o / r[..., None]).reshape(-1, o.shape[-1])
    uf = u.reshape(-1, u.shape[-1])
    gamma = (uf * q).sum(0) / (q * q).sum(0).clamp_min(1e-300)
    err = float(torch.linalg.norm(uf - gamma * q) / torch.linalg.norm(uf).clamp_min(1e-300))
    return gamma, r, err


# --------------------------------------------------------------------------- one layer


@dataclass
class _LayerResult:
    heads: dict[str, np.ndarray]  # arrays of shape (n_lengths, H)
    layer: dict[str, np.ndarray]  # arrays of shape (n_lengths,)


def _rho_terms(
    x: torch.Tensor,
    xx: torch.Tensor,
    xo: torch.Tensor,
    oo: torch.Tensor,
    o: torch.Tensor,
    w_out: torch.Tensor,
    n: int,
    scale: float,
) -> torch.Tensor:
    """Mean over sequences of ``rho`` of ``X + scale * w_out[h] o_h`` on the first ``n`` tokens.

    ``x`` ``(N, n_max, D)``; ``xx`` ``(N, n_max)`` = ``||x||^2``; ``xo`` ``(N, H, n_max)`` =
    ``x^T w_out o``; ``oo`` ``(N, H, n_max)`` = ``||w_out o||^2``; ``o`` ``(N, H, n_max, k)``.
    ``||Y_i||`` is expanded in float64; the sums of unit vectors run in float32 (relative error
    ~1e-7). Returns ``(H,)`` float64.
    """
    norm2 = xx[:, None, :n] + 2 * scale * xo[..., :n] + scale * scale * oo[..., :n]
    w = norm2.rsqrt().to(F32)  # (N, H, n)
    total = w @ x[:, :n]  # (N, H, D)
    inner = (w[:, :, None, :] @ o[:, :, :n]).squeeze(2)  # (N, H, k)
    total = total + scale * torch.einsum("hdk,nhk->nhd", w_out, inner)
    total = total.to(F64)
    rho = ((total * total).sum(-1) - n) / (n * (n - 1))
    return rho.mean(0)


def _analyze_layer(
    x_all: torch.Tensor,
    z_all: torch.Tensor,
    probs: torch.Tensor,
    values: torch.Tensor,
    update_all: torch.Tensor,
    w_v: torch.Tensor,
    b_v: torch.Tensor,
    w_o: torch.Tensor,
    gain: torch.Tensor,
    post_norm: bool,
    start: int,
    lengths: Sequence[int],
    lambdas: np.ndarray,
) -> _LayerResult:
    """All per-head and per-layer quantities of one layer for prefix sizes ``lengths`` (tokens).

    Positions ``0..start + n_max - 1`` of the inputs are used; the token set is
    ``start..start + n - 1`` for each ``n`` in ``lengths``. Shapes: ``x_all, z_all, update_all``
    ``(N, P, D)``; ``probs`` ``(N, H, P, P)``; ``values`` ``(N, H, P, k)`` (GQA expanded);
    ``w_v`` ``(H, k, D)``, ``b_v`` ``(H, k)``, ``w_o`` ``(H, D, k)``, ``gain`` ``(D,)``.
    """
    n_max = lengths[-1]
    stop = start + n_max
    n_seq, n_heads = probs.shape[:2]
    k = values.shape[-1]
    probs = probs[:, :, :stop, :stop]  # storage dtype; float32 copies are made per chunk
    values = values[:, :, :stop].to(F32)
    o_full = torch.empty(n_seq, n_heads, stop, k, dtype=F32)
    rows_u = torch.empty(n_seq, n_heads, n_max, dtype=F64)
    upper = row_err = 0.0
    for first in range(0, n_seq, SEQUENCE_CHUNK):
        chunk = slice(first, first + SEQUENCE_CHUNK)
        block = probs[chunk].to(F32)
        upper = max(upper, float(torch.triu(block, diagonal=1).amax()))  # probabilities >= 0
        row_err = max(row_err, float((block.sum(-1) - 1).abs().amax()))
        rows_u[chunk] = row_uniformity(block)[:, :, start:stop]
        # all positions: the rows of a prefix's A V are rows of the full product
        o_full[chunk] = block @ values[chunk]
        del block
    del probs

    # head outputs in the head dimension (N, H, n_max, k), token set rows only
    o_attn = o_full[:, :, start:stop]
    o_id = values[:, :, start:stop]
    counts = torch.arange(1, n_max + 1, dtype=F32)[:, None]
    o_unif = o_id.cumsum(2) / counts
    variants = {"id": o_id, "attn": o_attn, "unif": o_unif}

    # output projection, post-norm gain and the full update
    w_o32 = w_o.to(F32)
    d_model = w_o.shape[1]
    # the output projection sum_h W_O[h] (A_h V_h), (N', P, D): needed for every sequence with a
    # post-attention norm (r_i); otherwise only as an integrity check on the first chunk
    checked = n_seq if post_norm else min(n_seq, SEQUENCE_CHUNK)
    o_proj = o_full[:checked].permute(0, 2, 1, 3).reshape(checked, stop, -1) @ (
        w_o32.permute(0, 2, 1).reshape(-1, d_model)
    )
    update = update_all[:, :stop].to(F32)
    if post_norm:
        gamma, r_tok, fit_err = fit_post_norm_gain(update, o_proj)
        recon = (gamma * (o_proj.to(F64) / r_tok[..., None])).to(F32)
        head_sum_err = float(torch.linalg.norm(update - recon) / torch.linalg.norm(update))
        out_bias = 0.0
        r_tok = r_tok[:, start:stop]
    else:
        gamma = torch.ones(d_model, dtype=F64)
        fit_err = float("nan")
        resid = update[:checked] - o_proj
        bias = resid.reshape(-1, d_model).mean(0, dtype=F64)  # output-projection bias (GPT-2)
        out_bias = float(torch.linalg.norm(bias))
        head_sum_err = float(
            torch.linalg.norm(resid - bias.to(F32))
            / torch.linalg.norm(update[:checked]).clamp_min(1e-30)
        )
        r_tok = None
    del o_proj
    w_out = gamma.to(F32)[None, :, None] * w_o32  # (H, D, k), before the 1/rbar factor

    # expansions of ||X + s u||^2 through the head dimension
    x = x_all[:, start:stop].to(F32)
    proj = (x.reshape(-1, d_model) @ w_out.permute(1, 0, 2).reshape(d_model, -1)).reshape(
        n_seq, n_max, n_heads, -1
    )
    proj = proj.permute(0, 2, 1, 3)  # (N, H, n_max, k) = w_out^T x
    gram_out = w_out.transpose(1, 2) @ w_out  # (H, k, k)
    xx = torch.linalg.vecdot(x, x).to(F64)
    xo = {name: torch.linalg.vecdot(proj, o).to(F64) for name, o in variants.items()}
    oo = {name: torch.linalg.vecdot(o @ gram_out, o).to(F64) for name, o in variants.items()}
    del proj
    head_norm = oo["attn"].clamp_min(0).sqrt()  # (N, H, n_max), before kappa
    update_tok = update[:, start:stop]
    full_norm = torch.linalg.vector_norm(update_tok, dim=-1, dtype=F64)  # (N, n_max)

    # theory: gain-free Z, W = kappa diag(gamma) W_O W_V diag(g)
    g = gain.to(F32)
    safe_g = torch.where(g == 0, torch.ones_like(g), g)
    z_tilde = torch.where(g == 0, 0.0, z_all[:, start:stop].to(F32) / safe_g)
    moments = estimate_moments(z_tilde, x, lengths)
    del z_tilde
    w_in = w_v.to(F64) * gain.to(F64)[None, None, :]
    w_out64 = w_out.to(F64)

    x_unit = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    after = x + update_tok
    after_unit = after / torch.linalg.vector_norm(after, dim=-1, keepdim=True)
    del after

    heads: dict[str, list[np.ndarray]] = {}
    layer: dict[str, list[float]] = {}

    def put(store: dict, key: str, value: Any) -> None:
        store.setdefault(key, []).append(value)

    def rho_of_units(units: torch.Tensor, n: int) -> float:
        total = units[:, :n].sum(1).to(F64)  # float32 sum of n unit vectors: rel. error ~1e-7
        return float((((total * total).sum(-1) - n) / (n * (n - 1))).mean())

    for index, n in enumerate(lengths):
        mom = moments[index]
        if post_norm:
            kappa = float(1.0 / r_tok[:, :n].mean())
        else:
            kappa = 1.0
        mean_head = float(head_norm[..., :n].mean()) * kappa
        mean_full = float(full_norm[:, :n].mean())
        s_l = mean_full / mean_head
        rho_x = rho_of_units(x_unit, n)
        rho_after = rho_of_units(after_unit, n)
        for suffix, scale in (("", kappa), ("_s", kappa * s_l)):
            for name, tag in (("id", "xwz"), ("attn", "xwza"), ("unif", "xwzau")):
                rho = _rho_terms(x, xx, xo[name], oo[name], variants[name], w_out, n, scale)
                put(heads, f"rho_{tag}{suffix}", rho.numpy())
        terms = trace_terms(mom, w_out64, w_in, b_v)
        coef = closed_form_coefficients(terms, mom.beta, kappa)
        coef_s = closed_form_coefficients(terms, mom.beta, kappa * s_l)
        path = rho_hat(coef, n, lambdas)
        path_s = rho_hat(coef_s, n, lambdas)
        ends = rho_hat(coef, n, [0.0, 1.0])
        # smallest E[Y_i^T Y_j] over i < j and lambda in [0, 1]: a + min(b, 0) / 2 (j = 2)
        min_numer = coef["a"] + np.minimum(coef["b"], 0.0) / 2.0
        put(heads, "uniformity", rows_u[..., :n].mean(-1).mean(0).numpy())
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
        put(heads, "head_update_norm", (head_norm[..., :n].mean((0, 2)) * kappa).numpy())
        for key, value in (
            ("n_tokens", n),
            ("beta", mom.beta),
            ("s_l", s_l),
            ("kappa", kappa),
            ("tr_c", mom.tr_c),
            ("tr_b", mom.tr_b),
            ("rho_before", rho_x),
            ("rho_after", rho_after),
            ("rhohat_x", mom.tr_c / (mom.tr_c + mom.tr_b)),
            ("full_update_norm", mean_full),
            ("head_update_norm", mean_head),
            ("post_norm_fit_rel_err", fit_err),
            ("head_sum_rel_err", head_sum_err),
            ("output_bias_norm", out_bias),
            ("probs_upper_max", upper),
            ("probs_row_sum_max_err", row_err),
        ):
            put(layer, key, value)
    return _LayerResult(
        heads={key: np.stack(value) for key, value in heads.items()},
        layer={key: np.asarray(value) for key, value in layer.items()},
    )


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


def _read_layer(handle: Any, layer: int, stop: int, expand: torch.Tensor) -> dict[str, Any]:
    """One layer's tensors, positions ``0..stop - 1`` (values expanded to query heads)."""
    values = torch.from_numpy(handle["attention/values"][layer, :, :, :stop])
    return {
        "x_all": torch.from_numpy(handle["residual/X"][layer, :, :stop]),
        "z_all": torch.from_numpy(handle["attention/Z"][layer, :, :stop]),
        "probs": torch.from_numpy(handle["attention/probs"][layer, :, :, :stop, :stop]),
        "values": values[:, expand],
        "update_all": torch.from_numpy(handle["attention/residual_update"][layer, :, :stop]),
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
) -> dict[str, pl.DataFrame]:
    """Oversmoothing analysis of one activation file (one model x dataset pair).

    ``per_head``: the head classification table (``sinkscope.heads.classify_file(path)[1]``);
    ``context_lengths``: prefix lengths ``T'`` in text tokens (capped at the file's ``T``);
    ``uniformity_threshold``: the paper's 0.6 for "dense" heads (summary); ``include_bos``: put
    BOS into the token set (module docstring); ``layers``: restrict to some layers.

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
        n_kv = handle["attention/values"].shape[2]
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
        # layer l + 1 is read in a background thread while layer l is computed (h5py is only
        # used by that thread, torch releases the GIL); at most two layers are held in memory
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(_read_layer, handle, selected[0], stop, expand)
            for position, layer in enumerate(selected):
                data = pending.result()
                if position + 1 < len(selected):
                    pending = pool.submit(_read_layer, handle, selected[position + 1], stop, expand)
                result = _analyze_layer(
                    **data, post_norm=post_norm, start=start, lengths=tokens, lambdas=lam
                )
                del data
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


# --------------------------------------------------------------------------- summaries

KEYS: tuple[str, ...] = ("model", "dataset", "context_length")


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
    ``frac_unif_above_attn_s``, fractions of heads per condition (``frac_cond_i``, ... and
    ``_s``), sign agreement among non-sink heads with a prediction (``agree_attn``,
    ``agree_unif``, ``agree_both`` and ``_s``), ``frac_rhohat_trend_as_predicted`` (a check of
    the theorem on the closed forms) and ``min_rho_layers`` (Fig. 4: smallest layer ``rho``).

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
            non_sink.sum().cast(pl.Int64).alias("n_non_sink"),
            dense.sum().cast(pl.Int64).alias("n_dense"),
            pl.col("abs_err_x").mean().alias("mean_abs_err_x"),
            pl.col("abs_err_x").max().alias("max_abs_err_x"),
            pl.col("abs_err_xwz").mean().alias("mean_abs_err_xwz"),
            pl.col("abs_err_xwz").max().alias("max_abs_err_xwz"),
            pl.col("abs_err_xwzau").mean().alias("mean_abs_err_xwzau"),
            (pl.col("abs_err_xwz") < 0.1).mean().alias("frac_err_xwz_below_0_1"),
            pl.col("rho_x").mean().alias("mean_rho_x"),
            pl.col("rhohat_x").mean().alias("mean_rhohat_x"),
            pl.col("rho_xwz").mean().alias("mean_rho_xwz"),
            pl.col("rhohat_xwz").mean().alias("mean_rhohat_xwz"),
            pl.col("rho_xwz_s").mean().alias("mean_rho_xwz_s"),
            pl.col("rho_xwza_s").mean().alias("mean_rho_xwza_s"),
            pl.col("rho_xwzau_s").mean().alias("mean_rho_xwzau_s"),
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
                (pl.col(f"condition{v}") == c)
                .filter(non_sink)
                .mean()
                .alias(f"frac_cond_{c}{v}_non_sink")
                for v in ("", "_s")
                for c in ("i", "ii")
            ),
            agreement("delta_attn", "predicted_sign").alias("agree_attn"),
            agreement("delta_unif", "predicted_sign").alias("agree_unif"),
            both("predicted_sign", "delta_attn", "delta_unif").alias("agree_both"),
            agreement("delta_attn_s", "predicted_sign_s").alias("agree_attn_s"),
            agreement("delta_unif_s", "predicted_sign_s").alias("agree_unif_s"),
            both("predicted_sign_s", "delta_attn_s", "delta_unif_s").alias("agree_both_s"),
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
    """The paper's oversmoothing statements, evaluated at each pair's largest context length."""
    rows = []
    largest = summary.filter(
        pl.col("context_length") == pl.col("context_length").max().over("model", "dataset")
    )
    for row in largest.iter_rows(named=True):
        checks = [
            (
                "Fig. 7: |rho - rho_hat| for X + WZ stays below 0.1 for every head",
                row["max_abs_err_xwz"],
                row["max_abs_err_xwz"] < 0.1,
            ),
            (
                "Fig. 2 left: mean |rho - rho_hat| for X below 0.1",
                row["mean_abs_err_x"],
                row["mean_abs_err_x"] < 0.1,
            ),
            (
                "Fig. 2 right: W decreases rho on average (rho(X+WZ) < rho(X))",
                row["mean_rho_xwz_s"] - row["mean_rho_x"],
                row["mean_rho_xwz_s"] < row["mean_rho_x"],
            ),
            (
                "Fig. 2 right: attention raises rho on average (rho(X+WZA^T) > rho(X))",
                row["mean_increase_attn_s"],
                row["mean_increase_attn_s"] > 0,
            ),
            (
                "Fig. 2 right: the increase is larger for heads with u > threshold",
                _diff(row["mean_increase_attn_s_dense"], row["mean_increase_attn_s"]),
                _gt(row["mean_increase_attn_s_dense"], row["mean_increase_attn_s"]),
            ),
            (
                "Fig. 2 right: uniform attention raises rho more than learned attention",
                row["mean_increase_unif_s"] - row["mean_increase_attn_s"],
                row["mean_increase_unif_s"] > row["mean_increase_attn_s"],
            ),
            (
                "Figs. 8-9: roughly half of the heads satisfy condition (i)",
                row["frac_cond_i"],
                0.25 <= row["frac_cond_i"] <= 0.75,
            ),
            (
                "Figs. 8-9: few heads satisfy condition (ii)",
                row["frac_cond_ii"],
                row["frac_cond_ii"] < row["frac_cond_i"],
            ),
            (
                "Figs. 8-9: most non-sink heads follow the predicted signs (rescaled)",
                row["agree_both_s"],
                _gt(row["agree_both_s"], 0.5),
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
