"""The command lines most calls use, read without Typer.

Importing Typer and building a command from its declaration costs ~45 ms, a third of a small file's whole
call (issue 27). So every command's parameters are described here as :class:`CliParam`\\ s, free of any
parser: Typer builds the full command from them (:func:`noa_cli.commands.build`: help, completion, every
usage error), and :func:`read` reads a command line of plain options and arguments into the values Typer
would pass the command, or answers None for anything else (help, a missing or unknown option, a value the
parser would refuse, ``--``), which Typer then reads and explains. Tests hold the two readers equal on
generated command lines of every command.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noa_core.io.remote import as_path

HELP = ("-h", "--help")


@dataclass(frozen=True)
class CliParam:
    """One parameter of a command function, as the command line spells it.

    Attributes:
        name: the command function's keyword.
        flags: an option's spellings (``("--force", "-f")``; ``"--as-stack/--as-volume"`` a true/false pair);
            none for a positional argument.
        value: what a word becomes: ``str``, ``Path`` (:func:`noa_core.io.remote.as_path`'s: a URL kept as
            typed), ``int`` or ``bool`` (a switch, no word).
        many: a list: an argument takes every word left, an option may repeat.
        default: the value when not given; ``...`` when it must be given.
        help: one sentence for ``--help``.
        metavar: the value's name in ``--help`` and the usage line (IN OUT; numbers read as text show INTEGER,
            FLOAT).
        low: the least integer accepted.
    """

    name: str
    flags: tuple[str, ...] = ()
    value: type = str
    many: bool = False
    default: Any = ...
    help: str = ""
    metavar: str | None = None
    low: int | None = None


def read(params: list[CliParam], args: list[str], text_first: bool = False) -> dict[str, Any] | None:
    """The command function's keywords for ``args``, as Typer would give them; None where Typer must read the
    line. ``text_first``: the first word, free text, may begin with a minus (kept marked with a leading
    space, as :func:`noa_cli.commands.build` marks it for Typer)."""
    switches: dict[str, tuple[CliParam, Any]] = {}
    for param in params:
        for spelling in param.flags:
            on, _, off = spelling.partition("/")
            switches[on] = (param, True)
            if off:
                switches[off] = (param, False)
    given: dict[str, Any] = {}
    words: list[str] = []
    rest = list(args)
    while rest:
        first, arg = len(rest) == len(args), rest.pop(0)
        if arg in HELP or arg == "--":
            return None
        if text_first and first and arg.startswith("-") and not arg.startswith("--") and arg not in switches:
            words.append(" " + arg)
            continue
        if not arg.startswith("-") or arg == "-":
            words.append(arg)
            continue
        name, equals, text = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in switches:
            return None
        param, switch = switches[name]
        if param.value is bool:
            if equals:
                return None
            value: Any = switch
        else:
            if not equals:
                if not rest:
                    return None
                text = rest.pop(0)
            value = _word(param, text)
            if value is None:
                return None
        if param.many:
            given.setdefault(param.name, []).append(value)
        else:
            given[param.name] = value
    for param in (p for p in params if not p.flags):
        if param.many:
            taken, words = words, []
            if taken:
                given[param.name] = [_word(param, word) for word in taken]
        elif words:
            given[param.name] = _word(param, words.pop(0))
    if words:
        return None
    for param in params:
        if param.name not in given:
            if param.default is ...:
                return None
            given[param.name] = param.default
    return given


def _word(param: CliParam, text: str) -> Any:
    """One word as ``param``'s value; None where the parser would refuse it."""
    if param.value is int:
        try:
            number = int(text)
        except ValueError:
            return None
        return None if param.low is not None and number < param.low else number
    if param.value is Path:
        return as_path(text)
    return param.value(text)
