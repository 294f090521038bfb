"""What runs in a worker thread: check the voxel limit from ``ops.info``, then call the operation.

Both doors end here: :func:`run_on_paths` for files under the data root (path routes and jobs),
:func:`run_on_uploads` for files the client sent. Neither touches array data itself.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from noa_core import ops
from noa_core.errors import NoaError
from noa_core.io.atomic import scratch_outputs
from server.limits import check_voxels
from server.models import OpParams, PathRequest
from server.problems import classify
from server.sandbox import Sandbox

EXTENSIONS = {"mrc": ".mrc", "tiff": ".tif"}
MEDIA_TYPES = {"mrc": "application/octet-stream", "tiff": "image/tiff"}  # MRC has no registered media type
INLINE_BYTES = 1 << 20  # results up to this size are sent from memory, larger ones streamed from disk
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Planned:
    """A path request whose paths passed the sandbox, resolved to absolute paths inside the root."""

    request: PathRequest
    inputs: list[Path]
    output: Path | None
    sandbox: Sandbox


def plan(request: PathRequest, sandbox: Sandbox) -> Planned:
    output = request.output_path()
    return Planned(request, [sandbox.resolve(p) for p in request.input_paths()],
                   None if output is None else sandbox.resolve(output), sandbox)


def _checked_infos(params: OpParams, inputs: Sequence[Path], max_voxels: int) -> list[dict]:
    """``ops.info`` of every input, after refusing work over the voxel limit."""
    infos = [ops.info(path, params.read()) for path in inputs]
    if params.checks_voxels:
        check_voxels([info["shape"] for info in infos] + params.target_shapes(), max_voxels)
    return infos


@dataclass(frozen=True)
class ClientNames:
    """Server paths -> the client's names for them, for error messages and notices.

    noa_core names the files it works on; the server's own folder layout is none of the client's
    business (and a temporary upload folder means nothing to them).
    """

    names: dict[str, str]

    def text(self, message: str) -> str:
        for server_path, client_name in self.names.items():
            message = message.replace(server_path, client_name)
        return message

    @contextmanager
    def in_errors(self) -> Iterator[None]:
        try:
            yield
        except NoaError as exc:
            problem = classify(exc)
            assert problem is not None
            problem.detail = self.text(problem.detail)
            raise problem from exc


def plan_and_run(request: PathRequest, sandbox: Sandbox, max_voxels: int) -> Any:
    """:func:`plan` then :func:`run_on_paths`, for requests answered in one response."""
    return run_on_paths(plan(request, sandbox), max_voxels, ignore_progress)


def run_on_paths(planned: Planned, max_voxels: int, progress: ops.Progress) -> Any:
    """Run a planned request; the JSON-ready result names files as the client did."""
    names = ClientNames({f"{planned.sandbox.root}/": ""})
    with names.in_errors():
        return _run_on_paths(planned, max_voxels, progress, names)


def _run_on_paths(planned: Planned, max_voxels: int, progress: ops.Progress, names: ClientNames) -> Any:
    request = planned.request
    assert isinstance(request, OpParams)
    infos = _checked_infos(request, planned.inputs, max_voxels)
    if request.op_name == "info":
        return for_client({**infos[0], "path": request.input_paths()[0]}, names)
    overwrite = getattr(request, "overwrite", False)  # info and stats requests write nothing
    result = request.call(planned.inputs, planned.output, overwrite=overwrite, progress=progress)
    if request.writes:
        return for_client({"output": planned.sandbox.relative(planned.output), "notices": result}, names)
    return for_client({**result, "path": request.input_paths()[0]}, names)


@dataclass(frozen=True)
class Upload:
    """One uploaded file: the name the client gave and the (spooled) stream to read it from."""

    filename: str | None
    stream: BinaryIO


@dataclass(frozen=True)
class FileResult:
    """An output file for the response: its bytes when small (its folder is then already gone)."""

    path: Path
    media_type: str
    notices: list[str]
    content: bytes | None = None


def run_on_uploads(params: OpParams, uploads: Sequence[Upload], tmp_dir: Path | None, out_format: str | None,
                   max_voxels: int) -> FileResult | dict:
    """Save ``uploads`` in a fresh folder under ``tmp_dir`` and run ``params`` on them.

    Nothing is left behind, except a large result file: its folder (``FileResult.path.parent``) is
    for the response to remove once sent.
    """
    workdir = Path(tempfile.mkdtemp(prefix="noa-upload-", dir=tmp_dir))
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
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _run_on_saved(params: OpParams, inputs: list[Path], workdir: Path, out_format: str | None, max_voxels: int,
                  name: str, names: ClientNames) -> FileResult | dict:
    infos = _checked_infos(params, inputs, max_voxels)
    if params.writes:
        fmt = out_format or infos[0]["format"]
        output = workdir / f"{_stem(name)}_{params.op_name}{EXTENSIONS[fmt]}"
        with scratch_outputs():  # read back at once and deleted: no need to wait for the disk
            notices = [names.text(n) for n in params.call(inputs, output, overwrite=False, progress=ignore_progress)]
        if output.stat().st_size > INLINE_BYTES:
            return FileResult(output, MEDIA_TYPES[fmt], notices)
        # Small results go back from memory: streaming a file costs a thread hop per chunk.
        content = output.read_bytes()
        shutil.rmtree(workdir, ignore_errors=True)
        return FileResult(output, MEDIA_TYPES[fmt], notices, content)
    result = infos[0] if params.op_name == "info" else params.call(inputs, None, overwrite=False,
                                                                     progress=ignore_progress)
    shutil.rmtree(workdir, ignore_errors=True)
    return for_client({**result, "path": name}, names)


def ignore_progress(done: int, total: int) -> None:
    """For work that answers in one response: nobody polls its progress."""


def safe_name(filename: str | None) -> str:
    """A file name that cannot leave its folder or carry shell/header trouble; keeps the extensions."""
    name = _UNSAFE.sub("_", Path(filename or "").name).lstrip(".")[-120:]
    return name or "upload"


def _stem(filename: str) -> str:
    """The safe name up to its first dot ('emd_3197.map.gz' -> 'emd_3197'), to name the output after."""
    return safe_name(filename).split(".")[0] or "upload"


def for_client(value: Any, names: ClientNames) -> Any:
    """``value`` with client names for server paths, and non-finite floats spelt as strings (JSON has none)."""
    if isinstance(value, str):
        return names.text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: for_client(v, names) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [for_client(v, names) for v in value]
    return value
