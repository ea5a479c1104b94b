"""Batches and devices of the extraction: how many sequences one forward holds (a memory budget
on the CPU, a share of the free memory on a GPU), whether writing overlaps the next batch, how
many threads compress, and the wall seconds per stage (``extraction_profile``)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

log = logging.getLogger(__name__)

__all__ = [
    "CPU_BATCH_BUDGET_BYTES",
    "GPU_FREE_MEMORY_FRACTION",
    "StageClock",
    "auto_batch_size",
    "batch_bytes_per_sequence",
    "compression_threads",
    "resolve_batch_size",
    "resolve_overlap",
]


# bytes one batch may hold: on the CPU a fixed budget (the host arrays of a batch), on a GPU this
# fraction of the free device memory (the forward's activations, all layers' attention maps)
CPU_BATCH_BUDGET_BYTES = 1 << 30


GPU_FREE_MEMORY_FRACTION = 0.5


def batch_bytes_per_sequence(shape: Any, t1: int, forward_bytes: int = 4) -> int:
    """Memory one sequence takes during an extraction forward, in bytes (an upper estimate).

    ``output_attentions`` keeps every layer's maps, ``L·H·T1²``, and eager attention holds the
    scores and probabilities of one layer at a time (``2·H·T1²``); ``output_hidden_states`` keeps
    ``(L + 1)·T1·D``, the residual-update hook ``L·T1·D``, and one more ``T1·D`` row stands for
    the layer being computed.
    """
    maps = (shape.n_layers + 2) * shape.n_heads * t1 * t1
    rows = 2 * (shape.n_layers + 1) * t1 * shape.d_model
    return forward_bytes * (maps + rows)


def auto_batch_size(shape: Any, t1: int, n_sequences: int, device: str) -> int:
    """``extraction.batch_size: auto``: as many sequences as fit the memory budget, at most N.

    CPU: :data:`CPU_BATCH_BUDGET_BYTES` (larger batches do not run faster there: the matrix
    products are already large enough to keep the cores busy). GPU: half the free device memory,
    so that the next batch's forward fits beside the host copies in flight.
    """
    per_sequence = batch_bytes_per_sequence(shape, t1)
    if device.startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        budget = int(free * GPU_FREE_MEMORY_FRACTION)
    else:
        budget = CPU_BATCH_BUDGET_BYTES
    return int(max(1, min(n_sequences, budget // max(per_sequence, 1))))


def resolve_batch_size(requested: int | str, shape: Any, t1: int, n_seq: int, device: str) -> int:
    if requested == "auto":
        return auto_batch_size(shape, t1, n_seq, device)
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ValueError(
            f"extraction.batch_size must be a positive integer or 'auto', got {requested!r}"
        )
    return requested


def resolve_overlap(requested: str, device: str) -> bool:
    if requested not in ("auto", "on", "off"):
        raise ValueError(
            f"extraction.overlap_writes must be 'auto', 'on' or 'off', got {requested!r}"
        )
    return device.startswith("cuda") if requested == "auto" else requested == "on"


@dataclass
class StageClock:
    """Wall seconds per extraction stage, summed over batches (``extraction_profile``).

    On a GPU the clock synchronises the device at stage boundaries, so that asynchronous kernels
    are charged to the stage that launched them.
    """

    device: str
    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        cuda = self.device.startswith("cuda")
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        try:
            yield
        finally:
            if cuda:
                torch.cuda.synchronize()
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds


def compression_threads() -> int:
    """Threads that compress chunks: torch's thread count (the rule's ``threads``), at most the
    cores this process may use."""
    return max(1, min(torch.get_num_threads(), len(os.sched_getaffinity(0))))
