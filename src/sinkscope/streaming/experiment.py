"""The cache policies on one model x corpus pair (rule ``analyze_streaming``):
:func:`evaluate_pair`.

What is measured
----------------
Next-token negative log-likelihood (NLL, nats) over long token streams, each starting with the
model's BOS token, when the key/value cache follows one of these policies (``L`` = window, ``k`` =
number of kept first tokens):

* ``dense``  -- nothing is evicted (the reference; Gemma 3's sliding layers keep their own window,
  see :mod:`sinkscope.streaming.cache`). If the stream is longer than the model's context the
  reference becomes a window of ``max_position_embeddings`` tokens (never the case for the
  defaults).
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
  cache. Two variants (:data:`~sinkscope.streaming.recompute.RECOMPUTE_BASELINES`):
  ``recompute_bos`` puts the model's BOS token in front (``[BOS] + L`` tokens at positions
  ``0..L``: the regime every stream of this pipeline and of the models' training starts in) and
  ``recompute`` does not (positions ``0..L-1``, the window's first token acts as the first token,
  as in StreamingLLM). Both see the same recent tokens as ``window``; they cost ``L`` forward tokens
  per token, so they are evaluated at ``recompute_samples`` sampled positions per stream and
  window, and every cache is compared with them on exactly those tokens (the ``recompute`` table of
  :func:`~sinkscope.streaming.recompute.recompute_pair`, its own rule: it reads the caches'
  ``nll_by_position``). Gemma 3 needs the BOS: without it, re-computation is worse than the
  window-only cache.

Defaults and cost
-----------------
:data:`sinkscope.defaults.STREAMING_PARAMS`: 2 streams x 1024 tokens; windows 64..512 (window-only,
sink k = 4 and neutral k = 4 at each), k in {1, 2, 4, 8} (sink) and {1, 4} (neutral) at L = 128, one
sink policy with the other position handling, and single-layer window-only eviction (L = 64) on the
first 512 tokens of one stream. Measured on the shared 2-core CPU machine with one torch thread
(other jobs running, load 3-8): about 100-380 (SmolLM2-135M) and 40-160 (Gemma-3-270M) query
tokens/s, i.e. 3.5-6 min per SmolLM2 pair and about 8 min per Gemma pair in total, of which the
single-layer ablation is 1-1.5 min; per-policy wall times are in the ``timings`` table. Two torch
threads on that loaded machine were 6x slower (oversubscription), hence ``threads = 1``.

Device and dtype
----------------
The model runs in its configured dtype (``models.<name>.dtype``: the 7-8B models of
``config/paper.yaml`` in bfloat16, no float32 copy) on the device of ``extraction.device``
(:func:`sinkscope.prepare.models.pick_device`: the GPU where one is visible); the NLL is computed in
float32 either way. bfloat16 against float32, measured on the CPU on SmolLM2-135M (1 x 96 and
3 x 200 tokens of the GPL-3 text) and Gemma-3-270M (1 x 96): tokens move by 0.03-0.06 nats on
average and by up to 2.3 nats, the tables' averages much less (region NLL and ``log_ppl_ratio``
within 0.03 nats, ``recovered_fraction`` within 0.02; the claims' thresholds are tenths of a nat).
On that CPU bfloat16 ran 4-10x slower than float32 (it is a GPU's format). On a GPU the policies
run 16 at a time (:data:`sinkscope.streaming.evaluator.BATCHING`), equal to one at a time up to
float rounding; on the CPU one at a time, as measured above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.defaults import STREAMING_PARAMS
from sinkscope.streaming.cache import ATTENTION_NAME, Policy, StreamingCache, build_policies
from sinkscope.streaming.evaluator import RunResult, StreamingEvaluator, batching_for
from sinkscope.streaming.streams import load_streams, pair_names, with_names

__all__ = ["evaluate_pair"]


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


def evaluate_pair(
    prepared_model_dir: str | Path,
    token_stream: str | Path,
    corpus_provenance: str | Path,
    params: Mapping[str, Any] | None = None,
    *,
    dtype: str | None = None,
    attn_implementation: str = "eager",
    device: str = "auto",
    policy_batch: int | None = None,
) -> dict[str, pl.DataFrame]:
    """Streaming NLL of one model on one corpus under every policy of
    :func:`~sinkscope.streaming.cache.build_policies`.

    The streams are cut from ``token_stream``, the corpus tokenized by the model (rule
    tokenize_corpus), checked against ``corpus_provenance`` (:func:`load_streams`).
    ``params`` override :data:`sinkscope.defaults.STREAMING_PARAMS`; ``model_name``/
    ``dataset_name`` default to the folder names (``results/models/{model}``,
    ``results/corpora/{dataset}/documents.json``). The model is loaded in ``dtype``
    (``models.<name>.dtype``; None: the dtype it was prepared in) with ``attn_implementation``
    on ``device`` (``extraction.device``, resolved by
    :func:`~sinkscope.prepare.models.pick_device`) and switched to
    :func:`~sinkscope.streaming.cache.streaming_attention_forward` (eager math plus the policy
    mask and sink rotation). ``policy_batch``: policies per forward
    (:meth:`~sinkscope.streaming.evaluator.StreamingEvaluator.run_batch`; None: the device's
    default, :data:`~sinkscope.streaming.evaluator.BATCHING`).

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
    * ``settings``: one row with the resolved parameters (JSON, with the model's dtype and the
      device type) and stream offsets.

    The re-computation baseline is :func:`~sinkscope.streaming.recompute.recompute_pair` (it
    reads ``nll_by_position``).
    """
    import json

    from sinkscope.prepare.models import pick_device

    p = {**STREAMING_PARAMS, **dict(params or {})}
    model_name, dataset_name = pair_names(p, prepared_model_dir, corpus_provenance)
    threads_before = torch.get_num_threads()
    if p["threads"]:
        torch.set_num_threads(int(p["threads"]))
    try:
        resolved = pick_device(device)
        streams = load_streams(
            prepared_model_dir,
            token_stream,
            corpus_provenance,
            p,
            dtype=dtype,
            attn_implementation=attn_implementation,
            device=resolved,
        )
        neutral_id = _resolve_neutral_token(streams.tokenizer, p["neutral_token"])
        ids, length = streams.ids, int(p["stream_length"])
        evaluator = StreamingEvaluator(
            streams.model, chunk_size=int(p["chunk_size"]), device=resolved
        )
        policies = build_policies(p, length)
        batch = int(policy_batch or batching_for(resolved).policies)
        tables = _evaluate_policies(evaluator, ids, policies, neutral_id, p, batch)
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
    return {name: with_names(frame, model_name, dataset_name) for name, frame in tables.items()}


def _evaluate_policies(
    evaluator: StreamingEvaluator,
    ids: torch.Tensor,
    policies: Sequence[Policy],
    neutral_id: int,
    p: Mapping[str, Any],
    policy_batch: int = 1,
) -> dict[str, pl.DataFrame]:
    """The tables of :func:`evaluate_pair` from the evaluator's runs: dense first (recorded, the
    snapshot every other policy starts from), then the others ``policy_batch`` at a time
    (:func:`_policy_batches`), then the layer ablation."""
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
    others = [policy for policy in policies if policy.kind != "dense"]
    for group in _policy_batches(others, policy_batch):
        runs = evaluator.run_batch(ids, group, snapshot=dense.cache, neutral_states=neutral_states)
        results.update({policy.name: run for policy, run in zip(group, runs, strict=True)})
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
        "layer_ablation": _layer_ablation(evaluator, ids, dense, p, policy_batch),
    }


def _policy_batches(policies: Sequence[Policy], size: int) -> list[list[Policy]]:
    """``policies`` in batches of at most ``size``, in order of their first eviction (a batch
    starts at its earliest ``t0``: neighbours in ``t0`` waste the fewest dense queries)."""
    if size < 1:
        raise ValueError(f"policy_batch must be at least 1, not {size}")
    ordered = sorted(policies, key=lambda policy: policy.first_eviction or 0)
    return [ordered[lo : lo + size] for lo in range(0, len(ordered), size)]


def _layer_ablation(
    evaluator: StreamingEvaluator,
    ids: torch.Tensor,
    dense: RunResult,
    p: Mapping[str, Any],
    policy_batch: int = 1,
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
    snapshot = _rows(dense.cache, n_streams)
    policies = [
        Policy(
            f"window_L{window}_layer{layer}", "window", 0, window, p["positions"], layers=(layer,)
        )
        for layer in range(evaluator.n_layers)
    ]
    runs: dict[str, RunResult] = {}
    for group in _policy_batches(policies, policy_batch):
        batch = evaluator.run_batch(sub, group, snapshot=snapshot)
        runs.update({policy.name: run for policy, run in zip(group, batch, strict=True)})
    rows = []
    for layer, policy in enumerate(policies):
        run = runs[policy.name]
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
    view = StreamingCache(cache.layer_policies, cache.inv_freqs, record=True, device=cache.device)
    for target, source in zip(view.layers, cache.layers, strict=True):
        if source.prefix_length != source.end:
            raise ValueError("a snapshot view needs a recorded cache (every entry from position 0)")
        target.load(source.keys[:n_rows], source.values[:n_rows], source.end)
    return view
