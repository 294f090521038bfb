"""OME-Zarr stores built to hurt (issue 32, items 7, 8, 10, 11, 14, 15b): chunks that are folders, links
out of the store (and out of the data root in paths mode), FIFOs, chunk shapes and compressed chunks
that decode to far more than the array, outputs with too many chunks or too little room, and the
decoded copy of a store left behind by a killed process. Each is refused with one line naming the
file and field, before memory, disk or time go in proportion to what the store claims."""

from __future__ import annotations

import bz2
import lzma
import os
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

from helpers import REPO, assert_problem, assert_user_error, noa, start_server, write_mrc
from noa_core import io
from noa_core.errors import CorruptFileError, HeaderError, NoSpaceError, ParameterError
from noa_core.io import omezarr

BOMB_BYTES = 64 << 20  # what a bomb decodes to: far more than the chunks below hold (64 KiB)
PEAK_BYTES = 24 << 20  # what reading any store below may hold at once (an lzma decoder takes 9 MiB per chunk)


def _bare(path: Path, data: np.ndarray, chunks, zarr_format: int = 2, compressors="auto", **options) -> zarr.Array:
    """A bare zarr array (noa reads it as YX / ZYX) of ``data``, written by zarr itself."""
    array = zarr.create_array(store=str(path), shape=data.shape, chunks=chunks, dtype=data.dtype,
                              zarr_format=zarr_format, compressors=compressors, fill_value=0, **options)
    array[...] = data
    return array


def _image(path: Path, data: np.ndarray, chunks: str) -> None:
    """An OME-Zarr image (NGFF 0.4) of ``data`` with ``chunks``, written by noa."""
    with io.create(path, data.shape, data.dtype, write_options={"chunks": chunks}) as out:
        io.copy_into(data, out)


def _chunk(path: Path, zarr_format: int) -> Path:
    """The file of the first chunk of a bare 2-d array."""
    return path / ("0.0" if zarr_format == 2 else "c/0/0")


def _rle_zstd(nbytes: int, declare: bool) -> bytes:
    """A zstd frame of ``nbytes`` zeros in RLE blocks (4 bytes per 128 KiB), its size declared or not."""
    head = b"\x28\xb5\x2f\xfd" + (b"\xe0" + struct.pack("<Q", nbytes) if declare else b"\x00\x58")
    blocks = nbytes // (128 << 10)
    return head + b"".join(struct.pack("<I", (128 << 13) | 2 | (i == blocks - 1))[:3] + b"\0" for i in range(blocks))


def _peak_of(read) -> tuple[BaseException | None, int]:
    """The error ``read()`` raised (None if none) and the most memory Python held meanwhile."""
    tracemalloc.start()
    try:
        read()
        error = None
    except Exception as exc:
        error = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return error, peak


# -- 7: a chunk that is a directory ---------------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_chunk_that_is_a_directory_is_refused_not_read_as_zeros(tmp_path, zarr_format):
    store = tmp_path / "s.zarr"
    _bare(store, np.arange(1, 65, dtype=np.float32).reshape(8, 8), (4, 4), zarr_format)
    chunk = _chunk(store, zarr_format)
    chunk.unlink()
    chunk.mkdir()
    with pytest.raises(CorruptFileError, match=r"chunk data: .*0[./]0: is a directory, not a file"):
        io.read(store)
    assert_user_error(noa("copy", store, tmp_path / "o.mrc"), "s.zarr: chunk data:", "is a directory")
    assert not (tmp_path / "o.mrc").exists()


# -- 8: links out of the store --------------------------------------------------------------------------


def test_links_inside_a_store_are_not_followed(tmp_path):
    """A chunk linked to another store's chunk, a level folder linked elsewhere, a chunk linked to /dev/zero."""
    data = np.arange(1, 65, dtype=np.float32).reshape(8, 8)
    secret = _bare(tmp_path / "secret.zarr", data * 1000, (4, 4))
    assert secret[0, 0] == 1000
    store = tmp_path / "s.zarr"
    _bare(store, data, (4, 4))
    (store / "0.0").unlink()
    (store / "0.0").symlink_to(tmp_path / "secret.zarr" / "0.0")
    with pytest.raises(CorruptFileError, match=r"0.0: is a symbolic link; noa follows no link inside a store"):
        io.read(store)
    (store / "0.0").unlink()
    (store / "0.0").symlink_to("/dev/zero")  # once grew without bound
    with pytest.raises(CorruptFileError, match="symbolic link"):
        io.read(store)

    image = tmp_path / "i.ome.zarr"
    io.write(image, data)
    os.rename(image / "0", tmp_path / "elsewhere")
    (image / "0").symlink_to(tmp_path / "elsewhere")
    assert_user_error(noa("copy", image, tmp_path / "o.mrc"), "i.ome.zarr: level 0: array", "(0: is a symbolic link")


