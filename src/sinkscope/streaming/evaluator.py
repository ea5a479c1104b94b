"""One causal LM over token streams under a cache policy: :class:`StreamingEvaluator`.

The cache and the attention function are :mod:`sinkscope.streaming.cache`'s; this module runs
the model with them, computes the NLL of every token, the neutral sinks' keys/values and the
sliding window with re-computation (:meth:`StreamingEvaluator.recompute_nll`).

Speed: chunked evaluation, exactly equivalent to token-by-token decoding
-----------------------------------------------------------------------
Tokens are fed in chunks of ``chunk_size``: every query of a chunk sees exactly the entries a
token-by-token run would have in its cache at that step (the explicit causal + eviction mask built
from the cached entries' stream positions), and the in-cache positions are applied per query as
above, so a chunked run equals a token-by-token run (``chunk_size=1``) up to float rounding (tested).
Because every policy equals the dense model before its first eviction, each policy starts from the
dense run's keys/values at ``t0 = k + L`` (a snapshot), so only queries ``t >= t0`` are recomputed.
Attention is computed by :func:`~sinkscope.streaming.cache.streaming_attention_forward`,
registered with transformers' ``AttentionInterface`` as ``"sinkscope_streaming"``: eager
attention math (the same as ``attn_implementation="eager"``; SDPA cannot apply two rotations of
one query), plus the policy mask and the sink-query rotation.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from sinkscope.streaming.cache import (
    ATTENTION_NAME,
    LayerPolicy,
    Policy,
    StreamingCache,
    register_attention,
)

__all__ = ["RunResult", "StreamingEvaluator"]


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
    :data:`~sinkscope.streaming.cache.ATTENTION_NAME` attention function). ``ids`` are ``(B, T)``
    token streams.
    """

    model: torch.nn.Module
    chunk_size: int = 256
    logit_elements: int = 2**25  # bound on logits held at once (rows x vocab)
    layer_types: list[str] = field(init=False)
    native_windows: list[int | None] = field(init=False)
    inv_freqs: list[torch.Tensor] = field(init=False)

    def __post_init__(self) -> None:
        from sinkscope.prepare.models import base_model, model_shape

        register_attention()
        self.model.set_attn_implementation(ATTENTION_NAME)
        self.model.eval()
        config = self.model.config.get_text_config()
        self.config = config
        self.n_layers = int(config.num_hidden_layers)
        self.max_positions = model_shape(config).max_positions
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
        """Dense as far as the context allows: a window of the model's position limit
        (:func:`sinkscope.prepare.models.model_shape`) beyond it."""
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
