"""Extraction on tiny randomly initialised models of each supported family (no download needed).

What is checked against an independent recomputation (a plain transformers forward without hooks,
or the model's own modules):
* X = hidden_states[l], A = the attention probabilities;
* Z and the value vectors, recomputed from X by ``h5read.read_Z`` / ``read_values`` (the layout
  stores neither), equal what the model's input norm and value projection output in a hooked
  forward, in float32 and in a bfloat16 forward (whose roundings ``input_norm`` reproduces);
* the value vectors equal Z W_V^T + b_V with the stored per-head weights (GQA expanded);
* sum over heads of W_O[h] (A_h V_h) equals the output projection, and the stored residual update
  equals it (Llama) or its post-attention norm (Gemma 3);
* the file is complete, documented and rejected when truncated or foreign.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from sinkscope.extraction import h5codec, h5layout, h5read
from sinkscope.extraction.batching import (
    CPU_BATCH_BUDGET_BYTES,
    auto_batch_size,
    batch_bytes_per_sequence,
    resolve_batch_size,
    resolve_overlap,
)
from sinkscope.extraction.extract import extract_activations
from sinkscope.extraction.h5write import to_storage
from sinkscope.extraction.introspection import rms_norm_cast
from sinkscope.io import partial_siblings
from sinkscope.prepare.models import ModelShape, architecture_of, decoder_layers, load_model
from sinkscope.prepare.tokens import token_ids_sha256
from tests.conftest import REPO, SETTINGS
from tests.extraction.conftest import forward_with_hooks


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
            z = h5read.read_Z(f, index, slice(None))
            np.testing.assert_allclose(z, norm(x).numpy(), rtol=1e-5, atol=1e-5)
            w_v, b_v = f["weights/W_V"][index], f["weights/b_V"][index]
            w_o = f["weights/W_O"][index]
            values = np.einsum("ntd,hkd->nhtk", z, w_v) + b_v[None, :, None, :]
            group = n_heads // n_kv
            np.testing.assert_allclose(
                values[:, ::group],
                h5read.read_values(f, index, slice(None)),
                rtol=1e-4,
                atol=1e-5,
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


def _hooked_forward(
    model: torch.nn.Module, ids: np.ndarray
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Every layer's attention input (the input norm's output) and value vectors (B, K, T1, hd),
    captured by forward hooks on the model's own modules (the schema-1 extraction's hooks)."""
    arch = architecture_of(model)
    layers = decoder_layers(model)
    z: list[torch.Tensor] = [torch.empty(0)] * len(layers)
    v: list[torch.Tensor] = [torch.empty(0)] * len(layers)
    config = model.config
    n_heads = getattr(config, "num_attention_heads", None) or config.n_head
    d = getattr(config, "hidden_size", None) or config.n_embd
    n_kv = getattr(config, "num_key_value_heads", None) or n_heads
    hd = getattr(config, "head_dim", None) or d // n_heads
    handles = []
    for index, layer in enumerate(layers):

        def keep_z(_module, _inputs, output, index=index):
            z[index] = output.detach()

        def keep_v(_module, _inputs, output, index=index):
            if arch.fused_qkv:  # GPT-2's c_attn: [query | key | value]
                output = output[..., 2 * d : 3 * d]
            batch, t1 = output.shape[:2]
            v[index] = output.detach().reshape(batch, t1, n_kv, hd).transpose(1, 2)

        handles.append(getattr(layer, arch.input_norm).register_forward_hook(keep_z))
        projection = layer.attn.c_attn if arch.fused_qkv else layer.self_attn.v_proj
        handles.append(projection.register_forward_hook(keep_v))
    forward_with_hooks(model, ids, handles)
    return z, v


