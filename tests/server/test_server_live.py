"""The service end to end: a real uvicorn process on a loopback port, compared with the CLI.

Every operation runs in both modes (upload, server-side paths) and as a job, and its output is
compared with what ``noa`` writes for the same input. Errors are checked for their status and
problem body. schemathesis fuzzes the live OpenAPI document, and a concurrency test mixes many
uploads and jobs at once.
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn

from helpers import (
    EXAMPLE_MAP,
    PROBLEM,
    REPO,
    SHARED,
    assert_problem,
    assert_same_data,
    free_port,
    load,
    noa,
    start_server,
    stop_server,
    wait_for,
    wait_job,
)
from noa_server import processes

KEY = "live-test-key"
AUTH = {"X-API-Key": KEY}
MAX_BODY = 4 * 1024 * 1024
MAX_VOXELS = 4_000_000
INPUTS = ["EMD-3197.map", "float32_10z_32y_40x.tiff", "zyx_uint16.tiff", "input4_float16.tiff"]


@dataclass
class Server:
    url: str
    root: Path
    tmp: Path
    proc: subprocess.Popen

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=AUTH, timeout=60, **kwargs)


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("live")
    root, tmp = base / "root", base / "tmp"
    root.mkdir()
    tmp.mkdir()
    for name in INPUTS:  # files other software wrote; the TIFF cases skip without ../shared/data
        if (SHARED / name).is_file():
            shutil.copy(SHARED / name, root / name)
    if not (root / "EMD-3197.map").exists():
        shutil.copy(EXAMPLE_MAP, root / "EMD-3197.map")  # the bundled copy: the same bytes
    shutil.copy(EXAMPLE_MAP, root / "emd_3197.map")
    env = {"NOA_DATA_ROOT": str(root), "NOA_API_KEY": KEY, "NOA_TMP_DIR": str(tmp),
           "NOA_MAX_BODY_BYTES": str(MAX_BODY), "NOA_MAX_VOXELS": str(MAX_VOXELS), "NOA_WORKERS": "2"}
    # Two server processes, as `noa serve` runs by default on two cores: every test also checks that
    # requests (and jobs) are answered whichever process a connection lands on.
    proc, url = start_server(root, base / "server.log", env, args=("--processes", "2", "--log-level", "warning"))
    yield Server(url, root, tmp, proc)
    stop_server(proc)


@pytest.fixture
def api(server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def noa_ok(*args: str) -> subprocess.CompletedProcess:
    """The CLI, as a user runs it (from the repository), which must succeed."""
    result = noa(*args, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return result


def assert_no_temporary_files(server: Server, timeout: float = 5.0) -> None:
    """The upload folders are gone (a streamed result's folder goes just after its last byte was sent); each server
    process's folder of links to the files it opened stays (``execution.file_link``)."""
    deadline = time.monotonic() + timeout
    while (left := _left_behind(server.tmp)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert left == []


def _left_behind(tmp: Path) -> list[Path]:
    """What ``tmp`` holds besides the server processes' folders of links; a folder removed while it is looked into
    (an upload's, just after its last byte) is gone, not left."""
    left = []
    for path in tmp.iterdir():
        try:
            if not _holds_links(path):
                left.append(path)
        except FileNotFoundError:
            pass
    return left


def _holds_links(folder: Path) -> bool:
    """Whether ``folder`` is a server process's folder of links: a folder a descriptor, each holding its link."""
    inside = list(folder.rglob("*")) if folder.is_dir() else []
    links = [p for p in inside if p.is_symlink() and os.readlink(p) == f"/proc/self/fd/{p.parent.name}"]
    return bool(links) and all(p in links or (p.is_dir() and p.name.isdigit() and p.parent == folder) for p in inside)


# Each case: operation, form/JSON parameters, the CLI arguments after the command and input, input file(s),
# and the output extension. The CLI runs on the same input and its output is the reference.
CASES = [
    ("permute", {"axes": [0, 1, 3, 2]}, ["--axes", "0,1,3,2"], ["EMD-3197.map"], ".mrc"),
    ("permute", {"axes": [0, 3, 2, 1]}, ["--axes", "0,3,2,1"], ["float32_10z_32y_40x.tiff"], ".tif"),
    ("permute", {"axes": [1, 0, 2, 3]}, ["--axes", "1,0,2,3"], ["zyx_uint16.tiff"], ".tif"),
    ("broadcast", {"shape": [3, 20, 20, 20]}, ["--shape", "3,20,20,20"], ["EMD-3197.map"], ".mrc"),
    # 1.3 MB: over INLINE_BYTES, so the upload result is streamed from a file
    ("broadcast", {"shape": [40, 20, 20, 20]}, ["--shape", "40,20,20,20"], ["EMD-3197.map"], ".mrc"),
    ("copy", {"order": "F"}, ["--order", "F"], ["EMD-3197.map"], ".mrc"),
    ("copy", {"dtype": "int16", "clamp": True}, ["--dtype", "int16", "--clamp"], ["EMD-3197.map"], ".mrc"),
    ("copy", {"dtype": "float32"}, ["--dtype", "float32"], ["input4_float16.tiff"], ".mrc"),
    ("copy", {}, [], ["EMD-3197.map"], ".tif"),
    ("ewise", {"expression": "a * 2 + b"}, [], ["EMD-3197.map", "emd_3197.map"], ".mrc"),
    ("ewise", {"expression": "sqrt(abs(a)) if a > 0 else -a", "dtype": "float64"}, ["--dtype", "float64"],
     ["EMD-3197.map"], ".tif"),
]
CASE_IDS = [f"{c[0]}-{'-'.join(map(str, c[1].values()))}-{c[3][0]}" for c in CASES]


def need_inputs(server: Server, names: list[str]) -> None:
    """Skip the test when one of ``names`` is a file of ../shared/data that is absent."""
    missing = [name for name in names if not (server.root / name).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)}: ../shared/data (real files from other software) is absent")


def run_cli(tmp_path: Path, server: Server, op: str, params: dict, cli_args: list[str], inputs: list[str],
            ext: str) -> Path:
    expected = tmp_path / f"cli{ext}"
    need_inputs(server, inputs)
    sources = [str(server.root / name) for name in inputs]
    if op == "ewise":
        noa_ok("ewise", params["expression"], *sources, "-o", str(expected), *cli_args)
    else:
        noa_ok(op, *sources, str(expected), *cli_args)
    return expected


def form_fields(params: dict) -> dict:
    """Form encoding of the parameters: lists as repeated fields, booleans as true/false."""
    return {k: ([str(x) for x in v] if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in params.items()}


@pytest.mark.parametrize("op, params, cli_args, inputs, ext", CASES, ids=CASE_IDS)
def test_upload_matches_cli(server, api, tmp_path, op, params, cli_args, inputs, ext):
    expected = run_cli(tmp_path, server, op, params, cli_args, inputs, ext)
    data = form_fields(params)
    if op in ("copy", "ewise"):
        data["format"] = "tiff" if ext == ".tif" else "mrc"
    files = [("files" if op == "ewise" else "file", (name, (server.root / name).read_bytes())) for name in inputs]
    response = api.post(f"/v1/upload/{op}", data=data, files=files)
    assert response.status_code == 200, response.text
    media = "image/tiff" if ext == ".tif" else "application/octet-stream"
    assert response.headers["content-type"] == media
    stem = inputs[0].split(".")[0]
    assert response.headers["content-disposition"] == f'attachment; filename="{stem}_{op}{ext}"'
    assert isinstance(json.loads(response.headers["noa-notices"]), list)
    got = tmp_path / f"got{ext}"
    got.write_bytes(response.content)
    assert_same_data(got, expected)
    assert_no_temporary_files(server)


@pytest.mark.parametrize("op, params, cli_args, inputs, ext", CASES, ids=CASE_IDS)
def test_paths_match_cli(server, api, tmp_path, op, params, cli_args, inputs, ext):
    expected = run_cli(tmp_path, server, op, params, cli_args, inputs, ext)
    dst = f"out/{tmp_path.name}/result{ext}"
    body = {**params, "srcs": inputs} if op == "ewise" else {**params, "src": inputs[0]}
    response = api.post(f"/v1/paths/{op}", json={**body, "dst": dst})
    assert_problem(response, 404, "file-not-found")  # the output folder does not exist yet
    (server.root / "out" / tmp_path.name).mkdir(parents=True)
    response = api.post(f"/v1/paths/{op}", json={**body, "dst": dst})
    assert response.status_code == 201, response.text
    assert response.json()["output"] == dst
    assert response.headers["location"] == f"/v1/files/{dst}"
    assert_same_data(server.root / dst, expected)
    downloaded = api.get(response.headers["location"])
    assert downloaded.content == (server.root / dst).read_bytes()
    assert_problem(api.post(f"/v1/paths/{op}", json={**body, "dst": dst}), 409, "output-exists")
    assert api.post(f"/v1/paths/{op}", json={**body, "dst": dst, "overwrite": True}).status_code == 201


@pytest.mark.parametrize("op, params, cli_args, inputs, ext", CASES[::3], ids=CASE_IDS[::3])
def test_jobs_match_cli(server, api, tmp_path, op, params, cli_args, inputs, ext):
    expected = run_cli(tmp_path, server, op, params, cli_args, inputs, ext)
    dst = f"job-{tmp_path.name}{ext}"
    body = {**params, "srcs": inputs} if op == "ewise" else {**params, "src": inputs[0]}
    response = api.post("/v1/jobs", json={"operation": op, **body, "dst": dst})
    assert response.status_code == 202, response.text
    state = wait_job(api, response.headers["location"])
    assert state["status"] == "succeeded", state
    assert state["progress"]["done"] == state["progress"]["total"] >= 1
    result = api.get(response.headers["location"] + "/result").json()
    assert result == {"output": dst, "notices": state["result"]["notices"]}
    assert_same_data(server.root / dst, expected)


@pytest.mark.parametrize("name", INPUTS)
def test_info_and_stats_match_cli(server, api, name):
    need_inputs(server, [name])
    cli_info = json.loads(noa_ok("info", str(server.root / name), "--json").stdout.replace(f"{server.root}/", ""))
    cli_stats = json.loads(noa_ok("stats", str(server.root / name), "--json", "--per-batch").stdout)
    for got in (api.post("/v1/paths/info", json={"path": name}).json(),
                api.post("/v1/upload/info", files={"file": (name, (server.root / name).read_bytes())}).json()):
        assert got == {**cli_info, "path": name}
    for got in (api.post("/v1/paths/stats", json={"path": name, "per_batch": True}).json(),
                api.post("/v1/upload/stats", data={"per_batch": "true"},
                          files={"file": (name, (server.root / name).read_bytes())}).json()):
        assert got == {**cli_stats, "path": name}
    job = api.post("/v1/jobs", json={"operation": "stats", "path": name, "per_batch": True})
    assert wait_job(api, job.headers["location"])["result"] == {**cli_stats, "path": name}


def test_read_options_reach_ops(server, api):
    as_stack = api.post("/v1/paths/info", json={"path": "EMD-3197.map", "as_stack": True}).json()
    assert as_stack["shape"] == [20, 1, 20, 20]
    cli = json.loads(noa_ok("info", str(server.root / "EMD-3197.map"), "--as-stack", "--json").stdout)
    # the same description, each door naming the option its own way
    assert (as_stack["axes"], cli["axes"]) == ("mapc=1 mapr=2 maps=3; as_stack=true",
                                               "mapc=1 mapr=2 maps=3; --as-stack")
    assert {**as_stack, "axes": None} == {**cli, "path": "EMD-3197.map", "axes": None}
    assert_problem(api.post("/v1/paths/info", json={"path": "EMD-3197.map", "series": 1}), 422)


# -- errors --------------------------------------------------------------------------------------------


def test_data_errors(server, api):
    emd = ("emd.map", (server.root / "EMD-3197.map").read_bytes())
    assert_problem(api.post("/v1/upload/broadcast", data={"shape": ["2", "7", "20", "20"]}, files={"file": emd}),
                   422, "incompatible-shape")
    assert_problem(api.post("/v1/paths/broadcast", json={"src": "EMD-3197.map", "dst": "b.mrc", "shape": [5, 5]}),
                   422, "incompatible-shape")
    assert_problem(api.post("/v1/upload/permute", data={"axes": ["0", "0", "1", "2"]}, files={"file": emd}),
                   400, "invalid-axes")
    assert_problem(api.post("/v1/upload/ewise", data={"expression": "__import__('os')"}, files={"files": emd}),
                   400, "invalid-expression")
    assert_problem(api.post("/v1/upload/ewise", data={"expression": "a + b"}, files={"files": emd}),
                   400, "invalid-expression")
    assert_problem(api.post("/v1/upload/info", files={"file": ("x.mrc", b"\0" * 2048)}), 422, "unreadable-file")
    assert_problem(api.post("/v1/upload/info", files={"file": ("x.mrc", b"")}), 422, "unreadable-file")
    truncated = ("t.map", (server.root / "EMD-3197.map").read_bytes()[:5000])
    assert_problem(api.post("/v1/upload/stats", files={"file": truncated}), 422, "unreadable-file")
    assert_problem(api.post("/v1/paths/info", json={"path": "nope.map"}), 404, "file-not-found")
    assert_problem(api.post("/v1/paths/copy", json={"src": "EMD-3197.map", "dst": "x.png"}), 422, "unreadable-file")
    (server.root / "a-folder").mkdir(exist_ok=True)
    assert_problem(api.post("/v1/paths/info", json={"path": "a-folder"}), 422, "unreadable-file")
    assert_no_temporary_files(server)


def test_voxel_limit(server, api):
    emd = ("emd.map", (server.root / "EMD-3197.map").read_bytes())
    too_many = [600, 20, 20, 20]  # 4.8 M voxels > the limit of 4 M
    body = assert_problem(api.post("/v1/upload/broadcast", data={"shape": [str(n) for n in too_many]},
                                    files={"file": emd}), 422, "too-many-voxels")
    assert str(MAX_VOXELS) in body["detail"]
    assert_problem(api.post("/v1/paths/broadcast", json={"src": "EMD-3197.map", "dst": "big.mrc", "shape": too_many}),
                   422, "too-many-voxels")
    job = api.post("/v1/jobs", json={"operation": "broadcast", "src": "EMD-3197.map", "dst": "big.mrc",
                                      "shape": too_many})
    state = wait_job(api, job.headers["location"])
    assert state["status"] == "failed" and state["error"]["type"].endswith("too-many-voxels")
    assert not (server.root / "big.mrc").exists()


def test_unauthorised(server):
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        assert_problem(anonymous.post("/v1/paths/info", json={"path": "EMD-3197.map"}), 401, "unauthorized")
        assert_problem(anonymous.get("/v1/jobs/" + "0" * 32, headers={"X-API-Key": "nope"}), 401, "unauthorized")
        assert anonymous.get("/healthz").status_code == 200


def test_body_too_large_declared_and_streamed(server, api):
    big = b"\0" * (MAX_BODY + 1)
    assert_problem(api.post("/v1/upload/info", files={"file": ("big.mrc", big)}), 413, "body-too-large")

    def chunks():  # no Content-Length: the limit must trip while streaming
        yield b'--x\r\nContent-Disposition: form-data; name="file"; filename="big.mrc"\r\n\r\n'
        for _ in range(MAX_BODY // 65536 + 4):
            yield b"\0" * 65536

    response = api.post("/v1/upload/info", content=chunks(),
                         headers={"Content-Type": "multipart/form-data; boundary=x"})
    assert_problem(response, 413, "body-too-large")
    assert_no_temporary_files(server)


def raw_get(server: Server, target: str) -> tuple[int, dict, bytes]:
    """A request sent byte for byte: httpx would normalise '../' away before it reached the server."""
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest("GET", target, skip_accept_encoding=True)
        connection.putheader("X-API-Key", KEY)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("target", [
    "/v1/files/../../../../etc/passwd", "/v1/files/..%2F..%2F..%2Fetc%2Fpasswd", "/v1/files/%2e%2e/%2e%2e/etc/passwd",
    "/v1/files/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/v1/files//etc/passwd", "/v1/files/sub/..%5C..%5Cx",
])
def test_traversal_over_the_wire(server, target):
    status, headers, body = raw_get(server, target)
    assert status in (400, 403), (target, status, body)
    assert headers["content-type"] == PROBLEM
    assert b"root:" not in body


def test_client_leaving_mid_download_leaves_no_files(server):
    """A result streamed from disk (over 1 MiB) is removed even when the client hangs up halfway."""
    boundary = "b0undary"
    payload = (server.root / "EMD-3197.map").read_bytes()
    body = b"".join([f'--{boundary}\r\nContent-Disposition: form-data; name="shape"\r\n\r\n{n}\r\n'.encode()
                     for n in (400, 20, 20, 20)]
                    + [f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="e.map"\r\n\r\n'
                       .encode(), payload, f"\r\n--{boundary}--\r\n".encode()])
    host, port = server.url.removeprefix("http://").split(":")
    for _ in range(3):
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.request("POST", "/v1/upload/broadcast", body=body, headers={
            "X-API-Key": KEY, "Content-Type": f"multipart/form-data; boundary={boundary}"})
        response = connection.getresponse()
        assert response.status == 200 and int(response.headers["content-length"]) > 10_000_000
        response.read(1000)
        connection.close()  # 12.8 MB unread
    assert_no_temporary_files(server, timeout=20)


def test_symlink_out_of_the_root(server, api, tmp_path):
    secret = tmp_path / "secret.map"
    shutil.copy(EXAMPLE_MAP, secret)
    link = server.root / f"link-{tmp_path.name}.map"
    link.symlink_to(secret)
    assert_problem(api.post("/v1/paths/info", json={"path": link.name}), 403, "path-refused")
    assert_problem(api.get(f"/v1/files/{link.name}"), 403, "path-refused")


# -- jobs across requests and restarts --------------------------------------------------------------------


def test_job_cancel_and_delete(server, api):
    # A broadcast of many blocks, so that cancellation lands between two of them.
    response = api.post("/v1/jobs", json={"operation": "broadcast", "src": "EMD-3197.map", "dst": "cancelled.mrc",
                                           "shape": [400, 20, 20, 20]})
    location = response.headers["location"]
    cancel = api.delete(location)
    assert cancel.status_code in (202, 204)  # 204 when it finished before the request arrived
    assert_problem(api.get(location), 404, "job-not-found")  # deleted at once, whatever its state
    assert_problem(api.delete(location), 404, "job-not-found")
    if cancel.status_code == 202:
        deadline = time.monotonic() + 30
        while any(p.name.startswith(".cancelled") for p in server.root.iterdir()):  # the worker winds down
            assert time.monotonic() < deadline
            time.sleep(0.05)


@pytest.mark.slow  # 35-240 s: scripts/test runs it after the rest
def test_jobs_survive_a_restart_via_noa_serve(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(EXAMPLE_MAP, root / "emd.map")
    state_dir = tmp_path / "state"
    args = ("--data-root", str(root), "--state-dir", str(state_dir), "--api-key", KEY, "--workers", "1",
            "--log-level", "warning")
    proc, url = start_server(None, tmp_path / "log", args=args)
    try:
        with httpx.Client(base_url=url, headers=AUTH, timeout=60) as client:
            location = client.post("/v1/jobs", json={"operation": "permute", "src": "emd.map", "dst": "p.mrc",
                                                     "axes": [0, 3, 2, 1]}).headers["location"]
            finished = wait_job(client, location)
    finally:
        stop_server(proc)
    assert finished["status"] == "succeeded"
    # A job that was running when the server died.
    crashed = {**finished, "id": "f" * 32, "status": "running", "finished": None, "result": None}
    (state_dir / f"{'f' * 32}.json").write_text(json.dumps(crashed))
    proc, url = start_server(None, tmp_path / "log", args=args)
    try:
        with httpx.Client(base_url=url, headers=AUTH, timeout=60) as client:
            assert client.get(location).json() == finished
            assert client.get(location + "/result").json() == finished["result"]
            interrupted = client.get(f"/v1/jobs/{'f' * 32}").json()
            assert interrupted["status"] == "failed" and interrupted["error"]["detail"].startswith("interrupted")
    finally:
        stop_server(proc)


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
@pytest.mark.parametrize("processes", ["1", "2"])
def test_noa_serve_refuses_clearly(server, tmp_path, processes):
    """Exit 2 and one line, before anything listens: a port in use (here the live server's, whose
    processes must not be joined through SO_REUSEPORT), a data root that is no folder, zero processes."""
    port = server.url.rsplit(":", 1)[1]
    cases = [(["--port", port], f"cannot listen on 127.0.0.1:{port}: Address already in use"),
             (["--data-root", str(tmp_path / "missing")], "is not a folder"),
             (["--processes", "0"], "--processes")]
    for args, message in cases:
        argv = [sys.executable, "-m", "noa_cli.main", "serve", "--processes", processes, *args]
        result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
@pytest.mark.parametrize("processes", ["1", "2"])
def test_the_url_is_printed_once_connections_are_accepted(tmp_path, processes):
    """`noa serve`'s URL line comes when every process listens: a client acting on it is answered at once."""
    port = free_port()
    argv = [sys.executable, "-m", "noa_cli.main", "serve", "--processes", processes, "--port", str(port),
            "--data-root", str(tmp_path), "--log-level", "warning"]
    proc = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith(f"noa serve: http://127.0.0.1:{port} "), line
        for _ in range(int(processes) * 4):  # new connections, spread over the processes
            assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
    finally:
        stop_server(proc)


def _children(pid: int) -> list[int]:
    """The server processes ``noa serve`` (pid) started (multiprocessing's own helpers aside)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if (int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid
                    and b"spawn_main" in (stat.parent / "cmdline").read_bytes()):
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            pass
    return sorted(found)


def _gone(pids: list[int], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{p}").exists() for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_server_process_freezes_what_start_up_made_once_listening():
    """What a server process made starting (modules, the app) is left out of the collector's full passes, which
    paused requests 80-180 ms: frozen (gc.freeze) by the time the process says it accepts connections, after one
    request of its own has walked the app's routes."""
    asked: list[str] = []

    async def app(scope, receive, send) -> None:  # a plain ASGI app: nothing of noa's needed to start
        asked.append(scope["path"])
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    frozen: list[int] = []

    def listening() -> None:  # counts what is frozen, then stops the server
        frozen.append(gc.get_freeze_count())
        assert asked == [processes.UNROUTED_PATH]
        server.should_exit = True

    server = processes._Server(uvicorn.Config(app, lifespan="off", log_level="warning"), listening)
    listener = socket.create_server(("127.0.0.1", 0))
    gc.unfreeze()
    try:
        asyncio.run(server.serve(sockets=[listener]))
    finally:
        gc.unfreeze()  # this test process's objects go back to the collector
        listener.close()
    assert len(frozen) == 1 and frozen[0] > 1000, frozen


def test_routes_walked_at_start_build_no_validator_at_a_first_request(monkeypatch):
    """FastAPI builds a router's validators (pydantic TypeAdapters) when a request first walks it: a server process
    walks them all as it starts (processes.walk_routes), so that its first request does not pay for it."""
    from fastapi.testclient import TestClient
    from pydantic import TypeAdapter

    from noa_server.app import create_app
    from noa_server.settings import Settings

    built: list[object] = []
    adapter_init = TypeAdapter.__init__

    def counted(self, *args, **kwargs) -> None:
        built.append(args)
        adapter_init(self, *args, **kwargs)

    monkeypatch.setattr(TypeAdapter, "__init__", counted)
    for walked in (False, True):
        app = create_app(Settings(warmup=False))
        if walked:
            asyncio.run(processes.walk_routes(app))
        built.clear()
        with TestClient(app) as client:
            assert client.get("/healthz").status_code == 200
        assert bool(built) != walked, (walked, len(built))


@pytest.mark.slow  # 35-240 s: scripts/test runs it after the rest
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor is Linux's (elsewhere uvicorn's)")
def test_server_processes_are_supervised(tmp_path):
    """A server process that dies is replaced; SIGTERM stops them all; a killed parent takes them along."""
    import signal

    args = ("--processes", "2", "--log-level", "warning")
    proc, url = start_server(None, tmp_path / "log", args=args)
    try:
        first = _children(proc.pid)
        assert len(first) == 2
        os.kill(first[-1], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (now := _children(proc.pid)) == first or len(now) < len(first):
            assert time.monotonic() < deadline, now
            time.sleep(0.1)
        wait_for(url, "/readyz", 60, proc)
        proc.terminate()
        assert proc.wait(60) == 0
        assert _gone(now)
    finally:
        stop_server(proc)
    proc, url = start_server(None, tmp_path / "log", args=args)
    children = _children(proc.pid)
    assert len(children) == 2
    proc.kill()  # no chance to stop anything itself
    proc.wait()
    assert _gone(children)


# -- many at once ------------------------------------------------------------------------------------------


def test_concurrent_uploads_and_jobs(server, tmp_path):
    expected = tmp_path / "expected.mrc"
    noa_ok("permute", str(server.root / "EMD-3197.map"), str(expected), "--axes", "0,3,1,2")
    reference = load(expected)
    payload = (server.root / "EMD-3197.map").read_bytes()
    (server.root / "many").mkdir()

    def upload(i: int) -> np.ndarray:
        with server.client() as client:
            response = client.post("/v1/upload/permute", data={"axes": ["0", "3", "1", "2"]},
                                   files={"file": (f"u{i}.map", payload)})
            assert response.status_code == 200, response.text
            out = tmp_path / f"u{i}.mrc"
            out.write_bytes(response.content)
            return load(out)

    def job(i: int) -> np.ndarray:
        with server.client() as client:
            response = client.post("/v1/jobs", json={"operation": "permute", "src": "EMD-3197.map",
                                                     "dst": f"many/j{i}.mrc", "axes": [0, 3, 1, 2]})
            assert response.status_code == 202, response.text
            state = wait_job(client, response.headers["location"])
            assert state["status"] == "succeeded", state
            return load(server.root / "many" / f"j{i}.mrc")

    with ThreadPoolExecutor(40) as pool:
        futures = [pool.submit(upload if i % 2 else job, i) for i in range(40)]
        results = [f.result(timeout=300) for f in futures]
    for result in results:
        np.testing.assert_array_equal(result, reference)
    assert_no_temporary_files(server)
    assert sorted(p.name for p in (server.root / "many").iterdir()) == sorted(f"j{i}.mrc" for i in range(0, 40, 2))


def test_every_process_answers_for_every_job(server):
    """Fresh connections land on either server process; each one knows the job, its result, its deletion."""
    def fresh(method: str, path: str, **kwargs) -> httpx.Response:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60,
                          limits=httpx.Limits(max_keepalive_connections=0)) as client:
            return client.request(method, path, **kwargs)

    response = fresh("POST", "/v1/jobs", json={"operation": "stats", "path": "emd_3197.map"})
    assert response.status_code == 202, response.text
    location = response.headers["location"]
    with server.client() as client:
        state = wait_job(client, location)
    assert state["status"] == "succeeded"
    answers = [fresh("GET", location) for _ in range(20)] + [fresh("GET", location + "/result") for _ in range(10)]
    assert all(r.status_code == 200 for r in answers)
    assert all(r.json() == state for r in answers[:20]) and all(r.json() == state["result"] for r in answers[20:])
    assert fresh("DELETE", location).status_code == 204
    for _ in range(10):
        assert_problem(fresh("GET", location), 404, "job-not-found")


# -- the example client and schemathesis -------------------------------------------------------------------


def test_example_client(server, tmp_path):
    local = tmp_path / "emd.map"
    shutil.copy(EXAMPLE_MAP, local)
    shutil.copy(EXAMPLE_MAP, server.root / "client-input.map")
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "client.py"), "--url", server.url, "--api-key", KEY,
         "--remote", "client-input.map", "--out-dir", str(tmp_path / "out"), str(local)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = tmp_path / "expected.mrc"
    noa_ok("permute", str(local), str(expected), "--axes", "0,1,3,2")
    assert_same_data(tmp_path / "out" / "emd_permute.mrc", expected)
    assert (tmp_path / "out" / "client-input.tif").exists()
    assert "job" in result.stdout and "succeeded" in result.stdout


SCHEMATHESIS_CONFIG = """
[checks.positive_data_acceptance]
# Schema-valid is not image-valid: random bytes are not an MRC file (422), random paths do not exist (404),
# and random outputs may exist already (409).
expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
"""


@pytest.mark.slow  # 35-240 s: scripts/test runs it after the rest
def test_schemathesis(server, tmp_path):
    # One schemathesis worker: CPython 3.11.7 can raise "AST constructor recursion depth mismatch" when
    # hypothesis parses lambdas from two threads at once (a tool crash, not a finding).
    config = tmp_path / "schemathesis.toml"
    config.write_text(SCHEMATHESIS_CONFIG)
    st = Path(sys.executable).with_name("st")
    # A hang fails by --request-timeout (each request within 30 s). The subprocess's own bound only stops a run
    # that cannot end: a run's length measures the machine (65 s in a CI run, 148 s under load, 170+ s on a cold
    # kernel cache, where the service compiles what requests first need: it no longer waits for a warm-up).
    result = subprocess.run(
        [str(st), "--config-file", str(config), "run", f"{server.url}/openapi.json", "--checks", "all",
         "--header", f"X-API-Key: {KEY}", "--max-examples", "20", "--workers", "1", "--seed", "1",
         "--generation-database", "none", "--request-timeout", "30", "--no-color"],
        capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    assert_no_temporary_files(server)
