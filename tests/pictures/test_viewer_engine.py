"""The viewer's engine (noa_core.pictures.viewer) called directly, no HTTP: tile geometry and tiles against NumPy's
block means, the overview cache's reuse and eviction, the identity of a file or store rewritten in place, and the
checks every read makes first."""

from __future__ import annotations

import io
import os
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import zarr
from PIL import Image

from helpers import noa, write_mrc
from noa_core import io as noa_io
from noa_core import limits
from noa_core.errors import LimitError, MemoryLimitError, ParameterError
from noa_core.pictures import viewer
from noa_core.pictures.viewer import Display, Overviews, Plane

TILE = 256


def integers(shape, seed: int = 0) -> np.ndarray:
    """float32 whole numbers: block sums are exact, so NumPy and noa agree to the last bit."""
    return np.random.default_rng(seed).integers(-1000, 1000, size=shape).astype(np.float32)


def block_mean(values: np.ndarray, k: int) -> np.ndarray:
    """k x k block means, blocks cut by the edge averaged over the pixels they have."""
    rows, cols = values.shape
    padded = np.full((-(-rows // k) * k, -(-cols // k) * k), np.nan)
    padded[:rows, :cols] = values
    return np.nanmean(padded.reshape(padded.shape[0] // k, k, padded.shape[1] // k, k), axis=(1, 3))


def gray(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """RELION's PNG levels (image_handler.cpp): floor((v - lo) / ((hi - lo) / 255)) of the clipped value."""
    return np.floor((np.clip(values.astype(np.float64), lo, hi) - lo) / ((hi - lo) / 255)).astype(np.uint8)


def identity_of(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return viewer.identity(fd, os.fstat(fd))
    finally:
        os.close(fd)


# -- tile geometry ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows, cols", [(1, 1), (256, 256), (257, 100), (300, 600), (1000, 1025)])
def test_the_tiles_of_each_level_cover_its_plane_once(rows, cols):
    """Every level's tiles, each at most TILE x TILE blocks of 2^L pixels, cover every pixel exactly once; the
    last level is one tile, the one before it is not."""
    count = viewer.levels(rows, cols)
    for level in range(count):
        k = 1 << level
        assert viewer.level_shape(rows, cols, level) == (int(np.ceil(rows / k)), int(np.ceil(cols / k)))
        covered = np.zeros((rows, cols), np.int64)
        down, across = (-(-n // (TILE * k)) for n in (rows, cols))
        for y in range(down):
            for x in range(across):
                top, bottom, left, right = viewer.tile_region(rows, cols, level, x, y)
                assert 0 < bottom - top <= TILE * k and 0 < right - left <= TILE * k
                covered[top:bottom, left:right] += 1
        assert (covered == 1).all(), level
    assert max(rows, cols) <= TILE << (count - 1)
    assert count == 1 or max(rows, cols) > TILE << (count - 2)


def test_a_tile_past_the_plane_names_level_x_or_y():
    for args, name in [((3, 0, 0), "level"), ((-1, 0, 0), "level"), ((0, 3, 0), "x"), ((1, 0, 1), "y")]:
        with pytest.raises(ParameterError) as caught:
            viewer.tile_region(300, 600, *args)
        assert caught.value.param == name, args


def test_a_tile_is_the_block_means_of_its_region(tmp_path):
    data = write_mrc(tmp_path / "tiles.mrc", integers((300, 600), seed=3))
    path = tmp_path / "tiles.mrc"
    display = Display("range:-800,900")
    for level, x, y in [(0, 2, 1), (1, 1, 0), (2, 0, 0)]:
        got = viewer.tile(path, Plane(), display, level, x, y, file_identity=identity_of(path), overviews=Overviews())
        top, bottom, left, right = viewer.tile_region(300, 600, level, x, y)
        want = gray(block_mean(data[top:bottom, left:right].astype(np.float64), 1 << level), -800, 900)
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(got))), want)


def overview_tiles(tmp_path, monkeypatch, shape: tuple[int, int], seed: int, tiles) -> tuple[Path, Overviews]:
    """A plane of ``shape`` whose overview is made once (step 2), then the file made unreadable: each of ``tiles``
    (level, x, y) drawn from the overview must be NumPy's block means of its region."""
    data = write_mrc(tmp_path / "plane.mrc", integers(shape, seed=seed))
    path, overviews, display = tmp_path / "plane.mrc", Overviews(), Display("range:-800,900")
    assert overviews.get(path, identity_of(path), Plane()).step == 2

    def unread(*args, **kwargs):
        raise AssertionError("read again")

    monkeypatch.setattr(viewer, "read", unread)
    for level, x, y in tiles:
        got = viewer.tile(path, Plane(), display, level, x, y, file_identity=identity_of(path), overviews=overviews)
        top, bottom, left, right = viewer.tile_region(*shape, level, x, y)
        want = gray(block_mean(data[top:bottom, left:right].astype(np.float64), 1 << level), -800, 900)
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(got))), want)
    return path, overviews


def test_coarse_tiles_are_drawn_from_the_overview_without_reading(tmp_path, monkeypatch):
    """Issue 46 item 2: a level as coarse as the overview (2048 px: overview step 2) is drawn from it: the same
    block means, and the file is not read again."""
    path, overviews = overview_tiles(tmp_path, monkeypatch, (2048, 2048), 8, [(1, 3, 2), (2, 1, 1), (3, 0, 0)])
    with pytest.raises(AssertionError, match="read again"):  # level 0 is finer than the overview: read
        viewer.tile(path, Plane(), Display("range:-800,900"), 0, 0, 0, file_identity=identity_of(path),
                    overviews=overviews)


def test_a_tile_drawn_from_the_overview_weighs_its_partial_edge_blocks(tmp_path, monkeypatch):
    """A plane of odd size (1003 x 1301: overview step 2, its last row and column the means of one pixel each): a
    level-2 tile at the edge is the plane's own 4 x 4 block means, the overview's full and partial pixels weighed by
    the pixels they stand for, and it is drawn without reading the file again."""
    overview_tiles(tmp_path, monkeypatch, (1003, 1301), 12, [(2, 0, 0), (2, 1, 0)])


def test_tiles_of_an_ome_zarr_pyramid_are_read_from_its_levels(tmp_path, monkeypatch):
    """Issue 46 item 2: a tile of level L of a stack's OME-Zarr pyramid reads the store's level L (zarr's own read
    of that level the oracle); with level 0's chunks gone, coarse tiles still draw, level 0 cannot. A volume's
    pyramid halves its depth too (a slab, not the slice): its tiles read full resolution."""
    stack = integers((3, 600, 700), seed=9)
    write_mrc(tmp_path / "stack.mrcs", stack, stack=True)
    store = tmp_path / "stack.ome.zarr"
    made = noa("copy", tmp_path / "stack.mrcs", store, "--levels", "3")
    assert made.returncode == 0, made.stderr
    write_mrc(tmp_path / "vol.mrc", stack)
    volume = tmp_path / "vol.ome.zarr"
    assert noa("copy", tmp_path / "vol.mrc", volume, "--levels", "3").returncode == 0
    assert [viewer.pyramid_level(store, Plane(section=1), level) for level in range(3)] == [0, 1, 2]
    assert viewer.pyramid_level(volume, Plane(), 2) == 0
    group = zarr.open_group(store, mode="r")
    paths = [d["path"] for d in group.attrs.asdict()["multiscales"][0]["datasets"]]
    display = Display("range:-800,900")
    for chunk in (store / paths[0]).rglob("*"):  # level 0's chunks (not its metadata): zarr reads its fill, 0
        if chunk.is_file() and chunk.name not in (".zarray", ".zattrs", "zarr.json"):
            chunk.unlink()
    for level, x, y in [(1, 1, 0), (2, 0, 0)]:
        stored = np.asarray(group[paths[level]][1], np.float64)  # section 1 at that level
        got = viewer.tile(store, Plane(section=1), display, level, x, y, file_identity="kept", overviews=Overviews())
        top, bottom, left, right = viewer.tile_region(600, 700, level, x, y)
        k = 1 << level
        want = gray(stored[top // k:-(-bottom // k), left // k:-(-right // k)], -800, 900)
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(got))), want)
        assert want.std() > 0
    finest = viewer.tile(store, Plane(section=1), display, 0, 0, 0, file_identity="kept", overviews=Overviews())
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(finest))), gray(np.zeros((256, 256)), -800, 900))
    # the level a viewer level reads is found once per file identity and plane, not by probing the store every tile
    overviews, probes = Overviews(), []
    probe = viewer.io.probe
    monkeypatch.setattr(viewer.io, "probe", lambda *args, **kwargs: probes.append(kwargs.get("level")) or
                        probe(*args, **kwargs))
    first = viewer.tile(store, Plane(section=1), display, 1, 1, 0, file_identity="kept", overviews=overviews)
    looked = probes.count(1)
    assert looked >= 1
    again = viewer.tile(store, Plane(section=1), display, 1, 0, 0, file_identity="kept", overviews=overviews)
    other = viewer.tile(store, Plane(section=2), display, 1, 0, 0, file_identity="kept", overviews=overviews)
    assert probes.count(1) == looked and first != again and other != again  # nor again for another section


