"""The layout of the activation HDF5 files: the one place that defines every dataset.

One file per model x dataset pair, ``results/activations/{model}/{dataset}.h5``. Symbols:
``L`` layers, ``N`` sequences, ``H`` query heads, ``K`` key/value heads, ``T1 = T + 1`` positions
(position 0 is the BOS token, followed by ``T`` text tokens; in a no-BOS file, attribute
:data:`ATTR_BOS` ``"drop"``, position 0 is the first text token), ``D`` model width, ``hd`` head width.
The writer (``sinkscope.extraction.extract``), the readers (analyses, ``sinkscope inspect``) and the README
all use :data:`DATASETS`; ``sinkscope inspect --layout`` prints it.

Schema 2 stores no tensor that is a deterministic function of others: the attention input ``Z``
(the layer's input norm applied to ``X``) and the value vectors ``V = Z W_V^T + b_V`` are
recomputed from ``residual/X`` and the stored weights by :func:`read_Z` and :func:`read_values`,
the one reader every analysis uses (:data:`DERIVED` documents them; the norm's kind, epsilon and
rounding are file attributes). Files of schema 1 (which stored both) are rejected.

The datasets are compressed with the codec the file's ``codec`` attribute names (shuffle +
Zstandard by default, :mod:`sinkscope.extraction.h5codec`): h5py reads them after ``import hdf5plugin``
(this module does it), and :func:`open_activations` names the filter and the package when the
running HDF5 cannot decode one.

A dataset of :data:`CONDITIONAL_DATASETS` is written only for the models its ``condition``
names (``attention/sink_probs``: models whose heads have a learned sink logit, e.g. gpt-oss);
readers test ``name in handle`` and treat its absence as "this model has no such quantity". Such
a dataset adds to the layout without changing the schema version: every file of another model is
unchanged and stays readable.

Every dataset carries the attributes ``description``, ``axes`` and ``symbol`` (the paper's name); the
file carries the provenance attributes listed in :data:`FILE_ATTRIBUTES`. Files are written under a
temporary name and renamed when complete, and the root attribute ``complete`` is set last, so a file
without it (or with a foreign ``format``) is rejected by :func:`open_activations`.
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from sinkscope.extraction import h5codec

FORMAT = "sinkscope-activations"
SCHEMA_VERSION = 2

#: Names of the stored datasets (their specs are :data:`DATASETS`); every reader and writer uses
#: these, never the strings.
TOKEN_IDS = "tokens/input_ids"
RESIDUAL_X = "residual/X"
ATTENTION_PROBS = "attention/probs"
ATTENTION_SINK_PROBS = "attention/sink_probs"
ATTENTION_RESIDUAL_UPDATE = "attention/residual_update"
WEIGHT_W_V = "weights/W_V"
WEIGHT_B_V = "weights/b_V"
WEIGHT_W_O = "weights/W_O"
WEIGHT_NORM_GAIN = "weights/norm_gain"
WEIGHT_NORM_BIAS = "weights/norm_bias"

#: Names of the file attributes (:data:`FILE_ATTRIBUTES` documents each); the writer
#: (``sinkscope.extraction.extract``) writes them and readers read them with :func:`read_attr` by
#: these constants, never by the string.
ATTR_FORMAT = "format"
ATTR_SCHEMA_VERSION = "schema_version"
ATTR_COMPLETE = "complete"
ATTR_MODEL_NAME = "model_name"
ATTR_DATASET_NAME = "dataset_name"
ATTR_DTYPE = "dtype"
ATTR_N_SEQUENCES = "n_sequences"
ATTR_CONTEXT_LENGTH = "context_length"
ATTR_N_LAYERS = "n_layers"
ATTR_N_HEADS = "n_heads"
ATTR_N_KV_HEADS = "n_kv_heads"
ATTR_HEAD_DIM = "head_dim"
ATTR_D_MODEL = "d_model"
ATTR_POST_ATTENTION_NORM = "post_attention_norm"
ATTR_INPUT_NORM = "input_norm"
ATTR_INPUT_NORM_EPS = "input_norm_eps"
ATTR_INPUT_NORM_CAST = "input_norm_cast"
ATTR_EXTRACTION_SECONDS = "extraction_seconds"
ATTR_EXTRACTION_PROFILE = "extraction_profile"
ATTR_SINKSCOPE_VERSION = "sinkscope_version"
ATTR_MODEL_SOURCE = "model_source"
ATTR_MODEL_SHA256 = "model_sha256"
ATTR_MODEL_CLASS = "model_class"
ATTR_MODEL_TYPE = "model_type"
ATTR_ATTN_IMPLEMENTATION = "attn_implementation"
ATTR_DEVICE = "device"
ATTR_LIBRARY_VERSIONS = "library_versions"
ATTR_DATASET_SHA256 = "dataset_sha256"
ATTR_TOKEN_IDS_SHA256 = "token_ids_sha256"
ATTR_SEED = "seed"
ATTR_CONFIG_SHA256 = "config_sha256"
ATTR_BOS_TOKEN_ID = "bos_token_id"
ATTR_BOS_TOKEN_SOURCE = "bos_token_source"
#: "keep" (position 0 is BOS) or "drop" (the no-BOS variant: position 0 is the first text token);
#: a file without it kept BOS (sinkscope.variants).
ATTR_BOS = "bos"
ATTR_CODEC = "codec"
#: Names of the attributes of every dataset (:class:`DatasetSpec`: description, axes, symbol).
ATTR_DESCRIPTION = "description"
ATTR_AXES = "axes"
ATTR_SYMBOL = "symbol"


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of the activation file."""

    name: str
    axes: tuple[str, ...]
    dtype_key: str  # key into the config's extraction.storage_dtypes, or a fixed numpy dtype
    symbol: str
    description: str
    chunk_axes: tuple[str, ...]  # axes kept whole in one chunk; the others get chunk size 1
    #: for a dataset of :data:`CONDITIONAL_DATASETS`: the models it is written for ("" = all)
    condition: str = ""

    @property
    def fixed_dtype(self) -> str | None:
        return None if self.dtype_key in STORAGE_DTYPE_KEYS else self.dtype_key


