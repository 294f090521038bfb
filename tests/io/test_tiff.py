"""TIFF reading and writing against tifffile and the real files in shared/data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
from conformance import FormatTests
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core
from helpers import SHARED as DATA
from helpers import needs_data
from noa_core import io
from noa_core.errors import AxisMappingError, HeaderError
from noa_core.io import tiff

# file -> (BDHW shape, transpose taking tifffile's series array to BDHW after adding missing axes)
REAL = {
    "zyx_uint16.tiff": ((1, 10, 8, 5), lambda a: a[None]),
    "float32_10z_32y_40x.tiff": ((1, 10, 32, 40), lambda a: a[None]),
    "input4_float16.tiff": ((1, 10, 15, 18), lambda a: a[None]),
    "zcyx.tiff": ((2, 25, 50, 50), lambda a: a.transpose(1, 0, 2, 3)),  # C is the batch
    "multiseries.ome.tiff": ((4, 1, 5, 5), lambda a: a[:, None]),
}


@needs_data
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_tiffs_match_tifffile(name):
    shape, to_bdhw = REAL[name]
    array, md = io.read(DATA / name)
    expected = to_bdhw(tifffile.imread(DATA / name, series=0))
    assert array.shape == shape and md.kind == noa_core.array.layout.kind(shape)
    np.testing.assert_array_equal(array.numpy(), expected)
    assert array.dtype == expected.dtype and md.format == "tiff"


@needs_data
def test_real_tiff_metadata():
    _, md = io.read(DATA / "zcyx.tiff")
    assert md.axes.startswith("ZCYX") and md.unit == "µm"
    assert md.pixel_size == pytest.approx((0.05445500181716341, 1 / 2.295473, 1 / 2.295473))
    _, md = io.read(DATA / "input4_float16.tiff")
    assert md.unit == "inch" and md.pixel_size == pytest.approx((2.0, 1.0, 0.5))
    _, md = io.read(DATA / "float32_10z_32y_40x.tiff")  # shaped unit mm over the ResolutionUnit inch
    assert md.unit == "mm" and md.pixel_size == pytest.approx((4.0, 1.0, 1.0))
    _, md = io.read(DATA / "zyx_uint16.tiff")  # XResolution 1 per no unit (tifffile's default): unknown
    assert md.pixel_size == (0.0, 0.0, 0.0) and md.unit is None
    assert any("pixel size unknown" in n for n in md.notices)
    _array, md = io.read(DATA / "multiseries.ome.tiff")
    assert md.pixel_size == pytest.approx((1.0, 0.65, 0.65)) and md.unit == "µm"
    assert any("series=N" in n for n in md.notices) and md.series == 0
    third, md3 = io.read(DATA / "multiseries.ome.tiff", series=2)
    np.testing.assert_array_equal(third.numpy()[:, 0], tifffile.imread(DATA / "multiseries.ome.tiff", series=2))
    assert md3.notices == []
    with pytest.raises(HeaderError, match="series"):
        io.read(DATA / "multiseries.ome.tiff", series=6)


@needs_data
def test_real_tiff_is_lazy_and_read_only():
    array, _ = io.read(DATA / "zyx_uint16.tiff")
    assert not array.writable
    assert io.read(DATA / "zyx_uint16.tiff", mmap=False)[0].writable


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32", "int16", "float64", "complex64", "int32"])
@pytest.mark.parametrize("shape", [(1, 1, 6, 5), (3, 1, 6, 5), (1, 4, 6, 5), (2, 3, 6, 5)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_round_trip(tmp_path, dtype, shape, order):
    data = (np.random.default_rng(0).normal(size=shape) * 100).astype(dtype)
    md = io.Metadata(format="tiff", shape=shape, dtype=dtype, pixel_size=(2.5, 0.65, 0.5), unit="µm")
    out = tmp_path / "x.tif"
    notices = io.write(out, noa_core.asarray(data).copy(order), md, order=order)
    assert any("transpose" in n for n in notices) == (order == "F")
    back, md2 = io.read(out)
    np.testing.assert_array_equal(back.numpy(), data)
    assert back.order == order or shape[2] == 1
    assert md2.unit == "µm"
    assert md2.pixel_size[1:] == pytest.approx((0.65, 0.5))
    if shape[1] > 1:
        assert md2.pixel_size[0] == pytest.approx(2.5)
    with tifffile.TiffFile(out) as tif:  # the recorded axes describe the stored bytes
        series = tif.series[0]
        letters = ("T" if shape[0] > 1 else "") + ("Z" if shape[1] > 1 else "") + ("XY" if order == "F" else "YX")
        assert series.axes == letters
        assert tif.is_imagej == (dtype in ("uint8", "uint16", "float32") and order == "C" and min(shape[2:]) > 1)
        stored = series.asarray().reshape(shape[:2] + ((shape[3], shape[2]) if order == "F" else shape[2:]))
        np.testing.assert_array_equal(stored.transpose(0, 1, 3, 2) if order == "F" else stored, data)


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 6), st.integers(1, 6)),
       dtype=st.sampled_from(["uint8", "uint16", "float32", "int8", "float16"]))
def test_round_trip_property(tmp_path_factory, shape, dtype):
    data = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    out = tmp_path_factory.mktemp("t") / "x.tiff"
    io.write(out, data)
    np.testing.assert_array_equal(io.read(out)[0].numpy(), data)


def test_yxz_opens_as_permuted_view(tmp_path):
    data = np.arange(4 * 5 * 3, dtype=np.uint16).reshape(4, 5, 3)
    tifffile.imwrite(tmp_path / "yxz.tif", data, metadata={"axes": "YXZ"})
    array, _md = io.read(tmp_path / "yxz.tif")
    assert array.shape == (1, 3, 4, 5) and array.order == "strided"
    np.testing.assert_array_equal(array.numpy()[0], data.transpose(2, 0, 1))


def test_batch_axes_merge_when_adjacent(tmp_path):
    data = np.arange(2 * 3 * 4 * 5, dtype=np.uint8).reshape(2, 3, 4, 5)
    tifffile.imwrite(tmp_path / "tq.tif", data, metadata={"axes": "TQYX"}, photometric="minisblack")
    array, _ = io.read(tmp_path / "tq.tif")
    np.testing.assert_array_equal(array.numpy()[:, 0], data.reshape(6, 4, 5))


@pytest.mark.parametrize("axes, shape, match", [
    ("YXS", (4, 5, 3), "samples"),
    ("TCYX", (2, 3, 4, 5), "channel axis C"),
    ("TZQYX", (2, 2, 3, 4, 5), "not adjacent"),
])
def test_unmappable_layouts_are_refused(tmp_path, axes, shape, match):
    path = tmp_path / "bad.tif"
    tifffile.imwrite(path, np.zeros(shape, np.uint8), metadata={"axes": axes},
                     photometric="rgb" if "S" in axes else "minisblack")
    with pytest.raises(AxisMappingError, match=match):
        io.read(path)


# -- the promises every format keeps (tests/io/conformance.py) -----------------------------------


class TestTiffConformance(FormatTests):
    format = tiff.FORMAT

    def sample(self, folder: Path) -> tuple[Path, np.ndarray]:
        path = folder / "sample.tif"
        pages = np.random.default_rng(3).integers(0, 60000, (3, 6, 5)).astype(np.uint16)
        tifffile.imwrite(path, pages, photometric="minisblack")
        return path, tifffile.imread(path)[:, None]  # pages (axes Q) are the batch

    def reference(self, path: Path) -> np.ndarray:
        return tifffile.imread(path)
