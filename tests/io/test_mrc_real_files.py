"""Every real MRC file of ../shared/data through ``noa info``, ``noa copy`` to MRC in C and F order, and
back: values (against mrcfile's reading of the original), voxel sizes and ``mrcfile.validate`` hold."""

from __future__ import annotations

import io as text_io
import json

import mrcfile
import numpy as np
import pytest

from helpers import SHARED, mrc_data, needs_data, noa
from noa_core.io import mrc

REAL_MRC = sorted(p.name for p in SHARED.glob("*")
                  if p.name.lower().removesuffix(".gz").removesuffix(".bz2").endswith(mrc.EXTENSIONS)) \
    if SHARED.is_dir() else []


def test_the_real_data_hold_mrc_files():
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent")
    assert REAL_MRC  # the loop below must not pass on nothing


@needs_data
@pytest.mark.parametrize("name", REAL_MRC)
@pytest.mark.parametrize("order", ["C", "F"])
def test_real_mrc_files_copy_to_mrc_and_back(tmp_path, name, order):
    src = SHARED / name
    expected, _, voxel = mrc_data(src)
    described = json.loads(noa("info", src, "--json").stdout)
    assert described["pixel_size"] == pytest.approx([float(voxel.z), float(voxel.y), float(voxel.x)])
    assert noa("info", src).returncode == 0
    there, back = tmp_path / f"there{order}.mrc", tmp_path / "back.mrc"
    for step in (noa("copy", src, there, "--order", order), noa("copy", there, back, "--order", "C")):
        assert step.returncode == 0, step.stderr
    for out in (there, back):
        report = text_io.StringIO()
        assert mrcfile.validate(str(out), print_file=report), report.getvalue()
        values, _, out_voxel = mrc_data(out)
        assert tuple(out_voxel.tolist()) == pytest.approx(tuple(voxel.tolist()))
        stored = values.transpose(0, 2, 1) if out == there and order == "F" else values
        np.testing.assert_array_equal(stored.reshape(expected.shape), expected)
