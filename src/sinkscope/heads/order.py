"""The place of the pooled pseudo-dataset (:data:`~sinkscope.labels.POOLED`, ``"all"``) in
every summary table and figure: datasets sorted by name, the pooled one last.

Stated once here for every stage and for :mod:`sinkscope.claims`; polars only (no numpy, h5py or
torch), so that importing the claims stays light.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from sinkscope.labels import POOLED

__all__ = ["dataset_order", "sort_pooled_last"]


def _pooled_last(name: str) -> tuple[bool, str]:
    """Sort key of a dataset name: by name, :data:`POOLED` after every other."""
    return name == POOLED, name


def dataset_order(datasets: Sequence[str]) -> list[str]:
    """Distinct dataset names, sorted, the pooled ``"all"`` (:data:`POOLED`) last: the order of
    every summary's rows (:func:`sort_pooled_last`) and every figure's facets."""
    return sorted(set(datasets), key=_pooled_last)


def sort_pooled_last(frame: pl.DataFrame, *then: str, maintain_order: bool = False) -> pl.DataFrame:
    """``frame`` sorted by ``model``, then ``dataset`` with the pooled ``"all"`` last (the order
    of :func:`dataset_order`), then by the columns ``then``; ``maintain_order`` keeps the input
    order of rows that tie on every key."""
    return frame.sort(
        "model", pl.col("dataset") == POOLED, "dataset", *then, maintain_order=maintain_order
    )
