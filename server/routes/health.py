"""Liveness and readiness probes (never behind the API key: orchestrators call them)."""

from __future__ import annotations

import os
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends

from noa_core.errors import NoaError
from noa_core.io import remote
from noa_core.io.remote import RemotePath
from noa_server.models import Health
from noa_server.problems import documented, problem_response
from noa_server.service import Service, service

router = APIRouter(tags=["health"])
PROBE_TIMEOUT_S = 2.0


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses=documented(503),
            summary="Readiness: the data root reachable (the kernels' warm-up is reported, not waited for)")
async def readyz(svc: Annotated[Service, Depends(service)]):
    # Requests are answered correctly while kernels compile (small files by NumPy, others by kernels
    # compiled when first needed): the warm-up is shown, never a reason to turn traffic away.
    checks = {"kernels": svc.kernels}
    root = svc.settings.data_root
    if root is not None:
        checks["data_root"] = "reachable" if await _reachable(root) else "unreachable"
    failing = [f"{name}: {state}" for name, state in checks.items() if name != "kernels" and state != "reachable"]
    if failing:
        return problem_response(503, "not ready: " + ", ".join(failing), "/readyz", slug="not-ready",
                                title="Not ready", headers={"Retry-After": "1"})
    return Health(status="ready", checks=checks)


async def _reachable(root) -> bool:
    """Whether the data root answers (:func:`_answers`); a hung network mount counts as unreachable."""
    with anyio.move_on_after(PROBE_TIMEOUT_S):
        return await anyio.to_thread.run_sync(_answers, root, abandon_on_cancel=True)
    return False


def _answers(root) -> bool:
    """Whether the data root is a readable, writable folder; on object storage, whether its bucket answers."""
    if isinstance(root, RemotePath):
        try:
            remote.check_folder(root)
        except NoaError:
            return False
        return True
    return os.access(root, os.R_OK | os.W_OK | os.X_OK) and os.path.isdir(root)
