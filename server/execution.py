"""What runs in a worker thread: plan the operation from the headers, check the voxel limit, run it.

Both doors end here: :func:`run_on_paths` for files under the data root (path routes and jobs),
:func:`run_on_uploads` for files the client sent. Neither touches array data itself. With a Dask
scheduler, jobs run on its workers instead (:func:`run_on_cluster`).
"""

from __future__ import annotations

import dataclasses
import errno
import math
import multiprocessing.util
import os
import re
import shutil
import stat
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from noa_core import operations
from noa_core.errors import MissingFileError, NoaError, PathRefusedError, UnknownFormatError, spelt
from noa_core.io import formats, particle_files, remote
from noa_core.io.atomic import scratch_outputs
from noa_core.operations import FileTask, Writes, WritesDataSet
from noa_core.run import Limits, Progress, cluster, execute
from noa_core.run.execution import checked_plan
from noa_server.models import OpParams, PathRequest, job_model
from noa_server.problems import ProblemError, classify, log
from noa_server.sandbox import AnySandbox, RemoteSandbox, Sandbox, open_sandbox

try:
    import fcntl
except ImportError:  # no flock (Windows): upload folders of killed processes are then left alone
    fcntl = None  # type: ignore[assignment]  # a module, or None where there is none

# Per format name: the extension of an upload's result and its media type.
EXTENSIONS = {fmt.name: fmt.output_extensions[0] for fmt in formats.FORMATS}
MEDIA_TYPES = {fmt.name: fmt.media_type for fmt in formats.FORMATS}
ZIP_MEDIA_TYPE = "application/zip"  # several outputs of one upload come back as one archive
INLINE_BYTES = 1 << 20  # results up to this size are sent from memory, larger ones streamed from disk
PROC_FD = "/proc/self/fd"  # /proc/self/fd/N: the file descriptor N has open, whatever its path is now
UPLOAD_PREFIX = "noa-upload-"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Planned:
    """A path request whose paths passed the sandbox, resolved to absolute paths inside the root (URLs of keys
    under the prefix, for a data root on object storage), as they were when it was planned: it runs at once (a job
    is planned again as it starts, on this service's workers or a cluster's)."""

    request: PathRequest
    inputs: list[Path]
    output: Path | None
    sandbox: AnySandbox


def plan(request: PathRequest, sandbox: AnySandbox) -> Planned:
    output = request.output_path()
    for name, relative in _input_files(request).items():  # checked now too: a job refuses them on submission
        with _naming(name):
            sandbox.resolve(relative)
    project_dir = getattr(request, "project_dir", None)
    if project_dir is not None:
        with _naming("project_dir"):
            sandbox.resolve(project_dir)
    return Planned(request, [sandbox.resolve(p) for p in request.input_paths()],
                   None if output is None else sandbox.resolve(output), sandbox)


def _input_files(request: PathRequest) -> dict[str, str]:
    return request.input_files() if isinstance(request, OpParams) else {}


@contextmanager
def _naming(name: str) -> Iterator[None]:
    """A refused path of the parameter ``name`` (a gain) named as the parameter, as the client sent it."""
    try:
        yield
    except ProblemError as problem:
        problem.detail = f"{name}: {problem.detail}"
        raise


def _run(params: OpParams, inputs: Sequence[Path], output: Path | None, max_voxels: int, *, overwrite: bool,
         progress: Progress, dry_run: bool = False, stem: str | None = None,
         projects: SandboxProjects | None = None, resume: bool = False) -> dict[str, Any]:
    """Run ``params``' operation on files of this machine within the voxel limit (:func:`noa_core.run.execute`);
    ``projects``: how paths named inside the inputs (a particle file's stacks) are opened (beneath the root)."""
    return execute(params.declaration, inputs, output, params.values(), limits=Limits(max_voxels=max_voxels),
                   progress=progress, overwrite=overwrite, dry_run=dry_run, stem=stem, projects=projects,
                   resume=resume)


@dataclass(frozen=True)
class ClientNames:
    """Server paths -> the client's names for them, for error messages and notices.

    noa_core names the files it works on; the server's own folder layout is none of the client's
    business (and a temporary upload folder means nothing to them).
    """

    names: dict[str, str]

    def text(self, message: str) -> str:
        message = spelt(message)  # parameters the library names, as the request names them
        if "/" not in message:  # every server path has one (most texts of a report name none)
            return message
        # Longest first: a server path may begin another ('/proc/self/fd/1' and '/proc/self/fd/12/').
        for server_path, client_name in sorted(self.names.items(), key=lambda item: -len(item[0])):
            message = message.replace(server_path, client_name)
        return message

    @contextmanager
    def in_errors(self) -> Iterator[None]:
        try:
            yield
        except NoaError as exc:
            problem = classify(exc)
            assert problem is not None
            if isinstance(exc, remote.StorageError):  # the client is told its summary: the server's log has all
                log.warning("object storage: %s", exc)
            problem.detail = self.text(problem.detail)
            raise problem from exc


