"""The registry of outputs: every table and figure of every analysis, declared once.

Each :class:`RuleOutputs` entry of :data:`REGISTRY` states what one rule writes: its stage, its
level (per pair, a cross-pair summary, or a model-free experiment), its tables and figures (each
figure with its report caption), which pairs it runs for, the config section that turns it on,
its scheduling priority and the tables the ``claims`` rule reads from it. From these entries, and
from nothing else:

* :meth:`sinkscope.paths.Paths.rule_outputs` gives a rule's ``output:`` (``table_<name>``,
  ``table_<name>_csv``, ``figure_<name>`` wrapped in the report's caption and labels);
* :meth:`sinkscope.paths.Paths.registered_targets` gives the ``all`` rule's targets;
* :data:`sinkscope.claims.names.INPUTS` lists the claims rule's inputs;
* :func:`priority` gives every rule's ``priority:``;
* :func:`sinkscope.steps.run` runs a rule that has no bespoke step through
  :func:`sinkscope.steps.analyze_registered`, which calls the entry's ``compute`` and ``draw``
  functions (``"module:function"``), so a new per-pair analysis needs no edit of
  ``sinkscope.steps`` (the worked example: ``docs/adding-an-analysis.md``).

No computation, and no imports beyond the standard library, the stages' ``names`` modules (the
names themselves) and :func:`sinkscope.config.analysis_runs`: the workflow reads this module when
it is parsed, without numpy, polars or torch. :mod:`sinkscope.sizing` reads it for the jobs'
requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from sinkscope.config import analysis_runs
from sinkscope.costs import names as costs_names
from sinkscope.dynamics import names as dynamics_names
from sinkscope.geometry import names as geometry_names
from sinkscope.heads import names as heads_names
from sinkscope.oversmoothing import names as oversmoothing_names
from sinkscope.sinks import names as sinks_names
from sinkscope.streaming import names as streaming_names

__all__ = [
    "ALWAYS",
    "ENTRIES",
    "LEVELS",
    "PAIR_SETS",
    "PIPELINE_PRIORITY",
    "REGISTRY",
    "STAGES",
    "AnalysisCost",
    "Figure",
    "RuleOutputs",
    "entry",
    "priority",
    "rule_runs",
]

#: ``pair``: one job per (model, dataset) pair, outputs under ``results/<stage>/<model>/<dataset>/``;
#: ``summary``: one job over every pair, under ``results/summary/<stage>/``; ``experiment``: a
#: model-free experiment's summary, under ``results/<stage>/``.
Level = Literal["pair", "summary", "experiment"]
LEVELS: tuple[str, ...] = ("pair", "summary", "experiment")
#: Which pairs a per-pair rule runs for, and which pairs' tables a summary pools: ``all``
#: configured pairs, the pairs with BOS (``bos``; no ``.no-bos`` variant), or the pairs with BOS
#: evaluated under StreamingLLM's caches (``cache``: :mod:`sinkscope.streaming.applicability`).
PairSet = Literal["all", "bos", "cache"]
PAIR_SETS: tuple[str, ...] = ("all", "bos", "cache")
#: ``section`` of a rule that runs in every config.
ALWAYS = "always"


@dataclass(frozen=True)
class AnalysisCost:
    """The cost of a file-reading analysis (the registry's ``cost`` of a new one; the measured
    ones are :data:`sinkscope.sizing.costs.ANALYSIS_COSTS`): peak RSS = :data:`JOB_FIXED_MB` + ``rss_layers`` x one layer's
    data (float32, :func:`sinkscope.sizing.requests.layer_bytes`) + ``rss_growth`` x layers x
    the same; an analysis that holds a layer's attention maps in another share than the rest
    of it states that share as ``rss_maps`` (:func:`sinkscope.sizing.requests.layer_parts`).
    Wall time = ``fixed_s`` + ``s_per_gb`` x the bytes of every layer it reads."""

    rss_layers: float
    s_per_gb: float
    fixed_s: float = 10.0
    #: memory kept per layer read (results and per-layer arrays that live to the end), as a
    #: share of one layer's data
    rss_growth: float = 0.0
    #: the share of a layer's attention maps held at the peak, where it is not ``rss_layers``
    rss_maps: float | None = None


@dataclass(frozen=True)
class Figure:
    """One figure of a rule: ``<name>.png`` beside its tables."""

    name: str
    #: Its report caption: a file of ``workflow/report/`` (reStructuredText with Jinja2, which
    #: reads the config that made the figure as ``snakemake.config``).
    caption: str
    #: How the report lists it (default: the name).
    label: str = ""

    @property
    def report_label(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class RuleOutputs:
    """What one rule writes, and when it runs."""

    #: The rule's name in ``workflow/rules/<stage>.smk``.
    rule: str
    #: The stage: the package ``sinkscope.<stage>``, the rule file ``workflow/rules/<stage>.smk``
    #: and the folder under ``results/``.
    stage: str
    level: Level
    #: Snakemake runs the ready job of highest priority first (:func:`priority`).
    priority: int
    #: The report's category of the figures (summary figures: the subcategory of "Summary").
    category: str
    #: Table names: each is written as ``<name>.parquet`` and ``<name>.csv``.
    tables: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()
    #: The config section whose ``enabled`` decides whether the rule runs
    #: (:func:`sinkscope.config.analysis_runs`; a dotted ``section.part`` for a part); default:
    #: the stage; :data:`ALWAYS`: in every config (a stage without a config section).
    section: str = ""
    #: A dotted config key that must hold a non-empty value too (e.g. the sizes of a run).
    requires: str = ""
    #: Per pair: the pairs it runs for. Summary: the pairs it pools, and it runs when there is one.
    pairs: PairSet = "all"
    #: The folder under ``results/`` when not the level's (``{model}``/``{dataset}`` wildcards
    #: kept as such).
    folder: str = ""
    #: Prepended to each table's file name (the head tables are ``heads_<name>.parquet``).
    table_prefix: str = ""
    #: The report subcategory of an experiment's figures (a part of the stage).
    subcategory: str = ""
    #: The tables the ``claims`` rule reads from this rule: {claims key: table name}.
    claims: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: For a rule without a bespoke step in :mod:`sinkscope.steps`: ``"module:function"`` that
    #: computes its tables, ``{table name: polars.DataFrame}``, from the rule's named inputs
    #: (paths) and params, passed by keyword.
    compute: str = ""
    #: ``"module:function"`` that gives its figures, ``{figure name: Draw}``, from its tables and
    #: a title (:data:`sinkscope.plotting.Draw`).
    draw: str = ""
    #: The job's cost where :mod:`sinkscope.sizing.costs` does not list the rule: a file-reading
    #: analysis' :class:`AnalysisCost`, or (peak MB, minutes) of a job
    #: that does not depend on a model.
    cost: AnalysisCost | tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"{self.rule}: level {self.level!r} is not one of {LEVELS}")
        if self.pairs not in PAIR_SETS:
            raise ValueError(f"{self.rule}: pairs {self.pairs!r} is not one of {PAIR_SETS}")
        names = [*self.tables, *(f.name for f in self.figures)]
        for name in names:
            if not name.isidentifier():
                raise ValueError(f"{self.rule}: output name {name!r} is not an identifier")
        unknown = set(self.claims.values()) - set(self.tables)
        if unknown:
            raise ValueError(f"{self.rule}: claims read tables it does not write: {unknown}")
        if bool(self.compute) != bool(self.draw) and self.figures:
            raise ValueError(f"{self.rule}: a generic step needs both compute and draw")

    @property
    def config_section(self) -> str:
        return self.section or self.stage

    @property
    def figure_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.figures)

    @property
    def directory(self) -> str:
        """The folder of its outputs under ``results/``."""
        if self.folder:
            return self.folder
        return {
            "pair": f"{self.stage}/{{model}}/{{dataset}}",
            "summary": f"summary/{self.stage}",
            "experiment": self.stage,
        }[self.level]


def _figures(stage: str, names: tuple[str, ...], suffix: str = "") -> tuple[Figure, ...]:
    """Figures whose captions follow the stage's file names: ``<stage>_<name><suffix>.rst``."""
    return tuple(Figure(name, f"{stage}_{name}{suffix}.rst") for name in names)


