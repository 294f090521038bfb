"""noa_core.tomography.sidefiles (issue 45 item 3, second half): `noa sections`, `bin`, `rescale`, `filter`, `flip`,
`normalize`, `scale`, `resize` and `copy` on a tilt series `noa tiltseries` built keep its .rawtlt, .tlt, mdoc and
RELION 5 STAR in step with the sections they keep, beside the output and named after it. The expected rows are taken
from the input's files with NumPy, mdocfile and starfile; `noa tiltcheck` (the committed checker) passes on every
output. Files that disagree with the stack, and outputs that do not keep sections one to one, get none and a notice;
a failed write leaves neither the stack nor any of them; Dask writes the same files; over HTTP they are written under
the data root."""

from __future__ import annotations

import shutil

import mdocfile
import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
from tomography import test_check
from tomography.test_tiltseries import MDOCS, real_mdoc

from helpers import noa, write_mrc
from noa_core import operations
from noa_core.run import cluster, local

SIDE = ("rawtlt", "tlt", "st.mdoc", "star")
built = test_check.built  # the fixture: TS.st and its files, from `noa tiltseries`
STAR_COLUMNS = ["rlnTomoNominalStageTiltAngle", "rlnTomoNominalTiltAxisAngle", "rlnMicrographPreExposure",
                "rlnTomoNominalDefocus"]


def run(folder, *args) -> str:
    """`noa ARGS` in ``folder``, which must succeed; its notes."""
    done = noa(*args, cwd=folder)
    assert done.returncode == 0, done.stderr
    return done.stderr


def consistent(folder, stack: str) -> None:
    done = noa("tiltcheck", stack, cwd=folder)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "consistent", done.stdout


def mdoc_rows(path) -> pd.DataFrame:
    """The mdoc's sections as mdocfile reads them, by ZValue, without the ZValue (renumbered) and the header's
    ImageFile and ImageSize (the output's)."""
    table = mdocfile.read(path).sort_values("ZValue").reset_index(drop=True)
    return table.drop(columns=[c for c in ("ZValue", "ImageFile", "ImageSize", "PixelSpacing") if c in table])


def assert_rows_kept(folder, out: str, kept: list[int], pixel_scale: float = 1.0, named: str | None = None) -> None:
    """``out``'s side files hold the rows ``kept`` of TS.st's, in that order, the pixel size ``pixel_scale`` times;
    the STAR names the output's sections ``N@named`` (default ``out``)."""
    stem = out.rsplit(".", 1)[0]
    for kind in ("rawtlt", "tlt"):
        np.testing.assert_array_equal(np.loadtxt(folder / f"{stem}.{kind}"), np.loadtxt(folder / f"TS.{kind}")[kept])
    mdoc = folder / f"{out}.mdoc"
    written, source = mdocfile.read(mdoc), mdocfile.read(folder / "TS.st.mdoc")
    assert written["ZValue"].tolist() == list(range(len(kept)))
    pd.testing.assert_frame_equal(mdoc_rows(mdoc), mdoc_rows(folder / "TS.st.mdoc").iloc[kept].reset_index(drop=True))
    np.testing.assert_allclose(written["PixelSpacing"], source["PixelSpacing"].iloc[kept] * pixel_scale)
    with mrcfile.open(folder / out, header_only=True) as stack:
        assert tuple(written["ImageSize"][0]) == (int(stack.header.nx), int(stack.header.ny))
    assert str(written["ImageFile"][0]) == out
    rows, original = starfile.read(folder / f"{stem}.star"), starfile.read(folder / "TS.star")
    pd.testing.assert_frame_equal(rows[STAR_COLUMNS], original[STAR_COLUMNS].iloc[kept].reset_index(drop=True))
    assert rows["rlnMicrographName"].tolist() == [f"{i + 1:06d}@{named or out}" for i in range(len(kept))]
    assert list(starfile.read(folder / f"{stem}.star", always_dict=True)) == [stem]  # the block: RELION's name
    consistent(folder, out)


