"""Backcopy task of Theorem 7.1 (§7, Figure 3 left): the task, its attention patterns and margins.

Task (§7, "Large context lengths favor sinks"): inputs ``x_{t,i} = sqrt(d/2) (h_i + p_t)`` with
orthonormal context embeddings ``h_0`` (BOS), ``h_i`` (``i`` in the dormant set D or the
copy-paste set C) and positional embeddings ``p_0, ..., p_T``; BOS sits at position 0. Targets:
BOS -> itself, dormant ``x_{t,i}`` -> ``2 x_{t,i}``, copy-paste ``x_{t,j}`` -> ``x_{t,j} + x_{t-1,i}``.

Choices made here (all recorded in the result row of :mod:`.backcopy_runs`):

* ``d = T + |D| + |C| + 2 + d_extra`` (``2`` = :data:`FRAME_EXTRA`): §7 assumes all ``h_i``
  and ``p_t`` orthonormal, i.e. the BOS context ``h_0``, the |D|+|C| other contexts and the T+1
  positions ``p_0..p_T`` need T+|D|+|C|+2 directions. The paper's Figure 3 setting
  ``d = T+|D|+|C|`` cannot hold them all, so the runs deviate from it by +2 (Theorem 7.1's
  ``c_1 >= d/(T+|C|+|D|+2)`` is consistent with this ``d``; the condition-(3) grid also holds
  the paper's ``d``, ``d_offsets`` 0). The figures say so (:func:`.plots.dimension_label`).
  The seed draws a random orthonormal frame; costs are rotation invariant.
* Position 1 holds a dormant token: a copy-paste token at t=1 would have to copy BOS, whose value
  the sink must annihilate (the paper's proof also only uses copy-paste queries at t >= 2).
  Tokens at positions 1..T are otherwise unrestricted (every combination occurs).

This module holds the enumerated task (:func:`make_task`), the attention patterns and their
query-key margin program (:func:`situations`, :func:`margin_program`), the inputs the value/MLP
part must map (:func:`value_inputs`), the task's sequences (:func:`sample_sequences`,
:func:`all_sequences`) and the explicit sink solution of the proof (:func:`sink_construction`).
The minimum-cost runs are :mod:`.backcopy_runs`, condition (3) is :mod:`.condition3`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from sinkscope.costs.qk_convex import MarginProgram, padded

__all__ = [
    "FRAME_EXTRA",
    "PATTERNS",
    "BackcopyTask",
    "all_sequences",
    "make_task",
    "margin_program",
    "orbit_labels",
    "sample_sequences",
    "sink_construction",
    "situations",
    "value_inputs",
    "worst_case_attention",
]

#: The two attention patterns of the dormant tokens compared in §7 (Figure 3 left).
PATTERNS = ("sink", "diagonal")
#: Directions of ``d`` beyond ``T + |D| + |C|``: the BOS context ``h_0`` and the position ``p_0``
#: (the orthonormal frame of §7 has T+|D|+|C|+2 vectors; see the module docstring).
FRAME_EXTRA = 2


@dataclass(frozen=True)
class BackcopyTask:
    """Enumerated backcopy task in an orthonormal frame ``E`` (columns = h_0, h_1..h_V, p_0..p_T).

    Key/query vectors are indexed 0 (BOS at position 0) and ``1 + (t-1) V + i`` for token ``i``
    (0..|D|-1 dormant, then copy-paste) at position ``t`` in 1..T; ``vectors`` holds
    ``x = sqrt(d/2)(h_i + p_t)`` in the frame's coordinates (``E @ vectors.T`` in R^d).
    """

    T: int
    n_dormant: int
    n_copy: int
    d: int
    E: Tensor  # (d, d) orthonormal frame
    vectors: Tensor  # (N, d) coordinates
    pos: Tensor  # (N,) position of each vector
    tok: Tensor  # (N,) token (-1 for BOS)

    @property
    def V(self) -> int:
        return self.n_dormant + self.n_copy

    def index(self, t: int, i: int) -> int:
        return 0 if t == 0 else 1 + (t - 1) * self.V + i

    def allowed(self, t: int) -> list[int]:
        """Tokens that can occur at position ``t`` >= 1 (position 1: dormant only)."""
        return list(range(self.n_dormant)) if t == 1 else list(range(self.V))

    def is_dormant(self, i: int) -> bool:
        return i < self.n_dormant


def make_task(
    T: int, n_dormant: int = 5, n_copy: int = 5, d_extra: int = 0, seed: int = 0
) -> BackcopyTask:
    """Build the task of Theorem 7.1 with ``d = T + |D| + |C| + FRAME_EXTRA + d_extra`` (the
    frame's columns: ``h_0``, the |D|+|C| contexts, ``p_0..p_T``) and a seeded frame."""
    if T < 2:
        raise ValueError("backcopy task needs T >= 2")
    V = n_dormant + n_copy
    d = T + V + FRAME_EXTRA + d_extra
    gen = torch.Generator().manual_seed(10_000 + seed)
    Q, R = torch.linalg.qr(torch.randn((d, d), generator=gen, dtype=torch.float64))
    E = Q * torch.sign(torch.diagonal(R))[None, :]
    n = 1 + T * V
    vectors = torch.zeros((n, d), dtype=torch.float64)
    pos = torch.zeros(n, dtype=torch.long)
    tok = torch.full((n,), -1, dtype=torch.long)
    scale = math.sqrt(d / 2.0)
    hcol = lambda i: 1 + i
    pcol = lambda t: 1 + V + t
    vectors[0, hcol(-1)] = scale
    vectors[0, pcol(0)] = scale
    for t in range(1, T + 1):
        for i in range(V):
            k = 1 + (t - 1) * V + i
            vectors[k, hcol(i)] = scale
            vectors[k, pcol(t)] = scale
            pos[k] = t
            tok[k] = i
    return BackcopyTask(T, n_dormant, n_copy, d, E, vectors, pos, tok)


# --------------------------------------------------------------------------------------------
# attention pattern and margin program
# --------------------------------------------------------------------------------------------


def situations(
    task: BackcopyTask, pattern: str, representatives: bool = False
) -> list[tuple[int, list[int], list[int]]]:
    """(query, targets, competitors) for every non-BOS query, for the given pattern.

    sink: dormant -> BOS; diagonal: dormant -> itself; copy-paste -> previous position (any
    token that can sit there). Competitors: every key that can co-occur at another position
    (causal), plus the query itself unless it is the target. ``representatives``: only the first
    dormant and the first copy-paste token per position (orbit representatives under
    permutations of D and of C, see :func:`orbit_labels`).
    """
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}")
    out = []
    for t in range(1, task.T + 1):
        for i in task.allowed(t):
            if representatives and i not in (0, task.n_dormant):
                continue
            q = task.index(t, i)
            past = [task.index(s, j) for s in range(1, t) for j in task.allowed(s)]
            if task.is_dormant(i):
                if pattern == "sink":
                    tgt, oth = [0], past + [q]
                else:
                    tgt, oth = [q], [0] + past
            else:
                tgt = [task.index(t - 1, j) for j in task.allowed(t - 1)]
                oth = (
                    [0] + [task.index(s, j) for s in range(1, t - 1) for j in task.allowed(s)] + [q]
                )
            out.append((q, tgt, oth))
    return out


