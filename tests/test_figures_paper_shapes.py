"""Every figure of every stage draws, and passes the readability rules, at the paper's shapes.

The figures of the rules ``classify_heads`` / ``summarize_heads``, ``analyze_geometry`` /
``analyze_geometry_long_context`` / ``summarize_geometry``, ``analyze_oversmoothing`` /
``summarize_oversmoothing``, ``analyze_sinks`` / ``summarize_sinks`` and the streaming rules are
drawn, through the same ``{name: Draw}`` dicts that :mod:`sinkscope.steps` hands to its rules, from
planted tables of the analysis modules' columns at the layer x head shapes of the paper's models
(:data:`SHAPES`: 1 and 2 layers and heads, GPT-2, GPT-2 XL with its 25 heads, Llama 3.1 8B,
Gemma 7B; ``d_model`` up to 4,096; the per-pair figures at :data:`PER_PAIR_SHAPES`, those that
bound their layouts) and at 0, 1, 2 and many panels where a figure's panel count
depends on the data (Fig. 11's deviating heads, secondary-sink tokens, window sizes,
re-computation baselines, sink heads); the head-class grids also at gpt-oss-20b's 64 heads.
Every figure is written with :func:`sinkscope.plotting.save_figure`, which refuses a figure that
breaks the readability rules (:func:`sinkscope.plotting.figure_problems`): a written PNG is one
that passes them. Here it is also refused when titles or axis labels of neighbouring panels run
into each other (:func:`overlapping_labels`; the rules check tick labels and legends only).

No model runs: the tables are planted (the sinks tables by
:func:`sinkscope.sinks.analysis.analyze_arrays` on planted attention maps, the summaries by the
stages' own ``summarize``), at the smallest N and T that give them their shape.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

from sinkscope.heads.classify import HeadClassThresholds, with_classes
from sinkscope.heads.names import PER_HEAD_COLUMNS
from sinkscope.plotting import MAX_FIGURE_PIXELS, Draw, _overlap
from tests.heads.test_plots import synthetic_per_head
from tests.sinks.planted import plant_sink, random_maps
from tests.test_plotting import PNG_SIGNATURE

if TYPE_CHECKING:
    from sinkscope.sinks.analysis import SinkSettings

THRESHOLDS = HeadClassThresholds()


@dataclass(frozen=True)
class Shape:
    """One model's size as the figures see it."""

    model: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int

    @property
    def id(self) -> str:
        return f"{self.model}-{self.n_layers}x{self.n_heads}"


#: The smallest models (1 and 2 layers and heads) and the shapes of config/paper.yaml's models:
#: GPT-2, GPT-2 XL (48 layers, 25 heads: an odd head count), Llama 3.1 8B and Mistral 7B (32 x 32,
#: 8 kv heads, d_model 4,096), Gemma 7B (28 x 16).
SHAPES: tuple[Shape, ...] = (
    Shape("one-layer", 1, 1, 1, 8),
    Shape("two-layer", 2, 2, 2, 16),
    Shape("gpt2", 12, 12, 12, 768),
    Shape("gpt2-xl", 48, 25, 25, 1600),
    Shape("llama-3.1-8b", 32, 32, 8, 4096),
    Shape("gemma-7b", 28, 16, 16, 3072),
)
#: The per-pair figures at the shapes that bound their layouts (a pair's figure depends on its own
#: layer and head counts only): the smallest, the most layers (GPT-2 XL, with an odd head count)
#: and the most heads of a dense model (Llama 3.1 8B); GPT-2 and Gemma 7B lie between them and
#: are drawn in the summaries, where every paper model shares the figure.
PER_PAIR_SHAPES = tuple(s for s in SHAPES if s.model not in ("gpt2", "gemma-7b"))
SHAPE_IDS = [s.id for s in PER_PAIR_SHAPES]
#: gpt-oss-20b (config/paper.yaml): 64 heads, the most of any model (its head-class grids).
MOST_HEADS = Shape("gpt-oss-20b", 24, 64, 8, 2880)
BY_MODEL = {s.model: s for s in (*SHAPES, MOST_HEADS)}
#: The longest dataset name of config/paper.yaml (the longest titles), and a second dataset.
DATASET = "codesearchnet-python"
OTHER_DATASET = "tinystories"
#: N and T the titles state (the paper's); the arrays that are computed are smaller (:data:`T`).
N_SEQUENCES = 50
CONTEXT_LENGTH = 256
#: Tokens after BOS of the planted attention maps (sinks) and of the planted point sets.
T = 16
#: The oversmoothing prefixes T' (the paper's, up to 512).
CONTEXT_LENGTHS = (32, 64, 128, 256, 512)
#: Panel counts of a figure whose panels depend on the data: none, one, two and many.
PANEL_COUNTS = (0, 1, 2, 4)


def title_of(shape: Shape, dataset: str = DATASET) -> str:
    """The title of a pair's figures, as :func:`sinkscope.steps._pair_title` writes it."""
    return f"{shape.model} on {dataset} (N={N_SEQUENCES}, T={CONTEXT_LENGTH})"