def _cost_figures(names: tuple[str, ...]) -> tuple[Figure, ...]:
    """Figures of the §7 costs: captions ``costs_<name>.rst``, labels from
    :data:`sinkscope.costs.names.FIGURE_LABELS`."""
    return tuple(Figure(n, f"costs_{n}.rst", costs_names.FIGURE_LABELS[n]) for n in names)


def _dynamics(part: str, priority: int) -> RuleOutputs:
    return RuleOutputs(
        rule=f"summarize_dynamics_{part}",
        stage="dynamics",
        level="experiment",
        priority=priority,
        category="Training dynamics (companion paper)",
        tables=dynamics_names.SUMMARY_TABLES[part],
        figures=_figures(f"dynamics_{part}", dynamics_names.FIGURES[part]),
        section=f"dynamics.{part}",
        folder=f"dynamics/{part}",
        subcategory=part.replace("_", "-"),
        claims={
            "value_softmax": {"dynamics_value_softmax_by_variant": "by_variant"},
            "induction": {"dynamics_induction_by_setup": "by_setup"},
            "classification": {"dynamics_classification_final": "final"},
        }[part],
    )


_HEADS = "Head classification"
_GEOMETRY = "Sink geometry"
_OVERSMOOTHING = "Oversmoothing"
_SINKS = "Sinks beyond BOS"
_STREAMING = "StreamingLLM caches"
_COSTS = "Costs of sinks vs diagonals (§7)"

