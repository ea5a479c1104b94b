"""Training-dynamics experiments of the value-softmax polarization paper.

* :mod:`.value_softmax` - gradient flow of ``L(V phi(a))`` (Theorem 3.3, Figures 2, 3, 10-13).
* :mod:`.induction` - the induction task with Table 1's attention functions and the share of
  layer-2 sink heads (Figures 1, 4, 8, 14-17, Tables 1-2).
* :mod:`.classification` - the classification task and adversarial one-token flips (Table 3,
  Figures 5, 6, 9, 18-21).
* :mod:`.attention` - the attention functions of Table 1.
* :mod:`.common` - the transformer block both tasks use.
* :mod:`.switches` - other ways for a softmax head to switch off than a sink: a learned sink
  logit, an output gate, softpick, a key/value bias slot (the prediction of §6, Proposition 6.1: another switch replaces the sink).
* :mod:`.grids` - the job grids, defaults, spec values and run ids (torch-free: the workflow
  parses them).
* :mod:`.names` - the parts and the table and figure names of each (no imports: read by
  :mod:`sinkscope.paths`).
* :mod:`.plots` - the figures (``plot_*(tables, out_png)``; import them from there).

One ``run_*(spec)`` call is one job; ``*_grid(scale, overrides)`` lists the jobs of a scale
("default" for 2 CPU cores, "paper" for the paper's sizes), each spec with a stable string ``id``;
``summarize_*`` concatenates the per-run tables. Import each from its module: this package
imports nothing, so that reading :mod:`.grids` does not load torch.
"""
