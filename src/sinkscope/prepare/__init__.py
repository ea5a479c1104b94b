"""Preparation: everything the extraction needs before a model runs.

* :mod:`.sources` - downloads and archive members of registry-hosted corpora (checksummed).
* :mod:`.corpora` - the corpus registry: offline package-shipped texts and hub datasets, one loader.
* :mod:`.models` - model and tokenizer loading (offline packages or the hub), BOS handling, shapes.
* :mod:`.model_config` - the ``config.json`` facts read with and without transformers (torch-free).
* :mod:`.tokens` - a corpus tokenized once per model (an ``.npz`` stream) and the BOS-prefixed
  sequences of a (model, dataset) pair cut from it (JSON).
"""
