"""Extraction on tiny randomly initialised models of each supported family (no download needed).

What is checked against an independent recomputation (a plain transformers forward without hooks,
or the model's own modules):
* X = hidden_states[l], A = the attention probabilities, Z = the layer's input norm applied to X;
* the value vectors equal Z W_V^T + b_V with the stored per-head weights (GQA expanded);
* sum over heads of W_O[h] (A_h V_h) equals the output projection, and the stored residual update
  equals it (Llama) or its post-attention norm (Gemma 3);
* the file is complete, documented and rejected when truncated or foreign.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from sinkscope import h5layout
from sinkscope.extract import (
    CPU_BATCH_BUDGET_BYTES,
    _to_storage,
    auto_batch_size,
    batch_bytes_per_sequence,
    encode_chunk,
    extract_activations,
    resolve_batch_size,
    resolve_overlap,
)
from sinkscope.models import ModelShape, decoder_layers
from sinkscope.tokens import token_ids_sha256
from tests.conftest import SETTINGS


def test_stored_tensors_match_a_plain_forward(extracted) -> None:
    _, path, model, ids = extracted
    with torch.no_grad():
        out = model(
            torch.as_tensor(ids, dtype=torch.long),
            output_attentions=True,
            output_hidden_states=True,
        )
    with h5layout.open_activations(path) as f:
        n_layers = f.attrs["n_layers"]
        for layer in range(n_layers):
            np.testing.assert_allclose(
                f["residual/X"][layer], out.hidden_states[layer].numpy(), rtol=1e-5, atol=1e-5
            )
            np.testing.assert_allclose(
                f["attention/probs"][layer], out.attentions[layer].numpy(), rtol=1e-5, atol=1e-6
            )
        np.testing.assert_array_equal(f["tokens/input_ids"][...], ids)


def test_z_values_and_head_decomposition(extracted) -> None:
    family, path, model, _ = extracted
    layers = decoder_layers(model)
    with h5layout.open_activations(path) as f, torch.no_grad():
        n_heads, n_kv = int(f.attrs["n_heads"]), int(f.attrs["n_kv_heads"])
        for index, layer in enumerate(layers):
            x = torch.as_tensor(f["residual/X"][index])
            norm = layer.ln_1 if family == "gpt2" else layer.input_layernorm
            z = f["attention/Z"][index]
            np.testing.assert_allclose(z, norm(x).numpy(), rtol=1e-5, atol=1e-5)
            w_v, b_v = f["weights/W_V"][index], f["weights/b_V"][index]
            w_o = f["weights/W_O"][index]
            values = np.einsum("ntd,hkd->nhtk", z, w_v) + b_v[None, :, None, :]
            group = n_heads // n_kv
            np.testing.assert_allclose(
                values[:, ::group], f["attention/values"][index], rtol=1e-4, atol=1e-5
            )
            probs = f["attention/probs"][index]
            heads = np.einsum("nhqk,nhkv,hdv->nqd", probs, values, w_o)
            if family == "gpt2":
                attn_out = heads + layer.attn.c_proj.bias.numpy()
            else:
                attn_out = heads
            update = f["attention/residual_update"][index]
            if family == "gemma3":
                expected = layer.post_attention_layernorm(torch.as_tensor(attn_out)).numpy()
            else:
                expected = attn_out
            np.testing.assert_allclose(update, expected, rtol=1e-4, atol=1e-4)


def test_file_documents_itself(extracted) -> None:
    family, path, _, ids = extracted
    with h5layout.open_activations(path) as f:
        assert f.attrs["attn_implementation"] == "eager"
        assert f.attrs["token_ids_sha256"] == token_ids_sha256(ids)
        assert f.attrs["n_sequences"] == 3 and f.attrs["context_length"] == 20
        assert f.attrs["post_attention_norm"] == (family == "gemma3")
        for key in h5layout.FILE_ATTRIBUTES:
            if key != "complete":
                assert key in f.attrs, key
        for spec in h5layout.DATASETS:
            dataset = f[spec.name]
            assert dataset.attrs["axes"] == ",".join(spec.axes)
            assert dataset.attrs["description"] == spec.description
            assert len(dataset.shape) == len(spec.axes)


def test_truncated_and_foreign_files_are_rejected(extracted, tmp_path: Path) -> None:
    _, path, _, _ = extracted
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(path.read_bytes()[:4096])
    with pytest.raises(h5layout.ActivationFileError, match="not a readable HDF5"):
        h5layout.open_activations(truncated)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(h5layout.ActivationFileError, match="not a sinkscope activation file"):
        h5layout.open_activations(foreign)
    unfinished = tmp_path / "unfinished.h5"
    unfinished.write_bytes(path.read_bytes())
    with h5py.File(unfinished, "a") as f:
        del f.attrs["complete"]
    with pytest.raises(h5layout.ActivationFileError, match="never completed"):
        h5layout.open_activations(unfinished)


def test_w_vo_reader_matches_factors(extracted) -> None:
    _, path, _, _ = extracted
    with h5layout.open_activations(path) as f:
        product = h5layout.w_vo(f, 0)
        w_o, w_v = f["weights/W_O"][0], f["weights/W_V"][0]
        np.testing.assert_allclose(product[1], w_o[1] @ w_v[1], rtol=1e-6, atol=1e-8)
        gain = f["weights/norm_gain"][0]
        np.testing.assert_allclose(
            h5layout.w_vo(f, 0, with_norm_gain=True)[1],
            (w_o[1] @ w_v[1]) * gain[None, :],
            rtol=1e-6,
            atol=1e-8,
        )


def test_chunks_written_directly_equal_hdf5_own_filters(tmp_path: Path) -> None:
    """encode_chunk reproduces HDF5's shuffle + deflate pipeline byte for byte."""
    rng = np.random.default_rng(1)
    for dtype in ("float16", "float32", "int32"):
        for level in (0, 1, 6):
            chunk = (rng.standard_normal((3, 5, 7)) * 100).astype(dtype)
            filters = {"compression": "gzip", "compression_opts": level, "shuffle": True}
            with h5py.File(tmp_path / f"{dtype}{level}.h5", "w") as f:
                kwargs = {"shape": (2, 3, 5, 7), "dtype": dtype, "chunks": (1, 3, 5, 7)}
                own = f.create_dataset("own", **kwargs, **(filters if level else {}))
                direct = f.create_dataset("direct", **kwargs, **(filters if level else {}))
                own[1] = chunk
                direct.id.write_direct_chunk((1, 0, 0, 0), encode_chunk(chunk, level))
                assert (
                    own.id.read_direct_chunk((1, 0, 0, 0))[1]
                    == direct.id.read_direct_chunk((1, 0, 0, 0))[1]
                )
                np.testing.assert_array_equal(direct[1], chunk)
                np.testing.assert_array_equal(direct[0], np.zeros_like(chunk))


