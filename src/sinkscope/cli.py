"""The ``sinkscope`` command: look inside activation files without writing code.

sinkscope inspect FILE.h5                       provenance, every dataset with its storage
                                                (an activation or a long-context inputs file)
sinkscope inspect FILE.h5 --attention L S H     one head's attention map (layer, sequence, head)
sinkscope inspect --layout                      the layout every file follows
sinkscope compare-claims A/claims.parquet B/claims.parquet [--labels short full]
                                                the verdicts of two runs side by side
sinkscope compare-conditions A/results B/results
                                                how often a head's Theorem 5.1 condition label
                                                changes between two runs (e.g. 8 vs 50 sequences)
sinkscope check-config config.yaml [config/offline-full.yaml ...]
                                                read and validate configs as snakemake would
sinkscope pin-revisions config/paper.yaml [--check]
                                                hub revisions -> commit shas, in place
sinkscope plan [--configfile config/paper.yaml ...]
                                                per rule: jobs, memory, time, GPU- and CPU-hours
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from sinkscope.extraction import h5codec, h5layout
from sinkscope.heads.classify import attention_masses


def _storage(dataset: h5py.Dataset) -> str:
    compression = h5codec.describe_pipeline(dataset)
    stored = dataset.id.get_storage_size()
    raw = dataset.size * dataset.dtype.itemsize
    ratio = f"{stored / raw:.2f}" if raw else "-"
    return f"chunks={dataset.chunks} {compression} stored={stored / 2**20:.1f} MiB ({ratio} of raw)"


def missing_datasets(handle: h5py.File) -> list[str]:
    """The datasets of the layout (:data:`sinkscope.extraction.h5layout.DATASETS`) that a file lacks."""
    return [spec.name for spec in h5layout.DATASETS if spec.name not in handle]


def describe_file(handle: h5py.File) -> str:
    """Provenance attributes and every dataset with shape, dtype, chunking and size on disk."""
    lines = [f"{handle.filename}", "", "Attributes:"]
    for key in sorted(handle.attrs):
        value = handle.attrs[key]
        if isinstance(value, str) and value.startswith(("{", "[")):
            value = json.dumps(json.loads(value), sort_keys=True)
        lines.append(f"  {key}: {value}")
    lines += ["", "Datasets:"]
    missing = missing_datasets(handle)
    present_conditional = [s for s in h5layout.CONDITIONAL_DATASETS if s.name in handle]
    for spec in (*h5layout.DATASETS, *present_conditional):
        if spec.name in missing:
            lines.append(f"  {spec.name}: MISSING")
            continue
        dataset = handle[spec.name]
        lines.append(
            f"  {spec.name}  {dataset.shape} {dataset.dtype}  "
            f"axes=({h5layout.read_attr(dataset, h5layout.ATTR_AXES)})"
        )
        lines.append(f"      {_storage(dataset)}")
        lines.append(f"      {h5layout.read_attr(dataset, h5layout.ATTR_DESCRIPTION)}")
    lines += ["", "Recomputed on reading (not stored):"]
    sizes = h5layout.file_sizes(handle)
    for derived in h5layout.DERIVED:
        shape = tuple(sizes[axis] for axis in derived.axes)
        lines.append(
            f"  {derived.name}  {shape} float32  axes=({','.join(derived.axes)})  "
            f"h5read.{derived.reader}()"
        )
    norm = ", ".join(
        f"{key}={h5layout.read_attr(handle, key)}"
        for key in (
            h5layout.ATTR_INPUT_NORM,
            h5layout.ATTR_INPUT_NORM_EPS,
            h5layout.ATTR_INPUT_NORM_CAST,
            h5layout.ATTR_DTYPE,
        )
        if key in handle.attrs
    )
    lines.append(f"      from residual/X and the weights; input norm: {norm}")
    return "\n".join(lines)


def describe_attention(handle: h5py.File, layer: int, sequence: int, head: int) -> str:
    """One head's attention map with the pattern masses of paper §3."""
    if h5layout.ATTENTION_PROBS not in handle:
        raise h5layout.ActivationFileError(
            f"{handle.filename}: has no {h5layout.ATTENTION_PROBS} dataset, so --attention has nothing "
            f"to show (`sinkscope inspect {handle.filename}` lists what the file holds)"
        )
    probs = handle[h5layout.ATTENTION_PROBS]
    n_layers, n_seq, n_heads = probs.shape[:3]
    for name, value, limit in (
        ("layer", layer, n_layers),
        ("sequence", sequence, n_seq),
        ("head", head, n_heads),
    ):
        if not 0 <= value < limit:
            raise SystemExit(f"{name} {value} is out of range [0, {limit})")
    attention = probs[layer, sequence, head].astype(np.float64)
    masses = attention_masses(attention[None, None])
    summary = " ".join(f"{name}={float(value[0, 0]):.4f}" for name, value in masses.items())
    with np.printoptions(precision=3, suppress=True, linewidth=160, threshold=400, edgeitems=6):
        matrix = str(attention)
    size = attention.shape[0]
    return f"layer {layer}, sequence {sequence}, head {head}: {size} x {size}\n{summary}\n{matrix}"


