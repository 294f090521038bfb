"""The ``noa`` command's entry point. A plain command line of an operation (``noa stats x.mrc``, ``noa copy
a.mrc b.mrc -f``) is read without Typer (:mod:`noa_cli.parse`) and run at once; every other line (help,
completion, a usage error, ``warmup``, ``serve``) goes to the Typer app (:mod:`noa_cli.app`). Every outcome
becomes an exit code and at most one line (:mod:`noa_cli.report`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from noa_cli import report


def run(argv: list[str] | None = None) -> None:
    """Console-script entry: exit 0 on success, 2 on bad usage or input, 1 on internal errors, 130 on
    Ctrl-C and 143 on SIGTERM (temporary outputs removed in both cases)."""
    args = sys.argv[1:] if argv is None else argv
    if argv is None:
        # noa's kernels are numba's; NumPy's BLAS only multiplies small matrices, and its threads, started with NumPy
        # whatever the call, spin on the other cores a while (6% of a copy's CPU on 2 cores)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    report.leave(report.guarded(lambda: _call(args), debug="--debug" in args), process=argv is None)


def _call(args: list[str]) -> object:
    command = _plain(args)
    if command is not None:
        return command()
    from noa_cli.app import app

    return app(args=args, prog_name="noa", standalone_mode=False)


def _plain(args: list[str]) -> Callable[[], int | None] | None:
    """The operation's command with its values, where ``args`` is a plain line of one operation; else None."""
    if not args or args[0].startswith("-") or "_NOA_COMPLETE" in os.environ:
        return None
    from noa_core import operations

    operation = operations.find(args[0])
    if operation is None:
        return None
    from noa_cli import commands, parse

    command, params = commands.describe(operation)
    given = parse.read(params, args[1:], text_first=commands.text_first(operation))
    return None if given is None else (lambda: command(**given))


if __name__ == "__main__":
    run()
