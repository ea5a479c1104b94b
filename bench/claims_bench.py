"""The claims job's per-sequence intervals at the paper config's scale: peak memory and time.

    .venv/bin/python bench/claims_bench.py                    # config/paper.yaml
    .venv/bin/python bench/claims_bench.py --configfile config.yaml config/offline-full.yaml

The claims rule reads every summary table whole, and the intervals over sequences resample the
tables that grow with the models' heads, the sequences and ``T'``: the oversmoothing stage's
``approximation_by_sequence``, ``heads_by_sequence`` and ``layers_by_sequence`` (BOS pairs), the
heads' masses per sequence (every pair) and the value ranks per sequence. This writes those
tables for every model and dataset of the config, with the models' shapes (their kept configs,
:mod:`sinkscope.sizing.shapes`) and random values, to parquet. In a fresh process it then reads
them as the claims rule does and builds every interval over sequences that the claims take from
them (the oversmoothing claims', the value rank's and the head shares'), for every model and
dataset and the pooled rows, with the config's ``claims.intervals``. It prints the tables' rows and bytes, the process's peak resident memory
(``VmHWM``) and wall time, and what :func:`sinkscope.sizing.requests.job_request` asks for the
claims job, and writes them to ``bench/claims_bench.json`` (``--json``), which
``tests/test_sizing.py`` holds the claims job's request to. The other claims read tables that
hold one row per head or layer; they are not built here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TABLES = (
    "approximation_by_sequence",
    "heads_by_sequence",
    "layers_by_sequence",
    "head_masses_by_sequence",
    "value_rank_by_sequence",
)


def synthetic_tables(config: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The three per-sequence tables of the summary for every model and BOS dataset of the
    (validated) ``config``, with random values in the ranges the checks read."""
    import numpy as np
    import polars as pl

    from sinkscope.oversmoothing.analysis import resolve_context_lengths
    from sinkscope.oversmoothing.names import (
        BY_SEQUENCE_COLUMNS,
        HEADS_BY_SEQUENCE_COLUMNS,
        LAYERS_BY_SEQUENCE_COLUMNS,
        SEQUENCE_TERMS,
    )
    from sinkscope.sizing.shapes import model_facts

    rng = np.random.default_rng(seed)
    n = int(config["extraction"]["n_sequences"])
    lengths = resolve_context_lengths(
        config["oversmoothing"]["context_lengths"], int(config["extraction"]["context_length"])
    )
    from sinkscope.config import corpus_ids, dataset_ids
    from sinkscope.geometry.names import VALUE_RANK_BY_SEQUENCE_COLUMNS
    from sinkscope.heads.names import MASS_COLUMNS, SEQUENCE_MASS_COLUMNS

    datasets = corpus_ids(config)
    parts: dict[str, list[pl.DataFrame]] = {name: [] for name in TABLES}

    def grid(**axes: Any) -> pl.DataFrame:
        frame = None
        for name, values in axes.items():
            column = pl.DataFrame({name: np.asarray(values, dtype=np.int64)})
            frame = column if frame is None else frame.join(column, how="cross")
        assert frame is not None
        return frame

    for model in config["models"]:
        facts = model_facts(config, model)
        layers, heads = range(facts.n_layers), range(facts.n_heads)
        for dataset in datasets:
            ids = {"model": pl.lit(model), "dataset": pl.lit(dataset)}
            cells = grid(layer=layers, head=heads, context_length=lengths, sequence=range(n))
            m = cells.height
            values = {c: rng.uniform(0.1, 0.9, m) for c in ("rho_xwz", "sum_xz", "sum_zz")}
            values |= {c: rng.uniform(0.5, 1.5, m) for c in SEQUENCE_TERMS}
            parts["approximation_by_sequence"].append(
                cells.with_columns(**ids, **values).select(BY_SEQUENCE_COLUMNS)
            )
            cells = grid(layer=layers, head=heads, sequence=range(n))
            m = cells.height
            columns = ("rho_x", "rho_xwz_s", "rho_xwza_s", "rho_xwzau_s", "uniformity")
            parts["heads_by_sequence"].append(
                cells.with_columns(
                    **ids,
                    context_length=pl.lit(lengths[-1], dtype=pl.Int64),
                    **{c: rng.uniform(0.1, 0.9, m) for c in columns},
                ).select(HEADS_BY_SEQUENCE_COLUMNS)
            )
            cells = grid(layer=layers, context_length=lengths, sequence=range(n))
            m = cells.height
            parts["layers_by_sequence"].append(
                cells.with_columns(
                    **ids, rho_before=rng.uniform(0.1, 0.9, m), rho_after=rng.uniform(0.1, 0.9, m)
                ).select(LAYERS_BY_SEQUENCE_COLUMNS)
            )
            cells = grid(layer=layers, kv_head=range(facts.n_kv_heads), sequence=range(n))
            parts["value_rank_by_sequence"].append(
                cells.with_columns(**ids, rel_rank=rng.uniform(0.9, 1.0, cells.height)).select(
                    VALUE_RANK_BY_SEQUENCE_COLUMNS
                )
            )
        for dataset in dataset_ids(config):  # the no-BOS pairs too
            ids = {"model": pl.lit(model), "dataset": pl.lit(dataset)}
            cells = grid(layer=layers, head=heads, sequence=range(n))
            masses = [c for c in SEQUENCE_MASS_COLUMNS if c in MASS_COLUMNS]
            parts["head_masses_by_sequence"].append(
                cells.with_columns(
                    **ids, **{c: rng.uniform(0.0, 0.5, cells.height) for c in masses}
                ).select(SEQUENCE_MASS_COLUMNS)
            )
    return {name: pl.concat(frames) for name, frames in parts.items()}


