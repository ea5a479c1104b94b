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

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from sinkscope import h5layout
from sinkscope.models import decoder_layers
from sinkscope.tokens import token_ids_sha256


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
