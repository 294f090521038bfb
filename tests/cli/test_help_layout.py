"""noa's help in click's plain layout (:mod:`noa_cli.help_layout`): every command listed with its first
sentence whole, and typer's rich layer (rich's markdown, pygments: half of ``noa --help``'s time) never
imported for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO
from noa_core import operations

SHOW_HELP = """
import sys
from noa_cli.app import app
app(args=sys.argv[1:], prog_name="noa", standalone_mode=False)
print("RICH LAYER", "typer.rich_utils" in sys.modules, "rich.markdown" in sys.modules)
"""


def _help(*args: str) -> str:
    result = subprocess.run([sys.executable, "-c", SHOW_HELP, *args], capture_output=True, text=True, cwd=REPO,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _listed(text: str) -> dict[str, str]:
    """The Commands section of a help text: each command's name and its help, its wrapped lines joined."""
    rows: dict[str, str] = {}
    name = ""
    for line in text.split("Commands:\n", 1)[1].splitlines():
        if line.startswith("RICH LAYER"):
            break
        if line[2:3].strip():  # a command's first line: its name at column 2
            name, _, words = line.strip().partition(" ")
            rows[name] = words.strip()
        elif line.strip():
            rows[name] += " " + line.strip()
    return rows


@pytest.mark.parametrize("args", [("--help",), ("particles", "--help")], ids=["noa", "particles"])
def test_each_command_has_its_first_sentence_whole(args):
    listed = _listed(_help(*args))
    assert listed and all(text.endswith(".") or text.endswith(")") for text in listed.values()), listed
    assert not any(text.endswith("...") for text in listed.values())
    if args == ("--help",):
        assert set(operations.names()) <= set(listed) and {"warmup", "serve", "particles"} <= set(listed)
    else:
        assert {"info", "select", "join", "split", "convert", "check"} <= set(listed)


def test_help_does_not_import_typers_rich_layer():
    for args in (("--help",), ("copy", "--help")):
        assert _help(*args).rstrip().endswith("RICH LAYER False False"), args
