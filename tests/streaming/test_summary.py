"""Correlations of the StreamingLLM summary (:mod:`sinkscope.streaming.summary`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sinkscope.streaming.summary import correlation


def test_correlation_helper():
    x = np.arange(10.0)
    stats = correlation(x, 2 * x + 1, n_perm=2000)
    assert stats["pearson_r"] == pytest.approx(1.0) and stats["spearman_rho"] == pytest.approx(1.0)
    assert stats["p_permutation"] < 0.01
    assert math.isnan(correlation([1.0, 2.0], [3.0, 1.0])["spearman_rho"])
