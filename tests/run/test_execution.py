"""The voxel limit of :func:`noa_core.run.execute` (a service's ``--max-voxels``) for each kind of operation: an
input over it refused from its header as it is read, naming it, with nothing written; at the limit, the call runs;
and the limit costs no second reading of an MRC's header (other formats are probed first: tests/io/test_formats.py);
several inputs are refused together from their headers, before any is read."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from helpers import write_mrc
from noa_core import operations
from noa_core.errors import LimitError
from noa_core.io import mrc
from noa_core.run import execute
from noa_core.run.execution import Limits

SHAPE = (4, 6, 10)  # D, H, W: 240 voxels
VOXELS = 240
CALLS = [("stats", {}, False), ("permute", {"axes": [0, 1, 3, 2]}, "out.mrc"), ("split", {}, "parts")]


@pytest.fixture
def volume(tmp_path):
    data = np.random.default_rng(3).normal(0, 1, SHAPE).astype(np.float32)
    write_mrc(tmp_path / "vol.mrc", data)
    return tmp_path / "vol.mrc", data


@pytest.mark.parametrize(("name", "values", "output"), CALLS, ids=[c[0] for c in CALLS])
def test_an_input_over_the_limit_is_refused_naming_it_and_nothing_is_written(volume, name, values, output):
    path, _ = volume
    out = path.parent / output if output else None
    with pytest.raises(LimitError) as refused:
        execute(operations.get(name), [path], out, values, limits=Limits(max_voxels=VOXELS - 1))
    assert str(refused.value) == f"{path}: shape (1, 4, 6, 10) has 240 voxels; the limit is 239"
    assert sorted(p.name for p in path.parent.iterdir()) == ["vol.mrc"]


@pytest.mark.parametrize(("name", "values", "output"), CALLS, ids=[c[0] for c in CALLS])
def test_at_the_limit_the_call_runs_reading_each_header_as_often_as_without_it(volume, monkeypatch, name, values,
                                                                               output):
    """Every input header read once: a permute of a volume that is not a cube, at the limit, runs (its input and
    output shapes' per-axis maximum, 400 voxels, was once taken for the output's)."""
    path, data = volume
    read_header = mrc._read_header
    reads: list[object] = []
    monkeypatch.setattr(mrc, "_read_header", lambda p, *args: reads.append(p) or read_header(p, *args))
    results, counts = [], []
    for limits in (Limits(), Limits(max_voxels=VOXELS)):
        reads.clear()
        out = path.parent / f"{limits.max_voxels}-{output}" if output else None
        result = execute(operations.get(name), [path], out, values, limits=limits)
        results.append({k: v for k, v in result.items() if k not in ("output", "outputs")})
        counts.append(reads.count(path))
    assert counts[0] == counts[1] >= 1, counts
    assert results[0] == results[1]
    if name == "stats":
        assert results[0]["mean"] == pytest.approx(float(data.mean(dtype=np.float64)), rel=1e-9)


def test_a_report_of_headers_alone_describes_an_input_over_the_limit(volume):
    path, _ = volume
    described = execute(operations.get("info"), [path], limits=Limits(max_voxels=VOXELS - 1))
    assert described["shape"] == [1, 4, 6, 10]


def test_several_inputs_whose_broadcast_is_over_the_limit_are_refused_before_any_is_read(tmp_path, monkeypatch):
    """ewise of a row and a column, each within the limit: their broadcast is refused from the headers alone, before a
    compressed input is decompressed."""
    for name, shape in (("row", (1, 1, 64)), ("column", (1, 64, 1))):
        write_mrc(tmp_path / f"{name}.mrc", np.ones(shape, np.float32))
        (tmp_path / f"{name}.mrc.gz").write_bytes(gzip.compress((tmp_path / f"{name}.mrc").read_bytes()))
    monkeypatch.setattr(mrc, "_read_data", lambda *args: pytest.fail("an input read before the refusal"))
    with pytest.raises(LimitError, match=r"^the output would have 4096 voxels; the limit is 4095$"):
        execute(operations.get("ewise"), [tmp_path / "row.mrc.gz", tmp_path / "column.mrc.gz"], tmp_path / "out.mrc",
                {"expression": "a + b"}, limits=Limits(max_voxels=4095))
    assert not (tmp_path / "out.mrc").exists()
