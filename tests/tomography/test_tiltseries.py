"""noa_core.tomography.tiltseries and `noa tiltseries` (issue 45 items 1, 2, 4, 6): real SerialEM mdocs (mdocfile's
test data, tests/data/mdoc/) read as mdocfile reads them; the stack sorted, excluded and copied section by section,
checked with mrcfile; the .rawtlt with NumPy, the mdoc written read back with mdocfile, the RELION 5 STAR with
starfile; bad input one line naming the file and section, nothing written; HTTP paths mode beneath the data root."""

from __future__ import annotations

import datetime
import os
import re
import shutil
from pathlib import Path

import mdocfile
import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
import tifffile
from hypothesis import given, settings
from hypothesis import strategies as st
from mdocfile.data_models import MdocGlobalData, MdocSectionData

from helpers import REPO, assert_user_error, noa, write_mrc
from noa_core.compute import tiles
from noa_core.errors import FileFormatError
from noa_core.images import stacks
from noa_core.io import formats
from noa_core.operations.tiltseries import OPERATION
from noa_core.run.execution import execute
from noa_core.tomography import tiltseries

MDOCS = REPO / "tests" / "data" / "mdoc"
TILTS = 41  # the sections of tilt_series.mdoc (SerialEM, EMBL Krios 2015: dose-symmetric, -60..60 in steps of 3)
HEIGHT, WIDTH = 20, 24


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def edit_section(text: str, z: int, field: str, value: str | None) -> str:
    """The mdoc ``text`` with ``field`` of section ``[ZValue = z]`` set to ``value`` (added where missing; None:
    removed)."""
    head, rest = text.split(f"[ZValue = {z}]", 1)
    section, *after = re.split(r"(?=\n\[ZValue = )", rest, maxsplit=1)
    lines = [line for line in section.split("\n") if not line.startswith(f"{field} =")]
    if value is not None:
        lines.insert(1, f"{field} = {value}")
    return head + f"[ZValue = {z}]" + "\n".join(lines) + "".join(after)


def real_mdoc(folder: Path, text: str | None = None) -> Path:
    """The real tilt_series.mdoc as TS_01.mrc.mdoc in ``folder`` (``text``: an edited copy), its ImageSize that of
    the small stack the tests write (the mdoc's 924 x 958 would make each test write 36 MB)."""
    original = (MDOCS / "tilt_series.mdoc").read_text()
    path = folder / "TS_01.mrc.mdoc"
    path.write_text((text or original).replace("ImageSize = 924 958", f"ImageSize = {WIDTH} {HEIGHT}"))
    return path


@pytest.fixture()
def series(tmp_path) -> np.ndarray:
    """tmp_path/TS_01.mrc.mdoc (the real mdoc) and the stack it describes, TS_01.mrc (int16, 5.4 Å, mrcfile's);
    returns the stack's sections."""
    real_mdoc(tmp_path)
    data = np.random.default_rng(45).integers(-500, 2000, (TILTS, HEIGHT, WIDTH)).astype(np.int16)
    return write_mrc(tmp_path / "TS_01.mrc", data, stack=True, voxel_size=5.4)


def mdoc_table(path: Path) -> pd.DataFrame:
    """mdocfile's own reading of an mdoc, rows in ZValue order."""
    return mdocfile.read(path).sort_values("ZValue").reset_index(drop=True)


# -- reading the real mdocs -----------------------------------------------------------------------------------


def test_a_real_mdoc_reads_as_mdocfile_reads_it():
    path = MDOCS / "tilt_series.mdoc"
    read, table = tiltseries.read(path), mdoc_table(path)
    assert [t.z for t in read.tilts] == table["ZValue"].tolist() == list(range(TILTS))
    assert [t.angle for t in read.tilts] == table["TiltAngle"].tolist()
    assert [t.exposure for t in read.tilts] == table["ExposureDose"].tolist()
    assert read.pixel_size == 5.4 and read.image_file == "TS_01.mrc" and read.image_size == (924, 958)
    assert [t.time for t in read.tilts] == pd.to_datetime(table["DateTime"], format="%d-%b-%y %H:%M:%S").tolist()
    # the title's 'Tilt axis angle = 85.3', and SerialEM's RotationAngle (175.3) less 90 agree
    assert tiltseries.tilt_axis(read) == (85.3, "the mdoc's 'Tilt axis angle'")
    without_title = tiltseries.TiltSeries(path, [], read.header, read.tilts, 5.4, None, None)
    axis, _ = tiltseries.tilt_axis(without_title)
    assert axis == pytest.approx(table["RotationAngle"][0] - 90)


@pytest.mark.parametrize(("name", "edit", "words"), [
    ("frame_set_single.mdoc", None, "[FrameSet = 0]: a frame set's mdoc (the frames of one exposure), not a tilt "
     "series"),
    ("montage_section.mdoc", None, "Montage = 1: a montage's mdoc (the pieces of one image): a montage is not a tilt "
     "series"),
    # a montage's overview section alone tells it, whatever the header says
    ("montage_section.mdoc", ("Montage = 1\n", ""), "[MontSection = 0]: a montage's mdoc (the pieces of one image): "
     "a montage is not a tilt series"),
])
def test_other_dialects_are_named_not_misread(tmp_path, name, edit, words):
    """mdocfile reads these real mdocs too (a frame set, a montage): they are not tilt series of images."""
    path = tmp_path / name
    text = (MDOCS / name).read_text()
    path.write_text(text if edit is None else text.replace(*edit))
    assert len(mdocfile.read(path)) > 0
    with pytest.raises(FileFormatError, match=re.escape(f"{path}: {words}")):
        tiltseries.read(path)


