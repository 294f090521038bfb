"""What the command line prints: one-line errors, notices, per-file results and progress bars."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from noa_core.run import FileResult

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
EXIT_DIFFERENT = 1  # a check found its input inconsistent (as diff)
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM


class UsageError(Exception):
    """A command line the parser took but the command refuses (IN OUT missing, options that exclude each
    other): exit 2, one line."""


class BatchFailed(Exception):
    """Some inputs of a batch failed (each was already reported)."""


class UnknownCommand(Exception):
    """``noa NAME`` where no command is called NAME (the message names the closest ones)."""


class Terminated(BaseException):
    """SIGTERM arrived (how Slurm, Kubernetes and Docker cancel). A BaseException, as KeyboardInterrupt,
    so that no ``except Exception`` stops it and every writer's ``with`` block discards its temporary file."""


# The outputs of the command running (by _output_key, with the name a "wrote" line gives each), with whether
# results are quiet: once every one is placed, the command has succeeded, and a SIGTERM after that only cuts its
# tidying up short (see guarded).
_EXPECTED: dict[str, str] = {}
_QUIET = [False]
_REPORTED: set[str] = set()  # outputs whose "wrote" line was printed


def expect_outputs(paths: Sequence[Path], quiet: bool) -> None:
    """Say which outputs the running command places (a batch's, IN OUT's one)."""
    _EXPECTED.clear()
    _EXPECTED.update((_output_key(p), str(p)) for p in paths)
    _QUIET[0] = quiet


def _all_placed() -> bool:
    """Whether every expected output has taken its name. Asked in a signal handler: imports nothing (an
    interrupted import of NumPy cannot be done again), so a process that never loaded the writer placed none."""
    atomic = sys.modules.get("noa_core.io.atomic")
    if not _EXPECTED or atomic is None:
        return False
    return _EXPECTED.keys() <= {_output_key(p) for p in atomic.PLACED}


def _output_key(path: Path) -> str:
    """An output as one string, whichever way it was spelt: a URL as given (a remote path has no local spelling:
    :class:`noa_core.io.remote.RemotePath`), a local path made absolute."""
    url = getattr(path, "url", None)
    return url if isinstance(url, str) else os.path.abspath(path)


def _raise_terminated(signum: int, frame: object) -> None:
    # Once is enough: a second SIGTERM must not interrupt the clean-up the first one started.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if not _all_placed():
        raise Terminated


