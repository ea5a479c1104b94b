"""Job grids of the training-dynamics experiments, without torch (so the workflow parses fast).

The workflow parses these on every ``snakemake`` call (``workflow/rules/dynamics.smk``,
:func:`sinkscope.config.validate_config`), so this module imports nothing heavier than the
standard library: the specs' defaults (``VALUE_SOFTMAX_DEFAULTS``, ``PAPER_INDUCTION``,
``PAPER_CLASSIFICATION``), their validation, the stable run ids (which name the result folders)
and the ``*_grid(scale, overrides)`` builders. The training modules (:mod:`.value_softmax`,
:mod:`.induction`, :mod:`.classification`) re-export everything here under their old names.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sinkscope.dynamics.names import PARTS

__all__ = [
    "ATTENTION_FUNCTIONS",
    "ATTENTION_VARIANTS",
    "DEFAULT_SIZE",
    "DYNAMICS_PARTS",
    "DYNAMICS_RUNTIME_MIN",
    "INDUCTION_SINK_SEEDS",
    "LOSS_POSITIONS",
    "NO_SWITCH",
    "PAPER_CLASSIFICATION",
    "PAPER_INDUCTION",
    "POLARIZATION_SEEDS",
    "POSITIONAL",
    "SWITCHES",
    "VALUE_SOFTMAX_ACTIVATIONS",
    "VALUE_SOFTMAX_DEFAULTS",
    "VALUE_SOFTMAX_LOSSES",
    "classification_grid",
    "compared_for_sinks",
    "digest",
    "dynamics_jobs",
    "dynamics_minutes",
    "induction_grid",
    "induction_spec",
    "run_size",
    "select_specs",
    "value_softmax_grid",
    "value_softmax_spec",
    "variant_name",
]

#: The attention functions of Table 1 (companion paper).
ATTENTION_FUNCTIONS = ("softmax", "sigmoid", "elu", "elu_elu", "mlp", "linear")
#: The ``switch`` values of a softmax head of the induction model (§6,
#: :mod:`.switches`): ``"none"`` (Table 1's softmax) first.
SWITCHES = ("none", "sink_logit", "gate_head", "gate_element", "softpick", "kv_bias")
#: The ``switch`` of a head without another switch than its sink.
NO_SWITCH = SWITCHES[0]


def digest(values: Mapping[str, Any]) -> str:
    """8 hex digits of a mapping's sorted items: the size/override part of a job id."""
    return hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:8]


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def select_specs(
    specs: Sequence[dict],
    where: Mapping[str, Sequence[Any]],
    defaults: Mapping[str, Any] | None = None,
) -> list[dict]:
    """The specs whose value of every key in ``where`` (the spec's own, else ``defaults``') is one
    of the listed values (a config's ``select``); an unknown key, or a value no spec of the grid
    has (a typo, or a value of another scale), raises ``KeyError`` naming it."""
    defaults = defaults or {}
    known = set(defaults).union(*(spec.keys() for spec in specs))
    unknown = sorted(set(where) - known)
    if unknown:
        raise KeyError(f"select keys {unknown} are not spec keys; known: {sorted(known)}")
    for key, values in where.items():
        present = {_hashable(spec.get(key, defaults.get(key))) for spec in specs}
        absent = [v for v in values if _hashable(v) not in present]
        if absent:
            shown = sorted(map(str, present))
            raise KeyError(f"{key}: no job of the grid has {absent}; the grid has {shown}")
    return [
        spec
        for spec in specs
        if all(spec.get(k, defaults.get(k)) in list(v) for k, v in where.items())
    ]


# --------------------------------------------------------------------------- value-softmax model

VALUE_SOFTMAX_LOSSES = ("logistic", "square", "kl")
VALUE_SOFTMAX_ACTIVATIONS = ("softmax", "sum", "sigmoid", "sigmoid_norm")
#: Defaults of a value-softmax spec (:mod:`.value_softmax`, Theorem 3.3).
VALUE_SOFTMAX_DEFAULTS: dict[str, Any] = {
    "experiment": "untied",
    "loss": "logistic",
    "activation": "softmax",
    "n": 5,
    "d": 4,
    "kappa": 1.0,
    "target": 1.0,
    "kl_sharpness": 2.0,
    "lr": 0.05,
    "steps": 40_000,
    "init_v": 0.1,
    "init_a": 0.0,
    "n_snapshots": 120,
    "seed": 0,
}


