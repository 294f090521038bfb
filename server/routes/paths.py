"""Path mode: JSON naming files under the data root; outputs are written there too."""

from __future__ import annotations

import inspect
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Annotated, Any
from urllib.parse import quote

import anyio
from fastapi import Depends
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from noa_core.errors import EmptyFileError, MissingFileError, NotAFileError
from noa_core.io import formats, remote
from noa_core.operations import Operation
from noa_server import execution
from noa_server.models import PathRequest, request_model, result_model
from noa_server.problems import ProblemError, documented
from noa_server.routes import Routes
from noa_server.sandbox import RemoteSandbox, Sandbox
from noa_server.service import Service, service

Svc = Annotated[Service, Depends(service)]
READ_ERRORS = documented(400, 403, 404, 413, 422, 500)
EDIT_ERRORS = documented(400, 403, 404, 422, 500)
WRITE_RESPONSES = {
    201: {"description": "Written; Location is where to download the output.",
          "headers": {"Location": {"description": "/v1/files/<output>", "schema": {"type": "string"}}}},
    **documented(400, 403, 404, 409, 413, 422, 500, 507),
}
WRITE_SEVERAL_RESPONSES = {
    201: {"description": "Every output written into the folder dst (download each from /v1/files/<output>)."},
    **documented(400, 403, 404, 409, 413, 422, 500, 507),
}


async def _run(svc: Service, request: PathRequest):
    # The sandbox checks follow symlinks on disk (or ask object storage), so they run in the worker too.
    return await svc.run(execution.plan_and_run, request, svc.paths(), svc.settings.max_voxels)


async def _report(svc: Service, request: PathRequest) -> JSONResponse:
    return JSONResponse(await _run(svc, request))


async def _write(svc: Service, request: PathRequest) -> JSONResponse:
    result = await _run(svc, request)
    return JSONResponse(result, status_code=201, headers={"Location": "/v1/files/" + quote(result["output"])})


async def _write_several(svc: Service, request: PathRequest) -> JSONResponse:
    return JSONResponse(await _run(svc, request), status_code=201)


def _endpoint(operation: Operation) -> Callable[..., Any]:
    """``POST /v1/paths/NAME``: a JSON body naming files under the data root."""
    answer = {"file": _write, "folder": _write_several, None: _report}[operation.writes]

    async def on_paths(svc: Service, request: PathRequest) -> JSONResponse:
        return await answer(svc, request)

    on_paths.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("svc", inspect.Parameter.KEYWORD_ONLY, annotation=Svc),
        inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=request_model(operation))])
    on_paths.__name__ = operation.name
    return on_paths


def _route(operation: Operation) -> tuple[str, dict[str, Any]]:
    """How the route of ``operation`` is described: where it works, its status and what it answers."""
    answers = {"response_model": result_model(operation)}
    if operation.writes == "file":
        return "server-side files", {"status_code": 201, "responses": WRITE_RESPONSES, **answers}
    if operation.writes == "folder":
        return ("server-side files; every output is written into the folder dst, or none",
                {"status_code": 201, "responses": WRITE_SEVERAL_RESPONSES, **answers})
    if operation.changes_input:
        return "changes the server-side file itself, unless dry_run", {"responses": EDIT_ERRORS, **answers}
    return "server-side files", {"responses": READ_ERRORS, **answers}


def router(operations: list[Operation]) -> Routes:
    """``POST /paths/NAME`` for each of ``operations``, and ``GET /files/...``."""
    routes = Routes(tags=["paths"])
    for operation in operations:
        where, kind = _route(operation)
        routes.add_api_route(f"/paths/{operation.name}", _endpoint(operation), methods=["POST"],
                             summary=f"{operation.summary} ({where})", **kind)
    routes.add_api_route("/files/{path:path}", download, methods=["GET"], response_class=FileResponse,
                         summary="Download a file from the data root", responses=DOWNLOAD_RESPONSES)
    return routes


DOWNLOAD_RESPONSES = {
    200: {"description": "The file.", "content": {media: {"schema": {"type": "string", "format": "binary"}}
                                                  for media in sorted(execution.MEDIA_TYPES.values())}},
    **documented(400, 403, 404),
}


class OpenedFileResponse(FileResponse):
    """The file behind descriptor ``fd`` (through ``/proc/self/fd``: the file opened, whatever its path
    holds now), which is closed once sent, also when the transfer fails midway."""

    def __init__(self, fd: int, **kwargs: Any):
        super().__init__(f"{execution.PROC_FD}/{fd}", stat_result=os.fstat(fd), **kwargs)
        self.fd = fd

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            os.close(self.fd)


def _open_file(sandbox: Sandbox, path: str) -> tuple[int, Path]:
    fd, resolved = sandbox.open(path)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ProblemError(404, "file-not-found", "File not found", f"{path}: no such file")
    return fd, resolved


DOWNLOAD_CHUNK_BYTES = 1 << 20  # what a download of an object of object storage asks for at a time


def _open_object(sandbox: RemoteSandbox, path: str) -> remote.RemoteFile:
    """The object ``path`` names under the prefix, opened for reading (one HEAD); a 404 naming ``path`` where there
    is none, or a prefix of objects; the storage's failures named as paths mode names them."""
    try:
        with execution.client_names(sandbox).in_errors():
            return remote.open_input(sandbox.resolve(path))
    except ProblemError as problem:
        if isinstance(problem.__cause__, (MissingFileError, NotAFileError, EmptyFileError)):
            raise ProblemError(404, "file-not-found", "File not found", f"{path}: no such file") from None
        raise


def _chunks(file: remote.RemoteFile) -> Iterator[bytes]:
    with file:
        while chunk := file.read(DOWNLOAD_CHUNK_BYTES):
            yield chunk


async def download(svc: Svc, path: str):
    sandbox = svc.paths()
    if isinstance(sandbox, RemoteSandbox):  # streamed from the store, a range at a time
        file = await anyio.to_thread.run_sync(_open_object, sandbox, path)
        name = PurePosixPath(path).name
        return StreamingResponse(_chunks(file), media_type=formats.media_type(Path(name)),
                                 headers={"Content-Length": str(file.size),
                                          "Content-Disposition": f"attachment; filename*=utf-8''{quote(name)}"})
    fd, resolved = await anyio.to_thread.run_sync(_open_file, sandbox, path)
    return OpenedFileResponse(fd, media_type=formats.media_type(resolved), filename=resolved.name)
