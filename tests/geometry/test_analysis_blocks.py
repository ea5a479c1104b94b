"""Block-wise geometry analysis: the tables do not depend on the block size.

:func:`sinkscope.geometry.analysis.analyze_file` reads ``Z``, ``X``, values and the sink heads' BOS
attention a block of sequences at a time and computes every per-sequence quantity per block;
the layer statistics are taken from the complete per-sequence arrays, so one sequence per
block, uneven blocks and a single block give the same tables (float64 reductions over a
sequence's vector may be vectorised differently for another batch size: ``rtol`` 1e-12).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from sinkscope.geometry.analysis import analyze_file
from sinkscope.geometry.names import ATTENDING
from sinkscope.heads.classify import HeadClassThresholds, classify_file


def test_tables_do_not_depend_on_the_block_size(extracted) -> None:
    _family, path, _model, ids = extracted
    n_seq = ids.shape[0]
    _, per_head = classify_file(path)
    # low thresholds: every layer has sink heads, so the BOS attention is read per block too
    thresholds = HeadClassThresholds(sink=0.05)
    tables = {
        size: analyze_file(path, per_head, thresholds, attend_threshold=0.05, block_size=size)
        for size in (1, 2, n_seq)
    }
    one = tables[n_seq]
    assert (one["halfspace"]["n_sink_heads"] > 0).all()
    assert one["halfspace"].filter(pl.col("point_set") == ATTENDING)["n_points"].sum() > 0
    assert sorted(set(one["halfspace"]["sequence"].to_list())) == list(range(n_seq))
    for size in (1, 2):
        for name, table in one.items():
            other = tables[size][name]
            assert other.columns == table.columns and other.shape == table.shape, name
            for column in table.columns:
                x, y = table[column], other[column]
                if x.dtype.is_float():
                    np.testing.assert_allclose(
                        y.to_numpy(), x.to_numpy(), rtol=1e-12, atol=0, err_msg=column
                    )
                else:
                    assert y.equals(x, null_equal=True), (size, name, column)
