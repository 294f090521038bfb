"""Particle files in the viewer (issue 42 item 4): a RELION STAR or cryoSPARC .cs under the data root listed and
opened as the stack of its rows' images (pictures and values against mrcfile reading the stacks the rows name,
starfile reading the rows), each section's row under /v1/view/row (against starfile and the .cs array), the stacks
opened beneath the data root as paths mode opens them (a STAR naming ../../x.mrcs, an absolute path or a link out:
403 naming the row and the column), ETags that change when a stack the file names changes, a page of particles as a
montage (/v1/view/montage against a NumPy montage of the stacks mrcfile reads, as noa preview --montage draws one),
and in Debian's headless Chromium the row's columns shown beside the value under the cursor, and under the cursor on
the montage, paged.

Data: the particle set RELION 3.1.3 extracted (tests/data/relion_particles), its rows shuffled across the two stacks
and given a defocus and a class.
"""

from __future__ import annotations

import io
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import mrcfile
import numpy as np
import pytest
import starfile
from browser import Browser, chromium
from PIL import Image

from helpers import REPO, assert_problem, start_server, stop_server
from noa_core.pictures import viewer
from tests.server.test_viewer import block_mean, gray, limits
from tests.server.test_viewer_browser import KEY, canvas_image, canvas_image_any, open_file, open_viewer, wait_render

RELION = REPO / "tests" / "data" / "relion_particles"
ORDER = [6, 0, 10, 3, 1, 9, 2, 8, 4, 7, 5]  # row n of the STAR is row ORDER[n] of RELION's


def relion_project(folder: Path, order: list[int] = ORDER) -> Path:
    """A copy of RELION's particle set in ``folder``: its particles STAR with its rows in ``order`` (the two stacks'
    particles interleaved) and two columns added, rlnDefocusU and rlnClassNumber, different on every row."""
    shutil.copytree(RELION, folder)
    lines = (folder / "particles.star").read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if "@Particles/" in line]
    assert len(rows) == len(order)
    out = list(lines)
    for n, (at, source) in enumerate(zip(rows, order)):
        out[at] = f"{lines[rows[source]]} {10000 + 1234.5 * n:12.6f} {n % 4 + 1:12d} "
    labels = rows[0]  # the particles loop's labels end on the line before its first row
    out[labels:labels] = ["_rlnDefocusU #6 ", "_rlnClassNumber #7 "]
    (folder / "particles.star").write_text("\n".join(out) + "\n")
    return folder / "particles.star"


def oracle_images(star_path: Path, project: Path) -> np.ndarray:
    """Each row's image, as starfile reads the rows and mrcfile the stacks they name."""
    images = []
    for name in starfile.read(star_path)["particles"]["rlnImageName"]:
        index, stack = name.split("@")
        with mrcfile.open(project / stack) as m:
            images.append(np.array(m.data[int(index) - 1]))
    return np.stack(images)


def minmax_picture(values: np.ndarray) -> np.ndarray:
    """RELION's PNG levels between the values' min and max (the viewer's contrast=minmax)."""
    v = values.astype(np.float64)
    return np.floor((v - v.min()) / ((v.max() - v.min()) / 255)).astype(np.uint8)


def cs_particles(path: Path, rows: list[tuple[str, int]]) -> np.ndarray:
    """A cryoSPARC particle file as cryoSPARC writes one (np.save of a structured array); the array."""
    dtype = [("uid", "<u8"), ("blob/path", "S40"), ("blob/idx", "<u4"), ("blob/shape", "<u4", (2,)),
             ("blob/psize_A", "<f4"), ("ctf/df1_A", "<f4"), ("alignments2D/class", "<u4")]
    array = np.zeros(len(rows), dtype)
    array["uid"] = np.arange(len(rows)) + 7 * 10**17
    array["blob/path"] = [f">{p}".encode() for p, _ in rows]
    array["blob/idx"] = [i for _, i in rows]
    array["blob/shape"] = 32
    array["blob/psize_A"] = 1.5
    array["ctf/df1_A"] = np.linspace(12000, 18000, len(rows))
    array["alignments2D/class"] = np.arange(len(rows)) % 3
    with open(path, "wb") as f:
        np.save(f, array)
    return array


