"""Particle files read as stacks (noa_core.io.particles) against starfile and mrcfile reading the same rows and
stacks, on the particle set RELION 3.1.3 extracted (tests/data/relion_particles) and on cryoSPARC .cs files made
from it; the rows' images in any order and subset; every malformed set refused naming the row and the field.

Particle files a command cannot use (issue 42 item 5), on the command line: exit 2 and one line naming the
file, the row and the field, no output of any kind left (no stack, no STAR, no temporary file) and the inputs
unchanged; each refused file made from the particle set RELION 3.1.3 extracted (tests/data/relion_particles)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import starfile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noa_core import io, limits, operations
from noa_core.errors import LimitError, MissingFileError, NoaError, NoSpaceError
from noa_core.io import particle_files, particles, star
from noa_core.io.particle_files import ParticleError
from noa_core.run import execute
from tests.helpers import REPO, assert_user_error, noa, random_values, write_mrc
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


def test_a_particle_file_over_the_voxel_limit_is_refused_before_any_image(project, monkeypatch):
    """Under a voxel limit (a service's), the read checks it itself (``checks_size``) from the table and the stacks'
    headers: no image gathered over it, and the file not probed first (its table and stacks are read once)."""
    assert particles.FORMAT.checks_size
    monkeypatch.setattr(particles.ParticlesFormat, "probe", lambda *args: pytest.fail("probed"))
    voxels = 11 * 32 * 32
    with monkeypatch.context() as gathering:
        gathering.setattr(particles, "Gather", lambda *args: pytest.fail("gathered over the limit"))
        with limits.voxel_limit(voxels - 1), pytest.raises(
                LimitError, match=rf"particles\.star: shape \(11, 1, 32, 32\) has {voxels} voxels; the limit is "
                                  rf"{voxels - 1}$"):
            io.read(project / "particles.star", project_dir=str(project))
    with limits.voxel_limit(voxels):
        array, _ = io.read(project / "particles.star", project_dir=str(project))
    np.testing.assert_array_equal(array.numpy(), oracle_images(project / "particles.star", project))


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


# -- particle files a command cannot use, on the command line ------------------------------------------------------


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(project: Path, name: str, *fragments: str, operation: tuple[str, ...] = ("bin", "--factor", "2")) -> None:
    """``noa OPERATION NAME out.EXT`` in ``project`` is refused in one line holding ``fragments``, and the
    folder holds what it held."""
    before = files(project)
    out = "out" + Path(name).suffix
    result = noa(operation[0], name, out, *operation[1:], cwd=project)
    assert_user_error(result, name, *fragments)
    assert files(project) == before


def edited(project: Path, name: str, old: str, new: str, count: int = 1) -> str:
    text = (project / "particles.star").read_text()
    assert old in text
    (project / name).write_text(text.replace(old, new, count))
    return name


def test_a_missing_stack(project):
    (project / "Particles/Movies/mic1.mrcs").unlink()
    refused(project, "particles.star", "data_particles, row 6, rlnImageName", "Particles/Movies/mic1.mrcs",
            "No such file")


def test_a_section_beyond_its_stack(project):
    write_mrc(project / "stack50.mrcs", random_values((50, 32, 32)), stack=True, voxel_size=1.5)
    text = (project / "particles.star").read_text()
    rows = text.splitlines()
    first = next(i for i, line in enumerate(rows) if "000001@Particles/Movies/mic0.mrcs" in line)
    rows[first + 1] = rows[first + 1].replace("000002@Particles/Movies/mic0.mrcs", "000050@stack50.mrcs")
    rows[first + 2] = rows[first + 2].replace("000003@Particles/Movies/mic0.mrcs", "000051@stack50.mrcs")
    (project / "beyond.star").write_text("\n".join(rows) + "\n")
    refused(project, "beyond.star", "data_particles, row 3, rlnImageName", "section 51 of stack50.mrcs",
            "which holds 50")


def test_stacks_of_different_box_sizes_in_one_optics_group(project):
    write_mrc(project / "Particles/Movies/mic1.mrcs", random_values((6, 24, 24)), stack=True, voxel_size=1.5)
    refused(project, "particles.star", "data_particles, row 6, rlnImageName", "Particles/Movies/mic1.mrcs",
            "24 x 24")


def relion30(project: Path, name: str, magnification: np.ndarray) -> str:
    """A RELION 3.0 STAR (no optics table: one optics group) of the set's rows, the pixel size of each row
    rlnDetectorPixelSize (5 µm) over rlnMagnification."""
    text = (project / "particles.star").read_text()
    names = [line.split()[2] for line in text.splitlines() if "@Particles/" in line]
    lines = ["", "data_", "", "loop_", "_rlnImageName #1", "_rlnDetectorPixelSize #2", "_rlnMagnification #3"]
    lines += [f"{image} 5.000000 {m:.6f}" for image, m in zip(names, magnification, strict=True)]
    (project / name).write_text("\n".join(lines) + "\n")
    return name


def test_different_pixel_sizes_in_one_optics_group(project):
    magnification = np.full(11, 5e4 / 1.5)
    magnification[7] = 5e4 / 1.6
    refused(project, relion30(project, "mixed.star", magnification), "row 8", "rlnMagnification", "1.6", "1.5")


def test_one_pixel_size_in_a_relion30_file_is_read(project):
    """The check above refuses what differs only: rows of one pixel size are binned (its control)."""
    relion30(project, "one.star", np.full(11, 5e4 / 1.5))
    done = noa("bin", "one.star", "out.star", "--factor", "2", cwd=project)
    assert done.returncode == 0, done.stderr
    assert (project / "out.mrcs").exists()


@pytest.mark.parametrize("case, old, new, fragments", [
    ("fewer values than columns", " Movies/mic0.mrc            1 \n", " Movies/mic0.mrc \n",
     ("data_particles, row 1", "4 values for 5 columns")),
    ("an unterminated quote", "   53.300000    66.900000 000001@", '   53.300000    66.900000 "000001@',
     ("data_particles, row 1",)),
    ("a duplicate column", "_rlnMicrographName #4", "_rlnCoordinateX #4",
     ("data_particles", "rlnCoordinateX is given twice")),
    ("a loop without labels", "loop_ \n_rlnCoordinateX #1 \n_rlnCoordinateY #2 \n_rlnImageName #3 \n"
     "_rlnMicrographName #4 \n_rlnOpticsGroup #5 \n", "loop_ \n", ("data_particles", "loop_ with no labels")),
])
def test_a_malformed_star(project, case, old, new, fragments):
    refused(project, edited(project, "bad.star", old, new), *fragments)


def test_a_star_cut_inside_its_last_row(project):
    text = (project / "particles.star").read_text().rstrip()
    (project / "cut.star").write_text(text[:text.rindex("Movies/mic1.mrc")])
    refused(project, "cut.star", "data_particles, row 11", "values for 5 columns")


def test_a_cs_without_blob_path(project):
    with open(project / "nopath.cs", "wb") as f:
        np.save(f, np.zeros(3, [("uid", "<u8"), ("blob/idx", "<u4"), ("blob/shape", "<u4", (2,))]))
    refused(project, "nopath.cs", "no blob/path field")


def test_a_cs_naming_a_section_beyond_its_stack(project):
    cs_file(project / "beyond.cs", [("Particles/Movies/mic0.mrcs", 0), ("Particles/Movies/mic0.mrcs", 5)])
    refused(project, "beyond.cs", "row 2, blob/idx", "section 5 of Particles/Movies/mic0.mrcs", "which holds 5")


def test_an_empty_particles_table(project):
    text = (project / "particles.star").read_text()
    (project / "empty.star").write_text("\n".join(line for line in text.splitlines() if "@Particles/" not in line))
    refused(project, "empty.star", "data_particles", "no rows")
    result = noa("bin", "empty.star", "out.star", "--factor", "2", cwd=project)
    assert result.stderr.count("empty.star") == 1, result.stderr  # the file named once


def test_an_empty_cs_file(project):
    cs_file(project / "empty.cs", [("Particles/Movies/mic0.mrcs", 0)])
    array = np.load(project / "empty.cs")[:0]
    with open(project / "empty.cs", "wb") as f:
        np.save(f, array)
    refused(project, "empty.cs", "no rows")
    result = noa("stats", "empty.cs", cwd=project)
    assert_user_error(result, "empty.cs", "no rows")
    assert result.stderr.count("empty.cs") == 1 and "row 1" not in result.stderr, result.stderr


def test_reports_refuse_as_outputs_do(project):
    (project / "Particles/Movies/mic0.mrcs").unlink()
    before = files(project)
    for operation in ("stats", "info"):
        assert_user_error(noa(operation, "particles.star", cwd=project), "particles.star",
                          "data_particles, row 1, rlnImageName", "No such file")
    assert files(project) == before


def two_optics_groups(project: Path) -> str:
    """The set as two optics groups of 1.5 and 1.6 Å (mic1's particles in the second): pixel sizes that differ
    between groups, as RELION allows."""
    text = (project / "particles.star").read_text()
    group = next(line for line in text.splitlines() if line.startswith("opticsGroup1"))
    text = text.replace(group, group + "\n" + group.replace("opticsGroup1            1", "opticsGroup2            2")
                        .replace("1.500000", "1.600000"))
    rows = [line[:line.rindex("1")] + "2 " if "@Particles/Movies/mic1.mrcs" in line else line
            for line in text.splitlines()]
    (project / "groups.star").write_text("\n".join(rows) + "\n")
    return "groups.star"


def test_resampling_optics_groups_of_different_pixel_sizes_is_refused(project):
    """Binning them wrote each group's old pixel size beside images of twice that; the new ones are unknown."""
    name = two_optics_groups(project)
    refused(project, name, "out.star", "pixel sizes of groups.star differ (1.5, 1.6 Å, rlnImagePixelSize)")


def test_optics_groups_of_different_pixel_sizes_keep_them_where_the_sampling_stays(project):
    name = two_optics_groups(project)
    done = noa("flip", name, "out.star", "--axis", "x", cwd=project)
    assert done.returncode == 0, done.stderr
    assert starfile.read(project / "out.star")["optics"]["rlnImagePixelSize"].tolist() == [1.5, 1.6]
    assert starfile.read(project / "out.star")["particles"]["rlnOpticsGroup"].tolist() == [1] * 5 + [2] * 6


def test_different_pixel_sizes_in_one_cryosparc_file(project):
    path = cs_file(project / "mixed.cs", [("Particles/Movies/mic0.mrcs", i) for i in range(3)])
    array = np.load(path)
    array["blob/psize_A"][2] = 1.25
    with open(path, "wb") as f:
        np.save(f, array)
    refused(project, "mixed.cs", "row 3, blob/psize_A: 1.25 Å, but row 1", "1.5 Å")


def test_a_full_disk_names_the_stack_being_written(project, monkeypatch):
    """A particle output's images go to its stack (``out.mrcs``): a full disk while they are written names it, not
    the particle file, and leaves neither."""
    def full_disk(*args) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full_disk)
    with pytest.raises(NoSpaceError) as full:
        execute(operations.get("bin"), [project / "particles.star"], project / "out.star",
                {"factor": 2, "project_dir": str(project)})
    assert str(full.value) == f"{project / 'out.mrcs'}: no space left on device"
    assert not (project / "out.star").exists() and not (project / "out.mrcs").exists()
