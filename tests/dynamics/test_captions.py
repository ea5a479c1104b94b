"""Captions from the run: every run size a figure caption states (steps, epochs, sequences,
seeds, streams, tokens, T', the model's layers, heads, hidden and FFN width, batch, vocabulary)
comes from the config that made the figure, never from a literal in ``workflow/report/*.rst``.

* The training-dynamics summary rules pass ``run_size`` (:func:`sinkscope.dynamics.grids.run_size`,
  read off the grid the config builds) and the captions print it; rendered here for the tiny,
  the default and the paper config as ``snakemake --report`` renders them (Jinja over the rule's
  params and config), a caption's run sizes must be those of its ``run_size``.
* Every other caption takes its sizes from ``snakemake.config``: rendered with the validated
  config (and a pair's wildcards), its run sizes must be the config's.
* In the raw text of every caption a literal run size is an error, unless it lies inside one of
  the paper quotes of :data:`PAPER_QUOTES` (each with its source).
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest

from sinkscope.config import load_layered_config, validate_config
from sinkscope.dynamics.grids import dynamics_jobs, run_size
from sinkscope.dynamics.names import FIGURES as DYNAMICS_FIGURES
from tests.conftest import REPO, TINY

CAPTIONS = REPO / "workflow" / "report"
CONFIGS = {
    "tiny": [TINY],
    "default": [REPO / "config.yaml"],
    "paper": [REPO / "config" / "paper.yaml"],
}

#: a count: 7, 1000 or 1,000; not the digits of a decimal (0.02, 2.5) nor an index ("layer-2",
#: "§3")
_NUM = r"(?<![\w.,§-])(?:\d{1,3}(?:,\d{3})+|\d+)(?![.,]?\d)"
#: one count or a list of them: "64", "1 or 2", "1, 2 or 4", "1- or 2-"
_NUMS = rf"{_NUM}(?:(?:-?,\s+{_NUM})*-?\s+(?:or|and)\s+{_NUM})?"
#: words between a count and its unit that name which of them ("64 held-out sequences")
_QUALIFIERS = "held-out|evaluation|eval|attacked|signal|neutral|distinct|content|training|AdamW"
_SUFFIXED = re.compile(
    rf"(?P<nums>{_NUMS})(?:[\s-]+(?P<qual>{_QUALIFIERS}))?[\s-]+"
    r"(?P<unit>steps?|epochs?|sequences?|seeds?|streams?|tokens?|layers?|heads?)\b"
)
#: sizes whose name comes first: "hidden 128", "batch 256", "batches of 64", "T' = 512"
_PREFIXED = {
    "hidden": re.compile(rf"\bhidden(?:\s+size|\s+width)?\s+(?P<nums>{_NUMS})"),
    "FFN": re.compile(rf"\bFFN(?:\s+width)?\s+(?P<nums>{_NUMS})"),
    "batch": re.compile(rf"\bbatch(?:es\s+of|\s+size)?\s+(?P<nums>{_NUMS})"),
    "vocabulary": re.compile(rf"\bvocabulary(?:\s+of|\s+size)?\s+(?P<nums>{_NUMS})"),
    "T'": re.compile(rf"\bT\s*['′]\s*=\s*(?P<nums>{_NUMS})(?!\s*x\b)"),
    "seeds": re.compile(r"\bseed (?P<one>\d+) only\b"),
}
_UNIT = {"evaluation": "held-out", "eval": "held-out", "training": "", "AdamW": ""}

#: Quotes of the papers' (and models') sizes that a caption may state beside its run's own, each
#: with its source: a literal run size anywhere else in a caption is an error. The quotes of the
#: companion paper's Tables 2 and 3 are checked against PAPER_INDUCTION / PAPER_CLASSIFICATION
#: (:func:`test_paper_quotes_are_the_papers_tables`).
PAPER_QUOTES: dict[str, tuple[str, str | None]] = {
    "Table 2 trains 10 epochs of 100,000 sequences at batch 256": (
        "companion paper, Table 2 (induction task)",
        "induction",
    ),
    "Table 2 (10 epochs of 100,000 sequences at batch 256, lr 1e-3)": (
        "companion paper, Table 2 (induction task)",
        "induction",
    ),
    "Table 3 trains 10 epochs": (
        "companion paper, Table 3 (classification task)",
        "classification",
    ),
    "Figure 5 shows a 1-layer 1-head classifier": ("companion paper, Figure 5", None),
    "the paper's Figure 7 uses T' = 512": ("sink vs. diagonal paper, Figure 7", None),
    "Gemma 3's own 512-token sliding-window layers": (
        "Gemma 3 architecture (sliding window of its local layers): a model property",
        None,
    ),
}


def run_sizes(text: str) -> list[tuple[int, str, tuple[int, int]]]:
    """The run sizes stated in ``text``: ``(number, unit, span)``, one per number of a list
    ("1 or 2 layers" is two); "seed 0 only" is ``(1, "seeds")``."""
    found = []
    for match in _SUFFIXED.finditer(text):
        unit = match["unit"].rstrip("s") + "s"
        qualifier = _UNIT.get(match["qual"], match["qual"]) if match["qual"] else ""
        unit = f"{qualifier} {unit}".strip()
        for number in re.findall(_NUM, match["nums"]):
            found.append((int(number.replace(",", "")), unit, match.span()))
    for unit, pattern in _PREFIXED.items():
        for match in pattern.finditer(text):
            if "one" in match.groupdict():
                found.append((1, unit, match.span()))
                continue
            for number in re.findall(_NUM, match["nums"]):
                found.append((int(number.replace(",", "")), unit, match.span()))
    return sorted(found, key=lambda f: f[2])


def quoted(text: str, span: tuple[int, int]) -> bool:
    """Whether ``span`` of ``text`` lies inside one of the :data:`PAPER_QUOTES`."""
    for quote in PAPER_QUOTES:
        for match in re.finditer(re.escape(quote), text):
            if match.start() <= span[0] and span[1] <= match.end():
                return True
    return False


def unquoted_sizes(text: str) -> list[tuple[int, str]]:
    """The run sizes of ``text`` outside the paper quotes."""
    return [(n, unit) for n, unit, span in run_sizes(text) if not quoted(text, span)]


def flat(text: str) -> str:
    return " ".join(text.split())


def load(scale: str) -> dict[str, Any]:
    return validate_config(load_layered_config(CONFIGS[scale]))


def rendered_captions(configfiles: list[Path]) -> dict[str, tuple[str, str]]:
    """``{caption file: (rendered text, run_size)}`` of every dynamics figure of the config."""
    config = validate_config(load_layered_config(configfiles))
    jobs = dynamics_jobs(config["dynamics"])
    out = {}
    for part, names in DYNAMICS_FIGURES.items():
        if not jobs[part]:
            continue
        size = run_size(part, jobs[part].values())
        smk = SimpleNamespace(config=config, params=SimpleNamespace(run_size=size))
        for name in names:
            path = CAPTIONS / f"dynamics_{part}_{name}.rst"
            text = jinja2.Template(path.read_text(), undefined=jinja2.StrictUndefined).render(
                snakemake=smk
            )
            out[path.name] = (flat(text), size)
    return out


def config_sizes(config: dict[str, Any]) -> set[tuple[int, str]]:
    """The run sizes the config sets for the captions outside the dynamics stage: N sequences of
    T tokens (extraction), the long-context sequences and T' (geometry.long_context) and the
    context lengths T' (oversmoothing, at most the extraction's T)."""
    extraction, long = config["extraction"], config["geometry"]["long_context"]
    lengths = config["oversmoothing"]["context_lengths"]
    sizes = {
        (extraction["n_sequences"], "sequences"),
        (extraction["context_length"], "tokens"),
        (long["n_sequences"], "sequences"),
        (min(max(lengths), extraction["context_length"]), "T'"),
        *((length, "T'") for length in lengths),
    }
    if long["seq_len"] != "auto":
        sizes |= {(long["seq_len"] - 1, "tokens"), (long["seq_len"] - 1, "T'")}
    return sizes


@pytest.mark.parametrize("scale", sorted(CONFIGS))
def test_captions_state_the_run_size_of_their_config(scale: str) -> None:
    """A dynamics caption rendered for a config states no run size but its ``run_size``'s and the
    paper quotes: the tiny run's 64 held-out sequences and hidden 32, not Table 2's 1,000 and
    128."""
    captions = rendered_captions(CONFIGS[scale])
    assert captions
    contradictions = {}
    for name, (text, size) in captions.items():
        allowed = {(n, unit) for n, unit, _ in run_sizes(size)}
        wrong = [found for found in unquoted_sizes(text) if found not in allowed]
        if wrong:
            contradictions[name] = wrong
    assert not contradictions, contradictions
    # the run size is printed where a caption names the runs' size
    stating = [name for name, (text, size) in captions.items() if size in text]
    assert len(stating) >= 5, sorted(captions)


@pytest.mark.parametrize("scale", sorted(CONFIGS))
def test_config_captions_state_the_run_size_of_their_config(scale: str) -> None:
    """Every caption outside the dynamics stage (they read only ``snakemake.config`` and a pair's
    wildcards), rendered with the validated config, states the config's run sizes only."""
    config = load(scale)
    smk = SimpleNamespace(
        config=config,
        wildcards=SimpleNamespace(model=next(iter(config["models"])), dataset="d"),
    )
    allowed = config_sizes(config)
    contradictions, stating = {}, []
    for path in sorted(CAPTIONS.glob("*.rst")):
        if path.name.startswith("dynamics_"):
            continue
        raw = path.read_text()
        assert "snakemake.params" not in raw, f"{path.name}: give it a config-only render here"
        text = flat(jinja2.Template(raw, undefined=jinja2.StrictUndefined).render(snakemake=smk))
        sizes = unquoted_sizes(text)
        stating += [path.name] if sizes else []
        wrong = [found for found in sizes if found not in allowed]
        if wrong:
            contradictions[path.name] = wrong
    assert not contradictions, contradictions
    assert len(stating) >= 10, stating


