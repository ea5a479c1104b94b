"""Sizing: what each job asks of the cluster, computed from the model's shape and the config.

:mod:`~sinkscope.sizing.shapes` knows each configured model's shape before any job runs;
:mod:`~sinkscope.sizing.costs` holds the per-unit costs measured on real runs;
:mod:`~sinkscope.sizing.requests` turns both into one request per rule (memory, time, GPUs, the
partition), the only place the rules' resources come from; :mod:`~sinkscope.sizing.plan`
tabulates the requests of a whole run (``sinkscope plan``) without submitting anything.
"""
