"""Uploads that claim or expand to far more voxels than the service allows (issue 20, item 12): the
limit is checked from the headers, before any data are decompressed."""

from __future__ import annotations

import bz2
import subprocess
import sys
from pathlib import Path

import mrcfile
import numpy as np
import pytest

from helpers import assert_problem

MAX_VOXELS = 1000
SHAPE = (16, 1024, 1024)  # nz, ny, nx: 64 MiB of float32
DATA_BYTES = 4 * SHAPE[0] * SHAPE[1] * SHAPE[2]


@pytest.fixture
def client(make_client):
    return make_client(max_voxels=MAX_VOXELS)


def claiming_header(tmp_path: Path) -> bytes:
    """1024 header bytes, written by mrcfile, of a float32 volume of SHAPE."""
    with mrcfile.new(tmp_path / "h.mrc", np.zeros((1, 1, 1), np.float32), overwrite=True) as f:
        f.header.nz, f.header.ny, f.header.nx = SHAPE
    return (tmp_path / "h.mrc").read_bytes()[:1024]


def zeros_bz2(header: bytes) -> bytes:
    """``header`` then DATA_BYTES zeros, bzip2-compressed (a few hundred bytes)."""
    compressor = bz2.BZ2Compressor()
    block = bytes(DATA_BYTES // SHAPE[0])
    return b"".join([compressor.compress(header), *(compressor.compress(block) for _ in range(SHAPE[0])),
                     compressor.flush()])


@pytest.mark.parametrize("operation", ["copy", "stats", "permute"])
def test_the_voxel_limit_comes_before_any_data_is_read(client, tmp_path, operation):
    """A stream holding the header alone: reading any data would fail as truncated; the limit answers first."""
    sent = bz2.compress(claiming_header(tmp_path))
    form = {"axes": ["0", "1", "3", "2"]} if operation == "permute" else {}
    response = client.post(f"/v1/upload/{operation}", data=form, files={"file": ("bomb.mrc.bz2", sent)})
    body = assert_problem(response, 422, "too-many-voxels")
    assert f"limit is {MAX_VOXELS}" in body["detail"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_bzip2_bomb_upload_is_refused_without_decompressing_it(tmp_path):
    """The upload route's own code (run_on_uploads) in a process of its own (tracemalloc beside the service's
    warmup threads is not safe): the refusal allocates less than an eighth of what the stream expands to."""
    sent = zeros_bz2(claiming_header(tmp_path))
    assert len(sent) < 4096 and len(bz2.decompress(sent)) == 1024 + DATA_BYTES  # the oracle: what it holds
    (tmp_path / "bomb.mrc.bz2").write_bytes(sent)
    script = f"""
import sys, tracemalloc
from noa_core import operations
from noa_server.models import params_model
from noa_server.execution import Upload, run_on_uploads
from noa_server.problems import ProblemError
params = params_model(operations.get("copy"))()
tracemalloc.start()
try:
    run_on_uploads(params, [Upload("bomb.mrc.bz2", open(sys.argv[1], "rb"))], None, None, {MAX_VOXELS})
except ProblemError as problem:
    print(problem.slug, tracemalloc.get_traced_memory()[1])
"""
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "bomb.mrc.bz2")], capture_output=True,
                            text=True, timeout=120)
    slug, peak = result.stdout.split()
    assert slug == "too-many-voxels", result.stderr
    assert int(peak) < DATA_BYTES // 8, peak
