"""The ``check_*`` functions of the claims, one module per stage whose summary tables they read.

Each takes its tables and the claim's tolerances and returns the claim's rows
(:func:`~sinkscope.claims.verdicts.row`, or :func:`~sinkscope.claims.verdicts.rows_per` of a
reading per table row); :mod:`sinkscope.claims.registry` binds them to the claims. The stages'
tables that state claims (written by their summary rules) are made here too, from the same
readings and verdicts, so that a stage never decides a claim itself.

* :mod:`.heads` - head classes (§1, §3, §7).
* :mod:`.geometry` - BOS cosines, sink representability, value ranks, BOS value norms (§4, §6,
  App. E.2); the geometry stage's ``statements`` table.
* :mod:`.oversmoothing` - mean approximation, similarity differences, conditions (i) / (ii) (§5,
  App. E.1); the oversmoothing stage's per-pair ``claims`` table.
* :mod:`.costs` - toy nuclear norms, back-copy and copy-paste costs, Theorem D.1 (§7, App. D.1).
* :mod:`.streaming` - the StreamingLLM notes: eviction and sink tokens.
* :mod:`.dynamics` - the value-softmax paper: polarization, sinks emerging, flip rate.

No imports here. sinkscope.geometry, .oversmoothing and .costs import torch: the checks that use
their helpers import them when they run.
"""
