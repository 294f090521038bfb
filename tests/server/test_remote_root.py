"""The service's data root as a prefix of object storage (``--data-root s3://bucket/prefix``), against a moto S3
server on loopback: paths mode, downloads, jobs, the viewer and its listing read and write keys under the prefix,
by the sandbox rules of a local root, and nothing outside it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import mrcfile
import numpy as np
import pytest
from PIL import Image

from helpers import ObjectStore, assert_problem, gcs_store, in_environment, noa, object_store, wait_job, write_mrc
from noa_core.io.remote import RemotePath
from noa_server.problems import ProblemError
from noa_server.sandbox import RemoteSandbox
from noa_server.settings import Settings

BUCKET = "facility"
ROOT = f"s3://{BUCKET}/data"  # the data root: keys under data/, never data-other/
STACK_SHAPE = (3, 20, 24)


@pytest.fixture(scope="module")
def volume() -> np.ndarray:
    return np.random.default_rng(46).normal(size=STACK_SHAPE).astype(np.float32)


@pytest.fixture(scope="module")
def local_root(tmp_path_factory, volume) -> Path:
    """The files of the bucket's prefix, as a local data root holds them (the oracle of the viewer's pictures)."""
    root = tmp_path_factory.mktemp("local-root")
    (root / "maps").mkdir()
    write_mrc(root / "maps" / "map.mrc", volume, voxel_size=1.5)
    (root / "maps" / "particles.star").write_text(
        "data_particles\n\nloop_\n_rlnImageName #1\n000001@../other/x.mrcs\n")
    write_mrc(root / "maps" / "stack.mrcs", volume, stack=True)
    (root / "maps" / "inside.star").write_text(
        "data_particles\n\nloop_\n_rlnImageName #1\n000002@maps/stack.mrcs\n000003@maps/stack.mrcs\n")
    return root


@pytest.fixture(scope="module")
def s3(local_root) -> Iterator[ObjectStore]:
    """The S3 server: the local root's files under ``data/``, and a sibling prefix ``data-other/`` beside it."""
    with object_store() as store:
        store.client.create_bucket(Bucket=BUCKET)
        for path in local_root.rglob("*"):
            if path.is_file():
                store.client.upload_file(str(path), BUCKET, f"data/{path.relative_to(local_root).as_posix()}")
        store.client.put_object(Bucket=BUCKET, Key="data-other/x.mrc", Body=(local_root / "maps" / "map.mrc")
                                .read_bytes())
        store.client.put_object(Bucket=BUCKET, Key="other/x.mrcs", Body=b"\0" * 2048)
        yield store


@pytest.fixture
def s3_env(s3, monkeypatch) -> ObjectStore:
    return in_environment(s3, monkeypatch)


@pytest.fixture
def client(s3_env, make_client, tmp_path):
    """A service whose data root is ``data/`` of the bucket; the requests of its start (the bucket checked) are
    not counted."""
    made = make_client(data_root=ROOT, state_dir=tmp_path / "state", workers=1)
    s3_env.reset()
    return made


def _object(store: ObjectStore, key: str) -> bytes:
    return store.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _mrc_data(raw: bytes, tmp_path: Path) -> np.ndarray:
    """The data of an MRC file's bytes, as mrcfile reads them."""
    path = tmp_path / "downloaded.mrc"
    path.write_bytes(raw)
    with mrcfile.open(path, permissive=False) as f:
        return np.array(f.data)


# -- the sandbox's rule, on text alone ---------------------------------------------------------------------

@pytest.mark.parametrize("relative", ["../x", "%2e%2e/x", "a/%2F/b", "/abs/x.mrc", "a\\b", "a\x00b", ".", "x" * 1025,
                                      "../data-other/x.mrc", "a/../../data-other/x.mrc"])
def test_a_remote_root_refuses_what_a_local_root_refuses(relative):
    from noa_server.problems import ProblemError

    with pytest.raises(ProblemError) as caught:
        RemoteSandbox(RemotePath(ROOT)).resolve(relative)
    assert caught.value.status in (400, 403)


def test_a_remote_root_keeps_keys_under_its_prefix_by_segments():
    sandbox = RemoteSandbox(RemotePath(ROOT + "/"))
    assert sandbox.resolve("maps//map.mrc").url == f"{ROOT}/maps/map.mrc"
    assert sandbox.resolve("-other/x.mrc").url == f"{ROOT}/-other/x.mrc"  # a name in the prefix, not data-other/
    for refused in ("maps/map.mrc?versionId=abc", "out/q.mrc?x=1", "a#b.mrc"):  # a URL's query or fragment
        with pytest.raises(ProblemError, match="not allowed in paths on object storage"):
            sandbox.resolve(refused)


