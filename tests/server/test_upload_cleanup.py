"""Upload folders: a server process killed outright leaves its folder; the next one to start removes it,
never a live process's folder."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from helpers import write_mrc

warnings.filterwarnings("ignore", message=".*httpx.*")
from fastapi.testclient import TestClient  # noqa: E402

from noa_server.app import create_app  # noqa: E402
from noa_server.settings import Settings  # noqa: E402

# A server process's part in an upload, then nothing: it holds its folder until it is killed.
HOLDER = """
import sys, time
from pathlib import Path
from noa_server.execution import new_upload_folder
folder = new_upload_folder(Path(sys.argv[1]))
(folder / "0-upload.mrc").write_bytes(b"half an upload")
print(folder, flush=True)
time.sleep(60)
"""


@pytest.fixture
def holder(tmp_path):
    """A live process holding an upload folder under tmp_path / 'tmp'; yields (process, folder)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp)], stdout=subprocess.PIPE, text=True)
    try:
        yield process, Path(process.stdout.readline().strip())
    finally:
        process.kill()
        process.wait(10)


def _start_service(tmp: Path) -> None:
    """Start (and stop) the real app, as a server process does."""
    with TestClient(create_app(Settings(warmup=False, tmp_dir=tmp))) as client:
        assert client.get("/healthz").status_code == 200


def test_a_killed_process_upload_folder_is_removed_at_start(holder, tmp_path):
    process, folder = holder
    tmp = tmp_path / "tmp"
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp / "noa-upload-link").symlink_to(outside, target_is_directory=True)
    (tmp / "other").mkdir()
    _start_service(tmp)
    assert (folder / "0-upload.mrc").is_file()  # its process lives: its folder stays
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    _start_service(tmp)
    assert not folder.exists()
    assert sorted(p.name for p in tmp.iterdir()) == ["noa-upload-link", "other"]  # nothing else is touched
    assert outside.is_dir()


def test_upload_folder_locks_are_released(tmp_path):
    """Large results are streamed from their folder, which the response removes: the folder's lock
    is released by the next upload, so a busy server does not pile up descriptors."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    source = tmp_path / "big.mrc"
    write_mrc(source, np.arange(2 * 512 * 512, dtype=np.float32).reshape(2, 512, 512))

    def upload() -> None:
        with open(source, "rb") as f:
            response = client.post("/v1/upload/copy", files={"file": ("big.mrc", f)})
        assert response.status_code == 200, response.text

    with TestClient(create_app(Settings(warmup=False, tmp_dir=tmp))) as client:
        deadline = time.monotonic() + 300  # the warm-up opens files of its own: count after it
        while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        upload()
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(8):
            upload()
        assert len(os.listdir("/proc/self/fd")) <= before + 3  # one lock per upload would be 8 more
    assert list(tmp.iterdir()) == []


def test_files_are_opened_through_one_folder_of_links_a_process(tmp_path, make_client):
    """The viewer and paths-mode operations open a file through a link named as the client's file: the links lie in
    one folder the process keeps (making and removing a folder per request cost 4 ms on ext4, 270 ms on a busy
    disk), a folder a descriptor, holding the link of the file last open under it; it goes when the service stops."""
    root = tmp_path / "root"
    root.mkdir()
    data = write_mrc(root / "a.mrc", np.arange(2 * 32 * 32, dtype=np.float32).reshape(2, 32, 32))
    client = make_client(data_root=root)
    tmp = tmp_path / "tmp"
    made: set[str] = set()
    for _ in range(3):
        assert client.get("/v1/view/image", params={"file": "a.mrc", "size": 32}).status_code == 200
        stats = client.post("/v1/paths/stats", json={"path": "a.mrc"})
        assert stats.status_code == 200, stats.text
        assert stats.json()["max"] == float(data.max())
        made |= {entry.name for entry in tmp.iterdir()}
        for folder in tmp.glob("*/*"):  # one link a descriptor, to the descriptor
            assert [(p.name, os.readlink(p)) for p in folder.iterdir()] == [("a.mrc", f"/proc/self/fd/{folder.name}")]
    assert len(made) == 1
    (root / "b.map").write_bytes((root / "a.mrc").read_bytes())  # another name under the same descriptor
    assert client.get("/v1/view/image", params={"file": "b.map", "size": 32}).status_code == 200
    assert client.get("/v1/view/image", params={"file": "a.mrc", "size": 32}).status_code == 200
    assert all(len(os.listdir(folder)) == 1 for folder in tmp.glob("*/*"))
    for folder in list(tmp.iterdir()):  # removed under the running service (a cleaner of temporary folders)
        shutil.rmtree(folder)
    again = client.post("/v1/paths/stats", json={"path": "b.map"})
    assert again.status_code == 200 and again.json()["max"] == float(data.max()), again.text
    assert len(list(tmp.iterdir())) == 1
    client.__exit__(None, None, None)
    assert list(tmp.iterdir()) == []
