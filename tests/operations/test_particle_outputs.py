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
from noa_core.errors import NoaError, OutputExistsError
from noa_core.io import particles, star
from noa_core.io.particle_files import ParticleError
from noa_core.run import execute
from tests.helpers import REPO
from tests.particles import tables
from tests.particles.tables import binned, cs_file, oracle_images

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
