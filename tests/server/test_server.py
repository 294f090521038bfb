"""The HTTP service's own machinery, in process: settings, sandbox, problems, auth, limits, jobs, OpenAPI.

Operations end to end (against a real uvicorn, compared with the CLI) are in test_server_live.py.
"""

from __future__ import annotations

import gzip
import json
import os
import time
import warnings
from pathlib import Path, PurePosixPath

import mrcfile
import numpy as np
import pytest
import tifffile

from helpers import assert_problem, wait_job, write_mrc

warnings.filterwarnings("ignore", message=".*httpx.*")
from fastapi.testclient import TestClient  # noqa: E402

from noa_core import errors  # noqa: E402
from noa_core.compute.expr import ExpressionError  # noqa: E402
from noa_core.io import beneath  # noqa: E402
from noa_core.limits import check_voxels  # noqa: E402
from noa_server import execution  # noqa: E402
from noa_server.app import create_app  # noqa: E402
from noa_server.problems import MEDIA_TYPE, ProblemError, classify  # noqa: E402
from noa_server.sandbox import Sandbox  # noqa: E402
from noa_server.settings import Settings  # noqa: E402

KEY = "test-key-123"
AUTH = {"X-API-Key": KEY}


@pytest.fixture
def root(tmp_path) -> Path:
    data = tmp_path / "root"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "a.map").write_bytes(b"not really an mrc")
    return data


@pytest.fixture
def client(root, make_client):
    return make_client(data_root=root, api_key=KEY, max_body_bytes=4096)


# -- settings ---------------------------------------------------------------------------------------


def test_settings_from_env_then_overrides(tmp_path):
    env = {"NOA_DATA_ROOT": str(tmp_path), "NOA_API_KEY": "k", "NOA_WORKERS": "3", "NOA_MAX_VOXELS": "10",
           "NOA_CORS_ORIGINS": "http://a.example, http://b.example", "NOA_MAX_BODY_BYTES": ""}
    settings = Settings.from_env(env, workers=1, api_key=None)
    assert settings.data_root == tmp_path.resolve()
    assert settings.api_key == "k"  # None overrides nothing
    assert settings.workers == 1
    assert settings.max_voxels == 10
    assert settings.max_body_bytes == Settings().max_body_bytes  # empty variable = unset
    assert settings.cors_origins == ("http://a.example", "http://b.example")
    assert settings.jobs_dir == tmp_path.resolve() / ".noa-jobs"
    assert Settings.from_env(env, state_dir=tmp_path / "s").jobs_dir == (tmp_path / "s").resolve()
    assert Settings().jobs_dir is None
    assert Settings.from_env({"NOA_JOB_TTL": "3600"}).job_ttl == 3600


def test_settings_reject_nonsense():
    with pytest.raises(ValueError):
        Settings(workers=0)
    with pytest.raises(ValueError, match="processes"):
        Settings(processes=0)
    with pytest.raises(ValueError):
        Settings(max_voxels=0)
    with pytest.raises(ValueError, match="job_ttl"):
        Settings(job_ttl=-1)
    assert Settings(api_key="").api_key is None  # an empty key must not mean "every key matches ''"


def test_kernel_threads_fit_the_cores():
    from noa_core.limits import available_cores

    for processes in (1, 2, 5):
        for workers in (1, 2, 3, 64):
            threads = Settings(workers=workers, processes=processes).kernel_threads
            assert threads >= 1
            assert processes * workers * threads <= max(available_cores(), processes * workers)


def test_settings_travel_through_the_environment(tmp_path):
    """How `noa serve` hands its settings to the server processes it starts."""
    for settings in (Settings(), Settings(data_root=tmp_path, state_dir=tmp_path / "s", api_key="k", workers=3,
                                          processes=4, cors_origins=("http://a.example", "http://b.example"),
                                          tmp_dir=tmp_path, job_ttl=0, max_voxels=7, max_body_bytes=9)):
        assert Settings.from_env(settings.to_env()) == settings


