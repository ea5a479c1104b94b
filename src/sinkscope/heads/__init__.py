"""Head pattern labelling: sink, diagonal and sink+previous heads (paper §3, §7, Remark C.4).

Each head of each layer is labelled by the relative attention mass on BOS, on the main diagonal
and on the lower-1 diagonal (the definitions and the thresholds are in :mod:`.classify`); the
cross-pair summary gives the paper's percentages per model and dataset and pooled over datasets.

* :mod:`.names` - class labels, table columns, figure names, the pooled dataset.
* :mod:`.classify` - the masses, the flags and labels, the per-pair tables
  (:func:`~sinkscope.heads.classify.classify_file`).
* :mod:`.summary` - pooling over datasets and the cross-pair summary
  (:func:`~sinkscope.heads.summary.summarize`).
* :mod:`.plots` - the figures (mass heatmaps, class maps, summary bars).

No imports here: importing :mod:`.names` does not load numpy or torch.
"""
