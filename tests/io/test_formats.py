"""The format protocol and its registry: both real formats against mrcfile and tifffile, detection
order, the MRC part of the metadata, and a throw-away format added by one registry entry.

Bad inputs: each gets its own FileFormatError subclass naming the file and the field.

Hostile input files (issue 20): damaged or truncated compressed streams, small files that claim or
expand to gigabytes, and a FIFO where a file should be.

Oracles: Python's gzip and bz2 modules say which streams are damaged, mrcfile gives the values, and
the peak memory of the real ``noa`` command is measured in a child process of its own."""

from __future__ import annotations

import ast
import bz2
import dataclasses
import gc
import gzip
import json
import lzma
import math
import os
import random
import struct
import subprocess
import sys
import threading
import tracemalloc
import zlib
from collections.abc import Mapping
from io import StringIO
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile
from conformance import SWITCHED, FormatTests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mrcfile.dtypes import HEADER_DTYPE

from helpers import NOA, assert_user_error, needs_data, noa, write_mrc
from helpers import SHARED as DATA
from noa_core import io, limits
from noa_core.array import layout
from noa_core.array.layout import Shape4
from noa_core.errors import (
    AxisMappingError,
    CorruptFileError,
    EmptyFileError,
    FileFormatError,
    HeaderError,
    LimitError,
    MissingFileError,
    NotAFileError,
    SizeError,
    TruncatedFileError,
    UnknownFormatError,
    UnsupportedModeError,
    WriteDTypeError,
)
from noa_core.io import compression, formats, mapped, mrc, read_options, tiff
from noa_core.io.metadata import HeaderStatistics, Metadata
from noa_core.io.protocol import Created, OutputSpec, Probe, ReadRequest
from noa_core.operations import spec

IO_DIR = Path(io.__file__).parent
TESTS_DIR = Path(__file__).parent


# ---------------------------------------------------------------------------------------------
# The registry, and the promises of every format
# ---------------------------------------------------------------------------------------------


def _conformance_suites() -> dict[str, str]:
    """The format modules whose FORMAT a test class subclassing FormatTests names, with that class's file."""
    suites = {}
    for path in sorted(TESTS_DIR.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "FormatTests" for b in node.bases):
                for statement in node.body:
                    if (isinstance(statement, ast.Assign) and statement.targets[0].id == "format"
                            and isinstance(statement.value, ast.Attribute) and statement.value.attr == "FORMAT"):
                        suites[statement.value.value.id] = path.name
    return suites


def test_every_registered_format_is_tested_by_the_conformance_suite():
    suites = _conformance_suites()
    for fmt in formats.ALL_FORMATS:
        module = type(fmt).__module__.rpartition(".")[2]
        assert module in suites, f"no test class subclassing FormatTests (tests/io/conformance.py) for {fmt.title}"


def test_read_options_are_the_formats_own_and_each_reaches_the_doors():
    assert set(read_options.READ_OPTIONS) == {fmt.read_options for fmt in formats.ALL_FORMATS}
    # the shared READING parameters are the formats' options, in their order (MRC's two as one switch)
    names = [name for name in read_options.fields() if name not in SWITCHED or SWITCHED[name] == name]
    assert [param.name for param in spec.READING] == names
    with pytest.raises(KeyError):
        read_options.default("colour")


def test_a_read_option_is_given_when_it_differs_from_its_default():
    assert read_options.given({"as_stack": False, "series": None, "channel": 0, "eer_group_last": "drop",
                               "eer_upsampling": 2, "gain_flip_y": False}) == {"channel": 0, "eer_upsampling": 2}
    with pytest.raises(TypeError, match="'seires' is not a read option"):
        io.read("anything.mrc", seires=0)


def test_extensions_belong_to_one_format_each():
    extensions = [e for fmt in formats.FORMATS for e in fmt.extensions]
    assert len(extensions) == len(set(extensions))


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_output_format_and_suffixes_come_from_the_registry(fmt):
    for ext in fmt.output_extensions:
        assert formats.output_format(Path(f"a{ext.upper()}")) is fmt
    for ext in fmt.extensions:
        assert formats.strip_image_suffix(f"b.c{ext}") == "b.c"
    assert formats.strip_image_suffix("a.mrc.gz") == "a" and formats.strip_image_suffix("b.ome.tif") == "b.ome"
    # SerialEM's metadata is named after its image
    assert formats.strip_image_suffix("TS_01.mrc.mdoc") == "TS_01" and formats.strip_image_suffix("TS.MDOC") == "TS"


def test_unknown_names_and_extensions_are_refused():
    with pytest.raises(UnknownFormatError, match="'zarr' is not one noa knows"):
        formats.by_name("zarr")
    with pytest.raises(UnknownFormatError,
                       match=r"x\.png: extension: '\.png' is not one noa writes \(\.mrc .*\.tiff\)"):
        formats.output_format(Path("x.png"))