def client_names(sandbox: AnySandbox, more: dict[str, str] | None = None) -> ClientNames:
    """How messages name the paths under ``sandbox``'s root to a client (``more``: the request's own links and
    folders): relative to the root, the root itself as the data root; never the server's folder or the bucket."""
    return ClientNames({f"{sandbox.root}/": "", str(sandbox.root): "the data root", **(more or {})})


def plan_and_run(request: PathRequest, sandbox: AnySandbox, max_voxels: int) -> Any:
    """:func:`plan` then :func:`run_on_paths`, for requests answered in one response."""
    return run_on_paths(plan(request, sandbox), max_voxels, ignore_progress)


def run_on_paths(planned: Planned, max_voxels: int, progress: Progress) -> Any:
    """Run a planned request on the files its paths name when it runs; the JSON-ready result names
    files as the client did."""
    if isinstance(planned.sandbox, RemoteSandbox):
        return _run_on_keys(planned, planned.sandbox, max_voxels, progress)
    with ExitStack() as opened:
        inputs, output, names = _open(planned, opened)
        files = _open_input_files(planned, opened, names)
        with names.in_errors():
            return _run_on_paths(planned, inputs, output, max_voxels, progress, names, files)


def _run_on_keys(planned: Planned, sandbox: RemoteSandbox, max_voxels: int, progress: Progress) -> Any:
    """:func:`run_on_paths` for a data root on object storage: noa_core reads and writes the keys by their URLs,
    except a particle file, read from a copy (:func:`fetched`); the stacks it names are fetched as
    :class:`SandboxProject` opens them."""
    names = client_names(sandbox)
    files = {name: str(sandbox.resolve(relative)) for name, relative in _input_files(planned.request).items()}
    with ExitStack() as opened, names.in_errors():
        inputs = list(planned.inputs)
        for i, relative in enumerate(planned.request.input_paths()):
            if particle_files.is_particle_path(inputs[i]):
                inputs[i] = fetched(sandbox.resolve(relative), scratch(sandbox, opened, names), names, relative)
        return _run_on_paths(planned, inputs, planned.output, max_voxels, progress, names, files)


def scratch(sandbox: AnySandbox, opened: ExitStack, names: ClientNames) -> Path:
    """A fresh upload folder for one request's copies, removed by ``opened``; named as nothing to the client."""
    folder = new_upload_folder(sandbox.scratch)
    opened.callback(remove_upload_folder, folder)
    names.names[f"{folder}/"] = ""
    return folder


def fetched(url: remote.RemotePath, folder: Path, names: ClientNames, relative: str) -> Path:
    """The object ``url`` copied whole into ``folder`` under its name, and named ``relative`` to the client: how a
    particle file (a table naming other files, read from this machine's files only) of object storage is read."""
    copy = folder / url.name
    with remote.open_input(url) as source, open(copy, "wb") as target:
        shutil.copyfileobj(source, target, 1 << 20)
    names.names[str(copy)] = relative
    return copy


# -- jobs on a Dask cluster --------------------------------------------------------------------------


def run_on_cluster(planned: Planned, max_voxels: int, progress: Progress, client: Any) -> Any:
    """Run a planned request on the Dask cluster of ``client`` (a ``distributed.Client``), answered as
    :func:`run_on_paths` answers it.

    One file larger than a task's share is written by tasks over its tiles (:func:`noa_core.run.cluster.write_split`:
    the workers open the paths checked now beneath the root, following no link, so that one planted since is
    refused; this process creates and renames the temporary output in the output's folder opened beneath the root);
    any other request, and a file one task would write whole, is one task that runs it on a worker as this process
    would, opened beneath the root there (:func:`_run_on_worker`). ``progress`` raises to cancel: the tasks are
    cancelled, and no output is committed.
    """
    split = _split(planned, max_voxels)
    if split is None:
        return _on_one_worker(planned, max_voxels, progress, client)
    task, src, dst, names = split
    overwrite = getattr(planned.request, "overwrite", False)
    try:
        with ExitStack() as opened, names.in_errors():
            if isinstance(planned.sandbox, Sandbox):  # object storage has no links
                relative = planned.request.output_path()
                assert relative is not None  # a split writes one output
                target, found = _in_opened_folder(planned.sandbox, relative, opened, names.names)
                notices = cluster.write_split(task, src, target, client, overwrite=overwrite, progress=progress,
                                              confined_to=planned.sandbox.root, dst_folder=found.parent)
            else:
                notices = cluster.write_split(task, src, dst, client, overwrite=overwrite, progress=progress)
    except cluster.WholeTask:
        return _on_one_worker(planned, max_voxels, progress, client)
    return for_client({"output": str(dst), "notices": notices}, names)


