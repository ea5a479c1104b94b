"""Extraction of activations to HDF5: the workflow's GPU rule (it runs on CPU where none is seen).

For every layer ``l`` the file receives the residual stream entering the layer (``X``), the
attention probabilities per head (``A``) and the attention block's update of the residual stream;
once per file, the per-head value and output maps (``W_V``, ``W_O``), the input norms' gains and
biases and, as attributes, the norm's kind, epsilon and rounding (:func:`input_norm_settings`).
The normed attention input ``Z`` and the value vectors are not stored: they are functions of
``X`` and these weights, recomputed by :func:`sinkscope.extraction.h5read.read_Z` and
:func:`~sinkscope.extraction.h5read.read_values` (schema 2). The layout is defined in
:mod:`sinkscope.extraction.h5layout`.

Models whose heads have a learned sink logit (gpt-oss's ``self_attn.sinks``: one logit per head,
appended to every row's scores, softmaxed with them and dropped, so a row of ``A`` sums to
``1 - p_sink``; :func:`has_learned_sinks`) also get ``attention/sink_probs``, each head's ``p_sink``
per query (:func:`sink_probabilities`); other models' files have no such dataset.

The forward pass runs the transformer body only (no full-vocabulary logits) with eager attention,
in batches; ``X`` comes from ``output_hidden_states``, ``A`` from ``output_attentions``, and the
post-attention residual from a forward hook on the layer's pre-MLP norm. Everything is cast to its storage dtype on the device (half the
bytes to copy for float16), copied to the host and written batch by batch into chunked, compressed
datasets (one chunk per layer x sequence), so memory stays at one batch (two with overlapped
writes). The chunks are compressed by a pool of threads in the pipeline the datasets declare
(shuffle + Zstandard by default, :mod:`sinkscope.extraction.h5codec`) and written with
``write_direct_chunk``: HDF5 alone compresses one chunk at a time on one core (with gzip that
took as long as the forward itself on a CPU, ``BENCHMARKS.md``). On a GPU the host-side compression and writing of batch ``b`` run in a background thread
while batch ``b + 1`` is computed (``extraction.overlap_writes``); on the CPU both compete for the
same cores, so they run in turn (``bench/run.py`` measures both). The wall seconds of each stage
(forward, device-to-host copies, compression + writing) are stored in the file attribute
``extraction_profile``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from tqdm import tqdm

from sinkscope import __version__
from sinkscope.config_schema import schema_default
from sinkscope.extraction import h5codec, h5read
from sinkscope.extraction import h5layout as layout
from sinkscope.io import atomic_path, naming_a_full_disk, sha256_json
from sinkscope.prepare.models import (
    architecture_of,
    base_model,
    decoder_layers,
    load_model,
    model_shape,
    per_head_value_output,
    pick_device,
    read_provenance,
)
from sinkscope.prepare.tokens import read_tokens

log = logging.getLogger(__name__)

FLOAT16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class ExtractionSettings:
    """The ``extraction`` section of the config that affects the file's contents.

    ``batch_size``: sequences per forward pass, or ``"auto"`` (:func:`auto_batch_size`);
    ``overlap_writes``: ``"auto"`` (on for a GPU, off on the CPU), ``"on"`` or ``"off"``;
    ``codec`` and ``compression_level``: the HDF5 codec of the datasets (:mod:`sinkscope.extraction.h5codec`);
    ``uncompressed``: the kinds of tensor (keys of ``storage_dtypes``) stored without it
    (``()``: the codec applies to every dataset). ``codec`` and ``uncompressed`` default to the
    config schema's defaults.
    """

    batch_size: int | str
    storage_dtypes: Mapping[str, str]
    compression_level: int
    device: str = "auto"
    overlap_writes: str = "auto"
    codec: str = schema_default("extraction", "codec")
    uncompressed: tuple[str, ...] = tuple(schema_default("extraction", "uncompressed"))

    def dataset_codec(self, spec: layout.DatasetSpec) -> tuple[str, int]:
        """``(codec, level)`` of one dataset: ``("none", 0)`` for a kind in ``uncompressed``."""
        if spec.dtype_key in self.uncompressed:
            return "none", 0
        return self.codec, self.compression_level

    def describe_codecs(self) -> str:
        """The file's ``codec`` attribute, e.g. ``zstd(1); uncompressed: residual, activations``."""
        text = f"{self.codec}({self.compression_level})"
        return text + (
            f"; uncompressed: {', '.join(self.uncompressed)}" if self.uncompressed else ""
        )


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


