"""One analysis of one activation file, run by ``bench/run.py`` in its own process.

Usage: ``python bench/analysis_job.py STEP FILE.h5 OUT_DIR [PER_HEAD.parquet]`` with STEP one of
``classify_heads``, ``analyze_geometry``, ``analyze_oversmoothing``. Runs the rule's analysis
function with the default config's settings and writes its tables (not the figures) to OUT_DIR,
then prints one JSON line: wall seconds of the analysis (imports excluded), the resident memory
after the imports and the peak resident memory of the process (``VmHWM``), in bytes.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import polars as pl

from sinkscope.config import load_config
from sinkscope.geometry.analysis import analyze_file as analyze_geometry_file
from sinkscope.heads.classify import HeadClassThresholds, classify_file
from sinkscope.io import write_table
from sinkscope.oversmoothing.analysis import analyze_file as analyze_oversmoothing_file

STEPS = ("classify_heads", "analyze_geometry", "analyze_oversmoothing")


def _status_bytes(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def run(step: str, h5: Path, out_dir: Path, per_head_path: Path | None) -> dict[str, float]:
    config = load_config(Path(__file__).resolve().parents[1] / "config.yaml")
    thresholds = HeadClassThresholds(**config["head_classes"])
    rss_before = _status_bytes("VmRSS")
    started = time.perf_counter()
    if step == "classify_heads":
        per_sequence, per_head = classify_file(h5, thresholds)
        tables = {"per_sequence": per_sequence, "per_head": per_head}
    else:
        if per_head_path is None:
            raise SystemExit(f"{step} needs the per-head table of classify_heads")
        per_head = pl.read_parquet(per_head_path)
        if step == "analyze_geometry":
            tables = analyze_geometry_file(
                h5,
                per_head,
                thresholds,
                attend_threshold=config["geometry"]["attend_threshold"],
            )
        else:
            settings = config["oversmoothing"]
            tables = analyze_oversmoothing_file(
                h5,
                per_head,
                settings["context_lengths"],
                settings["uniformity_threshold"],
                include_bos=settings["include_bos"],
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        write_table(table, out_dir / f"{name}.parquet")
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "rss_after_imports": rss_before, "peak_rss": _status_bytes("VmHWM")}


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or argv[0] not in STEPS:
        raise SystemExit(__doc__)
    per_head = Path(argv[3]) if len(argv) == 4 else None
    print(json.dumps(run(argv[0], Path(argv[1]), Path(argv[2]), per_head)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
