"""Attention mass on the first positions (:mod:`sinkscope.streaming.first_positions`)."""

from __future__ import annotations

import numpy as np
import pytest

from sinkscope.streaming.first_positions import first_position_mass


@pytest.mark.parametrize("extracted", ["llama", "gemma3"], indirect=True)
def test_first_position_mass(extracted):
    family, path, _, _ = extracted
    table = first_position_mass(path, max_k=4)
    from sinkscope.extraction.h5layout import open_activations

    with open_activations(path) as handle:
        probs = handle["attention/probs"][...].astype(np.float64)
    n_layers = probs.shape[0]
    assert table.height == n_layers * 4
    expected = probs[:, :, :, 4:, :4].mean(axis=(1, 2, 3))  # (L, 4)
    got = table.sort("layer", "key_position")["mass"].to_numpy().reshape(n_layers, 4)
    np.testing.assert_allclose(got, expected, atol=1e-9)
    cumulative = table.sort("layer", "key_position")["cumulative_mass"].to_numpy()
    np.testing.assert_allclose(cumulative.reshape(n_layers, 4), np.cumsum(expected, axis=1))
    assert (table["cumulative_mass"] <= 1 + 1e-6).all()
    assert set(table["model"]) == {family}
