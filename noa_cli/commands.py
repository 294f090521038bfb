"""``noa NAME`` for every registered operation, built from its declaration when first asked for.

A writing operation becomes ``noa NAME IN OUT [options]`` (or several inputs with ``--out-dir``,
``--resume``, ``--scheduler``); one over several inputs ``noa NAME [ARGS] INPUTS... -o OUT`` (or
``--out-dir`` with ``--with`` for the shared inputs); a reporting one ``noa NAME FILES... [--json]``;
one writing several files per input ``noa NAME IN... --out-dir DIR``; one editing its input in place
``noa NAME FILES... [--dry-run] [--json]``.
Parameters follow their declared types; nothing here knows any particular operation.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from noa_cli import report
from noa_core.errors import NoaError, ParameterError
from noa_core.operations import FileTask, Flag, Integer, Integers, Operation, Param, Real, Reals

# -- options every writing command has (the driver's, not the operation's) -------------------------

DRIVER_OPTIONS: dict[str, tuple[Any, Any]] = {
    "out_dir": (Annotated[Optional[Path], typer.Option(
        "--out-dir", help="Treat every input as a batch and write each result into this folder under its own "
        "name.")], None),
    "force": (Annotated[bool, typer.Option("--force", "-f", help="Overwrite existing outputs.")], False),
    "resume": (Annotated[bool, typer.Option(
        "--resume", help="Skip inputs whose output exists: outputs are renamed into place when complete, so an "
        "existing one is finished (rerun an interrupted batch with it).")], False),
    "scheduler": (Annotated[Optional[str], typer.Option(
        "--scheduler", help="Run on Dask (the dask extra of noa): 'local' starts worker processes on this machine, "
        "tcp://HOST:PORT uses a running scheduler (paths must be the same on its workers). Several inputs run as "
        "parallel tasks; one large input is split into tasks that each write their own tiles of the output.")],
        None),
    "workers": (Annotated[Optional[int], typer.Option(
        "--workers", min=1, help="With --scheduler local: worker processes (default one per core).")], None),
    "quiet": (Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors; no progress bar.")],
              False),
}
TO = (Annotated[Optional[str], typer.Option(
    "--to", help="With --out-dir: output format by extension (mrc, tif).")], None)
AS_JSON = (Annotated[bool, typer.Option("--json", help="Print JSON for pipelines.")], False)


def _annotation(param: Param) -> tuple[Any, Any]:
    """``(typer annotation, default)`` of one declared parameter."""
    kind = param.type
    default = ... if param.required else param.default
    if param.argument:
        return Annotated[str, typer.Argument(help=param.help, show_default=False)], default
    if isinstance(kind, Flag):
        if param.default is None:  # true, false or not given: an --x/--no-x pair
            return Annotated[Optional[bool], typer.Option(*param.cli_flags, help=param.help)], None
        return Annotated[bool, typer.Option(*param.cli_flags, help=param.help)], default
    # Numbers and lists ('0,1,3,2') are read as text and parsed by the declaration, which checks their ranges,
    # as on every door: one line that names the option, whatever the parser's version says.
    if isinstance(kind, (Integer, Real)):
        metavar = "INTEGER" if isinstance(kind, Integer) else "FLOAT"
        shown = f"{default:g}" if isinstance(default, float) else default  # 2.0 shown as 2, as typed
        return Annotated[Optional[str], typer.Option(*param.cli_flags, help=param.help, metavar=metavar)], \
            (str(shown) if isinstance(default, (int, float)) else default)
    return Annotated[Optional[str], typer.Option(*param.cli_flags, help=param.help)], default


def option_values(operation: Operation, given: dict[str, Any]) -> dict[str, Any]:
    """The CLI's values as the declaration's types (lists written '0,1,3,2' parsed)."""
    values = {}
    for param in operation.params_for("cli"):
        value = given[param.name]
        if param.argument and isinstance(value, str):
            value = value.strip()  # see _text_first
        if isinstance(param.type, (Integer, Integers, Real, Reals)) and isinstance(value, str):
            value = param.type.parse(param.name, value)
        values[param.name] = value
    return values


@contextlib.contextmanager
def flags_in_errors(operation: Operation) -> Iterator[None]:
    """A bad parameter named as the user typed it: ``--axes``, not ``axes``."""
    try:
        yield
    except ParameterError as exc:
        param = next((p for p in operation.params if p.name == exc.param), None)
        if param is None or param.argument:
            raise
        raise ParameterError(exc.problem, param.cli_flags[0].split("/")[0]) from None


def _help(operation: Operation) -> str:
    examples = "\n\n".join(f"Example: {line}" for line in operation.examples)
    return "\n\n".join(part for part in (operation.summary, operation.details, examples) if part)


def _pairs(paths: list[Path], out_dir: Optional[Path], suffix: Optional[str] = None) -> list[tuple[Path, Path]]:
    """(input, output) pairs: IN OUT, or every path into --out-dir (keeping names, maybe a new suffix)."""
    if out_dir is None:
        if len(paths) != 2:
            raise report.UsageError(f"expected IN OUT (2 paths), got {len(paths)}; use --out-dir for several inputs")
        return [(paths[0], paths[1])]
    if not paths:
        raise report.UsageError("--out-dir needs at least one input")
    if suffix is None:
        return [(p, out_dir / p.name) for p in paths]
    from noa_core.io.formats import strip_image_suffix

    return [(p, out_dir / (strip_image_suffix(p.name) + suffix)) for p in paths]


def _make_folder(out_dir: Path) -> None:
    """``--out-dir`` created when missing (its parent must exist): one error for one cause, not one per input."""
    from noa_core.errors import MissingFileError, NotAFileError

    if out_dir.is_dir():
        return
    if out_dir.exists():
        raise NotAFileError(f"{out_dir}: --out-dir names a file, not a folder")
    if not out_dir.parent.is_dir():
        raise MissingFileError(f"{out_dir}: --out-dir's parent folder {out_dir.parent} does not exist")
    out_dir.mkdir()


def _execute(task: FileTask, pairs: list[tuple[Path, Path]], *, force: bool, resume: bool,
             scheduler: Optional[str], workers: Optional[int], quiet: bool) -> None:
    """Write every pair with ``task``: here, or on Dask with --scheduler; report each as it ends."""
    if resume and force:
        raise report.UsageError("--resume skips existing outputs and --force replaces them; choose one")
    if workers is not None and scheduler != "local":
        raise report.UsageError("--workers sizes the cluster of --scheduler local")
    from noa_core import run

    where = "" if scheduler is None else f" on {scheduler}"
    with run.driver(scheduler, workers=workers) as driver:
        with report.progress(f"noa {task.name}: {len(pairs)} file(s){where}", quiet) as progress:
            results = driver.run_batch(task, pairs, overwrite=force, resume=resume, progress=progress,
                                       on_result=lambda result: report.result(result, len(pairs), quiet))
    report.finish(results)


def _writer(operation: Operation) -> tuple[Callable[..., None], list[tuple[str, Any, Any]]]:
    """The command function of a writing operation, and its parameters."""
    several = operation.max_inputs > 1
    params = operation.params_for("cli")
    arguments = [(p.name, *_annotation(p)) for p in params if p.argument]
    options = [(p.name, *_annotation(p)) for p in params if not p.argument]
    if several:
        named = any(p.argument for p in params)  # an expression names its inputs a, b, c, ...
        inputs = [("inputs", Annotated[list[Path], typer.Argument(
            help=("Input files, named a, b, c, ... in order" if named else "Input files, in order")
            + "; with --out-dir, each is the first in turn.", show_default=False)], ...),
            ("output", Annotated[Optional[Path], typer.Option("--output", "-o", help="Output file.")], None),
            ("others", Annotated[Optional[list[Path]], typer.Option(
                "--with", help=("Inputs b, c, ... shared" if named else "Inputs after the first, shared")
                + " by every file of the batch (repeatable, in order).")], None)]
    else:
        inputs = [("paths", Annotated[list[Path], typer.Argument(
            help="IN OUT, or several inputs with --out-dir.", show_default=False)], ...)]
    query = operation.query
    if query is not None:  # answered with no file: IN OUT may be left out
        inputs = [(name, annotation, None if default is ... else default) for name, annotation, default in inputs]
        inputs.append((query.param.name, Annotated[Optional[str], typer.Option(
            *query.param.cli_flags, help=query.param.help + " (No files needed.)")], None))
    extra = [("to", *TO)] if operation.chooses_format else []
    driver = [(name, *spec) for name, spec in DRIVER_OPTIONS.items()]

    def command(**given: Any) -> None:
        if query is not None and given[query.param.name] is not None:
            if given.get("paths") or given.get("inputs"):
                raise report.UsageError(f"{query.param.cli_flags[0]} reads no file; give it without input files")
            try:
                answer = query.answer(query.param.check(given[query.param.name]))
            except ParameterError as exc:  # named as typed: the option asked, whatever the library called it
                raise ParameterError(exc.problem, query.param.cli_flags[0]) from None
            typer.echo(query.text(answer))
            return
        if operation.show is not None and given.get("terminal"):  # drawn here, no output file
            _show(operation, given)
            return
        suffix = None if given.get("to") is None else "." + given["to"].lstrip(".")
        if suffix is None and operation.text_output is not None:  # a table instead of an image
            suffix = (operation.text_output(given) or (None,))[0]
        if several:
            if (given["output"] is None) == (given["out_dir"] is None):
                raise report.UsageError("give either --output FILE or --out-dir FOLDER")
            inputs_, shared = list(given["inputs"] or []), list(given["others"] or [])
            if given["output"] is not None:
                pairs, shared = [(inputs_[0], given["output"])], inputs_[1:] + shared
            else:
                pairs = _pairs(inputs_, given["out_dir"], suffix)
        else:
            shared, pairs = [], _pairs(given["paths"] or [], given["out_dir"], suffix)
        with flags_in_errors(operation):  # also around the run: a plan may find a parameter wrong for its input
            task = operation.task(option_values(operation, given), shared=shared)
            if given.get("out_dir") is not None:  # once the options are known good: no folder for a refused call
                _make_folder(given["out_dir"])
            _execute(task, pairs, force=given["force"], resume=given["resume"], scheduler=given["scheduler"],
                     workers=given["workers"], quiet=given["quiet"])

    return command, arguments + inputs + options + extra + driver


def _show(operation: Operation, given: dict[str, Any]) -> None:
    """``noa NAME IN... --terminal``: each input's output drawn on this terminal, sized to it (written as is:
    typer.echo would strip the colour codes when stdout is a pipe, as under ssh -T or tmux's capture)."""
    import shutil
    import sys

    if given.get("out_dir") is not None:
        raise report.UsageError("--terminal draws on this terminal; it takes no --out-dir")
    assert operation.show is not None
    columns, lines = shutil.get_terminal_size()
    with flags_in_errors(operation):
        options = operation.options(option_values(operation, given))
        for path in given["paths"]:
            sys.stdout.write(operation.show(path, options, columns, lines))