@dataclass
class LayerCapture:
    """Per-layer tensors captured by forward hooks during one batch."""

    mid_residual: list[torch.Tensor | None]


@contextlib.contextmanager
def capture_hooks(model: torch.nn.Module) -> Iterator[LayerCapture]:
    """Register hooks that keep each layer's mid residual (the input of its pre-MLP norm)."""
    arch = architecture_of(model)
    layers = decoder_layers(model)
    capture = LayerCapture([None] * len(layers))
    handles = []
    for index, layer in enumerate(layers):

        def keep_mid(_module, inputs, _output, index=index):
            capture.mid_residual[index] = inputs[0].detach()

        handles.append(getattr(layer, arch.pre_mlp_norm).register_forward_hook(keep_mid))
    try:
        yield capture
    finally:
        for handle in handles:
            handle.remove()


def input_norm_settings(model: torch.nn.Module) -> dict[str, Any]:
    """File attributes ``input_norm``, ``input_norm_eps``, ``input_norm_cast`` of the model's
    attention input norms (:func:`sinkscope.extraction.h5read.input_norm` recomputes ``Z`` with them).

    ``torch.nn.LayerNorm`` (GPT-2) is ``"layer"`` (it rounds its output once: ``"after_gain"``);
    the RMS norms of Llama-style models and Gemma are ``"rms"``, and where they round in a 16-bit
    forward is measured, not assumed from the family (:func:`rms_norm_cast`). Every layer must
    agree.
    """
    arch = architecture_of(model)
    settings = []
    for layer in decoder_layers(model):
        norm = getattr(layer, arch.input_norm)
        if isinstance(norm, torch.nn.LayerNorm):
            if not norm.elementwise_affine:
                raise ValueError(f"{type(model).__name__}: a LayerNorm without gain")
            kind, eps, cast = "layer", float(norm.eps), "after_gain"
        else:
            eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
            if eps is None:
                raise ValueError(f"{type(norm).__name__}: cannot find the norm's epsilon")
            kind, cast = "rms", rms_norm_cast(norm, float(eps), arch.gain_offset)
        settings.append(
            {
                layout.ATTR_INPUT_NORM: kind,
                layout.ATTR_INPUT_NORM_EPS: float(eps),
                layout.ATTR_INPUT_NORM_CAST: cast,
            }
        )
    if any(entry != settings[0] for entry in settings):
        raise ValueError(f"{type(model).__name__}: the layers' input norms differ: {settings}")
    return settings[0]


def rms_norm_cast(norm: torch.nn.Module, eps: float, gain_offset: float) -> str:
    """Where an RMS norm module rounds in a 16-bit forward: ``"before_gain"`` (``LlamaRMSNorm``:
    ``w * norm(x).to(dtype)``) or ``"after_gain"`` (``Gemma3RMSNorm``: ``(norm(x) * (1 + w))
    .to(dtype)``), found by running a bfloat16 copy of the module on a fixed probe and comparing
    its output with :func:`sinkscope.extraction.h5read.input_norm` under each cast.

    The cast that reproduces the module (at least 99 % of the entries bit for bit, as the
    extraction tests require of ``Z``) is returned; when both do (a gain that rounding commutes
    with, e.g. all ones), they give the same ``Z`` and the first is returned. A norm that neither
    reproduces raises ValueError naming its class.
    """
    module = copy.deepcopy(norm).to(device="cpu", dtype=torch.bfloat16)  # the probe's device
    weight = getattr(module, "weight", None)
    if weight is None:
        raise ValueError(f"{type(norm).__name__}: an RMS norm without gain")
    gain = weight.detach().float().numpy() + gain_offset
    generator = torch.Generator().manual_seed(0)
    probe = (4 * torch.randn(64, gain.shape[0], generator=generator)).to(torch.bfloat16)
    with torch.no_grad():
        output = module(probe).float().numpy()
    x, bias = probe.float().numpy(), np.zeros_like(gain)
    agreement = {
        cast: float(
            np.mean(h5read.input_norm(x, gain, bias, "rms", eps, cast, "bfloat16") == output)
        )
        for cast in layout.NORM_CASTS
    }
    best = max(layout.NORM_CASTS, key=lambda cast: agreement[cast])  # first on a tie
    if agreement[best] < 0.99:
        raise ValueError(
            f"{type(norm).__name__}: no input_norm_cast reproduces its bfloat16 output "
            f"(agreement {agreement}); sinkscope.extraction.h5read.input_norm needs a new case"
        )
    return best