@pytest.fixture
def project(tmp_path) -> Path:
    """The data root: the RELION project (its stacks under Particles/) with a shuffled particles STAR."""
    relion_project(tmp_path / "root")
    return tmp_path / "root"


def decoded_png(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.asarray(Image.open(io.BytesIO(response.content)))


# -- the stack of its particles ---------------------------------------------------------------------------------

def test_a_particle_file_is_listed_and_opened_as_the_stack_of_its_rows(project, make_client):
    api = make_client(data_root=project)
    images = oracle_images(project / "particles.star", project)
    listing = api.get("/v1/view/list").json()
    files = {f["name"]: f for f in listing["files"]}
    assert files["particles.star"]["format"] == "particles", files
    assert files["particles.star"]["shape"] == [11, 1, 32, 32] and files["particles.star"]["pixel_size"] == [1.5] * 3
    info = api.get("/v1/view/info", params={"file": "particles.star"}).json()
    assert info["shape"] == [11, 1, 32, 32] and info["format"] == "particles"
    for section in (0, 3, 10):
        got = decoded_png(api.get("/v1/view/image", params={"file": "particles.star", "section": section,
                                                            "contrast": "minmax"}))
        np.testing.assert_array_equal(got, minmax_picture(images[section]), err_msg=f"section {section}")
        tile = decoded_png(api.get("/v1/view/tile", params={"file": "particles.star", "section": section,
                                                            "contrast": "minmax"}))
        np.testing.assert_array_equal(tile, got)
        value = api.get("/v1/view/value", params={"file": "particles.star", "section": section, "x": 5, "y": 9})
        assert value.json()["value"] == float(images[section][9, 5])
    histogram = api.get("/v1/view/histogram", params={"file": "particles.star", "section": 4}).json()
    assert histogram["statistics"]["max"] == float(images[4].max())


def test_a_cryosparc_file_is_opened_as_the_stack_of_its_rows(project, make_client):
    rows = [("Particles/Movies/mic1.mrcs", 4), ("Particles/Movies/mic0.mrcs", 0), ("Particles/Movies/mic1.mrcs", 1)]
    array = cs_particles(project / "picked.cs", rows)
    api = make_client(data_root=project)
    for section, (stack, index) in enumerate(rows):
        with mrcfile.open(project / stack) as m:
            image = np.array(m.data[index])
        got = decoded_png(api.get("/v1/view/image", params={"file": "picked.cs", "section": section,
                                                            "contrast": "minmax"}))
        np.testing.assert_array_equal(got, minmax_picture(image))
        row = api.get("/v1/view/row", params={"file": "picked.cs", "section": section}).json()
        record = array[section]
        assert row == {"file": "picked.cs", "section": section, "kind": "cryoSPARC", "row": section + 1, "columns": {
            "uid": int(record["uid"]), "blob/path": record["blob/path"].decode(), "blob/idx": int(record["blob/idx"]),
            "blob/shape": [32, 32], "blob/psize_A": 1.5, "ctf/df1_A": float(record["ctf/df1_A"]),
            "alignments2D/class": int(record["alignments2D/class"])}}


# -- the row under the cursor --------------------------------------------------------------------------------------

def test_each_sections_row_is_the_stars_particle_row_and_its_optics_group(project, make_client):
    api = make_client(data_root=project)
    table = starfile.read(project / "particles.star")
    particles, optics = table["particles"], table["optics"]
    for section in range(11):
        got = api.get("/v1/view/row", params={"file": "particles.star", "section": section})
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["kind"] == "STAR" and body["row"] == section + 1 and body["section"] == section
        columns = body["columns"]
        expected = {**particles.iloc[section].to_dict(), **optics.iloc[0].to_dict()}
        assert list(columns) == [*particles.columns, *[c for c in optics.columns if c not in particles.columns]]
        for label, value in expected.items():  # the text as written; starfile's values parsed
            assert (float(columns[label]) == pytest.approx(value)) if not isinstance(value, str) \
                else columns[label] == value, (section, label)
    assert api.get("/v1/view/row", params={"file": "particles.star", "section": 2}).json()["columns"][
        "rlnDefocusU"] == f"{10000 + 1234.5 * 2:.6f}"
    past = assert_problem(api.get("/v1/view/row", params={"file": "particles.star", "section": 11}), 400)
    assert past["detail"].startswith("section: 11") and "0 to 10" in past["detail"]
    mrc = assert_problem(api.get("/v1/view/row", params={"file": "Particles/Movies/mic0.mrcs"}), 400)
    assert mrc["detail"].startswith("file: Particles/Movies/mic0.mrcs: not a particle file"), mrc
    assert str(project) not in mrc["detail"]


def test_stacks_are_found_in_the_project_folder_the_request_names(tmp_path, make_client):
    root = tmp_path / "root"
    relion_project(root / "projects" / "p1")
    api = make_client(data_root=root)
    file = "projects/p1/particles.star"
    missing = assert_problem(api.get("/v1/view/info", params={"file": file}), 404)
    assert "row 1, rlnImageName" in missing["detail"] and "Particles/Movies/mic1.mrcs" in missing["detail"]
    params = {"file": file, "project_dir": "projects/p1", "section": 1, "contrast": "minmax"}
    images = oracle_images(root / file, root / "projects" / "p1")
    np.testing.assert_array_equal(decoded_png(api.get("/v1/view/image", params=params)), minmax_picture(images[1]))
    assert api.get("/v1/view/row", params={**params, "section": 1}).json()["columns"]["rlnMicrographName"] == \
        "Movies/mic0.mrc"


# -- a page of particles: the montage --------------------------------------------------------------------------

GAP = 4  # pixels between panels, as noa preview --montage draws them


def montage_oracle(images: np.ndarray, columns: int, contrast: str, k: int, invert: bool = False) -> np.ndarray:
    """The montage as noa preview --montage draws one, in NumPy: each image block-meaned k x k, the contrast limits
    over every panel's values together, RELION's levels, panels left to right and top to bottom GAP pixels apart on
    black."""
    panels = np.stack([block_mean(image, k) for image in images])
    lo, hi = limits(panels, contrast)
    count, rows, cols = panels.shape
    down = -(-count // columns)
    picture = np.zeros((down * rows + (down - 1) * GAP, min(count, columns) * (cols + GAP) - GAP), np.uint8)
    for n, panel in enumerate(panels):
        top, left = n // columns * (rows + GAP), n % columns * (cols + GAP)
        picture[top:top + rows, left:left + cols] = gray(panel, lo, hi, invert=invert)
    return picture


def test_a_page_of_particles_is_a_montage_of_their_rows_images(project, make_client):
    api = make_client(data_root=project)
    images = oracle_images(project / "particles.star", project)
    # sections 3..7 in rows of 2, each 32 x 32 image block-meaned 2 x 2 to 16 pixels; shared min-max contrast
    params = {"file": "particles.star", "first": 3, "count": 5, "columns": 2, "size": 16, "contrast": "minmax"}
    got = api.get("/v1/view/montage", params=params)
    np.testing.assert_array_equal(decoded_png(got), montage_oracle(images[3:8], 2, "minmax", 2))
    assert got.headers["montage-layout"] == "first=3, count=5, columns=2, height=16, width=16, gap=4"
    # the last page has what is left (sections 8..10); full size, RELION's sigma contrast, inverted
    params = {"file": "particles.star", "first": 8, "count": 4, "size": 32, "invert": True}
    got = api.get("/v1/view/montage", params=params)
    np.testing.assert_array_equal(decoded_png(got), montage_oracle(images[8:], 2, "sigma:3", 1, invert=True))
    assert got.headers["montage-layout"] == "first=8, count=3, columns=2, height=32, width=32, gap=4"
    # a plain stack too: its sections in order
    with mrcfile.open(project / "Particles" / "Movies" / "mic0.mrcs") as m:
        sections = np.array(m.data)
    params = {"file": "Particles/Movies/mic0.mrcs", "first": 1, "count": 3, "columns": 3, "size": 32}
    np.testing.assert_array_equal(decoded_png(api.get("/v1/view/montage", params=params)),
                                  montage_oracle(sections[1:4], 3, "sigma:3", 1))
    # one panel is the section's own picture
    single = api.get("/v1/view/montage", params={"file": "particles.star", "first": 4, "count": 1, "size": 32})
    np.testing.assert_array_equal(decoded_png(single), decoded_png(api.get(
        "/v1/view/image", params={"file": "particles.star", "section": 4})))


def test_the_montages_etag_changes_when_a_stack_changes_and_its_layout_comes_with_a_304(project, make_client):
    api = make_client(data_root=project)
    params = {"file": "particles.star", "first": 0, "count": 4, "columns": 4, "size": 32, "contrast": "minmax"}
    got = api.get("/v1/view/montage", params=params)
    again = api.get("/v1/view/montage", params=params, headers={"If-None-Match": got.headers["etag"]})
    assert again.status_code == 304 and again.headers["montage-layout"] == got.headers["montage-layout"]
    other = api.get("/v1/view/montage", params={**params, "first": 1})
    assert other.status_code == 200 and other.headers["etag"] != got.headers["etag"]
    stack = project / "Particles" / "Movies" / "mic0.mrcs"  # section 1 is row 1 of mic0.mrcs
    before = stack.stat()
    with mrcfile.open(stack, "r+") as m:
        m.data[0] = -m.data[0]
    os.utime(stack, ns=(before.st_atime_ns, before.st_mtime_ns))
    fresh = api.get("/v1/view/montage", params=params, headers={"If-None-Match": got.headers["etag"]})
    assert fresh.status_code == 200 and fresh.headers["etag"] != got.headers["etag"]
    images = oracle_images(project / "particles.star", project)
    np.testing.assert_array_equal(decoded_png(fresh), montage_oracle(images[:4], 4, "minmax", 1))


def test_bad_montage_requests_name_the_parameter(project, make_client):
    api = make_client(data_root=project)
    with mrcfile.new_mmap(project / "big.mrcs", shape=(17, 1024, 1024), mrc_mode=0) as m:  # sparse: no data
        m.set_image_stack()
    mrcfile.write(project / "volume.mrc", np.zeros((4, 8, 8), np.float32))
    for params, status, slug, detail in [
            ({"first": 11}, 400, "invalid-parameter", "first: 11: the file has sections 0 to 10"),
            ({"count": 0}, 400, "invalid-parameters", "count"),
            ({"count": 257}, 400, "invalid-parameters", "count"),
            ({"size": 8}, 400, "invalid-parameters", "size"),
            ({"columns": 0}, 400, "invalid-parameters", "columns"),
            ({"contrast": "range:5,1"}, 400, "invalid-parameter", "contrast"),
            ({"file": "missing.star"}, 404, "file-not-found", "missing.star"),
            ({"file": "volume.mrc"}, 400, "invalid-parameter", "file: volume.mrc: a volume of 4 slices"),
            ({"file": "big.mrcs", "count": 17, "size": 1024}, 400, "invalid-parameter",
             "size: 1024: 17 panels of up to 1024 x 1024 pixels are 17825792 pixels, more than the 16777216")]:
        body = assert_problem(api.get("/v1/view/montage", params={"file": "particles.star", **params}), status, slug)
        assert detail in body["detail"], (params, body)
        assert str(project) not in body["detail"]
    assert api.get("/v1/view/montage", params={"file": "big.mrcs", "count": 16, "size": 1024}).status_code == 200
    small = make_client(data_root=project, max_voxels=10 * 32 * 32)
    assert_problem(small.get("/v1/view/montage", params={"file": "particles.star", "count": 11}), 422,
                   "too-many-voxels")
    assert small.get("/v1/view/montage", params={"file": "particles.star", "count": 10}).status_code == 200


# -- the sandbox -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("named", ["../../outside.mrcs", "ABSOLUTE", "Particles/out_link.mrcs"])
def test_a_stack_outside_the_data_root_is_refused_naming_the_row_and_column(tmp_path, make_client, named):
    root = tmp_path / "box" / "root"
    star_path = relion_project(root)
    shutil.copy(root / "Particles" / "Movies" / "mic0.mrcs", tmp_path / "outside.mrcs")
    (root / "Particles" / "out_link.mrcs").symlink_to(tmp_path / "outside.mrcs")
    named = str(tmp_path / "outside.mrcs") if named == "ABSOLUTE" else named
    text = star_path.read_text()
    second = text.splitlines()[[i for i, line in enumerate(text.splitlines()) if "@Particles/" in line][1]]
    stack = second.split()[2].split("@")[1]
    star_path.write_text(text.replace(second, second.replace(f"@{stack}", f"@{named}"), 1))
    api = make_client(data_root=root)
    for endpoint, extra in [("info", {}), ("image", {}), ("tile", {}), ("histogram", {}), ("value", {"x": 0, "y": 0}),
                            ("row", {})]:
        body = assert_problem(api.get(f"/v1/view/{endpoint}", params={"file": "particles.star", **extra}), 403,
                              "path-refused")
        assert "particles.star: data_particles, row 2, rlnImageName" in body["detail"], (endpoint, body)
        assert str(root) not in body["detail"], body
    listed = {f["name"]: f for f in api.get("/v1/view/list").json()["files"]}
    assert "row 2, rlnImageName" in listed["particles.star"]["error"] and "shape" not in listed["particles.star"]


# -- caching -----------------------------------------------------------------------------------------------------

def test_the_etag_changes_when_the_star_or_a_stack_it_names_changes(project, make_client):
    api = make_client(data_root=project)
    params = {"file": "particles.star", "section": 1, "contrast": "minmax"}
    answers = {endpoint: api.get(f"/v1/view/{endpoint}", params={**params, **extra})
               for endpoint, extra in [("image", {}), ("value", {"x": 3, "y": 2}), ("row", {}), ("info", {})]}
    for endpoint, answer in answers.items():
        again = api.get(f"/v1/view/{endpoint}", params={**params, **({"x": 3, "y": 2} if endpoint == "value" else {})},
                        headers={"If-None-Match": answer.headers["etag"]})
        assert again.status_code == 304, endpoint
    # section 1 is row 1 of mic0.mrcs: that stack rewritten in place, its size and modification time put back
    stack = project / "Particles" / "Movies" / "mic0.mrcs"
    before = stack.stat()
    with mrcfile.open(stack, "r+") as m:
        m.data[0] = -m.data[0]
    os.utime(stack, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert stack.stat().st_size == before.st_size
    image = api.get("/v1/view/image", params=params, headers={"If-None-Match": answers["image"].headers["etag"]})
    assert image.status_code == 200 and image.headers["etag"] != answers["image"].headers["etag"]
    np.testing.assert_array_equal(decoded_png(image), minmax_picture(oracle_images(project / "particles.star",
                                                                                    project)[1]))
    value = api.get("/v1/view/value", params={**params, "x": 3, "y": 2},
                    headers={"If-None-Match": answers["value"].headers["etag"]})
    assert value.status_code == 200 and value.json()["value"] == -answers["value"].json()["value"]
    # the STAR itself rewritten: a new row answer
    row_tag = api.get("/v1/view/row", params=params).headers["etag"]
    star_path = project / "particles.star"
    star_path.write_text(star_path.read_text().replace("Movies/mic0.mrc ", "Movies/other.mrc", 1))
    fresh = api.get("/v1/view/row", params=params, headers={"If-None-Match": row_tag})
    assert fresh.status_code == 200 and fresh.headers["etag"] != row_tag


def test_an_unchanged_particle_file_keeps_its_identity_and_a_new_stack_changes_it(project):
    """viewer.identity of a particle file: the same while nothing changes, another once a stack it names is replaced
    by another file (a new inode: mv), though the STAR's bytes are the same."""
    star_path = project / "particles.star"

    def identity() -> str:
        fd = os.open(star_path, os.O_RDONLY)
        try:
            return viewer.identity(fd, os.fstat(fd), star_path, project_dir=str(project))
        finally:
            os.close(fd)

    first = identity()
    assert identity() == first
    stack = project / "Particles" / "Movies" / "mic1.mrcs"
    shutil.copy2(stack, stack.with_suffix(".new"))
    os.replace(stack.with_suffix(".new"), stack)
    assert identity() != first


# -- in a browser ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp("viewer-particles")
    relion_project(base / "root")
    proc, url = start_server(base / "root", base / "server.log", {"NOA_API_KEY": KEY})
    yield url, base / "root"
    stop_server(proc)


@pytest.mark.skipif(chromium() is None, reason="chromium not found (apt-get install chromium)")
def test_hovering_a_particle_shows_its_rows_micrograph_and_defocus(live, tmp_path):
    url, root = live
    particles = starfile.read(root / "particles.star")["particles"]
    images = oracle_images(root / "particles.star", root)
    with Browser.start(tmp_path / "profile") as browser:
        page = browser.new_page()
        open_viewer(page, url)
        open_file(page, "particles.star")
        renders = int(page.evaluate("document.body.dataset.renders"))
        page.evaluate("(() => { const m = document.getElementById('montage'); m.checked = false; "
                      "m.dispatchEvent(new Event('change')); })()")  # one particle at a time
        wait_render(page, renders)
        for section in (0, 5):
            renders = int(page.evaluate("document.body.dataset.renders"))
            page.evaluate(f"(() => {{ const s = document.getElementById('section'); s.value = '{section}'; "
                          "s.dispatchEvent(new Event('input')); })()")
            wait_render(page, renders)
            _, (zoom, ox, oy) = canvas_image(page)
            left, top = page.evaluate("(() => { const r = document.getElementById('image').getBoundingClientRect(); "
                                      "return [r.left, r.top]; })()")
            assert ox > 4 and oy > 4  # a corner of the canvas off the particle: nothing under the cursor
            page.mouse("mouseMoved", left + 2, top + 2, button="none")
            page.wait("document.getElementById('readout').textContent === '' && document.getElementById('row').hidden")
            m = 2 ** zoom
            page.mouse("mouseMoved", math.ceil(left + ox + 7 * m) + 0.2, math.ceil(top + oy + 12 * m) + 0.2,
                       button="none")
            readout = page.wait("(t => t.startsWith('x 7, y 12: ') && t)(document.getElementById('readout')"
                                ".textContent)")
            assert float(readout.split(": ")[1]) == pytest.approx(float(images[section][12, 7]), rel=1e-6)
            shown = page.wait(f"(() => {{ const t = document.getElementById('row'); "
                              f"return !t.hidden && t.caption.textContent.includes('row {section + 1} ') && "
                              "Object.fromEntries([...t.tBodies[0].rows].map(r => [r.cells[0].textContent, "
                              "r.cells[1].textContent])); })()")
            assert shown["rlnMicrographName"] == particles["rlnMicrographName"][section]
            assert float(shown["rlnDefocusU"]) == pytest.approx(particles["rlnDefocusU"][section])
            assert int(shown["rlnClassNumber"]) == particles["rlnClassNumber"][section]
            assert shown["rlnImagePixelSize"] == "1.500000"  # its optics group's
        page.close()


def montage_requests(page) -> list[str]:
    return [r["url"] for r in page.requests() if urlsplit(r["url"]).path == "/v1/view/montage"]


def shown_row(page, row: int) -> dict:
    """The row table once it shows row ``row`` (from 1): its cells by column."""
    return page.wait(f"(() => {{ const t = document.getElementById('row'); "
                     f"return !t.hidden && t.caption.textContent.includes('row {row} ') && "
                     "Object.fromEntries([...t.tBodies[0].rows].map(r => [r.cells[0].textContent, "
                     "r.cells[1].textContent])); })()")


@pytest.mark.skipif(chromium() is None, reason="chromium not found (apt-get install chromium)")
def test_a_particle_file_opens_as_a_montage_paged_with_each_panels_row_under_the_cursor(live, tmp_path):
    url, root = live
    particles = starfile.read(root / "particles.star")["particles"]
    with Browser.start(tmp_path / "profile") as browser:
        page = browser.new_page()
        open_viewer(page, url)
        open_file(page, "particles.star")
        assert page.evaluate("document.getElementById('image').dataset.view").startswith("montage ")
        renders = int(page.evaluate("document.body.dataset.renders"))
        page.evaluate("(() => { const c = document.getElementById('montage-count'); c.value = '4'; "
                      "c.dispatchEvent(new Event('change')); })()")
        wait_render(page, renders)
        left, top = page.evaluate("(() => { const r = document.getElementById('image').getBoundingClientRect(); "
                                  "return [r.left, r.top]; })()")
        for first in (0, 4):  # the first page, then the next: rows first..first + 3
            request = montage_requests(page)[-1]
            assert parse_qs(urlsplit(request).query)["first"] == [str(first)]
            assert parse_qs(urlsplit(request).query)["count"] == ["4"]
            answer = httpx.get(request, headers={"X-API-Key": KEY}, timeout=30)
            layout = {k: int(v) for k, v in (f.split("=") for f in answer.headers["montage-layout"].split(", "))}
            assert (layout["first"], layout["count"]) == (first, 4)
            expected = np.asarray(Image.open(io.BytesIO(answer.content)))
            pixels, drawn = canvas_image_any(page)
            kind, scale, ox, oy = drawn.split()
            scale, ox, oy = int(scale), int(ox), int(oy)
            assert kind == "montage" and scale >= 1  # whole pixels: the canvas shows the picture's own
            shown = pixels[oy:oy + expected.shape[0] * scale, ox:ox + expected.shape[1] * scale, 0]
            np.testing.assert_array_equal(shown, expected.repeat(scale, axis=0).repeat(scale, axis=1))
            for k in (0, 1, 3):
                row, column = divmod(k, layout["columns"])
                x = left + ox + (column * (layout["width"] + layout["gap"]) + layout["width"] / 2) * scale
                y = top + oy + (row * (layout["height"] + layout["gap"]) + layout["height"] / 2) * scale
                page.mouse("mouseMoved", x, y, button="none")
                page.wait(f"document.getElementById('readout').textContent === 'section {first + k}'")
                cells = shown_row(page, first + k + 1)
                assert cells["rlnMicrographName"] == particles["rlnMicrographName"][first + k]
                assert float(cells["rlnDefocusU"]) == pytest.approx(particles["rlnDefocusU"][first + k])
                assert int(cells["rlnClassNumber"]) == particles["rlnClassNumber"][first + k]
            if first == 0:
                renders = int(page.evaluate("document.body.dataset.renders"))
                page.evaluate("document.getElementById('montage-next').click()")
                wait_render(page, renders)
                assert page.evaluate("document.getElementById('montage-page').textContent") == \
                    "sections 4 to 7 of 11"
        # a click on panel 2 of this page opens section 6 alone
        renders = int(page.evaluate("document.body.dataset.renders"))
        x = left + ox + (2 % layout["columns"] * (layout["width"] + layout["gap"]) + 1) * scale
        y = top + oy + (2 // layout["columns"] * (layout["height"] + layout["gap"]) + 1) * scale
        page.mouse("mousePressed", x, y, clickCount=1)
        page.mouse("mouseReleased", x, y, clickCount=1)
        wait_render(page, renders)
        assert page.evaluate("[document.getElementById('section').value, document.getElementById('montage').checked, "
                             "document.getElementById('image').dataset.view.startsWith('montage')]") == \
            ["6", False, False]
        page.close()