# -- sandbox ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, status", [
    ("../secret", 403), ("sub/../../secret", 403), ("..", 403), ("/etc/passwd", 403),
    ("sub%2F..%2F..%2Fsecret", 403), ("%2e%2e/secret", 403), ("%2E%2E%2Fsecret", 403), ("sub\\..\\x", 403),
    ("a\x00b", 403), ("bad\udc80", 403), ("\ud800", 403), ("", 400), (".", 403), ("x" * 2000, 400),
    (".noa-jobs/abc.json", 403),
])
def test_sandbox_refuses(root, path, status):
    sandbox = Sandbox(root, root / ".noa-jobs")
    with pytest.raises(ProblemError) as caught:
        sandbox.resolve(path)
    assert caught.value.status == status


def test_sandbox_follows_symlinks(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.map").write_bytes(b"x")
    (root / "out").symlink_to(outside)
    (root / "inside").symlink_to(root / "sub")
    sandbox = Sandbox(root)
    with pytest.raises(ProblemError) as caught:
        sandbox.resolve("out/secret.map")
    assert caught.value.status == 403
    with pytest.raises(ProblemError):
        sandbox.resolve("out/new.map")  # an output through a link that leaves the root
    assert sandbox.resolve("inside/a.map") == (root / "sub" / "a.map").resolve()
    assert sandbox.resolve("sub/./a.map") == (root / "sub" / "a.map").resolve()


def test_sandbox_walk_agrees_with_path_resolve(tmp_path):
    """The sandbox's own walk below the root gives what ``Path.resolve`` gives, on every path made of
    these components: folders, files, links to folders (inside and out), links to files, dangling
    and looping links, and names that do not exist."""
    import itertools

    root = tmp_path / "root"
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f.map").write_bytes(b"x")
    (root / "file").write_bytes(b"x")
    (tmp_path / "outside").mkdir()
    links = {"to_d": root / "d", "to_out": tmp_path / "outside", "to_file": root / "d" / "f.map",
             "dangling": root / "nowhere", "loop": root / "loop", "rel": Path("d/e")}
    for name, target in links.items():
        (root / name).symlink_to(target)
        (root / "d" / f"{name}2").symlink_to(target)
    sandbox = Sandbox(root)
    names = ["d", "e", "f.map", "file", "missing", *links, *(f"{n}2" for n in links)]
    for depth in (1, 2, 3):
        for parts in itertools.product(names, repeat=depth):
            pure = PurePosixPath(*parts)
            try:
                expected = (sandbox.root / pure).resolve()
            except RuntimeError:  # a loop of links: refused, not a server error
                with pytest.raises(ProblemError, match="loop of symbolic links"):
                    sandbox._follow(pure)
                continue
            assert sandbox._follow(pure) == expected, pure
    assert sandbox.resolve("sub/new.mrc") == sandbox.root / "sub" / "new.mrc"


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "walk"])
def test_sandbox_opens_what_it_checked(root, monkeypatch, walk):
    """Files are opened beneath the root along the checked path (symlinks inside the root still
    work: the check resolved them); what cannot be opened is a 404, never a server error."""

    monkeypatch.setattr(beneath, "_openat2_usable", beneath._openat2_usable and not walk)
    (root / "inside").symlink_to(root / "sub")
    sandbox = Sandbox(root)
    fd, path = sandbox.open("inside/a.map")
    try:
        assert os.read(fd, 100) == b"not really an mrc" and path == sandbox.root / "sub" / "a.map"
    finally:
        os.close(fd)
    fd, path = sandbox.open_folder("inside/new.map")
    try:
        assert os.path.samefile(f"/proc/self/fd/{fd}", root / "sub") and path.name == "new.map"
    finally:
        os.close(fd)
    for missing in ("sub/" + "x" * 300, "sub/none.map", "sub/a.map/x"):
        with pytest.raises(ProblemError) as caught:
            sandbox.open(missing)
        assert caught.value.status == 404, missing
    with pytest.raises(ProblemError, match="the folder nowhere does not exist") as caught:
        sandbox.open_folder("nowhere/out.mrc")
    assert caught.value.status == 404