def has_learned_sinks(model: torch.nn.Module) -> bool:
    """Whether every layer's attention has a learned per-head sink logit: a tensor ``sinks`` of
    shape ``(H,)`` on its attention module (transformers' ``GptOssAttention``), which eager
    attention appends as one more column of each row's scores before the softmax and then drops.

    A model where only some layers have one is refused (the dataset is per layer).
    """
    n_heads = model_shape(model.config).n_heads
    found = []
    for layer in decoder_layers(model):
        attention = getattr(layer, "self_attn", None)
        sinks = getattr(attention, "sinks", None)
        found.append(isinstance(sinks, torch.Tensor) and tuple(sinks.shape) == (n_heads,))
    if any(found) and not all(found):
        raise ValueError(
            f"{type(model).__name__}: only layers {[i for i, f in enumerate(found) if f]} have "
            "learned attention sinks; sinkscope stores attention/sink_probs for all layers or none"
        )
    return bool(found) and all(found)


def sink_probabilities(probs: torch.Tensor) -> torch.Tensor:
    """Each row's probability of the learned sink, ``p_sink = 1 - sum_k A[q, k]``, for attention
    probabilities ``probs`` ``(B, H, T1, T1)`` whose sink column was dropped after the softmax
    (gpt-oss: ``softmax([scores, s_h])[..., :-1]``). Summed in float64, clamped to [0, 1] (float
    rounding of an almost-full row); shape ``(B, H, T1)``, float64.
    """
    return (1.0 - probs.to(torch.float64).sum(dim=-1)).clamp_(0.0, 1.0)


def _to_storage(tensor: torch.Tensor, dtype: str, name: str) -> np.ndarray:
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