def overlapping_labels(fig: Figure) -> list[str]:
    """Titles and axis labels of ``fig`` (its suptitle, every visible axes' titles and x / y
    labels) that overlap one another, as drawn by :func:`~sinkscope.plotting.figure_problems`:
    the titles of neighbouring panels, or the y labels of stacked ones, must not run into each
    other (tick labels and legends are checked by the readability rules themselves)."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    texts: list[Text] = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        if ax.get_visible():
            titles = [ax.title, ax._left_title, ax._right_title]
            texts += [*titles, ax.xaxis.label, ax.yaxis.label]
    boxes = [
        (t.get_text(), t.get_window_extent(renderer))
        for t in texts
        if t.get_visible() and t.get_text().strip()
    ]
    return [
        f"{a[:40]!r} overlaps {b[:40]!r}"
        for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2)
        if _overlap(box_a, box_b)
    ]


@pytest.fixture(autouse=True)
def labels_do_not_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    """save_figure also refuses, in this module, a figure whose titles or labels overlap."""
    from sinkscope import plotting

    rules = plotting.figure_problems

    def stricter(fig: Figure) -> list[str]:
        return [*rules(fig), *overlapping_labels(fig)]

    monkeypatch.setattr(plotting, "figure_problems", stricter)


def assert_written(draw: Draw, path: Path) -> None:
    """``draw`` writes ``path``: a PNG within MAX_FIGURE_PIXELS (save_figure has checked it
    against every readability rule, or refused it with a ValueError)."""
    from PIL import Image

    draw(path)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000, path.name
    with Image.open(path) as image:
        assert max(image.size) <= MAX_FIGURE_PIXELS, (path.name, image.size)


def draw_all(figures: Mapping[str, Draw], folder: Path, prefix: str = "") -> None:
    """Every figure of ``figures`` (a rule's ``{name: Draw}``) written to ``folder``; fails with
    the problems of every figure that save_figure refused."""
    folder.mkdir(parents=True, exist_ok=True)
    failures = []
    for name, draw in figures.items():
        try:
            assert_written(draw, folder / f"{prefix}{name}.png")
        except ValueError as error:  # save_figure refused it: keep drawing the others
            failures.append(f"{name}: {error}")
    assert not failures, "\n".join(failures)


# ----------------------------------------------------------------------------- planted tables


def head_table(shape: Shape, dataset: str = DATASET, seed: int = 0) -> pl.DataFrame:
    """A per-head table (:data:`~sinkscope.heads.names.PER_HEAD_COLUMNS`, flags and classes as
    the pipeline computes them) of ``shape``."""
    table = synthetic_per_head(shape.model, dataset, seed, shape.n_layers, shape.n_heads)
    return table.with_columns(n_sequences=pl.lit(N_SEQUENCES, dtype=pl.Int64))


def with_sink_heads(per_head: pl.DataFrame, sink: bool | None) -> pl.DataFrame:
    """``per_head`` with every head a sink head (``True``), none (``False``) or as it is."""
    if sink is None:
        return per_head
    mass = pl.lit(0.9 if sink else 0.05)
    frame = per_head.with_columns(bos_mass=mass, diagonal_mass=pl.lit(0.02))
    return with_classes(frame, THRESHOLDS).select(PER_HEAD_COLUMNS)


# --- oversmoothing


def oversmoothing_tables(
    shape: Shape,
    n_deviating: int,
    dataset: str = DATASET,
    sink: bool | None = None,
    seed: int = 0,
) -> dict[str, pl.DataFrame]:
    """``per_head``, ``per_layer``, ``summary`` and ``conditions`` of
    :func:`~sinkscope.oversmoothing.analysis.analyze_file` for ``shape``, with exactly
    ``n_deviating`` heads (one non-sink head in each of the first ``n_deviating`` layers) where
    uniform attention mixes no more than the learned attention (Fig. 11's rule)."""
    from sinkscope.oversmoothing.names import BY_SEQUENCE_COLUMNS as OS_BY_SEQUENCE
    from sinkscope.oversmoothing.names import HEADS_BY_SEQUENCE_COLUMNS as OS_HEADS_BY_SEQUENCE
    from sinkscope.oversmoothing.names import LAYERS_BY_SEQUENCE_COLUMNS as OS_LAYERS_BY_SEQUENCE
    from sinkscope.oversmoothing.names import PER_HEAD_COLUMNS as OS_HEAD
    from sinkscope.oversmoothing.names import PER_LAYER_COLUMNS as OS_LAYER
    from sinkscope.oversmoothing.summary import UNIFORMITY_THRESHOLD, summary_tables

    rng = np.random.default_rng(seed)
    heads = with_sink_heads(head_table(shape, dataset, seed), sink)
    deviating = set()
    if n_deviating:
        # the last head of each of the first n_deviating layers, made a non-sink head
        deviating = {(layer, shape.n_heads - 1) for layer in range(n_deviating)}
        chosen = pl.struct("layer", "head").is_in([{"layer": a, "head": b} for a, b in deviating])
        heads = with_classes(
            heads.with_columns(bos_mass=pl.when(chosen).then(0.05).otherwise(pl.col("bos_mass"))),
            THRESHOLDS,
        ).select(PER_HEAD_COLUMNS)
    lengths = pl.DataFrame({"context_length": list(CONTEXT_LENGTHS)})
    frame = heads.select(
        "model", "dataset", "n_sequences", "layer", "head", "head_class", "is_sink",
        "is_diagonal", "bos_mass", "diagonal_mass",
    ).join(lengths, how="cross")  # fmt: skip
    n = frame.height

    def u(low: float = 0.0, high: float = 1.0) -> np.ndarray:
        return rng.uniform(low, high, n)

    rho_x = u(0.2, 0.7)
    rho_xwz_s = rho_x - u(0.0, 0.1)
    rho_xwza_s = rho_xwz_s + u(-0.05, 0.1)
    # not deviating: uniform attention smooths more than both; deviating: less than both, by
    # a distinct amount per head
    is_deviating = np.array(
        [(a, b) in deviating for a, b in zip(frame["layer"], frame["head"], strict=True)]
    )
    above = np.maximum(rho_xwza_s, rho_xwz_s)
    below = np.minimum(rho_xwza_s, rho_xwz_s)
    rho_xwzau_s = np.where(
        is_deviating, below - 0.01 - 0.001 * frame["layer"].to_numpy(), above + u(0.01, 0.1)
    )
    rho_xwz, rho_xwza, rho_xwzau = rho_xwz_s - 0.01, rho_xwza_s - 0.01, rho_xwzau_s - 0.01
    rhohat_x, rhohat_xwz, rhohat_xwzau = rho_x + u(-0.01, 0.01), rho_xwz + u(-0.2, 0.2), rho_xwzau
    conditions = np.array(["i", "ii", "neither"])
    condition, condition_s = rng.choice(conditions, n), rng.choice(conditions, n)
    sign = {"i": 1, "ii": -1, "neither": 0}
    per_head = frame.with_columns(
        n_tokens=pl.col("context_length"),
        uniformity=u(),
        beta=u(0.5, 2.0),
        s_l=u(0.1, 1.0),
        kappa=pl.lit(1.0),
        rho_x=rho_x,
        rho_xwz=rho_xwz,
        rho_xwza=rho_xwza,
        rho_xwzau=rho_xwzau,
        rho_xwz_s=rho_xwz_s,
        rho_xwza_s=rho_xwza_s,
        rho_xwzau_s=rho_xwzau_s,
        rhohat_x=rhohat_x,
        rhohat_xwz=rhohat_xwz,
        rhohat_xwzau=rhohat_xwzau,
        abs_err_x=np.abs(rho_x - rhohat_x),
        abs_err_xwz=np.abs(rho_xwz - rhohat_xwz),
        abs_err_xwzau=np.abs(rho_xwzau - rhohat_xwzau),
        **{name: u(-1.0, 1.0) for name in ("tr_cw", "tr_bw", "bias_term")},
        **{name: u(0.1, 10.0) for name in ("tr_c", "tr_b", "tr_cwtw", "tr_bwtw")},
        cond_i_value=u(-1.0, 1.0),
        cond_ii_value=u(-1.0, 1.0),
        cond_ii_value_s=u(-1.0, 1.0),
        condition=condition,
        condition_s=condition_s,
        predicted_sign=np.array([sign[c] for c in condition]),
        predicted_sign_s=np.array([sign[c] for c in condition_s]),
        delta_attn=rho_xwza - rho_xwz,
        delta_unif=rho_xwzau - rho_xwza,
        delta_attn_s=rho_xwza_s - rho_xwz_s,
        delta_unif_s=rho_xwzau_s - rho_xwza_s,
        # a few heads of early layers change rho several-fold (Fig. 10's symlog axis)
        rel_change_s=(rho_xwza_s - rho_x) / np.abs(rho_x) * np.where(u() < 0.05, 30.0, 1.0),
        rhohat_trend=rng.choice(["increasing", "decreasing", "non-monotone"], n),
        rhohat_trend_s=rng.choice(["increasing", "decreasing", "non-monotone"], n),
        expectation_positive=pl.lit(True),
        head_update_norm=u(0.5, 5.0),
    ).select(OS_HEAD)
    layers = pl.DataFrame(
        {"model": shape.model, "dataset": dataset, "n_sequences": N_SEQUENCES}
    ).join(
        pl.DataFrame({"layer": np.arange(shape.n_layers)}).join(lengths, how="cross"),
        how="cross",
    )
    m = layers.height
    per_layer = layers.with_columns(
        n_tokens=pl.col("context_length"),
        rho_before=rng.uniform(0.1, 0.8, m),
        rho_after=rng.uniform(0.1, 0.8, m),
        rhohat_x=rng.uniform(0.1, 0.8, m),
        beta=rng.uniform(0.5, 2.0, m),
        s_l=rng.uniform(0.1, 1.0, m),
        kappa=pl.lit(1.0),
        tr_c=rng.uniform(1.0, 10.0, m),
        tr_b=rng.uniform(1.0, 10.0, m),
        full_update_norm=rng.uniform(1.0, 10.0, m),
        head_update_norm=rng.uniform(0.1, 1.0, m),
        post_norm_fit_rel_err=pl.lit(float("nan")),
        head_sum_rel_err=pl.lit(1e-6),
        output_bias_norm=pl.lit(0.0),
        probs_upper_max=pl.lit(0.0),
        probs_row_sum_max_err=pl.lit(1e-7),
    ).select(OS_LAYER)
    # eq. (2)'s terms per sequence at the largest T': every sequence reads the head's rho and
    # rho_hat (a = rho_hat, d0 = 1), as the analysis writes them
    largest = per_head.filter(pl.col("context_length") == max(CONTEXT_LENGTHS))
    by_sequence = (
        largest.select(
            "model", "dataset", "layer", "head", "context_length", "rho_xwz", "rhohat_xwz"
        )
        .join(pl.DataFrame({"sequence": np.arange(N_SEQUENCES)}), how="cross")
        .with_columns(
            a_beta2=pl.lit(0.0),
            a_beta1=pl.lit(0.0),
            a_beta0=pl.col("rhohat_xwz"),
            d0_beta2=pl.lit(0.0),
            d0_beta1=pl.lit(0.0),
            d0_beta0=pl.lit(1.0),
            sum_xz=pl.lit(1.0),
            sum_zz=pl.lit(1.0),
        )
        .select(OS_BY_SEQUENCE)
    )
    # each layer's rho per sequence: every sequence reads the layer's means
    layers_by_sequence = (
        per_layer.select("model", "dataset", "layer", "context_length", "rho_before", "rho_after")
        .join(pl.DataFrame({"sequence": np.arange(N_SEQUENCES)}), how="cross")
        .select(OS_LAYERS_BY_SEQUENCE)
    )
    # each head's rho's per sequence at the largest T': every sequence reads the head's means
    heads_by_sequence = (
        per_head.filter(pl.col("context_length") == per_head["context_length"].max())
        .select([c for c in OS_HEADS_BY_SEQUENCE if c != "sequence"])
        .join(pl.DataFrame({"sequence": np.arange(N_SEQUENCES)}), how="cross")
        .select(OS_HEADS_BY_SEQUENCE)
    )
    return {
        "per_head": per_head,
        "per_layer": per_layer,
        **summary_tables(per_head, per_layer, UNIFORMITY_THRESHOLD),
        "approximation_by_sequence": by_sequence,
        "layers_by_sequence": layers_by_sequence,
        "heads_by_sequence": heads_by_sequence,
    }


# --- geometry


def geometry_tables(
    shape: Shape, dataset: str = DATASET, sink: bool | None = None, seed: int = 0
) -> dict[str, pl.DataFrame]:
    """Every table of :func:`~sinkscope.geometry.analysis.analyze_file` for ``shape`` (columns
    :data:`~sinkscope.geometry.analysis.TABLE_COLUMNS`), ``N = 2`` sequences of ``T`` tokens,
    and the pair's long-context table (T' > d_model)."""
    from sinkscope.geometry.alignment import cosine_rows
    from sinkscope.geometry.analysis import TABLE_COLUMNS, halfspace_layer
    from sinkscope.geometry.halfspace import ATTEND_THRESHOLD
    from sinkscope.geometry.long_context import LONG_CONTEXT_COLUMNS
    from sinkscope.geometry.names import (
        ATTENDING,
        LONG_CONTEXT_POINT_SETS,
        LONG_CONTEXT_TABLE,
        POINT_SETS,
    )

    rng = np.random.default_rng(seed)
    n_seq = 2
    ids = {"model": shape.model, "dataset": dataset}
    heads = with_sink_heads(head_table(shape, dataset, seed), sink)
    n_sink = heads.group_by("layer").agg(pl.col("is_sink").sum().alias("n_sink_heads"))
    align, hist = [], []
    for space in ("Z", "X"):
        for layer in range(shape.n_layers):
            cos = rng.uniform(-0.6, 0.3, (n_seq, T))
            row, counts = cosine_rows(space, layer, cos)
            align.append({**ids, **row, "n_sequences": n_seq, "context_length": T})
            hist.append(
                pl.DataFrame(
                    {
                        **ids,
                        "space": space,
                        "layer": layer,
                        "bin": np.arange(counts.size),
                        "bin_lo": np.linspace(-1.0, 1.0, counts.size + 1)[:-1],
                        "bin_hi": np.linspace(-1.0, 1.0, counts.size + 1)[1:],
                        "count": counts,
                    }
                )
            )

    def halfspace_rows(point_sets: tuple[str, ...], n_points: int) -> list[dict]:
        rows = []
        for layer in range(shape.n_layers):
            for sequence in range(n_seq):
                for name in point_sets:
                    points = n_points if name != ATTENDING else int(rng.integers(0, T))
                    trivial = points <= shape.d_model
                    margin = float(rng.uniform(0.0, 0.5)) if points else None
                    rows.append(
                        {
                            **ids,
                            "layer": layer,
                            "sequence": sequence,
                            "point_set": name,
                            "n_points": points,
                            "dim": shape.d_model,
                            "rank": min(points, shape.d_model),
                            "trivially_separable": trivial and points > 0,
                            "halfspace": (margin > 0) if margin is not None else None,
                            "margin": margin,
                            "margin_upper": margin,
                            "n_support": min(points, 3),
                            "solved": True,
                        }
                    )
        return rows

    halfspace = (
        pl.DataFrame(halfspace_rows(POINT_SETS, T), infer_schema_length=None)
        .join(n_sink, on="layer")
        .with_columns(
            n_sink_heads=pl.col("n_sink_heads").cast(pl.Int64),
            attend_threshold=pl.lit(ATTEND_THRESHOLD),
        )
        .select(TABLE_COLUMNS["halfspace"])
    )
    n_kv = shape.n_kv_heads
    value_rank = pl.DataFrame(
        {
            **ids,
            "layer": np.repeat(np.arange(shape.n_layers), n_seq * n_kv),
            "kv_head": np.tile(np.arange(n_kv), shape.n_layers * n_seq),
            "sequence": np.tile(np.repeat(np.arange(n_seq), n_kv), shape.n_layers),
            "m": T + 1,
            "n": 64,
        }
    ).with_columns(
        rank=pl.lit(T + 1),
        rel_rank=rng.uniform(0.6, 1.0, shape.n_layers * n_seq * n_kv),
        sigma_ratio_min=pl.lit(1e-3),
    )
    worst = value_rank.group_by("model", "dataset", "sequence", "m").agg(
        min_rel_rank=pl.col("rel_rank").min(),
        mean_rel_rank=pl.col("rel_rank").mean(),
        min_layer=pl.col("layer").first(),
        min_kv_head=pl.col("kv_head").first(),
    )
    worst = worst.with_columns(
        n_unique_tokens=pl.lit(T), n_repeated_tokens=pl.lit(1), token_ids=pl.lit("1,2,3")
    )
    rel = np.exp(rng.normal(0.0, 1.0, heads.height))
    bos_value_norm = heads.with_columns(
        kv_head=pl.col("head") * n_kv // shape.n_heads,
        n_sequences=pl.lit(n_seq),
        context_length=pl.lit(T),
        bos_vo_norm=rel,
        median_vo_norm=pl.lit(1.0),
        rel_bos_vo_norm=rel,
        rel_bos_vo_norm_min=rel / 2,
        rel_bos_vo_norm_max=rel * 2,
        rel_bos_value_norm=rel,
    )
    norms = np.exp(rng.normal(2.0, 1.0, shape.n_layers))
    bos_residual_norm = pl.DataFrame(
        {
            **ids,
            "layer": np.arange(shape.n_layers),
            "n_sequences": n_seq,
            "context_length": T,
            "bos_norm": norms,
            "median_norm": 1.0,
            "rel_bos_norm": norms,
            "rel_bos_norm_min": norms / 2,
            "rel_bos_norm_max": norms * 2,
        }
    )
    tables = {
        "bos_alignment": pl.DataFrame(align, infer_schema_length=None),
        "bos_cosine_hist": pl.concat(hist),
        "halfspace": halfspace,
        "halfspace_layer": halfspace_layer(halfspace).with_columns(
            context_length=pl.lit(T, dtype=pl.Int64)
        ),
        "value_rank": value_rank,
        "value_rank_worst": worst,
        "bos_value_norm": bos_value_norm,
        "bos_residual_norm": bos_residual_norm,
    }
    out = {name: tables[name].select(columns) for name, columns in TABLE_COLUMNS.items()}
    # Prop. 4.1 on long sequences: T' > d_model points per set (only counted, never computed)
    long_rows = halfspace_rows(LONG_CONTEXT_POINT_SETS, shape.d_model + 1)
    out[LONG_CONTEXT_TABLE] = pl.DataFrame(
        [
            {
                **r,
                "seq_len": shape.d_model + 2,
                # the Gaussian null of the same size fails: no half-space, margin 0
                "null_halfspace": False,
                "null_margin": 0.0,
                "null_margin_upper": 0.0,
                "null_solved": True,
            }
            for r in long_rows
        ],
        infer_schema_length=None,
    ).select(LONG_CONTEXT_COLUMNS)
    return out


# --- sinks


def sinks_tables(
    shape: Shape, dataset: str = DATASET, secondary: bool = True, seed: int = 0
) -> tuple[dict[str, pl.DataFrame], SinkSettings]:
    """The tables of :func:`~sinkscope.sinks.analysis.analyze_arrays` on planted maps of
    ``shape`` (N = 2 sequences of T tokens after BOS, d_model entries per token): BOS a sink
    everywhere, a few massive entries at BOS, and (``secondary``) a secondary sink at position 3
    in every other layer. Returns the tables and the settings."""
    from sinkscope.sinks.analysis import SinkSettings, analyze_arrays

    rng = np.random.default_rng(seed)
    n_seq, n_pos = 2, T + 1
    settings = SinkSettings(prefix_positions=(T - 4,), secondary_min_queries=4)
    probs = random_maps(rng, (shape.n_layers, n_seq, shape.n_heads), n_pos)
    plant_sink(probs, 0, 0.6)
    if secondary:
        plant_sink(probs[::2], 3, 0.5)
    x = rng.normal(size=(shape.n_layers, n_seq, n_pos, shape.d_model)).astype(np.float32)
    x[shape.n_layers // 2 :, :, 0, : min(3, shape.d_model)] = 500.0
    ids = rng.integers(2, 50_000, size=(n_seq, n_pos))
    ids[:, 0] = 1

    def decode(token_ids: Sequence[int]) -> list[str]:  # long token texts (cut in the bars)
        return [f" token_{token_id}_with_a_long_text" for token_id in token_ids]

    tables = analyze_arrays(probs, x, ids, settings, decode, shape.model, dataset)
    return tables, settings


# --- streaming


def streaming_tables(
    shape: Shape, windows: tuple[int, ...], baselines: int, dataset: str = DATASET, seed: int = 0
) -> dict[str, pl.DataFrame]:
    """The tables of one pair's streaming rules (:func:`~sinkscope.streaming.experiment.
    evaluate_pair`, :func:`~sinkscope.streaming.recompute.recompute_pair` with ``baselines`` of
    its baselines, :func:`~sinkscope.streaming.first_positions.first_position_mass`) for the
    window sizes ``windows`` and one single-layer ablation per layer of ``shape``."""
    from sinkscope.streaming.recompute import RECOMPUTE_BASELINES, RECOMPUTE_SCHEMA

    rng = np.random.default_rng(seed)
    length, k0, counts = 2 * max(windows) + 16, 4, (1, 2, 4)
    policies = [("dense", "dense", 0, None, "cache")]
    for w in windows:
        policies.append((f"window_L{w}", "window", 0, w, "cache"))
        for k in counts if w == windows[-1] else (k0,):
            policies.append((f"sink{k}_L{w}", "sink", k, w, "cache"))
            policies.append((f"neutral{k}_L{w}", "neutral", k, w, "cache"))
    policies.append((f"sink{k0}_L{windows[-1]}_abs", "sink", k0, windows[-1], "absolute"))
    positions = np.arange(1, length)
    nll, ppl = [], []
    tail = max(windows) + max(counts) + 1
    for name, kind, k, w, pos in policies:
        extra = 0.0 if kind == "dense" else (0.6 if kind == "window" else 0.05)
        values = 3.0 + extra * (positions > (w or length)) + rng.normal(0, 0.05, positions.size)
        nll.append(
            pl.DataFrame(
                {
                    "policy": name,
                    "kind": kind,
                    "n_sink": k,
                    "window": w,
                    "positions": pos,
                    "position": positions,
                    "nll": values,
                    "nll_sd": 0.1,
                },
                schema_overrides={"window": pl.Int64},
            )
        )
        for region, first in (("all", 1), ("evicting", (w or length) + k + 1), ("tail", tail)):
            mean = 3.0 + extra
            ppl.append(
                {
                    "policy": name,
                    "kind": kind,
                    "n_sink": k,
                    "window": w,
                    "positions": pos,
                    "region": region,
                    "first_position": first,
                    "n_tokens": 100,
                    "nll": mean,
                    "ppl": float(np.exp(mean)),
                    "dense_nll": 3.0,
                    "dense_ppl": float(np.exp(3.0)),
                    "log_ppl_ratio": extra,
                }
            )
    ids = {"model": shape.model, "dataset": dataset}
    recompute = []
    for baseline in list(RECOMPUTE_BASELINES)[:baselines]:
        for w in windows:
            for kind, k in (("window", 0), ("sink", k0), ("neutral", k0)):
                recompute.append(
                    {
                        "baseline": baseline,
                        "window": w,
                        "kind": kind,
                        "n_sink": k,
                        "policy": f"{kind}{k}_L{w}",
                        "first_position": w + k + 1,
                        "n_queries": 5,
                        "n_tokens": 10,
                        "dense_nll": 3.0,
                        "window_nll": 3.6,
                        "recompute_nll": 3.1,
                        "policy_nll": 3.6 if kind == "window" else 3.15,
                        "window_vs_recompute": 0.5,
                        "policy_vs_recompute": 0.5 if kind == "window" else 0.05,
                        "policy_vs_recompute_se": 0.02,
                        "recovered_fraction": None if kind == "window" else 0.9,
                    }
                )
    k = 8
    mass = rng.dirichlet(np.ones(k + 1), shape.n_layers)[:, :k]
    tables = {
        "nll_by_position": pl.concat(nll),
        "perplexity": pl.DataFrame(ppl, schema_overrides={"window": pl.Int64}),
        "timings": pl.DataFrame({"policy": [p[0] for p in policies], "tokens": 100}),
        "layer_ablation": pl.DataFrame(
            {
                "layer": np.arange(shape.n_layers),
                "layer_type": "full_attention",
                "window": windows[0],
                "n_tokens": 50,
                "nll": 3.0 + rng.uniform(0, 1, shape.n_layers),
                "dense_nll": 3.0,
                "log_ppl_ratio": rng.uniform(0, 1, shape.n_layers),
                "wall_s": 1.0,
            }
        ),
        "settings": pl.DataFrame(
            {
                "params_json": [json.dumps({"window_sizes": list(windows)})],
                "stream_offsets": ["0"],
                "n_streams": [2],
                "stream_length": [length],
            }
        ),
        "recompute": pl.DataFrame(recompute, schema=RECOMPUTE_SCHEMA),
        "first_position_mass": pl.DataFrame(
            {
                "layer": np.repeat(np.arange(shape.n_layers), k),
                "key_position": np.tile(np.arange(k), shape.n_layers),
                "mass": mass.ravel(),
                "cumulative_mass": np.cumsum(mass, axis=1).ravel(),
                "mass_head_min": mass.ravel() / 2,
                "mass_head_max": np.minimum(1.0, mass.ravel() * 2),
                "n_queries": T + 1 - k,
            }
        ),
    }
    named = {column: pl.lit(value) for column, value in ids.items()}
    return {name: table.with_columns(**named) for name, table in tables.items()}


# ----------------------------------------------------------------------------- the cases

#: Where every head is a sink head or none (the figures that split sink heads from the others).
SMALL = [BY_MODEL["one-layer"]]
SMALL_IDS = [s.id for s in SMALL]
#: Summaries of one model (on two datasets): the smallest and the widest (48 layers).
ONE_MODEL = [BY_MODEL[m] for m in ("one-layer", "gpt2-xl")]
#: The summaries' pairs of the paper's grid: every shape on two datasets, and (the stages whose
#: figures draw a box or bar per layer or head, slow to draw) the paper's shapes on one dataset.
PAPER_PAIRS = [(shape, dataset) for shape in SHAPES for dataset in (DATASET, OTHER_DATASET)]
PAPER_MODELS = [(shape, DATASET) for shape in SHAPES if shape.n_layers > 2]


def only(figures: Mapping[str, Draw], names: tuple[str, ...]) -> dict[str, Draw]:
    """The figures ``names`` of a rule's ``{name: Draw}``."""
    assert set(names) <= set(figures)
    return {name: figures[name] for name in names}


# ----------------------------------------------------------------------------- head classes


@pytest.mark.parametrize("shape", [*PER_PAIR_SHAPES, MOST_HEADS], ids=[*SHAPE_IDS, MOST_HEADS.id])
def test_head_figures(shape: Shape, tmp_path: Path) -> None:
    from sinkscope.heads.plots import pair_figures

    draw_all(pair_figures(head_table(shape), title_of(shape), THRESHOLDS), tmp_path)


def _head_summary(pairs: list[tuple[Shape, str]], folder: Path) -> None:
    from sinkscope.heads.plots import summary_figures
    from sinkscope.heads.summary import summarize

    heads = [head_table(shape, dataset, seed=i) for i, (shape, dataset) in enumerate(pairs)]
    draw_all(summary_figures(summarize(heads, THRESHOLDS), THRESHOLDS), folder)


@pytest.mark.parametrize("shape", ONE_MODEL, ids=[s.id for s in ONE_MODEL])
def test_head_summary_of_one_model(shape: Shape, tmp_path: Path) -> None:
    _head_summary([(shape, DATASET), (shape, OTHER_DATASET)], tmp_path)


def test_head_summary_of_the_paper_models(tmp_path: Path) -> None:
    _head_summary(PAPER_PAIRS, tmp_path)


# ----------------------------------------------------------------------------- geometry


@pytest.mark.parametrize("shape", PER_PAIR_SHAPES, ids=SHAPE_IDS)
def test_geometry_figures(shape: Shape, tmp_path: Path) -> None:
    from sinkscope.geometry.names import LONG_CONTEXT_TABLE
    from sinkscope.geometry.plots import long_context_figures, pair_figures

    tables = geometry_tables(shape)
    draw_all(pair_figures(tables, title_of(shape)), tmp_path)
    title = f"{shape.model} on {DATASET}: Prop. 4.1 on long sequences"
    draw_all(long_context_figures(tables[LONG_CONTEXT_TABLE], title), tmp_path)


def _geometry_summary(
    pairs: list[tuple[Shape, str]], folder: Path, sink: bool | None = None, names=None
) -> None:
    from sinkscope.geometry.plots import summary_figures
    from sinkscope.geometry.summary import long_context_table, summarize

    tables = [geometry_tables(s, d, sink=sink, seed=i) for i, (s, d) in enumerate(pairs)]
    figures = summary_figures(summarize(tables), tables, long_context_table(tables), "pooled")
    draw_all(only(figures, names) if names else figures, folder)


def test_geometry_summary_of_one_model(tmp_path: Path) -> None:
    shape = BY_MODEL["gpt2"]
    _geometry_summary([(shape, DATASET), (shape, OTHER_DATASET)], tmp_path)


def test_geometry_summary_of_the_paper_models(tmp_path: Path) -> None:
    _geometry_summary(PAPER_MODELS, tmp_path)


@pytest.mark.parametrize("sink", [True, False], ids=["all-sink-heads", "no-sink-head"])
@pytest.mark.parametrize("shape", SMALL, ids=SMALL_IDS)
def test_value_norm_figures_without_one_head_group(
    shape: Shape, sink: bool, tmp_path: Path
) -> None:
    """Every head a sink head, or none: one of the value-norm figure's two groups is empty."""
    from sinkscope.geometry.plots import pair_figures

    tables = geometry_tables(shape, sink=sink)
    draw_all(only(pair_figures(tables, title_of(shape)), ("bos_value_norm",)), tmp_path)
    _geometry_summary([(shape, DATASET)], tmp_path / "summary", sink, ("bos_value_norm",))


# ----------------------------------------------------------------------------- oversmoothing


def _oversmoothing_figures(
    tables: dict[str, pl.DataFrame], folder: Path, names: tuple[str, ...] | None = None
) -> None:
    from sinkscope.oversmoothing.plots import figures
    from sinkscope.oversmoothing.summary import UNIFORMITY_THRESHOLD

    drawn = figures(tables, UNIFORMITY_THRESHOLD, THRESHOLDS)
    draw_all(only(drawn, names) if names else drawn, folder)


@pytest.mark.parametrize("shape", PER_PAIR_SHAPES, ids=SHAPE_IDS)
def test_oversmoothing_figures(shape: Shape, tmp_path: Path) -> None:
    """Every figure of a pair, a deviating head in every layer (Fig. 11: as many panels as it
    shows)."""
    _oversmoothing_figures(oversmoothing_tables(shape, shape.n_layers), tmp_path)


@pytest.mark.parametrize("n_deviating", PANEL_COUNTS, ids=[f"{n}-deviating" for n in PANEL_COUNTS])
def test_fig11_at_every_number_of_deviating_heads(n_deviating: int, tmp_path: Path) -> None:
    """0, 1, 2 and 4 (the most it shows) panels of a 32-head model (the panels' width does not
    depend on the model: test_oversmoothing_figures draws the most panels of every shape)."""
    from sinkscope.oversmoothing.plots import select_deviating_heads

    tables = oversmoothing_tables(BY_MODEL["llama-3.1-8b"], n_deviating)
    assert select_deviating_heads(tables["per_head"]).height == n_deviating  # as planted
    _oversmoothing_figures(tables, tmp_path, ("fig11_deviating_heads",))


@pytest.mark.parametrize("sink", [True, False], ids=["all-sink-heads", "no-sink-head"])
@pytest.mark.parametrize("shape", SMALL, ids=SMALL_IDS)
def test_oversmoothing_figures_without_one_head_group(
    shape: Shape, sink: bool, tmp_path: Path
) -> None:
    """Every head a sink head (Figs. 8, 9 and 11 show no head), or none."""
    names = ("fig8_attention_deltas", "fig9_uniform_deltas", "fig10_uniformity")
    _oversmoothing_figures(oversmoothing_tables(shape, 0, sink=sink), tmp_path, names)


def _oversmoothing_summary(pairs: list[tuple[Shape, str]], folder: Path) -> None:
    """The summary's figures (Fig. 9: laid out as Fig. 8, by the same function, left out)."""
    from sinkscope.oversmoothing.names import FIGURES
    from sinkscope.oversmoothing.summary import UNIFORMITY_THRESHOLD, summarize

    tables = [oversmoothing_tables(s, s.n_layers, d, seed=i) for i, (s, d) in enumerate(pairs)]
    summary = summarize(tables, uniformity_threshold=UNIFORMITY_THRESHOLD)
    names = tuple(name for name in FIGURES if name != "fig9_uniform_deltas")
    _oversmoothing_figures(summary, folder, names)


def test_oversmoothing_summary_of_one_model(tmp_path: Path) -> None:
    shape = BY_MODEL["two-layer"]
    _oversmoothing_summary([(shape, DATASET), (shape, OTHER_DATASET)], tmp_path)


def test_oversmoothing_summary_of_the_paper_models(tmp_path: Path) -> None:
    _oversmoothing_summary(PAPER_MODELS, tmp_path)


# ----------------------------------------------------------------------------- sinks


def _no_secondary_sinks(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    return {
        name: table.head(0) if name.startswith("secondary") else table
        for name, table in tables.items()
    }


@pytest.mark.parametrize("shape", PER_PAIR_SHAPES, ids=SHAPE_IDS)
def test_sinks_figures(shape: Shape, tmp_path: Path) -> None:
    from sinkscope.sinks.plots import pair_figures

    tables, settings = sinks_tables(shape)
    draw_all(pair_figures(tables, settings.eps, title_of(shape)), tmp_path)


def _sinks_summary(pairs: list[tuple[Shape, str]], folder: Path, secondary: bool = True) -> None:
    from sinkscope.sinks.plots import summary_figures
    from sinkscope.sinks.summary import summarize

    tables = []
    for i, (shape, dataset) in enumerate(pairs):
        pair, settings = sinks_tables(shape, dataset, seed=i)
        # the second dataset of each model without secondary sinks (all of them: no secondary)
        tables.append(pair if secondary and i % 2 == 0 else _no_secondary_sinks(pair))
    draw_all(summary_figures(summarize(tables), tables, settings.eps), folder)


@pytest.mark.parametrize("shape", ONE_MODEL, ids=[s.id for s in ONE_MODEL])
def test_sinks_summary_of_one_model(shape: Shape, tmp_path: Path) -> None:
    _sinks_summary([(shape, DATASET), (shape, OTHER_DATASET)], tmp_path)


def test_sinks_summary_of_the_paper_models(tmp_path: Path) -> None:
    _sinks_summary(PAPER_PAIRS, tmp_path)


def test_sinks_figures_without_secondary_sinks(tmp_path: Path) -> None:
    """No secondary sink anywhere: the token panels have nothing to show."""
    from sinkscope.sinks.plots import pair_figures

    shape = BY_MODEL["gpt2"]
    tables, settings = sinks_tables(shape, secondary=False)
    names = ("secondary_sinks",)
    draw_all(only(pair_figures(_no_secondary_sinks(tables), settings.eps, "t"), names), tmp_path)
    _sinks_summary([(shape, DATASET)], tmp_path / "summary", secondary=False)


# ----------------------------------------------------------------------------- streaming

#: Window sizes of one, two and four panels (config.yaml: 2; config/offline-full.yaml: 4).
WINDOWS: tuple[tuple[int, ...], ...] = ((32,), (32, 64), (64, 128, 256, 512))


@pytest.fixture()
def few_permutations(monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary's permutation p-values with 10 permutations, not 10,000 (no figure prints
    them; the figures read rho and n)."""
    from functools import partial

    from sinkscope.streaming import summary

    monkeypatch.setattr(summary, "correlation", partial(summary.correlation, n_perm=10))


def _streaming_figures(
    tables: dict[str, pl.DataFrame], names: tuple[str, ...], folder: Path
) -> None:
    from sinkscope.streaming.plots import figures

    draw_all(figures(names, tables, f"{tables['settings']['model'][0]} / {DATASET}"), folder)


def _streaming_summary(pairs: list[tuple[Shape, str]], folder: Path) -> None:
    from sinkscope.streaming.names import SUMMARY_FIGURES as STREAMING_SUMMARY_FIGURES
    from sinkscope.streaming.plots import figures
    from sinkscope.streaming.summary import summarize

    tables = [streaming_tables(s, WINDOWS[1], 2, d, seed=i) for i, (s, d) in enumerate(pairs)]
    heads = [head_table(s, d, seed=i) for i, (s, d) in enumerate(pairs)]
    title = "StreamingLLM caches, all pairs"
    draw_all(figures(STREAMING_SUMMARY_FIGURES, summarize(tables, heads), title), folder)


@pytest.mark.usefixtures("few_permutations")
@pytest.mark.parametrize("shape", PER_PAIR_SHAPES, ids=SHAPE_IDS)
def test_streaming_layer_figures(shape: Shape, tmp_path: Path) -> None:
    """The figures with one row or point per layer: the first positions' mass, and the summary's
    single-layer evictions (one pair)."""
    from sinkscope.streaming.names import FIRST_POSITION_FIGURES as STREAMING_FIRST_POSITION_FIGURES

    tables = streaming_tables(shape, WINDOWS[1], baselines=2)
    _streaming_figures(tables, STREAMING_FIRST_POSITION_FIGURES, tmp_path)
    _streaming_summary([(shape, DATASET)], tmp_path)


@pytest.mark.usefixtures("few_permutations")
def test_streaming_summary_of_the_paper_models(tmp_path: Path) -> None:
    _streaming_summary(PAPER_PAIRS, tmp_path)


@pytest.mark.parametrize("windows", WINDOWS, ids=[f"{len(w)}-windows" for w in WINDOWS])
def test_streaming_policy_figures_at_every_number_of_windows(
    windows: tuple[int, ...], tmp_path: Path
) -> None:
    """The cache policies' figures (one panel per window size) and the re-computation figure
    (a column per baseline); they have no layer or head axis."""
    from sinkscope.streaming.names import POLICY_FIGURES as STREAMING_POLICY_FIGURES
    from sinkscope.streaming.names import RECOMPUTE_FIGURES as STREAMING_RECOMPUTE_FIGURES

    tables = streaming_tables(BY_MODEL["gpt2"], windows, baselines=2)
    _streaming_figures(tables, STREAMING_POLICY_FIGURES + STREAMING_RECOMPUTE_FIGURES, tmp_path)


@pytest.mark.parametrize("baselines", (0, 1), ids=["0-baselines", "1-baseline"])
def test_recompute_figure_at_every_number_of_baselines(baselines: int, tmp_path: Path) -> None:
    from sinkscope.streaming.names import RECOMPUTE_FIGURES as STREAMING_RECOMPUTE_FIGURES

    tables = streaming_tables(BY_MODEL["gpt2"], WINDOWS[1], baselines)
    _streaming_figures(tables, STREAMING_RECOMPUTE_FIGURES, tmp_path)