def test_recomputed_z_and_values_equal_the_models_own(extracted) -> None:
    """read_Z / read_values (from the stored X and weights) against a hooked forward, float32."""
    _, path, model, ids = extracted
    z_ref, v_ref = _hooked_forward(model, ids)
    with h5layout.open_activations(path) as f:
        for layer in range(int(f.attrs["n_layers"])):
            z = h5read.read_Z(f, layer, slice(None))
            assert z.dtype == np.float32 and z.shape == tuple(z_ref[layer].shape)
            np.testing.assert_allclose(z, z_ref[layer].numpy(), rtol=1e-5, atol=1e-6)
            values = h5read.read_values(f, layer, slice(None))
            assert values.dtype == np.float32 and values.shape == tuple(v_ref[layer].shape)
            np.testing.assert_allclose(values, v_ref[layer].numpy(), rtol=1e-5, atol=1e-6)
            # blocks, prefixes and a given z give the same numbers
            part = h5read.read_Z(f, layer, slice(1, 3), stop=7)
            np.testing.assert_array_equal(part, z[1:3, :7])
            np.testing.assert_array_equal(
                h5read.read_values(f, layer, slice(1, 3), stop=7, z=part), values[1:3, :, :7]
            )


def test_recomputed_z_and_values_follow_a_bfloat16_forward(extracted, tmp_path: Path) -> None:
    """In a bfloat16 forward the model rounds its norm output (Llama: before the gain, Gemma and
    LayerNorm: after) and its value projection; the readers reproduce those roundings."""
    _, path, _, ids = extracted
    prepared = path.parent / "prepared"
    entry = {"dtype": "bfloat16", "attn_implementation": "eager"}
    out = tmp_path / "bf16.h5"
    extract_activations(prepared, path.parent / "tokens.json", out, entry, SETTINGS, "cfg", False)
    model = load_model(prepared, "bfloat16", "eager")
    z_ref, v_ref = _hooked_forward(model, ids)
    ulp = 2.0**-7  # one bfloat16 unit in the last place, relative
    with h5layout.open_activations(out) as f:
        assert f.attrs["dtype"] == "bfloat16"
        for layer in range(int(f.attrs["n_layers"])):
            z, expected = h5read.read_Z(f, layer, slice(None)), z_ref[layer].float().numpy()
            # the norm is elementwise after one reduction: equal but for rare ties (1 ulp)
            assert np.mean(z == expected) > 0.99
            np.testing.assert_allclose(z, expected, rtol=ulp, atol=0)
            values = h5read.read_values(f, layer, slice(None))
            expected = v_ref[layer].float().numpy()
            # the projection's float32 accumulation order is the kernel's: within 1 ulp
            assert np.mean(values == expected) > 0.9
            np.testing.assert_allclose(values, expected, rtol=ulp, atol=1e-6)
            # without the roundings (a float32 forward's formula) far fewer entries agree
            args = (f["weights/norm_gain"][layer], f["weights/norm_bias"][layer])
            kind, eps = str(f.attrs["input_norm"]), float(f.attrs["input_norm_eps"])
            unrounded = h5read.input_norm(f["residual/X"][layer], *args, kind, eps)
            assert np.mean(unrounded == z_ref[layer].float().numpy()) < 0.5


def test_file_documents_itself(extracted) -> None:
    family, path, _, ids = extracted
    with h5layout.open_activations(path) as f:
        assert f.attrs["attn_implementation"] == "eager"
        assert f.attrs["token_ids_sha256"] == token_ids_sha256(ids)
        assert f.attrs["n_sequences"] == 3 and f.attrs["context_length"] == 20
        assert f.attrs["post_attention_norm"] == (family == "gemma3")
        assert f.attrs["input_norm"] == ("layer" if family == "gpt2" else "rms")
        assert f.attrs["input_norm_cast"] == {"llama": "before_gain"}.get(family, "after_gain")
        assert f.attrs["input_norm_eps"] > 0
        assert (np.abs(f["weights/norm_bias"][...]).max() > 0) == (family == "gpt2")
        for derived in h5layout.DERIVED:  # recomputed, never stored
            assert derived.name not in f and hasattr(h5read, derived.reader)
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
    with pytest.raises(h5layout.ActivationFileError, match="not a readable HDF5") as error:
        h5layout.open_activations(truncated)
    assert str(error.value).startswith(f"{truncated}: ")
    assert str(error.value).endswith(
        f"; re-run the extraction: delete the file (rm {truncated}) and run snakemake again "
        "with the same options"
    )
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(h5layout.ActivationFileError, match="not a sinkscope activation file"):
        h5layout.open_activations(foreign)
    unfinished = tmp_path / "unfinished.h5"
    unfinished.write_bytes(path.read_bytes())
    with h5py.File(unfinished, "a") as f:
        del f.attrs["complete"]
    with pytest.raises(h5layout.ActivationFileError, match=r"never completed.*\(rm "):
        h5layout.open_activations(unfinished)
    # schema 1 stored Z and the values, schema 2 had no checksums: both are extracted again
    for version in (1, 2):
        old = tmp_path / f"schema{version}.h5"
        old.write_bytes(path.read_bytes())
        with h5py.File(old, "a") as f:
            f.attrs["schema_version"] = version
        with pytest.raises(
            h5layout.ActivationFileError, match=f"version {version} is not 3; re-run the"
        ):
            h5layout.open_activations(old)
    broken = tmp_path / "no_norm.h5"  # a file without the norm attributes names them
    broken.write_bytes(path.read_bytes())
    with h5py.File(broken, "a") as f:
        del f.attrs["input_norm_eps"]
    with (
        h5layout.open_activations(broken) as f,
        pytest.raises(h5layout.ActivationFileError, match="input_norm_eps"),
    ):
        h5read.read_Z(f, 0, slice(None))


