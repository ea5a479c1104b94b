"""The evicting KV cache of the StreamingLLM evaluation: policies, RoPE re-rotation, attention.

The policies (``L`` = window, ``k`` = number of kept first tokens) are described in
:mod:`sinkscope.streaming.experiment`. Query ``t`` (predicting token ``t + 1``) attends to
``{0..k-1} U {t-L+1..t}`` (intersected with the model's own mask). Eviction is done by a real
:class:`transformers.Cache` subclass, :class:`StreamingCache` (one :class:`StreamingLayer` per
decoder layer): its ``update`` returns the kept entries plus the new ones and then drops what no
later query may see (it keeps the sinks and the ``L - 1`` most recent entries, as transformers' own
sliding-window layer keeps ``window - 1``). Nothing is re-run on truncated prompts.

Positions (RoPE)
----------------
As in StreamingLLM, positions are positions *within the cache*: with the cache full, the query sits
at in-cache position ``P = k + L - 1``, the sink ``j`` at ``j`` and the window entry for token
``s`` at ``P - (t - s)``. RoPE scores depend only on the difference of the two positions
(``<R(a) q, R(b) k> = <q, R(b - a) k>``), so this is implemented as follows, exactly equivalent up to
float rounding:

* window entries: the model rotates queries and keys at their stream positions (``position_ids`` =
  stream positions); the in-cache offset ``t - s`` of a window entry equals its stream offset
  because the window is contiguous, so these keys are cached as the model produced them and never
  re-rotated;
* sinks: their cached keys stay rotated at their own positions ``j`` (= their in-cache positions),
  and the scores against them use the query re-rotated to its in-cache position ``P`` (a rotation
  by ``P - t``, applied in :func:`streaming_attention_forward`), which gives the in-cache offset
  ``P - j`` instead of the stream offset ``t - j``.

With ``positions="original"`` the sink scores use the query at its stream position (no
re-positioning); this is offered as an ablation only (``position_ablation`` adds one such policy). Rotation helpers: :func:`rope_rotate`.

Gemma 3's sliding-window layers
-------------------------------
Gemma 3 alternates five sliding-window layers (window ``W = 512``: query ``t`` sees ``t-511..t``,
no sink) with one global layer. Its own window is treated as part of the model, in every policy
including ``dense``: a layer sees the intersection of its native mask and the policy's kept set,
i.e. sliding layers see the sinks only while ``t - j < 512`` (as in dense inference) and at most
``min(L, 512)`` recent tokens. Hence for ``L >= 512`` only the global layers (3 of 18) are affected
by any policy, and for ``L < 512`` the sliding layers lose recent context too.

Batched policies and the device
-------------------------------
One cache can run several policies at once (:meth:`StreamingEvaluator.run_batch
<sinkscope.streaming.evaluator.StreamingEvaluator.run_batch>`): the rows of the batch are one group
of streams per policy, every layer stores what any group may still see (the most sinks and the
widest window of the groups), and each group sees, through its own mask and sink rotation, exactly
the set its policy keeps, so a batched run equals the runs one policy at a time up to float
rounding (tested). The cache creates every tensor (positions, masks, eviction indices) on the
device it is given, the model's; the stored layout is kept as numbers, so the bookkeeping never
waits for the device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = [
    "ATTENTION_NAME",
    "AttentionInputs",
    "LayerPolicy",
    "Policy",
    "StreamingCache",
    "StreamingLayer",
    "build_policies",
    "layout_positions",
    "register_attention",
    "rope_rotate",
    "streaming_attention_forward",
]

#: Name under which :func:`streaming_attention_forward` is registered with transformers.
ATTENTION_NAME = "sinkscope_streaming"


# --------------------------------------------------------------------------------------- RoPE


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_rotate(x: torch.Tensor, delta: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate RoPE vectors ``x`` (``..., Q, hd``) by ``delta`` positions (``Q`` offsets).

    Uses the rotate-half convention of Llama/Gemma (``x cos + rotate_half(x) sin``), so a key
    rotated at position ``a`` and then by ``delta`` equals the key rotated at ``a + delta`` (RoPE
    rotations compose; tested). The angles are computed in float64.
    """
    if 2 * inv_freq.numel() != x.shape[-1]:
        raise ValueError(
            f"RoPE over {2 * inv_freq.numel()} of {x.shape[-1]} dims (partial rotary) is not "
            "supported"
        )
    freqs = delta.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos().to(x.dtype)
    sin = emb.sin().to(x.dtype)
    return x * cos + _rotate_half(x) * sin


