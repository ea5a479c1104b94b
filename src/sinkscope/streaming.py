"""Streaming language modelling under KV-cache eviction (StreamingLLM; attention sinks).

What is measured
----------------
Next-token negative log-likelihood (NLL, nats) over long token streams, each starting with the
model's BOS token, when the key/value cache follows one of these policies (``L`` = window, ``k`` =
number of kept first tokens):

* ``dense``  -- nothing is evicted (the reference; Gemma 3's sliding layers keep their own window,
  see below). If the stream is longer than the model's context the reference becomes a window of
  ``max_position_embeddings`` tokens (never the case for the defaults).
* ``window`` -- only the ``L`` most recent tokens are kept (the current token included).
* ``sink``   -- the first ``k`` tokens of the stream are kept as well (StreamingLLM).
* ``neutral``-- as ``sink``, but the ``k`` kept first entries are replaced by the keys/values of
  ``k`` neutral tokens (default: the newline token). Those keys/values are computed by running the
  sequence ``[n] * k`` alone (no BOS, positions ``0..k-1``, causal among themselves) through the
  model; they replace the stream's own first ``k`` entries in every layer at the moment of the
  first eviction (query ``t0 = k + L``). Before ``t0`` nothing is evicted and every policy is
  exactly the dense model, so ``neutral`` and ``sink`` with the same ``k`` and ``L`` differ only by
  the *content* of the kept first entries, not by their (in-cache) positions: this separates
  "position 0" from "the BOS token".
* ``recompute`` -- StreamingLLM's baseline "sliding window with re-computation": for each token
  the ``L`` most recent tokens are encoded from scratch, so the model never sees a truncated
  cache. Two variants (:data:`RECOMPUTE_BASELINES`): ``recompute_bos`` puts the model's BOS token
  in front (``[BOS] + L`` tokens at positions ``0..L``: the regime every stream of this pipeline
  and of the models' training starts in) and ``recompute`` does not (positions ``0..L-1``, the
  window's first token acts as the first token, as in StreamingLLM). Both see the same recent
  tokens as ``window``; they cost ``L`` forward tokens per token, so they are evaluated at
  ``recompute_samples`` sampled positions per stream and window, and every cache is compared with
  them on exactly those tokens (the ``recompute`` table of :func:`recompute_pair`, its own rule:
  it reads the caches' ``nll_by_position``). Gemma 3 needs the BOS: without it, re-computation
  is worse than the window-only cache.

Query ``t`` (predicting token ``t + 1``) attends to ``{0..k-1} U {t-L+1..t}`` (intersected with
the model's own mask). Eviction is done by a real :class:`transformers.Cache` subclass,
:class:`StreamingCache` (one :class:`StreamingLayer` per decoder layer): its ``update`` returns the
kept entries plus the new ones and then drops what no later query may see (it keeps the sinks and
the ``L - 1`` most recent entries, as transformers' own sliding-window layer keeps ``window - 1``).
Nothing is re-run on truncated prompts.

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

Speed: chunked evaluation, exactly equivalent to token-by-token decoding
-----------------------------------------------------------------------
Tokens are fed in chunks of ``chunk_size``: every query of a chunk sees exactly the entries a
token-by-token run would have in its cache at that step (the explicit causal + eviction mask built
from the cached entries' stream positions), and the in-cache positions are applied per query as
above, so a chunked run equals a token-by-token run (``chunk_size=1``) up to float rounding (tested).
Because every policy equals the dense model before its first eviction, each policy starts from the
dense run's keys/values at ``t0 = k + L`` (a snapshot), so only queries ``t >= t0`` are recomputed.
Attention is computed by :func:`streaming_attention_forward`, registered with transformers'
``AttentionInterface`` as ``"sinkscope_streaming"``: eager attention math (the same as
``attn_implementation="eager"``; SDPA cannot apply two rotations of one query), plus the policy mask
and the sink-query rotation.

Defaults and cost
-----------------
:data:`DEFAULT_PARAMS`: 2 streams x 1024 tokens; windows 64..512 (window-only, sink k = 4 and
neutral k = 4 at each), k in {1, 2, 4, 8} (sink) and {1, 4} (neutral) at L = 128, one sink policy
with the other position handling, and single-layer window-only eviction (L = 64) on the first
512 tokens of one stream. Measured on the shared 2-core CPU machine with one torch thread (other
jobs running, load 3-8): about 100-380 (SmolLM2-135M) and 40-160 (Gemma-3-270M) query tokens/s,
i.e. 3.5-6 min per SmolLM2 pair and about 8 min per Gemma pair in total, of which the single-layer
ablation is 1-1.5 min; per-policy wall times are in the ``timings`` table. Two torch threads on
that loaded machine were 6x slower (oversubscription), hence ``threads = 1``.

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

import itertools
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from sinkscope.defaults import STREAMING_PARAMS

__all__ = [
    "ATTENTION_NAME",
    "DEFAULT_PARAMS",
    "RECOMPUTE_BASELINES",
    "Policy",
    "StreamingCache",
    "StreamingEvaluator",
    "StreamingLayer",
    "build_policies",
    "correlation",
    "evaluate_pair",
    "first_position_mass",
    "load_streams",
    "recompute_pair",
    "recompute_queries",
    "rope_rotate",
    "streaming_attention_forward",
    "summarize",
]

#: Name under which :func:`streaming_attention_forward` is registered with transformers.
ATTENTION_NAME = "sinkscope_streaming"

#: Defaults of :func:`evaluate_pair` (every key may be overridden by ``params``).
DEFAULT_PARAMS = STREAMING_PARAMS


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
    """The policy grid of :data:`DEFAULT_PARAMS` (dense first, duplicates removed).

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
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention over the entries a :class:`StreamingCache` layer returned.

    The same math as transformers' eager attention (scores in the model dtype, softmax in float32),
    with the policy mask of :meth:`StreamingCache.attention_inputs` instead of the model's mask,
    and the scores against the stored sinks computed with the query re-rotated to its in-cache
    position. ``query`` is ``(B, H, Q, hd)``, ``key``/``value`` ``(B, K, Kv, hd)``.
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
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, v)  # (B, K, g, Q, hd)
    out = out.reshape(batch, n_heads, q_len, head_dim).transpose(1, 2).contiguous()
    return out, probs.reshape(batch, n_heads, q_len, -1)


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, streaming_attention_forward)