def test_a_frame_tilt_series_reads_its_zvalue_sections_and_leaves_its_frame_sets_aside(tmp_path):
    """SerialEM's frame tilt series (real, mdocfile's test data): [FrameSet = k] sections describe the frames files,
    [ZValue = k] sections the tilts; its tilts are mdocfile's ZValue rows, its dose their PriorRecordDose. All at
    33°, they make no tilt series: one line says so, nothing written."""
    path = MDOCS / "frame_set_multiple.mdoc"
    table = mdocfile.read(path)
    tilts = table[table["ZValue"].notna()].sort_values("ZValue")
    read = tiltseries.read(path)
    assert [t.z for t in read.tilts] == tilts["ZValue"].astype(int).tolist() == list(range(20))
    assert [t.angle for t in read.tilts] == tilts["TiltAngle"].tolist()
    doses, source = tiltseries.pre_exposure(read, None)
    np.testing.assert_array_equal(doses, tilts["PriorRecordDose"].to_numpy())
    assert source == "PriorRecordDose"
    shutil.copy(path, tmp_path / "FTS.mrc.mdoc")
    write_mrc(tmp_path / "FTS.mrc", np.zeros((20, HEIGHT, WIDTH), np.float32), stack=True, voxel_size=1.2827)
    before = listing(tmp_path)
    assert_user_error(noa("tiltseries", "FTS.mrc.mdoc", "--tilt-axis", "0", "-o", "TS.st", cwd=tmp_path),
                      "FTS.mrc.mdoc: [ZValue = 1]: TiltAngle 33, and 33 at [ZValue = 0]: one angle taken twice")
    assert listing(tmp_path) == before


def test_pacetomos_sorted_sections_and_newer_fields_build_what_the_mdoc_in_zvalue_order_builds(tmp_path, series):
    """PACEtomo writes the sections sorted by angle, each keeping its ZValue (the stack's section): the same tilt
    series as the real mdoc's ZValue order. Fields of later SerialEM versions that mdocfile does not model (here
    those of mdocfile's real 2021 frame-set mdoc) are kept with their tilt in the mdoc written."""
    text = (tmp_path / "TS_01.mrc.mdoc").read_text()
    newer = {"OperatingMode": "1", "CountsPerElectron": "1", "UncroppedSize": "-2880 -2046",
             "GainReference": "SuperRef_s_mmm_00000_-15.0_Oct08_01.59.24.dm4"}
    for z in range(TILTS):
        for field, value in newer.items():
            text = edit_section(text, z, field, value if field != "CountsPerElectron" else str(z + 1))
    head, *sections = re.split(r"\n(?=\[ZValue = )", text.rstrip("\n"))
    angles = [float(re.search(r"TiltAngle = (\S+)", section).group(1)) for section in sections]
    by_angle = [sections[i] for i in np.argsort(angles)]
    sorted_mdoc = tmp_path / "sorted" / "TS_01.mrc.mdoc"
    sorted_mdoc.parent.mkdir()
    sorted_mdoc.write_text("\n".join([head, *by_angle]) + "\n")
    shutil.copy(tmp_path / "TS_01.mrc", tmp_path / "sorted" / "TS_01.mrc")
    assert mdocfile.read(sorted_mdoc)["ZValue"].tolist() == np.argsort(angles).tolist()  # not in ZValue order
    (tmp_path / "TS_01.mrc.mdoc").write_text(text)
    for folder in (tmp_path, tmp_path / "sorted"):
        done = noa("tiltseries", "TS_01.mrc.mdoc", "-o", "TS.st", cwd=folder)
        assert done.returncode == 0, done.stderr
    for name in ("TS.st", "TS.rawtlt", "TS.star", "TS.st.mdoc"):  # byte for byte (the labels' date: tests/conftest.py)
        assert (tmp_path / name).read_bytes() == (tmp_path / "sorted" / name).read_bytes(), name
    order = np.argsort(angles)
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "sorted" / "TS.st"), series[order])
    written = mdocfile.read(tmp_path / "sorted" / "TS.st.mdoc")
    assert written["CountsPerElectron"].astype(int).tolist() == (order + 1).tolist()
    for field, value in newer.items():
        if field != "CountsPerElectron":
            assert set(written[field]) == {value}, field


