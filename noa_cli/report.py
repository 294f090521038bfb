"""What the command line prints: one-line errors, notices, progress bars and info/stats tables."""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click
import typer

if TYPE_CHECKING:
    from noa_core.ops import FileResult

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
# Typer 0.29 parses with a private copy of click, whose exceptions are not click's: both kinds count.
_EXITS = (click.exceptions.Exit, typer.Exit)
_ABORTS = (click.exceptions.Abort, typer.Abort)
_CLI_ERRORS = (click.ClickException, typer.TyperException)


class BatchFailed(Exception):
    """Some inputs of a batch failed (each was already reported)."""


def one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


def error(message: str) -> None:
    click.echo(f"noa: error: {message}", err=True)


def notices(lines: list[str] | None, quiet: bool) -> None:
    if not quiet:
        for line in lines or ():
            click.echo(f"noa: note: {line}", err=True)


def done(message: str, quiet: bool) -> None:
    if not quiet:
        click.echo(message, err=True)


def failure(src: Path, exc: BaseException) -> None:
    """One line for an input that failed; noa's messages already name the file."""
    line = one_line(exc)
    error(line if str(src) in line else f"{src}: {line}")


def skipped(paths: Iterable[Path], quiet: bool) -> None:
    for path in paths:
        done(f"skipped {path}: the output exists (--resume)", quiet)


def batch_results(results: Sequence[FileResult], quiet: bool) -> None:
    """Report a batch run elsewhere (results in input order): what was written or
    skipped, then one line per failed input; raise BatchFailed when some failed.

    A batch of one input fails with its own error, as when run here.
    """
    failed = [r for r in results if r.status == "failed"]
    if len(results) == 1 and failed:
        raise failed[0].error
    for result in results:
        if result.status == "written":
            notices(list(result.notices), quiet)
            done(f"wrote {result.dst}", quiet)
    skipped([r.dst for r in results if r.status == "skipped"], quiet)
    for result in failed:
        failure(result.src, result.error)
    if failed:
        raise BatchFailed(f"{len(failed)} of {len(results)} inputs failed")


def guarded(call: Callable[[], object], debug: bool) -> int:
    """Run the CLI and turn every outcome into an exit code and at most one line on stderr."""
    from noa_core.errors import NoaError

    try:
        result = call()
        return result if isinstance(result, int) else EXIT_OK
    except _EXITS as exc:
        return exc.exit_code
    except _ABORTS:
        error("aborted")
        return EXIT_INTERNAL
    except _CLI_ERRORS as exc:  # bad usage: click's own message (with the usage line) and its exit code, 2
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            error(exc.format_message())
        return exc.exit_code
    except BatchFailed as exc:
        error(str(exc))
        return EXIT_USAGE
    except (NoaError, OSError) as exc:
        error(one_line(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the last resort: never a bare traceback
        if debug:
            traceback.print_exc()
        else:
            error(f"internal error: {type(exc).__name__}: {one_line(exc)} (rerun with 'noa --debug ...' for the traceback)")
        return EXIT_INTERNAL


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.replace(" ", "").split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers", param_hint=option) from None


@contextlib.contextmanager
def progress(description: str, quiet: bool) -> Iterator[Callable[[int, int], None]]:
    """A ``callback(done, total)`` that shows a progress bar on stderr once work passes ~1 second.

    Nothing is shown when quiet or when stderr is not a terminal.
    """
    start = time.monotonic()
    bar = None
    task = None
    enabled = not quiet and sys.stderr.isatty()

    def update(done_count: int, total: int) -> None:
        nonlocal bar, task
        if not enabled:
            return
        if bar is None:
            if time.monotonic() - start < 1.0:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TimeRemainingColumn

            bar = Progress("{task.description}", BarColumn(), "{task.percentage:>3.0f}%", TimeRemainingColumn(),
                           console=Console(stderr=True), transient=True)
            bar.start()
            task = bar.add_task(description, total=total)
        bar.update(task, completed=done_count, total=total)

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()


def _fmt(values) -> str:
    if values is None:
        return "-"
    if isinstance(values, (list, tuple)):
        return ", ".join(_fmt(v) for v in values)
    if isinstance(values, float):
        return f"{values:.6g}"
    return str(values)


def format_info(described: dict) -> str:
    """Human-readable lines for the dict returned by ``noa_core.ops.info``."""
    rows = [
        ("file", described["path"]),
        ("format", described["format"]),
        ("dtype", described["dtype"] + (f" (MRC mode {described['mode']})" if described.get("mode") is not None else "")),
        ("shape (BDHW)", _fmt(described["shape"])),
        ("strides", _fmt(described["strides"]) + " (elements, as stored)"),
        ("order", described["order"]),
        ("kind", described["kind"]),
        ("pixel size (DHW)", _fmt(described["pixel_size"]) + f" {described.get('pixel_unit') or ''}".rstrip()),
        ("origin (DHW)", _fmt(described["origin"])),
        ("statistics", ", ".join(f"{k} {_fmt(v)}" for k, v in (described.get("statistics") or {}).items()) or "-"),
    ]
    lines = [f"{name:<18}{value}" for name, value in rows]
    for i, label in enumerate(described.get("labels") or []):
        lines.append(f"{'labels' if i == 0 else '':<18}{label}")
    for note in described.get("notices") or []:
        lines.append(f"{'note':<18}{note}")
    return "\n".join(lines)


def format_stats(result: dict) -> str:
    header = f"{'batch':>6} {'min':>14} {'max':>14} {'mean':>14} {'std':>14}"
    rows = result["per_batch"] if "per_batch" in result else [dict(result, batch="all")]
    lines = [header]
    for row in rows:
        lines.append(f"{row['batch']!s:>6} {row['min']:>14.6g} {row['max']:>14.6g} {row['mean']:>14.6g} {row['std']:>14.6g}")
    return "\n".join(lines)
