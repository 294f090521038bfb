"""Upload folders: a server process killed outright leaves its folder; the next one to start removes it,
never a live process's folder."""

from __future__ import annotations

import os
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
