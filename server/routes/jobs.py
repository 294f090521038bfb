"""Jobs: submit a path operation, poll its status and progress, fetch its result, cancel it, list them,
resume an interrupted one."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Union

import anyio
from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BeforeValidator, TypeAdapter, ValidationError

from noa_core.operations import Operation
from noa_server import execution
from noa_server.jobs import CURSOR_PATTERN, ID_PATTERN, Job, JobState, decode_cursor, encode_cursor, since_stamp
from noa_server.models import job_list_model, job_request, job_status_model, result_model
from noa_server.problems import ProblemError, documented
from noa_server.service import Service, service

Svc = Annotated[Service, Depends(service)]
JobId = Annotated[str, Path(pattern=ID_PATTERN, description="The job id from POST /v1/jobs.")]
PAGE_LIMIT = 1000


def _date_and_time(value: Any) -> Any:
    """Pydantic also reads a number, or a date alone, as a datetime: ``since`` is an ISO 8601 date and time."""
    if isinstance(value, str) and not re.match(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}", value):
        raise ValueError("not an ISO 8601 date and time (such as 2026-05-01T12:00:00Z)")
    return value


Since = Annotated[datetime, BeforeValidator(_date_and_time)]


def _location(job_id: str) -> str:
    return f"/v1/jobs/{job_id}"


async def _work(svc: Service, request: Any) -> Callable[[Callable[[int, int], None]], Any]:
    """The job's work, ``work(progress)``. Paths are checked now, so a traversal attempt is refused here rather
    than recorded as a job. (In anyio's thread pool: the checks touch the disk, and the workers may all be busy
    with jobs.)"""
    planned = await anyio.to_thread.run_sync(execution.plan, request, svc.paths())
    limit = svc.settings.max_voxels
    return lambda progress: execution.run_on_paths(planned, limit, progress)


def _accepted(job: Job) -> JSONResponse:
    return JSONResponse(job.public(), status_code=202, headers={"Location": _location(job.id)})


async def _submit(svc: Service, request: Any) -> JSONResponse:
    store = svc.job_store()
    work = await _work(svc, request)
    return _accepted(store.submit(request.operation, request.model_dump(mode="json"), work, svc.submit))


async def status(svc: Svc, job_id: JobId):
    return JSONResponse(svc.job_store().snapshot(job_id))


async def result(svc: Svc, job_id: JobId):
    job = svc.job_store().snapshot(job_id)
    if job["status"] != "succeeded":
        why = f"; {job['error']['detail']}" if job["error"] else ""
        raise ProblemError(409, "job-not-succeeded", "Job has no result", f"job {job_id} is {job['status']}{why}")
    return JSONResponse(job["result"])


async def listing(
    svc: Svc,
    state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
    since: Annotated[Since | None, Query(description="Only jobs created at or after this time (ISO 8601; "
                                                        "UTC unless it names its offset).")] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT, description="Jobs per page.")] = 100,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                        description="The `next` of the page before (same filters).")] = None,
):
    store = svc.job_store()
    after = None if cursor is None else decode_cursor(cursor)
    jobs, last = await anyio.to_thread.run_sync(
        store.page, state, None if since is None else since_stamp(since), limit, after)
    return JSONResponse({"jobs": jobs, "next": None if last is None else encode_cursor(*last)})


async def cancel(svc: Svc, job_id: JobId) -> Any:
    job = svc.job_store().cancel(job_id)
    if job is None:
        return Response(status_code=204)
    return JSONResponse(job, status_code=202)


def router(operations_: list[Operation]) -> APIRouter:
    """The job routes; a job runs any of ``operations_`` on server-side paths."""
    routes = APIRouter(prefix="/jobs", tags=["jobs"])
    job_status = job_status_model(tuple(operations_))
    results = tuple(dict.fromkeys(result_model(op) for op in operations_))

    async def submit(svc: Service, request: Any) -> JSONResponse:
        return await _submit(svc, request)

    requests = TypeAdapter(job_request(operations_))

    async def resume(svc: Svc, job_id: JobId) -> JSONResponse:
        store = svc.job_store()
        try:
            request = requests.validate_python(store.resumable(job_id))
        except ValidationError as exc:  # recorded by a noa whose operations took other parameters
            raise ProblemError(409, "job-not-resumable", "Job cannot be resumed",
                               f"job {job_id}'s request is not one this server takes: {exc.errors()[0]['msg']}; "
                               "submit it again") from None
        return _accepted(store.resume(job_id, await _work(svc, request), svc.submit))

    submit.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("svc", inspect.Parameter.KEYWORD_ONLY, annotation=Svc),
        inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=job_request(operations_))])
    routes.add_api_route("", submit, methods=["POST"], status_code=202, response_model=job_status,
                         summary="Start a job (any path operation)",
                         responses={202: {"description": "Accepted; poll Location for status and progress.",
                                          "headers": {"Location": {"description": "/v1/jobs/<id>",
                                                                   "schema": {"type": "string"}}}},
                                    **documented(400, 403, 413, 503)})
    routes.add_api_route("", listing, methods=["GET"], response_model=job_list_model(tuple(operations_)),
                         responses=documented(400, 403), summary="List jobs, newest first, a page at a time",
                         description="Jobs newest first (by creation time, then id), filtered by `state` and "
                                     "`since`; follow `next` as `cursor` (with the same filters) for the next page. "
                                     "Jobs created while paging appear on no later page.")
    routes.add_api_route("/{job_id}/resume", resume, methods=["POST"], status_code=202, response_model=job_status,
                         summary="Run an interrupted job again",
                         description="A job whose server process died (`failed`, type `...:interrupted`) runs again "
                                     "under its id, from the start, on this server process; its outputs are written "
                                     "atomically, so none was left half-written.",
                         responses={202: {"description": "Accepted; poll Location for status and progress.",
                                          "headers": {"Location": {"description": "/v1/jobs/<id>",
                                                                   "schema": {"type": "string"}}}},
                                    **documented(400, 403, 404, 409, 503)})
    routes.add_api_route("/{job_id}", status, methods=["GET"], response_model=job_status,
                         responses=documented(400, 403, 404), summary="Status and progress of a job")
    routes.add_api_route("/{job_id}/result", result, methods=["GET"], response_model=Union[results],  # noqa: UP007 (types listed at run time)
                         responses=documented(400, 403, 404, 409), summary="The result of a succeeded job")
    routes.add_api_route("/{job_id}", cancel, methods=["DELETE"], status_code=202, response_model=None,
                         summary="Delete a job, cancelling it if it is still active",
                         responses={202: {"description": "The active job was cancelled and deleted; its last state.",
                                          "model": job_status},
                                    204: {"description": "The finished job and its record were deleted."},
                                    **documented(400, 403, 404)})
    return routes
