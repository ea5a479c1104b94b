"""Extraction of activations to HDF5: the workflow's GPU rule (it runs on CPU where none is seen).

For every layer ``l`` the file receives the residual stream entering the layer (``X``), the normed
attention input (``Z``), the attention probabilities per head (``A``), the value vectors per key/value
head and the attention block's update of the residual stream; once per file, the per-head value and
output maps (``W_V``, ``W_O``) and the input-norm gains. The layout is defined in
:mod:`sinkscope.h5layout`.

The forward pass runs the transformer body only (no full-vocabulary logits) with eager attention,
in batches; ``X`` comes from ``output_hidden_states``, ``A`` from ``output_attentions``, and ``Z``,
the values and the post-attention residual from forward hooks on the layer's input norm, value
projection and pre-MLP norm. Everything is copied to the host and written batch by batch into
chunked, compressed datasets (one chunk per layer x sequence), so memory stays at one batch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from tqdm import tqdm

from sinkscope import __version__
from sinkscope import h5layout as layout
from sinkscope.io import atomic_path, sha256_json
from sinkscope.models import (
    architecture_of,
    base_model,
    decoder_layers,
    load_model,
    model_shape,
    per_head_value_output,
    read_provenance,
)
from sinkscope.tokens import read_tokens

log = logging.getLogger(__name__)

FLOAT16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class ExtractionSettings:
    """The ``extraction`` section of the config that affects the file's contents."""

    batch_size: int
    storage_dtypes: Mapping[str, str]
    compression_level: int
    device: str = "auto"


def pick_device(requested: str) -> str:
    """``auto`` takes the GPU where one is visible and falls back to the CPU."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"extraction.device = {requested!r} but no CUDA device is visible")
    return requested


@dataclass
class LayerCapture:
    """Per-layer tensors captured by forward hooks during one batch."""

    z: list[torch.Tensor | None]
    values: list[torch.Tensor | None]
    mid_residual: list[torch.Tensor | None]


@contextlib.contextmanager
def capture_hooks(model: torch.nn.Module) -> Iterator[LayerCapture]:
    """Register hooks that keep each layer's normed input, value vectors and mid residual."""
    arch = architecture_of(model)
    layers = decoder_layers(model)
    capture = LayerCapture([None] * len(layers), [None] * len(layers), [None] * len(layers))
    handles = []
    for index, layer in enumerate(layers):

        def keep_z(_module, _inputs, output, index=index):
            capture.z[index] = output.detach()

        def keep_mid(_module, inputs, _output, index=index):
            capture.mid_residual[index] = inputs[0].detach()

        handles.append(getattr(layer, arch.input_norm).register_forward_hook(keep_z))
        handles.append(getattr(layer, arch.pre_mlp_norm).register_forward_hook(keep_mid))
        if not arch.fused_qkv:

            def keep_v(_module, _inputs, output, index=index):
                capture.values[index] = output.detach()

            handles.append(layer.self_attn.v_proj.register_forward_hook(keep_v))
    try:
        yield capture
    finally:
        for handle in handles:
            handle.remove()


def _to_storage(array: np.ndarray, dtype: str, name: str) -> np.ndarray:
    if dtype == "float16":
        peak = float(np.max(np.abs(array))) if array.size else 0.0
        if not np.isfinite(peak) or peak > FLOAT16_MAX:
            raise OverflowError(
                f"{name}: values up to {peak:.3g} do not fit float16; set the matching "
                "extraction.storage_dtypes entry to float32"
            )
    return array.astype(dtype, copy=False)


def _create_datasets(
    handle: h5py.File, sizes: Mapping[str, int], settings: ExtractionSettings
) -> dict[str, h5py.Dataset]:
    created = {}
    for spec in layout.DATASETS:
        dtype = spec.fixed_dtype or settings.storage_dtypes[spec.dtype_key]
        kwargs: dict[str, Any] = {}
        if settings.compression_level > 0:
            kwargs = {
                "compression": "gzip",
                "compression_opts": settings.compression_level,
                "shuffle": True,
            }
        dataset = handle.create_dataset(
            spec.name,
            shape=layout.dataset_shape(spec, sizes),
            dtype=dtype,
            chunks=layout.chunk_shape(spec, sizes),
            **kwargs,
        )
        dataset.attrs["description"] = spec.description
        dataset.attrs["axes"] = ",".join(spec.axes)
        dataset.attrs["symbol"] = spec.symbol
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


