"""EER movies: the test encoder against the specification and tifffile, noa's fractions against NumPy sums of
tifffile's frames, the gain against RELION's formula and programs, every door, and damaged files."""

from __future__ import annotations

import gzip
import json
import os
import struct
import sys
from pathlib import Path

import imagecodecs
import mrcfile
import numpy as np
import pytest
import tifffile
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from conformance import FormatTests
from eer_encoder import BITS, FULL_CODES, encode_frame, pack, random_frame, render, write_eer

from helpers import assert_problem, assert_user_error, load, noa, relion, write_mrc
from noa_core import io, limits
from noa_core.errors import CorruptFileError, LimitError, ParameterError, TruncatedFileError, UnknownFormatError
from noa_core.io import eer, formats

SPEC = bytes.fromhex("031bfcb135fb")  # the specification's example: bits 7,1,1, shape (1, 312)


def movie(path: Path, height=24, width=32, frames=7, compression=65001, bits=None, dose=0.05, seed=0,
          rows_per_strip=None):
    """An EER file of random events; returns the events of each frame."""
    bits = bits or BITS.get(compression, (7, 2, 2))
    rng = np.random.default_rng(seed)
    events = [random_frame(rng, height, width, dose, bits) for _ in range(frames)]
    rows = rows_per_strip or height
    pages = []
    for positions, subx, suby in events:
        strips = []
        for first in range(0, height, rows):  # each strip its own stream over its rows
            n = min(rows, height - first)
            keep = (positions >= first * width) & (positions < (first + n) * width)
            strips.append(encode_frame(positions[keep] - first * width, subx[keep], suby[keep], n * width, bits,
                                       full_codes=compression in FULL_CODES))
        pages.append(strips)
    write_eer(path, pages, height, width, compression, bits, rows_per_strip)
    return events, bits


def tifffile_frames(path: Path, upsampling: int) -> np.ndarray:
    """Every frame as tifffile and imagecodecs decode it (the yardstick)."""
    with tifffile.TiffFile(path, superres=upsampling - 1) as tif:
        return np.stack([page.asarray() for page in tif.pages]).astype(np.int64)


def fractions_of(frames: np.ndarray, group: int, keep: bool) -> np.ndarray:
    """NumPy's sums of ``group`` consecutive frames (the leftover summed or dropped)."""
    count = len(frames) if keep else len(frames) // group * group
    return np.stack([frames[i:min(i + group, count)].sum(0) for i in range(0, count, group)])


