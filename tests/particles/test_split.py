"""``split`` (noa_core.particles.split) against RELION's relion_star_handler --split and starfile's grouping:
each output holds its rows as the input wrote them, under the input's every other byte; all outputs placed or
none."""

from __future__ import annotations

import pytest
import starfile

from noa_core.errors import OutputExistsError, ParameterError
from noa_core.particles.split import split
from tests.helpers import relion
from tests.particles.tables import relion31


def test_parts_are_what_relion_star_handler_splits(tmp_path):
    src = relion31(tmp_path / "in.star", rows=11)
    parts = split(src, tmp_path / "noa", parts=3)
    relion("relion_star_handler", "--i", src, "--o", tmp_path / "relion.star", "--split", "--nr_split", 3)
    assert [p.rows for p in parts] == [4, 4, 3]
    for k, part in enumerate(parts, 1):
        assert part.path == tmp_path / f"noa_split{k}.star"
        ours, theirs = starfile.read(part.path), starfile.read(tmp_path / f"relion_split{k}.star")
        assert ours["particles"]["rlnImageName"].tolist() == theirs["particles"]["rlnImageName"].tolist()
        assert ours["optics"].equals(starfile.read(src)["optics"])


def test_by_a_column_each_value_gets_its_rows_in_order(tmp_path):
    src = relion31(tmp_path / "in.star", rows=40)
    (tmp_path / "classes").mkdir()
    parts = split(src, tmp_path / "classes", by="rlnClassNumber")
    frame = starfile.read(src)["particles"]
    text = src.read_bytes()
    head = text[:text.index(b"_rlnRandomSubset #15 \n") + len(b"_rlnRandomSubset #15 \n")]
    assert sorted(int(p.value) for p in parts) == sorted(frame["rlnClassNumber"].unique().tolist())
    assert sum(p.rows for p in parts) == 40
    for part in parts:
        assert part.path == tmp_path / "classes" / f"in_rlnClassNumber_{part.value}.star"
        expected = frame[frame["rlnClassNumber"] == int(part.value)]
        assert starfile.read(part.path)["particles"]["rlnImageName"].tolist() == expected["rlnImageName"].tolist()
        assert part.path.read_bytes().startswith(head)


def test_values_become_safe_file_names(tmp_path):
    src = relion31(tmp_path / "in.star", rows=11)
    parts = split(src, by="rlnMicrographName")
    assert [p.path.name for p in parts] == ["in_rlnMicrographName_Movies_mic0.mrc.star",
                                            "in_rlnMicrographName_Movies_mic1.mrc.star"]


def test_one_existing_output_stops_them_all(tmp_path):
    src = relion31(tmp_path / "in.star", rows=11)
    (tmp_path / "in_split2.star").write_text("kept")
    with pytest.raises(OutputExistsError):
        split(src, parts=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.star", "in_split2.star"]


@pytest.mark.parametrize("options, fragment", [({}, "one of the two"), ({"by": "rlnClass"}, "closest: rlnClassNumber"),
                                               ({"parts": 12}, "between 1 and the file's 11 rows"),
                                               ({"by": "rlnClassNumber", "parts": 2}, "one of the two")])
def test_bad_choices_are_named(tmp_path, options, fragment):
    src = relion31(tmp_path / "in.star", rows=11)
    with pytest.raises(ParameterError, match=fragment):
        split(src, **options)
    assert [p.name for p in tmp_path.iterdir()] == ["in.star"]
