"""Files opened beneath a folder with no link followed: within ``beneath.confined`` (a service's Dask worker), the paths
noa opens (inputs, the temporary output its tiles go into, a store's folder) are refused where a symbolic link
appeared in them or where they lie outside the root; outside it, nothing changes for a user's paths."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import zarr

from helpers import write_mrc
from noa_core import io, operations
from noa_core.compute.moments import RunningStatistics
from noa_core.compute.tiles import TILE_BYTES
from noa_core.errors import MissingFileError, PathRefusedError
from noa_core.geometry import transforms
from noa_core.io import beneath
from noa_core.io.stream import Region, TileFile
from noa_core.run import cluster, local

DATA = np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)


@pytest.fixture(params=["openat2", "walk"])
def tree(tmp_path, request, monkeypatch) -> dict[str, Path]:
    """A data root with a file in a folder, beside a folder outside it, and links from the root to it: one to a file,
    one to the folder. Files are opened beneath it by openat2, and by the walk of O_NOFOLLOW folders that stands in
    where the kernel lacks it."""
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_openat2_usable", False)
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    write_mrc(root / "sub" / "a.mrc", DATA)
    write_mrc(outside / "secret.mrc", -DATA)
    (root / "link.mrc").symlink_to(outside / "secret.mrc")
    (root / "folder").symlink_to(outside)
    return {"root": root, "outside": outside}


def test_inputs_are_opened_beneath_the_root_and_links_refused(tree):
    root, outside = tree["root"], tree["outside"]
    with beneath.confined(root):
        array, _ = io.read(root / "sub" / "a.mrc")
        np.testing.assert_array_equal(array.numpy()[0], mrcfile.read(root / "sub" / "a.mrc"))
        for path in (root / "link.mrc", root / "folder" / "secret.mrc"):
            with pytest.raises(PathRefusedError, match=r"a symbolic link appeared in it \((link\.mrc|folder)\)"):
                io.read(path)
        for path in (outside / "secret.mrc", root / ".." / "outside" / "secret.mrc"):
            with pytest.raises(PathRefusedError, match="outside the data root, and this work opens files beneath it"):
                io.probe(path)
        with pytest.raises(MissingFileError, match=r"sub/b\.mrc: no such file"):
            io.read(root / "sub" / "b.mrc")
    # outside the block, a user's links are followed as ever
    np.testing.assert_array_equal(io.read(root / "link.mrc")[0].numpy()[0], -DATA)


def test_tiles_go_only_into_a_temporary_output_beneath_the_root(tree):
    """A temporary output replaced by a link (to a file outside the root) is refused before a byte is written."""
    root, outside = tree["root"], tree["outside"]
    before = (outside / "secret.mrc").read_bytes()
    (root / ".out.mrc.tmp").symlink_to(outside / "secret.mrc")
    region = Region(root / ".out.mrc.tmp", 1024, np.dtype(np.float32), (1, 4, 6, 8), "C")
    with beneath.confined(root), pytest.raises(PathRefusedError, match=r"\.out\.mrc\.tmp"):
        TileFile(region)
    assert (outside / "secret.mrc").read_bytes() == before


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names folders by /proc/self/fd")
def test_a_folder_written_by_its_files_paths_is_named_by_its_descriptor(tree):
    """A store's folder, whose files zarr writes by their paths, is opened (beneath the root within the block) and
    named ``/proc/self/fd/N``; within the block a link to a folder is refused, outside it followed, as a user's."""
    root = tree["root"]
    for confining in (beneath.confined(root), contextlib.nullcontext()):
        with confining:
            path, fd = beneath.folder_path(root / "sub")
            assert fd is not None
            try:
                assert path == Path(f"/proc/self/fd/{fd}") and os.listdir(path) == ["a.mrc"]
            finally:
                os.close(fd)
    with beneath.confined(root), pytest.raises(PathRefusedError, match=r"\(folder\)"):
        beneath.folder_path(root / "folder")
    path, fd = beneath.folder_path(root / "folder")
    assert fd is not None and os.listdir(path) == ["secret.mrc"]
    os.close(fd)


