"""Dataset ids of the no-BOS variant (issue "runs without BOS"; StreamingLLM's first-token sink).

A dataset entry's ``bos`` key (``workflow/schemas/config.schema.yaml``) says which sequences are
extracted from it:

* ``keep`` (default): the paper's sequences ``[BOS, t_1 .. t_T]`` (``T + 1`` positions), under the
  dataset's own name;
* ``both``: those, and the SAME sequences without BOS, ``[t_1 .. t_T]`` (``T`` positions: the
  content tokens are identical, each one position earlier), under the id ``<name>.no-bos``
  (:func:`no_bos_id`), which the pair wildcards, paths, tables and figures carry like any dataset.

There is no ``drop``-only value: a no-BOS pair is read against the BOS pair of the same corpus
(the claims' StreamingLLM row), and the analyses that cut their own streams from the corpus
(StreamingLLM caches, long-context geometry) run on the BOS pairs only, so a dataset id without
the suffix always means "with BOS" and one with it always means "the same tokens without it".

Everything that treats position 0 as BOS (the head classes' ``bos_mass``, the geometry's BOS
cosines and norms, the oversmoothing token set ``1..T'``) means "position 0" in a no-BOS file:
there, position 0 is the first text token ``t_1``. The activation file records which
(:data:`sinkscope.extraction.h5layout.ATTR_BOS`). Pure standard library: the workflow, the
config and the summaries import it.
"""

from __future__ import annotations

__all__ = [
    "BOS_DROP",
    "BOS_KEEP",
    "BOS_MODES",
    "NO_BOS_SUFFIX",
    "bos_of",
    "is_no_bos",
    "no_bos_id",
    "source_dataset",
]

#: ``datasets.<name>.bos`` values: BOS pairs only, or BOS and no-BOS pairs of the same sequences.
BOS_MODES = ("keep", "both")
#: What a pair's sequences do with BOS (the token record's ``bos`` and the HDF5 attribute).
BOS_KEEP = "keep"
BOS_DROP = "drop"
#: The suffix of a no-BOS variant's dataset id (a configured dataset name may not end with it).
NO_BOS_SUFFIX = ".no-bos"


def no_bos_id(dataset: str) -> str:
    """The dataset id of ``dataset``'s no-BOS variant: ``<dataset>.no-bos``."""
    return dataset + NO_BOS_SUFFIX


def is_no_bos(dataset_id: str) -> bool:
    """Whether ``dataset_id`` names a no-BOS variant."""
    return dataset_id.endswith(NO_BOS_SUFFIX)


def source_dataset(dataset_id: str) -> str:
    """The configured dataset a dataset id cuts its sequences from (the id without the suffix)."""
    return dataset_id[: -len(NO_BOS_SUFFIX)] if is_no_bos(dataset_id) else dataset_id


def bos_of(dataset_id: str) -> str:
    """:data:`BOS_DROP` for a no-BOS variant's id, else :data:`BOS_KEEP`."""
    return BOS_DROP if is_no_bos(dataset_id) else BOS_KEEP
