"""``sinkscope.steps.run``: what a failing job shows on the console beside its log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from types import SimpleNamespace
from sinkscope import steps

def broken(smk):
    print("progress on stderr", file=sys.stderr)
    raise ValueError("models.tiny.bos_token_id: 99 is outside the vocabulary\\nsecond line")

steps.STEPS["broken_step"] = broken
smk = SimpleNamespace(log=[sys.argv[1]], output=[sys.argv[2]], wildcards={"model": "tiny"})
steps.run("broken_step", smk)
"""


def test_a_failing_step_writes_its_sentence_to_the_console_and_the_traceback_to_the_log(
    tmp_path: Path,
) -> None:
    log, output = tmp_path / "logs" / "job.log", tmp_path / "out.parquet"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log), str(output)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode != 0
    assert result.stderr == (
        "sinkscope broken_step failed: ValueError: models.tiny.bos_token_id: 99 is outside the "
        f"vocabulary (traceback: {log})\n"
    )
    text = log.read_text()
    assert "progress on stderr" in text and "Traceback" in text and "second line" in text
