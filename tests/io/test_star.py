"""STAR text (noa_core.io.star) against starfile (teamtomo), the reference reader, on RELION's files and on
tables hypothesis makes: values read as starfile reads them, files written back byte for byte, rows selected
and values replaced or added as starfile then reads them, and malformed files refused naming the row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import starfile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noa_core.io import star
from tests.helpers import REPO

STAR_DATA = REPO / "tests" / "data" / "star"
PARTICLES = REPO / "tests" / "data" / "relion_particles" / "particles.star"
REAL = sorted(STAR_DATA.glob("*.star")) + [PARTICLES]


def _text(pieces) -> bytes:
    return b"".join(bytes(memoryview(p)) for p in pieces)


def _oracle(path: Path) -> dict[str, pd.DataFrame | dict]:
    data = starfile.read(path, always_dict=True)
    return data


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_files_are_written_back_byte_for_byte(path, tmp_path):
    text = star.read(path)
    assert _text(text.edited()) == path.read_bytes()
    out = tmp_path / "out.star"
    star.write(out, text.edited())
    assert out.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_files_read_as_starfile_reads_them(path):
    text = star.read(path)
    oracle = _oracle(path)
    assert [b.name for b in text] == list(oracle)
    for block in text:
        expected = oracle[block.name]
        if not block.loop:
            assert isinstance(expected, dict)
            assert list(block.pairs) == list(expected)
            for label, value in block.pairs.items():
                assert _same_value(value, expected[label]), (label, value, expected[label])
            continue
        assert list(block.labels) == list(expected.columns)
        assert block.rows == len(expected)
        for label in block.labels:
            column = expected[label]
            if pd.api.types.is_numeric_dtype(column):
                values = text.values(block, label)
                empty = values == b""  # starfile reads "" in a column of numbers as NaN; noa refuses it as a number
                assert np.isnan(column.to_numpy(float)[empty]).all()
                np.testing.assert_allclose(values[~empty].astype(float), column.to_numpy(float)[~empty], rtol=1e-12)
            else:
                assert [v.decode() for v in text.values(block, label).tolist()] == column.astype(str).tolist()


def _same_value(text: str, value) -> bool:
    if isinstance(value, (int, float, np.number)):
        return float(text) == pytest.approx(float(value))
    return text == str(value)


def test_relion_particles_name_their_images():
    text = star.read(PARTICLES)
    particles = text.block("particles")
    names = text.values(particles, "rlnImageName")
    assert names[0] == b"000001@Particles/Movies/mic0.mrcs" and len(names) == 11
    assert text.numbers(text.block("optics"), "rlnImageSize").tolist() == [32.0]


# -- tables hypothesis makes -----------------------------------------------------------------------------

_LABELS = st.lists(st.from_regex(r"rln[A-Z][A-Za-z]{0,12}", fullmatch=True), min_size=1, max_size=6, unique=True)
_WORDS = st.from_regex(r"[A-Za-z0-9_./@>-]{1,12}", fullmatch=True)
_SPACED = st.from_regex(r"[A-Za-z0-9]{1,5} [A-Za-z0-9]{1,5}", fullmatch=True)


@st.composite
def tables(draw):
    labels = draw(_LABELS)
    rows = draw(st.integers(0, 30))
    columns = {}
    for label in labels:
        kind = draw(st.sampled_from(["float", "int", "word", "spaced"]))
        if kind == "float":
            values = draw(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=rows, max_size=rows))
            columns[label] = np.array(values, np.float64)
        elif kind == "int":
            columns[label] = np.array(draw(st.lists(st.integers(-10**9, 10**9), min_size=rows, max_size=rows)),
                                      np.int64)
        else:
            pool = _WORDS if kind == "word" else _SPACED
            columns[label] = np.array(draw(st.lists(pool, min_size=rows, max_size=rows)), "U")
    return columns


def test_values_that_begin_as_labels_comments_or_keywords_are_quoted(tmp_path):
    """A row whose first value is _0 was written bare and read back as the label _0 (hypothesis found it): such
    values, and those beginning as a comment or a keyword, are quoted, and noa and starfile read them back."""
    path = tmp_path / "q.star"
    words = np.array(["_0", "#x", "data_y", "loop_", "plain"], "U")
    star.write(path, star.loop_text("particles", {"rlnA": words, "rlnB": np.arange(5)}), overwrite=True)
    text = star.read(path)
    block = text.block("particles")
    assert block.rows == 5 and [v.decode() for v in text.values(block, "rlnA").tolist()] == words.tolist()
    assert starfile.read(path, always_dict=True)["particles"]["rlnA"].tolist() == words.tolist()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(columns=tables(), data=st.data())
def test_written_tables_read_back_and_as_starfile_reads_them(tmp_path, columns, data):
    path = tmp_path / "t.star"
    star.write(path, star.loop_text("particles", columns), overwrite=True)
    text = star.read(path)
    block = text.block("particles")
    count = len(next(iter(columns.values())))
    assert block.rows == count
    for label, values in columns.items():
        if values.dtype.kind in "fi":
            np.testing.assert_array_equal(text.numbers(block, label, values.dtype.type), values)
        else:
            assert [v.decode() for v in text.values(block, label).tolist()] == values.tolist()
    if count:
        frame = starfile.read(path, always_dict=True)["particles"]
        for label, values in columns.items():
            if values.dtype.kind in "fi":
                np.testing.assert_allclose(frame[label].to_numpy(float), values.astype(float))
    # rows chosen, one column replaced, one added: what starfile reads is the frame edited the same way
    rows = np.array(data.draw(st.lists(st.integers(0, max(count - 1, 0)), max_size=count)) if count else [], np.int64)
    first = next(iter(columns))
    new_values = np.array([f"new{i}" for i in range(len(rows))], "S")
    edit = star.LoopEdit(rows=rows, replace={first: new_values}, add={"rlnAdded": np.arange(len(rows))})
    out = tmp_path / "edited.star"
    star.write(out, text.edited({"particles": edit}), overwrite=True)
    again = star.read(out)
    edited = again.block("particles")
    assert edited.labels == (*columns, "rlnAdded") and edited.rows == len(rows)
    assert again.values(edited, first).tolist() == new_values.tolist()
    assert again.numbers(edited, "rlnAdded", np.int64).tolist() == list(range(len(rows)))
    for label, values in list(columns.items())[1:]:
        if values.dtype.kind in "fi":
            np.testing.assert_array_equal(again.numbers(edited, label, values.dtype.type), values[rows])
        else:
            assert [v.decode() for v in again.values(edited, label).tolist()] == values[rows].tolist()


def test_selecting_rows_of_a_relion_file_keeps_every_other_byte(tmp_path):
    text = star.read(PARTICLES)
    out = tmp_path / "sel.star"
    star.write(out, text.edited({"particles": star.LoopEdit(rows=np.array([3, 0, 10]))}))
    before = starfile.read(PARTICLES)
    after = starfile.read(out)
    pd.testing.assert_frame_equal(after["particles"], before["particles"].iloc[[3, 0, 10]].reset_index(drop=True))
    pd.testing.assert_frame_equal(after["optics"], before["optics"])
    lines = out.read_bytes().splitlines()
    original = PARTICLES.read_bytes().splitlines()
    kept = [line for line in lines if line not in original]
    assert kept == []  # every line of the output is a line of the input, spacing and all


def test_pairs_are_changed_in_place(tmp_path):
    path = STAR_DATA / "postprocess.star"
    text = star.read(path)
    out = tmp_path / "p.star"
    star.write(out, text.edited(pairs={"general": {"rlnFinalResolution": "3.5"}}))
    assert starfile.read(out)["general"]["rlnFinalResolution"] == 3.5
    assert starfile.read(out)["general"]["rlnBfactorUsedForSharpening"] == \
        starfile.read(path)["general"]["rlnBfactorUsedForSharpening"]


def test_a_million_rows_are_indexed_without_parsing_them(tmp_path):
    rows = 200_000
    names = np.strings.add(np.strings.zfill(np.arange(1, rows + 1).astype("S"), 6), b"@Particles/stack.mrcs")
    path = tmp_path / "big.star"
    star.write(path, star.loop_text("particles", {"rlnImageName": names, "rlnDefocusU": np.linspace(1e4, 3e4, rows)}))
    text = star.read(path)
    block = text.block("particles")
    assert block.rows == rows
    np.testing.assert_array_equal(text.values(block, "rlnImageName"), names)
    np.testing.assert_array_equal(text.numbers(block, "rlnDefocusU"), np.linspace(1e4, 3e4, rows))


# -- malformed files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "fragments"), [
    ("data_p\nloop_\n_rlnA #1\n_rlnB #2\n_rlnC #3\n1 2 3\n4 5\n", ["data_p, row 2 (line 7)", "2 values for 3 columns"]),
    ("data_p\nloop_\n_rlnA #1\n_rlnB #2\n1 2\n1 2 3\n", ["row 2", "3 values for 2 columns"]),
    ("data_p\nloop_\n_rlnA #1\n_rlnA #2\n1 2\n", ["rlnA is given twice", "columns 1 and 2"]),
    ("data_p\nloop_\n\n", ["loop_ with no labels"]),
    ("_rlnA 1\n", ["line 1", "before any data_ block"]),
    ("data_p\n_rlnA\n", ["_rlnA: no value"]),
    ("data_p\n_rlnA 1\n_rlnA 2\n", ["_rlnA is given twice"]),
    ("data_p\nloop_\n_rlnA #1\n1\n\nstray\n", ["line 6", "outside any block", "after data_p's rows"]),
    ("data_p\n_rlnA 1\nloop_\n_rlnB\n2\n", ["a loop_ after the block's pairs"]),
    ("data_p\nhello\n", ["data_p, line 2", "neither a _label nor loop_"]),
])
def test_malformed_files_are_refused_naming_the_place(tmp_path, text, fragments):
    path = tmp_path / "bad.star"
    path.write_text(text)
    with pytest.raises(star.StarError) as caught:
        star.read(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_a_value_that_is_no_number_is_named(tmp_path):
    path = tmp_path / "p.star"
    path.write_text("data_particles\nloop_\n_rlnDefocusU #1\n1.5\n2.5\nabc\n")
    text = star.read(path)
    with pytest.raises(star.StarError, match=r"data_particles, row 3, rlnDefocusU: 'abc' is not a number"):
        text.numbers(text.block("particles"), "rlnDefocusU")


def test_missing_blocks_and_columns_are_named(tmp_path):
    text = star.read(PARTICLES)
    with pytest.raises(star.StarError, match=r"no data_images block .it has data_optics, data_particles."):
        text.block("images")
    with pytest.raises(star.StarError, match="data_particles has no rlnDefocusU column"):
        text.values(text.block("particles"), "rlnDefocusU")
    with pytest.raises(Exception, match="no such file"):
        star.read(tmp_path / "absent.star")


def test_quoted_values_and_comments(tmp_path):
    path = tmp_path / "q.star"
    path.write_text("# made by hand\ndata_x\n\nloop_\n# a comment among the labels\n_rlnA #1\n_rlnB #2\n"
                    "'a b' 1\n\"c d\" 2\n\n")
    text = star.read(path)
    block = text.block("x")
    assert text.values(block, "rlnA").tolist() == [b"a b", b"c d"]
    assert _text(text.edited()) == path.read_bytes()


def test_the_row_kernel_is_compiled_for_read_only_text_alone(tmp_path):
    """A new table and an edited file's rows are assembled from text numba sees as one type (read-only), so the
    kernel has one compiled version, not one per way in."""
    from noa_core.kernels import star as star_kernels

    path = tmp_path / "t.star"
    star.write(path, star.loop_text("particles", {"rlnA": np.arange(4), "rlnB": np.linspace(0, 1, 4)}))
    text = star.read(path)
    star.write(tmp_path / "e.star", text.edited({"particles": star.LoopEdit(rows=np.array([2, 0]))}))
    assert star.read(tmp_path / "e.star").block("particles").rows == 2
    signatures = star_kernels.assemble_rows.signatures
    assert signatures and all(not signature[0].mutable for signature in signatures)