def _reporter(operation: Operation) -> tuple[Callable[..., None], list[tuple[str, Any, Any]]]:
    """The command function of a reporting operation, and its parameters: a report on each file, or one report
    on all of them where it reads several inputs."""
    several = operation.max_inputs > 1
    files = ("files", Annotated[list[Path], typer.Argument(
        help="Input files, in order." if several else "MRC or TIFF files.", show_default=False)], ...)
    params = [(p.name, *_annotation(p)) for p in operation.params_for("cli")]

    def command(**given: Any) -> None:
        with flags_in_errors(operation):
            options = operation.options(option_values(operation, given))
        assert operation.text is not None
        with flags_in_errors(operation):  # the report may find an option wrong for its inputs
            results = ([operation.run_report(given["files"], options)] if several
                       else [operation.run_report(path, options) for path in given["files"]])
        if given["as_json"]:
            typer.echo(json.dumps(results if len(results) > 1 else results[0], indent=2))
        else:
            typer.echo("\n\n".join(operation.text(result) for result in results))

    return command, [files, *params, ("as_json", *AS_JSON)]


def _several_writer(operation: Operation) -> tuple[Callable[..., None], list[tuple[str, Any, Any]]]:
    """The command function of an operation writing several files per input (``plans``), and its parameters:
    ``noa NAME IN... --out-dir DIR``; each input's outputs are all written, or none."""
    params = operation.params_for("cli")
    options = [(p.name, *_annotation(p)) for p in params if not p.argument]
    arguments = [(p.name, *_annotation(p)) for p in params if p.argument]
    inputs = ("paths", Annotated[list[Path], typer.Argument(
        help="Input file(s); each one's outputs go into --out-dir, named after it.", show_default=False)], ...)
    out_dir = ("out_dir", Annotated[Path, typer.Option(
        "--out-dir", help="Folder for the outputs (created when missing): each input's outputs are all written "
        "there, or none of them.")], ...)
    force, quiet = (("force", *DRIVER_OPTIONS["force"]), ("quiet", *DRIVER_OPTIONS["quiet"]))

    def command(**given: Any) -> None:
        from noa_core.run.local import write_several

        with flags_in_errors(operation):
            task = operation.task(option_values(operation, given))
        paths, failed = list(given["paths"]), 0
        for src in paths:
            try:
                with report.progress(f"noa {operation.name}: {src}", given["quiet"]) as progress, \
                        flags_in_errors(operation):
                    outputs, notices = write_several(task, src, given["out_dir"], overwrite=given["force"],
                                                     progress=progress)
            except Exception as exc:
                if len(paths) == 1 or not isinstance(exc, (NoaError, OSError)):
                    raise
                report.failure(src, exc)
                failed += 1
                continue
            report.notices(notices, given["quiet"])
            report.done(f"wrote {len(outputs)} file(s) into {given['out_dir']}: {outputs[0].name} ... "
                        f"{outputs[-1].name}" if len(outputs) > 1 else f"wrote {outputs[0]}", given["quiet"])
        if failed:
            raise report.BatchFailed(f"{failed} of {len(paths)} inputs failed")

    return command, arguments + [inputs, out_dir] + options + [force, quiet]


