"""Inputs on object storage and web servers (``s3://bucket/key``, ``gs://bucket/key``, ``http(s)://host/path``),
read through fsspec by byte ranges: a header, then the bytes the tiles of a plan ask for (a read that needs the
whole array fetches the data once, into a temporary file).

A remote input goes the way a local one goes: :func:`noa_core.io.formats.check_input` turns its URL into a
:class:`RemotePath`, and the formats read it through :func:`noa_core.io.compression.open_input` (a seekable
file) and :func:`noa_core.io.mapped.map_file` (the data, fetched by :class:`Ranges` as
:func:`noa_core.io.mapped.read_view` asks), so it becomes the same Array and metadata. Credentials and endpoints
come from where fsspec and its back ends look for them (``AWS_ACCESS_KEY_ID``/``AWS_PROFILE``/``~/.aws``,
``AWS_ENDPOINT_URL`` or ``FSSPEC_S3_ENDPOINT_URL``; for ``gs://``, Google's application default credentials:
``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth application-default login``, a Compute Engine account, else
anonymous, and ``STORAGE_EMULATOR_HOST`` for a server of the tests); a URL is shown without its query (a presigned
URL's signature) or user and password.

Outputs go to object storage (``s3://``, ``gs://``; a web server is only read): a file (MRC, TIFF, any operation's
image) is written here as noa writes any file, then uploaded as one object by :func:`upload` (s3fs: one request, or
a multipart upload of :data:`UPLOAD_PART_BYTES` parts that is aborted on failure), so the key holds the whole file
or nothing; an OME-Zarr store is written straight into the bucket, chunk by chunk, its group metadata last, and its
objects removed on failure (:func:`remove_tree`).

A URL becomes a :class:`RemotePath` once, where a door takes it (:func:`as_path`: the command line's words, the
Python calls' paths), and travels as that through the drivers, which make their paths with :func:`as_path` too: it
keeps the URL as given (a key's ``//`` or ``/./``, a presigned URL's query), which :class:`pathlib.Path` would
normalise.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from noa_core.errors import (
    EmptyFileError,
    FileFormatError,
    MissingFileError,
    NotAFileError,
    OutputExistsError,
    TruncatedFileError,
    param,
)

# scheme -> fsspec protocol (gs needs the gcsfs package, s3 s3fs, http(s) aiohttp: all in noa[remote])
PROTOCOLS = {"s3": "s3", "gs": "gcs", "http": "http", "https": "http"}
_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?=[^/])")
_SCHEME = re.compile(r"^(?:s3|gs|https?):", re.IGNORECASE)  # a word that means to be a URL of PROTOCOLS
# What a header read fetches past what it asks for: TIFF's directories lie near their pages, MRC's extended
# header right after the header; small beside a section, so a header and one section fetch about that.
HEADER_BLOCK_BYTES = 16 << 10
# The environment variables a file system reads its credentials, endpoint and region from (boto's, fsspec's,
# Google's, gcloud's, and the GCS emulator's endpoint that gcsfs and Google's clients read)
_SETTINGS = ("AWS_", "FSSPEC_", "GOOGLE_", "GCE_", "CLOUDSDK_", "STORAGE_EMULATOR_HOST")
# Where each scheme's credentials come from, for the line that says they were refused
_CREDENTIALS = {"s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws",
                "gs": "GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login"}
# The size of an upload's parts (s3fs uploads a file of more than two in parts, each retried alone): S3 takes
# parts of 5 MiB to 5 GiB, and at most 10,000 of them (s3fs grows the parts of a larger file)
UPLOAD_PART_BYTES = 64 << 20
# A zarr store's metadata files (v3, v2), uploaded after its chunks; a group's say the store is whole
STORE_METADATA = ("zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata")
GROUP_METADATA = ("zarr.json", ".zgroup")
# The schemes outputs may name: object stores (a web server is read only)
_WRITABLE = ("s3", "gs")


class RemotePath(type(Path())):  # type: ignore[misc]  # PosixPath (or WindowsPath): where a Path is expected
    """A URL where a path of this machine is expected: it keeps the URL as given (:attr:`url`), its name and
    suffixes are those of the URL's path, and it prints as the URL without query or credentials. ``/``,
    :attr:`parent`, :meth:`with_name` and :meth:`with_suffix` give URLs of the same server (without the query);
    two are equal when their URLs are. Never opened as a local file: every reader asks :func:`remote_path`."""

    url: str  # the URL read, exactly as given (query included), its scheme in lower case
    # What the server said of the URL at the first look (fsspec's info: type, size), kept so that a read (made of a
    # URL at its door) asks once however many checks and opens it makes; a new RemotePath looks again.
    looked_up: dict | None
    # The object's first HEADER_BLOCK_BYTES as first read (RemoteFile): its format's detection and its reader both
    # read the header, in one request.
    head: bytes | None

    def __new__(cls, url: str) -> RemotePath:
        path = super().__new__(cls, url)
        path.url, path.looked_up, path.head = url, None, None
        return path

    def __reduce__(self) -> tuple:
        return RemotePath, (self.url,)  # to Dask's workers as the URL, not as Path's normalised parts

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RemotePath):
            return self.url == other.url
        return False if isinstance(other, PurePath) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.url)

    @property
    def scheme(self) -> str:
        """``s3``, ``gs``, ``http`` or ``https``."""
        return self.url.split(":", 1)[0]

    @property
    def _address(self) -> str:
        """The URL without its query (a presigned URL's may hold ``/``)."""
        return self.url.split("?", 1)[0]

    @property
    def name(self) -> str:
        """The last part of the URL's path, which suffix and stem come from."""
        return self._address.rsplit("/", 1)[1]

    @property
    def parent(self) -> RemotePath:
        """The folder the URL names its object in, as object storage has it: the prefix up to its last ``/``,
        kept (``s3://b/a//k`` is in ``s3://b/a//``), so that ``parent / name`` is the URL; a bucket's is itself."""
        address = self._address
        head = address[:-1] if address.endswith("/") else address
        folder = head[:head.rindex("/") + 1]
        return self if folder.endswith("://") else RemotePath(folder)

    @property
    def parents(self) -> tuple[RemotePath, ...]:
        """The folders above, nearest first, up to the bucket's (``s3://b/``)."""
        folders: list[RemotePath] = []
        path = self
        while path.parent != path:
            path = path.parent
            folders.append(path)
        return tuple(folders)

    def __truediv__(self, name: str | PurePath) -> RemotePath:
        """``name`` in this folder: one ``/`` between them unless the URL ends with one (``s3://b/out/``)."""
        address = self._address
        return RemotePath(f"{address}{'' if address.endswith('/') else '/'}{name}")

    def absolute(self) -> RemotePath:
        return self  # a URL names its object wherever noa runs

    def resolve(self, strict: bool = False) -> RemotePath:
        return self

    def relative_to(self, *other: Any, **options: Any) -> Path:
        raise ValueError(f"{self}: a URL is relative to no folder of this machine")

    def joinpath(self, *names: str | PurePath) -> RemotePath:
        return functools.reduce(RemotePath.__truediv__, names, self)

    def with_name(self, name: str) -> RemotePath:
        if not self.name or not name or "/" in name:
            raise ValueError(f"{self}: cannot be named {name!r}")
        return self.parent / name

    def with_suffix(self, suffix: str) -> RemotePath:
        if suffix and (not suffix.startswith(".") or suffix == "."):
            raise ValueError(f"{self}: {suffix!r} is not a suffix")
        return self.with_name(self.stem + suffix)

    def __str__(self) -> str:
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    def __fspath__(self) -> str:
        # What only a local file can do (a header edited in place) is refused in one line; Path's is_file() and
        # exists() say False (a ValueError)
        raise FileFormatError(f"{self}: on remote storage, and this needs a file of this machine; copy it here "
                              "first")


def remote_path(path: str | os.PathLike) -> RemotePath | None:
    """``path`` as a :class:`RemotePath` when it names a URL of a scheme noa reads (``s3://``, ``gs://``,
    ``http(s)://``); else None. A :class:`pathlib.Path` is this machine's: one made of a URL has lost it."""
    if isinstance(path, RemotePath):
        return path
    text = str(path) if isinstance(path, (str, PurePath)) else os.fspath(path)
    match = _URL.match(text) if isinstance(text, str) else None
    if match is None or match["scheme"].lower() not in PROTOCOLS:
        return None
    return RemotePath(match["scheme"].lower() + text[len(match["scheme"]):])


def as_path(path: str | os.PathLike) -> Path:
    """What noa takes for a path, the one way every door and driver makes it: a :class:`RemotePath` keeping a URL
    as given, else a :class:`pathlib.Path`. A word typed as a URL of a scheme noa reads that is not one (``s3:///k``,
    ``gs://``) is refused in one line, not read as a local path spelled otherwise."""
    if isinstance(path, Path):  # a RemotePath, or a path of this machine (one made of a URL has lost it): as it is
        return path
    url = remote_path(path)
    if url is not None:
        return url
    if isinstance(path, str) and _SCHEME.match(path):
        scheme = path.split(":", 1)[0].lower()
        where = "host/path" if scheme.startswith("http") else "bucket/key"
        raise FileFormatError(f"{path}: not a URL noa reads; write {scheme}://{where}")
    return Path(path)


def is_remote(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a remote input (see :func:`remote_path`)."""
    return remote_path(path) is not None


def _filesystem(path: RemotePath) -> Any:
    """The fsspec file system of ``path``'s scheme under the settings in the environment now (credentials,
    endpoint, region): one per settings, so a process whose settings change (a test, a service) never reads
    with old ones, and one made (its client, 0.1-0.5 s) serves every read under the same ones."""
    scheme = path.scheme
    settings = tuple(sorted((name, value) for name, value in os.environ.items() if name.startswith(_SETTINGS)))
    try:
        return _made(PROTOCOLS[scheme], settings)
    except ImportError:
        package = {"s3": "s3fs", "gs": "gcsfs"}.get(scheme, "aiohttp")
        raise FileFormatError(f"{path}: reading {scheme}:// URLs needs {package}, which is not installed: install "
                              "noa[remote] (in noa's checkout: pip install -e '.[remote]', or pip install "
                              "'.[remote]')") from None


@functools.lru_cache(maxsize=8)
def _made(protocol: str, settings: tuple[tuple[str, str], ...]) -> Any:
    """A new file system of ``protocol`` (``settings``: the environment it reads, as the cache's key only). Its
    listings are not kept: an object written or removed since is seen as it is."""
    import fsspec  # here: a local call never loads it

    if protocol == "gcs":
        # The JSON API's client: gcsfs.GCSFileSystem (fsspec's "gcs") first asks Google's control plane over gRPC
        # what kind each bucket is, warning on stderr where it cannot (an emulator, no credentials), for the zonal
        # buckets only it reads otherwise. An emulator checks no credentials: anonymous, without looking for any.
        from gcsfs.core import GCSFile, GCSFileSystem

        token = "anon" if dict(settings).get("STORAGE_EMULATOR_HOST") else None
        return _told_gcs(GCSFileSystem, GCSFile)(token=token, skip_instance_cache=True, use_listings_cache=False)
    return fsspec.filesystem(protocol, skip_instance_cache=True, use_listings_cache=False)


@functools.cache
def _told_gcs(client: type, file: type) -> type:
    """gcsfs's client (the JSON API's: :func:`_made`) whose files opened for reading may be told what the store said
    of their object (``details``, as :func:`open_input` opens them): gcsfs's file asks again as it opens otherwise, one
    round trip each open (three for a probe of a map: its format's detection, its header, its reading)."""

    class ToldFile(file):
        def __init__(self, *args: Any, details: dict, **kwargs: Any) -> None:
            self._details = details
            super().__init__(*args, **kwargs)

    class ToldFileSystem(client):
        def _open(self, path: str, mode: str = "rb", block_size: int | None = None, details: dict | None = None,
                  **kwargs: Any) -> Any:
            if details is None or mode != "rb":
                return super()._open(path, mode, block_size, **kwargs)
            kwargs["consistency"] = kwargs.get("consistency") or self.consistency
            return ToldFile(self, path, mode, block_size or self.default_block_size, details=details, **kwargs)

    return ToldFileSystem


def zarr_store(path: RemotePath, read_only: bool) -> Any:
    """The zarr store of the store at ``path`` (its chunks read and written as objects) through the file system
    :func:`_filesystem` gives: zarr's calls run in threads on it, so its connections are closed with it (an
    asynchronous one of zarr's own would leave them open at exit). A read the storage fails (the server gone,
    access refused) is said as :func:`errors` says a file's, naming the object, and kept as the store's
    ``failure`` (zarr's callers wrap what they catch); a missing object is zarr's fill value."""
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

    fs = _filesystem(path)
    store = _reading_store_class()(AsyncFileSystemWrapper(fs, asynchronous=True), path=fs._strip_protocol(path.url),
                                   read_only=read_only)
    store.url = path
    return store


@functools.cache
def _reading_store_class() -> type[Any]:
    """zarr's FsspecStore, its reads' failures in one line (built on first use: zarr is imported by the first store
    read or written only)."""
    from zarr.storage import FsspecStore

    class ReadingStore(FsspecStore):
        url: RemotePath
        failure: FileFormatError | None = None  # the first read the storage failed

        def with_read_only(self, read_only: bool = False) -> FsspecStore:
            store = super().with_read_only(read_only)  # of this class, without the URL
            store.url = self.url  # type: ignore[attr-defined]
            return store

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            with self._said(self.url / key):
                return await super().get(key, prototype, byte_range)

        async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
            key_ranges = list(key_ranges)
            keys = {key for key, _ in key_ranges}
            with self._said(self.url / keys.pop() if len(keys) == 1 else self.url):
                return await super().get_partial_values(prototype, key_ranges)

        @contextlib.contextmanager
        def _said(self, path: RemotePath) -> Iterator[None]:
            try:
                with errors(path):
                    yield
            except FileFormatError as exc:
                self.failure = self.failure or exc
                raise

    return ReadingStore


class StorageError(FileFormatError):
    """The storage refused a request or could not be reached (access refused, no credentials, the server gone): the
    service's storage failed, not the request (the service answers 502). ``summary``: the message without the
    store's own words (which may name its endpoint and bucket), what a client of the service is told."""

    def __init__(self, message: str, summary: str):
        super().__init__(message)
        self.summary = summary


# A URL's user and password, and its query (a signature), in whatever spelling a back end prints the URL
_USER = re.compile(r"(?<=://)[^/\s'\"@]*@")
_QUERY = re.compile(r"(://[^\s'\"?]*)\?[^\s'\"]*")


def _reason(path: RemotePath, exc: BaseException) -> str:
    """The back end's words for a failure, without any URL's query (a signature) or user and password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return _QUERY.sub(r"\1", _USER.sub("", text.replace(path.url, str(path))))


@contextlib.contextmanager
def errors(path: RemotePath, doing: str = "read from") -> Iterator[None]:
    """Failures of the storage as one line naming ``path``: no such object or bucket, access refused, no
    credentials, the host not reached (``doing``: what failed, "read from" or "written to" its server)."""
    try:
        yield
    except FileFormatError:
        raise
    except FileExistsError:  # a write that must not replace (s3fs's conditional put) found an object there
        raise OutputExistsError(f"{path}: was created by someone else while writing") from None
    except FileNotFoundError as exc:
        cause = exc.__cause__  # fsspec's HTTP file system says "not found" for any failure of its look
        if cause is not None and (getattr(cause, "status", None) not in (None, 404) or isinstance(cause, OSError)):
            raise _refused(path, cause) from None
        bucket = "bucket" in str(exc).lower() and "does not exist" in str(exc).lower()
        if path.scheme == "gs":  # gcsfs says a 404 without saying of what
            bucket = _bucket_missing(path)
        raise MissingFileError(f"{path}: no such {'bucket' if bucket else 'object'}") from None
    except PermissionError as exc:
        raise StorageError(f"{path}: access refused ({_reason(path, exc)}){_check_credentials(path)}",
                           f"{path}: access refused") from None
    except Exception as exc:  # the back ends' own types (aiohttp, botocore): the host not reached, a refusal
        if getattr(exc, "status", None) == 404:
            raise MissingFileError(f"{path}: no such object") from None
        if type(exc).__name__ == "NoCredentialsError":  # botocore's, by name: a local read never imports it
            raise StorageError(f"{path}: no credentials found; set AWS_ACCESS_KEY_ID and "
                               "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or write them in ~/.aws",
                               f"{path}: no credentials found") from None
        raise _refused(path, exc, doing) from None


def _refused(path: RemotePath, exc: BaseException, doing: str = "read from") -> StorageError:
    """A failure that is not a missing object, in one line: access refused (HTTP 401, 403), else the server not
    reached or refusing."""
    status = getattr(exc, "status", None)
    if path.scheme == "gs":  # gcsfs says a refusal as its HttpError (code), a 403 as an OSError of these words
        status = 403 if isinstance(exc, OSError) and str(exc).startswith("Forbidden: ") else getattr(exc, "code", None)
        if status in (401, 403):
            return StorageError(f"{path}: access refused (HTTP {status}){_check_credentials(path)}",
                                f"{path}: access refused")
    if status in (401, 403):
        return StorageError(f"{path}: access refused (HTTP {status})", f"{path}: access refused")
    return StorageError(f"{path}: cannot be {doing} its server ({_reason(path, exc)})",
                        f"{path}: cannot be {doing} its server")


def _check_credentials(path: RemotePath) -> str:
    """Where the credentials of ``path``'s scheme come from, as the end of a line saying they were refused."""
    where = _CREDENTIALS.get(path.scheme)
    return f"; check the credentials ({where})" if where else ""


def _bucket_missing(path: RemotePath) -> bool:
    """Whether the bucket of ``path`` is missing (one request more, on the way to saying a missing object); a
    bucket that cannot be looked at is not said to be missing."""
    try:
        _filesystem(path).info(_bucket_and_key(path)[0])
    except FileNotFoundError:
        return True
    except Exception:
        return False
    return False


def _info(path: RemotePath, fs: Any) -> dict:
    """What the server says of ``path`` (one request the first time, none after: :attr:`RemotePath.looked_up`)."""
    if path.looked_up is None:
        with errors(path):
            path.looked_up = fs.info(path.url)
    return path.looked_up


# What a store says changes with an object's data: S3's ETag and time, Google Cloud Storage's etag, generation
# and time (as s3fs and gcsfs give them)
VERSION_KEYS = ("ETag", "LastModified", "etag", "generation", "updated")


def version(path: RemotePath) -> str | None:
    """What changes whenever the object's data do: its URL, size and version (:data:`VERSION_KEYS`), as the store said
    them (one request the first time: :func:`_info`); None for a prefix, or a store that gives no version."""
    looked = _info(path, _filesystem(path))
    if looked.get("type") == "directory" or not any(key in looked for key in VERSION_KEYS):
        return None
    return ":".join(str(looked.get(key)) for key in ("name", "size", *VERSION_KEYS) if key in looked)


def is_folder(path: RemotePath) -> bool:
    """Whether ``path`` names a prefix holding objects (a store's folder) rather than one object."""
    fs = _filesystem(path)
    return _info(path, fs).get("type") == "directory"


def listing(path: RemotePath) -> list[RemotePath]:
    """What the folder ``path`` holds (one listing request): its objects and the prefixes below it, each a
    RemotePath whose :attr:`~RemotePath.looked_up` is what the listing said of it (an object's size: no request
    more to read its header)."""
    fs = _filesystem(path)
    with errors(path):
        found = fs.ls(path.url, detail=True)
    own = fs._strip_protocol(path.url).rstrip("/")
    entries = []
    for info in found:
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if info["name"].rstrip("/") == own or not name:  # the folder itself, as some stores list it
            continue
        entry = path / name
        entry.looked_up = info
        entries.append(entry)
    return entries


def holds(path: RemotePath, name: str) -> bool:
    """Whether the folder ``path`` holds an object ``name``."""
    fs = _filesystem(path)
    with errors(path):
        return bool(fs.exists((path / name).url))


def size_of(path: RemotePath, info: dict) -> int:
    """The object's size in bytes, which reading by ranges needs."""
    size = info.get("size")
    if not isinstance(size, int):
        raise FileFormatError(f"{path}: size unknown (the server gave no length); noa reads remote files by "
                              "byte ranges")
    return size


def open_input(path: RemotePath) -> Any:
    """``path`` opened for reading by ranges (a seekable binary file whose ``size`` is the object's), refused
    unless it is a non-empty object; its reads fetch at most :data:`HEADER_BLOCK_BYTES` beyond what they ask."""
    fs = _filesystem(path)
    info = _info(path, fs)
    if info.get("type") == "directory":
        raise NotAFileError(f"{path}: is a folder (a prefix of objects), not a file")
    if size_of(path, info) == 0:
        raise EmptyFileError(f"{path}: size: the file is empty (0 bytes)")
    told = {"details": info} if path.scheme == "gs" else {}  # gcsfs's file would ask for them as it opens
    with errors(path):
        file = fs.open(path.url, "rb", block_size=HEADER_BLOCK_BYTES, cache_type="readahead", size=info["size"],
                       **told)
    with contextlib.suppress(AttributeError):  # s3fs's file asks for them at its first read otherwise
        file.details = info
    return RemoteFile(path, file)


class RemoteFile:
    """A remote file whose failures are one line naming it (:func:`errors`). Reads within the object's first
    :data:`HEADER_BLOCK_BYTES` are answered from :attr:`RemotePath.head`, fetched by the first of them."""

    def __init__(self, path: RemotePath, file: Any) -> None:
        self.path, self.file = path, file
        self.size: int = file.size

    def read(self, size: int = -1) -> bytes:
        kept = self._from_head(size)
        if kept is not None:
            return kept
        with errors(self.path):
            return self.file.read(size)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        kept = self._from_head(len(view))
        if kept is not None:
            view[:len(kept)] = kept
            return len(kept)
        with errors(self.path):
            return self.file.readinto(buffer)

    def _from_head(self, size: int) -> bytes | None:
        """The ``size`` bytes from the position, when they lie in the object's head (None otherwise)."""
        at = self.file.tell()
        if size < 0 or at + size > HEADER_BLOCK_BYTES:
            return None
        if self.path.head is None:  # one range, without the read-ahead the file's own reads add
            with errors(self.path):
                self.path.head = self.file.fs.cat_file(self.file.path, start=0, end=min(HEADER_BLOCK_BYTES, self.size))
        piece = self.path.head[at:at + size]
        self.file.seek(at + len(piece))
        return piece

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def fileno(self) -> int:
        raise io.UnsupportedOperation(f"{self.path}: a remote file has no descriptor")

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.file.close()

    @property
    def closed(self) -> bool:
        return self.file.closed

    def __enter__(self) -> RemoteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Ranges:
    """Reads byte ranges of one object from ``start`` on: what :func:`noa_core.io.mapped.read_view` calls for each
    run a tile reads (one request a run; requests are independent, so the tile engine's threads may share it)."""

    def __init__(self, path: RemotePath, start: int) -> None:
        self.path, self.start = path, start
        self.fs = _filesystem(path)

    def read_into(self, buffer: memoryview, offset: int) -> bool:
        first = self.start + offset
        with errors(self.path):
            data = self.fs.cat_file(self.path.url, start=first, end=first + len(buffer))
        if len(data) != len(buffer):
            why = ("the server ignored the byte range asked" if len(data) > len(buffer)
                   else "the object changed size while being read")
            raise TruncatedFileError(f"{self.path}: data: {why} (asked {len(buffer)} bytes at {first}, got "
                                     f"{len(data)})")
        buffer[:] = data
        return True

    def close(self) -> None:
        """Nothing is kept open between requests."""



# -- outputs ----------------------------------------------------------------------------------------------


def check_output(path: RemotePath, overwrite: bool, directory: bool = False) -> RemotePath:
    """The output ``path`` refused early, before any work: a scheme noa cannot write, a bucket missing or refused,
    an object (or, for a store, ``directory``, a prefix of objects) there without ``overwrite``."""
    _check_writable(path)
    if not _bucket_and_key(path)[1].strip("/"):
        raise FileFormatError(f"{path}: names a bucket; give the output's key (s3://bucket/name.mrc)")
    fs = _filesystem(path)
    writing = "written to"
    if _exists(path, writing):
        with errors(path, writing):
            folder = fs.info(path.url).get("type") == "directory"
        if folder and not directory:
            raise NotAFileError(f"{path}: is a folder (a prefix of objects); give a file name")
        if not overwrite:
            raise OutputExistsError(f"{path}: exists; give {param('overwrite')} to replace it")
        return path
    _check_bucket(path)  # a missing object says nothing about it
    return path


def check_folder(path: RemotePath) -> RemotePath:
    """The folder ``path`` outputs are to be written into refused early, before any work: a scheme noa cannot
    write, a bucket missing or refused, an object at its name. A folder of object storage is a prefix of keys:
    there is nothing to create."""
    _check_writable(path)
    if _bucket_and_key(path)[1].strip("/"):
        fs = _filesystem(path)
        with errors(path, "written to"):
            try:
                kind = fs.info(path.url).get("type")
            except FileNotFoundError:  # no object begins with it yet
                kind = None
        if kind == "file":
            raise NotAFileError(f"{path}: names an object, not a folder")
    _check_bucket(path)
    return path


def exists(path: Path) -> bool:
    """Whether ``path`` names something: a file or folder of this machine, or on remote storage an object or a
    prefix of objects (asked of its server)."""
    url = remote_path(path)
    return path.exists() if url is None else _exists(url)


def _exists(path: RemotePath, doing: str = "read from") -> bool:
    with errors(path, doing):
        return bool(_filesystem(path).exists(path.url))


def _bucket_and_key(path: RemotePath) -> tuple[str, str]:
    """The URL's bucket, and the key after it."""
    bucket, _, key = path.url.split("://", 1)[1].partition("/")
    return bucket, key


def _check_writable(path: RemotePath) -> None:
    if path.scheme not in _WRITABLE:
        raise FileFormatError(f"{path}: a web server is only read; outputs go to object storage (s3://, gs://) "
                              "or to this machine's folders")


def _check_bucket(path: RemotePath) -> None:
    """Refuse ``path`` where its bucket is missing or refused."""
    with errors(path, "written to"):
        try:
            _filesystem(path).info(_bucket_and_key(path)[0])
        except FileNotFoundError:
            raise MissingFileError(f"{path}: no such bucket") from None


def upload(local: Path, path: RemotePath, overwrite: bool) -> None:
    """The finished file ``local`` uploaded to ``path`` as one object: the key holds the whole file or nothing new
    (a multipart upload that fails is aborted); without ``overwrite``, never over an object that appeared meanwhile
    (a conditional write where the store has one). A finished store (a folder: an OME-Zarr written here) goes up
    file by file under the prefix, its metadata last, as a store written into the bucket is; where one fails, its
    objects are removed."""
    fs = _filesystem(path)
    options: dict[str, Any] = {"mode": "overwrite" if overwrite else "create"}
    if path.scheme == "s3":
        options["chunksize"] = UPLOAD_PART_BYTES
    if local.is_dir():
        files = sorted((f for f in local.rglob("*") if f.is_file()), key=lambda f: (f.name in STORE_METADATA, str(f)))
        try:
            for file in files:
                target = path.joinpath(*file.relative_to(local).parts)
                with errors(target, "written to"):
                    fs.put_file(os.fspath(file), target.url, **options)
        except BaseException:
            remove_tree(path)
            raise
        return
    if not local.is_file():
        raise FileFormatError(f"{path}: {local} is not a file to upload")
    with errors(path, "written to"):
        fs.put_file(os.fspath(local), path.url, **options)


def complete(path: Path) -> bool:
    """Whether ``path`` holds a finished output: a file or folder of this machine that is there; on object storage
    an object, or a store whose group metadata are there (written last: a store a killed run left is chunks only)."""
    url = remote_path(path)
    if url is None:
        return path.exists()
    with errors(url):
        try:
            kind = _filesystem(url).info(url.url).get("type")
        except FileNotFoundError:
            return False
    return kind != "directory" or any(holds(url, name) for name in GROUP_METADATA)


def upload_together(files: Sequence[tuple[Path, RemotePath]], overwrite: bool) -> None:
    """Each finished file of ``files`` uploaded to its URL (:func:`upload`), in order: object storage cannot give
    several objects their names at once, so where one fails the objects uploaded before it are removed again (as
    far as the store lets them) and none of the new ones is left; the objects they replaced (``overwrite``) are
    gone."""
    uploaded: list[RemotePath] = []
    try:
        for local, path in files:
            upload(local, path, overwrite)
            uploaded.append(path)
    except BaseException:
        for path in uploaded:
            with contextlib.suppress(Exception):  # a failure to remove is no second error on top of the first
                _filesystem(path).rm_file(path.url)
        raise


def remove_tree(path: RemotePath) -> None:
    """Every object under the prefix ``path`` removed (a store written there, or being replaced), as far as the
    store lets it: a failure to remove is no second error on top of the one that made the removal needed."""
    fs = _filesystem(path)
    with contextlib.suppress(Exception):
        if fs.exists(path.url):
            fs.rm(path.url, recursive=True)
