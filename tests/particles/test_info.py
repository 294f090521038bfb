"""``info`` and ``check`` (noa_core.particles.info, .check) against starfile's counts and mrcfile's reading of
the stacks: counts per optics group, class and micrograph; every missing stack, section beyond its stack, box
that is not the optics table's and stack named .mrc found, one line each."""

from __future__ import annotations

import mrcfile
import numpy as np
import starfile

from noa_core.particles.check import check
from noa_core.particles.info import info
from tests.particles.tables import cs_file, optics_line, project, relion31


def test_counts_are_starfiles(tmp_path):
    folder = project(tmp_path)
    src = relion31(folder / "in.star", rows=50, groups=(1, 2),
                   optics=[optics_line("opticsGroup1", 1),
                           optics_line("fast", 2)])
    found = info(src, folder)
    frame = starfile.read(src)["particles"]
    assert found["layout"] == "RELION 3.1" and found["rows"] == 50 and found["columns"] == 15
    assert found["classes"] == {str(k): int(v) for k, v in sorted(frame["rlnClassNumber"].value_counts().items())}
    assert found["micrographs"] == {k: int(v) for k, v in sorted(frame["rlnMicrographName"].value_counts().items())}
    assert found["optics_groups"] == [{"group": 1, "name": "opticsGroup1", "particles": 25},
                                      {"group": 2, "name": "fast", "particles": 25}]
    assert found["stacks"] == {"count": 2, "missing": []}
    (folder / "Particles" / "Movies" / "mic1.mrcs").unlink()
    assert info(src, folder)["stacks"] == {"count": 2, "missing": ["Particles/Movies/mic1.mrcs"]}


def test_a_cs_file_counts_its_exposure_groups(tmp_path):
    src = cs_file(tmp_path / "in.cs", [("stack.mrcs", i) for i in range(6)])
    found = info(src, tmp_path)
    assert found["layout"] == "cryoSPARC" and found["rows"] == 6 and found["classes"] is None
    assert found["stacks"] == {"count": 1, "missing": ["stack.mrcs"]}


def test_a_sound_file_has_no_problems(tmp_path):
    folder = project(tmp_path)
    assert check(relion31(folder / "in.star", rows=30), folder) == []
    assert check(folder / "particles.star", folder) == []


def test_every_problem_is_one_line_naming_the_row(tmp_path):
    folder = project(tmp_path)
    with mrcfile.open(folder / "Particles" / "Movies" / "mic0.mrcs") as m:
        sections = m.data.shape[0]
    text = (folder / "particles.star").read_text()
    text = text.replace("000002@Particles/Movies/mic0.mrcs", f"{sections + 1:06d}@Particles/Movies/mic0.mrcs")
    text = text.replace("000003@Particles/Movies/mic0.mrcs", "000003@Particles/Movies/gone.mrcs")
    (folder / "Particles" / "Movies" / "mic1.mrcs").rename(folder / "Particles" / "Movies" / "mic1.mrc")
    text = text.replace("Particles/Movies/mic1.mrcs", "Particles/Movies/mic1.mrc")
    (folder / "bad.star").write_text(text)
    problems = check(folder / "bad.star", folder)
    assert len(problems) == 3, problems
    assert "row 2, rlnImageName: section 6 of Particles/Movies/mic0.mrcs, which holds 5" in problems[0]
    assert "row 3, rlnImageName: Particles/Movies/gone.mrcs: no such file (1 row(s) name it)" in problems[1]
    assert "row 6, rlnImageName: Particles/Movies/mic1.mrc is named .mrc" in problems[2]


def test_a_box_the_stacks_do_not_hold_is_named(tmp_path):
    folder = project(tmp_path)
    text = (folder / "particles.star").read_text().replace("           32            2", "           64            2")
    (folder / "big.star").write_text(text)
    problems = check(folder / "big.star", folder)
    with mrcfile.open(folder / "Particles" / "Movies" / "mic0.mrcs") as m:
        width = m.data.shape[-1]
    assert problems == [f"{folder / 'big.star'}: data_particles, row 1, rlnImageSize: 64, but "
                        f"Particles/Movies/mic0.mrcs holds {width} x {width} images (5 row(s))",
                        f"{folder / 'big.star'}: data_particles, row 6, rlnImageSize: 64, but "
                        f"Particles/Movies/mic1.mrcs holds {width} x {width} images (6 row(s))"]
    assert np.array_equal(starfile.read(folder / "big.star")["optics"]["rlnImageSize"], [64])
