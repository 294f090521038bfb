"""Every real TIFF of ../shared/data through the CLI as a user runs it: ``noa info``, ``noa copy`` to TIFF and to
MRC in C and F order, and back to TIFF. Values and pixel sizes must survive (a pixel size nobody gave stays
unknown), and every MRC written passes mrcfile.validate. One batch command per format and order keeps it fast."""

from __future__ import annotations

import io as text_io
import json

import mrcfile
import numpy as np
import pytest

from helpers import SHARED, load, need_shared, noa
from noa_core import io
from noa_core.io.metadata import angstroms_per_unit

NAMES = sorted(p.name for p in SHARED.glob("*.tif*")) if SHARED.is_dir() else ["zyx_uint16.tiff"]


def _angstrom(pixel_size, unit: str | None, shape) -> list[float | None]:
    """Pixel size per D, H, W in Å (0: unknown); None for axes of size 1, whose size nothing keeps."""
    scale = angstroms_per_unit(unit) if unit else 0.0
    assert scale is not None, unit
    return [v * scale if n > 1 else None for v, n in zip(pixel_size, shape[1:])]


def _mrc_pixel(path, shape) -> list[float | None]:
    with mrcfile.open(path, permissive=True) as m:
        x, y, z = (float(v) for v in m.voxel_size.tolist())
    return [v if n > 1 else None for v, n in zip((z, y, x), shape[1:])]


def _same_sizes(got, expected) -> bool:
    return all(g is None or g == pytest.approx(e, rel=1e-5, abs=1e-12) for g, e in zip(got, expected))


@pytest.fixture(scope="module")
def sources():
    """Each real TIFF: its path, the BDHW values noa reads (checked against tifffile in test_io_tiff), and its
    pixel size in Å as ``noa info --json`` reports it."""
    paths = need_shared(*NAMES)
    out = {}
    for path in paths:
        result = noa("info", "--json", path)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        info = json.loads(result.stdout)
        out[path.name] = (path, io.read(path)[0].numpy(), _angstrom(info["pixel_size"], info["pixel_unit"],
                                                                    info["shape"]))
    return out


def _copy_all(inputs, out_dir, to: str, order: str = "C") -> None:
    result = noa("copy", *inputs, "--out-dir", out_dir, "--to", to, "--order", order)
    assert result.returncode == 0, result.stderr


def _output(out_dir, name: str):
    """The file a batch copy wrote for input ``name`` in ``out_dir``."""
    (path,) = [p for p in out_dir.iterdir() if p.name.split(".")[0] == name.split(".")[0]]
    return path


def _check_output(path, values: np.ndarray, pixel, stored_as_read: bool) -> None:
    """``path`` holds ``values`` (as noa reads it, and as mrcfile or tifffile do where its sections are stored
    row-major) and the pixel size ``pixel`` (Å); an MRC passes mrcfile.validate."""
    array, md = io.read(path)
    np.testing.assert_array_equal(array.numpy(), values)
    if stored_as_read:  # the reference readers know no axis mapping: same values in the same order
        np.testing.assert_array_equal(load(path).reshape(values.shape), values)
    if path.suffix == ".mrc":
        report = text_io.StringIO()
        assert mrcfile.validate(str(path), print_file=report), report.getvalue()
        got = _mrc_pixel(path, values.shape)
    else:
        got = _angstrom(md.pixel_size, md.unit, values.shape)
    assert _same_sizes(got, pixel), (path.name, got, pixel)


@pytest.mark.parametrize("first, then", [("mrc", "tiff"), ("tiff", "mrc")])
@pytest.mark.parametrize("order", ["C", "F"])
def test_real_tiffs_copy_and_back(tmp_path, sources, first, then, order):
    first_dir, back_dir = tmp_path / first, tmp_path / "back"
    first_dir.mkdir(), back_dir.mkdir()
    _copy_all([path for path, _, _ in sources.values()], first_dir, first, order)
    _copy_all(sorted(first_dir.iterdir()), back_dir, then)
    for name, (_, values, pixel) in sources.items():
        _check_output(_output(first_dir, name), values, pixel, stored_as_read=order == "C")
        _check_output(_output(back_dir, name), values, pixel, stored_as_read=True)
