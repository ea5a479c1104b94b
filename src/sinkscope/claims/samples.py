"""What sample decides each claim (power): the sampling unit its interval or reading
rests on and the config keys that set how many of them a run has.

:func:`sample_lines` states them with the values of the run's config, so ``claims.md`` says, per
claim, on how much data this run decided it (the short run's ``config.yaml`` and the full
offline scale differ exactly in these keys). An inconclusive row says, besides, about how many
more units would decide it (:func:`sinkscope.stats.intervals.needed_units`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from sinkscope.dynamics.grids import POLARIZATION_SEEDS

__all__ = [
    "SAMPLES",
    "Power",
    "Sample",
    "config_value",
    "power_of",
    "power_table",
    "power_text",
    "sample_lines",
    "unanimous_runs_needed",
]


class Power(NamedTuple):
    """How many sampling units a config gives a claim (``have``) against how many its verdict
    needs (``need``), in ``units``. ``have`` None: the count is fixed by the model (its heads),
    not by the config, so every scale has it."""

    have: int | None
    need: int
    units: str

    @property
    def enough(self) -> bool:
        return self.have is None or self.have >= self.need


class Sample(NamedTuple):
    """The sampling unit of a claim, the config keys that set its count and, where a verdict
    needs a least count of units, how to read it off a validated config (``power``; None: a
    closed form or a deterministic optimum, which any scale decides)."""

    unit: str
    keys: tuple[str, ...] = ()
    power: Callable[[Mapping[str, Any]], Power] | None = None


def unanimous_runs_needed(level: float = 0.95, majority: float = 0.5) -> int:
    """The fewest runs whose unanimous share (n of n) has a Wilson interval at ``level``
    excluding ``majority`` (the tolerance ``claims.dynamics.majority``): the least seeds of a
    polarization claim (:func:`sinkscope.stats.intervals.wilson_interval`)."""
    from sinkscope.stats.intervals import wilson_interval

    n = 1
    while wilson_interval(n, n, level)[0] <= majority:
        n += 1
    return n


#: The fewest sampling units an interval from their spread needs (one unit has no spread):
#: :func:`sinkscope.stats.intervals.bootstrap_t_interval` widens its interval by Student's t at
#: every count above it instead of asking for a floor.
MIN_INTERVAL_UNITS = 2


def _sequences(config: Mapping[str, Any]) -> Power:
    return Power(
        int(config["extraction"]["n_sequences"]), MIN_INTERVAL_UNITS, "sequences per dataset"
    )


def _no_bos_sequences(config: Mapping[str, Any]) -> Power:
    # the no-BOS pairs exist only for a corpus with ``bos: both`` (sinkscope.variants)
    paired = any(
        (spec or {}).get("bos") == "both" for spec in (config.get("datasets") or {}).values()
    )
    n = int(config["extraction"]["n_sequences"]) if paired else 0
    return Power(n, MIN_INTERVAL_UNITS, "sequences per dataset with and without BOS")


def _any_sequence(config: Mapping[str, Any]) -> Power:
    # a universal claim: one counterexample refutes it, and a sample of any size bounds the
    # unseen share (about 3 / N)
    return Power(int(config["extraction"]["n_sequences"]), 1, "sequences per dataset")


def _heads(config: Mapping[str, Any]) -> Power:
    return Power(None, 1, "the model's heads")


def _heads_resampled(config: Mapping[str, Any]) -> Power:
    # a bootstrap over heads: every head, and each BOS-mass end's heads for the ratio
    return Power(None, MIN_INTERVAL_UNITS, "heads of the model at each BOS-mass end")


def _long_context(config: Mapping[str, Any]) -> Power:
    long_context = config["geometry"]["long_context"]
    return Power(int(long_context["n_sequences"]), 1, "long-context sequences per dataset")


def _recomputed(config: Mapping[str, Any]) -> Power:
    from sinkscope.config import streaming_params

    params = streaming_params(config)
    return Power(int(params["recompute_samples"]), MIN_INTERVAL_UNITS, "re-computed queries")


def _blocks(config: Mapping[str, Any]) -> Power:
    # the evicting positions of the largest window: after the window's first position (the
    # window and BOS) to the stream's end (sinkscope.streaming.summary.eviction_excess)
    from sinkscope.config import streaming_params

    params = streaming_params(config)
    scored = int(params["stream_length"]) - max(int(w) for w in params["window_sizes"]) - 1
    block = int(config["claims"]["intervals"]["block_tokens"])
    return Power(
        max(scored, 0) // block,
        MIN_INTERVAL_UNITS,
        "blocks of scored positions at the largest window (more at smaller ones)",
    )


def _fewest_seeds(
    specs: Iterable[Mapping[str, Any]], setup: Callable[[Mapping[str, Any]], Any]
) -> int:
    """The fewest seeds any one setup of ``specs`` runs (0 without specs)."""
    seeds: dict[Any, set[Any]] = {}
    for spec in specs:
        seeds.setdefault(setup(spec), set()).add(spec["seed"])
    return min((len(s) for s in seeds.values()), default=0)


def _without_seed(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in spec.items() if k not in ("seed", "id")))


def _polarization_seeds(config: Mapping[str, Any]) -> Power:
    """The fewest seeds of an untied value-softmax variant against the fewest whose unanimous
    share excludes the majority at the config's ``claims.intervals.level``."""
    claims = config["claims"]
    need = unanimous_runs_needed(
        float(claims["intervals"]["level"]), float(claims["dynamics"]["majority"])
    )
    # the polarization claims read the untied runs
    return _dynamics_seeds("value_softmax", need, lambda s: s.get("experiment") == "untied")(config)


