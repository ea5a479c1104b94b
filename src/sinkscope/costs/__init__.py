"""§7 of the paper: minimum l2 costs of sink vs diagonal attention blocks.

* :mod:`.toy` - the nuclear-norm toy on ``X = I_{T+1}``.
* :mod:`.qk_convex` - certified minimum-nuclear-norm query-key matrices under enumerated margins.
* :mod:`.fitting` - the augmented-Lagrangian value/MLP fits and balanced factorisations.
* :mod:`.backcopy` - the backcopy task of Theorem 7.1 (Figure 3 left): the task, its attention
  patterns and margin programs, the sink construction of the proof.
* :mod:`.backcopy_runs` - minimum-cost sink and diagonal blocks on it (one run per job) and the
  end-to-end check of the decomposition.
* :mod:`.condition3` - condition (3) of Theorem 7.1, on a grid and beside the measured costs.
* :mod:`.copypaste` - the generic copy-paste task of Theorem 7.2 / D.1 (Figure 3 right).
* :mod:`.summary` - log-log slopes of the measured costs and the sink's advantage.
* :mod:`.plots` - the figures.

The grids of the runs are the config's ``costs`` section (``workflow/schemas/config.schema.yaml``;
its defaults run on 2 CPU cores in minutes, ``config/paper.yaml`` sets the paper's).
"""