def test_pre_exposure_from_exposure_dose_in_datetime_order_and_from_prior_record_dose(tmp_path):
    """ExposureDose summed over the tilts taken before (by DateTime, shuffled here as a sorted PACEtomo mdoc has
    them), against pandas on mdocfile's table; PriorRecordDose as it is; --dose-per-tilt times the tilts before."""
    rng = np.random.default_rng(1)
    text = (MDOCS / "tilt_series.mdoc").read_text()
    table = mdoc_table(MDOCS / "tilt_series.mdoc")
    times = table["DateTime"].tolist()
    shuffled = rng.permutation(TILTS)
    for z in range(TILTS):
        text = edit_section(text, z, "ExposureDose", f"{2 + 0.1 * z:g}")
        text = edit_section(text, z, "DateTime", times[shuffled[z]])
    path = tmp_path / "dose.mdoc"
    path.write_text(text)
    table = mdoc_table(path)
    taken = table.assign(time=pd.to_datetime(table["DateTime"], format="%d-%b-%y %H:%M:%S")).sort_values(
        ["time", "ZValue"])
    before = taken["ExposureDose"].cumsum() - taken["ExposureDose"]
    read = tiltseries.read(path)
    doses, source = tiltseries.pre_exposure(read, None)
    np.testing.assert_allclose(doses, before.sort_index().to_numpy(), atol=1e-9)
    assert source == "ExposureDose summed in acquisition order (DateTime)"
    assert tiltseries.acquisition_order(read)[0] == taken["ZValue"].tolist()
    per_tilt, _ = tiltseries.pre_exposure(read, 3.0)
    np.testing.assert_allclose(per_tilt[taken["ZValue"].to_numpy()], 3.0 * np.arange(TILTS))
    for z in range(TILTS):
        text = edit_section(text, z, "PriorRecordDose", f"{1.5 * z:g}")
    path.write_text(text)
    doses, source = tiltseries.pre_exposure(tiltseries.read(path), None)
    np.testing.assert_allclose(doses, mdoc_table(path)["PriorRecordDose"].to_numpy())
    assert source == "PriorRecordDose"


# -- sorting and exclusion against a plain model --------------------------------------------------------------


def synthetic(angles: list[float], times: list[int] | None) -> tiltseries.TiltSeries:
    start = datetime.datetime(2024, 1, 1)
    tilts = [tiltseries.Tilt(z, angle, None, None, None if times is None else start + datetime.timedelta(0, times[z]),
                             MdocSectionData(ZValue=z, TiltAngle=angle)) for z, angle in enumerate(angles)]
    return tiltseries.TiltSeries(Path("h.mdoc"), [], MdocGlobalData(), tilts, None, None, None)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_sorting_and_exclusion_match_a_plain_model(data):
    count = data.draw(st.integers(1, 30))
    angles = [a / 4 for a in data.draw(st.lists(st.integers(-360, 360), min_size=count, max_size=count, unique=True))]
    times = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 50), min_size=count, max_size=count)))
    views = data.draw(st.sets(st.integers(1, count)))
    max_angle = data.draw(st.one_of(st.none(), st.integers(0, 90).map(float)))
    order = data.draw(st.sampled_from(tiltseries.ORDERS))
    series = synthetic(angles, times)
    chosen = [] if not views else list(stacks.parse_ranges(",".join(map(str, sorted(views))), count, "exclude",
                                                             first=1))
    left_out = tiltseries.excluded(series, chosen, max_angle, None, None)
    kept = [z for z in range(count) if z + 1 not in views and (max_angle is None or abs(angles[z]) <= max_angle)]
    assert sorted(left_out) == sorted(set(range(count)) - set(kept))
    if not kept:
        return
    got = tiltseries.stack_order(series, [z for z in range(count) if z not in left_out], order)
    if order == "angle":
        assert got == sorted(kept, key=lambda z: angles[z])
    else:
        assert got == sorted(kept, key=lambda z: (z if times is None else times[z], z))


# -- noa tiltseries ---------------------------------------------------------------------------------------------


def test_the_cli_builds_a_sorted_excluded_stack_and_consistent_files(tmp_path, series):
    done = noa("tiltseries", "TS_01.mrc.mdoc", "--exclude", "1-2,41", "--max-angle", "55", "--dose-per-tilt", "2.5",
               "-o", "TS.st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = mdoc_table(tmp_path / "TS_01.mrc.mdoc")
    kept = table[(table["ZValue"] + 1 > 2) & (table["ZValue"] + 1 != 41) & (table["TiltAngle"].abs() <= 55)]
    order = kept.sort_values("TiltAngle")["ZValue"].to_numpy()
    assert len(order) == 35  # 41 less views 1, 2, 41 and the three others beyond 55 degrees
    with mrcfile.open(tmp_path / "TS.st") as out:
        np.testing.assert_array_equal(out.data, series[order])
        assert out.voxel_size.x == pytest.approx(5.4) and out.header.ispg == 0
        assert any("Tilt axis angle = 85.3" in bytes(label).decode() for label in out.header.label)
    angles = table["TiltAngle"].to_numpy()[order]
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "TS.rawtlt"), angles)
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "TS.tlt"), angles)
    written = mdocfile.read(tmp_path / "TS.st.mdoc")
    assert written["ZValue"].tolist() == list(range(len(order)))
    assert written["TiltAngle"].tolist() == angles.tolist()
    assert written["StagePosition"].tolist() == table["StagePosition"][order].tolist()  # every field follows its tilt
    assert str(written["ImageFile"][0]) == "TS.st"
    relion = starfile.read(tmp_path / "TS.star")
    assert relion["rlnMicrographName"].tolist() == [f"{i:06d}@TS.st" for i in range(1, len(order) + 1)]
    np.testing.assert_array_equal(relion["rlnTomoNominalStageTiltAngle"], angles)
    assert set(relion["rlnTomoNominalTiltAxisAngle"]) == {85.3}
    np.testing.assert_allclose(relion["rlnMicrographPreExposure"], 2.5 * order)  # ZValue order: as taken
    np.testing.assert_array_equal(relion["rlnTomoNominalDefocus"], table["TargetDefocus"][order])
    # with --out-dir, the outputs are named after the tilt series (TS_01.mrc.mdoc -> TS_01.st)
    each = noa("tiltseries", "TS_01.mrc.mdoc", "--out-dir", "each", cwd=tmp_path)
    assert each.returncode == 0, each.stderr
    assert sorted(p.name for p in (tmp_path / "each").iterdir()) == [
        "TS_01.rawtlt", "TS_01.st", "TS_01.st.mdoc", "TS_01.star", "TS_01.tlt"]
    for view, z in ((1, 0), (2, 1), (41, 40)):
        assert f"[ZValue = {z}] (view {view}, {table['TiltAngle'][z]:g}°) left out: view {view} excluded" in \
            done.stderr
    assert "left out: 57° is beyond 55°" in done.stderr


