"""Training-dynamics experiments of the value-softmax polarization paper.

* :mod:`.value_softmax` - gradient flow of ``L(V phi(a))`` (Theorem 3.3, Figures 2, 3, 10-13).
* :mod:`.induction` - the induction task with Table 1's attention functions and the share of
  layer-2 sink heads (Figures 1, 4, 8, 14-17, Tables 1-2).
* :mod:`.classification` - the classification task and adversarial one-token flips (Table 3,
  Figures 5, 6, 9, 18-21).
* :mod:`.common` - the attention functions and transformer block both tasks use.
* :mod:`.switches` - other ways for a softmax head to switch off than a sink: a learned sink
  logit, an output gate, softpick, a key/value bias slot (issue 20).
* :mod:`.grids` - the job grids, defaults and run ids (torch-free: the workflow parses them).
* :mod:`.plots` - the figures (``plot_*(tables, out_png)``; import them from there).

One ``run_*(spec)`` call is one job; ``*_grid(scale, overrides)`` lists the jobs of a scale
("default" for 2 CPU cores, "paper" for the paper's sizes), each spec with a stable string ``id``;
``summarize_*`` concatenates the per-run tables.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> submodule. Imported on first use, so that ``sinkscope.dynamics.grids`` (parsed
#: by the workflow on every call) does not import torch through this package.
_LAZY = {
    "classification_grid": "grids",
    "induction_grid": "grids",
    "value_softmax_grid": "grids",
    "dynamics_jobs": "grids",
    "run_classification": "classification",
    "summarize_classification": "classification",
    "run_induction": "induction",
    "summarize_induction": "induction",
    "run_value_softmax": "value_softmax",
    "summarize_value_softmax": "value_softmax",
}

__all__ = [
    "classification_grid",
    "dynamics_jobs",
    "induction_grid",
    "run_classification",
    "run_induction",
    "run_value_softmax",
    "summarize_classification",
    "summarize_induction",
    "summarize_value_softmax",
    "value_softmax_grid",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