@contextlib.contextmanager
def terminated_by_sigterm() -> Iterator[None]:
    """Within this block, SIGTERM raises :class:`Terminated` in the main thread (Python runs signal
    handlers there only; worker threads and numba kernels finish their tile and are then abandoned)."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# Parameters the library names that the command line spells with an option of another name.
_OPTIONS = {"overwrite": "--force"}


def spelling(name: str, value: str | None) -> str:
    """A parameter the library names in a message, as the command line spells it: ``--force``, ``--level N``,
    ``--no-ramp`` (a switch given "false")."""
    from noa_core import operations  # on the way to an error line: the declarations say each option's flags
    from noa_core.operations import Flag

    declared = next((p for operation in operations.operations() for p in operation.params if p.name == name), None)
    if declared is None or name in _OPTIONS:
        flag = _OPTIONS.get(name) or "--" + name.replace("_", "-")
        return flag if value is None else f"{flag} {value}"
    if value is None:
        return declared.cli_flags[0].split("/")[0]
    return declared.words(value == "true" if isinstance(declared.type, Flag) else value)


def in_words(value: Any) -> Any:
    """``value`` (a message, a notice, a result's strings) with the parameters the library names spelt as options."""
    errors = sys.modules.get("noa_core.errors")  # loaded wherever a message or notice of the library is
    if errors is None:
        return value
    if isinstance(value, str):
        return errors.spelt(value, spelling)
    if isinstance(value, dict):
        return {key: in_words(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [in_words(item) for item in value]
    return value


def one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    errors = sys.modules.get("noa_core.errors")
    text = exc.spelt(spelling) if errors is not None and isinstance(exc, errors.NoaError) else str(exc)
    return " ".join(text.split()) or type(exc).__name__


def echo(message: str, err: bool = False) -> None:
    """One message and a new line, on stdout (or stderr), at once (Typer is not imported for plain command
    lines: :mod:`noa_cli.parse`)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(message + "\n")
    stream.flush()


def error(message: str) -> None:
    echo(f"noa: error: {message}", err=True)


def notices(lines: list[str] | None, quiet: bool) -> None:
    if not quiet:
        for line in lines or ():
            echo(f"noa: note: {in_words(line)}", err=True)


def done(message: str, quiet: bool) -> None:
    if not quiet:
        echo(message, err=True)


def failure(src: Path, exc: BaseException) -> None:
    """One line for an input that failed; noa's messages already name the file."""
    line = one_line(exc)
    error(line if str(src) in line else f"{src}: {line}")


def result(outcome: FileResult, count: int, quiet: bool) -> None:
    """Report one pair of a batch of ``count`` as it ends: written (with its notices), skipped, or
    failed (a lone pair's failure is left to :func:`finish`, which raises it)."""
    if outcome.status == "written":
        notices(list(outcome.notices), quiet)
        done(f"wrote {outcome.dst}", quiet)
        _REPORTED.add(_output_key(outcome.dst))
    elif outcome.status == "skipped":  # not this run's to place (reported before any is written)
        _EXPECTED.pop(_output_key(outcome.dst), None)
        done(f"skipped {outcome.dst}: the output exists (--resume)", quiet)
    elif count > 1:
        failure(outcome.src, outcome.error)


def finish(results: Sequence[FileResult]) -> None:
    """Raise what failed: a lone pair's own error, or BatchFailed naming how many of the batch failed."""
    failed = [r for r in results if r.status == "failed"]
    if len(results) == 1 and failed:
        raise failed[0].error
    if failed:
        raise BatchFailed(f"{len(failed)} of {len(results)} inputs failed")


def _parser_outcome(exc: Exception) -> int | None:
    """The exit code of Typer's (click's) exits, aborts and usage errors, shown as click shows them; None for
    any other exception. Only a line Typer parsed can raise them: a plain one never imports Typer."""
    if "typer" not in sys.modules:
        return None
    import typer

    try:  # typer 0.26+ parses with a copy of click of its own: importing click as well would cost 50 ms a call
        from typer._click import exceptions as parser_errors
    except ImportError:  # an older typer parses with click itself
        from click import exceptions as parser_errors  # type: ignore[no-redef]
    if isinstance(exc, typer.Exit):
        return exc.exit_code
    if isinstance(exc, typer.Abort):
        error("aborted")
        return EXIT_INTERNAL
    if not isinstance(exc, (parser_errors.ClickException, getattr(typer, "TyperException",
                                                                  parser_errors.ClickException))):
        return None
    if isinstance(exc, parser_errors.NoSuchOption):  # one line with the closest options, as for commands
        error(_no_such_option(exc))
        return exc.exit_code
    if isinstance(exc, parser_errors.BadOptionUsage):  # '--force=1', '--lowpass' without its value
        error(f"{exc.option_name} takes no value" if "does not take a value" in exc.message
              else exc.format_message())
        return exc.exit_code
    # A value given but not convertible ('--factor abc'): one line, as any bad value; a missing one is
    # explained with the usage line, as every other usage error.
    bad_value = (isinstance(exc, (parser_errors.BadParameter, typer.BadParameter))
                 and not isinstance(exc, parser_errors.MissingParameter))
    show = getattr(exc, "show", None)
    if bad_value or show is None:
        error(exc.format_message())  # type: ignore[attr-defined]  # a click exception (checked above)
    else:
        show()
    return exc.exit_code  # type: ignore[attr-defined]


def _no_such_option(exc) -> str:
    """'no option --forse for noa copy; did you mean --force?' (click lists every possibility, unordered)."""
    import difflib

    command = exc.ctx.command_path if exc.ctx is not None else "noa"
    close = difflib.get_close_matches(exc.option_name, list(exc.possibilities or ()), n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"see {command} --help for its options"
    return f"no option {exc.option_name} for {command}; {hint}"


def guarded(call: Callable[[], object], debug: bool) -> int:
    """Run the CLI and turn every outcome into an exit code and at most one line on stderr."""
    try:
        with terminated_by_sigterm():
            result = call()
        return result if isinstance(result, int) else EXIT_OK
    except (BatchFailed, UnknownCommand, UsageError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return _stopped("interrupted", EXIT_INTERRUPTED)
    except Terminated:
        if _all_placed():  # the signal cut short only what followed the last placement: a success
            for key, name in _EXPECTED.items():
                if key not in _REPORTED:
                    done(f"wrote {name}", _QUIET[0])
            return EXIT_OK
        return _stopped("terminated", EXIT_TERMINATED)
    except Exception as exc:  # noqa: BLE001 - the last resort: never a bare traceback
        errors = sys.modules.get("noa_core.errors")  # loaded by whatever raised one (imported here, it could be
        if isinstance(exc, OSError) or (errors is not None and isinstance(exc, errors.NoaError)):  # cut short)
            error(one_line(exc))
            return EXIT_USAGE
        code = _parser_outcome(exc)
        if code is not None:
            return code
        if debug:
            traceback.print_exc()
        else:
            error(f"internal error: {type(exc).__name__}: {one_line(exc)} "
                  "(rerun with 'noa --debug ...' for the traceback)")
        return EXIT_INTERNAL


def leave(code: int, process: bool = True) -> NoReturn:
    """Exit with ``code``; after a signal at once, with the streams flushed: the signal may have landed
    while a worker pool's queue or lock was half-updated, and the interpreter's exit, which joins the
    pool's threads, would then wait forever. The work is abandoned anyway. ``process``: this is the
    process's command (not a call from Python): once it has succeeded, SIGTERM no longer kills it while
    the interpreter ends (its outputs are in place)."""
    if process and code == EXIT_OK:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if process and not _threads_running():
        # Nothing is left to wait for: the outputs are in place and no thread runs. Tearing the interpreter down
        # (every module cleared, three full collections) would cost a small command 7% of its instructions; the
        # exit functions (logging's flush, weakref finalizers that remove temporary files) still run.
        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:  # a closed pipe, a full disk: the interpreter's exit says so as it always has
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


def _threads_running() -> bool:
    """Whether a thread other than this one may still be working (the kernels' helper threads and the threads
    that read runs are idle between calls, not working)."""
    runtime = sys.modules.get("noa_core.kernels.runtime")  # loaded by whatever launched a kernel
    mapped = sys.modules.get("noa_core.io.mapped")  # loaded by whatever read a file
    return any(thread is not threading.current_thread()
               and not (runtime is not None and runtime.is_helper(thread))
               and not (mapped is not None and mapped.is_reader(thread)) for thread in threading.enumerate())


def _stopped(message: str, code: int) -> int:
    """Stopped by a signal: the ``with`` blocks have discarded their temporary files; remove any the
    signal caught while it was being created (before a block owned it)."""
    _remove_own_temporaries()
    error(message)
    return code


def _remove_own_temporaries() -> None:
    """Remove the temporary outputs this process still has open. A temporary output stays open (its
    lock) until it is committed or discarded, so an open one is this process's and unfinished. Imports
    nothing: a process that never loaded the writer made none (and a signal may have cut an import short)."""
    atomic = sys.modules.get("noa_core.io.atomic")
    if atomic is None:
        return
    with contextlib.suppress(OSError):  # no /proc (not Linux): the ``with`` blocks did what they could
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")  # a removed file reads 'PATH (deleted)'
                name = os.path.basename(target)
                if name.startswith(".") and name.endswith(atomic.TEMP_SUFFIX):
                    os.unlink(target)


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
