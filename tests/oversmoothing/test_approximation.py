"""Eq. (2) per sequence (:mod:`sinkscope.oversmoothing.approximation`) against the pooled
moments' closed form: a resample of sequences, given as its duplicated sequences to the moments
and trace terms of :mod:`sinkscope.oversmoothing.theory`, gives the same ``rho_hat`` as the
per-sequence coefficients averaged with the resample's counts; on real (tiny) activation files
the full sample gives the per-head table's ``rhohat_xwz`` and ``abs_err_xwz``."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from sinkscope.oversmoothing.approximation import HeadMaps, rho_hat_from_means, sequence_terms
from sinkscope.oversmoothing.moments import estimate_moments
from sinkscope.oversmoothing.names import BY_SEQUENCE_COLUMNS, SEQUENCE_TERMS
from sinkscope.oversmoothing.resampling import (
    head_error_draws,
    layer_similarity_draws,
    relative_offset_draws,
)
from sinkscope.oversmoothing.theory import closed_form_coefficients, rho_hat, trace_terms


@pytest.mark.parametrize("counts", [[1, 1, 1, 1, 1], [2, 0, 1, 1, 1], [0, 0, 5, 0, 0]])
def test_per_sequence_terms_resample_like_the_pooled_closed_form(counts: list[int]) -> None:
    rng = np.random.default_rng(7)
    n_seq, n, dim, k = 5, 7, 12, 3
    heads = torch.tensor([0, 0, 1, 1])  # two value maps shared by pairs of heads (GQA)
    z = torch.as_tensor(rng.normal(size=(n_seq, n, dim)) + 0.7, dtype=torch.float32)
    x = z * 1.8 + torch.as_tensor(rng.normal(size=(n_seq, n, dim)), dtype=torch.float32)
    w_in = torch.as_tensor(rng.normal(size=(2, k, dim)), dtype=torch.float64)
    w_out = torch.as_tensor(rng.normal(size=(4, dim, k)), dtype=torch.float64)
    b_v = torch.as_tensor(rng.normal(size=(4, k)), dtype=torch.float64)
    kappa = 1.3
    # reference: the resample as a sample of its own, through the pooled moments
    take = np.repeat(np.arange(n_seq), counts)
    moments = estimate_moments(z[take].double(), x[take].double(), [n])[0]
    coef = closed_form_coefficients(
        trace_terms(moments, w_out, w_in, b_v, heads), moments.beta, kappa
    )
    expected = rho_hat(coef, n, 0.0)
    # per sequence, averaged with the resample's counts
    terms = sequence_terms(z, HeadMaps.from_weights(w_in, heads, w_out, b_v), kappa)
    assert terms.shape == (n_seq, 4, len(SEQUENCE_TERMS))
    weights = np.asarray(counts, dtype=np.float64)
    xz = (x.double() * z.double()).sum((1, 2)).numpy()
    zz = z.double().square().sum((1, 2)).numpy()
    beta = (weights @ xz) / (weights @ zz)
    assert beta == pytest.approx(moments.beta, rel=1e-9)
    found = rho_hat_from_means(np.einsum("n,nht->ht", weights, terms) / weights.sum(), beta)
    np.testing.assert_allclose(found, expected, rtol=2e-6)


def _planted(errors_by_head: list[float], n_seq: int, spread: float, seed: int = 0) -> pl.DataFrame:
    """One pair's ``approximation_by_sequence`` rows where ``rho_hat`` is 0.5 for every head
    (``a = 0.5``, ``d0 = 1``) and each head's per-sequence ``rho`` is ``0.5 + error`` plus noise
    of sd ``spread`` (centred, so the sample's error is exactly the planted one)."""
    rng = np.random.default_rng(seed)
    rows = []
    for head, error in enumerate(errors_by_head):
        noise = rng.normal(size=n_seq) * spread
        noise -= noise.mean()
        for sequence in range(n_seq):
            rows.append(
                {
                    "model": "m", "dataset": "d", "layer": 0, "head": head,
                    "context_length": 64, "sequence": sequence,
                    "rho_xwz": 0.5 + error + noise[sequence],
                    "a_beta2": 0.0, "a_beta1": 0.0, "a_beta0": 0.5,
                    "d0_beta2": 0.0, "d0_beta1": 0.0, "d0_beta0": 1.0,
                    "sum_xz": 1.0, "sum_zz": 1.0,
                }
            )  # fmt: skip
    return pl.DataFrame(rows).select(BY_SEQUENCE_COLUMNS)


def test_head_error_draws_read_the_planted_errors() -> None:
    """Each head's planted error on the sample; its resampled errors spread as a mean of 30
    sequences of sd 0.05 does (0.05 / sqrt(30) x sqrt(29 / 30), within 15%) around it."""
    table = _planted([0.01, -0.03, 0.02], n_seq=30, spread=0.05)
    sample, draws = head_error_draws([table], 2000, np.random.default_rng(0))
    np.testing.assert_allclose(sample, [0.01, 0.03, 0.02], atol=1e-12)
    assert draws.shape == (2000, 3)
    noise = table.filter(pl.col("head") == 1)["rho_xwz"].to_numpy()
    expected = noise.std(ddof=0) / np.sqrt(30)
    assert draws[:, 1].std() == pytest.approx(expected, rel=0.15)
    # a constant per-sequence rho resamples to the same error every time
    flat, flat_draws = head_error_draws([_planted([0.2], 10, 0.0)], 50, np.random.default_rng(1))
    assert flat == pytest.approx([0.2]) and np.allclose(flat_draws, 0.2)


def test_the_files_per_sequence_terms_give_the_per_head_table(extracted) -> None:
    """On a tiny model of each family (Gemma 3: the post-norm's ``kappa``; GPT-2: value biases),
    the full sample of ``approximation_by_sequence`` gives every head's ``rho_xwz``,
    ``rhohat_xwz`` and ``abs_err_xwz`` of ``per_head`` at every ``T'``,
    :func:`head_error_draws` on it every head's ``abs_err_xwz`` at the largest ``T'`` and
    :func:`relative_offset_draws` the summary's ``rel_offset_xwz`` (Fig. 2 left)."""
    from sinkscope.heads.classify import classify_file
    from sinkscope.oversmoothing.analysis import analyze_file
    from sinkscope.oversmoothing.summary import approximation_offsets

    _family, path, _model, _ids = extracted
    tables = analyze_file(path, classify_file(path)[1], context_lengths=[8, 12, 16])
    by_sequence = tables["approximation_by_sequence"]
    assert by_sequence.columns == list(BY_SEQUENCE_COLUMNS)
    assert set(by_sequence["context_length"]) == {8, 12, 16}
    per_head = tables["per_head"].sort("context_length", "layer", "head")
    means = (
        by_sequence.group_by("context_length", "layer", "head")
        .agg(
            pl.col("rho_xwz").mean(),
            *[pl.col(c).mean() for c in SEQUENCE_TERMS],
            (pl.col("sum_xz").sum() / pl.col("sum_zz").sum()).alias("beta"),
        )
        .sort("context_length", "layer", "head")
    )
    np.testing.assert_allclose(means["rho_xwz"], per_head["rho_xwz"], rtol=1e-12)
    np.testing.assert_allclose(means["beta"], per_head["beta"], rtol=1e-9)
    terms = means.select(SEQUENCE_TERMS).to_numpy()
    found = rho_hat_from_means(terms, means["beta"].to_numpy())
    np.testing.assert_allclose(found, per_head["rhohat_xwz"], rtol=1e-5, atol=1e-7)
    sample, draws = head_error_draws([by_sequence], 10, np.random.default_rng(0))
    errors = per_head.filter(pl.col("context_length") == 16)["abs_err_xwz"]
    np.testing.assert_allclose(sample, errors.to_numpy(), rtol=1e-4, atol=1e-7)
    assert draws.shape == (10, errors.len()) and (draws >= 0).all()
    ratio, draws = relative_offset_draws([by_sequence], 10, np.random.default_rng(0))
    expected = approximation_offsets(tables["summary"])["rel_offset_xwz"][0]
    assert ratio == pytest.approx(expected, rel=1e-3, abs=1e-6) and draws.shape == (10,)


def test_the_files_layer_rho_per_sequence_gives_the_per_layer_table(extracted) -> None:
    """``layers_by_sequence`` on a tiny model of each family: its means over sequences are the
    per-layer table's ``rho_before`` / ``rho_after`` (Fig. 4), its first sequence's
    ``rho_before`` is the brute-force mean cosine over the pairs of that sequence's tokens
    ``1..T'`` of the layer's input ``X``, and the smallest of :func:`layer_similarity_draws` on
    the full sample is the summary's ``min_rho_layers``."""
    from sinkscope.extraction.h5layout import RESIDUAL_X, open_activations
    from sinkscope.heads.classify import classify_file
    from sinkscope.oversmoothing.analysis import analyze_file
    from sinkscope.oversmoothing.names import LAYERS_BY_SEQUENCE_COLUMNS

    _family, path, _model, _ids = extracted
    tables = analyze_file(path, classify_file(path)[1], context_lengths=[8, 16])
    rows = tables["layers_by_sequence"]
    assert rows.columns == list(LAYERS_BY_SEQUENCE_COLUMNS)
    means = rows.group_by("layer", "context_length").agg(
        pl.col("rho_before").mean(), pl.col("rho_after").mean()
    )
    per_layer = tables["per_layer"].join(means, on=["layer", "context_length"], suffix="_seq")
    assert per_layer.height == tables["per_layer"].height
    for c in ("rho_before", "rho_after"):
        np.testing.assert_allclose(per_layer[f"{c}_seq"], per_layer[c], rtol=1e-12)
    with open_activations(path) as handle:
        x = np.asarray(handle[RESIDUAL_X][0, 0, 1:9], dtype=np.float64)  # layer 0, sequence 0
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    cosines = unit @ unit.T
    brute = cosines[np.triu_indices(8, k=1)].mean()
    first = rows.filter(
        (pl.col("layer") == 0) & (pl.col("context_length") == 8) & (pl.col("sequence") == 0)
    )
    assert first["rho_before"][0] == pytest.approx(brute, rel=1e-5)
    sample, draws = layer_similarity_draws([rows], 10, np.random.default_rng(0))
    summary_min = tables["summary"]["min_rho_layers"].min()
    assert sample.min() == pytest.approx(summary_min, rel=1e-12)
    assert draws.shape == (10, sample.size)


def test_the_files_head_rho_per_sequence_gives_the_per_head_table(extracted) -> None:
    """``heads_by_sequence`` on a tiny model of each family: its means over sequences are the
    per-head table's ``rho``'s and uniformity at the largest ``T'``, and
    :func:`head_mean_draws` on the full sample gives the summary's head means (Fig. 2 right)."""
    from sinkscope.heads.classify import classify_file
    from sinkscope.oversmoothing.analysis import analyze_file
    from sinkscope.oversmoothing.names import HEADS_BY_SEQUENCE_COLUMNS
    from sinkscope.oversmoothing.resampling import head_mean_draws
    from sinkscope.oversmoothing.summary import INCREASE_ATTN_S

    _family, path, _model, _ids = extracted
    tables = analyze_file(path, classify_file(path)[1], context_lengths=[8, 16])
    rows = tables["heads_by_sequence"]
    assert rows.columns == list(HEADS_BY_SEQUENCE_COLUMNS)
    assert rows["context_length"].unique().to_list() == [16]
    values = ["rho_x", "rho_xwz_s", "rho_xwza_s", "rho_xwzau_s", "uniformity"]
    means = rows.group_by("layer", "head").agg(pl.col(c).mean() for c in values)
    per_head = (
        tables["per_head"]
        .filter(pl.col("context_length") == 16)
        .join(means, on=["layer", "head"], suffix="_seq")
    )
    assert per_head.height == tables["per_head"].height // 2
    for c in values:
        np.testing.assert_allclose(per_head[f"{c}_seq"], per_head[c], rtol=1e-12)
    summary = tables["summary"].filter(pl.col("context_length") == 16).row(0, named=True)
    sample, draws = head_mean_draws(INCREASE_ATTN_S)([rows], 10, np.random.default_rng(0))
    assert sample == pytest.approx(summary["mean_increase_attn_s"], rel=1e-12)
    assert draws.shape == (10,)


def test_prefix_terms_are_the_terms_of_each_prefix() -> None:
    """With ``lengths`` the terms of every prefix come from one pass over the tokens: each equals
    the terms of the sequences cut to that prefix (its own ``kappa``)."""
    rng = np.random.default_rng(3)
    n_seq, n, dim, k = 3, 9, 10, 2
    heads = torch.tensor([0, 1, 1])
    z = torch.as_tensor(rng.normal(size=(n_seq, n, dim)) + 0.4, dtype=torch.float32)
    w_in = torch.as_tensor(rng.normal(size=(2, k, dim)), dtype=torch.float64)
    w_out = torch.as_tensor(rng.normal(size=(3, dim, k)), dtype=torch.float64)
    b_v = torch.as_tensor(rng.normal(size=(3, k)), dtype=torch.float64)
    maps = HeadMaps.from_weights(w_in, heads, w_out, b_v)
    lengths, kappas = [2, 5, 9], [0.7, 1.1, 1.3]
    together = sequence_terms(z, maps, kappas, lengths)
    assert together.shape == (n_seq, 3, 3, len(SEQUENCE_TERMS))
    for j, (size, kappa) in enumerate(zip(lengths, kappas, strict=True)):
        alone = sequence_terms(z[:, :size], maps, kappa)
        np.testing.assert_allclose(together[:, j], alone, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="prefix sizes must increase"):
        sequence_terms(z, maps, 1.0, [5, 5])
