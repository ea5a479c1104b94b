"""The layout of the activation HDF5 files: what a file holds and how to open it.

The one place that defines every dataset and attribute: their names (``TOKEN_IDS``, ...,
``ATTR_*``), the specs of the stored datasets (:data:`DATASETS`, :data:`CONDITIONAL_DATASETS`,
:func:`spec_of`), of the arrays recomputed on reading (:data:`DERIVED`), the file attributes
(:data:`FILE_ATTRIBUTES`), shapes and chunks (:func:`dataset_shape`, :func:`chunk_shape`,
:func:`file_sizes`), the text of ``sinkscope inspect --layout`` (:func:`describe_layout`), and
opening a file (:func:`open_activations`, :func:`read_attr`, :class:`ActivationFileError`). The
readers that rebuild a layer's tensors are :mod:`sinkscope.extraction.h5read`.

One file per model x dataset pair, ``results/activations/{model}/{dataset}.h5``. Symbols:
``L`` layers, ``N`` sequences, ``H`` query heads, ``K`` key/value heads, ``T1 = T + 1`` positions
(position 0 is the BOS token, followed by ``T`` text tokens; in a no-BOS file, attribute
:data:`ATTR_BOS` ``"drop"``, position 0 is the first text token), ``D`` model width, ``hd`` head width.
The writer (``sinkscope.extraction.extract``), the readers (analyses, ``sinkscope inspect``) and docs/hdf5.md
all use :data:`DATASETS`; ``sinkscope inspect --layout`` prints it.

Schema 2 stores no tensor that is a deterministic function of others: the attention input ``Z``
(the layer's input norm applied to ``X``) and the value vectors ``V = Z W_V^T + b_V`` are
recomputed from ``residual/X`` and the stored weights by
:func:`~sinkscope.extraction.h5read.read_Z` and :func:`~sinkscope.extraction.h5read.read_values`,
the one reader every analysis uses (:data:`DERIVED` documents them; the norm's kind, epsilon and
rounding are file attributes). Files of schema 1 (which stored both) are rejected.

The datasets are compressed with the codec the file's ``codec`` attribute names (shuffle +
Zstandard by default, :mod:`sinkscope.extraction.h5codec`), except the kinds it lists as
uncompressed (by default the residual stream and the attention updates, which Zstandard barely
shrinks); each dataset's own filter pipeline says which. h5py reads them after ``import hdf5plugin``
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

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from sinkscope.extraction import h5codec

FORMAT = "sinkscope-activations"
SCHEMA_VERSION = 3

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
ATTR_CONTENT_SETTINGS = "content_settings"
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


#: The stored datasets with one entry per (layer, sequence).
PER_LAYER_DATASETS: tuple[str, ...] = tuple(
    spec.name for spec in DATASETS if spec.axes[:2] == ("layer", "sequence")
)


@dataclass(frozen=True)
class DerivedSpec:
    """An array of the layout that is not stored but recomputed exactly by its ``reader``."""

    name: str
    axes: tuple[str, ...]
    symbol: str
    description: str
    reader: str  # the function of sinkscope.extraction.h5read that returns it


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
#: forward dtypes whose roundings :func:`sinkscope.extraction.h5read.input_norm` reproduces
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
    ATTR_CONTENT_SETTINGS: "those sections themselves (JSON: model, dataset, extraction; "
    "sinkscope.config.content_settings); every reader compares them with its own config",
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
    ATTR_CODEC: "HDF5 codec and level of the datasets (sinkscope.extraction.h5codec), then the "
    "kinds of tensor stored without it (extraction.uncompressed); zstd needs `import hdf5plugin` "
    "before h5py reads the file",
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


def uncompressed_bytes(
    sizes: Mapping[str, int],
    storage_dtypes: Mapping[str, str],
    specs: tuple[DatasetSpec, ...] = DATASETS,
) -> int:
    """Bytes of the datasets ``specs`` in their storage dtypes before compression: the product
    of each dataset's axes (``sizes``: axis name -> length) times its item size. An upper bound
    of the file's size (the codec stores the attention maps in about a third)."""
    total = 0
    for spec in specs:
        itemsize = np.dtype(storage_dtypes.get(spec.dtype_key, spec.dtype_key)).itemsize
        total += int(np.prod(dataset_shape(spec, sizes), dtype=np.int64)) * itemsize
    return total


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
            raise damaged_file_error(path, f"reading it failed ({exc}){_damage(path)}") from exc


