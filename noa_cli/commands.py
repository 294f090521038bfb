"""``noa NAME`` for every registered operation, built from its declaration when first asked for.

A writing operation becomes ``noa NAME IN OUT [options]`` (or several inputs with ``--out-dir``,
``--resume``, ``--scheduler``); one over several inputs ``noa NAME [ARGS] INPUTS... -o OUT`` (or
``--out-dir`` with ``--with`` for the shared inputs); a reporting one ``noa NAME FILES... [--json]``;
one writing several files per input ``noa NAME IN... --out-dir DIR``; one editing its input in place
``noa NAME FILES... [--dry-run] [--json]``.
Parameters follow their declared types; nothing here knows any particular operation. Each command is a
function and its parameters (:class:`noa_cli.parse.CliParam`); Typer builds the command from them only when
the plain reader (:func:`noa_cli.parse.read`) cannot read the command line alone.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from noa_cli import report
from noa_cli.parse import CliParam
from noa_core import run
from noa_core.errors import NoaError, ParameterError
from noa_core.io.remote import as_path, check_folder, remote_path
from noa_core.operations import (
    Edits,
    FileTask,
    Flag,
    Integer,
    Integers,
    Operation,
    Param,
    Real,
    Reals,
    Reports,
    Writes,
    WritesSeveral,
)

if TYPE_CHECKING:
    import typer

# -- options every writing command has (the driver's, not the operation's) -------------------------

DRIVER_OPTIONS = (
    CliParam("out_dir", ("--out-dir",), Path, default=None, help="Treat every input as a batch and write each "
             "result into this folder under its own name."),
    CliParam("force", ("--force", "-f"), bool, default=False, help="Overwrite existing outputs."),
    CliParam("resume", ("--resume",), bool, default=False, help="Skip inputs whose output exists: outputs are "
             "renamed into place when complete, so an existing one is finished (rerun an interrupted batch with "
             "it). noa extract also keeps each micrograph's stacks as they are written and a rerun keeps those it "
             "finds."),
    CliParam("scheduler", ("--scheduler",), default=None, help="Run on Dask (the dask extra of noa): 'local' starts "
             "worker processes on this machine, tcp://HOST:PORT uses a running scheduler (paths must be the same on "
             "its workers). Several inputs run as parallel tasks; one large input is split into tasks that each "
             "write their own tiles of the output."),
    CliParam("workers", ("--workers",), int, default=None, low=1,
             help="With --scheduler local: worker processes (default one per core)."),
    CliParam("quiet", ("--quiet", "-q"), bool, default=False, help="Print nothing but errors; no progress bar."),
)
DRIVER = {param.name: param for param in DRIVER_OPTIONS}
TO = CliParam("to", ("--to",), default=None, help="With --out-dir: output format by extension (mrc, tif).")
AS_JSON = CliParam("as_json", ("--json",), bool, default=False, help="Print JSON for pipelines.")


def _cli_param(param: Param) -> CliParam:
    """One declared parameter on the command line."""
    kind = param.type
    default = ... if param.required else param.default
    if param.argument:
        return CliParam(param.name, (), str, default=default, help=param.help, metavar=param.name.upper())
    if isinstance(kind, Flag):  # default None: true, false or not given, an --x/--no-x pair
        return CliParam(param.name, param.cli_flags, bool, default=default, help=param.help)
    # Numbers and lists ('0,1,3,2') are read as text and parsed by the declaration, which checks their ranges,
    # as on every door: one line that names the option, whatever the parser's version says.
    if isinstance(kind, (Integer, Real)):
        shown = f"{default:g}" if isinstance(default, float) else default  # 2.0 shown as 2, as typed
        return CliParam(param.name, param.cli_flags, default=str(shown) if isinstance(default, (int, float))
                        else default, help=param.help, metavar="INTEGER" if isinstance(kind, Integer) else "FLOAT")
    return CliParam(param.name, param.cli_flags, default=default, help=param.help)


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
        if exc.among:
            flags = {p.name: p.cli_flags[0] for p in operation.params}
            raise ParameterError(exc.problem, among=tuple(flags.get(name, name) for name in exc.among)) from None
        param = next((p for p in operation.params if p.name == exc.param), None)
        if param is None or param.argument:
            raise
        raise ParameterError(exc.problem, param.cli_flags[0].split("/")[0]) from None


def _help(operation: Operation) -> str:
    examples = "\n\n".join(f"Example: {line}" for line in operation.examples)
    return "\n\n".join(part for part in (operation.summary, operation.details, examples) if part)


def _pairs(paths: list[Path], out_dir: Path | None, suffix: str | None = None) -> list[tuple[Path, Path]]:
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


@contextlib.contextmanager
def _output_folder(out_dir: Path | None) -> Iterator[None]:
    """``--out-dir`` made with its missing parents, as ``mkdir -p`` (and RELION for its outputs); a run that
    fails leaves none of the folders it made empty behind. On object storage, its bucket checked instead. One error
    for one cause, not one per input."""
    from noa_core.errors import NotAFileError

    made: list[Path] = []
    url = None if out_dir is None else remote_path(out_dir)
    if url is not None:  # a prefix of keys, nothing to make: its bucket checked once for every output
        check_folder(url)
    elif out_dir is not None and not out_dir.is_dir():
        for folder in (*reversed(out_dir.parents), out_dir):
            if folder.exists() and not folder.is_dir():
                raise NotAFileError(f"{out_dir}: --out-dir names a file, not a folder" if folder == out_dir
                                    else f"{out_dir}: --out-dir's parent {folder} is a file, not a folder")
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
    try:
        yield
    except BaseException:
        for folder in reversed(made):
            with contextlib.suppress(OSError):  # only when empty: what the run wrote stays
                folder.rmdir()
        raise


def _execute(task: FileTask, pairs: list[tuple[Path, Path]], *, force: bool, resume: bool,
             scheduler: str | None, workers: int | None, quiet: bool) -> None:
    """Write every pair with ``task``: here, or on Dask with --scheduler; report each as it ends."""
    if resume and force:
        raise report.UsageError("--resume skips existing outputs and --force replaces them; choose one")
    if workers is not None and scheduler != "local":
        raise report.UsageError("--workers sizes the cluster of --scheduler local")
    where = "" if scheduler is None else f" on {scheduler}"
    if scheduler is None:  # placed by this process (Dask's workers place theirs); those --resume skips are let go
        report.expect_outputs([dst for _, dst in pairs], quiet)
    with (run.driver(scheduler, workers=workers) as driver,
          report.progress(f"noa {task.name}: {len(pairs)} file(s){where}", quiet) as progress):
        results = driver.run_batch(task, pairs, overwrite=force, resume=resume, progress=progress,
                                   on_result=lambda result: report.result(result, len(pairs), quiet))
    report.finish(results)


def _writer(operation: Writes) -> tuple[Callable[..., None], list[CliParam]]:
    """The command function of a writing operation, and its parameters."""
    several = operation.max_inputs > 1
    params = [_cli_param(p) for p in operation.params_for("cli")]
    arguments = [p for p in params if not p.flags]
    options = [p for p in params if p.flags]
    if several:
        named = bool(arguments)  # an expression names its inputs a, b, c, ...
        inputs = [CliParam("inputs", (), Path, many=True, metavar="INPUTS...", help=(
            "Input files, named a, b, c, ... in order" if named else "Input files, in order")
            + "; with --out-dir, each is the first in turn."),
            CliParam("output", ("--output", "-o"), Path, default=None, help="Output file."),
            CliParam("others", ("--with",), Path, many=True, default=None, help=(
                "Inputs b, c, ... shared" if named else "Inputs after the first, shared")
                + " by every file of the batch (repeatable, in order).")]
    else:
        inputs = [CliParam("paths", (), Path, many=True, metavar="IN OUT",
                           help="IN OUT, or several inputs with --out-dir.")]
    query = operation.query
    if query is not None:  # answered with no file: IN OUT may be left out
        inputs = [replace(p, default=None) if p.default is ... else p for p in inputs]
        inputs.append(CliParam(query.param.name, query.param.cli_flags, default=None,
                               help=query.param.help + " (No files needed.)"))
    extra = [TO] if operation.chooses_format else []

    def command(**given: Any) -> None:
        if query is not None and given[query.param.name] is not None:
            if given.get("paths") or given.get("inputs"):
                raise report.UsageError(f"{query.param.cli_flags[0]} reads no file; give it without input files")
            try:
                answer = query.answer(query.param.check(given[query.param.name]))
            except ParameterError as exc:  # named as typed: the option asked, whatever the library called it
                raise ParameterError(exc.problem, query.param.cli_flags[0]) from None
            report.echo(query.text(answer))
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
            with _output_folder(given.get("out_dir")):  # once the options are known good: no folder for a refused call
                _execute(task, pairs, force=given["force"], resume=given["resume"], scheduler=given["scheduler"],
                         workers=given["workers"], quiet=given["quiet"])

    return command, arguments + inputs + options + extra + list(DRIVER_OPTIONS)


def _show(operation: Writes, given: dict[str, Any]) -> None:
    """``noa NAME IN... --terminal``: each input's output drawn on this terminal, sized to it (written as is:
    click's echo would strip the colour codes when stdout is a pipe, as under ssh -T or tmux's capture)."""
    import shutil
    import sys

    if given.get("out_dir") is not None:
        raise report.UsageError("--terminal draws on this terminal; it takes no --out-dir")
    assert operation.show is not None
    columns, lines = shutil.get_terminal_size()
    with flags_in_errors(operation):
        options = operation.options(option_values(operation, given))
        for path in given["paths"]:
            text, notices = operation.show(path, options, columns, lines)
            sys.stdout.writelines(text)
            sys.stdout.flush()  # the picture, then what a written one would have said
            report.notices(notices, given["quiet"])


def _reporter(operation: Reports) -> tuple[Callable[..., int | None], list[CliParam]]:
    """The command function of a reporting operation, and its parameters: a report on each file, or one report
    on all of them where it reads several inputs."""
    several = operation.max_inputs > 1
    files = CliParam("files", (), Path, many=True, metavar="FILES...",
                     help="Input files, in order." if several else "MRC or TIFF files.")
    params = [_cli_param(p) for p in operation.params_for("cli")]

    def command(**given: Any) -> int | None:
        with flags_in_errors(operation):
            options = operation.options(option_values(operation, given))
        assert operation.text is not None
        if several:
            with flags_in_errors(operation):  # the report may find an option wrong for its inputs
                results = [run.execute(operation, given["files"], None, options)]
            report.echo(_json(results[0]) if given["as_json"] else report.in_words(operation.text(results[0])))
            return _differs(operation, results)
        paths = given["files"]
        results, failed = [], 0
        for path in paths:  # every file reported, a bad one in one line: `noa info *.mrc` gives the overview
            try:
                with flags_in_errors(operation):
                    result = run.execute(operation, [path], None, options)
            except (NoaError, OSError) as exc:
                if len(paths) == 1:
                    raise
                failed += 1
                report.failure(path, exc)
                results.append({"path": str(path), "error": report.one_line(exc)})
                continue
            results.append(result)
            if not given["as_json"]:
                report.echo(("\n" if len(results) > 1 else "") + report.in_words(operation.text(result)))
        if given["as_json"]:
            report.echo(_json(results if len(results) > 1 else results[0]))
        if failed:
            raise report.BatchFailed(f"{failed} of {len(paths)} inputs failed")
        return _differs(operation, results)

    return command, [files, *params, AS_JSON]


def _differs(operation: Reports, results: list[dict]) -> int | None:
    """Exit 1 where a check found an input inconsistent (as diff); None: the command succeeded."""
    found = operation.differs is not None and any(operation.differs(r) for r in results if "error" not in r)
    return report.EXIT_DIFFERENT if found else None


def _json(value: Any) -> str:
    """A result as JSON for pipelines, the parameters the library names in it spelt as options."""
    import json

    return json.dumps(report.in_words(value), indent=2)


def _several_writer(operation: WritesSeveral) -> tuple[Callable[..., None], list[CliParam]]:
    """The command function of an operation writing several files per input (``plans``), and its parameters:
    ``noa NAME IN... --out-dir DIR``; each input's outputs are all written, or none."""
    params = [_cli_param(p) for p in operation.params_for("cli")]
    options = [p for p in params if p.flags]
    arguments = [p for p in params if not p.flags]
    inputs = CliParam("paths", (), Path, many=True, metavar="INPUTS...",
                      help="Input file(s); each one's outputs go into --out-dir, named after it.")
    out_dir = CliParam("out_dir", ("--out-dir",), Path, help="Folder for the outputs (created when missing): each "
                       "input's outputs are all written there, or none of them.")
    force, quiet = DRIVER["force"], DRIVER["quiet"]

    def command(**given: Any) -> None:
        with flags_in_errors(operation):
            options = operation.options(option_values(operation, given))
        paths, failed = list(given["paths"]), 0
        with _output_folder(given["out_dir"]):
            for src in paths:
                try:
                    with report.progress(f"noa {operation.name}: {src}", given["quiet"]) as progress, \
                            flags_in_errors(operation):
                        written = run.execute(operation, [src], given["out_dir"], options, overwrite=given["force"],
                                          progress=progress)
                    outputs, notices = [as_path(p) for p in written["outputs"]], written["notices"]
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