def test_sections_keeps_the_rows_of_the_sections_kept_in_their_order(built):
    notes = run(built, "sections", "TS.st", "out.st", "--keep", "3,1,40,7")
    assert_rows_kept(built, "out.st", [3, 1, 40, 7])
    assert "beside out.st: out.rawtlt, out.tlt, out.st.mdoc, out.star" in notes
    with mrcfile.open(built / "out.st") as out, mrcfile.open(built / "TS.st") as stack:
        np.testing.assert_array_equal(out.data, stack.data[[3, 1, 40, 7]])
    run(built, "sections", "TS.st", "fewer.st", "--drop", "0-9")
    assert_rows_kept(built, "fewer.st", list(range(10, 41)))


def test_bin_and_rescale_keep_every_row_and_scale_the_pixel_size(built):
    table = starfile.read(built / "TS.star", always_dict=True)
    (name, rows), = table.items()
    starfile.write({name: rows.assign(rlnTomoTiltSeriesPixelSize=5.4)}, built / "TS.star", overwrite=True)
    run(built, "bin", "TS.st", "b.st", "--factor", "2")
    assert_rows_kept(built, "b.st", list(range(41)), pixel_scale=2.0)
    np.testing.assert_allclose(starfile.read(built / "b.star")["rlnTomoTiltSeriesPixelSize"], 10.8)
    run(built, "rescale", "TS.st", "r.st", "--factor", "0.5")
    assert_rows_kept(built, "r.st", list(range(41)), pixel_scale=2.0)
    with mrcfile.open(built / "r.st", header_only=True) as out:
        assert float(out.voxel_size.x) == pytest.approx(10.8)


@pytest.mark.parametrize("args", [("filter", "--lowpass", "20"), ("normalize",),
                                  ("copy", "--dtype", "float32"), ("permute", "--axes", "1,0,2,3"),
                                  ("scale", "--to-range", "0,255", "--dtype", "uint8")])
def test_operations_on_each_section_keep_the_files_as_they_are(built, args):
    run(built, args[0], "TS.st", "o.mrc", *args[1:])
    for kind in ("rawtlt", "tlt"):
        assert (built / f"o.{kind}").read_bytes() == (built / f"TS.{kind}").read_bytes()
    assert_rows_kept(built, "o.mrc", list(range(41)))


@pytest.mark.parametrize("output", ["o.ome.zarr", "o.tif"])
def test_an_output_that_is_not_an_mrc_stack_gets_none(built, output):
    """A STAR names its images N@stack and IMOD's angle files go with an MRC stack: beside an OME-Zarr store or a
    TIFF none are written (a notice says so), and a second write over the first works."""
    for _ in range(2):
        notes = run(built, "copy", "TS.st", output, "-f")
        assert f"{output}: not an MRC stack: TS.rawtlt, TS.tlt" in notes
    assert sorted(p.name for p in built.glob("o.*")) == [output]


def test_a_resize_keeps_the_rows_with_the_new_image_size(built):
    """A crop of each image keeps every section (the mdoc's ImageSize becomes the output's, which assert_rows_kept
    checks against its header); one that changes the number of sections keeps none."""
    with mrcfile.open(built / "TS.st", header_only=True) as stack:
        height, width = int(stack.header.ny), int(stack.header.nx)
    run(built, "resize", "TS.st", "c.st", "--shape", f"{height - 2},{width - 4}")
    assert_rows_kept(built, "c.st", list(range(41)))
    with mrcfile.open(built / "c.st", header_only=True) as out:
        assert (int(out.header.nx), int(out.header.ny)) == (width - 4, height - 2)
    notes = run(built, "resize", "TS.st", "o.mrc", "--shape", f"40,1,{height},{width}")
    assert "TS.st: it changes the number of sections: its TS.rawtlt" in notes
    assert sorted(p.name for p in built.glob("o*")) == ["o.mrc"]


def test_a_z_mirror_of_a_volume_reverses_the_rows(built):
    run(built, "flip", "TS.st", "v.mrc", "--axis", "z", "--as-volume")
    assert_rows_kept(built, "v.mrc", list(range(40, -1, -1)))