def test_no_format_name_outside_the_format_modules():
    """Only mrc.py and tiff.py may spell a format's name: everything else goes through the registry (the package's
    face, __init__.py, names its modules, no format)."""
    for path in sorted(IO_DIR.glob("*.py")):
        if path.name in ("mrc.py", "tiff.py", "__init__.py"):
            continue
        strings = {node.value for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        assert not strings & {"mrc", "tiff", "MRC", "TIFF"}, path.name


# ---------------------------------------------------------------------------------------------
# Detection: signatures first, in registry order; then extensions
# ---------------------------------------------------------------------------------------------


def test_signature_wins_over_extension(tmp_path):
    tifffile.imwrite(tmp_path / "a.mrc", np.zeros((3, 4), np.uint16))
    assert formats.detect(tmp_path / "a.mrc") == (tiff.FORMAT, None)
    with mrcfile.new(tmp_path / "b.tif") as m:
        m.set_data(np.zeros((3, 4), np.float32))
    assert formats.detect(tmp_path / "b.tif") == (mrc.FORMAT, None)


def test_extension_claims_or_refuses_files_without_signature(tmp_path):
    with mrcfile.new(tmp_path / "old.mrc") as m:
        m.set_data(np.arange(12, dtype=np.float32).reshape(3, 4))
    raw = bytearray((tmp_path / "old.mrc").read_bytes())
    raw[208:212] = b"\0\0\0\0"  # an MRC file from before MRC2014
    (tmp_path / "old.mrc").write_bytes(bytes(raw))
    assert formats.detect(tmp_path / "old.mrc") == (mrc.FORMAT, None)
    np.testing.assert_array_equal(io.read(tmp_path / "old.mrc")[0].numpy().ravel(), np.arange(12))
    (tmp_path / "bad.tif").write_bytes(b"hello" * 100)
    with pytest.raises(CorruptFileError, match=r"bad\.tif: magic bytes: b'hell' is not a TIFF signature"):
        formats.detect(tmp_path / "bad.tif")
    (tmp_path / "bad.xyz").write_bytes(b"hello" * 100)
    with pytest.raises(UnknownFormatError, match=r"magic bytes: neither MRC nor TIFF \(extension '\.xyz'; known: "
                                                 r"\.mrc \.mrcs \.map \.st \.ali \.rec \.tif \.tiff, optionally "
                                                 r"\.gz/\.bz2 for MRC\)"):
        formats.detect(tmp_path / "bad.xyz")


def test_compressed_input_only_where_the_format_reads_it(tmp_path):
    import gzip

    tifffile.imwrite(tmp_path / "a.tif", np.zeros((3, 4), np.uint16))
    (tmp_path / "a.tif.gz").write_bytes(gzip.compress((tmp_path / "a.tif").read_bytes()))
    with pytest.raises(UnknownFormatError, match="gzip-compressed TIFF is not supported; decompress it first"):
        formats.detect(tmp_path / "a.tif.gz")
    io.write(tmp_path / "b.mrc", np.ones((3, 4), np.float32))
    (tmp_path / "b.mrc.gz").write_bytes(gzip.compress((tmp_path / "b.mrc").read_bytes()))
    assert formats.detect(tmp_path / "b.mrc.gz") == (mrc.FORMAT, "gzip")


def test_read_options_of_the_other_format_are_refused(tmp_path):
    io.write(tmp_path / "a.mrc", np.ones((3, 4), np.float32))
    io.write(tmp_path / "a.tif", np.ones((3, 4), np.float32))
    with pytest.raises(FileFormatError, match="series: MRC files hold one series; series= is for TIFF"):
        io.read(tmp_path / "a.mrc", series=0)
    with pytest.raises(FileFormatError, match="as_stack/as_volume: TIFF axes name their meaning"):
        io.read(tmp_path / "a.tif", as_volume=True)


# ---------------------------------------------------------------------------------------------
# Both real formats against their reference libraries
# ---------------------------------------------------------------------------------------------


def _read_mrcfile(path: Path) -> np.ndarray:
    report = StringIO()
    assert mrcfile.validate(str(path), print_file=report), report.getvalue()
    with mrcfile.open(path) as m:
        return np.array(m.data)


def _read_tifffile(path: Path) -> np.ndarray:
    return tifffile.imread(path)


def _write_mrcfile(path: Path, data: np.ndarray) -> None:
    with mrcfile.new(path) as m:
        m.set_data(data)


def _write_tifffile(path: Path, data: np.ndarray) -> None:
    tifffile.imwrite(path, data, photometric="minisblack")


REFERENCE = {"mrc": (".mrc", _read_mrcfile, _write_mrcfile), "tiff": (".tif", _read_tifffile, _write_tifffile)}


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dtype", ["float32", "int16", "uint16"])
def test_round_trips_against_the_reference_library(tmp_path, fmt, dtype):
    ext, read_reference, write_reference = REFERENCE[fmt.name]
    data = (np.arange(3 * 4 * 5) % 251).astype(dtype).reshape(3, 4, 5)
    assert io.write(tmp_path / f"noa{ext}", data) == []
    np.testing.assert_array_equal(read_reference(tmp_path / f"noa{ext}").reshape(data.shape), data)
    write_reference(tmp_path / f"ref{ext}", data)
    array, md = io.read(tmp_path / f"ref{ext}")
    np.testing.assert_array_equal(array.numpy().reshape(data.shape), data)
    assert md.format == fmt.name and (md.mrc is not None) == (fmt is mrc.FORMAT)


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_check_writable_refuses_before_any_file_exists(tmp_path, fmt):
    ext = fmt.output_extensions[0]
    with pytest.raises(WriteDTypeError):
        io.create(tmp_path / f"a{ext}", (1, 1, 2, 2), "bool")
    with pytest.raises(FileFormatError, match=r"shape: .* is empty"):
        io.create(tmp_path / f"b{ext}", (1, 1, 0, 2), "float32")
    assert list(tmp_path.iterdir()) == []


def test_unknown_unit_notice_is_given_once(tmp_path):
    md = Metadata(format="tiff", shape=(1, 1, 2, 3), dtype="float32", pixel_size=(0.0, 2.0, 2.0), unit="furlong")
    notices = io.write(tmp_path / "a.mrc", np.ones((2, 3), np.float32), md, order="F")
    assert [n.split(": ", 1)[1] for n in notices] == [
        "pixel size unit 'furlong' is unknown; values written unchanged as Å",
        "stored column-major (mapc=2, mapr=1, maps=3): readers that ignore the axis mapping show the transpose"]


# ---------------------------------------------------------------------------------------------
# The MRC part of the metadata
# ---------------------------------------------------------------------------------------------


def _mrc_metadata(extended: bytes | None = b"x" * 128) -> Metadata:
    fields = mrc.MrcFields(mode=2, start=(1, 2, 3), sampling=(4, 5, 6), cell_angles=(70.0, 80.0, 85.0),
                           space_group=1, extended_header=extended, exttyp="FEI1" if extended else None)
    return Metadata(format="mrc", shape=(1, 4, 5, 6), dtype="float32", pixel_size=(1.0, 2.0, 3.0), mrc=fields)


def test_mrc_fields_follow_their_axes_through_permute():
    md = _mrc_metadata()
    out = md.permute((0, 3, 1, 2))
    assert out.pixel_size == (3.0, 1.0, 2.0)
    assert (out.mrc.start, out.mrc.sampling, out.mrc.cell_angles) == ((3, 1, 2), (6, 4, 5), (85.0, 70.0, 80.0))
    assert out.mrc.extended_header is None and out.mrc.exttyp is None and out.mrc.space_group == 1
    assert out.notices == ["extended header dropped: axes permuted by (0, 3, 1, 2), so it no longer matches the "
                           "sections"]
    from_batch = md.permute((1, 0, 2, 3))  # the batch axis becomes the depth: unknown values
    assert (from_batch.mrc.start[0], from_batch.mrc.sampling[0], from_batch.mrc.cell_angles[0]) == (0, 0, 90.0)
    same = md.permute((0, 1, 2, 3))
    assert same.mrc == md.mrc and same.notices == [] and md.notices == []


def test_mrc_fields_through_broadcast():
    md = _mrc_metadata()
    out = md.broadcast((3, 4, 5, 6))  # only the batch grows: sampling kept, sections no longer match
    assert out.mrc.sampling == (4, 5, 6) and out.mrc.extended_header is None
    assert out.notices == ["extended header dropped: shape broadcast from (1, 4, 5, 6) to (3, 4, 5, 6), "
                           "so it no longer matches the sections"]
    thin = Metadata(format="mrc", shape=(1, 1, 5, 6), dtype="float32", mrc=mrc.MrcFields(sampling=(1, 5, 6)))
    assert thin.broadcast((1, 4, 5, 6)).mrc.sampling == (0, 5, 6)
    assert _mrc_metadata(None).broadcast((2, 4, 5, 6)).notices == []
    assert Metadata(format="tiff", shape=(1, 1, 5, 6), dtype="uint8").broadcast((2, 1, 5, 6)).mrc is None


def test_mrc_fields_reach_the_written_header(tmp_path):
    md = _mrc_metadata()
    io.write(tmp_path / "a.mrc", np.zeros((4, 5, 6), np.float32), md)
    _, back = io.read(tmp_path / "a.mrc")
    assert back.mrc == md.mrc
    with mrcfile.open(tmp_path / "a.mrc") as m:
        assert m.header.exttyp == b"FEI1" and (int(m.header.mx), int(m.header.nzstart)) == (6, 1)


# ---------------------------------------------------------------------------------------------
# A throw-away format: one class, its read options and one registry entry
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RawReadOptions:
    """RAW files take no read options."""


class RawFormat:
    """A 64-byte header (signature, BDHW shape, dtype, min/max) and packed C-ordered data."""

    name = "raw"
    title = "RAW"
    extensions = (".raw",)
    output_extensions = (".raw",)
    media_type = "application/octet-stream"
    compressed_input = False
    header_statistics = True
    store = False
    checks_size = False  # formats.read probes it first under a voxel limit
    indexed = False
    read_options = RawReadOptions
    lacking: Mapping[str, str] = {}
    SIGNATURE = b"NOARAW01"
    HEADER = 64

    def detect(self, head: bytes, path: Path) -> bool:
        return head.startswith(self.SIGNATURE)

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        raise CorruptFileError(f"{path}: signature: not a RAW file")

    def _header(self, path: Path) -> tuple[Shape4, np.dtype, float, float]:
        head = path.read_bytes()[:self.HEADER]
        if len(head) < self.HEADER:
            raise TruncatedFileError(f"{path}: header: {len(head)} bytes of {self.HEADER}")
        shape = layout.as_shape4(tuple(int(n) for n in np.frombuffer(head, "<i4", 4, 8)))
        dtype = np.dtype(head[24:32].rstrip(b"\0").decode())
        if path.stat().st_size < self.HEADER + math.prod(shape) * dtype.itemsize:
            raise TruncatedFileError(f"{path}: data: shorter than its {shape} {dtype} values")
        low, high = np.frombuffer(head, "<f8", 2, 32)
        return shape, dtype, float(low), float(high)

    def _metadata(self, path: Path, shape: Shape4, dtype: np.dtype, low: float, high: float) -> Metadata:
        return Metadata(format=self.name, shape=shape, dtype=dtype.name, path=str(path),
                        statistics=HeaderStatistics(low, high, None, None))

    def read(self, path: Path, request: ReadRequest[RawReadOptions]):
        from noa_core.array import asarray

        shape, dtype, low, high = self._header(path)
        flat = mapped.map_input(path, self.HEADER, dtype, math.prod(shape))
        return asarray(flat.reshape(shape)), self._metadata(path, shape, dtype, low, high)

    def probe(self, path: Path, request: ReadRequest[RawReadOptions]) -> Probe:
        shape, dtype, low, high = self._header(path)
        return Probe(shape, layout.strides_for(shape), dtype, self._metadata(path, shape, dtype, low, high))

    def check_writable(self, dtype: np.dtype, shape, path: Path) -> None:
        if dtype.kind not in "iuf":
            raise FileFormatError(f"{path}: dtype: {dtype} cannot be stored in RAW")

    def _header_bytes(self, spec: OutputSpec, statistics: HeaderStatistics) -> bytes:
        stats = (statistics.min or 0.0, statistics.max or 0.0)
        return (self.SIGNATURE + np.array(spec.shape, "<i4").tobytes() + spec.dtype.str.encode().ljust(8, b"\0")
                + np.array(stats, "<f8").tobytes()).ljust(self.HEADER, b"\0")

    def create(self, temp: Path, spec: OutputSpec) -> Created:
        with open(temp, "r+b") as f:
            f.write(self._header_bytes(spec, HeaderStatistics(None, None, None, None)))
            f.truncate(self.HEADER + math.prod(spec.shape) * spec.dtype.itemsize)
        return Created(self.HEADER, [f"{spec.path}: RAW keeps no pixel size"])

    def finish(self, temp: Path, spec: OutputSpec, statistics: HeaderStatistics) -> None:
        with open(temp, "r+b") as f:
            f.write(self._header_bytes(spec, statistics))


RAW = RawFormat()


class TestRawConformance(FormatTests):
    """A new format inherits every promise: the throw-away one keeps them all, once registered."""

    format = RAW

    @pytest.fixture(autouse=True)
    def registered(self, monkeypatch):
        monkeypatch.setattr(formats, "FORMATS", formats.FORMATS + (RAW,))
        monkeypatch.setattr(formats, "ALL_FORMATS", formats.ALL_FORMATS + (RAW,))

    def sample(self, folder: Path) -> tuple[Path, np.ndarray]:
        """Written by hand, as the format describes its files (no library writes RAW)."""
        values = np.arange(2 * 3 * 4, dtype=np.int16).reshape(2, 1, 3, 4)
        path = folder / "sample.raw"
        spec = OutputSpec(path, (2, 1, 3, 4), values.dtype, "C", None, None)
        path.write_bytes(RAW._header_bytes(spec, HeaderStatistics(0.0, 23.0, None, None)) + values.tobytes())
        return path, values

    def reference(self, path: Path) -> np.ndarray:
        head = path.read_bytes()[:RAW.HEADER]
        return np.fromfile(path, np.dtype(head[24:32].rstrip(b"\0").decode()), offset=RAW.HEADER)


def test_a_new_format_is_one_class_and_one_registry_entry(tmp_path, monkeypatch):
    raw = RAW
    monkeypatch.setattr(formats, "FORMATS", formats.FORMATS + (raw,))
    data = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)
    assert io.write(tmp_path / "a.raw", data) == [f"{tmp_path / 'a.raw'}: RAW keeps no pixel size"]
    assert formats.detect(tmp_path / "a.raw") == (raw, None)
    assert formats.output_format(tmp_path / "b.RAW") is raw and formats.strip_image_suffix("c.raw") == "c"
    array, md = io.read(tmp_path / "a.raw")
    np.testing.assert_array_equal(array.numpy(), data)
    assert md.format == "raw" and md.statistics.min == 0.0 and md.statistics.max == 23.0
    # converting to and from the real formats goes through the same Writer
    io.write(tmp_path / "a.mrc", array, md)
    io.write(tmp_path / "back.raw", *io.read(tmp_path / "a.mrc"))
    np.testing.assert_array_equal(io.read(tmp_path / "back.raw")[0].numpy(), data)
    with pytest.raises(FileFormatError, match="complex64 cannot be stored in RAW"):
        io.create(tmp_path / "c.raw", (1, 1, 2, 2), "complex64")
    (tmp_path / "junk.xyz").write_bytes(b"hello" * 100)
    with pytest.raises(UnknownFormatError, match=r"none of MRC, TIFF, RAW \(extension '\.xyz'; known: .* \.raw, "
                                                 r"optionally \.gz/\.bz2 for MRC\)"):
        io.read(tmp_path / "junk.xyz")


