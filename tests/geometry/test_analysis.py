"""The per-pair geometry analysis (:func:`sinkscope.geometry.analysis.analyze_file`) compared with
a direct recomputation from the arrays of a real extracted file, one run per model family.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sinkscope.claims.checks.geometry import geometry_statements
from sinkscope.extraction.h5layout import open_activations
from sinkscope.extraction.h5read import read_values, read_Z
from sinkscope.geometry import halfspace_plots as hplots
from sinkscope.geometry import plots as gplots
from sinkscope.geometry.analysis import N_WORST, TABLE_COLUMNS, analyze_file
from sinkscope.geometry.halfspace_solver import halfspace_margin
from sinkscope.geometry.summary import summarize
from sinkscope.geometry.values import RANK_RTOL
from sinkscope.heads.classify import HeadClassThresholds, classify_file

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- integration


def _direct_values(handle, layer: int, head: int) -> np.ndarray:
    """W_O[h] (W_V[h] z + b_V[h]) for every sequence and position, from the stored factors."""
    z = read_Z(handle, layer, slice(None)).astype(np.float64)
    w_v = handle["weights/W_V"][layer, head].astype(np.float64)
    b_v = handle["weights/b_V"][layer, head].astype(np.float64)
    w_o = handle["weights/W_O"][layer, head].astype(np.float64)
    return (z @ w_v.T + b_v) @ w_o.T


def test_analyze_file_matches_direct_recomputation(extracted, tmp_path: Path) -> None:
    family, path, _, ids = extracted
    # every head counts as a sink so that J is non-empty in the tiny random models
    thresholds = HeadClassThresholds(sink=0.0)
    _, per_head = classify_file(path, thresholds)
    tables = analyze_file(path, per_head, thresholds, attend_threshold=0.15)
    assert set(tables) == set(TABLE_COLUMNS)
    for name, frame in tables.items():
        assert tuple(frame.columns) == TABLE_COLUMNS[name], name
        assert frame["model"].unique().to_list() == [family]
        assert frame["dataset"].unique().to_list() == ["random"]
        assert not {pl.Int32, pl.UInt32, pl.Float32} & set(frame.schema.values()), name

    with open_activations(path) as handle:
        n_layers, n_seq, t1, _ = handle["residual/X"].shape
        n_heads = handle["attention/probs"].shape[2]
        n_kv, hd = int(handle.attrs["n_kv_heads"]), int(handle.attrs["head_dim"])
        for layer in range(n_layers):
            z = read_Z(handle, layer, slice(None)).astype(np.float64)
            x = handle["residual/X"][layer].astype(np.float64)
            # cosines (Figure 1)
            for space, emb in (("Z", z), ("X", x)):
                cos = np.einsum("nd,ntd->nt", emb[:, 0], emb[:, 1:]) / (
                    np.linalg.norm(emb[:, :1], axis=-1) * np.linalg.norm(emb[:, 1:], axis=-1)
                )
                row = tables["bos_alignment"].filter(
                    (pl.col("space") == space) & (pl.col("layer") == layer)
                )
                assert row["n_values"][0] == cos.size
                assert row["min"][0] == pytest.approx(cos.min(), abs=1e-12)
                assert row["max"][0] == pytest.approx(cos.max(), abs=1e-12)
                assert row["median"][0] == pytest.approx(np.median(cos), abs=1e-12)
                assert row["frac_positive"][0] == pytest.approx((cos > 0).mean())
                assert row["max_excl_first"][0] == pytest.approx(cos[:, 1:].max(), abs=1e-12)
                hist = tables["bos_cosine_hist"].filter(
                    (pl.col("space") == space) & (pl.col("layer") == layer)
                )
                assert hist["count"].sum() == cos.size
            # Proposition 4.1 on every sequence, J from the BOS column of every (sink) head
            probs = handle["attention/probs"][layer]
            attend = (probs[:, :, 1:, 0] >= 0.15).any(axis=1)
            for seq in range(n_seq):
                sets = {
                    "bos_minus_token": z[seq, :1] - z[seq, 1:],
                    "attending": z[seq, 1:][attend[seq]],
                    "all_tokens": z[seq, 1:],
                }
                for name, points in sets.items():
                    expected = halfspace_margin(points)
                    row = (
                        tables["halfspace"]
                        .filter(
                            (pl.col("layer") == layer)
                            & (pl.col("sequence") == seq)
                            & (pl.col("point_set") == name)
                        )
                        .row(0, named=True)
                    )
                    assert row["n_points"] == points.shape[0]
                    assert row["n_sink_heads"] == n_heads
                    assert row["halfspace"] == expected.halfspace
                    assert row["rank"] == expected.rank
                    assert row["trivially_separable"] == expected.trivially_separable
                    if expected.margin is not None:
                        assert row["margin"] == pytest.approx(expected.margin, abs=1e-8)
            # value ranks (Appendix E.2)
            m = min(t1, hd)
            values = read_values(handle, layer, slice(None)).astype(np.float64)
            for seq in range(n_seq):
                for kv in range(n_kv):
                    s = np.linalg.svd(values[seq, kv, :m], compute_uv=False)
                    rank = int((s > RANK_RTOL * s[0]).sum())
                    got = tables["value_rank"].filter(
                        (pl.col("layer") == layer)
                        & (pl.col("kv_head") == kv)
                        & (pl.col("sequence") == seq)
                    )
                    assert got["rank"][0] == rank and got["m"][0] == m
                    assert got["rel_rank"][0] == pytest.approx(rank / min(m, hd))
            # BOS value-output norms (§6) from W_O (W_V z + b_V)
            for head in range(n_heads):
                vo = np.linalg.norm(_direct_values(handle, layer, head), axis=-1)
                ratio = vo[:, 0] / np.median(vo[:, 1:], axis=1)
                got = (
                    tables["bos_value_norm"]
                    .filter((pl.col("layer") == layer) & (pl.col("head") == head))
                    .row(0, named=True)
                )
                assert got["rel_bos_vo_norm"] == pytest.approx(ratio.mean(), rel=1e-4)
                assert got["rel_bos_vo_norm_min"] == pytest.approx(ratio.min(), rel=1e-4)
                assert got["bos_vo_norm"] == pytest.approx(vo[:, 0].mean(), rel=1e-4)
                assert got["is_sink"] is True
            # massive activations
            xn = np.linalg.norm(x, axis=-1)
            got = tables["bos_residual_norm"].filter(pl.col("layer") == layer)
            assert got["rel_bos_norm"][0] == pytest.approx(
                (xn[:, 0] / np.median(xn[:, 1:], axis=1)).mean(), rel=1e-10
            )
    attending = tables["halfspace"].filter(pl.col("point_set") == "attending")
    assert attending["n_points"].sum() > 0  # the J sets were exercised
    # worst sequences carry their first m token ids
    worst = tables["value_rank_worst"]
    assert 1 <= worst.height <= N_WORST
    first = worst.row(0, named=True)
    m = min(t1, hd)
    assert first["token_ids"] == " ".join(map(str, ids[first["sequence"], :m].tolist()))
    assert first["n_repeated_tokens"] == m - np.unique(ids[first["sequence"], :m]).size

    # summaries over two "datasets" (the same file relabelled): exact pooling
    other = {name: frame.with_columns(dataset=pl.lit("copy")) for name, frame in tables.items()}
    summary = summarize([tables, other])
    pooled = summary["bos_alignment"].filter(pl.col("space") == "Z").sort("layer")
    single = tables["bos_alignment"].filter(pl.col("space") == "Z").sort("layer")
    assert (pooled["n_values"] == 2 * single["n_values"]).all()
    assert (pooled["max"] == single["max"]).all() and (pooled["min"] == single["min"]).all()
    assert (pooled["n_datasets"] == 2).all()
    half = summary["halfspace_layer"]
    assert (half["n_sequences"] == 2 * n_seq).all() and (half["dataset"] == "all").all()
    ranks = summary["value_rank"]
    assert set(ranks["dataset"].to_list()) == {"random", "copy", "all"}
    statements = geometry_statements(summary, [tables, other])
    assert statements.height == 5

    # every figure renders from these tables
    out = tmp_path / "figs"
    gplots.plot_bos_alignment([tables["bos_alignment"]], out / "a.png", "alignment")
    gplots.plot_bos_alignment([summary["bos_alignment"]], out / "ax.png", "pooled", space="X")
    hplots.plot_halfspace_margins([tables["halfspace"], other["halfspace"]], out / "h.png", "h")
    gplots.plot_value_rank([tables["value_rank"], other["value_rank"]], out / "r.png", "rank")
    gplots.plot_bos_value_norm([tables["bos_value_norm"]], out / "v.png", "vo")
    gplots.plot_bos_residual_norm([summary["bos_residual_norm"]], out / "x.png", "x")
    for png in out.iterdir():
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000
    assert sorted(p.name for p in out.iterdir()) == [
        "a.png",
        "ax.png",
        "h.png",
        "r.png",
        "v.png",
        "x.png",
    ]


def test_analyze_file_rejects_a_foreign_head_table(extracted) -> None:
    _, path, _, _ = extracted
    _, per_head = classify_file(path)
    with pytest.raises(ValueError, match="per-head table"):
        analyze_file(path, per_head.head(3))
    with pytest.raises(ValueError, match="attend_threshold"):
        analyze_file(path, per_head, attend_threshold=1.5)
