"""The ``check_*`` functions of the claims, one module per stage whose summary tables they read.

Each takes its tables and the claim's tolerances and returns the claim's rows
(:func:`~sinkscope.claims.verdicts.row`); :mod:`sinkscope.claims.registry` binds them to the
claims.

* :mod:`.heads` - head classes (§1, §3, §7).
* :mod:`.geometry` - BOS cosines, sink representability, value ranks, BOS value norms (§4, §6,
  App. E.2).
* :mod:`.oversmoothing` - mean approximation, similarity differences, conditions (i) / (ii) (§5,
  App. E.1).
* :mod:`.costs` - toy nuclear norms, back-copy and copy-paste costs, Theorem D.1 (§7, App. D.1).
* :mod:`.streaming` - the StreamingLLM notes: eviction and sink tokens.
* :mod:`.dynamics` - the value-softmax paper: polarization, sinks emerging, flip rate.

No imports here. sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use
their helpers import them when they run.
"""