# -- bad files -----------------------------------------------------------------------------------------------------


def good_mrc(tmp_path: Path, name="x.mrc") -> Path:
    path = tmp_path / name
    io.write(path, np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4))
    return path


def patch(path: Path, **fields) -> Path:
    raw = bytearray(path.read_bytes())
    header = np.frombuffer(bytes(raw[:1024]), HEADER_DTYPE.newbyteorder("<"), count=1)[0].copy()
    for key, value in fields.items():
        header[key] = value
    raw[:1024] = header.tobytes()
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("fields, error, field", [
    ({"nx": 0}, SizeError, "nx"),
    ({"ny": -3}, SizeError, "ny"),
    ({"nx": 2**31 - 1, "ny": 2**31 - 1, "nz": 2**31 - 1}, SizeError, "nx/ny/nz"),
    ({"nx": 100}, TruncatedFileError, "nx/ny/nz/mode"),
    ({"mode": 7}, UnsupportedModeError, "mode"),
    ({"mapc": 1, "mapr": 1, "maps": 3}, AxisMappingError, "mapc/mapr/maps"),
    ({"ispg": 401, "mz": 4}, HeaderError, "mz"),
    ({"ispg": 300}, HeaderError, "ispg"),
    ({"nsymbt": -5}, SizeError, "nsymbt"),
    ({"nsymbt": 10**6}, TruncatedFileError, "nx/ny/nz/mode"),
])
def test_bad_mrc_headers(tmp_path, fields, error, field):
    path = patch(good_mrc(tmp_path), **fields)
    with pytest.raises(error) as caught:
        io.read(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {field}:") and "\n" not in message


def test_truncated_data_and_header(tmp_path):
    path = good_mrc(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[:-1])
    with pytest.raises(TruncatedFileError, match="holds"):
        io.read(path)
    path.write_bytes(raw[:500])
    with pytest.raises(TruncatedFileError, match="header"):
        io.read(path)
    gz = tmp_path / "t.mrc.gz"
    import gzip
    gz.write_bytes(gzip.compress(raw[:-10]))
    with pytest.raises(TruncatedFileError, match="data"):
        io.read(gz)


def test_paths(tmp_path):
    with pytest.raises(MissingFileError, match="no such file"):
        io.read(tmp_path / "missing.mrc")
    with pytest.raises(NotAFileError, match="directory"):
        io.read(tmp_path)
    (tmp_path / "empty.mrc").write_bytes(b"")
    with pytest.raises(EmptyFileError, match="empty"):
        io.read(tmp_path / "empty.mrc")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UnknownFormatError, match="magic bytes"):
        io.read(tmp_path / "notes.txt")
    (tmp_path / "fake.tif").write_bytes(b"GIF89a" + bytes(100))
    with pytest.raises(CorruptFileError, match="TIFF signature"):
        io.read(tmp_path / "fake.tif")
    (tmp_path / "cut.tif").write_bytes(b"II*\x00" + b"\xff" * 12)
    with pytest.raises(CorruptFileError, match=r"TIFF structure|holds no image"):
        io.read(tmp_path / "cut.tif")
    with pytest.raises(MissingFileError, match="folder"):
        io.write(tmp_path / "nowhere" / "x.mrc", np.zeros((2, 2), np.float32))
    with pytest.raises(UnknownFormatError, match="extension"):
        io.write(tmp_path / "x.png", np.zeros((2, 2), np.float32))