def test_settings_keep_a_bucket_prefix_as_its_url(tmp_path):
    settings = Settings.from_env({"NOA_DATA_ROOT": ROOT + "/", "NOA_STATE_DIR": str(tmp_path)})
    assert isinstance(settings.data_root, RemotePath) and settings.data_root.url == ROOT
    assert Settings.from_env(settings.to_env()).data_root == RemotePath(ROOT)
    with pytest.raises(ValueError, match=r"on object storage: .*--state-dir"):
        Settings(data_root=ROOT)  # type: ignore[arg-type]  # a string, as NOA_DATA_ROOT gives it
    for wrong in ("https://example.org/data", "s3://facility//data", "s3://facility/data?versionId=1"):
        with pytest.raises(ValueError, match="bucket or a prefix"):
            Settings(data_root=wrong, state_dir=tmp_path)  # type: ignore[arg-type]


# -- paths mode and downloads ------------------------------------------------------------------------------

def test_an_operation_reads_and_writes_keys_under_the_prefix(client, s3_env, volume, tmp_path):
    response = client.post("/v1/paths/permute", json={"src": "maps/map.mrc", "dst": "out/swapped.mrc",
                                                      "axes": [0, 1, 3, 2]})
    assert response.status_code == 201, response.text
    assert response.json()["output"] == "out/swapped.mrc"
    assert response.headers["location"] == "/v1/files/out/swapped.mrc"
    written = _object(s3_env, "data/out/swapped.mrc")
    np.testing.assert_array_equal(_mrc_data(written, tmp_path), np.swapaxes(volume, 1, 2))
    download = client.get("/v1/files/out/swapped.mrc")
    assert download.status_code == 200 and download.content == written
    assert download.headers["content-type"] == "application/octet-stream" or "mrc" in download.headers[
        "content-type"]


def test_info_of_a_key_asks_for_it_once_and_never_lists_the_bucket(client, s3_env):
    response = client.post("/v1/paths/info", json={"path": "maps/map.mrc"})
    assert response.status_code == 200, response.text
    described = response.json()
    assert described["path"] == "maps/map.mrc" and BUCKET not in response.text
    assert described["shape"][1:] == list(STACK_SHAPE)
    asked = [(method, key) for method, key in s3_env.requests if key.startswith(f"{BUCKET}/data/maps/map.mrc")]
    assert asked.count(("HEAD", f"{BUCKET}/data/maps/map.mrc")) == 1
    assert not [key for method, key in s3_env.requests if key.rstrip("/") == BUCKET and method == "GET"]


@pytest.mark.parametrize("path", ["../x", "%2e%2e/x", "/etc/passwd", "../data-other/x.mrc"])
def test_paths_outside_the_prefix_are_refused_without_asking_the_store(client, s3_env, path):
    assert_problem(client.post("/v1/paths/info", json={"path": path}), 403, "path-refused")
    assert_problem(client.post("/v1/paths/copy", json={"src": "maps/map.mrc", "dst": path}), 403, "path-refused")
    assert not s3_env.requests


def test_a_particle_file_naming_a_stack_outside_the_root_is_refused(client, s3_env):
    problem = assert_problem(client.post("/v1/paths/info", json={"path": "maps/particles.star"}), 403,
                             "path-refused")
    assert "'..' is not allowed" in problem["detail"] and BUCKET not in problem["detail"]
    assert not [key for _, key in s3_env.requests if "other/x.mrcs" in key]  # never fetched


def test_a_particle_file_reads_the_stacks_it_names_under_the_prefix(client, s3_env, make_client, local_root,
                                                                     tmp_path):
    described = client.post("/v1/paths/info", json={"path": "maps/inside.star"})
    assert described.status_code == 200, described.text
    assert described.json()["shape"] == [2, 1, *STACK_SHAPE[1:]] and BUCKET not in described.text
    local = make_client(data_root=local_root, state_dir=tmp_path / "local-state")
    params = {"file": "maps/inside.star", "section": 1, "size": 64}
    np.testing.assert_array_equal(_pixels(client.get("/v1/view/image", params=params)),
                                  _pixels(local.get("/v1/view/image", params=params)))


