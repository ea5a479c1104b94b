"""Block-wise oversmoothing analysis: the tables do not depend on the block size.

:func:`sinkscope.oversmoothing.analysis.analyze_file` reads a layer in blocks of sequences and
pools per-sequence statistics; one sequence per block, blocks that straddle the output-projection
check (``SEQUENCE_CHUNK`` of :mod:`sinkscope.oversmoothing.layer`, set to 2 here) and a single
block must give the same tables. Quantities kept per sequence and reduced at the end are
bit-identical; the pooled float64 Gram matrices of Theorem 5.1's moments and the float64 map back
of the head updates (``rho`` of ``X + W Z M^T``) are summed in another order (float64 rounding
only).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from sinkscope.extraction.h5layout import open_activations
from sinkscope.extraction.h5read import (
    BLOCK_LAYER_FRACTION,
    default_block_size,
    read_values,
    read_Z,
    sequence_layer_bytes,
)
from sinkscope.heads.classify import classify_file
from sinkscope.oversmoothing import layer
from sinkscope.oversmoothing.analysis import analyze_file
from sinkscope.oversmoothing.moments import MomentAccumulator, estimate_moments
from sinkscope.oversmoothing.post_norm import (
    POST_NORM_EPS,
    fit_post_norm_gain,
    post_norm_residual_sq,
    post_norm_sums,
)

#: Columns computed per sequence and averaged at the end: equal bit for bit across block sizes.
EXACT = {
    "per_head": (
        "uniformity",
        "s_l",
        "kappa",
        "rho_x",
        "head_update_norm",
    ),
    "per_layer": (
        "rho_before",
        "rho_after",
        "s_l",
        "kappa",
        "full_update_norm",
        "head_update_norm",
        "post_norm_fit_rel_err",
        "head_sum_rel_err",
        "output_bias_norm",
        "probs_upper_max",
        "probs_row_sum_max_err",
    ),
}


def _assert_same_tables(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> None:
    assert a.keys() == b.keys()
    for name, left in a.items():
        right = b[name]
        assert left.columns == right.columns and left.shape == right.shape, name
        for column in left.columns:
            x, y = left[column], right[column]
            if x.dtype.is_float():
                u, v = x.to_numpy(), y.to_numpy()
                if column in EXACT.get(name, ()):
                    np.testing.assert_array_equal(u, v, err_msg=f"{name}.{column}")
                else:
                    # abs_err_* and deltas are differences of nearly equal numbers: atol
                    np.testing.assert_allclose(
                        u, v, rtol=1e-10, atol=1e-13, err_msg=f"{name}.{column}"
                    )
            else:
                assert x.equals(y, null_equal=True), f"{name}.{column}"


def test_tables_do_not_depend_on_the_block_size(extracted, monkeypatch) -> None:
    _family, path, _model, ids = extracted
    n_seq = ids.shape[0]
    assert n_seq == 3
    # the output-projection check covers the first 2 sequences: block 1..2 straddles it
    monkeypatch.setattr(layer, "SEQUENCE_CHUNK", 2)
    _, per_head = classify_file(path)
    lengths = [5, 12, 20]
    one = analyze_file(path, per_head, lengths, block_size=n_seq)
    for size in (1, 2):
        _assert_same_tables(analyze_file(path, per_head, lengths, block_size=size), one)
    # the numbers are real: BOS in the token set changes them
    with_bos = analyze_file(path, per_head, lengths, include_bos=True, block_size=1)
    assert not np.allclose(with_bos["per_head"]["rho_xwza"], one["per_head"]["rho_xwza"])


def test_moment_accumulator_blocks_equal_one_pass() -> None:
    rng = np.random.default_rng(5)
    z = rng.normal(size=(7, 9, 4)) + rng.normal(size=4)
    x = 1.7 * z + 0.1 * rng.normal(size=z.shape)
    lengths = [2, 5, 9]
    whole = estimate_moments(z, x, lengths)
    acc = MomentAccumulator(lengths, 4, 7)
    for first in range(0, 7, 3):
        acc.add(z[first : first + 3], x[first : first + 3])
    for index, n in enumerate(lengths):
        blocked = acc.moments(index)
        assert blocked.n_tokens == n and blocked.n_sequences == 7
        assert blocked.beta == pytest.approx(whole[index].beta, rel=1e-13)
        for name in ("z_bar", "sigma_v", "sigma_c"):
            np.testing.assert_allclose(
                getattr(blocked, name), getattr(whole[index], name), rtol=1e-12, atol=1e-14
            )
        # the sample definitions, directly: Sigma_V over all tokens, Sigma_C over pairs i != j
        eps = z[:, :n] - z[:, :n].mean((0, 1))
        sigma_v = np.einsum("sid,sie->de", eps, eps) / (7 * n)
        pairs = np.einsum("sid,sje->de", eps, eps) - np.einsum("sid,sie->de", eps, eps)
        np.testing.assert_allclose(blocked.sigma_v, sigma_v, atol=1e-12)
        np.testing.assert_allclose(blocked.sigma_c, pairs / (7 * n * (n - 1)), atol=1e-12)
        beta = (x[:, :n] * z[:, :n]).sum() / (z[:, :n] ** 2).sum()
        assert blocked.beta == pytest.approx(beta, rel=1e-12)
    with pytest.raises(ValueError, match="x must be given"):
        acc.add(z[:1])
    with pytest.raises(ValueError, match="more than n_sequences = 7"):
        acc.add(z[:1], x[:1])


def test_post_norm_sums_pool_to_the_gain_fit() -> None:
    rng = np.random.default_rng(2)
    pre = torch.as_tensor(rng.normal(size=(4, 6, 5)))
    gamma = torch.as_tensor(rng.uniform(0.5, 3.0, size=5))
    r = torch.sqrt((pre**2).mean(-1) + POST_NORM_EPS)
    update = gamma * pre / r[..., None] + 1e-3 * torch.as_tensor(rng.normal(size=(4, 6, 5)))
    uq, qq, r_blocks = post_norm_sums(update, pre)
    fitted, r_fit, err = fit_post_norm_gain(update, pre)
    np.testing.assert_allclose(uq.sum(0) / qq.sum(0), fitted, rtol=1e-13)
    np.testing.assert_allclose(r_blocks, r_fit, rtol=1e-15)
    np.testing.assert_allclose(fitted, gamma, rtol=1e-2)
    assert 0 < err < 1e-2
    # the residual from the sums equals the residual of the fitted map, token by token
    uu = (update * update).sum(1)
    residual2 = post_norm_residual_sq(fitted, uq, qq, uu)
    direct = ((update - fitted * pre / r_blocks[..., None]) ** 2).sum((1, 2))
    np.testing.assert_allclose(residual2, direct, rtol=1e-9)
    assert float(residual2.sum().sqrt() / (update**2).sum().sqrt()) == pytest.approx(err)


def test_default_block_size_is_a_fraction_of_a_layer(extracted) -> None:
    _family, path, _model, ids = extracted
    with open_activations(path) as handle:
        size = default_block_size(handle)
        # one sequence of one layer as the analyses hold it: the stored per-layer datasets and
        # the recomputed Z and values (float32)
        stored = sum(
            handle[name][0, 0].nbytes
            for name in ("residual/X", "attention/probs", "attention/residual_update")
        )
        derived = read_Z(handle, 0, slice(0, 1)).nbytes + read_values(handle, 0, slice(0, 1)).nbytes
        assert sequence_layer_bytes(handle) == {"stored": stored, "derived": derived}
    per_sequence = stored + derived
    n_seq = ids.shape[0]
    assert 1 <= size <= n_seq
    assert size == 1 or size * per_sequence <= BLOCK_LAYER_FRACTION * n_seq * per_sequence
