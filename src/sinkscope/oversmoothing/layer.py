"""One layer of the oversmoothing analysis (paper §5, App. E.1): every per-head and per-layer
quantity, computed block by block of sequences in up to three passes over the held layer and one
over ``X`` for the moments of Theorem 5.1 (:class:`LayerAnalysis`).

Fed by :func:`~sinkscope.oversmoothing.analysis.analyze_file`, which reads the layer; definitions
and the performance notes: the docstring of :mod:`sinkscope.oversmoothing.analysis`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sinkscope.oversmoothing.approximation import HeadMaps, sequence_terms
from sinkscope.oversmoothing.moments import MomentAccumulator
from sinkscope.oversmoothing.names import SEQUENCE_TERMS
from sinkscope.oversmoothing.post_norm import post_norm_residual_sq, post_norm_sums
from sinkscope.oversmoothing.theory import (
    closed_form_coefficients,
    condition_labels,
    distinct_maps,
    rho_hat,
    row_uniformity,
    trace_terms,
    trend,
)

__all__ = ["SEQUENCE_CHUNK", "VARIANTS", "LayerAnalysis", "LayerResult"]

#: sequences per chunk for the (N, H, T1, T1) attention tensors (bounds float32 temporaries)
SEQUENCE_CHUNK = 8

#: The mixing matrices of the per-head updates: identity, learned A, uniform causal A_u.
VARIANTS: tuple[str, ...] = ("id", "attn", "unif")


@dataclass
class LayerResult:
    heads: dict[str, np.ndarray]  # arrays of shape (n_lengths, H)
    layer: dict[str, np.ndarray]  # arrays of shape (n_lengths,)
    #: per sequence, length and head: ``rho_xwz``, the
    #: :data:`~sinkscope.oversmoothing.names.SEQUENCE_TERMS` and ``sum_xz, sum_zz``,
    #: ``(N, n_lengths, H)``
    sequences: dict[str, np.ndarray]
    #: per sequence and length: ``rho_before`` and ``rho_after``, ``(N, n_lengths)``
    layer_sequences: dict[str, np.ndarray]
    #: per sequence and head at the largest length: the columns of
    #: :data:`~sinkscope.oversmoothing.names.HEADS_BY_SEQUENCE_COLUMNS`, ``(N, H)``
    head_sequences: dict[str, np.ndarray]


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
        part = values.narrow(dim, previous, n - previous).sum(dim, dtype=torch.float64)
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
    w = torch.where(inside, norm2.rsqrt_(), 0.0).to(torch.float32)
    b, n_heads, n_len, _ = w.shape
    total = (
        (w.reshape(b, n_heads * n_len, n_max) @ x).reshape(b, n_heads, n_len, -1).to(torch.float64)
    )
    inner = (w @ o).to(torch.float64)  # (B, H, L, k)
    # the small map back to D dimensions in float64: a float32 product whose row count is the
    # number of sequences rounds differently for one row than for several
    total += scale * torch.einsum("hdk,bhlk->bhld", w_out, inner)
    n = sizes.to(torch.float64)
    return (total.square_().sum(-1) - n) / (n * (n - 1))


def _rho_of_units(units: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """``rho`` per sequence of unit rows ``(B, n_max, D)`` on the first ``n`` of each of
    ``lengths`` (float64, ``(B, L)``; segment sums in float32: relative error ~1e-7)."""
    total = _prefix_sums(units, lengths, 1)  # (B, L, D)
    n = torch.as_tensor(list(lengths), dtype=torch.float64)
    return (total.square_().sum(-1) - n) / (n * (n - 1))


def _sum_squares(a: torch.Tensor) -> torch.Tensor:
    """Sum of squares per sequence of ``(B, ...)`` float32 values, accumulated in float64."""
    return torch.linalg.vector_norm(a.reshape(a.shape[0], -1), dim=1, dtype=torch.float64).square()


class LayerAnalysis:
    """All per-head and per-layer quantities of one layer, computed block by block (§5, App. E.1).

    The token set is positions ``start..start + n - 1`` for each ``n`` in ``lengths``; positions
    ``0..stop - 1`` (``stop = start + lengths[-1]``) are read. Every block of sequences is a
    dict of tensors (:func:`~sinkscope.oversmoothing.analysis._block`): ``x, z, update``
    ``(B, stop, D)``, ``probs``
    ``(B, H, stop, stop)``, ``values`` ``(B, H, stop, k)`` (GQA expanded). Quantities that pool
    over sequences need statistics of earlier passes, so a layer takes up to three passes over
    its sequences (:attr:`passes`), each fed by :meth:`add` in sequence order:

    * ``"norm"`` (post-attention norm only): the least-squares sums of the gain ``gamma`` and
      the per-token ``r_i`` (so the map ``W_h``, hence ``||W_h o||`` and ``kappa``, are known),
      and the fit's residual, which is also the head-sum check;
    * ``"main"``: everything that needs ``W_h`` but not ``s_l``: the unscaled ``rho`` terms,
      ``rho(X)``, ``rho(X + U)``, head and full update norms (hence ``s_l``), uniformity, the
      head-sum check without post-norm; caches ``||x||^2``, ``x^T W o`` and
      ``||W o||^2`` per token (``O(N H T)`` numbers);
    * ``"scaled"``: the ``rho`` terms of ``X + s_l W Z M^T`` (``s_l`` pools every sequence).

    Then the moments of Theorem 5.1 (:meth:`add_moments`, blocks of ``x`` and ``z`` alone, in
    the same blocks of sequences): their ``len(lengths)`` float64 ``D x D`` Gram matrices are
    allocated at the first of these blocks, so that the caller can free the held layer before
    (at ``D = 4096``: 4 x 128 MiB, as much as one layer's stored data at N = 50, T = 256).

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
        self.b_v = weights["b_v"]
        self.gain = weights["gain"]
        # the heads' input maps W_V[h] diag(g) of the theory, once per distinct map (GQA groups)
        first, self.in_heads = distinct_maps(weights["w_v"])
        self.w_in = (
            weights["w_v"][first].to(torch.float64) * self.gain.to(torch.float64)[None, None, :]
        )  # (G, k, D)
        self.w_o32 = weights["w_o"].to(torch.float32)
        n_heads, d_model, _k = self.w_o32.shape
        self.w_o_flat = self.w_o32.permute(0, 2, 1).reshape(-1, d_model)  # (H k, D)
        self.n_seq, self.n_heads, self.d_model = n_seq, n_heads, d_model
        self.post_norm, self.start = post_norm, start
        self.lengths = [int(n) for n in lengths]
        self.lambdas = lambdas
        self.n_max = self.lengths[-1]
        self.token_counts = torch.as_tensor(self.lengths, dtype=torch.float64)
        self.stop = start + self.n_max
        n_len = len(self.lengths)
        # the output projection is checked on every sequence with a post-norm (it is needed
        # for r_i anyway), else on the first SEQUENCE_CHUNK sequences
        self.checked = n_seq if post_norm else min(n_seq, SEQUENCE_CHUNK)
        self.passes = ("norm", "main", "scaled") if post_norm else ("main", "scaled")
        self.upper = self.row_err = 0.0
        self.uniformity = torch.empty(n_seq, n_heads, n_len, dtype=torch.float64)
        self.head_sum = torch.empty(n_seq, n_heads, n_len, dtype=torch.float64)
        self.full_sum = torch.empty(n_seq, n_len, dtype=torch.float64)
        self.rho_x = torch.empty(n_seq, n_len, dtype=torch.float64)
        self.rho_after = torch.empty(n_seq, n_len, dtype=torch.float64)
        self.rho = {
            f"rho_{tag}{suffix}": torch.empty(n_seq, n_heads, n_len, dtype=torch.float64)
            for suffix in ("", "_s")
            for tag in ("xwz", "xwza", "xwzau")
        }
        self.xx = torch.empty(n_seq, self.n_max, dtype=torch.float64)
        self.xo = {
            name: torch.empty(n_seq, n_heads, self.n_max, dtype=torch.float64) for name in VARIANTS
        }
        self.oo = {
            name: torch.empty(n_seq, n_heads, self.n_max, dtype=torch.float64) for name in VARIANTS
        }
        self.moments: MomentAccumulator | None = None  # at the first add_moments block
        # integrity checks: sums of squares per sequence (float64)
        self.check_err2 = torch.zeros(n_seq, dtype=torch.float64)
        self.check_ref2 = torch.zeros(n_seq, dtype=torch.float64)
        if post_norm:
            self.uq = torch.empty(n_seq, d_model, dtype=torch.float64)
            self.qq = torch.empty(n_seq, d_model, dtype=torch.float64)
            self.uu = torch.empty(n_seq, d_model, dtype=torch.float64)
            self.r = torch.empty(n_seq, self.stop, dtype=torch.float64)
        else:
            self._set_gain(torch.ones(d_model, dtype=torch.float64))
            self.kappa = np.ones(n_len)
            self.bias_sum = torch.zeros(self.checked, d_model, dtype=torch.float64)

    def _set_gain(self, gamma: torch.Tensor) -> None:
        self.gamma = gamma
        gamma32 = gamma.to(torch.float32)
        if bool((gamma32 == 1).all()):  # no post-norm: 1 * w == w, the weights are not copied
            self.w_out = self.w_o32
        else:
            self.w_out = gamma32[None, :, None] * self.w_o32  # (H, D, k), before 1/rbar
        self.w_out_flat = self.w_out.permute(1, 0, 2).reshape(self.d_model, -1)  # (D, H k)
        self.gram_out = self.w_out.transpose(1, 2) @ self.w_out  # (H, k, k)
        self.w_out64 = self.w_out.to(torch.float64)

    # ------------------------------------------------------------------ per block

    def _outputs(self, block: dict[str, Any], first: bool) -> torch.Tensor:
        """``A V`` at all positions ``(B, H, stop, k)`` (float32); probability checks and row
        uniformities on the first pass that reads the maps."""
        probs = block.pop("probs").to(torch.float32)  # the stored maps are not needed again
        sl = block["sequences"]
        if first:
            self.upper = max(self.upper, float(torch.triu(probs, diagonal=1).amax()))
            self.row_err = max(self.row_err, float((probs.sum(-1) - 1).abs().amax()))
            rows = row_uniformity(probs)[:, :, self.start : self.stop]
            self.uniformity[sl] = _prefix_sums(rows, self.lengths, 2) / self.token_counts
            del rows
        # all positions: the rows of a prefix's A V are rows of the full product
        return probs @ block["values"].to(torch.float32)

    def _variants(self, o_full: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Head outputs on the token set under ``I``, ``A`` and ``A_u``: ``(B, H, n_max, k)``."""
        o_id = values[:, :, self.start : self.stop].to(torch.float32)
        counts = torch.arange(1, self.n_max + 1, dtype=torch.float32)[:, None]
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
        self.uu[sl] = update.to(torch.float64).square_().sum(1)

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
        update = block["update"].to(torch.float32)
        # with a post-norm the head sum was checked in the norm pass (its fit residual)
        if not self.post_norm and first_seq < self.checked:
            local = slice(0, min(sl.stop, self.checked) - first_seq)
            resid = update[local] - self._projection(o_full[local])
            self.bias_sum[first_seq : first_seq + resid.shape[0]] = resid.sum(
                1, dtype=torch.float64
            )
            del resid
        variants = self._variants(o_full, block["values"])

        # expansions of ||X + s u||^2 through the head dimension
        x = block["x"][:, self.start : self.stop].to(torch.float32)
        b = x.shape[0]
        proj = (x.reshape(-1, self.d_model) @ self.w_out_flat).reshape(
            b, self.n_max, self.n_heads, -1
        )
        proj = proj.permute(0, 2, 1, 3)  # (B, H, n_max, k) = w_out^T x
        self.xx[sl] = torch.linalg.vecdot(x, x).to(torch.float64)
        for name, o in variants.items():
            self.xo[name][sl] = torch.linalg.vecdot(proj, o).to(torch.float64)
            self.oo[name][sl] = torch.linalg.vecdot(o @ self.gram_out, o).to(torch.float64)
        del proj
        head_norm = self.oo["attn"][sl].clamp_min(0).sqrt()  # (B, H, n_max), before kappa
        update_tok = update[:, self.start : self.stop]
        full_norm = torch.linalg.vector_norm(update_tok, dim=-1, dtype=torch.float64)  # (B, n_max)
        self.head_sum[sl] = _prefix_sums(head_norm, self.lengths, 2)
        self.full_sum[sl] = _prefix_sums(full_norm, self.lengths, 1)
        del head_norm, full_norm

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

    def add_moments(self, block: dict[str, Any]) -> None:
        """Feed one block to the moments of Theorem 5.1 (``sequences``: its slice, in sequence
        order; ``x`` and ``z`` ``(B, stop, D)``), after the passes over the held layer.

        The theory's ``Z`` is gain-free, ``Z~ = Z / g`` (``W = kappa diag(gamma) W_O W_V
        diag(g)``; dimensions with ``g = 0`` are 0). Allocates the moments' Gram matrices at the
        first block (:class:`LayerAnalysis`).
        """
        if self.moments is None:
            self.moments = MomentAccumulator(self.lengths, self.d_model, self.n_seq)
            self.seq_terms = np.empty(
                (self.n_seq, len(self.lengths), self.n_heads, len(SEQUENCE_TERMS))
            )
            self.head_maps = HeadMaps.from_weights(self.w_in, self.in_heads, self.w_out64, self.b_v)
        x = block["x"][:, self.start : self.stop].to(torch.float32)
        g = self.gain.to(torch.float32)
        safe_g = torch.where(g == 0, torch.ones_like(g), g)
        z_tilde = torch.where(
            g == 0, 0.0, block["z"][:, self.start : self.stop].to(torch.float32) / safe_g
        )
        self.moments.add(z_tilde, x)
        # eq. (2)'s coefficients per sequence at every length (the claims' intervals)
        self.seq_terms[block["sequences"]] = sequence_terms(
            z_tilde, self.head_maps, self.kappa, self.lengths
        )

    def _pass_scaled(self, block: dict[str, Any]) -> None:
        sl = block["sequences"]
        o_full = self._outputs(block, first=False)
        if not self.post_norm and sl.start < self.checked:
            local = slice(0, min(sl.stop, self.checked) - sl.start)
            update = block["update"][local].to(torch.float32)
            resid = update - self._projection(o_full[local])
            rows = slice(sl.start, sl.start + resid.shape[0])
            self.check_err2[rows] = _sum_squares(resid.sub_(self.bias.to(torch.float32)))
            self.check_ref2[rows] = _sum_squares(update)
            del update, resid
        variants = self._variants(o_full, block["values"])
        x = block["x"][:, self.start : self.stop].to(torch.float32)
        self._rho_block(sl, x, variants, "_s", self.kappa * self.s_l)

    def _finish_scaled(self) -> None:
        # the float32 maps of the passes over the held layer (the result needs the float64 ones)
        del self.w_o32, self.w_o_flat, self.w_out, self.w_out_flat

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

    def result(self) -> LayerResult:
        """Per-head and per-layer values for every prefix size (after all passes and
        :meth:`add_moments`)."""
        if self.moments is None:
            raise ValueError("no blocks were added to the moments (add_moments)")
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
            terms = trace_terms(mom, self.w_out64, self.w_in, self.b_v, self.in_heads)
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
            put(heads, "rhohat_trend", trend(path))
            put(heads, "rhohat_trend_s", trend(path_s))
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
        sequences = {
            "rho_xwz": self.rho["rho_xwz"].numpy().transpose(0, 2, 1),
            **{name: self.seq_terms[..., i] for i, name in enumerate(SEQUENCE_TERMS)},
            "sum_xz": np.repeat(self.moments.xz.numpy()[..., None], self.n_heads, axis=2),
            "sum_zz": np.repeat(self.moments.zz.numpy()[..., None], self.n_heads, axis=2),
        }
        return LayerResult(
            heads={key: np.stack(value) for key, value in heads.items()},
            layer={key: np.asarray(value) for key, value in layer.items()},
            sequences=sequences,
            layer_sequences={
                "rho_before": self.rho_x.numpy().copy(),
                "rho_after": self.rho_after.numpy().copy(),
            },
            head_sequences={
                "rho_x": np.repeat(self.rho_x[:, -1].numpy()[:, None], self.n_heads, axis=1),
                **{
                    key: self.rho[key][..., -1].numpy().copy()
                    for key in ("rho_xwz_s", "rho_xwza_s", "rho_xwzau_s")
                },
                "uniformity": self.uniformity[..., -1].numpy().copy(),
            },
        )