def extract_activations(
    prepared_model_dir: Path,
    tokens_json: Path,
    out_h5: Path,
    model_entry: Mapping[str, Any],
    settings: ExtractionSettings,
    config_sha256: str,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the model on the cut sequences and write the activation file ``out_h5``.

    The file is written to a temporary name and renamed on success; the ``complete`` attribute is
    set last. Returns the file's root attributes.
    """
    token_ids, token_record = read_tokens(tokens_json)
    provenance = read_provenance(prepared_model_dir)
    device = pick_device(settings.device)
    model = load_model(
        prepared_model_dir, model_entry["dtype"], model_entry["attn_implementation"], device=device
    )
    used_impl = model.config._attn_implementation
    if used_impl != "eager":
        raise RuntimeError(
            f"transformers used attention implementation {used_impl!r}; attention probabilities "
            "need 'eager' (models.<name>.attn_implementation)"
        )
    arch = architecture_of(model)
    shape = model_shape(model.config)
    n_seq, t1 = token_ids.shape
    sizes = {
        "layer": shape.n_layers,
        "sequence": n_seq,
        "position": t1,
        "d_model": shape.d_model,
        "head": shape.n_heads,
        "kv_head": shape.n_kv_heads,
        "query": t1,
        "key": t1,
        "head_dim": shape.head_dim,
    }
    attrs: dict[str, Any] = {
        "format": layout.FORMAT,
        "schema_version": layout.SCHEMA_VERSION,
        "sinkscope_version": __version__,
        "model_name": provenance["model_name"],
        "model_source": json.dumps(provenance["source"], sort_keys=True),
        "model_sha256": provenance["content_sha256"],
        "model_class": type(model).__name__,
        "model_type": model.config.model_type,
        "dtype": model_entry["dtype"],
        "attn_implementation": used_impl,
        "device": device,
        "library_versions": json.dumps(library_versions(), sort_keys=True),
        "dataset_name": token_record["dataset_name"],
        "dataset_sha256": token_record["dataset_sha256"],
        "token_ids_sha256": token_record["token_ids_sha256"],
        "n_sequences": n_seq,
        "context_length": t1 - 1,
        "seed": token_record["seed"],
        "config_sha256": config_sha256,
        "n_layers": shape.n_layers,
        "n_heads": shape.n_heads,
        "n_kv_heads": shape.n_kv_heads,
        "head_dim": shape.head_dim,
        "d_model": shape.d_model,
        "bos_token_id": token_record["bos_token_id"],
        "post_attention_norm": arch.post_attention_norm,
    }
    started = time.perf_counter()
    with atomic_path(out_h5) as tmp, h5py.File(tmp, "w") as handle:
        for key, value in attrs.items():
            handle.attrs[key] = value
        datasets = _create_datasets(handle, sizes, settings)
        datasets["tokens/input_ids"][...] = token_ids
        _write_weights(model, datasets, shape.n_layers)
        body = base_model(model)
        batches = range(0, n_seq, settings.batch_size)
        bar = tqdm(
            batches,
            desc=f"extract {attrs['model_name']}/{attrs['dataset_name']}",
            unit="batch",
            disable=not progress,
            file=sys.stderr,
        )
        with capture_hooks(model) as capture, torch.inference_mode():
            for start in bar:
                stop = min(start + settings.batch_size, n_seq)
                ids = torch.as_tensor(token_ids[start:stop], dtype=torch.long, device=device)
                out = body(
                    input_ids=ids,
                    output_attentions=True,
                    output_hidden_states=True,
                    use_cache=False,
                )
                _write_batch(
                    out, capture, datasets, settings, shape, start, stop, arch.fused_qkv, model
                )
        handle.attrs["extraction_seconds"] = round(time.perf_counter() - started, 3)
        handle.attrs["complete"] = True
        final_attrs = dict(handle.attrs)
    log.info("wrote %s in %.1f s", out_h5, time.perf_counter() - started)
    return final_attrs


def _write_weights(
    model: torch.nn.Module, datasets: Mapping[str, h5py.Dataset], n_layers: int
) -> None:
    for index in range(n_layers):
        w_v, b_v, w_o, gain = per_head_value_output(model, index)
        for name, tensor in (
            ("weights/W_V", w_v),
            ("weights/b_V", b_v),
            ("weights/W_O", w_o),
            ("weights/norm_gain", gain),
        ):
            datasets[name][index] = tensor.cpu().numpy().astype(datasets[name].dtype)


def _write_batch(
    out: Any,
    capture: LayerCapture,
    datasets: Mapping[str, h5py.Dataset],
    settings: ExtractionSettings,
    shape: Any,
    start: int,
    stop: int,
    fused_qkv: bool,
    model: torch.nn.Module,
) -> None:
    dtypes = settings.storage_dtypes
    n_kv, hd = shape.n_kv_heads, shape.head_dim
    for index in range(shape.n_layers):
        x = out.hidden_states[index]
        z = capture.z[index]
        probs = out.attentions[index]
        if probs is None:
            raise RuntimeError("the model returned no attention probabilities (not eager?)")
        if fused_qkv:  # GPT-2: values from the stored per-head maps
            w_v, b_v, _, _ = per_head_value_output(model, index)
            group = shape.n_heads // n_kv
            values = torch.einsum("btd,khd->bkth", z.float(), w_v[::group].to(z.device))
            values = values + b_v[::group].to(z.device)[None, :, None, :]
        else:
            values = capture.values[index].reshape(stop - start, -1, n_kv, hd).transpose(1, 2)
        update = capture.mid_residual[index] - x
        rows = slice(start, stop)
        for name, tensor, key in (
            ("residual/X", x, "residual"),
            ("attention/Z", z, "activations"),
            ("attention/probs", probs, "attention"),
            ("attention/values", values, "activations"),
            ("attention/residual_update", update, "activations"),
        ):
            array = tensor.float().cpu().numpy()
            datasets[name][index, rows] = _to_storage(array, dtypes[key], f"{name} layer {index}")


def config_digest(*sections: Any) -> str:
    """sha256 of the config sections a file depends on (recorded, not used for rerun decisions)."""
    return sha256_json(list(sections))
