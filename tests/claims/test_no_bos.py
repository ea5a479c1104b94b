"""No-BOS pairs (``<name>.no-bos``) in the summaries and claims, on planted head tables: the
StreamingLLM first-token row reads them against the BOS pair; every other claim, the observations
and the pooled head-class row leave them out."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sinkscope.claims import registry as R
from sinkscope.claims import verdicts as V
from sinkscope.claims.checks.no_bos import check_first_token_becomes_sink
from sinkscope.heads.summary import summarize
from tests.claims.test_claims import OTHER, SINK, head_table


def _masses(n_sink: int, n: int = 40) -> list[tuple[float, float, float]]:
    return [SINK] * n_sink + [OTHER] * (n - n_sink)


def _head_classes(sinks: dict[tuple[str, str], int]) -> pl.DataFrame:
    return summarize([head_table(m, d, _masses(k)) for (m, d), k in sinks.items()])


def test_ratio_of_sink_shares_per_model_and_corpus() -> None:
    table = _head_classes(
        {("a", "d"): 10, ("a", "d.no-bos"): 3, ("b", "d"): 8, ("b", "d.no-bos"): 8}
    )
    rows = {r["model"]: r for r in check_first_token_becomes_sink(table, 0.5)}
    assert set(rows) == {"a", "b"}
    assert rows["a"]["dataset"] == "d.no-bos"
    assert rows["a"]["value"] == pytest.approx(3 / 10)  # 7.5 % of heads vs 25 %
    assert rows["a"]["verdict"] == V.NOT_REPRODUCED
    assert rows["a"]["measured"] == "sink heads at position 0: 25.0% with BOS, 7.5% without"
    assert rows["b"]["value"] == pytest.approx(1.0) and rows["b"]["verdict"] == V.REPRODUCED
    # the tolerance is the one the row states and applies
    assert check_first_token_becomes_sink(table, 0.3)[0]["verdict"] == V.REPRODUCED
    assert "0.3" in check_first_token_becomes_sink(table, 0.3)[0]["test"]


def test_without_a_no_bos_pair_every_model_gets_a_not_applicable_row() -> None:
    rows = check_first_token_becomes_sink(_head_classes({("a", "d"): 5, ("b", "d"): 5}), 0.5)
    assert [r["model"] for r in rows] == ["a", "b"]
    assert {r["verdict"] for r in rows} == {V.NOT_APPLICABLE}
    assert all(r["reason"].startswith(f"{V.NOT_RUN} (no no-BOS pair") for r in rows)


def test_other_claims_and_the_pooled_row_read_the_bos_pairs_only() -> None:
    """A no-BOS pair without any sink head would make heads.sinks_common fail on its row and
    lower the pooled share: neither happens."""
    with_variant = _head_classes({("a", "d"): 10, ("a", "d.no-bos"): 0, ("a", "e"): 6})
    without = _head_classes({("a", "d"): 10, ("a", "e"): 6})
    pooled = with_variant.filter(pl.col("dataset") == "all")
    # heads 0-9 average 0.9 and 0.1 (or 0.9) on BOS over d and e: 10 sinks; with the no-BOS
    # pair's 0.1 in the average, heads 6-9 would fall to 0.37 < 0.4 (6 sinks)
    assert pooled["frac_sink"][0] == pytest.approx(10 / 40)
    assert pooled["n_datasets"][0] == 2
    assert with_variant.filter(pl.col("dataset") != "d.no-bos").equals(without)
    statement = with_variant.filter(pl.col("dataset") == "d.no-bos")["statement"][0]
    assert "position 0 (the first text token; no BOS)" in statement

    table = R.evaluate_claims({"head_classes": with_variant})
    common = table.filter(pl.col("claim_id") == "heads.sinks_common")
    assert set(common["dataset"]) == {"d", "e", "all"}
    first = table.filter(pl.col("claim_id") == "streaming.first_token_sink")
    assert first["dataset"].to_list() == ["d.no-bos"] and first["value"][0] == 0.0
    assert first["verdict"][0] == V.NOT_REPRODUCED
    reference = R.evaluate_claims({"head_classes": without})
    assert common.equals(reference.filter(pl.col("claim_id") == "heads.sinks_common"))


def test_with_bos_only_drops_no_bos_rows_and_keeps_other_tables() -> None:
    frame = pl.DataFrame({"dataset": ["d", "d.no-bos", "all"], "x": [1, 2, 3]})
    other = pl.DataFrame({"x": [1]})
    out = R.with_bos_only({"t": frame, "u": other, "v": None})
    assert out["t"]["dataset"].to_list() == ["d", "all"]
    assert out["u"].equals(other) and out["v"] is None


def _ratio_interval(low: float, high: float, n: int = 50) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "model": ["a"],
            "dataset": ["d.no-bos"],
            "n_resamples": [2000],
            "level": [0.95],
            "n_units": [n],
            "ratio_lo": [low],
            "ratio_hi": [high],
        }
    )


def test_the_ratio_is_decided_on_its_paired_interval_over_sequences() -> None:
    """The same planted tables (ratio 0.3 / 0.8 under a 0.5 tolerance) decided on intervals:
    wholly above and wholly below the tolerance decide; one across it is inconclusive with the
    sequences it would need; a few sequences decide when the interval lies on one side (the
    interval is valid at its size: no floor on the sequences)."""
    table = _head_classes({("a", "d"): 10, ("a", "d.no-bos"): 8})  # ratio 0.8
    (row,) = check_first_token_becomes_sink(table, 0.5, _ratio_interval(0.6, 1.0))
    assert row["verdict"] == V.REPRODUCED and row["ci_low"] == 0.6
    assert "t (49 df), Bonferroni" in row["interval"]
    assert "bootstrap SE over the 50 sequences (the same with and without BOS)" in row["interval"]
    (row,) = check_first_token_becomes_sink(table, 0.5, _ratio_interval(0.1, 0.45))
    assert row["verdict"] == V.NOT_REPRODUCED
    (row,) = check_first_token_becomes_sink(table, 0.5, _ratio_interval(0.4, 1.2))
    assert row["verdict"] == V.INCONCLUSIVE
    # the reach below 0.8 is 0.4 against a gap of 0.3: 50 x (0.4 / 0.3)^2 = 88.9 at a fixed t,
    # 87 with Student's t shrinking from t_49 = 2.010 to t_86 = 1.988 (0.4 x sqrt(50 / 87) x
    # 1.988 / 2.010 = 0.2999 < 0.3; at 86, 0.3018)
    assert "about 87 sequences" in row["reason"] and "extraction.n_sequences" in row["reason"]
    (row,) = check_first_token_becomes_sink(table, 0.5, _ratio_interval(0.6, np.inf))
    assert row["verdict"] == V.REPRODUCED  # no sink at BOS in some resamples: no upper bound
    (row,) = check_first_token_becomes_sink(table, 0.5, _ratio_interval(0.6, 1.0, n=8))
    assert row["verdict"] == V.REPRODUCED and "t (7 df)" in row["interval"]


def test_the_claims_registry_bootstraps_the_ratio_from_the_sequences() -> None:
    """Through the registry: per-sequence masses of a BOS pair and its no-BOS pair give the
    row an interval over 25 sequences (identical masses, every head far from the threshold: the
    ratio is the point 1)."""
    from tests.heads.test_summary import per_sequence_table

    masses = [[0.9] * 4 + [0.1] * 6] * 25
    tables = {
        "head_classes": _head_classes({("a", "d"): 4, ("a", "d.no-bos"): 4}),
        "head_masses_by_sequence": pl.concat(
            [per_sequence_table("a", d, masses) for d in ("d", "d.no-bos")]
        ),
    }
    claims = [c for c in R.CLAIMS if c.id == "streaming.first_token_sink"]
    (row,) = R.evaluate_claims(tables, claims=claims).iter_rows(named=True)
    assert row["verdict"] == V.REPRODUCED and (row["ci_low"], row["ci_high"]) == (1.0, 1.0)
    assert "bootstrap SE over the 25 sequences" in row["interval"]