def test_files_that_disagree_with_the_stack_are_not_written_and_a_notice_says_why(built):
    lines = (built / "TS.tlt").read_text().splitlines(keepends=True)
    (built / "TS.tlt").write_text("".join(lines[:-1]))
    notes = run(built, "sections", "TS.st", "out.st", "--keep", "0-4")
    assert "TS.tlt: 40 angles, and the stack TS.st has 41 sections" in notes
    assert sorted(p.name for p in built.glob("out*")) == ["out.st"]


@pytest.mark.parametrize(("args", "why"), [
    (("bin", "TS.st", "o.mrc", "--factor", "2", "--depth", "--as-volume"), "binning the depth too joins its sections"),
    (("permute", "TS.st", "o.mrc", "--axes", "0,1,3,2"), "the permutation moves its sections or turns their images"),
    (("average", "TS.st", "o.mrc", "--group", "2"), "averaging joins its sections"),
    (("join", "TS.st", "TS.st", "-o", "o.mrc"), "joined with 1 other input(s)"),
    # a mirror turns the images about their tilt axis: the files' axis (85.3 here) no longer says theirs
    (("flip", "TS.st", "o.mrc", "--axis", "x"), "its images are mirrored, which turns their tilt axis"),
    (("copy", "TS.st", "o.mrc", "--flip-y"), "its images are mirrored, which turns their tilt axis")])
def test_an_output_that_does_not_keep_sections_one_to_one_gets_none(built, args, why):
    notes = run(built, *args)
    assert f"TS.st: {why}: its TS.rawtlt, TS.tlt, TS.st.mdoc, TS.star are not written beside the output" in notes
    assert sorted(p.name for p in built.glob("o*")) == ["o.mrc"]


def test_no_side_files_writes_none(built):
    notes = run(built, "sections", "TS.st", "n.st", "--keep", "0-4", "--no-side-files")
    assert sorted(p.name for p in built.glob("n*")) == ["n.st"] and "beside" not in notes


def test_the_files_of_the_input_are_never_replaced(built):
    before = {p.name: p.read_bytes() for p in built.glob("TS.*")}
    notes = run(built, "sections", "TS.st", "TS.mrc", "--keep", "0-4")
    assert "would replace a file beside the input" in notes
    assert {p.name: p.read_bytes() for p in built.glob("TS.*") if p.name != "TS.mrc"} == before


def test_an_existing_side_file_is_refused_without_overwrite(built):
    (built / "out.tlt").write_text("mine\n")
    done = noa("sections", "TS.st", "out.st", "--keep", "0-4", cwd=built)
    assert done.returncode == 2 and "out.tlt" in done.stderr, done.stderr
    assert sorted(p.name for p in built.glob("out*")) == ["out.tlt"] and (built / "out.tlt").read_text() == "mine\n"
    run(built, "sections", "TS.st", "out.st", "--keep", "0-4", "--force")
    assert_rows_kept(built, "out.st", list(range(5)))


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.name.startswith("out"))


def failing_tiles(plan):
    """``plan`` whose last tile fails."""
    reads = plan.reads

    def failing(key):
        if key[0].stop is None or key[0].stop >= plan.shape[0]:
            raise OSError("a tile failed")
        return reads(key)

    plan.reads = failing
    return plan


