"""noa_core.tomography.check and `noa tiltcheck` (issue 45 item 3): a stack `noa tiltseries` wrote, from a real
SerialEM mdoc (mdocfile's test data), checks clean; each fault injected into a file beside it is found and named
(file and section), the sections expected computed with mrcfile, mdocfile, starfile and NumPy; missing side files are
said, not fatal; exit 0 consistent, 1 disagreements, 2 unreadable; over HTTP every file is opened beneath the data
root."""

from __future__ import annotations

import json
import re

import mdocfile
import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
from mdocfile.data_models import Mdoc
from tomography.test_tiltseries import HEIGHT, TILTS, WIDTH, edit_section, real_mdoc

from helpers import assert_user_error, noa, write_mrc
from noa_core import operations

SERIALEM_AXIS = 85.3  # the real mdoc's 'Tilt axis angle'


@pytest.fixture()
def built(tmp_path):
    """tmp_path/TS.st built by `noa tiltseries` from the real mdoc (by angle, 3 e/Å² a tilt) with TS.rawtlt, TS.tlt,
    TS.st.mdoc and TS.star beside it; the files the stack was built from moved away."""
    real_mdoc(tmp_path)
    data = np.random.default_rng(3).integers(0, 100, (TILTS, HEIGHT, WIDTH)).astype(np.int16)
    write_mrc(tmp_path / "TS_01.mrc", data, stack=True, voxel_size=5.4)
    done = noa("tiltseries", "TS_01.mrc.mdoc", "--dose-per-tilt", "3", "-o", "TS.st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (tmp_path / "source").mkdir()
    for name in ("TS_01.mrc", "TS_01.mrc.mdoc"):
        (tmp_path / name).rename(tmp_path / "source" / name)
    return tmp_path


def check(folder, *more):
    """`noa tiltcheck TS.st --json`: the exit status and the result."""
    done = noa("tiltcheck", "TS.st", "--json", *more, cwd=folder)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def acquisition(folder) -> list[int]:
    """The stack's sections in the order they were taken, from mdocfile's reading of the mdoc beside it."""
    table = mdocfile.read(folder / "TS.st.mdoc")
    taken = table.assign(time=pd.to_datetime(table["DateTime"], format="%d-%b-%y %H:%M:%S"))
    return taken.sort_values(["time", "ZValue"])["ZValue"].tolist()


def test_a_stack_noa_tiltseries_wrote_checks_clean(built):
    status, result = check(built)
    assert status == 0 and result["consistent"] and result["findings"] == [] and result["missing"] == []
    with mrcfile.open(built / "TS.st", header_only=True) as stack:
        assert result["sections"] == int(stack.header.nz) == len(mdocfile.read(built / "TS.st.mdoc"))
    assert result["files"] == {"rawtlt": "TS.rawtlt", "tlt": "TS.tlt", "mdoc": "TS.st.mdoc", "star": "TS.star"}
    text = noa("tiltcheck", "TS.st", cwd=built)
    assert text.returncode == 0 and text.stdout.splitlines()[-1] == "consistent", text.stdout
    # and from Python, the same result
    assert operations.get("tiltcheck").describe(built / "TS.st")["consistent"] is True


def lines(path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def remove_tlt_line(folder) -> set[int]:
    angles = np.loadtxt(folder / "TS.tlt")
    section = int(np.flatnonzero(angles == angles[angles > 10][0])[0])  # a line in the middle of the file
    kept = lines(folder / "TS.tlt")
    del kept[section]
    (folder / "TS.tlt").write_text("".join(kept))
    return {section}


def swap(name: str, i: int, j: int):
    def spoil(folder) -> set[int]:
        text = lines(folder / name)
        text[i], text[j] = text[j], text[i]
        (folder / name).write_text("".join(text))
        return {i, j}
    return spoil


def star_dose_decreasing(folder) -> set[int]:
    table = starfile.read(folder / "TS.star", always_dict=True)
    (name, rows), = table.items()
    order = acquisition(folder)
    section = order[20]  # taken after order[19]: a pre-exposure lower than its must be found
    rows.loc[section, "rlnMicrographPreExposure"] = rows["rlnMicrographPreExposure"][order[19]] - 1
    starfile.write({name: rows}, folder / "TS.star", overwrite=True)
    doses = starfile.read(folder / "TS.star")["rlnMicrographPreExposure"].to_numpy()[order]
    return {order[k] for k in np.flatnonzero(np.diff(doses) < 0) + 1}


def mdoc_dose_decreasing(folder) -> set[int]:
    path = folder / "TS.st.mdoc"
    order = acquisition(folder)
    text = path.read_text()
    for k, z in enumerate(order):
        text = edit_section(text, z, "PriorRecordDose", f"{2.5 * k if k != 30 else 1:g}")
    path.write_text(text)
    prior = mdocfile.read(path).set_index("ZValue")["PriorRecordDose"][order].to_numpy()
    return {order[k] for k in np.flatnonzero(np.diff(prior) < 0) + 1}


def mdoc_pixel_size(folder) -> set[int]:
    path = folder / "TS.st.mdoc"
    path.write_text(edit_section(path.read_text(), 7, "PixelSpacing", "10.8"))
    sections = Mdoc.from_file(path).section_data  # (mdocfile.read's table gives each the header's)
    return {int(s.ZValue) for s in sections if s.PixelSpacing != 5.4}


def every_pixel_size(folder) -> set[int]:
    path = folder / "TS.st.mdoc"
    path.write_text(path.read_text().replace("PixelSpacing = 5.4", "PixelSpacing = 5.3"))
    assert set(mdocfile.read(path)["PixelSpacing"]) == {5.3}
    return {None}


def mdoc_axis(folder) -> set[int]:
    path = folder / "TS.st.mdoc"
    path.write_text(path.read_text().replace(f"Tilt axis angle = {SERIALEM_AXIS:g}", "Tilt axis angle = 80"))
    return {None, 0}  # the mdoc against the stack's label; the STAR's first row against the mdoc


@pytest.mark.parametrize(("spoil", "file", "words"), [
    (remove_tlt_line, "TS.tlt", r"40 angles, and the stack TS.st has 41 sections; section (\d+)'s angle"),
    (swap("TS.tlt", 3, 30), "TS.tlt", r"line \d+ \(section (\d+)\): .* is out of the order of the angles of "
                                      r"TS.st.mdoc \[ZValue = \d+\]"),
    (swap("TS.rawtlt", 0, 1), "TS.rawtlt", r"line \d+ \(section (\d+)\): .*°, and .*° in TS.st.mdoc"),
    (star_dose_decreasing, "TS.star", r"row \d+ \(section (\d+)\): rlnMicrographPreExposure .* less than"),
    (mdoc_dose_decreasing, "TS.st.mdoc", r"\[ZValue = (\d+)\]: pre-exposure 1 e/Å² \(PriorRecordDose\), less than"),
    (mdoc_pixel_size, "TS.st.mdoc", r"\[ZValue = (\d+)\]: PixelSpacing 10.8 Å, and 5.4 Å in the header"),
    (every_pixel_size, "TS.st.mdoc", r"()PixelSpacing 5.3 Å, and 5.4 Å in the header of the stack TS.st"),
    (mdoc_axis, "TS.st.mdoc", r"()tilt axis 80° \(the mdoc's 'Tilt axis angle'\), and 85.3° in the labels of"),
])
def test_each_fault_is_found_and_named(built, spoil, file, words):
    sections = spoil(built)
    status, result = check(built)
    assert status == 1 and not result["consistent"]
    named = [f for f in result["findings"] if f["file"] == file and re.match(words, f["problem"])]
    assert named, result["findings"]
    for finding in named:  # the section a finding names is the one in its words
        given = re.match(words, finding["problem"]).group(1)
        assert finding["section"] == (int(given) if given else None)
    assert {f["section"] for f in result["findings"]} == sections
    text = noa("tiltcheck", "TS.st", cwd=built)
    assert text.returncode == 1
    for finding in result["findings"]:  # one line each, naming the file
        assert f"{finding['file']}: {finding['problem']}" in text.stdout.splitlines()


def test_a_tilt_axis_differing_is_found_in_the_star_too(built):
    mdoc_axis(built)
    _, result = check(built)
    star_axis = starfile.read(built / "TS.star")["rlnTomoNominalTiltAxisAngle"]
    assert set(star_axis) == {SERIALEM_AXIS}
    assert {"file": "TS.star", "section": 0, "problem": f"row 1 (section 0): rlnTomoNominalTiltAxisAngle "
            f"{SERIALEM_AXIS:g}°, and 80° in TS.st.mdoc (the mdoc's 'Tilt axis angle')"} in result["findings"]


# Tomography 5's titles as its mdocs have them (public examples), and the synthetic spelling SerialEM uses
TOMOGRAPHY_5 = [
    ("[T = Tomography: TITAN52339070    13-Jan-2025  17:15:32]", "[T =   TiltAxisAngle = -176.20  Binning = 1  "
     "SpotSize = 6]", "TiltAxisAngle = -176.2", 176.2),
    ("[T = Tomography 5]", "[T =     Tilt axis angle = -176.73, binning = 4]", "Tilt axis angle = -176.73", 176.73),
]


@pytest.mark.parametrize(("software", "axis_title", "said", "axis"), TOMOGRAPHY_5,
                         ids=["TiltAxisAngle", "Tilt axis angle"])
def test_tomography_5s_tilt_axis_is_named(built, software, axis_title, said, axis):
    """An mdoc whose titles name no SerialEM (Tomo5's): its axis is said, with SerialEM's (-axis - 90)."""
    path = built / "TS.st.mdoc"
    text = re.sub(r"\[T = SerialEM:[^\]]*\]", software, path.read_text())
    path.write_text(re.sub(r"\[T = +Tilt axis angle[^\]]*\]", axis_title, text))
    _, result = check(built)
    problems = [f["problem"] for f in result["findings"] if f["file"] == "TS.st.mdoc"]
    assert any(f"'{said}' in an mdoc no title of which names SerialEM" in p and f"= {axis - 90:g}°" in p
               for p in problems), problems


def test_missing_side_files_are_said_not_fatal(built):
    (built / "TS.tlt").unlink()
    (built / "TS.star").unlink()
    status, result = check(built)
    assert status == 0 and result["consistent"]
    assert result["missing"] == ["TS.tlt", "TS.star"] and set(result["files"]) == {"rawtlt", "mdoc"}
    for name in ("TS.rawtlt", "TS.st.mdoc"):
        (built / name).unlink()
    text = noa("tiltcheck", "TS.st", cwd=built)
    assert text.returncode == 0 and "TS.st.mdoc or TS.mdoc: not there (not checked)" in text.stdout


def test_a_plain_mdoc_name_is_found_and_its_count_checked(built):
    path = built / "TS.st.mdoc"
    text = path.read_text()
    path.unlink()
    (built / "TS.mdoc").write_text(text.split("[ZValue = 40]")[0])  # the last section gone
    assert len(mdocfile.read(built / "TS.mdoc")) == TILTS - 1
    status, result = check(built)
    assert status == 1 and result["files"]["mdoc"] == "TS.mdoc"
    assert {"file": "TS.mdoc", "section": None, "problem": "40 [ZValue] sections, and the stack TS.st has 41 "
            "sections"} in result["findings"]


@pytest.mark.parametrize(("spoil", "fragments"), [
    (lambda folder: (folder / "TS.tlt").write_text("1.0\n2.0\nsteep\n"), ["TS.tlt: line 3: 'steep' is not a tilt"]),
    (lambda folder: (folder / "TS.st.mdoc").write_bytes(b"\xff\xfe"), ["TS.st.mdoc: byte 0: not text"]),
    (lambda folder: (folder / "TS.star").write_text("data_a\nloop_\n_x\n1\ndata_b\nloop_\n_y\n2\n"),
     ["TS.star: no data_TS loop"]),
    (lambda folder: (folder / "TS.st").write_bytes(b"not an MRC file"), ["TS.st"]),
])
def test_unreadable_input_is_exit_2_one_line(built, spoil, fragments):
    spoil(built)
    assert_user_error(noa("tiltcheck", "TS.st", cwd=built), *fragments)


def test_paths_mode_opens_every_file_beneath_the_data_root(built, make_client):
    root = built / "root"
    (root / "ts").mkdir(parents=True)
    for name in ("TS.st", "TS.rawtlt", "TS.tlt", "TS.st.mdoc", "TS.star"):
        (built / name).rename(root / "ts" / name)
    client = make_client(data_root=root)
    response = client.post("/v1/paths/tiltcheck", json={"path": "ts/TS.st"})
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["consistent"] and result["files"]["mdoc"] == "ts/TS.st.mdoc" and result["path"] == "ts/TS.st"
    swap("TS.tlt", 0, 40)(root / "ts")
    found = client.post("/v1/paths/tiltcheck", json={"path": "ts/TS.st"}).json()
    assert {f["section"] for f in found["findings"]} == {0, 40} and found["findings"][0]["file"] == "ts/TS.tlt"
    # a side file that is a link to a file outside the data root is refused, not read
    (root / "ts" / "TS.star").rename(built / "TS.star")
    (root / "ts" / "TS.star").symlink_to(built / "TS.star")
    refused = client.post("/v1/paths/tiltcheck", json={"path": "ts/TS.st"})
    assert refused.status_code in (400, 403), refused.text
    assert "TS.star" in refused.json()["detail"]
