"""Errors as RFC 9457 problem details (``application/problem+json``).

Every error the service sends goes through :func:`problem_response`: the exceptions noa_core raises
on purpose map to a 4xx by their *type* (never by message text), HTTP and validation errors keep
their status, and anything else becomes a 500 whose detail carries a reference to the server log
but no traceback.
"""

from __future__ import annotations

import errno
import http
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from noa_core import errors
from noa_core.compute.expr import ExpressionError
from noa_core.io import remote

MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:noa:problem:"
log = logging.getLogger("noa.server")


class Problem(BaseModel):
    """An RFC 9457 problem detail; ``errors`` lists the invalid parameters of a 400."""

    type: str = Field(description="A URI naming the kind of problem ('about:blank' for plain HTTP errors).")
    title: str = Field(description="A short summary of the kind of problem.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong this time, in one line.")
    instance: str = Field(description="The request path that caused it.")
    errors: list[dict[str, Any]] | None = Field(default=None, description="Invalid parameters (400 only).")


class ProblemError(Exception):
    """Raised by the service's own checks (sandbox, limits, auth, jobs) to answer with a problem."""

    def __init__(self, status: int, slug: str, title: str, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail, self.headers = status, slug, title, detail, headers


# First match wins, so subclasses come before their bases.
_NOA_ERRORS: list[tuple[type[Exception], int, str, str]] = [
    (errors.MissingFileError, 404, "file-not-found", "File or folder not found"),
    (errors.PathRefusedError, 403, "path-refused", "Path refused"),
    (errors.OutputExistsError, 409, "output-exists", "Output exists"),
    (errors.NoSpaceError, 507, "no-space", "No space left for the output"),
    (errors.MemoryLimitError, 507, "insufficient-memory", "Not enough memory for the computation"),
    (errors.LimitError, 422, "too-many-voxels", "Too many voxels"),
    (remote.StorageError, 502, "storage-failed", "The object storage refused the request or was not reached"),
    (errors.FileFormatError, 422, "unreadable-file", "File cannot be read or written as asked"),
    (ExpressionError, 400, "invalid-expression", "Invalid expression"),
    (errors.PermutationError, 400, "invalid-axes", "Invalid axes"),
    (errors.ParameterError, 400, "invalid-parameter", "Invalid parameter"),
    (errors.DeviceError, 400, "invalid-device", "Invalid device"),
    (errors.LayoutError, 422, "incompatible-shape", "The data's shape does not allow this"),
    (errors.DTypeError, 422, "incompatible-dtype", "The data's element type does not allow this"),
    (errors.NoaError, 422, "invalid-request", "The data does not allow this request"),
]


# Errors of the operating system a request can cause (a name too long, a folder given for a file, ...),
# by errno; others (EIO, ENOMEM, ...) stay internal errors.
_OS_ERRORS: dict[int, tuple[int, str, str]] = {
    errno.ENAMETOOLONG: (400, "invalid-path", "Invalid path"),
    errno.EISDIR: (422, "unreadable-file", "File cannot be read or written as asked"),
    errno.ENOTDIR: (422, "unreadable-file", "File cannot be read or written as asked"),
    errno.ENOENT: (404, "file-not-found", "File or folder not found"),
    errno.EACCES: (403, "permission-denied", "Permission denied"),
    errno.EPERM: (403, "permission-denied", "Permission denied"),
    errno.EROFS: (403, "permission-denied", "Permission denied"),
    errno.ENOSPC: (507, "no-space", "No space left for the output"),
    errno.EDQUOT: (507, "no-space", "No space left for the output"),
}


def classify(exc: Exception) -> ProblemError | None:
    """The problem for an error a user caused, or None for an internal error."""
    if isinstance(exc, ProblemError):
        return exc
    for cls, status, slug, title in _NOA_ERRORS:
        if isinstance(exc, cls):  # a store's own words may name its endpoint and bucket: a client gets the summary
            return ProblemError(status, slug, title, exc.summary if isinstance(exc, remote.StorageError) else
                                _one_line(exc))
    if isinstance(exc, OSError) and exc.errno in _OS_ERRORS:
        status, slug, title = _OS_ERRORS[exc.errno]
        return ProblemError(status, slug, title, _os_line(exc))
    return None


def _os_line(exc: OSError) -> str:
    """The system's words for ``exc`` with the name of the file it concerns, never the server's path to it."""
    name = os.fsdecode(exc.filename) if exc.filename is not None else ""
    name = name.rsplit("/", 1)[-1]
    if len(name) > 64:
        name = name[:30] + "..." + name[-30:]
    return f"{name}: {exc.strerror}" if name else (exc.strerror or type(exc).__name__)


def _one_line(exc: BaseException) -> str:
    # parameters the library names are spelt as the request names them: ``overwrite``, ``level=N``
    text = exc.spelt(errors.keyword_spelling) if isinstance(exc, errors.NoaError) else str(exc)
    return " ".join(text.split()) or type(exc).__name__


def problem_body(status: int, detail: str, instance: str, *, slug: str | None = None, title: str | None = None,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": TYPE_PREFIX + slug if slug else "about:blank",
        "title": title or http.HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "instance": instance,
        **(extra or {}),
    }


def problem_response(status: int, detail: str, instance: str, *, slug: str | None = None, title: str | None = None,
                     headers: Mapping[str, str] | None = None, extra: dict[str, Any] | None = None) -> JSONResponse:
    body = problem_body(status, detail, instance, slug=slug, title=title, extra=extra)
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def internal_error(exc: BaseException, where: str) -> dict[str, Any]:
    """Log ``exc`` with a fresh reference and return the 500 problem body that names only the reference."""
    reference = uuid.uuid4().hex[:12]
    log.error("internal error %s at %s", reference, where, exc_info=exc)
    return problem_body(500, f"internal error (reference {reference} in the server log)", where)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into a problem response."""

    @app.exception_handler(ProblemError)
    async def _own(request: Request, exc: ProblemError) -> JSONResponse:
        return problem_response(exc.status, exc.detail, request.url.path, slug=exc.slug, title=exc.title,
                                headers=exc.headers)

    @app.exception_handler(errors.NoaError)
    async def _noa(request: Request, exc: errors.NoaError) -> JSONResponse:
        return await _own(request, cast(ProblemError, classify(exc)))  # _NOA_ERRORS ends with NoaError itself

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else http.HTTPStatus(exc.status_code).description
        headers = exc.headers
        if exc.status_code == 405:
            # Starlette's Allow names the methods of the first matching route only.
            headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
        # Service exceptions derived from HTTPException (e.g. BodyTooLarge) name their own problem type.
        return problem_response(exc.status_code, detail, request.url.path, slug=getattr(exc, "slug", None),
                                title=getattr(exc, "title", None), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Malformed parameters are a 400; 422 is kept for valid requests the data cannot satisfy.
        listed = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in listed) or "invalid request"
        return problem_response(400, detail, request.url.path, slug="invalid-parameters", title="Invalid parameters",
                                extra={"errors": listed})

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        problem = classify(exc)  # an OSError a request can cause (a name too long, a folder for a file)
        if problem is not None:  # logged too: the same errno from the server's own folders is the operator's
            log.warning("%s at %s: %s", problem.slug, request.url.path, exc)
            return await _own(request, problem)
        return JSONResponse(internal_error(exc, request.url.path), status_code=500, media_type=MEDIA_TYPE)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route offers at this path (``app.state.route_methods``: (regex, methods) pairs)."""
    path = request.url.path
    return sorted({m for regex, methods in request.app.state.route_methods if regex.match(path) for m in methods})


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for the error statuses a route can give (schema: :class:`Problem`)."""
    return {status: {"model": Problem, "description": http.HTTPStatus(status).phrase} for status in statuses}


def finish_openapi(schema: dict[str, Any]) -> dict[str, Any]:
    """Fix what FastAPI cannot be told: errors are problem+json, and validation errors are 400s.

    FastAPI documents ``model=`` responses as application/json, and adds a 422 "Validation Error"
    to routes that document no 422 themselves; our handler sends those as 400 problems instead.
    """
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            if "HTTPValidationError" in str(responses.get("422", "")):
                del responses["422"]
            for status, response in responses.items():
                content = response.get("content", {})
                if status[0] in "45" and "application/json" in content:
                    content[MEDIA_TYPE] = content.pop("application/json")
    for unused in ("HTTPValidationError", "ValidationError"):
        schema.get("components", {}).get("schemas", {}).pop(unused, None)
    _closed_forms(schema)
    return schema


def _closed_forms(schema: dict[str, Any]) -> None:
    """Upload forms as one closed object. FastAPI writes a form as ``allOf`` the parameters' model plus the file
    fields, with no word on other fields; the routes refuse unknown fields (a misspelt ``bfactr``), so the
    schema says so: the parameters' fields merged in (and which of them one must give), ``additionalProperties:
    false``."""
    components = schema.get("components", {}).get("schemas", {})
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            form = operation.get("requestBody", {}).get("content", {}).get("multipart/form-data")
            ref = (form or {}).get("schema", {}).get("$ref", "")
            body = components.get(ref.rsplit("/", 1)[-1])
            if body is None or len(body.get("allOf", ())) != 1:
                continue
            params = components[body["allOf"][0]["$ref"].rsplit("/", 1)[-1]]
            body["properties"] = {**params.get("properties", {}), **body.get("properties", {})}
            body["required"] = [*params.get("required", ()), *body.get("required", ())]
            if "anyOf" in params:
                body["anyOf"] = params["anyOf"]
            body["additionalProperties"] = False
            del body["allOf"]