def run_intervals(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Child process: read the tables as the claims rule does and build every interval over
    sequences of the oversmoothing claims (the pooled rows too); wall time and peak memory."""
    import polars as pl

    from sinkscope.claims.resampling import sequence_interval
    from sinkscope.geometry.alignment import middle_layers
    from sinkscope.geometry.summary import lowest_median_draws
    from sinkscope.heads.summary import share_intervals, sink_ratio_intervals
    from sinkscope.labels import POOLED
    from sinkscope.oversmoothing.resampling import (
        error_share_draws,
        head_mean_draws,
        lowest_similarity_draws,
        max_error_draws,
        relative_offset_draws,
    )
    from sinkscope.oversmoothing.summary import DECREASE_W_S, INCREASE_ATTN_S, INCREASE_UNIF_S
    from sinkscope.sizing.usage import peak_rss_mb

    started = time.perf_counter()
    tables = {name: pl.read_parquet(folder / f"{name}.parquet") for name in TABLES}
    read_s = time.perf_counter() - started
    intervals = config["claims"]["intervals"]
    dense = float(config["oversmoothing"]["uniformity_threshold"])
    ranks = tables["value_rank_by_sequence"]
    depth = dict(ranks.group_by("model").agg(pl.col("layer").max() + 1).iter_rows())

    def lowest_rank(strata: list[pl.DataFrame], b: int, rng: Any) -> tuple[float, Any]:
        middle = middle_layers(int(depth[strata[0]["model"][0]]))
        return lowest_median_draws(strata, middle, b, rng)

    draws = {
        "approximation_by_sequence": [
            max_error_draws,
            relative_offset_draws,
            error_share_draws(float(config["claims"]["oversmoothing"]["approximation_error"])),
        ],
        "layers_by_sequence": [lowest_similarity_draws],
        "heads_by_sequence": [
            head_mean_draws(DECREASE_W_S),
            head_mean_draws(INCREASE_ATTN_S),
            head_mean_draws(INCREASE_UNIF_S - INCREASE_ATTN_S),
            head_mean_draws(INCREASE_ATTN_S, dense),
        ],
        "value_rank_by_sequence": [lowest_rank],
    }
    shares = share_intervals(tables["head_masses_by_sequence"], intervals=intervals)
    ratios = sink_ratio_intervals(tables["head_masses_by_sequence"], intervals=intervals)
    built = shares.height + ratios.height
    for name, functions in draws.items():
        table = tables[name]
        rows = table.select("model", "dataset").unique().sort("model", "dataset").rows()
        rows += [(model, POOLED) for model in sorted({m for m, _ in rows})]
        for model, dataset in rows:
            for index, function in enumerate(functions):
                found = sequence_interval(table, model, dataset, function, intervals, (str(index),))
                built += found is not None
    return {
        "read_s": read_s,
        "wall_s": time.perf_counter() - started,
        "peak_rss_mb": peak_rss_mb(),
        "intervals": built,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configfile", nargs="+", default=[str(REPO / "config" / "paper.yaml")])
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "claims_bench.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()

    from sinkscope.config import load_layered_config

    config = load_layered_config(args.configfile)
    if args.child:
        print("RESULT " + json.dumps(run_intervals(Path(args.child), config)), flush=True)
        return

    from sinkscope.sizing.requests import job_request, per_sequence_table_bytes
    from sinkscope.sizing.shapes import model_facts
    from sinkscope.sizing.usage import cpu_model

    with tempfile.TemporaryDirectory(prefix="claims-bench-") as tmp:
        folder = Path(tmp)
        tables = synthetic_tables(config)
        sizes = {}
        for name, frame in tables.items():
            frame.write_parquet(folder / f"{name}.parquet")
            sizes[name] = (frame.height, frame.estimated_size() / 1e6)
        del tables
        result = subprocess.run(
            [sys.executable, __file__, "--child", str(folder), "--configfile", *args.configfile],
            capture_output=True,
            text=True,
            check=False,
        )
    found = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not found:
        raise SystemExit(f"the claims' intervals failed:\n{result.stderr[-5000:]}")
    measured = json.loads(found[-1].removeprefix("RESULT "))
    request = job_request("claims", config)
    args.json.write_text(
        json.dumps(
            {
                "configfiles": [str(Path(f).resolve().relative_to(REPO)) for f in args.configfile],
                "cpu": cpu_model(),
                "tables": {name: {"rows": r, "mb": mb} for name, (r, mb) in sizes.items()},
                **measured,
            },
            indent=2,
        )
        + "\n"
    )
    print("| table | rows | MB in memory |")
    print("|---|---:|---:|")
    for name, (rows, mb) in sizes.items():
        print(f"| {name} | {rows:,} | {mb:,.0f} |")
    facts = {name: model_facts(config, name) for name in config["models"]}
    counted = per_sequence_table_bytes(config, facts) / 2**20
    print(
        f"\n{measured['intervals']} intervals in {measured['wall_s']:.1f} s (reading "
        f"{measured['read_s']:.1f} s); peak {measured['peak_rss_mb']:,.0f} MB; the sizing counts "
        f"{counted:,.0f} MB of these tables; the claims job asks for {request.mem_mb:,} MB and "
        f"{request.runtime_min} min"
    )


if __name__ == "__main__":
    main()