def test_no_caption_hard_codes_a_run_size() -> None:
    """In the raw text of every caption of workflow/report (before Jinja), a run size is a
    template over params or config; a literal one must be a paper quote of PAPER_QUOTES."""
    literals = {}
    used = set()
    for path in sorted(CAPTIONS.glob("*.rst")):
        text = flat(path.read_text())
        used |= {quote for quote in PAPER_QUOTES if quote in text}
        found = unquoted_sizes(text)
        if found:
            literals[path.name] = found
    assert not literals, literals
    assert used == set(PAPER_QUOTES), f"quotes no caption makes: {set(PAPER_QUOTES) - used}"


def test_paper_quotes_are_the_papers_tables() -> None:
    """The quotes of Tables 2 and 3 state the sizes of PAPER_INDUCTION / PAPER_CLASSIFICATION."""
    for quote, (_source, part) in PAPER_QUOTES.items():
        sizes = {(n, unit) for n, unit, _ in run_sizes(quote)}
        assert sizes, quote
        if part is not None:
            table = {(n, unit) for n, unit, _ in run_sizes(run_size(part, [{}]))}
            assert sizes <= table, (quote, sizes - table)


def test_run_sizes_reads_every_form() -> None:
    """The forms a caption could state a run size in, lists included."""
    text = (
        "1,000 held-out sequences, 64 evaluation sequences, hidden 128, batch 256, batches of 64, "
        "8 streams, 512 tokens, 512-token windows, T' = 512, T′ = 32, 750 AdamW steps, "
        "1 or 2 layers, 1, 2 or 4 heads, a 2-layer model, vocabulary of 41, seed 0 only, "
        "chance 0.02, 2.5 x d_model tokens, T' = 2.5 x d_model"
    )
    assert [(n, unit) for n, unit, _ in run_sizes(text)] == [
        (1000, "held-out sequences"),
        (64, "held-out sequences"),
        (128, "hidden"),
        (256, "batch"),
        (64, "batch"),
        (8, "streams"),
        (512, "tokens"),
        (512, "tokens"),
        (512, "T'"),
        (32, "T'"),
        (750, "steps"),
        (1, "layers"),
        (2, "layers"),
        (1, "heads"),
        (2, "heads"),
        (4, "heads"),
        (2, "layers"),
        (41, "vocabulary"),
        (1, "seeds"),
    ]


