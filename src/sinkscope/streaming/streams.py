"""The token streams of one model x corpus pair, shared by every StreamingLLM computation.

:func:`load_streams` loads the prepared model and cuts the same streams from the corpus' token
stream (rule tokenize_corpus) for the cache evaluation
(:func:`sinkscope.streaming.experiment.evaluate_pair`), the re-computation baseline
(:func:`sinkscope.streaming.recompute.recompute_pair`) and the geometry analysis' long-context
test; :func:`pair_names` and :func:`with_names` name a pair's tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

if TYPE_CHECKING:  # torch loads with the model (first_positions imports this module without it)
    import torch

__all__ = [
    "N_STREAMS_KEY",
    "STREAM_LENGTH_KEY",
    "Streams",
    "load_streams",
    "pair_names",
    "prepared_dtype",
    "with_names",
]


#: The config keys of the number and the length of the streams (named in errors).
N_STREAMS_KEY = "streaming.params.n_streams"
STREAM_LENGTH_KEY = "streaming.params.stream_length"


@dataclass
class Streams:
    """The token streams of one model x corpus pair (:func:`load_streams`)."""

    model: Any
    tokenizer: Any
    ids: torch.Tensor  # (B, T), BOS in column 0, on the model's device
    offsets: list[int]  # where each stream's text starts in the corpus token stream
    bos_token_id: int


def load_streams(
    prepared_model_dir: str | Path,
    token_stream: str | Path,
    corpus_provenance: str | Path,
    p: Mapping[str, Any],
    keys: tuple[str, str] = (N_STREAMS_KEY, STREAM_LENGTH_KEY),
    *,
    dtype: str | None = None,
    attn_implementation: str = "eager",
    device: str = "cpu",
) -> Streams:
    """Load the model and cut ``n_streams`` streams of ``stream_length`` tokens
    (BOS first) with ``seed`` from the corpus' token stream (rule tokenize_corpus, read by
    :func:`sinkscope.prepare.tokens.read_token_stream` against ``corpus_provenance``, the
    corpus' ``documents.json``): the same streams for every caller
    (:func:`sinkscope.streaming.experiment.evaluate_pair`,
    :func:`sinkscope.streaming.recompute.recompute_pair`,
    :func:`sinkscope.geometry.long_context.long_context_inputs`).

    The model is loaded once, as the extraction loads it
    (:func:`sinkscope.prepare.models.load_model`: read in ``dtype``, then moved to ``device``):
    ``dtype`` is ``models.<name>.dtype`` (None: the dtype it was prepared in,
    :func:`prepared_dtype`), so a bfloat16 model stays bfloat16 (no float32 copy); ``device`` is a
    resolved device (:func:`sinkscope.prepare.models.pick_device`), on which the streams' ids are
    created too.

    Raises ``ValueError`` before the model is loaded when the corpus holds fewer than
    ``n_streams`` streams of that length, naming the config keys of the count and the length
    (``keys``, by default :data:`N_STREAMS_KEY` and :data:`STREAM_LENGTH_KEY`) and the dataset
    (:func:`pair_names`)."""
    import torch

    from sinkscope.prepare.models import load_model, load_tokenizer, resolve_bos_token_id
    from sinkscope.prepare.tokens import cut_sequences, read_token_stream

    tokenizer = load_tokenizer(Path(prepared_model_dir))
    stream, _ = read_token_stream(Path(token_stream), Path(corpus_provenance), len(tokenizer))
    length, n_streams = int(p["stream_length"]), int(p["n_streams"])
    n_blocks = stream.size // (length - 1)
    if n_blocks < n_streams:
        n_key, length_key = keys
        _, dataset = pair_names(p, prepared_model_dir, corpus_provenance)
        raise ValueError(
            f"{n_key} = {n_streams} exceeds the {n_blocks} sequences of {length} tokens that "
            f"corpus {dataset} holds ({token_stream}: blocks of {length - 1} tokens after "
            f"BOS); set it to at most {n_blocks} or lower {length_key}"
        )
    dtype = dtype or prepared_dtype(prepared_model_dir)
    model = load_model(Path(prepared_model_dir), dtype, attn_implementation, device)
    bos, _ = resolve_bos_token_id(Path(prepared_model_dir), tokenizer, model.config)
    ids_np, starts = cut_sequences(stream, n_streams, length - 1, int(p["seed"]), bos)
    ids = torch.as_tensor(ids_np.astype(np.int64), device=device)
    return Streams(model, tokenizer, ids, [int(s) for s in starts], int(bos))


def prepared_dtype(prepared_model_dir: str | Path) -> str:
    """The dtype a model was prepared in: ``models.<name>.dtype`` when rule prepare_model ran
    (its provenance record, :func:`sinkscope.prepare.models.read_provenance`)."""
    from sinkscope.prepare.models import read_provenance

    return str(read_provenance(Path(prepared_model_dir))["dtype"])


def pair_names(p: Mapping[str, Any], prepared_model_dir: str | Path, corpus_provenance: str | Path):
    """``(model, dataset)`` names of a pair's tables: ``model_name``/``dataset_name`` of ``p``,
    else the folder names (``results/models/{model}``,
    ``results/corpora/{dataset}/documents.json``)."""
    model_name = str(p.get("model_name") or Path(prepared_model_dir).name)
    dataset_name = str(p.get("dataset_name") or Path(corpus_provenance).parent.name)
    return model_name, dataset_name


def with_names(frame: pl.DataFrame, model: str, dataset: str) -> pl.DataFrame:
    """``frame`` with ``model`` and ``dataset`` columns in front."""
    return frame.select(pl.lit(model).alias("model"), pl.lit(dataset).alias("dataset"), pl.all())