def _dynamics_seeds(
    part: str, need: int, keep: Callable[[Mapping[str, Any]], bool] = lambda spec: True
) -> Callable[[Mapping[str, Any]], Power]:
    """The fewest seeds of the setups of ``part`` that the claim reads (``keep``)."""

    def power(config: Mapping[str, Any]) -> Power:
        from sinkscope.dynamics.grids import dynamics_jobs, value_softmax_spec

        complete = {"value_softmax": value_softmax_spec}.get(part, dict)  # the defaults filled in
        specs = [complete(s) for s in dynamics_jobs(config["dynamics"])[part].values() if keep(s)]
        return Power(_fewest_seeds(specs, _without_seed), need, "seeds per setup")

    return power


def _softmax_sinks_seeds(config: Mapping[str, Any]) -> Power:
    """The fewest seeds of the runs dynamics.softmax_sinks_emerge compares: softmax and the
    un-normalised variants without another switch, at each (positional encoding, weight decay)
    where both ran (elsewhere the check has nothing to compare and is not applicable)."""
    from sinkscope.dynamics.grids import compared_for_sinks, dynamics_jobs

    runs = [
        spec
        for spec in dynamics_jobs(config["dynamics"])["induction"].values()
        if compared_for_sinks(spec["attention"], spec["normalize"], spec.get("switch"))
    ]
    setups: dict[tuple[Any, Any], set[bool]] = {}
    for spec in runs:
        setups.setdefault((spec["positional"], spec["weight_decay"]), set()).add(
            spec["attention"] == "softmax"
        )
    compared = {setup for setup, kinds in setups.items() if kinds == {True, False}}
    have = _fewest_seeds(
        (s for s in runs if (s["positional"], s["weight_decay"]) in compared), _without_seed
    )
    return Power(have, 2, "seeds per setup")


def power_of(claim_id: str, config: Mapping[str, Any]) -> Power | None:
    """The :class:`Power` of ``claim_id`` under a validated ``config`` (None: no sample)."""
    sample = SAMPLES[claim_id]
    return None if sample.power is None else sample.power(config)


_SEQUENCES = ("extraction.n_sequences",)
_HEAD_SHARES = Sample(
    "the extraction's sequences per pair (bootstrap-SE t-interval; a pooled row resamples "
    "each dataset's own)",
    _SEQUENCES,
    _sequences,
)
_HEAD_DIFFERENCES = Sample(
    "the extraction's sequences per pair: a bootstrap over them of the mean over the model's "
    "heads, each head's value the mean over the drawn sequences, at the largest T' (a pooled row "
    "resamples each dataset's own)",
    (*_SEQUENCES, "oversmoothing.context_lengths"),
    _sequences,
)
_PREDICTIONS = Sample(
    "the non-sink heads of the model (Wilson / Newcombe intervals over heads), at the largest T'",
    ("oversmoothing.context_lengths",),
    _heads,
)
_POLARIZATION = Sample(
    "gradient-flow runs per variant, one per seed (Wilson interval over them; the untied runs "
    f"have the {len(POLARIZATION_SEEDS)} seeds of dynamics.grids.POLARIZATION_SEEDS, of which "
    "a unanimous share excludes 0.5)",
    ("dynamics.value_softmax.select",),
    _polarization_seeds,
)
_INDUCTION = (
    "induction runs per setup (one per seed: the range over the seeds decides, so one seed "
)
_INDUCTION_KEYS = ("dynamics.induction.select", "dynamics.induction.overrides")
_BACKCOPY = Sample(
    "backcopy runs per pattern over T and seeds", ("costs.backcopy.T", "costs.backcopy.seeds")
)
_COPYPASTE = Sample(
    "copy-paste runs per pattern over dormant tokens and delta",
    ("costs.copypaste.n_dormant", "costs.copypaste.delta"),
)

