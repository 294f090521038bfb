"""Upload mode: the client sends the file(s) as multipart form data and gets the result back.

Every request works in its own temporary folder, which is removed whatever happens: by the worker
on error, for JSON results and for small result files (sent from memory), by
:class:`TemporaryFileResponse` once a large result file was sent (or the client went away), and by
a done-callback when the request is abandoned while the worker still runs.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, File, Form, UploadFile
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.types import Receive, Scope, Send

from noa_core.expr import MAX_INPUTS
from server import operations
from server.models import (BroadcastParams, CopyParams, EwiseParams, Format, InfoParams, InfoResult, OpParams,
                           PermuteParams, StatsParams, StatsResult, without_default)
from server.problems import documented
from server.service import Service, service

router = APIRouter(prefix="/upload", tags=["upload"])
Svc = Annotated[Service, Depends(service)]
OneFile = Annotated[UploadFile, File(description="An MRC or TIFF file.")]
FormatField = Annotated[Format, Form(description="Output format (default: the input's).",
                                     json_schema_extra=without_default)]

_BINARY = {"schema": {"type": "string", "format": "binary"}}
FILE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The result file, as an attachment named after the upload.",
        "content": {media: _BINARY for media in sorted(set(operations.MEDIA_TYPES.values()))},
        "headers": {"Noa-Notices": {"description": "JSON list of notices about the output (ASCII).",
                                    "schema": {"type": "string"}}},
    },
    **documented(400, 413, 422, 500),
}
JSON_ERRORS = documented(400, 413, 422, 500)


class TemporaryFileResponse(FileResponse):
    """A FileResponse that removes ``cleanup`` after sending, also when the transfer fails midway.

    (A BackgroundTask would be skipped when the client disconnects.)
    """

    def __init__(self, path: Path, cleanup: Path, **kwargs: Any):
        super().__init__(path, **kwargs)
        self.cleanup = cleanup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(shutil.rmtree, self.cleanup, True)


def _remove_unsent(future: Future) -> None:
    """Done-callback for an abandoned request: remove the folder of a result nobody will send."""
    if not future.cancelled() and future.exception() is None:
        outcome = future.result()
        if isinstance(outcome, operations.FileResult) and outcome.content is None:
            shutil.rmtree(outcome.path.parent, ignore_errors=True)


async def _run(svc: Service, params: OpParams, files: list[UploadFile], out_format: str | None = None):
    uploads = [operations.Upload(f.filename, f.file) for f in files]
    future = svc.submit(operations.run_on_uploads, params, uploads, svc.settings.tmp_dir, out_format,
                        svc.settings.max_voxels)
    try:
        outcome = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.add_done_callback(_remove_unsent)
        raise
    if not isinstance(outcome, operations.FileResult):
        return JSONResponse(outcome)
    headers = {"Noa-Notices": json.dumps(outcome.notices, ensure_ascii=True)}
    if outcome.content is None:
        return TemporaryFileResponse(outcome.path, outcome.path.parent, media_type=outcome.media_type,
                                     filename=outcome.path.name, headers=headers)
    # The name is safe_name()'d ASCII, so it needs no RFC 5987 encoding.
    headers["Content-Disposition"] = f'attachment; filename="{outcome.path.name}"'
    return Response(outcome.content, media_type=outcome.media_type, headers=headers)


@router.post("/info", response_model=InfoResult, responses=JSON_ERRORS, summary="Describe an uploaded file")
async def info(svc: Svc, params: Annotated[InfoParams, Form()], file: OneFile):
    return await _run(svc, params, [file])


@router.post("/stats", response_model=StatsResult, responses=JSON_ERRORS,
             summary="Min, max, mean and std of an uploaded file")
async def stats(svc: Svc, params: Annotated[StatsParams, Form()], file: OneFile):
    return await _run(svc, params, [file])


@router.post("/permute", response_class=FileResponse, responses=FILE_RESPONSES,
             summary="Reorder the BDHW axes of an uploaded file")
async def permute(svc: Svc, params: Annotated[PermuteParams, Form()], file: OneFile):
    return await _run(svc, params, [file])


@router.post("/broadcast", response_class=FileResponse, responses=FILE_RESPONSES,
             summary="Repeat size-1 dimensions of an uploaded file")
async def broadcast(svc: Svc, params: Annotated[BroadcastParams, Form()], file: OneFile):
    return await _run(svc, params, [file])


@router.post("/copy", response_class=FileResponse, responses=FILE_RESPONSES,
             summary="Copy an uploaded file to another order, element type or format")
async def copy(svc: Svc, params: Annotated[CopyParams, Form()], file: OneFile, format: FormatField = None):
    return await _run(svc, params, [file], format)


@router.post("/ewise", response_class=FileResponse, responses=FILE_RESPONSES,
             summary="Evaluate an element-wise expression over uploaded files (a, b, c, ...)")
async def ewise(svc: Svc, params: Annotated[EwiseParams, Form()],
                files: Annotated[list[UploadFile], File(description="Inputs, named a, b, c, ... in order.",
                                                        min_length=1, max_length=MAX_INPUTS)],
                format: FormatField = None):
    return await _run(svc, params, files, format)
