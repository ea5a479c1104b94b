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

Device, dtype and batches
-------------------------
The evaluator runs on the model's device in the model's dtype (``models.<name>.dtype``; no float32
copy of a bfloat16 model is made): every tensor it and its caches create is created on
``device``, and only the NLL comes back to the CPU, computed in float32 from float32 logits
(``log_softmax`` of ``lm_head(...).float()``). Rows of one forward: all streams of a policy, and
with :meth:`StreamingEvaluator.run_batch` the streams of several policies (one group of rows per
policy, :mod:`sinkscope.streaming.cache`); the re-computed windows of
:meth:`StreamingEvaluator.recompute_nll` are batched up to an attention-weight budget. How much is
batched by default depends on the device (:data:`BATCHING`): on the CPU one policy per forward and
the budget the CPU runs were measured with, which keeps their tables byte-identical; on a GPU 16
policies per forward and a 16x larger budget (a batched run equals the unbatched one up to float
rounding, not bit for bit, so it is not the CPU's default).
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

__all__ = ["BATCHING", "Batching", "RunResult", "StreamingEvaluator", "batching_for"]


@dataclass(frozen=True)
class Batching:
    """How much one forward holds: ``policies`` cache policies per
    :meth:`StreamingEvaluator.run_batch` (each over every stream) and ``recompute_attention``
    attention weights per layer in one batch of re-computed windows
    (:meth:`StreamingEvaluator.recompute_nll`'s ``max_attention``)."""

    policies: int
    recompute_attention: int


#: The default :class:`Batching` per device type. CPU: one policy per forward and 2**25 weights,
#: what the CPU tables were computed with (batching changes float32 results in the last bits, so
#: the CPU keeps them byte-identical run to run and version to version). CUDA: 16 policies (rows =
#: 16 x streams; with the defaults' 2 streams of 1,024 tokens about 3 GB of cache and 2 GB of
#: attention weights for an 8B model) and 2**29 weights (4 GB transient per layer: all 64
#: re-computed windows of L = 512 of a 32-head model in two batches instead of 22).
BATCHING: dict[str, Batching] = {
    "cpu": Batching(policies=1, recompute_attention=2**25),
    "cuda": Batching(policies=16, recompute_attention=2**29),
}


def batching_for(device: torch.device | str) -> Batching:
    """The default :class:`Batching` of ``device`` (:data:`BATCHING`; the CPU's for other types)."""
    return BATCHING.get(torch.device(device).type, BATCHING["cpu"])


@dataclass
class RunResult:
    """One policy's run: ``nll`` ``(B, T - 1)`` float32 on the CPU (NaN where the run did not
    compute: queries before its first eviction when it started from a snapshot); ``wall_s`` its
    share of the batch's wall time (by query tokens); ``n_tokens`` its query tokens, summed over
    streams; ``cache`` the recorded cache (on the model's device) when asked for."""

    nll: torch.Tensor
    wall_s: float
    n_tokens: int
    cache: StreamingCache | None = None


@dataclass
class StreamingEvaluator:
    """Runs one causal LM over token streams under cache policies (chunked, exact).

    ``model`` must be a Llama- or Gemma-3-style decoder with RoPE (it is switched to the
    :data:`~sinkscope.streaming.cache.ATTENTION_NAME` attention function). ``ids`` are ``(B, T)``
    token streams. ``device``: where every tensor of a run is created, the device the model's
    weights are on (None: that device; another one is refused, the model is never copied).
    """

    model: torch.nn.Module
    chunk_size: int = 256
    logit_elements: int = 2**25  # bound on logits held at once (rows x vocab)
    device: torch.device | str | None = None
    layer_types: list[str] = field(init=False)
    native_windows: list[int | None] = field(init=False)
    inv_freqs: list[torch.Tensor] = field(init=False)

    def __post_init__(self) -> None:
        from sinkscope.prepare.models import base_model, model_shape

        weights = next(self.model.parameters()).device
        device = weights if self.device is None else torch.device(self.device)
        if device.type != weights.type or (device.index not in (None, weights.index)):
            raise ValueError(f"the model's weights are on {weights}, not on device {device}")
        self.device = weights
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
        rotary = getattr(base_model(self.model), "rotary_emb", None)
        if rotary is None:
            from sinkscope.streaming.applicability import ABSOLUTE_POSITIONS

            raise ValueError(
                f"this model has {ABSOLUTE_POSITIONS}; the workflow leaves such a model's pairs "
                "out of the cache evaluation once its config.json is at hand (prepared, local or "
                "kept in prepare/model_configs): run it again"
            )
        rope_types = getattr(rotary, "rope_type", "default")
        rope_types = rope_types.values() if isinstance(rope_types, dict) else [rope_types]
        if any("dynamic" in str(t) or "longrope" in str(t) for t in rope_types):
            raise ValueError("RoPE types whose frequencies depend on the length are not supported")
        self.inv_freqs = []
        for layer_type in self.layer_types:
            inv = getattr(rotary, f"{layer_type}_inv_freq", None)
            if inv is None:
                inv = rotary.inv_freq
            self.inv_freqs.append(inv.detach().float().to(self.device))
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

    def new_cache(
        self, policies: Policy | Sequence[Policy], record: bool = False
    ) -> StreamingCache:
        """An empty cache on the evaluator's device for one policy, or for a batch of policies
        (one group of rows each, in order)."""
        group = [policies] if isinstance(policies, Policy) else list(policies)
        per_layer = zip(*(self.layer_policies(policy) for policy in group), strict=True)
        return StreamingCache(
            [tuple(layer) for layer in per_layer], self.inv_freqs, record=record, device=self.device
        )

    # -- forward pieces

    @torch.no_grad()
    def forward_chunk(self, cache: StreamingCache, ids: torch.Tensor, start: int) -> torch.Tensor:
        """Hidden states after the final norm, ``(B, Q, D)``, for tokens at ``start..``."""
        positions = cache.set_chunk(start, ids.shape[1])
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
        ids = torch.full((1, k), int(token_id), dtype=torch.long, device=self.device)
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
        """NLL of every stream under ``policy`` (:meth:`run_batch` of that policy alone).

        Without ``snapshot`` the run starts at token 0. With ``snapshot`` (a recorded dense cache
        holding at least the first ``t0 = k + L`` tokens) it starts at ``t0``: the cache is loaded
        with the snapshot's entries, evicted per policy, and only queries ``t >= t0`` are computed
        (the others are NaN; they equal dense). ``neutral_states`` (from :meth:`sink_states`) are
        required for ``neutral`` policies: they replace the sinks at ``t0``.
        """
        (result,) = self.run_batch(ids, [policy], snapshot, neutral_states, record, chunk_size)
        return result

    @torch.no_grad()
    def run_batch(
        self,
        ids: torch.Tensor,
        policies: Sequence[Policy],
        snapshot: StreamingCache | None = None,
        neutral_states: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
        record: bool = False,
        chunk_size: int | None = None,
    ) -> list[RunResult]:
        """:meth:`run` of several policies in one forward per chunk: rows = policies x streams.

        Each policy's streams are one group of rows of a :class:`StreamingCache` that stores what
        any of them may still see; each group's mask and sink rotation are its own policy's, so
        the results equal :meth:`run` of each policy up to float rounding (tested). From a
        snapshot the batch starts at the earliest first eviction ``t0`` of its policies; a later
        policy's queries before its own ``t0`` are computed (they equal dense), reported NaN and
        not counted in its ``n_tokens``; a neutral policy's sinks are swapped at its own ``t0``.
        ``record`` (keep every entry, return the cache) needs a single policy.
        """
        policies = list(policies)
        if not policies:
            raise ValueError("run_batch needs at least one policy")
        if record and len(policies) > 1:
            raise ValueError("record=True records the cache of a single policy")
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        n_streams, length = ids.shape
        n_groups = len(policies)
        rows = ids if n_groups == 1 else ids.repeat(n_groups, 1)
        chunk = int(chunk_size or self.chunk_size)
        t_evicts = [
            None if policy.first_eviction is None else min(policy.first_eviction, length - 1)
            for policy in policies
        ]
        if any(p.kind == "neutral" for p in policies) and neutral_states is None:
            raise ValueError(
                "neutral policies need neutral_states (StreamingEvaluator.sink_states)"
            )
        cache = self.new_cache(policies, record=record)
        starts = [0] * n_groups
        began = time.perf_counter()
        if snapshot is not None:
            if any(t is None for t in t_evicts):
                raise ValueError("a run from a snapshot needs policies that evict")
            starts = [int(t) for t in t_evicts]  # type: ignore[arg-type]
            for layer, source in zip(cache.layers, snapshot.layers, strict=True):
                if source.prefix_length < min(starts):
                    raise ValueError("the snapshot does not hold the first t0 tokens")
                keys = source.keys[..., : min(starts), :]
                values = source.values[..., : min(starts), :]
                if n_groups > 1:
                    keys, values = keys.repeat(n_groups, 1, 1, 1), values.repeat(n_groups, 1, 1, 1)
                layer.load(keys, values, min(starts))
        start = min(starts)
        # boundaries: the first evictions (where neutral sinks are swapped in), then chunks
        bounds = [start]
        stops = sorted({b for b in (*t_evicts, length - 1) if b is not None and b > start})
        for stop in stops:
            while bounds[-1] < stop:
                bounds.append(min(bounds[-1] + chunk, stop))
        nll = torch.full((n_groups * n_streams, length - 1), float("nan"), device=self.device)
        swapped = [False] * n_groups
        for lo, hi in itertools.pairwise(bounds):
            for group, policy in enumerate(policies):
                if policy.kind == "neutral" and not swapped[group] and lo >= (t_evicts[group] or 0):
                    self._swap_sinks(cache, group, neutral_states, n_streams)
                    swapped[group] = True
            hidden = self.forward_chunk(cache, rows[:, lo:hi], lo)
            nll[:, lo:hi] = self.token_nll(hidden, rows[:, lo + 1 : hi + 1])
        nll = nll.cpu()
        wall = time.perf_counter() - began
        tokens = [n_streams * max(0, (length - 1) - first) for first in starts]
        results = []
        for group, first in enumerate(starts):
            part = nll[group * n_streams : (group + 1) * n_streams]
            if first > start:
                part[:, :first] = float("nan")
            share = tokens[group] / sum(tokens) if sum(tokens) else 1.0 / n_groups
            results.append(RunResult(part, wall * share, tokens[group], cache if record else None))
        return results

    @torch.no_grad()
    def recompute_nll(
        self,
        ids: torch.Tensor,
        queries: Sequence[int],
        window: int,
        bos_token_id: int | None = None,
        max_attention: int | None = None,
    ) -> RunResult:
        """Sliding window with re-computation (StreamingLLM's baseline), at the given queries.

        For every stream and every query ``t`` in ``queries`` the ``window`` most recent tokens
        ``t-L+1..t`` (the set a window-only cache keeps) are encoded from scratch and
        ``-log p(token t+1)`` is read at the last one: at positions ``0..L-1`` with nothing
        before them, or, with ``bos_token_id``, behind that token (``[BOS] + L`` tokens at
        positions ``0..L``). Either way the model never sees a truncated cache, at ``L`` forward
        tokens per query, hence only sampled queries. Windows are run in batches of at most
        ``max_attention`` attention weights per layer (the device's default:
        :data:`BATCHING`). Returns ``nll`` of shape ``(B, len(queries))``, float32 on the CPU.
        """
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        batch, length = ids.shape
        queries = [int(t) for t in queries]
        if any(t < window - 1 or t > length - 2 for t in queries):
            raise ValueError(
                f"recompute queries must lie in [{window - 1}, {length - 2}], got {queries}"
            )
        windows = torch.stack([ids[:, t - window + 1 : t + 1] for t in queries], dim=1)
        windows = windows.reshape(-1, window)  # (B * Q, L), stream-major
        if bos_token_id is not None:
            bos = torch.full(
                (windows.shape[0], 1), int(bos_token_id), dtype=torch.long, device=self.device
            )
            windows = torch.cat([bos, windows], dim=1)
        targets = torch.stack([ids[:, t + 1] for t in queries], dim=1).reshape(-1)
        heads = int(self.config.num_attention_heads)
        width = windows.shape[1]
        budget = max_attention or batching_for(self.device).recompute_attention
        rows = max(1, budget // (heads * width * width))
        began = time.perf_counter()
        pieces = []
        for lo in range(0, windows.shape[0], rows):
            cache = self.new_cache(Policy("dense", "dense"))
            hidden = self.forward_chunk(cache, windows[lo : lo + rows], 0)
            pieces.append(self.token_nll(hidden[:, -1:], targets[lo : lo + rows, None])[:, 0])
        nll = torch.cat(pieces).reshape(batch, len(queries)).cpu()
        wall = time.perf_counter() - began
        return RunResult(nll, wall, int(windows.numel()))

    def _swap_sinks(
        self,
        cache: StreamingCache,
        group: int,
        states: Sequence[tuple[torch.Tensor, torch.Tensor]],
        n_streams: int,
    ) -> None:
        """Replace the sinks of group ``group``'s rows by the neutral ``states`` in every layer."""
        rows = slice(group * n_streams, (group + 1) * n_streams)
        for index, (layer, (keys, values)) in enumerate(zip(cache.layers, states, strict=True)):
            k = cache.layer_policies[index][group].n_sink
            if k == 0:
                continue
            if keys.shape[-2] < k:
                raise ValueError(f"neutral states hold {keys.shape[-2]} tokens, policy needs {k}")
            expand = (n_streams, *keys.shape[1:-2], k, keys.shape[-1])
            layer.replace_sinks(
                keys[..., :k, :].expand(expand), values[..., :k, :].expand(expand), rows
            )