def test_errors_are_value_errors_and_noa_errors():
    assert issubclass(MissingFileError, FileNotFoundError) and issubclass(SizeError, ValueError)


@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("compression", [None, "zlib"])
def test_tiff_strip_past_the_end_is_refused_before_any_allocation(tmp_path, lazy, compression):
    """A StripByteCounts far beyond the file (found by the mutation test below on a real file):
    refused by name before tifffile reads the strip, which would first allocate the recorded count."""
    import struct

    import tifffile

    path = tmp_path / "x.tif"
    tifffile.imwrite(path, np.arange(50 * 50, dtype=np.uint8).reshape(50, 50), compression=compression,
                     rowsperstrip=50)
    with tifffile.TiffFile(path) as tif:
        tag = tif.pages[0].tags["StripByteCounts"]
        where, kind = tag.valueoffset, tag.dtype
    raw = bytearray(path.read_bytes())
    raw[where:where + (2 if kind == 3 else 4)] = struct.pack("<H" if kind == 3 else "<I",
                                                              60_000 if kind == 3 else 757_731_592)
    path.write_bytes(bytes(raw))
    tracemalloc.start()
    try:
        if lazy and compression is None:  # the pixels, mapped where the image's shape puts them, are all there
            array, _ = io.read(path, mmap=lazy)
            np.testing.assert_array_equal(array.numpy()[0, 0], np.arange(50 * 50, dtype=np.uint8).reshape(50, 50))
        else:
            with pytest.raises(FileFormatError, match="StripOffsets/StripByteCounts"):
                io.read(path, mmap=lazy)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 4 << 20


def _real_files() -> list[Path]:
    if not DATA.is_dir():
        return []
    return sorted(p for p in DATA.iterdir() if p.suffix != ".md" and not p.name.endswith(".gz"))


@needs_data
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, 20),
       edits=st.lists(st.tuples(st.integers(0, 1023), st.integers(0, 255)), min_size=1, max_size=8),
       cut=st.one_of(st.none(), st.integers(0, 4096)), lazy=st.booleans())
def test_mutated_real_headers_fail_only_with_noa_errors(tmp_path, index, edits, cut, lazy):
    """Random byte edits in the first KiB (and truncation) of the real files: a noa error or a
    result, and never an allocation beyond what the file could hold."""
    files = _real_files()
    source = files[index % len(files)]
    raw = bytearray(source.read_bytes())
    for offset, value in edits:
        if offset < len(raw):
            raw[offset] = value
    if cut is not None:
        raw = raw[:cut]
    path = tmp_path / f"m{source.suffix if source.suffix != '.tiff' else '.tif'}"
    path.write_bytes(bytes(raw))
    tracemalloc.start()
    try:
        array, _ = io.read(path, mmap=lazy)
        assert array.size * array.itemsize <= 4 * len(raw)  # mode 101 unpacks to 2x, mode 3 to 4x
    except FileFormatError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak <= 4 * len(raw) + (8 << 20)  # parsing (OME-XML, tifffile caches) costs about 2 MiB


