"""Where every output of the workflow lives: one template per artefact, used by the rules and tests.

Paths are Snakemake patterns with ``{model}`` and ``{dataset}`` wildcards under ``results/``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sinkscope import outputs as registry
from sinkscope.claims import names as claims_names
from sinkscope.dynamics import names as dynamics_names
from sinkscope.heads import names as heads_names
from sinkscope.variants import source_dataset

#: Which pairs each pair set of :data:`sinkscope.outputs.PAIR_SETS` holds:
#: ``{"all": [...], "bos": [...], "cache": [...]}`` (the workflow's ``PAIR_SETS``).
PairSets = Mapping[str, Sequence[tuple[str, str]]]


@dataclass(frozen=True)
class Paths:
    root: str = "results"

    def folder_problems(self) -> list[str]:
        """Files where the workflow needs folders: ``root`` itself, and any entry directly
        under it without a suffix (every folder of the layout; the files there, ``claims.*``,
        have one). One sentence each, with the fix; checked before the DAG is built, where
        Snakemake would otherwise stop on ``NotADirectoryError``."""
        from pathlib import Path

        root = Path(self.root)
        blocked = [root] if root.exists() and not root.is_dir() else []
        if root.is_dir():
            blocked += sorted(e for e in root.iterdir() if e.is_file() and not e.suffix)
        return [
            f"{entry}: a file where the workflow writes a folder; move or delete it"
            for entry in blocked
        ]

    # preparation
    @property
    def model_dir(self) -> str:
        return f"{self.root}/models/{{model}}"

    @property
    def corpus(self) -> str:
        return f"{self.root}/corpora/{{dataset}}/documents.parquet"

    @property
    def corpus_provenance(self) -> str:
        return f"{self.root}/corpora/{{dataset}}/documents.json"

    @property
    def tokens(self) -> str:
        return f"{self.root}/tokens/{{model}}/{{dataset}}.json"

    @property
    def token_stream(self) -> str:
        """The corpus ``{dataset}`` tokenized by ``{model}``'s tokenizer (rule tokenize_corpus);
        ``{dataset}`` is a configured dataset, never a no-BOS id."""
        return f"{self.root}/tokens/{{model}}/{{dataset}}.stream.npz"

    def token_stream_inputs(self, model: str, dataset_id: str) -> dict[str, str]:
        """The token stream (``stream``) a pair's sequences and streams are cut from and its
        corpus' provenance (``provenance``, whose ``text_sha256`` the stream must match): its
        dataset's, for a no-BOS variant too (:func:`sinkscope.variants.source_dataset`)."""
        dataset = source_dataset(dataset_id)
        return {
            "stream": self.token_stream.format(model=model, dataset=dataset),
            "provenance": self.corpus_provenance.format(dataset=dataset),
        }

    # extraction
    @property
    def activations(self) -> str:
        return f"{self.root}/activations/{{model}}/{{dataset}}.h5"

    @property
    def long_context_inputs(self) -> str:
        """A pair's long-context attention inputs (rule extract_long_context, read by
        analyze_geometry_long_context; :mod:`sinkscope.geometry.long_context_file`)."""
        return f"{self.root}/long_context/{{model}}/{{dataset}}.h5"

    # head classification (paper §3): the registry's classify_heads and summarize_heads
    def heads_table(self, level: str, suffix: str = "parquet") -> str:
        """A pair's head table: ``per_head`` or ``per_sequence`` (rule classify_heads)."""
        return self.registered_table("classify_heads", level, suffix)

    def heads_summary(self, suffix: str = "parquet", name: str = heads_names.SUMMARY) -> str:
        """A summary table of the head classification: the class shares (``name`` =
        :data:`~sinkscope.heads.names.SUMMARY`) or the per-sequence masses
        (:meth:`heads_sequence_masses`)."""
        return self.registered_table("summarize_heads", name, suffix)

    def heads_sequence_masses(self, suffix: str = "parquet") -> str:
        """Every pair's per-sequence head masses (:data:`~sinkscope.heads.names.SEQUENCE_MASSES`),
        from which the claims rule bootstraps the head shares."""
        return self.heads_summary(suffix, heads_names.SEQUENCE_MASSES)

    # the registered outputs (sinkscope.outputs): tables, figures, a rule's output: and targets
    def registered_table(self, rule: str, name: str, suffix: str = "parquet") -> str:
        """Where rule ``rule`` writes its table ``name`` (a pattern with the rule's wildcards)."""
        outputs = registry.entry(rule)
        if name not in outputs.tables:
            raise KeyError(f"rule {rule!r} writes no table {name!r} (tables: {outputs.tables})")
        return f"{self.root}/{outputs.directory}/{outputs.table_prefix}{name}.{suffix}"

    def registered_figure(self, rule: str, name: str) -> str:
        """Where rule ``rule`` writes its figure ``name``."""
        outputs = registry.entry(rule)
        if name not in outputs.figure_names:
            raise KeyError(f"rule {rule!r} draws no figure {name!r}")
        return f"{self.root}/{outputs.directory}/{name}.png"

    def rule_outputs(self, rule: str, report: Callable[..., Any] | None = None) -> dict[str, Any]:
        """The ``output:`` of a registered rule: ``table_<name>`` (parquet) and
        ``table_<name>_csv`` per table, ``figure_<name>`` per figure.

        With ``report`` (Snakemake's ``report`` function) every figure is wrapped as
        ``report(path, caption="../report/<caption>", category=..., subcategory=...,
        labels=...)``: a pair's figures under the rule's category, one subcategory per model; a
        summary's under "Summary", the rule's category as subcategory; an experiment's under its
        category and part. The caption path is relative to ``workflow/rules/``.
        """
        outputs = registry.entry(rule)
        named: dict[str, Any] = {}
        for name in outputs.tables:
            named[f"table_{name}"] = self.registered_table(rule, name)
            named[f"table_{name}_csv"] = self.registered_table(rule, name, "csv")
        for figure in outputs.figures:
            path = self.registered_figure(rule, figure.name)
            named[f"figure_{figure.name}"] = (
                path if report is None else report(path, **_report_entry(outputs, figure))
            )
        return named

    def rule_targets(self, rule: str, pairs: Sequence[tuple[str, str]] = ()) -> list[str]:
        """Every table (parquet and CSV) and figure of ``rule``, for each of ``pairs`` when it
        runs per pair."""
        outputs = registry.entry(rule)
        patterns = list(self.rule_outputs(rule).values())
        if outputs.level != "pair":
            return patterns
        return [p.format(model=m, dataset=d) for m, d in pairs for p in patterns]

    def pair_tables(self, rules: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[str]:
        """The parquet tables of the per-pair ``rules`` for every pair of ``pairs`` (the inputs of
        a summary rule)."""
        return [
            self.registered_table(rule, name).format(model=model, dataset=dataset)
            for model, dataset in pairs
            for rule in rules
            for name in registry.entry(rule).tables
        ]

    def pooled_tables(
        self,
        summary: str,
        rules: Sequence[str],
        config: Mapping[str, Any],
        pair_sets: PairSets,
        table: str | None = None,
    ) -> list[str]:
        """The inputs of the summary rule ``summary``: the parquet tables (only ``table``, where
        given) of those per-pair ``rules`` that run in ``config``
        (:func:`sinkscope.outputs.rule_runs`), for every pair of the summary's own pair set (its
        registry entry's ``pairs``: the pooled rows and the paper's claims are about BOS)."""
        ran = [r for r in rules if registry.rule_runs(registry.entry(r), config, pair_sets)]
        paths = self.pair_tables(ran, pair_sets[registry.entry(summary).pairs])
        if table is None:
            return paths
        suffix = f"/{registry.entry(ran[0]).table_prefix}{table}.parquet" if ran else ""
        return [p for p in paths if p.endswith(suffix)]

    def registered_targets(self, config: Mapping[str, Any], pair_sets: PairSets) -> list[str]:
        """The tables and figures of every registered rule that runs in ``config``
        (:func:`sinkscope.outputs.rule_runs`), each per-pair rule's for the pairs of its set."""
        targets: list[str] = []
        for outputs in registry.REGISTRY.values():
            if registry.rule_runs(outputs, config, pair_sets):
                targets += self.rule_targets(outputs.rule, pair_sets[outputs.pairs])
        return targets

    # per-pair analyses and their cross-pair summaries
    def table(self, analysis: str, name: str, suffix: str = "parquet") -> str:
        return f"{self.root}/{analysis}/{{model}}/{{dataset}}/{name}.{suffix}"

    def figure(self, analysis: str, name: str) -> str:
        return f"{self.root}/{analysis}/{{model}}/{{dataset}}/{name}.png"

    # §7 synthetic cost experiments (no model): one JSON row per run, then tables and figures
    def cost_run(self, task: str) -> str:
        patterns = {
            "backcopy": "{pattern}_T{T}_seed{seed}",
            "backcopy_e2e": "{pattern}_T{T}_seed{seed}",
            "copypaste": "{pattern}_n{n}_delta{delta}_seed{seed}",
        }
        return f"{self.root}/costs/{task}/runs/{patterns[task]}.json"

    def cost_figure(self, name: str) -> str:
        return f"{self.root}/costs/{name}.png"

    # the claims table (rule claims; sinkscope.claims)
    def claims(self, suffix: str = "md") -> str:
        return f"{self.root}/claims.{suffix}"

    def observations(self, suffix: str = "parquet") -> str:
        """The observations table (rule claims; sinkscope.claims.observations)."""
        return f"{self.root}/summary/observations.{suffix}"

    def claims_targets(self) -> list[str]:
        return [self.claims(suffix) for suffix in ("md", "parquet", "csv", "rst")] + [
            self.observations(suffix) for suffix in ("parquet", "csv")
        ]

    def claims_inputs(self, config: Mapping[str, Any], pair_sets: PairSets) -> dict[str, str]:
        """The summary tables rule ``claims`` reads (:data:`sinkscope.claims.names.INPUTS`, same
        keys and order) from the registered rules that run in this config
        (:func:`sinkscope.outputs.rule_runs`: e.g. no StreamingLLM summary when no pair is
        evaluated under the caches). Claims whose tables are not listed come out "not applicable
        -- analysis not run in this config"."""
        return {
            key: self.registered_table(table.rule, table.name)
            for key, table in claims_names.INPUTS.items()
            if registry.rule_runs(registry.entry(table.rule), config, pair_sets)
        }

    # training dynamics of the companion paper (no model): per-run tables, summaries, figures
    def dynamics_run_table(self, part: str, name: str) -> str:
        return f"{self.root}/dynamics/{part}/runs/{{run}}/{name}.parquet"

    def dynamics_run_timing(self, part: str) -> str:
        return f"{self.root}/dynamics/{part}/runs/{{run}}/timing.json"

    def dynamics_timing(self, part: str) -> str:
        return f"{self.root}/dynamics/{part}/timing.json"

    def dynamics_run_outputs(self) -> dict[str, dict[str, str]]:
        """Per part, the outputs of one ``dynamics_<part>_run`` job (``{run}`` wildcard): its
        tables (:data:`sinkscope.dynamics.names.RUN_TABLES`) and ``timing``."""
        return {
            part: {
                **{name: self.dynamics_run_table(part, name) for name in names},
                "timing": self.dynamics_run_timing(part),
            }
            for part, names in dynamics_names.RUN_TABLES.items()
        }

    def dynamics_summary_inputs(
        self, jobs: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, dict[str, list[str]]]:
        """Per part, the run outputs of every job of ``jobs`` (``{part: {run id: spec}}``, as
        :func:`sinkscope.dynamics.grids.dynamics_jobs` returns), by output name, runs sorted."""
        return {
            part: {
                name: [path.format(run=run) for run in sorted(jobs.get(part, {}))]
                for name, path in outputs.items()
            }
            for part, outputs in self.dynamics_run_outputs().items()
        }

    def log(self, rule: str, pattern: str) -> str:
        return f"{self.root}/logs/{rule}/{pattern}.log"

    def all_targets(self, config: Mapping[str, Any], pair_sets: PairSets) -> list[str]:
        """Every final output of ``config``: each pair's activation file, the registered tables and
        figures (:meth:`registered_targets`) and the claims."""
        activations = [self.activations.format(model=m, dataset=d) for m, d in pair_sets["all"]]
        return activations + self.registered_targets(config, pair_sets) + self.claims_targets()


def _report_entry(outputs: registry.RuleOutputs, figure: registry.Figure) -> dict[str, Any]:
    """The ``report()`` arguments of a registered figure (see :meth:`Paths.rule_outputs`)."""
    caption = f"../report/{figure.caption}"
    label = figure.report_label
    if outputs.level == "pair":
        return {
            "caption": caption,
            "category": outputs.category,
            "subcategory": "{model}",
            "labels": {"model": "{model}", "dataset": "{dataset}", "figure": label},
        }
    if outputs.level == "summary":
        return {
            "caption": caption,
            "category": "Summary",
            "subcategory": outputs.category,
            "labels": {"model": "all", "dataset": "pooled", "figure": label},
        }
    part = {"subcategory": outputs.subcategory} if outputs.subcategory else {}
    labels = {"part": outputs.subcategory, "figure": label} if outputs.subcategory else {}
    return {
        "caption": caption,
        "category": outputs.category,
        **part,
        "labels": labels or {"figure": label},
    }


def registry_markdown(root: str = "results") -> str:
    """Every registered rule's outputs as a Markdown table (``sinkscope outputs``): the rule, its
    level and config section, its folder, its tables (each ``.parquet`` and ``.csv``) and figures
    (``.png``), and the claims keys it feeds."""
    lines = [
        "| rule | level | runs with | folder | tables | figures | read by the claims as |",
        "|---|---|---|---|---|---|---|",
    ]
    for outputs in registry.REGISTRY.values():
        folder = f"{root}/{outputs.directory}/"
        tables = ", ".join(f"{outputs.table_prefix}{name}" for name in outputs.tables)
        section = "always" if outputs.config_section == registry.ALWAYS else outputs.config_section
        level = (
            outputs.level
            if outputs.level == "experiment"
            else f"{outputs.level} ({outputs.pairs} pairs)"
        )
        lines.append(
            f"| `{outputs.rule}` | {level} | `{section}` | "
            f"`{folder}` | {tables or '-'} | {', '.join(outputs.figure_names) or '-'} | "
            f"{', '.join(outputs.claims) or '-'} |"
        )
    return "\n".join(lines)