# ------------------------------------------------------------------------------- the engine


@dataclass
class RunResult:
    nll: torch.Tensor  # (B, T - 1); NaN where the run did not compute (queries before `start`)
    wall_s: float
    n_tokens: int  # query tokens computed (summed over streams)
    cache: StreamingCache | None = None


@dataclass
class StreamingEvaluator:
    """Runs one causal LM over token streams under cache policies (chunked, exact).

    ``model`` must be a Llama- or Gemma-3-style decoder with RoPE (it is switched to the
    :data:`ATTENTION_NAME` attention function). ``ids`` are ``(B, T)`` token streams.
    """

    model: torch.nn.Module
    chunk_size: int = 256
    logit_elements: int = 2**25  # bound on logits held at once (rows x vocab)
    layer_types: list[str] = field(init=False)
    native_windows: list[int | None] = field(init=False)
    inv_freqs: list[torch.Tensor] = field(init=False)

    def __post_init__(self) -> None:
        from sinkscope.models import base_model

        _register_attention()
        self.model.set_attn_implementation(ATTENTION_NAME)
        self.model.eval()
        config = self.model.config.get_text_config()
        self.config = config
        self.n_layers = int(config.num_hidden_layers)
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 0)
        types = getattr(config, "layer_types", None) or ["full_attention"] * self.n_layers
        self.layer_types = list(types)
        window = getattr(config, "sliding_window", None)
        self.native_windows = [
            int(window) if t == "sliding_attention" and window else None for t in self.layer_types
        ]
        if any(t not in ("full_attention", "sliding_attention") for t in self.layer_types):
            raise ValueError(f"unsupported layer types {sorted(set(self.layer_types))}")
        rotary = base_model(self.model).rotary_emb
        rope_types = getattr(rotary, "rope_type", "default")
        rope_types = rope_types.values() if isinstance(rope_types, dict) else [rope_types]
        if any("dynamic" in str(t) or "longrope" in str(t) for t in rope_types):
            raise ValueError("RoPE types whose frequencies depend on the length are not supported")
        self.inv_freqs = []
        for layer_type in self.layer_types:
            inv = getattr(rotary, f"{layer_type}_inv_freq", None)
            if inv is None:
                inv = rotary.inv_freq
            self.inv_freqs.append(inv.detach().float().cpu())
        self.base = base_model(self.model)
        self.softcap = getattr(config, "final_logit_softcapping", None)

    # -- policies per layer

    def layer_policies(self, policy: Policy, record: bool = False) -> list[LayerPolicy]:
        result = []
        for layer in range(self.n_layers):
            applies = policy.layers is None or layer in policy.layers
            native = self.native_windows[layer]
            if applies and policy.kind != "dense":
                result.append(LayerPolicy(policy.n_sink, policy.window, native, policy.positions))
            else:
                window = policy.window if policy.kind == "dense" else None
                result.append(LayerPolicy(0, window, native, policy.positions))
        return result

    def dense_policy(self, stream_length: int, positions: str = "cache") -> Policy:
        """Dense as far as the context allows: a window of ``max_position_embeddings`` beyond."""
        window = None
        if self.max_positions and stream_length > self.max_positions:
            window = self.max_positions
        return Policy("dense", "dense", 0, window, positions)

    def new_cache(self, policy: Policy, record: bool = False) -> StreamingCache:
        return StreamingCache(self.layer_policies(policy), self.inv_freqs, record=record)

    # -- forward pieces

    @torch.no_grad()
    def forward_chunk(self, cache: StreamingCache, ids: torch.Tensor, start: int) -> torch.Tensor:
        """Hidden states after the final norm, ``(B, Q, D)``, for tokens at ``start..``."""
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        cache.set_chunk(positions)
        out = self.base(
            input_ids=ids,
            position_ids=positions[None, :],
            cache=cache,
            use_cache=True,
            streaming_cache=cache,
        )
        return out.last_hidden_state

    @torch.no_grad()
    def token_nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``-log p(target)`` for each position of ``hidden`` (``(B, Q, D)``), in float32."""
        batch, q_len, dim = hidden.shape
        flat = hidden.reshape(-1, dim)
        flat_targets = targets.reshape(-1)
        vocab = self.model.lm_head.weight.shape[0]
        rows = max(1, self.logit_elements // vocab)
        pieces = []
        for lo in range(0, flat.shape[0], rows):
            logits = self.model.lm_head(flat[lo : lo + rows]).float()
            if self.softcap is not None:
                logits = torch.tanh(logits / self.softcap) * self.softcap
            logp = torch.log_softmax(logits, dim=-1)
            pieces.append(-logp.gather(1, flat_targets[lo : lo + rows, None])[:, 0])
        return torch.cat(pieces).reshape(batch, q_len)

    @torch.no_grad()
    def sink_states(self, token_id: int, k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Keys/values of ``[token_id] * k`` run alone at positions ``0..k-1``, per layer."""
        cache = self.new_cache(Policy("dense", "dense"), record=True)
        ids = torch.full((1, k), int(token_id), dtype=torch.long)
        self.forward_chunk(cache, ids, 0)
        return [(layer.keys, layer.values) for layer in cache.layers]

    # -- a whole run

    @torch.no_grad()
    def run(
        self,
        ids: torch.Tensor,
        policy: Policy,
        snapshot: StreamingCache | None = None,
        neutral_states: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
        record: bool = False,
        chunk_size: int | None = None,
    ) -> RunResult:
        """NLL of every stream under ``policy``.

        Without ``snapshot`` the run starts at token 0. With ``snapshot`` (a recorded dense cache
        holding at least the first ``t0 = k + L`` tokens) it starts at ``t0``: the cache is loaded
        with the snapshot's entries, evicted per policy, and only queries ``t >= t0`` are computed
        (the others are NaN; they equal dense). ``neutral_states`` (from :meth:`sink_states`) are
        required for ``neutral`` policies: they replace the sinks at ``t0``.
        """
        ids = torch.as_tensor(ids, dtype=torch.long)
        batch, length = ids.shape
        chunk = int(chunk_size or self.chunk_size)
        nll = torch.full((batch, length - 1), float("nan"))
        t_evict = policy.first_eviction
        if t_evict is not None:
            t_evict = min(t_evict, length - 1)
        if policy.kind == "neutral" and neutral_states is None:
            raise ValueError(
                "neutral policies need neutral_states (StreamingEvaluator.sink_states)"
            )
        cache = self.new_cache(policy, record=record)
        start = 0
        began = time.perf_counter()
        if snapshot is not None:
            if t_evict is None:
                raise ValueError("a run from a snapshot needs a policy that evicts")
            for layer, source in zip(cache.layers, snapshot.layers, strict=True):
                have = source.positions
                if have.numel() < t_evict or int(have[t_evict - 1]) != t_evict - 1:
                    raise ValueError("the snapshot does not hold the first t0 tokens")
                layer.load(
                    source.keys[..., :t_evict, :], source.values[..., :t_evict, :], have[:t_evict]
                )
            start = t_evict
        # boundaries: the first eviction (where neutral sinks are swapped in), then chunks
        bounds = [start]
        stops = sorted({b for b in (t_evict, length - 1) if b is not None and b > start})
        for stop in stops:
            while bounds[-1] < stop:
                bounds.append(min(bounds[-1] + chunk, stop))
        swapped = False
        for lo, hi in itertools.pairwise(bounds):
            if policy.kind == "neutral" and not swapped and lo >= (t_evict or 0):
                self._swap_sinks(cache, policy, neutral_states, batch)
                swapped = True
            hidden = self.forward_chunk(cache, ids[:, lo:hi], lo)
            nll[:, lo:hi] = self.token_nll(hidden, ids[:, lo + 1 : hi + 1])
        wall = time.perf_counter() - began
        n_tokens = batch * max(0, (length - 1) - start)
        return RunResult(nll, wall, n_tokens, cache if record else None)

    @torch.no_grad()
    def recompute_nll(
        self,
        ids: torch.Tensor,
        queries: Sequence[int],
        window: int,
        bos_token_id: int | None = None,
        max_attention: int = 2**25,
    ) -> RunResult:
        """Sliding window with re-computation (StreamingLLM's baseline), at the given queries.

        For every stream and every query ``t`` in ``queries`` the ``window`` most recent tokens
        ``t-L+1..t`` (the set a window-only cache keeps) are encoded from scratch and
        ``-log p(token t+1)`` is read at the last one: at positions ``0..L-1`` with nothing
        before them, or, with ``bos_token_id``, behind that token (``[BOS] + L`` tokens at
        positions ``0..L``). Either way the model never sees a truncated cache, at ``L`` forward
        tokens per query, hence only sampled queries. Windows are run in batches of at most
        ``max_attention`` attention weights per layer. Returns ``nll`` of shape
        ``(B, len(queries))``.
        """
        ids = torch.as_tensor(ids, dtype=torch.long)
        batch, length = ids.shape
        queries = [int(t) for t in queries]
        if any(t < window - 1 or t > length - 2 for t in queries):
            raise ValueError(
                f"recompute queries must lie in [{window - 1}, {length - 2}], got {queries}"
            )
        windows = torch.stack([ids[:, t - window + 1 : t + 1] for t in queries], dim=1)
        windows = windows.reshape(-1, window)  # (B * Q, L), stream-major
        if bos_token_id is not None:
            bos = torch.full((windows.shape[0], 1), int(bos_token_id), dtype=torch.long)
            windows = torch.cat([bos, windows], dim=1)
        targets = torch.stack([ids[:, t + 1] for t in queries], dim=1).reshape(-1)
        heads = int(self.config.num_attention_heads)
        width = windows.shape[1]
        rows = max(1, max_attention // (heads * width * width))
        began = time.perf_counter()
        pieces = []
        for lo in range(0, windows.shape[0], rows):
            cache = self.new_cache(Policy("dense", "dense"))
            hidden = self.forward_chunk(cache, windows[lo : lo + rows], 0)
            pieces.append(self.token_nll(hidden[:, -1:], targets[lo : lo + rows, None])[:, 0])
        nll = torch.cat(pieces).reshape(batch, len(queries))
        wall = time.perf_counter() - began
        return RunResult(nll, wall, int(windows.numel()))

    def _swap_sinks(
        self,
        cache: StreamingCache,
        policy: Policy,
        states: Sequence[tuple[torch.Tensor, torch.Tensor]],
        batch: int,
    ) -> None:
        for index, (layer, (keys, values)) in enumerate(zip(cache.layers, states, strict=True)):
            k = cache.layer_policies[index].n_sink
            if k == 0:
                continue
            if keys.shape[-2] < k:
                raise ValueError(f"neutral states hold {keys.shape[-2]} tokens, policy needs {k}")
            expand = (batch, *keys.shape[1:-2], k, keys.shape[-1])
            layer.replace_sinks(keys[..., :k, :].expand(expand), values[..., :k, :].expand(expand))


# ------------------------------------------------------------------------------- one pair


def recompute_queries(length: int, first_query: int, n_samples: int) -> list[int]:
    """``n_samples`` query indices spread evenly over ``first_query..length-2`` (fewer if the
    region is shorter; empty if it is empty or ``n_samples`` is 0). Query ``t`` predicts token
    ``t + 1``."""
    last = length - 2
    if n_samples <= 0 or first_query > last:
        return []
    grid = np.linspace(first_query, last, num=min(int(n_samples), last - first_query + 1))
    return sorted({int(t) for t in np.rint(grid)})


def _resolve_neutral_token(tokenizer: Any, spec: Any) -> int:
    if isinstance(spec, (int, np.integer)):
        return int(spec)
    if spec == "pad":
        if tokenizer.pad_token_id is None:
            raise ValueError("neutral_token 'pad': the tokenizer defines no pad token")
        return int(tokenizer.pad_token_id)
    ids = tokenizer(str(spec), add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"neutral_token {spec!r} is {len(ids)} tokens, not one: {ids}")
    return int(ids[0])


def _region_stats(
    nll: np.ndarray, dense: np.ndarray, first_position: int
) -> tuple[int, float, float]:
    """Token count and mean NLL of a policy and of dense over positions >= first_position."""
    index = max(0, first_position - 1)  # column i predicts position i + 1
    part, ref = nll[:, index:], dense[:, index:]
    if part.size == 0:
        return 0, float("nan"), float("nan")
    return int(part.size), float(part.mean()), float(ref.mean())


def _with_names(frame: pl.DataFrame, model: str, dataset: str) -> pl.DataFrame:
    return frame.select(pl.lit(model).alias("model"), pl.lit(dataset).alias("dataset"), pl.all())


@dataclass
class Streams:
    """The token streams of one model x corpus pair (:func:`load_streams`)."""

    model: Any
    tokenizer: Any
    ids: torch.Tensor  # (B, T), BOS in column 0
    offsets: list[int]  # where each stream's text starts in the corpus token stream
    bos_token_id: int


def load_streams(
    prepared_model_dir: str | Path, documents_parquet: str | Path, p: Mapping[str, Any]
) -> Streams:
    """Load the model (float32, eager) and cut ``n_streams`` streams of ``stream_length`` tokens
    (BOS first) from the corpus with ``seed``: the same streams for every caller
    (:func:`evaluate_pair`, :func:`recompute_pair`)."""
    from sinkscope.corpora import load_documents
    from sinkscope.models import load_model, load_tokenizer, resolve_bos_token_id
    from sinkscope.tokens import cut_sequences, tokenize_documents

    model = load_model(Path(prepared_model_dir), "float32", "eager")
    tokenizer = load_tokenizer(Path(prepared_model_dir))
    bos, _ = resolve_bos_token_id(Path(prepared_model_dir), tokenizer, model.config)
    documents = load_documents(Path(documents_parquet))
    stream = tokenize_documents(tokenizer, documents["text"])
    length = int(p["stream_length"])
    n_blocks = stream.size // (length - 1)
    if n_blocks < 1:
        raise ValueError(
            f"{documents_parquet}: {stream.size} tokens, fewer than one stream of {length}"
        )
    n_streams = min(int(p["n_streams"]), n_blocks)
    ids_np, starts = cut_sequences(stream, n_streams, length - 1, int(p["seed"]), bos)
    ids = torch.from_numpy(ids_np.astype(np.int64))
    return Streams(model, tokenizer, ids, [int(s) for s in starts], int(bos))


def _names(p: Mapping[str, Any], prepared_model_dir: str | Path, documents_parquet: str | Path):
    model_name = str(p.get("model_name") or Path(prepared_model_dir).name)
    dataset_name = str(p.get("dataset_name") or Path(documents_parquet).parent.name)
    return model_name, dataset_name


def evaluate_pair(
    prepared_model_dir: str | Path,
    documents_parquet: str | Path,
    params: Mapping[str, Any] | None = None,
) -> dict[str, pl.DataFrame]:
    """Streaming NLL of one model on one corpus under every policy of :func:`build_policies`.

    ``params`` override :data:`DEFAULT_PARAMS`; ``model_name``/``dataset_name`` default to the
    folder names (``results/models/{model}``, ``results/corpora/{dataset}/documents.parquet``).
    The model is loaded in float32 with eager attention and switched to
    :func:`streaming_attention_forward` (eager math plus the policy mask and sink rotation).

    Returns tables, each with ``model`` and ``dataset`` columns:

    * ``nll_by_position``: ``policy, kind, n_sink, window, positions, position, nll, nll_sd``
      (``positions``: the position handling, ``position``: the token position) -- mean
      (and std) over streams of the NLL of the token at ``position`` (1..T-1); positions before
      a policy's first eviction hold the dense values (identical by construction).
    * ``perplexity``: per policy and ``region`` -- ``all`` (positions 1..T-1), ``evicting``
      (positions ``> k + L``, where the policy differs from dense) and ``tail`` (positions
      ``>= tail_start``, common to all policies): ``n_tokens, nll, ppl, dense_nll, dense_ppl,
      log_ppl_ratio`` (= nll - dense_nll).
    * ``timings``: ``policy, tokens, wall_s, wall_tokens_per_s`` (query tokens actually
      computed; ``wall_*`` columns depend on the machine).
    * ``layer_ablation``: window-only eviction in one layer at a time (``layer_ablation_window``
      on the first ``layer_ablation_length`` tokens): ``layer, window, n_tokens, nll, dense_nll,
      log_ppl_ratio`` over the evicting positions (empty when disabled).
    * ``settings``: one row with the resolved parameters (JSON) and stream offsets.

    The re-computation baseline is :func:`recompute_pair` (it reads ``nll_by_position``).
    """
    import json

    p = {**DEFAULT_PARAMS, **dict(params or {})}
    model_name, dataset_name = _names(p, prepared_model_dir, documents_parquet)
    threads_before = torch.get_num_threads()
    if p["threads"]:
        torch.set_num_threads(int(p["threads"]))
    try:
        streams = load_streams(prepared_model_dir, documents_parquet, p)
        neutral_id = _resolve_neutral_token(streams.tokenizer, p["neutral_token"])
        ids, length = streams.ids, int(p["stream_length"])
        evaluator = StreamingEvaluator(streams.model, chunk_size=int(p["chunk_size"]))
        policies = build_policies(p, length)
        tables = _evaluate_policies(evaluator, ids, policies, neutral_id, p)
        settings = {
            **{key: value for key, value in p.items() if key not in ("model_name", "dataset_name")},
            "n_streams_used": int(ids.shape[0]),
            "neutral_token_id": neutral_id,
            "bos_token_id": streams.bos_token_id,
            "attention": f"{ATTENTION_NAME} (eager math)",
            "torch_threads": torch.get_num_threads(),
        }
        tables["settings"] = pl.DataFrame(
            {
                "params_json": [json.dumps(settings, sort_keys=True, default=str)],
                "stream_offsets": [",".join(str(s) for s in streams.offsets)],
                "n_streams": [int(ids.shape[0])],
                "stream_length": [length],
            }
        )
    finally:
        torch.set_num_threads(threads_before)
    return {name: _with_names(frame, model_name, dataset_name) for name, frame in tables.items()}


def _evaluate_policies(
    evaluator: StreamingEvaluator,
    ids: torch.Tensor,
    policies: Sequence[Policy],
    neutral_id: int,
    p: Mapping[str, Any],
) -> dict[str, pl.DataFrame]:
    batch, length = ids.shape
    dense_policy = evaluator.dense_policy(length, p["positions"])
    dense = evaluator.run(ids, dense_policy, record=True)
    dense_nll = dense.nll.numpy()
    k_max = max([pol.n_sink for pol in policies] + [0])
    neutral_states = evaluator.sink_states(neutral_id, k_max) if k_max else None
    windows = [pol.window for pol in policies if pol.window is not None]
    tail_start = p["tail_start"]
    if tail_start is None:
        tail_start = (max(windows) + k_max + 1) if windows else 1
        if tail_start >= length - 1:
            tail_start = length // 2
    results: dict[str, RunResult] = {"dense": dense}
    for policy in policies:
        if policy.kind == "dense":
            continue
        results[policy.name] = evaluator.run(
            ids, policy, snapshot=dense.cache, neutral_states=neutral_states
        )
    positions = np.arange(1, length)
    nll_rows, ppl_rows, time_rows = [], [], []
    for policy in policies:
        run = results[policy.name]
        values = run.nll.numpy().copy()
        missing = np.isnan(values)
        values[missing] = dense_nll[missing]  # before t0 every policy is the dense model
        nll_rows.append(
            pl.DataFrame(
                {
                    "policy": policy.name,
                    "kind": policy.kind,
                    "n_sink": policy.n_sink,
                    "window": policy.window,
                    "positions": policy.positions,
                    "position": positions,
                    "nll": values.mean(axis=0),
                    "nll_sd": values.std(axis=0, ddof=1) if batch > 1 else np.zeros(length - 1),
                },
                schema_overrides={"window": pl.Int64},
            )
        )
        evict = policy.first_eviction
        regions = {
            "all": 1,
            "evicting": (evict + 1) if evict is not None else length,
            "tail": int(tail_start),
        }
        for region, first in regions.items():
            n_tok, mean, ref = _region_stats(values, dense_nll, first)
            ppl_rows.append(
                {
                    "policy": policy.name,
                    "kind": policy.kind,
                    "n_sink": policy.n_sink,
                    "window": policy.window,
                    "positions": policy.positions,
                    "region": region,
                    "first_position": first,
                    "n_tokens": n_tok,
                    "nll": mean,
                    "ppl": math.exp(mean) if n_tok else float("nan"),
                    "dense_nll": ref,
                    "dense_ppl": math.exp(ref) if n_tok else float("nan"),
                    "log_ppl_ratio": mean - ref if n_tok else float("nan"),
                }
            )
        time_rows.append(
            {
                "policy": policy.name,
                "tokens": run.n_tokens,
                "wall_s": run.wall_s,
                "wall_tokens_per_s": (
                    run.n_tokens / run.wall_s if run.wall_s > 0 else float("nan")
                ),
            }
        )
    return {
        "nll_by_position": pl.concat(nll_rows),
        "perplexity": pl.DataFrame(ppl_rows, schema_overrides={"window": pl.Int64}),
        "timings": pl.DataFrame(time_rows),
        "layer_ablation": _layer_ablation(evaluator, ids, dense, p),
    }


#: The re-computation baselines of :func:`recompute_pair`: name -> BOS in front of the window.
RECOMPUTE_BASELINES: dict[str, bool] = {"recompute_bos": True, "recompute": False}

RECOMPUTE_SCHEMA: dict[str, Any] = {
    "baseline": pl.String,
    "window": pl.Int64,
    "kind": pl.String,
    "n_sink": pl.Int64,
    "policy": pl.String,
    "first_position": pl.Int64,
    "n_queries": pl.Int64,
    "n_tokens": pl.Int64,
    "dense_nll": pl.Float64,
    "window_nll": pl.Float64,
    "recompute_nll": pl.Float64,
    "policy_nll": pl.Float64,
    "window_vs_recompute": pl.Float64,
    "policy_vs_recompute": pl.Float64,
    "policy_vs_recompute_se": pl.Float64,
    "recovered_fraction": pl.Float64,
}

RECOMPUTE_TIMINGS_SCHEMA: dict[str, Any] = {
    "baseline": pl.String,
    "window": pl.Int64,
    "tokens": pl.Int64,
    "wall_s": pl.Float64,
    "wall_tokens_per_s": pl.Float64,
}


def _check_same_streams(settings: pl.DataFrame, offsets: Sequence[int], length: int, path: Any):
    """The re-computation must see the streams the caches saw (same corpus cut, same length)."""
    row = settings.row(0, named=True)
    stored = [int(x) for x in str(row["stream_offsets"]).split(",") if x != ""]
    if stored != list(offsets) or int(row["stream_length"]) != length:
        raise ValueError(
            f"{path}: the cache evaluation ran on streams at offsets {stored} of length "
            f"{row['stream_length']}, the current streaming.params give offsets {list(offsets)} "
            f"of length {length}; re-run analyze_streaming for this pair"
        )


def recompute_pair(
    prepared_model_dir: str | Path,
    documents_parquet: str | Path,
    nll_by_position: str | Path | pl.DataFrame,
    settings: str | Path | pl.DataFrame,
    params: Mapping[str, Any] | None = None,
) -> dict[str, pl.DataFrame]:
    """The caches of :func:`evaluate_pair` against sliding window with re-computation.

    For each window size ``L`` of a window-only policy in ``nll_by_position`` (that function's
    table) and each baseline of :data:`RECOMPUTE_BASELINES`, the NLL under re-computation
    (:meth:`StreamingEvaluator.recompute_nll`) at ``recompute_samples`` query positions per
    stream, spread over ``t >= L + k_max`` (``k_max``: the largest sink count of the table, so
    every policy at ``L`` has evicted there; query ``t`` predicts the token at position
    ``t + 1``), next to the NLL of dense, window-only and every sink/neutral policy (cache
    positions) at ``L`` on the same tokens. The caches' NLL is the mean over streams per position
    (``nll_by_position``), so the pairing unit is the sampled position: per policy
    ``policy_vs_recompute`` = mean over positions of (policy - baseline), the log-perplexity ratio
    to the baseline, with its standard error over positions; ``window_vs_recompute`` the same for
    window-only, and ``recovered_fraction = (window_nll - policy_nll) / (window_nll -
    recompute_nll)``: 1 = the policy is as good as re-computation, 0 = as bad as window-only (null
    when window-only is not worse than re-computation: nothing to recover).

    ``settings`` (:func:`evaluate_pair`'s table) must record the streams that ``params`` cut
    again here; otherwise a ValueError names the file before any forward pass. Returns the tables
    ``recompute`` (:data:`RECOMPUTE_SCHEMA`) and ``recompute_timings``, with ``model`` and
    ``dataset`` columns.
    """
    p = {**DEFAULT_PARAMS, **dict(params or {})}
    model_name, dataset_name = _names(p, prepared_model_dir, documents_parquet)
    nll_table = _as_frame(nll_by_position)
    nll_source = "nll_by_position" if isinstance(nll_by_position, pl.DataFrame) else nll_by_position
    _check_nll_table(nll_table, nll_source)  # before the model is loaded
    settings_table = _as_frame(settings)
    length = int(p["stream_length"])
    threads_before = torch.get_num_threads()
    if p["threads"]:
        torch.set_num_threads(int(p["threads"]))
    try:
        streams = load_streams(prepared_model_dir, documents_parquet, p)
        _check_same_streams(settings_table, streams.offsets, length, settings)
        evaluator = StreamingEvaluator(streams.model, chunk_size=int(p["chunk_size"]))
        rows, times = _recompute_rows(
            evaluator, streams, nll_table, int(p.get("recompute_samples") or 0), nll_source
        )
    finally:
        torch.set_num_threads(threads_before)
    tables = {
        "recompute": pl.DataFrame(rows, schema=RECOMPUTE_SCHEMA),
        "recompute_timings": pl.DataFrame(times, schema=RECOMPUTE_TIMINGS_SCHEMA),
    }
    return {name: _with_names(frame, model_name, dataset_name) for name, frame in tables.items()}


def _as_frame(table: str | Path | pl.DataFrame) -> pl.DataFrame:
    return table if isinstance(table, pl.DataFrame) else pl.read_parquet(table)


#: Columns of ``nll_by_position`` that the re-computation reads.
_NLL_COLUMNS = ("policy", "kind", "n_sink", "window", "positions", "position", "nll")


def _check_nll_table(nll_table: pl.DataFrame, source: Any) -> None:
    """``source`` (the file, for the message) has the columns and the dense policy we read."""
    missing = [c for c in _NLL_COLUMNS if c not in nll_table.columns]
    if missing:
        raise ValueError(f"{source}: columns {missing} are missing; re-run analyze_streaming")
    if "dense" not in nll_table["policy"].unique().to_list():
        raise ValueError(f"{source}: no dense policy; re-run analyze_streaming for this pair")


def _nll_at(
    nll_table: pl.DataFrame, policy: str, positions: Sequence[int], source: Any
) -> np.ndarray:
    """Mean-over-streams NLL of ``policy`` at the token ``positions`` (from ``nll_by_position``,
    read from ``source``: named in the error when a position is missing)."""
    rows = nll_table.filter(pl.col("policy") == policy).select("position", "nll")
    by_position = dict(zip(rows["position"].to_list(), rows["nll"].to_list(), strict=True))
    missing = [t for t in positions if t not in by_position]
    if missing:
        raise ValueError(
            f"{source}: no NLL of policy {policy} at positions {missing}; the caches were "
            "evaluated with other streaming.params: re-run analyze_streaming for this pair"
        )
    return np.array([by_position[t] for t in positions], dtype=np.float64)


def _recompute_rows(
    evaluator: StreamingEvaluator,
    streams: Streams,
    nll_table: pl.DataFrame,
    n_samples: int,
    source: Any = "nll_by_position",
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ids = streams.ids
    length = ids.shape[1]
    _check_nll_table(nll_table, source)
    policies = nll_table.select("policy", "kind", "n_sink", "window", "positions").unique()
    k_max = int(policies["n_sink"].max() or 0)
    window_rows = (
        policies.filter(pl.col("kind") == "window")
        .sort("window", pl.col("positions") != "cache")
        .unique("window", keep="first", maintain_order=True)
    )
    rows: list[dict[str, Any]] = []
    times: list[dict[str, Any]] = []
    for window_policy in window_rows.iter_rows(named=True):
        window = int(window_policy["window"])
        queries = recompute_queries(length, window + k_max, n_samples)
        if not queries:
            continue
        positions = [t + 1 for t in queries]
        dense = _nll_at(nll_table, "dense", positions, source)
        window_nll = _nll_at(nll_table, window_policy["policy"], positions, source)
        others = policies.filter(
            pl.col("kind").is_in(["sink", "neutral"])
            & (pl.col("window") == window)
            & (pl.col("positions") == "cache")
        ).sort("kind", "n_sink")
        compared = [window_policy, *others.iter_rows(named=True)]
        for baseline, with_bos in RECOMPUTE_BASELINES.items():
            run = evaluator.recompute_nll(
                ids, queries, window, streams.bos_token_id if with_bos else None
            )
            times.append(
                {
                    "baseline": baseline,
                    "window": window,
                    "tokens": run.n_tokens,
                    "wall_s": run.wall_s,
                    "wall_tokens_per_s": (
                        run.n_tokens / run.wall_s if run.wall_s > 0 else float("nan")
                    ),
                }
            )
            recompute = run.nll.numpy().astype(np.float64).mean(axis=0)  # per sampled position
            gap = float(window_nll.mean() - recompute.mean())
            for pol in compared:
                values = _nll_at(nll_table, pol["policy"], positions, source)
                diff = values - recompute
                rows.append(
                    {
                        "baseline": baseline,
                        "window": window,
                        "kind": pol["kind"],
                        "n_sink": pol["n_sink"],
                        "policy": pol["policy"],
                        "first_position": positions[0],
                        "n_queries": len(queries),
                        "n_tokens": len(queries) * int(ids.shape[0]),
                        "dense_nll": float(dense.mean()),
                        "window_nll": float(window_nll.mean()),
                        "recompute_nll": float(recompute.mean()),
                        "policy_nll": float(values.mean()),
                        "window_vs_recompute": gap,
                        "policy_vs_recompute": float(diff.mean()),
                        "policy_vs_recompute_se": (
                            float(diff.std(ddof=1) / math.sqrt(diff.size))
                            if diff.size > 1
                            else None
                        ),
                        "recovered_fraction": (
                            float((window_nll.mean() - values.mean()) / gap) if gap > 0 else None
                        ),
                    }
                )
    return rows, times


def _layer_ablation(
    evaluator: StreamingEvaluator, ids: torch.Tensor, dense: RunResult, p: Mapping[str, Any]
) -> pl.DataFrame:
    schema = {
        "layer": pl.Int64,
        "layer_type": pl.String,
        "window": pl.Int64,
        "n_tokens": pl.Int64,
        "nll": pl.Float64,
        "dense_nll": pl.Float64,
        "log_ppl_ratio": pl.Float64,
        "wall_s": pl.Float64,
    }
    window = p.get("layer_ablation_window")
    if not window:
        return pl.DataFrame(schema=schema)
    window = int(window)
    length = min(int(p["layer_ablation_length"] or ids.shape[1]), ids.shape[1])
    if window >= length - 1:
        return pl.DataFrame(schema=schema)
    n_streams = max(1, min(int(p.get("layer_ablation_streams") or ids.shape[0]), ids.shape[0]))
    sub = ids[:n_streams, :length]
    dense_nll = dense.nll[:n_streams, : length - 1].numpy()
    rows = []
    for layer in range(evaluator.n_layers):
        policy = Policy(
            f"window_L{window}_layer{layer}", "window", 0, window, p["positions"], layers=(layer,)
        )
        run = evaluator.run(sub, policy, snapshot=_rows(dense.cache, n_streams))
        n_tok, mean, ref = _region_stats(run.nll.numpy()[:, window:], dense_nll[:, window:], 1)
        rows.append(
            {
                "layer": layer,
                "layer_type": evaluator.layer_types[layer],
                "window": window,
                "n_tokens": n_tok,
                "nll": mean,
                "dense_nll": ref,
                "log_ppl_ratio": mean - ref,
                "wall_s": run.wall_s,
            }
        )
    return pl.DataFrame(rows, schema=schema)


def _rows(cache: StreamingCache, n_rows: int) -> StreamingCache:
    """A view of a recorded cache restricted to its first ``n_rows`` streams (for snapshots)."""
    view = StreamingCache(cache.layer_policies, cache.inv_freqs, record=True)
    for target, source in zip(view.layers, cache.layers, strict=True):
        target.load(source.keys[:n_rows], source.values[:n_rows], source.positions)
    return view


# ------------------------------------------------------------------- attention on first tokens


def first_position_mass(h5_path: str | Path, max_k: int = 8) -> pl.DataFrame:
    """Attention mass on the first ``max_k`` key positions, per layer, from an activation file.

    Reads ``attention/probs`` (``L, N, H, T1, T1``) one layer at a time and averages over
    sequences, heads and the queries ``q >= max_k`` (earlier queries see only the first positions
    and would trivially put all their mass there). Returns one row per ``(layer, key_position)``
    with ``mass`` (mean attention on that key), ``cumulative_mass`` (on keys ``0..key_position``,
    i.e. on the first ``k = key_position + 1`` positions), ``mass_head_min``/``mass_head_max``
    (the range over heads of the per-head means), plus ``model``, ``dataset`` and ``n_queries``.
    """
    from sinkscope.h5layout import open_activations

    rows = []
    with open_activations(h5_path) as handle:
        probs = handle["attention/probs"]
        n_layers, _, _, t1, _ = probs.shape
        k = int(min(max_k, t1 - 1))
        if k < 1:
            raise ValueError(f"{h5_path}: sequences of {t1} positions are too short")
        model = str(handle.attrs.get("model_name", ""))
        dataset = str(handle.attrs.get("dataset_name", ""))
        for layer in range(n_layers):
            block = np.asarray(probs[layer, :, :, k:, :k], dtype=np.float64)  # (N, H, Q, k)
            per_head = block.mean(axis=(0, 2))  # (H, k)
            mass = per_head.mean(axis=0)
            cumulative = np.cumsum(mass)
            for position in range(k):
                rows.append(
                    {
                        "layer": layer,
                        "key_position": position,
                        "mass": float(mass[position]),
                        "cumulative_mass": float(cumulative[position]),
                        "mass_head_min": float(per_head[:, position].min()),
                        "mass_head_max": float(per_head[:, position].max()),
                        "n_queries": int(t1 - k),
                    }
                )
    return _with_names(pl.DataFrame(rows), model, dataset)


# ------------------------------------------------------------------------------- summaries


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.arange(values.size, dtype=np.float64)
    # average ties
    for value in np.unique(values):
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 3 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def correlation(x: Iterable[float], y: Iterable[float], n_perm: int = 10000, seed: int = 0) -> dict:
    """Pearson r, Spearman rho and a two-sided permutation p-value of rho (numpy only)."""
    x = np.asarray(list(x), dtype=np.float64)
    y = np.asarray(list(y), dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(x.size)
    r = _pearson(x, y)
    rho = _pearson(_ranks(x), _ranks(y)) if n >= 3 else float("nan")
    p_value = float("nan")
    if np.isfinite(rho):
        rng = np.random.default_rng(seed)
        rx, ry = _ranks(x), _ranks(y)
        perms = np.array([_pearson(rx, rng.permutation(ry)) for _ in range(n_perm)])
        p_value = float((np.sum(np.abs(perms) >= abs(rho) - 1e-12) + 1) / (n_perm + 1))
    return {"n": n, "pearson_r": r, "spearman_rho": rho, "p_permutation": p_value}


def summarize(
    pair_tables: Sequence[Mapping[str, pl.DataFrame]],
    head_tables: Sequence[pl.DataFrame] | pl.DataFrame | None = None,
) -> dict[str, pl.DataFrame]:
    """Tables across model x dataset pairs (each pair: the dict of :func:`evaluate_pair`).

    * ``perplexity``: every pair's perplexity rows.
    * ``overview``: one row per pair and policy on the ``tail`` region (the region common to
      all policies): ``ppl``, ``dense_ppl``, ``log_ppl_ratio``.
    * ``sink_heads``: per pair the share of sink heads (``is_sink`` of the head tables) and the
      mean BOS mass, next to the window-only damage (``log_ppl_ratio`` on the evicting region)
      for every window size, and what ``sink{k}`` recovers.
    * ``layers``: the single-layer eviction damage of every pair (``layer_ablation``) next to
      the layer's share of sink heads and mean BOS mass (empty without ablations or heads).
    * ``correlations``: Spearman/Pearson correlations, with n and a permutation p-value --
      across pairs: share of sink heads vs window-only damage (one row per window; with two
      models the pairs of one model share their weights, so n overstates the independent
      evidence); across layers (from ``layer_ablation``): the layer's share of sink heads and mean
      BOS mass vs the damage of evicting in that layer alone, per pair and pooled.
    * ``recompute``: every pair's ``recompute`` table (caches vs sliding window with
      re-computation), sorted.
    """
    perplexity = pl.concat(
        [t["perplexity"] for t in pair_tables if t["perplexity"].height], how="diagonal_relaxed"
    )
    overview = perplexity.filter(pl.col("region") == "tail").select(
        "model",
        "dataset",
        "policy",
        "kind",
        "n_sink",
        "window",
        "n_tokens",
        "ppl",
        "dense_ppl",
        "log_ppl_ratio",
    )
    heads = _head_table(head_tables)
    per_pair = (
        heads.group_by("model", "dataset").agg(
            frac_sink_heads=pl.col("is_sink").cast(pl.Float64).mean(),
            mean_bos_mass=pl.col("bos_mass").mean(),
        )
        if heads is not None
        else None
    )
    evicting = perplexity.filter(pl.col("region") == "evicting")
    window_damage = evicting.filter(pl.col("kind") == "window").select(
        "model", "dataset", "window", window_log_ppl_ratio="log_ppl_ratio"
    )
    sink_damage = evicting.filter(pl.col("kind") == "sink").select(
        "model",
        "dataset",
        "window",
        "n_sink",
        sink_positions="positions",
        sink_log_ppl_ratio="log_ppl_ratio",
    )
    sink_heads = window_damage.join(sink_damage, on=["model", "dataset", "window"], how="left")
    if per_pair is not None:
        sink_heads = sink_heads.join(per_pair, on=["model", "dataset"], how="left")
    sink_heads = sink_heads.sort("model", "dataset", "window", "n_sink")
    corr_rows = []
    if per_pair is not None:
        for window in sorted(window_damage["window"].unique().to_list()):
            # sorted: the permutation p-value depends on the row order (joins do not keep it)
            part = (
                window_damage.filter(pl.col("window") == window)
                .join(per_pair, on=["model", "dataset"], how="inner")
                .sort("model", "dataset")
            )
            for predictor in ("frac_sink_heads", "mean_bos_mass"):
                stats = correlation(part[predictor], part["window_log_ppl_ratio"])
                corr_rows.append(
                    {
                        "level": "pair",
                        "scope": "all pairs",
                        "window": window,
                        "predictor": predictor,
                        "outcome": "window-only log ppl ratio",
                        **stats,
                    }
                )
    ablations = [
        t["layer_ablation"]
        for t in pair_tables
        if "layer_ablation" in t and t["layer_ablation"].height
    ]
    layers_table = pl.DataFrame()
    if ablations and heads is not None:
        per_layer = heads.group_by("model", "dataset", "layer").agg(
            frac_sink_heads=pl.col("is_sink").cast(pl.Float64).mean(),
            mean_bos_mass=pl.col("bos_mass").mean(),
        )
        layers = pl.concat(ablations, how="diagonal_relaxed").join(
            per_layer, on=["model", "dataset", "layer"], how="inner"
        )
        layers = layers_table = layers.sort("model", "dataset", "layer")  # deterministic order
        groups = [("all pairs", layers)]
        for (model, dataset), part in layers.group_by("model", "dataset", maintain_order=True):
            groups.append((f"{model}/{dataset}", part))
        for scope, part in groups:
            for predictor in ("frac_sink_heads", "mean_bos_mass"):
                stats = correlation(part[predictor], part["log_ppl_ratio"])
                corr_rows.append(
                    {
                        "level": "layer",
                        "scope": scope,
                        "window": int(part["window"][0]),
                        "predictor": predictor,
                        "outcome": "single-layer window-only log ppl ratio",
                        **stats,
                    }
                )
    correlations = pl.DataFrame(
        corr_rows,
        schema={
            "level": pl.String,
            "scope": pl.String,
            "window": pl.Int64,
            "predictor": pl.String,
            "outcome": pl.String,
            "n": pl.Int64,
            "pearson_r": pl.Float64,
            "spearman_rho": pl.Float64,
            "p_permutation": pl.Float64,
        },
    )
    recompute_frames = [
        t["recompute"] for t in pair_tables if "recompute" in t and t["recompute"].height
    ]
    recompute = (
        pl.concat(recompute_frames, how="diagonal_relaxed").sort(
            "model", "dataset", "baseline", "window", "kind", "n_sink"
        )
        if recompute_frames
        else pl.DataFrame(schema={"model": pl.String, "dataset": pl.String, **RECOMPUTE_SCHEMA})
    )
    return {
        "perplexity": perplexity,
        "overview": overview,
        "sink_heads": sink_heads,
        "layers": layers_table,
        "correlations": correlations,
        "recompute": recompute,
    }


def _head_table(head_tables: Sequence[pl.DataFrame] | pl.DataFrame | None) -> pl.DataFrame | None:
    if head_tables is None:
        return None
    if isinstance(head_tables, pl.DataFrame):
        frames = [head_tables]
    else:
        frames = [t for t in head_tables if t is not None and t.height]
    if not frames:
        return None
    table = pl.concat(
        [t.select("model", "dataset", "layer", "head", "is_sink", "bos_mass") for t in frames]
    )
    return table
