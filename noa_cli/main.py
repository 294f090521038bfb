"""The ``noa`` command: parse arguments, call :mod:`noa_core.ops`, report.

No array logic lives here. Heavy modules (numba, mrcfile, tifffile) are imported inside the
commands so that ``noa --help`` starts fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import click
import typer

from noa_cli import report

app = typer.Typer(
    name="noa",
    help="Reshape, reorder and convert MRC and TIFF image stacks as 4-d BDHW arrays.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# -- options shared by the commands ---------------------------------------------------------------

Force = Annotated[bool, typer.Option("--force", "-f", help="Overwrite existing outputs.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors; no progress bar.")]
Device = Annotated[str, typer.Option("--device", help="Where kernels run: cpu or cuda.")]
AsStack = Annotated[
    Optional[bool],
    typer.Option("--as-stack/--as-volume", help="Read an ambiguous MRC file as an image stack or as a volume."),
]
Series = Annotated[Optional[int], typer.Option("--series", min=0, help="TIFF series to read (default 0).")]
OutDir = Annotated[
    Optional[Path],
    typer.Option("--out-dir", help="Treat every PATH as an input and write each result into this folder (batch)."),
]
Paths = Annotated[list[Path], typer.Argument(help="IN OUT, or several inputs with --out-dir.", show_default=False)]
Scheduler = Annotated[
    Optional[str],
    typer.Option("--scheduler", help="Run on Dask (the dask extra of noa): 'local' starts worker processes on this "
                 "machine, tcp://HOST:PORT uses a running scheduler (paths must be the same on its workers). "
                 "Several inputs run as parallel tasks; one large input is split into tasks that each write "
                 "their own tiles of the output."),
]
Workers = Annotated[
    Optional[int],
    typer.Option("--workers", min=1, help="With --scheduler local: worker processes (default one per core)."),
]
Resume = Annotated[
    bool,
    typer.Option("--resume", help="Skip inputs whose output exists: outputs are renamed into place when complete, "
                 "so an existing one is finished (rerun an interrupted batch with it)."),
]


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
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of internal errors.")] = False,
) -> None:
    """noa: reshape, reorder and convert MRC and TIFF stacks (BDHW: batch, depth, height, width).

    Example: noa permute movie.mrc movie_t.mrc --axes 0,1,3,2
    """


def _read_options(as_stack: Optional[bool], series: Optional[int]):
    from noa_core.ops import ReadOptions

    return ReadOptions(as_stack=as_stack, series=series)


def _pairs(paths: list[Path], out_dir: Optional[Path], suffix: Optional[str] = None) -> list[tuple[Path, Path]]:
    """(input, output) pairs: IN OUT, or every path into --out-dir (keeping names, maybe a new suffix)."""
    if out_dir is None:
        if len(paths) != 2:
            raise click.UsageError(f"expected IN OUT (2 paths), got {len(paths)}; use --out-dir for several inputs")
        return [(paths[0], paths[1])]
    if not paths:
        raise click.UsageError("--out-dir needs at least one input")
    return [(p, out_dir / (p.name if suffix is None else _with_suffix(p, suffix))) for p in paths]


def _with_suffix(path: Path, suffix: str) -> str:
    from noa_core.io.formats import strip_image_suffix

    return strip_image_suffix(path.name) + suffix


def _execute(op, pairs: list[tuple[Path, Path]], *, force: bool, resume: bool, scheduler: Optional[str],
             workers: Optional[int], quiet: bool) -> None:
    """Write every pair with ``op`` (a noa_core.ops.FileOp): here, or on Dask with --scheduler."""
    if resume and force:
        raise click.UsageError("--resume skips existing outputs and --force replaces them; choose one")
    if workers is not None and scheduler != "local":
        raise click.UsageError("--workers sizes the cluster of --scheduler local")
    if scheduler is not None:
        from noa_core import cluster

        with cluster.connect(scheduler, workers=workers) as client:
            with report.progress(f"noa {op.name}: {len(pairs)} file(s) on {scheduler}", quiet) as progress:
                results = cluster.run_batch(op, pairs, client, overwrite=force, resume=resume, progress=progress)
        report.batch_results(results, quiet)
        return
    todo = pairs
    if resume:
        from noa_core.ops import split_complete

        todo, complete = split_complete(pairs)
        report.skipped([dst for _, dst in complete], quiet)
    _run_batch(todo, lambda s, d, p: op(s, d, overwrite=force, progress=p), quiet, single=len(pairs) == 1)


def _run_batch(pairs: list[tuple[Path, Path]], action, quiet: bool, single: bool) -> None:
    """Run ``action(src, dst, progress)`` for each pair; one failure does not stop the others."""
    from noa_core.errors import NoaError

    failures = []
    for src, dst in pairs:
        with report.progress(f"{src.name} -> {dst.name}", quiet) as progress:
            try:
                notices = action(src, dst, progress)
            except (NoaError, OSError) as exc:
                if single:
                    raise
                failures.append((src, exc))
                report.failure(src, exc)
                continue
        report.notices(notices, quiet)
        report.done(f"wrote {dst}", quiet)
    if failures:
        raise report.BatchFailed(f"{len(failures)} of {len(pairs)} inputs failed")


# -- commands --------------------------------------------------------------------------------------


@app.command()
def info(
    files: Annotated[list[Path], typer.Argument(help="MRC or TIFF files.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for pipelines.")] = False,
    as_stack: AsStack = None,
    series: Series = None,
) -> None:
    """Describe image files: format, dtype, BDHW shape and strides, order, kind, pixel size, origin,
    statistics and labels.

    Example: noa info emd_3197.map --json
    """
    from noa_core import ops

    described = [ops.info(f, _read_options(as_stack, series)) for f in files]
    if as_json:
        typer.echo(json.dumps(described if len(files) > 1 else described[0], indent=2))
    else:
        typer.echo("\n\n".join(report.format_info(d) for d in described))


@app.command()
def permute(
    paths: Paths,
    axes: Annotated[str, typer.Option("--axes", help="New axis order, a permutation of 0,1,2,3 (B,D,H,W).")],
    out_dir: OutDir = None,
    force: Force = False,
    resume: Resume = False,
    scheduler: Scheduler = None,
    workers: Workers = None,
    device: Device = "cpu",
    as_stack: AsStack = None,
    series: Series = None,
    quiet: Quiet = False,
) -> None:
    """Reorder the BDHW axes; the header (pixel size, origin) follows the axes.

    Example: noa permute volume.mrc volume_xzy.mrc --axes 0,3,2,1
    """
    from noa_core.ops import FileOp

    op = FileOp("permute", {"axes": report.parse_ints(axes, "--axes"), "read": _read_options(as_stack, series),
                            "device": device})
    _execute(op, _pairs(paths, out_dir), force=force, resume=resume, scheduler=scheduler, workers=workers, quiet=quiet)


@app.command()
def broadcast(
    paths: Paths,
    shape: Annotated[str, typer.Option("--shape", help="Target BDHW shape, e.g. 10,1,64,64.")],
    out_dir: OutDir = None,
    force: Force = False,
    resume: Resume = False,
    scheduler: Scheduler = None,
    workers: Workers = None,
    device: Device = "cpu",
    as_stack: AsStack = None,
    series: Series = None,
    quiet: Quiet = False,
) -> None:
    """Repeat size-1 dimensions to reach SHAPE (every other dimension must match).

    Example: noa broadcast gain.mrc gain_stack.mrc --shape 40,1,512,512
    """
    from noa_core.ops import FileOp

    op = FileOp("broadcast", {"shape": report.parse_ints(shape, "--shape"), "read": _read_options(as_stack, series),
                              "device": device})
    _execute(op, _pairs(paths, out_dir), force=force, resume=resume, scheduler=scheduler, workers=workers, quiet=quiet)


@app.command()
def copy(
    paths: Paths,
    order: Annotated[str, typer.Option("--order", help="Memory order of the output: C, F, or K (keep the input's).")] = "C",
    dtype: Annotated[Optional[str], typer.Option("--dtype", help="Convert to this type (e.g. float32, int16, uint8).")] = None,
    clamp: Annotated[bool, typer.Option("--clamp", help="Clamp values to the range of --dtype (NaN -> 0 for integers); without it, values that do not fit are refused.")] = False,
    to: Annotated[Optional[str], typer.Option("--to", help="With --out-dir: output format by extension (mrc, tif).")] = None,
    out_dir: OutDir = None,
    force: Force = False,
    resume: Resume = False,
    scheduler: Scheduler = None,
    workers: Workers = None,
    device: Device = "cpu",
    as_stack: AsStack = None,
    series: Series = None,
    quiet: Quiet = False,
) -> None:
    """Copy an image file, optionally to another order, type or format (chosen by OUT's extension).

    Example: noa copy stack.tif stack.mrc --order F --dtype float32
    """
    from noa_core.ops import FileOp

    op = FileOp("copy", {"order": order, "dtype": dtype, "clamp": clamp, "read": _read_options(as_stack, series),
                         "device": device})
    suffix = None if to is None else "." + to.lstrip(".")
    _execute(op, _pairs(paths, out_dir, suffix), force=force, resume=resume, scheduler=scheduler, workers=workers,
             quiet=quiet)


@app.command()
def ewise(
    expression: Annotated[str, typer.Argument(help="Expression over inputs a, b, c, ... e.g. 'a * b'.")],
    inputs: Annotated[
        list[Path],
        typer.Argument(help="Input files, named a, b, c, ... in order; with --out-dir, each is a in turn.",
                       show_default=False),
    ],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Output file.")] = None,
    out_dir: Annotated[
        Optional[Path],
        typer.Option("--out-dir", help="Batch: every INPUT is a in turn, written into this folder under its own name."),
    ] = None,
    others: Annotated[
        Optional[list[Path]],
        typer.Option("--with", help="Inputs b, c, ... shared by every file of the batch (repeatable, in order)."),
    ] = None,
    dtype: Annotated[Optional[str], typer.Option("--dtype", help="Output type (default: NumPy's result type).")] = None,
    force: Force = False,
    resume: Resume = False,
    scheduler: Scheduler = None,
    workers: Workers = None,
    device: Device = "cpu",
    as_stack: AsStack = None,
    series: Series = None,
    quiet: Quiet = False,
) -> None:
    """Compute an element-wise expression over files, broadcasting size-1 dimensions.

    Inputs are named a, b, c, ... in order. The language has + - * / // % **, comparisons,
    and/or/not, 'x if cond else y', pi, e, and abs sqrt exp log log10 sin cos tan floor ceil
    min max clip where.

    Example (gain correction of a movie): noa ewise "a * b" movie.mrc gain.mrc -o corrected.mrc

    Example (a batch of movies, one gain): noa ewise "a * b" movies/*.mrc --with gain.mrc --out-dir corrected/
    """
    from noa_core.ops import FileOp

    if (output is None) == (out_dir is None):
        raise click.UsageError("give either --output FILE or --out-dir FOLDER")
    shared = list(others or [])
    if output is not None:
        pairs, shared = [(inputs[0], output)], inputs[1:] + shared
    else:
        pairs = _pairs(inputs, out_dir)
    op = FileOp("ewise", {"expression": expression, "others": tuple(shared), "dtype": dtype,
                          "read": _read_options(as_stack, series), "device": device})
    _execute(op, pairs, force=force, resume=resume, scheduler=scheduler, workers=workers, quiet=quiet)


@app.command()
def stats(
    file: Annotated[Path, typer.Argument(help="MRC or TIFF file.", show_default=False)],
    per_batch: Annotated[bool, typer.Option("--per-batch", help="One line per image (batch index).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    device: Device = "cpu",
    as_stack: AsStack = None,
    series: Series = None,
) -> None:
    """Min, max, mean and standard deviation computed from the data (not the header).

    Example: noa stats movie.mrc --per-batch
    """
    from noa_core import ops

    result = ops.stats(file, per_batch=per_batch, read=_read_options(as_stack, series), device=device)
    typer.echo(json.dumps(result, indent=2) if as_json else report.format_stats(result))


@app.command()
def warmup(quiet: Quiet = False) -> None:
    """Compile the kernels into the cache so that later commands start fast.

    Example: noa warmup
    """
    from noa_core import ops

    seconds = ops.warmup()
    report.done(f"kernels compiled and cached in {seconds:.1f} s", quiet)


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8000,
    data_root: Annotated[
        Optional[Path], typer.Option("--data-root", help="Folder that server-side paths are relative to (env NOA_DATA_ROOT).")
    ] = None,
    state_dir: Annotated[
        Optional[Path], typer.Option("--state-dir", help="Where job state is kept (default DATA_ROOT/.noa-jobs).")
    ] = None,
    api_key: Annotated[
        Optional[str], typer.Option("--api-key", help="Require this X-API-Key on /v1 (env NOA_API_KEY).")
    ] = None,
    processes: Annotated[
        Optional[int], typer.Option("--processes", min=1, help="Server processes (default: 2, or 1 on one core).")
    ] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Operations run at once per process (default 2).")] = None,
    max_body_bytes: Annotated[Optional[int], typer.Option("--max-body-bytes", min=1, help="Largest request body.")] = None,
    max_voxels: Annotated[Optional[int], typer.Option("--max-voxels", min=1, help="Largest output, in voxels.")] = None,
    cors_origin: Annotated[
        Optional[list[str]], typer.Option("--cors-origin", help="Allow browser requests from this origin (repeatable).")
    ] = None,
    tmp_dir: Annotated[
        Optional[Path], typer.Option("--tmp-dir", help="Folder for upload scratch files (tmpfs such as /dev/shm is fastest).")
    ] = None,
    job_ttl: Annotated[
        Optional[int], typer.Option("--job-ttl", min=0, help="Seconds finished job records are kept (0: forever; default 7 days).")
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Start the HTTP service (uvicorn); options override NOA_* environment variables.

    Example: noa serve --data-root /data/em --api-key "$KEY" --port 8000
    """
    from server.run import prepare
    from server.settings import Settings

    try:
        settings = Settings.from_env(data_root=data_root, state_dir=state_dir, api_key=api_key, workers=workers,
                                     processes=processes, max_body_bytes=max_body_bytes, max_voxels=max_voxels,
                                     cors_origins=cors_origin, tmp_dir=tmp_dir, job_ttl=job_ttl)
        serve_until_stopped = prepare(settings, host, port, log_level)
    except ValueError as exc:  # a bad setting (e.g. NOA_WORKERS=abc, a missing data root): usage, not a crash
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    serve_until_stopped()


# -- entry point -----------------------------------------------------------------------------------


def run(argv: Optional[list[str]] = None) -> None:
    """Console-script entry: exit 0 on success, 2 on bad usage or input, 1 on internal errors."""
    args = sys.argv[1:] if argv is None else argv
    sys.exit(report.guarded(lambda: app(args=args, prog_name="noa", standalone_mode=False), debug="--debug" in args))


if __name__ == "__main__":
    run()
