"""Inputs on object storage (``s3://``) and web servers (``http://``) read by byte ranges (issue 46 items 3-4).

An S3 server (moto in server mode) and a web server that serves byte ranges run on loopback ports for the
module; both count the bytes of the bodies they send, so a read that needs a header and one section is seen to
fetch about that, not the object. Values are checked against mrcfile, tifffile and NumPy on the local copy."""

from __future__ import annotations

import http.server
import pickle
import re
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import starfile
import tifffile

from helpers import ObjectStore, assert_user_error, free_port, in_environment, noa, object_store, write_mrc
from noa_core import io
from noa_core.errors import CorruptFileError, FileFormatError, MissingFileError, OutputExistsError, UnknownFormatError
from noa_core.io import mapped, remote

BUCKET = "maps"
SHAPE = (32, 96, 128)  # sections of 48 KiB (float32): the whole map is 32 of them
SECTION_BYTES = SHAPE[1] * SHAPE[2] * 4
# What a read may fetch beyond the data it needs: headers read ahead by at most one block, a few times over.
HEADER_ALLOWANCE = 4 * (1024 + remote.HEADER_BLOCK_BYTES)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A float32 volume as MRC and as TIFF, and a gzip-compressed MRC, in a local folder."""
    folder = tmp_path_factory.mktemp("remote")
    data = np.random.default_rng(46).normal(size=SHAPE).astype(np.float32)
    write_mrc(folder / "map.mrc", data, voxel_size=1.5)
    tifffile.imwrite(folder / "map.tif", data, imagej=True, resolution=(1 / 1.5, 1 / 1.5),
                     metadata={"axes": "ZYX", "spacing": 1.5, "unit": "angstrom"})
    import gzip

    (folder / "map.mrc.gz").write_bytes(gzip.compress((folder / "map.mrc").read_bytes()))
    return {p.name: p for p in folder.iterdir()}


@pytest.fixture(scope="module")
def s3(files) -> Iterator[ObjectStore]:
    """The S3 server with the files in the bucket ``maps``."""
    with object_store() as store:
        store.client.create_bucket(Bucket=BUCKET)
        for name, path in files.items():
            store.client.upload_file(str(path), BUCKET, name)
        yield store


@pytest.fixture
def s3_env(s3, monkeypatch) -> ObjectStore:
    """The S3 server's endpoint and credentials in this process's environment, its counts reset."""
    return in_environment(s3, monkeypatch)


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves the files of ``folder`` with byte ranges (``Range: bytes=a-b``), counting the body bytes sent and
    keeping every query asked (as a presigned URL's, which names nothing served)."""

    folder: Path
    sent: dict[str, int]
    queries: list[str]
    ranges = True

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        target, _, query = self.path.partition("?")
        if query:
            self.queries.append(query)
        path = self.folder / target.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        asked = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if asked and self.ranges:
            first, last = int(asked[1]), int(asked[2] or len(data) - 1)
            data = data[first:last + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{first + len(data) - 1}/{path.stat().st_size}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes" if self.ranges else "none")
        self.end_headers()
        if body:  # counted first: the reader may look before this thread goes on
            self.sent[path.name] = self.sent.get(path.name, 0) + len(data)
            self.wfile.write(data)

    def log_message(self, *args) -> None:
        """Requests go unlogged: the tests count what they fetch instead."""


@pytest.fixture(scope="module")
def web(files) -> Iterator[tuple[str, dict[str, int], list[str]]]:
    """``(base URL, bytes sent per name, queries asked)`` of a web server on loopback serving ``files`` by byte
    ranges."""
    sent: dict[str, int] = {}
    queries: list[str] = []
    handler = type("Handler", (_RangeHandler,), {"folder": next(iter(files.values())).parent, "sent": sent,
                                                 "queries": queries})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", sent, queries
    server.shutdown()
    thread.join()


def _oracle(path: Path) -> np.ndarray:
    with mrcfile.open(path, permissive=False) as f:
        return np.asarray(f.data)


# -- URLs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given, expected", [
    ("s3://maps/a/b.mrc", "s3://maps/a/b.mrc"),
    ("https://user:secret@host:8080/x.mrc?X-Amz-Signature=abc", "https://host:8080/x.mrc"),
    ("HTTP://host/x.tif", "http://host/x.tif"),
])
def test_a_url_is_a_remote_path_shown_without_credentials(given, expected):
    path = remote.remote_path(given)
    assert path is not None and str(path) == expected
    assert path.name == expected.rsplit("/", 1)[1]
    assert remote.as_path(path) is path


# A presigned URL's query holds "/" (its credential's scope), and here also "//" and "/./", which Path would fold
PRESIGNED_QUERY = "X-Amz-Credential=AKIA/20240101/us-east-1/s3/aws4_request&token=a//b/./c&X-Amz-Signature=0f3a"


@pytest.mark.parametrize("url, name, shown", [
    ("s3://maps/a//b.mrc", "b.mrc", "s3://maps/a//b.mrc"),
    ("s3://maps/a/./b.mrc", "b.mrc", "s3://maps/a/./b.mrc"),
    (f"https://host/d/x.tif?{PRESIGNED_QUERY}", "x.tif", "https://host/d/x.tif"),
])
def test_a_url_keeps_its_exact_text_through_the_drivers(url, name, shown):
    """Made once at a door, a URL is kept as given by every path made of it on the way (a key's "//" and "/./", a
    query's "/"), also when pickled for Dask's workers; Path's spelling of it is a local path, no longer a URL."""
    path = remote.as_path(url)
    assert isinstance(path, remote.RemotePath) and isinstance(path, Path)
    assert path.url == url and str(path) == shown and path.name == name and path.suffix == name[1:][-4:]
    assert remote.as_path(path) is path and pickle.loads(pickle.dumps(path)).url == url
    assert path != remote.as_path(str(Path(url)).replace(":/", "://", 1))  # the folded spelling names another key
    assert remote.remote_path(Path(url)) is None and type(remote.as_path(Path(url))) is type(Path())
    assert (path.parent / path.name).url == url.split("?")[0]
    assert path.with_suffix(".mrc").url == url.split("?")[0][:-4] + ".mrc"


def test_a_back_ends_message_loses_every_urls_password_and_query():
    """aiohttp prints the URL its own way (user and password dropped or not, %2F decoded), so no spelling of it is
    replaced exactly: every URL in the message loses its password and its query (a presigned URL's signature)."""
    path = remote.remote_path("https://user:pw@host/a%2Fb.mrc?X-Amz-Signature=SECRET")
    assert path is not None
    said = remote._reason(path, OSError("500, message='Internal Server Error', url='https://user:pw@host/a/b.mrc"
                                        "?X-Amz-Signature=SECRET' (from http://other/x?token=T2)"))
    assert "SECRET" not in said and "pw" not in said and "T2" not in said
    assert "url='https://host/a/b.mrc'" in said and "(from http://other/x" in said