def _compare_claims(tables: Sequence[str], labels: Sequence[str] | None) -> int:
    import polars as pl

    from sinkscope.claims.render import COMPARED_COLUMNS, compare_runs, compare_runs_markdown

    labels = list(labels or tables)
    if len(labels) != len(tables):
        print(
            f"sinkscope compare-claims: {len(labels)} labels for {len(tables)} tables",
            file=sys.stderr,
        )
        return 2
    frames = {}
    for label, path in zip(labels, tables, strict=True):
        try:
            frames[label] = pl.read_parquet(path)
        except (FileNotFoundError, OSError, pl.exceptions.PolarsError) as error:
            print(f"sinkscope compare-claims: {path}: {error}", file=sys.stderr)
            return 2
        lacking = [c for c in COMPARED_COLUMNS if c not in frames[label].columns]
        if lacking:
            print(
                f"sinkscope compare-claims: {path} is not a claims table (no column "
                f"{', '.join(lacking[:3])}{', ...' if len(lacking) > 3 else ''}); pass each run's "
                "results/claims.parquet",
                file=sys.stderr,
            )
            return 2
    print(compare_runs_markdown(compare_runs(frames)), end="")
    return 0


def _compare_conditions(roots: Sequence[str]) -> int:
    import glob

    import polars as pl
    import polars.selectors as cs

    from sinkscope.claims.render import markdown_table
    from sinkscope.oversmoothing.summary import condition_label_agreement
    from sinkscope.paths import Paths

    tables = []
    for root in roots:
        pattern = Paths(root.rstrip("/")).registered_table("analyze_oversmoothing", "per_head")
        files = sorted(glob.glob(pattern.format(model="*", dataset="*")))
        if not files:
            print(
                f"sinkscope compare-conditions: {root} has no oversmoothing tables ({pattern}); "
                "pass each run's results directory",
                file=sys.stderr,
            )
            return 2
        tables.append(pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed"))
    try:
        agreement = condition_label_agreement(*tables).with_columns(cs.float().round(3))
    except ValueError as error:  # a per-head table of another layout
        print(f"sinkscope compare-conditions: {' vs '.join(roots)}: {error}", file=sys.stderr)
        return 2
    print("\n".join(markdown_table(agreement, agreement.columns)))
    return 0


def _check_config(paths: Sequence[str]) -> int:
    from sinkscope.config import (
        ConfigError,
        bos_pairs,
        config_warnings,
        load_layered_config,
        pairs,
    )

    try:
        config = load_layered_config(paths)
    except (OSError, ConfigError) as error:
        print(f"sinkscope check-config: {error}", file=sys.stderr)
        return 2
    for warning in config_warnings(config):
        print(f"sinkscope check-config: warning: {warning}", file=sys.stderr)
    print(
        f"{' + '.join(paths)}: valid; {len(config['models'])} models x "
        f"{len(config['datasets'])} datasets ({len(pairs(config))} pairs, "
        f"{len(pairs(config)) - len(bos_pairs(config))} of them without BOS), "
        f"N = {config['extraction']['n_sequences']}"
    )
    return 0


def _pin_revisions(config: str, check: bool) -> int:
    from sinkscope.config import ConfigError
    from sinkscope.revisions import PinError, pin_revisions, unpinned

    try:
        if check:
            open_revisions = unpinned(config)
            for entry in open_revisions:
                print(f"{config}: {entry.key} = {entry.revision!r} is not a commit sha")
            return 1 if open_revisions else 0
        pinned = pin_revisions(config)
    except (OSError, PinError, ConfigError) as error:
        print(f"sinkscope pin-revisions: {error}", file=sys.stderr)
        return 2
    for entry, sha in pinned:
        print(f"{config}: {entry.key}: {entry.repo_id}@{entry.revision} -> {sha}")
    if not pinned:
        print(f"{config}: every hub revision is already a commit sha")
    return 0


def _plan(configfiles: Sequence[str], snakefile: str) -> int:
    from sinkscope.config import check_config_files, load_layered_config, validate_config
    from sinkscope.sizing.plan import dag_jobs, plan_rows, render_plan

    missing = [path for path in (*configfiles, snakefile) if not os.path.isfile(path)]
    if missing:
        print(f"sinkscope plan: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        check_config_files(configfiles)
        # every problem the workflow's parse would raise, as one message before the dry run
        validate_config(load_layered_config(configfiles))
    except ValueError as error:
        print(f"sinkscope plan: {error}", file=sys.stderr)
        return 2
    config, jobs = dag_jobs(configfiles, snakefile)
    results = str(Path(snakefile).resolve().parent / "results")
    rows = plan_rows(config, jobs, results)
    print(render_plan(config, rows, configfiles))
    refused = [reason for row in rows for reason in row.refused]
    for reason in dict.fromkeys(refused):  # one line per model and rule
        print(f"sinkscope plan: refused: {reason}", file=sys.stderr)
    return 1 if refused else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; a reader that closes the pipe early (``| head``) ends it quietly."""
    try:
        status = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's advice (signal docs, "Note on SIGPIPE"): point stdout at devnull so that the
        # interpreter's final flush does not raise again, and exit as a SIGPIPE-killed tool does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return status


def _verify(path: str) -> int:
    """``sinkscope inspect --verify FILE``: every chunk read and checked
    (:func:`sinkscope.extraction.h5codec.damaged_chunks`); 0 when none is damaged, 1 naming each
    damaged one with the rebuild advice, 2 when the file cannot be opened."""
    import h5py

    from sinkscope.extraction.h5codec import damaged_chunks

    try:
        with h5py.File(path, "r") as handle:
            found = damaged_chunks(handle)
            count = [0]
            handle.visititems(
                lambda _n, item: count.__setitem__(0, count[0] + isinstance(item, h5py.Dataset))
            )
    except OSError as error:
        print(f"sinkscope inspect: {path}: not a readable HDF5 file ({error})", file=sys.stderr)
        return 2
    if not found:
        print(f"{path}: every chunk of its {count[0]} datasets read back and matched its checksum")
        return 0
    for problem in found:
        print(f"{path}: {problem}", file=sys.stderr)
    print(
        f"sinkscope inspect: {path} is damaged ({len(found)} problem(s)); "
        + h5layout.REBUILD_ADVICE.format(path=shlex.quote(path)),
        file=sys.stderr,
    )
    return 1


def _preflight(configfiles: Sequence[str], account: str | None, srun: bool) -> int:
    """``sinkscope preflight``: :func:`sinkscope.preflight.preflight`, one line per check."""
    from sinkscope.config import check_config_files, load_layered_config, validate_config
    from sinkscope.preflight import preflight, render_findings

    missing = [path for path in configfiles if not os.path.isfile(path)]
    if missing:
        print(f"sinkscope preflight: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        check_config_files(configfiles)
        config = validate_config(load_layered_config(configfiles))
    except ValueError as error:
        print(f"sinkscope preflight: {error}", file=sys.stderr)
        return 2
    findings = preflight(config, Path("results"), account, srun)
    print(render_findings(findings))
    return 0 if all(f.ok for f in findings) else 1


def _usage(logs: str) -> int:
    """``sinkscope usage``: :func:`sinkscope.sizing.usage.time_by_rule` of a finished run."""
    from sinkscope.sizing.usage import cpu_model, time_by_rule, time_by_rule_markdown

    rows = time_by_rule(logs)
    if not rows:
        print(
            f"sinkscope usage: no job in {logs} wrote a usage line (has the run finished?)",
            file=sys.stderr,
        )
        return 1
    print(time_by_rule_markdown(rows, cpu_model()))
    return 0


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="sinkscope", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser(
        "inspect", help="describe an activation (or long-context inputs) HDF5 file"
    )
    inspect.add_argument(
        "file",
        nargs="?",
        help="results/activations/{model}/{dataset}.h5 or results/long_context/{model}/{dataset}.h5",
    )
    inspect.add_argument("--layout", action="store_true", help="print the file layout and exit")
    inspect.add_argument(
        "--verify",
        action="store_true",
        help="read every chunk and check its checksum; exit 1 naming any damaged chunk",
    )
    inspect.add_argument(
        "--attention",
        nargs=3,
        type=int,
        metavar=("LAYER", "SEQUENCE", "HEAD"),
        help="print one head's attention map",
    )
    compare = commands.add_parser(
        "compare-claims", help="the claims verdicts of several runs side by side (Markdown)"
    )
    compare.add_argument("tables", nargs="+", help="results/claims.parquet of each run")
    compare.add_argument("--labels", nargs="+", help="a column name per table (default: paths)")
    conditions = commands.add_parser(
        "compare-conditions",
        help="how often a head's Theorem 5.1 condition label changes between two runs (Markdown)",
    )
    conditions.add_argument("roots", nargs=2, help="the results directory of each run")
    check = commands.add_parser(
        "check-config",
        help="read config files strictly, layered as snakemake --configfile does, and validate",
    )
    check.add_argument("configs", nargs="+", help="config files, e.g. config.yaml config/x.yaml")
    pin = commands.add_parser(
        "pin-revisions",
        help="write the commit sha of every hub revision into a config file (needs hub access)",
    )
    pin.add_argument("config", help="a config file with hub sources, e.g. config/paper.yaml")
    pin.add_argument(
        "--check", action="store_true", help="list unpinned revisions, exit 1 if any (no hub)"
    )
    plan = commands.add_parser(
        "plan",
        help="what a run asks of the cluster, per rule and in total (submits nothing)",
    )
    plan.add_argument(
        "--configfile",
        nargs="+",
        default=["config.yaml"],
        help="config files layered as snakemake --configfile does (default: config.yaml)",
    )
    plan.add_argument("--snakefile", default="Snakefile", help="the workflow (default: Snakefile)")
    preflight = commands.add_parser(
        "preflight",
        help="check on the login node what a cluster run needs: SLURM, torch, the hub, the disk",
    )
    preflight.add_argument(
        "--configfile",
        nargs="+",
        default=["config.yaml"],
        help="config files layered as snakemake --configfile does (default: config.yaml)",
    )
    preflight.add_argument("--account", help="a SLURM account to check your association with")
    preflight.add_argument(
        "--srun",
        action="store_true",
        help="also run nvidia-smi on the GPU partition (a one-minute job) to check the driver",
    )
    usage = commands.add_parser(
        "usage", help="where a finished run's time went, per rule (from the jobs' logs)"
    )
    usage.add_argument(
        "logs", nargs="?", default="results/logs", help="the run's logs (default: results/logs)"
    )
    commands.add_parser(
        "outputs",
        help="every table and figure the workflow writes, by rule (the registry of outputs)",
    )
    args = parser.parse_args(argv)
    if args.command == "outputs":
        from sinkscope.paths import registry_markdown

        print(registry_markdown())
        return 0
    if args.command == "plan":
        return _plan(args.configfile, args.snakefile)
    if args.command == "usage":
        return _usage(args.logs)
    if args.command == "preflight":
        return _preflight(args.configfile, args.account, args.srun)
    if args.command == "compare-claims":
        return _compare_claims(args.tables, args.labels)
    if args.command == "compare-conditions":
        return _compare_conditions(args.roots)
    if args.command == "check-config":
        return _check_config(args.configs)
    if args.command == "pin-revisions":
        return _pin_revisions(args.config, args.check)
    if args.layout:
        print(h5layout.describe_layout())
        return 0
    if not args.file:
        parser.error("inspect needs a FILE (or --layout)")
    if args.verify:
        return _verify(args.file)
    from sinkscope.geometry.long_context_file import (
        describe_long_context_file,
        is_long_context_file,
    )

    if is_long_context_file(args.file):  # results/long_context/{model}/{dataset}.h5
        print(describe_long_context_file(args.file))
        return 0
    try:
        with h5layout.open_activations(args.file) as handle:
            if args.attention:
                print(describe_attention(handle, *args.attention))
                return 0
            print(describe_file(handle))
            missing = missing_datasets(handle)
    except (FileNotFoundError, h5layout.ActivationFileError) as error:
        print(f"sinkscope inspect: {error}", file=sys.stderr)
        return 2
    if missing:
        print(
            f"sinkscope inspect: {args.file} lacks {', '.join(missing)} of the layout "
            "(`sinkscope inspect --layout`); the analyses cannot read it: extract it again",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
