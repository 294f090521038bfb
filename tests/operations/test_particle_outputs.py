"""Operations on particle files, written as particle files (noa_core.io.particles): the images in one stack beside
the file, the rows kept (every other value byte for byte), the optics table and the shifts in pixels following the
new pixel size and box; what RELION 3.1.3 reads back (relion_stack_create) and what starfile, mrcfile and NumPy
say; outputs placed together or not at all."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import starfile

from noa_core import operations
from noa_core.errors import NoaError, OutputExistsError, OutputIsInputError
from noa_core.io import particles, star
from noa_core.io.particle_files import ParticleError
from noa_core.run import execute
from tests.helpers import REPO, assert_problem, assert_user_error, noa
from tests.particles import tables
from tests.particles.tables import binned, cs_file, oracle_images

try:
    from cryosparc.dataset import Dataset as CryosparcDataset
except ImportError:  # cryosparc-tools, of the dev extra, not installed: its tests skip
    CryosparcDataset = None

RELION = REPO / "tests" / "data" / "relion_particles"
HAS_RELION = shutil.which("relion_stack_create") is not None


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the RELION particle set, the current folder (RELION's project folder)."""
    folder = tables.project(tmp_path)
    monkeypatch.chdir(folder)
    return folder


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_binned_particles_are_a_stack_and_a_star_naming_it(project):
    result = execute(operations.get("bin"), ["particles.star"], "binned.star", {"factor": 2})
    assert result["output"] == "binned.star"
    source = oracle_images(project / "particles.star", project)
    written = mrcfile.read(project / "binned.mrcs")
    np.testing.assert_allclose(written, binned(source, 2)[:, 0], rtol=1e-6)
    with mrcfile.open(project / "binned.mrcs") as m:
        assert m.voxel_size.x == pytest.approx(3.0) and m.header.ispg == 0
    before, after = starfile.read(project / "particles.star"), starfile.read(project / "binned.star")
    assert after["particles"]["rlnImageName"].tolist() == [f"{i:06d}@binned.mrcs" for i in range(1, 12)]
    others = [c for c in before["particles"].columns if c != "rlnImageName"]
    assert after["particles"][others].equals(before["particles"][others])
    optics = after["optics"].iloc[0]
    assert (optics["rlnImagePixelSize"], optics["rlnImageSize"], optics["rlnImageDimensionality"]) == (3.0, 16, 2)
    # every line but the image names and the optics row is the input's, spacing and all
    changed = [line for line in _lines(project / "binned.star") if line not in _lines(project / "particles.star")]
    assert len(changed) == 12 and all(b"binned.mrcs" in line for line in changed[1:])


