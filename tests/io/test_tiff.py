"""TIFF reading and writing against tifffile and the real files in shared/data.

TIFF conventions (issue 16 items 2, 3, 6, 7): pixel sizes nobody gave stay unknown, resolution tags belong to
the X and Y axes, compressed/packed/multi-channel/pyramid files read, and library messages reach the user as
one line in their words. Files are written the way other software writes them: tifffile + imagecodecs, and
by hand (struct) where tifffile cannot (no resolution tags, CCITT)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile
from conformance import FormatTests
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core
from helpers import NOA, assert_user_error, needs_data, noa, write_mrc
from helpers import SHARED as DATA
from noa_core import io
from noa_core.errors import AxisMappingError, FileFormatError, HeaderError, spelt
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


# -- other software's TIFF conventions -----------------------------------------------------------------------------


RNG = np.random.default_rng(16)
UINT16 = RNG.integers(0, 4096, (3, 20, 30)).astype(np.uint16)


def _unknown(md) -> bool:
    return md.pixel_size == (0.0, 0.0, 0.0) and any("pixel size unknown" in n for n in md.notices)


def _tags(path, page: int = 0) -> dict:
    with tifffile.TiffFile(path) as tif:
        return {tag.name: tag.value for tag in tif.pages[page].tags}


def _gray(path, **options) -> None:
    """UINT16 as three grey pages, the way tifffile writes them."""
    tifffile.imwrite(path, UINT16, photometric="minisblack", **options)


def _baseline_tiff(path, data: np.ndarray) -> None:
    """A little-endian uint8 TIFF with only the required tags and no resolution tags (as many scanners and
    simple writers make them): tifffile always writes XResolution/YResolution."""
    height, width = data.shape
    entries = [(256, 3, width), (257, 3, height), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, 0),
               (277, 3, 1), (278, 3, height), (279, 4, data.size)]
    ifd_size = 2 + 12 * len(entries) + 4
    data_offset = 8 + ifd_size
    ifd = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<HHII", tag, kind, 1, data_offset if tag == 273 else value) if kind == 4
        else struct.pack("<HHIHH", tag, kind, 1, value, 0) for tag, kind, value in entries) + struct.pack("<I", 0)
    path.write_bytes(b"II*\x00" + struct.pack("<I", 8) + ifd + data.astype(np.uint8).tobytes())


# -- item 2: a pixel size nobody gave stays unknown --------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint16", "int16"])  # ImageJ hyperstack and tifffile shaped file
def test_unknown_pixel_size_writes_no_calibration(tmp_path, dtype):
    md = io.Metadata(format="mrc", shape=(3, 1, 20, 30), dtype=dtype, pixel_size=(0.0, 0.0, 0.0), unit="Å")
    out = tmp_path / "x.tif"
    io.write(out, UINT16.astype(dtype)[:, None], md)
    with tifffile.TiffFile(out) as tif:
        extra = tif.imagej_metadata if tif.is_imagej else tif.shaped_metadata[0]
    assert "unit" not in extra and "spacing" not in extra
    tags = _tags(out)  # tifffile always writes the baseline tags: 1 pixel per no unit
    assert tags["ResolutionUnit"] == tifffile.RESUNIT.NONE and tags["XResolution"] == (1, 1)
    back, md2 = io.read(out)
    np.testing.assert_array_equal(back.numpy()[:, 0], UINT16.astype(dtype))
    assert _unknown(md2) and md2.unit is None


def test_known_pixel_size_writes_x_and_y_tags_with_the_unit(tmp_path):
    md = io.Metadata(format="mrc", shape=(1, 3, 20, 30), dtype="float32", pixel_size=(3.0, 2.0, 0.5), unit="Å")
    out = tmp_path / "x.tif"
    io.write(out, UINT16.astype(np.float32)[None], md)
    tags = _tags(out)
    assert tags["XResolution"] == (2, 1) and tags["YResolution"] == (1, 2)
    with tifffile.TiffFile(out) as tif:
        assert tif.imagej_metadata["unit"] == "\\u00C5" and tif.imagej_metadata["spacing"] == 3.0
    md2 = io.read(out)[1]
    assert md2.pixel_size == pytest.approx((3.0, 2.0, 0.5)) and md2.unit == "Å"


def test_column_major_output_gives_x_resolution_to_the_page_width_as_stored(tmp_path):
    # Issue 25 item 7: an F-ordered section is stored transposed (page rows are X, columns Y): XResolution,
    # which the TIFF standard gives to ImageWidth (the columns), is Y's pixel size, so Fiji and any reader
    # ignoring the shaped axes shows the stored page with its true aspect.
    md = io.Metadata(format="mrc", shape=(1, 1, 20, 30), dtype="float32", pixel_size=(0.0, 2.0, 0.5), unit="nm")
    out = tmp_path / "f.tif"
    io.write(out, UINT16[0].astype(np.float32), md, order="F")
    with tifffile.TiffFile(out) as tif:
        page = tif.pages[0]
        assert tif.series[0].axes == "XY" and page.shape == (30, 20)  # rows: X (30), columns: Y (20)
        width, length = page.tags["ImageWidth"].value, page.tags["ImageLength"].value
    assert (width, length) == (20, 30)
    assert _tags(out)["XResolution"] == (1, 2) and _tags(out)["YResolution"] == (2, 1)  # Y: 2 nm, X: 0.5 nm
    assert io.read(out)[1].pixel_size == pytest.approx((0.0, 2.0, 0.5))
    # and a page as stored, shown by a reader that ignores the axes: width x XResolution = Y's extent
    assert width / (1 / 2) == pytest.approx(20 * 2.0) and length / 2 == pytest.approx(30 * 0.5)


def test_column_major_copy_of_a_real_map_keeps_its_pixel_sizes(tmp_path):
    data = write_mrc(tmp_path / "a.mrc", RNG.normal(size=(4, 6, 10)).astype(np.float32), voxel_size=(2.0, 3.0, 5.0))
    assert noa("copy", tmp_path / "a.mrc", tmp_path / "f.tif", "--order", "F").returncode == 0
    tags = _tags(tmp_path / "f.tif")
    assert tags["XResolution"] == (1, 3) and tags["YResolution"] == (1, 2)  # columns: Y (3 Å), rows: X (2 Å)
    assert noa("copy", tmp_path / "f.tif", tmp_path / "b.mrc").returncode == 0
    with mrcfile.open(tmp_path / "b.mrc") as m:
        np.testing.assert_array_equal(m.data, data)
        assert m.voxel_size.tolist() == pytest.approx((2.0, 3.0, 5.0))


@pytest.mark.parametrize("write", [
    pytest.param(lambda p: _baseline_tiff(p, UINT16[0] % 256), id="no-resolution-tags"),
    pytest.param(lambda p: _gray(p), id="tifffile-default-1-per-none"),
    pytest.param(lambda p: _gray(p, resolution=(72, 72), resolutionunit="INCH"), id="72dpi"),
    pytest.param(lambda p: _gray(p, resolution=(72, 72), resolutionunit="NONE"), id="72-no-unit"),
    pytest.param(lambda p: tifffile.imwrite(p, UINT16, imagej=True, resolution=(2, 2)), id="imagej-no-unit"),
])
def test_files_naming_no_length_read_as_unknown(tmp_path, write):
    path = tmp_path / "x.tif"
    write(path)
    md = io.read(path)[1]
    assert _unknown(md) and md.unit is None
    assert io.probe(path).metadata.pixel_size == (0.0, 0.0, 0.0)


def test_real_resolutions_still_read(tmp_path):
    _gray(tmp_path / "dpi.tif", resolution=(300, 300), resolutionunit="INCH")
    md = io.read(tmp_path / "dpi.tif")[1]
    assert md.pixel_size[1:] == pytest.approx((1 / 300, 1 / 300)) and md.unit == "inch"


def test_mrc_with_unknown_voxel_size_round_trips_through_tiff(tmp_path):
    data = write_mrc(tmp_path / "a.mrc", RNG.normal(size=(4, 6, 5)).astype(np.float32), voxel_size=0)
    for order in ("C", "F"):
        tif, back = tmp_path / f"b{order}.tif", tmp_path / f"c{order}.mrc"
        assert noa("copy", tmp_path / "a.mrc", tif, "--order", order).returncode == 0
        tags = _tags(tif)
        assert tags["ResolutionUnit"] == tifffile.RESUNIT.NONE
        with tifffile.TiffFile(tif) as t:
            extra = t.imagej_metadata if t.is_imagej else t.shaped_metadata[0]
        assert "unit" not in extra and "spacing" not in extra
        result = noa("copy", tif, back)
        assert result.returncode == 0, result.stderr
        with mrcfile.open(back) as m:
            np.testing.assert_array_equal(m.data, data)
            assert m.voxel_size.tolist() == (0.0, 0.0, 0.0)


# -- item 3: XResolution and YResolution belong to the page's columns and rows as stored ------------------------


@pytest.mark.parametrize("axes, shape, channel, photometric", [
    ("YX", (4, 5), None, "minisblack"),
    ("YXC", (4, 5, 3), None, "minisblack"),
    ("YXT", (4, 5, 3), None, "minisblack"),
    ("YXZ", (4, 5, 3), None, "minisblack"),
    ("QTZYXC", (2, 1, 3, 4, 5, 2), 1, "minisblack"),
    ("YXS", (4, 5, 3), 2, "rgb"),
])
def test_resolution_tags_belong_to_x_and_y(tmp_path, axes, shape, channel, photometric):
    data = np.arange(np.prod(shape), dtype=np.uint16).reshape(shape)
    path = tmp_path / "a.tif"
    tifffile.imwrite(path, data, metadata={"axes": axes}, photometric=photometric,
                     resolution=(2, 0.5), resolutionunit="CENTIMETER")
    array, md = io.read(path, channel=channel)
    assert md.unit == "cm" and md.pixel_size == pytest.approx((0.0, 2.0, 0.5)), md.axes
    # values: tifffile's array with the channel taken, in B, Z, Y, X order
    if channel is not None:
        data = np.take(data, channel, axis=axes.index("C" if "C" in axes else "S"))
        axes = axes.replace("C", "").replace("S", "")
    batch = [i for i, a in enumerate(axes) if a not in "ZYX" and data.shape[i] > 1]
    order = batch + [axes.index(a) for a in "ZYX" if a in axes]
    expected = np.moveaxis(data, order, range(len(order))).reshape(array.shape)
    np.testing.assert_array_equal(array.numpy(), expected)


def test_a_transposed_page_gives_x_resolution_to_y(tmp_path):
    # A shaped file of axes 'XY' stores rows of X: its columns (ImageWidth, XResolution) run along Y.
    data = np.arange(20, dtype=np.uint16).reshape(5, 4)
    tifffile.imwrite(tmp_path / "a.tif", data, metadata={"axes": "XY"}, resolution=(2, 0.5),
                     resolutionunit="CENTIMETER")
    array, md = io.read(tmp_path / "a.tif")
    assert md.unit == "cm" and md.pixel_size == pytest.approx((0.0, 0.5, 2.0))
    np.testing.assert_array_equal(array.numpy()[0, 0], data.T)


def test_shaped_spacing_is_the_z_step(tmp_path):
    tifffile.imwrite(tmp_path / "z.tif", UINT16, metadata={"axes": "ZYX", "spacing": 3.0},
                     resolution=(2, 0.5), resolutionunit="CENTIMETER")
    assert io.read(tmp_path / "z.tif")[1].pixel_size == pytest.approx((3.0, 2.0, 0.5))


def test_imagej_hyperstack_spacing_and_unit(tmp_path):
    data = RNG.integers(0, 255, (2, 3, 2, 4, 5)).astype(np.uint8)  # TZCYX
    tifffile.imwrite(tmp_path / "ij.tif", data, imagej=True, resolution=(2, 0.5),
                     metadata={"axes": "TZCYX", "spacing": 3.0, "unit": "um"})
    with pytest.raises(AxisMappingError, match="channel=N"):
        io.read(tmp_path / "ij.tif")
    array, md = io.read(tmp_path / "ij.tif", channel=1)
    np.testing.assert_array_equal(array.numpy(), data[:, :, 1])
    assert md.pixel_size == pytest.approx((3.0, 2.0, 0.5)) and md.unit == "um"


def test_ome_physical_sizes_with_units_win(tmp_path):
    tifffile.imwrite(tmp_path / "a.ome.tif", UINT16, ome=True, resolution=(1, 1), resolutionunit="CENTIMETER",
                     metadata={"axes": "ZYX", "PhysicalSizeX": 0.5, "PhysicalSizeXUnit": "nm", "PhysicalSizeY": 2.0,
                               "PhysicalSizeYUnit": "nm", "PhysicalSizeZ": 3.0, "PhysicalSizeZUnit": "µm"})
    md = io.read(tmp_path / "a.ome.tif")[1]
    assert md.unit == "nm" and md.pixel_size == pytest.approx((3000.0, 2.0, 0.5))
    assert not any("pixel size unknown" in n for n in md.notices)


# -- item 6: compressed, packed, multi-channel and pyramid files -------------------------------------------------

FLOATS = RNG.normal(size=(3, 20, 30)).astype(np.float32)


@pytest.mark.parametrize("data, options", [
    (UINT16, {"compression": "lzw"}),
    (UINT16, {"compression": "lzw", "predictor": True}),
    (UINT16, {"compression": "deflate"}),
    (UINT16, {"compression": "zstd"}),
    (UINT16, {"compression": "packbits"}),
    (UINT16, {"compression": "lzma"}),
    (FLOATS, {"compression": "deflate", "predictor": True}),  # floating-point predictor
    (UINT16, {"tile": (16, 16), "compression": "zstd"}),
    (UINT16, {"tile": (16, 16)}),
    (UINT16, {"rowsperstrip": 3}),
    (UINT16, {"rowsperstrip": 3, "compression": "lzw"}),
    (UINT16, {"bigtiff": True}),
    (FLOATS, {"byteorder": ">"}),
    (UINT16, {"byteorder": ">", "compression": "deflate", "bigtiff": True}),
], ids=lambda v: "-".join(f"{k}={v}" for k, v in v.items()) if isinstance(v, dict) else str(v.dtype))
def test_encoded_files_read_as_written(tmp_path, data, options):
    path = tmp_path / "x.tif"
    tifffile.imwrite(path, data, photometric="minisblack", **options)
    array, _md = io.read(path)
    np.testing.assert_array_equal(array.numpy()[:, 0], data)
    assert array.dtype == data.dtype.newbyteorder("=") and io.probe(path).shape == (3, 1, 20, 30)


def test_jpeg_reads_as_tifffile_decodes_it(tmp_path):
    image = (np.add.outer(np.arange(32), np.arange(48)) * 2).astype(np.uint8)
    tifffile.imwrite(tmp_path / "j.tif", image, compression="jpeg", photometric="minisblack")
    np.testing.assert_array_equal(io.read(tmp_path / "j.tif")[0].numpy()[0, 0], tifffile.imread(tmp_path / "j.tif"))


def test_one_bit_pages_read(tmp_path):
    bits = RNG.integers(0, 2, (3, 20, 30)).astype(bool)
    tifffile.imwrite(tmp_path / "b.tif", bits)
    np.testing.assert_array_equal(io.read(tmp_path / "b.tif")[0].numpy()[:, 0], bits)


def test_twelve_bit_packed_reads(tmp_path):
    data = (np.arange(3 * 21 * 31).reshape(3, 21, 31) * 37 % 4096).astype(np.uint16)
    tifffile.imwrite(tmp_path / "p.tif", data, bitspersample=12, photometric="minisblack")
    assert _tags(tmp_path / "p.tif")["BitsPerSample"] == 12
    np.testing.assert_array_equal(io.read(tmp_path / "p.tif")[0].numpy()[:, 0], data)


def test_packed_file_cut_short_is_still_refused(tmp_path):
    data = np.zeros((3, 21, 31), np.uint16)
    path = tmp_path / "p.tif"
    tifffile.imwrite(path, data, bitspersample=12, photometric="minisblack", contiguous=True)
    offset = min(tifffile.TiffFile(path).pages[0].dataoffsets)
    with open(path, "r+b") as f:
        f.truncate(offset + 100)
    with pytest.raises(FileFormatError, match="file"):
        io.read(path)


# CCITT modified Huffman (TIFF compression 2) run codes, white and black runs of 0..8 (ITU-T T.4 table 2).
_WHITE = ("00110101", "000111", "0111", "1000", "1011", "1100", "1110", "1111", "10011")
_BLACK = ("0000110111", "010", "11", "10", "011", "0011", "0010", "00011", "000101")


def test_ccitt_bilevel_reads(tmp_path):
    """tifffile cannot encode CCITT: a bilevel file is written by tifffile, then its strip replaced by runs
    coded by hand, as a fax or document scanner writes them."""
    runs = [[3, 2, 3], [0, 8], [8], [1] * 8]  # white and black runs alternate, white first
    bits, coded = np.zeros((4, 8), bool), b""
    for row, lengths in enumerate(runs):
        code, x = "", 0
        for i, n in enumerate(lengths):
            code += (_BLACK if i % 2 else _WHITE)[n]
            bits[row, x:x + n] = bool(i % 2)
            x += n
        code += "0" * (-len(code) % 8)  # rows start on a byte
        coded += int(code, 2).to_bytes(len(code) // 8, "big")
    path = tmp_path / "fax.tif"
    tifffile.imwrite(path, bits, photometric="miniswhite")
    end = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(coded)
    with tifffile.TiffFile(path, mode="r+b") as tif:
        tags = tif.pages[0].tags
        tags["StripOffsets"].overwrite(end)
        tags["StripByteCounts"].overwrite(len(coded))
        tags["Compression"].overwrite(2)
    np.testing.assert_array_equal(tifffile.imread(path), bits)  # the oracle agrees with the runs
    np.testing.assert_array_equal(io.read(path)[0].numpy()[0, 0], bits)


def test_rgb_needs_a_channel(tmp_path):
    rgb = RNG.integers(0, 255, (20, 30, 3)).astype(np.uint8)
    path = tmp_path / "rgb.tif"
    tifffile.imwrite(path, rgb, photometric="rgb")
    with pytest.raises(AxisMappingError, match=r"3 samples per pixel.*channel=N"):
        io.read(path)
    for channel in range(3):
        np.testing.assert_array_equal(io.read(path, channel=channel)[0].numpy()[0, 0], rgb[..., channel])
    assert io.probe(path, channel=1).shape == (1, 1, 20, 30)
    with pytest.raises(HeaderError, match=r"channel: 3 is not in 0..2"):
        io.read(path, channel=3)
    assert_user_error(noa("info", path), "samples per pixel", "--channel N")
    out = tmp_path / "g.mrc"
    assert noa("copy", path, out, "--channel", "1").returncode == 0
    with mrcfile.open(out) as m:
        np.testing.assert_array_equal(m.data, rgb[..., 1].astype(m.data.dtype))


def test_channels_beside_time_need_a_channel(tmp_path):
    data = RNG.integers(0, 255, (2, 3, 4, 5)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "tc.tif", data, metadata={"axes": "TCYX"}, photometric="minisblack")
    assert_user_error(noa("info", tmp_path / "tc.tif"), "channel axis C (3 channels)", "--channel N")
    np.testing.assert_array_equal(io.read(tmp_path / "tc.tif", channel=2)[0].numpy()[:, 0], data[:, 2])


def test_mrc_refuses_tiff_read_options(tmp_path):
    write_mrc(tmp_path / "a.mrc", np.zeros((2, 3, 4), np.float32))
    for option in ("channel", "level"):
        with pytest.raises(FileFormatError, match=f"{option}: MRC files have no"):
            io.read(tmp_path / "a.mrc", **{option: 0})
    assert_user_error(noa("info", tmp_path / "a.mrc", "--channel", "0"), "channel=", "TIFF")


def test_pyramid_levels(tmp_path):
    image = RNG.integers(0, 60000, (32, 48)).astype(np.uint16)
    path = tmp_path / "pyramid.tif"
    with tifffile.TiffWriter(path) as tif:
        tif.write(image, subifds=2, resolution=(4, 4), resolutionunit="CENTIMETER", photometric="minisblack")
        tif.write(image[::2, ::2], subfiletype=1, photometric="minisblack")
        tif.write(image[::4, ::4], subfiletype=1, photometric="minisblack", compression="zstd")
    array, md = io.read(path)
    np.testing.assert_array_equal(array.numpy()[0, 0], image)
    assert any("3 pyramid levels" in n and "level=N" in spelt(n) for n in md.notices)
    for level, step in ((1, 2), (2, 4)):
        array, md = io.read(path, level=level)
        np.testing.assert_array_equal(array.numpy()[0, 0], image[::step, ::step])
        assert md.pixel_size[1:] == pytest.approx((0.25 * step, 0.25 * step)) and md.unit == "cm"
    with pytest.raises(HeaderError, match=r"level: 3 is not in 0..2"):
        io.read(path, level=3)
    out = tmp_path / "l2.tif"
    assert noa("copy", path, out, "--level", "2").returncode == 0
    np.testing.assert_array_equal(tifffile.imread(out), image[::4, ::4])


# -- item 7: one line on stderr, in the user's words -------------------------------------------------------------


def _set_tag(path, name: str, value, page: int = 0) -> None:
    with tifffile.TiffFile(path, mode="r+b") as tif:
        tif.pages[page].tags[name].overwrite(value)


def _break_page_chain(path) -> None:
    """Point the last page's next-IFD offset past the end of the file (tifffile then logs a warning)."""
    with tifffile.TiffFile(path) as tif:
        last = tif.pages[-1]
        entries_end = last.offset + 2 + 12 * len(last.tags)
    with open(path, "r+b") as f:
        f.seek(entries_end)
        f.write(struct.pack("<I", 99_999_999))


