"""Writing an activation file (the twin of :mod:`.h5read`): datasets created as
:mod:`.h5layout` declares them, tensors cast to their storage dtypes and copied to the host,
chunks compressed by a thread pool and written with ``write_direct_chunk``, the per-head
weights, and the provenance attributes (library versions, the config digest)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h5py
import numpy as np
import torch

from sinkscope.extraction import h5codec
from sinkscope.extraction import h5layout as layout
from sinkscope.extraction.batching import StageClock
from sinkscope.extraction.introspection import LayerCapture, sink_probabilities
from sinkscope.extraction.settings import ExtractionSettings
from sinkscope.io import sha256_json
from sinkscope.prepare.models import (
    architecture_of,
    decoder_layers,
    per_head_value_output,
)

log = logging.getLogger(__name__)

__all__ = [
    "FLOAT16_MAX",
    "config_digest",
    "create_datasets",
    "host_arrays",
    "library_versions",
    "to_storage",
    "write_arrays",
    "write_weights",
]


FLOAT16_MAX = float(np.finfo(np.float16).max)


def to_storage(tensor: torch.Tensor, dtype: str, name: str) -> np.ndarray:
    """Cast on the device (float16 halves the bytes copied), then copy to the host."""
    if dtype == "float16" and tensor.numel():
        low, high = (float(v) for v in torch.aminmax(tensor))  # 5x faster than an inf-norm
        peak = max(-low, high)
        if not np.isfinite(peak) or peak > FLOAT16_MAX:
            raise OverflowError(
                f"{name}: values up to {peak:.3g} do not fit float16; set the matching "
                "extraction.storage_dtypes entry to float32"
            )
    return tensor.to(getattr(torch, dtype)).cpu().numpy()


def create_datasets(
    handle: h5py.File,
    sizes: Mapping[str, int],
    settings: ExtractionSettings,
    specs: tuple[layout.DatasetSpec, ...] = layout.DATASETS,
) -> dict[str, h5py.Dataset]:
    created = {}
    for spec in specs:
        dtype = spec.fixed_dtype or settings.storage_dtypes[spec.dtype_key]
        kwargs = h5codec.dataset_filters(*settings.dataset_codec(spec), np.dtype(dtype).itemsize)
        dataset = handle.create_dataset(
            spec.name,
            shape=layout.dataset_shape(spec, sizes),
            dtype=dtype,
            chunks=layout.chunk_shape(spec, sizes),
            **kwargs,
        )
        dataset.attrs[layout.ATTR_DESCRIPTION] = spec.description
        dataset.attrs[layout.ATTR_AXES] = ",".join(spec.axes)
        dataset.attrs[layout.ATTR_SYMBOL] = spec.symbol
        created[spec.name] = dataset
    return created


def library_versions() -> dict[str, str]:
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "h5py": h5py.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }


def write_weights(
    model: torch.nn.Module, datasets: Mapping[str, h5py.Dataset], n_layers: int
) -> None:
    arch = architecture_of(model)
    layers = decoder_layers(model)
    for index in range(n_layers):
        w_v, b_v, w_o, gain = per_head_value_output(model, index)
        norm_bias = getattr(getattr(layers[index], arch.input_norm), "bias", None)
        bias = torch.zeros_like(gain) if norm_bias is None else norm_bias.detach().float()
        for name, tensor in (
            (layout.WEIGHT_W_V, w_v),
            (layout.WEIGHT_B_V, b_v),
            (layout.WEIGHT_W_O, w_o),
            (layout.WEIGHT_NORM_GAIN, gain),
            (layout.WEIGHT_NORM_BIAS, bias),
        ):
            datasets[name][index] = tensor.cpu().numpy().astype(datasets[name].dtype)


def host_arrays(
    out: Any,
    capture: LayerCapture,
    settings: ExtractionSettings,
    n_layers: int,
    learned_sinks: bool = False,
) -> list[tuple[str, int, np.ndarray]]:
    """Every layer's tensors of one batch, cast to their storage dtypes and copied to the host
    (with ``learned_sinks``, also each head's sink probability per query,
    :func:`sink_probabilities`)."""
    dtypes = settings.storage_dtypes
    arrays: list[tuple[str, int, np.ndarray]] = []
    for index in range(n_layers):
        x = out.hidden_states[index]
        probs = out.attentions[index]
        if probs is None:
            raise RuntimeError("the model returned no attention probabilities (not eager?)")
        update = capture.mid_residual[index] - x
        for name, tensor, key in (
            (layout.RESIDUAL_X, x, "residual"),
            (layout.ATTENTION_PROBS, probs, "attention"),
            (layout.ATTENTION_RESIDUAL_UPDATE, update, "activations"),
        ):
            arrays.append((name, index, to_storage(tensor, dtypes[key], f"{name} layer {index}")))
        if learned_sinks:
            name = layout.ATTENTION_SINK_PROBS
            p_sink = sink_probabilities(probs)
            arrays.append(
                (name, index, to_storage(p_sink, dtypes["attention"], f"{name} layer {index}"))
            )
    return arrays


def write_arrays(
    datasets: Mapping[str, h5py.Dataset],
    arrays: list[tuple[str, int, np.ndarray]],
    start: int,
    settings: ExtractionSettings,
    pool: ThreadPoolExecutor,
    clock: StageClock,
) -> None:
    """Compress one batch's chunks in ``pool`` and write them (runs in the writer thread alone).

    Every chunk is one (layer, sequence) slice, so each sequence of ``array`` is a whole chunk.
    """
    started = time.perf_counter()
    jobs = []
    for name, index, array in arrays:
        dataset = datasets[name]
        if array.dtype != dataset.dtype or array.shape[1:] != dataset.chunks[2:]:
            raise RuntimeError(f"{name}: batch {array.dtype} {array.shape} does not fit {dataset}")
        codec = settings.dataset_codec(layout.spec_of(name))
        jobs += [(dataset, index, start + row, array[row], codec) for row in range(array.shape[0])]
    encoded = pool.map(lambda job: h5codec.encode_chunk(job[3], *job[4]), jobs)
    io_seconds = 0.0
    for (dataset, index, sequence, chunk, _codec), payload in zip(jobs, encoded, strict=True):
        io_started = time.perf_counter()
        offset = (index, sequence) + (0,) * (chunk.ndim)
        dataset.id.write_direct_chunk(offset, payload)
        io_seconds += time.perf_counter() - io_started
    clock.add("write", time.perf_counter() - started)
    clock.add("write_io", io_seconds)


def config_digest(*sections: Any) -> str:
    """sha256 of the config sections a file depends on (recorded, not used for rerun decisions)."""
    return sha256_json(list(sections))