def _split(planned: Planned, max_voxels: int) -> tuple[FileTask, Path, Path, ClientNames] | None:
    """The task, input and output of a request that writes one file too large for one task
    (:data:`noa_core.run.cluster.BLOCK_BYTES`, write_split's share), checked against the voxel limit; None for
    any other request (a data set writes its own files)."""
    request, sandbox, operation = planned.request, planned.sandbox, planned.request.declaration
    if not isinstance(operation, Writes) or isinstance(operation, WritesDataSet) or planned.output is None:
        return None
    assert isinstance(request, OpParams)
    names = client_names(sandbox)
    files = {name: str(sandbox.resolve(relative)) for name, relative in _input_files(request).items()}
    with names.in_errors():
        task = operation.task(operation.options(request.model_copy(update=files).values()),
                              shared=planned.inputs[1:], projects=WorkerProjects(sandbox.root, sandbox.hidden, names))
        plan_ = checked_plan(task, planned.inputs[0], Limits(max_voxels=max_voxels))
    if math.prod(plan_.shape) * plan_.dtype.itemsize <= cluster.BLOCK_BYTES:
        return None
    return task, planned.inputs[0], planned.output, names


@dataclass(frozen=True)
class WorkerProjects:
    """:class:`SandboxProjects` that travel to a Dask worker: the sandbox is opened where they are used (a
    descriptor does not travel)."""

    root: Path
    hidden: Path | None
    names: ClientNames

    def __call__(self, project_dir: str | None) -> SandboxProject:
        return SandboxProjects(open_sandbox(self.root, self.hidden), self.names)(project_dir)


@dataclass(frozen=True)
class _Refused:
    """A problem met on a worker, sent back as a value (a ProblemError does not survive pickling)."""

    status: int
    slug: str
    title: str
    detail: str


def _on_one_worker(planned: Planned, max_voxels: int, progress: Progress, client: Any) -> Any:
    """The request as one task (:func:`_run_on_worker`), stopped at its next block once ``progress`` raises
    (:func:`noa_core.run.cluster.one_task`)."""
    request = planned.request
    result = cluster.one_task(client, progress, _run_on_worker, request.declaration.name,
                              request.model_dump_json(exclude_none=True), planned.sandbox.root, planned.sandbox.hidden,
                              max_voxels)
    if isinstance(result, _Refused):
        raise ProblemError(result.status, result.slug, result.title, result.detail)
    return result


def _run_on_worker(operation: str, request: str, root: Path, hidden: Path | None, max_voxels: int, *,
                   progress: Progress) -> Any:
    """A Dask task: one job's request (JSON), planned and run on this worker as the service runs it (opened beneath
    the data root, no symlink followed)."""
    try:
        parsed = job_model(operations.get(operation)).model_validate_json(request)
        assert isinstance(parsed, PathRequest)  # a job's model is a path request's
        return run_on_paths(plan(parsed, open_sandbox(root, hidden)), max_voxels, progress)
    except ProblemError as problem:
        return _Refused(problem.status, problem.slug, problem.title, problem.detail)


