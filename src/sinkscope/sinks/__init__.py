"""Sinks beyond BOS: the community's sink metric, secondary sinks and massive activations.

Three analyses of one activation file that the paper's BOS-mass classes do not cover, so that
sinkscope's numbers line up with published sink studies:

* :mod:`.names` - table and figure names.
* :mod:`.rate` - the sink score and sink rate of Gu et al. (ICLR 2025, "When Attention Sink
  Emerges in Language Models"), per key position, layer and threshold.
* :mod:`.secondary` - secondary sinks: positions after BOS whose score exceeds the threshold in
  some head, their tokens, layer span, residual norm and cosine with BOS.
* :mod:`.massive` - massive activations (Sun et al. 2024, "Massive Activations in Large Language
  Models"): the largest residual-stream entries per layer relative to the layer's median.
* :mod:`.analysis` - :func:`~sinkscope.sinks.analysis.analyze_file`: every per-pair table.
* :mod:`.summary` - :func:`~sinkscope.sinks.summary.summarize`: the cross-pair summary.
* :mod:`.plots` - the figures.

No imports here: importing ``names`` does not load numpy.
"""