def test_a_tile_task_confined_to_the_root_refuses_an_input_swapped_for_a_link(tree):
    """A tile task of a split write re-plans from the input's path on its worker: an input replaced by a link since
    the output was created is refused there. Not confined, the task follows the link and writes the outside file's
    data (what a service's workers did)."""
    root, outside = tree["root"], tree["outside"]
    write_mrc(root / "in.mrc", DATA)
    task = operations.get("permute").task({"axes": (0, 1, 3, 2)})
    plan = task.plan(root / "in.mrc")
    with plan.create(root / "out.mrc", overwrite=False) as writer:
        keys, region = plan.keys(writer, TILE_BYTES), writer.region()
        (root / "in.mrc").unlink()
        (root / "in.mrc").symlink_to(outside / "secret.mrc")
        with pytest.raises(PathRefusedError, match=r"in\.mrc: changed since it was checked: a symbolic link appeared"):
            cluster._fill_tiles(task, root / "in.mrc", region, keys, {}, root)
        writer.complete(RunningStatistics.merged(cluster._fill_tiles(task, root / "in.mrc", region, keys, {}, None)))
    np.testing.assert_array_equal(mrcfile.read(root / "out.mrc"), -DATA.transpose(0, 2, 1))


def test_a_matrices_file_is_opened_beneath_the_root(tree):
    root, outside = tree["root"], tree["outside"]
    (outside / "m.txt").write_text("1 0 0 0\n0 1 0 0\n0 0 1 0\n")
    (root / "m.txt").symlink_to(outside / "m.txt")
    with beneath.confined(root), pytest.raises(PathRefusedError, match=r"m\.txt: changed since it was checked"):
        transforms.read_matrices(root / "m.txt", 3)
    assert transforms.read_matrices(root / "m.txt", 3).shape == (1, 3, 4)