@pytest.mark.parametrize("given", ["map.mrc", "/data/s3/map.mrc", "ftp://host/map.mrc", "s3:", "c:/x.mrc"])
def test_a_local_path_is_not_remote(given):
    assert remote.remote_path(given) is None


def test_a_remote_path_is_never_opened_as_a_local_file():
    path = remote.remote_path("s3://maps/map.mrc")
    with pytest.raises(FileFormatError, match=r"^s3://maps/map.mrc: on remote storage, and this needs a file of "):
        open(path, "rb")  # noqa: SIM115  # the refusal is what is tested
    assert not path.exists() and not path.is_file()


def test_a_missing_back_end_says_how_to_install_it(tmp_path):
    # In a process of its own, where s3fs cannot be imported (fsspec keeps the class of a back end it has loaded)
    (tmp_path / "s3fs.py").write_text("raise ImportError('no s3fs here')\n")
    done = noa("info", "s3://maps/map.mrc", env={"PYTHONPATH": str(tmp_path)})
    assert_user_error(done, "s3://maps/map.mrc: reading s3:// URLs needs s3fs", "pip install -e '.[remote]'")


# -- reading from S3 ---------------------------------------------------------------------------------


def test_probe_reads_the_header_alone(s3_env, files):
    probe = io.probe("s3://maps/map.mrc")
    assert probe.shape == (1, *SHAPE)
    assert probe.metadata.pixel_size == pytest.approx((1.5, 1.5, 1.5))
    assert probe.metadata.path == "s3://maps/map.mrc"
    assert 1024 <= s3_env.sent["maps/map.mrc"] <= HEADER_ALLOWANCE


def test_one_section_fetches_the_header_and_that_section(s3_env, files):
    array, _ = io.read("s3://maps/map.mrc", tiles=True)
    section = mapped.read_view(array.numpy()[0, 7])
    np.testing.assert_array_equal(section, _oracle(files["map.mrc"])[7])
    fetched = s3_env.sent["maps/map.mrc"]
    whole = files["map.mrc"].stat().st_size
    assert SECTION_BYTES <= fetched <= SECTION_BYTES + HEADER_ALLOWANCE < whole / 4, (fetched, whole)


def _methods(store: ObjectStore, key: str) -> dict[str, int]:
    """How many requests of each method the server answered for ``bucket/key`` since its reset."""
    counts: dict[str, int] = {}
    for method, asked in store.requests:
        if asked == key:
            counts[method] = counts.get(method, 0) + 1
    return counts


@pytest.fixture
def stack4(s3, tmp_path) -> np.ndarray:
    """A stack of 4 sections as ``s3://maps/stack4.mrc`` (its data returned)."""
    data = np.random.default_rng(4).normal(size=(4, 64, 80)).astype(np.float32)
    write_mrc(tmp_path / "stack4.mrc", data, voxel_size=2.0)
    s3.client.upload_file(str(tmp_path / "stack4.mrc"), BUCKET, "stack4.mrc")
    s3.reset()
    return data


def test_one_section_of_a_stack_asks_what_the_object_is_once(s3_env, stack4):
    """The existence, folder and size checks, detection and the format's own open share one look (HEAD) at the
    object; detection and the format share one fetch of its head (GET), then the section (GET)."""
    array, _ = io.read("s3://maps/stack4.mrc", tiles=True)
    np.testing.assert_array_equal(mapped.read_view(array.numpy()[0, 2]), stack4[2])
    assert _methods(s3_env, "maps/stack4.mrc") == {"HEAD": 1, "GET": 2}


def test_cli_info_asks_what_the_object_is_once(s3, stack4):
    result = noa("info", "s3://maps/stack4.mrc", env=s3.env())
    assert result.returncode == 0, result.stderr
    assert "1, 4, 64, 80" in result.stdout
    assert _methods(s3, "maps/stack4.mrc") == {"HEAD": 1, "GET": 1}


def test_a_whole_read_gives_the_values_and_metadata_of_the_local_file(s3_env, files):
    array, meta = io.read("s3://maps/map.mrc")
    local_meta = io.probe(files["map.mrc"]).metadata
    np.testing.assert_array_equal(array.numpy()[0], _oracle(files["map.mrc"]))
    assert (meta.shape, meta.pixel_size, meta.origin, meta.labels) == \
        (local_meta.shape, local_meta.pixel_size, local_meta.origin, local_meta.labels)


def test_tiff_sections_are_read_by_ranges(s3_env, files):
    array, meta = io.read("s3://maps/map.tif", tiles=True)
    assert meta.format == "tiff" and meta.pixel_size == pytest.approx((1.5, 1.5, 1.5))
    np.testing.assert_array_equal(mapped.read_view(array.numpy()[0, 30]), tifffile.imread(files["map.tif"])[30])
    assert s3_env.sent["maps/map.tif"] <= SECTION_BYTES + HEADER_ALLOWANCE


def test_a_compressed_remote_file_is_refused_not_fetched_whole(s3_env, files):
    with pytest.raises(UnknownFormatError, match=r"^s3://maps/map.mrc.gz: compression: gzip-compressed .* remote"):
        io.probe("s3://maps/map.mrc.gz")
    assert s3_env.sent["maps/map.mrc.gz"] < HEADER_ALLOWANCE


def test_a_remote_eer_movie_is_refused_in_one_line(s3_env, files):
    s3_env.client.upload_file(str(files["map.tif"]), BUCKET, "movie.eer")  # a TIFF named as a movie is enough
    with pytest.raises(UnknownFormatError, match=r"^s3://maps/movie.eer: EER movies are read from files of this "):
        io.probe("s3://maps/movie.eer")


@pytest.mark.parametrize("url, message", [
    ("s3://maps/absent.mrc", "s3://maps/absent.mrc: no such object"),
    ("s3://no-such-bucket/map.mrc", "s3://no-such-bucket/map.mrc: no such bucket"),
])
def test_a_missing_object_or_bucket_is_one_line(s3_env, url, message):
    with pytest.raises(MissingFileError) as caught:
        io.probe(url)
    assert str(caught.value) == message


