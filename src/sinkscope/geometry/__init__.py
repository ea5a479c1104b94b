"""Geometry of the attention input: BOS alignment, sink representability, value ranks, switches.

Three analyses of the paper's geometric claims, each streamed over the layers of one activation
file and, within a layer, over blocks of sequences: the alignment of BOS with the other tokens
(§4, Figure 1), the representability of a sink (Proposition 4.1, Appendix A; also on long
sequences, where the test can fail), the rank of the value matrices (Appendix E.2, Figure 12) and
the hard attention switch (§6, Proposition 6.1, Remark C.4: BOS value-output norms of sink heads,
massive BOS activations).

* :mod:`.names` - table and figure names, point sets, statement bases, the pooled dataset.
* :mod:`.alignment` - BOS cosines, their exact histograms and quantiles, Figure 1's readings.
* :mod:`.halfspace_solver` - the exact half-space test of one point set (Lawson-Hanson active
  set): certified bracket, time budget, Wendel's and a Gaussian null.
* :mod:`.halfspace` - the half-space tables per layer, representability counts in words.
* :mod:`.long_context` - the model forward and the half-space test on long sequences.
* :mod:`.values` - value ranks, BOS value-output and residual norms, the sink / other effect.
* :mod:`.analysis` - :func:`~sinkscope.geometry.analysis.analyze_file`: every per-pair table.
* :mod:`.summary` - :func:`~sinkscope.geometry.summary.summarize`: the cross-pair summary.
* :mod:`.plots` - the figures.

No imports here: importing a light submodule (``names``, ``alignment``) does not load torch.
"""