def value_softmax_spec(spec: Mapping[str, Any]) -> dict:
    """``spec`` completed with :data:`VALUE_SOFTMAX_DEFAULTS`; ``ValueError`` on unknown values."""
    full = {**VALUE_SOFTMAX_DEFAULTS, **spec}
    if full["loss"] not in VALUE_SOFTMAX_LOSSES:
        raise ValueError(f"unknown loss {full['loss']!r}; expected one of {VALUE_SOFTMAX_LOSSES}")
    if full["activation"] not in VALUE_SOFTMAX_ACTIVATIONS:
        raise ValueError(
            f"unknown activation {full['activation']!r}; expected {VALUE_SOFTMAX_ACTIVATIONS}"
        )
    if full["experiment"] not in ("untied", "tied", "regression"):
        raise ValueError(f"unknown experiment {full['experiment']!r}")
    if full["experiment"] != "untied" and full["activation"] != "softmax":
        raise ValueError("only the untied model takes other activations than softmax")
    return full


def _value_softmax_with_id(spec: dict) -> dict:
    keys = ("experiment", "loss", "activation", "n", "d", "kappa", "target", "kl_sharpness", "seed")
    full = value_softmax_spec(spec)
    name = "-".join(f"{k}={full[k]}" for k in keys)
    extra = {k: v for k, v in spec.items() if k not in keys}
    if extra:
        name = f"{name}-{digest(extra)}"
    return {"id": name, **spec}


#: Seeds of the untied runs at every scale: the polarization claims decide a share of polarized
#: seeds on its Wilson interval, which needs at least 4 runs, all on one side, to exclude 0.5
#: (4 of 4: [0.51, 1]); five make the bound clearer (5 of 5: [0.57, 1]). One run against the
#: others' side (4 of 5: [0.38, 0.96]) leaves the row inconclusive.
POLARIZATION_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
#: The default induction grid's seeds for the setups of the claim dynamics.softmax_sinks_emerge
#: (softmax and the un-normalised variants, RoPE, both weight decays): the claim is read on the
#: range over the seeds, and one seed decides nothing. Three, as the paper's
#: Table 2 runs; the 24 added runs cost 46 CPU-minutes at the full offline scale (measured on a
#: 2-core AMD EPYC, 115 s a run on one core), and
#: the short run selects seed 0 (config.yaml).
INDUCTION_SINK_SEEDS: tuple[int, ...] = (0, 1, 2)


def compared_for_sinks(attention: str, normalize: bool, switch: str | None = None) -> bool:
    """Whether an induction setup is one the claim dynamics.softmax_sinks_emerge compares:
    softmax, or an attention function trained without normalisation, and no other switch (the
    one home of that choice: the grid's seeds, the check and the claim's power read it)."""
    return (switch in (None, NO_SWITCH)) and (attention == "softmax" or not normalize)


def _untied_specs(seed: int, slow: dict, fast: dict) -> list[dict]:
    """The untied runs of one seed: the losses (Figs. 2, 10) and activations (Fig. 13)."""
    specs: list[dict] = [{"experiment": "untied", "loss": "logistic", "seed": seed, **slow}]
    for target in (1.0, 5.0):
        specs.append(
            {"experiment": "untied", "loss": "square", "target": target, "seed": seed, **fast}
        )
    for sharp in (2.0, 8.0):
        specs.append(
            {"experiment": "untied", "loss": "kl", "kl_sharpness": sharp, "seed": seed, **slow}
        )
    for loss in ("square", "logistic"):
        for act in ("sum", "sigmoid"):
            specs.append(
                {
                    "experiment": "untied",
                    "loss": loss,
                    "activation": act,
                    "seed": seed,
                    **(slow if loss == "logistic" else fast),
                }
            )
    return specs