def test_path_errors_name_files_as_the_client_did(client, root):
    """Inputs and outputs are opened beneath the root and handed to noa_core as /proc/self/fd paths;
    its messages still name the client's files."""
    write_mrc(root / "sub" / "real.mrc", np.arange(12, dtype=np.float32).reshape(3, 4))
    body = {"src": "sub/real.mrc", "dst": "sub/copy.mrc"}
    assert client.post("/v1/paths/copy", json=body, headers=AUTH).status_code == 201
    exists = assert_problem(client.post("/v1/paths/copy", json=body, headers=AUTH), 409, "output-exists")
    unreadable = assert_problem(client.post("/v1/paths/copy", json={"src": "sub/a.map", "dst": "c.mrc"}, headers=AUTH),
                                422, "unreadable-file")
    assert exists["detail"].startswith("sub/copy.mrc: ") and unreadable["detail"].startswith("sub/a.map: ")


# -- problems ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("exc, status", [
    (errors.MissingFileError("x"), 404), (errors.OutputExistsError("x"), 409), (errors.TruncatedFileError("x"), 422),
    (errors.WriteDTypeError("x"), 422), (errors.UnknownFormatError("x"), 422), (ExpressionError("x"), 400),
    (errors.PermutationError("x"), 400), (errors.BroadcastError("x"), 422), (errors.ShapeError("x"), 422),
    (errors.DTypeError("x"), 422), (errors.DeviceError("x"), 400), (errors.NoaError("x"), 422),
])
def test_noa_errors_map_by_type(exc, status):
    assert classify(exc).status == status


def test_internal_errors_are_not_classified():
    assert classify(RuntimeError("boom")) is None
    assert classify(OSError("disk")) is None


def test_check_voxels():
    from noa_core.errors import LimitError

    check_voxels([[1, 20, 20, 20]], 8000)
    check_voxels([[1, 1, 4, 4], [3, 1, 1, 4]], 48)  # the broadcast of the two: (3,1,4,4)
    with pytest.raises(LimitError) as caught:
        check_voxels([[1, 1, 4, 4], [3, 1, 1, 4]], 47)
    assert (classify(caught.value).status, classify(caught.value).slug) == (422, "too-many-voxels")
    with pytest.raises(LimitError):
        check_voxels([[1, 1, 1, 5], [7, 1, 1]], 34)  # a target of lower rank is padded on the left


# -- the app over HTTP (no operation needs to succeed here) ----------------------------------------


def test_health_needs_no_key(client):
    assert client.get("/healthz").json() == {"status": "ok", "checks": {}}
    # Ready with no kernel compiled (the tests turn the warm-up off): requests are answered meanwhile.
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"kernels": "off", "data_root": "reachable"}