def test_an_unreachable_host_is_one_line(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # no one listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(FileFormatError, match=r"^s3://maps/map.mrc: cannot be read from its server \(.*\)$") as caught:
        io.probe("s3://maps/map.mrc")
    assert "\n" not in str(caught.value)


@pytest.fixture
def enforced_auth(s3_env) -> Iterator[dict[str, str]]:
    """Credentials moto knows of a user allowed nothing, with moto checking every request's credentials for the
    test (``/moto-api/reset-auth``), and no longer after it."""
    import boto3

    iam = boto3.client("iam", endpoint_url=s3_env.endpoint, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    iam.create_user(UserName="stranger")
    key = iam.create_access_key(UserName="stranger")["AccessKey"]

    def auth_after(count: str) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{s3_env.endpoint}/moto-api/reset-auth", count.encode(),
                                                      {"Content-Type": "text/plain"}, method="POST")).read()

    auth_after("0")
    try:
        yield {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
    finally:
        auth_after("inf")
        iam.delete_access_key(UserName="stranger", AccessKeyId=key["AccessKeyId"])
        iam.delete_user(UserName="stranger")


def test_a_forbidden_bucket_and_unknown_credentials_are_one_line_without_the_secret(enforced_auth, monkeypatch):
    for name, value in enforced_auth.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(FileFormatError, match=r"^s3://maps/map.mrc: access refused \(.*\); check the credentials"):
        io.probe("s3://maps/map.mrc")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "no-such-secret-key")
    with pytest.raises(FileFormatError, match=r"^s3://maps/map.mrc: access refused") as caught:
        io.probe("s3://maps/map.mrc")
    assert "no-such-secret-key" not in str(caught.value) and enforced_auth["AWS_SECRET_ACCESS_KEY"] not in \
        str(caught.value)


def test_an_ome_zarr_store_on_s3_reads_as_the_local_one(s3_env, files, tmp_path):
    store = tmp_path / "map.ome.zarr"
    io.write(store, *io.read(files["map.mrc"]))
    for part in store.rglob("*"):
        if part.is_file():
            s3_env.client.upload_file(str(part), BUCKET, f"map.ome.zarr/{part.relative_to(store).as_posix()}")
    array, meta = io.read("s3://maps/map.ome.zarr")
    assert meta.format == "omezarr" and meta.path == "s3://maps/map.ome.zarr"
    np.testing.assert_array_equal(array.numpy()[0], _oracle(files["map.mrc"]))
    assert meta.pixel_size == pytest.approx((1.5, 1.5, 1.5))


def _store_on_s3(store: ObjectStore, files: dict[str, Path], folder: Path, name: str) -> np.ndarray:
    """The MRC map's data written as an OME-Zarr store of 4 chunks here and uploaded as ``s3://maps/NAME``; the
    data returned."""
    local = folder / name
    data = _oracle(files["map.mrc"])
    with io.create(local, (1, *SHAPE), data.dtype, write_options={"chunks": "8,96,128"}) as out:
        io.copy_into(data, out)
    for part in local.rglob("*"):
        if part.is_file():
            store.client.upload_file(str(part), BUCKET, f"{name}/{part.relative_to(local).as_posix()}")
    return data


# A chunk's key in a store (v2 "0/1.0.0", v3 "0/c/1/0/0"), not a metadata document's
_CHUNK = re.compile(r"/0/(c/)?[0-9][0-9./]*$")


@pytest.mark.parametrize("status, message", [
    (True, r"cannot be read from its server \(.*internal error.*\)$"),
    (403, r"access refused \(Access Denied\); check the credentials"),
])
def test_an_ome_zarr_chunk_the_server_fails_is_said_as_a_failure_of_the_storage(s3_env, files, tmp_path,
                                                                                 monkeypatch, status, message):
    """A chunk the server fails after the store opened is the storage's failure, named by its object's URL, not
    corrupt data."""
    _store_on_s3(s3_env, files, tmp_path, "chunk-refused.ome.zarr")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # the server's 500 is not retried for seconds
    s3_env.failing = lambda environ: status if environ["REQUEST_METHOD"] == "GET" and "chunk-refused" in \
        environ["PATH_INFO"] and _CHUNK.search(environ["PATH_INFO"]) else False
    with pytest.raises(FileFormatError) as caught:
        io.read("s3://maps/chunk-refused.ome.zarr")
    assert not isinstance(caught.value, CorruptFileError)
    said = str(caught.value)
    assert re.match(r"^s3://maps/chunk-refused.ome.zarr/0/(c/)?[0-9][0-9./]*: " + message, said), said
    assert "\n" not in said


def test_an_ome_zarr_chunk_missing_on_s3_reads_as_the_fill_value(s3_env, files, tmp_path):
    """OME-Zarr's rule: a chunk object that is not there holds the array's fill value."""
    import zarr

    data = _store_on_s3(s3_env, files, tmp_path, "sparse.ome.zarr")
    keys = sorted(k for k in _keys(s3_env, "sparse.ome.zarr/0/") if _CHUNK.search("/" + k))
    assert len(keys) == SHAPE[0] // 8
    s3_env.client.delete_object(Bucket=BUCKET, Key=keys[1])  # sections 8..15
    array, _ = io.read("s3://maps/sparse.ome.zarr")
    fill = zarr.open_array(tmp_path / "sparse.ome.zarr" / "0", mode="r").fill_value
    expected = data.copy()
    expected[8:16] = fill
    np.testing.assert_array_equal(array.numpy()[0], expected)


# -- writing to S3 -----------------------------------------------------------------------------------


def _keys(store: ObjectStore, prefix: str) -> list[str]:
    """The objects under ``prefix`` in the bucket, and the multipart uploads begun there and neither completed nor
    aborted."""
    objects = store.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    uploads = store.client.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix).get("Uploads", [])
    return [o["Key"] for o in objects] + [f"upload of {u['Key']}" for u in uploads]


def _downloaded(store: ObjectStore, key: str, folder: Path) -> Path:
    path = folder / key.replace("/", "_")
    store.client.download_file(BUCKET, key, str(path))
    return path


