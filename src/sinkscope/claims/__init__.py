"""The papers' claims table (``results/claims.{md,csv,parquet,rst}``) and the observations.

Every claim of the three studies checked against the summary tables of the analyses: one row per
claim x model (x dataset or setting), with the measured number, the test and a verdict; then what
the figures show about the models but no claim states (the observations).

* :mod:`.verdicts` - the verdict vocabulary, the table's columns, the row helpers of the checks.
* :mod:`.names` - the summary tables the claims read (stdlib only; read by ``sinkscope.paths``).
* :mod:`.tolerances` - the default tolerances and the config's ``claims`` section over them.
* :mod:`.checks` - the ``check_*`` functions, one module per stage whose tables they read.
* :mod:`.registry` - :data:`~sinkscope.claims.registry.CLAIMS` and
  :func:`~sinkscope.claims.registry.evaluate_claims`: which tables each claim reads, the rows of
  the claims whose analysis did not run.
* :mod:`.render` - ``claims.md``, ``claims.rst``, parquet + CSV
  (:func:`~sinkscope.claims.render.write_claims`); the comparison of several runs.
* :mod:`.observations` - :func:`~sinkscope.claims.observations.evaluate_observations`: the
  observations table and its section of ``claims.md``.

No imports here: importing :mod:`.registry`, :mod:`.render` or :mod:`.observations` does not load
torch (the checks import the stage helpers that do when they run).
"""
