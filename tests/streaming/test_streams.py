"""``sinkscope.streaming.streams.load_streams``: a corpus with fewer streams than
``streaming.params.n_streams`` is refused before the model is loaded (no silent cut to fewer
streams), with an error naming the config keys, the corpus and how many streams it holds."""

from __future__ import annotations

import pytest

from sinkscope.streaming.experiment import evaluate_pair
from sinkscope.streaming.streams import N_STREAMS_KEY, STREAM_LENGTH_KEY, load_streams
from tests.geometry.test_long_context import tiny_setup  # noqa: F401 (a fixture)


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