def _editor(operation: Operation) -> tuple[Callable[..., None], list[tuple[str, Any, Any]]]:
    """The command function of an operation that changes its input in place (``edit``), and its parameters:
    ``noa NAME FILE... [options] [--dry-run] [--json]`` prints each change (old and new values)."""
    files = ("files", Annotated[list[Path], typer.Argument(help="Files to change in place.", show_default=False)],
             ...)
    params = [(p.name, *_annotation(p)) for p in operation.params_for("cli")]
    dry_run = ("dry_run", Annotated[bool, typer.Option(
        "--dry-run", help="Print what would change; change nothing.")], False)

    def command(**given: Any) -> None:
        files = given["files"]
        with flags_in_errors(operation):
            options = operation.options(option_values(operation, given))
            assert operation.edit is not None and operation.text is not None
            if len(files) == 1:  # a lone file's failure is its own error line
                results = [operation.edit(files[0], options, given["dry_run"])]
            else:  # each file's change is reported, and a bad file does not hide or stop the others
                results = []
                for path in files:
                    try:
                        results.append(operation.edit(path, options, given["dry_run"]))
                    except ParameterError:
                        raise  # the request's, not the file's: one line naming the option
                    except (NoaError, OSError) as exc:
                        report.failure(path, exc)
        if given["as_json"]:
            typer.echo(json.dumps(results if len(files) > 1 else results[0], indent=2))
        elif results:
            typer.echo("\n\n".join(operation.text(result) for result in results))
        if len(results) < len(files):
            failed = len(files) - len(results)
            raise report.BatchFailed(f"{failed} of {len(files)} files failed")

    return command, [files, *params, dry_run, ("as_json", *AS_JSON)]


