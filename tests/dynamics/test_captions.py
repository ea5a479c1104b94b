"""The training-dynamics figure captions state the size of the runs that made the figure: the
summary rules pass ``run_size`` (:func:`sinkscope.dynamics.grids.run_size`, read off the grid the
config builds) and the captions print it. Rendered here for the tiny, the default and the paper
config as ``snakemake --report`` renders them (Jinja over the rule's params and config): every
run-size number of a caption (steps, epochs, sequences, seeds) must be one of that config's runs
or one of the paper's Tables 2-3 (the sizes the captions compare with)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest

from sinkscope.config import load_layered_config, validate_config
from sinkscope.dynamics.grids import (
    PAPER_CLASSIFICATION,
    PAPER_INDUCTION,
    dynamics_jobs,
    run_size,
)
from sinkscope.dynamics.names import FIGURES as DYNAMICS_FIGURES
from tests.conftest import REPO, TINY

CONFIGS = {
    "tiny": [TINY],
    "default": [REPO / "config.yaml"],
    "paper": [REPO / "config" / "paper.yaml"],
}
#: a number of steps / epochs / sequences / seeds, or "seed 0 only"
RUN_SIZE = re.compile(
    r"\b(\d[\d,]*)(?:\s+AdamW)?\s+(steps|epochs?|sequences|seeds)\b|\bseed (\d+) only\b"
)
#: the papers' run sizes (Tables 2 and 3) that captions quote beside the run's own
PAPER_SIZES = {
    (f"{table['n_train']:,}", "sequences") for table in (PAPER_INDUCTION, PAPER_CLASSIFICATION)
} | {(str(table["epochs"]), "epochs") for table in (PAPER_INDUCTION, PAPER_CLASSIFICATION)}


def run_sizes(text: str) -> list[tuple[str, str]]:
    """The (number, unit) run sizes stated in ``text`` ("seed 0 only" is ("1", "seeds"))."""
    found = []
    for match in RUN_SIZE.finditer(text):
        if match.group(3) is not None:
            found.append(("1", "seeds"))
        else:
            unit = match.group(2)
            found.append((match.group(1), "epochs" if unit == "epoch" else unit))
    return found


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
            path = REPO / "workflow" / "report" / f"dynamics_{part}_{name}.rst"
            text = jinja2.Template(path.read_text()).render(snakemake=smk)
            out[path.name] = (" ".join(text.split()), size)
    return out


@pytest.mark.parametrize("scale", sorted(CONFIGS))
def test_captions_state_the_run_size_of_their_config(scale: str) -> None:
    captions = rendered_captions(CONFIGS[scale])
    assert captions
    contradictions = {}
    for name, (text, size) in captions.items():
        allowed = set(run_sizes(size)) | PAPER_SIZES
        wrong = [found for found in run_sizes(text) if found not in allowed]
        if wrong:
            contradictions[name] = wrong
    assert not contradictions, contradictions
    # the run size is printed where a caption names the runs' size
    stating = [name for name, (text, size) in captions.items() if size in text]
    assert len(stating) >= 5, sorted(captions)


def test_run_size_reads_the_grid() -> None:
    """Steps as the training loops take them (``epochs x ceil(n_train / batch)``), the seeds of
    the grid and the attacked sequences of classification."""
    spec = {"n_train": 1000, "epochs": 3, "batch_size": 64, "lr": 0.003, "seed": 2}
    text = run_size("induction", [spec, {**spec, "seed": 0}])
    assert text == (
        "2 runs: 1,000 sequences x 3 epochs in batches of 64 (48 AdamW steps at lr 0.003), "
        "seeds 0, 2"
    )
    text = run_size("classification", [{"n_attack": 16, "seed": 1}])
    assert text.endswith("seed 1, up to 16 attacked sequences per run")
    assert "10 epochs" in text and "(400 AdamW steps" in text  # Table 3 when nothing overrides
    assert run_size("value_softmax", [{"steps": 500, "lr": 0.2, "seed": 0}]) == (
        "1 run: 500 steps of 0.2 (gradient descent), seed 0"
    )


@pytest.mark.parametrize("scale", sorted(CONFIGS))
def test_every_report_caption_renders_with_the_config(scale: str) -> None:
    """Every caption of workflow/report renders as ``snakemake --report`` renders it (Jinja with
    the config, a pair's wildcards and the dynamics' run size), and states the head classes' sink
    threshold from the config rather than a fixed "40%"."""
    config = validate_config(load_layered_config(CONFIGS[scale]))
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
        for path in sorted((REPO / "workflow" / "report").glob("*.rst"))
    }
    assert len(rendered) > 50
    assert "BOS mass >= 0.37" in rendered["sinks_sink_rate.rst"]
    assert not [name for name, text in rendered.items() if "40%" in text]