def value_softmax_grid(scale: str = "default", overrides: dict | None = None) -> list[dict]:
    """All value-softmax jobs of one scale, each a spec with a stable string ``id``.

    Experiments (``scale="default"``: seeds 0-1, the untied runs seeds 0-4
    (:data:`POLARIZATION_SEEDS`); ``"paper"``: seeds 0-4 and 4x the steps):

    * losses (Figs. 2, 10): untied softmax, ``n=5, d=4``: logistic; square with target
      ``y in {1, 5}``; KL with target sharpness ``{2, 8}``.
    * activations (Fig. 13): untied, loss in square (y=1) / logistic x activation in sum /
      sigmoid (softmax is shared with the losses experiment).
    * tied (Fig. 11): ``U softmax(U a)``, logistic, ``D in {2, 4, 8, 16}``.
    * regression (Figs. 3, 12): ``n=5, d=4``, ``||beta*|| = 5``, ``kappa in {1,...,5}``.

    Logistic and KL runs take 100k steps of 0.2 (time 2e4; polarization under the logistic
    loss is only logarithmic in time), square/regression runs 40k steps of 0.05 (time 2e3,
    converged to machine precision). Default: 63 jobs of 1-4 s each on one core.

    ``overrides`` (e.g. fewer ``steps``) are merged into every spec before its id is made; an
    unknown key raises ``KeyError``.
    """
    if scale not in ("default", "paper"):
        raise ValueError(f"unknown scale {scale!r}; expected 'default' or 'paper'")
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(VALUE_SOFTMAX_DEFAULTS))
    if unknown:
        raise KeyError(
            f"unknown value-softmax keys {unknown}; known: {sorted(VALUE_SOFTMAX_DEFAULTS)}"
        )
    seeds = [0, 1] if scale == "default" else [0, 1, 2, 3, 4]
    mult = 1 if scale == "default" else 4
    slow = {"lr": 0.2, "steps": 100_000 * mult}  # logistic / KL: polarization is logarithmic
    fast = {"lr": 0.05, "steps": 40_000 * mult}  # square / regression converge exactly
    specs: list[dict] = []
    for seed in sorted({*seeds, *POLARIZATION_SEEDS}):
        specs.extend(_untied_specs(seed, slow, fast))
        if seed not in seeds:  # the polarization claims' extra seeds: the untied runs only
            continue
        for D in (2, 4, 8, 16):
            specs.append(
                {"experiment": "tied", "loss": "logistic", "n": D, "d": D, "seed": seed, **slow}
            )
        for kappa in (1.0, 2.0, 3.0, 4.0, 5.0):
            specs.append(
                {
                    "experiment": "regression",
                    "loss": "square",
                    "kappa": kappa,
                    "target": 5.0,
                    "seed": seed,
                    **fast,
                }
            )
    out = [_value_softmax_with_id({**spec, **overrides}) for spec in specs]
    ids = [s["id"] for s in out]
    if len(set(ids)) != len(ids):
        raise ValueError("overrides made two value-softmax jobs identical")
    return out


# --------------------------------------------------------------------------- induction task

#: (attention, normalize) pairs of Table 1: softmax (always normalised) and both variants of others.
ATTENTION_VARIANTS: tuple[tuple[str, bool], ...] = (("softmax", True),) + tuple(
    (name, norm) for name in ATTENTION_FUNCTIONS[1:] for norm in (True, False)
)
POSITIONAL = ("none", "absolute", "rope")
LOSS_POSITIONS = ("all", "induction")

#: Table 2 (paper size) of the induction task (:mod:`.induction`).
PAPER_INDUCTION: dict[str, Any] = {
    "n_layers": 2,
    "hidden": 128,
    "ffn": 512,
    "n_heads": 8,
    "vocab": 50,
    "seq_len": 13,
    "n_train": 100_000,
    "n_eval": 1_000,
    "epochs": 10,
    "batch_size": 256,
    "lr": 1e-3,
    "use_layernorm": True,
    "use_mlp": True,
    "repeat_distinct": False,
    "attention": "softmax",
    "normalize": True,
    "positional": "absolute",
    "pos_init_std": 0.02,
    "weight_decay": 0.0,
    "loss_positions": "all",
    "seed": 0,
    "switch": SWITCHES[0],
    "threads": 1,
    "curve_every": 20,
}


def induction_spec(spec: Mapping[str, Any]) -> dict:
    """``spec`` completed with :data:`PAPER_INDUCTION` (softmax is always normalised);
    ``ValueError`` on unknown values."""
    full = {**PAPER_INDUCTION, **spec}
    if full["attention"] not in ATTENTION_FUNCTIONS:
        raise ValueError(f"unknown attention {full['attention']!r}")
    if full["positional"] not in POSITIONAL:
        raise ValueError(f"unknown positional encoding {full['positional']!r}")
    if full["attention"] == "softmax":
        full["normalize"] = True
    if full["switch"] not in SWITCHES:
        raise ValueError(f"switch: unknown {full['switch']!r}; expected one of {SWITCHES}")
    if full["switch"] != SWITCHES[0] and full["attention"] != "softmax":
        raise ValueError(
            f"switch: {full['switch']!r} gives a softmax head another switch; attention "
            f"{full['attention']!r} takes only switch {SWITCHES[0]!r}"
        )
    if full["loss_positions"] not in LOSS_POSITIONS:
        raise ValueError(f"loss_positions must be one of {LOSS_POSITIONS}")
    if full["hidden"] % full["n_heads"]:
        raise ValueError("hidden must be a multiple of n_heads")
    return full