def test_a_tomography_5_mdocs_tilt_axis_is_its_titles_and_said_to_be_checked(tmp_path, series):
    """Tomography 5 names the axis 'TiltAxisAngle' in a title, and its sections' RotationAngle is not SerialEM's
    (axis + 90): the title's axis is built with, kept in each output, and the build says to check it."""
    text = (MDOCS / "tilt_series.mdoc").read_text()
    text = re.sub(r"\[T = SerialEM:[^\]]*\]", "[T = Tomography: TITAN52339070    13-Jan-2025  17:15:32]", text)
    text = re.sub(r"\[T = +Tilt axis angle[^\]]*\]", "[T =   TiltAxisAngle = -176.20  Binning = 1  SpotSize = 6]",
                  text)
    real_mdoc(tmp_path, re.sub(r"RotationAngle = [-0-9.]+", "RotationAngle = 86.2", text))
    done = noa("tiltseries", "TS_01.mrc.mdoc", "-o", "TS.st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "tilt axis -176.2° from the mdoc's 'TiltAxisAngle'" in done.stderr
    assert "'TiltAxisAngle = -176.2' in an mdoc no title of which names SerialEM: Thermo Fisher's Tomography 5" in \
        done.stderr and "give --tilt-axis" in done.stderr
    assert set(starfile.read(tmp_path / "TS.star")["rlnTomoNominalTiltAxisAngle"]) == {-176.2}
    assert "[T =   TiltAxisAngle = -176.2  Binning = 1  SpotSize = 6]" in (tmp_path / "TS.st.mdoc").read_text()
    assert len(mdoc_table(tmp_path / "TS.st.mdoc")) == TILTS
    # a SerialEM mdoc's build says nothing of it
    plain = noa("tiltseries", "TS_01.mrc.mdoc", "-o", "plain.st", cwd=real_mdoc(tmp_path).parent)
    assert plain.returncode == 0 and "Tomography 5" not in plain.stderr, plain.stderr


def test_acquisition_order_and_dark_tilts(tmp_path, series):
    dark = series.copy()
    dark[7] //= 10  # a shuttered tilt
    write_mrc(tmp_path / "TS_01.mrc", dark, stack=True, voxel_size=5.4)
    done = noa("tiltseries", "TS_01.mrc.mdoc", "--order", "acquisition", "--exclude-dark", "0.3", "-o", "TS.mrc",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    means = dark.reshape(TILTS, -1).mean(axis=1)
    assert list(np.flatnonzero(means < 0.3 * np.median(means))) == [7]
    with mrcfile.open(tmp_path / "TS.mrc") as out:
        np.testing.assert_array_equal(out.data, np.delete(dark, 7, axis=0))  # ZValue is the DateTime order here
    assert "[ZValue = 7] (view 8, " in done.stderr and "(dark)" in done.stderr
    assert mdocfile.read(tmp_path / "TS.mrc.mdoc")["TiltAngle"].tolist() == \
        np.delete(mdoc_table(tmp_path / "TS_01.mrc.mdoc")["TiltAngle"].to_numpy(), 7).tolist()


def fewer_sections(folder: Path) -> None:
    data = mrcfile.read(folder / "TS_01.mrc")
    write_mrc(folder / "TS_01.mrc", data[:40], stack=True, voxel_size=5.4)


def edited(field: str, z: int, value: str | None):
    def edit(folder: Path) -> None:
        path = folder / "TS_01.mrc.mdoc"
        path.write_text(edit_section(path.read_text(), z, field, value))
    return edit


@pytest.mark.parametrize(("spoil", "options", "fragments"), [
    (lambda folder: (folder / "TS_01.mrc").unlink(), [], ["TS_01.mrc.mdoc: ImageFile: no stack beside the mdoc"]),
    (edited("TiltAngle", 5, "3.00113"), [], ["TS_01.mrc.mdoc: [ZValue = 5]: TiltAngle 3.00113, and 3.00113 at "
                                             "[ZValue = 1]: one angle taken twice; --exclude one of them"]),
    (fewer_sections, [], ["TS_01.mrc.mdoc: [ZValue = 40]: the stack TS_01.mrc has 40 sections"]),
    (edited("PixelSpacing", 7, "10.8"), [], ["TS_01.mrc.mdoc: [ZValue = 7]: PixelSpacing 10.8 Å, and 5.4 Å in the "
                                             "header"]),
    (lambda folder: write_mrc(folder / "TS_01.mrc", np.zeros((TILTS, HEIGHT, 30), np.int16), stack=True,
                              voxel_size=5.4), [], ["TS_01.mrc.mdoc: ImageSize 24 x 20", "30 x 20"]),
    (lambda folder: write_mrc(folder / "TS_01.mrc", np.zeros((TILTS, HEIGHT, WIDTH), np.int16), stack=True,
                              voxel_size=2.7), [], ["PixelSpacing 5.4 Å, and 2.7 Å in the header of TS_01.mrc"]),
    (edited("TiltAngle", 3, None), [], ["TS_01.mrc.mdoc: [ZValue = 3]: no TiltAngle"]),
    (edited("TiltAngle", 3, "steep"), [], ["TS_01.mrc.mdoc: [ZValue = 3]: TiltAngle: 'steep' is not valid"]),
    (lambda folder: None, ["--max-angle", "0"], ["TS_01.mrc.mdoc: all 41 tilts are excluded"]),
    (lambda folder: None, ["--exclude", "0-3"], ["--exclude", "section 0 (in '0-3') is outside 1..41"]),
])
def test_bad_input_is_one_line_naming_the_file_and_section_and_nothing_is_written(tmp_path, series, spoil, options,
                                                                                fragments):
    spoil(tmp_path)
    before = listing(tmp_path)
    assert_user_error(noa("tiltseries", "TS_01.mrc.mdoc", *options, "-o", "TS.st", cwd=tmp_path), *fragments)
    assert listing(tmp_path) == before


def test_an_output_that_is_an_input_is_refused(tmp_path, series):
    assert_user_error(noa("tiltseries", "TS_01.mrc.mdoc", "--force", "-o", "TS_01.mrc", cwd=tmp_path),
                      "TS_01.mrc: is an input of this tilt series")
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "TS_01.mrc"), series)


