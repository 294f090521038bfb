"""noa extract through its doors (issue 43 items 4 and 7): the CLI writes the stacks and the STAR together, bad
input (coordinates of a micrograph not given, outside the image, NaN, a box larger than the micrograph, pixel
sizes differing within an optics group) is one line naming the file and row with exit 2 and nothing written,
--edge drop drops with a notice, --one-stack, --out-dir; noa reads the data set back; HTTP paths mode extracts
under the data root."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import starfile
import tifffile

from helpers import assert_user_error, load, noa, write_mrc
from noa_core import operations
from noa_core.fourier.resampling import fourier_resize
from noa_core.images import extraction
from noa_core.operations.implementations import extract as extract_impl
from noa_core.run import cluster, execute
from tests.particles.tables import micrographs_star

HEIGHT, WIDTH = 40, 50


@pytest.fixture()
def mics(tmp_path) -> dict[str, np.ndarray]:
    """Two micrographs in tmp_path/Mics with a coordinate file each (a_pick.star, b_pick.star)."""
    rng = np.random.default_rng(5)
    (tmp_path / "Mics").mkdir()
    data = {}
    for name, picks in (("a", [(10, 12), (25.7, 20.2), (40, 30)]), ("b", [(20, 20), (5, 35)])):
        data[name] = write_mrc(tmp_path / f"Mics/{name}.mrc", rng.normal(size=(HEIGHT, WIDTH)).astype(np.float32),
                               voxel_size=1.25)
        (tmp_path / f"Mics/{name}_pick.star").write_text(
            "data_\nloop_\n_rlnCoordinateX\n_rlnCoordinateY\n" + "".join(f"{x} {y}\n" for x, y in picks))
    return data


def box_of(data: np.ndarray, x: float, y: float, box: int) -> np.ndarray:
    """NumPy's box of ``box`` pixels at the truncated (x, y), the centre at N//2 (inside the micrograph)."""
    x, y = int(x), int(y)
    return data[y - box // 2:y - box // 2 + box, x - box // 2:x - box // 2 + box]


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_cli_writes_stacks_and_a_star_that_noa_reads_back(tmp_path, mics):
    done = noa("extract", "Mics/a.mrc", "Mics/b.mrc", "--coord-suffix", "_pick.star", "--box", 8, "-o", "parts.star",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = starfile.read(tmp_path / "parts.star")
    assert table["particles"]["rlnImageName"].tolist() == [
        "000001@Particles/Mics/a.mrcs", "000002@Particles/Mics/a.mrcs", "000003@Particles/Mics/a.mrcs",
        "000001@Particles/Mics/b.mrcs", "000002@Particles/Mics/b.mrcs"]
    assert table["optics"]["rlnImagePixelSize"].tolist() == [1.25] and table["optics"]["rlnImageSize"].tolist() == [8]
    np.testing.assert_array_equal(load(tmp_path / "Particles/Mics/a.mrcs")[1], box_of(mics["a"], 25.7, 20.2, 8))
    stats = noa("stats", "parts.star", "--json", cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    images = np.concatenate([load(tmp_path / "Particles/Mics/a.mrcs"), load(tmp_path / "Particles/Mics/b.mrcs")])
    assert f"{images.max():.4g}"[:5] in stats.stdout


def test_one_stack_and_out_dir(tmp_path, mics):
    done = noa("extract", "Mics/a.mrc", "Mics/b.mrc", "--coord-suffix", "_pick.star", "--box", 8, "--one-stack",
               "-o", "all.star", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert starfile.read(tmp_path / "all.star")["particles"]["rlnImageName"].tolist()[3:] == ["000004@all.mrcs",
                                                                                               "000005@all.mrcs"]
    assert load(tmp_path / "all.mrcs").shape == (5, 8, 8)
    done = noa("extract", "Mics/a.mrc", "Mics/b.mrc", "--coord-suffix", "_pick.star", "--box", 8, "--out-dir",
               "each", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert {"a.star", "b.star", "Particles/Mics/a.mrcs", "Particles/Mics/b.mrcs"} <= set(listing(tmp_path / "each"))


def test_edge_drop_leaves_out_particles_beyond_the_micrograph_with_a_notice(tmp_path, mics):
    (tmp_path / "Mics/a_edge.star").write_text("data_\nloop_\n_rlnCoordinateX\n_rlnCoordinateY\n1 1\n20 20\n"
                                               "60 10\n49 39\n")
    done = noa("extract", "Mics/a.mrc", "--coords", "Mics/a_edge.star", "--box", 8, "--edge", "drop", "-o",
               "p.star", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3 particle(s) of Mics/a.mrc reach beyond it: dropped" in done.stderr
    assert starfile.read(tmp_path / "p.star")["particles"]["rlnCoordinateX"].tolist() == [20]
    np.testing.assert_array_equal(load(tmp_path / "Particles/Mics/a.mrcs").reshape(8, 8), box_of(mics["a"], 20, 20, 8))


@pytest.mark.parametrize(("lines", "options", "fragments"), [
    ("10 10\n60 10\n", (), ("a_bad.star: row 2", "outside Mics/a.mrc")),
    ("10 10\nnan 5\n", (), ("a_bad.star: row 2", "not a number")),
    ("10 10\n", ("--box", "64"), ("--box", "larger than the micrograph Mics/a.mrc")),
])
def test_bad_coordinates_are_one_line_and_nothing_is_written(tmp_path, mics, lines, options, fragments):
    (tmp_path / "Mics/a_bad.star").write_text("data_\nloop_\n_rlnCoordinateX\n_rlnCoordinateY\n" + lines)
    before = listing(tmp_path)
    done = noa("extract", "Mics/a.mrc", "--coords", "Mics/a_bad.star", "--box", 8, *options, "-o", "p.star",
               cwd=tmp_path)
    assert_user_error(done, *fragments)
    assert listing(tmp_path) == before


def test_coordinates_of_a_micrograph_not_given_are_refused(tmp_path, mics):
    (tmp_path / "data.star").write_text("data_particles\nloop_\n_rlnMicrographName\n_rlnCoordinateX\n"
                                        "_rlnCoordinateY\nMics/a.mrc 10 10\nMics/c.mrc 5 5\n")
    before = listing(tmp_path)
    assert_user_error(noa("extract", "Mics/a.mrc", "--coords", "data.star", "--box", 8, "-o", "p.star", cwd=tmp_path),
                      "data.star: row 2", "micrograph Mics/c.mrc, which is not among the micrographs given")
    assert listing(tmp_path) == before


def test_micrographs_of_different_pixel_sizes_in_one_group_are_refused(tmp_path, mics):
    write_mrc(tmp_path / "Mics/b.mrc", mics["b"], voxel_size=2.0)
    before = listing(tmp_path)
    assert_user_error(noa("extract", "Mics/a.mrc", "Mics/b.mrc", "--coord-suffix", "_pick.star", "--box", 8, "-o",
                          "p.star", cwd=tmp_path), "Mics/b.mrc: pixel size 2 Å", "share one pixel size")
    assert listing(tmp_path) == before


def test_paths_mode_extracts_under_the_data_root(tmp_path, mics, make_client):
    client = make_client(data_root=tmp_path)
    (tmp_path / "out").mkdir()
    response = client.post("/v1/paths/extract", json={"srcs": ["Mics/a.mrc"], "dst": "out/parts.star",
                                                      "coords": "Mics/a_pick.star", "box": 8})
    assert response.status_code == 201, response.text
    assert response.json()["output"] == "out/parts.star"
    table = starfile.read(tmp_path / "out/parts.star")
    assert table["particles"]["rlnImageName"].tolist()[0] == "000001@out/Particles/Mics/a.mrcs"
    assert table["particles"]["rlnMicrographName"].tolist() == ["Mics/a.mrc"] * 3
    np.testing.assert_array_equal(load(tmp_path / "out/Particles/Mics/a.mrcs")[0], box_of(mics["a"], 10, 12, 8))
    refused = client.post("/v1/paths/extract", json={"srcs": ["Mics/a.mrc"], "dst": "out/q.star",
                                                     "coords": "../outside.star", "box": 8})
    assert refused.status_code in (400, 403) and not (tmp_path / "out/q.star").exists()


def test_more_sizes_from_one_read_through_http_paths_and_one_stack(tmp_path, mics, make_client):
    """--also-scale over HTTP paths mode: OUT_<size>px.star beside OUT naming stacks in Particles_<size>px/, each box
    the Fourier-cropped box of OUT's (noa's own fourier_resize of the same box: RELION's own runs are the oracle in
    tests/images/test_extraction.py); --one-stack names OUT_<size>px.mrcs."""
    client = make_client(data_root=tmp_path)
    (tmp_path / "out").mkdir()
    response = client.post("/v1/paths/extract", json={"srcs": ["Mics/a.mrc"], "dst": "out/parts.star",
                                                      "coords": "Mics/a_pick.star", "box": 8, "also_scale": [4]})
    assert response.status_code == 201, response.text
    assert any("at 4 pixels: out/parts_4px.star" in notice for notice in response.json()["notices"])
    small = starfile.read(tmp_path / "out/parts_4px.star")
    assert small["particles"]["rlnImageName"].tolist()[0] == "000001@out/Particles_4px/Mics/a.mrcs"
    assert small["optics"]["rlnImageSize"].tolist() == [4]
    assert small["optics"]["rlnImagePixelSize"].tolist() == [2.5]
    full = load(tmp_path / "out/Particles/Mics/a.mrcs")
    np.testing.assert_array_equal(full[0], box_of(mics["a"], 10, 12, 8))
    expected = fourier_resize(full.astype(np.float64)[:, None], (4, 4), like="relion").numpy()[:, 0]
    np.testing.assert_allclose(load(tmp_path / "out/Particles_4px/Mics/a.mrcs"), expected, rtol=1e-4, atol=1e-5)
    done = noa("extract", "Mics/a.mrc", "Mics/b.mrc", "--coord-suffix", "_pick.star", "--box", 8, "--one-stack",
               "--also-scale", "6", "-o", "one.star", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert starfile.read(tmp_path / "one_6px.star")["particles"]["rlnImageName"].tolist()[-1] == "000005@one_6px.mrcs"
    assert load(tmp_path / "one_6px.mrcs").shape == (5, 6, 6)


@pytest.mark.parametrize(("options", "fragments"), [
    (["--also-scale", "8"], ["--also-scale", "8 pixels is asked for twice"]),
    (["--scale", "6", "--also-scale", "4,6"], ["--also-scale", "6 pixels is asked for twice"]),
    (["--also-scale", "1"], ["--also-scale"]),
    (["--also-scale", "4,4"], ["--also-scale", "4 pixels is asked for twice"]),
])
def test_more_sizes_are_checked_before_anything_is_written(tmp_path, mics, options, fragments):
    before = listing(tmp_path)
    assert_user_error(noa("extract", "Mics/a.mrc", "--coords", "Mics/a_pick.star", "--box", 8, *options, "-o",
                          "p.star", cwd=tmp_path), *fragments)
    assert listing(tmp_path) == before


def test_an_existing_output_of_another_size_is_kept_without_force(tmp_path, mics):
    (tmp_path / "p_4px.star").write_text("mine")
    before = listing(tmp_path)
    assert_user_error(noa("extract", "Mics/a.mrc", "--coords", "Mics/a_pick.star", "--box", 8, "--also-scale", 4,
                          "-o", "p.star", cwd=tmp_path), "p_4px.star")
    assert listing(tmp_path) == before and (tmp_path / "p_4px.star").read_text() == "mine"


@pytest.mark.parametrize("outputs", [["-o", "parts.star"], ["--out-dir", "each"]])
def test_a_local_dask_cluster_writes_the_bytes_the_cli_writes(tmp_path, mics, outputs):
    """One output (a single task: a data set writes its own files, no tiles to share) and one per micrograph."""
    pytest.importorskip("distributed")
    here, there = tmp_path / "here", tmp_path / "there"
    for folder in (here, there):
        shutil.copytree(tmp_path / "Mics", folder / "Mics")
    command = ["extract", "Mics/a.mrc", "Mics/b.mrc", "--coord-suffix", "_pick.star", "--box", 8, *outputs]
    assert (done := noa(*command, cwd=here)).returncode == 0, done.stderr
    assert (done := noa(*command, "--scheduler", "local", "--workers", 1, cwd=there)).returncode == 0, done.stderr
    written = sorted(p.relative_to(here) for p in here.rglob("*.mrcs"))
    assert written and written == sorted(p.relative_to(there) for p in there.rglob("*.mrcs"))
    for path in written:
        np.testing.assert_array_equal(load(there / path), load(here / path))
    assert [p.name for p in sorted(here.rglob("*.star"))] == [p.name for p in sorted(there.rglob("*.star"))]


def header_statistics(path: Path) -> tuple[float, float, float, float]:
    with mrcfile.open(path) as f:
        return float(f.header.dmin), float(f.header.dmax), float(f.header.dmean), float(f.header.rms)


def assert_numpys_statistics(path: Path) -> None:
    """The MRC header's statistics are NumPy's of the stack (float32 as stored)."""
    values = load(path).astype(np.float64)
    dmin, dmax, dmean, rms = header_statistics(path)
    assert (dmin, dmax) == (values.min(), values.max())
    assert dmean == pytest.approx(values.mean(), abs=1e-6) and rms == pytest.approx(values.std(), rel=1e-6)


def test_micrographs_extracted_in_parallel_give_what_one_at_a_time_gives(tmp_path, mics, monkeypatch):
    """Several micrographs at once (here 2 workers, one box a chunk): each box NumPy's slice of its micrograph in
    its section, header statistics NumPy's, progress counted in micrograph order, the same stacks as one worker,
    into one shared stack (--one-stack) or one stack per micrograph."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(extract_impl, "CHUNK_BYTES", 1)
    picks = {"a": [(10, 12), (25.7, 20.2), (40, 30)], "b": [(20, 20), (5, 35)]}
    expected = {name: np.stack([box_of(mics[name], x, y, 8) for x, y in xy]) for name, xy in picks.items()}
    for cores in (1, 4):
        monkeypatch.setattr(extract_impl.limits, "available_cores", lambda cores=cores: cores)
        (tmp_path / str(cores)).mkdir()
        for one_stack in (False, True):
            done: list[tuple[int, int]] = []
            output = f"{cores}/{'one' if one_stack else 'each'}.star"
            execute(operations.get("extract"), ["Mics/a.mrc", "Mics/b.mrc"], output,
                    {"coord_suffix": "_pick.star", "box": 8, "one_stack": one_stack},
                    progress=lambda i, n, done=done: done.append((i, n)))
            assert done == [(1, 2), (2, 2)]
            stacks = [f"{cores}/one.mrcs"] if one_stack else [f"{cores}/Particles/Mics/{n}.mrcs" for n in "ab"]
            for stack in stacks:
                assert_numpys_statistics(tmp_path / stack)
            got = np.concatenate([load(tmp_path / stack).reshape(-1, 8, 8) for stack in stacks])
            np.testing.assert_array_equal(got, np.concatenate([expected["a"], expected["b"]]))
    for stack in ("one.mrcs", "Particles/Mics/a.mrcs", "Particles/Mics/b.mrcs"):
        np.testing.assert_array_equal(load(tmp_path / "1" / stack), load(tmp_path / "4" / stack))
        assert header_statistics(tmp_path / "1" / stack) == header_statistics(tmp_path / "4" / stack)


@pytest.mark.parametrize("where", ["progress", "worker"])
def test_a_cancel_or_a_failure_while_micrographs_are_extracted_leaves_nothing(tmp_path, mics, monkeypatch, where):
    """A progress callback that raises (a job cancelled) or a micrograph that fails in its worker stops the
    extraction: the other workers finish, every temporary file and folder made is removed, the error is raised."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(extract_impl.limits, "available_cores", lambda: 4)
    before = listing(tmp_path)

    def cancelled(done, total):
        raise KeyboardInterrupt

    def failing(micrograph, positions, *args):
        raise KeyboardInterrupt

    if where == "worker":
        monkeypatch.setattr(extraction, "boxes", failing)
    with pytest.raises(KeyboardInterrupt):
        execute(operations.get("extract"), ["Mics/a.mrc", "Mics/b.mrc"], "parts.star",
                {"coord_suffix": "_pick.star", "box": 8, "also_scale": (4,)},
                progress=cancelled if where == "progress" else None)
    assert listing(tmp_path) == before


def test_a_resumed_extraction_keeps_what_a_stopped_one_finished(tmp_path, mics, monkeypatch):
    """Issue 43 item 6: extracting with resume, each micrograph's stacks (of every size) are placed once written, so
    a run stopped after the first micrograph leaves its stacks (no STAR, no temporary file); a rerun extracts only
    the other micrograph and writes what one uninterrupted run writes."""
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp_path / "Mics", fresh / "Mics")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(extract_impl.limits, "available_cores", lambda: 1)  # one micrograph after the other
    values = {"coord_suffix": "_pick.star", "box": 8, "also_scale": (4,)}
    extract = operations.get("extract")

    def stop_after_one(done, total):
        if done == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute(extract, ["Mics/a.mrc", "Mics/b.mrc"], "parts.star", values, progress=stop_after_one, resume=True)
    left = listing(tmp_path)
    assert "Particles/Mics/a.mrcs" in left and "Particles_4px/Mics/a.mrcs" in left
    assert not any(name.endswith((".star", ".noa-tmp")) and name.startswith(("parts", ".")) for name in left)
    assert "Particles/Mics/b.mrcs" not in left
    boxed = []
    boxes = extraction.boxes
    monkeypatch.setattr(extraction, "boxes", lambda micrograph, positions, *args: boxed.append(len(positions))
                        or boxes(micrograph, positions, *args))
    result = execute(extract, ["Mics/a.mrc", "Mics/b.mrc"], "parts.star", values, resume=True)
    assert boxed == [2]  # b's two particles only
    assert any("1 micrograph(s) extracted before" in notice for notice in result["notices"])
    monkeypatch.chdir(fresh)
    execute(extract, ["Mics/a.mrc", "Mics/b.mrc"], "parts.star", values)
    for name in ("Particles/Mics/a.mrcs", "Particles/Mics/b.mrcs", "Particles_4px/Mics/a.mrcs",
                 "Particles_4px/Mics/b.mrcs"):
        np.testing.assert_array_equal(load(tmp_path / name), load(fresh / name))
        assert header_statistics(tmp_path / name) == header_statistics(fresh / name)
    for name in ("parts.star", "parts_4px.star"):
        assert (tmp_path / name).read_bytes() == (fresh / name).read_bytes()


def test_a_resumed_extraction_refuses_a_stack_it_did_not_write_and_one_stack(tmp_path, mics):
    (tmp_path / "Particles/Mics").mkdir(parents=True)
    write_mrc(tmp_path / "Particles/Mics/a.mrcs", np.zeros((3, 6, 6), np.float32))  # box 6, not 8
    before = listing(tmp_path)
    command = ("extract", "Mics/a.mrc", "Mics/b.mrc", "--coord-suffix", "_pick.star", "--box", 8, "--resume")
    assert_user_error(noa(*command, "-o", "p.star", cwd=tmp_path), "Particles/Mics/a.mrcs: there already",
                      "3 boxes of 8 x 8")
    assert_user_error(noa(*command, "--one-stack", "-o", "p.star", cwd=tmp_path), "--resume", "--one-stack")
    assert listing(tmp_path) == before
    (tmp_path / "Particles/Mics/a.mrcs").unlink()
    done = noa(*command, "-o", "p.star", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(load(tmp_path / "Particles/Mics/b.mrcs")[0], box_of(mics["b"], 20, 20, 8))


def test_boxes_are_computed_a_bounded_chunk_at_a_time(tmp_path, monkeypatch):
    """However large the boxes, a chunk holds at most CHUNK_BYTES of float64 boxes (the memory of --scale and
    --norm bounded whatever the box size and the count of particles); the boxes are NumPy's slices, in order."""
    monkeypatch.chdir(tmp_path)
    data = write_mrc(tmp_path / "mic.mrc", np.random.default_rng(2).normal(size=(1100, 1100)).astype(np.float32))
    (tmp_path / "picks.txt").write_text("540 550\n560 560.5\n550 545\n")
    sizes: list[int] = []
    boxes = extraction.boxes
    monkeypatch.setattr(extraction, "boxes", lambda micrograph, positions, *args: sizes.append(len(positions))
                        or boxes(micrograph, positions, *args))
    execute(operations.get("extract"), ["mic.mrc"], "parts.star", {"coords": "picks.txt", "box": 1024,
                                                                    "invert_contrast": True})
    assert sum(sizes) == 3 and max(sizes) * 1024 * 1024 * 8 <= extract_impl.CHUNK_BYTES
    expected = np.stack([-box_of(data, x, y, 1024) for x, y in ((540, 550), (560, 560.5), (550, 545))])
    np.testing.assert_array_equal(load(tmp_path / "Particles/mic.mrcs"), expected)


def test_integer_micrographs_are_inverted_as_floats(tmp_path, mics):
    """A uint16 micrograph (counts) inverted: the negated values, not their wrap-around modulo 65536."""
    counts = np.random.default_rng(3).integers(0, 4000, size=(HEIGHT, WIDTH)).astype(np.uint16)
    write_mrc(tmp_path / "Mics/a.mrc", counts)
    done = noa("extract", "Mics/a.mrc", "--coords", "Mics/a_pick.star", "--box", 8, "--invert-contrast", "-o",
               "parts.star", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(load(tmp_path / "Particles/Mics/a.mrcs")[1],
                                  -box_of(counts.astype(np.float32), 25.7, 20.2, 8))


def test_paths_mode_finds_each_micrographs_coordinates_beneath_the_data_root(tmp_path, mics, make_client):
    """--coord-suffix over HTTP: each micrograph's coordinate file is found beside it under the data root (whatever
    the service's folder), and one that is a link out of the root is refused, not read."""
    root = tmp_path / "root"
    shutil.copytree(tmp_path / "Mics", root / "Mics")
    client = make_client(data_root=root)
    response = client.post("/v1/paths/extract", json={"srcs": ["Mics/a.mrc", "Mics/b.mrc"], "dst": "parts.star",
                                                      "coord_suffix": "_pick.star", "box": 8})
    assert response.status_code == 201, response.text
    assert len(starfile.read(root / "parts.star")["particles"]) == 5
    (tmp_path / "outside.txt").write_text("20 20\n")
    (root / "Mics/b_pick.star").unlink()
    (root / "Mics/b_pick.star").symlink_to(tmp_path / "outside.txt")
    refused = client.post("/v1/paths/extract", json={"srcs": ["Mics/a.mrc", "Mics/b.mrc"], "dst": "again.star",
                                                     "coord_suffix": "_pick.star", "box": 8})
    assert refused.status_code == 403, refused.text
    assert "Mics/b_pick.star" in refused.json()["detail"] and not (root / "again.star").exists()


def test_paths_mode_resumes_what_a_stopped_extraction_finished(tmp_path, mics, monkeypatch, make_client):
    """``resume`` over HTTP (a job resumed carries it): the stacks a stopped run placed are kept, the rest extracted;
    only data-set operations take it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(extract_impl.limits, "available_cores", lambda: 1)

    def stop_after_one(done, total):
        if done == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute(operations.get("extract"), ["Mics/a.mrc", "Mics/b.mrc"], "parts.star",
                {"coord_suffix": "_pick.star", "box": 8}, progress=stop_after_one, resume=True)
    assert (tmp_path / "Particles/Mics/a.mrcs").is_file() and not (tmp_path / "parts.star").exists()
    client = make_client(data_root=tmp_path)
    response = client.post("/v1/paths/extract", json={"srcs": ["Mics/a.mrc", "Mics/b.mrc"], "dst": "parts.star",
                                                      "coord_suffix": "_pick.star", "box": 8, "resume": True})
    assert response.status_code == 201, response.text
    assert any("1 micrograph(s) extracted before" in notice and "resume" in notice
               for notice in response.json()["notices"])
    assert len(starfile.read(tmp_path / "parts.star")["particles"]) == 5
    np.testing.assert_array_equal(load(tmp_path / "Particles/Mics/b.mrcs")[1], box_of(mics["b"], 5, 35, 8))
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert "resume" in schemas["ExtractRequest"]["properties"]
    assert "resume" not in schemas["CopyRequest"]["properties"]
    refused = client.post("/v1/paths/copy", json={"src": "Mics/a.mrc", "dst": "c.mrc", "resume": True})
    assert refused.status_code in (400, 422) and not (tmp_path / "c.mrc").exists()


AUTOPICK = ("\n# version 30001\n\ndata_coordinate_files\n\nloop_\n_rlnMicrographName #1\n_rlnMicrographCoordinates #2\n"
            "{rows}\n")


def test_relions_list_of_coordinate_files_gives_what_the_suffix_gives(tmp_path, mics):
    """RELION 4's autopick.star (data_coordinate_files: rlnMicrographName, rlnMicrographCoordinates) names each
    micrograph's file: the same stacks as finding them by suffix (RELION 3.1.3's way, its own oracle in
    tests/images/test_extraction.py); a micrograph it does not list is skipped with a notice; a listed file that is
    not there is one line naming the row."""
    rows = "Mics/a.mrc Mics/a_pick.star\nMics/b.mrc Mics/b_pick.star"
    (tmp_path / "autopick.star").write_text(AUTOPICK.format(rows=rows))
    (tmp_path / "l").mkdir()
    (tmp_path / "s").mkdir()
    listed = noa("extract", "Mics/a.mrc", "Mics/b.mrc", "--coords", "autopick.star", "--box", 8, "-o", "l/p.star",
                 cwd=tmp_path)
    by_suffix = noa("extract", "Mics/a.mrc", "Mics/b.mrc", "--coord-suffix", "_pick.star", "--box", 8, "-o",
                    "s/p.star", cwd=tmp_path)
    assert listed.returncode == 0 and by_suffix.returncode == 0, (listed.stderr, by_suffix.stderr)
    for name in ("a", "b"):
        np.testing.assert_array_equal(load(tmp_path / f"l/Particles/Mics/{name}.mrcs"),
                                      load(tmp_path / f"s/Particles/Mics/{name}.mrcs"))
    (tmp_path / "only_a.star").write_text(AUTOPICK.format(rows="Mics/a.mrc Mics/a_pick.star"))
    done = noa("extract", "Mics/a.mrc", "Mics/b.mrc", "--coords", "only_a.star", "--box", 8, "-o", "a.star",
               cwd=tmp_path)
    assert done.returncode == 0 and "Mics/b.mrc: not in only_a.star; skipped" in done.stderr
    assert len(starfile.read(tmp_path / "a.star")["particles"]) == 3
    (tmp_path / "gone.star").write_text(AUTOPICK.format(rows="Mics/a.mrc Mics/gone.star"))
    before = listing(tmp_path)
    assert_user_error(noa("extract", "Mics/a.mrc", "--coords", "gone.star", "--box", 8, "-o", "g.star", cwd=tmp_path),
                      "gone.star: data_coordinate_files, row 1", "Mics/gone.star: no such file")
    assert listing(tmp_path) == before


# -- on a Dask cluster: a task per share of the micrographs (issue 43 item 5) --------------------------------------

DASK_VALUES = {"coord_suffix": "_pick.star", "box": 8, "also_scale": (4,)}


@pytest.fixture(scope="module")
def dask_client():
    """A LocalCluster of 2 worker processes, in a folder of their own (not the tests')."""
    pytest.importorskip("distributed")
    with cluster.connect("local", workers=2) as client:
        yield client


def four_micrographs(folder: Path, mics: dict[str, np.ndarray]) -> None:
    """``mics`` (a, b) and c, d in folder/Mics, with their coordinates, named by folder/mics.star."""
    rng = np.random.default_rng(7)
    for name in ("c", "d"):
        write_mrc(folder / f"Mics/{name}.mrc", rng.normal(size=(HEIGHT, WIDTH)).astype(np.float32), voxel_size=1.25)
        (folder / f"Mics/{name}_pick.star").write_text("data_\nloop_\n_rlnCoordinateX\n_rlnCoordinateY\n12 14\n30 25\n")
    (folder / "mics.star").write_text(micrographs_star([f"Mics/{name}.mrc" for name in "abcd"], 1.25))


def extract_task():
    return operations.get("extract").task(DASK_VALUES)


def dask_keys(stream) -> set[str]:
    return {str(event["key"]) for event in stream.data if str(event["key"]).startswith("noa-extract-")}


def test_a_dask_cluster_extracts_the_micrographs_in_tasks_as_this_process_does(tmp_path, mics, monkeypatch,
                                                                                dask_client):
    """Several tasks, each a share of the micrographs a micrographs STAR names (a worker opens them again by name),
    progress counted per micrograph: the stacks are this process's to the byte, the STARs the same; a cancelled run
    (progress raising) leaves nothing."""
    from distributed import get_task_stream

    four_micrographs(tmp_path, mics)
    here, there = tmp_path / "here", tmp_path / "there"
    for folder in (here, there):
        shutil.copytree(tmp_path / "Mics", folder / "Mics")
        shutil.copy(tmp_path / "mics.star", folder)
    monkeypatch.chdir(here)
    execute(operations.get("extract"), ["mics.star"], "p.star", DASK_VALUES)
    monkeypatch.chdir(there)
    before = listing(there)

    def cancelled(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cluster.write_split(extract_task(), "mics.star", "p.star", dask_client, progress=cancelled)
    assert listing(there) == before
    counted: list[tuple[int, int]] = []
    with get_task_stream(dask_client) as stream:
        notices = cluster.write_split(extract_task(), "mics.star", "p.star", dask_client,
                                      progress=lambda done, total: counted.append((done, total)))
    assert len(dask_keys(stream)) > 1
    assert counted == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert any("9 particles from 4 micrograph(s)" in notice for notice in notices)
    stacks = sorted(p.relative_to(here) for p in here.rglob("*.mrcs"))
    assert len(stacks) == 8 and stacks == sorted(p.relative_to(there) for p in there.rglob("*.mrcs"))
    for stack in stacks:
        assert (there / stack).read_bytes() == (here / stack).read_bytes()
        with mrcfile.open(here / stack) as local, mrcfile.open(there / stack) as remote:
            np.testing.assert_array_equal(remote.data, local.data)
    np.testing.assert_array_equal(load(there / "Particles/Mics/c.mrcs")[1],  # NumPy's box of the micrograph
                                  box_of(mrcfile.read(there / "Mics/c.mrc"), 30, 25, 8))
    for name in ("p.star", "p_4px.star"):
        local, remote = starfile.read(here / name), starfile.read(there / name)
        for block in ("optics", "particles"):
            assert remote[block].equals(local[block])
    assert not [name for name in listing(there) if name.endswith(".noa-tmp")]
    one_stack = extract_task().operation.options({**DASK_VALUES, "one_stack": True})  # one task: one stack
    cluster.write_split(dataclasses.replace(extract_task(), options=one_stack), "mics.star", "one.star", dask_client)
    monkeypatch.chdir(here)
    execute(operations.get("extract"), ["mics.star"], "one.star", one_stack)
    for name in ("one.mrcs", "one_4px.mrcs", "one.star", "one_4px.star"):
        assert (there / name).read_bytes() == (here / name).read_bytes()


def test_a_micrograph_failing_in_a_dask_task_fails_the_run_naming_it_and_leaves_nothing(tmp_path, mics):
    """A micrograph whose header is sound and data corrupt (a TIFF of bad deflate data) fails in its task: the CLI
    says one line naming it as the micrographs STAR does (not the descriptor it was opened as), exit 2, and neither
    the STAR nor any stack of the other micrographs is left."""
    four_micrographs(tmp_path, mics)
    tifffile.imwrite(tmp_path / "Mics/c.tif", np.ones((HEIGHT, WIDTH), np.float32), compression="zlib")
    with tifffile.TiffFile(tmp_path / "Mics/c.tif") as tif:
        start, count = tif.pages[0].dataoffsets[0], tif.pages[0].databytecounts[0]
    data = bytearray((tmp_path / "Mics/c.tif").read_bytes())
    data[start + 2:start + count] = bytes(count - 2)  # the zlib stream's body zeroed: not deflate data
    (tmp_path / "Mics/c.tif").write_bytes(bytes(data))
    (tmp_path / "mics.star").write_text(micrographs_star(["Mics/a.mrc", "Mics/b.mrc", "Mics/c.tif", "Mics/d.mrc"],
                                                         1.25))
    before = listing(tmp_path)
    done = noa("extract", "mics.star", "--coord-suffix", "_pick.star", "--box", 8, "-o", "p.star", "--scheduler",
               "local", "--workers", 2, cwd=tmp_path)
    assert_user_error(done, "mics.star: data_micrographs, row 3", "Mics/c.tif")
    assert "/proc/self/fd" not in done.stderr
    assert listing(tmp_path) == before


def test_a_resumed_extraction_on_dask_keeps_the_stacks_finished_before(tmp_path, mics, monkeypatch, dask_client):
    """A run stopped after its first micrograph left its stacks; resumed on the cluster, the others are extracted
    in tasks and those stacks are kept as they are (same inode, same mtime); the result is an uninterrupted run's."""
    from distributed import get_task_stream

    four_micrographs(tmp_path, mics)
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp_path / "Mics", fresh / "Mics")
    shutil.copy(tmp_path / "mics.star", fresh)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(extract_impl.limits, "available_cores", lambda: 1)  # one micrograph after the other

    def stop_after_one(done, total):
        if done == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute(operations.get("extract"), ["mics.star"], "p.star", DASK_VALUES, progress=stop_after_one, resume=True)
    kept = {name: os.stat(name) for name in ("Particles/Mics/a.mrcs", "Particles_4px/Mics/a.mrcs")}
    assert not (tmp_path / "Particles/Mics/b.mrcs").exists()
    counted: list[tuple[int, int]] = []
    with get_task_stream(dask_client) as stream:
        notices = cluster.write_split(extract_task(), "mics.star", "p.star", dask_client, resume=True,
                                      progress=lambda done, total: counted.append((done, total)))
    assert len(dask_keys(stream)) > 1 and counted == [(2, 4), (3, 4), (4, 4)]
    assert any("1 micrograph(s) extracted before" in notice for notice in notices)
    for name, stat in kept.items():
        now = os.stat(name)
        assert (now.st_ino, now.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    monkeypatch.chdir(fresh)
    execute(operations.get("extract"), ["mics.star"], "p.star", DASK_VALUES)
    for stack in sorted(p.relative_to(fresh) for p in fresh.rglob("*.mrcs")):
        assert (tmp_path / stack).read_bytes() == (fresh / stack).read_bytes()
    for name in ("p.star", "p_4px.star"):
        assert (tmp_path / name).read_bytes() == (fresh / name).read_bytes()


def test_a_services_voxel_limit_holds_for_each_micrograph_and_each_stack(tmp_path, make_client):
    """A data set's images and outputs obey the service's --max-voxels as a file's do: a micrograph over the limit,
    or a stack of its particles over it, is a 422 naming that file, with nothing written."""
    (tmp_path / "Mics").mkdir()
    (tmp_path / "out").mkdir()
    write_mrc(tmp_path / "Mics/big.mrc", np.random.default_rng(2).normal(size=(200, 200)).astype(np.float32),
              voxel_size=1.0)
    (tmp_path / "Mics/big_pick.star").write_text(  # ten picks whose 64-pixel boxes lie inside the micrograph
        "data_\nloop_\n_rlnCoordinateX\n_rlnCoordinateY\n" + "".join(f"{40 + 12 * i} 100\n" for i in range(10)))
    body = {"srcs": ["Mics/big.mrc"], "dst": "out/p.star", "coords": "Mics/big_pick.star", "box": 64}
    stack = make_client(data_root=tmp_path, max_voxels=40_000).post("/v1/paths/extract", json=body)
    assert stack.status_code == 422 and stack.json()["type"].endswith("too-many-voxels"), stack.text
    assert "Particles/Mics/big.mrcs" in stack.json()["detail"] and "40960 voxels" in stack.json()["detail"]
    micrograph = make_client(data_root=tmp_path, max_voxels=39_999).post("/v1/paths/extract", json=body)
    assert micrograph.status_code == 422 and "Mics/big.mrc: shape (1, 1, 200, 200)" in micrograph.json()["detail"]
    assert listing(tmp_path / "out") == []
    fits = make_client(data_root=tmp_path, max_voxels=40_960).post("/v1/paths/extract", json=body)
    assert fits.status_code == 201, fits.text
    np.testing.assert_array_equal(load(tmp_path / "out/Particles/Mics/big.mrcs")[3],
                                  box_of(load(tmp_path / "Mics/big.mrc"), 76, 100, 64))