def test_a_text_file_named_mrc_is_not_an_mrc_file(tmp_path):
    """A note saved as .mrc (no 'MAP ' stamp, no sizes and mode) is 'not an MRC file', not a bad mode."""
    notes = tmp_path / "notes.mrc"
    notes.write_text("particles picked by hand on 2026-11-24, see the lab book\n" * 30)
    result = noa("info", notes)
    assert_user_error(result, f"{notes}: not an MRC file", "text")
    assert "mode" not in result.stderr
    random_bytes = tmp_path / "random.mrc"
    random_bytes.write_bytes(bytes(range(256)) * 8)
    assert_user_error(noa("stats", random_bytes), "not an MRC file")


# -- hostile files -------------------------------------------------------------------------------------------------


MAX_RSS_KIB = 256 << 10  # the bound the issue sets on peak resident memory, in ru_maxrss units (KiB)
BOMB_BYTES = 300 << 20  # what the bombs below expand to: beyond MAX_RSS_KIB, yet quick to compress
CHUNK = 16 << 20


def small_mrc(tmp_path: Path) -> tuple[bytes, np.ndarray]:
    """The bytes of a small float32 MRC volume written by mrcfile, and its data."""
    data = np.random.default_rng(7).standard_normal((6, 7, 8)).astype(np.float32)
    path = tmp_path / "small.mrc"
    write_mrc(path, data)
    return path.read_bytes(), data


def header_for(tmp_path: Path, nz: int, ny: int, nx: int, nsymbt: int = 0) -> bytes:
    """The 1024 header bytes mrcfile writes for float32 data, with the sizes (and nsymbt) replaced."""
    write_mrc(tmp_path / "header.mrc", np.zeros((1, 1, 1), np.float32))
    header = np.frombuffer((tmp_path / "header.mrc").read_bytes()[:1024], HEADER_DTYPE).copy()
    header["nx"], header["ny"], header["nz"], header["nsymbt"] = nx, ny, nz, nsymbt
    header["mx"], header["my"], header["mz"] = nx, ny, nz
    return header.tobytes()


def compressed(compressor, head: bytes, zeros: int) -> bytes:
    """``head`` then ``zeros`` zero bytes through ``compressor``, never holding the zeros in memory at once."""
    block = bytes(min(CHUNK, zeros))
    parts = [compressor.compress(head)]
    for start in range(0, zeros, CHUNK):
        parts.append(compressor.compress(block[:min(CHUNK, zeros - start)]))
    parts.append(compressor.flush())
    return b"".join(parts)


