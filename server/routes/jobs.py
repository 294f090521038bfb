"""Jobs: submit a path operation, poll its status and progress, fetch its result, cancel it."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse, Response

from server import operations
from server.jobs import ID_PATTERN
from server.models import InfoResult, JobRequest, JobStatus, StatsResult, WriteResult
from server.problems import ProblemError, documented
from server.service import Service, service

router = APIRouter(prefix="/jobs", tags=["jobs"])
Svc = Annotated[Service, Depends(service)]
JobId = Annotated[str, Path(pattern=ID_PATTERN, description="The job id from POST /v1/jobs.")]


def _location(job_id: str) -> str:
    return f"/v1/jobs/{job_id}"


@router.post("", status_code=202, response_model=JobStatus, summary="Start a job (any path operation)",
             responses={202: {"description": "Accepted; poll Location for status and progress.",
                              "headers": {"Location": {"description": "/v1/jobs/<id>", "schema": {"type": "string"}}}},
                        **documented(400, 403, 413, 503)})
async def submit(svc: Svc, request: JobRequest):
    store = svc.job_store()
    # Paths are checked now, so a traversal attempt is refused here rather than recorded as a job. (In
    # anyio's thread pool: the checks touch the disk, and the workers may all be busy with jobs.)
    planned = await anyio.to_thread.run_sync(operations.plan, request, svc.paths())
    limit = svc.settings.max_voxels
    job = store.submit(request.operation, request.model_dump(mode="json"),
                       lambda progress: operations.run_on_paths(planned, limit, progress), svc.submit)
    return JSONResponse(job.public(), status_code=202, headers={"Location": _location(job.id)})


@router.get("/{job_id}", response_model=JobStatus, responses=documented(400, 403, 404),
            summary="Status and progress of a job")
async def status(svc: Svc, job_id: JobId):
    return JSONResponse(svc.job_store().snapshot(job_id))


@router.get("/{job_id}/result", response_model=InfoResult | StatsResult | WriteResult,
            responses=documented(400, 403, 404, 409), summary="The result of a succeeded job")
async def result(svc: Svc, job_id: JobId):
    job = svc.job_store().snapshot(job_id)
    if job["status"] != "succeeded":
        why = f"; {job['error']['detail']}" if job["error"] else ""
        raise ProblemError(409, "job-not-succeeded", "Job has no result", f"job {job_id} is {job['status']}{why}")
    return JSONResponse(job["result"])


@router.delete("/{job_id}", summary="Delete a job, cancelling it if it is still active",
               responses={202: {"description": "The active job was cancelled and deleted; its last state.",
                                "model": JobStatus},
                          204: {"description": "The finished job and its record were deleted."},
                          **documented(400, 403, 404)}, status_code=202, response_model=None)
async def cancel(svc: Svc, job_id: JobId) -> Any:
    job = svc.job_store().cancel(job_id)
    if job is None:
        return Response(status_code=204)
    return JSONResponse(job, status_code=202)
