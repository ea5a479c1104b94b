"""The repository speaks of the project only: no words of its development history (numbered
work sessions, numbered issues) in any tracked file, code, docs, captions, tables or JSON."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO

#: A numbered work session or issue, as a diary would cite them, or the issue site by name.
HISTORY = re.compile(
    r"\b[Ss]ession\s+\d+|\b[Ii]ssues?\s+#?\d+|\b[Tt]racker\b|\bstop\s+\d+\b", re.MULTILINE
)


def test_no_tracked_file_cites_the_development_history() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    files = [REPO / name for name in listed.split("\0") if name]
    assert len(files) > 100
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files (figures, locks' wheels) and links
        for match in HISTORY.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(REPO)}:{line}: {match.group(0)!r}")
    assert found == []


#: The analyses of the pairs and the experiments: they may import the statistics
#: (:mod:`sinkscope.stats`) and each other's names, never the claims, which sit above them.
ANALYSIS_PACKAGES = (
    "costs", "dynamics", "extraction", "geometry", "heads", "oversmoothing", "prepare", "sinks",
    "sizing", "stats", "streaming",
)  # fmt: skip


def test_no_analysis_imports_the_claims_and_the_statistics_import_no_analysis() -> None:
    """The layers: the statistics below the analyses, the analyses below the claims. An import
    that runs back up (an analysis reading a claim's interval or tolerance) fails here."""
    upward = []
    for package in ANALYSIS_PACKAGES:
        for path in sorted((REPO / "src" / "sinkscope" / package).rglob("*.py")):
            text = path.read_text()
            for match in re.finditer(r"^\s*(?:from|import) sinkscope\.(\w+)", text, re.MULTILINE):
                target = match.group(1)
                if target == "claims" or (package == "stats" and target in ANALYSIS_PACKAGES
                                           and target != "stats"):  # fmt: skip
                    line = text.count("\n", 0, match.start()) + 1
                    upward.append(f"{path.relative_to(REPO)}:{line}: sinkscope.{target}")
    assert upward == []