STORAGE_DTYPE_KEYS = ("attention", "residual", "activations", "weights")

DATASETS: tuple[DatasetSpec, ...] = (
    DatasetSpec(
        TOKEN_IDS,
        ("sequence", "position"),
        "int32",
        "x",
        "Token ids fed to the model; position 0 is the model's BOS token.",
        ("sequence", "position"),
    ),
    DatasetSpec(
        RESIDUAL_X,
        ("layer", "sequence", "position", "d_model"),
        "residual",
        "X^(l)",
        "Residual stream entering layer l (hidden_states[l] of transformers; layer 0 is the "
        "embedding output), unnormalised.",
        ("position", "d_model"),
    ),
    DatasetSpec(
        ATTENTION_PROBS,
        ("layer", "sequence", "head", "query", "key"),
        "attention",
        "A^(l,h)",
        "Attention probabilities (softmax output, causal: zero above the diagonal, rows sum to 1; "
        "for a model with learned sinks, rows sum to 1 - attention/sink_probs).",
        ("head", "query", "key"),
    ),
    DatasetSpec(
        ATTENTION_RESIDUAL_UPDATE,
        ("layer", "sequence", "position", "d_model"),
        "activations",
        "ATTN(Z)",
        "What the attention block adds to the residual stream of layer l (all heads, after the "
        "post-attention norm where the model has one, e.g. Gemma 2/3).",
        ("position", "d_model"),
    ),
    DatasetSpec(
        WEIGHT_W_V,
        ("layer", "head", "head_dim", "d_model"),
        "weights",
        "W_V^(l,h)",
        "Value map of query head h (grouped-query attention expanded): acts on Z (read_Z).",
        ("head", "head_dim", "d_model"),
    ),
    DatasetSpec(
        WEIGHT_B_V,
        ("layer", "head", "head_dim"),
        "weights",
        "b_V^(l,h)",
        "Value bias of query head h (zeros where the model has none).",
        ("head", "head_dim"),
    ),
    DatasetSpec(
        WEIGHT_W_O,
        ("layer", "head", "d_model", "head_dim"),
        "weights",
        "W_O^(l,h)",
        "Output map of query head h: the head's slice of the output projection. "
        "W_VO = W_O[l,h] @ W_V[l,h] acts on Z (read_Z); W_O @ W_V @ diag(norm_gain) acts on the "
        "gain-free normalised input (the paper's W_VO with a non-learnable RMSNorm).",
        ("head", "d_model", "head_dim"),
    ),
    DatasetSpec(
        WEIGHT_NORM_GAIN,
        ("layer", "d_model"),
        "weights",
        "g^(l)",
        "Effective gain of layer l's input norm (w for Llama-style norms and LayerNorm, 1 + w "
        "for Gemma): Z = norm(X) * norm_gain + norm_bias (read_Z).",
        ("d_model",),
    ),
    DatasetSpec(
        WEIGHT_NORM_BIAS,
        ("layer", "d_model"),
        "weights",
        "b^(l)",
        "Bias of layer l's input norm (LayerNorm, e.g. GPT-2; zeros for RMSNorm).",
        ("d_model",),
    ),
)


