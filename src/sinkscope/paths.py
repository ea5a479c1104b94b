"""Where every output of the workflow lives: one template per artefact, used by the rules and tests.

Paths are Snakemake patterns with ``{model}`` and ``{dataset}`` wildcards under ``results/``.
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_FIGURES = ("mass_heatmaps", "class_map")

#: Tables and figures of each per-pair analysis (paper section in the rule files).
GEOMETRY_TABLES = (
    "bos_alignment",
    "bos_cosine_hist",
    "halfspace",
    "halfspace_layer",
    "value_rank",
    "value_rank_worst",
    "bos_value_norm",
    "bos_residual_norm",
)
GEOMETRY_SUMMARY_TABLES = (
    "bos_alignment",
    "halfspace_layer",
    "value_rank",
    "value_rank_worst",
    "bos_value_norm_classes",
    "bos_residual_norm",
    "statements",
)
GEOMETRY_FIGURES = (
    "bos_alignment",
    "halfspace_margins",
    "value_rank",
    "bos_value_norm",
    "bos_residual_norm",
)
OVERSMOOTHING_TABLES = ("per_head", "per_layer", "summary", "conditions", "claims")
OVERSMOOTHING_FIGURES = (
    "fig2_left_approximation",
    "fig2_right_components",
    "fig4_layer_similarity",
    "fig7_head_errors",
    "fig8_attention_deltas",
    "fig9_uniform_deltas",
    "fig10_uniformity",
    "fig11_deviating_heads",
)


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

    # extraction
    @property
    def activations(self) -> str:
        return f"{self.root}/activations/{{model}}/{{dataset}}.h5"

    # head classification (paper §3)
    def heads_table(self, level: str, suffix: str = "parquet") -> str:
        return f"{self.root}/heads/{{model}}/{{dataset}}/heads_{level}.{suffix}"

    def heads_figure(self, name: str) -> str:
        return f"{self.root}/heads/{{model}}/{{dataset}}/{name}.png"

    def heads_summary(self, suffix: str = "parquet") -> str:
        return f"{self.root}/summary/head_classes.{suffix}"

    @property
    def heads_summary_figure(self) -> str:
        return f"{self.root}/summary/head_classes.png"

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
            "copypaste": "{pattern}_n{n}_delta{delta}_seed{seed}",
        }
        return f"{self.root}/costs/{task}/runs/{patterns[task]}.json"

    def cost_table(self, name: str, suffix: str = "parquet") -> str:
        return f"{self.root}/costs/{name}.{suffix}"

    def cost_figure(self, name: str) -> str:
        return f"{self.root}/costs/{name}.png"

    def cost_targets(self, costs: dict) -> list[str]:
        if not costs.get("enabled"):
            return []
        tables = ["toy", "backcopy_runs", "backcopy_slopes", "condition3", "copypaste_runs"]
        figures = ["toy", "backcopy_costs", "condition3", "copypaste_costs"]
        return [self.cost_table(n) for n in tables] + [self.cost_figure(n) for n in figures]

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
            ):
                targets += [self.table(analysis, name).format(**fill) for name in tables]
                targets += [self.figure(analysis, name).format(**fill) for name in figures]
        targets += [self.heads_summary(), self.heads_summary("csv"), self.heads_summary_figure]
        for analysis, tables, figures in (
            ("geometry", GEOMETRY_SUMMARY_TABLES, GEOMETRY_FIGURES),
            ("oversmoothing", OVERSMOOTHING_TABLES, OVERSMOOTHING_FIGURES),
        ):
            targets += [self.summary_table(analysis, name) for name in tables]
            targets += [self.summary_figure(analysis, name) for name in figures]
        return targets + self.cost_targets(costs or {})