#: Every registered rule, in the order of the ``all`` rule's targets. A new analysis adds its
#: entries here (docs/adding-an-analysis.md).
ENTRIES: tuple[RuleOutputs, ...] = (
    # head classification (paper §3)
    RuleOutputs(
        rule="classify_heads",
        stage="heads",
        level="pair",
        priority=100,  # the first table users wait for
        category=_HEADS,
        tables=heads_names.TABLES,
        figures=(
            Figure("mass_heatmaps", "head_mass_heatmaps.rst", "pattern masses"),
            Figure("class_map", "head_class_map.rst", "class map"),
        ),
        table_prefix="heads_",
    ),
    RuleOutputs(
        rule="summarize_heads",
        stage="heads",
        level="summary",
        priority=80,
        category=_HEADS,
        tables=(heads_names.SUMMARY, heads_names.SEQUENCE_MASSES),
        figures=(
            Figure(
                heads_names.SUMMARY,
                "head_classes_summary.rst",
                "head classes across models and datasets",
            ),
        ),
        pairs="all",  # the no-BOS pairs too: their rows stand beside the BOS ones
        folder="summary",
        claims={
            "head_classes": heads_names.SUMMARY,
            # the bootstrap of the head shares over sequences (heads.summary.share_intervals)
            "head_masses_by_sequence": heads_names.SEQUENCE_MASSES,
        },
    ),
    # sink geometry (paper §4 Prop. 4.1 and Fig. 1; §6 Prop. 6.1; App. E.2 Fig. 12)
    RuleOutputs(
        rule="analyze_geometry",
        stage="geometry",
        level="pair",
        priority=70,
        category=_GEOMETRY,
        tables=geometry_names.TABLES,
        figures=_figures("geometry", geometry_names.FIGURES),
    ),
    RuleOutputs(
        rule="analyze_geometry_long_context",
        stage="geometry",
        level="pair",
        priority=50,
        category=_GEOMETRY,
        tables=geometry_names.LONG_CONTEXT_TABLES,
        figures=_figures("geometry", geometry_names.LONG_CONTEXT_FIGURES),
        section="geometry.long_context",
        pairs="bos",  # it cuts its own streams, BOS first
    ),
    RuleOutputs(
        rule="summarize_geometry",
        stage="geometry",
        level="summary",
        priority=60,
        category=_GEOMETRY,
        tables=geometry_names.SUMMARY_TABLES,
        figures=_figures("geometry", geometry_names.FIGURES, "_summary"),
        pairs="bos",
        claims={
            "geometry_bos_alignment": "bos_alignment",
            "geometry_value_rank": "value_rank",
            "geometry_value_rank_by_sequence": "value_rank_by_sequence",
            "geometry_bos_value_norm_classes": "bos_value_norm_classes",
            "geometry_statements": "statements",
            # read by sinkscope.claims.observations and by the reasons of per-head checks
            # (sinkscope.claims.events)
            "geometry_bos_residual_norm": "bos_residual_norm",
            "geometry_value_rank_worst": "value_rank_worst",
        },
    ),
    # oversmoothing (paper §5, Theorem 5.1; App. E.1, Figs. 2 and 4-11)
    RuleOutputs(
        rule="analyze_oversmoothing",
        stage="oversmoothing",
        level="pair",
        priority=70,
        category=_OVERSMOOTHING,
        tables=oversmoothing_names.TABLES,
        figures=_figures("oversmoothing", oversmoothing_names.FIGURES),
    ),
    RuleOutputs(
        rule="summarize_oversmoothing",
        stage="oversmoothing",
        level="summary",
        priority=60,
        category=_OVERSMOOTHING,
        tables=oversmoothing_names.TABLES,
        figures=_figures("oversmoothing", oversmoothing_names.FIGURES, "_summary"),
        pairs="bos",
        claims={
            "oversmoothing_summary": "summary",
            "oversmoothing_per_head": "per_head",
            "oversmoothing_approximation_by_sequence": "approximation_by_sequence",
            "oversmoothing_layers_by_sequence": "layers_by_sequence",
            "oversmoothing_heads_by_sequence": "heads_by_sequence",
        },
    ),
    # sinks beyond BOS (Gu et al. 2025; Sun et al. 2024)
    RuleOutputs(
        rule="analyze_sinks",
        stage="sinks",
        level="pair",
        priority=55,
        category=_SINKS,
        tables=sinks_names.TABLES,
        figures=_figures("sinks", sinks_names.FIGURES),
    ),
    RuleOutputs(
        rule="summarize_sinks",
        stage="sinks",
        level="summary",
        priority=52,
        category=_SINKS,
        tables=sinks_names.SUMMARY_TABLES,
        figures=_figures("sinks", sinks_names.SUMMARY_FIGURES, "_summary"),
        pairs="bos",
        # read by the reasons of per-head checks (sinkscope.claims.events)
        claims={"sinks_massive_onset": "massive_onset"},
    ),
    # StreamingLLM caches (attention-sinks notes): three per-pair rules, so that neither a new
    # baseline nor a re-extraction re-runs the cache evaluation
    RuleOutputs(
        rule="analyze_streaming_first_positions",
        stage="streaming",
        level="pair",
        priority=50,
        category=_STREAMING,
        tables=streaming_names.FIRST_POSITION_TABLES,
        figures=_figures("streaming", streaming_names.FIRST_POSITION_FIGURES),
    ),
    RuleOutputs(
        rule="analyze_streaming",
        stage="streaming",
        level="pair",
        priority=40,
        category=_STREAMING,
        tables=streaming_names.POLICY_TABLES,
        figures=_figures("streaming", streaming_names.POLICY_FIGURES),
        pairs="cache",
    ),
    RuleOutputs(
        rule="analyze_streaming_recompute",
        stage="streaming",
        level="pair",
        priority=40,
        category=_STREAMING,
        tables=streaming_names.RECOMPUTE_TABLES,
        figures=_figures("streaming", streaming_names.RECOMPUTE_FIGURES),
        pairs="cache",
    ),
    RuleOutputs(
        rule="summarize_streaming",
        stage="streaming",
        level="summary",
        priority=40,
        category=_STREAMING,
        tables=streaming_names.SUMMARY_TABLES,
        figures=_figures("streaming", streaming_names.SUMMARY_FIGURES, "_summary"),
        pairs="cache",
        claims={"streaming_sink_heads": "sink_heads", "streaming_recompute": "recompute"},
    ),
    # §7 cost experiments (no model)
    RuleOutputs(
        rule="cost_toy",
        stage="costs",
        level="experiment",
        priority=0,
        category=_COSTS,
        tables=costs_names.TOY_TABLES,
        figures=_cost_figures(costs_names.TOY_FIGURES),
        claims={"costs_toy": "toy"},
    ),
    RuleOutputs(
        rule="summarize_backcopy",
        stage="costs",
        level="experiment",
        priority=10,
        category=_COSTS,
        tables=costs_names.BACKCOPY_TABLES,
        figures=_cost_figures(costs_names.BACKCOPY_FIGURES),
        claims={
            "costs_backcopy_runs": "backcopy_runs",
            "costs_backcopy_slopes": "backcopy_slopes",
        },
    ),
    RuleOutputs(
        rule="summarize_copypaste",
        stage="costs",
        level="experiment",
        priority=10,
        category=_COSTS,
        tables=costs_names.COPYPASTE_TABLES,
        figures=_cost_figures(costs_names.COPYPASTE_FIGURES),
        claims={"costs_copypaste_runs": "copypaste_runs"},
    ),
    RuleOutputs(
        rule="summarize_backcopy_e2e",
        stage="costs",
        level="experiment",
        priority=10,
        category=_COSTS,
        tables=costs_names.END_TO_END_TABLES,
        requires="costs.backcopy.end_to_end.T",
    ),
    # training dynamics of the companion paper (no model)
    _dynamics("value_softmax", 10),
    _dynamics("induction", 10),
    _dynamics("classification", 10),
    # new analyses: their entries go above this line (docs/adding-an-analysis.md)
)