def test_paths_mode_never_reads_a_store_chunk_linked_out_of_the_data_root(tmp_path):
    """`/v1/paths/copy` of a store whose chunk links to a file outside the root was a way to read it."""
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    data = np.arange(1, 65, dtype=np.float32).reshape(8, 8)
    _bare(tmp_path / "outside.zarr", data + 1e6, (4, 4))
    _image(root / "in.ome.zarr", data, "4,4")
    chunk = next(p for p in (root / "in.ome.zarr" / "0").iterdir() if not p.name.startswith("."))
    chunk.unlink()
    chunk.symlink_to(tmp_path / "outside.zarr" / "0.0")
    with TestClient(create_app(Settings(warmup=False, data_root=root)), raise_server_exceptions=False) as client:
        refused = client.post("/v1/paths/copy", json={"src": "in.ome.zarr", "dst": "out.mrc"})
        detail = assert_problem(refused, 422)["detail"]
        assert detail.startswith("in.ome.zarr: chunk data:") and "symbolic link" in detail, detail
        assert not (root / "out.mrc").exists() and str(tmp_path) not in detail


# -- 10: FIFOs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["0/0.0", "0/.zarray", ".zattrs"])
def test_a_fifo_in_a_store_is_refused_at_once(tmp_path, name):
    store = tmp_path / "f.ome.zarr"
    _image(store, np.ones((8, 8), np.float32), "4,4")
    (store / name).unlink()
    os.mkfifo(store / name)
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "noa_cli.main", "copy", str(store), str(tmp_path / "o.mrc")],
                            capture_output=True, text=True, cwd=REPO, timeout=120)  # it hung forever
    assert_user_error(result, "f.ome.zarr:", f"{name.rsplit('/', 1)[-1]}: is not a regular file")
    assert time.monotonic() - start < 60


