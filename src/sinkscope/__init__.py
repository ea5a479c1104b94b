"""sinkscope: reproduce "Sink vs. diagonal patterns as mechanisms for attention switch and
oversmoothing prevention" end to end, for any model x dataset pair.

All logic of the Snakemake workflow lives in this package as plain, typed functions;
the rules in ``workflow/rules`` only declare inputs, outputs, resources and logs.
"""

__version__ = "0.1.0"
