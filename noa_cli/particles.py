"""``noa particles SUB ...``: the work on particle tables themselves (:mod:`noa_core.particles`), a Typer
sub-app of ``noa``. The library names its parameters; here they are spelt as options. noa_core is imported
inside the commands so that ``noa --help`` starts fast."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from noa_cli import help_layout, report

app = typer.Typer(
    name="particles",
    cls=help_layout.Group,
    rich_markup_mode=help_layout.MARKUP,
    help="Work on particle tables (RELION STAR, cryoSPARC .cs): info, select, join, split, convert, check.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# The library's parameter names, as these commands spell them.
FLAGS = {"where": "--where", "rows": "--rows", "by": "--by", "parts": "--parts", "out": "--out",
         "layout": "--layout", "srcs": "IN", "dst": "OUT", "overwrite": "--force"}

Force = Annotated[bool, typer.Option("--force", "-f", help="Overwrite existing outputs.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")]
ProjectDir = Annotated[Path | None, typer.Option(
    "--project-dir", help="The folder the file's image paths are relative to (RELION's project folder; default: "
    "the current folder).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for pipelines.")]


@contextlib.contextmanager
def _spelt() -> Iterator[None]:
    """A bad parameter named as typed: ``--where``, not ``where``."""
    from noa_core.errors import ParameterError

    try:
        yield
    except ParameterError as exc:
        if exc.param not in FLAGS:
            raise
        raise ParameterError(exc.problem, FLAGS[exc.param]) from None


@app.command()
def info(
    file: Annotated[Path, typer.Argument(help="A particle file (.star, .cs).", metavar="FILE")],
    project_dir: ProjectDir = None,
    as_json: AsJson = False,
) -> None:
    """Show the rows, particles per optics group, class and micrograph, and the stacks missing.

    Example: noa particles info run_it025_data.star --project-dir /data/project
    """
    from noa_core.particles.info import info as described

    with _spelt():
        found = described(file, project_dir)
    if as_json:
        report.echo(json.dumps(found))
        return
    report.echo(f"{found['file']}: {found['layout']}, {found['rows']} rows, {found['columns']} columns")
    if found["optics_groups"] is not None:
        for group in found["optics_groups"]:
            name = f" ({group['name']})" if group["name"] else ""
            report.echo(f"  optics group {group['group']}{name}: {group['particles']} particles")
    if found["classes"] is not None:
        report.echo(f"  classes: {len(found['classes'])}: " + ", ".join(
            f"{k}: {n}" for k, n in found["classes"].items()))
    if found["micrographs"] is not None:
        per = sorted(found["micrographs"].values())
        report.echo(f"  micrographs: {len(per)}, {per[0]} to {per[-1]} particles each (median "
                    f"{per[len(per) // 2]})" if per else "  micrographs: 0")
    stacks = found["stacks"]
    missing = stacks["missing"]
    report.echo(f"  stacks: {stacks['count']}, {len(missing)} missing" + (
        ": " + ", ".join(missing[:5]) + (f", and {len(missing) - 5} more" if len(missing) > 5 else "")
        if missing else ""))


@app.command()
def select(
    src: Annotated[Path, typer.Argument(help="The particle file (.star, .cs).", metavar="IN")],
    dst: Annotated[Path, typer.Argument(help="The file of the rows chosen, of IN's kind.", metavar="OUT")],
    rows: Annotated[str | None, typer.Option(
        "--rows", help="Rows by number, from 0, ranges including both ends: 0-99,200,500- .")] = None,
    where: Annotated[str | None, typer.Option(
        "--where", help="A condition on columns: \"rlnClassNumber in (3, 5) and rlnDefocusU < 20000\" "
        "(==, !=, <, <=, >, >=, in (...), not in (...), and, or, not, parentheses; numbers, 'quoted text').")] = None,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Keep the rows chosen by --rows and/or --where (both: rows both choose); every other byte kept.

    Example: noa particles select run_it025_data.star class3.star --where "rlnClassNumber == 3"
    """
    from noa_core.particles.select import select as chosen

    with _spelt():
        result = chosen(src, dst, rows=rows, where=where, overwrite=force)
    report.done(f"wrote {result.path}: {result.kept} of {result.rows} rows", quiet)


