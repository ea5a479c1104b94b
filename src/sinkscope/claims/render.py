"""The claims table rendered: ``claims.md``, ``claims.rst``, parquet + CSV; runs compared.

:func:`claims_markdown` (not-reproduced claims first, then every row per claim, then the
observations of :mod:`sinkscope.claims.observations`), :func:`claims_rst` (the snippet at the top
of the Snakemake report's main page), :func:`write_claims` (all of them, atomically) and
:func:`compare_runs` / :func:`compare_runs_markdown` (the verdicts of several runs side by side,
``sinkscope compare``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sinkscope.claims.verdicts import (
    COLUMNS,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    VERDICTS,
)
from sinkscope.io import atomic_path, write_table

__all__ = [
    "COMPARED_COLUMNS",
    "claims_markdown",
    "claims_rst",
    "compare_runs",
    "compare_runs_markdown",
    "markdown_table",
    "write_claims",
]


def _cell(text: Any) -> str:
    if text is None:
        return ""
    return str(text).replace("|", "\\|").replace("\n", " ")


#: The columns :func:`compare_runs` reads (claims tables of runs made before a column was added
#: to :data:`~sinkscope.claims.verdicts.COLUMNS` still compare).
COMPARED_COLUMNS = ("claim_id", "claim", "model", "verdict", "reason")


def compare_runs(tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """The per-claim-and-model verdict (:func:`_overview`'s ``summary`` with its rows per
    verdict, :func:`_summary_text`: "reproduced (4 of 4)", "mixed: 3 reproduced, 1
    inconclusive", or not applicable) of several runs side by side, e.g. the short
    default scale against ``config/offline-full.yaml``: one row per claim and model, one column
    per run (``tables``' keys), ``differs`` where the runs disagree. Claims missing from a run
    read ``absent``."""
    merged: pl.DataFrame | None = None
    for label, table in tables.items():
        overview = _overview(table).select(
            "claim_id",
            "model",
            "claim",
            pl.struct(pl.all())
            .map_elements(
                lambda r: r["summary"] if r["n_tested"] == 0 else _summary_text(r),
                return_dtype=pl.String,
            )
            .alias(label),
        )
        if merged is None:
            merged = overview
        else:
            merged = merged.join(
                overview, on=["claim_id", "model"], how="full", coalesce=True, suffix="_other"
            )
            merged = merged.with_columns(pl.coalesce("claim", "claim_other").alias("claim")).drop(
                "claim_other"
            )
    if merged is None:
        raise ValueError("compare_runs needs at least one claims table")
    labels = list(tables)
    merged = merged.with_columns(pl.col(labels).fill_null("absent"))
    differs = pl.lit(False)
    for label in labels[1:]:
        differs = differs | (pl.col(label) != pl.col(labels[0]))
    return merged.with_columns(differs.alias("differs")).select(
        "claim_id", "model", "claim", *labels, "differs"
    )


def compare_runs_markdown(comparison: pl.DataFrame) -> str:
    """:func:`compare_runs` as a Markdown table, the rows that differ first."""
    labels = [c for c in comparison.columns if c not in ("claim_id", "model", "claim", "differs")]
    ordered = comparison.sort("differs", descending=True, maintain_order=True)
    n_diff = int(comparison["differs"].sum())
    lines = [
        (
            f"{n_diff} of {comparison.height} claim × model verdicts differ between "
            f"{', '.join(labels)}."
        ),
        "",
    ]
    lines += markdown_table(ordered, ["claim_id", "model", *labels, "differs"])
    return "\n".join(lines) + "\n"


def markdown_table(frame: pl.DataFrame, columns: Sequence[str]) -> list[str]:
    """The lines of a Markdown table of ``frame``'s ``columns`` (a cell's ``|`` escaped)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in frame.iter_rows(named=True):
        lines.append("| " + " | ".join(_cell(r[c]) for c in columns) + " |")
    return lines


def _overview(table: pl.DataFrame) -> pl.DataFrame:
    """One row per claim and model: counts of verdicts over datasets/settings."""
    return (
        table.group_by("claim_id", "model", maintain_order=True)
        .agg(
            pl.col("claim").first(),
            (pl.col("verdict") == REPRODUCED).sum().alias("n_reproduced"),
            (pl.col("verdict") == NOT_REPRODUCED).sum().alias("n_not_reproduced"),
            (pl.col("verdict") == INCONCLUSIVE).sum().alias("n_inconclusive"),
            (pl.col("verdict") == NOT_APPLICABLE).sum().alias("n_not_applicable"),
            pl.col("reason").first(),
        )
        .with_columns(
            n_tested=pl.sum_horizontal("n_reproduced", "n_not_reproduced", "n_inconclusive")
        )
        .with_columns(
            summary=pl.when(pl.col("n_tested") == 0)
            .then(pl.lit(NOT_APPLICABLE))
            .when(pl.col("n_reproduced") == pl.col("n_tested"))
            .then(pl.lit(REPRODUCED))
            .when(pl.col("n_not_reproduced") == pl.col("n_tested"))
            .then(pl.lit(NOT_REPRODUCED))
            .when(pl.col("n_inconclusive") == pl.col("n_tested"))
            .then(pl.lit(INCONCLUSIVE))
            .otherwise(pl.lit("mixed"))
        )
    )


def _summary_cell(r: Mapping[str, Any]) -> str:
    """A claim x model cell of the overview: its summary verdict and how many of its rows have
    each verdict ("reproduced (4 of 4)", "mixed: 3 reproduced, 1 inconclusive"), in bold where
    any row is not reproduced."""
    if r["summary"] == NOT_APPLICABLE:
        return NOT_APPLICABLE
    text = _summary_text(r)
    return f"**{text}**" if r["n_not_reproduced"] else text


def _summary_text(r: Mapping[str, Any]) -> str:
    """The summary verdict of a claim x model with its rows per verdict (the tested ones:
    reproduced, not reproduced, inconclusive)."""
    if r["summary"] != "mixed":
        return f"{r['summary']} ({r['n_tested']} of {r['n_tested']})"
    parts = [
        f"{r[column]} {verdict}"
        for column, verdict in (
            ("n_reproduced", REPRODUCED),
            ("n_not_reproduced", NOT_REPRODUCED),
            ("n_inconclusive", INCONCLUSIVE),
        )
        if r[column]
    ]
    return "mixed: " + ", ".join(parts)


def verdict_counts(table: pl.DataFrame) -> dict[str, int]:
    """Rows per verdict of :data:`~sinkscope.claims.verdicts.VERDICTS` (every verdict, 0 too)."""
    return {v: int((table["verdict"] == v).sum()) for v in VERDICTS}


def counts_sentence(table: pl.DataFrame) -> str:
    """The header line of ``claims.md`` and the report: the rows per verdict, read off the rows."""
    counts = verdict_counts(table)
    decided = counts[REPRODUCED] + counts[NOT_REPRODUCED]
    return (
        f"{table.height} checks: {decided} decided (**{counts[NOT_REPRODUCED]} not "
        f"reproduced**, {counts[REPRODUCED]} reproduced), {counts[INCONCLUSIVE]} inconclusive "
        f"(the interval straddles the tolerance), {counts[NOT_APPLICABLE]} not applicable."
    )


def _not_applicable_reasons(table: pl.DataFrame) -> list[str]:
    """The reasons of the not-applicable rows with their counts, most frequent first."""
    reasons = (
        table.filter(pl.col("verdict") == NOT_APPLICABLE)
        .group_by("reason")
        .agg(pl.len().alias("rows"), pl.col("claim_id").unique(maintain_order=True))
        .sort(["rows", "reason"], descending=[True, False])
    )
    if reasons.height == 0:
        return ["None.", ""]
    lines = ["| rows | reason | claims |", "|---|---|---|"]
    for r in reasons.iter_rows(named=True):
        claims = ", ".join(f"`{c}`" for c in r["claim_id"])
        lines.append(f"| {r['rows']} | {_cell(r['reason'])} | {claims} |")
    return [*lines, ""]


def _md_by_claim(frame: pl.DataFrame, columns: Sequence[str]) -> list[str]:
    """One block per claim: its sentence, where the paper makes it and its value, then the rows."""
    lines: list[str] = []
    for (claim_id,), part in frame.group_by("claim_id", maintain_order=True):
        first = part.row(0, named=True)
        lines += [
            f"### `{claim_id}`: {first['claim']}",
            "",
            f"Paper: {first['source']}. Paper's value: {first['paper_value']}.",
            "",
            *markdown_table(part, columns),
            "",
        ]
    return lines


def claims_markdown(
    table: pl.DataFrame,
    observations: pl.DataFrame | None = None,
    sanity: pl.DataFrame | None = None,
    config: Mapping[str, Any] | None = None,
) -> str:
    """``claims.md``: counts, the not-reproduced rows first (per claim), an overview of verdicts
    per claim and model, given the run's ``config`` what sample decides each claim
    (:func:`sinkscope.claims.samples.sample_lines`), every row (per claim), then -- given
    ``observations`` (:func:`sinkscope.claims.observations.evaluate_observations`) -- the section
    "Observations (shown by the figures; not claims of the paper)"."""
    counts = verdict_counts(table)
    lines = [
        "# Claims of the papers, checked against this run",
        "",
        counts_sentence(table),
        "",
        (
            "Each row is one claim x model (x dataset or setting). `dataset` = `all` pools the "
            "model's datasets (the paper pools its four); `synthetic` rows need no pretrained "
            "model. `value` in claims.csv is the number the test compares; the tolerances are in "
            "the config's `claims` section (documented in `workflow/schemas/config.schema.yaml`). "
            "Where a row has an `interval` (the value's interval from its own sampling unit), the "
            "verdict is decided on it: reproduced or not reproduced when all of it lies on one "
            "side of the tolerance, inconclusive when it straddles the tolerance. Every interval "
            "is valid at the sample it was made from (docs/claims.md states each method's "
            "coverage at the run's sizes): few units widen it, they never veto it."
        ),
        "",
        f"## Not reproduced ({counts[NOT_REPRODUCED]})",
        "",
    ]
    bad = table.filter(pl.col("verdict") == NOT_REPRODUCED)
    short = ["model", "dataset", "setting", "measured", "interval", "test", "reason"]
    lines += _md_by_claim(bad, short) if bad.height else ["None.", ""]
    lines += [f"## Inconclusive ({counts[INCONCLUSIVE]})", ""]
    unsure = table.filter(pl.col("verdict") == INCONCLUSIVE)
    lines += _md_by_claim(unsure, short) if unsure.height else ["None.", ""]
    lines += [f"## Not applicable ({counts[NOT_APPLICABLE]}), by reason", ""]
    lines += _not_applicable_reasons(table)
    overview = _overview(table)
    models = list(dict.fromkeys(overview["model"].to_list()))
    lines += ["## Overview: verdict per claim and model (tested rows per verdict)", ""]
    lines += ["| claim | " + " | ".join(models) + " |", "|" + "---|" * (len(models) + 1)]
    for (claim_id,), part in overview.group_by("claim_id", maintain_order=True):
        cells = {r["model"]: _summary_cell(r) for r in part.iter_rows(named=True)}
        text = f"`{claim_id}` {part['claim'][0]}"
        lines.append("| " + " | ".join([_cell(text)] + [cells.get(m, "") for m in models]) + " |")
    if config is not None:
        from sinkscope.claims.samples import sample_lines

        lines += [
            "",
            "## What decides each claim (its sampling unit, and this run's sample)",
            "",
            *sample_lines(config, list(dict.fromkeys(table["claim_id"].to_list()))),
        ]
    lines += ["", "## All checks", ""]
    lines += _md_by_claim(table, ["model", "dataset", "setting", "verdict", *short[3:]])
    if observations is not None:
        from sinkscope.claims.observations import observations_markdown

        lines += ["", observations_markdown(observations)]
    if sanity is not None:
        from sinkscope.claims.sanity import sanity_markdown

        lines += ["", sanity_markdown(sanity)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _rst_cell(text: Any) -> str:
    """Plain text made inert for reStructuredText (no emphasis, references or substitutions)."""
    out = str(text).replace("\n", " ").replace("\\", "\\\\").replace("`", "'")
    for char in "*|":
        out = out.replace(char, "\\" + char)
    return re.sub(r"_(?=\W|$)", r"\\_", out)


def claims_rst(table: pl.DataFrame) -> str:
    """``claims.rst``: the section included at the top of the report's main page (overview per
    claim and model, then the not-reproduced rows)."""
    overview = _overview(table)
    models = list(dict.fromkeys(overview["model"].to_list()))
    lines = [
        "Claims",
        "------",
        "",
        (
            f"{counts_sentence(table)} Every row with its measured value, interval, test and "
            "tolerance is in ``results/claims.md`` (and ``claims.csv``)."
        ),
        "",
        ".. list-table::",
        "   :header-rows: 1",
        f"   :widths: {' '.join(['40'] + [str(max(1, 60 // max(1, len(models))))] * len(models))}",
        "",
        "   * - claim",
    ]
    lines += [f"     - {_rst_cell(m)}" for m in models]
    for (claim_id,), part in overview.group_by("claim_id", maintain_order=True):
        cells = {r["model"]: _summary_cell(r) for r in part.iter_rows(named=True)}
        lines.append(f"   * - ``{claim_id}`` {_rst_cell(part['claim'][0])}")
        lines += [f"     - {cells.get(m, '')}" for m in models]
    bad = table.filter(pl.col("verdict") == NOT_REPRODUCED)
    lines += ["", "Not reproduced:", ""]
    if bad.height == 0:
        lines.append("none.")
    for r in bad.iter_rows(named=True):
        lines.append(
            f"* ``{r['claim_id']}`` -- {_rst_cell(r['model'])} / {_rst_cell(r['dataset'])} "
            f"({_rst_cell(r['setting'])}): {_rst_cell(r['measured'])}; paper: "
            f"{_rst_cell(r['paper_value'])}; test: {_rst_cell(r['test'])}"
        )
    return "\n".join(lines) + "\n"


def write_claims(
    table: pl.DataFrame,
    markdown_path: str | Path,
    parquet_path: str | Path,
    rst_path: str | Path | None = None,
    observations: pl.DataFrame | None = None,
    observations_path: str | Path | None = None,
    sanity: pl.DataFrame | None = None,
    config: Mapping[str, Any] | None = None,
) -> None:
    """Write ``claims.md``, ``claims.parquet`` + ``.csv`` (:func:`sinkscope.io.write_table`) and,
    if given, the report snippet ``claims.rst`` -- all atomically. ``observations``
    (:func:`sinkscope.claims.observations.evaluate_observations`) add their section to ``claims.md``
    and, given ``observations_path``, are written there (parquet + CSV): a table of their own,
    since their columns are not :data:`~sinkscope.claims.verdicts.COLUMNS` (no verdict).
    ``sanity`` (:func:`sinkscope.claims.sanity.sanity_checks`) adds its section last; ``config``
    (the run's, validated) the section on what sample decides each claim."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"write_claims: the table lacks the column(s) {missing}")
    write_table(table, parquet_path)
    if observations is not None and observations_path is not None:
        write_table(observations, observations_path)
    with atomic_path(markdown_path) as tmp:
        tmp.write_text(claims_markdown(table, observations, sanity, config))
    if rst_path is not None:
        with atomic_path(rst_path) as tmp:
            tmp.write_text(claims_rst(table))