def test_paths_mode_builds_under_the_data_root_and_refuses_a_stack_outside(tmp_path, make_client):
    root = tmp_path / "root"
    (root / "ts").mkdir(parents=True)
    (root / "out").mkdir()
    real_mdoc(root / "ts")
    data = write_mrc(root / "ts" / "TS_01.mrc", np.arange(TILTS * HEIGHT * WIDTH, dtype=np.float32).reshape(
        TILTS, HEIGHT, WIDTH), stack=True, voxel_size=5.4)
    client = make_client(data_root=root)
    response = client.post("/v1/paths/tiltseries", json={"srcs": ["ts/TS_01.mrc.mdoc"], "dst": "out/TS.st"})
    assert response.status_code == 201, response.text
    assert response.json()["output"] == "out/TS.st"
    order = mdoc_table(root / "ts" / "TS_01.mrc.mdoc").sort_values("TiltAngle")["ZValue"].to_numpy()
    np.testing.assert_array_equal(mrcfile.read(root / "out" / "TS.st"), data[order])
    assert starfile.read(root / "out" / "TS.star")["rlnMicrographName"].tolist()[0] == "000001@out/TS.st"
    # a stack over the service's voxel limit: a 422 naming it, nothing written
    limited = make_client(data_root=root, max_voxels=TILTS * HEIGHT * WIDTH - 1).post(
        "/v1/paths/tiltseries", json={"srcs": ["ts/TS_01.mrc.mdoc"], "dst": "out/limited.st"})
    assert limited.status_code == 422 and "ts/TS_01.mrc: shape" in limited.json()["detail"], limited.text
    # the stack a link to a file outside the data root: refused, nothing written
    shutil.move(root / "ts" / "TS_01.mrc", tmp_path / "TS_01.mrc")
    (root / "ts" / "TS_01.mrc").symlink_to(tmp_path / "TS_01.mrc")
    refused = client.post("/v1/paths/tiltseries", json={"srcs": ["ts/TS_01.mrc.mdoc"], "dst": "out/again.st"})
    assert refused.status_code in (400, 403), refused.text
    assert "ts/TS_01.mrc.mdoc: ImageFile: the stack ts/TS_01.mrc" in refused.json()["detail"]
    assert not any(p.name.startswith(("again", "limited")) for p in (root / "out").iterdir())


# -- per-tilt images: the sums of each tilt's frames -----------------------------------------------------------


def frames_stems(mdoc: Path) -> list[str]:
    """Each tilt's frames file (SubFramePath, a Windows path), by ZValue, without its folder and extension."""
    return [Path(str(p).replace("\\", "/")).stem for p in mdoc_table(mdoc)["SubFramePath"]]