@app.command()
def join(
    paths: Annotated[list[Path], typer.Argument(help="Two or more STAR files, then the output.", metavar="IN... OUT")],
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Join STAR files, their particles one file after another; identical optics groups merged, others renumbered.

    Each particle's rlnOpticsGroup follows its group's new number.

    Example: noa particles join job012.star job015.star joined.star
    """
    from noa_core.particles.join import join as joined

    if len(paths) < 3:
        raise report.UsageError(f"expected IN... OUT (two or more inputs, then the output), got {len(paths)} path(s)")
    with _spelt():
        result = joined(paths[:-1], paths[-1], overwrite=force)
    groups = f", {result.groups} optics group(s)" if result.groups else ""
    report.done(f"wrote {result.path}: {result.rows} rows{groups}", quiet)


@app.command()
def split(
    src: Annotated[Path, typer.Argument(help="The particle file (.star, .cs).", metavar="IN")],
    by: Annotated[str | None, typer.Option("--by", help="One file per value of this column "
                                              "(PREFIX_COLUMN_VALUE.star).")] = None,
    parts: Annotated[int | None, typer.Option("--parts", min=1, help="N files of consecutive rows, sizes "
                                                 "differing by at most one (PREFIX_split1.star ...).")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="A folder (the files keep IN's name as "
                                                "their prefix) or a prefix; default: IN's name beside it.")] = None,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Split a particle file by a column's values or into N parts; the outputs are placed together or not at all.

    Example: noa particles split run_it025_data.star --by rlnClassNumber --out classes/
    """
    from noa_core.particles.split import split as cut

    with _spelt():
        written = cut(src, out, by=by, parts=parts, overwrite=force)
    report.done(f"wrote {len(written)} files: " + ", ".join(f"{p.path.name} ({p.rows})" for p in written[:5])
                + (", ..." if len(written) > 5 else ""), quiet)


@app.command()
def convert(
    src: Annotated[Path, typer.Argument(help="The particle file (.star, .cs).", metavar="IN")],
    dst: Annotated[Path, typer.Argument(help="The output: .star or .cs.", metavar="OUT")],
    layout: Annotated[str | None, typer.Option(
        "--layout", help="The RELION layout of a STAR output: 3.1 (optics and particles tables; default from .cs) "
        "or 3.0 (one table).")] = None,
    project_dir: ProjectDir = None,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Convert .cs to STAR and back (pyem's csparc2star conventions), or RELION 3.0 to 3.1 and back.

    Example: noa particles convert P12_J34_particles.cs particles.star
    """
    from noa_core.particles.convert import convert as converted

    with _spelt():
        result = converted(src, dst, layout=layout, project_dir=project_dir, overwrite=force)
    report.done(f"wrote {result.path}: {result.rows} rows, {result.layout}", quiet)


@app.command()
def check(
    file: Annotated[Path, typer.Argument(help="A particle file (.star, .cs).", metavar="FILE")],
    project_dir: ProjectDir = None,
    quiet: Quiet = False,
) -> int:
    """Check every image: its stack exists, holds it, has the optics table's size; no stack named .mrc.

    RELION expects stacks named .mrcs (pyem#48). One line per problem; exit 1 when there are any, 0 when none.

    Example: noa particles check run_it025_data.star --project-dir /data/project
    """
    from noa_core.particles.check import check as checked

    with _spelt():
        problems = checked(file, project_dir)
    for line in problems:
        report.echo(line)
    if problems:
        return report.EXIT_DIFFERENT  # problems found: 1, as diff (bad input is 2)
    report.done(f"{file}: no problems", quiet)
    return report.EXIT_OK