def orbit_labels(task: BackcopyTask) -> Tensor:
    """Orbits of coordinate pairs under permutations of the dormant and of the copy-paste tokens.

    Coordinates: 0 = h_0, 1..|D| = dormant h_i, then copy-paste h_j, then p_0..p_T (+ unused).
    """
    m = task.d
    cls = []
    for k in range(m):
        if 1 <= k <= task.n_dormant:
            cls.append(("D", -1))
        elif task.n_dormant < k <= task.V:
            cls.append(("C", -1))
        else:
            cls.append(("s", k))
    ids: dict[tuple, int] = {}
    lab = torch.zeros((m, m), dtype=torch.long)
    for i in range(m):
        for j in range(m):
            key = (cls[i], cls[j], i == j and cls[i][1] == -1)
            lab[i, j] = ids.setdefault(key, len(ids))
    return lab


def margin_program(task: BackcopyTask, pattern: str, reduced: bool = False) -> MarginProgram:
    """The query-key margin program in normalised coordinates ``h_i + p_t`` (score factor 1).

    ``reduced``: orbit-representative situations with ``W`` restricted to invariant matrices
    (same optimum, about |D|+|C| / 2 times fewer situations); the full program is used to verify.
    """
    sit = situations(task, pattern, representatives=reduced)
    tgt, tmask = padded([s[1] for s in sit])
    oth, omask = padded([s[2] for s in sit])
    unit = task.vectors / math.sqrt(task.d / 2.0)
    orbits = orbit_labels(task) if reduced else None
    return MarginProgram(
        unit, torch.as_tensor([s[0] for s in sit]), tgt, tmask, oth, omask, orbits=orbits
    )


