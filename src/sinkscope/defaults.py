"""Default parameters of the analyses that the config can override, in one torch-free module.

The config validator (:func:`sinkscope.config.validate_config`) checks the keys of
``costs.*.params``, ``costs.backcopy.end_to_end.params`` and ``streaming.params`` against these
dicts while Snakemake parses the workflow; keeping them here (no torch, no transformers) keeps
that parse fast (importing torch costs about 3 s of every ``snakemake`` call). The analysis
modules re-export them under their historical names (``DEFAULT_BACKCOPY_PARAMS``,
``DEFAULT_COPYPASTE_PARAMS``, none in ``sinkscope.streaming``, which reads ``STREAMING_PARAMS``
itself).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BACKCOPY_E2E_PARAMS", "BACKCOPY_PARAMS", "COPYPASTE_PARAMS", "STREAMING_PARAMS"]

#: Defaults of ``params`` for :func:`sinkscope.costs.backcopy_runs.run_backcopy` (config
#: ``costs.backcopy.params``; a run overrides any subset).
BACKCOPY_PARAMS: dict[str, Any] = {
    "n_dormant": 5,  # |D|
    "n_copy": 5,  # |C|
    "d_extra": 0,  # d = T + |D| + |C| + 2 + d_extra
    "kappa": 10.0,  # softmax margin, in units of the scores actually used
    "score_norm": "d",  # "d": extra 1/sqrt(d) normalisation (Figure 3); "sqrt_d": plain §3
    "mlp_width_factor": 2,  # hidden width = factor * d
    "fit_tol": 1e-5,  # required relative squared error of the block output (hard attention)
    "qk_gap_tol": 1e-2,  # target certified relative gap of the convex query-key program
    "qk_method": "bm",  # "bm" (L-BFGS inner solves) or "fista" (proximal, SVT)
    "qk_max_outer": 400,
    "qk_inner_iters": 200,
    "qk_rho": 1.0,
    "fit_restarts": 1,  # value/MLP restarts per run (best kept); seeds differ across runs
    "fit_penalties": [100.0, 1e3, 1e4, 1e5],  # augmented-Lagrangian penalty stages (relative error)
    "fit_lbfgs_iters": 400,  # L-BFGS iterations per stage
    "fit_extra_stages": 15,  # extra multiplier updates at the last penalty if not yet within tol
    "init_scale": 0.1,
    "attn_level": 0.99,  # an attention weight on the required key counts as "correct" above this
    "check_sequences": 256,  # random sequences for the soft-attention output check
    "threads": 1,  # torch intra-op threads for this run (one run = one job = one core)
}

#: The end-to-end check's own ``params``
#: (:func:`sinkscope.costs.backcopy_runs.run_backcopy_end_to_end` takes these over
#: :data:`BACKCOPY_PARAMS`; config ``costs.backcopy.end_to_end.params``, so that changing one
#: reruns only the end-to-end jobs).
BACKCOPY_E2E_PARAMS: dict[str, Any] = {
    "e2e_sequences": 2000,  # train on every sequence if there are at most this many, else sample
    "e2e_penalties": [100.0, 1e3, 1e4, 1e5],  # augmented-Lagrangian penalty stages
    "e2e_lbfgs_iters": 500,  # L-BFGS iterations per stage
    "e2e_qk_gap_tol": 2e-3,  # certified gap of the decomposition it is compared with (at most)
}


#: Defaults of ``params`` for :func:`sinkscope.costs.copypaste.run_copypaste`.
COPYPASTE_PARAMS: dict[str, Any] = {
    "C": 3,
    "d": 100,
    "T": 50,
    "phi": 0.0,
    "kappa": 10.0,
    "epsilon": 0.25,
    "score_norm": "sqrt_d",  # Theorem 7.2 / D.1 use the standard 1/sqrt(d) scores
    "mlp_width": 64,
    "mlp_rmsnorm": False,
    "fit_tol": 1e-5,  # relative squared distance of the outputs to the admissible label sets
    "fit_penalties": [100.0, 1e3, 1e4, 1e5],
    "fit_lbfgs_iters": 400,
    "fit_extra_stages": 15,
    "qk_gap_tol": 1e-3,
    "qk_method": "bm",
    "init_scale": 0.1,
    "fit_restarts": 1,  # value/MLP restarts (lowest cost among fits within fit_tol is kept)
    "qk_max_outer": 200,
    "threads": 1,
}


#: Defaults of :func:`sinkscope.streaming.experiment.evaluate_pair` and
#: :func:`sinkscope.streaming.recompute.recompute_pair` (every key may be overridden by
#: ``params``).
STREAMING_PARAMS: dict[str, Any] = {
    # streams: n_streams blocks of stream_length - 1 corpus tokens, BOS prepended (tokens.cut_sequences)
    "stream_length": 1024,
    "n_streams": 2,
    "seed": 0,
    # policies: window-only, sink and neutral at every window size with k = sink_count ...
    "window_sizes": [64, 128, 256, 512],
    "sink_count": 4,
    # ... and the effect of k: sink with every k in sink_counts, neutral with every k in
    # neutral_counts, at window k_sweep_window
    "sink_counts": [1, 2, 4, 8],
    "neutral_counts": [1, 4],
    "k_sweep_window": 128,
    # the kept first tokens' replacement: a string that is one token, an int id, or "pad"
    "neutral_token": "\n",
    # "cache" (StreamingLLM: positions within the cache) or "original" (ablation), and whether to
    # add one sink policy (sink_count, k_sweep_window) with the other position handling
    "positions": "cache",
    "position_ablation": True,
    # per-layer eviction (window-only in one layer at a time, the others dense) on the first
    # layer_ablation_length tokens of the first layer_ablation_streams streams, to relate the
    # damage to each layer's sink heads; None disables it
    "layer_ablation_window": 64,
    "layer_ablation_length": 512,
    "layer_ablation_streams": 1,
    # sliding window with re-computation (StreamingLLM's baseline; rule
    # analyze_streaming_recompute): for recompute_samples query positions per stream and window
    # size, evenly spaced over the evicting region, the last L tokens are re-encoded from scratch
    # and the next token scored, once with the BOS token in front ([BOS] + L tokens, positions
    # 0..L) and once without (positions 0..L-1, as in StreamingLLM); 0 disables. The claim
    # streaming.sinks_restore is decided on these queries (Fieller's interval of the recovered
    # fraction): a sink cache that recovers all of the excess against the 0.9 tolerance needs
    # about 16-64 of them on the default run's streams, 8 decided 2 of 24 rows
    "recompute_samples": 64,
    # engine
    "chunk_size": 256,
    # torch.set_num_threads during the run (None: leave as is). One thread: on a shared 2-core
    # machine two threads were 6x slower (oversubscription), one thread is never much slower.
    "threads": 1,
    # NLL averaged over the "tail" region: positions >= tail_start (None: max window + max k + 1)
    "tail_start": None,
}
