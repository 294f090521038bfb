"""Upload mode: the client sends the file(s) as multipart form data and gets the result back.

Every request works in its own temporary folder, which is removed whatever happens: by the worker
on error, for JSON results and for small result files (sent from memory), by
:class:`TemporaryFileResponse` once a large result file was sent (or the client went away), and by
a done-callback when the request is abandoned while the worker still runs.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import json
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import Depends, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.datastructures import FormData
from starlette.types import Receive, Scope, Send

from noa_core.operations import Operation, Writes
from noa_server import execution
from noa_server.models import Format, OpParams, params_model, result_model, without_default
from noa_server.problems import documented
from noa_server.routes import Routes
from noa_server.service import Service, service

Svc = Annotated[Service, Depends(service)]
OneFile = Annotated[UploadFile, File(description="An MRC or TIFF file.")]
FormatField = Annotated[Format, Form(  # type: ignore[valid-type]  # Format: the formats' names, read at run timedescription="Output format (default: the input's).",
                                     json_schema_extra=without_default)]

_BINARY = {"schema": {"type": "string", "format": "binary"}}
FILE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The result file, as an attachment named after the upload.",
        "content": {media: _BINARY for media in sorted(set(execution.MEDIA_TYPES.values()))},
        "headers": {"Noa-Notices": {"description": "JSON list of notices about the output (ASCII).",
                                    "schema": {"type": "string"}}},
    },
    **documented(400, 413, 422, 500, 507),
}
JSON_ERRORS = documented(400, 413, 422, 500)
ZIP_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Every output in one zip archive (stored, not compressed), named after the upload; written "
                       "to disk and streamed, so memory stays bounded whatever the outputs' size.",
        "content": {execution.ZIP_MEDIA_TYPE: _BINARY},
        "headers": FILE_RESPONSES[200]["headers"],
    },
    **documented(400, 413, 422, 500, 507),
}
EDITED_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The uploaded file, changed in place as asked (a copy: the server keeps nothing).",
        "content": FILE_RESPONSES[200]["content"],
        "headers": {"Noa-Changes": {"description": "JSON of the change: path, changes {field: {old, new}} (ASCII).",
                                    "schema": {"type": "string"}}},
    },
    **documented(400, 413, 422, 500),
}


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
        if isinstance(outcome, execution.UploadResult) and outcome.content is None:
            shutil.rmtree(outcome.path.parent, ignore_errors=True)


async def _run(svc: Service, params: OpParams, files: list[UploadFile], out_format: str | None = None):
    uploads = [execution.Upload(f.filename, f.file) for f in files]
    future = svc.submit(execution.run_on_uploads, params, uploads, svc.settings.tmp_dir, out_format,
                        svc.settings.max_voxels)
    try:
        outcome = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.add_done_callback(_remove_unsent)
        raise
    if not isinstance(outcome, execution.UploadResult):
        return JSONResponse(outcome)
    headers = {"Noa-Notices": json.dumps(outcome.notices, ensure_ascii=True)}
    if outcome.changes is not None:
        headers["Noa-Changes"] = json.dumps(outcome.changes, ensure_ascii=True)
    if outcome.content is None:
        return TemporaryFileResponse(outcome.path, outcome.path.parent, media_type=outcome.media_type,
                                     filename=outcome.path.name, headers=headers)
    # The name is safe_name()'d ASCII, so it needs no RFC 5987 encoding.
    headers["Content-Disposition"] = f'attachment; filename="{outcome.path.name}"'
    return Response(outcome.content, media_type=outcome.media_type, headers=headers)


def _endpoint(operation: Operation) -> Callable[..., Any]:
    """``POST /v1/upload/NAME``: the parameters as form fields, the file(s), maybe an output format."""
    files = ("files", Annotated[list[UploadFile], File(description="Inputs, named a, b, c, ... in order.",
                                                         min_length=operation.min_inputs,
                                                         max_length=operation.max_inputs)], ...)
    one = ("file", OneFile, ...)
    params: list[tuple[str, Any, Any]] = [
        ("svc", Svc, ...), ("params", Annotated[params_model(operation, uploads=True), Form()], ...),
        files if operation.max_inputs > 1 else one]
    if isinstance(operation, Writes) and operation.chooses_format:
        params.append(("format", FormatField, None))

    known = {*params_model(operation, uploads=True).model_fields, "file", "files", "format"}

    async def upload(request: Request, svc: Service, params: OpParams, **given: Any) -> Response:
        _refuse_unknown_fields(await request.form(), known)
        sent = given["files"] if "files" in given else [given["file"]]
        return await _run(svc, params, sent, given.get("format"))

    upload.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=Request)]
        + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=inspect.Parameter.empty if default is ... else default)
           for name, annotation, default in params])
    upload.__name__ = operation.name  # operationId: NAME_v1_upload_NAME_post
    return upload


def _refuse_unknown_fields(form: FormData, known: set[str]) -> None:
    """A misspelt form field must fail, as a misspelt JSON field does, not be ignored (``bfactr``: the B-factor
    silently not applied): a 400 naming it, with the closest fields."""
    unknown = sorted(set(form.keys()) - known)
    if unknown:
        errors = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(known), n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            errors.append({"type": "extra_forbidden", "loc": ("body", name), "msg": f"unknown field{hint}",
                           "input": None})
        raise RequestValidationError(errors)


def router(operations: list[Operation]) -> Routes:
    """The upload routes of ``operations``."""
    routes = Routes(prefix="/upload", tags=["upload"])
    for operation in operations:
        routes.add_api_route(f"/{operation.name}", _endpoint(operation), methods=["POST"],
                             summary=f"{operation.summary} (uploaded files)", **_answers(operation))
    return routes


def _answers(operation: Operation) -> dict[str, Any]:
    """What the upload route of ``operation`` answers with: its output file, a zip of its outputs, the edited
    copy, or its result as JSON."""
    if operation.writes is not None:
        return {"response_class": FileResponse, "responses": FILE_RESPONSES if operation.writes == "file"
                else ZIP_RESPONSES}
    if operation.changes_input:
        return {"response_class": FileResponse, "responses": EDITED_RESPONSES}
    return {"response_model": result_model(operation), "responses": JSON_ERRORS}
