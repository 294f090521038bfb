"""Path mode: JSON naming files under the data root; outputs are written there too."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import anyio

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse, JSONResponse

from server import operations
from server.models import (BroadcastRequest, CopyRequest, EwiseRequest, InfoRequest, InfoResult, PathRequest,
                           PermuteRequest, StatsRequest, StatsResult, WriteResult)
from server.problems import ProblemError, documented
from server.sandbox import Sandbox
from server.service import Service, service

router = APIRouter(tags=["paths"])
Svc = Annotated[Service, Depends(service)]
READ_ERRORS = documented(400, 403, 404, 413, 422, 500)
WRITE_RESPONSES = {
    201: {"description": "Written; Location is where to download the output.",
          "headers": {"Location": {"description": "/v1/files/<output>", "schema": {"type": "string"}}}},
    **documented(400, 403, 404, 409, 413, 422, 500),
}


async def _run(svc: Service, request: PathRequest):
    # The sandbox checks follow symlinks on disk, so they run in the worker too (one thread hop).
    return await svc.run(operations.plan_and_run, request, svc.paths(), svc.settings.max_voxels)


async def _write(svc: Service, request: PathRequest) -> JSONResponse:
    result = await _run(svc, request)
    return JSONResponse(result, status_code=201, headers={"Location": "/v1/files/" + quote(result["output"])})


@router.post("/paths/info", response_model=InfoResult, responses=READ_ERRORS, summary="Describe a server-side file")
async def info(svc: Svc, request: InfoRequest):
    return JSONResponse(await _run(svc, request))


@router.post("/paths/stats", response_model=StatsResult, responses=READ_ERRORS,
             summary="Min, max, mean and std of a server-side file")
async def stats(svc: Svc, request: StatsRequest):
    return JSONResponse(await _run(svc, request))


@router.post("/paths/permute", status_code=201, response_model=WriteResult, responses=WRITE_RESPONSES,
             summary="Reorder the BDHW axes of a server-side file")
async def permute(svc: Svc, request: PermuteRequest):
    return await _write(svc, request)


@router.post("/paths/broadcast", status_code=201, response_model=WriteResult, responses=WRITE_RESPONSES,
             summary="Repeat size-1 dimensions of a server-side file")
async def broadcast(svc: Svc, request: BroadcastRequest):
    return await _write(svc, request)


@router.post("/paths/copy", status_code=201, response_model=WriteResult, responses=WRITE_RESPONSES,
             summary="Copy a server-side file to another order, element type or format (dst's extension)")
async def copy(svc: Svc, request: CopyRequest):
    return await _write(svc, request)


@router.post("/paths/ewise", status_code=201, response_model=WriteResult, responses=WRITE_RESPONSES,
             summary="Evaluate an element-wise expression over server-side files (a, b, c, ...)")
async def ewise(svc: Svc, request: EwiseRequest):
    return await _write(svc, request)


def _existing_file(sandbox: Sandbox, path: str) -> Path:
    resolved = sandbox.resolve(path)
    if not resolved.is_file():
        raise ProblemError(404, "file-not-found", "File not found", f"{path}: no such file")
    return resolved


@router.get("/files/{path:path}", response_class=FileResponse, summary="Download a file from the data root",
            responses={200: {"description": "The file.", "content": {
                media: {"schema": {"type": "string", "format": "binary"}} for media in ("application/octet-stream",
                                                                                        "image/tiff")}},
                **documented(400, 403, 404)})
async def download(svc: Svc, path: str):
    resolved = await anyio.to_thread.run_sync(_existing_file, svc.paths(), path)
    tiff = resolved.suffix.lower() in (".tif", ".tiff")
    return FileResponse(resolved, media_type="image/tiff" if tiff else "application/octet-stream",
                        filename=resolved.name)