def _open(planned: Planned, opened: ExitStack) -> tuple[list[Path], Path | None, ClientNames]:
    """The planned files opened beneath the root (:meth:`Sandbox.open_resolved`), as paths for noa_core that no
    symlink swapped in later can redirect, and the client's names for them (closed by ``opened``).

    An input is a link named as the client's file (its extension tells the format) to ``/proc/self/fd/N``,
    which is the opened file itself. The output is ``/proc/self/fd/N/NAME`` in its opened folder: the
    temporary file is created there and renamed there, and a rename never follows a symlink.
    """
    sandbox = planned.sandbox
    assert isinstance(sandbox, Sandbox)  # a remote root's keys are not opened (run_on_paths)
    names: dict[str, str] = {}  # the request's links and folders
    inputs = []
    edits = planned.request.declaration.changes_input and not getattr(planned.request, "dry_run", False)
    for relative, path in zip(planned.request.input_paths(), planned.inputs, strict=True):
        # An edit changes the client's file in place: opened for writing (the point of the operation).
        flags = (os.O_RDWR if edits else os.O_RDONLY) | os.O_NONBLOCK
        fd = sandbox.open_resolved(path, relative, flags)
        opened.callback(os.close, fd)
        link = file_link(sandbox.scratch, fd, PurePosixPath(relative).name)
        names[str(link)] = relative
        inputs.append(link)
    dst = planned.request.output_path()
    if dst is None:
        return inputs, None, client_names(sandbox, names)
    if planned.request.declaration.writes == "folder":  # dst is the outputs' folder, created when missing
        return inputs, _open_output_folder(sandbox, dst, opened, names), client_names(sandbox, names)
    return inputs, _in_opened_folder(sandbox, dst, opened, names)[0], client_names(sandbox, names)


def _in_opened_folder(sandbox: Sandbox, dst: str, opened: ExitStack, names: dict[str, str]) -> tuple[Path, Path]:
    """The output ``dst`` (relative to the root) as ``/proc/self/fd/N/NAME`` in its folder opened beneath the root
    (closed by ``opened``; ``names`` told how the client names that folder), and the path it was found at."""
    fd, path = sandbox.open_folder(dst)
    opened.callback(os.close, fd)
    folder = PurePosixPath(dst).parent.as_posix()
    names[f"{PROC_FD}/{fd}/"] = "" if folder == "." else f"{folder}/"
    return Path(PROC_FD, str(fd), path.name), path


def _open_input_files(planned: Planned, opened: ExitStack, names: ClientNames) -> dict[str, str]:
    """The request's :class:`~noa_core.operations.spec.InputFile` parameters opened beneath the root as inputs
    are (:func:`_open`): parameter name -> a link to the opened file, named as the client's file."""
    files: dict[str, str] = {}
    if not _input_files(planned.request):
        return files
    assert isinstance(planned.sandbox, Sandbox)
    for name, relative in _input_files(planned.request).items():
        with _naming(name):
            fd, _ = planned.sandbox.open(relative)
        opened.callback(os.close, fd)
        link = file_link(planned.sandbox.scratch, fd, PurePosixPath(relative).name)
        names.names[str(link)] = relative
        files[name] = str(link)
    return files


def _open_output_folder(sandbox: Sandbox, dst: str, opened: ExitStack, names: dict[str, str]) -> Path:
    """The folder ``dst`` names, made when missing and opened beneath the root, as ``/proc/self/fd/N``
    (an output folder left empty by a failure stays)."""
    sandbox.make_folder(dst)
    fd, _ = sandbox.open(dst, os.O_RDONLY | os.O_DIRECTORY)
    opened.callback(os.close, fd)
    folder = PurePosixPath(dst).as_posix().rstrip("/")
    names[f"{PROC_FD}/{fd}/"] = f"{folder}/"
    names[f"{PROC_FD}/{fd}"] = folder
    return Path(PROC_FD, str(fd))


def _run_on_paths(planned: Planned, inputs: list[Path], output: Path | None, max_voxels: int, progress: Progress,
                  names: ClientNames, files: dict[str, str]) -> Any:
    request = planned.request
    assert isinstance(request, OpParams)
    request = request.model_copy(update=files)  # the opened files, not the client's paths
    overwrite = getattr(request, "overwrite", False)  # reports write nothing
    result = _run(request, inputs, output, max_voxels, overwrite=overwrite, progress=progress,
                  dry_run=getattr(request, "dry_run", False), projects=SandboxProjects(planned.sandbox, names),
                  resume=getattr(request, "resume", False))  # data sets alone take it
    # outputs named as the client names them; a report or an edit names its input as the client did
    return for_client(result if request.declaration.writes else {**result, "path": request.input_paths()[0]}, names)


class SandboxProjects:
    """The project folders of particle files over HTTP (:data:`noa_core.io.particles.Projects`): the data root, or
    the folder under it ``project_dir`` names; every stack a file names is opened beneath the root as a request's
    paths are (no absolute path, no '..', no link followed), and an output is named relative to the folder."""

    def __init__(self, sandbox: AnySandbox, names: ClientNames) -> None:
        self.sandbox, self.names = sandbox, names

    def __call__(self, project_dir: str | None) -> SandboxProject:
        folder = ""
        if project_dir is not None:
            folder = self.names.text(project_dir).strip("/")  # an opened folder's link: its client name
            try:
                resolved = self.sandbox.resolve(folder)
            except ProblemError as problem:
                raise PathRefusedError(f"project_dir: {problem.detail}") from None
            if not _is_folder(resolved):
                raise MissingFileError(f"project_dir: {folder}: no such folder")
        return SandboxProject(self.sandbox, folder, self.names)