def _halved(data: np.ndarray) -> np.ndarray:
    """The mean of each 2 x 2 x 2 box (even sizes): the next level of a pyramid of ``data``."""
    d, h, w = data.shape
    return data.astype(np.float64).reshape(d // 2, 2, h // 2, 2, w // 2, 2).mean(axis=(1, 3, 5))


def _levels_read_back(store: ObjectStore, url: str) -> list[np.ndarray]:
    """Every level of the OME-Zarr store at ``url`` as ome-zarr-py reads it, checked equal to zarr's reading (the
    store's endpoint and credentials in the environment meanwhile)."""
    import zarr
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    with pytest.MonkeyPatch.context() as patch:
        for name, value in store.env().items():
            patch.setenv(name, value)
        options = {"skip_instance_cache": True}
        group = zarr.open_group(zarr.storage.FsspecStore.from_url(url, storage_options=options, read_only=True),
                                mode="r")
        attrs = group.attrs.asdict()
        image = (attrs["ome"]["multiscales"] if "ome" in attrs else attrs["multiscales"])[0]
        by_zarr = [np.asarray(group[d["path"]][...]) for d in image["datasets"]]
        by_ome_zarr_py = [np.asarray(level) for level in next(iter(Reader(parse_url(url))())).data]
    assert len(by_zarr) == len(by_ome_zarr_py)
    for ours, theirs in zip(by_zarr, by_ome_zarr_py):
        np.testing.assert_array_equal(ours, theirs)
    return by_zarr


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """The temporary folder (TMPDIR) outputs on object storage are written in before their upload."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.parametrize("name", ["map.mrc", "map.tif"])
def test_an_output_is_written_here_then_uploaded_as_one_object(s3_env, files, scratch, tmp_path, name):
    array, meta = io.read(files[name])
    io.write(f"s3://maps/out/{name}", array, meta)
    got = _downloaded(s3_env, f"out/{name}", tmp_path)
    if name.endswith(".mrc"):
        np.testing.assert_array_equal(_oracle(got), _oracle(files[name]))
    else:
        np.testing.assert_array_equal(tifffile.imread(got), tifffile.imread(files[name]))
    assert list(scratch.iterdir()) == []  # the file written here is gone once uploaded
    assert io.probe(f"s3://maps/out/{name}").metadata.pixel_size == pytest.approx((1.5, 1.5, 1.5))


def test_a_large_output_is_uploaded_in_parts(s3_env, scratch, tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "UPLOAD_PART_BYTES", 5 << 20)  # S3's least: a 13 MiB file goes in 3 parts
    data = np.random.default_rng(7).normal(size=(13, 512, 512)).astype(np.float32)
    parts: list[str] = []
    s3_env.failing = lambda environ: parts.append(environ.get("QUERY_STRING", "")) and False
    io.write("s3://maps/large.mrc", data)
    np.testing.assert_array_equal(_oracle(_downloaded(s3_env, "large.mrc", tmp_path)), data)
    assert sum("partNumber=" in query for query in parts) == 3


def test_an_upload_interrupted_midway_leaves_no_object_and_no_parts(s3_env, scratch, monkeypatch):
    monkeypatch.setattr(remote, "UPLOAD_PART_BYTES", 5 << 20)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    s3_env.failing = lambda environ: "partNumber=2" in environ.get("QUERY_STRING", "")
    data = np.zeros((13, 512, 512), np.float32)
    with pytest.raises(FileFormatError) as caught:
        io.write("s3://maps/cut.mrc", data)
    assert str(caught.value).startswith("s3://maps/cut.mrc: cannot be written to its server (")
    assert "\n" not in str(caught.value)
    assert _keys(s3_env, "cut") == []
    assert list(scratch.iterdir()) == []


def test_an_output_that_exists_is_replaced_only_when_asked(s3_env, files, scratch, tmp_path):
    s3_env.client.put_object(Bucket=BUCKET, Key="old.mrc", Body=b"old")
    array, meta = io.read(files["map.mrc"])
    with pytest.raises(OutputExistsError, match=r"^s3://maps/old.mrc: exists; give overwrite to replace it$"):
        io.write("s3://maps/old.mrc", array, meta)
    assert s3_env.client.get_object(Bucket=BUCKET, Key="old.mrc")["Body"].read() == b"old"
    io.write("s3://maps/old.mrc", array, meta, overwrite=True)
    np.testing.assert_array_equal(_oracle(_downloaded(s3_env, "old.mrc", tmp_path)), _oracle(files["map.mrc"]))


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_an_ome_zarr_pyramid_is_written_into_the_bucket(s3_env, files, scratch, version):
    source = _oracle(files["map.mrc"])
    with io.create(f"s3://maps/pyramid{version}.ome.zarr", (1, *SHAPE), "float32",
                   io.probe(files["map.mrc"]).metadata, write_options={"ngff": version, "levels": 3}) as out:
        io.copy_into(source[None], out)
    levels = _levels_read_back(s3_env, f"s3://maps/pyramid{version}.ome.zarr")
    expected = [source, _halved(source), _halved(_halved(source))]
    assert [level.shape for level in levels] == [level.shape for level in expected]
    for level, want in zip(levels, expected):
        np.testing.assert_allclose(level, want, rtol=1e-6, atol=1e-6)
    array, meta = io.read(f"s3://maps/pyramid{version}.ome.zarr")  # and noa reads it back
    np.testing.assert_array_equal(array.numpy()[0], source)
    assert meta.pixel_size == pytest.approx((1.5, 1.5, 1.5))
    assert list(scratch.iterdir()) == []


def test_an_ome_zarr_store_failing_midway_leaves_nothing(s3_env, files, scratch, monkeypatch):
    """The chunks written before the failure are removed; the group's image metadata, written last, never were."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    puts: list[str] = []

    def third_chunk(environ) -> bool:
        if environ["REQUEST_METHOD"] == "PUT" and "/c/" in environ["PATH_INFO"]:
            puts.append(environ["PATH_INFO"])
        return len(puts) == 3

    s3_env.failing = third_chunk
    with pytest.raises(FileFormatError, match=r"^s3://maps/broken.ome.zarr: cannot be written to its server \("), \
            io.create("s3://maps/broken.ome.zarr", (1, *SHAPE), "float32", None,
                      write_options={"ngff": "0.5", "levels": 2, "chunks": "8,32,32"}) as out:
        io.copy_into(_oracle(files["map.mrc"])[None], out)
    s3_env.failing = None
    assert _keys(s3_env, "broken.ome.zarr") == []
    assert list(scratch.iterdir()) == []


def test_a_store_another_writer_made_first_is_left_as_it_is(s3_env, files, scratch, monkeypatch):
    """Two writers racing for one name: the one whose store creation finds the other's there fails in one line and
    removes nothing of it (the early check is passed here, as when the other store appears right after it)."""
    theirs = {"race.ome.zarr/zarr.json": b'{"zarr_format":3,"node_type":"group","attributes":{}}',
              "race.ome.zarr/0/c/0/0/0/0": b"x"}
    for key, body in theirs.items():
        s3_env.client.put_object(Bucket=BUCKET, Key=key, Body=body)
    monkeypatch.setattr(remote, "check_output", lambda path, overwrite, directory=False: path)
    with pytest.raises(OutputExistsError, match=r"^s3://maps/race.ome.zarr: was created by someone else"), \
            io.create("s3://maps/race.ome.zarr", (1, 1, 8, 8), "float32", None) as out:
        io.copy_into(np.zeros((1, 1, 8, 8), np.float32), out)
    assert _keys(s3_env, "race.ome.zarr") == sorted(theirs)
    assert list(scratch.iterdir()) == []


def test_a_missing_bucket_is_refused_before_anything_is_written(s3_env, files, scratch):
    with pytest.raises(MissingFileError, match=r"^s3://no-such-bucket/out.mrc: no such bucket$"):
        io.write("s3://no-such-bucket/out.mrc", *io.read(files["map.mrc"]))
    assert list(scratch.iterdir()) == []


def test_a_forbidden_bucket_is_refused_for_writing_without_the_secret(enforced_auth, files, scratch, monkeypatch):
    for name, value in enforced_auth.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(FileFormatError, match=r"^s3://maps/denied.mrc: access refused \(.*\); check the credentials") \
            as caught:
        io.write("s3://maps/denied.mrc", np.zeros((4, 4), np.float32))
    assert enforced_auth["AWS_SECRET_ACCESS_KEY"] not in str(caught.value)
    assert list(scratch.iterdir()) == []


def test_no_credentials_is_one_line(s3_env, tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no look for an instance's role: no network beyond
    with pytest.raises(FileFormatError, match=r"^s3://maps/out.mrc: no credentials found; set AWS_ACCESS_KEY_ID "):
        io.write("s3://maps/out.mrc", np.zeros((4, 4), np.float32))


def test_a_web_server_is_not_written_to(files):
    with pytest.raises(FileFormatError, match=r"^http://host/out.mrc: a web server is only read; outputs go to "):
        io.write("http://host/out.mrc", np.zeros((4, 4), np.float32))


# -- reading over HTTP --------------------------------------------------------------------------------


def test_http_sections_are_read_by_ranges(web, files):
    base, sent, _ = web
    sent.clear()
    array, meta = io.read(f"{base}/map.mrc", tiles=True)
    np.testing.assert_array_equal(mapped.read_view(array.numpy()[0, 3]), _oracle(files["map.mrc"])[3])
    assert meta.path == f"{base}/map.mrc"
    assert SECTION_BYTES <= sent["map.mrc"] <= SECTION_BYTES + HEADER_ALLOWANCE


def test_http_missing_file_is_one_line(web):
    with pytest.raises(MissingFileError, match=r"^http://127.0.0.1:\d+/absent.mrc: no such object$"):
        io.probe(f"{web[0]}/absent.mrc")


def test_http_unreachable_host_is_one_line():
    url = f"http://127.0.0.1:{free_port()}/map.mrc"  # no one listens there
    with pytest.raises(FileFormatError, match=r"^http://127.0.0.1:\d+/map.mrc: cannot be read from its server \("):
        io.probe(url)


def test_a_server_without_ranges_is_refused(web, files, monkeypatch):
    monkeypatch.setattr(_RangeHandler, "ranges", False)
    with pytest.raises(FileFormatError, match=r"^http://127.0.0.1:\d+/map.mrc: .*range"):
        array, _ = io.read(f"{web[0]}/map.mrc", tiles=True)
        mapped.read_view(array.numpy()[0, 3])


# -- the command line -----------------------------------------------------------------------------------


def test_cli_info_copy_and_stats_of_an_s3_map(s3, files, tmp_path):
    env = s3.env()
    info = noa("info", "s3://maps/map.mrc", env=env)
    assert info.returncode == 0, info.stderr
    assert "s3://maps/map.mrc" in info.stdout and "1, 32, 96, 128" in info.stdout
    copied = noa("copy", "s3://maps/map.mrc", str(tmp_path / "out.mrc"), env=env)
    assert copied.returncode == 0, copied.stderr
    np.testing.assert_array_equal(_oracle(tmp_path / "out.mrc"), _oracle(files["map.mrc"]))
    stats = noa("stats", "s3://maps/map.mrc", "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    data = _oracle(files["map.mrc"]).astype(np.float64)
    assert f"{data.max():.6g}"[:6] in stats.stdout


def test_cli_one_section_of_an_s3_map_fetches_about_that(s3, files, tmp_path):
    s3.reset()
    result = noa("sections", "s3://maps/map.mrc", str(tmp_path / "one.mrc"), "--keep", "7", env=s3.env())
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(_oracle(tmp_path / "one.mrc"), _oracle(files["map.mrc"])[7])
    assert SECTION_BYTES <= s3.sent["maps/map.mrc"] <= SECTION_BYTES + HEADER_ALLOWANCE


def test_cli_preview_and_out_dir_of_remote_inputs(s3, web, files, tmp_path):
    preview = noa("preview", f"{web[0]}/map.tif", str(tmp_path / "map.png"), env=s3.env())
    assert preview.returncode == 0, preview.stderr
    local = noa("preview", str(files["map.tif"]), str(tmp_path / "local.png"))
    assert local.returncode == 0, local.stderr
    assert (tmp_path / "map.png").read_bytes() == (tmp_path / "local.png").read_bytes()
    batch = noa("copy", "s3://maps/map.mrc", f"{web[0]}/map.tif", "--out-dir", str(tmp_path / "out"), env=s3.env())
    assert batch.returncode == 0, batch.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["map.mrc", "map.tif"]
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "out" / "map.tif"), tifffile.imread(files["map.tif"]))


def test_cli_normalize_of_a_remote_map_is_that_of_the_local_one(s3, files, tmp_path):
    remote_run = noa("normalize", "s3://maps/map.mrc", str(tmp_path / "remote.mrc"), env=s3.env())
    assert remote_run.returncode == 0, remote_run.stderr
    local_run = noa("normalize", str(files["map.mrc"]), str(tmp_path / "local.mrc"))
    assert local_run.returncode == 0, local_run.stderr
    np.testing.assert_array_equal(_oracle(tmp_path / "remote.mrc"), _oracle(tmp_path / "local.mrc"))


def test_cli_tiltcheck_names_a_remote_stack_by_its_url(s3):
    result = noa("tiltcheck", "s3://maps/map.mrc", "--json", env=s3.env())
    assert result.returncode == 0, result.stderr
    assert "s3://maps/map.mrc" in result.stdout


def test_cli_header_edit_in_place_of_a_remote_file_is_one_line(s3):
    result = noa("header", "s3://maps/map.mrc", "--pixel-size", "2", env=s3.env())
    assert_user_error(result, "s3://maps/map.mrc: on remote storage, and this needs a file of this machine")


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_cli_copy_to_s3_writes_an_mrc_object_and_an_ome_zarr_pyramid(s3, files, tmp_path):
    before = files["map.mrc"].read_bytes()
    copied = noa("copy", str(files["map.mrc"]), "s3://maps/cli/out.mrc", env=s3.env())
    assert copied.returncode == 0, copied.stderr
    assert _oracle(_downloaded(s3, "cli/out.mrc", tmp_path)).tobytes() == _oracle(files["map.mrc"]).tobytes()
    pyramid = noa("copy", str(files["map.mrc"]), "s3://maps/cli/out.ome.zarr", "--levels", "2", env=s3.env())
    assert pyramid.returncode == 0, pyramid.stderr
    levels = _levels_read_back(s3, "s3://maps/cli/out.ome.zarr")
    np.testing.assert_allclose(levels[1], _halved(_oracle(files["map.mrc"])), rtol=1e-6, atol=1e-6)
    preview = noa("preview", str(files["map.mrc"]), "s3://maps/cli/map.png", env=s3.env())  # a picture, not an image
    assert preview.returncode == 0, preview.stderr
    local = noa("preview", str(files["map.mrc"]), str(tmp_path / "local.png"))
    assert local.returncode == 0, local.stderr
    assert _downloaded(s3, "cli/map.png", tmp_path).read_bytes() == (tmp_path / "local.png").read_bytes()
    again = noa("copy", str(files["map.mrc"]), "s3://maps/cli/out.mrc", env=s3.env())
    assert_user_error(again, "s3://maps/cli/out.mrc: exists; give --force to replace it")
    assert files["map.mrc"].read_bytes() == before  # the input never changed


@pytest.mark.parametrize("output, message", [
    ("s3://no-such-bucket/out.mrc", "s3://no-such-bucket/out.mrc: no such bucket"),
    ("s3://maps/failing.mrc", "s3://maps/failing.mrc: cannot be written to its server ("),
    ("s3://maps/failing.ome.zarr", "s3://maps/failing.ome.zarr: cannot be written to its server ("),
])
def test_cli_a_failed_upload_is_one_line_exit_2_and_leaves_no_object(s3, files, output, message):
    s3.reset()
    s3.failing = lambda environ: environ["REQUEST_METHOD"] == "PUT" and "failing" in environ["PATH_INFO"]
    try:
        result = noa("copy", str(files["map.mrc"]), output, env={**s3.env(), "AWS_MAX_ATTEMPTS": "1"})
    finally:
        s3.reset()
    assert_user_error(result, message)
    assert _keys(s3, "failing") == []


def test_cli_reads_and_writes_a_key_with_a_double_slash_and_names_it_as_typed(s3, files, tmp_path):
    """S3 keys are names, not paths: ``a//b.mrc`` is read at that key (no object is at ``a/b.mrc``), an output
    ``w//./out.mrc`` is written at that key, and the lines name the URLs as typed."""
    s3.client.upload_file(str(files["map.mrc"]), BUCKET, "a//b.mrc")
    info = noa("info", "s3://maps/a//b.mrc", env=s3.env())
    assert info.returncode == 0, info.stderr
    assert "s3://maps/a//b.mrc" in info.stdout and "1, 32, 96, 128" in info.stdout
    typer_read = noa("info", "--", "s3://maps/a//b.mrc", env=s3.env())  # a line the plain reader leaves to Typer
    assert typer_read.returncode == 0, typer_read.stderr
    assert typer_read.stdout == info.stdout
    copied = noa("copy", "s3://maps/a//b.mrc", "s3://maps/w//./out.mrc", env=s3.env())
    assert copied.returncode == 0, copied.stderr
    assert copied.stderr.splitlines()[-1] == "wrote s3://maps/w//./out.mrc"
    assert _keys(s3, "w") == ["w//./out.mrc"]
    assert _oracle(_downloaded(s3, "w//./out.mrc", tmp_path)).tobytes() == _oracle(files["map.mrc"]).tobytes()
    plain = noa("copy", str(files["map.mrc"]), "s3://maps/x/a.mrc", env=s3.env())
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.splitlines()[-1] == "wrote s3://maps/x/a.mrc"


def test_cli_a_presigned_url_is_read_with_its_query_and_named_by_its_path(web, files, tmp_path):
    """A query holding "/" reaches the server as given, and the output of --out-dir takes the name of the URL's
    path (map.tif), not of the query's last part."""
    base, _, queries = web
    queries.clear()
    result = noa("copy", f"{base}/map.tif?{PRESIGNED_QUERY}", "--out-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["map.tif"]
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "out" / "map.tif"), tifffile.imread(files["map.tif"]))
    assert queries and set(queries) == {PRESIGNED_QUERY}
    assert "Signature" not in result.stderr