def test_overlapped_writes_and_auto_batch_give_the_same_file(extracted, tmp_path: Path) -> None:
    _, path, _, ids = extracted
    settings = dataclasses.replace(SETTINGS, batch_size="auto", overlap_writes="on")
    entry = {"dtype": "float32", "attn_implementation": "eager"}
    other = tmp_path / "overlap.h5"
    extract_activations(
        path.parent / "prepared", path.parent / "tokens.json", other, entry, settings, "cfg", False
    )
    with h5layout.open_activations(path) as a, h5layout.open_activations(other) as b:
        for spec in h5layout.DATASETS:
            np.testing.assert_array_equal(a[spec.name][...], b[spec.name][...], err_msg=spec.name)
        profile = json.loads(b.attrs["extraction_profile"])
        assert profile["batch_size"] == len(ids)  # tiny sequences: all fit the CPU budget
        assert profile["overlap_writes"] is True
        stages = profile["forward"] + profile["to_host"] + profile["write_wait"]
        assert 0 < stages <= float(b.attrs["extraction_seconds"])
        assert 0 <= profile["write_io"] <= profile["write"]


def test_batch_size_and_overlap_settings() -> None:
    shape = ModelShape(
        n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_model=32, max_positions=64
    )
    t1 = 11
    per_sequence = 4 * ((2 + 2) * 4 * t1 * t1 + 4 * 2 * t1 * 32 + 2 * 2 * t1 * 8)
    assert batch_bytes_per_sequence(shape, t1) == per_sequence
    assert auto_batch_size(shape, t1, 10**9, "cpu") == CPU_BATCH_BUDGET_BYTES // per_sequence
    assert auto_batch_size(shape, t1, 3, "cpu") == 3
    big = ModelShape(
        n_layers=80, n_heads=64, n_kv_heads=8, head_dim=128, d_model=8192, max_positions=8192
    )
    assert auto_batch_size(big, 8193, 50, "cpu") == 1
    assert resolve_batch_size(5, shape, t1, 10, "cpu") == 5
    for bad in (0, -1, "8", True, 2.5):
        with pytest.raises(ValueError, match=r"extraction\.batch_size"):
            resolve_batch_size(bad, shape, t1, 10, "cpu")
    assert resolve_overlap("auto", "cpu") is False
    assert resolve_overlap("auto", "cuda:0") is True
    assert resolve_overlap("on", "cpu") is True
    with pytest.raises(ValueError, match=r"extraction\.overlap_writes"):
        resolve_overlap("yes", "cpu")


def test_float16_overflow_names_the_dataset() -> None:
    with pytest.raises(OverflowError, match="attention/Z layer 3"):
        _to_storage(torch.tensor([1.0, 7e4]), "float16", "attention/Z layer 3")
    with pytest.raises(OverflowError, match="float32"):
        _to_storage(torch.tensor([1.0, float("nan")]), "float16", "x")
    stored = _to_storage(torch.tensor([[0.5, -3.0]]), "float16", "x")
    assert stored.dtype == np.float16
    np.testing.assert_array_equal(stored, [[0.5, -3.0]])
