"""Words shared by figure titles, captions and the statements of the analyses."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, with a plural ``s`` unless ``n == 1`` (``1 dataset``, ``2 datasets``)."""
    return f"{n} {word}" + ("" if n == 1 else "s")