def worst_case_attention(task: BackcopyTask, pattern: str, scores: Tensor) -> Tensor:
    """Worst-case softmax weight on the required key of every situation (exact enumeration).

    ``scores``: (N, N) query x key scores. For each situation the adversary puts, at every
    competing position, the token with the largest score and at the target position the token
    with the smallest target score; the weight on the target is then minimal.
    """
    res = []
    for q, tgt, oth in situations(task, pattern):
        s_t = scores[q, tgt].min()
        oth_t = torch.as_tensor(oth)
        pos = task.pos[oth_t]
        vals = scores[q, oth_t]
        per_pos = torch.full((task.T + 1,), -float("inf"), dtype=scores.dtype)
        per_pos = per_pos.scatter_reduce(0, pos, vals, reduce="amax")
        per_pos = per_pos[torch.isfinite(per_pos)]
        res.append(1.0 / (1.0 + torch.exp(per_pos - s_t).sum()))
    return torch.stack(res)


# --------------------------------------------------------------------------------------------
# what the value / MLP part must map
# --------------------------------------------------------------------------------------------


def value_inputs(task: BackcopyTask, pattern: str) -> tuple[Tensor, Tensor, Tensor]:
    """Every distinct (query, attended key) pair with hard attention, in coordinates.

    Returns ``(query_x, attended_x, target)`` each (n, d): BOS attends to itself; dormant
    tokens to BOS (sink) or themselves (diagonal); copy-paste tokens to any token allowed at the
    previous position. The target is the block output required by Theorem 7.1's task.
    """
    X = task.vectors
    qs, ks, ys = [X[0]], [X[0]], [X[0]]
    for t in range(1, task.T + 1):
        for i in task.allowed(t):
            x = X[task.index(t, i)]
            if task.is_dormant(i):
                qs.append(x)
                ks.append(X[0] if pattern == "sink" else x)
                ys.append(2 * x)
            else:
                for j in task.allowed(t - 1):
                    xp = X[task.index(t - 1, j)]
                    qs.append(x)
                    ks.append(xp)
                    ys.append(x + xp)
    return torch.stack(qs), torch.stack(ks), torch.stack(ys)


# --------------------------------------------------------------------------------------------
# the task's sequences and the sink construction of the proof
# --------------------------------------------------------------------------------------------


