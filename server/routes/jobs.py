"""Jobs: submit a path operation, poll its status and progress, fetch its result, cancel it."""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Union

import anyio
from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse, Response

from noa_core.operations import Operation
from noa_server import execution
from noa_server.jobs import ID_PATTERN
from noa_server.models import job_request, job_status_model, result_model
from noa_server.problems import ProblemError, documented
from noa_server.service import Service, service

Svc = Annotated[Service, Depends(service)]
JobId = Annotated[str, Path(pattern=ID_PATTERN, description="The job id from POST /v1/jobs.")]


def _location(job_id: str) -> str:
    return f"/v1/jobs/{job_id}"


async def _submit(svc: Service, request: Any) -> JSONResponse:
    store = svc.job_store()
    # Paths are checked now, so a traversal attempt is refused here rather than recorded as a job. (In
    # anyio's thread pool: the checks touch the disk, and the workers may all be busy with jobs.)
    planned = await anyio.to_thread.run_sync(execution.plan, request, svc.paths())
    limit = svc.settings.max_voxels
    job = store.submit(request.operation, request.model_dump(mode="json"),
                       lambda progress: execution.run_on_paths(planned, limit, progress), svc.submit)
    return JSONResponse(job.public(), status_code=202, headers={"Location": _location(job.id)})


async def status(svc: Svc, job_id: JobId):
    return JSONResponse(svc.job_store().snapshot(job_id))


async def result(svc: Svc, job_id: JobId):
    job = svc.job_store().snapshot(job_id)
    if job["status"] != "succeeded":
        why = f"; {job['error']['detail']}" if job["error"] else ""
        raise ProblemError(409, "job-not-succeeded", "Job has no result", f"job {job_id} is {job['status']}{why}")
    return JSONResponse(job["result"])


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

    submit.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("svc", inspect.Parameter.KEYWORD_ONLY, annotation=Svc),
        inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=job_request(operations_))])
    routes.add_api_route("", submit, methods=["POST"], status_code=202, response_model=job_status,
                         summary="Start a job (any path operation)",
                         responses={202: {"description": "Accepted; poll Location for status and progress.",
                                          "headers": {"Location": {"description": "/v1/jobs/<id>",
                                                                   "schema": {"type": "string"}}}},
                                    **documented(400, 403, 413, 503)})
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