#: Claim id -> its :class:`Sample` (every claim of :data:`sinkscope.claims.registry.CLAIMS`).
SAMPLES: dict[str, Sample] = {
    "heads.sinks_common": _HEAD_SHARES,
    "heads.diagonals_exist_rarer": _HEAD_SHARES,
    "heads.diagonal_fraction": _HEAD_SHARES,
    "heads.sink_prev_fraction": _HEAD_SHARES,
    "geometry.bos_cosine_below_zero": Sample(
        "the extraction's sequences (the largest cosine over them, per middle layer: a "
        "universal claim, refuted by one cosine at the bound; without one, fewer than about "
        "3 / N of all sequences could hold one, the exact bound the row states)",
        _SEQUENCES,
        _any_sequence,
    ),
    "geometry.sink_representable": Sample(
        "points of the long-context sequences (more than d_model for the test to be able to "
        "fail, about 2.5 x d_model so that random points fail it: Wendel's probability and a "
        "Gaussian null of the same size decide whether chance would pass too; a solve left "
        "undecided by its time budget makes it inconclusive)",
        (
            "geometry.long_context.n_sequences",
            "geometry.long_context.seq_len",
            "geometry.long_context.points_per_dim",
            "geometry.long_context.solve_seconds",
        ),
        _long_context,
    ),
    "geometry.value_rank_full": Sample(
        "the extraction's sequences per pair: a bootstrap over them of the lowest middle-layer "
        "median of the value ranks per (layer, kv head, sequence) (a pooled row resamples each "
        "dataset's own)",
        _SEQUENCES,
        _sequences,
    ),
    "geometry.sink_bos_value_small": Sample(
        "the model's heads pooled over datasets (bootstrap over heads; the high / low BOS-mass "
        "ratio's t counts the fewer distinct heads of its two ends); fixed by the model",
        (),
        _heads_resampled,
    ),
    "oversmoothing.approximation_every_head": Sample(
        "the extraction's sequences per pair: a bootstrap over them of the largest error over "
        "every head, each resample recomputing rho and rho_hat from its sequences (a pooled "
        "row resamples each dataset's own), at the largest T'",
        (*_SEQUENCES, "oversmoothing.context_lengths"),
        _sequences,
    ),
    "oversmoothing.approximation_most_heads": Sample(
        "the model's heads (Wilson interval over the heads, each counted once when datasets "
        "are pooled) and the extraction's sequences each head's error is read on (a bootstrap "
        "over them of the share, each resample recomputing rho and rho_hat), at the largest T'; "
        "both must decide",
        (*_SEQUENCES, "oversmoothing.context_lengths"),
        _sequences,
    ),
    "oversmoothing.approximation_mean": Sample(
        "the extraction's sequences per pair: a bootstrap over them of the head-averaged curves' "
        "largest gap over their range across T', each resample recomputing every head's rho and "
        "rho_hat at every T' (a pooled row resamples each dataset's own)",
        (*_SEQUENCES, "oversmoothing.context_lengths"),
        _sequences,
    ),
    "oversmoothing.w_decreases": _HEAD_DIFFERENCES,
    "oversmoothing.attention_raises": _HEAD_DIFFERENCES,
    "oversmoothing.dense_heads_raise_more": _HEAD_DIFFERENCES,
    "oversmoothing.uniform_raises_more": _HEAD_DIFFERENCES,
    "oversmoothing.condition_i_half": _PREDICTIONS,
    "oversmoothing.condition_ii_few": _PREDICTIONS,
    "oversmoothing.predicted_signs": _PREDICTIONS,
    "oversmoothing.similarity_positive": Sample(
        "the extraction's sequences per pair: a bootstrap over them of the smallest layer rho "
        "over layers and T' (a pooled row resamples each dataset's own)",
        (*_SEQUENCES, "oversmoothing.context_lengths"),
        _sequences,
    ),
    "costs.backcopy_slopes": _BACKCOPY,
    "costs.backcopy_sink_cheaper": _BACKCOPY,
    "costs.copypaste_trends": _COPYPASTE,
    "costs.theorem_d1_bounds": _COPYPASTE,
    "streaming.eviction_hurts": Sample(
        "scored positions of the streams (moving-block bootstrap)",
        (
            "streaming.params.n_streams",
            "streaming.params.stream_length",
            "claims.intervals.block_tokens",
        ),
        _blocks,
    ),
    "streaming.first_token_sink": Sample(
        "the extraction's sequences of a corpus, the same with and without BOS (simultaneous "
        "per-head intervals of BOS mass over them bound the no-BOS / BOS sink-share ratio; only "
        "corpora with `bos: both` have them)",
        _SEQUENCES,
        _no_bos_sequences,
    ),
    "streaming.sinks_restore": Sample(
        "re-computed queries per window (Fieller's interval of the recovered fraction over them)",
        ("streaming.params.recompute_samples", "streaming.params.n_streams"),
        _recomputed,
    ),
    "dynamics.logistic_polarizes": _POLARIZATION,
    "dynamics.square_no_polarization": _POLARIZATION,
    "dynamics.unnormalized_no_polarization": _POLARIZATION,
    "dynamics.softmax_sinks_emerge": Sample(
        _INDUCTION + "decides nothing) and their layer-2 heads: softmax and the un-normalised "
        "variants",
        _INDUCTION_KEYS,
        _softmax_sinks_seeds,
    ),
    "dynamics.other_switch_replaces_sink": Sample(
        _INDUCTION + "decides nothing) and their layer-2 heads: softmax with each other switch",
        _INDUCTION_KEYS,
        _dynamics_seeds("induction", 2, lambda s: "switch" in s),
    ),
    "dynamics.flip_rate_decreases": Sample(
        "attacked sequences per run (Newcombe) and training seeds (bootstrap over seeds; one "
        "seed decides nothing)",
        ("dynamics.classification.select",),
        _dynamics_seeds("classification", 2),
    ),
}