@pytest.fixture()
def sums(tmp_path) -> np.ndarray:
    """tmp_path/TS_01.mdoc (the real mdoc; no stack) and MotionCorr/, the sum of each tilt's frames named after them
    (TS_01_000_0.0.mrc ...): float32, even ZValues MRC (mrcfile, 5.4 Å), odd ones TIFF (tifffile); returns them by
    ZValue."""
    mdoc = real_mdoc(tmp_path).rename(tmp_path / "TS_01.mdoc")
    (tmp_path / "MotionCorr").mkdir()
    data = np.random.default_rng(7).normal(100, 10, (TILTS, HEIGHT, WIDTH)).astype(np.float32)
    for z, stem in enumerate(frames_stems(mdoc)):
        if z % 2:
            tifffile.imwrite(tmp_path / "MotionCorr" / f"{stem}.tif", data[z])
        else:
            write_mrc(tmp_path / "MotionCorr" / f"{stem}.mrc", data[z], voxel_size=5.4)
    return data


def read_sum(path: Path) -> np.ndarray:
    return mrcfile.read(path) if path.suffix == ".mrc" else tifffile.imread(path)


def test_the_sums_of_each_tilts_frames_make_the_stack_in_angle_order(tmp_path, sums):
    """Each section of the stack is its tilt's sum as mrcfile/tifffile read it, in angle order; a tilt excluded
    needs no sum; the files beside it follow (mdocfile, starfile, NumPy)."""
    stems = frames_stems(tmp_path / "TS_01.mdoc")
    (tmp_path / "MotionCorr" / f"{stems[2]}.mrc").unlink()  # view 3, excluded
    done = noa("tiltseries", "TS_01.mdoc", "--images", "MotionCorr", "--exclude", "3", "-o", "TS.st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = mdoc_table(tmp_path / "TS_01.mdoc")
    order = table.drop(index=2).sort_values("TiltAngle")["ZValue"].to_numpy()
    files = sorted((tmp_path / "MotionCorr").iterdir())
    by_stem = {path.stem: read_sum(path) for path in files}
    with mrcfile.open(tmp_path / "TS.st") as out:
        np.testing.assert_array_equal(out.data, np.stack([by_stem[stems[z]] for z in order]))
        assert out.voxel_size.x == pytest.approx(5.4)
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "TS.rawtlt"), table["TiltAngle"].to_numpy()[order])
    written = mdocfile.read(tmp_path / "TS.st.mdoc")
    assert [str(p) for p in written["SubFramePath"]] == [str(p) for p in table["SubFramePath"][order]]
    assert starfile.read(tmp_path / "TS.star")["rlnMicrographName"].tolist()[-1] == f"{len(order):06d}@TS.st"
    assert listing(tmp_path / "MotionCorr") == [p.name for p in files]  # the sums untouched


