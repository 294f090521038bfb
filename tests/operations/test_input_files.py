"""Files that parameters name (an EER gain, an FSC mask, transform matrices) are inputs like the files given as
inputs: never an output, even with --force / overwrite, on every door (CLI, HTTP paths mode, jobs, Python)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile

from helpers import assert_problem, assert_user_error, noa, wait_job, write_mrc
from noa_core import operations
from noa_core.errors import OutputIsInputError
from noa_core.run import local

sys.path.insert(0, str(Path(__file__).parents[1] / "io"))
from eer_encoder import encode_frame, random_frame, write_eer


def small_movie(path: Path, frames: int = 4, height: int = 24, width: int = 32) -> None:
    rng = np.random.default_rng(0)
    bits = (7, 2, 2)
    pages = [[encode_frame(*random_frame(rng, height, width, 0.3, bits), height * width, bits)]
             for _ in range(frames)]
    write_eer(path, pages, height, width, 65001, bits)


def gain(path: Path) -> bytes:
    tifffile.imwrite(path, np.random.default_rng(1).uniform(0.5, 2.0, (24, 32)).astype(np.float32))
    return path.read_bytes()


def test_cli_gain_named_as_the_output_is_refused(tmp_path):
    small_movie(tmp_path / "m.eer")
    before = gain(tmp_path / "g.gain")
    assert_user_error(noa("copy", tmp_path / "m.eer", tmp_path / "g.gain", "--gain", tmp_path / "g.gain", "-f",
                          "--to", "tif"), "g.gain", "input")
    assert (tmp_path / "g.gain").read_bytes() == before
    # by another name of the same file
    (tmp_path / "link.gain").symlink_to(tmp_path / "g.gain")
    assert_user_error(noa("copy", tmp_path / "m.eer", tmp_path / "link.gain", "--gain", tmp_path / "g.gain", "-f"),
                      "input")
    assert (tmp_path / "g.gain").read_bytes() == before


def test_python_gain_named_as_the_output_is_refused(tmp_path):
    small_movie(tmp_path / "m.eer")
    write_mrc(tmp_path / "g.mrc", np.ones((24, 32), np.float32))
    before = (tmp_path / "g.mrc").read_bytes()
    task = operations.get("copy").task(gain=str(tmp_path / "g.mrc"))
    with pytest.raises(OutputIsInputError):
        local.write(task, tmp_path / "m.eer", tmp_path / "g.mrc", overwrite=True)
    assert (tmp_path / "g.mrc").read_bytes() == before


def test_http_gain_named_as_the_output_is_refused(tmp_path, make_client):
    root = tmp_path / "root"
    root.mkdir()
    small_movie(root / "m.eer")
    write_mrc(root / "gain.mrc", np.ones((24, 32), np.float32))
    before = (root / "gain.mrc").read_bytes()
    client = make_client(data_root=root)
    body = {"src": "m.eer", "dst": "gain.mrc", "gain": "gain.mrc", "overwrite": True}
    refused = assert_problem(client.post("/v1/paths/copy", json=body), 409)
    assert "gain.mrc" in refused["detail"] and "input" in refused["detail"], refused
    response = client.post("/v1/jobs", json={"operation": "copy", **body})
    assert response.status_code == 202, response.text
    state = wait_job(client, response.headers["location"])
    assert state["status"] == "failed" and "input" in str(state), state
    assert (root / "gain.mrc").read_bytes() == before


def test_transform_matrices_named_as_the_output_are_refused(tmp_path):
    write_mrc(tmp_path / "a.mrcs", np.ones((2, 8, 8), np.float32), stack=True)
    (tmp_path / "xf.mrcs").write_text("1 0 0\n0 1 0\n")
    assert_user_error(noa("transform", tmp_path / "a.mrcs", tmp_path / "xf.mrcs", "--matrices", tmp_path / "xf.mrcs",
                          "-f"), "xf.mrcs", "input")
    assert (tmp_path / "xf.mrcs").read_text() == "1 0 0\n0 1 0\n"


def test_fsc_mask_named_as_the_table_is_refused(tmp_path):
    halves = np.random.default_rng(2).normal(size=(2, 16, 16, 16)).astype(np.float32)
    write_mrc(tmp_path / "h1.mrc", halves[0])
    write_mrc(tmp_path / "h2.mrc", halves[1])
    write_mrc(tmp_path / "mask.star", np.ones((16, 16, 16), np.float32))
    before = (tmp_path / "mask.star").read_bytes()
    assert_user_error(noa("fsc", tmp_path / "h1.mrc", tmp_path / "h2.mrc", "--mask", tmp_path / "mask.star",
                          "-o", tmp_path / "mask.star", "-f"), "mask.star", "input")
    assert (tmp_path / "mask.star").read_bytes() == before