@pytest.mark.parametrize("extracted", ["llama"], indirect=True)
def test_a_damaged_chunk_names_the_file_and_its_rebuild(extracted, tmp_path: Path) -> None:
    """A read error of HDF5 itself (a plain h5py slice, as the analyses read) inside
    ``with open_activations(...)`` is an ActivationFileError with the rebuild advice."""
    _, path, _, _ = extracted
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(path.read_bytes())
    with h5py.File(damaged, "r") as f:
        chunk = f["attention/probs"].id.get_chunk_info_by_coord((1, 0, 0, 0, 0))
    with open(damaged, "r+b") as handle:  # garbage over one compressed chunk
        handle.seek(chunk.byte_offset)
        handle.write(b"\x13" * chunk.size)
    with (
        pytest.raises(h5layout.ActivationFileError) as error,
        h5layout.open_activations(damaged) as f,
    ):
        f["attention/probs"][1]
    assert str(error.value).startswith(f"{damaged}: reading it failed (")
    assert f"(rm {damaged}) and run snakemake again" in str(error.value)
    with h5layout.open_activations(damaged) as f, pytest.raises(KeyError):  # not a file error
        f["no/such/dataset"]


def _flip_middle_of_chunk(path: Path, dataset: str, coord: tuple[int, ...], n: int = 64) -> None:
    """Invert ``n`` bytes in the middle of one stored chunk, keeping the file's size and times
    (what a bad disk or copy does unseen)."""
    import os

    times = os.stat(path)
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info_by_coord(coord)
    with open(path, "r+b") as handle:
        handle.seek(info.byte_offset + info.size // 2 - n // 2)
        data = handle.read(n)
        handle.seek(info.byte_offset + info.size // 2 - n // 2)
        handle.write(bytes(b ^ 0xFF for b in data))
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))