#: Datasets written only for the models their ``condition`` names; readers must cope with their
#: absence (``name in handle``). Not in :data:`DATASETS`, whose datasets every file has.
CONDITIONAL_DATASETS: tuple[DatasetSpec, ...] = (
    DatasetSpec(
        ATTENTION_SINK_PROBS,
        ("layer", "sequence", "head", "query"),
        "attention",
        "p_sink^(l,h)",
        "Probability each query row gives to its head's learned sink logit s_h (softmax over "
        "[scores, s_h], the sink's entry then dropped, as in gpt-oss): 1 - sum_k A[q, k] of the "
        "forward's attention/probs, summed in float64 before storage rounding.",
        ("head", "query"),
        condition="models whose attention has a learned per-head sink logit (self_attn.sinks, "
        "e.g. transformers' GptOss)",
    ),
)


def spec_of(name: str) -> DatasetSpec:
    """The spec of the stored dataset ``name`` (of :data:`DATASETS` or
    :data:`CONDITIONAL_DATASETS`)."""
    for spec in (*DATASETS, *CONDITIONAL_DATASETS):
        if spec.name == name:
            return spec
    raise KeyError(f"{name!r} is not a dataset of the {FORMAT} layout")


@dataclass(frozen=True)
class DerivedSpec:
    """An array of the layout that is not stored but recomputed exactly by its ``reader``."""

    name: str
    axes: tuple[str, ...]
    symbol: str
    description: str
    reader: str  # the function of this module that returns it


DERIVED: tuple[DerivedSpec, ...] = (
    DerivedSpec(
        "attention/Z",
        ("layer", "sequence", "position", "d_model"),
        "Z^(l)",
        "Normed attention input of layer l, with the learnable gain (and bias): exactly what the "
        "query/key/value projections see. Not stored: norm(residual/X) * norm_gain + norm_bias "
        "with the file's input_norm, input_norm_eps, input_norm_cast and dtype, as float32.",
        "read_Z",
    ),
    DerivedSpec(
        "attention/values",
        ("layer", "sequence", "kv_head", "position", "head_dim"),
        "V^(l,k)",
        "Value vectors of each key/value head, Z W_V^T + b_V (query head h uses kv_head "
        "h // (H / K)). Not stored: computed from read_Z and weights/W_V, weights/b_V, as float32.",
        "read_values",
    ),
)

#: ``input_norm`` attribute: root-mean-square norm (Llama, Gemma) or LayerNorm (GPT-2).
NORM_KINDS = ("rms", "layer")
#: ``input_norm_cast``: where a 16-bit forward rounds the norm's output to its dtype.
NORM_CASTS = ("before_gain", "after_gain")
#: forward dtypes whose roundings :func:`input_norm` reproduces
FORWARD_DTYPES = ("float32", "float16", "bfloat16")

FILE_ATTRIBUTES: dict[str, str] = {
    ATTR_FORMAT: f"always {FORMAT!r}",
    ATTR_SCHEMA_VERSION: "integer version of this layout",
    ATTR_COMPLETE: "set to True as the last write; absent in a file that was not finished",
    ATTR_SINKSCOPE_VERSION: "version of the package that wrote the file",
    ATTR_MODEL_NAME: "the model's key in config.yaml",
    ATTR_MODEL_SOURCE: "the model's source entry (JSON)",
    ATTR_MODEL_SHA256: "content hash of the model (GGUF sha256, or hub:id@commit for a hub model: the "
    "commit its configured revision resolved to)",
    ATTR_MODEL_CLASS: "transformers class that ran the forward pass",
    ATTR_MODEL_TYPE: "transformers model_type",
    ATTR_DTYPE: "dtype of the forward pass (read_Z and read_values reproduce its roundings)",
    ATTR_ATTN_IMPLEMENTATION: "attention kernel transformers actually used",
    ATTR_DEVICE: "device of the forward pass",
    ATTR_LIBRARY_VERSIONS: "torch, transformers, h5py, numpy versions (JSON)",
    ATTR_DATASET_NAME: "the dataset's key in config.yaml",
    ATTR_DATASET_SHA256: "sha256 of the cleaned corpus text",
    ATTR_TOKEN_IDS_SHA256: "sha256 of tokens/input_ids (int32, C order)",
    ATTR_N_SEQUENCES: "N",
    ATTR_CONTEXT_LENGTH: "T (tokens after BOS); sequences have T + 1 positions",
    ATTR_SEED: "seed of the sequence cut",
    ATTR_CONFIG_SHA256: "sha256 of the config sections this file depends on",
    ATTR_N_LAYERS: "L",
    ATTR_N_HEADS: "H",
    ATTR_N_KV_HEADS: "K",
    ATTR_HEAD_DIM: "hd",
    ATTR_D_MODEL: "D",
    ATTR_BOS: "'keep': position 0 is BOS, T text tokens follow; 'drop' (the no-BOS variant, "
    "dataset id '<name>.no-bos'): the same T text tokens without BOS, position 0 is the first of "
    "them and context_length is T - 1 (the positions after position 0); absent = 'keep'",
    ATTR_BOS_TOKEN_ID: "id of the model's BOS token: at position 0 where bos is 'keep', left out "
    "where it is 'drop'",
    ATTR_BOS_TOKEN_SOURCE: "where that id came from: 'models.<name>.bos_token_id' (the config), "
    "'tokenizer' or 'model config'",
    ATTR_CODEC: "HDF5 codec and level of the datasets (sinkscope.extraction.h5codec); zstd needs "
    "`import hdf5plugin` before h5py reads the file",
    ATTR_POST_ATTENTION_NORM: "True where the attention output is normed before the residual add",
    ATTR_INPUT_NORM: "the layers' input norm: 'rms' (x / sqrt(mean(x^2) + eps)) or 'layer' "
    "((x - mean) / sqrt(var + eps)); read_Z recomputes Z from residual/X with it",
    ATTR_INPUT_NORM_EPS: "eps of the input norm",
    ATTR_INPUT_NORM_CAST: "where a float16/bfloat16 forward rounds the norm's output to its dtype: "
    "'before_gain' (Llama: gain * round(norm(x))) or 'after_gain' (Gemma, LayerNorm: "
    "round(norm(x) * gain + bias)); no effect in float32",
    ATTR_EXTRACTION_SECONDS: "wall seconds of the extraction (not byte-stable)",
    ATTR_EXTRACTION_PROFILE: "wall seconds per stage: forward, to_host (cast + device-to-host copy), "
    "write (compression + writing), write_io (the writing alone), write_wait (forward waiting "
    "for the writer); batch_size, overlap_writes (JSON)",
}


