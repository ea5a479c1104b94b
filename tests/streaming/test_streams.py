"""``sinkscope.streaming.streams.load_streams``: a corpus with fewer streams than
``streaming.params.n_streams`` is refused before the model is loaded (no silent cut to fewer
streams), with an error naming the config keys, the corpus and how many streams it holds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sinkscope.prepare.models import pick_device
from sinkscope.streaming.experiment import evaluate_pair
from sinkscope.streaming.recompute import recompute_pair
from sinkscope.streaming.streams import (
    N_STREAMS_KEY,
    STREAM_LENGTH_KEY,
    load_streams,
    prepared_dtype,
)
from tests.geometry.test_long_context import tiny_setup  # noqa: F401 (a fixture)
from tests.streaming.tiny import BF16_NLL_MAX_TOL, BF16_NLL_MEAN_TOL


def test_more_streams_than_the_corpus_holds_fail_before_the_model_is_loaded(
    tiny_setup,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """400 words = 400 tokens hold 400 // 39 = 10 streams of 40 tokens (BOS + 39)."""
    import sinkscope.prepare.models

    _, prepared, stream, provenance = tiny_setup

    def no_model(*args: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(sinkscope.prepare.models, "load_model", no_model)
    params = {"stream_length": 40, "n_streams": 11, "threads": None}
    with pytest.raises(ValueError) as raised:
        evaluate_pair(prepared, stream, provenance, params)
    assert str(raised.value) == (
        f"{N_STREAMS_KEY} = 11 exceeds the 10 sequences of 40 tokens that corpus corpus holds "
        f"({stream}: blocks of 39 tokens after BOS); set it to at most 10 or lower "
        f"{STREAM_LENGTH_KEY}"
    )
    assert (N_STREAMS_KEY, STREAM_LENGTH_KEY) == (
        "streaming.params.n_streams",
        "streaming.params.stream_length",
    )
    named = {"stream_length": 40, "n_streams": 11, "seed": 0, "dataset_name": "words"}
    with pytest.raises(ValueError, match="that corpus words holds"):
        load_streams(prepared, stream, provenance, named)
    with pytest.raises(AssertionError, match="the model was loaded"):  # 10 fit
        load_streams(prepared, stream, provenance, {**named, "n_streams": 10})


def test_the_streams_of_a_corpus_that_holds_them(tiny_setup) -> None:  # noqa: F811
    _, prepared, stream, provenance = tiny_setup
    p = {"stream_length": 40, "n_streams": 10, "seed": 0}
    streams = load_streams(prepared, stream, provenance, p)
    assert tuple(streams.ids.shape) == (10, 40) and len(streams.offsets) == 10
    assert (streams.ids[:, 0] == streams.bos_token_id).all()


def _spy_load_model(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Record every call of :func:`sinkscope.prepare.models.load_model` (which still loads)."""
    import sinkscope.prepare.models

    calls: list[tuple] = []
    real = sinkscope.prepare.models.load_model

    def recording(*args: object, **kwargs: object) -> torch.nn.Module:
        calls.append(args + tuple(kwargs.values()))
        return real(*args, **kwargs)

    monkeypatch.setattr(sinkscope.prepare.models, "load_model", recording)
    return calls


def test_the_model_is_loaded_once_in_the_configured_dtype_on_the_device(
    tiny_setup,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bfloat16 configured: one load, in bfloat16, onto the given device; every weight is
    bfloat16 (no float32 copy) and the ids are created on that device (the one tensor
    load_streams creates: torch.as_tensor, called by that module with ``device``; the module
    imports torch inside the function, so torch's own as_tensor is watched). Without a dtype the
    model loads in the dtype it was prepared in (float32 here)."""
    import sys

    from sinkscope.streaming import streams as streams_module

    _, prepared, stream, provenance = tiny_setup
    calls = _spy_load_model(monkeypatch)
    created: list[object] = []
    as_tensor = torch.as_tensor

    def watched(*args: object, **kwargs: object) -> torch.Tensor:
        if sys._getframe(1).f_globals.get("__name__") == streams_module.__name__:
            created.append(kwargs.get("device"))
        return as_tensor(*args, **kwargs)

    monkeypatch.setattr(torch, "as_tensor", watched)
    p = {"stream_length": 40, "n_streams": 2, "seed": 0}
    loaded = load_streams(prepared, stream, provenance, p, dtype="bfloat16", device="cpu")
    assert calls == [(prepared, "bfloat16", "eager", "cpu")]
    assert {param.dtype for param in loaded.model.parameters()} == {torch.bfloat16}
    assert loaded.ids.dtype == torch.int64 and loaded.ids.device == torch.device("cpu")
    assert created == ["cpu"]
    calls.clear()
    assert prepared_dtype(prepared) == "float32"
    default = load_streams(prepared, stream, provenance, p, device="cpu")
    assert calls == [(prepared, "float32", "eager", "cpu")]
    assert {param.dtype for param in default.model.parameters()} == {torch.float32}
    assert torch.equal(default.ids, loaded.ids)


#: A small policy grid on the tiny Llama of ``tiny_setup`` (a word-level vocabulary: the
#: neutral token is an id).
PAIR_PARAMS = {
    "stream_length": 40,
    "n_streams": 2,
    "window_sizes": [8],
    "sink_count": 2,
    "sink_counts": [1],
    "neutral_counts": [1],
    "neutral_token": 5,
    "k_sweep_window": 8,
    "layer_ablation_window": 6,
    "layer_ablation_length": 24,
    "recompute_samples": 4,
    "chunk_size": 16,
}


def test_bfloat16_and_float32_pairs_agree(
    tiny_setup,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rules' functions with the model in bfloat16 and in float32, on the CPU: every
    per-position NLL (caches and re-computation) within the stated tolerance of the float32 one,
    and not equal to it (the bfloat16 model really ran; the settings table stays as it was, so
    that the default run's tables are byte-identical); on the CPU the policies run one per forward (the default that keeps the CPU tables
    byte-identical)."""
    from sinkscope.streaming.evaluator import StreamingEvaluator

    _, prepared, stream, provenance = tiny_setup
    batches: list[int] = []
    run_batch = StreamingEvaluator.run_batch

    def counting(self, ids, policies, *args, **kwargs):
        batches.append(len(policies))
        return run_batch(self, ids, policies, *args, **kwargs)

    monkeypatch.setattr(StreamingEvaluator, "run_batch", counting)
    tables = {}
    for dtype in ("float32", "bfloat16"):
        pair = evaluate_pair(prepared, stream, provenance, PAIR_PARAMS, dtype=dtype, device="cpu")
        pair |= recompute_pair(
            prepared, stream, provenance, pair["nll_by_position"], pair["settings"],
            PAIR_PARAMS, dtype=dtype, device="cpu",
        )  # fmt: skip
        tables[dtype] = pair
    assert batches and set(batches) == {1}
    full, half = tables["float32"], tables["bfloat16"]
    for name, keys, column in (
        ("nll_by_position", ["policy", "position"], "nll"),
        ("recompute", ["baseline", "policy", "n_tokens"], "recompute_nll"),
    ):
        assert full[name].select(keys).equals(half[name].select(keys))
        difference = (full[name][column] - half[name][column]).abs()
        assert 0 < difference.mean() <= BF16_NLL_MEAN_TOL, (name, difference.mean())
        assert difference.max() <= BF16_NLL_MAX_TOL, (name, difference.max())


def test_the_streaming_steps_load_the_model_as_the_config_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rules analyze_streaming and analyze_streaming_recompute pass the model entry's dtype and
    attention kernel and extraction.device from the config, not from their params (the device is
    no rerun trigger; these params hold neither)."""
    from sinkscope import steps
    from sinkscope.streaming import experiment, recompute

    seen: dict[str, dict] = {}

    def record(name: str):
        def analysis(*args: object, **kwargs: object) -> dict:
            seen[name] = kwargs
            return {}

        return analysis

    monkeypatch.setattr(experiment, "evaluate_pair", record("evaluate_pair"))
    monkeypatch.setattr(recompute, "recompute_pair", record("recompute_pair"))
    monkeypatch.setattr(steps, "_write_tables", lambda *args: None)
    monkeypatch.setattr(steps, "_draw", lambda *args: None)
    smk = SimpleNamespace(
        rule="analyze_streaming",
        config={
            "models": {"m": {"dtype": "bfloat16", "attn_implementation": "eager"}},
            "extraction": {"device": "cuda:1"},
        },
        wildcards=SimpleNamespace(model="m", dataset="d"),
        input=SimpleNamespace(
            model_dir="m", stream="s", provenance="p", nll_by_position="n", settings="t"
        ),
        params=SimpleNamespace(params={"n_streams": 1}),
        output=SimpleNamespace(),
    )
    steps.analyze_streaming(smk)
    smk.rule = "analyze_streaming_recompute"
    steps.analyze_streaming_recompute(smk)
    expected = {"dtype": "bfloat16", "attn_implementation": "eager", "device": "cuda:1"}
    assert seen == {"evaluate_pair": expected, "recompute_pair": expected}


def test_one_device_choice_for_every_job_that_runs_a_model() -> None:
    """pick_device has one definition (the extraction imports it from the model loading); auto
    is the GPU where one is visible, else the CPU; a CUDA device that is not visible is refused."""
    import sinkscope.extraction.extract
    import sinkscope.prepare.models

    assert sinkscope.extraction.extract.pick_device is sinkscope.prepare.models.pick_device
    assert pick_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="extraction.device = 'cuda:0' but no CUDA"):
            pick_device("cuda:0")
