"""Each kind of operation (writes several, writes one, edits in place) through a real ``noa serve`` process:
split, join, scale, normalize and header as a streamed zip of split outputs (over the inline size), the
server-side file edited in place by paths mode, an edited copy from upload mode, and jobs; results compared
with the CLI's."""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from test_server_live import wait_job

from helpers import EXAMPLE_MAP, assert_problem, assert_same_data, load, noa, start_server, stop_server, write_mrc

KEY = "stack-ops-key"


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[tuple[httpx.Client, Path, Path]]:
    base = tmp_path_factory.mktemp("stack-live")
    root, tmp = base / "root", base / "tmp"
    root.mkdir()
    tmp.mkdir()
    env = {"NOA_DATA_ROOT": str(root), "NOA_API_KEY": KEY, "NOA_TMP_DIR": str(tmp), "NOA_WORKERS": "2"}
    proc, url = start_server(root, base / "server.log", env)
    try:
        with httpx.Client(base_url=url, headers={"X-API-Key": KEY}, timeout=120) as client:
            yield client, root, tmp
    finally:
        stop_server(proc)


def test_split_zip_is_streamed_and_matches_the_cli(live, tmp_path):
    client, root, tmp = live
    # 40 images of 128 x 128 float32: 2.6 MB of outputs, over the inline size, so the zip is streamed from disk
    data = write_mrc(root / "movie.mrcs", np.random.default_rng(0).normal(size=(40, 128, 128)).astype(np.float32),
                     stack=True)
    done = noa("split", root / "movie.mrcs", "--out-dir", tmp_path / "cli", "--every", "8")
    assert done.returncode == 0, done.stderr
    sent = client.post("/v1/upload/split", data={"every": "8"},
                       files={"file": ("movie.mrcs", (root / "movie.mrcs").read_bytes())})
    assert sent.status_code == 200, sent.text
    packed = zipfile.ZipFile(io.BytesIO(sent.content))
    names = [f"movie_{i:03d}.mrcs" for i in range(5)]
    assert packed.namelist() == names
    for name in names:
        (tmp_path / name).write_bytes(packed.read(name))
        assert_same_data(tmp_path / name, tmp_path / "cli" / name)
    deadline = time.monotonic() + 10  # the upload folder goes once the last byte is sent (the client may be first)
    while list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(tmp.iterdir()) == []
    written = client.post("/v1/paths/split", json={"src": "movie.mrcs", "dst": "parts", "every": 8})
    assert written.status_code == 201 and written.json()["outputs"] == [f"parts/{n}" for n in names]
    np.testing.assert_array_equal(np.concatenate([load(root / "parts" / n) for n in names]), data)
    job = client.post("/v1/jobs", json={"operation": "join", "srcs": [f"parts/{n}" for n in names],
                                        "dst": "joined.mrcs"})
    assert wait_job(client, job.headers["location"])["status"] == "succeeded"
    np.testing.assert_array_equal(load(root / "joined.mrcs"), data)


def test_scale_and_normalize_match_the_cli(live, tmp_path):
    client, root, _ = live
    (root / "emd.map").write_bytes(EXAMPLE_MAP.read_bytes())
    args = ["--to-range", "0,255", "--percentiles", "0.5,99.5", "--dtype", "uint8"]
    assert noa("scale", root / "emd.map", tmp_path / "cli.mrc", *args).returncode == 0
    sent = client.post("/v1/upload/scale",
                       data={"to_range": ["0", "255"], "percentiles": ["0.5", "99.5"], "dtype": "uint8"},
                       files={"file": ("emd.map", EXAMPLE_MAP.read_bytes())})
    assert sent.status_code == 200, sent.text
    (tmp_path / "up.mrc").write_bytes(sent.content)
    assert_same_data(tmp_path / "up.mrc", tmp_path / "cli.mrc")
    assert noa("normalize", root / "emd.map", tmp_path / "n.mrc", "--per-section").returncode == 0
    job = client.post("/v1/jobs", json={"operation": "normalize", "src": "emd.map", "dst": "n.mrc",
                                        "per_section": True})
    assert wait_job(client, job.headers["location"])["status"] == "succeeded"
    assert_same_data(root / "n.mrc", tmp_path / "n.mrc")


def test_header_paths_mode_edits_the_server_file_and_upload_returns_a_copy(live):
    client, root, _ = live
    (root / "edit.map").write_bytes(EXAMPLE_MAP.read_bytes())
    data_hash = hashlib.sha256(EXAMPLE_MAP.read_bytes()[1024:]).hexdigest()
    edited = client.post("/v1/paths/header", json={"path": "edit.map", "pixel_size": [1.06]})
    assert edited.status_code == 200
    assert edited.json()["changes"]["pixel_size"]["new"] == pytest.approx([1.06] * 3)  # float32
    assert hashlib.sha256((root / "edit.map").read_bytes()[1024:]).hexdigest() == data_hash
    info = client.post("/v1/paths/info", json={"path": "edit.map"}).json()
    assert info["pixel_size"] == pytest.approx([1.06] * 3)
    sent = client.post("/v1/upload/header", data={"as_stack": "true"},
                       files={"file": ("emd.map", EXAMPLE_MAP.read_bytes())})
    assert sent.status_code == 200, sent.text
    assert json.loads(sent.headers["noa-changes"])["changes"]["kind"] == {"old": "volume", "new": "image stack"}
    assert hashlib.sha256(sent.content[1024:]).hexdigest() == data_hash
    nothing = assert_problem(client.post("/v1/paths/header", json={"path": "edit.map"}), 400, "invalid-parameters")
    assert "nothing to change: give pixel_size, origin, as_stack or label" in nothing["detail"]
    assert_problem(client.post("/v1/upload/header", data={"pixel_size": ["1"]},
                               files={"file": ("x.tif", b"II*\0" + b"\0" * 100)}), 422)
