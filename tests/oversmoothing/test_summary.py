"""The summary's reading of two runs' condition labels (sinkscope.oversmoothing.summary)."""

from __future__ import annotations

import polars as pl
import pytest

from sinkscope.oversmoothing.summary import condition_label_agreement


def per_head(labels: dict[str, list[str]], sinks: set[int] = frozenset()) -> pl.DataFrame:
    """A per-head table of model ``m``: per dataset, head ``h`` of layer 0 has ``labels[d][h]``
    at ``T' = 64``; at ``T' = 32`` every head is labelled "ii" (not the largest T': ignored)."""
    rows = [
        {
            "model": "m",
            "dataset": dataset,
            "layer": 0,
            "head": head,
            "context_length": length,
            "condition_s": label if length == 64 else "ii",
            "is_sink": head in sinks,
        }
        for dataset, per_dataset in labels.items()
        for head, label in enumerate(per_dataset)
        for length in (32, 64)
    ]
    return pl.DataFrame(rows)


def test_condition_label_agreement_counts_the_planted_changes() -> None:
    """Ten heads on two datasets; three labels change between the runs, one of them on a head
    that is a sink in the second run (left out: only heads non-sink in both count)."""
    first = {
        "a": ["i", "i", "i", "neither", "neither", "ii", "i", "i", "neither", "i"],
        "b": ["i", "neither", "i", "neither", "i", "i", "i", "neither", "neither", "i"],
    }
    second = {d: list(v) for d, v in first.items()}
    second["a"][0] = "neither"  # changed
    second["b"][5] = "neither"  # changed
    second["a"][9] = "neither"  # changed, but head 9 sinks in the second run
    (row,) = condition_label_agreement(per_head(first), per_head(second, {9})).iter_rows(named=True)
    # heads 0-8 of both datasets: 18 instances, 2 changed
    assert (row["n_heads"], row["n_changed"]) == (18, 2)
    assert row["share_same"] == pytest.approx(16 / 18)
    # condition (i) on heads 0-8: first run 5 (a) + 5 (b) of 18, second 4 + 4
    assert row["frac_i_first"] == pytest.approx(10 / 18)
    assert row["frac_i_second"] == pytest.approx(8 / 18)
    assert row["frac_ii_first"] == pytest.approx(1 / 18)
    assert row["frac_ii_second"] == pytest.approx(1 / 18)
    # the same table twice: nothing changes
    (same,) = condition_label_agreement(per_head(first), per_head(first)).iter_rows(named=True)
    assert same["n_changed"] == 0 and same["share_same"] == 1.0 and same["n_heads"] == 20


def test_compare_conditions_reads_two_results_directories(tmp_path, capsys) -> None:
    """``sinkscope compare-conditions A B`` finds every pair's per-head table under each results
    directory and prints the agreement; a directory without them is a clear error."""
    from sinkscope.cli import main
    from sinkscope.paths import Paths

    labels = ["i", "i", "neither", "i"]
    for root, changed in (("a", labels), ("b", ["neither", *labels[1:]])):
        pattern = Paths(str(tmp_path / root)).registered_table("analyze_oversmoothing", "per_head")
        path = tmp_path / pattern.format(model="m", dataset="d")
        path.parent.mkdir(parents=True)
        per_head({"d": changed}).write_parquet(path)
    assert main(["compare-conditions", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| model | n_heads | n_changed | share_same")
    assert lines[2].startswith("| m | 4 | 1 | 0.75 | 0.75 | 0.5 |")
    assert main(["compare-conditions", str(tmp_path / "a"), str(tmp_path / "none")]) == 2
    assert "none has no oversmoothing tables" in capsys.readouterr().err
    # a per-head table without the condition labels (another layout): named, not a traceback
    pattern = Paths(str(tmp_path / "old")).registered_table("analyze_oversmoothing", "per_head")
    path = tmp_path / pattern.format(model="m", dataset="d")
    path.parent.mkdir(parents=True)
    per_head({"d": labels}).drop("condition_s").write_parquet(path)
    assert main(["compare-conditions", str(tmp_path / "a"), str(tmp_path / "old")]) == 2
    assert "the second per-head table lacks columns ['condition_s']" in capsys.readouterr().err
