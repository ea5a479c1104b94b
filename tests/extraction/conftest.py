"""Helpers shared by the extraction tests: a plain forward of a model with capture hooks."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.hooks import RemovableHandle


def forward_with_hooks(
    model: torch.nn.Module, ids: np.ndarray, handles: list[RemovableHandle]
) -> None:
    """One forward of ``model`` on the token ids ``ids`` (no gradients, no cache) while the hooks
    ``handles`` are registered; they are removed afterwards, also when the forward fails, so the
    model runs unhooked in the next test."""
    try:
        with torch.no_grad():
            model(torch.as_tensor(ids, dtype=torch.long), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