@dataclass(frozen=True)
class SandboxProject:
    """One project folder under the data root (``folder`` as the client names it; '' for the root itself)."""

    sandbox: AnySandbox
    folder: str
    names: ClientNames

    def open(self, name: str) -> int:
        if PurePosixPath(name).is_absolute():
            raise PathRefusedError(f"{name}: absolute paths are refused; name stacks relative to the project folder "
                                   f"({self.folder or 'the data root'})")
        relative = f"{self.folder}/{name}" if self.folder else name
        try:
            fd = self._open(relative)
        except ProblemError as problem:
            if problem.status == 404:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory") from None
            raise PathRefusedError(problem.detail) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(errno.EISDIR, "not a file")
        return fd

    def _open(self, relative: str) -> int:
        """A descriptor of the file ``relative`` names: opened beneath the root, or for a key under a prefix of
        object storage, its copy on this machine (:data:`FETCHED`)."""
        if isinstance(self.sandbox, Sandbox):
            return self.sandbox.open(relative)[0]
        try:
            return FETCHED.open(self.sandbox.resolve(relative), self.sandbox.scratch)
        except MissingFileError:
            raise ProblemError(404, "file-not-found", "File or folder not found", f"{relative}: no such file") from None

    def name_of(self, path: Path) -> str:
        client = self.names.text(str(path)).lstrip("/")
        if not self.folder:
            return client
        if not client.startswith(f"{self.folder}/"):
            raise PathRefusedError(f"{client}: outside the project folder {self.folder}, whose paths a particle file "
                                   "names; write the output in it")
        return client[len(self.folder) + 1:]


