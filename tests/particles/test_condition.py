"""The grammar of row ranges and conditions (noa_core.particles.condition) against Python's own sets and NumPy's
comparisons of the same values; text that is not a condition refused, never evaluated."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noa_core.errors import ParameterError
from noa_core.particles import condition

ranges = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20), st.booleans()), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(ranges, st.integers(81, 90))
def test_row_ranges_choose_the_rows_python_counts(parts, count):
    spec, expected = [], set()
    for first, length, single in parts:
        if single:
            spec.append(str(first))
            expected.add(first)
        else:
            spec.append(f"{first}-{first + length}")
            expected.update(range(first, first + length + 1))
    chosen = condition.parse_rows(",".join(spec), count)
    assert set(np.flatnonzero(chosen).tolist()) == expected


def test_an_open_range_runs_to_the_last_row():
    assert np.flatnonzero(condition.parse_rows("7-", 10)).tolist() == [7, 8, 9]


@pytest.mark.parametrize("spec, fragment", [("5-2", "ends before"), ("12", "has 10 rows"), ("a-3", "not a row"),
                                            ("1,,2", "not a row"), ("-3", "not a row")])
def test_bad_ranges_are_named(spec, fragment):
    with pytest.raises(ParameterError, match=fragment) as caught:
        condition.parse_rows(spec, 10)
    assert caught.value.param == "rows"


VALUES = {"rlnClassNumber": np.array([1, 3, 5, 3, 2, 5, 4], float),
          "rlnDefocusU": np.array([15000, 25000, 18000, 21000, 19999, 20000, 30000], float),
          "rlnMicrographName": np.array([b"a.mrc", b"b.mrc", b"a.mrc", b"c.mrc", b"b.mrc", b"a.mrc", b"c.mrc"])}


def evaluated(text: str) -> np.ndarray:
    return condition.evaluate(condition.parse(text), VALUES.__getitem__, VALUES.__getitem__)


@pytest.mark.parametrize("text, expected", [
    ("rlnClassNumber in (3, 5)", np.isin(VALUES["rlnClassNumber"], [3, 5])),
    ("rlnDefocusU < 20000", VALUES["rlnDefocusU"] < 20000),
    ("rlnClassNumber in (3, 5) and rlnDefocusU < 20000",
     np.isin(VALUES["rlnClassNumber"], [3, 5]) & (VALUES["rlnDefocusU"] < 20000)),
    ("rlnClassNumber == 1 or rlnClassNumber >= 5 and rlnDefocusU > 25000",  # and binds tighter than or
     (VALUES["rlnClassNumber"] == 1) | ((VALUES["rlnClassNumber"] >= 5) & (VALUES["rlnDefocusU"] > 25000))),
    ("(rlnClassNumber == 1 or rlnClassNumber >= 5) and rlnDefocusU > 25000",
     ((VALUES["rlnClassNumber"] == 1) | (VALUES["rlnClassNumber"] >= 5)) & (VALUES["rlnDefocusU"] > 25000)),
    ("not rlnClassNumber not in (3)", VALUES["rlnClassNumber"] == 3),
    ("rlnMicrographName == 'a.mrc'", VALUES["rlnMicrographName"] == b"a.mrc"),
    ('rlnMicrographName in ("b.mrc", "c.mrc") AND rlnDefocusU != 2e4',
     np.isin(VALUES["rlnMicrographName"], [b"b.mrc", b"c.mrc"]) & (VALUES["rlnDefocusU"] != 20000)),
    ("rlnDefocusU<=-1e3", VALUES["rlnDefocusU"] <= -1000),
])
def test_conditions_choose_what_numpy_chooses(text, expected):
    assert evaluated(text).tolist() == np.asarray(expected).tolist()


@pytest.mark.parametrize("text, fragment", [
    ("", "empty"),
    ("__import__('os').system('true')", "cannot read"),
    ("__import__('os')", "expected a comparison"),
    ("rlnClassNumber + 1 > 2", "cannot read"),
    ("rlnClassNumber in (1, 'a')", "mix numbers"),
    ("rlnClassNumber > ", "expected a number or quoted text"),
    ("rlnClassNumber > 2 rlnDefocusU < 3", "expected and, or or the end"),
    ("(rlnClassNumber > 2", "expected ')'"),
    ("3 < rlnClassNumber", "expected a column name"),
])
def test_text_that_is_not_a_condition_is_refused_naming_where(text, fragment):
    with pytest.raises(ParameterError, match=fragment.replace("(", r"\(").replace(")", r"\)")) as caught:
        condition.parse(text)
    assert caught.value.param == "where"


def test_the_columns_a_condition_names_are_listed_once():
    assert condition.columns(condition.parse("a > 1 and (b < 2 or a == 3) and not c in ('x')")) == ["a", "b", "c"]
