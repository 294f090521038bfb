"""Watched folders: create, list, inspect and delete the watches that turn files landing under the data root
into jobs (:mod:`noa_server.watches`)."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import Depends, Path
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, create_model

from noa_core.operations import Operation
from noa_server.jobs import ID_PATTERN, STATES
from noa_server.problems import ProblemError, documented
from noa_server.routes import Routes
from noa_server.service import Service, service
from noa_server.watches import InvalidWatch, Watches, WatchSpec

Svc = Annotated[Service, Depends(service)]
WatchId = Annotated[str, Path(pattern=ID_PATTERN, description="The watch id from POST /v1/watches.")]


class Watch(WatchSpec):
    id: str
    created: str = Field(description="When the watch was made (UTC).")
    scanning: bool = Field(description="Whether a service process holds the watch's lease (scans it) now.")


Counts = create_model("WatchJobs", **{state: (int, Field(0)) for state in STATES})  # type: ignore[call-overload]


class WatchStatus(Watch):
    files: int = Field(description="Files taken (each becomes one job, once).")
    refused: int = Field(description="Files taken whose job was refused (see the server log).")
    jobs: Counts = Field(description="The watch's jobs by state (jobs deleted or expired are not counted).")  # type: ignore[valid-type]


class WatchList(BaseModel):
    watches: list[Watch]


def _watches(svc: Service) -> Watches:
    svc.job_store()  # 403 without a data root
    assert svc.watches is not None
    return svc.watches


async def create(svc: Svc, spec: WatchSpec) -> JSONResponse:
    watches = _watches(svc)
    try:
        made = await anyio.to_thread.run_sync(watches.create, spec.model_dump(mode="json"))
    except InvalidWatch as exc:  # a body of the schema (whose job is any object) that cannot be a watch
        raise ProblemError(422, "invalid-watch", "Invalid watch", str(exc)) from None
    return JSONResponse(made, status_code=201, headers={"Location": f"/v1/watches/{made['id']}"})


async def listing(svc: Svc) -> JSONResponse:
    return JSONResponse({"watches": await anyio.to_thread.run_sync(_watches(svc).listing)})


async def status(svc: Svc, watch_id: WatchId) -> JSONResponse:
    return JSONResponse(await anyio.to_thread.run_sync(_watches(svc).get, watch_id))


async def delete(svc: Svc, watch_id: WatchId) -> Any:
    await anyio.to_thread.run_sync(_watches(svc).delete, watch_id)
    return Response(status_code=204)


def router(_operations: list[Operation]) -> Routes:
    routes = Routes(prefix="/watches", tags=["watches"])
    routes.add_api_route("", create, methods=["POST"], status_code=201, response_model=WatchStatus,
                         summary="Watch a folder: each file that lands there becomes a job",
                         description="Each file of `folder` whose name matches `pattern` becomes one job (`job` with "
                                     "the file as its input and `output/<stem><ext>` as its output) once its size "
                                     "and modification time have not changed for `settle_seconds`: once, across "
                                     "restarts and service processes. Files already there are taken too. A body "
                                     "that does not fit the schema is a 400; one that cannot be a watch (`job` "
                                     "not a job of any operation, `output` missing or the watched folder) a 422.",
                         responses={201: {"description": "Created; scanning starts within moments.",
                                          "headers": {"Location": {"description": "/v1/watches/<id>",
                                                                   "schema": {"type": "string"}}}},
                                    **documented(400, 403, 404, 409, 422)})
    routes.add_api_route("", listing, methods=["GET"], response_model=WatchList, responses=documented(400, 403),
                         summary="List the watches, oldest first")
    routes.add_api_route("/{watch_id}", status, methods=["GET"], response_model=WatchStatus,
                         responses=documented(400, 403, 404), summary="A watch, with its files and jobs counted")
    routes.add_api_route("/{watch_id}", delete, methods=["DELETE"], status_code=204, response_model=None,
                         responses={204: {"description": "Deleted: no file is taken any more; its jobs stay."},
                                    **documented(400, 403, 404)},
                         summary="Stop watching (the jobs already made stay)")
    return routes