def test_the_stacks_of_a_particle_file_are_fetched_once_while_their_version_holds(client, s3_env, local_root,
                                                                                   tmp_path, monkeypatch):
    """The viewer's answers about a particle file on object storage read its stacks several times each; they are
    fetched once, and again once the store has another version of them."""
    from noa_server import execution

    monkeypatch.setattr(execution, "FETCHED", execution.FetchedObjects(execution.FETCHED_BYTES))  # none kept yet
    key, size = f"{BUCKET}/data/maps/stack.mrcs", (local_root / "maps" / "stack.mrcs").stat().st_size
    pictures = [_pixels(client.get("/v1/view/image", params={"file": "maps/inside.star", "section": n, "size": 64}))
                for n in (0, 1, 0, 1)]
    assert s3_env.sent[key] == size  # once (every answer had fetched it whole, several times)
    np.testing.assert_array_equal(pictures[0], pictures[2])
    rewritten = tmp_path / "stack.mrcs"
    write_mrc(rewritten, np.flip(np.fromfile(local_root / "maps" / "stack.mrcs", np.float32, offset=1024)
                                 .reshape(STACK_SHAPE), 2).copy(), stack=True)
    s3_env.client.upload_file(str(rewritten), BUCKET, "data/maps/stack.mrcs")
    s3_env.reset()
    again = _pixels(client.get("/v1/view/image", params={"file": "maps/inside.star", "section": 1, "size": 64}))
    assert s3_env.sent[key] == rewritten.stat().st_size  # a new version: fetched again, and shown
    np.testing.assert_array_equal(again, pictures[1][:, ::-1])


def test_a_missing_key_is_a_404_naming_the_clients_path(client, s3_env):
    for response in (client.post("/v1/paths/info", json={"path": "maps/none.mrc"}),
                     client.get("/v1/files/maps/none.mrc"),
                     client.get("/v1/view/image", params={"file": "maps/none.mrc"})):
        problem = assert_problem(response, 404, "file-not-found")
        assert problem["detail"].startswith("maps/none.mrc: ") and BUCKET not in problem["detail"]


def test_a_forbidden_bucket_is_a_502_naming_the_clients_path(client, s3_env):
    """The refusal named as the client names the file, without the store's own words (its endpoint, bucket). (The
    test server answers a refused HEAD with a body, which a reused connection may read as a broken answer: either
    line is the store's failure.)"""
    s3_env.failing = lambda environ: 403
    for response in (client.post("/v1/paths/info", json={"path": "maps/map.mrc"}),
                     client.get("/v1/files/maps/map.mrc"),
                     client.get("/v1/view/image", params={"file": "maps/map.mrc"})):
        problem = assert_problem(response, 502, "storage-failed")
        assert problem["detail"] in ("maps/map.mrc: access refused", "maps/map.mrc: cannot be read from its server")
    # the root named as the data root, never by its bucket; a name with " (" in it whole
    root = assert_problem(client.get("/v1/view/list"), 502, "storage-failed")["detail"]
    assert root.startswith("the data root: ") and BUCKET not in root, root
    named = assert_problem(client.post("/v1/paths/info", json={"path": "maps/a (1).mrc"}), 502, "storage-failed")
    assert named["detail"].startswith("maps/a (1).mrc: "), named["detail"]


def test_readiness_asks_the_bucket(client, s3_env):
    assert client.get("/readyz").json()["checks"]["data_root"] == "reachable"
    s3_env.failing = lambda environ: 403
    assert_problem(client.get("/readyz"), 503, "not-ready")


def test_an_edit_in_place_is_refused_on_object_storage(client, s3_env):
    problem = assert_problem(client.post("/v1/paths/header", json={"path": "maps/map.mrc", "pixel_size": [2.0]}),
                             422, "unreadable-file")
    assert problem["detail"].startswith("maps/map.mrc: on remote storage") and BUCKET not in problem["detail"]
    assert not [r for r in s3_env.requests if r[0] in ("PUT", "POST", "DELETE")]


def test_a_job_writes_its_output_under_the_prefix(client, s3_env, volume, tmp_path):
    response = client.post("/v1/jobs", json={"operation": "copy", "src": "maps/map.mrc", "dst": "jobs/copy.mrc"})
    assert response.status_code == 202, response.text
    state = wait_job(client, response.headers["location"], 60)
    assert state["status"] == "succeeded", state
    np.testing.assert_array_equal(_mrc_data(_object(s3_env, "data/jobs/copy.mrc"), tmp_path), volume)


def test_watched_folders_are_refused_on_object_storage(client, tmp_path, s3_env, make_client):
    problem = assert_problem(client.post("/v1/watches", json={"name": "w", "folder": "maps", "pattern": "*.mrc",
                                                              "job": {"operation": "info"}}), 409)
    assert "object storage" in problem["detail"]
    config = tmp_path / "watches.json"
    config.write_text("[]")
    with pytest.raises(ValueError, match=r"watch config .*object storage"):
        make_client(data_root=ROOT, state_dir=tmp_path / "state2", watch_config=config)