@pytest.mark.parametrize("extracted", ["llama"], indirect=True)
def test_damaged_bytes_in_a_raw_and_a_compressed_dataset_are_caught_on_read(
    extracted, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """64 bytes inverted in the middle of a chunk of ``residual/X`` (stored raw) and of
    ``attention/probs`` (zstd), size and modification time kept: every way of reading them
    fails, naming the file, the dataset and the fix: the analyses' threaded reader, a plain
    h5py read inside ``open_activations`` and ``sinkscope inspect --verify`` (exit 1; 0 on the
    intact file). Without the Fletcher-32 checksums the raw bytes would read back silently."""
    import shutil

    from sinkscope.cli import main
    from tests.conftest import SETTINGS

    _, first, _, _ = extracted
    path = tmp_path / "intact.h5"  # the default storage: residual/X raw, the maps zstd
    settings = dataclasses.replace(SETTINGS, uncompressed=("residual", "activations"))
    entry = {"dtype": "float32", "attn_implementation": "eager"}
    tokens = first.parent / "tokens.json"
    extract_activations(first.parent / "prepared", tokens, path, entry, settings, "c", False)
    damaged = tmp_path / "damaged.h5"
    shutil.copy2(path, damaged)
    with h5layout.open_activations(damaged) as f:
        assert h5codec.pipeline(f[h5layout.RESIDUAL_X]) == h5codec.PIPELINES["none"]
        assert h5codec.pipeline(f[h5layout.ATTENTION_PROBS]) == h5codec.PIPELINES["zstd"]
    _flip_middle_of_chunk(damaged, h5layout.RESIDUAL_X, (1, 0, 0, 0))
    _flip_middle_of_chunk(damaged, h5layout.ATTENTION_PROBS, (0, 1, 0, 0, 0))
    assert damaged.stat().st_size == path.stat().st_size
    advice = f"(rm {damaged}) and run snakemake again"
    for name, layer, sequence in ((h5layout.RESIDUAL_X, 1, 0), (h5layout.ATTENTION_PROBS, 0, 1)):
        with (
            h5layout.open_activations(damaged) as f,
            pytest.raises(h5layout.ActivationFileError) as error,
        ):
            h5read.read_layer(f[name], layer)
        message = str(error.value)
        assert message.startswith(f"{damaged}: /{name} chunk (layer {layer}, sequence {sequence})")
        assert "Fletcher-32 checksum mismatch" in message and advice in message
        with (
            pytest.raises(h5layout.ActivationFileError) as error,
            h5layout.open_activations(damaged) as f,
        ):
            f[name][layer]
        message = str(error.value)
        assert "; damaged: " in message and advice in message
        assert f"/{h5layout.RESIDUAL_X} chunk (1, 0, 0, 0): Fletcher-32" in message
        assert f"/{h5layout.ATTENTION_PROBS} chunk (0, 1, 0, 0, 0): Fletcher-32" in message
    assert main(["inspect", "--verify", str(path)]) == 0
    assert "matched its checksum" in capsys.readouterr().out
    assert main(["inspect", "--verify", str(damaged)]) == 1
    err = capsys.readouterr().err
    assert f"{damaged}: /{h5layout.RESIDUAL_X} chunk (1, 0, 0, 0): Fletcher-32" in err
    assert f"{damaged}: /{h5layout.ATTENTION_PROBS} chunk (0, 1, 0, 0, 0): Fletcher-32" in err
    assert f"rm {damaged}" in err


@pytest.mark.parametrize("extracted", ["llama"], indirect=True)
def test_a_file_made_with_other_settings_is_refused_naming_what_differs(
    extracted, tmp_path: Path
) -> None:
    """A pair's file made by a run with N = 3 and T = 20 (what the extraction records,
    :func:`sinkscope.config.content_settings`) is refused by a run of the same pair with N = 2,
    T = 32 and another model path, naming each differing key with the file's and the config's
    value and the rebuild; a run that differs only in descriptions, the batch size or the device
    reads it."""
    import copy

    from sinkscope.config import content_settings, load_layered_config, validate_config
    from tests.conftest import SETTINGS, TINY

    _, first, _, _ = extracted
    weights = str(first.parent / "weights")
    base = validate_config(load_layered_config([TINY]))  # the defaults filled in
    base["models"] = {"llama": {**base["models"]["smollm2-135m"], "source": {
        "kind": "local", "path": weights}}}  # fmt: skip
    base["datasets"] = {"random": base["datasets"]["alice"]}
    made = copy.deepcopy(base)
    made["extraction"].update(n_sequences=3, context_length=20)
    path = tmp_path / "made.h5"
    entry = {"dtype": "float32", "attn_implementation": "eager"}
    extract_activations(
        first.parent / "prepared", first.parent / "tokens.json", path, entry, SETTINGS, "c",
        False, content_settings=content_settings(made, "llama", "random"),
    )  # fmt: skip
    same = copy.deepcopy(made)
    same["models"]["llama"]["description"] = "edited"
    same["datasets"]["random"]["description"] = "edited"
    same["extraction"].update(batch_size=1, device="cpu")
    assert h5layout.check_pair(path, "llama", "random", content_settings(same, "llama", "random"))
    other = copy.deepcopy(base)
    other["models"]["llama"]["source"]["path"] = weights + "-other"
    with pytest.raises(h5layout.ActivationFileError) as error:
        h5layout.check_pair(path, "llama", "random", content_settings(other, "llama", "random"))
    message = str(error.value)
    assert message.startswith(f"{path}: it was extracted with other settings than this run's (")
    assert "extraction.context_length: file 20, config 32" in message
    assert "extraction.n_sequences: file 3, config 2" in message
    assert f"models.llama.source.path: file {weights!r}, config {weights + '-other'!r}" in message
    assert f"(rm {path}) and run snakemake again" in message
    assert "storage_dtypes" not in message and "description" not in message


# A child process that runs the extraction and stalls in its first batch write, the HDF5 file
# open under its temporary name, until it is killed.
STALLING_EXTRACTION = """
import json, sys, time
from pathlib import Path
import sinkscope.extraction.extract as extract
from tests.conftest import SETTINGS
model, tokens, out, writing, entry = sys.argv[1:]
def stall(*args, **kwargs):
    Path(writing).touch()
    time.sleep(600)
extract.write_arrays = stall
extract.extract_activations(
    Path(model), Path(tokens), Path(out), json.loads(entry), SETTINGS, "cfg", progress=False
)
"""


@pytest.mark.parametrize("extracted", ["llama"], indirect=True)
def test_a_killed_extraction_leaves_no_partial_file_after_the_rerun(
    extracted, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``kill -9`` mid-write leaves the temporary file (nothing can remove it then, and no
    finished-looking file); the next extraction of the same output removes it and logs it."""
    model, tokens = tmp_path / "prepared", tmp_path / "tokens.json"  # made by the fixture
    entry = {"dtype": "float32", "attn_implementation": "eager"}
    out, writing = tmp_path / "killed" / "act.h5", tmp_path / "writing"
    child = subprocess.Popen(
        [sys.executable, "-c", STALLING_EXTRACTION, model, tokens, out, writing, json.dumps(entry)],
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 120
        while not writing.exists():
            assert child.poll() is None, "the extraction ended before its first write"
            assert time.monotonic() < deadline, "the extraction did not reach its first write"
            time.sleep(0.05)
    finally:
        child.kill()  # SIGKILL
        child.wait()
    assert child.returncode == -9
    (partial,) = partial_siblings(out)
    assert partial.name == f".act.h5.partial-{child.pid}" and partial.stat().st_size > 0
    assert not out.exists()
    with caplog.at_level(logging.INFO, logger="sinkscope.io"):
        extract_activations(model, tokens, out, entry, SETTINGS, "cfg", progress=False)
    assert partial_siblings(out) == [] and os.listdir(out.parent) == ["act.h5"]
    assert f"removed {partial} (" in caplog.text
    with h5layout.open_activations(out) as f:
        assert f.attrs["complete"]


def test_w_vo_reader_matches_factors(extracted) -> None:
    _, path, _, _ = extracted
    with h5layout.open_activations(path) as f:
        product = h5read.w_vo(f, 0)
        w_o, w_v = f["weights/W_O"][0], f["weights/W_V"][0]
        np.testing.assert_allclose(product[1], w_o[1] @ w_v[1], rtol=1e-6, atol=1e-8)
        gain = f["weights/norm_gain"][0]
        np.testing.assert_allclose(
            h5read.w_vo(f, 0, with_norm_gain=True)[1],
            (w_o[1] @ w_v[1]) * gain[None, :],
            rtol=1e-6,
            atol=1e-8,
        )


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
    per_sequence = 4 * ((2 + 2) * 4 * t1 * t1 + 2 * (2 + 1) * t1 * 32)
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
    with pytest.raises(OverflowError, match="attention/residual_update layer 3"):
        to_storage(torch.tensor([1.0, 7e4]), "float16", "attention/residual_update layer 3")
    for values in ([-7e4, 1.0], [float("nan"), 1.0], [float("-inf")]):
        with pytest.raises(OverflowError, match="do not fit float16"):
            to_storage(torch.tensor(values), "float16", "attention/probs layer 0")
    assert to_storage(torch.tensor([-6.5e4, 6.5e4]), "float16", "x").dtype == np.float16
    with pytest.raises(OverflowError, match="float32"):
        to_storage(torch.tensor([1.0, float("nan")]), "float16", "x")
    stored = to_storage(torch.tensor([[0.5, -3.0]]), "float16", "x")
    assert stored.dtype == np.float16
    np.testing.assert_array_equal(stored, [[0.5, -3.0]])


def test_round_to_dtype_matches_torch_casts() -> None:
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(20_000) * 10.0 ** rng.integers(-4, 4, 20_000)).astype(np.float32)
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-130], dtype=np.float32)
    a = np.concatenate([a, ties])
    for dtype in ("bfloat16", "float16", "float32"):
        expected = torch.from_numpy(a).to(getattr(torch, dtype)).double().numpy()
        np.testing.assert_array_equal(h5read.round_to_dtype(a, dtype), expected, err_msg=dtype)
    with pytest.raises(ValueError, match="float8"):
        h5read.round_to_dtype(a, "float8")
    with pytest.raises(ValueError, match="input_norm 'batch'"):
        h5read.input_norm(a[None], np.ones(a.size), np.zeros(a.size), "batch", 1e-6)


def test_rms_norm_cast_is_measured_on_the_module() -> None:
    """Where an RMS norm rounds in a 16-bit forward is read off the module, not its family."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    llama, gemma = LlamaRMSNorm(32, eps=1e-6), Gemma3RMSNorm(32, eps=1e-6)
    with torch.no_grad():
        llama.weight.add_(0.3 * torch.randn(32))
        gemma.weight.add_(0.3 * torch.randn(32))
    assert rms_norm_cast(llama, 1e-6, 0.0) == "before_gain"
    assert rms_norm_cast(gemma, 1e-6, 1.0) == "after_gain"
    # with a gain of exactly 1 both casts give the same Z: the first is returned
    assert rms_norm_cast(LlamaRMSNorm(32, eps=1e-6), 1e-6, 0.0) == h5layout.NORM_CASTS[0]

    class RoundsTwice(torch.nn.Module):  # rounds to float16 first: no cast reproduces it
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(1 + 0.3 * torch.randn(32))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
            return (h.half().float() * self.weight.float()).to(x.dtype)

    with pytest.raises(ValueError, match="RoundsTwice: no input_norm_cast reproduces"):
        rms_norm_cast(RoundsTwice(), 1e-6, 0.0)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_full_disk_names_the_folder_and_the_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HDF5 fails on a full disk with "Can't decrement id ref count (file write
    failed ...)"; the console line (the error's first line) must say "No space left on device",
    with the folder and the bytes the file needs, and nothing is left behind. The full disk is
    Linux's /dev/full, on which every write fails with ENOSPC, the way HDF5 meets a full disk."""
    from sinkscope.extraction import extract
    from sinkscope.io import DiskFullError
    from tests.conftest import extract_tiny

    _, done, _, _ = extract_tiny("llama", tmp_path)
    with h5py.File(done) as handle:
        sizes = {
            "layer": handle.attrs["n_layers"], "sequence": handle.attrs["n_sequences"],
            "position": handle.attrs["context_length"] + 1,
            "query": handle.attrs["context_length"] + 1, "key": handle.attrs["context_length"] + 1,
            "head": handle.attrs["n_heads"], "kv_head": handle.attrs["n_kv_heads"],
            "head_dim": handle.attrs["head_dim"], "d_model": handle.attrs["d_model"],
        }  # fmt: skip
    needed = h5layout.uncompressed_bytes(sizes, SETTINGS.storage_dtypes)
    on_a_full_disk = h5py.File

    def open_on_a_full_disk(path: object, mode: str = "r", **kwargs: object) -> h5py.File:
        return on_a_full_disk("/dev/full", mode, **kwargs) if mode == "w" else on_a_full_disk(path)

    monkeypatch.setattr(extract.h5py, "File", open_on_a_full_disk)
    out = tmp_path / "results" / "again.h5"
    entry = {"source": {"kind": "local", "path": str(tmp_path / "weights")}}
    entry |= {"dtype": "float32", "attn_implementation": "eager"}
    with pytest.raises(DiskFullError) as error:
        extract.extract_activations(
            tmp_path / "prepared", tmp_path / "tokens.json", out, entry, SETTINGS, "cfg"
        )
    first_line = str(error.value).splitlines()[0]
    assert "No space left on device" in first_line and str(out.parent) in first_line
    assert f"{needed:,} bytes" in first_line and "are free there now" in first_line
    assert not out.exists() and list(out.parent.iterdir()) == []