def peak_rss(*args, cwd: Path) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``noa ARGS`` in a process of its own; its result (the peak on the last line of stdout) and its
    peak resident memory in KiB.

    The measuring process is fresh, so ru_maxrss of its children is noa's alone; noa's address space is
    capped at 2 GiB so that a regression fails the test instead of exhausting the machine.
    """
    script = ("import resource, subprocess, sys\n"
              "cap = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
              "done = subprocess.run(sys.argv[1:], preexec_fn=cap, capture_output=True, text=True)\n"
              "sys.stdout.write(done.stdout)\n"
              "sys.stderr.write(done.stderr)\n"
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
              "sys.exit(done.returncode)\n")
    result = subprocess.run([sys.executable, "-c", script, *NOA, *map(str, args)], capture_output=True, text=True,
                            cwd=cwd, timeout=120, env=dict(os.environ, COLUMNS="200"))
    return result, int(result.stdout.split()[-1])


# -- 1. a damaged gzip is refused, never read as other values -----------------------------------------


def test_flipped_bytes_in_a_gzip_are_refused_or_harmless(tmp_path):
    raw, data = small_mrc(tmp_path)
    packed = gzip.compress(raw, mtime=0)
    rng = random.Random(20)
    path = tmp_path / "flipped.mrc.gz"
    refused = 0
    for position in rng.sample(range(len(packed)), 48) + [len(packed) // 2]:
        damaged = bytearray(packed)
        damaged[position] ^= rng.randrange(1, 256)
        path.write_bytes(damaged)
        try:
            array, _ = io.read(path)
        except FileFormatError:
            refused += 1
            continue
        # read: only a harmless gzip header field (time, flags of the OS) was hit, and Python agrees
        assert gzip.decompress(bytes(damaged)) == raw, position
        np.testing.assert_array_equal(array.numpy().reshape(data.shape), data)
    assert refused >= 40


def test_a_damaged_gzip_exits_2_naming_the_stream(tmp_path):
    """A flipped byte in the deflate data: damaged blocks, or more data than declared, depending on where
    it lands (mrcfile's time-stamped label changes the stream from run to run); one line either way."""
    raw, _ = small_mrc(tmp_path)
    damaged = bytearray(gzip.compress(raw))
    damaged[len(damaged) // 2] ^= 0xFF
    with pytest.raises((OSError, zlib.error)):  # the oracle: Python's own reader refuses it too (zlib's error where
        gzip.decompress(bytes(damaged))           # the flip makes a back reference too far)
    (tmp_path / "bad.mrc.gz").write_bytes(damaged)
    assert_user_error(noa("copy", "bad.mrc.gz", "out.mrc", cwd=tmp_path), "bad.mrc.gz: gzip stream: ")
    assert not (tmp_path / "out.mrc").exists()


def test_the_crc_is_checked_after_the_data(tmp_path):
    """A wrong CRC in the trailer (the data intact) is found: the stream is read to its end."""
    raw, _ = small_mrc(tmp_path)
    packed = bytearray(gzip.compress(raw))
    packed[-8] ^= 0x01  # first byte of the CRC-32
    (tmp_path / "crc.mrc.gz").write_bytes(packed)
    with pytest.raises(CorruptFileError, match=r"crc.mrc.gz: gzip stream: damaged \(CRC check failed\)"):
        io.read(tmp_path / "crc.mrc.gz")


@pytest.mark.parametrize("suffix, pack, kind", [(".gz", gzip.compress, "gzip"), (".bz2", bz2.compress, "bzip2")])
@pytest.mark.parametrize("second", [False, True])
def test_bytes_after_the_compressed_stream_are_refused(tmp_path, suffix, pack, kind, second):
    """Trailing garbage, or a second member (which Python's readers would silently append)."""
    raw, _ = small_mrc(tmp_path)
    path = tmp_path / f"extra.mrc{suffix}"
    path.write_bytes(pack(raw) + (pack(b"second") if second else b"garbage"))
    with pytest.raises(FileFormatError, match=f"extra.mrc{suffix}: {kind} stream"):
        io.read(path)


def test_a_stream_holding_more_than_the_header_declares_is_refused(tmp_path):
    raw, _ = small_mrc(tmp_path)
    (tmp_path / "long.mrc.bz2").write_bytes(bz2.compress(raw + bytes(100)))
    with pytest.raises(SizeError, match=r"long.mrc.bz2: bzip2 stream: holds more than"):
        io.read(tmp_path / "long.mrc.bz2")


def test_intact_compressed_files_read_as_mrcfile_reads_them(tmp_path):
    raw, data = small_mrc(tmp_path)
    for name, packed in (("a.mrc.gz", gzip.compress(raw)), ("a.mrc.bz2", bz2.compress(raw))):
        (tmp_path / name).write_bytes(packed)
        with mrcfile.open(tmp_path / name) as f:
            np.testing.assert_array_equal(f.data, data)
        np.testing.assert_array_equal(io.read(tmp_path / name)[0].numpy().reshape(data.shape), data)


# -- 2. truncated or damaged streams: exit 2, one line naming the file ---------------------------------


@pytest.mark.parametrize("suffix, pack", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_every_truncation_is_a_file_error(tmp_path, suffix, pack):
    raw, _ = small_mrc(tmp_path)
    packed = pack(raw)
    path = tmp_path / f"cut.mrc{suffix}"
    for end in range(3, len(packed), 5):
        path.write_bytes(packed[:end])
        with pytest.raises(FileFormatError, match=r"cut.mrc"):
            io.read(path)


def test_truncated_streams_exit_2(tmp_path):
    raw, _ = small_mrc(tmp_path)
    (tmp_path / "cut.mrc.bz2").write_bytes(bz2.compress(raw)[:-30])
    assert_user_error(noa("copy", "cut.mrc.bz2", "out.mrc", cwd=tmp_path),
                      "cut.mrc.bz2: bzip2 stream: ends before the end of the data (truncated)")
    (tmp_path / "cut.mrc.gz").write_bytes(gzip.compress(raw)[:-30])
    assert_user_error(noa("copy", "cut.mrc.gz", "out.mrc", cwd=tmp_path), "cut.mrc.gz: gzip stream:", "truncated")
    assert not (tmp_path / "out.mrc").exists()


def test_a_stream_cut_inside_the_data_names_the_truncation(tmp_path):
    """The gzip trailer cannot warn here: the content is cut, then a valid-looking trailer follows."""
    raw, _ = small_mrc(tmp_path)
    packed = gzip.compress(raw)
    (tmp_path / "cut.mrc.gz").write_bytes(packed[:len(packed) // 2] + packed[-8:])
    with pytest.raises(TruncatedFileError, match=r"cut.mrc.gz: gzip stream: ends before the end of the data"):
        io.read(tmp_path / "cut.mrc.gz")


def test_damaged_deflate_data_is_named(tmp_path):
    raw, _ = small_mrc(tmp_path)
    packed = bytearray(gzip.compress(raw))
    packed[10] = 0xFF  # first byte of the deflate data: block type 3 does not exist
    (tmp_path / "bad.mrc.gz").write_bytes(packed)
    result = noa("info", "bad.mrc.gz", cwd=tmp_path)
    assert_user_error(result, "bad.mrc.gz: gzip stream: damaged (invalid block type)")


# -- 3. small files that claim or expand to gigabytes ---------------------------------------------------


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> Path:
    """Small crafted files whose content or claims run to hundreds of megabytes."""
    folder = tmp_path_factory.mktemp("bombs")
    nz = BOMB_BYTES // (1024 * 1024 * 4)
    (folder / "zeros.mrc.bz2").write_bytes(compressed(bz2.BZ2Compressor(9), header_for(folder, nz, 1024, 1024),
                                                      BOMB_BYTES))
    # an extended header (nsymbt) of BOMB_BYTES that really is there, then one voxel
    (folder / "nsymbt.mrc.gz").write_bytes(compressed(zlib.compressobj(9, zlib.DEFLATED, 31),
                                                      header_for(folder, 1, 1, 1, BOMB_BYTES), BOMB_BYTES + 4))
    # a header claiming BOMB_BYTES of extended header in a file far too small to hold it
    (folder / "claim.mrc.gz").write_bytes(gzip.compress(header_for(folder, 1, 1, 1, 60 << 20) + bytes(4096)))
    write_tiff_bomb(folder / "deflate.tif", 8, compressed(zlib.compressobj(9), b"", BOMB_BYTES))
    write_tiff_bomb(folder / "lzma.tif", 34925, compressed(lzma.LZMACompressor(preset=0), b"", BOMB_BYTES))
    write_ome_bomb(folder / "huge.ome.tif")
    return folder


def write_tiff_bomb(path: Path, compression_code: int, strip: bytes) -> None:
    """A classic little-endian TIFF of one 1 x 1 uint8 page whose only strip is ``strip``."""
    tags = [(256, 1), (257, 1), (258, 8), (259, compression_code), (262, 1), (273, None), (277, 1), (278, 1),
            (279, len(strip))]
    ifd_at = 8
    strip_at = ifd_at + 2 + 12 * len(tags) + 4
    entries = b"".join(struct.pack("<HHII", tag, 4, 1, strip_at if value is None else value) for tag, value in tags)
    path.write_bytes(b"II*\x00" + struct.pack("<I", ifd_at) + struct.pack("<H", len(tags)) + entries +
                     struct.pack("<I", 0) + strip)
    with tifffile.TiffFile(path) as tif:  # the oracle: a TIFF tifffile parses, claiming one pixel
        assert tif.pages[0].shape == (1, 1) and tif.pages[0].databytecounts == (len(strip),)


def write_ome_bomb(path: Path) -> None:
    """A 4 x 4 OME-TIFF whose metadata claims SizeX=2000000000."""
    tifffile.imwrite(path, np.zeros((4, 4), np.uint8), ome=True)
    with tifffile.TiffFile(path) as tif:
        xml = tif.ome_metadata.replace('SizeX="4"', 'SizeX="2000000000"')
    tifffile.imwrite(path, np.zeros((4, 4), np.uint8), description=xml, metadata=None)


def test_the_bombs_are_small(bombs):
    sizes = {p.name: p.stat().st_size for p in bombs.iterdir() if p.name != "header.mrc"}
    assert max(sizes.values()) < 1 << 20, sizes


def test_info_on_a_bzip2_bomb_reads_the_header_alone(bombs, tmp_path):
    result, rss = peak_rss("info", bombs / "zeros.mrc.bz2", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.rsplit("\n", 2)[0])["shape"] == [1, BOMB_BYTES // (1 << 22), 1024, 1024]
    assert rss < MAX_RSS_KIB, rss


def test_copy_of_a_bzip2_bomb_takes_no_more_memory_than_the_plain_file(bombs, tmp_path):
    """Decompression streams through a temporary file: copying the 1 kB bzip2 file takes the memory that
    copying its 300 MB decompressed content as a plain file takes (the writer's own), not that plus the data."""
    plain = tmp_path / "plain.mrc"
    with open(plain, "wb") as f:  # the same content, sparse
        f.write(bz2.BZ2Decompressor().decompress(bombs.joinpath("zeros.mrc.bz2").read_bytes(), 1024))
        f.truncate(1024 + BOMB_BYTES)
    result, rss_plain = peak_rss("copy", plain, "plain_out.mrc", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    result, rss = peak_rss("copy", bombs / "zeros.mrc.bz2", "out.mrc", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert rss < rss_plain + (64 << 10), (rss, rss_plain)
    with mrcfile.mmap(tmp_path / "out.mrc", permissive=True) as f:  # the oracle for the values
        assert f.data.shape == (BOMB_BYTES // (1 << 22), 1024, 1024)
        assert not f.data[::7, ::101, ::13].any()


@pytest.mark.parametrize("args", [("info",), ("copy", "out.mrc")])
def test_an_extended_header_beyond_the_limit_is_refused(bombs, tmp_path, args):
    result, rss = peak_rss(args[0], bombs / "nsymbt.mrc.gz", *args[1:], cwd=tmp_path)
    assert_user_error(result, "nsymbt.mrc.gz: nsymbt:", "limit")
    assert rss < MAX_RSS_KIB, rss


def test_sizes_a_gzip_cannot_hold_are_refused_from_the_header(bombs):
    with pytest.raises(SizeError, match=r"claim.mrc.gz: nsymbt/nx/ny/nz/mode: .* more than a .*-byte gzip"):
        io.probe(bombs / "claim.mrc.gz")


def test_a_gzip_trailer_contradicting_the_header_is_refused_before_reading(tmp_path):
    raw, _ = small_mrc(tmp_path)
    packed = bytearray(gzip.compress(raw))
    packed[-4:] = struct.pack("<I", len(raw) + 4)  # ISIZE: the content length modulo 2**32
    (tmp_path / "isize.mrc.gz").write_bytes(packed)
    with pytest.raises(TruncatedFileError, match=r"isize.mrc.gz: gzip stream: .* trailer records"):
        io.probe(tmp_path / "isize.mrc.gz")


@pytest.mark.parametrize("name", ["deflate.tif", "lzma.tif"])
def test_a_tiff_strip_bomb_is_refused(bombs, tmp_path, name):
    result, rss = peak_rss("copy", bombs / name, "out.tif", cwd=tmp_path)
    assert_user_error(result, f"{name}: StripByteCounts (page 0):", "decodes to more than the 1 bytes")
    assert rss < MAX_RSS_KIB, rss
    assert not (tmp_path / "out.tif").exists()


@pytest.mark.parametrize("args", [("info",), ("info", "--series", "10000"), ("copy", "out.tif")])
def test_ome_sizes_beyond_the_file_are_refused(bombs, tmp_path, args):
    result, rss = peak_rss(args[0], bombs / "huge.ome.tif", *args[1:], cwd=tmp_path)
    assert_user_error(result, "huge.ome.tif: OME metadata: image 0 claims SizeX=2000000000")
    assert rss < MAX_RSS_KIB, rss


def test_probe_agrees_with_read(tmp_path):
    """The header-only description is the one a read gives, for every layout the readers make."""
    raw, data = small_mrc(tmp_path)
    header = np.frombuffer(raw[:1024], HEADER_DTYPE).copy()
    header["mapc"], header["mapr"], header["maps"] = 2, 3, 1
    (tmp_path / "mapped.mrc").write_bytes(header.tobytes() + raw[1024:])
    (tmp_path / "a.mrc.bz2").write_bytes(bz2.compress(raw))
    tifffile.imwrite(tmp_path / "yxz.tif", data, metadata={"axes": "YXZ"})
    for name in ("small.mrc", "mapped.mrc", "a.mrc.bz2", "yxz.tif"):
        array, metadata = io.read(tmp_path / name)
        probe = io.probe(tmp_path / name)
        assert (probe.shape, probe.strides, probe.dtype, probe.order) == (array.shape, array.strides, array.dtype,
                                                                          array.order), name
        assert probe.metadata == metadata, name


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts this process's descriptors in /proc")
@pytest.mark.parametrize("name", ["a.mrc", "a.mrc.gz"])
def test_an_mrc_read_opens_its_file_once_and_closes_it(tmp_path, monkeypatch, name):
    """Detection opens an input to find its format; an MRC probe or read goes on with that opened file instead of
    opening, checking and buffering it again (a mapped read maps the data by its own descriptor). Its values are
    mrcfile's, and nothing stays open after."""
    data = np.arange(2 * 8 * 8, dtype=np.float32).reshape(2, 8, 8)
    write_mrc(tmp_path / "a.mrc", data)
    if name.endswith(".gz"):
        (tmp_path / name).write_bytes(gzip.compress((tmp_path / "a.mrc").read_bytes()))
    opened = []
    os_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *args, **kw: opened.append(path) or os_open(path, *args, **kw))
    gc.collect()  # what earlier tests left to be collected
    before = _open_descriptors()
    probe = io.probe(tmp_path / name)
    assert (opened, probe.shape) == ([tmp_path / name], (1, 2, 8, 8))
    opened.clear()
    for mmap in (False, True):  # a gzip's data are decompressed into a temporary file, which is opened too
        opened.clear()
        array, _ = io.read(tmp_path / name, mmap=mmap)
        assert [path for path in opened if path == tmp_path / name] == [tmp_path / name], mmap
        np.testing.assert_array_equal(array.numpy()[0], mrcfile.read(tmp_path / "a.mrc"))
    del array  # a mapped read's descriptor lives as long as its array
    gc.collect()
    assert _open_descriptors() == before


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts this process's descriptors in /proc")
def test_a_tiff_read_goes_on_with_the_file_detection_opened(tmp_path, monkeypatch):
    """A TIFF probe or read hands tifffile the file that detection opened, and a mapped read maps its data by that
    descriptor; the look at its first page's compression that tells a plain TIFF from an EER movie reads the bytes
    detection read: the file is opened once (three and four times before). Its values are tifffile's; nothing stays
    open."""
    data = np.arange(2 * 8 * 8, dtype=np.float32).reshape(2, 8, 8)
    tifffile.imwrite(tmp_path / "a.tif", data)
    opened = []
    os_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *args, **kw: opened.append(path) or os_open(path, *args, **kw))
    gc.collect()
    before = _open_descriptors()
    probe = io.probe(tmp_path / "a.tif")
    assert (opened, probe.shape) == ([tmp_path / "a.tif"], (2, 1, 8, 8))
    for mmap in (False, True):
        opened.clear()
        array, _ = io.read(tmp_path / "a.tif", mmap=mmap)
        assert opened == [tmp_path / "a.tif"], mmap
        np.testing.assert_array_equal(array.numpy()[:, 0], tifffile.imread(tmp_path / "a.tif"))
    del array
    gc.collect()
    assert _open_descriptors() == before


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts this process's descriptors in /proc")
def test_a_failed_read_closes_the_file_detection_opened(tmp_path):
    """A header refused after detection leaves no descriptor open."""
    data = np.zeros((2, 8, 8), np.float32)
    write_mrc(tmp_path / "a.mrc", data)
    raw = bytearray((tmp_path / "a.mrc").read_bytes())
    (tmp_path / "cut.mrc").write_bytes(raw[:1024 + 100])  # the header promises 512 bytes of data
    before = _open_descriptors()
    for read in (io.probe, io.read):
        with pytest.raises(TruncatedFileError, match=r"cut\.mrc: nx/ny/nz/mode: the header promises"):
            read(tmp_path / "cut.mrc")
    assert _open_descriptors() == before


def test_an_mrc_over_the_voxel_limit_is_refused_between_its_header_and_its_data(tmp_path, monkeypatch):
    """Under a voxel limit (a service's), an MRC read refuses an image over it from its header, before any data
    are read or decompressed (a gzip is read whole), and without probing the file first."""
    data = np.arange(2 * 8 * 8, dtype=np.float32).reshape(2, 8, 8)
    write_mrc(tmp_path / "a.mrc", data)
    (tmp_path / "a.mrc.gz").write_bytes(gzip.compress((tmp_path / "a.mrc").read_bytes()))
    read_data = mrc._read_data
    monkeypatch.setattr(mrc, "_probe", lambda *args: pytest.fail("an MRC read was probed first"))
    monkeypatch.setattr(mrc, "_read_data", lambda *args: pytest.fail("data read over the limit"))
    for name in ("a.mrc", "a.mrc.gz"):
        with limits.voxel_limit(data.size - 1), pytest.raises(LimitError) as refused:
            io.read(tmp_path / name)
        assert str(refused.value) == f"{tmp_path / name}: shape (1, 2, 8, 8) has 128 voxels; the limit is 127"
    monkeypatch.setattr(mrc, "_read_data", read_data)
    for name in ("a.mrc", "a.mrc.gz"):
        with limits.voxel_limit(data.size):
            assert np.array_equal(io.read(tmp_path / name)[0].numpy()[0], data), name


def test_a_tiff_over_the_voxel_limit_is_refused_from_its_structure_before_its_data(tmp_path, monkeypatch):
    """TIFF's read checks the limit itself (``checks_size``), on the image it reads (a channel of several, when one is
    asked for), between the TIFF structure and the data: nothing is decoded over the limit, and nothing probed first."""
    data = np.arange(3 * 4 * 5, dtype=np.uint16).reshape(3, 4, 5)
    tifffile.imwrite(tmp_path / "a.tif", data, compression="zlib", photometric="minisblack", metadata={"axes": "CYX"})
    assert tiff.FORMAT.checks_size
    monkeypatch.setattr(tiff, "_probe", lambda *args: pytest.fail("probed"))
    with monkeypatch.context() as decoding:
        decoding.setattr(tiff, "_load", lambda *args: pytest.fail("decoded over the limit"))
        with limits.voxel_limit(data.size - 1), pytest.raises(LimitError, match=r"a\.tif: shape \(3, 1, 4, 5\) has 60"):
            io.read(tmp_path / "a.tif")
    with limits.voxel_limit(data[1].size):
        assert np.array_equal(io.read(tmp_path / "a.tif", channel=1)[0].numpy().reshape(4, 5), data[1])
    assert np.array_equal(io.read(tmp_path / "a.tif")[0].numpy().reshape(data.shape), data)


def test_a_format_whose_read_does_not_check_the_voxel_limit_is_probed_before_its_read(tmp_path, monkeypatch):
    """A format that does not check the limit in its read (``checks_size`` False: the throw-away RAW here) is probed
    first where a limit holds, and refused before its read; where none holds, it is not probed."""
    monkeypatch.setattr(formats, "FORMATS", formats.FORMATS + (RAW,))
    data = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)
    io.write(tmp_path / "a.raw", data)
    assert not RAW.checks_size
    with monkeypatch.context() as reading:
        reading.setattr(RawFormat, "read", lambda *args: pytest.fail("read over the limit"))
        with limits.voxel_limit(data.size - 1), pytest.raises(LimitError, match=r"a\.raw: shape .* has 24 voxels"):
            io.read(tmp_path / "a.raw")
    monkeypatch.setattr(RawFormat, "probe", lambda *args: pytest.fail("probed"))
    assert np.array_equal(io.read(tmp_path / "a.raw")[0].numpy(), data)


# -- 5. a FIFO where a file should be -----------------------------------------------------------------


def test_a_fifo_input_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "pipe.mrc")
    assert_user_error(noa("info", "pipe.mrc", cwd=tmp_path), "pipe.mrc: is not a regular file")
    assert_user_error(noa("copy", "pipe.mrc", "out.mrc", cwd=tmp_path), "pipe.mrc: is not a regular file")


def test_a_fifo_swapped_in_after_the_check_is_refused_by_the_opened_descriptor(tmp_path):
    """The race: a path check passes on a regular file, then the open finds a FIFO. The check is made
    on what was opened, and the open does not wait for a writer."""
    raw, _ = small_mrc(tmp_path)
    fifo = tmp_path / "pipe.mrc"
    os.mkfifo(fifo)
    opened = {}
    opener = threading.Thread(target=lambda: opened.update(error=_error_of(compression.open_input, fifo)))
    opener.start()
    opener.join(timeout=10)
    assert not opener.is_alive(), "opening a FIFO blocked"
    assert isinstance(opened["error"], NotAFileError)
    with (open(fifo, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as f,
          pytest.raises(NotAFileError, match=r"pipe.mrc: is not a regular file")):
        compression.check_descriptor(fifo, f.fileno())  # what the descriptor is, whatever the path said
    (tmp_path / "ok.mrc").write_bytes(raw)
    with compression.open_input(tmp_path / "ok.mrc") as f:
        assert os.get_blocking(f.fileno()) and f.read() == raw


def _error_of(function, *args) -> BaseException | None:
    try:
        function(*args)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return exc
    return None
