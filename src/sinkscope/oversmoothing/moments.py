"""Batch estimates of the token moments of Theorem 5.1 (App. E.1): ``zbar``, ``Sigma_V``,
``Sigma_C`` and ``beta`` for every prefix size, in one pass or block by block.

Definitions: the docstring of :mod:`sinkscope.oversmoothing.analysis` ("Moments of Theorem 5.1").
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["MomentAccumulator", "TokenMoments", "estimate_moments"]


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
        self.grams = [torch.zeros(dim, dim, dtype=torch.float64) for _ in lengths]  # per segment
        n_len = len(lengths)
        # per sequence and prefix: sum_{i < n} (z_i - c), sum <x_i, z_i>, sum ||z_i||^2
        self.seq_sums = torch.empty(n_sequences, n_len, self.dim, dtype=torch.float64)
        self.xz = torch.empty(n_sequences, n_len, dtype=torch.float64)
        self.zz = torch.empty(n_sequences, n_len, dtype=torch.float64)
        self.added = 0  # sequences added so far
        self.has_x: bool | None = None

    def add(self, z: np.ndarray | torch.Tensor, x: np.ndarray | torch.Tensor | None = None) -> None:
        """Add the tokens ``z`` ``(B, n >= lengths[-1], D)`` of ``B`` sequences (and ``x``)."""
        zt = torch.as_tensor(z)
        zt = zt if zt.dtype in (torch.float32, torch.float64) else zt.to(torch.float32)
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
            self.shift = zt[0, :n_max].sum(0, dtype=torch.float64) / n_max
        if x is not None:
            xt = torch.as_tensor(x).to(zt.dtype)
            stops = torch.as_tensor(self.lengths) - 1
            self.xz[rows] = (
                (xt[:, :n_max] * zt[:, :n_max]).sum(-1, dtype=torch.float64).cumsum(1)[:, stops]
            )
            self.zz[rows] = (
                (zt[:, :n_max] * zt[:, :n_max]).sum(-1, dtype=torch.float64).cumsum(1)[:, stops]
            )
        sums = self.seq_sums[rows]
        running = torch.zeros(zt.shape[0], self.dim, dtype=torch.float64)
        previous = 0
        for index, n in enumerate(self.lengths):
            segment = zt[:, previous:n].to(torch.float64) - self.shift  # (B, n - previous, D)
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
    increasing prefix sizes (numbers of tokens, each >= 2). Definitions in the docstring
    of :mod:`sinkscope.oversmoothing.analysis`;
    one pass of :class:`MomentAccumulator` over all sequences.
    """
    zt = torch.as_tensor(z)
    lengths = [int(n) for n in lengths]
    if lengths and (lengths[0] < 2 or lengths[-1] > zt.shape[1]):
        raise ValueError(f"lengths must lie in [2, {zt.shape[1]}], got {lengths}")
    acc = MomentAccumulator(lengths, zt.shape[-1], zt.shape[0])
    acc.add(zt, x)
    return [acc.moments(index) for index in range(len(lengths))]
