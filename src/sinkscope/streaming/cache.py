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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = [
    "ATTENTION_NAME",
    "LayerPolicy",
    "Policy",
    "StreamingCache",
    "StreamingLayer",
    "build_policies",
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


class StreamingLayer(CacheLayerMixin):
    """The keys/values one layer keeps under a :class:`LayerPolicy`.

    Entries are stored as ``[sinks, window]`` in stream order; ``positions`` holds the stream
    position of each stored entry (shared by every row of the batch: all rows follow the same
    policy). ``update`` returns the stored entries followed by the new ones, remembers their
    positions for the attention function (``visible_positions``, ``n_sink_columns``), then evicts:
    it keeps the sinks (stream positions ``< n_sink``) and the ``capacity - 1`` most recent other
    entries, all that any later query can see.
    """

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, policy: LayerPolicy, record: bool = False):
        super().__init__()
        self.policy = policy
        self.record = record  # keep everything (dense snapshot); masks still apply the policy
        self.positions = torch.zeros(0, dtype=torch.long)
        self.n_sink_stored = 0
        self.visible_positions: torch.Tensor | None = None
        self.n_sink_columns = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.keys = key_states[..., :0, :].clone()
        self.values = value_states[..., :0, :].clone()
        self.positions = self.positions.to(self.device)
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = kwargs.get("positions")
        if positions is None:
            raise ValueError("StreamingLayer.update needs the stream positions of the new entries")
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.positions.numel() and int(positions[0]) != int(self.positions[-1]) + 1:
            raise ValueError(
                f"chunk starts at position {int(positions[0])}, but the cache ends at "
                f"{int(self.positions[-1])}: chunks must be fed in stream order"
            )
        keys = torch.cat([self.keys, key_states], dim=-2)
        values = torch.cat([self.values, value_states], dim=-2)
        all_positions = torch.cat([self.positions, positions.to(self.positions.device)])
        self.visible_positions = all_positions
        self.n_sink_columns = self.n_sink_stored
        self._keep(keys, values, all_positions)
        return keys, values

    def _keep(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> None:
        """Store the entries a later query may still see (all of them when recording)."""
        is_sink = positions < self.policy.n_sink
        n_sink = int(is_sink.sum())
        if n_sink and not bool(is_sink[:n_sink].all()):
            raise AssertionError("sink entries must come first")  # positions are in stream order
        capacity = self.policy.capacity
        start = n_sink
        if not self.record and capacity is not None:
            start = max(n_sink, positions.numel() - (capacity - 1))
        index = torch.cat([torch.arange(n_sink), torch.arange(start, positions.numel())]).to(
            keys.device
        )
        if index.numel() == positions.numel():
            self.keys, self.values, self.positions = keys, values, positions
        else:
            self.keys = keys.index_select(-2, index)
            self.values = values.index_select(-2, index)
            self.positions = positions.index_select(0, index.to(positions.device))
        self.n_sink_stored = n_sink

    def load(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> None:
        """Start from given entries (e.g. the dense run's first ``t0`` tokens), then evict."""
        self.lazy_initialization(keys, values)
        self._keep(keys, values, positions.to(keys.device))

    def replace_sinks(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Overwrite the stored sink entries (``neutral`` policy); shapes ``(B, K, k, hd)``."""
        k = keys.shape[-2]
        if k != self.n_sink_stored:
            raise ValueError(f"{k} replacement entries for {self.n_sink_stored} stored sinks")
        self.keys = torch.cat([keys.to(self.keys), self.keys[..., k:, :]], dim=-2)
        self.values = torch.cat([values.to(self.values), self.values[..., k:, :]], dim=-2)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.positions.numel() + query_length, 0

    def get_seq_length(self) -> int:
        """Tokens seen so far (the next stream position)."""
        return int(self.positions[-1]) + 1 if self.positions.numel() else 0

    def get_max_length(self) -> int:
        capacity = self.policy.capacity
        return -1 if capacity is None or self.record else self.policy.n_sink + capacity

    def reset(self) -> None:
        self.keys = self.values = None
        self.is_initialized = False
        self.positions = torch.zeros(0, dtype=torch.long)
        self.n_sink_stored = 0


class StreamingCache(Cache):
    """A transformers :class:`~transformers.Cache` of :class:`StreamingLayer` (one per layer).

    Before each forward call :meth:`set_chunk` with the stream positions of the chunk (the same
    positions are passed as ``position_ids``); :func:`streaming_attention_forward` reads the masks
    and sink rotations from :meth:`attention_inputs`.
    """

    def __init__(
        self,
        layer_policies: Sequence[LayerPolicy],
        inv_freqs: Sequence[torch.Tensor],
        record: bool = False,
    ):
        layers = [StreamingLayer(policy, record=record) for policy in layer_policies]
        super().__init__(layers=layers)
        self.layer_policies = list(layer_policies)
        self.inv_freqs = list(inv_freqs)
        self.chunk_positions: torch.Tensor | None = None
        self._memo: dict[Any, Any] = {}

    def set_chunk(self, positions: torch.Tensor) -> None:
        self.chunk_positions = positions
        self._memo = {}

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.chunk_positions is None or self.chunk_positions.numel() != key_states.shape[-2]:
            raise ValueError("call StreamingCache.set_chunk(positions) before each forward")
        return self.layers[layer_idx].update(
            key_states, value_states, positions=self.chunk_positions
        )

    def attention_inputs(
        self, layer_idx: int, device: torch.device
    ) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """``(visible (Q, Kv) bool, n_sink_columns, sink_delta (Q,) or None)`` for one layer.

        ``visible[i, c]``: query ``i`` of the chunk may see column ``c`` of the keys the layer's
        ``update`` returned: causal, inside the policy (sink or within the ``L`` most recent) and
        inside the layer's own sliding window. ``sink_delta[i]``: in-cache minus stream position of
        query ``i`` (``min(0, k + L - 1 - t)``), the rotation applied to the query for the first
        ``n_sink_columns`` columns; None when it is zero for every query.
        """
        layer = self.layers[layer_idx]
        policy = self.layer_policies[layer_idx]
        key_pos = layer.visible_positions
        n_sink_cols = layer.n_sink_columns
        memo_key = (policy, key_pos.numel(), n_sink_cols, int(key_pos[0]) if key_pos.numel() else 0)
        if memo_key in self._memo:
            return self._memo[memo_key]
        q = self.chunk_positions.to(device)[:, None]
        s = key_pos.to(device)[None, :]
        sink = s < policy.n_sink
        visible = s <= q
        if policy.window is not None:
            visible &= sink | (s > q - policy.window)
        if policy.native is not None:
            visible &= s > q - policy.native
        delta = None
        if policy.positions == "cache" and policy.window is not None and policy.n_sink > 0:
            full = policy.n_sink + policy.window - 1
            d = torch.clamp(full - self.chunk_positions.to(device), max=0)
            if bool((d != 0).any()):
                delta = d
                # rows that need a rotation must find every sink among the stored sink columns
                if bool((sink[0, n_sink_cols:]).any()):
                    raise AssertionError("sink entries outside the stored sinks while evicting")
        result = (visible, n_sink_cols, delta)
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
    with the policy mask of :meth:`StreamingCache.attention_inputs` instead of the model's mask,
    and the scores against the stored sinks computed with the query re-rotated to its in-cache
    position. ``query`` is ``(B, H, Q, hd)``, ``key``/``value`` ``(B, K, Kv, hd)``. ``s_aux``:
    a learned sink logit per head (gpt-oss's ``sinks``), softmaxed with each row's scores and
    dropped, as transformers' eager attention of that model does.
    """
    if streaming_cache is None:
        raise ValueError(
            f"{ATTENTION_NAME} attention needs streaming_cache=... in the forward call"
        )
    if scaling is None:
        scaling = module.head_dim**-0.5
    visible, n_sink_cols, delta = streaming_cache.attention_inputs(module.layer_idx, query.device)
    batch, n_heads, q_len, head_dim = query.shape
    n_kv = key.shape[1]
    group = n_heads // n_kv
    q = query.reshape(batch, n_kv, group, q_len, head_dim)
    k = key[:, :, None]
    v = value[:, :, None]
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling
    if delta is not None and n_sink_cols:
        q_sink = rope_rotate(q, delta, streaming_cache.inv_freqs[module.layer_idx])
        scores[..., :n_sink_cols] = (
            torch.matmul(q_sink, k[..., :n_sink_cols, :].transpose(-1, -2)) * scaling
        )
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~visible, float("-inf"))
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