def variant_name(attention: str, normalize: bool, switch: str = SWITCHES[0]) -> str:
    """``softmax`` or ``<attention>_norm`` / ``<attention>_raw`` (Table 1's two variants), and
    ``softmax+<switch>`` for a softmax head with another switch (:mod:`.switches`)."""
    if attention != "softmax":
        return f"{attention}_{'norm' if normalize else 'raw'}"
    return attention if switch == SWITCHES[0] else f"{attention}+{switch}"


def _induction_with_id(spec: dict) -> dict:
    """``spec`` with a stable ``id``: variant (with its switch), PE, lambda, seed, and a digest of
    everything else."""
    keys = ("attention", "normalize", "positional", "weight_decay", "seed", "switch")
    full = induction_spec(spec)
    name = "-".join(
        [
            variant_name(full["attention"], full["normalize"], full["switch"]),
            f"pe={full['positional']}",
            f"wd={full['weight_decay']}",
            f"seed={full['seed']}",
        ]
    )
    extra = {k: v for k, v in spec.items() if k not in keys and k != "id"}
    return {**spec, "id": f"{name}-{digest(extra)}"}


#: Default scale: 160,000 fresh sequences, 1 epoch, batch 64 (2,500 AdamW steps at lr 3e-3),
#: 2-3 min of CPU per run (one core of a 2-core Intel Xeon). Measured (module docstring of :mod:`.induction`): softmax / RoPE learns
#: in ~300 steps, mlp with normalisation only after ~1,800-2,200 (the 1,000 steps of the first
#: default left it on the bag-of-tokens plateau).
DEFAULT_SIZE: dict[str, Any] = {"n_train": 160_000, "epochs": 1, "batch_size": 64, "lr": 3e-3}


