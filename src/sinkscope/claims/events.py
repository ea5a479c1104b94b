"""Known events of a model's depth that a failing per-head check may coincide with: the layer
where BOS's residual norm jumps, and the massive-activation onset (Sun et al. 2024).

Both index the residual stream *entering* a layer (``residual/X``), the stream the layer's
heads read, so a failing head of layer ``l`` coincides with an event at layer ``l``.

* :func:`bos_norm_jumps`: per pair, the layer ``l >= 1`` with the largest rise of BOS's
  relative residual norm over layer ``l - 1`` (the ``bos_residual_norm`` summary of
  :mod:`sinkscope.geometry`, ``rel_bos_norm``: BOS's norm over the median token's).
* :func:`massive_onsets`: per pair, the first layer with a massive entry (the ``massive_onset``
  summary of :mod:`sinkscope.sinks`).
* :func:`coincidence`: the sentence a claim's reason appends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from sinkscope.labels import POOLED

__all__ = [
    "LayerEvents",
    "bos_norm_jumps",
    "coincidence",
    "events_by_pair",
    "layer_events",
    "massive_onsets",
]

Pair = tuple[str, str]


@dataclass(frozen=True)
class LayerEvents:
    """The known events of one pair: the BOS norm jump (layer, and the relative norm before and
    after it) and the massive-activation onset layer; None where unknown."""

    jump_layer: int | None = None
    jump_from: float | None = None
    jump_to: float | None = None
    massive_onset: int | None = None
    #: the jump is the model's pooled over datasets (the summary pools BOS's norm per model)
    jump_pooled: bool = False


def bos_norm_jumps(bos_residual_norm: pl.DataFrame) -> dict[Pair, tuple[int, float, float]]:
    """Per (model, dataset): ``(layer, before, after)``, the layer whose ``rel_bos_norm`` rises
    most over the previous layer's (a ratio), with the two relative norms."""
    jumps: dict[Pair, tuple[int, float, float]] = {}
    table = bos_residual_norm.select("model", "dataset", "layer", "rel_bos_norm").sort(
        "model", "dataset", "layer"
    )
    for (model, dataset), part in table.group_by("model", "dataset", maintain_order=True):
        norms = part["rel_bos_norm"].to_list()
        layers = part["layer"].to_list()
        rises = [
            (after / before, layer, before, after)
            for layer, before, after in zip(layers[1:], norms, norms[1:], strict=False)
            if before and before > 0 and after is not None
        ]
        if rises:
            _, layer, before, after = max(rises)
            jumps[(str(model), str(dataset))] = (int(layer), float(before), float(after))
    return jumps


def massive_onsets(massive_onset: pl.DataFrame) -> dict[Pair, int]:
    """Per (model, dataset): the first layer with a massive entry; the pooled dataset
    (:data:`~sinkscope.labels.POOLED`) gets it where all the model's datasets agree."""
    onsets: dict[Pair, int] = {}
    table = massive_onset.filter(pl.col("first_layer").is_not_null())
    for r in table.iter_rows(named=True):
        onsets[(str(r["model"]), str(r["dataset"]))] = int(r["first_layer"])
    for model in {m for m, _ in onsets}:
        layers = {layer for (m, d), layer in onsets.items() if m == model and d != POOLED}
        if len(layers) == 1:
            onsets.setdefault((model, POOLED), layers.pop())
    return onsets


def layer_events(
    bos_residual_norm: pl.DataFrame | None, massive_onset: pl.DataFrame | None
) -> dict[Pair, LayerEvents]:
    """Both events per pair, from whichever of the two summary tables is given; a pair without
    its own BOS norms takes its model's pooled ones (the geometry summary pools them)."""
    jumps = bos_norm_jumps(bos_residual_norm) if bos_residual_norm is not None else {}
    onsets = massive_onsets(massive_onset) if massive_onset is not None else {}
    events = {}
    for pair in set(jumps) | set(onsets):
        pooled = pair not in jumps and (pair[0], POOLED) in jumps
        layer, before, after = jumps.get(pair, jumps.get((pair[0], POOLED), (None, None, None)))
        events[pair] = LayerEvents(layer, before, after, onsets.get(pair), pooled)
    return events


def coincidence(layers: Iterable[int], events: LayerEvents | None) -> str:
    """Whether the failing ``layers`` coincide with the pair's known events, in words ("" when
    no event is known): "layer 1 is where BOS's relative residual norm jumps (x1 to x27.5 of
    the median token's) and where massive activations start", or "BOS's relative residual
    norm jumps at layer 3 (...), not a failing layer"."""
    if events is None:
        return ""
    failing = set(layers)
    said: list[tuple[int, str, str]] = []  # (layer, text where it coincides, text where not)
    if events.jump_layer is not None:
        size = f"(x{events.jump_from:.3g} to x{events.jump_to:.3g} of the median token's"
        size += ", pooled over datasets)" if events.jump_pooled else ")"
        said.append(
            (
                events.jump_layer,
                f"where BOS's relative residual norm jumps {size}",
                f"BOS's relative residual norm jumps at layer {events.jump_layer} {size}",
            )
        )
    if events.massive_onset is not None:
        said.append(
            (
                events.massive_onset,
                "where massive activations start",
                f"massive activations start at layer {events.massive_onset}",
            )
        )
    hits: dict[int, list[str]] = {}
    misses = []
    for layer, hit, miss in said:
        if layer in failing:
            hits.setdefault(layer, []).append(hit)
        else:
            misses.append(miss)
    parts = [f"layer {layer} is {' and '.join(texts)}" for layer, texts in sorted(hits.items())]
    if misses:
        parts.append(
            f"{' and '.join(misses)}, {'not a failing layer' if len(misses) == 1 else 'neither a failing layer'}"
        )
    return "; ".join(parts)


def events_by_pair(tables: Mapping[str, pl.DataFrame]) -> dict[Pair, LayerEvents]:
    """:func:`layer_events` from the claims' input tables (``geometry_bos_residual_norm``,
    ``sinks_massive_onset``; either may be absent)."""
    return layer_events(tables.get("geometry_bos_residual_norm"), tables.get("sinks_massive_onset"))