def _editor(operation: Edits) -> tuple[Callable[..., None], list[CliParam]]:
    """The command function of an operation that changes its input in place (``edit``), and its parameters:
    ``noa NAME FILE... [options] [--dry-run] [--json]`` prints each change (old and new values)."""
    files = CliParam("files", (), Path, many=True, metavar="FILES...", help="Files to change in place.")
    params = [_cli_param(p) for p in operation.params_for("cli")]
    dry_run = CliParam("dry_run", ("--dry-run",), bool, default=False, help="Print what would change; change nothing.")

    def command(**given: Any) -> None:
        files = given["files"]
        with flags_in_errors(operation):
            options = operation.options(option_values(operation, given))
            if len(files) == 1:  # a lone file's failure is its own error line
                results = [run.execute(operation, [files[0]], None, options, dry_run=given["dry_run"])]
            else:  # each file's change is reported, and a bad file does not hide or stop the others
                results = []
                for path in files:
                    try:
                        results.append(run.execute(operation, [path], None, options, dry_run=given["dry_run"]))
                    except ParameterError:
                        raise  # the request's, not the file's: one line naming the option
                    except (NoaError, OSError) as exc:
                        report.failure(path, exc)
        if given["as_json"]:
            report.echo(_json(results if len(files) > 1 else results[0]))
        elif results:
            report.echo(report.in_words("\n\n".join(operation.text(result) for result in results)))
        if len(results) < len(files):
            failed = len(files) - len(results)
            raise report.BatchFailed(f"{failed} of {len(files)} files failed")

    return command, [files, *params, dry_run, AS_JSON]