#: The priority of the rules that write no registered table or figure: the model path users wait
#: for (prepare, tokenize, cut, extract) and the claims first, then the model-free runs, the
#: longest (1-3 minutes each) before the StreamingLLM pairs so that none of them is the last job
#: of a run.
PIPELINE_PRIORITY: dict[str, int] = {
    **dict.fromkeys(
        ("prepare_model", "prepare_corpus", "tokenize_corpus", "cut_tokens", "extract_activations"),
        90,
    ),
    # the long-context forward: as soon as the GPU is free, so the CPU solves can start
    "extract_long_context": 50,
    "claims": 60,
    **dict.fromkeys(("cost_backcopy_e2e", "cost_copypaste_run", "dynamics_induction_run"), 45),
    **dict.fromkeys(
        ("cost_backcopy_run", "dynamics_value_softmax_run", "dynamics_classification_run"), 0
    ),
}


def _index(entries: tuple[RuleOutputs, ...]) -> dict[str, RuleOutputs]:
    """The entries by rule name, checked: a rule registered once, and a claims key read from one
    rule only."""
    registry: dict[str, RuleOutputs] = {}
    claimed: dict[str, str] = {}
    for outputs in entries:
        if outputs.rule in registry or outputs.rule in PIPELINE_PRIORITY:
            raise ValueError(f"rule {outputs.rule!r} is registered twice")
        for key in outputs.claims:
            if key in claimed:
                raise ValueError(f"{outputs.rule}: claims key {key!r} is {claimed[key]}'s")
            claimed[key] = outputs.rule
        registry[outputs.rule] = outputs
    return registry


