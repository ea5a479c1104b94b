"""Proposition 4.1 on long sequences, where the half-space test can fail.

:func:`long_context_inputs` runs the model on a few sequences of ``T' > d_model`` tokens (by
default 2.5 x d_model tokens, ``seq_len: auto``, cut like the StreamingLLM streams; config
``geometry.long_context``) and keeps the attention input ``Z`` of every layer;
:func:`solve_long_context` tests on them the two sets that need no attention probabilities,
``{z_0 - z_i}`` and ``{z_i : i in [T']}`` (every sink pattern, ``J = [T']``; a subset of a set in
an open half-space is in it, so this implies the condition for every sink-attending ``J``; the
attending set itself needs the sink heads' attention and is not tested there), each beside a
Gaussian null of the same size, dimension and covariance. With more points than dimensions no set
is trivially separable, so the proposition is tested exactly as stated, any ``W`` in
``R^{d x d}``, and can fail (e.g. when ``z_0`` lies in the convex hull of the other tokens).
:func:`~sinkscope.claims.checks.geometry.sink_representable_statements` decides the claim there
when the table exists (:func:`~sinkscope.geometry.halfspace.long_context_counts`), reporting the
trivial and non-trivial counts at ``T`` beside it.

The workflow runs the two parts as two rules, the forward where the model runs (rule
``extract_long_context``, the GPU partition on a cluster) and the solves on the CPU (rule
``analyze_geometry_long_context``), through the file of
:mod:`sinkscope.geometry.long_context_file`; ``solve_long_context(long_context_inputs(...))``
runs both in one process and gives the same table. Measured on a 2-core Intel Xeon, one sequence per pair of the
default run: forward 5-8 s, solves 11-14 s (real sets and their nulls, each null stopped once
its bound is below half its real set's margin; 2-4 minutes when the nulls were solved to their
end).

The model runs as the extraction runs it: in its configured dtype (``models.<name>.dtype``, e.g.
bfloat16 for the 7-8B models of ``config/paper.yaml``: no float32 copy) on the device of
``extraction.device`` (the GPU where one is visible); ``Z`` comes back to the CPU as float32, the
half-space solver's input.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from sinkscope.geometry.halfspace import PAIR_KEY, RESULT_COLUMNS, halfspace_layer_rows
from sinkscope.geometry.halfspace_solver import (
    HALFSPACE_TOL,
    NULL_STOP_FRACTION,
    gaussian_null_margin,
    torch_threads,
)
from sinkscope.geometry.long_context_file import LongContextInputs
from sinkscope.geometry.names import ALL_TOKENS, BOS_MINUS_TOKEN, LONG_CONTEXT_POINT_SETS

__all__ = [
    "LONG_CONTEXT_COLUMNS",
    "LONG_CONTEXT_N_SEQUENCES_KEY",
    "LONG_CONTEXT_SEQ_LEN_KEY",
    "NULL_COLUMNS",
    "attention_inputs",
    "long_context_frame",
    "long_context_inputs",
    "long_context_layer_rows",
    "null_rows",
    "solve_long_context",
]

#: The config key of the long-context sequence length (named in errors).
LONG_CONTEXT_SEQ_LEN_KEY = "geometry.long_context.seq_len"
#: The config key of the number of long-context sequences per pair (named in errors).
LONG_CONTEXT_N_SEQUENCES_KEY = "geometry.long_context.n_sequences"


#: The columns of the Gaussian null beside each long-context row
#: (:func:`~sinkscope.geometry.halfspace_solver.gaussian_null_margin`: ``null_halfspace``,
#: ``null_margin``, ``null_margin_upper``, ``null_solved``; null where ``gaussian_null`` is off).
NULL_COLUMNS: tuple[str, ...] = (
    "null_halfspace",
    "null_margin",
    "null_margin_upper",
    "null_solved",
)

#: Columns of :func:`solve_long_context`: those of ``halfspace`` without the two that describe
#: the sink heads' attention (``n_sink_heads``, ``attend_threshold``: no attention is computed),
#: plus ``seq_len`` (BOS included; ``n_points = seq_len - 1``) and the :data:`NULL_COLUMNS`.
LONG_CONTEXT_COLUMNS: tuple[str, ...] = (
    *PAIR_KEY,
    "seq_len",
    "point_set",
    *RESULT_COLUMNS,
    *NULL_COLUMNS,
)


@torch.no_grad()
def attention_inputs(model: torch.nn.Module, ids: torch.Tensor) -> list[np.ndarray]:
    """``Z^(l)`` of every decoder layer ``l``: what its query/key/value projections multiply.

    One forward pass of the transformer body (:func:`sinkscope.prepare.models.base_model`: no LM head,
    no cache, no gradients) per sequence of ``ids`` ``(B, T1)`` with ``output_hidden_states``;
    ``hidden_states[l]`` is the residual stream entering layer ``l`` and ``Z^(l) =
    norm_l(hidden_states[l])`` is computed by that layer's own input-norm module
    (``Architecture.input_norm``: ``input_layernorm``, GPT-2's ``ln_1``), i.e. the paper's §3
    attention input with the learnable gain (``Z`` of :meth:`sinkscope.extraction.h5read.InputProjection.Z`).
    ``ids`` must be on the model's device; ``Z`` is computed in the model's dtype and returned as
    one ``(B, T1, D)`` float32 array per layer, on the CPU.

    One sequence at a time: eager attention holds the ``H x T1 x T1`` scores of every sequence
    in the pass, so two of Llama-3.1-8B's 10,241-token sequences took 85.6 GB of GPU memory in
    one pass (``BENCHMARKS.md``, GPU rehearsal), more than an 80 GB GPU holds.
    """
    layers: list[np.ndarray] = []
    for row in range(len(ids)):  # each sequence's Z into its row: Z is held once, not twice
        one = _attention_inputs_one(model, ids[row : row + 1])
        if not layers:
            layers = [np.empty((len(ids), *z.shape[1:]), dtype=z.dtype) for z in one]
        for out, z in zip(layers, one, strict=True):
            out[row] = z[0]
    return layers


def _attention_inputs_one(model: torch.nn.Module, ids: torch.Tensor) -> list[np.ndarray]:
    """:func:`attention_inputs` of one sequence ``ids`` ``(1, T1)``."""
    from sinkscope.prepare.models import architecture_of, base_model, decoder_layers

    model.eval()
    norm_name = architecture_of(model).input_norm
    out = base_model(model)(input_ids=ids, output_hidden_states=True, use_cache=False)
    layers = decoder_layers(model)
    if len(out.hidden_states) != len(layers) + 1:
        raise ValueError(
            f"{type(model).__name__}: {len(out.hidden_states)} hidden states for "
            f"{len(layers)} layers; expected one per layer plus the final one"
        )
    return [
        getattr(layer, norm_name)(out.hidden_states[index]).float().cpu().numpy()
        for index, layer in enumerate(layers)
    ]


#: The dtypes of :data:`NULL_COLUMNS`.
NULL_DTYPES = (pl.Boolean, pl.Float64, pl.Float64, pl.Boolean)


def null_rows(
    z_layer: np.ndarray,
    rng: np.random.Generator,
    tol: float = HALFSPACE_TOL,
    max_seconds: float | None = None,
    real_margins: Sequence[float | None] | None = None,
) -> list[dict[str, Any]]:
    """The :data:`NULL_COLUMNS` for the rows of
    :func:`~sinkscope.geometry.halfspace.halfspace_layer_rows` ``(z_layer, None)``, in their
    order: per sequence, Gaussian points of the size, dimension and covariance of the
    unit-normalised ``{z_0 - z_i}`` and ``{z_i}``
    (:func:`~sinkscope.geometry.halfspace_solver.gaussian_null_margin`, draws from ``rng``).
    ``real_margins``: those rows' certified margins, in the same order; each null solve then
    stops once its bound is below :data:`~sinkscope.geometry.halfspace_solver.NULL_STOP_FRACTION`
    of its real set's positive margin (and runs to ``max_seconds`` where the margin is 0)."""
    rows: list[dict[str, Any]] = []
    margins = iter(real_margins) if real_margins is not None else None
    for sequence in np.asarray(z_layer, dtype=np.float64):
        sets = {BOS_MINUS_TOKEN: sequence[:1] - sequence[1:], ALL_TOKENS: sequence[1:]}
        for name in LONG_CONTEXT_POINT_SETS:
            vectors = sets[name]
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            unit = vectors / np.where(norms == 0, 1.0, norms)
            real = next(margins) if margins is not None else None
            stop = NULL_STOP_FRACTION * real if real else None
            drawn = gaussian_null_margin(unit, rng, tol, max_seconds, stop)
            rows.append(
                dict(
                    zip(
                        NULL_COLUMNS,
                        (drawn.halfspace, drawn.margin, drawn.margin_upper, drawn.solved),
                        strict=True,
                    )
                )
            )
    return rows


def long_context_inputs(
    prepared_model_dir: str | os.PathLike[str],
    token_stream: str | os.PathLike[str],
    corpus_provenance: str | os.PathLike[str],
    n_sequences: int,
    seq_len: int | str,
    seed: int,
    model_name: str,
    dataset_name: str,
    threads: int = 1,
    *,
    points_per_dim: float = 2.5,
    dtype: str | None = None,
    attn_implementation: str = "eager",
    device: str = "auto",
) -> LongContextInputs:
    """The attention inputs of ``n_sequences`` sequences of ``seq_len`` tokens (the model's part
    of the long-context test, rule ``extract_long_context``).

    The sequences are the StreamingLLM analysis' streams
    (:func:`sinkscope.streaming.streams.load_streams` with ``stream_length = seq_len``,
    ``n_streams = n_sequences`` and ``seed``: blocks of ``seq_len - 1`` corpus tokens, BOS
    prepended; the same streams when the three match); the model is loaded as that analysis loads it
    (``dtype``: ``models.<name>.dtype``, None: the dtype it was prepared in;
    ``attn_implementation``; ``device``: ``extraction.device``, resolved by
    :func:`sinkscope.prepare.models.pick_device`) and run once (:func:`attention_inputs`,
    ``threads`` torch threads).

    ``seq_len``: a length, or ``"auto"``: ``points_per_dim x d_model`` tokens after BOS, at most
    the model's positions (:func:`sinkscope.config.long_context_seq_len`; at 2.5 points per
    dimension random points lie in an open half-space with Wendel's probability of 1.3e-14 or
    less for the models of the default config). With ``T' > d_model`` points no set can be
    trivially separable (its rank is at most ``d_model < n_points``), so the test can fail. A
    ``seq_len`` that does not exceed ``d_model + 1`` is not refused (GPT-2 medium and XL of the
    paper's config have ``d_model`` >= their 1024 positions, so no ``seq_len`` could): the job
    logs a warning, every row of the solve says ``trivially_separable`` and
    :func:`~sinkscope.claims.checks.geometry.sink_representable_statements` falls back to the
    extraction's sequences for that model. Refused before the forward, with an
    error that names the config key: a ``seq_len`` beyond the model's ``max_position_embeddings``
    (:data:`LONG_CONTEXT_SEQ_LEN_KEY`; checked from the model's config before the weights or the
    corpus are loaded, and for local models already by the config check) and more
    ``n_sequences`` than the corpus holds streams of ``seq_len`` (:data:`LONG_CONTEXT_N_SEQUENCES_KEY`).
    """
    import logging

    from sinkscope.config import long_context_seq_len
    from sinkscope.prepare.models import load_config, model_shape, pick_device
    from sinkscope.streaming.streams import load_streams

    log = logging.getLogger(__name__)
    began = time.perf_counter()
    shape = model_shape(load_config(Path(prepared_model_dir)))
    asked = seq_len
    seq_len = long_context_seq_len(seq_len, points_per_dim, shape.d_model, shape.max_positions)
    if asked != seq_len:
        log.info(
            "%s = %s: %d tokens for %s (%g x d_model = %d, BOS included; at most %s positions)",
            LONG_CONTEXT_SEQ_LEN_KEY,
            asked,
            seq_len,
            model_name,
            points_per_dim,
            shape.d_model,
            shape.max_positions,
        )
    if shape.max_positions and seq_len > shape.max_positions:
        raise ValueError(
            f"{LONG_CONTEXT_SEQ_LEN_KEY} = {seq_len} exceeds the {shape.max_positions} "
            f"positions of {model_name} (its max_position_embeddings); set it to at most "
            f"{shape.max_positions}"
        )
    if seq_len - 1 <= shape.d_model:
        log.warning(
            "%s = %d: %s has d_model = %d, so %d tokens of full rank are trivially "
            "separable and the test cannot fail; the rows say so (trivially_separable) and "
            "the claim falls back to the extraction's sequences for this model",
            LONG_CONTEXT_SEQ_LEN_KEY,
            seq_len,
            model_name,
            shape.d_model,
            seq_len - 1,
        )
    with torch_threads(int(threads)):
        streams = load_streams(
            prepared_model_dir,
            token_stream,
            corpus_provenance,
            {
                "stream_length": int(seq_len),
                "n_streams": int(n_sequences),
                "seed": int(seed),
                "dataset_name": dataset_name,
            },
            keys=(LONG_CONTEXT_N_SEQUENCES_KEY, LONG_CONTEXT_SEQ_LEN_KEY),
            dtype=dtype,
            attn_implementation=attn_implementation,
            device=pick_device(device),
        )
        loaded = time.perf_counter()
        z_layers = attention_inputs(streams.model, streams.ids)
    log.info(
        "%s/%s: %d sequences x %d tokens (offsets %s), d_model %d, %s on %s: load %.1f s, "
        "forward %.1f s",
        model_name,
        dataset_name,
        streams.ids.shape[0],
        seq_len,
        streams.offsets,
        shape.d_model,
        streams.model.dtype,
        streams.ids.device,
        loaded - began,
        time.perf_counter() - loaded,
    )
    return LongContextInputs(
        layers=z_layers,
        model=model_name,
        dataset=dataset_name,
        seq_len=int(seq_len),
        d_model=int(shape.d_model),
        offsets=tuple(int(o) for o in streams.offsets),
        dtype=str(streams.model.dtype).removeprefix("torch."),
        device=str(streams.ids.device),
    )


#: The long-context solves of a job get this share of its wall-time request, less
#: :data:`DEADLINE_RESERVE_S` for reading the file, writing the table and drawing the figure
#: (:func:`solve_deadline`).
DEADLINE_FRACTION = 0.9
DEADLINE_RESERVE_S = 120.0


def solve_deadline(runtime_minutes: float | None) -> float | None:
    """Seconds the half-space solves of a job with a ``runtime_minutes`` request may take in all
    (:data:`DEADLINE_FRACTION` of it less :data:`DEADLINE_RESERVE_S`, at least 0); None without
    a request. :func:`solve_long_context` shares them out, so the job ends inside its request
    whatever the sets are: a solve cut short is undecided (inconclusive), never killed."""
    if runtime_minutes is None:
        return None
    return max(0.0, DEADLINE_FRACTION * 60.0 * float(runtime_minutes) - DEADLINE_RESERVE_S)


def solve_budgets(
    remaining_s: float | None,
    layers_left: int,
    solves_per_layer: int,
    solve_seconds: float | None,
    null_solve_seconds: float | None,
    gaussian_null: bool,
) -> tuple[float | None, float | None]:
    """The time budgets ``(real, null)`` of each solve of the next layer: the configured ones
    (``solve_seconds``, ``null_solve_seconds``), each at most an equal share of the
    ``remaining_s`` seconds over the solves left (``layers_left x solves_per_layer`` real
    solves, as many nulls with ``gaussian_null``). Time a layer leaves unused goes to the
    layers after it. ``remaining_s`` None: no deadline."""
    if remaining_s is None:
        return solve_seconds, null_solve_seconds
    solves_left = max(1, layers_left * solves_per_layer * (2 if gaussian_null else 1))
    share = max(0.0, remaining_s) / solves_left

    def capped(budget: float | None) -> float:
        return share if budget is None else min(float(budget), share)

    return capped(solve_seconds), capped(null_solve_seconds) if gaussian_null else None


def solve_long_context(
    inputs: LongContextInputs,
    seed: int,
    tol: float = HALFSPACE_TOL,
    *,
    solve_seconds: float | None = None,
    gaussian_null: bool = True,
    null_solve_seconds: float | None = None,
    threads: int = 1,
    deadline_seconds: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> pl.DataFrame:
    """Proposition 4.1's half-space test on the long-context attention inputs (the CPU part of
    long-context test, rule ``analyze_geometry_long_context``), one layer at a time.

    Per layer and sequence the sets ``{z_0 - z_i : i in [T']}`` and ``{z_i : i in [T']}``
    (:data:`~sinkscope.geometry.names.LONG_CONTEXT_POINT_SETS`, ``T' = seq_len - 1``) are tested
    exactly as at ``T = 256`` (:func:`~sinkscope.geometry.halfspace_solver.halfspace_margin` on
    the Gram matrices). The sink-attending set ``J`` needs the sink heads' attention
    probabilities and is not tested here; ``{z_i : i in [T']}`` is the superset of every ``J``
    (Figure 1's "any sink pattern": if it lies in an open half-space, so does every ``J``).
    ``solve_seconds``: the time budget of each solve (a set it leaves undecided has a null
    ``halfspace`` and its bracket). ``gaussian_null``: each row also gets the test on Gaussian
    points of the same size, dimension and covariance
    (:func:`~sinkscope.geometry.halfspace_solver.gaussian_null_margin`, seeded by ``seed`` and
    the layer, within ``null_solve_seconds``: its bracket's upper end is what the comparison with
    the real margin needs). ``deadline_seconds``: the time all solves may take together
    (:func:`solve_deadline` of the job's request; each layer's budgets come from
    :func:`solve_budgets`, read on ``clock``); None: each solve has its configured budget only.
    Returns the rows of :data:`LONG_CONTEXT_COLUMNS`.
    """
    import logging

    began = clock()
    rows: list[dict[str, Any]] = []
    n_layers = len(inputs.layers)
    with torch_threads(int(threads)):
        for layer in range(n_layers):
            z_layer = inputs.layers[layer]
            remaining = None if deadline_seconds is None else deadline_seconds - (clock() - began)
            real_budget, null_budget = solve_budgets(
                remaining,
                n_layers - layer,
                len(z_layer) * len(LONG_CONTEXT_POINT_SETS),
                solve_seconds,
                null_solve_seconds,
                gaussian_null,
            )
            rows.extend(
                long_context_layer_rows(
                    z_layer, layer, seed, tol, real_budget, gaussian_null, null_budget
                )
            )
    logging.getLogger(__name__).info(
        "%s/%s: %d layers x %d tokens, d_model %d: half-space solves %.1f s",
        inputs.model,
        inputs.dataset,
        len(inputs.layers),
        inputs.seq_len,
        inputs.d_model,
        clock() - began,
    )
    return long_context_frame(rows, inputs.model, inputs.dataset, inputs.seq_len)


def long_context_layer_rows(
    z_layer: np.ndarray,
    layer: int,
    seed: int,
    tol: float = HALFSPACE_TOL,
    solve_seconds: float | None = None,
    gaussian_null: bool = True,
    null_solve_seconds: float | None = None,
) -> list[dict[str, Any]]:
    """The rows of one layer's ``Z`` ``(N, T1, D)``: the half-space test of ``{z_0 - z_i}`` and
    ``{z_i}`` per sequence (:func:`~sinkscope.geometry.halfspace.halfspace_layer_rows`, each solve
    within ``solve_seconds``) and, with ``gaussian_null``, the Gaussian null beside each
    (:func:`null_rows`, seeded by ``(seed, layer)``, within ``null_solve_seconds``, each stopped
    once its margin bound is below half its real set's margin)."""
    rows = halfspace_layer_rows(z_layer, None, tol, solve_seconds)
    if gaussian_null:
        nulls = null_rows(
            z_layer,
            np.random.default_rng([seed, layer]),
            tol,
            null_solve_seconds,
            [row["margin"] for row in rows],
        )
        rows = [{**row, **null} for row, null in zip(rows, nulls, strict=True)]
    return [{**row, "layer": layer} for row in rows]


def long_context_frame(
    rows: list[dict[str, Any]], model_name: str, dataset_name: str, seq_len: int
) -> pl.DataFrame:
    """The long-context table (:data:`LONG_CONTEXT_COLUMNS`, sorted by layer, sequence and point
    set) of :func:`long_context_layer_rows`' rows; the null columns are null where no null ran."""
    table = pl.DataFrame(rows, infer_schema_length=None)
    for name, dtype in zip(NULL_COLUMNS, NULL_DTYPES, strict=True):
        if name not in table.columns:
            table = table.with_columns(pl.lit(None, dtype=dtype).alias(name))
    return (
        table.with_columns(
            model=pl.lit(model_name),
            dataset=pl.lit(dataset_name),
            seq_len=pl.lit(int(seq_len), dtype=pl.Int64),
            halfspace=pl.col("halfspace").cast(pl.Boolean),
            margin=pl.col("margin").cast(pl.Float64),
            margin_upper=pl.col("margin_upper").cast(pl.Float64),
            solved=pl.col("solved").cast(pl.Boolean),
            **{n: pl.col(n).cast(t) for n, t in zip(NULL_COLUMNS, NULL_DTYPES, strict=True)},
        )
        .select(LONG_CONTEXT_COLUMNS)
        .sort("layer", "sequence", "point_set")
    )