# The command of each kind of operation: IN OUT (or --out-dir), INPUTS... --out-dir, FILES..., FILES... --dry-run.
BUILDERS: dict[type[Operation], Callable[[Any], tuple[Callable[..., int | None], list[CliParam]]]] = {
    Writes: _writer, WritesSeveral: _several_writer, Reports: _reporter, Edits: _editor}


def describe(operation: Operation) -> tuple[Callable[..., int | None], list[CliParam]]:
    """The command function of ``operation`` and its parameters (what Typer builds ``noa NAME`` from, and what
    :func:`noa_cli.parse.read` reads a plain command line with)."""
    kind = next(kind for kind in BUILDERS if isinstance(operation, kind))
    return BUILDERS[kind](operation)


def text_first(operation: Operation) -> bool:
    """Whether the command's first word is free text (an expression) that may begin with a minus."""
    return any(p.argument for p in operation.params_for("cli"))


def build(operation: Operation) -> typer.core.TyperCommand:
    """The ``noa NAME`` command of ``operation``, built with Typer."""
    import typer  # here: a plain command line never loads Typer (noa_cli.main)

    from noa_cli import help_layout

    command, params = describe(operation)
    annotations = {p.name: _typer_annotation(p) for p in params}
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotations[p.name],
                           default=inspect.Parameter.empty if p.default is ... else p.default)
         for p in params])
    command.__annotations__ = annotations
    single = typer.Typer(add_completion=False, rich_markup_mode=help_layout.MARKUP,
                         context_settings={"help_option_names": ["-h", "--help"]})
    single.command(operation.name, help=_help(operation))(command)
    built = cast(typer.core.TyperCommand, typer.main.get_command(single))  # the app's one command
    if text_first(operation):
        _text_first(built)
    return built