def test_run_size_reads_the_grid() -> None:
    """Steps as the training loops take them (``epochs x ceil(n_train / batch)``), the model,
    task and held-out set, the seeds of the grid, the induction grid's axes (the specs' defaults
    here: softmax, absolute positions, no weight decay) and the attacked sequences of
    classification."""
    spec = {"n_train": 1000, "epochs": 3, "batch_size": 64, "lr": 0.003, "seed": 2}
    text = run_size("induction", [spec, {**spec, "seed": 0, "n_eval": 64, "hidden": 32}])
    assert text == (
        "2 runs: models of 2 layers with 8 heads, hidden 32 or 128, FFN 512; sequences of 13 "
        "tokens (BOS, 6 distinct tokens and their rotated repeat) over a vocabulary of 50; "
        "evaluated on 64 or 1,000 held-out sequences; trained on 1,000 sequences x 3 epochs in "
        "batches of 64 (48 AdamW steps at lr 0.003); seeds 0, 2; attention functions softmax; "
        "positional encoding absolute; weight decay 0.0"
    )
    text = run_size("classification", [{"n_attack": 16, "seed": 1}])
    assert text.endswith("seed 1, up to 16 attacked sequences per run")
    assert "10 epochs" in text and "(400 AdamW steps" in text  # Table 3 when nothing overrides
    assert "1 layer with 1 head, hidden 128" in text and "CLS + 10 tokens (3 signal" in text
    assert run_size("value_softmax", [{"steps": 500, "lr": 0.2, "seed": 0}]) == (
        "1 run: 500 steps of 0.2 (gradient descent), seed 0"
    )


@pytest.mark.parametrize("scale", sorted(CONFIGS))
def test_every_report_caption_renders_with_the_config(scale: str) -> None:
    """Every caption of workflow/report renders as ``snakemake --report`` renders it (Jinja with
    the config, a pair's wildcards and the dynamics' run size), and states the head classes' sink
    threshold from the config rather than a fixed "40%"."""
    config = load(scale)
    config["head_classes"]["sink"] = 0.37  # a value no caption could hard-code
    smk = SimpleNamespace(
        config=config,
        params=SimpleNamespace(run_size="R runs"),
        wildcards=SimpleNamespace(model="m", dataset="d"),
    )
    rendered = {
        path.name: jinja2.Template(path.read_text(), undefined=jinja2.StrictUndefined).render(
            snakemake=smk
        )
        for path in sorted(CAPTIONS.glob("*.rst"))
    }
    assert len(rendered) > 50
    assert "BOS mass >= 0.37" in rendered["sinks_sink_rate.rst"]
    assert not [name for name, text in rendered.items() if "40%" in text]
