"""Jobs: submit a path operation, poll or follow (Server-Sent Events) its status and progress, fetch its result,
cancel it, list them, resume an interrupted one."""

from __future__ import annotations

import inspect
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Annotated, Any, Union

import anyio
from fastapi import Depends, Header, Path, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BeforeValidator, TypeAdapter, ValidationError

from noa_core.operations import Operation
from noa_server.jobs import (
    CURSOR_PATTERN,
    ID_PATTERN,
    Follower,
    Job,
    JobState,
    JobStore,
    decode_cursor,
    encode_cursor,
    since_stamp,
)
from noa_server.models import job_list_model, job_request, job_status_model, result_model
from noa_server.problems import ProblemError, documented
from noa_server.routes import Routes
from noa_server.service import Service, service

Svc = Annotated[Service, Depends(service)]
JobId = Annotated[str, Path(pattern=ID_PATTERN, description="The job id from POST /v1/jobs.")]
PAGE_LIMIT = 1000
EVENTS_POLL_S = 0.25  # how often a follower reads the job: its progress events come at most this often
KEEPALIVE_S = 15.0  # a comment after this long without an event, so that proxies keep the stream open
EVENT_STREAM = "text/event-stream"
EVENT_SCHEMA = {  # one event of the stream (as OpenAPI 3.2's itemSchema describes them)
    "type": "object", "required": ["event", "id", "data"],
    "properties": {"event": {"type": "string", "enum": ["state", "progress", "result", "error"]},
                   "id": {"type": "string", "description": "STATUS.DONE, or STATUS.DONE.end for the last event."},
                   "data": {"type": "string", "contentMediaType": "application/json"}}}


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
    return await anyio.to_thread.run_sync(svc.job_work, request)


def _accepted(job: Job) -> JSONResponse:
    return JSONResponse(job.public(), status_code=202, headers={"Location": _location(job.id)})


async def _submit(svc: Service, request: Any) -> JSONResponse:
    store = svc.job_store()
    work = await _work(svc, request)
    return _accepted(store.submit(request.operation, request.model_dump(mode="json"), work, svc.start_job))


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


def _current(store: JobStore, job_id: str) -> dict[str, Any] | None:
    """The job's public state, None once it is deleted."""
    try:
        return store.snapshot(job_id)
    except ProblemError as problem:
        if problem.status == 404:
            return None
        raise


def _event(name: str, event_id: str, data: Any) -> str:
    return f"event: {name}\nid: {event_id}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _stream(store: JobStore, job_id: str, follower: Follower, job: dict[str, Any] | None) -> AsyncIterator[str]:
    """The job's events until it ends. It is read from the database (another process, or host, may run it) every
    EVENTS_POLL_S, in anyio's thread pool: the event loop never waits on the database."""
    quiet_since = time.monotonic()
    while True:
        for event in follower.events(job):
            yield _event(*event)
            quiet_since = time.monotonic()
        if follower.ended:
            return
        if time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await anyio.sleep(EVENTS_POLL_S)
        job = await anyio.to_thread.run_sync(_current, store, job_id)


async def events(svc: Svc, job_id: JobId,
                 last_event_id: Annotated[str | None, Header(description="The id of the last event received, to "
                                                                        "resume after it.")] = None) -> Response:
    store = svc.job_store()
    follower = Follower.resuming(last_event_id)
    if follower.ended:  # everything was sent: 204 tells an EventSource to stop reconnecting
        return Response(status_code=204)
    job = await anyio.to_thread.run_sync(store.snapshot, job_id)  # an unknown job: 404, before the stream starts
    return StreamingResponse(_stream(store, job_id, follower, job), media_type=EVENT_STREAM,
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def cancel(svc: Svc, job_id: JobId) -> Any:
    job = svc.job_store().cancel(job_id)
    if job is None:
        return Response(status_code=204)
    return JSONResponse(job, status_code=202)


def router(operations_: list[Operation]) -> Routes:
    """The job routes; a job runs any of ``operations_`` on server-side paths."""
    routes = Routes(prefix="/jobs", tags=["jobs"])
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
        return _accepted(store.resume(job_id, await _work(svc, request), svc.start_job))

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
    routes.add_api_route("/{job_id}/events", events, methods=["GET"], response_class=StreamingResponse,
                         summary="Follow a job: its state, progress and end as Server-Sent Events",
                         description="`text/event-stream` until the job ends: `state` (data: the job's status, as "
                                     "`GET /v1/jobs/{id}`) at each change of state, `progress` (data: `{done, "
                                     "total}`) as it advances, at most every 0.25 s, then `result` (data: the "
                                     "result) or `error` (data: the problem); a cancelled job ends with its `state`. "
                                     "Each event's id says where the stream is: reconnecting with it as "
                                     "`Last-Event-ID` resumes without repeating (204 once all was sent). A comment "
                                     "comes every 15 s without events.",
                         responses={200: {"description": "The job's events.",
                                          "content": {EVENT_STREAM: {"schema": EVENT_SCHEMA}}},
                                    204: {"description": "`Last-Event-ID` names the last event: nothing more."},
                                    **documented(400, 403, 404)})
    routes.add_api_route("/{job_id}/result", result, methods=["GET"], response_model=Union[results],  # noqa: UP007 (types listed at run time)
                         responses=documented(400, 403, 404, 409), summary="The result of a succeeded job")
    routes.add_api_route("/{job_id}", cancel, methods=["DELETE"], status_code=202, response_model=None,
                         summary="Delete a job, cancelling it if it is still active",
                         responses={202: {"description": "The active job was cancelled and deleted; its last state.",
                                          "model": job_status},
                                    204: {"description": "The finished job and its record were deleted."},
                                    **documented(400, 403, 404)})
    return routes