def path(word: str) -> Path:
    """A path word as noa takes it (:func:`~noa_core.io.remote.as_path`); Typer's help names its type by this
    function's name: ``<path>``."""
    return as_path(word)


def _typer_annotation(param: CliParam) -> Any:
    """``Annotated[type, typer.Argument or typer.Option]`` of one parameter."""
    from typing import Annotated

    import typer

    kind: Any = list[param.value] if param.many else param.value  # type: ignore[name-defined]  # made at run time
    extra: dict[str, Any] = {"metavar": param.metavar} if param.metavar else {}
    if param.value is Path:  # as the plain reader: a URL kept as typed; nothing checked (an output need not exist)
        extra["parser"] = path
        extra.setdefault("metavar", "PATH")
    if not param.flags:
        return Annotated[kind, typer.Argument(help=param.help, show_default=False, **extra)]
    if param.low is not None:
        extra["min"] = param.low
    return Annotated[kind | None if param.default is None else kind,
                     typer.Option(*param.flags, help=param.help, **extra)]


def _text_first(command: typer.core.TyperCommand) -> None:
    """Let the first argument, free text (an expression), begin with a minus, as ``noa ewise "-a" ...``:
    a first word that is no option of the command is text, not an unknown option. (Marked with a leading
    space, which :func:`option_values` strips, so that the parser takes it for an argument.)"""
    known = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
    parse_args = command.parse_args

    def parse(ctx, args: list[str]) -> list[str]:
        if (args and args[0].startswith("-") and not args[0].startswith("--") and args[0] not in known
                and args[0] not in ctx.help_option_names):
            args = [" " + args[0], *args[1:]]
        return parse_args(ctx, args)

    command.parse_args = parse  # type: ignore[method-assign]