# ------------------------------------------------------------------------------- the policies


@dataclass(frozen=True)
class Policy:
    """One cache policy. ``window=None`` means unbounded; ``layers=None`` means every layer
    (otherwise the policy acts only on those layers and the others are dense)."""

    name: str
    kind: str  # dense | window | sink | neutral
    n_sink: int = 0
    window: int | None = None
    positions: str = "cache"
    layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("dense", "window", "sink", "neutral"):
            raise ValueError(f"unknown policy kind {self.kind!r}")
        if self.positions not in ("cache", "original"):
            raise ValueError(f"positions must be 'cache' or 'original', not {self.positions!r}")
        if self.window is not None and self.window < 1:
            raise ValueError("window must be at least 1")
        if self.n_sink < 0 or (self.kind in ("sink", "neutral") and self.n_sink < 1):
            raise ValueError(f"policy {self.name}: bad sink count {self.n_sink}")

    @property
    def first_eviction(self) -> int | None:
        """First query index whose visible set differs from dense (``k + L``), None if never."""
        return None if self.window is None else self.n_sink + self.window


@dataclass(frozen=True)
class LayerPolicy:
    """What one layer keeps: ``n_sink`` first tokens and the ``window`` most recent (None:
    unbounded), intersected with the layer's own sliding window ``native`` (None: none)."""

    n_sink: int
    window: int | None
    native: int | None
    positions: str

    @property
    def capacity(self) -> int | None:
        """Most recent entries the layer can ever show to a query (window and native)."""
        sizes = [s for s in (self.window, self.native) if s is not None]
        return min(sizes) if sizes else None


def build_policies(params: Mapping[str, Any], stream_length: int) -> list[Policy]:
    """The policy grid of :data:`sinkscope.defaults.STREAMING_PARAMS` (dense first, duplicates
    removed).

    Windows with ``k + L >= stream_length - 1`` never evict and are skipped (they equal dense).
    """
    positions = params["positions"]
    k0 = int(params["sink_count"])
    policies: dict[str, Policy] = {"dense": Policy("dense", "dense", positions=positions)}

    def add(kind: str, k: int, window: int) -> None:
        if k + window >= stream_length - 1:
            return
        name = "window" if kind == "window" else f"{kind}{k}"
        name = f"{name}_L{window}"
        policies.setdefault(name, Policy(name, kind, k, window, positions))

    for window in params["window_sizes"]:
        add("window", 0, int(window))
        add("sink", k0, int(window))
        add("neutral", k0, int(window))
    kw = int(params["k_sweep_window"])
    add("window", 0, kw)
    for k in params["sink_counts"]:
        add("sink", int(k), kw)
    for k in params["neutral_counts"]:
        add("neutral", int(k), kw)
    if params.get("position_ablation") and k0 + kw < stream_length - 1:
        other = "original" if positions == "cache" else "cache"
        name = f"sink{k0}_L{kw}_pos-{other}"
        policies[name] = Policy(name, "sink", k0, kw, other)
    return list(policies.values())


# ------------------------------------------------------------------------------- the cache


def layout_positions(
    n_sink: int, window_start: int, end: int, device: torch.device | str
) -> torch.Tensor:
    """Stream positions of a stored layout, on ``device``: the sinks ``0..n_sink-1``, then the
    contiguous run ``window_start..end-1`` (the form every :class:`StreamingLayer` keeps)."""
    return torch.cat(
        [torch.arange(n_sink, device=device), torch.arange(window_start, end, device=device)]
    )