@pytest.mark.skipif(not HAS_RELION, reason="RELION (relion_stack_create) is not installed: apt-get install relion")
def test_relion_reads_back_what_noa_wrote(project):
    execute(operations.get("rescale"), ["particles.star"], "small.star", {"pixel_size": 2.0})
    done = subprocess.run(["relion_stack_create", "--i", "small.star", "--o", "relion"], cwd=project,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(mrcfile.read(project / "relion.mrcs"), mrcfile.read(project / "small.mrcs"))
    assert starfile.read(project / "relion.star")["optics"]["rlnImagePixelSize"].tolist() == [2.0]


def test_sections_kept_are_their_rows_in_order(project):
    execute(operations.get("sections"), ["particles.star"], "some.star", {"keep": "7,0,3"})
    before, after = starfile.read(project / "particles.star"), starfile.read(project / "some.star")
    kept = before["particles"].iloc[[7, 0, 3]].reset_index(drop=True)
    assert after["particles"]["rlnCoordinateX"].tolist() == kept["rlnCoordinateX"].tolist()
    np.testing.assert_array_equal(mrcfile.read(project / "some.mrcs"),
                                  oracle_images(project / "particles.star", project)[[7, 0, 3], 0])


def test_relion_30_shifts_in_pixels_and_magnification_follow_the_pixel_size(project):
    text = star.read(project / "particles.star")
    block = text.block("particles")
    rows = block.rows
    old = project / "old.star"
    star.write(old, star.loop_text("", {
        "rlnImageName": text.values(block, "rlnImageName"),
        "rlnOriginX": np.linspace(-3, 3, rows), "rlnOriginY": np.linspace(2, -2, rows),
        "rlnDetectorPixelSize": np.full(rows, 5.0), "rlnMagnification": np.full(rows, 50000 / 1.5),
        "rlnAngleRot": np.linspace(0, 90, rows)}, version=None))
    execute(operations.get("bin"), ["old.star"], "old2.star", {"factor": 2})
    after = starfile.read(project / "old2.star")
    np.testing.assert_allclose(after["rlnOriginX"], np.linspace(-3, 3, rows) / 2)
    np.testing.assert_allclose(after["rlnOriginY"], np.linspace(2, -2, rows) / 2)
    np.testing.assert_allclose(after["rlnDetectorPixelSize"] * 1e4 / after["rlnMagnification"], 3.0)
    np.testing.assert_allclose(after["rlnAngleRot"], np.linspace(0, 90, rows))


def test_cryosparc_files_are_written_as_cryosparc_files(project):
    rows = [("Particles/Movies/mic1.mrcs", 2), ("Particles/Movies/mic0.mrcs", 4)]
    cs_file(project / "p.cs", rows)
    execute(operations.get("bin"), ["p.cs"], "b.cs", {"factor": 2})
    before, after = np.load(project / "p.cs"), np.load(project / "b.cs")
    assert after.dtype.names == before.dtype.names
    assert after["blob/path"].tolist() == [b">b.mrcs", b">b.mrcs"] and after["blob/idx"].tolist() == [0, 1]
    assert after["blob/shape"].tolist() == [[16, 16], [16, 16]]
    np.testing.assert_allclose(after["blob/psize_A"], 3.0)
    np.testing.assert_array_equal(after["uid"], before["uid"])
    np.testing.assert_array_equal(after["ctf/df1_A"], before["ctf/df1_A"])
    with mrcfile.open(project / "Particles/Movies/mic1.mrcs") as one, \
            mrcfile.open(project / "Particles/Movies/mic0.mrcs") as zero:
        source = np.stack([one.data[2], zero.data[4]])[:, None]
    np.testing.assert_allclose(mrcfile.read(project / "b.mrcs"), binned(source, 2)[:, 0], rtol=1e-6)


def test_an_output_outside_the_project_names_its_stack_by_its_absolute_path(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    execute(operations.get("flip"), ["particles.star"], elsewhere / "f.star", {"axis": "x"})
    names = starfile.read(elsewhere / "f.star")["particles"]["rlnImageName"]
    assert names[0] == f"000001@{elsewhere / 'f.mrcs'}"


def test_outputs_that_are_no_longer_the_particles_images_are_refused_with_nothing_written(project):
    for name, values, why in (("average", {"group": 2}, "merges 2"),
                              ("permute", {"axes": (0, 1, 3, 2)}, "permuted")):
        with pytest.raises(ParticleError, match=f"no longer the particles' images: .*{why}"):
            execute(operations.get(name), ["particles.star"], "x.star", values)
        assert not (project / "x.star").exists() and not (project / "x.mrcs").exists()
    with pytest.raises(ParticleError, match="its input is not a particle file"):
        execute(operations.get("copy"), ["Particles/Movies/mic0.mrcs"], "y.star")


def test_an_existing_stack_is_kept_unless_replacing_is_asked(project):
    (project / "out.mrcs").write_bytes(b"someone's stack")
    with pytest.raises(OutputExistsError, match=r"out.mrcs"):
        execute(operations.get("flip"), ["particles.star"], "out.star", {"axis": "x"})
    assert (project / "out.mrcs").read_bytes() == b"someone's stack" and not (project / "out.star").exists()
    execute(operations.get("flip"), ["particles.star"], "out.star", {"axis": "x"}, overwrite=True)
    assert starfile.read(project / "out.star")["particles"]["rlnImageName"][0] == "000001@out.mrcs"


def test_a_failure_after_the_stack_leaves_both_outputs_as_they_were(project, monkeypatch):
    execute(operations.get("flip"), ["particles.star"], "out.star", {"axis": "x"})
    before = {p: (project / p).read_bytes() for p in ("out.star", "out.mrcs")}

    def failing(self, path):
        raise NoaError("the index could not be written")

    monkeypatch.setattr(particles.FolderProject, "name_of", failing)
    with pytest.raises(NoaError, match="could not be written"):
        execute(operations.get("flip"), ["particles.star"], "out.star", {"axis": "y"}, overwrite=True)
    assert {p: (project / p).read_bytes() for p in before} == before
    assert sorted(p.name for p in project.iterdir()) == ["Particles", "out.mrcs", "out.star", "particles.star"]


# -- one stack per source stack (stack_per_input) ----------------------------------------------------------


def _source_stacks(project: Path) -> dict[str, np.ndarray]:
    return {name: mrcfile.read(project / f"Particles/Movies/{name}.mrcs") for name in ("mic0", "mic1")}


def test_stack_per_input_keeps_one_stack_per_source_stack(project):
    execute(operations.get("bin"), ["particles.star"], "b.star", {"factor": 2, "stack_per_input": True})
    assert sorted(p.name for p in (project / "b").iterdir()) == ["mic0.mrcs", "mic1.mrcs"]
    assert not (project / "b.mrcs").exists()
    for name, source in _source_stacks(project).items():
        np.testing.assert_allclose(mrcfile.read(project / f"b/{name}.mrcs"), binned(source[:, None], 2)[:, 0],
                                   rtol=1e-6)
        with mrcfile.open(project / f"b/{name}.mrcs") as m:
            assert m.voxel_size.x == pytest.approx(3.0) and m.header.ispg == 0
            assert m.header.dmax == pytest.approx(float(m.data.max())) and m.header.dmin == pytest.approx(
                float(m.data.min()))
    before, after = starfile.read(project / "particles.star"), starfile.read(project / "b.star")
    assert after["particles"]["rlnImageName"].tolist() == [
        f"{i:06d}@b/mic0.mrcs" for i in range(1, 6)] + [f"{i:06d}@b/mic1.mrcs" for i in range(1, 7)]
    others = [c for c in before["particles"].columns if c != "rlnImageName"]
    assert after["particles"][others].equals(before["particles"][others])
    assert after["optics"]["rlnImageSize"].tolist() == [16]


def test_stack_per_input_keeps_rows_reordered_or_dropped_in_their_source_stack(project):
    execute(operations.get("sections"), ["particles.star"], "some.star", {"keep": "7,0,3,9", "stack_per_input": True})
    names = starfile.read(project / "some.star")["particles"]["rlnImageName"].tolist()
    assert names == ["000001@some/mic1.mrcs", "000001@some/mic0.mrcs", "000002@some/mic0.mrcs",
                     "000002@some/mic1.mrcs"]
    source = _source_stacks(project)
    np.testing.assert_array_equal(mrcfile.read(project / "some/mic1.mrcs"), source["mic1"][[2, 4]])
    np.testing.assert_array_equal(mrcfile.read(project / "some/mic0.mrcs"), source["mic0"][[0, 3]])


def test_stack_per_input_names_sources_of_one_name_apart():
    assert particles.stack_file_names(["A/s.mrcs", "B/s.mrcs", "C/s-2.mrcs", "D/S.mrc", "/abs/t.mrcs"]) == [
        "s.mrcs", "s-2.mrcs", "s-2-2.mrcs", "S-3.mrcs", "t.mrcs"]


def test_stack_per_input_of_stacks_of_one_name_in_two_folders(project):
    for folder, name in (("A", "mic0"), ("B", "mic1")):
        (project / folder).mkdir()
        shutil.copy(project / f"Particles/Movies/{name}.mrcs", project / folder / "s.mrcs")
    text = (project / "particles.star").read_text()
    (project / "two.star").write_text(text.replace("Particles/Movies/mic0.mrcs", "A/s.mrcs")
                                      .replace("Particles/Movies/mic1.mrcs", "B/s.mrcs"))
    execute(operations.get("flip"), ["two.star"], "f.star", {"axis": "x", "stack_per_input": True})
    source = _source_stacks(project)
    np.testing.assert_array_equal(mrcfile.read(project / "f/s.mrcs"), source["mic0"][:, :, ::-1])
    np.testing.assert_array_equal(mrcfile.read(project / "f/s-2.mrcs"), source["mic1"][:, :, ::-1])
    assert starfile.read(project / "f.star")["particles"]["rlnImageName"].tolist()[4:6] == [
        "000005@f/s.mrcs", "000001@f/s-2.mrcs"]


@pytest.mark.skipif(not HAS_RELION, reason="RELION (relion_stack_create) is not installed: apt-get install relion")
def test_relion_reads_back_one_stack_per_source_stack(project):
    execute(operations.get("sections"), ["particles.star"], "some.star", {"keep": "7,0,3,9", "stack_per_input": True})
    done = subprocess.run(["relion_stack_create", "--i", "some.star", "--o", "relion"], cwd=project,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    source = _source_stacks(project)
    expected = np.stack([source["mic1"][2], source["mic0"][0], source["mic0"][3], source["mic1"][4]])
    np.testing.assert_array_equal(mrcfile.read(project / "relion.mrcs"), expected)


def test_stack_per_input_writes_cryosparc_rows_naming_their_own_stacks(project):
    cs_file(project / "p.cs", [("Particles/Movies/mic1.mrcs", 2), ("Particles/Movies/mic0.mrcs", 4),
                               ("Particles/Movies/mic1.mrcs", 0)])
    execute(operations.get("bin"), ["p.cs"], "b.cs", {"factor": 2, "stack_per_input": True})
    after = np.load(project / "b.cs")
    assert after["blob/path"].tolist() == [b">b/mic1.mrcs", b">b/mic0.mrcs", b">b/mic1.mrcs"]
    assert after["blob/idx"].tolist() == [0, 0, 1]
    source = _source_stacks(project)
    np.testing.assert_allclose(mrcfile.read(project / "b/mic1.mrcs"),
                               binned(source["mic1"][[2, 0], None], 2)[:, 0], rtol=1e-6)


def test_a_failure_while_splitting_leaves_no_stack_and_no_star(project, monkeypatch):
    finish = particles.ParticlesFormat.finish
    calls = []

    def failing(self, temp, spec, statistics):
        calls.append(spec.shape)
        if len(calls) == 3:  # the data filled, then the first stack split from it: the second one fails
            raise NoaError("the disk went away")
        finish(self, temp, spec, statistics)

    monkeypatch.setattr(particles.ParticlesFormat, "finish", failing)
    with pytest.raises(NoaError, match="went away"):
        execute(operations.get("flip"), ["particles.star"], "out.star", {"axis": "x", "stack_per_input": True})
    assert len(calls) == 3
    assert sorted(p.name for p in project.iterdir()) == ["Particles", "particles.star"]


def test_a_failure_after_the_stacks_leaves_every_output_as_it_was(project, monkeypatch):
    execute(operations.get("flip"), ["particles.star"], "out.star", {"axis": "x", "stack_per_input": True})
    before = {p: (project / p).read_bytes() for p in ("out.star", "out/mic0.mrcs", "out/mic1.mrcs")}

    def failing(self, path):
        raise NoaError("the index could not be written")

    monkeypatch.setattr(particles.FolderProject, "name_of", failing)
    with pytest.raises(NoaError, match="could not be written"):
        execute(operations.get("flip"), ["particles.star"], "out.star", {"axis": "y", "stack_per_input": True},
                overwrite=True)
    assert {p: (project / p).read_bytes() for p in before} == before
    assert sorted(p.name for p in project.iterdir()) == ["Particles", "out", "out.star", "particles.star"]
    assert sorted(p.name for p in (project / "out").iterdir()) == ["mic0.mrcs", "mic1.mrcs"]


def test_stack_per_input_never_replaces_a_source_stack(project):
    sources = {p: p.read_bytes() for p in (project / "Particles/Movies").iterdir()}
    with pytest.raises(OutputExistsError, match=r"mic0\.mrcs"):
        execute(operations.get("flip"), ["particles.star"], "Particles/Movies.star",
                {"axis": "x", "stack_per_input": True})
    with pytest.raises(OutputIsInputError, match=r"is the stack Particles/Movies/mic0\.mrcs"):
        execute(operations.get("flip"), ["particles.star"], "Particles/Movies.star",
                {"axis": "x", "stack_per_input": True}, overwrite=True)
    assert {p: p.read_bytes() for p in (project / "Particles/Movies").iterdir()} == sources
    assert not (project / "Particles/Movies.star").exists()


def test_stack_per_input_on_the_command_line_and_refused_for_an_image_output(project):
    done = noa("bin", "particles.star", "b.star", "--factor", "2", "--stack-per-input", cwd=project)
    assert done.returncode == 0, done.stderr
    assert starfile.read(project / "b.star")["particles"]["rlnImageName"][0] == "000001@b/mic0.mrcs"
    np.testing.assert_allclose(mrcfile.read(project / "b/mic0.mrcs"),
                               binned(_source_stacks(project)["mic0"][:, None], 2)[:, 0], rtol=1e-6)
    assert_user_error(noa("bin", "particles.star", "b2.mrcs", "--factor", "2", "--stack-per-input", cwd=project),
                      "b2.mrcs", "--stack-per-input", "particle outputs")
    assert not (project / "b2.mrcs").exists()


def test_stack_per_input_over_http_paths_mode(project, make_client):
    client = make_client(data_root=project)
    response = client.post("/v1/paths/bin", json={"src": "particles.star", "dst": "b.star", "factor": 2,
                                                  "stack_per_input": True})
    assert response.status_code == 201, response.text
    assert starfile.read(project / "b.star")["particles"]["rlnImageName"].tolist()[5] == "000001@b/mic1.mrcs"
    np.testing.assert_allclose(mrcfile.read(project / "b/mic1.mrcs"),
                               binned(_source_stacks(project)["mic1"][:, None], 2)[:, 0], rtol=1e-6)
    refused = client.post("/v1/paths/bin", json={"src": "particles.star", "dst": "b.mrcs", "factor": 2,
                                                 "stack_per_input": True})
    assert_problem(refused, 422)
    assert "stack_per_input" in refused.json()["detail"] and not (project / "b.mrcs").exists()


# -- what cryoSPARC reads (cryosparc-tools) -----------------------------------------------------------------


def _cryosparc_particles(path: Path) -> Path:
    """A particle file as cryosparc-tools saves one (its uids, text fields of its own type, a pose)."""
    dataset = CryosparcDataset.allocate(3, [("blob/path", "O"), ("blob/idx", "u4"), ("blob/shape", "2u4"),
                                            ("blob/psize_A", "f4"), ("blob/sign", "f4"), ("ctf/df1_A", "f4"),
                                            ("alignments2D/pose", "f4"), ("location/micrograph_path", "O")])
    dataset["blob/path"] = [">Particles/Movies/mic1.mrcs", ">Particles/Movies/mic0.mrcs", ">Particles/Movies/mic1.mrcs"]
    dataset["blob/idx"] = [2, 4, 0]
    dataset["blob/shape"] = 32
    dataset["blob/psize_A"] = 1.5
    dataset["blob/sign"] = -1
    dataset["ctf/df1_A"] = [1e4, 2e4, 3e4]
    dataset["alignments2D/pose"] = [0.5, 1.5, 2.5]
    dataset["location/micrograph_path"] = ["Movies/mic1.mrc", "Movies/mic0.mrc", "Movies/mic1.mrc"]
    dataset.save(str(path))
    return path


@pytest.mark.skipif(CryosparcDataset is None, reason="cryosparc-tools is not installed: pip install noa[dev]")
@pytest.mark.parametrize("stack_per_input", [False, True])
def test_cryosparc_tools_reads_the_cs_noa_writes(project, stack_per_input):
    source = CryosparcDataset.load(str(_cryosparc_particles(project / "p.cs")))
    execute(operations.get("bin"), ["p.cs"], "b.cs", {"factor": 2, "stack_per_input": stack_per_input})
    written = CryosparcDataset.load(str(project / "b.cs"))
    assert written.fields() == source.fields() and len(written) == 3
    stacks = ["b/mic1.mrcs", "b/mic0.mrcs", "b/mic1.mrcs"] if stack_per_input else ["b.mrcs"] * 3
    assert written["blob/path"].tolist() == [">" + stack for stack in stacks]
    assert written["blob/idx"].tolist() == ([0, 0, 1] if stack_per_input else [0, 1, 2])
    assert written["blob/shape"].tolist() == [[16, 16]] * 3
    np.testing.assert_allclose(written["blob/psize_A"], 3.0)
    for field in ("uid", "blob/sign", "ctf/df1_A", "alignments2D/pose", "location/micrograph_path"):
        np.testing.assert_array_equal(written[field], source[field])
    for row, (stack, index) in enumerate(zip(stacks, written["blob/idx"])):
        with mrcfile.open(project / source["blob/path"][row][1:]) as m:
            expected = binned(m.data[source["blob/idx"][row]][None, None], 2)[0, 0]
        np.testing.assert_allclose(mrcfile.read(project / stack).reshape(-1, 16, 16)[index], expected, rtol=1e-6)
    # through a STAR and back (noa particles convert, tested in tests/particles): cryosparc-tools reads it too
    assert noa("particles", "convert", "b.cs", "b.star", cwd=project).returncode == 0
    assert noa("particles", "convert", "b.star", "back.cs", cwd=project).returncode == 0
    back = CryosparcDataset.load(str(project / "back.cs"))
    assert back["blob/path"].tolist() == stacks  # a STAR's paths have no '>'; relative to the project all the same
    assert back["blob/idx"].tolist() == written["blob/idx"].tolist()