def test_sections_copied_in_bands_of_rows_are_the_images_as_read_each_sum_decoded_once(tmp_path, series,
                                                                                       monkeypatch):
    """Each tilt's image is copied in bands of rows as the tile engine plans them (8 MiB; here 3 rows), a stack's
    copied from the stack by the kernel, each sum read once whatever its bands: the stack is the images as mrcfile
    and tifffile read them, in angle order, its header statistics NumPy's."""
    monkeypatch.setattr(tiles, "plan_tile", lambda shape, *args, **kwargs: (1, 1, 3, shape[3]))
    sums = np.random.default_rng(7).normal(100, 10, (TILTS, HEIGHT, WIDTH)).astype(np.float32)
    (tmp_path / "MotionCorr").mkdir()
    for z, stem in enumerate(frames_stems(tmp_path / "TS_01.mrc.mdoc")):
        if z % 2:
            tifffile.imwrite(tmp_path / "MotionCorr" / f"{stem}.tif", sums[z])
        else:
            write_mrc(tmp_path / "MotionCorr" / f"{stem}.mrc", sums[z], voxel_size=5.4)
    order = mdoc_table(tmp_path / "TS_01.mrc.mdoc").sort_values("TiltAngle")["ZValue"].to_numpy()
    copied, read = [], []
    monkeypatch.setattr(os, "copy_file_range", lambda *args, real=os.copy_file_range: copied.append(args) or
                        real(*args))
    monkeypatch.setattr(formats, "read", lambda path, *args, real=formats.read, **kwargs: read.append(path) or
                        real(path, *args, **kwargs))
    project = {"project_dir": str(tmp_path)}
    execute(OPERATION, [tmp_path / "TS_01.mrc.mdoc"], tmp_path / "TS.st", project)
    assert len(copied) == TILTS * -(-HEIGHT // 3)  # a band at a time
    read.clear()
    execute(OPERATION, [tmp_path / "TS_01.mrc.mdoc"], tmp_path / "sums.st", {"images": "MotionCorr", **project})
    assert len(read) == TILTS
    for name, images in (("TS.st", series), ("sums.st", sums)):
        with mrcfile.open(tmp_path / name) as out:
            np.testing.assert_array_equal(out.data, images[order])
            wide = images.astype(np.float64)
            assert (out.header.dmin, out.header.dmax) == (images.min(), images.max())
            assert out.header.dmean == pytest.approx(wide.mean(), rel=1e-6)
            assert out.header.rms == pytest.approx(wide.std(), rel=1e-6)


def replace_sum(z: int, data: np.ndarray, *, voxel_size: float | None = 5.4, suffix: str = ".mrc"):
    def spoil(folder: Path) -> None:
        stem = frames_stems(folder / "TS_01.mdoc")[z]
        for old in (folder / "MotionCorr").glob(f"{stem}.*"):
            old.unlink()
        if suffix == ".mrc":
            write_mrc(folder / "MotionCorr" / f"{stem}.mrc", data, voxel_size=voxel_size)
        else:
            tifffile.imwrite(folder / "MotionCorr" / f"{stem}{suffix}", data)
    return spoil


def no_sum(folder: Path) -> None:
    (folder / "MotionCorr" / f"{frames_stems(folder / 'TS_01.mdoc')[4]}.mrc").unlink()


@pytest.mark.parametrize(("spoil", "fragments"), [
    (no_sum, ["TS_01.mdoc: [ZValue = 4]: no sum of its frames TS_01_004_6.0 in MotionCorr (MotionCorr/"
              "TS_01_004_6.0.mrc, MotionCorr/TS_01_004_6.0.tif, MotionCorr/TS_01_004_6.0.tiff)"]),
    (replace_sum(6, np.zeros((HEIGHT, WIDTH + 2), np.float32)),
     ["TS_01.mdoc: [ZValue = 6]: the sum MotionCorr/TS_01_006_", "26 x 20, and the mdoc's ImageSize is 24 x 20"]),
    (replace_sum(8, np.zeros((HEIGHT, WIDTH), np.float32), voxel_size=2.7),
     ["TS_01.mdoc: [ZValue = 8]: the sum MotionCorr/TS_01_008_", "pixel size 2.7 Å, and 5.4 Å in the mdoc's "
      "PixelSpacing"]),
    (replace_sum(10, np.zeros((3, HEIGHT, WIDTH), np.float32)),
     ["TS_01.mdoc: [ZValue = 10]: the sum MotionCorr/TS_01_010_", "3 images (1 x 3), a stack; a tilt's sum is one "
      "2-d image"]),
    (replace_sum(3, np.zeros((2, HEIGHT, WIDTH), np.float32), suffix=".tif"),
     ["TS_01.mdoc: [ZValue = 3]: the sum MotionCorr/TS_01_003_", ".tif: 2 images", "a stack"]),
    (replace_sum(5, np.zeros((HEIGHT, WIDTH), np.complex64), suffix=".tiff"),
     ["TS_01.mdoc: [ZValue = 5]: the sum MotionCorr/TS_01_005_", ".tiff: complex values"]),
    (edited("SubFramePath", 7, None), ["TS_01.mdoc: [ZValue = 7]: no SubFramePath"]),
    (replace_sum(9, np.zeros((HEIGHT, WIDTH), np.int16), suffix=".tif"),
     ["TS_01.mdoc: [ZValue = 9]: the sum MotionCorr/TS_01_009_", "int16 values, and float32 in MotionCorr/TS_01_000_",
      "share one element type"]),
])
def test_bad_sums_are_one_line_naming_the_section_and_the_file_and_nothing_is_written(tmp_path, spoil, fragments,
                                                                                      sums):
    (tmp_path / "TS_01.mrc.mdoc").unlink(missing_ok=True)
    if spoil.__name__ == "edit":  # edited() edits TS_01.mrc.mdoc
        (tmp_path / "TS_01.mdoc").rename(tmp_path / "TS_01.mrc.mdoc")
        spoil(tmp_path)
        (tmp_path / "TS_01.mrc.mdoc").rename(tmp_path / "TS_01.mdoc")
    else:
        spoil(tmp_path)
    before = listing(tmp_path)
    assert_user_error(noa("tiltseries", "TS_01.mdoc", "--images", "MotionCorr", "-o", "TS.st", cwd=tmp_path),
                      *fragments)
    assert listing(tmp_path) == before


def test_sums_of_two_sizes_are_refused_without_an_image_size(tmp_path, sums):
    """Where the mdoc gives no ImageSize and no PixelSpacing, the sums are held to the first one's."""
    path = tmp_path / "TS_01.mdoc"
    path.write_text("\n".join(line for line in path.read_text().split("\n")
                              if not line.startswith(("ImageSize", "PixelSpacing"))))
    replace_sum(12, np.zeros((HEIGHT + 1, WIDTH), np.float32))(tmp_path)
    assert_user_error(noa("tiltseries", "TS_01.mdoc", "--images", "MotionCorr", "-o", "TS.st", cwd=tmp_path),
                      "TS_01.mdoc: [ZValue = 12]: the sum MotionCorr/TS_01_012_",
                      "24 x 21, and 24 x 20 in MotionCorr/TS_01_000_0.0.mrc ([ZValue = 0])")
    replace_sum(12, np.zeros((HEIGHT, WIDTH), np.float32), voxel_size=1.0)(tmp_path)
    assert_user_error(noa("tiltseries", "TS_01.mdoc", "--images", "MotionCorr", "-o", "TS.st", cwd=tmp_path),
                      "pixel size 1 Å, and 5.4 Å in MotionCorr/TS_01_000_0.0.mrc ([ZValue = 0])")
    assert not (tmp_path / "TS.st").exists()


def test_paths_mode_opens_each_sum_beneath_the_data_root_within_the_voxel_limit(tmp_path, make_client):
    root = tmp_path / "root"
    (root / "ts" / "MotionCorr").mkdir(parents=True)
    (root / "out").mkdir()
    mdoc = real_mdoc(root / "ts").rename(root / "ts" / "TS_01.mdoc")
    stems = frames_stems(mdoc)
    data = np.arange(TILTS * HEIGHT * WIDTH, dtype=np.float32).reshape(TILTS, HEIGHT, WIDTH)
    for z, stem in enumerate(stems):
        write_mrc(root / "ts" / "MotionCorr" / f"{stem}.mrc", data[z], voxel_size=5.4)
    body = {"srcs": ["ts/TS_01.mdoc"], "dst": "out/TS.st", "images": "ts/MotionCorr"}
    response = make_client(data_root=root).post("/v1/paths/tiltseries", json=body)
    assert response.status_code == 201, response.text
    order = mdoc_table(mdoc).sort_values("TiltAngle")["ZValue"].to_numpy()
    np.testing.assert_array_equal(mrcfile.read(root / "out" / "TS.st"), data[order])
    # a sum over the service's voxel limit: refused naming it
    limited = make_client(data_root=root, max_voxels=HEIGHT * WIDTH - 1).post(
        "/v1/paths/tiltseries", json={**body, "dst": "out/limited.st"})
    assert limited.status_code == 422, limited.text
    assert f"ts/MotionCorr/{stems[0]}.mrc: shape (1, 1, {HEIGHT}, {WIDTH})" in limited.json()["detail"]
    # each sum within the limit, their stack over it: refused naming the output
    stacked = make_client(data_root=root, max_voxels=HEIGHT * WIDTH * 2).post(
        "/v1/paths/tiltseries", json={**body, "dst": "out/stacked.st"})
    assert stacked.status_code == 422 and "out/stacked.st: the output of shape" in stacked.json()["detail"], \
        stacked.text
    # a sum that is a link to a file outside the data root: refused, naming its section and the sum
    outside = root / "ts" / "MotionCorr" / f"{stems[9]}.mrc"
    shutil.move(outside, tmp_path / "outside.mrc")
    outside.symlink_to(tmp_path / "outside.mrc")
    refused = make_client(data_root=root).post("/v1/paths/tiltseries", json={**body, "dst": "out/again.st"})
    assert refused.status_code in (400, 403), refused.text
    assert f"ts/TS_01.mdoc: [ZValue = 9]: the sum ts/MotionCorr/{stems[9]}.mrc" in refused.json()["detail"]
    assert sorted(p.name for p in (root / "out").iterdir()) == ["TS.rawtlt", "TS.st", "TS.st.mdoc", "TS.star",
                                                                "TS.tlt"]


def test_a_dark_sum_is_left_out_against_the_median_of_the_sums_kept_by_angle(tmp_path, sums):
    stems = frames_stems(tmp_path / "TS_01.mdoc")
    dark = sums[11] / 10
    tifffile.imwrite(tmp_path / "MotionCorr" / f"{stems[11]}.tif", dark)  # a shuttered tilt (ZValue 11 is odd: TIFF)
    done = noa("tiltseries", "TS_01.mdoc", "--images", "MotionCorr", "--max-angle", "50", "--exclude-dark", "0.3",
               "-o", "TS.st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = mdoc_table(tmp_path / "TS_01.mdoc")
    by_angle = table[table["TiltAngle"].abs() <= 50]["ZValue"].to_numpy()
    means = {z: float(read_sum(next((tmp_path / "MotionCorr").glob(f"{stems[z]}.*"))).mean()) for z in by_angle}
    median = np.median(list(means.values()))
    assert [z for z, mean in means.items() if mean < 0.3 * median] == [11]
    kept = table[table["ZValue"].isin(by_angle) & (table["ZValue"] != 11)].sort_values("TiltAngle")["ZValue"]
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "TS.st"), sums[kept.to_numpy()])
    assert "[ZValue = 11] (view 12, " in done.stderr and "(dark)" in done.stderr


