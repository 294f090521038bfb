"""The in-memory section functions (noa.sections, average) and range lists, against NumPy fancy indexing and
a reshape-mean."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as noa
from noa_core.errors import ParameterError
from noa_core.images import stacks
from tests.images.arrays import DTYPES, SETTINGS, as_array, shapes, values

# -- sections and average ------------------------------------------------------------------------------------


@given(ranges=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9)), min_size=1, max_size=12),
       start=st.integers(-60, 60), stop=st.integers(-60, 60))
@settings(max_examples=60, deadline=None)
def test_a_selection_indexes_as_the_list_it_stands_for(ranges, start, stop):
    """Issue 32 item 12: a range list is kept as ranges (10 KB of text named 125 million sections, listed one
    by one past 6.5 GB); indexing and slicing it must give what the listed sections would."""
    pairs = [(first, first + length) for first, length in ranges]
    listed = [i for first, last in pairs for i in range(first, last + 1)]
    selection = stacks.Selection(pairs)
    assert len(selection) == len(listed) and list(selection) == listed
    assert selection[start:stop] == listed[start:stop]
    for i in (0, -1, len(listed) // 2):
        assert selection[i] == listed[i]
    with pytest.raises(IndexError):
        selection[len(listed)]


def test_a_huge_range_list_is_checked_against_the_output_limit_before_anything_is_listed():
    from noa_core.errors import LimitError
    from noa_core.limits import voxel_limit

    text = ",".join(["0-99999"] * 1250)  # 125 million sections, 10 KB of text
    assert len(stacks.parse_ranges(text, 100_000, "keep", (100_000, 1, 2, 2))) == 125_000_000
    with voxel_limit(1_000_000), pytest.raises(LimitError, match="500000000 voxels; the limit is 1000000"):
        stacks.parse_ranges(text, 100_000, "keep", (100_000, 1, 2, 2))


def test_range_lists_parse_and_name_the_bad_part():
    assert list(stacks.parse_ranges("0-3,7, 5", 10, "keep")) == [0, 1, 2, 3, 7, 5]
    assert stacks.runs([0, 1, 2, 7, 5, 6]) == [(0, 0, 3), (3, 7, 1), (4, 5, 2)]
    for text, words in (("0-3,x", "'x' in '0-3,x' is not a section number"),
                        ("5-2", "range '5-2' runs backwards"),
                        ("0-10", "section 10 (in '0-10') is outside 0..9: the input has 10 sections"),
                        ("1,,2", "'' in '1,,2'"), ("-1", "'-1'")):
        with pytest.raises(ParameterError, match=re.escape(words)):
            stacks.parse_ranges(text, 10, "keep")
    with pytest.raises(ParameterError, match="drop: '0-2' drops every one of the 3 sections"):
        stacks.selected_sections((3, 1, 2, 2), None, "0-2")
    with pytest.raises(ParameterError, match="give either keep or drop"):
        stacks.selected_sections((3, 1, 2, 2), "1", "2")


def test_range_lists_counted_from_one_as_imod_counts_views():
    """IMOD's EXCLUDELIST 1-9,28-41 counts views from 1 (relion#838 read it wrongly): the indices are counted from
    0, and numbers outside 1..count are named in the user's counting."""
    assert list(stacks.parse_ranges("1-3,41", 41, "exclude", first=1)) == [0, 1, 2, 40]
    for text, words in (("0-3", "section 0 (in '0-3') is outside 1..41"),
                        ("40-42", "section 42 (in '40-42') is outside 1..41: the input has 41 sections")):
        with pytest.raises(ParameterError, match=re.escape(words)):
            stacks.parse_ranges(text, 41, "exclude", first=1)


@SETTINGS
@given(shape=shapes, order=st.sampled_from("CF"), data=st.data())
def test_sections_keep_and_drop_match_fancy_indexing(shape, order, data):
    array = values(shape)
    axis = 0 if shape[0] > 1 else 1
    count = shape[axis]
    keep = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=6))
    got = noa.sections(as_array(array, order), keep=",".join(map(str, keep))).numpy()
    np.testing.assert_array_equal(got, np.take(array, keep, axis=axis))
    drop = sorted(set(data.draw(st.lists(st.integers(0, count - 1), max_size=count - 1))))
    if len(drop) < count:
        left = [i for i in range(count) if i not in drop]
        got = noa.sections(as_array(array, order), drop=",".join(map(str, drop)) or None,
                           keep=None if drop else ",".join(map(str, left))).numpy()
        np.testing.assert_array_equal(got, np.take(array, left, axis=axis))


@SETTINGS
@given(shape=shapes, group=st.integers(1, 4), total=st.booleans(), dtype=st.sampled_from(DTYPES),
       order=st.sampled_from("CF"))
def test_average_is_a_reshape_mean_over_groups_of_sections(shape, group, total, dtype, order):
    axis = 0 if shape[0] > 1 else 1
    if group > shape[axis]:
        with pytest.raises(ParameterError, match=f"group: {group} is more than the {shape[axis]} section"):
            noa.average(values(shape, dtype), group)
        return
    data = values(shape, dtype)
    got = noa.average(as_array(data, order), group, total=total).numpy()
    n = shape[axis] // group
    kept = np.take(data, range(n * group), axis=axis)
    wide = kept.astype(np.complex128 if data.dtype.kind == "c" else np.float64)
    grouped = wide.reshape(shape[:axis] + (n, group) + shape[axis + 1:])
    expected = grouped.sum(axis=axis + 1) if total else grouped.mean(axis=axis + 1)
    assert got.dtype == (np.dtype(dtype) if dtype in ("float64", "complex64") else np.float32)
    np.testing.assert_allclose(got, expected.astype(got.dtype), rtol=1e-5, atol=1e-4)


def test_stack_functions_accept_numpy_and_refuse_vector_elements():
    from noa_core.errors import DTypeError

    assert noa.flip(np.arange(6, dtype=np.float32).reshape(2, 3), "x").numpy().reshape(2, 3)[0].tolist() == [2, 1, 0]
    with pytest.raises(DTypeError):
        noa.flip(noa.zeros((2, 1, 1, 1), dtype=noa.vector("float32", 3)), "x")