def test_not_ready_when_the_data_root_is_gone(make_client, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    client = make_client(data_root=root)
    assert client.get("/readyz").status_code == 200
    root.rename(tmp_path / "moved")  # an unmounted share
    body = assert_problem(client.get("/readyz"), 503, "not-ready")
    assert "data_root: unreachable" in body["detail"] and "kernels" not in body["detail"]


@pytest.mark.parametrize("headers, detail", [({}, "required"), ({"X-API-Key": "wrong"}, "invalid"),
                                             ({"X-API-Key": KEY + "x"}, "invalid")])
def test_api_key_required(client, headers, detail):
    response = client.post("/v1/paths/info", json={"path": "sub/a.map"}, headers=headers)
    body = assert_problem(response, 401, "unauthorized")
    assert detail in body["detail"]
    assert response.headers["www-authenticate"].startswith("APIKey")
    assert KEY not in response.text


def test_api_key_checked_before_the_body_is_read(client):
    # Over the body limit and unauthenticated: the key is checked first, nothing is read.
    response = client.post("/v1/upload/info", files={"file": ("a.mrc", b"x" * 10_000)})
    assert_problem(response, 401)


def test_no_key_configured_means_open(root):
    with TestClient(create_app(Settings(warmup=False, data_root=root)), raise_server_exceptions=False) as c:
        assert_problem(c.post("/v1/paths/info", json={"path": "../x"}), 403, "path-refused")
        assert "security" not in json.dumps(c.get("/openapi.json").json()["paths"])


def test_body_limit_by_content_length(client):
    response = client.post("/v1/upload/info", files={"file": ("a.mrc", b"x" * 10_000)}, headers=AUTH)
    assert_problem(response, 413, "body-too-large")


@pytest.mark.parametrize("path, status", [
    ("../secret.map", 403), ("/etc/passwd", 403), ("sub/../../x.map", 403), ("..%2F..%2Fetc%2Fpasswd", 403),
    ("%2e%2e/x.map", 403), (".noa-jobs/x.json", 403), ("a\\b.map", 403),
])
def test_path_routes_refuse_escapes(client, path, status):
    assert_problem(client.post("/v1/paths/info", json={"path": path}, headers=AUTH), status, "path-refused")
    assert_problem(client.post("/v1/paths/permute", json={"src": "sub/a.map", "dst": path, "axes": [0, 1, 3, 2]},
                               headers=AUTH), status, "path-refused")
    assert_problem(client.post("/v1/jobs", json={"operation": "copy", "src": path, "dst": "o.mrc"}, headers=AUTH),
                   status, "path-refused")


def test_download_refuses_encoded_traversal(client):
    # httpx would normalise a raw '../'; the live tests send that over a socket.
    for url in ("/v1/files/..%2F..%2Fetc%2Fpasswd", "/v1/files/sub%2F..%2F..%2Fx", "/v1/files/%2e%2e%2fx"):
        assert_problem(client.get(url, headers=AUTH), 403, "path-refused")
    assert_problem(client.get("/v1/files/sub/none.map", headers=AUTH), 404, "file-not-found")
    got = client.get("/v1/files/sub/a.map", headers=AUTH)
    assert got.status_code == 200 and got.content == b"not really an mrc"


@pytest.mark.parametrize("url, body", [
    ("/v1/paths/permute", {"src": "sub/a.map", "dst": "o.map", "axes": [0, 1, 2]}),
    ("/v1/paths/permute", {"src": "sub/a.map", "dst": "o.map", "axes": [0, 1, 2, 4]}),
    ("/v1/paths/broadcast", {"src": "sub/a.map", "dst": "o.map", "shape": [1, 2, 3, 4, 5]}),
    ("/v1/paths/broadcast", {"src": "sub/a.map", "dst": "o.map", "shape": [-1]}),
    ("/v1/paths/copy", {"src": "sub/a.map", "dst": "o.map", "dtype": "float128"}),
    ("/v1/paths/copy", {"src": "sub/a.map", "dst": "o.map", "order": "X"}),
    ("/v1/paths/info", {"path": "sub/a.map", "colour": "blue"}),
    ("/v1/paths/ewise", {"expression": "a", "srcs": [], "dst": "o.map"}),
    ("/v1/jobs", {"operation": "explode", "path": "sub/a.map"}),
])
def test_malformed_parameters_are_400(client, url, body):
    problem = assert_problem(client.post(url, json=body, headers=AUTH), 400, "invalid-parameters")
    assert problem["errors"]


def test_unknown_route_and_method(client):
    assert_problem(client.get("/v1/nothing", headers=AUTH), 404)
    response = client.delete("/healthz")
    assert_problem(response, 405)
    assert response.headers["allow"] == "GET"
    # Allow names every method of the path, not just those of the first route that matched it.
    assert client.put("/v1/jobs/" + "0" * 32, headers=AUTH).headers["allow"] == "DELETE, GET"


def test_internal_errors_hide_details(client, monkeypatch):
    def explode(*args):
        raise RuntimeError("secret /srv/internal/path")

    monkeypatch.setattr(execution, "run_on_paths", explode)
    response = client.post("/v1/paths/info", json={"path": "sub/a.map"}, headers=AUTH)
    body = assert_problem(response, 500)
    assert "secret" not in response.text and "reference" in body["detail"]


def test_noa_errors_name_files_as_the_client_did(client, root):
    response = client.post("/v1/paths/info", json={"path": "sub/missing.map"}, headers=AUTH)
    body = assert_problem(response, 404, "file-not-found")
    assert str(root) not in body["detail"] and "sub/missing.map" in body["detail"]


def test_upload_errors_leave_no_temporary_files(client, tmp_path):
    response = client.post("/v1/upload/permute", data={"axes": ["0", "1", "3", "2"]},
                           files={"file": ("junk.mrc", b"\x01" * 1500)}, headers=AUTH)
    body = assert_problem(response, 422, "unreadable-file")
    assert body["detail"].startswith("junk.mrc")
    assert list((tmp_path / "tmp").iterdir()) == []


def test_cors_off_unless_configured(root):
    headers = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    with TestClient(create_app(Settings(warmup=False, data_root=root))) as c:
        assert "access-control-allow-origin" not in c.get("/healthz", headers=headers).headers
    settings = Settings(data_root=root, api_key=KEY, cors_origins=("http://app.example",), warmup=False)
    with TestClient(create_app(settings)) as c:
        preflight = c.options("/v1/paths/info", headers={**headers, "Access-Control-Request-Headers": "X-API-Key"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "http://app.example"
        refused = c.post("/v1/paths/info", json={"path": "x"}, headers={"Origin": "http://app.example"})
        assert refused.status_code == 401  # CORS headers even on early refusals
        assert refused.headers["access-control-allow-origin"] == "http://app.example"


def test_paths_disabled_without_data_root():
    with TestClient(create_app(Settings(warmup=False)), raise_server_exceptions=False) as c:
        assert_problem(c.post("/v1/paths/info", json={"path": "a.map"}), 403, "paths-disabled")
        assert_problem(c.post("/v1/jobs", json={"operation": "info", "path": "a.map"}), 403, "paths-disabled")


# -- OpenAPI ------------------------------------------------------------------------------------------


def test_openapi_documents_every_response(client):
    schema = client.get("/openapi.json").json()
    assert client.get("/docs").status_code == 200
    assert schema["components"]["securitySchemes"]["APIKeyHeader"]["name"] == "X-API-Key"
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "HTTPValidationError" not in json.dumps(responses), path  # validation errors are 400s
            for status, response in responses.items():
                if status[0] in "45":
                    assert list(response["content"]) == [MEDIA_TYPE], (path, method, status)
            if path.startswith("/v1"):
                assert "401" in responses and operation["security"], path
                assert "400" in responses, path
    for op in ("info", "stats", "permute", "broadcast", "copy", "ewise"):
        assert f"/v1/upload/{op}" in schema["paths"] and f"/v1/paths/{op}" in schema["paths"]
    assert "image/tiff" in schema["paths"]["/v1/upload/copy"]["post"]["responses"]["200"]["content"]


def test_the_schemas_say_how_many_inputs_an_operation_takes(client):
    """An FSC takes two half maps and a mask at most: its request schemas say so (a schema-valid request of one file
    was refused, which schemathesis found), and one input is a 400 naming the field."""
    schema = client.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    for path, field in (("/v1/upload/fsc", "files"), ("/v1/paths/fsc", "srcs")):
        body = schema["paths"][path]["post"]["requestBody"]["content"]
        name = next(iter(body.values()))["schema"]["$ref"].rsplit("/", 1)[1]
        described = components[name]["properties"][field]
        assert (described["minItems"], described["maxItems"]) == (2, 3), path
    one = client.post("/v1/upload/fsc", files=[("files", ("half1.mrc", b"x"))], headers=AUTH)
    assert "files" in assert_problem(one, 400)["detail"]
    one = client.post("/v1/paths/fsc", json={"srcs": ["sub/a.map"]}, headers=AUTH)
    assert "srcs" in assert_problem(one, 400)["detail"]


# -- jobs over HTTP (the store: test_jobs.py) -------------------------------------------------------


def test_job_routes_over_http(client, root):
    response = client.post("/v1/jobs", json={"operation": "info", "path": "sub/a.map"}, headers=AUTH)
    assert response.status_code == 202
    location = response.headers["location"]
    assert location == f"/v1/jobs/{response.json()['id']}"
    state = wait_job(client, location, 10, headers=AUTH)
    assert state["status"] == "failed" and state["error"]["status"] == 422  # not an MRC file
    assert_problem(client.get(location + "/result", headers=AUTH), 409, "job-not-succeeded")
    assert client.delete(location, headers=AUTH).status_code == 204
    assert_problem(client.get(location, headers=AUTH), 404, "job-not-found")
    assert_problem(client.get("/v1/jobs/" + "0" * 32, headers=AUTH), 404, "job-not-found")
    assert_problem(client.get("/v1/jobs/not-an-id", headers=AUTH), 400, "invalid-parameters")
    assert client.get("/v1/jobs", headers=AUTH).json() == {"jobs": [], "next": None}  # no record left


def test_missing_data_root_stops_the_server(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        create_app(Settings(warmup=False, data_root=tmp_path / "typo"))
    assert not (tmp_path / "typo").exists()


# -- plumbing, in process, with the real operations on small files the tests write with mrcfile -------


def test_upload_plumbing(client, tmp_path):
    data = write_mrc(tmp_path / "in.mrc", np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4))
    sent = gzip.compress((tmp_path / "in.mrc").read_bytes())
    response = client.post("/v1/upload/permute", data={"axes": ["0", "1", "3", "2"], "as_stack": "true"},
                           files={"file": ("../../my file.map.gz", sent)}, headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"] == 'attachment; filename="my_file_permute.mrc"'
    notices = json.loads(response.headers["noa-notices"])
    assert all("noa-upload" not in n and str(tmp_path) not in n for n in notices)
    (tmp_path / "out.mrc").write_bytes(response.content)
    with mrcfile.open(tmp_path / "out.mrc") as out:  # read as a stack of 2 images, each transposed
        assert out.header.ispg == 0
        assert np.array_equal(out.data, data.transpose(0, 2, 1))
    assert list((tmp_path / "tmp").iterdir()) == []


def test_upload_plumbing_large_result_and_format(client, tmp_path, monkeypatch):
    monkeypatch.setattr(execution, "INLINE_BYTES", 64)  # any result is streamed from its file
    data = write_mrc(tmp_path / "a.mrc", np.arange(12, dtype=np.float32).reshape(3, 4))
    response = client.post("/v1/upload/copy", data={"format": "tiff", "order": "F"},
                           files={"file": ("a.mrc", (tmp_path / "a.mrc").read_bytes())}, headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/tiff"
    assert response.headers["content-disposition"] == 'attachment; filename="a_copy.tif"'
    (tmp_path / "out.tif").write_bytes(response.content)
    assert np.array_equal(tifffile.imread(tmp_path / "out.tif").reshape(-1), data.T.reshape(-1))  # column-major
    assert list((tmp_path / "tmp").iterdir()) == []  # removed once streamed


def test_a_result_goes_to_the_client_in_its_names_with_non_finite_numbers_spelt():
    """Server paths in any text, however deep, become the client's names; NaN and infinities (JSON has none) are
    spelt as strings wherever they are, NumPy's too; numbers, booleans and None go as they are."""
    names = execution.ClientNames({"/srv/root/": "", "/srv/root": "the data root", "/proc/self/fd/7": "a.mrc"})
    result = {"path": "/srv/root/maps/a.mrc", "count": 3, "flag": True, "none": None, "label": "no path in it",
              "values": [1.5, float("nan"), [float("inf"), -float("inf")], np.float64("nan"), np.float32(2)],
              "where": ("/srv/root", {"file": "/proc/self/fd/7: read"})}
    assert execution.for_client(result, names) == {
        "path": "maps/a.mrc", "count": 3, "flag": True, "none": None, "label": "no path in it",
        "values": [1.5, "NaN", ["Infinity", "-Infinity"], "NaN", 2.0],
        "where": ["the data root", {"file": "a.mrc: read"}]}


def test_upload_json_plumbing(client, tmp_path):
    data = write_mrc(tmp_path / "x.mrc", np.array([[[-np.inf, 1], [2, 3]], [[4, 5], [6, 7]]], np.float32), stack=True)
    sent = (tmp_path / "x.mrc").read_bytes()
    info = client.post("/v1/upload/info", files={"file": ("x.map", sent)}, headers=AUTH).json()
    assert info["path"] == "x.map" and info["shape"] == [2, 1, 2, 2] and info["format"] == "mrc"
    stats = client.post("/v1/upload/stats", data={"per_batch": "true"}, files={"file": ("x.map", sent)},
                        headers=AUTH)
    assert stats.status_code == 200, stats.text
    body = stats.json()
    assert body["path"] == "x.map" and body["min"] == "-Infinity" and body["max"] == 7.0 and body["std"] == "NaN"
    assert body["per_batch"][1] == {"batch": 1, "min": 4.0, "max": 7.0, "mean": 5.5,
                                    "std": float(np.std(data[1], dtype=np.float64))}
    ewise = client.post("/v1/upload/ewise", data={"expression": "a * b", "dtype": "float64", "format": "tiff"},
                        files=[("files", ("a.map", sent)), ("files", ("b.map", sent))], headers=AUTH)
    assert ewise.status_code == 200, ewise.text
    (tmp_path / "e.tif").write_bytes(ewise.content)
    assert np.array_equal(tifffile.imread(tmp_path / "e.tif").reshape(data.shape), data.astype(np.float64) ** 2)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_path_plumbing(client, root):
    data = write_mrc(root / "sub" / "real.mrc", np.arange(12, dtype=np.float32).reshape(3, 4))
    response = client.post("/v1/paths/broadcast", json={"src": "sub/real.mrc", "dst": "sub/b.mrc",
                                                         "shape": [2, 2, 3, 4], "overwrite": True}, headers=AUTH)
    assert response.status_code == 201, response.text
    assert response.json()["output"] == "sub/b.mrc"
    assert response.headers["location"] == "/v1/files/sub/b.mrc"
    with mrcfile.open(root / "sub" / "b.mrc") as out:
        assert np.array_equal(out.data.reshape(2, 2, 3, 4), np.broadcast_to(data, (2, 2, 3, 4)))
    info = client.post("/v1/paths/info", json={"path": "sub/real.mrc"}, headers=AUTH).json()
    assert info["path"] == "sub/real.mrc" and info["shape"] == [1, 1, 3, 4]
    too_big = client.post("/v1/paths/broadcast", json={"src": "sub/real.mrc", "dst": "sub/c.mrc",
                                                        "shape": [10**6, 10**6, 3, 4]}, headers=AUTH)
    assert_problem(too_big, 422, "too-many-voxels")
    assert not (root / "sub" / "c.mrc").exists()


def test_job_plumbing_reports_progress(client, root):
    data = write_mrc(root / "sub" / "real.mrc", (np.arange(-6, 6).reshape(3, 4) * 50).astype(np.float32))
    response = client.post("/v1/jobs", json={"operation": "copy", "src": "sub/real.mrc", "dst": "c.tif",
                                             "dtype": "uint8", "clamp": True}, headers=AUTH)
    assert response.status_code == 202
    deadline = time.monotonic() + 10
    while (state := client.get(response.headers["location"], headers=AUTH).json())["status"] != "succeeded":
        assert time.monotonic() < deadline and state["status"] in ("queued", "running"), state
        time.sleep(0.01)
    assert state["progress"]["done"] == state["progress"]["total"] >= 1
    assert state["request"]["dtype"] == "uint8" and state["request"]["clamp"] is True
    result = client.get(response.headers["location"] + "/result", headers=AUTH)
    assert result.json()["output"] == "c.tif"
    assert np.array_equal(tifffile.imread(root / "c.tif"), np.clip(data, 0, 255).astype(np.uint8))


def test_os_errors_a_request_causes_are_problems_not_500s(tmp_path):
    """Issue 32 item 9b: a name longer than 255 bytes, or a folder given to edit, answered 500 (and failed jobs
    as internal errors). Each is now its problem type, naming the file but never the server's path to it."""
    root = tmp_path / "root"
    root.mkdir()
    write_mrc(root / "a.mrc", np.zeros((3, 4, 5), np.float32), stack=True)
    (root / "folder").mkdir()
    long_name = "x" * 300 + ".mrc"
    with TestClient(create_app(Settings(warmup=False, data_root=root)), raise_server_exceptions=False) as c:
        body = assert_problem(c.post("/v1/paths/copy", json={"src": "a.mrc", "dst": long_name}), 400, "invalid-path")
        assert "File name too long" in body["detail"] and str(root) not in body["detail"]
        assert_problem(c.post("/v1/paths/split", json={"src": "a.mrc", "dst": "y" * 300}), 400, "invalid-path")
        assert_problem(c.post("/v1/paths/header", json={"path": "folder", "pixel_size": [1.0]}), 422, "unreadable-file")
        job = c.post("/v1/jobs", json={"operation": "copy", "src": "a.mrc", "dst": long_name})
        assert job.status_code == 202
        state = wait_job(c, job.headers["location"], 30)
        assert state["status"] == "failed" and state["error"]["type"] == "urn:noa:problem:invalid-path"
    assert sorted(p.name for p in root.iterdir() if p.name != ".noa-jobs") == ["a.mrc", "folder"]


def test_the_voxel_limit_is_checked_while_planning(tmp_path):
    """Issue 32 item 12: the limit was checked after planning, and plans listed every output section: resize to
    1e9 sections and a 10 KB --keep naming 125 million sections grew past 6.5 GB before the 422."""
    import resource

    root = tmp_path / "root"
    root.mkdir()
    write_mrc(root / "many.mrcs", np.zeros((100_000, 2, 2), np.float32), stack=True)
    keep = ",".join(["0-99999"] * 1250)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with TestClient(create_app(Settings(warmup=False, data_root=root, max_voxels=1_000_000))) as c:
        body = assert_problem(c.post("/v1/paths/sections", json={"src": "many.mrcs", "dst": "k.mrcs", "keep": keep}),
                              422, "too-many-voxels")
        assert "the limit is 1000000" in body["detail"]
        assert_problem(c.post("/v1/paths/resize", json={"src": "many.mrcs", "dst": "r.mrcs",
                                                        "shape": [1_000_000_000, 2, 2]}), 422, "too-many-voxels")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 500, grown_mib  # listing the sections took gigabytes
    assert sorted(p.name for p in root.iterdir() if p.name != ".noa-jobs") == ["many.mrcs"]


def test_misspelt_form_fields_are_refused_naming_them(make_client, tmp_path):
    """Issue 40 item 4: `-F bfactr=-50` was ignored (200, no B-factor applied); `-F lowpas=10` was answered
    "give a lowpass, a highpass or a bfactor". The multipart routes refuse unknown fields as the JSON ones do."""
    from helpers import write_mrc

    write_mrc(tmp_path / "m.mrc", np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32), voxel_size=2)
    client = make_client()
    upload = {"file": ("m.mrc", (tmp_path / "m.mrc").read_bytes())}
    for fields, name, hint in (({"lowpass": "10", "bfactr": "-50"}, "bfactr", "bfactor"),
                               ({"lowpas": "10"}, "lowpas", "lowpass"), ({"zzz": "1"}, "zzz", None)):
        body = assert_problem(client.post("/v1/upload/filter", data=fields, files=upload), 400, "invalid-parameters")
        assert body["errors"][0]["loc"] == ["body", name], body
        assert (f"did you mean {hint}" in body["errors"][0]["msg"]) if hint else "did you mean" not in body["detail"]
    assert client.post("/v1/upload/filter", data={"lowpass": "10", "bfactor": "-50"}, files=upload).status_code == 200
    assert client.post("/v1/upload/copy", data={"format": "tiff"}, files=upload).status_code == 200
