"""BOS alignment (:mod:`sinkscope.geometry.alignment`): cosines of constructed vectors, the fixed
histogram and its quantiles, the middle layers of Figure 1's claim.
"""

from __future__ import annotations

import math

import numpy as np

from sinkscope.geometry.alignment import (
    COSINE_BINS,
    bos_cosines,
    cosine_histogram,
    histogram_quantiles,
    middle_layers,
)

# ----------------------------------------------------------------------------- cosines


def test_bos_cosines_on_constructed_vectors() -> None:
    e = np.eye(4)
    tokens = [3.0 * e[0], -0.5 * e[0], e[1], e[0] + e[1], np.zeros(4), e[0] - 2 * e[2]]
    z = np.stack([2.0 * e[0], *tokens])[None].astype(np.float16)
    cos = bos_cosines(z)
    expected = [1.0, -1.0, 0.0, 1 / math.sqrt(2), np.nan, 1 / math.sqrt(5)]
    assert cos.shape == (1, 6)
    np.testing.assert_allclose(cos[0], expected, atol=1e-3)  # float16 input
    assert np.isnan(cos[0, 4])
    # invariant to positive scaling of any token, computed per sequence
    z2 = np.concatenate([z, 7.0 * z]).astype(np.float32)
    np.testing.assert_allclose(bos_cosines(z2)[1], bos_cosines(z2)[0], atol=1e-6)


def test_histogram_bins_and_quantiles() -> None:
    counts = cosine_histogram(np.array([-1.0, 0.0, 1.0, np.nan, 2.0 / COSINE_BINS]))
    assert counts.sum() == 4 and counts[0] == 1 and counts[-1] == 1
    assert counts[COSINE_BINS // 2] == 1 and counts[COSINE_BINS // 2 + 1] == 1
    rng = np.random.default_rng(0)
    values = np.tanh(rng.normal(-0.2, 0.4, size=5000))
    quantiles = histogram_quantiles(
        cosine_histogram(values), [0.0, 0.25, 0.5, 0.75, 1.0], values.min(), values.max()
    )
    exact = np.quantile(values, [0.0, 0.25, 0.5, 0.75, 1.0])
    assert np.all(np.abs(quantiles - exact) <= 2.0 / COSINE_BINS)
    assert quantiles[0] == values.min() and quantiles[-1] == values.max()
    assert np.isnan(histogram_quantiles(np.zeros(COSINE_BINS, int), [0.5], 0, 0)).all()


def test_middle_layers() -> None:
    assert middle_layers(30) == list(range(8, 23))
    assert middle_layers(18) == list(range(5, 14))
    assert middle_layers(2) == [1]
    # a one-layer model (the 1-layer rehearsal divided by zero middle layers): its only layer
    assert middle_layers(1) == [0]
    assert middle_layers(0) == []
    assert all(0 <= layer < n for n in range(1, 49) for layer in middle_layers(n))