def sample_sequences(task: BackcopyTask, n: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """``n`` random sequences: embeddings (n, T+1, d) in R^d, their targets, and token ids."""
    rng = np.random.default_rng(20_000 + seed)
    toks = np.zeros((n, task.T + 1), dtype=np.int64)
    toks[:, 0] = -1
    toks[:, 1] = rng.integers(0, task.n_dormant, size=n)
    toks[:, 2:] = rng.integers(0, task.V, size=(n, task.T - 1))
    idx = np.zeros_like(toks)
    for t in range(1, task.T + 1):
        idx[:, t] = 1 + (t - 1) * task.V + toks[:, t]
    Xc = task.vectors[torch.as_tensor(idx)]  # (n, L, d) coordinates
    Yc = Xc.clone()
    tt = torch.as_tensor(toks)
    dorm = (tt >= 0) & (tt < task.n_dormant)
    Yc[dorm] = 2 * Xc[dorm]
    cp = tt >= task.n_dormant
    prev = torch.cat([Xc[:, :1], Xc[:, :-1]], dim=1)
    Yc[cp] = Xc[cp] + prev[cp]
    return Xc @ task.E.T, Yc @ task.E.T, tt


def all_sequences(task: BackcopyTask) -> tuple[Tensor, Tensor]:
    """Every sequence of the task (|D| |V|^(T-1) of them) and its targets, in R^d."""
    X = task.vectors @ task.E.T
    idx, tgt_rows = [], []
    for toks in itertools.product(*[task.allowed(t) for t in range(1, task.T + 1)]):
        idx.append([0] + [task.index(t, i) for t, i in enumerate(toks, start=1)])
        tgt_rows.append(toks)
    Xs = X[torch.as_tensor(idx)]
    Ys = Xs.clone()
    toks_t = torch.as_tensor(tgt_rows)
    dorm = torch.cat([torch.zeros((len(idx), 1), dtype=torch.bool), toks_t < task.n_dormant], dim=1)
    cp = torch.cat([torch.zeros((len(idx), 1), dtype=torch.bool), toks_t >= task.n_dormant], dim=1)
    prev = torch.cat([Xs[:, :1], Xs[:, :-1]], dim=1)
    Ys[dorm] = 2 * Xs[dorm]
    Ys[cp] = Xs[cp] + prev[cp]
    return Xs, Ys


def sink_construction(task: BackcopyTask, kappa: float) -> dict[str, Tensor]:
    """Explicit sink solution of the proof of Theorem 7.1, equations (7)-(10), in R^d.

    Built in the embedding coordinates (h_0, h_1..h_V, p_0..p_T = canonical basis, as the proof
    implicitly assumes: the all-ones vector of (9) and the ReLU act in these coordinates) and
    mapped to R^d by the task's frame on the input/output side. Scores use the standard
    ``1/sqrt(d)``. (7) is stated as ``W_K^T W_Q`` with score ``x_k^T W_K^T W_Q x_q``; we return
    ``W_QK`` with score ``x_q^T W_QK x_k``, i.e. its transpose. Returns ``W_QK``, ``W_VO`` (8),
    ``W_1`` (9, hidden units = coordinates) and ``W_2`` (10).
    """
    d, V = task.d, task.V
    eye = torch.eye(d, dtype=torch.float64)
    h = lambda i: eye[1 + i]
    pp = lambda t: eye[1 + V + t]
    D = range(task.n_dormant)
    C = range(task.n_dormant, V)
    hd = sum(h(k) for k in D)
    WkTq = torch.outer(h(-1) + pp(0), hd)
    for t in range(1, task.T):
        WkTq = WkTq + torch.outer(pp(t), pp(t + 1))
    WkTq = WkTq * 2 * kappa / math.sqrt(d)
    Wvo = eye - torch.outer(h(-1), h(-1)) - torch.outer(pp(0), pp(0))
    proj = sum(torch.outer(h(i), h(i)) for i in D) + sum(
        torch.outer(pp(t), pp(t)) for t in range(1, task.T + 1)
    )
    W1 = proj - 2 * torch.outer(torch.ones(d, dtype=torch.float64), sum(h(i) for i in C))
    E = task.E
    return {"W_QK": E @ WkTq.T @ E.T, "W_VO": E @ Wvo @ E.T, "W_1": W1 @ E.T, "W_2": E @ proj}