#: Every registered rule by name.
REGISTRY: dict[str, RuleOutputs] = _index(ENTRIES)


def entry(rule: str) -> RuleOutputs:
    """The registry entry of ``rule``; a rule that is not registered is named."""
    try:
        return REGISTRY[rule]
    except KeyError:
        raise KeyError(f"rule {rule!r} has no entry in sinkscope.outputs.REGISTRY") from None


def priority(rule: str) -> int:
    """The ``priority:`` of ``rule``: its registry entry's, or :data:`PIPELINE_PRIORITY`'s."""
    if rule in REGISTRY:
        return REGISTRY[rule].priority
    if rule in PIPELINE_PRIORITY:
        return PIPELINE_PRIORITY[rule]
    raise KeyError(f"rule {rule!r} has no priority: register it in sinkscope.outputs")


#: The stages, each with its rule file ``workflow/rules/<stage>.smk`` (included by the
#: ``Snakefile``).
STAGES: tuple[str, ...] = tuple(dict.fromkeys(e.stage for e in REGISTRY.values()))


def rule_runs(
    outputs: RuleOutputs,
    config: Mapping[str, Any],
    pair_sets: Mapping[str, Sequence[tuple[str, str]]],
) -> bool:
    """Whether the rule of ``outputs`` runs in ``config``: its section is enabled
    (:func:`sinkscope.config.analysis_runs`), its ``requires`` key holds a value, and its pair
    set (``pair_sets[outputs.pairs]``, e.g. the pairs under StreamingLLM's caches) has a pair, for
    a per-pair rule or a summary."""
    if outputs.config_section != ALWAYS and not analysis_runs(config, outputs.config_section):
        return False
    if outputs.requires:
        value: Any = config
        for key in outputs.requires.split("."):
            value = value.get(key) if isinstance(value, Mapping) else None
        if not value:
            return False
    return outputs.level == "experiment" or bool(pair_sets[outputs.pairs])