# -- the overview cache -----------------------------------------------------------------------------------------

def test_overviews_are_reused_by_identity_and_plane_and_the_oldest_evicted(tmp_path):
    """A kept overview is returned without reading the file (its data rewritten under the same identity still
    give the old values); past ``keep`` the least recently used goes and is read afresh."""
    path = tmp_path / "volume.mrc"
    old = write_mrc(path, integers((3, 20, 30), seed=5))
    overviews = Overviews(keep=2)
    first = overviews.get(path, "same", Plane())
    np.testing.assert_array_equal(first.values, old[1])
    assert (first.step, first.shape) == (1, (20, 30))
    new = write_mrc(path, integers((3, 20, 30), seed=6))
    assert overviews.get(path, "same", Plane()) is first  # kept: not read again
    other = overviews.get(path, "same", Plane(axis="y", index=4))  # another plane: read
    np.testing.assert_array_equal(other.values, new[:, 4, :])
    np.testing.assert_array_equal(overviews.get(path, "changed", Plane()).values, new[1])  # another identity
    assert overviews.get(path, "same", Plane(axis="y", index=4)) is other  # still kept, now the most recent
    again = overviews.get(path, "same", Plane())  # evicted by the third: read afresh
    assert again is not first
    np.testing.assert_array_equal(again.values, new[1])


