"""Sanity checks: identities of the construction, reported apart from the claims.

A check whose outcome follows from how the numbers are made is no evidence for a claim of the
papers, so it is never half of a verdict. It is still worth checking: when an identity fails, the
pipeline computes something else than it says. :func:`sanity_checks` reads them off the claims'
input tables; :func:`sanity_markdown` is their section of ``claims.md``.

* ``rho_hat(X) = rho(X)``: approximation (2) of Theorem 5.1 on the block input ``X`` uses the
  moments of the same tokens whose average cosine ``rho(X)`` it approximates, and the input norm
  gives those tokens one norm, so the two agree up to rounding (``abs_err_x`` of the
  oversmoothing per-head table; the claims ``oversmoothing.approximation_*`` read ``X + WZ``).
* §7's nuclear-norm toy: on ``X = I_{T+1}`` the diagonal / sink nuclear-norm ratio is
  ``sqrt(T+1)``. The pipeline builds ``kappa 1 e_1^T`` and ``kappa I`` and takes their singular
  values (:mod:`sinkscope.costs.toy`), so the ratio is the closed form up to rounding: a check of
  the SVD and of the table, not evidence for the paper.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from sinkscope.claims.verdicts import SYNTHETIC

__all__ = ["IDENTITY_TOLERANCE", "SANITY_COLUMNS", "sanity_checks", "sanity_markdown"]

#: An identity "holds" when its two sides differ by at most this: above the float32 rounding of
#: the average cosines (measured: below 1e-6 for SmolLM2, 2.3e-4 for a random-weight GPT-2 cut
#: with LayerNorm), below the approximation's real errors on X + WZ (Fig. 7: up to 0.1).
IDENTITY_TOLERANCE = 1e-3

SANITY_COLUMNS: dict[str, Any] = {
    "check": pl.String,
    "model": pl.String,
    "dataset": pl.String,
    "value": pl.Float64,
    "bound": pl.Float64,
    "holds": pl.Boolean,
    "why_an_identity": pl.String,
}

_RHO_X = (
    "rho_hat(X) = rho(X): largest |rho - rho_hat| over heads and T' for the block input X",
    (
        "approximation (2) on X uses the moments of the same tokens, which the input norm gives "
        "one norm; the claims oversmoothing.approximation_* are decided on X + WZ"
    ),
)


_TOY = (
    (
        "§7 toy: diagonal / sink nuclear norm = sqrt(T+1) on X = I_{T+1}: largest relative "
        "deviation over T"
    ),
    (
        "the pipeline builds kappa 1 e_1^T and kappa I and sums their singular values, whose "
        "closed forms are kappa sqrt(T+1) and kappa (T+1); the bound is claims.costs.toy_rtol"
    ),
)


def sanity_checks(
    tables: Mapping[str, pl.DataFrame | None], toy_rtol: float | None = None
) -> pl.DataFrame:
    """The sanity checks that the claims' input ``tables`` allow (columns
    :data:`SANITY_COLUMNS`, one row per check and model x dataset; empty without inputs).
    ``toy_rtol``: the bound of the §7 toy's ratio (config ``claims.costs.toy_rtol``; None: the
    default tolerance)."""
    from sinkscope.claims.tolerances import DEFAULT_TOLERANCES

    rows = []
    toy = tables.get("costs_toy")
    if toy is not None and toy.height:
        from sinkscope.costs.toy import toy_ratio_deviation

        bound = float(DEFAULT_TOLERANCES["costs"]["toy_rtol"] if toy_rtol is None else toy_rtol)
        worst = toy_ratio_deviation(toy.to_dicts())
        rows.append(
            {
                "check": _TOY[0],
                "model": SYNTHETIC,
                "dataset": "-",
                "value": worst,
                "bound": bound,
                "holds": worst <= bound,
                "why_an_identity": _TOY[1],
            }
        )
    per_head = tables.get("oversmoothing_per_head")
    if per_head is not None and "abs_err_x" in per_head.columns:
        worst = (
            per_head.group_by("model", "dataset", maintain_order=True)
            .agg(pl.col("abs_err_x").max())
            .sort("model", "dataset")
        )
        for r in worst.iter_rows(named=True):
            value = float(r["abs_err_x"])
            rows.append(
                {
                    "check": _RHO_X[0],
                    "model": r["model"],
                    "dataset": r["dataset"],
                    "value": value,
                    "bound": IDENTITY_TOLERANCE,
                    "holds": value <= IDENTITY_TOLERANCE,
                    "why_an_identity": _RHO_X[1],
                }
            )
    return pl.DataFrame(rows, schema=SANITY_COLUMNS)


def sanity_markdown(table: pl.DataFrame) -> str:
    """The section "Sanity checks" of ``claims.md``: each check, its rows, and the failing ones
    first in bold (a failing identity means the pipeline computes something else)."""
    lines = [
        "## Sanity checks (identities of the construction; not evidence for any claim)",
        "",
    ]
    if table.height == 0:
        return "\n".join([*lines, "None in this run.", ""])
    failing = int((~table["holds"]).sum())
    lines += [
        f"{table.height} rows, **{failing} failing**."
        if failing
        else f"{table.height} rows, all hold.",
        "",
    ]
    for (check,), part in table.group_by("check", maintain_order=True):
        lines += [f"### {check}", "", f"Why an identity: {part['why_an_identity'][0]}.", ""]
        lines += ["| model | dataset | value | bound | holds |", "|---|---|---|---|---|"]
        for r in part.sort("holds", "model", "dataset").iter_rows(named=True):
            holds = "yes" if r["holds"] else "**no**"
            lines.append(
                f"| {r['model']} | {r['dataset']} | {r['value']:.3g} | {r['bound']:g} | {holds} |"
            )
        lines.append("")
    return "\n".join(lines)