class StreamingLayer(CacheLayerMixin):
    """The keys/values one layer keeps for a batch of rows, one :class:`LayerPolicy` per group.

    The rows of a batch are ``len(policies)`` groups of equal size (group ``g`` holds rows
    ``g * n .. (g + 1) * n - 1``: every stream under the ``g``-th policy of
    :meth:`~sinkscope.streaming.evaluator.StreamingEvaluator.run_batch`). All rows share the
    stored positions, which are what some group may still see: the first ``max k`` positions (the
    sinks) and the ``max capacity - 1`` most recent others (every entry once a group's capacity is
    unbounded, or when recording a dense snapshot); what each group sees of them is its mask
    (:meth:`StreamingCache.attention_inputs`). With one group this is the policy's own kept set,
    as transformers' sliding-window layer keeps ``window - 1`` entries.

    The stored positions are kept as numbers, never read back from the device: the sinks
    ``0..n_sink_stored-1`` followed by the run ``window_start..end-1`` (chunks come in stream
    order and eviction keeps a prefix and a suffix, so the stored set always has this form).
    ``update`` returns the stored entries followed by the new ones, records their layout for the
    attention function (``visible``: ``(n_sink_columns, window_start, end)``), then evicts.
    Tensors are created on ``device``, the model's.
    """

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(
        self,
        policies: Sequence[LayerPolicy],
        record: bool = False,
        device: torch.device | str = "cpu",
    ):
        super().__init__()
        if not policies:
            raise ValueError("a StreamingLayer needs at least one policy")
        self.policies = tuple(policies)
        self.record = record  # keep everything (dense snapshot); masks still apply the policies
        self.device = torch.device(device)
        self.n_sink_stored = 0
        self.window_start = 0
        self.end = 0
        self.visible: tuple[int, int, int] | None = None

    @property
    def n_sink(self) -> int:
        """Positions ``0..n_sink-1`` are kept as sinks (the most any group keeps)."""
        return max(policy.n_sink for policy in self.policies)

    @property
    def capacity(self) -> int | None:
        """Most recent entries any group may see (None: unbounded)."""
        sizes = [policy.capacity for policy in self.policies]
        return None if any(size is None for size in sizes) else max(sizes)

    @property
    def n_stored(self) -> int:
        return self.n_sink_stored + self.end - self.window_start

    @property
    def positions(self) -> torch.Tensor:
        """Stream positions of the stored entries (built on the layer's device)."""
        return layout_positions(self.n_sink_stored, self.window_start, self.end, self.device)

    @property
    def prefix_length(self) -> int:
        """``n`` such that the first ``n`` stored entries are positions ``0..n-1``."""
        return self.end if self.window_start == self.n_sink_stored else self.n_sink_stored

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.keys = key_states[..., :0, :].clone()
        self.values = value_states[..., :0, :].clone()
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start = kwargs.get("start")
        if start is None:
            raise ValueError(
                "StreamingLayer.update needs the stream position of the chunk (start=)"
            )
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if int(start) != self.end:
            raise ValueError(
                f"chunk starts at position {int(start)}, but the cache ends at {self.end - 1}: "
                "chunks must be fed in stream order, from position 0"
            )
        stop = self.end + key_states.shape[-2]
        keys = torch.cat([self.keys, key_states], dim=-2)
        values = torch.cat([self.values, value_states], dim=-2)
        self.visible = (self.n_sink_stored, self.window_start, stop)
        self._keep(keys, values, stop)
        return keys, values

    def _keep(self, keys: torch.Tensor, values: torch.Tensor, stop: int) -> None:
        """Store, of the entries ``[sinks, window_start..stop-1]``, what a later query of some group
        may still see (all of them when recording)."""
        k = self.n_sink
        if self.window_start != self.n_sink_stored and self.window_start < k:
            raise AssertionError("sink entries must come first")  # the layout's invariant
        total = self.n_sink_stored + stop - self.window_start
        # positions < k: the stored sinks, plus the run's first ones while it is contiguous
        n_sink = self.n_sink_stored + max(0, min(stop, k) - self.window_start)
        capacity = self.capacity
        first = n_sink  # first stored column after the sinks (column c >= n_sink_stored holds
        if not self.record and capacity is not None:  # position window_start + c - n_sink_stored)
            first = max(n_sink, total - (capacity - 1))
        window_start = self.window_start + first - self.n_sink_stored
        if first == n_sink:
            self.keys, self.values = keys, values
        else:
            index = torch.cat(
                [
                    torch.arange(n_sink, device=self.device),
                    torch.arange(first, total, device=self.device),
                ]
            )
            self.keys = keys.index_select(-2, index)
            self.values = values.index_select(-2, index)
        self.n_sink_stored, self.window_start, self.end = n_sink, window_start, stop

    def load(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Start from the entries of positions ``0..length-1`` (e.g. the dense run's first ``t0``
        tokens), then evict."""
        if keys.shape[-2] != length:
            raise ValueError(f"{keys.shape[-2]} entries for positions 0..{length - 1}")
        self.lazy_initialization(keys, values)
        self.n_sink_stored = self.window_start = self.end = 0
        self._keep(keys, values, int(length))

    def replace_sinks(self, keys: torch.Tensor, values: torch.Tensor, rows: slice) -> None:
        """Overwrite the first ``k`` stored sink entries of ``rows`` (``neutral`` policy); shapes
        ``(len(rows), K, k, hd)``. The stored tensors are replaced, never written in place (they
        may be a snapshot's)."""
        k = keys.shape[-2]
        if k > self.n_sink_stored:
            raise ValueError(f"{k} replacement entries for {self.n_sink_stored} stored sinks")
        new_keys, new_values = self.keys.clone(), self.values.clone()
        new_keys[rows, :, :k] = keys.to(self.keys)
        new_values[rows, :, :k] = values.to(self.values)
        self.keys, self.values = new_keys, new_values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.n_stored + query_length, 0

    def get_seq_length(self) -> int:
        """Tokens seen so far (the next stream position)."""
        return self.end

    def get_max_length(self) -> int:
        capacity = self.capacity
        return -1 if capacity is None or self.record else self.n_sink + capacity

    def reset(self) -> None:
        self.keys = self.values = None
        self.is_initialized = False
        self.n_sink_stored = self.window_start = self.end = 0
        self.visible = None


@dataclass(frozen=True)
class AttentionInputs:
    """What :func:`streaming_attention_forward` needs of one layer for the current chunk.

    ``visible`` ``(G, Q, Kv)`` bool: query ``i`` of group ``g`` may see column ``c`` of the keys
    the layer's ``update`` returned. ``sink_columns[g]``: the first columns that are group ``g``'s
    sinks; ``sink_delta[g]`` ``(Q,)``: the rotation of each query for them (in-cache minus stream
    position), None when it is zero for every query of the chunk.
    """

    visible: torch.Tensor
    sink_columns: tuple[int, ...]
    sink_delta: tuple[torch.Tensor | None, ...]


class StreamingCache(Cache):
    """A transformers :class:`~transformers.Cache` of :class:`StreamingLayer` (one per layer).

    ``layer_policies[l]`` holds layer ``l``'s :class:`LayerPolicy` of each group of rows (one
    group per policy of a batched run). Before each forward call :meth:`set_chunk` with the
    chunk's first stream position and length (its positions are the forward's ``position_ids``);
    :func:`streaming_attention_forward` reads the masks and sink rotations from
    :meth:`attention_inputs`. Every tensor is created on ``device``, the model's.
    """

    def __init__(
        self,
        layer_policies: Sequence[Sequence[LayerPolicy]],
        inv_freqs: Sequence[torch.Tensor],
        record: bool = False,
        device: torch.device | str = "cpu",
    ):
        per_layer = [tuple(policies) for policies in layer_policies]
        if len({len(policies) for policies in per_layer}) > 1:
            raise ValueError("every layer needs one policy per group of rows")
        layers = [StreamingLayer(policies, record=record, device=device) for policies in per_layer]
        super().__init__(layers=layers)
        self.layer_policies = per_layer
        self.inv_freqs = list(inv_freqs)
        self.device = torch.device(device)
        self.chunk_start = 0
        self.chunk_positions: torch.Tensor | None = None
        self._memo: dict[Any, AttentionInputs] = {}

    def set_chunk(self, start: int, length: int) -> torch.Tensor:
        """Announce the next forward: stream positions ``start..start+length-1``, returned (on the
        cache's device) for its ``position_ids``."""
        self.chunk_start = int(start)
        self.chunk_positions = torch.arange(start, start + length, device=self.device)
        self._memo = {}
        return self.chunk_positions

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.chunk_positions is None or self.chunk_positions.numel() != key_states.shape[-2]:
            raise ValueError("call StreamingCache.set_chunk(start, length) before each forward")
        return self.layers[layer_idx].update(key_states, value_states, start=self.chunk_start)

    def attention_inputs(self, layer_idx: int) -> AttentionInputs:
        """The masks and sink rotations of one layer for the current chunk (memoised per layout).

        Per group ``g`` with policy ``(k, L)``: ``visible`` is causal, inside the policy (a sink
        ``s < k`` or within the ``L`` most recent) and inside the layer's own sliding window; the
        sink rotation of query ``t`` is ``min(0, k + L - 1 - t)`` (cache positions only).
        """
        layer = self.layers[layer_idx]
        policies = self.layer_policies[layer_idx]
        if layer.visible is None or self.chunk_positions is None:
            raise ValueError("attention_inputs before the layer's update")
        n_sink_cols, window_start, stop = layer.visible
        memo_key = (policies, n_sink_cols, window_start, stop)
        if memo_key in self._memo:
            return self._memo[memo_key]
        q = self.chunk_positions[:, None]
        s = layout_positions(n_sink_cols, window_start, stop, self.device)[None, :]
        visible, sink_columns, sink_delta = [], [], []
        for policy in policies:
            sink = s < policy.n_sink
            seen = s <= q
            if policy.window is not None:
                seen &= sink | (s > q - policy.window)
            if policy.native is not None:
                seen &= s > q - policy.native
            visible.append(seen)
            delta = None
            if policy.positions == "cache" and policy.window is not None and policy.n_sink > 0:
                full = policy.n_sink + policy.window - 1
                if stop - 1 > full:  # the chunk's last query is re-positioned
                    delta = torch.clamp(full - self.chunk_positions, max=0)
                    # rows that need a rotation must find every sink among the stored sink columns
                    if window_start < policy.n_sink:
                        raise AssertionError("sink entries outside the stored sinks while evicting")
            sink_columns.append(min(policy.n_sink, n_sink_cols))
            sink_delta.append(delta)
        result = AttentionInputs(torch.stack(visible), tuple(sink_columns), tuple(sink_delta))
        self._memo[memo_key] = result
        return result


def streaming_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    streaming_cache: StreamingCache | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention over the entries a :class:`StreamingCache` layer returned.

    The same math as transformers' eager attention (scores in the model dtype, softmax in float32),
    with each group's policy mask of :meth:`StreamingCache.attention_inputs` instead of the model's
    mask, and the scores against a group's sinks computed with its query re-rotated to its in-cache
    position. ``query`` is ``(B, H, Q, hd)`` (``B`` = groups x rows per group),
    ``key``/``value`` ``(B, K, Kv, hd)``. ``s_aux``: a learned sink logit per head (gpt-oss's
    ``sinks``), softmaxed with each row's scores and dropped, as transformers' eager attention of
    that model does.
    """
    if streaming_cache is None:
        raise ValueError(
            f"{ATTENTION_NAME} attention needs streaming_cache=... in the forward call"
        )
    if scaling is None:
        scaling = module.head_dim**-0.5
    inputs = streaming_cache.attention_inputs(module.layer_idx)
    batch, n_heads, q_len, head_dim = query.shape
    n_groups = inputs.visible.shape[0]
    if batch % n_groups:
        raise ValueError(f"{batch} rows do not split into {n_groups} groups")
    rows = batch // n_groups
    n_kv = key.shape[1]
    group = n_heads // n_kv
    q = query.reshape(batch, n_kv, group, q_len, head_dim)
    k = key[:, :, None]
    v = value[:, :, None]
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling
    inv_freq = streaming_cache.inv_freqs[module.layer_idx]
    for index, (n_cols, delta) in enumerate(
        zip(inputs.sink_columns, inputs.sink_delta, strict=True)
    ):
        if delta is None or not n_cols:
            continue
        part = slice(index * rows, (index + 1) * rows)
        q_sink = rope_rotate(q[part], delta, inv_freq)
        scores[part, ..., :n_cols] = (
            torch.matmul(q_sink, k[part, ..., :n_cols, :].transpose(-1, -2)) * scaling
        )
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    hidden = ~inputs.visible[:, None, None, None]  # (G, 1, 1, 1, Q, Kv)
    scores = (
        scores.reshape(n_groups, rows, *scores.shape[1:])
        .masked_fill(hidden, float("-inf"))
        .reshape(scores.shape)
    )
    if s_aux is None:
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    else:
        sink = s_aux.to(scores.dtype).reshape(1, n_kv, group, 1, 1).expand(*scores.shape[:-1], 1)
        combined = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1, dtype=torch.float32)
        probs = combined[..., :-1].to(query.dtype)
    out = torch.matmul(probs, v)  # (B, K, g, Q, hd)
    out = out.reshape(batch, n_heads, q_len, head_dim).transpose(1, 2).contiguous()
    return out, probs.reshape(batch, n_heads, q_len, -1)


def register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, streaming_attention_forward)