def test_an_overview_is_at_most_overview_pixels_a_side(tmp_path):
    data = write_mrc(tmp_path / "wide.mrc", integers((10, 2100), seed=7))
    got = Overviews().get(tmp_path / "wide.mrc", "id", Plane())
    assert got.step == 3 and got.shape == (10, 2100)
    np.testing.assert_array_equal(got.values, block_mean(data.astype(np.float64), 3).astype(np.float32))


# -- identity -------------------------------------------------------------------------------------------------

def test_the_identity_of_a_store_changes_when_a_chunk_is_rewritten(tmp_path):
    """zarr rewrites a chunk file inside level 0: no stat of the store's folder changes, its identity does."""
    store = tmp_path / "store.ome.zarr"
    noa_io.write(store, integers((4, 16, 16), seed=9))
    before = identity_of(store)
    assert identity_of(store) == before  # unchanged: the same identity (a cached answer is still good)
    folder = os.stat(store)
    zarr.open_array(str(store / "0"), mode="r+")[...] = 42
    assert os.stat(store).st_mtime_ns == folder.st_mtime_ns
    assert identity_of(store) != before


def test_the_identity_of_a_file_rewritten_with_its_time_put_back_changes(tmp_path):
    path = tmp_path / "inplace.mrc"
    write_mrc(path, integers((8, 8), seed=11))
    before, old = identity_of(path), os.stat(path)
    with mrcfile.mmap(path, mode="r+") as f:
        f.data[...] = integers((8, 8), seed=12)
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    while os.stat(path).st_ctime_ns == old.st_ctime_ns:  # the change time moves with the kernel's clock tick
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert identity_of(path) != before


def test_a_store_of_too_many_entries_has_a_new_identity_each_time(tmp_path, monkeypatch):
    store = tmp_path / "many.ome.zarr"
    noa_io.write(store, integers((16, 16), seed=13))
    monkeypatch.setattr(viewer, "MAX_STORE_ENTRIES", 2)
    assert identity_of(store) != identity_of(store)


# -- the checks before a read ---------------------------------------------------------------------------------

def test_a_read_is_refused_past_the_voxel_limit_and_the_memory(tmp_path, monkeypatch):
    """The voxels a read spans (a projection: every section it averages) against the limit given, at the limit
    read; the memory drawing takes against what the machine has."""
    path = tmp_path / "volume.mrc"
    data = write_mrc(path, integers((4, 10, 12), seed=15))
    region = (2, 7, 3, 9)  # 5 x 6 pixels
    np.testing.assert_array_equal(viewer.read(path, Plane(), region=region, max_voxels=30), data[2, 2:7, 3:9])
    with pytest.raises(LimitError):
        viewer.read(path, Plane(), region=region, max_voxels=29)
    projected = viewer.read(path, Plane(projection=True), region=region, max_voxels=120)
    np.testing.assert_allclose(projected, data[:, 2:7, 3:9].astype(np.float64).mean(axis=0), rtol=1e-6)
    with pytest.raises(LimitError):
        viewer.read(path, Plane(projection=True), region=region, max_voxels=119)
    monkeypatch.setattr(limits, "available_memory", lambda: 1 << 20)
    with pytest.raises(MemoryLimitError, match=r"volume.mrc: drawing"):
        viewer.read(path, Plane())


def test_value_and_histogram_are_numpys(tmp_path):
    path = tmp_path / "values.mrc"
    data = write_mrc(path, integers((6, 10, 12), seed=17))
    assert viewer.value(path, Plane(axis="x", index=5), 7, 2) == data[2, 7, 5]
    with pytest.raises(ParameterError) as caught:
        viewer.value(path, Plane(), 12, 0)
    assert caught.value.param == "x"
    got = viewer.histogram(path, Plane(), file_identity="id", overviews=Overviews(), bins=16)
    counts, edges = np.histogram(data[3].astype(np.float64), bins=16)
    assert got["counts"] == counts.tolist() and got["plane"] == [10, 12] and got["levels"] == 1
    np.testing.assert_allclose(got["edges"], edges, rtol=1e-12)
    assert got["statistics"]["min"] == data[3].min() and got["statistics"]["max"] == data[3].max()