def test_cli_missing_object_is_one_line_exit_2(s3, tmp_path):
    result = noa("copy", "s3://maps/absent.mrc", str(tmp_path / "out.mrc"), env=s3.env())
    assert_user_error(result, "s3://maps/absent.mrc: no such object")
    assert not (tmp_path / "out.mrc").exists()


# -- outputs beside their inputs and side files; the Dask driver (issue 46 review) ------------------------------


def test_cli_an_s3_output_that_is_its_own_input_is_refused_and_left_as_it_was(s3, files):
    s3.client.upload_file(str(files["map.mrc"]), BUCKET, "same/a.mrc")
    result = noa("copy", "s3://maps/same/a.mrc", "s3://maps/same/a.mrc", "--force", "--dtype", "int16", env=s3.env())
    assert_user_error(result, "s3://maps/same/a.mrc: the output is the input file s3://maps/same/a.mrc")
    assert s3.client.get_object(Bucket=BUCKET, Key="same/a.mrc")["Body"].read() == files["map.mrc"].read_bytes()
    other = noa("copy", "s3://maps/same/a.mrc", "s3://maps/same//a.mrc", env=s3.env())  # another key: written
    assert other.returncode == 0, other.stderr


@pytest.fixture
def stack(tmp_path) -> Path:
    """A stack of 3 sections with its .rawtlt beside it, in a folder of its own."""
    folder = tmp_path / "stack"
    folder.mkdir()
    write_mrc(folder / "ts.mrc", np.random.default_rng(3).normal(size=(3, 32, 32)).astype(np.float32), stack=True)
    (folder / "ts.rawtlt").write_text("-3\n0\n3\n")
    return folder / "ts.mrc"


