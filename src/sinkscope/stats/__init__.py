"""Statistics shared by the analyses and the claims: intervals, their coverage at small samples,
and the resampling counts behind them (:mod:`sinkscope.stats.intervals`). The layer below both:
it imports neither."""