BUILDERS = {"plan": _writer, "plans": _several_writer, "report": _reporter, "edit": _editor}


def build(operation: Operation) -> typer.core.TyperCommand:
    """The ``noa NAME`` command of ``operation``."""
    command, params = BUILDERS[operation.kind](operation)
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                           default=inspect.Parameter.empty if default is ... else default)
         for name, annotation, default in params])
    command.__annotations__ = {name: annotation for name, annotation, _ in params}
    single = typer.Typer(add_completion=False, context_settings={"help_option_names": ["-h", "--help"]})
    single.command(operation.name, help=_help(operation))(command)
    built = typer.main.get_command(single)
    if any(p.argument for p in operation.params_for("cli")):
        _text_first(built)
    return built


def _text_first(command: typer.core.TyperCommand) -> None:
    """Let the first argument, free text (an expression), begin with a minus, as ``noa ewise "-a" ...``:
    a first word that is no option of the command is text, not an unknown option. (Marked with a leading
    space, which :func:`option_values` strips, so that the parser takes it for an argument.)"""
    known = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
    parse_args = command.parse_args

    def parse(ctx, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and not args[0].startswith("--") and args[0] not in known:
            args = [" " + args[0], *args[1:]]
        return parse_args(ctx, args)

    command.parse_args = parse  # type: ignore[method-assign]