@contextlib.contextmanager
def _opened_folder(folder: Path):
    """``folder`` opened, as ``/proc/self/fd/N``: how a service names an output's folder it opened beneath its root."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield Path(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names folders by /proc/self/fd")
@pytest.mark.parametrize("output", ["out.mrc", "out.ome.zarr"])
def test_a_split_write_confined_to_a_root_gives_the_single_process_output(tree, output):
    """Tile tasks confined to the data root (a service's) write what one process writes, into a file or a store (its
    folder reached by its descriptor), which the client creates and renames in the output's folder as it opened it
    (``/proc/self/fd/N/NAME``), the tasks finding it at its path."""
    pytest.importorskip("distributed", reason="the dask extra of noa is not installed")
    root = tree["root"]
    data = np.random.default_rng(3).standard_normal((24, 256, 384)).astype(np.float32)  # 9 MiB: two tasks or more
    write_mrc(root / "in.mrc", data)
    chunks = {"chunks": (4, 384, 256)} if output.endswith(".zarr") else {}  # tiles of whole chunks: several tasks
    task = operations.get("permute").task({"axes": (0, 1, 3, 2), **chunks})
    from distributed import get_task_stream

    with cluster.connect("local", workers=2) as client, get_task_stream(client) as stream, \
            _opened_folder(root / "sub") as folder:
        cluster.write_split(task, root / "in.mrc", folder / output, client, block_bytes=cluster.MIN_BLOCK_BYTES,
                            confined_to=root, dst_folder=root / "sub")
    assert sum(t["key"].startswith("noa-permute-") for t in stream.data) >= 2
    assert sorted(p.name for p in (root / "sub").iterdir()) == ["a.mrc", output]  # no temporary left
    shutil.move(root / "sub" / output, root / output)
    local.write(task, root / "in.mrc", root / f"ref_{output}", overwrite=False)
    if output.endswith(".mrc"):
        assert (root / output).read_bytes() == (root / f"ref_{output}").read_bytes()
    else:
        np.testing.assert_array_equal(zarr.open_array(str(root / output / "0"), mode="r")[...],
                                      data.transpose(0, 2, 1))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names folders by /proc/self/fd")
def test_an_output_folder_swapped_for_a_link_gets_nothing_outside_the_root(tree):
    """The output's folder, checked and opened, is swapped for a link to a folder outside the root before the split
    write: the temporary output is made in the folder opened (now moved), the tasks refuse the link at its path, and
    nothing is written outside the root; the moved folder is left as it was."""
    pytest.importorskip("distributed", reason="the dask extra of noa is not installed")
    root, outside = tree["root"], tree["outside"]
    write_mrc(root / "in.mrc", np.zeros((24, 256, 384), np.float32))
    before = sorted(p.name for p in outside.iterdir())
    with cluster.connect("local", workers=2) as client, _opened_folder(root / "sub") as folder:
        (root / "sub").rename(root / "moved")
        (root / "sub").symlink_to(outside)
        with pytest.raises(PathRefusedError, match=r"changed since it was checked: a symbolic link appeared in it"):
            cluster.write_split(operations.get("copy").task(), root / "in.mrc", folder / "out.mrc", client,
                                block_bytes=cluster.MIN_BLOCK_BYTES, confined_to=root, dst_folder=root / "sub")
    assert sorted(p.name for p in outside.iterdir()) == before
    assert sorted(p.name for p in (root / "moved").iterdir()) == ["a.mrc"]


def test_a_pair_one_task_writes_whole_is_left_to_the_confining_caller(tree):
    """A compressed input is not mapped, so one task would write the pair whole, opening and placing its output by
    path: given a root, write_split leaves it to its caller (a service runs it beneath the root its own way)."""
    pytest.importorskip("distributed", reason="the dask extra of noa is not installed")
    import gzip

    root = tree["root"]
    write_mrc(root / "in.mrc", np.zeros((24, 256, 384), np.float32))
    (root / "in.mrc.gz").write_bytes(gzip.compress((root / "in.mrc").read_bytes(), compresslevel=1))
    with cluster.connect("local", workers=2) as client, pytest.raises(cluster.WholeTask):
        cluster.write_split(operations.get("copy").task(), root / "in.mrc.gz", root / "out.mrc", client,
                            block_bytes=cluster.MIN_BLOCK_BYTES, confined_to=root)
    assert sorted(p.name for p in root.iterdir()) == ["folder", "in.mrc", "in.mrc.gz", "link.mrc", "sub"]


class _Discarded(Exception):
    """Leaves a writer without committing its output."""


def _listing(path: Path) -> object:
    return sorted((p.name, p.stat().st_size) for p in path.rglob("*")) if path.is_dir() else path.read_bytes()


@pytest.mark.parametrize("name", ["out.mrc", "out.ome.zarr"])
def test_tiles_refuse_a_temporary_output_replaced_at_its_path(tmp_path, name):
    """A process given a Writer's region (a Dask task) writes only into the temporary file or store the Writer made:
    another put at its path since, by a rename in its folder, is refused and left as it is."""
    with pytest.raises(_Discarded), io.create(tmp_path / name, (1, 4, 6, 8), "float32", None) as writer:
        region = writer.region()
        made = region.path
        os.rename(made, tmp_path / "aside")
        if name.endswith(".zarr"):  # a copy, which a writer would take for its own
            shutil.copytree(tmp_path / "aside", made)
        else:
            made.write_bytes(bytes(2048))
        before = _listing(made)
        with pytest.raises(PathRefusedError, match=rf"{name}: its temporary (file|store) was replaced while the work"):
            region.target()
        assert _listing(made) == before
        raise _Discarded
    assert not (tmp_path / name).exists()
    assert _listing(made) == before  # not the writer's: its discard leaves it
