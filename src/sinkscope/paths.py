"""Where every output of the workflow lives: one template per artefact, used by the rules and tests.

Paths are Snakemake patterns with ``{model}`` and ``{dataset}`` wildcards under ``results/``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sinkscope.claims import names as claims_names
from sinkscope.config import analysis_runs
from sinkscope.costs import names as costs_names
from sinkscope.dynamics import names as dynamics_names
from sinkscope.geometry import names as geometry_names
from sinkscope.heads import names as heads_names
from sinkscope.oversmoothing import names as oversmoothing_names
from sinkscope.sinks import names as sinks_names
from sinkscope.streaming import names as streaming_names
from sinkscope.variants import is_no_bos, source_dataset

#: Figures of the head classification (sinkscope.heads), per pair: the names live in
#: :mod:`sinkscope.heads.names`.
HEAD_FIGURES = heads_names.FIGURES

#: Tables and figures of each per-pair analysis (paper section in the rule files).
#: Geometry (sinkscope.geometry): per pair, the long-context tables of Proposition 4.1 and the
#: summary; the names live in :mod:`sinkscope.geometry.names`.
GEOMETRY_TABLES = geometry_names.TABLES
GEOMETRY_LONG_CONTEXT_TABLES = geometry_names.LONG_CONTEXT_TABLES
GEOMETRY_LONG_CONTEXT_FIGURES = geometry_names.LONG_CONTEXT_FIGURES
GEOMETRY_SUMMARY_TABLES = geometry_names.SUMMARY_TABLES
GEOMETRY_FIGURES = geometry_names.FIGURES
#: Oversmoothing (sinkscope.oversmoothing): the same tables per pair and in the summary, and the
#: figures; the names live in :mod:`sinkscope.oversmoothing.names`.
OVERSMOOTHING_TABLES = oversmoothing_names.TABLES
OVERSMOOTHING_FIGURES = oversmoothing_names.FIGURES
#: Sinks beyond BOS (sinkscope.sinks): the sink rate of Gu et al., secondary sinks, massive
#: activations, per pair and in the summary; the names live in :mod:`sinkscope.sinks.names`.
SINKS_TABLES = sinks_names.TABLES
SINKS_FIGURES = sinks_names.FIGURES
SINKS_SUMMARY_TABLES = sinks_names.SUMMARY_TABLES
SINKS_SUMMARY_FIGURES = sinks_names.SUMMARY_FIGURES
#: StreamingLLM (sinkscope.streaming), per pair, by rule, and its summary: the names live in
#: :mod:`sinkscope.streaming.names`.
STREAMING_POLICY_TABLES = streaming_names.POLICY_TABLES
STREAMING_POLICY_FIGURES = streaming_names.POLICY_FIGURES
STREAMING_RECOMPUTE_TABLES = streaming_names.RECOMPUTE_TABLES
STREAMING_RECOMPUTE_FIGURES = streaming_names.RECOMPUTE_FIGURES
STREAMING_FIRST_POSITION_TABLES = streaming_names.FIRST_POSITION_TABLES
STREAMING_FIRST_POSITION_FIGURES = streaming_names.FIRST_POSITION_FIGURES
STREAMING_TABLES = streaming_names.TABLES
STREAMING_FIGURES = streaming_names.FIGURES
STREAMING_SUMMARY_TABLES = streaming_names.SUMMARY_TABLES
STREAMING_SUMMARY_FIGURES = streaming_names.SUMMARY_FIGURES
#: §7 cost experiments (sinkscope.costs, no model): the tables and figures made whenever the
#: section is enabled, and the end-to-end table made only when its sizes are set; the names live
#: in :mod:`sinkscope.costs.names`.
COST_TABLES = costs_names.TABLES
COST_END_TO_END_TABLES = costs_names.END_TO_END_TABLES
COST_FIGURES = costs_names.FIGURES
#: Training-dynamics experiments (companion paper; rules in workflow/rules/dynamics.smk): the
#: tables of one run (``run_*`` of sinkscope.dynamics), the summary tables (``summarize_*``) and
#: the figures of each part; the names live in :mod:`sinkscope.dynamics.names`.
DYNAMICS_RUN_TABLES = dynamics_names.RUN_TABLES
DYNAMICS_SUMMARY_TABLES = dynamics_names.SUMMARY_TABLES
DYNAMICS_FIGURES = dynamics_names.FIGURES


@dataclass(frozen=True)
class Paths:
    root: str = "results"

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

    # head classification (paper §3)
    def heads_table(self, level: str, suffix: str = "parquet") -> str:
        return f"{self.root}/heads/{{model}}/{{dataset}}/heads_{level}.{suffix}"

    def heads_figure(self, name: str) -> str:
        return f"{self.root}/heads/{{model}}/{{dataset}}/{name}.png"

    def heads_summary(self, suffix: str = "parquet", name: str = heads_names.SUMMARY) -> str:
        """A summary table of the head classification: the class shares (``name`` =
        :data:`~sinkscope.heads.names.SUMMARY`) or the per-sequence masses
        (:meth:`heads_sequence_masses`)."""
        return f"{self.root}/summary/{name}.{suffix}"

    def heads_sequence_masses(self, suffix: str = "parquet") -> str:
        """Every pair's per-sequence head masses (:data:`~sinkscope.heads.names.SEQUENCE_MASSES`),
        from which the claims rule bootstraps the head shares."""
        return self.heads_summary(suffix, heads_names.SEQUENCE_MASSES)

    @property
    def heads_summary_figure(self) -> str:
        return f"{self.root}/summary/{heads_names.SUMMARY}.png"

    # per-pair analyses and their cross-pair summaries
    def table(self, analysis: str, name: str, suffix: str = "parquet") -> str:
        return f"{self.root}/{analysis}/{{model}}/{{dataset}}/{name}.{suffix}"

    def figure(self, analysis: str, name: str) -> str:
        return f"{self.root}/{analysis}/{{model}}/{{dataset}}/{name}.png"

    def summary_table(self, analysis: str, name: str, suffix: str = "parquet") -> str:
        return f"{self.root}/summary/{analysis}/{name}.{suffix}"

    def summary_figure(self, analysis: str, name: str) -> str:
        return f"{self.root}/summary/{analysis}/{name}.png"

    # §7 synthetic cost experiments (no model): one JSON row per run, then tables and figures
    def cost_run(self, task: str) -> str:
        patterns = {
            "backcopy": "{pattern}_T{T}_seed{seed}",
            "backcopy_e2e": "{pattern}_T{T}_seed{seed}",
            "copypaste": "{pattern}_n{n}_delta{delta}_seed{seed}",
        }
        return f"{self.root}/costs/{task}/runs/{patterns[task]}.json"

    def cost_table(self, name: str, suffix: str = "parquet") -> str:
        return f"{self.root}/costs/{name}.{suffix}"

    def cost_figure(self, name: str) -> str:
        return f"{self.root}/costs/{name}.png"

    def cost_outputs(
        self,
        tables: tuple[str, ...],
        figures: tuple[str, ...] = (),
        report: Callable[..., Any] | None = None,
        category: str = "",
    ) -> dict[str, Any]:
        """The outputs of a §7 rule that writes ``tables`` and ``figures`` (names of
        :mod:`sinkscope.costs.names`): ``table_<name>`` (parquet), ``table_<name>_csv`` and
        ``figure_<name>``.

        With ``report`` (Snakemake's ``report`` function) every figure is wrapped as
        ``report(path, caption="../report/costs_<name>.rst", category=category,
        labels={"figure": FIGURE_LABELS[name]})``; the caption path is relative to
        ``workflow/rules/``.
        """
        outputs: dict[str, Any] = {}
        for name in tables:
            outputs[f"table_{name}"] = self.cost_table(name)
            outputs[f"table_{name}_csv"] = self.cost_table(name, "csv")
        for name in figures:
            path = self.cost_figure(name)
            outputs[f"figure_{name}"] = (
                path
                if report is None
                else report(
                    path,
                    caption=f"../report/costs_{name}.rst",
                    category=category,
                    labels={"figure": costs_names.FIGURE_LABELS[name]},
                )
            )
        return outputs

    def cost_targets(self, costs: dict) -> list[str]:
        """The tables and figures of the ``costs`` section when enabled: :data:`COST_TABLES`
        (with :data:`COST_END_TO_END_TABLES` when ``backcopy.end_to_end.T`` lists sizes), then
        :data:`COST_FIGURES`."""
        if not costs.get("enabled"):
            return []
        tables = COST_TABLES
        if costs.get("backcopy", {}).get("end_to_end", {}).get("T"):
            tables += COST_END_TO_END_TABLES
        return [self.cost_table(n) for n in tables] + [self.cost_figure(n) for n in COST_FIGURES]

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

    def claims_input(self, table: claims_names.ClaimsInput) -> str:
        """Where the summary table ``table`` (of :data:`sinkscope.claims.names.INPUTS`) lives."""
        if table.analysis == "heads":
            return self.heads_summary(name=table.name)
        if table.analysis == "costs":
            return self.cost_table(table.name)
        if table.analysis == "dynamics":
            return self.dynamics_table(table.section.partition(".")[2], table.name)
        return self.summary_table(table.analysis, table.name)

    def claims_inputs(
        self, config: Mapping[str, Any], without: Collection[str] = ()
    ) -> dict[str, str]:
        """The summary tables rule ``claims`` reads (:data:`sinkscope.claims.names.INPUTS`, same
        keys and order) for the analyses this config runs: heads, geometry and oversmoothing
        always, any other analysis when its config section says ``enabled: true``, except the
        sections in ``without`` (e.g. ``streaming`` when no model has rotary positions). Claims
        whose tables are not listed come out "not applicable -- analysis not run in this
        config"."""
        return {
            key: self.claims_input(table)
            for key, table in claims_names.INPUTS.items()
            if analysis_runs(config, table.section) and table.section not in without
        }

    def streaming_targets(
        self,
        pairs: list[tuple[str, str]],
        streaming: Mapping[str, Any],
        cache_pairs: Collection[tuple[str, str]] | None = None,
    ) -> list[str]:
        """Per-pair and summary outputs of the StreamingLLM analysis (when enabled). A no-BOS
        pair (:mod:`sinkscope.variants`) gets only the first-position mass, the part read from its
        activation file: the cache policies cut their own streams (BOS first) from the corpus,
        the same for both variants of a dataset. So does a pair outside ``cache_pairs`` (default:
        every pair), whose model the cache policies do not apply to
        (:mod:`sinkscope.streaming.applicability`); the summary exists when some pair with BOS
        is evaluated under the caches."""
        if not streaming.get("enabled"):
            return []
        targets = []
        cached = [
            p for p in pairs if not is_no_bos(p[1]) and (cache_pairs is None or p in cache_pairs)
        ]
        for model, dataset in pairs:
            fill = {"model": model, "dataset": dataset}
            full = (model, dataset) in cached
            tables = STREAMING_TABLES if full else STREAMING_FIRST_POSITION_TABLES
            figures = STREAMING_FIGURES if full else STREAMING_FIRST_POSITION_FIGURES
            targets += [self.table("streaming", n).format(**fill) for n in tables]
            targets += [self.figure("streaming", n).format(**fill) for n in figures]
        if cached:
            targets += [self.summary_table("streaming", n) for n in STREAMING_SUMMARY_TABLES]
            targets += [self.summary_figure("streaming", n) for n in STREAMING_SUMMARY_FIGURES]
        return targets

    def geometry_pair_tables(self, config: Mapping[str, Any]) -> tuple[str, ...]:
        """The per-pair geometry tables this config makes (inputs of the geometry summary):
        :data:`GEOMETRY_TABLES`, plus :data:`GEOMETRY_LONG_CONTEXT_TABLES` unless
        ``geometry.long_context.enabled`` is false."""
        long_context = analysis_runs(config, "geometry.long_context")
        return GEOMETRY_TABLES + (GEOMETRY_LONG_CONTEXT_TABLES if long_context else ())

    def long_context_targets(
        self, pairs: list[tuple[str, str]], config: Mapping[str, Any]
    ) -> list[str]:
        """The long-context half-space tables (parquet and CSV) and figure of every pair with
        BOS, when enabled (the test cuts its own streams from the corpus: a no-BOS pair has
        none)."""
        if not analysis_runs(config, "geometry.long_context"):
            return []
        targets = []
        for model, dataset in pairs:
            if is_no_bos(dataset):
                continue
            targets += [
                self.table("geometry", name, suffix).format(model=model, dataset=dataset)
                for name in GEOMETRY_LONG_CONTEXT_TABLES
                for suffix in ("parquet", "csv")
            ]
            targets += [
                self.figure("geometry", name).format(model=model, dataset=dataset)
                for name in GEOMETRY_LONG_CONTEXT_FIGURES
            ]
        return targets

    # training dynamics of the companion paper (no model): per-run tables, summaries, figures
    def dynamics_run_table(self, part: str, name: str) -> str:
        return f"{self.root}/dynamics/{part}/runs/{{run}}/{name}.parquet"

    def dynamics_run_timing(self, part: str) -> str:
        return f"{self.root}/dynamics/{part}/runs/{{run}}/timing.json"

    def dynamics_table(self, part: str, name: str, suffix: str = "parquet") -> str:
        return f"{self.root}/dynamics/{part}/{name}.{suffix}"

    def dynamics_figure(self, part: str, name: str) -> str:
        return f"{self.root}/dynamics/{part}/{name}.png"

    def dynamics_timing(self, part: str) -> str:
        return f"{self.root}/dynamics/{part}/timing.json"

    def dynamics_targets(self, dynamics: Mapping[str, Any]) -> list[str]:
        """Summary tables, figures and timings of every enabled part of the ``dynamics`` section."""
        if not dynamics.get("enabled"):
            return []
        targets = []
        for part, names in DYNAMICS_SUMMARY_TABLES.items():
            if not dynamics.get(part, {}).get("enabled", True):
                continue
            targets += [self.dynamics_table(part, n, s) for n in names for s in ("parquet", "csv")]
            targets += [self.dynamics_figure(part, n) for n in DYNAMICS_FIGURES[part]]
            targets.append(self.dynamics_timing(part))
        return targets

    def dynamics_run_outputs(self) -> dict[str, dict[str, str]]:
        """Per part, the outputs of one ``dynamics_<part>_run`` job (``{run}`` wildcard): its
        tables (:data:`DYNAMICS_RUN_TABLES`) and ``timing``."""
        return {
            part: {
                **{name: self.dynamics_run_table(part, name) for name in names},
                "timing": self.dynamics_run_timing(part),
            }
            for part, names in DYNAMICS_RUN_TABLES.items()
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

    def dynamics_summary_outputs(
        self, report: Callable[..., Any] | None = None, category: str = ""
    ) -> dict[str, dict[str, Any]]:
        """Per part, the outputs of ``summarize_dynamics_<part>``: ``table_<name>`` (parquet),
        ``table_<name>_csv``, ``figure_<name>`` and ``timing``.

        With ``report`` (Snakemake's ``report`` function) every figure is wrapped as
        ``report(path, caption="../report/dynamics_<part>_<name>.rst", category=category,
        subcategory=<part with dashes>, labels={"part", "figure"})``; the caption path is relative
        to ``workflow/rules/``.
        """
        out: dict[str, dict[str, Any]] = {}
        for part, names in DYNAMICS_SUMMARY_TABLES.items():
            entry: dict[str, Any] = {}
            for name in names:
                entry[f"table_{name}"] = self.dynamics_table(part, name, "parquet")
                entry[f"table_{name}_csv"] = self.dynamics_table(part, name, "csv")
            for name in DYNAMICS_FIGURES[part]:
                path = self.dynamics_figure(part, name)
                entry[f"figure_{name}"] = (
                    path
                    if report is None
                    else report(
                        path,
                        caption=f"../report/dynamics_{part}_{name}.rst",
                        category=category,
                        subcategory=part.replace("_", "-"),
                        labels={"part": part, "figure": name},
                    )
                )
            entry["timing"] = self.dynamics_timing(part)
            out[part] = entry
        return out

    def log(self, rule: str, pattern: str) -> str:
        return f"{self.root}/logs/{rule}/{pattern}.log"

    def all_targets(self, pairs: list[tuple[str, str]], costs: dict | None = None) -> list[str]:
        """Every final output for the given (model, dataset) pairs, the summaries and §7."""
        targets: list[str] = []
        for model, dataset in pairs:
            fill = {"model": model, "dataset": dataset}
            targets.append(self.activations.format(**fill))
            for level in ("per_head", "per_sequence"):
                targets.append(self.heads_table(level).format(**fill))
            targets.extend(self.heads_figure(name).format(**fill) for name in HEAD_FIGURES)
            for analysis, tables, figures in (
                ("geometry", GEOMETRY_TABLES, GEOMETRY_FIGURES),
                ("oversmoothing", OVERSMOOTHING_TABLES, OVERSMOOTHING_FIGURES),
                ("sinks", SINKS_TABLES, SINKS_FIGURES),
            ):
                targets += [self.table(analysis, name).format(**fill) for name in tables]
                targets += [self.figure(analysis, name).format(**fill) for name in figures]
        targets += [self.heads_summary(), self.heads_summary("csv"), self.heads_summary_figure]
        targets += [self.heads_sequence_masses(), self.heads_sequence_masses("csv")]
        for analysis, tables, figures in (
            ("geometry", GEOMETRY_SUMMARY_TABLES, GEOMETRY_FIGURES),
            ("oversmoothing", OVERSMOOTHING_TABLES, OVERSMOOTHING_FIGURES),
            ("sinks", SINKS_SUMMARY_TABLES, SINKS_SUMMARY_FIGURES),
        ):
            targets += [self.summary_table(analysis, name) for name in tables]
            targets += [self.summary_figure(analysis, name) for name in figures]
        return targets + self.cost_targets(costs or {}) + self.claims_targets()
