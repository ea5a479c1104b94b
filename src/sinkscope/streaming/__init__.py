"""StreamingLLM under KV-cache eviction: perplexity of dense, window-only, sink and neutral-sink
caches, sliding window with re-computation, and the attention mass on the first positions (the
companion study's attention-sink experiments; sink-vs-diagonal paper §1 and §4's sink heads as
predictors of the eviction damage).

* :mod:`.names` - the stage's table and figure names (torch-free: read by :mod:`sinkscope.paths`).
* :mod:`.cache` - the evicting KV cache: policies, RoPE re-rotation, the attention function.
* :mod:`.evaluator` - :class:`~.evaluator.StreamingEvaluator`, one model run under a policy.
* :mod:`.streams` - the token streams of one model x corpus pair, the tables' pair names.
* :mod:`.experiment` - the cache policies on one pair (rule ``analyze_streaming``).
* :mod:`.recompute` - caches vs sliding window with re-computation
  (``analyze_streaming_recompute``).
* :mod:`.first_positions` - attention mass on the first positions
  (``analyze_streaming_first_positions``).
* :mod:`.summary` - the tables across pairs and their correlations (``summarize_streaming``).
* :mod:`.plots` - the figures.
"""