def _damage(path: str) -> str:
    """The damaged chunks of the file at ``path`` (:func:`sinkscope.extraction.h5codec.
    damaged_chunks`, at most 3), as a clause naming them, or "" when none is found."""
    try:
        with h5py.File(path, "r") as handle:
            found = h5codec.damaged_chunks(handle, limit=3)
    except OSError:
        return ""
    return f"; damaged: {'; '.join(found)}" if found else ""


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
    if path.is_dir():
        raise ActivationFileError(  # never advise deleting a folder
            f"{path}: a folder, not an activation file (results/activations/<model>/<dataset>.h5)"
        )
    if not h5py.is_hdf5(path):
        problem = "not an HDF5 file (no HDF5 signature)"
        if _activation_path(path):  # e.g. an empty file left where the extraction writes
            raise damaged_file_error(path, problem)
        raise ActivationFileError(  # a foreign file: no advice to delete it
            f"{path}: {problem}; an activation file is results/activations/<model>/<dataset>.h5"
        )
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


def check_pair(
    path: str | os.PathLike[str],
    model: str,
    dataset: str,
    expected: Mapping[str, Any] | None = None,
) -> Path:
    """``path`` if the activation file there was extracted for ``model`` on ``dataset`` (its
    :data:`ATTR_MODEL_NAME` and :data:`ATTR_DATASET_NAME`, the config's keys) with the settings
    ``expected`` (:func:`sinkscope.config.content_settings` of the reader's config, compared
    with the file's :data:`ATTR_CONTENT_SETTINGS`), else an :class:`ActivationFileError` naming
    what differs, the file's value and the config's, and how to rebuild the file: a file copied
    or moved between pairs or runs would otherwise be analysed as this run's (every reader of a
    pair's file calls this first, in :mod:`sinkscope.steps`)."""
    with open_activations(path) as handle:
        found = (str(read_attr(handle, ATTR_MODEL_NAME)), str(read_attr(handle, ATTR_DATASET_NAME)))
        recorded = (
            None if expected is None else read_attr(handle, ATTR_CONTENT_SETTINGS, as_json=True)
        )
    if found != (model, dataset):
        raise damaged_file_error(
            path,
            f"it holds the activations of model {found[0]!r} on dataset {found[1]!r}, but is "
            f"read for model {model!r} on dataset {dataset!r} (copied or moved from another "
            "pair?)",
        )
    if expected is not None:
        from sinkscope.variants import source_dataset

        prefixes = {
            "model": f"models.{model}",
            "dataset": f"datasets.{source_dataset(dataset)}",
            "extraction": "extraction",
        }
        differences = _differences(json.loads(json.dumps(expected)), recorded, prefixes)
        if differences:
            raise damaged_file_error(
                path,
                "it was extracted with other settings than this run's ("
                + "; ".join(differences)
                + "), e.g. copied from another run",
            )
    return Path(path)


def _differences(
    config: Any, recorded: Any, prefixes: Mapping[str, str], key: str = ""
) -> list[str]:
    """``"<config key>: file <value>, config <value>"`` for every leaf where ``recorded`` (the
    file's settings) and ``config`` differ; top-level sections are named by ``prefixes``."""
    if isinstance(config, dict) and isinstance(recorded, dict):
        out = []
        for name in sorted(set(config) | set(recorded)):
            dotted = prefixes.get(name, name) if not key else f"{key}.{name}"
            if name not in recorded:
                out.append(f"{dotted}: not in the file, config {config[name]!r}")
            elif name not in config:
                out.append(f"{dotted}: file {recorded[name]!r}, not in the config")
            else:
                out += _differences(config[name], recorded[name], prefixes, dotted)
        return out
    return [] if config == recorded else [f"{key}: file {recorded!r}, config {config!r}"]


def _activation_path(path: Path) -> bool:
    """Whether ``path`` is where the extraction writes (``.../activations/<model>/<name>.h5``):
    a damaged file there is rebuilt by deleting it, a file elsewhere is not the workflow's."""
    return path.suffix == ".h5" and path.parent.parent.name == "activations"


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


def describe_layout() -> str:
    """The layout as text (used by ``sinkscope inspect --layout`` and docs/hdf5.md)."""
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
