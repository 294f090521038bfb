"""The sandbox against a real race: while requests run, a folder and a file under the data root are
swapped, again and again, with symlinks to a folder outside it (renameat2 RENAME_EXCHANGE, atomic).
No response may be a 500, carry a byte from outside the root, nor may anything be written there."""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from helpers import load, write_mrc

warnings.filterwarnings("ignore", message=".*httpx.*")
from fastapi.testclient import TestClient  # noqa: E402

from noa_core.io import beneath  # noqa: E402
from noa_server.app import create_app  # noqa: E402
from noa_server.settings import Settings  # noqa: E402

SWAP_S = 2.0
RENAME_EXCHANGE = 2
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(a: Path, b: Path) -> None:
    """Swap two names atomically."""
    if _libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2", str(a))


@pytest.fixture
def tree(tmp_path) -> dict[str, Path]:
    """root/sub/ (a folder) beside root/sub-swap -> outside/, root/other/file.mrc beside
    root/other/file-swap -> outside/file.mrc; the files outside hold other data (all 777)."""
    if not hasattr(_libc, "renameat2"):
        pytest.skip("no renameat2 in this C library")
    root, outside = tmp_path / "root", tmp_path / "outside"
    for folder in (root / "sub", root / "other", outside):
        folder.mkdir(parents=True)
    inside = np.arange(16, dtype=np.float32).reshape(4, 4)
    write_mrc(root / "sub" / "a.mrc", inside)
    write_mrc(root / "other" / "file.mrc", inside)
    for name in ("a.mrc", "file.mrc"):
        write_mrc(outside / name, np.full((3, 5), 777, np.float32))
    (root / "sub-swap").symlink_to(outside, target_is_directory=True)
    (root / "other" / "file-swap").symlink_to(outside / "file.mrc")
    (tmp_path / "tmp").mkdir()
    return {"root": root, "outside": outside, "tmp": tmp_path / "tmp", "inside": root / "sub" / "a.mrc"}


def _swapping(pairs: list[tuple[Path, Path]], stop: threading.Event, counts: list[int]) -> None:
    """Exchange each pair in turn until ``stop``; ``counts`` says how often each was."""
    while not stop.is_set():
        for i, (a, b) in enumerate(pairs):
            _exchange(a, b)
            counts[i] += 1


def _requests(client: TestClient, counter: itertools.count):
    """The next request of each kind: (what, response)."""
    i = next(counter)
    yield "stats", client.post("/v1/paths/stats", json={"path": "sub/a.mrc"})
    yield "info", client.post("/v1/paths/info", json={"path": "other/file.mrc"})
    yield "download", client.get("/v1/files/sub/a.mrc")
    yield "download", client.get("/v1/files/other/file.mrc")
    yield "write", client.post("/v1/paths/copy", json={"src": "sub/a.mrc", "dst": f"sub/out-{i}.mrc"})
    yield "write", client.post("/v1/paths/copy", json={"src": "other/file.mrc", "dst": f"other/out-{i}.mrc"})


def _check(what: str, response, inside_bytes: bytes) -> None:
    status = response.status_code
    assert status in (200, 201, 403, 404), (what, status, response.text)
    if status == 403 or status == 404:
        assert response.headers["content-type"] == "application/problem+json"
    elif what == "stats":
        assert response.json()["mean"] == 7.5, response.text
    elif what == "info":
        assert response.json()["shape"] == [1, 1, 4, 4], response.text
    elif what == "download":
        assert response.content == inside_bytes


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "walk"])
def test_symlinks_swapped_in_never_reach_outside(tree, monkeypatch, walk):
    if walk:
        monkeypatch.setattr(beneath, "_openat2_usable", False)
    root, outside = tree["root"], tree["outside"]
    outside_before = {p.name: p.read_bytes() for p in outside.iterdir()}
    inside_bytes = tree["inside"].read_bytes()
    pairs = [(root / "sub", root / "sub-swap"), (root / "other" / "file.mrc", root / "other" / "file-swap")]
    stop, counts, seen = threading.Event(), [0] * len(pairs), {}
    app = create_app(Settings(warmup=False, data_root=root, tmp_dir=tree["tmp"]))
    with TestClient(app, raise_server_exceptions=False) as client:
        counter = itertools.count()
        # One round before the swapping: the first requests load the kernels (seconds on a cold cache, when a slow
        # machine's first round could outlast SWAP_S and find every write refused by a swap).
        for what, response in _requests(client, counter):
            assert response.status_code in (200, 201), (what, response.status_code, response.text)
            seen[what, response.status_code] = seen.get((what, response.status_code), 0) + 1
        swapper = threading.Thread(target=_swapping, args=(pairs, stop, counts))
        swapper.start()
        try:
            deadline = time.monotonic() + SWAP_S
            while time.monotonic() < deadline:
                for what, response in _requests(client, counter):
                    _check(what, response, inside_bytes)
                    seen[what, response.status_code] = seen.get((what, response.status_code), 0) + 1
        finally:
            stop.set()
            swapper.join(10)
    for count, pair in zip(counts, pairs):
        if count % 2:  # leave the tree as it was made
            _exchange(*pair)
    assert min(counts) > 100, counts
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == outside_before  # nothing written outside
    written = [p for p in root.rglob("out-*.mrc")]
    assert seen.get(("write", 201), 0) == len(written) > 0, seen
    for path in written:
        assert np.array_equal(load(path), load(tree["inside"])), path
    assert not list(root.rglob("*.noa-tmp")) and list(tree["tmp"].iterdir()) == []
