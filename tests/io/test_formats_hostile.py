"""Hostile input files (issue 20): damaged or truncated compressed streams, small files that claim or
expand to gigabytes, and a FIFO where a file should be.

Oracles: Python's gzip and bz2 modules say which streams are damaged, mrcfile gives the values, and
the peak memory of the real ``noa`` command is measured in a child process of its own.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import random
import struct
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile
from mrcfile.dtypes import HEADER_DTYPE

from helpers import NOA, assert_user_error, noa, write_mrc
from noa_core import io
from noa_core.errors import CorruptFileError, FileFormatError, NotAFileError, SizeError, TruncatedFileError
from noa_core.io import compression

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
    with pytest.raises(OSError):  # the oracle: Python's own reader refuses it too
        gzip.decompress(bytes(damaged))
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