# -- the viewer ----------------------------------------------------------------------------------------------

def _pixels(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.asarray(Image.open(io.BytesIO(response.content)))


def test_the_viewers_picture_of_a_key_is_that_of_the_local_file(client, s3_env, make_client, local_root, tmp_path):
    local = make_client(data_root=local_root, state_dir=tmp_path / "local-state")
    params = {"file": "maps/map.mrc", "index": 1, "size": 64}
    np.testing.assert_array_equal(_pixels(client.get("/v1/view/image", params=params)),
                                  _pixels(local.get("/v1/view/image", params=params)))
    assert s3_env.requests.count(("HEAD", f"{BUCKET}/data/maps/map.mrc")) == 1
    header = client.get("/v1/view/info", params={"file": "maps/map.mrc"})
    assert header.status_code == 200 and header.json()["path"] == "maps/map.mrc"


def test_the_listing_of_a_prefix_is_one_request_and_no_head_a_file(client, s3_env):
    top = client.get("/v1/view/list")
    assert top.status_code == 200, top.text
    assert "maps" in [f["name"] for f in top.json()["folders"]] and "data-other" not in top.text
    s3_env.reset()
    listed = client.get("/v1/view/list", params={"path": "maps"}).json()
    files = {f["name"]: f for f in listed["files"]}
    assert listed["path"] == "maps" and files["map.mrc"]["path"] == "maps/map.mrc"
    assert files["map.mrc"]["shape"][1:] == list(STACK_SHAPE) and "error" in files["particles.star"]
    assert BUCKET not in str(listed)
    assert not [r for r in s3_env.requests if r[0] == "HEAD"]
    assert len([r for r in s3_env.requests if r == ("GET", BUCKET) or r == ("GET", BUCKET + "/")]) == 1
    assert_problem(client.get("/v1/view/list", params={"path": "../data-other"}), 403, "path-refused")
    for absolute in ("/", "/maps"):  # refused as on a local root, not taken as relative
        assert "absolute paths are refused" in assert_problem(
            client.get("/v1/view/list", params={"path": absolute}), 403, "path-refused")["detail"]
    assert_problem(client.get("/v1/view/list", params={"path": "none"}), 404, "file-not-found")


def test_an_empty_prefix_is_an_empty_root(s3_env, make_client, tmp_path):
    client = make_client(data_root=f"s3://{BUCKET}/fresh", state_dir=tmp_path / "state", workers=1)
    listed = client.get("/v1/view/list")
    assert listed.status_code == 200, listed.text
    assert listed.json()["files"] == [] and listed.json()["folders"] == []
    missing = assert_problem(client.get("/v1/view/list", params={"path": "none"}), 404, "file-not-found")
    assert BUCKET not in missing["detail"]


def test_a_gs_objects_picture_changes_its_etag_with_its_data(make_client, tmp_path, monkeypatch):
    """Google Cloud Storage says an object's version in words of its own (etag, generation, updated): rewritten
    with other values of the same size, its picture's ETag changes (a browser's copy is not taken for it)."""
    with gcs_store("gmaps") as gcs:
        in_environment(gcs, monkeypatch)
        local = tmp_path / "v.mrc"
        write_mrc(local, np.zeros((1, 16, 16), np.float32))
        gcs.fs.put(str(local), "gmaps/data/v.mrc")
        client = make_client(data_root="gs://gmaps/data", state_dir=tmp_path / "state", workers=1)
        first = client.get("/v1/view/image", params={"file": "v.mrc"})
        assert first.status_code == 200, first.text
        write_mrc(local, np.arange(256, dtype=np.float32).reshape(1, 16, 16))
        gcs.fs.put(str(local), "gmaps/data/v.mrc")
        again = client.get("/v1/view/image", params={"file": "v.mrc"}, headers={"If-None-Match": first.headers["etag"]})
        assert again.status_code == 200 and again.headers["etag"] != first.headers["etag"]
        assert again.content != first.content


# -- noa serve ---------------------------------------------------------------------------------------------

def test_serve_stops_in_one_line_on_a_missing_bucket_or_no_state_folder(s3, tmp_path):
    missing = noa("serve", "--data-root", "s3://no-such-bucket/data", "--state-dir", tmp_path, "--port", "0",
                  env=s3.env())
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.strip().count("\n") == 0 and "no such bucket" in missing.stderr
    assert "testing" not in missing.stderr
    stateless = noa("serve", "--data-root", ROOT, "--port", "0", env=s3.env())
    assert stateless.returncode == 2 and "--state-dir" in stateless.stderr
    assert stateless.stderr.strip().count("\n") == 0
