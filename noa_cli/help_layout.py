"""How ``noa --help`` reads: click's plain layout, not typer's rich one. Plain help stays readable at 80
columns (rich's boxes squeeze each option's text into a narrow column), and leaving out typer's rich layer,
whose imports (rich's markdown, pygments) were half of ``noa --help``'s 0.32 s, keeps help fast."""

from __future__ import annotations

import sys

import typer
from typer.core import TyperGroup

MARKUP = None
"""typer's ``rich_markup_mode`` for every noa app: None is click's plain help."""


class Group(TyperGroup):
    """A group whose list of commands gives each command's first sentence whole, wrapped, where click cuts
    it to what fits on the command's line."""

    def format_commands(self, ctx: typer.Context, formatter: typer.core._click.HelpFormatter) -> None:  # type: ignore[override]  # typer's Context
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
