"""Planted attention maps and residual streams for the sinks tests, and a tiny activation file."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from sinkscope.extraction import h5layout


def uniform_maps(n_layers: int, n_seq: int, n_heads: int, n_pos: int) -> np.ndarray:
    """Causal uniform attention: ``A[q, k] = 1 / (q + 1)`` for ``k <= q``."""
    rows = np.tril(np.ones((n_pos, n_pos))) / np.arange(1, n_pos + 1)[:, None]
    return np.broadcast_to(rows, (n_layers, n_seq, n_heads, n_pos, n_pos)).copy()


def random_maps(rng: np.random.Generator, shape: tuple[int, ...], n_pos: int) -> np.ndarray:
    """Causal softmax maps of random logits (some peaked), shape ``(*shape, P, P)``."""
    logits = rng.normal(scale=3.0, size=(*shape, n_pos, n_pos))
    logits[..., np.triu(np.ones((n_pos, n_pos), dtype=bool), k=1)] = -np.inf
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def plant_sink(maps: np.ndarray, k: int, weight: float) -> None:
    """Make key ``k`` a sink of the maps ``(..., P, P)`` in place: every query ``q >= k`` puts
    ``weight`` on ``k`` and ``1 - weight`` on its old distribution (rows still sum to 1)."""
    maps[..., k:, :] *= 1.0 - weight
    maps[..., k:, k] += weight


def write_activation_file(
    path: Path,
    probs: np.ndarray,
    x: np.ndarray,
    token_ids: np.ndarray,
    model: str = "planted",
    dataset: str = "synthetic",
) -> None:
    """A minimal complete activation file with the per-layer datasets of the layout (what the
    sinks analysis reads: ``tokens/input_ids``, ``residual/X``, ``attention/probs``; the
    attention update as zeros, for the block size), names from h5layout, no weights."""
    n_layers, n_seq, n_heads, n_pos, _ = probs.shape
    with h5py.File(path, "w") as handle:
        handle.create_dataset(h5layout.TOKEN_IDS, data=token_ids.astype(np.int32))
        handle.create_dataset(
            h5layout.RESIDUAL_X, data=x.astype(np.float32), chunks=(1, 1, n_pos, x.shape[-1])
        )
        handle.create_dataset(h5layout.ATTENTION_RESIDUAL_UPDATE, data=np.zeros_like(x, np.float32))
        handle.create_dataset(
            h5layout.ATTENTION_PROBS,
            data=probs.astype(np.float32),
            chunks=(1, 1, n_heads, n_pos, n_pos),
        )
        attrs = {
            h5layout.ATTR_FORMAT: h5layout.FORMAT,
            h5layout.ATTR_SCHEMA_VERSION: h5layout.SCHEMA_VERSION,
            h5layout.ATTR_MODEL_NAME: model,
            h5layout.ATTR_DATASET_NAME: dataset,
            h5layout.ATTR_N_SEQUENCES: n_seq,
            h5layout.ATTR_CONTEXT_LENGTH: n_pos - 1,
            h5layout.ATTR_N_LAYERS: n_layers,
            h5layout.ATTR_N_HEADS: n_heads,
            h5layout.ATTR_N_KV_HEADS: n_heads,
            h5layout.ATTR_HEAD_DIM: 4,
            h5layout.ATTR_D_MODEL: x.shape[-1],
            h5layout.ATTR_COMPLETE: True,
        }
        for key, value in attrs.items():
            handle.attrs[key] = value