class FetchedObjects:
    """Objects of object storage copied whole into unlinked files of this machine (a particle file's stacks: its
    reads need a descriptor, and a stack is read whole or nearly so), kept for the next requests while the store
    says the same version of them (:func:`noa_core.io.remote.version`: one HEAD each time). The viewer reads a
    particle file's stacks several times an answer (its identity, its plane, its statistics), and each read had
    fetched every stack whole again. At most ``limit`` bytes are kept, and never more than half the scratch folder's
    free space, the least recently used given up first; an object of a store that gives no version is fetched each
    time."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, tuple[str, int, int]] = OrderedDict()  # URL -> version, descriptor, size
        self._lock = threading.Lock()
        self._fetching = [threading.Lock() for _ in range(FETCH_LOCKS)]  # one fetch of a URL at a time

    def open(self, url: remote.RemotePath, scratch: Path | None) -> int:
        """A descriptor of the object ``url``'s data (the caller closes it): the copy kept, or a new one."""
        version = remote.version(url)
        if version is None:
            return self._fetch(url, scratch)
        with self._fetching[hash(url.url) % FETCH_LOCKS]:
            with self._lock:
                kept = self._kept.get(url.url)
                if kept is not None and kept[0] == version:
                    self._kept.move_to_end(url.url)
                    return os.dup(kept[1])
            fd = self._fetch(url, scratch)
            self._keep(url.url, version, fd, min(self.limit, shutil.disk_usage(scratch or tempfile.gettempdir()).free
                                                 // 2))
            return fd

    def _keep(self, key: str, version: str, fd: int, limit: int) -> None:
        """Keep the copy ``fd`` of ``key``, dropping the least recently used copies until all fit in ``limit`` bytes
        (none kept where it alone does not)."""
        size = os.fstat(fd).st_size
        with self._lock:
            dropped = [self._kept.pop(key)] if key in self._kept else []
            while self._kept and sum(entry[2] for entry in self._kept.values()) + size > limit:
                dropped.append(self._kept.popitem(last=False)[1])
            if size <= limit:
                self._kept[key] = (version, os.dup(fd), size)
        for _, old, _ in dropped:  # each file goes once the descriptors handed out are closed too
            os.close(old)

    @staticmethod
    def _fetch(url: remote.RemotePath, scratch: Path | None) -> int:
        with remote.open_input(url) as source, tempfile.TemporaryFile(dir=scratch) as copy:
            shutil.copyfileobj(source, copy, 1 << 20)
            return os.dup(copy.fileno())


FETCHED_BYTES = 4 << 30  # what a service process keeps of fetched stacks (4 GiB of its scratch folder)
FETCH_LOCKS = 64  # locks URLs share (by hash): a URL is fetched once at a time, others meanwhile
FETCHED = FetchedObjects(FETCHED_BYTES)


def _is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder: of this machine, or a prefix of object storage holding objects."""
    if not isinstance(path, remote.RemotePath):
        return path.is_dir()
    try:
        return remote.is_folder(path)
    except MissingFileError:
        return False


@dataclass(frozen=True)
class Upload:
    """One uploaded file: the name the client gave and the (spooled) stream to read it from."""

    filename: str | None
    stream: BinaryIO


@dataclass(frozen=True)
class UploadResult:
    """An output file for the response: its bytes when small (its folder is then already gone)."""

    path: Path
    media_type: str
    notices: list[str]
    content: bytes | None = None
    changes: dict | None = None  # an edit's change (old and new values), for the Noa-Changes header


def run_on_uploads(params: OpParams, uploads: Sequence[Upload], tmp_dir: Path | None, out_format: str | None,
                   max_voxels: int) -> UploadResult | dict:
    """Save ``uploads`` in a fresh folder under ``tmp_dir`` and run ``params`` on them.

    Nothing is left behind, except a large result file: its folder (``UploadResult.path.parent``) is
    for the response to remove once sent.
    """
    workdir = new_upload_folder(tmp_dir)
    inputs = [workdir / f"{i}-{safe_name(upload.filename)}" for i, upload in enumerate(uploads)]
    given = {str(path): upload.filename or "upload" for path, upload in zip(inputs, uploads, strict=True)}
    names = ClientNames({**given, f"{workdir}/": ""})
    try:
        for path, upload in zip(inputs, uploads, strict=True):
            with open(path, "wb") as f:
                shutil.copyfileobj(upload.stream, f, 1 << 20)
        with names.in_errors():
            return _run_on_saved(params, inputs, workdir, out_format, max_voxels, uploads[0].filename or "upload",
                                 names)
    except BaseException:
        remove_upload_folder(workdir)
        raise


def _small_or_streamed(result: UploadResult, workdir: Path) -> UploadResult:
    """Small results go back from memory (streaming a file costs a thread hop per chunk); larger ones are
    streamed from disk by the response, which removes ``workdir``."""
    if result.path.stat().st_size > INLINE_BYTES:
        return result
    content = result.path.read_bytes()
    remove_upload_folder(workdir)
    return dataclasses.replace(result, content=content)


def _zip(outputs: list[Path], archive: Path) -> None:
    """The outputs stored (not compressed: image data barely shrink) in a zip file, file by file in
    chunks: memory stays bounded whatever their size."""
    import zipfile

    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED, allowZip64=True) as packed:
        for path in outputs:
            packed.write(path, path.name)


def _uploaded_format(path: Path):
    """The format of the uploaded ``path``, or None for a file of none (one the operation reads itself, an edit's
    text; what is not an image is refused by the operation that reads it, in its words)."""
    try:
        return formats.detect(path)[0]
    except NoaError:
        return None


def _run_on_saved(params: OpParams, inputs: list[Path], workdir: Path, out_format: str | None, max_voxels: int,
                  name: str, names: ClientNames) -> UploadResult | dict:
    detected = [_uploaded_format(path) for path in inputs]
    for path, fmt in zip(inputs, detected, strict=True):  # movies (GBs) and particle files are read where they are
        if fmt in formats.MOVIES:
            raise UnknownFormatError(f"{path}: format: {fmt.title} movies are not taken as uploads; put the movie "
                                     "under the service's data root and POST /v1/paths/NAME (or a job)")
        if fmt in formats.DATASETS:
            raise UnknownFormatError(f"{path}: format: a {fmt.title} names images in other files, which an upload "
                                     "does not bring; put it and its stacks under the service's data root and POST "
                                     "/v1/paths/NAME (or a job), with project_dir naming the project folder")
    if out_format is None and detected and detected[0] is not None:  # an output keeps the input's format
        out_format = detected[0].name
    return _UPLOADED[params.declaration.writes](params, inputs, workdir, out_format, max_voxels, name, names)


def _edited_copy(params: OpParams, inputs: list[Path], workdir: Path, out_format: str | None, max_voxels: int,
                 name: str, names: ClientNames) -> UploadResult:
    """The client's copy, edited (an operation that changes its input): its data bytes are those sent."""
    changes = _run(params, inputs, None, max_voxels, overwrite=False, progress=ignore_progress)
    edited = inputs[0].rename(workdir / safe_name(name))
    return _small_or_streamed(UploadResult(edited, formats.media_type(edited), [],
                                         changes=for_client({**changes, "path": name}, names)), workdir)


def _report(params: OpParams, inputs: list[Path], workdir: Path, out_format: str | None, max_voxels: int,
            name: str, names: ClientNames) -> UploadResult | dict:
    if params.declaration.changes_input:
        return _edited_copy(params, inputs, workdir, out_format, max_voxels, name, names)
    result = _run(params, inputs, None, max_voxels, overwrite=False, progress=ignore_progress)
    remove_upload_folder(workdir)
    return for_client({**result, "path": name}, names)


def _zipped_outputs(params: OpParams, inputs: list[Path], workdir: Path, out_format: str | None, max_voxels: int,
                    name: str, names: ClientNames) -> UploadResult:
    """Every output of an operation writing several, in one zip archive."""
    folder = workdir / "outputs"
    folder.mkdir()
    with scratch_outputs():
        written = _run(params, inputs, folder, max_voxels, overwrite=False, progress=ignore_progress,
                       stem=formats.strip_image_suffix(safe_name(name)))
    outputs = [Path(p) for p in written["outputs"]]
    archive = workdir / f"{_stem(name)}_{params.declaration.name}.zip"
    _zip(outputs, archive)
    for path in outputs:  # the archive holds them now: the disk holds one copy at a time
        path.unlink()
    return _small_or_streamed(UploadResult(archive, ZIP_MEDIA_TYPE, [names.text(n) for n in written["notices"]]),
                              workdir)


def _output_file(params: OpParams, inputs: list[Path], workdir: Path, out_format: str | None, max_voxels: int,
                 name: str, names: ClientNames) -> UploadResult:
    """The output, in the input's format unless the client names another (or a table, as the options ask)."""
    declaration = params.declaration
    assert isinstance(declaration, Writes)
    fmt = out_format or _format_of(inputs[0])
    text = declaration.text_output and declaration.text_output(params.values())
    extension, media_type = text or (EXTENSIONS[fmt], MEDIA_TYPES[fmt])  # a table instead of an image
    output = workdir / f"{_stem(name)}_{declaration.name}{extension}"
    with scratch_outputs():  # read back at once and deleted: no need to wait for the disk
        written = _run(params, inputs, output, max_voxels, overwrite=False, progress=ignore_progress)
    notices = [names.text(n) for n in written["notices"]]
    if output.stat().st_size > INLINE_BYTES:
        return UploadResult(output, media_type, notices)
    # Small results go back from memory: streaming a file costs a thread hop per chunk.
    content = output.read_bytes()
    remove_upload_folder(workdir)
    return UploadResult(output, media_type, notices, content)


# What an upload gives back, by what the operation writes: a file, a zip of several, or a report (or an edit's copy).
_UPLOADED = {"file": _output_file, "folder": _zipped_outputs, None: _report}


# -- upload folders: each locked (flock on the folder itself) while it exists ------------------------
# A server process killed outright cannot remove its folders; its locks go with it, so a process
# starting later tells them from a live process's folders, even one of another container.

_HELD: set[int] = set()  # descriptors of this process's upload folders, each holding its folder's lock
_HELD_LOCK = threading.Lock()
_LINK_FOLDERS: dict[tuple[int, Path | None], Path] = {}  # (process, tmp_dir) -> its folder of links (file_link)
_LINK_FOLDERS_LOCK = threading.Lock()


def new_upload_folder(tmp_dir: Path | None) -> Path:
    """A fresh folder for one request's files (uploads, links to opened files), locked while it exists."""
    _release_removed()
    while True:
        workdir = Path(tempfile.mkdtemp(prefix=UPLOAD_PREFIX, dir=tmp_dir))
        if fcntl is None:
            return workdir
        fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # Blocks while a starting process, which found it unlocked, removes it; then try another.
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without flock: the folder is simply not protected
            pass
        if os.fstat(fd).st_nlink:
            with _HELD_LOCK:
                _HELD.add(fd)
            return workdir
        os.close(fd)


def file_link(tmp_dir: Path | None, fd: int, name: str) -> Path:
    """A link named ``name`` (its extension tells the format) to the opened file ``fd`` (``/proc/self/fd/N``), valid
    while ``fd`` is open: ``<folder>/<fd>/<name>`` in the folder of links this process keeps in ``tmp_dir``, the
    descriptor making it unique while the file is open. Folders and links stay from one request to the next (a
    link names a descriptor, not a file): making and removing them per request cost 4 ms on ext4, and up to 270 ms
    while the disk was busy; only the link of the file now open under that descriptor is left in its folder. A link
    left by an earlier request under this descriptor and name is taken as it is (one readlink: a tenth of an info
    request's work went to making sure of it)."""
    target = f"{PROC_FD}/{fd}"
    key = (os.getpid(), tmp_dir)  # a forked process makes its own
    links = _LINK_FOLDERS.get(key)
    if links is not None:
        link = links / str(fd) / name
        try:
            if os.readlink(link) == target:
                return link
        except OSError:
            pass
    with _LINK_FOLDERS_LOCK:
        links = _LINK_FOLDERS.get(key)
        if links is None or not links.is_dir():
            links = _LINK_FOLDERS[key] = new_upload_folder(tmp_dir)
            # removed as the process exits, a pool's worker too (which leaves without atexit); killed, the next
            # service's start removes it
            multiprocessing.util.Finalize(None, remove_upload_folder, args=(links,), exitpriority=0)
    folder = links / str(fd)
    folder.mkdir(exist_ok=True)
    for left in os.listdir(folder):  # the link of a file once open under this descriptor, named otherwise
        if left != name:
            os.unlink(folder / left)
    link = folder / name
    if not os.path.lexists(link):
        link.symlink_to(target)
    return link


def remove_link_folder(tmp_dir: Path | None) -> None:
    """Remove the folder of links this process keeps in ``tmp_dir`` (:func:`file_link`), as a service stops."""
    with _LINK_FOLDERS_LOCK:
        links = _LINK_FOLDERS.pop((os.getpid(), tmp_dir), None)
    if links is not None:
        remove_upload_folder(links)


def remove_upload_folder(workdir: Path) -> None:
    """Remove a folder from :func:`new_upload_folder` and release its lock."""
    shutil.rmtree(workdir, ignore_errors=True)
    _release_removed()


def _release_removed() -> None:
    """Close the locks of folders that are gone (the response removes a large result's folder)."""
    with _HELD_LOCK:
        gone = {fd for fd in _HELD if os.fstat(fd).st_nlink == 0}
        _HELD.difference_update(gone)
    for fd in gone:
        os.close(fd)


def remove_abandoned_uploads(tmp_dir: Path | None) -> list[Path]:
    """Remove the upload folders under ``tmp_dir`` that no live process holds locked (those of server
    processes that were killed); return them."""
    if fcntl is None:
        return []
    folder = Path(tempfile.gettempdir() if tmp_dir is None else tmp_dir)
    return [path for path in folder.glob(UPLOAD_PREFIX + "*") if _remove_if_unlocked(path)]


def _remove_if_unlocked(workdir: Path) -> bool:
    try:
        fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # not a folder (or a link to one): not ours
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by a live process, or no flock here: cannot tell, keep it
        os.close(fd)
        return False
    try:
        shutil.rmtree(workdir, ignore_errors=True)  # under the lock: its creator waits, then takes another
    finally:
        os.close(fd)
    return True


def _format_of(path: Path) -> str:
    """The format an upload is in (its output keeps it unless the client names another)."""
    return formats.detect(path)[0].name


def ignore_progress(done: int, total: int) -> None:
    """For work that answers in one response: nobody polls its progress."""


def safe_name(filename: str | None) -> str:
    """A file name that cannot leave its folder or carry shell/header trouble; keeps the extensions."""
    name = _UNSAFE.sub("_", Path(filename or "").name).lstrip(".")[-120:]
    return name or "upload"


def _stem(filename: str) -> str:
    """The safe name up to its first dot ('emd_3197.map.gz' -> 'emd_3197'), to name the output after."""
    return safe_name(filename).split(".")[0] or "upload"


_AS_IS = frozenset({int, bool, type(None)})  # types of values given to a client as they are (finite floats too)


def for_client(value: Any, names: ClientNames) -> Any:
    """``value`` with client names for server paths, and non-finite floats spelt as strings (JSON has none)."""
    if isinstance(value, str):
        return names.text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return dict(zip(value.keys(), for_client(list(value.values()), names), strict=True))
    if isinstance(value, (list, tuple)):
        # Most of a report is numbers, which go as they are: told apart here, without a call for each.
        return [v if type(v) in _AS_IS or (type(v) is float and math.isfinite(v)) else for_client(v, names)
                for v in value]
    return value
