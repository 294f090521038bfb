"""``select`` (noa_core.particles.select) against starfile reading the same rows and RELION's
relion_star_handler --select choosing them: the rows kept are the lines of the input, byte for byte, under the
input's every other byte; bad choices refused naming the option, the file unchanged, no output."""

from __future__ import annotations

import numpy as np
import pytest
import starfile

from noa_core.errors import FileFormatError, OutputExistsError, ParameterError
from noa_core.particles.select import select
from tests.helpers import relion
from tests.particles.tables import cs_file, relion31


def lines_of(path):
    """The input's text split where its particles' rows start and end (head, rows, tail)."""
    text = path.read_bytes()
    head, _, rest = text.partition(b"_rlnRandomSubset #15 \n")
    rows = rest.split(b"\n")
    body = [line + b"\n" for line in rows if line.strip()]
    return head + b"_rlnRandomSubset #15 \n", body, b" \n"


def test_a_condition_keeps_the_rows_starfile_chooses_and_every_other_byte(tmp_path):
    src = relion31(tmp_path / "in.star", rows=60)
    before = src.read_bytes()
    result = select(src, tmp_path / "out.star", where="rlnClassNumber in (3, 5) and rlnDefocusU < 20000")
    frame = starfile.read(src)["particles"]
    expected = np.flatnonzero(frame["rlnClassNumber"].isin([3, 5]) & (frame["rlnDefocusU"] < 20000))
    assert 0 < result.kept == expected.size < 60
    head, body, tail = lines_of(src)
    assert (tmp_path / "out.star").read_bytes() == head + b"".join(body[i] for i in expected) + tail
    assert src.read_bytes() == before
    out = starfile.read(tmp_path / "out.star")
    assert out["optics"].equals(starfile.read(src)["optics"])


def test_rows_and_a_condition_keep_the_rows_both_choose(tmp_path):
    src = relion31(tmp_path / "in.star", rows=30)
    select(src, tmp_path / "out.star", rows="0-9,20-", where="rlnMicrographName == 'Movies/mic1.mrc'")
    frame = starfile.read(src)["particles"]
    chosen = set(range(10)) | set(range(20, 30))
    expected = [i for i in range(30) if i in chosen and frame["rlnMicrographName"][i] == "Movies/mic1.mrc"]
    out = starfile.read(tmp_path / "out.star")["particles"]
    assert out["rlnImageName"].tolist() == frame["rlnImageName"][expected].tolist()


@pytest.mark.parametrize("low, high", [(3, 5), (2, 2)])
def test_a_range_of_classes_is_what_relion_star_handler_selects(tmp_path, low, high):
    src = relion31(tmp_path / "in.star", rows=50, seed=3)
    relion("relion_star_handler", "--i", src, "--o", tmp_path / "relion.star", "--select", "rlnClassNumber",
           "--minval", low, "--maxval", high)
    select(src, tmp_path / "noa.star", where=f"rlnClassNumber >= {low} and rlnClassNumber <= {high}")
    theirs = starfile.read(tmp_path / "relion.star")["particles"]
    ours = starfile.read(tmp_path / "noa.star")["particles"]
    assert ours["rlnImageName"].tolist() == theirs["rlnImageName"].tolist()
    assert np.allclose(ours["rlnDefocusU"], theirs["rlnDefocusU"])


def test_a_cs_file_keeps_the_rows_numpy_chooses(tmp_path):
    src = cs_file(tmp_path / "in.cs", [("stack.mrcs", i) for i in range(20)])
    select(src, tmp_path / "out.cs", where="ctf/df1_A > 15000 or blob/idx in (0, 1)")
    array = np.load(src)
    expected = array[(array["ctf/df1_A"] > 15000) | np.isin(array["blob/idx"], [0, 1])]
    got = np.load(tmp_path / "out.cs")
    assert got.dtype == array.dtype and got.tobytes() == expected.tobytes()


def test_an_unknown_column_is_named_with_the_closest(tmp_path):
    src = relion31(tmp_path / "in.star", rows=5)
    with pytest.raises(ParameterError, match="no column rlnClassNum; the closest: rlnClassNumber") as caught:
        select(src, tmp_path / "out.star", where="rlnClassNum == 3")
    assert caught.value.param == "where" and not (tmp_path / "out.star").exists()


def test_text_that_is_not_a_number_is_named_by_row(tmp_path):
    src = relion31(tmp_path / "in.star", rows=5)
    with pytest.raises(FileFormatError, match=r"row 1, rlnMicrographName: 'Movies/mic0\.mrc' is not a number"):
        select(src, tmp_path / "out.star", where="rlnMicrographName > 3")
    assert not (tmp_path / "out.star").exists()


def test_an_existing_output_or_the_input_itself_is_refused(tmp_path):
    src = relion31(tmp_path / "in.star", rows=5)
    before = src.read_bytes()
    (tmp_path / "out.star").write_text("kept")
    with pytest.raises(OutputExistsError):
        select(src, tmp_path / "out.star", rows="0")
    with pytest.raises(OutputExistsError, match="is the input"):
        select(src, src, rows="0", overwrite=True)
    assert (tmp_path / "out.star").read_text() == "kept" and src.read_bytes() == before