def test_fifo_chunks_neither_block_the_workers_nor_the_shutdown(tmp_path):
    """Two requests on a store with a FIFO chunk once blocked both workers for good; SIGTERM then did
    not stop the server. Now each is refused at once, later requests are answered, SIGTERM stops it."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    root = tmp_path / "root"
    root.mkdir()
    _image(root / "f.ome.zarr", np.ones((8, 8), np.float32), "4,4")
    (root / "f.ome.zarr" / "0" / "0.0").unlink()
    os.mkfifo(root / "f.ome.zarr" / "0" / "0.0")
    write_mrc(root / "ok.mrc", np.ones((4, 4), np.float32))
    proc, url = start_server(root, tmp_path / "server.log", {"NOA_WORKERS": "2"})
    try:
        with httpx.Client(base_url=url, timeout=30) as client, ThreadPoolExecutor(2) as pool:
            copies = list(pool.map(lambda i: client.post("/v1/paths/copy", json={"src": "f.ome.zarr",
                                                                                  "dst": f"o{i}.mrc"}), range(2)))
            for response in copies:
                assert "0/0.0: is not a regular file" in assert_problem(response, 422)["detail"]
            assert client.post("/v1/paths/info", json={"path": "ok.mrc"}).status_code == 200
        proc.terminate()
        assert proc.wait(30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# -- 11: chunk-shape and decompression bombs ------------------------------------------------------------


def test_a_chunk_shape_far_larger_than_the_array_is_refused_before_any_read(tmp_path):
    """A 4x4 array with 32768x32768 chunks (one 52 KiB zstd chunk decoding to 1 GiB) took 1.1-2.4 GB to read."""
    store = tmp_path / "b.zarr"
    zarr.create_array(store=str(store), shape=(4, 4), chunks=(32768, 32768), dtype="uint8", zarr_format=2,
                      compressors=numcodecs.Zstd(), fill_value=0)
    (store / "0.0").write_bytes(_rle_zstd(32768 * 32768, declare=True))
    error, peak = _peak_of(lambda: io.read(store))
    assert isinstance(error, HeaderError) and "b.zarr: chunks: level 0 has chunks of (32768, 32768)" in str(error)
    assert peak < PEAK_BYTES
    assert_user_error(noa("copy", store, tmp_path / "o.mrc"), "b.zarr: chunks:", "(32768, 32768)")
    # a chunk larger than the array within reason is read (zarr pads edge chunks): 8x8 in 16x16 chunks
    small = tmp_path / "small.zarr"
    data = np.arange(64, dtype=np.uint16).reshape(8, 8)
    _bare(small, data, (16, 16))
    np.testing.assert_array_equal(io.read(small)[0].numpy()[0, 0], data)


def test_a_store_over_the_voxel_limit_with_bomb_chunks_is_refused_over_http(tmp_path):
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    zarr.create_array(store=str(root / "b.zarr"), shape=(4, 4), chunks=(32768, 32768), dtype="uint8",
                      zarr_format=2, compressors=numcodecs.Zstd(), fill_value=0)
    (root / "b.zarr" / "0.0").write_bytes(_rle_zstd(32768 * 32768, declare=True))
    app = create_app(Settings(warmup=False, data_root=root, max_voxels=1_000_000))
    with TestClient(app, raise_server_exceptions=False) as c:
        detail = assert_problem(c.post("/v1/paths/copy", json={"src": "b.zarr", "dst": "o.mrc"}), 422)["detail"]
    assert detail.startswith("b.zarr: chunks: level 0 has chunks of (32768, 32768)"), detail


def _codecs(zarr_format: int):
    """(name, zarr compressors, what the stored bytes of a chunk of ``n`` bytes of zeros are) per codec."""
    def numcodec(codec):
        return lambda n: codec.encode(np.zeros(n, np.uint8))

    if zarr_format == 2:
        return [("zstd", numcodecs.Zstd(), lambda n: _rle_zstd(n, declare=True)),
                ("zstd-undeclared", numcodecs.Zstd(), lambda n: _rle_zstd(n, declare=False)),
                ("blosc", numcodecs.Blosc(cname="zstd", clevel=9), numcodec(numcodecs.Blosc(cname="zstd", clevel=9))),
                # lz4 expands 255:1 at most, but numcodecs allocates what the 4-byte size header says
                ("lz4", numcodecs.LZ4(), lambda n: struct.pack("<I", n) + numcodecs.LZ4().encode(bytes(1 << 20))[4:]),
                ("zlib", numcodecs.Zlib(), lambda n: zlib.compress(bytes(n), 9)),
                ("gzip", numcodecs.GZip(), numcodec(numcodecs.GZip(9))),
                ("bz2", numcodecs.BZ2(), lambda n: bz2.compress(bytes(n))),
                ("lzma", numcodecs.LZMA(), lambda n: lzma.compress(bytes(n)))]
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    return [("zstd", ZstdCodec(), lambda n: _rle_zstd(n, declare=True)),
            ("blosc", BloscCodec(cname="zstd"), numcodec(numcodecs.Blosc(cname="zstd", clevel=9))),
            ("gzip", GzipCodec(), numcodec(numcodecs.GZip(9)))]


CODECS = [(2, name) for name, _, _ in _codecs(2)] + [(3, name) for name, _, _ in _codecs(3)]


@pytest.mark.parametrize("zarr_format, codec", CODECS)
def test_a_compressed_chunk_never_decodes_past_what_its_chunk_holds(tmp_path, zarr_format, codec):
    """A 256x256 uint8 chunk (64 KiB) whose compressed bytes (well under the chunk's size) decode to
    64 MiB: refused, and reading never holds more than a few MiB. The same store with real data reads
    as zarr reads it."""
    _name, compressors, bomb = next(c for c in _codecs(zarr_format) if c[0] == codec)
    store = tmp_path / "z.zarr"
    data = np.random.default_rng(1).integers(0, 200, (256, 512), dtype=np.uint8)
    data[:, 256:] = 7  # one chunk of noise, one that compresses well
    _bare(store, data, (256, 256), zarr_format, compressors=[compressors] if zarr_format == 3 else compressors)
    if codec != "zstd-undeclared":
        np.testing.assert_array_equal(io.read(store)[0].numpy()[0, 0], data)
    payload = bomb(BOMB_BYTES)
    assert len(payload) < 256 * 256  # smaller than the chunk: no size check on the file can catch it
    _chunk(store, zarr_format).write_bytes(payload)
    error, peak = _peak_of(lambda: io.read(store))
    assert isinstance(error, CorruptFileError) and "z.zarr: chunk data:" in str(error), error
    assert peak < PEAK_BYTES, peak


def test_a_sharded_store_reads_and_its_inner_chunks_are_bounded(tmp_path):
    """NGFF 0.5 stores may be sharded: inner chunks are decoded by the same bounded steps."""
    from zarr.codecs import GzipCodec

    store = tmp_path / "s.zarr"
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    _bare(store, data, (16, 16), 3, compressors=[GzipCodec()], shards=(32, 32))
    np.testing.assert_array_equal(io.read(store)[0].numpy()[0, 0], data)
    shard = store / "c" / "0" / "0"
    inner = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = inner.compress(bytes(BOMB_BYTES)) + inner.flush()
    count = 4  # inner chunks per shard; the index (offset, length per chunk, then crc32c) at the end
    index = b"".join(struct.pack("<QQ", 0, len(bomb)) for _ in range(count))
    import google_crc32c  # zarr's own dependency for the index checksum

    shard.write_bytes(bomb + index + struct.pack("<I", google_crc32c.value(index)))
    error, peak = _peak_of(lambda: io.read(store))
    assert isinstance(error, CorruptFileError) and "chunk data:" in str(error), error
    assert peak < PEAK_BYTES, peak


def test_a_chunk_file_larger_than_its_chunk_can_need_is_not_read(tmp_path):
    store = tmp_path / "z.zarr"
    _bare(store, np.ones((4, 4), np.uint8), (4, 4), compressors=None)
    with open(store / "0.0", "wb") as f:
        f.truncate(1 << 30)  # sparse: costs no disk
    error, peak = _peak_of(lambda: io.read(store))
    assert isinstance(error, CorruptFileError) and "0.0: 1073741824 bytes, more than a chunk" in str(error), error
    assert peak < PEAK_BYTES


# -- 14: outputs: chunk count and room ------------------------------------------------------------------


def test_chunks_that_would_make_too_many_files_are_refused_before_any(tmp_path):
    source = write_mrc(tmp_path / "in.mrc", np.zeros((1025, 1000), np.float32))
    with (pytest.raises(ParameterError, match=r"chunks: .*o.ome.zarr: chunks of \(1, 1\) cut the stored shape "
                                              r"\(1025, 1000\) into 1025000 chunk files") as caught,
          io.create(tmp_path / "o.ome.zarr", (1, 1, 1025, 1000), np.float32, write_options={"chunks": "1,1"})):
        pass
    assert caught.value.param == "chunks"
    assert_user_error(noa("copy", tmp_path / "in.mrc", tmp_path / "o.ome.zarr", "--chunks", "1,1"),
                      "--chunks:", "1025000 chunk files")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc"]
    assert source.shape == (1025, 1000)


def test_a_store_that_cannot_fit_is_refused_before_any_chunk_is_written(tmp_path, monkeypatch):
    """4 TiB asked for: refused at once, naming the output (not its hidden temporary), nothing left."""
    with (pytest.raises(NoSpaceError, match=r"^\S*big.ome.zarr: shape: the store of \(1048576, 1048576\) float32"),
          io.create(tmp_path / "big.ome.zarr", (1, 1, 1 << 20, 1 << 20), np.float32)):
        pass
    assert list(tmp_path.iterdir()) == []
    write_mrc(tmp_path / "in.mrc", np.zeros((4, 4), np.float32))
    assert_user_error(noa("resize", tmp_path / "in.mrc", tmp_path / "r.ome.zarr", "--shape", "1000,100000,100000",
                          "--fill", "zero"), "r.ome.zarr: shape:", "bytes free")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc"]

    # a small file system: room for the data compressed, not for the chunks uncompressed
    real = os.statvfs

    class Small:
        def __init__(self, stat):
            self.f_frsize, self.f_bavail = stat.f_frsize, (1 << 20) // stat.f_frsize

    monkeypatch.setattr(os, "statvfs", lambda p: Small(real(p)))
    with (pytest.raises(NoSpaceError, match=r"small.ome.zarr: shape: .* may need 1118208 bytes "
                                             r"\(1 chunks of \(4, 256, 256\), uncompressed\)"),
          io.create(tmp_path / "small.ome.zarr", (1, 4, 256, 256), np.float32)):
        pass


# -- 15b: the decoded copy of a store -------------------------------------------------------------------


def test_the_decoded_copy_of_a_store_has_no_name_while_it_is_written(tmp_path, monkeypatch):
    """A copy killed while decoding left a 1 GiB `noa-*.zarr-decoded` in $TMPDIR: it is unlinked from the start."""
    spill = tmp_path / "tmp"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    store = tmp_path / "s.ome.zarr"
    data = np.arange(64 * 64, dtype=np.float32).reshape(4, 16, 64)
    _image(store, data, "1,16,64")
    seen = []
    decode_into = omezarr._decode_into

    def watching(*args):
        seen.append(sorted(os.listdir(spill)))  # what a kill at this moment would leave
        return decode_into(*args)

    monkeypatch.setattr(omezarr, "_decode_into", watching)
    array, _ = io.read(store)
    assert seen == [[]]
    np.testing.assert_array_equal(array.numpy()[0], data)
    assert os.listdir(spill) == []


def test_a_zstd_chunk_that_declares_no_size_reads_within_its_bound(tmp_path):
    """Streaming zstd encoders leave out the decoded size: such a chunk is decoded into a buffer of the most
    its chunk may hold (it was refused outright, making those stores unreadable)."""
    store = tmp_path / "z.zarr"
    data = np.random.default_rng(1).integers(0, 200, (256, 1024), dtype=np.uint8)
    _bare(store, data, (256, 512), 2, compressors=numcodecs.Zstd())
    _chunk(store, 2).write_bytes(_rle_zstd(256 * 512, declare=False))  # the first chunk: zeros, size undeclared
    expected = data.copy()
    expected[:, :512] = 0
    np.testing.assert_array_equal(io.read(store)[0].numpy()[0, 0], expected)
