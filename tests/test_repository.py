"""The repository speaks of the project only: no words of its development history (numbered
work sessions, tracker issues) in any tracked file, code, docs, captions, tables or JSON."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO

#: A numbered work session or tracker issue, as a diary would cite them.
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
