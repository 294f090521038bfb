"""noa_core.tomography.tiltseries and `noa tiltseries` (issue 45 items 1, 2, 4, 6): real SerialEM mdocs (mdocfile's
test data, tests/data/mdoc/) read as mdocfile reads them; the stack sorted, excluded and copied section by section,
checked with mrcfile; the .rawtlt with NumPy, the mdoc written read back with mdocfile, the RELION 5 STAR with
starfile; bad input one line naming the file and section, nothing written; HTTP paths mode beneath the data root."""

from __future__ import annotations

import datetime
import re
import shutil
from pathlib import Path

import mdocfile
import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
from hypothesis import given, settings
from hypothesis import strategies as st
from mdocfile.data_models import MdocGlobalData, MdocSectionData

from helpers import REPO, assert_user_error, noa, write_mrc
from noa_core.errors import FileFormatError
from noa_core.images import stacks
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


@pytest.mark.parametrize(("name", "words"), [
    ("frame_set_single.mdoc", "[FrameSet = 0]: a frame set's mdoc (the frames of one exposure), not a tilt series"),
    ("frame_set_multiple.mdoc", "[FrameSet = 0]: a frame set's mdoc"),
    ("montage_section.mdoc", "Montage = 1: a montage's mdoc"),
])
def test_other_dialects_are_named_not_misread(name, words):
    """mdocfile reads these real mdocs too (a frame set, a montage): they are not tilt series of images."""
    assert len(mdocfile.read(MDOCS / name)) > 0
    with pytest.raises(FileFormatError, match=re.escape(words)):
        tiltseries.read(MDOCS / name)


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
    # the stack a link to a file outside the data root: refused, nothing written
    shutil.move(root / "ts" / "TS_01.mrc", tmp_path / "TS_01.mrc")
    (root / "ts" / "TS_01.mrc").symlink_to(tmp_path / "TS_01.mrc")
    refused = client.post("/v1/paths/tiltseries", json={"srcs": ["ts/TS_01.mrc.mdoc"], "dst": "out/again.st"})
    assert refused.status_code in (400, 403), refused.text
    assert "ts/TS_01.mrc.mdoc: ImageFile: the stack TS_01.mrc" in refused.json()["detail"]
    assert not any(p.name.startswith("again") for p in (root / "out").iterdir())
