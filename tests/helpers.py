"""Helpers every layer's tests share: where the data are, the CLI and the service as a user runs them,
RELION's programs, and the checks of files and problems against independent readers (mrcfile, tifffile).
Fixtures are in ``conftest.py``."""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile

import noa_core as nc
from noa_core.array import layout

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"  # real files written by other software (absent: those tests skip)
EXAMPLE_MAP = REPO / "examples" / "data" / "emd_3197.map"  # EMD-3197, the bundled copy
NOA = [str(Path(sys.executable).parent / "noa")]
PROBLEM = "application/problem+json"
# The mark for tests that read ../shared/data throughout (need_shared below: a test that needs named files).
needs_data = pytest.mark.skipif(not SHARED.is_dir(),
                                reason=f"real test files not found at {SHARED} (shared/ beside the checkout)")


def noa(*args, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The installed ``noa`` command, run as a user runs it."""
    environment = dict(os.environ, COLUMNS="200", **(env or {}))
    return subprocess.run(NOA + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=environment,
                          timeout=300)


def assert_user_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit code 2, one line on stderr naming the problem, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def assert_problem(response, status: int, slug: str | None = None) -> dict:
    """An RFC 9457 problem with ``status`` (and type ``urn:noa:problem:SLUG``), never a traceback or a server path."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0] == PROBLEM
    body = response.json()
    assert {"type", "title", "status", "detail", "instance"} <= body.keys() and body["status"] == status
    assert body["instance"] == response.request.url.path
    if slug is not None:
        assert body["type"] == f"urn:noa:problem:{slug}", body
    assert "Traceback" not in response.text and str(REPO) not in response.text
    return body


def load(path: Path) -> np.ndarray:
    """The stored data, read by the format's reference library (not by noa)."""
    if path.suffix.lower() in (".tif", ".tiff"):
        return tifffile.imread(path)
    with mrcfile.open(path, permissive=True) as f:
        return np.array(f.data)


def assert_same_data(got: Path, expected: Path) -> None:
    """The same values, type and shape, as the reference libraries read them."""
    a, b = load(got), load(expected)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def assert_same_file(a: Path, b: Path) -> None:
    """Byte for byte the same file (the date in noa's MRC labels is one in every test: tests/conftest.py)."""
    assert a.read_bytes() == b.read_bytes(), (a, b)


def write_mrc(path: Path, data: np.ndarray, *, stack: bool = False, voxel_size=None) -> np.ndarray:
    """An MRC file written by mrcfile (as other software writes them); returns the data as stored."""
    with mrcfile.new(path, data, overwrite=True) as f:
        if stack:
            f.set_image_stack()
        if voxel_size is not None:
            f.voxel_size = voxel_size
        return np.array(f.data)


def mrc_data(path: Path) -> tuple[np.ndarray, np.recarray, np.recarray]:
    """Data, header and voxel size of an MRC file, as mrcfile reads them."""
    with mrcfile.open(path, permissive=True) as f:
        return np.array(f.data), f.header.copy(), f.voxel_size.copy()


def need_shared(*names: str) -> list[Path]:
    """The real files ``names`` of ../shared/data; the test skips when that folder is absent."""
    paths = [SHARED / name for name in names]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        pytest.skip(f"{', '.join(missing)}: ../shared/data (real files from other software) is absent")
    return paths


def fei1_stack(path: Path, sections: int = 3) -> tuple[np.ndarray, np.recarray]:
    """A tilt series with one FEI1 extended-header record per section, written through mrcfile:
    ``(data, records)``; the records' tilt and X pixel size differ from section to section."""
    from mrcfile.dtypes import get_ext_header_dtype

    records = np.zeros(sections, get_ext_header_dtype(b"FEI1", "<"))
    records["Metadata size"] = records.dtype.itemsize
    records["Alpha tilt"] = np.linspace(-30, 30, sections)
    records["Pixel size X"] = 1.25e-10 + np.arange(sections) * 1e-12
    records["Pixel size Y"] = 1.5e-10
    data = np.arange(sections * 4 * 6, dtype=np.float32).reshape(sections, 4, 6)
    with mrcfile.new(path, data, overwrite=True) as f:
        f.set_image_stack()
        f.set_extended_header(records)
        f.header.exttyp = b"FEI1"
        f.voxel_size = 1.25
    return data, records


def relion(program: str, *args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """RELION's ``program`` (e.g. ``relion_image_handler``) run with ``args``; the test skips with a reason
    where RELION is not installed (``scripts/test`` installs RELION 3.1.3 with apt where it can), and fails
    with RELION's own output where the program fails."""
    import shutil
    import tempfile

    if shutil.which(program) is None:
        pytest.skip(f"{program} not found: RELION is not installed (apt-get install relion)")
    with tempfile.TemporaryDirectory() as scratch:  # RELION leaves scratch files (.spi) where it runs
        result = subprocess.run([program, *map(str, args)], capture_output=True, text=True, cwd=cwd or scratch,
                                timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, (program, args, result.stdout[-2000:], result.stderr[-2000:])
    return result


def relion_transform_elements(zdim: int, ydim: int, half: int):
    """RELION's FOR_ALL_ELEMENTS_IN_FFTW_TRANSFORM over a half transform of ``half`` columns (src/fftw.h), with
    its shell rule: ``(k, i, j, idx)`` for each stored element, kp = k if k < half else k - zdim (likewise ip),
    idx = ROUND(sqrt(kp^2 + ip^2 + j^2)) (ROUND of a positive value: floor(x + 0.5))."""
    import math

    for k in range(zdim):
        kp = k if k < half else k - zdim
        for i in range(ydim):
            ip = i if i < half else i - ydim
            for j in range(half):
                yield k, i, j, int(math.sqrt(kp * kp + ip * ip + j * j) + 0.5)


def free_port() -> int:
    """A loopback port no one listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The folder of Debian's initdb and pg_ctl (on the PATH, or in /usr/lib/postgresql/<version>/bin)."""
    found = shutil.which("initdb")
    candidates = [Path(found)] if found else sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return candidates[0].resolve().parent if candidates else None


@contextlib.contextmanager
def postgres_server(fsync: bool = False) -> Iterator[tuple[str | None, str | None]]:
    """A PostgreSQL server of its own in a temporary folder (trust authentication, loopback only; ``fsync`` off
    unless asked): ``(its URL without a database, None)``, or ``(None, why there is none)``."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        yield None, "PostgreSQL is not installed (scripts/test installs Debian's postgresql)"
        return
    base = Path(tempfile.mkdtemp(prefix="noa-postgres-"))
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to nobody
        nobody = pwd.getpwnam("nobody")
        os.chown(base, nobody.pw_uid, nobody.pw_gid)
        run_as = ["runuser", "-u", "nobody", "--"]
    port = free_port()
    data, log = base / "data", base / "log"
    settings = f"-p {port} -k {base} -c listen_addresses=127.0.0.1" + ("" if fsync else " -c fsync=off")
    start = [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "30", "-o", settings,
             "start"]
    try:
        subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "noa", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run(start, check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(base, ignore_errors=True)
        why = getattr(exc, "stderr", b"") or str(exc).encode()
        yield None, f"PostgreSQL could not start: {why.decode(errors='replace').strip()[-300:]}"
        return
    try:
        yield f"postgresql://noa@127.0.0.1:{port}", None
    finally:
        subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def fresh_database(server: str) -> str:
    """A new database on the PostgreSQL ``server`` (a URL without a database): its URL."""
    import sqlalchemy as sa

    name = f"noa_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(f"{server}/postgres".replace("postgresql:", "postgresql+psycopg:"),
                             isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return f"{server}/{name}"


def wait_for(url: str, path: str, timeout: float, proc: subprocess.Popen) -> None:
    """Until ``url + path`` answers 200; an error when ``proc`` exits first or ``timeout`` (s) passes."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url}{path} not 200 after {timeout} s")


SERVE_ARGS = ("--processes", "1", "--log-level", "warning")


def start_server(root: Path | None, log: Path | None, env: dict[str, str] | None = None, *,
                 args: Sequence[str] = SERVE_ARGS, command: Sequence[str] = (sys.executable, "-m", "noa_cli.main"),
                 timeout: float = 300) -> tuple[subprocess.Popen, str]:
    """``command serve *args`` (noa's, from this interpreter) on a free loopback port over the data root
    ``root`` (None: the arguments or ``env`` name it), its output in ``log`` (None: this process's), once
    ready: ``(process, url)``. The caller stops it (:func:`stop_server`). Kernels compile at start-up
    (cached after the first run), hence the generous ``timeout``."""
    url = f"http://127.0.0.1:{(port := free_port())}"
    argv = [*command, "serve", *args, "--host", "127.0.0.1", "--port", str(port)]
    environment = {**os.environ, **({"NOA_DATA_ROOT": str(root)} if root is not None else {}), **(env or {})}
    with open(log, "ab") if log is not None else contextlib.nullcontext() as out:
        proc = subprocess.Popen(argv, cwd=REPO, env=environment, stdout=out, stderr=subprocess.STDOUT if out else None)
    try:
        wait_for(url, "/healthz", 60, proc)
        wait_for(url, "/readyz", timeout, proc)
    except BaseException as exc:
        stop_server(proc)
        tail = log.read_text(errors="replace")[-2000:] if log is not None else ""
        raise RuntimeError(f"server not ready ({exc}): {tail}") from exc
    return proc, url


def stop_server(proc: subprocess.Popen) -> None:
    """Stop a server gracefully (SIGTERM), killing it if it takes over 20 s."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def wait_job(client, location: str, timeout: float = 120, **request) -> dict:
    """The state of the job at ``location`` once it is no longer queued or running (``request``: e.g. the
    headers of the GET); fails after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while (state := client.get(location, **request).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, state
        time.sleep(0.02)
    return state


def random_values(shape, dtype="float32", seed: int = 0, *, span: int | None = 1000, mean: float = 0.0,
                  sd: float = 1.0) -> np.ndarray:
    """Random data of ``dtype``: complex and real values normal (``mean``, ``sd``), integers uniform over
    ``-span..span`` (``0..span`` unsigned) within the type's range, or over the whole range (``span`` None)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = (info.min, info.max) if span is None else (max(info.min, -span), min(info.max, span))
        return rng.integers(low, high, size=shape, endpoint=True).astype(dtype)
    return rng.normal(mean, sd, size=shape).astype(dtype)


# -- arrays in every layout the kernels take ---------------------------------------------------------

LAYOUTS = ("C", "F", "permuted", "sliced")


def layout_values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random values of ``dtype`` in a small range (integers within -100..100; complex with both parts)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dt)
    values = rng.standard_normal(shape) * 10
    if dt.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dt)


def make_array(rng: np.random.Generator, shape, dtype, kind: str) -> nc.Array:
    """An Array of ``shape`` holding random values, laid out as ``kind`` (C, F, permuted, sliced)."""
    if kind == "C":
        return nc.asarray(layout_values(rng, shape, dtype))
    if kind == "F":
        return nc.asarray(layout_values(rng, shape, dtype)).copy("F")
    if kind == "permuted":
        perm = tuple(rng.permutation(4))
        inverse = layout.inverse_permutation(perm)
        base = nc.asarray(layout_values(rng, layout.permute(shape, inverse), dtype))
        return base.permute(perm)
    big = tuple(2 * n + 1 for n in shape)
    base = nc.asarray(layout_values(rng, big, dtype))
    return base[tuple(slice(1, 1 + 2 * n, 2) for n in shape)]


def euler_matrix(alpha: float, beta: float, gamma: float) -> np.ndarray:
    """The ZYZ rotation of Euler angles in radians as RELION 3.1.3's Euler_angles2matrix (src/euler.cpp) and
    pyem's euler2rot write it, line by line: A acting on (x, y, z)."""
    ca, cb, cg = np.cos(alpha), np.cos(beta), np.cos(gamma)
    sa, sb, sg = np.sin(alpha), np.sin(beta), np.sin(gamma)
    cc, cs, sc, ss = cb * ca, cb * sa, sb * ca, sb * sa
    return np.array([[cg * cc - sg * sa, cg * cs + sg * ca, -cg * sb],
                     [-sg * cc - cg * sa, -sg * cs + cg * ca, sg * sb],
                     [sc, ss, cb]])


class ObjectStore:
    """An S3 server on loopback (moto in server mode) that counts the body bytes it sends per object key: what a
    remote read fetched. ``endpoint`` is its URL, ``client`` a boto3 client on it (any key and secret sign for
    moto), ``sent`` bytes of GET bodies per ``bucket/key`` and ``requests`` the ``(method, bucket/key)`` of every
    request since the last :meth:`reset`; ``failing``, when set, is asked of every request (its WSGI environ), and
    those it says True of are answered 500 InternalError (a store failing mid-upload), or with the HTTP status it
    gives instead of True (403: access refused)."""

    def __init__(self) -> None:
        import threading

        import boto3
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class Quiet(MotoRequestHandler):
            def log_request(self, *args) -> None:
                """Requests go unlogged: the tests count what they fetch instead."""

        self.sent: dict[str, int] = {}
        self.requests: list[tuple[str, str]] = []
        self.failing: Callable[[dict], bool | int] | None = None
        moto = DomainDispatcherApplication(create_backend_app)

        def counting(environ, start_response):
            key = environ.get("PATH_INFO", "").lstrip("/")
            self.requests.append((environ.get("REQUEST_METHOD", ""), key))
            failure = self.failing is not None and self.failing(environ)
            if failure:
                environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                if failure == 403:
                    start_response("403 Forbidden", [("Content-Type", "application/xml")])
                    return [b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                            b"<Message>Access Denied</Message></Error>"]
                start_response("500 Internal Server Error", [("Content-Type", "application/xml")])
                return [b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
                        b"<Message>We encountered an internal error.</Message></Error>"]
            chunks = moto(environ, start_response)
            if environ.get("REQUEST_METHOD") == "GET":
                chunks = list(chunks)
                self.sent[key] = self.sent.get(key, 0) + sum(len(c) for c in chunks)
            return chunks

        self.server = make_server("127.0.0.1", free_port(), counting, threaded=True, request_handler=Quiet)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id="testing", aws_secret_access_key="testing")

    def env(self) -> dict[str, str]:
        """The environment of a process reading from this server: its endpoint and credentials moto takes."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1"}

    def reset(self) -> None:
        self.sent.clear()
        self.requests.clear()
        self.failing = None

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join()


@contextlib.contextmanager
def object_store() -> Iterator[ObjectStore]:
    """An :class:`ObjectStore` for the block, shut down after it."""
    store = ObjectStore()
    try:
        yield store
    finally:
        store.close()


class GcsStore:
    """A Google Cloud Storage server on loopback (gcp-storage-emulator, its objects in memory) holding ``bucket``,
    served by this process on a free port. ``endpoint`` is its URL, ``fs`` a gcsfs client on it (anonymous: the
    emulator checks no credentials), ``sent`` bytes of GET answers per ``bucket/key`` (headers included) and
    ``requests`` the ``(method, bucket/key)`` of every request since the last :meth:`reset`; ``refusing``, when
    set, is asked of every ``(method, bucket/key)`` and those it says True of are answered 403 (access refused)."""

    _OBJECT = re.compile(r"/b/(?P<bucket>[^/?]+)/o/(?P<key>[^?]+)")

    def __init__(self, bucket: str) -> None:
        import http.server
        import threading
        from urllib.parse import parse_qs, unquote, urlsplit

        from gcp_storage_emulator.handlers import buckets
        from gcp_storage_emulator.server import RequestHandler
        from gcp_storage_emulator.storage import Storage
        from gcsfs.core import GCSFileSystem  # the JSON API's client (gcsfs.GCSFileSystem asks Google's gRPC too)

        self.sent: dict[str, int] = {}
        self.requests: list[tuple[str, str]] = []
        self.refusing: Callable[[str, str], bool] | None = None
        storage = Storage(use_memory_fs=True)
        buckets.create_bucket(bucket, storage)
        store = self

        def object_name(target: str) -> str:
            parts = urlsplit(target)
            match = GcsStore._OBJECT.search(parts.path)
            if match:
                return f"{match['bucket']}/{unquote(match['key'])}"
            uploaded = parse_qs(parts.query).get("name")  # an upload names its object in the query
            return f"{parts.path.rsplit('/b/', 1)[-1].split('/', 1)[0]}/{uploaded[0]}" if uploaded else parts.path

        class Counting(RequestHandler):
            def setup(self) -> None:
                super().setup()
                self.counting: str | None = None  # the object a GET answers, whose bytes are counted
                write = self.wfile.write

                def counted(data) -> int:
                    # counted before they are sent: a client that has them may look at the count at once
                    if self.counting is not None:
                        store.sent[self.counting] = store.sent.get(self.counting, 0) + len(data)
                    return write(data)

                self.wfile.write = counted  # type: ignore[method-assign]

            def _answer(self, method: str, answer: Callable[[], None]) -> None:
                name = object_name(self.path)
                store.requests.append((method, name))
                if store.refusing is not None and store.refusing(method, name):
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    body = b'{"error": {"code": 403, "message": "anonymous caller does not have access"}}'
                    self.send_response(403)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.counting = name if method == "GET" else None
                try:
                    answer()
                finally:
                    self.counting = None

            def do_GET(self) -> None:
                self._answer("GET", super().do_GET)

            def do_POST(self) -> None:
                self._answer("POST", super().do_POST)

            def do_PUT(self) -> None:
                self._answer("PUT", super().do_PUT)

            def do_DELETE(self) -> None:
                self._answer("DELETE", super().do_DELETE)

            def do_PATCH(self) -> None:
                self._answer("PATCH", super().do_PATCH)

            def log_message(self, *args) -> None:
                """Requests go unlogged: the tests count what they fetch instead."""

        class Quiet(http.server.HTTPServer):
            def handle_error(self, request, client_address) -> None:
                """A client that hangs up early (a read ahead cut short) is no failure of the test."""

        self.server = Quiet(("127.0.0.1", free_port()), functools.partial(Counting, storage))
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.fs = GCSFileSystem(endpoint_url=self.endpoint, token="anon", skip_instance_cache=True,
                                use_listings_cache=False)

    def env(self) -> dict[str, str]:
        """The environment of a process reading from this server (gcsfs and Google's clients read it)."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def reset(self) -> None:
        self.sent.clear()
        self.requests.clear()
        self.refusing = None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def in_environment(store, monkeypatch):
    """``store`` (an :class:`ObjectStore` or :class:`GcsStore`) as this process's storage: its endpoint and
    credentials in the environment (``monkeypatch``), its counts reset; the store given back."""
    for name, value in store.env().items():
        monkeypatch.setenv(name, value)
    store.reset()
    return store


@contextlib.contextmanager
def gcs_store(bucket: str) -> Iterator[GcsStore]:
    """A :class:`GcsStore` holding ``bucket`` for the block, shut down after it; the test skips where gcsfs or
    gcp-storage-emulator is not installed (both in noa's dev extras)."""
    pytest.importorskip("gcsfs", reason="gs:// needs gcsfs (pip install gcsfs)")
    pytest.importorskip("gcp_storage_emulator", reason="the GCS tests need gcp-storage-emulator")
    store = GcsStore(bucket)
    try:
        yield store
    finally:
        store.close()