def test_library_warnings_become_notices(tmp_path):
    path = tmp_path / "chain.tif"
    _gray(path)
    _break_page_chain(path)
    result = noa("info", path)
    assert result.returncode == 0 and result.stderr == ""
    assert "invalid page offset 99999999" in result.stdout and "tifffile" not in result.stdout


@pytest.mark.parametrize("broken_chain", [False, True])
def test_unknown_compression_is_one_line(tmp_path, broken_chain):
    path = tmp_path / "odd.tif"
    _gray(path)
    for page in range(3):
        _set_tag(path, "Compression", 60000, page)
    if broken_chain:
        _break_page_chain(path)
    result = noa("copy", path, tmp_path / "out.mrc")
    assert_user_error(result, "compression code 60000 is not a TIFF compression noa knows")
    assert "Error" not in result.stderr and "<" not in result.stderr
    assert not (tmp_path / "out.mrc").exists()


def test_lzw_without_imagecodecs_says_so(tmp_path):
    """Where imagecodecs is missing (an install without it), the message names it, in one line."""
    path = tmp_path / "lzw.tif"
    tifffile.imwrite(path, UINT16, compression="lzw", photometric="minisblack")
    cli = (f"import sys; sys.modules['imagecodecs'] = None; sys.argv = {[NOA[0], 'stats', str(path)]!r}; "
           "from noa_cli.main import run; run()")
    result = subprocess.run([sys.executable, "-c", cli], capture_output=True, text=True, timeout=120)
    assert_user_error(result, "LZW compression needs imagecodecs")
    assert "Error" not in result.stderr


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ["float32", "int16"])  # ImageJ metadata (float32, C) or tifffile's shaped JSON
def test_the_origin_survives_a_tiff_round_trip(tmp_path, order, dtype):
    """Issue 40 item 7: `noa copy rect.mrc r.tif; noa copy r.tif back.mrc` turned origin (30, 20, 10) Å into 0."""
    import mrcfile

    with mrcfile.new(tmp_path / "rect.mrc") as f:
        f.set_data(np.arange(4 * 5 * 6, dtype=dtype).reshape(4, 5, 6))
        f.voxel_size = (1.5, 2.0, 2.5)
        f.header.origin = (10.0, 20.0, 30.0)  # x, y, z
    assert noa("copy", tmp_path / "rect.mrc", tmp_path / "r.tif", "--order", order).returncode == 0
    assert noa("copy", tmp_path / "r.tif", tmp_path / "back.mrc").returncode == 0
    with mrcfile.open(tmp_path / "back.mrc") as f:
        assert (float(f.header.origin.x), float(f.header.origin.y), float(f.header.origin.z)) == (10.0, 20.0, 30.0)
        assert f.voxel_size.tolist() == pytest.approx((1.5, 2.0, 2.5))
    if dtype == "float32" and order == "C":  # what Fiji reads: ImageJ's origin in pixels
        with tifffile.TiffFile(tmp_path / "r.tif") as tif:
            info = tif.imagej_metadata
        assert (info["xorigin"], info["yorigin"], info["zorigin"]) == (10.0 / 1.5, 20.0 / 2.0, 30.0 / 2.5)
