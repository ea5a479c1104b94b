"""Oversmoothing analysis of single attention heads (paper §5, Theorem 5.1, App. B.2, App. E.1).

For every layer, head and context length ``T'``: the average cosine similarity of the tokens
before and after one head's attention update under its learned attention, no mixing and uniform
causal attention, compared with Theorem 5.1's closed-form approximation; the cross-pair summary,
the bases of the §5 claims and the figures (Figs. 2, 4-11).

* :mod:`.names` - table, figure and column names (torch-free; read by :mod:`sinkscope.paths`).
* :mod:`.theory` - ``rho``, uniformity ``u`` and Theorem 5.1's closed forms (traces, ``rho_hat``).
* :mod:`.moments` - batch estimates of the token moments ``zbar, Sigma_V, Sigma_C, beta``.
* :mod:`.post_norm` - the gain fit of a post-attention RMSNorm (Gemma 2/3).
* :mod:`.layer` - one layer's per-head and per-layer quantities, block by block.
* :mod:`.analysis` - one activation file: reading, passes and the per-pair tables
  (``analyze_file``; its docstring states the modelling decisions).
* :mod:`.summary` - the figure/claim bases and the cross-pair summary (``summarize``).
* :mod:`.panel_layout` - panel layout and axis helpers of the figures.
* :mod:`.plots` - the figures (``plot_*``; ``figures``: the rules' figures by name).

Nothing is imported here: importing :mod:`.names` does not import torch.
"""