def test_a_stacks_serialem_records_follow_their_tilts(tmp_path, series):
    """The stack's extended header of one SerialEM record per section (SERI: here each section's number and its
    angle in hundredths, as SerialEM's tilt-angle flag stores them) goes into the output with the sections kept, in
    the output's order (mrcfile reads both)."""
    table = mdoc_table(tmp_path / "TS_01.mrc.mdoc")
    records = np.stack([np.arange(TILTS), np.round(table["TiltAngle"].to_numpy() * 100)], axis=1).astype(np.int16)
    with mrcfile.open(tmp_path / "TS_01.mrc", "r+") as stack:
        stack.set_extended_header(records.reshape(-1).view(np.uint8))
        stack.header.exttyp = b"SERI"
        stack.header.nint, stack.header.nreal = 4, 1
    done = noa("tiltseries", "TS_01.mrc.mdoc", "--exclude", "1-2", "-o", "TS.st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    order = table[table["ZValue"] > 1].sort_values("TiltAngle")["ZValue"].to_numpy()
    with mrcfile.open(tmp_path / "TS.st") as out:
        np.testing.assert_array_equal(out.data, series[order])
        assert bytes(out.header.exttyp) == b"SERI"
        written = np.frombuffer(out.extended_header.tobytes(), np.int16).reshape(-1, 2)
    np.testing.assert_array_equal(written, records[order])
    np.testing.assert_array_equal(written[:, 1] / 100, np.round(table["TiltAngle"].to_numpy()[order], 2))
