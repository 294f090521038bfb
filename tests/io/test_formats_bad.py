"""Bad inputs: each gets its own FileFormatError subclass naming the file and the field."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mrcfile.dtypes import HEADER_DTYPE

from helpers import SHARED as DATA
from helpers import assert_user_error, needs_data, noa
from noa_core import io
from noa_core.errors import (
    AxisMappingError,
    CorruptFileError,
    EmptyFileError,
    FileFormatError,
    HeaderError,
    MissingFileError,
    NotAFileError,
    SizeError,
    TruncatedFileError,
    UnknownFormatError,
    UnsupportedModeError,
)


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
