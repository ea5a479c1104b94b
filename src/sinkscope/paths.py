"""Where every output of the workflow lives: one template per artefact, used by the rules and tests.

Paths are Snakemake patterns with ``{model}`` and ``{dataset}`` wildcards under ``results/``.
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_FIGURES = ("mass_heatmaps", "class_map")


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

    def log(self, rule: str, pattern: str) -> str:
        return f"{self.root}/logs/{rule}/{pattern}.log"

    def all_targets(self, pairs: list[tuple[str, str]]) -> list[str]:
        """Every final output for the given (model, dataset) pairs, plus the summaries."""
        targets: list[str] = []
        for model, dataset in pairs:
            fill = {"model": model, "dataset": dataset}
            targets.append(self.activations.format(**fill))
            for level in ("per_head", "per_sequence"):
                targets.append(self.heads_table(level).format(**fill))
            targets.extend(self.heads_figure(name).format(**fill) for name in HEAD_FIGURES)
        targets += [self.heads_summary(), self.heads_summary("csv"), self.heads_summary_figure]
        return targets
