"""The ``extraction`` section of the config that shapes an activation file and how it is made
(:class:`ExtractionSettings`): read by the extraction, the writer and the batching."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sinkscope.config_schema import schema_default
from sinkscope.extraction import h5layout as layout

__all__ = ["ExtractionSettings"]


@dataclass(frozen=True)
class ExtractionSettings:
    """The ``extraction`` section of the config that affects the file's contents.

    ``batch_size``: sequences per forward pass, or ``"auto"`` (:func:`auto_batch_size`);
    ``overlap_writes``: ``"auto"`` (on for a GPU, off on the CPU), ``"on"`` or ``"off"``;
    ``codec`` and ``compression_level``: the HDF5 codec of the datasets (:mod:`sinkscope.extraction.h5codec`);
    ``uncompressed``: the kinds of tensor (keys of ``storage_dtypes``) stored without it
    (``()``: the codec applies to every dataset). ``codec`` and ``uncompressed`` default to the
    config schema's defaults.
    """

    batch_size: int | str
    storage_dtypes: Mapping[str, str]
    compression_level: int
    device: str = "auto"
    overlap_writes: str = "auto"
    codec: str = schema_default("extraction", "codec")
    uncompressed: tuple[str, ...] = tuple(schema_default("extraction", "uncompressed"))

    def dataset_codec(self, spec: layout.DatasetSpec) -> tuple[str, int]:
        """``(codec, level)`` of one dataset: ``("none", 0)`` for a kind in ``uncompressed``."""
        if spec.dtype_key in self.uncompressed:
            return "none", 0
        return self.codec, self.compression_level

    def describe_codecs(self) -> str:
        """The file's ``codec`` attribute, e.g. ``zstd(1); uncompressed: residual, activations``."""
        text = f"{self.codec}({self.compression_level})"
        return text + (
            f"; uncompressed: {', '.join(self.uncompressed)}" if self.uncompressed else ""
        )
