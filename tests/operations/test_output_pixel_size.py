"""`--pixel-size` on every writing command: the output's pixel size set on the way (as relion_image_handler
--angpix and e2proc2d --apix do), so that a TIFF without one becomes an MRC with one in one command. Read
back with mrcfile; rescale keeps its own --pixel-size (the target it resamples to)."""

from __future__ import annotations

import mrcfile
import numpy as np
import pytest
import tifffile

from helpers import assert_user_error, need_shared, noa, write_mrc
from noa_core import operations
from noa_core.operations.spec import OUTPUT_PIXEL_SIZE


def test_every_writing_operation_takes_it_but_rescale_keeps_its_own():
    for operation in operations.operations():
        param = next((p for p in operation.params if p.name == "pixel_size"), None)
        if operation.name == "rescale":
            assert param is not None and param is not OUTPUT_PIXEL_SIZE
        elif operation.writes == "folder" or (operation.writes == "file" and operation.image_output):
            assert param is OUTPUT_PIXEL_SIZE, operation.name
        elif operation.name != "header":  # header sets it in place, with its own parameter; a picture has none
            assert param is None, operation.name


def test_a_tiff_without_pixel_size_becomes_an_mrc_with_one(tmp_path):
    (tiff,) = need_shared("zyx_uint16.tiff")
    result = noa("copy", tiff, tmp_path / "out.mrc", "--pixel-size", "1.06")
    assert result.returncode == 0, result.stderr
    with mrcfile.open(tmp_path / "out.mrc") as f:
        assert (float(f.voxel_size.x), float(f.voxel_size.y)) == pytest.approx((1.06, 1.06), rel=1e-6)
        np.testing.assert_array_equal(f.data, tifffile.imread(tiff))


@pytest.mark.parametrize("command, extra", [
    ("bin", ["--factor", "2"]), ("flip", ["--axis", "x"]), ("permute", ["--axes", "0,1,3,2"]),
    ("resize", ["--shape", "6,6"]), ("filter", ["--lowpass", "8"]), ("average", ["--group", "2"]),
])
def test_the_given_pixel_size_replaces_what_the_operation_would_write(tmp_path, command, extra):
    write_mrc(tmp_path / "in.mrc", np.random.default_rng(0).normal(size=(4, 8, 8)).astype(np.float32), voxel_size=1.5)
    result = noa(command, tmp_path / "in.mrc", tmp_path / "out.mrc", *extra, "--pixel-size", "0.8,0.9,1.1")
    assert result.returncode == 0, result.stderr
    with mrcfile.open(tmp_path / "out.mrc", permissive=True) as f:
        voxel = f.voxel_size
    assert (float(voxel.z), float(voxel.y), float(voxel.x)) == pytest.approx((0.8, 0.9, 1.1), rel=1e-6)


def test_split_parts_take_it_and_bad_values_are_refused(tmp_path):
    write_mrc(tmp_path / "in.mrcs", np.zeros((3, 4, 4), np.float32), stack=True, voxel_size=2.0)
    assert noa("split", tmp_path / "in.mrcs", "--out-dir", tmp_path / "parts", "--pixel-size", "3").returncode == 0
    for part in sorted((tmp_path / "parts").iterdir()):
        with mrcfile.open(part) as f:
            assert float(f.voxel_size.x) == pytest.approx(3.0)
    assert_user_error(noa("copy", tmp_path / "in.mrcs", tmp_path / "x.mrcs", "--pixel-size", "0"),
                      "--pixel-size", "must be between 1e-06 and 1e+09")
    assert_user_error(noa("copy", tmp_path / "in.mrcs", tmp_path / "x.mrcs", "--pixel-size", "1,2"),
                      "--pixel-size")
    assert not (tmp_path / "x.mrcs").exists()
