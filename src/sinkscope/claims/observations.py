"""Observations: what the figures show about the models of this run that no claim states.

The claims table (:mod:`sinkscope.claims`) tests statements of the papers. The figures show more
about the models measured here -- where in depth the sink heads appear, where the BOS residual
norm jumps, the sign of the BOS cosines, how low the value ranks go on repetitive text. This
module reads those facts from the same summary tables the claims rule reads and states them as
numbers, with no verdict: they are *not claims of the paper* (where the paper says something
about the same quantity, its statement is quoted next to the number).

Every function takes summary tables and returns rows with :data:`COLUMNS` (``model``,
``dataset`` -- a dataset or ``"all"`` --, ``observation_id``, ``observation``, ``source``,
``measured``, ``value``, ``paper``). Nothing here names a model: every sentence is computed from
the tables. :func:`evaluate_observations` runs them all on the tables of
:meth:`sinkscope.paths.Paths.claims_inputs`, skipping those whose tables are absent;
:func:`observations_markdown` renders the section of ``claims.md``.

Inputs (keys of :data:`sinkscope.claims.registry.TABLE_ANALYSIS`):

* ``oversmoothing_per_head``: one row per head (and context length) carrying the head
  classification of the heads analysis verbatim (``is_sink``, ``bos_mass``): the per-layer
  profile of sink heads (:func:`sink_layer_profile`);
* ``geometry_bos_residual_norm``: BOS and median-token residual norm per layer;
* ``geometry_bos_alignment``: cosine between BOS and the other tokens per layer;
* ``geometry_value_rank`` / ``geometry_value_rank_worst``: relative rank of the value matrices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from sinkscope.claims.tolerances import DEFAULT_TOLERANCES
from sinkscope.geometry.alignment import middle_layers
from sinkscope.labels import POOLED

__all__ = [
    "COLLAPSED_BOS_MASS",
    "COLUMNS",
    "DOMINANT_SHARE",
    "OBSERVATIONS_TITLE",
    "SUB_THRESHOLD_BOS_MASS",
    "WEAK_SHARE",
    "bos_cosine_sign",
    "bos_norm_jump",
    "evaluate_observations",
    "layer_level",
    "observations_markdown",
    "sink_layer_profile",
    "sink_layer_shares",
    "value_rank_lowest",
]

OBSERVATIONS_TITLE = "Observations (shown by the figures; not claims of the paper)"

#: Columns of the observations table, in order.
COLUMNS: dict[str, Any] = {
    "model": pl.String,
    "dataset": pl.String,
    "observation_id": pl.String,
    "observation": pl.String,
    "source": pl.String,
    "measured": pl.String,
    "value": pl.Float64,
    "paper": pl.String,
}

# --- levels of a layer in the sink-head profile ------------------------------------------------
#: A layer whose sink-head share is ``>= DOMINANT_SHARE`` has *dominant* sinks: at least half of
#: its heads are sink heads, so the sink is the layer's majority pattern.
DOMINANT_SHARE = 0.5
#: A share in ``(0, WEAK_SHARE)`` is *weak* (under a quarter of the heads: a minority pattern);
#: ``[WEAK_SHARE, DOMINANT_SHARE)`` is *partial*.
WEAK_SHARE = 0.25
#: A layer with no sink head whose heads still put ``>= SUB_THRESHOLD_BOS_MASS`` of their attention
#: on BOS on average has *sub-threshold* sinks (the heads lean on BOS without reaching the sink
#: threshold of the head classification, 0.4 in the paper): a quarter of that threshold, and
#: several times what uniform causal attention puts on position 0 (``H_T / T`` = 0.024 at T = 256).
SUB_THRESHOLD_BOS_MASS = 0.1
#: A layer with no sink head and a mean BOS mass ``< COLLAPSED_BOS_MASS`` has *collapsed* sinks:
#: BOS gets no more than about twice the uniform causal share at T = 256 (2 x 0.024); between the
#: two thresholds a sink-free layer is *none*.
COLLAPSED_BOS_MASS = 0.05
#: Default reading of "very high rank" (Fig. 12 / App. E.2): the claims' tolerance
#: ``geometry.near_full_rank`` (config schema default).
NEAR_FULL_RANK: float = DEFAULT_TOLERANCES["geometry"]["near_full_rank"]
LEVELS = ("collapsed", "none", "sub-threshold", "weak", "partial", "dominant")

PAPER_VALUE_RANK = (
    "App. E.2 / Fig. 12: 'models exhibit very high ranks in the middle layers. The only dataset "
    "on which outliers exist is CodeSearchNet-Python on gpt2, because the samples contain a lot "
    "of repeated tokens. Note that Llama and Gemma models are immune to repeated tokens and the "
    "ranks do not suffer deficiency even on those samples.'"
)
PAPER_BOS_COSINE = (
    "§4 / Fig. 1: the maximum cosine between BOS and the other tokens is negative in the middle "
    "layers (tested by the claim geometry.bos_cosine_below_zero)"
)
NO_PAPER = "-"

Row = dict[str, Any]


def _row(
    model: str,
    dataset: str,
    observation_id: str,
    observation: str,
    source: str,
    measured: str,
    value: float | None,
    paper: str = NO_PAPER,
) -> Row:
    number = None if value is None or math.isnan(float(value)) else float(value)
    return {
        "model": model,
        "dataset": dataset,
        "observation_id": observation_id,
        "observation": observation,
        "source": source,
        "measured": measured,
        "value": number,
        "paper": paper,
    }


def _require(table: pl.DataFrame, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"observations: table {name!r} lacks the column(s) {missing}")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _norm(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _span(layers: Sequence[int]) -> str:
    return f"{layers[0]}" if layers[0] == layers[-1] else f"{layers[0]}-{layers[-1]}"


def _pooled(table: pl.DataFrame) -> pl.DataFrame:
    """The pooled ``"all"`` rows of a summary table, or every row when it has none."""
    pooled = table.filter(pl.col("dataset") == POOLED)
    return pooled if pooled.height else table


# =============================================================================== sink heads per layer


def layer_level(share: float, bos_mass: float) -> str:
    """The level of one layer (:data:`LEVELS`) from its sink-head share and mean BOS mass."""
    if share >= DOMINANT_SHARE:
        return "dominant"
    if share >= WEAK_SHARE:
        return "partial"
    if share > 0:
        return "weak"
    if bos_mass >= SUB_THRESHOLD_BOS_MASS:
        return "sub-threshold"
    if bos_mass >= COLLAPSED_BOS_MASS:
        return "none"
    return "collapsed"


def sink_layer_shares(per_head: pl.DataFrame) -> pl.DataFrame:
    """Per model and layer, pooled over datasets: ``n_heads`` (head instances), ``sink_share``
    (share of ``is_sink`` heads), ``bos_mass`` (mean BOS mass) and ``level``
    (:func:`layer_level`).

    ``per_head``: one row per (model, dataset, layer, head), or per context length too (the
    oversmoothing table repeats the head classification for every ``context_length``: only the
    longest is kept)."""
    _require(per_head, ["model", "dataset", "layer", "head", "is_sink", "bos_mass"], "per_head")
    heads = per_head
    if "context_length" in heads.columns:
        heads = heads.filter(
            pl.col("context_length") == pl.col("context_length").max().over("model", "dataset")
        )
    heads = heads.unique(["model", "dataset", "layer", "head"], keep="first")
    shares = (
        heads.group_by("model", "layer")
        .agg(
            pl.len().alias("n_heads"),
            pl.col("is_sink").cast(pl.Float64).mean().alias("sink_share"),
            pl.col("bos_mass").mean().alias("bos_mass"),
        )
        .sort("model", "layer")
    )
    levels = [layer_level(s, m) for s, m in zip(shares["sink_share"], shares["bos_mass"])]
    return shares.with_columns(pl.Series("level", levels, dtype=pl.String))


def _phases(layers: pl.DataFrame) -> list[dict[str, Any]]:
    """Runs of consecutive layers with the same level."""
    phases: list[dict[str, Any]] = []
    for r in layers.sort("layer").iter_rows(named=True):
        if (
            phases
            and phases[-1]["level"] == r["level"]
            and phases[-1]["layers"][-1] == r["layer"] - 1
        ):
            phase = phases[-1]
        else:
            phase = {"level": r["level"], "layers": [], "shares": [], "masses": []}
            phases.append(phase)
        phase["layers"].append(r["layer"])
        phase["shares"].append(r["sink_share"])
        phase["masses"].append(r["bos_mass"])
    return phases


def _phase_text(phase: Mapping[str, Any]) -> str:
    lo, hi = min(phase["shares"]), max(phase["shares"])
    mlo, mhi = min(phase["masses"]), max(phase["masses"])
    share = _pct(lo) if lo == hi else f"{_pct(lo)}-{_pct(hi)}"
    mass = f"{mlo:.2f}" if f"{mlo:.2f}" == f"{mhi:.2f}" else f"{mlo:.2f}-{mhi:.2f}"
    what = (
        f"BOS mass {mass}"
        if phase["level"] in ("collapsed", "none", "sub-threshold")
        else (f"sink share {share}")
    )
    word = "layer" if len(phase["layers"]) == 1 else "layers"
    return f"{word} {_span(phase['layers'])} {phase['level']} ({what})"


def sink_layer_profile(per_head: pl.DataFrame) -> list[Row]:
    """Per model (dataset ``"all"``): the first layer with a sink head (``sinks.first_layer``)
    and the phases of the layer profile (``sinks.layer_phases``: runs of layers with the same
    :func:`layer_level`; value: the first layer with dominant sinks)."""
    shares = sink_layer_shares(per_head)
    rows: list[Row] = []
    source = "head classification per layer (oversmoothing per_head = heads per_head)"
    for (model,), layers in shares.group_by("model", maintain_order=True):
        layers = layers.sort("layer")
        n_layers = layers.height
        with_sink = layers.filter(pl.col("sink_share") > 0)
        if with_sink.height:
            first = with_sink.row(0, named=True)
            measured = (
                f"first sink head in layer {first['layer']} of {n_layers} "
                f"({_pct(first['sink_share'])} of its {first['n_heads']} head instances are sink "
                f"heads; level {first['level']})"
            )
            first_layer: float | None = first["layer"]
        else:
            measured, first_layer = f"no sink head in any of the {n_layers} layers", None
        rows.append(
            _row(
                str(model),
                POOLED,
                "sinks.first_layer",
                "The first layer (0-based) with at least one sink head.",
                source,
                measured,
                first_layer,
            )
        )
        dominant = layers.filter(pl.col("level") == "dominant")
        n_dom = dominant.height
        rows.append(
            _row(
                str(model),
                POOLED,
                "sinks.layer_phases",
                "The layer profile of sink heads, as runs of layers of the same level "
                "(value: first layer with dominant sinks).",
                source,
                "; ".join(_phase_text(p) for p in _phases(layers))
                + f". {n_dom} of {n_layers} layers have dominant sinks",
                dominant["layer"][0] if n_dom else None,
            )
        )
    return rows


# =============================================================================== BOS residual norm


def bos_norm_jump(
    bos_residual_norm: pl.DataFrame, per_head: pl.DataFrame | None = None
) -> list[Row]:
    """Per model (pooled rows): the largest ratio of the BOS residual norm between consecutive
    layers (``bos_norm.largest_jump``, value: the ratio), BOS's norm relative to the median
    token at that layer (``bos_norm.relative_at_jump``) and, given the head table, how many
    layers from that layer on have dominant sinks (``sinks.dominate_after_jump``, value: the
    share of those layers)."""
    _require(
        bos_residual_norm,
        ["model", "dataset", "layer", "bos_norm", "median_norm", "rel_bos_norm"],
        "bos_residual_norm",
    )
    shares = sink_layer_shares(per_head) if per_head is not None else None
    rows: list[Row] = []
    source = "BOS residual norm per layer (geometry bos_residual_norm, pooled)"
    for (model,), norms in _pooled(bos_residual_norm).group_by("model", maintain_order=True):
        norms = norms.sort("layer").with_columns(
            (pl.col("bos_norm") / pl.col("bos_norm").shift(1)).alias("ratio"),
            pl.col("bos_norm").shift(1).alias("prev_norm"),
            pl.col("rel_bos_norm").shift(1).alias("prev_rel"),
            pl.col("layer").shift(1).alias("prev_layer"),
        )
        steps = norms.filter(pl.col("ratio").is_not_null()).sort("ratio", descending=True)
        if steps.height == 0:
            continue
        j = steps.row(0, named=True)
        layer = int(j["layer"])
        rows.append(
            _row(
                str(model),
                POOLED,
                "bos_norm.largest_jump",
                "The largest ratio of the BOS residual norm between consecutive layers.",
                source,
                f"x{j['ratio']:.1f} from layer {j['prev_layer']} to {layer} "
                f"({_norm(j['prev_norm'])} -> {_norm(j['bos_norm'])})",
                j["ratio"],
            )
        )
        rows.append(
            _row(
                str(model),
                POOLED,
                "bos_norm.relative_at_jump",
                "BOS residual norm / median token norm at the layer of the largest jump.",
                source,
                f"BOS is {j['rel_bos_norm']:.1f}x the median token norm at layer {layer} "
                f"({j['prev_rel']:.2f}x at layer {j['prev_layer']})",
                j["rel_bos_norm"],
            )
        )
        if shares is None:
            continue
        layers = shares.filter(pl.col("model") == model)
        if layers.height == 0:
            continue
        after = layers.filter(pl.col("layer") >= layer)
        before = layers.filter(pl.col("layer") < layer)
        n_after = int((after["level"] == "dominant").sum())
        n_before = int((before["level"] == "dominant").sum())
        frac = n_after / after.height if after.height else None
        mean_after = float(after["sink_share"].mean()) if after.height else float("nan")
        mean_before = float(before["sink_share"].mean()) if before.height else float("nan")
        verdict = (
            "sinks dominate in every layer from there on"
            if n_after == after.height
            else f"sinks dominate in {_pct(frac or 0.0)} of the layers from there on, not in all"
        )
        rows.append(
            _row(
                str(model),
                POOLED,
                "sinks.dominate_after_jump",
                f"Layers with dominant sinks (share >= {DOMINANT_SHARE:g}) from the layer of "
                "the largest BOS-norm jump on (value: their share).",
                source + " and head classification per layer",
                f"from layer {layer} on: {n_after} of {after.height} layers dominant "
                f"(mean sink share {_pct(mean_after)}); before: {n_before} of {before.height} "
                + (f"(mean {_pct(mean_before)})" if before.height else "")
                + f"; {verdict}",
                frac,
            )
        )
    return rows


# =============================================================================== BOS cosines


def bos_cosine_sign(bos_alignment: pl.DataFrame, space: str = "Z") -> list[Row]:
    """Per model (pooled rows, attention input ``space``): the share of the cosines between BOS
    and the other tokens that are positive over the middle layers
    (:func:`sinkscope.geometry.alignment.middle_layers`) (``bos_cosine.middle_positive_share``)."""
    _require(
        bos_alignment,
        ["model", "dataset", "space", "layer", "n_positive", "n_values", "min"],
        "bos_alignment",
    )
    rows: list[Row] = []
    table = _pooled(bos_alignment.filter(pl.col("space") == space))
    for (model,), frame in table.group_by("model", maintain_order=True):
        per_layer = frame.group_by("layer").agg(
            pl.col("n_positive").sum(), pl.col("n_values").sum(), pl.col("min").min()
        )
        n_layers = int(per_layer["layer"].max()) + 1
        middle = middle_layers(n_layers)
        mid = per_layer.filter(pl.col("layer").is_in(middle)).sort("layer")
        n_pos, n_val = int(mid["n_positive"].sum()), int(mid["n_values"].sum())
        if n_val == 0:
            continue
        share = n_pos / n_val
        all_pos = mid.filter(pl.col("n_positive") == pl.col("n_values")).height
        sign = (
            "all positive" if n_pos == n_val else ("all negative" if n_pos == 0 else "mixed signs")
        )
        lowest = mid.sort("min").row(0, named=True)
        rows.append(
            _row(
                str(model),
                POOLED,
                "bos_cosine.middle_positive_share",
                f"Share of positive cos(BOS, token) at the attention input ({space}) over the "
                "middle layers.",
                f"geometry bos_alignment (space {space}, pooled)",
                f"{sign}: {_pct(share)} of {n_val} cosines > 0 in middle layers "
                f"{_span(middle)}; {all_pos} of {len(middle)} middle layers all positive; "
                f"lowest cosine {lowest['min']:.3f} (layer {lowest['layer']})",
                share,
                PAPER_BOS_COSINE,
            )
        )
    return rows


# =============================================================================== value ranks


def value_rank_lowest(
    value_rank: pl.DataFrame,
    value_rank_worst: pl.DataFrame | None = None,
    near_full_rank: float = NEAR_FULL_RANK,
) -> list[Row]:
    """Per model and dataset: the lowest relative value rank over the middle layers (the whisker
    of Fig. 12: the per-layer ``min``) with its layer and the lowest per-layer median
    (``value_rank.middle_min``); per model over its datasets (``"all"`` row): the lowest of those
    and on which dataset; given ``value_rank_worst``, the sequences of lowest mean relative rank
    (over layers and heads) with their datasets and share of repeated tokens
    (``value_rank.worst_sequences``, value: the lowest mean). ``near_full_rank`` (the claims'
    ``geometry.near_full_rank``) is the reading of "very high rank" the text compares with."""
    _require(value_rank, ["model", "dataset", "layer", "min", "median"], "value_rank")
    rows: list[Row] = []
    source = "geometry value_rank (per layer, pooled over heads and sequences)"
    table = value_rank.filter(pl.col("dataset") != POOLED).sort("model", "dataset")
    for (model,), frame in table.group_by("model", maintain_order=True):
        n_layers = int(frame["layer"].max()) + 1
        middle = middle_layers(n_layers)
        lowest: list[tuple[float, str, int]] = []
        for (dataset,), v in frame.group_by("dataset", maintain_order=True):
            vm = v.filter(pl.col("layer").is_in(middle))
            if vm.height == 0:
                continue
            w = vm.sort("min").row(0, named=True)
            med = vm.sort("median").row(0, named=True)
            n_below = vm.filter(pl.col("min") < near_full_rank).height
            lowest.append((float(w["min"]), str(dataset), int(w["layer"])))
            if "mean" in v.columns:
                low = v.filter(pl.col("mean") < near_full_rank).sort("layer")
                listed = ", ".join(
                    f"{r['layer']}: {r['mean']:.3f}" for r in low.iter_rows(named=True)
                )
                rows.append(
                    _row(
                        str(model),
                        str(dataset),
                        "value_rank.low_layers",
                        f"Layers (any depth) whose mean relative value rank is below "
                        f"{near_full_rank:g} (value: their number).",
                        source,
                        f"{low.height} of {v.height} layers below {near_full_rank:g}"
                        + (f" (layer: mean) {listed}" if low.height else ""),
                        float(low.height),
                        PAPER_VALUE_RANK,
                    )
                )
            rows.append(
                _row(
                    str(model),
                    str(dataset),
                    "value_rank.middle_min",
                    "The lowest relative value rank over the middle layers (Fig. 12's whisker).",
                    source,
                    f"lowest {w['min']:.3f} (layer {w['layer']}); lowest layer median "
                    f"{med['median']:.3f} (layer {med['layer']}); {n_below} of {vm.height} "
                    f"middle layers {_span(middle)} have a minimum below {near_full_rank:g}",
                    w["min"],
                    PAPER_VALUE_RANK,
                )
            )
        if not lowest:
            continue
        lo, where, layer = min(lowest)
        hi_min = max(x[0] for x in lowest)
        rows.append(
            _row(
                str(model),
                POOLED,
                "value_rank.middle_min",
                "The lowest relative value rank over the middle layers (Fig. 12's whisker).",
                source,
                f"lowest {lo:.3f} on {where} (layer {layer}); per-dataset minima "
                f"{lo:.3f}-{hi_min:.3f}; "
                + ("below" if lo < near_full_rank else "not below")
                + f" {near_full_rank:g}",
                lo,
                PAPER_VALUE_RANK,
            )
        )
    if value_rank_worst is None:
        return rows
    _require(
        value_rank_worst,
        ["model", "dataset", "m", "min_rel_rank", "mean_rel_rank", "n_repeated_tokens"],
        "value_rank_worst",
    )
    for (model,), w in value_rank_worst.sort("model").group_by("model", maintain_order=True):
        w = w.with_columns((pl.col("n_repeated_tokens") / pl.col("m")).alias("repeated"))
        datasets = sorted(set(w["dataset"].to_list()))
        rows.append(
            _row(
                str(model),
                ", ".join(datasets),
                "value_rank.worst_sequences",
                "The sequences of lowest mean relative value rank (over layers and heads).",
                "geometry value_rank_worst",
                f"{w.height} worst sequences, from {', '.join(datasets)}: mean relative rank "
                f"{float(w['mean_rel_rank'].min()):.3f}-{float(w['mean_rel_rank'].max()):.3f}, "
                f"lowest single matrix {float(w['min_rel_rank'].min()):.3f}; "
                f"{_pct(float(w['repeated'].min()))}-{_pct(float(w['repeated'].max()))} of their "
                "tokens are repeats",
                float(w["mean_rel_rank"].min()),
                PAPER_VALUE_RANK,
            )
        )
    return rows


# =============================================================================== all, markdown


def evaluate_observations(
    tables: Mapping[str, pl.DataFrame | None], near_full_rank: float = NEAR_FULL_RANK
) -> pl.DataFrame:
    """Every observation whose tables are present (keys as in
    :data:`sinkscope.claims.registry.TABLE_ANALYSIS`); returns the table with :data:`COLUMNS`."""
    per_head = tables.get("oversmoothing_per_head")
    rows: list[Row] = []
    if per_head is not None:
        rows += sink_layer_profile(per_head)
    if (norms := tables.get("geometry_bos_residual_norm")) is not None:
        rows += bos_norm_jump(norms, per_head)
    if (alignment := tables.get("geometry_bos_alignment")) is not None:
        rows += bos_cosine_sign(alignment)
    if (ranks := tables.get("geometry_value_rank")) is not None:
        rows += value_rank_lowest(ranks, tables.get("geometry_value_rank_worst"), near_full_rank)
    order = {"sinks": 0, "bos_norm": 1, "bos_cosine": 2, "value_rank": 3}
    frame = pl.DataFrame(rows, schema=COLUMNS).select(list(COLUMNS))
    return (
        frame.with_columns(
            pl.col("observation_id")
            .str.split(".")
            .list.first()
            .replace_strict(order, default=len(order), return_dtype=pl.Int64)
            .alias("_group")
        )
        .sort("model", "_group", maintain_order=True)
        .drop("_group")
    )


def _cell(text: Any) -> str:
    return "" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def observations_markdown(observations: pl.DataFrame) -> str:
    """The ``claims.md`` section: the thresholds, then one table per observation."""
    lines = [
        f"## {OBSERVATIONS_TITLE}",
        "",
        (
            "Facts the figures show about the models of this run, computed from the summary "
            "tables (`sinkscope.claims.observations`; also in `summary/observations.csv`). They carry no "
            "verdict; where the paper says something about the same quantity it is quoted. "
            f"Layer levels: dominant = sink-head share >= {DOMINANT_SHARE:g}, partial = "
            f">= {WEAK_SHARE:g}, weak = > 0; with no sink head: sub-threshold = mean BOS mass "
            f">= {SUB_THRESHOLD_BOS_MASS:g}, none = >= {COLLAPSED_BOS_MASS:g}, collapsed = below."
        ),
        "",
    ]
    if observations.height == 0:
        return "\n".join(lines + ["None (no input table of the observations in this run).", ""])
    for (oid,), part in observations.group_by("observation_id", maintain_order=True):
        first = part.row(0, named=True)
        lines += [f"### `{oid}`: {first['observation']}", "", f"Read from: {first['source']}."]
        if first["paper"] != NO_PAPER:
            lines += ["", f"Paper: {first['paper']}"]
        lines += ["", "| model | dataset | measured | value |", "|---|---|---|---|"]
        for r in part.iter_rows(named=True):
            value = "" if r["value"] is None else f"{r['value']:.4g}"
            lines.append(
                f"| {_cell(r['model'])} | {_cell(r['dataset'])} | {_cell(r['measured'])} | {value} |"
            )
        lines.append("")
    return "\n".join(lines)
