"""Extraction of activations to HDF5: the workflow's GPU rule (it runs on CPU where none is seen).

For every layer ``l`` the file receives the residual stream entering the layer (``X``), the
attention probabilities per head (``A``) and the attention block's update of the residual stream;
once per file, the per-head value and output maps (``W_V``, ``W_O``), the input norms' gains and
biases and, as attributes, the norm's kind, epsilon and rounding (:func:`sinkscope.extraction.introspection.input_norm_settings`).
The normed attention input ``Z`` and the value vectors are not stored: they are functions of
``X`` and these weights, recomputed by :func:`sinkscope.extraction.h5read.read_Z` and
:func:`~sinkscope.extraction.h5read.read_values`. The layout is defined in
:mod:`sinkscope.extraction.h5layout`.

Models whose heads have a learned sink logit (gpt-oss's ``self_attn.sinks``: one logit per head,
appended to every row's scores, softmaxed with them and dropped, so a row of ``A`` sums to
``1 - p_sink``; :func:`~sinkscope.extraction.introspection.has_learned_sinks`) also get ``attention/sink_probs``, each head's ``p_sink``
per query (:func:`~sinkscope.extraction.introspection.sink_probabilities`); other models' files have no such dataset.

The forward pass runs the transformer body only (no full-vocabulary logits) with eager attention,
in batches; ``X`` comes from ``output_hidden_states``, ``A`` from ``output_attentions``, and the
post-attention residual from a forward hook on the layer's pre-MLP norm. Everything is cast to its storage dtype on the device (half the
bytes to copy for float16), copied to the host and written batch by batch into chunked, compressed
datasets (one chunk per layer x sequence), so memory stays at one batch (two with overlapped
writes). The chunks are compressed by a pool of threads in the pipeline the datasets declare
(shuffle + Zstandard by default, :mod:`sinkscope.extraction.h5codec`) and written with
``write_direct_chunk``: HDF5 alone compresses one chunk at a time on one core (BENCHMARKS.md,
section 1, has the encoding's share of an extraction). On a GPU the host-side compression and writing of batch ``b`` run in a background thread
while batch ``b + 1`` is computed (``extraction.overlap_writes``); on the CPU both compete for the
same cores, so they run in turn (``bench/run.py`` measures both). The wall seconds of each stage
(forward, device-to-host copies, compression + writing) are stored in the file attribute
``extraction_profile``.

This module runs the pass (:func:`extract_activations`); the batching and the stage clock are in
:mod:`.batching`, what is read off the model besides its outputs in :mod:`.introspection`, the
writing in :mod:`.h5write`, the settings in :mod:`.settings`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h5py
import torch
from tqdm import tqdm

from sinkscope import __version__
from sinkscope.extraction import h5layout as layout
from sinkscope.extraction.batching import (
    StageClock,
    compression_threads,
    resolve_batch_size,
    resolve_overlap,
)
from sinkscope.extraction.h5write import (
    create_datasets,
    host_arrays,
    library_versions,
    write_arrays,
    write_weights,
)
from sinkscope.extraction.introspection import capture_hooks, has_learned_sinks, input_norm_settings
from sinkscope.extraction.settings import ExtractionSettings
from sinkscope.io import atomic_path, naming_a_full_disk
from sinkscope.prepare.models import (
    architecture_of,
    base_model,
    load_model,
    model_shape,
    pick_device,
    read_provenance,
)
from sinkscope.prepare.tokens import read_tokens

log = logging.getLogger(__name__)


def extract_activations(
    prepared_model_dir: Path,
    tokens_json: Path,
    out_h5: Path,
    model_entry: Mapping[str, Any],
    settings: ExtractionSettings,
    config_sha256: str,
    progress: bool = True,
    content_settings: Mapping[str, Any] | None = None,
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
        # what the readers compare with their own config (sinkscope.config.content_settings)
        layout.ATTR_CONTENT_SETTINGS: json.dumps(content_settings or {}, sort_keys=True),
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
        datasets = create_datasets(handle, sizes, settings, specs)
        datasets[layout.TOKEN_IDS][...] = token_ids
        write_weights(model, datasets, shape.n_layers)
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
                    arrays = host_arrays(out, capture, settings, shape.n_layers, learned_sinks)
                del out
                if pending is not None:  # at most one batch is being written
                    with clock.stage("write_wait"):
                        pending.result()
                pending = writer.submit(
                    write_arrays,
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