def relion_gain(gain: np.ndarray, multiplicative: bool, grid: tuple[int, int]) -> np.ndarray:
    """RELION 3.1.3's EERRenderer::loadEERGain, written out: a coarser gain repeated, a finer one summed in
    float, then (not .gain) sum/n / gain where gain != 0, in double, stored as float."""
    gain = gain.astype(np.float32)
    if gain.shape[0] < grid[0]:
        k = grid[0] // gain.shape[0]
        out = np.empty(grid, np.float32)
        for i in range(grid[0]):
            out[i] = np.repeat(gain[i // k], k)
        gain = out
    elif gain.shape[0] > grid[0]:
        k = gain.shape[0] // grid[0]
        out = np.zeros(grid, np.float32)
        for i in range(gain.shape[0]):
            for j in range(k):
                out[i // k] += gain[i, j::k]
        gain = out
    if not multiplicative:
        mean = float(np.sum(gain, dtype=np.float64)) / gain.size
        gain = np.array([[mean / float(v) if v != 0 else 0.0 for v in row] for row in gain], np.float32)
    return gain


# -- the encoder ------------------------------------------------------------------------------------


def test_encoder_writes_the_specification_example():
    """The specification's bytes decode to events at 3, 17, 233 and 311; the encoder writes those bits."""
    assert np.flatnonzero(imagecodecs.eer_decode(SPEC, (1, 312), 7, 1, 1)).tolist() == [3, 17, 233, 311]
    ours = encode_frame([3, 17, 233, 311], [1, 1, 0, 0], [0, 1, 1, 1], 312, (7, 1, 1))
    bits = lambda data: np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")  # noqa: E731
    assert (bits(ours)[:43] == bits(SPEC)[:43]).all()  # the example stops after its last event's 43 bits
    assert pack([5, 1], [3, 1]) == bytes([0b1101, 0])  # least significant bit first, even length


def test_encoder_65000_codes_are_12_bits_a_largest_run_too():
    """Compression 65000 as RELION 3.1.3's EERRenderer::renderFrames unpacks it, written out: two 12-bit codes
    in 3 bytes, run = the low 8 bits, sub-pixel nibble ^ 0x0A (x: bits 0-1, y: bits 2-3) unless the run is 255."""
    positions, subx, suby = [300, 301, 700], [1, 2, 3], [2, 0, 1]
    data = np.frombuffer(encode_frame(positions, subx, suby, 1000, (8, 2, 2), full_codes=True), np.uint8)
    events, pixel = [], 0
    for at in range(0, len(data) - 2, 3):
        b0, b1, b2 = (int(v) for v in data[at:at + 3])
        for run, nibble in ((b0, b1 & 15), ((b1 >> 4) | ((b2 << 4) & 255), b2 >> 4)):
            pixel += run
            if pixel == 1000:
                break
            if run < 255:
                symbol = nibble ^ 0x0A
                events.append((pixel, symbol & 3, symbol >> 2))
                pixel += 1
        if pixel == 1000:
            break
    assert pixel == 1000 and events == list(zip(positions, subx, suby))
    assert len(data) == 12  # runs 255, 45 | 0 | 255, 143 | 255, 44: 7 codes of 12 bits, padded to an even length


# tifffile (imagecodecs) reads compression 65000 without sub-pixel bits after a largest run: not its layout
@pytest.mark.parametrize("compression,bits", [(65001, (7, 2, 2)), (65002, (7, 1, 1)), (65002, (6, 2, 1)),
                                              (65002, (10, 2, 2))])
@pytest.mark.parametrize("upsampling", [1, 2, 3])
def test_encoder_files_decode_in_tifffile(tmp_path, compression, bits, upsampling):
    if upsampling - 1 > min(bits[1:]):
        pytest.skip("fewer sub-pixel bits than the upsampling needs")
    events, _ = movie(tmp_path / "m.eer", compression=compression, bits=bits, dose=0.3, rows_per_strip=10)
    with tifffile.TiffFile(tmp_path / "m.eer") as tif:
        assert tif.is_eer and len(tif.pages) == 7 and tif.pages[0].compression == compression
    decoded = tifffile_frames(tmp_path / "m.eer", upsampling)
    for frame, truth in zip(decoded, events):
        assert (frame == render([truth], 24, 32, bits, upsampling)).all()


# -- reading ----------------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(height=st.integers(1, 5).map(lambda n: 4 * n) | st.integers(1, 20),
       width=st.integers(1, 6).map(lambda n: 4 * n) | st.integers(1, 24), frames=st.integers(1, 9),
       group=st.integers(1, 9),
       keep=st.booleans(), upsampling=st.integers(1, 3), compression=st.sampled_from([65000, 65001]),
       mmap=st.booleans(), dose=st.sampled_from([0.2, 0.002]))
def test_fractions_are_sums_of_the_frames_events(tmp_path_factory, height, width, frames, group, keep, upsampling,
                                                 compression, mmap, dose):
    """Fractions are the sums of the frames written out from their events (the encoder is checked against
    tifffile, and for 65000 against RELION); a low dose makes runs of 255 pixels and more."""
    path = tmp_path_factory.mktemp("eer") / "m.eer"
    events, bits = movie(path, height, width, frames, compression, dose=dose, seed=height * width + frames)
    expected_count = -(-frames // group) if keep else frames // group
    request = dict(eer_group=group, eer_group_last="keep" if keep else None, eer_upsampling=upsampling)
    if upsampling > 1 and (height % 4 or width % 4):  # imagecodecs decodes sub-pixels of whole 4 x 4 blocks
        with pytest.raises(ParameterError, match="multiples of 4"):
            io.read(path, **request)
        return
    if expected_count == 0:
        with pytest.raises(ParameterError, match=r"eer_group: .*give eer_group_last=keep"):
            io.read(path, **request)
        return
    array, meta = io.read(path, mmap=mmap, **request)
    expected = fractions_of(np.stack([render([frame], height, width, bits, upsampling) for frame in events]), group,
                            keep)
    assert array.dtype == np.uint16 and array.shape == (expected_count, 1) + expected.shape[1:]
    assert (np.asarray(array.numpy())[:, 0] == expected).all()
    assert io.probe(path, **request).shape == array.shape
    assert any("dropped, as RELION does" in n for n in meta.notices) == (frames % group != 0 and not keep)


def test_the_structure_is_read_from_the_file_detection_opened(tmp_path, monkeypatch):
    """A probe reads the acquisition tags and the pages' directories from the file that detection opened, whose first
    kilobyte holds the first page's directory: the movie is opened once (four times before); a read opens it once
    more, for the frames its decoding reads while the fractions live (five times before). Its fractions are
    tifffile's frames."""
    path = tmp_path / "m.eer"
    movie(path, frames=4)
    opened = []
    os_open = os.open
    monkeypatch.setattr(os, "open", lambda name, *args, **kw: opened.append(name) or os_open(name, *args, **kw))
    assert io.probe(path).shape == (4, 1, 24, 32)
    assert [name for name in opened if name == path] == [path]
    for mmap in (False, True):
        opened.clear()
        array, _ = io.read(path, mmap=mmap)
        assert [name for name in opened if name == path] == [path] * 2, mmap
        np.testing.assert_array_equal(np.asarray(array.numpy())[:, 0], tifffile_frames(path, 1))


def _first_directory_at(offset: int, compression: int = 65001) -> bytes:
    """A little-endian classic TIFF whose first (and only) directory, of a 4 x 4 frame coded ``compression``, lies at
    byte ``offset``."""
    entries = [(256, 3, 1, 4), (257, 3, 1, 4), (259, 3, 1, compression)]
    directory = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", *entry) for entry in entries) + \
        struct.pack("<I", 0)
    return (b"II*\x00" + struct.pack("<I", offset)).ljust(offset, b"\x00") + directory


@pytest.mark.parametrize("offset, opens", [(8, 0), (1000, 1), (4096, 1)])
def test_detection_reads_the_first_directory_from_the_head_where_it_lies(tmp_path, monkeypatch, offset, opens):
    """Detection tells an EER movie from a plain TIFF by its first page's compression: a directory within the first
    kilobyte detection read (where tifffile writes it) is read from those bytes, without opening the file again; one
    that runs past them (at byte 1000) or lies further is read from the file."""
    path = tmp_path / "m.eer"
    path.write_bytes(_first_directory_at(offset))
    head = path.read_bytes()[:formats.HEAD_BYTES]
    opened = []
    os_open = os.open
    monkeypatch.setattr(os, "open", lambda name, *args, **kw: opened.append(name) or os_open(name, *args, **kw))
    assert eer.first_compression(path, head) == 65001
    assert len(opened) == opens
    plain = tmp_path / "plain.tif"
    plain.write_bytes(_first_directory_at(offset, compression=1))
    assert eer.first_compression(plain, plain.read_bytes()[:formats.HEAD_BYTES]) == 1


def test_a_compressed_movie_is_refused_as_eer(tmp_path):
    """A gzip-compressed EER movie is named as one in the refusal (its first page's directory is read from the
    decompressed head)."""
    movie(tmp_path / "m.eer")
    (tmp_path / "m.eer.gz").write_bytes(gzip.compress((tmp_path / "m.eer").read_bytes()))
    with pytest.raises(UnknownFormatError, match=r"m\.eer\.gz: compression: gzip-compressed EER is not supported"):
        formats.detect(tmp_path / "m.eer.gz")


def test_info_reports_the_coding_and_acquisition(tmp_path):
    movie(tmp_path / "m.eer", frames=10, compression=65002, bits=(7, 1, 1))
    result = noa("info", tmp_path / "m.eer", "--eer-group", "4", "--eer-upsampling", "2", "--json")
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    assert described["format"] == "eer" and described["shape"] == [2, 1, 48, 64] and described["dtype"] == "uint16"
    assert described["labels"][0] == "EER 10 frames, compression 65002 (bits 7,1,1)"
    assert "exposure 2.5 s, dose rate 5.5 e/pixel/s, sensor 32 x 24" in described["labels"][1]
    assert described["pixel_size"] == [0, 0, 0]
    assert any("the last 2 frames are dropped" in n for n in described["notices"])
    refused = noa("info", tmp_path / "m.eer", "--eer-upsampling", "3")
    assert_user_error(refused, "--eer-upsampling", "sub-pixel bits")


def test_plain_tiff_stays_tiff_and_eer_named_tif_is_eer(tmp_path):
    tifffile.imwrite(tmp_path / "plain.tif", np.ones((2, 8, 8), np.uint16))
    movie(tmp_path / "movie.tif")
    assert formats.detect(tmp_path / "plain.tif")[0].name == "tiff"
    assert formats.detect(tmp_path / "movie.tif")[0].name == "eer"
    with pytest.raises(Exception, match="eer_group= is for EER"):
        io.read(tmp_path / "plain.tif", eer_group=2)
    assert_user_error(noa("stats", tmp_path / "plain.tif", "--eer-group", "2"), "eer_group", "EER")


# -- gain -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gain", "mrc"])
@pytest.mark.parametrize("upsampling,scale", [(1, 1), (2, 1), (2, 2), (1, 2)])
@pytest.mark.parametrize("band_bytes", [eer._BAND_BYTES, 256])
def test_gain_as_relion_applies_it(tmp_path, monkeypatch, kind, upsampling, scale, band_bytes):
    """fraction x gain, the gain made as RELION's loadEERGain makes it (checked against the formula above);
    also multiplied and inverted in bands of one or two rows (a frame-sized gain then spans several bands)."""
    monkeypatch.setattr(eer, "_BAND_BYTES", band_bytes)
    movie(tmp_path / "m.eer", frames=6, dose=0.3)
    rng = np.random.default_rng(3)
    values = rng.uniform(0.5, 2.0, (24 * scale, 32 * scale)).astype(np.float32)
    values[3, 5] = 0  # a defect
    path = tmp_path / f"g.{kind}"
    if kind == "gain":
        tifffile.imwrite(path, values)
    else:
        write_mrc(path, values)
    array, _meta = io.read(tmp_path / "m.eer", eer_group=3, eer_upsampling=upsampling, gain=str(path))
    grid = (24 << (upsampling - 1), 32 << (upsampling - 1))
    gain = relion_gain(values, kind == "gain", grid)
    expected = fractions_of(tifffile_frames(tmp_path / "m.eer", upsampling), 3, False).astype(np.float32) * gain
    assert array.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(array.numpy())[:, 0], expected)
    if kind == "mrc" and scale <= 1 << (upsampling - 1):  # a defect not summed with others reads 0
        assert (np.asarray(array.numpy())[:, 0, 3 * grid[0] // 24 // scale, 5 * grid[1] // 32 // scale] == 0).all()


def test_gain_turned_and_wrong_sizes_refused(tmp_path):
    movie(tmp_path / "m.eer", frames=4, dose=0.3)
    values = np.random.default_rng(4).uniform(0.5, 2.0, (32, 24)).astype(np.float32)
    tifffile.imwrite(tmp_path / "turned.gain", values)
    frames = fractions_of(tifffile_frames(tmp_path / "m.eer", 1), 2, False).astype(np.float32)
    array, _ = io.read(tmp_path / "m.eer", eer_group=2, gain=str(tmp_path / "turned.gain"), gain_rotate=1,
                       gain_flip_y=True)
    # RELION's rotate90 (dest[x, ny-1-y] = src[y, x]), then flipY
    turned = np.empty((24, 32), np.float32)
    for y in range(32):
        for x in range(24):
            turned[x, 31 - y] = values[y, x]
    np.testing.assert_array_equal(np.asarray(array.numpy())[:, 0], frames * turned[::-1])
    with pytest.raises(ParameterError, match=r"24 x 32 pixels does not fit .* 32 x 24"):
        io.read(tmp_path / "m.eer", gain=str(tmp_path / "turned.gain"))
    out = tmp_path / "o.mrc"
    assert_user_error(noa("copy", tmp_path / "m.eer", out, "--gain", tmp_path / "turned.gain"),
                      "--gain", "24 x 32", "32 x 24")
    assert not out.exists()
    assert_user_error(noa("copy", tmp_path / "m.eer", out, "--gain-flip-y"), "--gain")


@pytest.mark.parametrize("compression", [65001, 65000])
def test_against_relion_convert_to_tiff(tmp_path, compression):
    """relion_convert_to_tiff's fractions (uint16, --short) and its gain-reference.mrc, on a 4K movie (RELION
    3.1.3 reads only 4096 x 4096 movies of compression 65000 or 65001) whose frames have gaps of hundreds of
    pixels: runs of the largest length, which 65000 codes in 12 bits (sub-pixel bits unused), 65001 in 7."""
    events, _ = movie(tmp_path / "m.eer", 4096, 4096, frames=6, compression=compression, dose=0.002)
    assert all(np.diff(positions).max() > 2 * 255 for positions, _, _ in events)
    counts = np.random.default_rng(5).integers(0, 50, (4096, 4096)).astype(np.float32)
    write_mrc(tmp_path / "g.mrc", counts)
    for upsampling in (1, 2):
        out = tmp_path / f"up{upsampling}"
        out.mkdir()
        relion("relion_convert_to_tiff", "--i", "m.eer", "--o", f"{out.name}/", "--eer_grouping", 3,
               "--eer_upsampling", upsampling, "--short", "--gain", "g.mrc", cwd=tmp_path)
        theirs = tifffile.imread(out / "m.tif")[:, ::-1]  # RELION writes TIFF rows bottom first (IMOD's way)
        ours, _ = io.read(tmp_path / "m.eer", eer_group=3, eer_upsampling=upsampling)
        assert theirs.sum() == sum(len(positions) for positions, _, _ in events)
        assert (np.asarray(ours.numpy())[:, 0] == theirs).all()
        with mrcfile.open(out / "gain-reference.mrc") as f:
            relion_reference = np.array(f.data)
        grid = (4096 << (upsampling - 1),) * 2
        ours_gain = eer.load_gain(tmp_path / "g.mrc", tmp_path / "m.eer", eer.parse(tmp_path / "m.eer"),
                                  (grid[0] // 4096,) * 2)
        np.testing.assert_allclose(ours_gain, relion_reference, rtol=1e-6)


@pytest.mark.parametrize("upsampling", [1, 2, 3])
def test_65000_reads_a_12_bit_code_after_every_run(tmp_path, upsampling):
    """Compression 65000 in RELION's layout (above), on frames with long gaps and events on the last pixels of
    strips: the fractions are the sums of the frames written out from their events."""
    rng = np.random.default_rng(8)
    frames = [random_frame(rng, 64, 64, 0.004, (8, 2, 2)) for _ in range(4)]
    frames.append((np.array([0, 700, 1023, 1024, 4095]), np.array([0, 1, 2, 3, 1]), np.array([3, 2, 1, 0, 2])))
    strips = []
    for positions, subx, suby in frames:  # strips of 16 rows, each its own stream
        keep = [(positions >= s) & (positions < s + 1024) for s in range(0, 4096, 1024)]
        strips.append([encode_frame(positions[k] - s, subx[k], suby[k], 1024, (8, 2, 2), full_codes=True)
                       for s, k in zip(range(0, 4096, 1024), keep)])
    write_eer(tmp_path / "m.eer", strips, 64, 64, 65000, rows_per_strip=16)
    array, _ = io.read(tmp_path / "m.eer", eer_group=5, eer_upsampling=upsampling)
    np.testing.assert_array_equal(np.asarray(array.numpy())[0, 0], render(frames, 64, 64, (8, 2, 2), upsampling))


# -- the doors --------------------------------------------------------------------------------------


def test_fractions_over_the_voxel_limit_are_refused_from_the_directories_before_any_frame(tmp_path, monkeypatch):
    """Under a voxel limit (a service's), the read checks it itself (``checks_size``) on the fractions asked for, from
    the frames' directories: no frame decoded and no gain read over it, and the movie not probed first."""
    movie(tmp_path / "a.eer", frames=8)
    gain = tmp_path / "g.gain"
    tifffile.imwrite(gain, np.ones((24, 32), np.float32))
    assert eer.FORMAT.checks_size
    monkeypatch.setattr(eer.EerFormat, "probe", lambda *args: pytest.fail("probed"))
    four = 4 * 24 * 32  # voxels of 4 fractions of 2 frames
    with monkeypatch.context() as reading:
        reading.setattr(eer, "_read_fractions", lambda *args, **kwargs: pytest.fail("decoded over the limit"))
        reading.setattr(eer, "reading_gain", lambda *args: pytest.fail("gain read over the limit"))
        with limits.voxel_limit(four - 1), pytest.raises(
                LimitError, match=rf"a\.eer: shape \(4, 1, 24, 32\) has {four} voxels; the limit is {four - 1}$"):
            io.read(tmp_path / "a.eer", eer_group=2, gain=gain)
    with limits.voxel_limit(four):
        data = io.read(tmp_path / "a.eer", eer_group=2, gain=gain)[0].numpy()
    np.testing.assert_array_equal(data[:, 0], fractions_of(tifffile_frames(tmp_path / "a.eer", 1), 2, False))


def test_cli_copy_average_stats_and_batch(tmp_path):
    _events, _bits = movie(tmp_path / "a.eer", frames=9, dose=0.3)
    movie(tmp_path / "b.eer", frames=9, dose=0.3, seed=9)
    gain = np.random.default_rng(6).uniform(0.5, 2.0, (24, 32)).astype(np.float32)
    tifffile.imwrite(tmp_path / "g.gain", gain)
    frames = tifffile_frames(tmp_path / "a.eer", 1)
    result = noa("copy", tmp_path / "a.eer", tmp_path / "f.mrc", "--eer-group", "4", "--gain", tmp_path / "g.gain")
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(load(tmp_path / "f.mrc"), fractions_of(frames, 4, False).astype(np.float32) * gain)
    assert mrcfile.validate(str(tmp_path / "f.mrc"))
    result = noa("average", tmp_path / "a.eer", tmp_path / "avg.mrc", "--group", "3", "--eer-group", "3",
                 "--eer-group-last", "keep")
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(load(tmp_path / "avg.mrc").reshape(24, 32), fractions_of(frames, 3, True).mean(0),
                               rtol=1e-6)
    result = noa("stats", tmp_path / "a.eer", "--eer-group", "9", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["mean"] == pytest.approx(frames.sum(0).mean())
    result = noa("copy", tmp_path / "a.eer", tmp_path / "b.eer", "--out-dir", tmp_path / "out", "--to", "mrc",
                 "--eer-group", "3")
    assert result.returncode == 0, result.stderr
    for name in "ab":
        expected = fractions_of(tifffile_frames(tmp_path / f"{name}.eer", 1), 3, False)
        assert (load(tmp_path / "out" / f"{name}.mrc") == expected).all()


def test_http_paths_jobs_and_uploads_refused(tmp_path, make_client):
    from helpers import wait_job

    root = tmp_path / "root"
    root.mkdir()
    movie(root / "m.eer", frames=8, dose=0.3)
    expected = fractions_of(tifffile_frames(root / "m.eer", 2), 4, False)
    client = make_client(data_root=root)
    response = client.post("/v1/paths/copy", json={"src": "m.eer", "dst": "f.mrc", "eer_group": 4,
                                                   "eer_upsampling": 2})
    assert response.status_code == 201, response.text
    assert (load(root / "f.mrc") == expected).all()
    response = client.post("/v1/jobs", json={"operation": "copy", "src": "m.eer", "dst": "j.mrc", "eer_group": 4,
                                             "eer_upsampling": 2})
    assert response.status_code == 202, response.text
    assert wait_job(client, response.headers["location"])["status"] == "succeeded"
    assert (load(root / "j.mrc") == expected).all()
    info = client.post("/v1/paths/info", json={"path": "m.eer", "eer_group": 3})
    assert info.status_code == 200 and info.json()["shape"] == [2, 1, 24, 32]
    refused = assert_problem(client.post("/v1/upload/copy", files={"file": ("m.eer", (root / "m.eer").read_bytes())},
                                         data={"eer_group": "4"}), 422)
    assert "POST /v1/paths" in refused["detail"] and "m.eer" in refused["detail"]
    assert_problem(client.post("/v1/paths/copy", json={"src": "m.eer", "dst": "x.mrc", "eer_group": 0}), 400)
    assert not (root / "x.mrc").exists()


def test_http_gain_under_the_data_root(tmp_path, make_client):
    """A gain named relative to the data root, turned as asked, in paths mode and in a job; a gain outside the
    root (by '..' or by a symlink) is refused naming gain; an upload cannot name one."""
    from helpers import wait_job

    root = tmp_path / "root"
    (root / "gains").mkdir(parents=True)
    movie(root / "m.eer", frames=8, dose=0.3)
    gain = np.random.default_rng(3).uniform(0.5, 2.0, (24, 32)).astype(np.float32)
    # stored upside down and a quarter turn counter-clockwise: --gain-rotate 1 --gain-flip-y give it back
    tifffile.imwrite(root / "gains" / "turned.gain", np.ascontiguousarray(np.rot90(gain[::-1], 1)))
    tifffile.imwrite(root / "gains" / "g.gain", gain)
    tifffile.imwrite(tmp_path / "outside.gain", gain)
    (root / "gains" / "link.gain").symlink_to(tmp_path / "outside.gain")
    expected = fractions_of(tifffile_frames(root / "m.eer", 1), 4, False).astype(np.float32) * gain
    client = make_client(data_root=root)
    response = client.post("/v1/paths/copy", json={"src": "m.eer", "dst": "f.mrc", "eer_group": 4,
                                                   "gain": "gains/turned.gain", "gain_rotate": 1, "gain_flip_y": True})
    assert response.status_code == 201, response.text
    np.testing.assert_array_equal(load(root / "f.mrc"), expected)
    response = client.post("/v1/jobs", json={"operation": "copy", "src": "m.eer", "dst": "j.mrc", "eer_group": 4,
                                             "gain": "gains/g.gain"})
    assert response.status_code == 202, response.text
    assert wait_job(client, response.headers["location"])["status"] == "succeeded"
    np.testing.assert_array_equal(load(root / "j.mrc"), expected)

    for where in ("../outside.gain", "gains/link.gain", str(tmp_path / "outside.gain")):
        body = {"src": "m.eer", "dst": "x.mrc", "gain": where}
        refused = assert_problem(client.post("/v1/paths/copy", json=body), 403, "path-refused")
        assert refused["detail"].startswith("gain: "), refused
        refused = assert_problem(client.post("/v1/jobs", json={"operation": "copy", **body}), 403, "path-refused")
        assert refused["detail"].startswith("gain: "), refused
    assert not (root / "x.mrc").exists()
    missing = assert_problem(client.post("/v1/paths/copy", json={"src": "m.eer", "dst": "x.mrc", "gain": "no.gain"}),
                             404)
    assert missing["detail"].startswith("gain: no.gain"), missing
    # an upload has no data root to find a gain in: its form has none (the movie upload itself is refused)
    forms = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"gain", "gain_rotate", "gain_flip_y"} <= forms["CopyRequest"]["properties"].keys()
    upload_form = forms["CopyUploadParams"]["properties"]
    assert "gain" not in upload_form and {"eer_group", "gain_rotate"} <= upload_form.keys()


def test_dropped_frames_are_told_by_every_writing_door(tmp_path, make_client):
    """RELION drops the frames left over by --eer-group: the notice of the read reaches the CLI's report and
    the service's result, for copy and for an operation of its own (average), as it reaches info's."""
    root = tmp_path / "root"
    root.mkdir()
    movie(root / "m.eer", frames=10, dose=0.3)
    told = "10 frames in fractions of 3: the last frame is dropped"
    result = noa("copy", root / "m.eer", tmp_path / "out.mrc", "--eer-group", "3")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0].startswith(f"noa: note: {root / 'm.eer'}: {told}"), result.stderr
    assert load(tmp_path / "out.mrc").shape == (3, 24, 32)
    result = noa("average", root / "m.eer", tmp_path / "avg.mrc", "--group", "3", "--eer-group", "3")
    assert result.returncode == 0 and told in result.stderr, result.stderr
    assert told not in noa("copy", root / "m.eer", tmp_path / "whole.mrc", "--eer-group", "5").stderr
    assert told in noa("info", root / "m.eer", "--eer-group", "3").stdout
    client = make_client(data_root=root)
    response = client.post("/v1/paths/copy", json={"src": "m.eer", "dst": "f.mrc", "eer_group": 3})
    assert response.status_code == 201, response.text
    assert response.json()["notices"] == [f"m.eer: {told}, as RELION does (eer_group_last=keep sums them into a "
                                          "last fraction)"], response.json()  # the option as the request names it


# -- damaged files ----------------------------------------------------------------------------------


def _patch_tag(path: Path, page: int, tag: int, value: int, index: int = 0) -> None:
    """Set value ``index`` of a SHORT, LONG or LONG8 tag of BigTIFF page ``page`` (walking the IFD chain)."""
    data = bytearray(path.read_bytes())
    ifd = struct.unpack_from("<Q", data, 8)[0]
    for _ in range(page):
        count = struct.unpack_from("<Q", data, ifd)[0]
        ifd = struct.unpack_from("<Q", data, ifd + 8 + 20 * count)[0]
    count = struct.unpack_from("<Q", data, ifd)[0]
    for i in range(count):
        at = ifd + 8 + 20 * i
        if struct.unpack_from("<H", data, at)[0] == tag:
            kind, values = struct.unpack_from("<HQ", data, at + 2)
            code = {3: "<H", 4: "<I", 16: "<Q"}[kind]
            inline = values * struct.calcsize(code) <= 8
            where = at + 12 if inline else struct.unpack_from("<Q", data, at + 12)[0]
            struct.pack_into(code, data, where + index * struct.calcsize(code), value)
    path.write_bytes(bytes(data))


def test_damaged_movies_are_one_line_errors_with_no_output(tmp_path):
    movie(tmp_path / "wrong.eer", frames=4)
    _patch_tag(tmp_path / "wrong.eer", 2, 259, 65000)
    with pytest.raises(CorruptFileError, match=r"Compression \(page 2\): 65000, where the first page has 65001"):
        io.read(tmp_path / "wrong.eer")
    _patch_tag(tmp_path / "wrong.eer", 2, 259, 5)
    with pytest.raises(CorruptFileError, match=r"page 2\): 5 is not an EER compression"):
        io.probe(tmp_path / "wrong.eer")

    movie(tmp_path / "cut.eer", frames=4, dose=0.5)
    _patch_tag(tmp_path / "cut.eer", 3, 279, 1 << 30)  # the last frame's strip said to run past the file's end
    with pytest.raises(TruncatedFileError, match=r"page 3\): a strip of 1073741824 bytes .* ends past"):
        io.probe(tmp_path / "cut.eer")
    movie(tmp_path / "short.eer", frames=4, dose=0.5)
    with tifffile.TiffFile(tmp_path / "short.eer") as tif:
        end = tif.pages[3].dataoffsets[0] + 4
    (tmp_path / "short.eer").write_bytes((tmp_path / "short.eer").read_bytes()[:end])  # the file cut in a strip
    with pytest.raises(TruncatedFileError, match="page offset"):
        io.read(tmp_path / "short.eer")

    # events past the frame's end: a 24 x 32 frame's codes run on into pixels a 24 x 32 frame lacks
    rng = np.random.default_rng(7)
    positions = np.sort(rng.choice(48 * 32, 200, replace=False))
    strip = encode_frame(positions, np.zeros(200, int), np.zeros(200, int), 48 * 32, (7, 2, 2))
    write_eer(tmp_path / "past.eer", [[strip]], 24, 32)
    with pytest.raises(CorruptFileError, match="past the end"):
        io.read(tmp_path / "past.eer")
    # the chain of pages looping back: page 2 links to page 0 again
    movie(tmp_path / "loop.eer", frames=3)
    data = bytearray((tmp_path / "loop.eer").read_bytes())
    with tifffile.TiffFile(tmp_path / "loop.eer") as tif:
        first, last = tif.pages[0].offset, tif.pages[2].offset
    struct.pack_into("<Q", data, last + 8 + 20 * struct.unpack_from("<Q", data, last)[0], first)
    (tmp_path / "loop.eer").write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=r"page offset \(page 3\): the pages loop back"):
        io.probe(tmp_path / "loop.eer")
    for name in ("wrong.eer", "cut.eer", "short.eer", "past.eer", "loop.eer"):
        out = tmp_path / f"{name}.mrc"
        result = noa("copy", tmp_path / name, out)
        assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr and not out.exists()


def test_crafted_strip_cannot_expand_past_the_frame(tmp_path):
    """A strip claiming a frame of 2^32 pixels, with bytes enough for its codes (a sparse file), is refused by
    the fraction's size bound, and a strip far longer than its frame decodes into that frame's accumulator only
    (the codes stop at its end)."""
    strip = encode_frame(np.arange(0, 24 * 32, 2), np.zeros(384, int), np.zeros(384, int), 24 * 32, (7, 2, 2))
    write_eer(tmp_path / "long.eer", [[strip + b"\xff" * 100_000]], 24, 32)
    array, _ = io.read(tmp_path / "long.eer")
    assert int(np.asarray(array.numpy()).sum()) == 384
    write_eer(tmp_path / "huge.eer", [[strip]], 1 << 16, 1 << 16)
    needed = -(-(1 << 32) // 127) * 7 // 8 + 1
    _patch_tag(tmp_path / "huge.eer", 0, 279, needed)
    os.truncate(tmp_path / "huge.eer", 16 + needed)
    assert_user_error(noa("info", tmp_path / "huge.eer"), "more than the")


def test_strip_cut_short_is_refused_naming_its_frame(tmp_path, make_client):
    """A strip whose codes stop before its last pixel (cut in half, byte counts consistent) is a damaged file,
    not a frame of fewer events; so is a strip of no bytes (refused from the header, before any decoding)."""
    root = tmp_path / "root"
    root.mkdir()
    movie(root / "cut.eer", 64, 64, frames=4, dose=0.05, rows_per_strip=32)
    with tifffile.TiffFile(root / "cut.eer") as tif:
        count = int(tif.pages[2].databytecounts[1])
    _patch_tag(root / "cut.eer", 2, 279, count // 2, index=1)
    with pytest.raises(CorruptFileError, match=r"strip 1 of frame 2: its codes stop at pixel \d+ of the 64 x 32"):
        io.read(root / "cut.eer", eer_group=4)
    out = tmp_path / "o.mrc"
    assert_user_error(noa("copy", root / "cut.eer", out, "--eer-group", "2"), "cut.eer", "frame 2", "cut short")
    assert not out.exists()
    client = make_client(data_root=root)
    refused = assert_problem(client.post("/v1/paths/copy", json={"src": "cut.eer", "dst": "o.mrc"}), 422)
    assert "frame 2" in refused["detail"], refused
    assert not (root / "o.mrc").exists()

    movie(root / "empty.eer", 64, 64, frames=4, dose=0.05)
    _patch_tag(root / "empty.eer", 3, 279, 0)
    with pytest.raises(CorruptFileError, match=r"\(page 3\): strip 0 holds 0 bytes"):
        io.probe(root / "empty.eer")
    assert_user_error(noa("info", root / "empty.eer"), "empty.eer", "page 3", "holds 0 bytes")


@pytest.mark.parametrize("compression", [65001, 65000])
def test_a_stream_cut_anywhere_is_whole_or_refused(compression):
    """Cut after any byte, a frame's stream either still reaches its last pixel and decodes to every event
    (only padding was cut), or the walk says where its codes stop: never fewer events read silently."""
    from noa_core.kernels import eer as eer_kernels

    bits = BITS[compression]
    positions, subx, suby = random_frame(np.random.default_rng(9), 32, 32, 0.01, bits)
    positions = np.concatenate([positions, [1023]])  # an event on the last pixel too
    subx, suby = np.append(subx, 1), np.append(suby, 2)
    stream = encode_frame(positions, subx, suby, 1024, bits, full_codes=compression in FULL_CODES)
    truth = render([(positions, subx, suby)], 32, 32, bits, 1)
    whole = []
    for cut in range(len(stream) + 1):
        codes = np.frombuffer(stream[:cut], np.uint8)
        out = np.zeros((32, 32), np.uint16)
        reached = eer_kernels.decode_codes(codes, *bits, out, 0, compression in FULL_CODES)
        assert reached < 1024 or (reached == 1024 and (out == truth).all()), cut
        whole.append(reached == 1024)
        if cut == len(stream) // 2 and compression not in FULL_CODES:  # what imagecodecs alone gives
            alone = imagecodecs.eer_decode(stream[:cut] + bytes(2 + cut % 2), (32, 32), *bits)
            assert 0 < alone.sum() < truth.sum() and reached < 1024
    assert whole[-1] and whole.count(True) <= 4  # the codes of the last pixels, then padding


def test_strips_too_short_for_their_frames_are_refused_from_the_header(tmp_path):
    """An EER bomb: 2-byte strips declaring 16384 x 16384 frames (a frame needs at least width x height / 127
    runs of 7 bits) are refused when the pages are read, before anything is decoded or allocated."""
    write_eer(tmp_path / "bomb.eer", [[b"\xff\xff"]] * 8, 16384, 16384)
    assert (tmp_path / "bomb.eer").stat().st_size < 3000
    with pytest.raises(CorruptFileError, match=r"\(page 0\): strip 0 holds 2 bytes, and the codes of its 16384 x "
                                               r"16384 pixels need at least 1849458"):
        io.probe(tmp_path / "bomb.eer")
    assert_user_error(noa("stats", tmp_path / "bomb.eer"), "bomb.eer", "holds 2 bytes")


def test_pages_sharing_a_strip_are_refused(tmp_path):
    """Many pages pointing at one long-enough strip would each cost a whole frame's decoding for bytes the file
    holds once (a small file, hours of work): a frame's strips are its own."""
    movie(tmp_path / "m.eer", frames=3, dose=0.3)
    with tifffile.TiffFile(tmp_path / "m.eer") as tif:
        first = int(tif.pages[0].dataoffsets[0])
        where = tif.pages[2].tags["StripOffsets"].valueoffset
    with open(tmp_path / "m.eer", "r+b") as f:
        f.seek(where)
        f.write(struct.pack("<Q", first))
    with pytest.raises(CorruptFileError, match=r"\(page 2\): strip 0 at offset \d+ overlaps another strip"):
        io.probe(tmp_path / "m.eer")
    assert_user_error(noa("stats", tmp_path / "m.eer"), "m.eer", "overlaps another strip")


def test_pages_are_read_as_a_table_of_strips(tmp_path, monkeypatch):
    """A movie of many pages is read from its directories' offsets and byte counts, not as tifffile pages (at
    most the first, for its acquisition XML): the table, not objects per page (bench_eer.py times noa info on
    100,000 pages)."""
    frames = [[encode_frame([i % 16], [0], [0], 16, (7, 2, 2))] for i in range(3000)]
    write_eer(tmp_path / "many.eer", frames, 4, 4)
    made = []
    original = tifffile.TiffPage.__init__
    monkeypatch.setattr(tifffile.TiffPage, "__init__", lambda self, *a, **k: made.append(1) or original(self, *a, **k))
    parsed = eer.parse(tmp_path / "many.eer")
    assert len(made) <= 1 and parsed.offsets.shape == parsed.counts.shape == (3000, 1)
    with tifffile.TiffFile(tmp_path / "many.eer") as tif:
        assert [int(p.dataoffsets[0]) for p in tif.pages] == parsed.offsets[:, 0].tolist()
        assert [int(p.databytecounts[0]) for p in tif.pages] == parsed.counts[:, 0].tolist()
    array, _ = io.read(tmp_path / "many.eer", eer_group=16)
    assert (np.asarray(array.numpy()) == 1).all()


@pytest.mark.parametrize("head", [b"II+\x00" + struct.pack("<HHQ", 8, 0, 2**63 + 8),
                                  b"MM\x00+" + struct.pack(">HHQ", 8, 0, 2**64 - 1),
                                  b"II+\x00" + struct.pack("<HHQ", 8, 0, 16) + struct.pack("<Q", 2**62)])
def test_hostile_tiff_directories_get_the_tiff_refusal(tmp_path, head):
    """The EER detector reads every TIFF's first directory: offsets and entry counts no file can hold (Pillow's
    seek_too_large.tif: a first IFD past 2^63) leave the file to the TIFF module's one-line refusal."""
    (tmp_path / "seek_too_large.tif").write_bytes(head + bytes(64))
    assert eer.first_compression(tmp_path / "seek_too_large.tif", head + bytes(64)) is None
    assert_user_error(noa("info", tmp_path / "seek_too_large.tif"), "seek_too_large.tif")
    (tmp_path / "seek_too_large.eer").write_bytes(head + bytes(64))
    assert_user_error(noa("info", tmp_path / "seek_too_large.eer"), "seek_too_large.eer")


# -- fractions decoded as the tiles ask (ReadRequest.tiles: a plan's source, noa copy) ---------------------------


@settings(max_examples=20, deadline=None)
@given(fractions=st.integers(1, 12),
       reads=st.lists(st.tuples(st.integers(0, 11), st.integers(1, 12), st.integers(0, 15), st.integers(1, 16)),
                      min_size=1, max_size=30),
       gain=st.booleans(), upsampling=st.integers(1, 2))
def test_fractions_made_on_demand_equal_those_decoded_first(tmp_path_factory, fractions, reads, gain, upsampling):
    """Regions read through read_view in any order (one fraction, several, all; again after their pages were
    dropped) hold exactly the values of the movie decoded whole first."""
    from noa_core.io import mapped

    folder = tmp_path_factory.mktemp("lazy")
    movie(folder / "m.eer", 16, 16, 2 * fractions, dose=0.3, seed=fractions)
    options = dict(eer_group=2, eer_upsampling=upsampling)
    if gain:
        tifffile.imwrite(folder / "g.gain", np.random.default_rng(2).uniform(0.5, 2, (16, 16)).astype(np.float32))
        options["gain"] = str(folder / "g.gain")
    whole = np.array(io.read(folder / "m.eer", **options)[0].numpy())
    lazy = io.read(folder / "m.eer", tiles=True, **options)[0].numpy()
    for first, count, row, rows in reads:
        first, row = first % fractions, row % whole.shape[2]
        key = (slice(first, first + count), slice(None), slice(row, row + rows))
        np.testing.assert_array_equal(mapped.read_view(lazy[key]), whole[key])


def test_on_demand_file_holds_a_few_fractions_and_a_damaged_one_fails_its_read(tmp_path):
    """Read in order, the fractions are decoded in memory, a few at a time, and the temporary file stays empty
    (a read spanning them all fills it); a damaged frame fails the read of its fraction, as a CorruptFileError,
    not zeros."""
    from noa_core.io import mapped

    movie(tmp_path / "m.eer", 64, 64, 24, dose=0.3)
    lazy = io.read(tmp_path / "m.eer", eer_group=2, tiles=True)[0].numpy()
    whole = np.array(io.read(tmp_path / "m.eer", eer_group=2)[0].numpy())
    for index in range(12):
        np.testing.assert_array_equal(mapped.read_view(lazy[index:index + 1]), whole[index:index + 1])
    fd = mapped._INPUTS[mapped._mapping_of(lazy)][0]
    fraction_bytes = 64 * 64 * 2
    assert os.fstat(fd).st_blocks == 0  # a fraction at a time: decoded in memory, never through the file
    # a fraction being read stays decoded while reads of the others give theirs back
    produce = mapped._PRODUCERS[mapped._mapping_of(lazy)]
    with produce(0, fraction_bytes):
        for index in range(1, 12):
            np.testing.assert_array_equal(mapped.read_view(lazy[index:index + 1]), whole[index:index + 1])
        first = bytearray(fraction_bytes)
        assert produce.read_into(memoryview(first), 0)
        assert np.array_equal(np.frombuffer(first, np.uint16), whole[0].reshape(-1))
    # a read of more fractions than are held at once decodes the rest into the file, and reads them from it
    np.testing.assert_array_equal(mapped.read_view(lazy[:, :, :3]), whole[:, :, :3])
    assert 0 < os.fstat(fd).st_blocks * 512 <= 12 * fraction_bytes

    rng = np.random.default_rng(7)
    good = encode_frame(np.sort(rng.choice(24 * 32, 50, replace=False)), np.zeros(50, int), np.zeros(50, int),
                        24 * 32, (7, 2, 2))
    positions = np.sort(rng.choice(48 * 32, 200, replace=False))  # events past the frame's end
    bad = encode_frame(positions, np.zeros(200, int), np.zeros(200, int), 48 * 32, (7, 2, 2))
    write_eer(tmp_path / "past.eer", [[good], [good], [bad], [good]], 24, 32)
    lazy = io.read(tmp_path / "past.eer", tiles=True)[0].numpy()
    assert [int(mapped.read_view(lazy[i:i + 1]).sum()) for i in (0, 1)] == [50, 50]
    with pytest.raises(CorruptFileError, match="frame 2: its events run past the end"):
        mapped.read_view(lazy[2:3])


@pytest.mark.parametrize("upsampling", [1, 2])
@pytest.mark.parametrize("gain", [None, "frame", "grid"])
def test_tiles_of_a_copy_are_decoded_straight_into_its_buffer(tmp_path, monkeypatch, upsampling, gain):
    """A tile of a plain copy (read_view into the output's buffer, as stream_tiles reads it) gets its fraction's
    counts, times the gain, straight from the decoding, no temporary file written: equal to tifffile's frames
    (imagecodecs) summed in NumPy times RELION's gain, for fractions of an odd 3 frames and a last one of 2,
    tiles starting and ending anywhere in a row or in a gain row, fractions asked again, bands of 1-2 rows."""
    from noa_core.io import mapped

    monkeypatch.setattr(eer, "_BAND_BYTES", 256)
    path = tmp_path / "m.eer"
    movie(path, 24, 32, 11, dose=0.3)
    options: dict = dict(eer_group=3, eer_group_last="keep", eer_upsampling=upsampling)
    expected = fractions_of(tifffile_frames(path, upsampling), 3, True)
    height, width = expected.shape[1:]
    if gain is not None:
        values = np.random.default_rng(5).uniform(0.5, 2.0, (24, 32) if gain == "frame" else (height, width))
        tifffile.imwrite(tmp_path / "g.gain", values.astype(np.float32))
        options["gain"] = str(tmp_path / "g.gain")
        expected = expected.astype(np.float32) * relion_gain(values, True, (height, width))
    lazy = io.read(path, tiles=True, **options)[0].numpy()
    flat = lazy.reshape(4, -1)
    assert flat.dtype == (np.uint16 if gain is None else np.float32)
    for index in (0, 1, 2, 3, 1):
        for first, stop in ((0, height * width), (width, 3 * width), (3 * width + 7, 7 * width - 1), (5, 9)):
            buffer = np.empty(stop - first, flat.dtype)
            tile = mapped.read_view(flat[index, first:stop], 0, into=buffer)
            assert np.shares_memory(tile, buffer)
            np.testing.assert_array_equal(tile, expected[index].reshape(-1)[first:stop])
    assert os.fstat(mapped._INPUTS[mapped._mapping_of(lazy)][0]).st_blocks == 0


@pytest.mark.parametrize("bits", [(7, 2, 2), (7, 1, 1), (6, 2, 1), (10, 2, 2), (12, 1, 2)])
@pytest.mark.parametrize("upsampling", [1, 2, 3])
def test_kernel_decodes_as_imagecodecs(bits, upsampling):
    """The decoding kernel adds a frame's events where imagecodecs' eer_decode puts them, at every sub-pixel
    grid (superres), into an accumulator that already holds counts."""
    from noa_core.kernels import eer as eer_kernels

    level = upsampling - 1
    if level > min(bits[1:]):
        pytest.skip("fewer sub-pixel bits than the upsampling needs")
    rng = np.random.default_rng(sum(bits) + level)
    frames = [random_frame(rng, 24, 32, 0.3, bits) for _ in range(2)]
    ours = np.zeros((24 << level, 32 << level), np.uint16)
    theirs = np.zeros_like(ours)
    for frame in frames:
        stream = encode_frame(*frame, 24 * 32, bits)
        reached = eer_kernels.decode_codes(np.frombuffer(stream, np.uint8), *bits, ours, level, False)
        assert reached == 24 * 32
        theirs += imagecodecs.eer_decode(stream + bytes(2), ours.shape, *bits, superres=level)
    assert ours.sum() == sum(len(frame[0]) for frame in frames)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("upsampling", [1, 2])
def test_counts_fill_the_accumulator_chosen_by_the_group(tmp_path, monkeypatch, upsampling):
    """A frame adds at most one event to a grid pixel, so a fraction of up to 255 frames is counted in uint8 and
    one of 256 or more in uint16: with an event in one pixel (at one sub-pixel) in each of 256 frames, fractions
    of 255 and 256 frames (read whole, by tiles, with a gain) hold tifffile's frames summed in NumPy: 255 and 256
    there, neither wrapped."""
    from noa_core.io import mapped

    assert [eer.accumulator_dtype(n) for n in (1, 255, 256, eer.MAX_GROUP)] == [np.uint8, np.uint8, np.uint16,
                                                                               np.uint16]
    rng = np.random.default_rng(3)
    pages = []
    for _ in range(256):
        positions, subx, suby = random_frame(rng, 8, 8, 0.3, (7, 2, 2))
        keep = positions != 9
        positions, subx, suby = (np.r_[9, positions[keep]], np.r_[1, subx[keep]], np.r_[2, suby[keep]])
        order = np.argsort(positions)
        pages.append([encode_frame(positions[order], subx[order], suby[order], 64, (7, 2, 2))])
    write_eer(tmp_path / "m.eer", pages, 8, 8)
    tifffile.imwrite(tmp_path / "g.gain", np.random.default_rng(4).uniform(0.5, 2, (8, 8)).astype(np.float32))
    frames = tifffile_frames(tmp_path / "m.eer", upsampling)
    accumulators = []
    decode_frames = eer._decode_frames
    monkeypatch.setattr(eer, "_decode_frames", lambda *args: accumulators.append(args[4].dtype) or
                        decode_frames(*args))
    for group, accumulator in ((255, np.uint8), (256, np.uint16)):
        expected = fractions_of(frames, group, True)
        assert expected.max() == group
        options = dict(eer_group=group, eer_group_last="keep", eer_upsampling=upsampling)
        accumulators.clear()
        np.testing.assert_array_equal(io.read(tmp_path / "m.eer", **options)[0].numpy()[:, 0], expected)
        lazy = io.read(tmp_path / "m.eer", tiles=True, **options)[0].numpy()
        np.testing.assert_array_equal(mapped.read_view(lazy)[:, 0], expected)
        gained = io.read(tmp_path / "m.eer", tiles=True, gain=str(tmp_path / "g.gain"), **options)[0].numpy()
        gain = relion_gain(tifffile.imread(tmp_path / "g.gain"), True, expected.shape[1:])
        np.testing.assert_array_equal(mapped.read_view(gained)[:, 0], expected.astype(np.float32) * gain)
        assert set(accumulators) == {np.dtype(accumulator)}


def test_stats_of_a_movie_read_on_demand_are_numpys(tmp_path):
    """noa stats reads its input by tiles alone, so an EER movie's fractions are decoded as it goes: the
    per-fraction and whole statistics are NumPy's of tifffile's frames summed."""
    movie(tmp_path / "m.eer", 64, 64, 24, dose=0.3)
    expected = fractions_of(tifffile_frames(tmp_path / "m.eer", 1), 2, False).astype(np.float64)
    result = noa("stats", tmp_path / "m.eer", "--eer-group", "2", "--per-batch", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert [row["mean"] for row in found["per_batch"]] == pytest.approx(expected.mean(axis=(1, 2)).tolist())
    assert [row["max"] for row in found["per_batch"]] == expected.max(axis=(1, 2)).tolist()
    assert (found["min"], found["max"]) == (expected.min(), expected.max())
    assert found["mean"] == pytest.approx(expected.mean()) and found["std"] == pytest.approx(expected.std())


# -- the promises every format keeps (tests/io/conformance.py) -----------------------------------


class TestEerConformance(FormatTests):
    format = eer.FORMAT

    def sample(self, folder: Path) -> tuple[Path, np.ndarray]:
        """No library writes EER: the tests' encoder (checked against the specification and tifffile) does, and
        tifffile with imagecodecs decodes the frames (a fraction each by default)."""
        path = folder / "sample.eer"
        movie(path, frames=4, dose=0.2)
        return path, tifffile_frames(path, 1).astype(np.uint16)[:, None]
