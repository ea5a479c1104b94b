"""h5layout: every dataset and attribute name is stated once, and read_attr reads attributes."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from sinkscope.extraction.h5layout import ActivationFileError


def test_dataset_names_are_stated_once_in_h5layout() -> None:
    """Every stored dataset's name is an h5layout constant, and no other module or benchmark
    spells the string out (a renamed dataset changes in one place)."""
    import re

    from sinkscope.extraction import h5layout

    names = {spec.name for spec in (*h5layout.DATASETS, *h5layout.CONDITIONAL_DATASETS)}
    constants = {v for k, v in vars(h5layout).items() if k.isupper() and isinstance(v, str)}
    assert names <= constants
    repo = Path(__file__).resolve().parents[2]
    literal = re.compile("|".join(re.escape(f'"{n}"') for n in sorted(names)))
    sources = [*(repo / "src" / "sinkscope").rglob("*.py"), *(repo / "bench").glob("*.py")]
    offenders = [
        str(p.relative_to(repo))
        for p in sources
        if p.name != "h5layout.py" and literal.search(p.read_text())
    ]
    assert not offenders, offenders


def test_read_attr_decodes_values_and_names_a_missing_one(tmp_path: Path) -> None:
    from sinkscope.extraction.h5layout import ATTR_AXES, ATTR_MODEL_NAME, read_attr

    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w") as f:
        f.attrs[ATTR_MODEL_NAME] = np.bytes_(b"tiny-model")
        f.attrs["count"] = np.int64(7)
        f.attrs["flag"] = np.bool_(True)
        f.attrs["scalar"] = np.array(0.25)
        f.attrs["profile"] = '{"forward": 1.5}'
        f.create_dataset("d", data=np.zeros(2)).attrs[ATTR_AXES] = "layer"
    with h5py.File(path, "r") as f:
        assert read_attr(f, ATTR_MODEL_NAME) == "tiny-model"
        count, flag, scalar = (read_attr(f, k) for k in ("count", "flag", "scalar"))
        assert (count, flag, scalar) == (7, True, 0.25)
        assert type(count) is int and type(flag) is bool and type(scalar) is float
        assert read_attr(f, "profile") == '{"forward": 1.5}'
        assert read_attr(f, "profile", as_json=True) == {"forward": 1.5}
        assert read_attr(f["d"], ATTR_AXES) == "layer"
        with pytest.raises(ActivationFileError, match=r"attrs\.h5: attribute 'dataset_name' is"):
            read_attr(f, "dataset_name")
        with pytest.raises(ActivationFileError, match="attribute 'symbol' of /d is missing"):
            read_attr(f["d"], "symbol")


def test_attribute_names_are_stated_once_in_h5layout() -> None:
    """Every file attribute (documented in FILE_ATTRIBUTES) is named by an h5layout ATTR_*
    constant. Readers read attributes with read_attr by the constant, and the writer,
    extraction.extract, writes them by the constant: no module or benchmark reads or writes an
    attribute by its string, and the writer builds no attribute dict keyed by the string."""
    import ast
    import re

    from sinkscope.extraction import h5layout

    constants = {k: v for k, v in vars(h5layout).items() if k.startswith("ATTR_")}
    dataset_attributes = {h5layout.ATTR_DESCRIPTION, h5layout.ATTR_AXES, h5layout.ATTR_SYMBOL}
    assert set(constants.values()) - dataset_attributes == set(h5layout.FILE_ATTRIBUTES)
    assert len(set(constants.values())) == len(constants)
    repo = Path(__file__).resolve().parents[2]
    by_string = re.compile(r"""attrs(\[|\.get\(|,)\s*["']|_attr\w*\([^)]*["']""")
    sources = [*(repo / "src" / "sinkscope").rglob("*.py"), *(repo / "bench").glob("*.py")]
    offenders = [
        str(p.relative_to(repo))
        for p in sources
        if p.name != "h5layout.py" and by_string.search(p.read_text())
    ]
    assert not offenders, offenders
    # the writer's attribute dicts; "d_model" and "head_dim" are also axis names (dataset sizes)
    axes = {axis for spec in h5layout.DATASETS for axis in spec.axes}
    attribute_names = set(h5layout.FILE_ATTRIBUTES) - axes
    writer = repo / "src" / "sinkscope" / "extraction" / "extract.py"
    spelled = sorted(
        key.value
        for node in ast.walk(ast.parse(writer.read_text()))
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant) and key.value in attribute_names
    )
    assert not spelled, spelled
