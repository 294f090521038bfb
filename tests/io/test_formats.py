"""The format protocol and its registry: both real formats against mrcfile and tifffile, detection
order, the MRC part of the metadata, and a throw-away format added by one registry entry."""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Mapping
from io import StringIO
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile
from conformance import SWITCHED, FormatTests

from noa_core import io
from noa_core.array import layout
from noa_core.array.layout import Shape4
from noa_core.errors import CorruptFileError, FileFormatError, TruncatedFileError, UnknownFormatError, WriteDTypeError
from noa_core.io import formats, mapped, mrc, read_options, tiff
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