def _create_datasets(
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
    learned_sinks = has_learned_sinks(model)
    specs = layout.DATASETS + (
        tuple(s for s in layout.CONDITIONAL_DATASETS if s.name == layout.ATTENTION_SINK_PROBS)
        if learned_sinks
        else ()
    )
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
        layout.ATTR_FORMAT: layout.FORMAT,
        layout.ATTR_SCHEMA_VERSION: layout.SCHEMA_VERSION,
        layout.ATTR_SINKSCOPE_VERSION: __version__,
        layout.ATTR_MODEL_NAME: provenance["model_name"],
        layout.ATTR_MODEL_SOURCE: json.dumps(provenance["source"], sort_keys=True),
        layout.ATTR_MODEL_SHA256: provenance["content_sha256"],
        layout.ATTR_MODEL_CLASS: type(model).__name__,
        layout.ATTR_MODEL_TYPE: model.config.model_type,
        layout.ATTR_DTYPE: model_entry["dtype"],
        layout.ATTR_ATTN_IMPLEMENTATION: used_impl,
        layout.ATTR_DEVICE: device,
        layout.ATTR_LIBRARY_VERSIONS: json.dumps(library_versions(), sort_keys=True),
        layout.ATTR_DATASET_NAME: token_record["dataset_name"],
        layout.ATTR_DATASET_SHA256: token_record["dataset_sha256"],
        layout.ATTR_TOKEN_IDS_SHA256: token_record["token_ids_sha256"],
        layout.ATTR_N_SEQUENCES: n_seq,
        layout.ATTR_CONTEXT_LENGTH: t1 - 1,
        layout.ATTR_SEED: token_record["seed"],
        layout.ATTR_CONFIG_SHA256: config_sha256,
        layout.ATTR_N_LAYERS: shape.n_layers,
        layout.ATTR_N_HEADS: shape.n_heads,
        layout.ATTR_N_KV_HEADS: shape.n_kv_heads,
        layout.ATTR_HEAD_DIM: shape.head_dim,
        layout.ATTR_D_MODEL: shape.d_model,
        layout.ATTR_BOS: token_record.get("bos", "keep"),
        layout.ATTR_BOS_TOKEN_ID: token_record["bos_token_id"],
        layout.ATTR_BOS_TOKEN_SOURCE: token_record.get("bos_token_source", "not recorded"),
        layout.ATTR_CODEC: settings.describe_codecs(),
        layout.ATTR_POST_ATTENTION_NORM: arch.post_attention_norm,
        **input_norm_settings(model),
    }
    if settings.storage_dtypes["residual"] != "float32":
        log.warning(
            "extraction.storage_dtypes.residual = %s: Z and the values are recomputed from "
            "residual/X and carry its rounding (float32 makes them exact)",
            settings.storage_dtypes["residual"],
        )
    batch_size = resolve_batch_size(settings.batch_size, shape, t1, n_seq, device)
    overlap = resolve_overlap(settings.overlap_writes, device)
    clock = StageClock(device)
    started = time.perf_counter()
    needed_bytes = layout.uncompressed_bytes(sizes, settings.storage_dtypes, specs)
    with (
        naming_a_full_disk(out_h5, needed_bytes),
        atomic_path(out_h5) as tmp,
        h5py.File(tmp, "w") as handle,
    ):
        for key, value in attrs.items():
            handle.attrs[key] = value
        datasets = _create_datasets(handle, sizes, settings, specs)
        datasets[layout.TOKEN_IDS][...] = token_ids
        _write_weights(model, datasets, shape.n_layers)
        body = base_model(model)
        batches = range(0, n_seq, batch_size)
        bar = tqdm(
            batches,
            desc=f"extract {attrs[layout.ATTR_MODEL_NAME]}/{attrs[layout.ATTR_DATASET_NAME]}",
            unit="batch",
            disable=not progress,
            file=sys.stderr,
        )
        with (
            capture_hooks(model) as capture,
            torch.inference_mode(),
            ThreadPoolExecutor(max_workers=1) as writer,
            ThreadPoolExecutor(max_workers=compression_threads()) as compressors,
        ):
            pending: Future[None] | None = None
            for start in bar:
                stop = min(start + batch_size, n_seq)
                ids = torch.as_tensor(token_ids[start:stop], dtype=torch.long, device=device)
                with clock.stage("forward"):
                    out = body(
                        input_ids=ids,
                        output_attentions=True,
                        output_hidden_states=True,
                        use_cache=False,
                    )
                with clock.stage("to_host"):
                    arrays = _host_arrays(out, capture, settings, shape.n_layers, learned_sinks)
                del out
                if pending is not None:  # at most one batch is being written
                    with clock.stage("write_wait"):
                        pending.result()
                pending = writer.submit(
                    _write_arrays,
                    datasets,
                    arrays,
                    start,
                    settings,
                    compressors,
                    clock,
                )
                if not overlap:
                    pending.result()
                del arrays
            if pending is not None:
                with clock.stage("write_wait"):
                    pending.result()
        profile = {key: round(value, 3) for key, value in sorted(clock.seconds.items())}
        profile.update(batch_size=batch_size, overlap_writes=overlap)
        handle.attrs[layout.ATTR_EXTRACTION_PROFILE] = json.dumps(profile, sort_keys=True)
        handle.attrs[layout.ATTR_EXTRACTION_SECONDS] = round(time.perf_counter() - started, 3)
        handle.attrs[layout.ATTR_COMPLETE] = True
        final_attrs = dict(handle.attrs)
    log.info("wrote %s in %.1f s (%s)", out_h5, time.perf_counter() - started, profile)
    return final_attrs


def _write_weights(
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


def _host_arrays(
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
            arrays.append((name, index, _to_storage(tensor, dtypes[key], f"{name} layer {index}")))
        if learned_sinks:
            name = layout.ATTENTION_SINK_PROBS
            p_sink = sink_probabilities(probs)
            arrays.append(
                (name, index, _to_storage(p_sink, dtypes["attention"], f"{name} layer {index}"))
            )
    return arrays


def compression_threads() -> int:
    """Threads that compress chunks: torch's thread count (the rule's ``threads``), at most the
    cores this process may use."""
    return max(1, min(torch.get_num_threads(), len(os.sched_getaffinity(0))))


def _write_arrays(
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