def induction_grid(scale: str = "default", overrides: dict | None = None) -> list[dict]:
    """Induction jobs, each a spec with a stable ``id`` (variant, PE, lambda, seed, size hash).

    * ``"paper"``: Table 2 size (100k sequences, 10 epochs, batch 256, lr 1e-3) over the full
      grid: 11 attention variants x PE in {none, absolute, rope} x lambda in {0, 0.2} x seeds
      {0, 1, 2} (198 jobs), and softmax with each other switch of :data:`SWITCHES` on the same
      PE x lambda x seeds (90 jobs).
    * ``"default"``: :data:`DEFAULT_SIZE` with seed 0 over 11 variants x lambda in {0, 0.2} with
      RoPE, the seeds :data:`INDUCTION_SINK_SEEDS` for softmax and the 5 un-normalised variants
      there (the claim ``dynamics.softmax_sinks_emerge`` is read against the spread over seeds),
      plus softmax x lambda x PE in {none, absolute} (50 jobs of 2-3 min on one core of the Intel Xeon), and
      softmax with each other switch x lambda with RoPE (10 jobs): every switch gets the budget
      and task of the softmax run it is compared with, and its seed 0 (the softmax reference
      has the sink claim's three seeds, the switches one: the switch claim decides nothing here).

    ``overrides`` (e.g. a smaller size) are merged into every spec before the id is made; an
    unknown key raises ``KeyError``.
    """
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(PAPER_INDUCTION))
    if unknown:
        raise KeyError(f"unknown induction keys {unknown}; known: {sorted(PAPER_INDUCTION)}")
    if scale == "paper":
        combos = [
            (att, norm, pe, wd, seed, SWITCHES[0])
            for att, norm in ATTENTION_VARIANTS
            for pe in POSITIONAL
            for wd in (0.0, 0.2)
            for seed in (0, 1, 2)
        ]
        combos += [
            ("softmax", True, pe, wd, seed, switch)
            for switch in SWITCHES[1:]
            for pe in POSITIONAL
            for wd in (0.0, 0.2)
            for seed in (0, 1, 2)
        ]
        size: dict[str, Any] = {}
    elif scale == "default":
        combos = [
            (att, norm, "rope", wd, seed, SWITCHES[0])
            for att, norm in ATTENTION_VARIANTS
            for wd in (0.0, 0.2)
            for seed in (INDUCTION_SINK_SEEDS if compared_for_sinks(att, norm) else (0,))
        ]
        combos += [
            ("softmax", True, pe, wd, 0, SWITCHES[0])
            for pe in ("none", "absolute")
            for wd in (0.0, 0.2)
        ]
        combos += [
            ("softmax", True, "rope", wd, 0, switch) for switch in SWITCHES[1:] for wd in (0.0, 0.2)
        ]
        size = {**DEFAULT_SIZE}
    else:
        raise ValueError(f"unknown scale {scale!r}; expected 'default' or 'paper'")
    specs = [
        _induction_with_id(
            {
                "attention": att,
                "normalize": norm,
                "positional": pe,
                "weight_decay": wd,
                "seed": seed,
                # a run without a switch keeps the spec (and id) it had before switches existed
                **({"switch": switch} if switch != SWITCHES[0] else {}),
                **size,
                **overrides,
            }
        )
        for att, norm, pe, wd, seed, switch in combos
    ]
    ids = [s["id"] for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("overrides made two induction jobs identical")
    return specs


# --------------------------------------------------------------------------- classification task

#: Table 3 (paper size) of the classification task (:mod:`.classification`).
PAPER_CLASSIFICATION: dict[str, Any] = {
    "n_layers": 1,
    "n_heads": 1,
    "hidden": 128,
    "ffn": 512,
    "vocab_size": 41,
    "seq_len": 11,
    "n_signal": 3,
    "n_train": 10_000,
    "n_eval": 1_000,
    "epochs": 10,
    "batch_size": 256,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "use_layernorm": True,
    "use_mlp": True,
    "n_attack": 200,
    "max_candidates": 400,
    "seed": 0,
    "threads": 1,
}


def classification_grid(scale: str = "default", overrides: dict | None = None) -> list[dict]:
    """Classification jobs with stable ids.

    * ``"default"``: Figure 21's panel (|V| = 41, no MLP, no LayerNorm), heads {1, 2, 4} x
      layers {1, 2} x seeds {0, 1, 2}, 5 epochs of 10,000 sequences (18 jobs of 20-40 s on one
      core; measured: the loss is below 1e-3 and the flip rate flat after 2 epochs).
    * ``"paper"``: |V| in {41, 81, 161} x MLP x LayerNorm x heads {1, 2, 4} x layers {1, 2} x
      seeds {0, 1, 2}, 10 epochs (216 jobs).

    ``overrides`` are merged into every spec before the id is made (unknown keys: ``KeyError``).
    """
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(PAPER_CLASSIFICATION))
    if unknown:
        raise KeyError(
            f"unknown classification keys {unknown}; known: {sorted(PAPER_CLASSIFICATION)}"
        )
    if scale == "default":
        combos = [(41, False, False, h, n, s) for h in (1, 2, 4) for n in (1, 2) for s in (0, 1, 2)]
        overrides = {"epochs": 5, **overrides}
    elif scale == "paper":
        combos = [
            (v, mlp, ln, h, n, s)
            for v in (41, 81, 161)
            for mlp in (True, False)
            for ln in (True, False)
            for h in (1, 2, 4)
            for n in (1, 2)
            for s in (0, 1, 2)
        ]
    else:
        raise ValueError(f"unknown scale {scale!r}; expected 'default' or 'paper'")
    specs = []
    for v, mlp, ln, h, n, s in combos:
        spec = {
            "vocab_size": v,
            "use_mlp": mlp,
            "use_layernorm": ln,
            "n_heads": h,
            "n_layers": n,
            "seed": s,
            **overrides,
        }
        name = "V={vocab_size}-mlp={mlp:d}-ln={ln:d}-H={n_heads}-L={n_layers}-seed={seed}".format(
            mlp=spec["use_mlp"], ln=spec["use_layernorm"], **spec
        )
        spec["id"] = f"{name}-{digest(overrides)}"
        specs.append(spec)
    ids = [s["id"] for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("overrides made two classification jobs identical")
    return specs


# --------------------------------------------------------------------------- the config section

#: The parts of the ``dynamics`` config section, in workflow order (named in :mod:`.names`).
DYNAMICS_PARTS = PARTS

#: Numeric spec keys that may be zero (``init_a``, ``target``: any sign); every other number of
#: a spec must be positive.
_ZERO_ALLOWED = frozenset({"seed", "weight_decay", "init_a", "target"})
_ANY_SIGN = frozenset({"init_a", "target"})


def check_override_values(overrides: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Each override has its default's type (bool, int, number, string) and a sensible sign:
    ``ValueError`` naming the key otherwise, at parse time instead of inside a training job.
    Unknown keys are left to the grid builders; string values to the ``*_spec`` checks."""
    for key, value in overrides.items():
        if key not in defaults:
            continue
        default = defaults[key]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise ValueError(
                f"{key}: {value!r} is not a {type(default).__name__} (default {default!r})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or key in _ANY_SIGN:
            continue
        if value < 0 or (value == 0 and key not in _ZERO_ALLOWED):
            bound = ">= 0" if key in _ZERO_ALLOWED else "> 0"
            raise ValueError(f"{key}: {value!r} must be {bound}")


_GRIDS = {
    "value_softmax": (value_softmax_grid, VALUE_SOFTMAX_DEFAULTS),
    "induction": (induction_grid, PAPER_INDUCTION),
    "classification": (classification_grid, PAPER_CLASSIFICATION),
}


#: Cluster runtime of one run in minutes, per part: (default scale, paper scale).
DYNAMICS_RUNTIME_MIN: dict[str, tuple[int, int]] = {
    "value_softmax": (5, 30),
    "induction": (10, 180),
    "classification": (10, 60),
}


def dynamics_minutes(section: Mapping[str, Any]) -> dict[str, int]:
    """Runtime (minutes, the ``runtime`` resource of one run at the first attempt) per part of a
    ``dynamics`` config section: :data:`DYNAMICS_RUNTIME_MIN` at the part's ``scale``."""
    return {
        part: DYNAMICS_RUNTIME_MIN[part][section.get(part, {}).get("scale", "default") == "paper"]
        for part in DYNAMICS_PARTS
    }


def dynamics_jobs(section: Mapping[str, Any]) -> dict[str, dict[str, dict]]:
    """``{part: {run id: spec}}`` of a config's ``dynamics`` section (one Snakemake job each).

    Each part ``{enabled, scale, overrides, select}`` is expanded by its ``*_grid(scale,
    overrides)`` and filtered by :func:`select_specs`; a disabled part (or section) has no jobs.
    Raises ``ValueError`` naming the dotted key on unknown keys or an empty selection.
    """
    jobs: dict[str, dict[str, dict]] = {part: {} for part in DYNAMICS_PARTS}
    if not section.get("enabled", True):
        return jobs
    for part in DYNAMICS_PARTS:
        entry = section.get(part, {})
        if not entry.get("enabled", True):
            continue
        grid, defaults = _GRIDS[part]
        try:
            check_override_values(entry.get("overrides") or {}, defaults)
            specs = grid(entry.get("scale", "default"), entry.get("overrides") or {})
        except (KeyError, ValueError) as error:
            raise ValueError(f"dynamics.{part}.overrides: {error}") from error
        try:
            specs = select_specs(specs, entry.get("select") or {}, defaults)
        except KeyError as error:
            raise ValueError(f"dynamics.{part}.select: {error}") from error
        if not specs:
            raise ValueError(
                f"dynamics.{part}.select: no job of the grid matches {entry['select']}"
            )
        jobs[part] = {spec["id"]: spec for spec in specs}
    return jobs


def _listed(values: Iterable[Any], one: str, many: str) -> str:
    ordered = sorted(set(values))
    return f"{one} {ordered[0]}" if len(ordered) == 1 else f"{many} {', '.join(map(str, ordered))}"


def _alternatives(values: Iterable[int]) -> str:
    """``"64"``, ``"64 or 128"``, ``"1, 2 or 4"``: the distinct values, thousands separated."""
    ordered = [f"{v:,}" for v in sorted(set(values))]
    return ordered[0] if len(ordered) == 1 else f"{', '.join(ordered[:-1])} or {ordered[-1]}"


def _counted(values: Iterable[int], unit: str) -> str:
    """``"1 layer"``, ``"1 or 2 layers"``: the distinct values with ``unit`` (singular for one)."""
    ordered = sorted(set(values))
    return f"{_alternatives(ordered)} {unit}{'' if ordered == [1] else 's'}"


def _model_and_task(part: str, full: Sequence[Mapping[str, Any]]) -> str:
    """The model shape, the task's sequences and the held-out set of induction / classification
    specs: every size the captions would otherwise hard-code."""
    model = (
        f"{_counted((f['n_layers'] for f in full), 'layer')} with "
        f"{_counted((f['n_heads'] for f in full), 'head')}, "
        f"hidden {_alternatives(f['hidden'] for f in full)}, "
        f"FFN {_alternatives(f['ffn'] for f in full)}"
    )
    if part == "induction":
        # BOS, m distinct tokens and their rotated repeat (:mod:`.induction`: m = (seq_len - 1) / 2)
        task = (
            f"sequences of {_alternatives(f['seq_len'] for f in full)} tokens (BOS, "
            f"{_alternatives((f['seq_len'] - 1) // 2 for f in full)} distinct tokens and their "
            f"rotated repeat) over a vocabulary of {_alternatives(f['vocab'] for f in full)}"
        )
    else:
        # CLS and seq_len - 1 content tokens, n_signal of them the label's signal tokens
        task = (
            f"sequences of CLS + {_alternatives(f['seq_len'] - 1 for f in full)} tokens "
            f"({_alternatives(f['n_signal'] for f in full)} signal tokens) over a vocabulary of "
            f"{_alternatives(f['vocab_size'] for f in full)}"
        )
    held_out = f"{_alternatives(f['n_eval'] for f in full)} held-out sequences"
    return f"models of {model}; {task}; evaluated on {held_out}"


def run_size(part: str, specs: Iterable[Mapping[str, Any]]) -> str:
    """The size of one part's runs in words, read off the specs the runs are made from
    (:func:`dynamics_jobs`), for the figure captions (the summary rules' ``run_size`` param):
    never a number of another scale, and the one place the captions take a run size from.

    Induction and classification: the model (layers, heads, hidden and FFN width), the task's
    sequences (length, vocabulary; classification: signal tokens), the held-out sequences,
    sequences x epochs in batches (the AdamW steps, ``epochs x ceil(n_train / batch_size)`` as
    the training loops take them), seeds, for induction the grid's attention functions,
    positional encodings and weight decays, and for classification the attacked sequences per
    run; value-softmax: steps of each step size and seeds."""
    if part not in _GRIDS:
        raise ValueError(f"unknown dynamics part {part!r}; known: {sorted(_GRIDS)}")
    complete = {
        "value_softmax": value_softmax_spec,
        "induction": induction_spec,
        "classification": lambda spec: {**PAPER_CLASSIFICATION, **spec},
    }[part]
    full = [complete({k: v for k, v in spec.items() if k != "id"}) for spec in specs]
    if not full:
        return "no runs"
    runs = f"{len(full)} run{'s' if len(full) != 1 else ''}"
    seeds = _listed((f["seed"] for f in full), "seed", "seeds")
    if part == "value_softmax":
        schedules = sorted({(f["steps"], f["lr"]) for f in full}, reverse=True)
        steps = " and ".join(f"{n:,} steps of {lr:g}" for n, lr in schedules)
        return f"{runs}: {steps} (gradient descent), {seeds}"
    sizes = sorted({(f["n_train"], f["epochs"], f["batch_size"], f["lr"]) for f in full})
    parts = []
    for n_train, epochs, batch, lr in sizes:
        steps = epochs * math.ceil(n_train / batch)
        parts.append(
            f"{n_train:,} sequences x {epochs} epoch{'s' if epochs != 1 else ''} in batches of "
            f"{batch} ({steps:,} AdamW steps at lr {lr:g})"
        )
    text = f"{runs}: {_model_and_task(part, full)}; trained on {'; '.join(parts)}; {seeds}"
    if part == "induction":  # the grid's axes: what the figures' cells and panels are
        variants = sorted(
            {variant_name(f["attention"], f["normalize"], f["switch"]) for f in full},
            key=lambda v: (v != "softmax", v),
        )
        text += (
            f"; attention functions {', '.join(variants)}; "
            f"{_listed((f['positional'] for f in full), 'positional encoding', 'positional encodings')}; "
            f"{_listed((f['weight_decay'] for f in full), 'weight decay', 'weight decays')}"
        )
    if part == "classification":
        attacks = sorted({f["n_attack"] for f in full})
        text += f", up to {' or '.join(map(str, attacks))} attacked sequences per run"
    return text
