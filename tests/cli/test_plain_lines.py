"""The plain reader (noa_cli.parse) against Typer: on every command line it reads, the command receives
exactly the values Typer would give it; what it cannot read, Typer reads (help, errors, odd spellings);
every operation's own examples are read plainly, and such a call never imports Typer."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import EXAMPLE_MAP, NOA
from noa_cli import commands, parse
from noa_core import operations

try:
    from typer._click import exceptions as parser_errors
except ImportError:
    from click import exceptions as parser_errors

OPERATIONS = operations.names()


def typer_values(operation: operations.Operation, args: list[str]) -> dict[str, Any] | None:
    """The keywords Typer gives ``operation``'s command for ``args``; None where Typer refuses the line."""
    received: dict[str, Any] = {}
    kind = next(k for k in commands.BUILDERS if isinstance(operation, k))  # as commands.describe finds it
    original = commands.BUILDERS[kind]
    _, params = original(operation)
    try:  # the same parameters, with a command that keeps what it is given
        commands.BUILDERS[kind] = lambda op: (lambda **values: received.update(values), params)
        built = commands.build(operation)
    finally:
        commands.BUILDERS[kind] = original
    try:
        built.main(args=list(args), prog_name="noa", standalone_mode=False)
    except (parser_errors.ClickException, typer.Exit):
        return None
    return received


def plain_values(operation: operations.Operation, args: list[str]) -> dict[str, Any] | None:
    _, params = commands.describe(operation)
    return parse.read(params, list(args), text_first=commands.text_first(operation))


@pytest.mark.parametrize("name", OPERATIONS)
def test_every_example_is_read_plainly_as_typer_reads_it(name):
    operation = operations.get(name)
    for example in operation.examples:
        args = shlex.split(example)[2:]
        plain = plain_values(operation, args)
        assert plain is not None, example
        assert plain == typer_values(operation, args), example


# Words a user might type: paths, numbers, lists, negative numbers, text with '=' and minus signs.
WORDS = st.sampled_from(["a.mrc", "b.tif", "out", "-", "0,1,3,2", "2", "-3", "1.5", "x", "a=b", "-a", "--", "", "C"])


@st.composite
def command_lines(draw, name: str) -> list[str]:
    operation = operations.get(name)
    _, params = commands.describe(operation)
    args: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        choice = draw(st.integers(0, 2))
        if choice == 0 or not [p for p in params if p.flags]:
            args.append(draw(WORDS))
            continue
        param = draw(st.sampled_from([p for p in params if p.flags]))
        spelling = draw(st.sampled_from([s for flags in param.flags for s in flags.split("/")]))
        if param.value is bool:
            args.append(spelling + ("=1" if draw(st.integers(0, 9)) == 0 else ""))
        elif spelling.startswith("--") and draw(st.booleans()):
            args.append(f"{spelling}={draw(WORDS)}")
        else:
            args += [spelling, draw(WORDS)] if draw(st.integers(0, 9)) else [spelling]
    for _ in range(draw(st.integers(0, 3))):
        args.insert(draw(st.integers(0, len(args))), draw(WORDS))
    if draw(st.integers(0, 19)) == 0:
        args.insert(draw(st.integers(0, len(args))), draw(st.sampled_from(["-h", "--help", "--bogus", "-x"])))
    return args


@pytest.mark.parametrize("name", OPERATIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_what_the_plain_reader_reads_typer_reads_the_same(name, data):
    operation = operations.get(name)
    args = data.draw(command_lines(name))
    plain = plain_values(operation, args)
    if plain is not None:  # else Typer reads it (and explains what is wrong)
        assert plain == typer_values(operation, args), args


def test_a_plain_call_imports_no_typer_and_a_help_call_does(tmp_path):
    probe = ("import sys\nfrom noa_cli.main import run\ntry:\n    run(sys.argv[1:])\nexcept SystemExit as done:\n"
             "    print('typer' in sys.modules, done.code, file=sys.stderr)\n")
    out = str(tmp_path / "o.mrc")
    for args, typer_loaded in ((["stats", str(EXAMPLE_MAP)], False), (["copy", str(EXAMPLE_MAP), out, "-q"], False),
                               (["copy", "--help"], True), (["copy", str(EXAMPLE_MAP), "--bogus"], True)):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert done.stderr.splitlines()[-1] == f"{typer_loaded} {2 if '--bogus' in args else 0}", (args, done.stderr)
    assert Path(out).is_file()


def test_typer_checks_no_path_beyond_what_the_plain_reader_checks():
    """Issue 38 item 18: Typer refused an existing output the caller cannot read ("Path 'out.mrc' is not
    readable") where the plain reader replaced it with -f: neither reader checks paths; the command does. Both make
    a path of a word as remote.as_path does (issue 46: a URL kept as typed)."""
    from noa_cli import commands
    from noa_core import operations

    made = []
    for operation in operations.operations():
        for param in commands.build(operation).params:
            assert not hasattr(param.type, "readable"), (operation.name, param.name)  # no click Path type: no check
            if getattr(param.type, "func", None) is commands.path:
                made.append((operation.name, param.name))
    assert len(made) > len(operations.names())
    assert commands.path("s3://b/a//k.mrc").url == "s3://b/a//k.mrc"
    shown = subprocess.run([*NOA, "copy", "--help"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "200"}).stdout
    assert "IN OUT" in shown and "as_path" not in shown  # the parser's function is never shown as a type
