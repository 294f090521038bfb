#!/usr/bin/env python
"""A small client for the noa HTTP service, to copy into a pipeline.

It shows the three ways to work with the service:

1. upload: send a local file, get the result file back (here: swap height and width);
2. server-side paths: name a file under the server's data root (here: describe it);
3. a job: start a conversion on the server, poll its progress, fetch the result and download it.

Usage:
    python examples/client.py --url http://127.0.0.1:8000 --api-key KEY --remote emd.map emd_3197.map

``--remote`` is the file's path relative to the server's ``--data-root`` (default: the local file's
name, for when the local folder is the data root). Needs only httpx.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx


class NoaError(Exception):
    """The service answered with a problem (RFC 9457)."""


def check(response: httpx.Response) -> httpx.Response:
    """Raise with the problem's title and detail on any error status."""
    if response.is_error:
        try:
            problem = response.json()
            message = f"{problem['status']} {problem['title']}: {problem['detail']}"
        except (ValueError, KeyError):
            message = f"{response.status_code} {response.text[:200]}"
        raise NoaError(message)
    return response


def upload_permute(client: httpx.Client, local: Path, axes: list[int], out_dir: Path) -> Path:
    """Upload ``local``, get it back with its axes reordered; the file name comes from the server."""
    with open(local, "rb") as f:
        response = check(client.post("/v1/upload/permute", data={"axes": [str(a) for a in axes]},
                                     files={"file": (local.name, f)}))
    name = response.headers["content-disposition"].split('filename="')[1].rstrip('"')
    out = out_dir / Path(name).name
    out.write_bytes(response.content)
    return out


def describe(client: httpx.Client, remote: str) -> dict:
    return check(client.post("/v1/paths/info", json={"path": remote})).json()


def run_job(client: httpx.Client, request: dict, timeout: float = 600.0) -> dict:
    """Start a job, print its progress until it ends, and return its final state."""
    location = check(client.post("/v1/jobs", json=request)).headers["location"]
    deadline = time.monotonic() + timeout
    while True:
        state = check(client.get(location)).json()
        done, total = state["progress"]["done"], state["progress"]["total"]
        print(f"job {state['id'][:8]}: {state['status']} ({done}/{total} blocks)")
        if state["status"] not in ("queued", "running"):
            return state
        if time.monotonic() > deadline:
            check(client.delete(location))  # cancel: the server removes any partial output
            raise NoaError(f"job {state['id']} took longer than {timeout} s; cancelled")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="a local MRC or TIFF file")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--remote", default=None, help="the same file's path under the server's data root")
    parser.add_argument("--out-dir", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    remote = args.remote or args.file.name
    args.out_dir.mkdir(parents=True, exist_ok=True)
    headers = {"X-API-Key": args.api_key} if args.api_key else {}

    with httpx.Client(base_url=args.url, headers=headers, timeout=120) as client:
        try:
            out = upload_permute(client, args.file, [0, 1, 3, 2], args.out_dir)
            print(f"upload: wrote {out}")

            info = describe(client, remote)
            print(f"paths: {remote} is {info['format']} {info['dtype']} of BDHW shape {info['shape']}")

            target = str(Path(remote).with_suffix(".tif"))
            state = run_job(client, {"operation": "copy", "src": remote, "dst": target, "overwrite": True})
            if state["status"] != "succeeded":
                raise NoaError(f"job {state['status']}: {state['error']['detail']}")
            result = check(client.get(f"/v1/jobs/{state['id']}/result")).json()
            download = args.out_dir / Path(result["output"]).name
            download.write_bytes(check(client.get(f"/v1/files/{result['output']}")).content)
            print(f"job: the server wrote {result['output']}; downloaded to {download}")
        except (NoaError, httpx.HTTPError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
