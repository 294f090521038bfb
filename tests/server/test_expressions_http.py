"""Hostile expressions over HTTP (issue 20, items 7-9): a 400 problem at once, never a 500 or a hang,
and the service keeps answering on the same connection."""

from __future__ import annotations

import time

import numpy as np
import pytest

from helpers import assert_problem, load, write_mrc

KEY = "test-key-123"
AUTH = {"X-API-Key": KEY}
DATA = np.array([[-128, -1, 0, 1], [2, 5, 100, 127]], dtype=np.int8)


@pytest.fixture
def root(tmp_path):
    data = tmp_path / "root"
    data.mkdir()
    write_mrc(data / "a.mrc", DATA)
    return data


@pytest.fixture
def client(root, make_client):
    return make_client(data_root=root, api_key=KEY)


@pytest.mark.parametrize("expression,detail", [
    ("a + 9**9**9", "too large a number"),
    ("a + 2**100000", "too large a number"),
    ("a * 1000", "'1000' is out of range for int8"),
    ("1 // 0 + a", "divides by zero"),
    ("a ** -1", "negative power"),
    ("+".join(["a"] * 1000), "nested more than 100 levels"),
])
def test_hostile_expressions_are_400_and_the_service_keeps_answering(client, root, expression, detail):
    start = time.monotonic()
    response = client.post("/v1/paths/ewise", json={"expression": expression, "srcs": ["a.mrc"], "dst": "o.mrc"},
                           headers=AUTH)
    problem = assert_problem(response, 400, "invalid-expression")
    assert detail in problem["detail"] and "\n" not in problem["detail"]
    assert time.monotonic() - start < 10
    assert sorted(p.name for p in root.iterdir() if p.name != ".noa-jobs") == ["a.mrc"]  # no output, no temporary
    # The same client (connection) answers the next request.
    assert client.get("/healthz").status_code == 200
    done = client.post("/v1/paths/ewise", json={"expression": "(a * 100) // 7", "srcs": ["a.mrc"], "dst": "o.mrc"},
                       headers=AUTH)
    assert done.status_code == 201, done.text
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(load(root / "o.mrc").reshape(DATA.shape), (DATA * 100) // 7)
