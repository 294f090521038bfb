"""Particle files read as stacks (noa_core.io.particles) against starfile and mrcfile reading the same rows and
stacks, on the particle set RELION 3.1.3 extracted (tests/data/relion_particles) and on cryoSPARC .cs files made
from it; the rows' images in any order and subset; every malformed set refused naming the row and the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import mrcfile
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noa_core import io
from noa_core.errors import MissingFileError, NoaError
from noa_core.io import particle_files, particles, star
from noa_core.io.particle_files import ParticleError
from tests.helpers import REPO
from tests.io.conformance import FormatTests
from tests.particles import tables
from tests.particles.tables import cs_file, oracle_images

RELION = REPO / "tests" / "data" / "relion_particles"


@pytest.fixture()
def project(tmp_path) -> Path:
    """A copy of the RELION particle set: a project folder of its own."""
    return tables.project(tmp_path)


def test_a_relion_star_reads_as_the_stack_of_its_rows(project):
    array, md = io.read(project / "particles.star", project_dir=str(project))
    expected = oracle_images(project / "particles.star", project)
    assert array.shape == (11, 1, 32, 32) and md.format == "particles"
    np.testing.assert_array_equal(array.numpy(), expected)
    assert md.pixel_size == (1.5, 1.5, 1.5)
    probe = io.probe(project / "particles.star", project_dir=str(project))
    assert probe.shape == array.shape and probe.dtype == np.float32


def test_paths_are_relative_to_the_current_folder_by_default(project, monkeypatch):
    monkeypatch.chdir(project)
    array, _ = io.read("particles.star")
    np.testing.assert_array_equal(array.numpy(), oracle_images(project / "particles.star", project))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_rows_in_any_order_read_as_their_images(project, tmp_path, data):
    text = star.read(project / "particles.star")
    rows = np.array(data.draw(st.lists(st.integers(0, 10), min_size=1, max_size=30)))
    path = project / "chosen.star"
    star.write(path, text.edited({"particles": star.LoopEdit(rows=rows)}), overwrite=True)
    tiles = data.draw(st.booleans())
    array, _ = io.read(path, project_dir=str(project), tiles=tiles)
    expected = oracle_images(project / "particles.star", project)[rows]
    if tiles:  # read only through the tile engine's reads
        from noa_core.io import mapped
        np.testing.assert_array_equal(mapped.read_view(array.numpy()), expected)
    else:
        np.testing.assert_array_equal(array.numpy(), expected)


def test_a_cryosparc_file_reads_as_the_stack_of_its_rows(project):
    rows = [("Particles/Movies/mic1.mrcs", 5), ("Particles/Movies/mic0.mrcs", 0), ("Particles/Movies/mic0.mrcs", 1)]
    path = cs_file(project / "particles.cs", rows)
    array, md = io.read(path, project_dir=str(project))
    with mrcfile.open(project / "Particles/Movies/mic1.mrcs") as one, \
            mrcfile.open(project / "Particles/Movies/mic0.mrcs") as zero:
        expected = np.stack([one.data[5], zero.data[0], zero.data[1]])[:, None]
    np.testing.assert_array_equal(array.numpy(), expected)
    assert md.pixel_size[2] == pytest.approx(1.5)


class TestParticlesConformance(FormatTests):
    """A RELION particle STAR naming its stacks by absolute paths (read from any folder), whose stack and rows an
    output of the same images keeps; RELION's own reader is relion_stack_create where RELION is installed, the
    oracle here is starfile + mrcfile."""

    format = particles.FORMAT

    def sample(self, folder: Path) -> tuple[Path, np.ndarray]:
        project = folder / "sample"
        path = project / "particles.star"
        if not path.exists():
            shutil.copytree(RELION, project)
            path.write_text(path.read_text().replace("@Particles/", f"@{project}/Particles/"))
        return path, oracle_images(path, project)

    def write(self, out: Path, values: np.ndarray, folder: Path, *, overwrite: bool = False) -> None:
        _, metadata = io.read(self.sample(folder / "rows")[0])
        io.write(out, values, metadata, overwrite=overwrite)

    def reference(self, path: Path) -> np.ndarray:
        return oracle_images(path, path.parent)


# -- refused -------------------------------------------------------------------------------------------------


def _edited(project: Path, old: str, new: str) -> Path:
    path = project / "particles.star"
    path.write_text(path.read_text().replace(old, new, 1))
    return path


def test_a_missing_stack_names_the_row_and_the_column(project):
    (project / "Particles/Movies/mic1.mrcs").unlink()
    with pytest.raises(MissingFileError) as caught:
        io.read(project / "particles.star", project_dir=str(project))
    assert "data_particles, row 6, rlnImageName: Particles/Movies/mic1.mrcs: No such file" in str(caught.value)


def test_a_section_beyond_its_stack_names_the_row(project):
    path = _edited(project, "000003@Particles/Movies/mic0.mrcs", "000051@Particles/Movies/mic0.mrcs")
    with pytest.raises(ParticleError, match=r"row 3, rlnImageName: section 51 of Particles/Movies/mic0.mrcs, "
                                            r"which holds 5"):
        io.read(path, project_dir=str(project))


def test_stacks_of_different_sizes_are_refused(project):
    with mrcfile.new(project / "Particles/Movies/mic1.mrcs", overwrite=True) as m:
        m.set_data(np.zeros((6, 24, 24), np.float32))
    with pytest.raises(ParticleError, match=r"row 6, rlnImageName: Particles/Movies/mic1.mrcs holds 24 x 24 images"):
        io.read(project / "particles.star", project_dir=str(project))


def test_a_box_the_optics_table_does_not_say_is_refused(project):
    path = _edited(project, "           32            2", "           64            2")
    with pytest.raises(ParticleError, match=r"row 1, rlnImageSize: 64, but its image .* is 32 pixels wide"):
        io.read(path, project_dir=str(project))


def test_a_malformed_star_is_refused_naming_the_row(project):
    path = _edited(project, " Movies/mic0.mrc            1 \n", " Movies/mic0.mrc \n")
    with pytest.raises(star.StarError, match=r"data_particles, row 1 \(line \d+\): 4 values for 5 columns"):
        io.read(path, project_dir=str(project))


def test_a_star_without_image_names_is_refused(tmp_path):
    path = tmp_path / "micrographs.star"
    path.write_text("data_micrographs\nloop_\n_rlnMicrographName #1\nmic.mrc\n")
    with pytest.raises(ParticleError, match=r"no loop has an rlnImageName column .data_micrographs."):
        io.read(path)


def test_a_cs_without_blob_path_is_refused(tmp_path):
    path = tmp_path / "bad.cs"
    with open(path, "wb") as f:
        np.save(f, np.zeros(3, [("uid", "<u8"), ("blob/idx", "<u4")]))
    with pytest.raises(ParticleError, match=r"bad.cs: no blob/path field"):
        io.read(path)


def test_a_cs_whose_header_promises_more_rows_than_it_holds_is_refused_before_allocating(tmp_path):
    path = cs_file(tmp_path / "p.cs", [("a.mrcs", 0)] * 4)
    raw = path.read_bytes().replace(b"'shape': (4,)", b"'shape': (400000000000,)")
    path.write_bytes(raw)
    with pytest.raises(ParticleError, match=r"promises 400000000000 rows"):
        io.read(path)


def test_an_index_past_a_cs_stack_names_blob_idx(project):
    path = cs_file(project / "p.cs", [("Particles/Movies/mic0.mrcs", 5)])
    with pytest.raises(ParticleError, match=r"p.cs: row 1, blob/idx: section 5 of Particles/Movies/mic0.mrcs, "
                                            r"which holds 5"):
        io.read(path, project_dir=str(project))


def test_refusals_are_one_line_and_noa_errors(project):
    (project / "Particles/Movies/mic0.mrcs").write_bytes(b"not an mrc file at all" * 50)
    with pytest.raises(NoaError) as caught:
        io.read(project / "particles.star", project_dir=str(project))
    assert "\n" not in str(caught.value) and "row 1, rlnImageName" in str(caught.value)


def test_the_tables_say_what_relion_and_cryosparc_say(project):
    table = particle_files.open_table(project / "particles.star")
    assert table.rows == 11 and table.kind == "STAR"
    paths, sections = table.image_names()
    assert paths[5] == b"Particles/Movies/mic1.mrcs" and sections[5] == 0
    assert table.pixel_sizes().tolist() == [1.5] * 11 and table.boxes().tolist() == [32] * 11


def test_the_registry_knows_particle_files_by_extension_without_importing_them():
    from noa_core.io import formats
    assert tuple(e for fmt in formats.DATASETS for e in fmt.extensions) == formats.DATASET_EXTENSIONS