def test_cli_the_side_files_of_an_output_on_s3_are_uploaded_beside_it(s3, stack, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    remote_run = noa("sections", "--keep", "2,0", stack, "s3://maps/side/r.mrc", env={**s3.env(), "TMPDIR": scratch})
    assert remote_run.returncode == 0, remote_run.stderr
    local_run = noa("sections", "--keep", "2,0", stack, tmp_path / "r.mrc")
    assert local_run.returncode == 0, local_run.stderr
    assert sorted(_keys(s3, "side/")) == ["side/r.mrc", "side/r.rawtlt"]
    np.testing.assert_array_equal(_oracle(_downloaded(s3, "side/r.mrc", tmp_path)), _oracle(tmp_path / "r.mrc"))
    assert _downloaded(s3, "side/r.rawtlt", tmp_path).read_text() == (tmp_path / "r.rawtlt").read_text() == "3\n-3\n"
    assert list(scratch.iterdir()) == []


def test_cli_a_side_file_that_fails_to_upload_leaves_neither_it_nor_the_stack(s3, stack):
    s3.reset()
    s3.failing = lambda environ: environ["REQUEST_METHOD"] == "PUT" and environ["PATH_INFO"].endswith(".rawtlt")
    try:
        result = noa("copy", stack, "s3://maps/cut/ts.mrc", env={**s3.env(), "AWS_MAX_ATTEMPTS": "1"})
    finally:
        s3.reset()
    assert_user_error(result, "s3://maps/cut/ts.rawtlt: cannot be written to its server (")
    assert _keys(s3, "cut/") == []


def test_cli_tiltseries_to_s3_uploads_the_stack_and_its_files_as_written_here(s3, tmp_path):
    from tomography.test_tiltseries import HEIGHT, TILTS, WIDTH, real_mdoc

    real_mdoc(tmp_path)
    write_mrc(tmp_path / "TS_01.mrc", np.random.default_rng(45).integers(-500, 2000, (TILTS, HEIGHT, WIDTH))
              .astype(np.int16), stack=True, voxel_size=5.4)
    remote_run = noa("tiltseries", "TS_01.mrc.mdoc", "-o", "s3://maps/ts/TS.st", cwd=tmp_path, env=s3.env())
    assert remote_run.returncode == 0, remote_run.stderr
    local_run = noa("tiltseries", "TS_01.mrc.mdoc", "-o", "TS.st", cwd=tmp_path)
    assert local_run.returncode == 0, local_run.stderr
    names = ["TS.rawtlt", "TS.st", "TS.st.mdoc", "TS.star", "TS.tlt"]
    assert sorted(_keys(s3, "ts/")) == [f"ts/{name}" for name in names]
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    for name in names:
        got = _downloaded(s3, f"ts/{name}", fetched).read_bytes()
        # the STAR names the stack beside it by its name (here: relative to the project, which is that folder)
        assert got == (tmp_path / name).read_bytes(), name
    table = starfile.read(fetched / "ts_TS.star")
    assert table["rlnMicrographName"].tolist() == [f"{i:06d}@TS.st" for i in range(1, TILTS + 1)]


# -- --out-dir on object storage (issue 46) ---------------------------------------------------------------------


def test_cli_a_batch_into_an_s3_folder_writes_each_output_under_its_name_and_resumes(s3, files, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**s3.env(), "TMPDIR": scratch}
    inputs = [files["map.mrc"], files["map.tif"]]
    remote_run = noa("copy", *inputs, "--out-dir", "s3://maps/batch/", env=env)
    assert remote_run.returncode == 0, remote_run.stderr
    local_run = noa("copy", *inputs, "--out-dir", tmp_path / "batch")
    assert local_run.returncode == 0, local_run.stderr
    assert sorted(_keys(s3, "batch/")) == ["batch/map.mrc", "batch/map.tif"]
    got = _oracle(_downloaded(s3, "batch/map.mrc", tmp_path))
    np.testing.assert_array_equal(got, _oracle(tmp_path / "batch" / "map.mrc"))
    np.testing.assert_array_equal(got, _oracle(files["map.mrc"]))
    np.testing.assert_array_equal(tifffile.imread(_downloaded(s3, "batch/map.tif", tmp_path)),
                                  tifffile.imread(tmp_path / "batch" / "map.tif"))
    # an object store's outputs are found by --resume as a folder's are, and left as they are
    before = s3.client.head_object(Bucket=BUCKET, Key="batch/map.mrc")["ETag"]
    s3.reset()
    resumed = noa("copy", *inputs, "--out-dir", "s3://maps/batch/", "--resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "skipped s3://maps/batch/map.mrc: the output exists" in resumed.stderr
    # each output is looked at once (by the driver; the command line lets go of those it skips)
    assert [r for r in s3.requests if r[1].startswith("maps/batch/")] == [("HEAD", "maps/batch/map.mrc"),
                                                                         ("HEAD", "maps/batch/map.tif")]
    assert s3.client.head_object(Bucket=BUCKET, Key="batch/map.mrc")["ETag"] == before
    preview = noa("preview", files["map.mrc"], "--out-dir", "s3://maps/pictures", env=env)
    assert preview.returncode == 0, preview.stderr
    local_preview = noa("preview", files["map.mrc"], "--out-dir", tmp_path / "pictures")
    assert local_preview.returncode == 0, local_preview.stderr
    assert _keys(s3, "pictures/") == ["pictures/map.png"]
    assert (_downloaded(s3, "pictures/map.png", tmp_path).read_bytes()
            == (tmp_path / "pictures" / "map.png").read_bytes())
    assert list(scratch.iterdir()) == []


def test_cli_split_into_an_s3_folder_uploads_every_part(s3, stack, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    remote_run = noa("split", stack, "--out-dir", "s3://maps/parts/", env={**s3.env(), "TMPDIR": scratch})
    assert remote_run.returncode == 0, remote_run.stderr
    local_run = noa("split", stack, "--out-dir", tmp_path / "parts")
    assert local_run.returncode == 0, local_run.stderr
    names = ["ts_000.mrc", "ts_001.mrc", "ts_002.mrc"]
    assert sorted(_keys(s3, "parts/")) == [f"parts/{name}" for name in names]
    sections = _oracle(stack)
    for k, name in enumerate(names):
        got = _oracle(_downloaded(s3, f"parts/{name}", tmp_path))
        np.testing.assert_array_equal(got, _oracle(tmp_path / "parts" / name))
        np.testing.assert_array_equal(got.reshape(sections[k].shape), sections[k])
    assert list(scratch.iterdir()) == []
    again = noa("split", stack, "--out-dir", "s3://maps/parts/", env=s3.env())
    assert_user_error(again, "s3://maps/parts/ts_000.mrc: exists (and 2 more of the 3 outputs); give --force")
    replaced = noa("split", stack, "--out-dir", "s3://maps/parts/", "--force", env=s3.env())
    assert replaced.returncode == 0, replaced.stderr


def test_cli_a_part_of_a_split_that_fails_to_upload_leaves_none_of_them(s3, stack):
    s3.reset()
    s3.failing = lambda environ: environ["REQUEST_METHOD"] == "PUT" and environ["PATH_INFO"].endswith("ts_001.mrc")
    try:
        result = noa("split", stack, "--out-dir", "s3://maps/cutparts/", env={**s3.env(), "AWS_MAX_ATTEMPTS": "1"})
    finally:
        s3.reset()
    assert_user_error(result, "s3://maps/cutparts/ts_001.mrc: cannot be written to its server (")
    assert _keys(s3, "cutparts/") == []


@pytest.mark.parametrize("command", [
    ("copy", "IN", "IN2", "--out-dir", "s3://no-such-bucket/out/"),
    ("copy", "IN", "IN2", "--out-dir", "s3://no-such-bucket/out/", "--scheduler", "local"),
    ("split", "IN", "--out-dir", "s3://no-such-bucket/out/"),
], ids=["batch", "dask", "split"])
def test_cli_an_out_dir_in_a_missing_bucket_is_one_line_exit_2(s3, stack, tmp_path, command):
    other = tmp_path / "other.mrc"
    other.write_bytes(stack.read_bytes())
    result = noa(*[{"IN": stack, "IN2": other}.get(word, word) for word in command], env=s3.env())
    assert_user_error(result, "s3://no-such-bucket/out/: no such bucket")


def test_cli_an_out_dir_naming_an_object_or_a_web_server_is_one_line_exit_2(s3, files, web):
    on_object = noa("copy", files["map.mrc"], "--out-dir", "s3://maps/map.mrc", env=s3.env())
    assert_user_error(on_object, "s3://maps/map.mrc: names an object, not a folder")
    on_web = noa("split", files["map.mrc"], "--out-dir", f"{web[0]}/out/", env=s3.env())
    assert_user_error(on_web, f"{web[0]}/out/: a web server is only read")


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    """A 12.5 MiB map: over the least task budget, so the Dask driver splits it into tile tasks."""
    path = tmp_path_factory.mktemp("large") / "large.mrc"
    write_mrc(path, np.random.default_rng(9).normal(size=(40, 256, 320)).astype(np.float32))
    return path


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_dask_tile_tasks_write_a_file_and_a_store_on_s3(s3_env, large, scratch, tmp_path):
    """On a LocalCluster of processes, tile tasks fill the file's temporary file (in this machine's temporary
    folder, which they see), uploaded by the client; a store's chunks are put into the bucket by the tasks."""
    pytest.importorskip("distributed")
    from distributed import get_task_stream

    from noa_core import operations
    from noa_core.run import cluster

    with cluster.connect("local", workers=2) as client, get_task_stream(client) as stream:
        cluster.write_split(operations.get("copy").task(), large, "s3://maps/dask/large.mrc", client,
                            block_bytes=cluster.MIN_BLOCK_BYTES)
        cluster.write_split(operations.get("copy").task({"chunks": (5, 128, 160)}), large,
                            "s3://maps/dask/large.ome.zarr", client, block_bytes=cluster.MIN_BLOCK_BYTES)
    assert sum(t["key"].startswith("noa-copy-") for t in stream.data) >= 4  # each output by several tasks
    data = _oracle(large)
    np.testing.assert_array_equal(_oracle(_downloaded(s3_env, "dask/large.mrc", tmp_path)), data)
    np.testing.assert_array_equal(_levels_read_back(s3_env, "s3://maps/dask/large.ome.zarr")[0], data)
    assert [p.name for p in scratch.iterdir()] == ["dask-scratch-space"]  # Dask's own: nothing of noa's is left


def test_dask_workers_elsewhere_write_an_output_on_s3_in_one_task(s3_env, large, tmp_path):
    """A scheduler reached by its address may have its workers on other machines, which do not see this one's
    temporary folder: one task writes the output in its own and uploads it."""
    distributed = pytest.importorskip("distributed")
    from noa_core import operations
    from noa_core.run import cluster

    copy = operations.get("copy").task()
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as here, \
            distributed.Client(here.scheduler_address) as client, distributed.get_task_stream(client) as stream:
        cluster.write_split(copy, large, "s3://maps/elsewhere/large.mrc", client, block_bytes=cluster.MIN_BLOCK_BYTES)
    assert [t["key"].split("-")[0] for t in stream.data] == ["write_pair"]  # no tile task
    np.testing.assert_array_equal(_oracle(_downloaded(s3_env, "elsewhere/large.mrc", tmp_path)), _oracle(large))


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_cli_a_split_of_stores_into_an_s3_folder_uploads_each_store_metadata_last(s3_env, stack, tmp_path):
    """A split's outputs are stores where its input is one (a_000.ome.zarr, ...): each is uploaded under the prefix,
    every object of it (not silently none), and zarr reads each part as the local split's."""
    s3 = s3_env
    made = noa("copy", stack, tmp_path / "a.ome.zarr")
    assert made.returncode == 0, made.stderr
    remote_run = noa("split", tmp_path / "a.ome.zarr", "--out-dir", "s3://maps/storeparts/", env=s3.env())
    assert remote_run.returncode == 0, remote_run.stderr
    local_run = noa("split", tmp_path / "a.ome.zarr", "--out-dir", tmp_path / "parts")
    assert local_run.returncode == 0, local_run.stderr
    puts = [key for method, key in s3.requests if method == "PUT" and "/storeparts/a_000.ome.zarr/" in f"/{key}"]
    assert puts and puts[-1].endswith(("zarr.json", ".zattrs", ".zgroup"))  # the group's metadata last
    for part in sorted(p.name for p in (tmp_path / "parts").iterdir()):
        local = sorted(str(f.relative_to(tmp_path / "parts")) for f in (tmp_path / "parts" / part).rglob("*")
                       if f.is_file())
        assert sorted(k.removeprefix("storeparts/") for k in _keys(s3, f"storeparts/{part}/")) == local
        np.testing.assert_array_equal(io.read(f"s3://maps/storeparts/{part}")[0].numpy(),
                                      io.read(tmp_path / "parts" / part)[0].numpy())


def test_cli_resume_does_not_skip_a_store_a_killed_run_left_without_its_metadata(s3_env, stack):
    """A store on object storage is written in place, its group metadata last: one with chunks only is a killed
    run's, which --resume does not skip as complete (it did) and --force writes again."""
    s3 = s3_env
    s3.client.put_object(Bucket=BUCKET, Key="killed/ts.ome.zarr/0/c/0/0/0/0", Body=b"xx")
    resumed = noa("copy", stack, "--out-dir", "s3://maps/killed/", "--to", "ome.zarr", "--resume", env=s3.env())
    assert "skipped" not in resumed.stderr  # not taken for complete: its objects are there, not yet replaced
    assert_user_error(resumed, "s3://maps/killed/ts.ome.zarr: exists; give --force")
    done = noa("copy", stack, "--out-dir", "s3://maps/killed/", "--to", "ome.zarr", "--force", env=s3.env())
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(io.read("s3://maps/killed/ts.ome.zarr")[0].numpy().reshape(-1),
                                  _oracle(stack).reshape(-1))
    again = noa("copy", stack, "--out-dir", "s3://maps/killed/", "--to", "ome.zarr", "--resume", env=s3.env())
    assert again.returncode == 0 and "skipped" in again.stderr, again.stderr


def test_a_url_misspelt_is_one_line_and_a_remote_path_stays_a_url():
    """`s3:///k` or `gs://` is no URL noa reads: refused in one line as typed, not read as the local path s3:/k;
    a RemotePath is absolute as it is, relative to no folder, and a folder's name joins its URL as typed."""
    for word, told in (("s3:///maps/a.mrc", "s3://bucket/key"), ("gs://", "gs://bucket/key"),
                       ("HTTPS:/x", "https://host/path")):
        with pytest.raises(FileFormatError, match=rf"^{re.escape(word)}: not a URL noa reads; write {told}$"):
            remote.as_path(word)
        done = noa("info", word)
        assert_user_error(done, f"{word}: not a URL noa reads")
    url = remote.as_path("s3://b/a//k.ome.zarr")
    assert url.absolute() is url and url.resolve() is url
    with pytest.raises(ValueError, match="relative to no folder"):
        url.relative_to("s3://b")
    assert (url / "zarr.json").url == "s3://b/a//k.ome.zarr/zarr.json"