def test_a_failed_write_leaves_neither_the_stack_nor_its_files_and_restores_what_it_replaced(built, monkeypatch):
    task = operations.get("sections").task({"keep": "0-9"})
    with pytest.raises(OSError, match="a tile failed"):
        local.write_plan(failing_tiles(task.plan(built / "TS.st")), built / "out.st")
    assert leftovers(built) == []
    local.write_plan(task.plan(built / "TS.st"), built / "out.st")
    before = {name: (built / name).read_bytes() for name in leftovers(built)}
    assert sorted(before) == ["out.rawtlt", "out.st", "out.st.mdoc", "out.star", "out.tlt"]
    other = operations.get("sections").task({"keep": "3,4"})
    with pytest.raises(OSError, match="a tile failed"):
        local.write_plan(failing_tiles(other.plan(built / "TS.st")), built / "out.st", overwrite=True)
    assert {name: (built / name).read_bytes() for name in leftovers(built)} == before
    # a failure while they take their names: those placed are taken back
    placed = []

    def place_two(self):
        for temp, path in self.moves[:2]:
            placed.append(path)
            temp.rename(path)
        raise OSError("the disk went away")

    monkeypatch.setattr("noa_core.io.atomic.Placement.place", place_two)
    with pytest.raises(OSError, match="the disk went away"):
        local.write_plan(other.plan(built / "TS.st"), built / "new.st")
    assert placed and not any(path.exists() for path in placed) and not list(built.glob("new*"))
    assert not [p for p in built.iterdir() if p.name.startswith(".noa")]


@pytest.fixture()
def large(tmp_path):
    """A tilt series larger than a Dask task's smallest budget (41 x 256 x 256 float32, 10.7 MB), built by `noa
    tiltseries`, so that its copy is split over tasks."""
    text = (MDOCS / "tilt_series.mdoc").read_text().replace("ImageSize = 924 958", "ImageSize = 256 256")
    real_mdoc(tmp_path, text)
    data = np.random.default_rng(5).standard_normal((41, 256, 256)).astype(np.float32)
    write_mrc(tmp_path / "TS_01.mrc", data, stack=True, voxel_size=5.4)
    run(tmp_path, "tiltseries", "TS_01.mrc.mdoc", "--dose-per-tilt", "3", "-o", "TS.st")
    return tmp_path


def test_dask_writes_the_same_files(large, monkeypatch):
    task = operations.get("sections").task({"drop": "0,40"})
    local.write(task, large / "TS.st", large / "here.st")
    split = []
    monkeypatch.setattr(cluster, "_write_tiles", lambda *a, **k: split.append(1) or _write_tiles(*a, **k))
    with cluster.connect("local", work_bytes=1) as client:  # a worker of threads in this process
        cluster.write_split(task, large / "TS.st", large / "there.st", client, block_bytes=cluster.MIN_BLOCK_BYTES)
    assert split  # its tiles were written by tasks
    assert (large / "there.st").read_bytes() == (large / "here.st").read_bytes()
    for suffix in ("rawtlt", "tlt"):
        assert (large / f"there.{suffix}").read_bytes() == (large / f"here.{suffix}").read_bytes()
    assert (large / "there.star").read_text() == (large / "here.star").read_text().replace("here", "there")
    assert (large / "there.st.mdoc").read_text() == (large / "here.st.mdoc").read_text().replace("here", "there")
    consistent(large, "there.st")
    # one task writing the whole pair, from the command line
    run(large, "sections", "TS.st", "small.st", "--keep", "1-3", "--scheduler", "local")
    assert_rows_kept(large, "small.st", [1, 2, 3])


_write_tiles = cluster._write_tiles


def test_paths_mode_writes_them_under_the_data_root(built, make_client):
    root = built / "root"
    (root / "ts").mkdir(parents=True)
    for name in ("TS.st", "TS.rawtlt", "TS.tlt", "TS.st.mdoc", "TS.star"):
        shutil.move(built / name, root / "ts" / name)
    client = make_client(data_root=root)
    response = client.post("/v1/paths/sections", json={"src": "ts/TS.st", "dst": "ts/out.st", "keep": "2,0"})
    assert response.status_code == 201, response.text
    assert "beside ts/out.st: out.rawtlt, out.tlt, out.st.mdoc, out.star" in response.json()["notices"][-1]
    for name in ("TS.st", "TS.rawtlt", "TS.tlt", "TS.st.mdoc", "TS.star"):
        shutil.copy(root / "ts" / name, built / name)  # beside the output, for assert_rows_kept
        shutil.copy(root / "ts" / name.replace("TS", "out"), built / name.replace("TS", "out"))
    assert_rows_kept(built, "out.st", [2, 0], named="ts/out.st")  # as the data root names it