def dataset_shape(spec: DatasetSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(int(sizes[axis]) for axis in spec.axes)


def chunk_shape(spec: DatasetSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """One chunk per (layer, sequence): readers stream a layer at a time, or one head's map."""
    return tuple(int(sizes[a]) if a in spec.chunk_axes else 1 for a in spec.axes)


class ActivationFileError(ValueError):
    """A file that is not a complete, readable sinkscope activation file."""


#: What recovers an activation file that is damaged, unfinished or outdated. Snakemake does not
#: notice a damaged file by itself (its checks are times, params and code), and an analysis must
#: not delete its input; deleting the file makes the same snakemake command extract it again,
#: with the same config, whatever the options and the executor (a ``--forcerun
#: extract_activations`` without a target would re-extract every pair).
REBUILD_ADVICE = (
    "re-run the extraction: delete the file (rm {path}) and run snakemake again with the same "
    "options"
)


def damaged_file_error(path: str | os.PathLike[str], problem: str) -> ActivationFileError:
    """The error of an activation file that must be extracted again: ``path``, what is wrong,
    and :data:`REBUILD_ADVICE`, in one sentence."""
    advice = REBUILD_ADVICE.format(path=shlex.quote(str(path)))
    return ActivationFileError(f"{path}: {problem}; {advice}")


def read_attr(
    owner: h5py.File | h5py.Group | h5py.Dataset, name: str, *, as_json: bool = False
) -> Any:
    """The attribute ``name`` (an ``ATTR_*`` constant) of an activation file, or of one of its
    datasets, as a Python value: bytes decoded to ``str``, numpy scalars (0-d arrays included)
    to Python scalars, and with ``as_json`` a JSON string parsed. The one way every reader reads
    an attribute; a missing one raises :class:`ActivationFileError` naming the file, the
    attribute and the command that rebuilds the file (:func:`damaged_file_error`).
    """
    if name not in owner.attrs:
        where = "" if owner.name == "/" else f" of {owner.name}"
        raise damaged_file_error(owner.file.filename, f"attribute {name!r}{where} is missing")
    value = owner.attrs[name]
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, bytes):
        value = value.decode()
    elif isinstance(value, np.generic):
        value = value.item()
    return json.loads(value) if as_json else value


class ActivationFile(h5py.File):
    """An activation file opened by :func:`open_activations`: an HDF5 read error raised inside its
    ``with`` block (a damaged chunk or header) leaves the block as :class:`ActivationFileError`
    (:func:`damaged_file_error`)."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        path = self.filename if self.id.valid else "an activation file (closed early)"
        super().__exit__(exc_type, exc, traceback)
        if isinstance(exc, (OSError, RuntimeError)) and _raised_by_h5py(traceback):
            raise damaged_file_error(path, f"reading it failed ({exc})") from exc


def _raised_by_h5py(traceback: TracebackType | None) -> bool:
    """Whether the innermost frame of ``traceback`` is h5py's (an HDF5 error, not another one)."""
    frame = None
    while traceback is not None:
        frame, traceback = traceback.tb_frame, traceback.tb_next
    return frame is not None and str(frame.f_globals.get("__name__", "")).startswith("h5py")


def open_activations(path: str | os.PathLike[str]) -> ActivationFile:
    """Open an activation file read-only, rejecting truncated, unfinished or foreign files.

    Use it as a context manager (``with open_activations(p) as f:``) so that no file stays open
    across jobs; an HDF5 read error inside the block becomes :class:`ActivationFileError`. Every
    error of a damaged, unfinished or outdated file names the file and the command that rebuilds
    it (:func:`damaged_file_error`). On cluster file systems without working locks set
    ``HDF5_USE_FILE_LOCKING=FALSE``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such activation file")
    try:
        handle = ActivationFile(path, "r")
    except OSError as error:
        raise damaged_file_error(path, f"not a readable HDF5 file ({error})") from error
    attrs = handle.attrs
    if attrs.get(ATTR_FORMAT) != FORMAT:
        handle.close()
        raise ActivationFileError(  # a foreign file: no advice to delete it
            f"{path}: not a sinkscope activation file ({ATTR_FORMAT} attribute "
            f"is {attrs.get(ATTR_FORMAT)!r}, expected {FORMAT!r})"
        )
    version = int(attrs.get(ATTR_SCHEMA_VERSION, -1))
    if version != SCHEMA_VERSION:
        handle.close()  # attributes cannot be read after this
        raise damaged_file_error(path, f"schema version {version} is not {SCHEMA_VERSION}")
    if not bool(attrs.get(ATTR_COMPLETE, False)):
        handle.close()
        raise damaged_file_error(path, "the file was never completed (killed extraction?)")
    missing = h5codec.missing_filters(handle)
    if missing:
        handle.close()
        raise ActivationFileError(h5codec.describe_missing(str(path), missing))
    return handle


def w_vo(handle: h5py.File, layer: int, with_norm_gain: bool = False) -> np.ndarray:
    """Per-head value-output maps ``W_VO[h] = W_O[h] @ W_V[h]`` of one layer, shape (H, D, D).

    ``with_norm_gain=True`` composes them with ``diag(norm_gain)`` (acting on the gain-free
    RMS-normalised input, the paper's §3 setting).
    """
    w_v = handle[WEIGHT_W_V][layer].astype(np.float64)
    w_o = handle[WEIGHT_W_O][layer].astype(np.float64)
    product = np.einsum("hdk,hke->hde", w_o, w_v)
    if with_norm_gain:
        product = product * handle[WEIGHT_NORM_GAIN][layer].astype(np.float64)[None, None, :]
    return product


def describe_layout() -> str:
    """The layout as text (used by ``sinkscope inspect --layout`` and the README)."""
    lines = [f"{FORMAT} schema version {SCHEMA_VERSION}", "", "Datasets:"]
    for spec in DATASETS:
        dtype = spec.fixed_dtype or f"extraction.storage_dtypes.{spec.dtype_key}"
        lines.append(f"  {spec.name}  ({', '.join(spec.axes)})  [{dtype}]  {spec.symbol}")
        lines.append(f"      {spec.description}")
    lines += ["", "Stored only for some models (absent otherwise):"]
    for spec in CONDITIONAL_DATASETS:
        dtype = spec.fixed_dtype or f"extraction.storage_dtypes.{spec.dtype_key}"
        lines.append(f"  {spec.name}  ({', '.join(spec.axes)})  [{dtype}]  {spec.symbol}")
        lines.append(f"      {spec.description} Written for: {spec.condition}.")
    lines += ["", "Recomputed on reading (not stored):"]
    for derived in DERIVED:
        lines.append(
            f"  {derived.name}  ({', '.join(derived.axes)})  [float32, {derived.reader}()]  "
            f"{derived.symbol}"
        )
        lines.append(f"      {derived.description}")
    lines += ["", "File attributes:"]
    lines += [f"  {key}: {meaning}" for key, meaning in FILE_ATTRIBUTES.items()]
    return "\n".join(lines)


# ------------------------------------------------------------------ recomputed arrays


def round_to_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` rounded to the forward dtype ``dtype`` (round to nearest even), as float64.

    ``float32`` rounds to float32, ``float16`` to float16, ``bfloat16`` keeps the upper 16 bits
    of the float32 value after rounding (what ``tensor.to(torch.bfloat16)`` does).
    """
    if dtype == "float32":
        return np.asarray(a, dtype=np.float32).astype(np.float64)
    if dtype == "float16":
        return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":
        bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    raise ValueError(f"forward dtype {dtype!r} is not one of {FORWARD_DTYPES}")


def input_norm(
    x: np.ndarray,
    gain: np.ndarray,
    bias: np.ndarray,
    kind: str,
    eps: float,
    cast: str = "after_gain",
    dtype: str = "float32",
) -> np.ndarray:
    """A layer's input norm as transformers computes it, ``Z = norm(X) * gain + bias``, float32.

    ``kind="rms"``: ``norm(x) = x / sqrt(mean(x^2) + eps)`` (Llama, Gemma); ``"layer"``:
    ``(x - mean(x)) / sqrt(var(x) + eps)`` with the biased variance (GPT-2's LayerNorm). The
    arithmetic is float32, in place, as transformers computes these norms. For a 16-bit forward
    (``dtype``) the model rounds where ``cast`` says: ``"before_gain"`` (``LlamaRMSNorm``:
    ``w * norm(x).to(dtype)``, the product in ``dtype``; a product of two 16-bit numbers is exact
    in float32, so rounding it once is the 16-bit product) or ``"after_gain"``
    (``Gemma3RMSNorm``: ``(norm(x) * (1 + w)).to(dtype)``; LayerNorm rounds its output once);
    both are reproduced with :func:`round_to_dtype`.
    """
    if kind not in NORM_KINDS:
        raise ValueError(f"input_norm {kind!r} is not one of {NORM_KINDS}")
    if cast not in NORM_CASTS:
        raise ValueError(f"input_norm_cast {cast!r} is not one of {NORM_CASTS}")
    v = np.array(x, dtype=np.float32)  # a copy: the caller's X stays as read
    if kind == "layer":
        v -= v.mean(axis=-1, keepdims=True)
    variance = np.mean(np.square(v), axis=-1, keepdims=True)
    variance += np.float32(eps)
    v *= np.float32(1.0) / np.sqrt(variance)
    if cast == "before_gain" and dtype != "float32":
        v = round_to_dtype(v, dtype).astype(np.float32)
    v *= np.asarray(gain, dtype=np.float32)
    v += np.asarray(bias, dtype=np.float32)
    if dtype != "float32":
        v = round_to_dtype(v, dtype).astype(np.float32)
    return v


def _norm_settings(handle: h5py.File | h5py.Group) -> tuple[str, float, str, str]:
    """(kind, eps, cast, forward dtype) of the file's input norm, checked."""
    names = (ATTR_INPUT_NORM, ATTR_INPUT_NORM_EPS, ATTR_INPUT_NORM_CAST, ATTR_DTYPE)
    missing = [k for k in names if k not in handle.attrs]
    if missing:
        raise damaged_file_error(handle.file.filename, f"attributes {missing} are missing")
    kind = str(read_attr(handle, ATTR_INPUT_NORM))
    cast = str(read_attr(handle, ATTR_INPUT_NORM_CAST))
    dtype = str(read_attr(handle, ATTR_DTYPE))
    for key, value, allowed in (
        (ATTR_INPUT_NORM, kind, NORM_KINDS),
        (ATTR_INPUT_NORM_CAST, cast, NORM_CASTS),
        (ATTR_DTYPE, dtype, FORWARD_DTYPES),
    ):
        if value not in allowed:
            raise ActivationFileError(
                f"{handle.file.filename}: attribute {key} = {value!r} is not one of {allowed}"
            )
    return kind, float(read_attr(handle, ATTR_INPUT_NORM_EPS)), cast, dtype


@dataclass(frozen=True)
class InputProjection:
    """One layer's input norm and value projection, read once from a file (:meth:`read`).

    :meth:`Z` and :meth:`values` recompute ``Z`` and the value vectors of any block of
    ``residual/X`` without reading the weights again; :func:`read_Z` and :func:`read_values` are
    the one-call forms. Loops over blocks of one layer build this once.
    """

    kind: str
    eps: float
    cast: str
    dtype: str
    gain: np.ndarray  # (D,)
    bias: np.ndarray  # (D,)
    w_v: np.ndarray  # (D, K * hd) float64: W_V^T of the key/value heads
    b_v: np.ndarray  # (K * hd,) float64
    n_kv_heads: int

    @classmethod
    def read(cls, handle: h5py.File | h5py.Group, layer: int) -> InputProjection:
        kind, eps, cast, dtype = _norm_settings(handle)
        n_heads = int(read_attr(handle, ATTR_N_HEADS))
        n_kv = int(read_attr(handle, ATTR_N_KV_HEADS))
        group = n_heads // n_kv
        w_v = handle[WEIGHT_W_V][layer][::group].astype(np.float64)  # (K, hd, D)
        b_v = handle[WEIGHT_B_V][layer][::group].astype(np.float64)  # (K, hd)
        k, hd, d = w_v.shape
        return cls(
            kind=kind,
            eps=eps,
            cast=cast,
            dtype=dtype,
            gain=handle[WEIGHT_NORM_GAIN][layer],
            bias=handle[WEIGHT_NORM_BIAS][layer],
            w_v=np.ascontiguousarray(w_v.reshape(k * hd, d).T),
            b_v=b_v.reshape(-1),
            n_kv_heads=k,
        )

    def Z(self, x: np.ndarray) -> np.ndarray:
        """``Z`` of a block ``x`` ``(B, P, D)`` of ``residual/X``: ``(B, P, D)`` float32
        (:func:`input_norm` with the stored gain, bias and the file's ``input_norm*`` and
        ``dtype`` attributes: what the layer's query/key/value projections saw in the forward,
        paper §3's attention input with the learnable gain)."""
        return input_norm(x, self.gain, self.bias, self.kind, self.eps, self.cast, self.dtype)

    def values(self, z: np.ndarray) -> np.ndarray:
        """Value vectors ``V = Z W_V^T + b_V`` per key/value head: ``(B, K, P, hd)`` float32.

        Each sequence's product runs in float64 on its own (the result does not depend on the
        block), then is rounded to float32 (and to the forward dtype, where the model's
        projection rounds).
        """
        d = self.w_v.shape[0]
        if z.ndim != 3 or z.shape[-1] != d:
            raise ValueError(f"z has shape {z.shape}; expected (sequences, positions, {d})")
        k = self.n_kv_heads
        hd = self.w_v.shape[1] // k
        out = np.empty((z.shape[0], k, z.shape[1], hd), dtype=np.float32)
        for row in range(z.shape[0]):
            v = z[row].astype(np.float64) @ self.w_v + self.b_v  # (P, K * hd)
            out[row] = round_to_dtype(v, self.dtype).reshape(z.shape[1], k, hd).transpose(1, 0, 2)
        return out


def read_Z(
    handle: h5py.File | h5py.Group,
    layer: int,
    sequences: slice,
    stop: int | None = None,
    x: np.ndarray | None = None,
) -> np.ndarray:
    """``Z`` of one layer for a block of sequences, positions ``0..stop - 1``: (B, stop, D) float32.

    Recomputed from ``residual/X`` (:meth:`InputProjection.Z`). ``x``:
    ``residual/X[layer, sequences, :stop]`` when the caller has read it already.
    """
    projection = InputProjection.read(handle, layer)
    if x is None:
        x = handle[RESIDUAL_X][layer, sequences, :stop]
    return projection.Z(x)


def read_values(
    handle: h5py.File | h5py.Group,
    layer: int,
    sequences: slice,
    stop: int | None = None,
    z: np.ndarray | None = None,
) -> np.ndarray:
    """Value vectors ``V = Z W_V^T + b_V`` per key/value head: (B, K, stop, hd) float32
    (:meth:`InputProjection.values`). ``z``: this block's :func:`read_Z` when the caller has it
    already (else it is read)."""
    projection = InputProjection.read(handle, layer)
    if z is None:
        x = handle[RESIDUAL_X][layer, sequences, :stop]
        z = projection.Z(x)
    return projection.values(z)


# ------------------------------------------------------------------ block-wise reading

#: Bytes per block of sequences: at most this fraction of one layer's data as the readers return
#: it (every stored per-layer dataset, plus ``Z`` and the values as float32) ...
BLOCK_LAYER_FRACTION = 1 / 16
#: ... and at most this many bytes; at least one sequence per block.
BLOCK_MAX_BYTES = 32 * 2**20

#: The stored datasets with one entry per (layer, sequence).
PER_LAYER_DATASETS: tuple[str, ...] = tuple(
    spec.name for spec in DATASETS if spec.axes[:2] == ("layer", "sequence")
)


def _chunk_filters(dataset: h5py.Dataset) -> tuple[int, ...] | None:
    """The filter ids of ``dataset``'s pipeline when :func:`read_layer` can decode its chunks
    itself (one chunk per (layer, sequence), a pipeline of :mod:`sinkscope.extraction.h5codec`), else None."""
    chunks = dataset.chunks
    if (
        chunks is None
        or dataset.ndim < 2
        or chunks[:2] != (1, 1)
        or chunks[2:] != dataset.shape[2:]
    ):
        return None
    filters = h5codec.pipeline(dataset)
    return filters if h5codec.decodable(filters) else None


def read_layer(
    dataset: h5py.Dataset,
    layer: int,
    sequences: slice = slice(None),
    trailing: tuple[Any, ...] = (),
    out: np.ndarray | None = None,
    threads: int | None = None,
    empty: Callable[[tuple[int, ...], np.dtype], np.ndarray] = np.empty,
) -> np.ndarray:
    """``dataset[layer, sequences, *trailing]`` (a block of sequences of one layer; ``trailing``:
    slices or integers), decoded by several threads.

    The layout stores one chunk per (layer, sequence), shuffled and compressed
    (:mod:`sinkscope.extraction.h5codec`); HDF5 decodes one chunk at a time while h5py holds the GIL. Here
    the raw chunks are read (``read_direct_chunk``) and decoded by ``threads`` threads (default:
    the cores this process may use); the values are identical. Any other chunking or filter
    falls back to h5py.
    ``out``: a C-contiguous array of the result's shape and the dataset's dtype to fill; else
    ``empty(shape, dtype)`` allocates it. A chunk that cannot be decoded raises
    :class:`ActivationFileError` naming the file, dataset and chunk.
    """
    first, stop, step = sequences.indices(dataset.shape[1])
    if step != 1:
        raise ValueError(f"sequences must be a contiguous slice, got {sequences}")
    selection = (layer, slice(first, stop), *trailing)
    shape = np.broadcast_to(np.empty((), dtype=bool), dataset.shape)[selection].shape
    if out is None:
        out = empty(shape, np.dtype(dataset.dtype))
    elif out.shape != shape or out.dtype != dataset.dtype:
        raise ValueError(f"out has {out.shape} {out.dtype}; expected {shape} {dataset.dtype}")
    filters = _chunk_filters(dataset)
    if filters is None:
        dataset.read_direct(out, source_sel=selection)
        return out
    dtype = np.dtype(dataset.dtype)
    chunk_shape = dataset.chunks[2:]
    zeros = (0,) * (dataset.ndim - 2)

    def decode(row: int, mask: int, raw: bytes) -> None:
        try:
            chunk = h5codec.decode_chunk(raw, filters, mask, dtype).reshape(chunk_shape)
        except ValueError as error:
            raise damaged_file_error(
                dataset.file.filename,
                f"{dataset.name} chunk (layer {layer}, sequence {first + row}) cannot be decoded "
                f"({error})",
            ) from error
        out[row] = chunk[trailing]

    workers = threads or len(os.sched_getaffinity(0))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        jobs = []
        for row, sequence in enumerate(range(first, stop)):
            mask, raw = dataset.id.read_direct_chunk((layer, sequence, *zeros))
            jobs.append(pool.submit(decode, row, mask, raw))
        for job in jobs:
            job.result()
    return out


def file_sizes(handle: h5py.File | h5py.Group) -> dict[str, int]:
    """The axis sizes of the layout (``layer``, ``sequence``, ``position``, ...) of a file."""
    t1 = int(read_attr(handle, ATTR_CONTEXT_LENGTH)) + 1
    return {
        "layer": int(read_attr(handle, ATTR_N_LAYERS)),
        "sequence": int(read_attr(handle, ATTR_N_SEQUENCES)),
        "position": t1,
        "query": t1,
        "key": t1,
        "d_model": int(read_attr(handle, ATTR_D_MODEL)),
        "head": int(read_attr(handle, ATTR_N_HEADS)),
        "kv_head": int(read_attr(handle, ATTR_N_KV_HEADS)),
        "head_dim": int(read_attr(handle, ATTR_HEAD_DIM)),
    }


def sequence_layer_bytes(handle: h5py.File | h5py.Group) -> dict[str, int]:
    """Bytes of one sequence of one layer: ``stored`` (the per-layer datasets in their stored
    dtypes) and ``derived`` (``Z`` and the values as float32, as :func:`read_Z` and
    :func:`read_values` return them)."""
    stored = 0
    for name in PER_LAYER_DATASETS:
        dataset = handle[name]
        stored += int(np.prod(dataset.shape[2:])) * dataset.dtype.itemsize
    sizes = file_sizes(handle)
    derived = sum(4 * int(np.prod([sizes[a] for a in spec.axes[2:]])) for spec in DERIVED)
    return {"stored": stored, "derived": derived}


def release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Readers that stream a file layer by layer call it after each layer: the float64 work arrays
    of a few MB each fragment glibc's heap (its mmap threshold adapts upwards), and the resident
    size creeps up by ~8 MB per layer although nothing is kept; trimming keeps the peak at about
    one layer's working set.
    """
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def default_block_size(handle: h5py.File | h5py.Group) -> int:
    """Sequences per block: :data:`BLOCK_LAYER_FRACTION` of one layer's data as read (stored
    datasets plus the recomputed ``Z`` and values, :func:`sequence_layer_bytes`), capped at
    :data:`BLOCK_MAX_BYTES` (at least 1, at most ``N``).

    The float32/float64 work arrays of a block take up to about 10 times its bytes (measured:
    oversmoothing ~11x before heap fragmentation, ~20x with it), so the working set stays near
    one layer's data. Used by :mod:`sinkscope.oversmoothing.analysis` and :mod:`sinkscope.geometry.analysis`.
    """
    n_seq = int(handle[RESIDUAL_X].shape[1])
    per_sequence = sum(sequence_layer_bytes(handle).values())
    budget = min(BLOCK_LAYER_FRACTION * n_seq * per_sequence, BLOCK_MAX_BYTES)
    return int(min(n_seq, max(1, budget // per_sequence)))
