"""``join`` (noa_core.particles.join) against RELION's relion_star_handler --combine and starfile: the rows of
every file in order, identical optics groups merged, the others renumbered with their particles; files of other
layouts or columns refused naming the file and the column."""

from __future__ import annotations

import numpy as np
import pytest
import starfile

from noa_core.io.particle_files import ParticleError
from noa_core.particles.join import join
from tests.helpers import relion
from tests.particles.tables import LABELS, loop, optics_line, particle_lines, relion31


def group_values(path, column="rlnImagePixelSize"):
    """Each particle's optics value ``column``, through its rlnOpticsGroup."""
    tables = starfile.read(path)
    optics = tables["optics"].set_index("rlnOpticsGroup")[column]
    return optics[tables["particles"]["rlnOpticsGroup"]].to_numpy()


@pytest.fixture()
def pair(tmp_path):
    first = relion31(tmp_path / "a.star", rows=12, seed=1)
    # the second's group 1 is new (1.0 Å), its group 2 is the first's group 1 row for row
    second = relion31(tmp_path / "b.star", rows=9, seed=2, groups=(1, 2),
                      optics=[optics_line("opticsGroupB", 1, pixel_size=1.0), optics_line("opticsGroup1", 2)])
    return first, second


def test_joined_files_are_what_relion_star_handler_combines(tmp_path, pair):
    first, second = pair
    result = join([first, second], tmp_path / "noa.star")
    relion("relion_star_handler", "--combine", "--i", f"{first} {second}", "--o", tmp_path / "relion.star")
    ours, theirs = starfile.read(tmp_path / "noa.star"), starfile.read(tmp_path / "relion.star")
    assert result.rows == 21 and result.groups == 2 and len(ours["optics"]) == len(theirs["optics"]) == 2
    assert ours["particles"]["rlnImageName"].tolist() == theirs["particles"]["rlnImageName"].tolist()
    assert ours["particles"]["rlnOpticsGroup"].tolist() == theirs["particles"]["rlnOpticsGroup"].tolist()
    assert np.array_equal(group_values(tmp_path / "noa.star"), group_values(tmp_path / "relion.star"))
    assert np.array_equal(group_values(tmp_path / "noa.star"), np.concatenate([
        group_values(first), group_values(second)]))


def test_every_value_but_the_renumbered_group_is_copied_as_written(tmp_path, pair):
    first, second = pair
    join([first, second], tmp_path / "out.star")
    text = (tmp_path / "out.star").read_bytes()
    first_text = first.read_bytes()
    head = first_text[:first_text.index(b"data_particles")]
    assert text.startswith(head.split(b"opticsGroup1")[0])  # the first file's optics labels and its row
    rows = text[text.index(b"_rlnRandomSubset #15 \n") + len(b"_rlnRandomSubset #15 \n"):].split(b"\n")
    rows = [r for r in rows if r.strip()]
    inputs = [r for path in (first, second) for r in path.read_bytes().split(b"\n")
              if b"@Particles" in r]
    for got, was in zip(rows, inputs):
        assert got.split()[:4] == was.split()[:4] and got.split()[5:] == was.split()[5:]
    assert rows[:12] == inputs[:12]  # the first file's groups keep their numbers: its rows are as written


def test_files_of_relion_30_join_without_optics(tmp_path):
    labels = [label for label in LABELS if label != "rlnOpticsGroup"]
    lines = [" ".join(line.split()[:4] + line.split()[5:]) for line in particle_lines(6)]
    for name in ("a", "b"):
        (tmp_path / f"{name}.star").write_text(loop("", labels, lines).replace("# version 30001\n", ""))
    result = join([tmp_path / "a.star", tmp_path / "b.star"], tmp_path / "out.star")
    assert result.rows == 12 and result.groups == 0
    frame = starfile.read(tmp_path / "out.star")
    assert frame["rlnImageName"].tolist() == starfile.read(tmp_path / "a.star")["rlnImageName"].tolist() * 2


def test_files_of_other_columns_or_layouts_are_refused(tmp_path, pair):
    first, _ = pair
    other = tmp_path / "c.star"
    other.write_text(first.read_text().replace("_rlnRandomSubset #15", "_rlnGroupNumber #15"))
    with pytest.raises(ParticleError, match=r"c\.star: data_particles lacks rlnRandomSubset"):
        join([first, other], tmp_path / "out.star")
    old = tmp_path / "old.star"
    old.write_text(loop("", ["rlnImageName"], ["000001@Particles/Movies/mic0.mrcs"]))
    with pytest.raises(ParticleError, match=r"RELION 3\.0 layout"):
        join([first, old], tmp_path / "out.star")
    assert not (tmp_path / "out.star").exists()