def config_value(config: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` in a validated ``config``; ``streaming.params.*`` over
    :data:`sinkscope.defaults.STREAMING_PARAMS`; ``"default"`` for a key the config leaves to
    its code's defaults (an empty ``select``, for example)."""
    from sinkscope.config import streaming_params

    if key.startswith("streaming.params."):
        return streaming_params(config).get(key.removeprefix("streaming.params."), "default")
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return "default"
        node = node[part]
    return node if node not in ({}, None) else "default"


def power_text(power: Power | None) -> str:
    """What a claim's verdict needs and whether a config gives it, in words."""
    if power is None:
        return "no sample: a closed form or a deterministic optimum decides it at any scale"
    if power.have is None:
        floor = f"; {power.need} or more, else inconclusive" * (power.need > 1)
        return f"decided on {power.units}, the same at every scale{floor}"
    if power.have == 0:
        return f"needs {power.need} {power.units}, none run (not applicable)"
    verdict = "enough" if power.enough else "too few: its rows are inconclusive"
    return f"needs {_needs(power)}, has {power.have} ({verdict})"


def _needs(power: Power) -> str:
    return f"{power.need} {power.units}" if power.need > 1 else f"1 or more {power.units}"


def sample_lines(config: Mapping[str, Any], claim_ids: list[str]) -> list[str]:
    """One Markdown bullet per claim: its sampling unit, the run's values of the keys that set
    its count, and how many units its verdict needs against how many this run has
    (:func:`power_of`)."""
    lines = []
    for claim_id in claim_ids:
        sample = SAMPLES[claim_id]
        values = ", ".join(f"`{key}` = {config_value(config, key)}" for key in sample.keys)
        lines.append(
            f"- `{claim_id}`: {sample.unit}"
            + (f"; this run: {values}" if values else "")
            + f"; {power_text(power_of(claim_id, config))}"
        )
    return lines


def power_table(configs: Mapping[str, Mapping[str, Any]], claim_ids: Iterable[str]) -> str:
    """A Markdown table, one row per claim: what its verdict needs, and what each named validated
    config gives it: which scale decides which claim."""
    names = list(configs)
    lines = [
        "| claim | needs | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for claim_id in claim_ids:
        powers = [power_of(claim_id, config) for config in configs.values()]
        first = next((p for p in powers if p is not None), None)
        if first is None:
            needs, cells = "no sample (closed form or deterministic optimum)", ["any"] * len(names)
        elif first.have is None:
            needs = _needs(first) if first.need > 1 else first.units
            cells = ["any"] * len(names)
        else:
            needs = _needs(first)
            cells = [
                "not run" if p.have == 0 else f"{p.have}" + ("" if p.enough else " (too few)")
                for p in powers
                if p is not None
            ]
        lines.append(f"| `{claim_id}` | {needs} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
