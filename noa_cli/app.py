"""The ``noa`` command as a Typer app: a command per registered operation (:mod:`noa_cli.commands`), plus
``warmup`` and ``serve``. It reads every command line the plain reader leaves to it (:mod:`noa_cli.main`):
help, completion, usage errors, the commands beside the operations.

No array logic lives here. Heavy modules (numba, mrcfile, tifffile) are imported inside the
commands so that ``noa --help`` starts fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from noa_cli import help_layout, particles, report
from noa_core import SUMMARY

Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors; no progress bar.")]


class Commands(help_layout.Group):
    """noa's commands: one per registered operation (built from its declaration only when asked
    for, so that ``noa --help`` and ``noa NAME --help`` start fast), then warmup and serve."""

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]  # typer passes its Context
        from noa_core import operations

        return [*operations.names(), *super().list_commands(ctx)]

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:  # type: ignore[override]  # typer's Context
        command = super().get_command(ctx, cmd_name)
        if command is None:
            from noa_core import operations

            if cmd_name in operations.names():
                from noa_cli import commands

                command = self.commands[cmd_name] = commands.build(operations.get(cmd_name))
        return command

    def resolve_command(self, ctx: typer.Context, args: list[str]):  # type: ignore[override]  # typer's Context
        """A mistyped command (``noa bni``, ``noa normalise``) is named, with the closest commands."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else "; see noa --help for the commands"
            raise report.UnknownCommand(f"no command {name!r}{hint}")
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="noa",
    cls=Commands,
    help=SUMMARY,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=help_layout.MARKUP,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from noa_core import __version__

        typer.echo(f"noa {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of internal errors, and what noa "
                                        "decides on the way (which code computes: NumPy or numba).")] = False,
) -> None:
    """Example: noa permute movie.mrc movie_t.mrc --axes 0,1,3,2"""
    if debug:
        import logging

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("noa: debug: %(message)s"))
        logger = logging.getLogger("noa")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)


# -- commands beside the operations --------------------------------------------------------------

app.add_typer(particles.app)


@app.command()
def warmup(
    quiet: Quiet = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="Worker processes compiling at once (default: the "
                                    "cores this process may use; 1: all in this process).")
    ] = None,
) -> None:
    """Compile the kernels into the cache so that later commands start fast; one line per step.

    Example: noa warmup --jobs 2
    """
    import os

    from noa_core import limits
    from noa_core.compute import compute_path
    from noa_core.run.warmup import warmup as compile_kernels

    # This process only warms up: small files must take the numba path too (workers force it themselves).
    os.environ[compute_path.ENVIRONMENT] = "numba"

    def step(done: int, total: int, what: str) -> None:
        if not quiet:
            typer.echo(f"[{done}/{total}] {what}", err=True)

    seconds = compile_kernels(progress=step, jobs=jobs or limits.available_cores())
    report.done(f"kernels compiled and cached in {seconds:.1f} s", quiet)


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8000,
    data_root: Annotated[
        str | None,  # a folder, or a prefix of object storage (s3://bucket/prefix), which Path would mangle
        typer.Option("--data-root", help="Folder that server-side paths are relative to, or a prefix of object "
                     "storage, s3://bucket/prefix (env NOA_DATA_ROOT).")
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="Where job state is kept (default DATA_ROOT/.noa-jobs; "
                                  "required with a data root on object storage).")
    ] = None,
    database: Annotated[
        str | None, typer.Option("--database", help="Keep jobs in this PostgreSQL database, shared by several "
                                 "hosts: postgresql://user@host:port/db (env NOA_DATABASE; default: SQLite, "
                                 "STATE_DIR/jobs.sqlite).")
    ] = None,
    scheduler: Annotated[
        str | None, typer.Option("--scheduler", help="Run jobs on Dask (the dask extra): local[:N] starts N worker "
                                 "processes here, tcp://HOST:PORT uses a running scheduler whose workers see the data "
                                 "root at the same path (env NOA_SCHEDULER; default: the worker pool).")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option("--api-key", help="Require this X-API-Key on /v1 (env NOA_API_KEY).")
    ] = None,
    processes: Annotated[
        int | None, typer.Option("--processes", min=1, help="Server processes (default: 2, or 1 on one core).")
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1,
                                                help="Operations run at once per process (default 2).")] = None,
    max_body_bytes: Annotated[int | None, typer.Option("--max-body-bytes", min=1, help="Largest request body "
                                                          "(default 1073741824, 1 GiB).")] = None,
    max_voxels: Annotated[int | None, typer.Option("--max-voxels", min=1, help="Largest output, in voxels "
                                                      "(default 2147483648).")] = None,
    cors_origin: Annotated[
        list[str] | None, typer.Option("--cors-origin", help="Allow browser requests from this origin (repeatable).")
    ] = None,
    tmp_dir: Annotated[
        Path | None,
        typer.Option("--tmp-dir", help="Folder for upload scratch files (tmpfs such as /dev/shm is fastest).")
    ] = None,
    job_ttl: Annotated[
        int | None,
        typer.Option("--job-ttl", min=0, help="Seconds finished job records are kept (0: forever; default 7 days).")
    ] = None,
    max_expressions: Annotated[
        int | None, typer.Option("--max-expressions", min=0, help="Replace a server process once it has compiled "
                                    "this many distinct expressions (their machine code is never freed; ~5 MB each; "
                                    "0: never; default 200).")
    ] = None,
    warmup: Annotated[
        bool | None, typer.Option("--warmup/--no-warmup", help="Compile the kernels into the cache in the "
                                     "background at start, once per installation (default; env NOA_WARMUP). "
                                     "Requests are answered meanwhile.")
    ] = None,
    watch: Annotated[
        Path | None, typer.Option("--watch", help="Watched folders: a JSON or TOML file of watches (as POST "
                                  "/v1/watches takes them), created at start unless one of the name exists "
                                  "(env NOA_WATCH_CONFIG).")
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Start the HTTP service (uvicorn); options override NOA_* environment variables.

    Example: noa serve --data-root /data/em --api-key "$KEY" --port 8000
    """
    from noa_core.run.warmup import warmed
    from noa_server.processes import prepare
    from noa_server.settings import Settings

    try:
        settings = Settings.from_env(data_root=data_root, state_dir=state_dir, database=database, api_key=api_key,
                                     scheduler=scheduler, workers=workers, processes=processes,
                                     max_body_bytes=max_body_bytes,
                                     max_voxels=max_voxels, cors_origins=cors_origin, tmp_dir=tmp_dir, job_ttl=job_ttl,
                                     max_expressions=max_expressions, warmup=warmup, watch_config=watch)
        serve_until_stopped, port = prepare(settings, host, port, log_level, lambda: listening(port))
    except ValueError as exc:  # a bad setting (e.g. NOA_WORKERS=abc, a missing data root): usage, not a crash
        raise report.UsageError(str(exc)) from None
    except OSError as exc:
        raise report.UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    def listening(port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        root = settings.data_root or "none (uploads only)"
        typer.echo(f"noa serve: http://{shown}:{port} (API docs at /docs; data root {root}; {settings.processes} "
                   f"process(es))", err=True)
        if settings.warmup and not warmed():
            typer.echo("noa serve: compiling the kernels into the cache in the background, once for this "
                       "installation (`noa warmup` does it ahead of time); requests are answered meanwhile, "
                       "a first large file more slowly", err=True)

    serve_until_stopped()
