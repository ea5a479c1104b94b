"""Extraction: one forward pass per (model, dataset) pair, written to one HDF5 file.

* :mod:`.extract` - the forward pass with capture hooks and the writer (the GPU rule).
* :mod:`.h5layout` - the file's layout: dataset and attribute names, opening a file.
* :mod:`.h5read` - the readers every analysis uses: ``Z`` and the values recomputed, layers read
  in blocks.
* :mod:`.h5codec` - the HDF5 compression codecs (zstd, gzip, none) and their filter settings.
"""
