"""``check``: whether a particle file can be read as its images: every stack it names exists and is an MRC
stack, every section named lies within its stack, the stacks' images have the size the optics table says
(rlnImageSize), and no RELION stack is named ``.mrc`` (RELION reads ``N@name.mrc`` as a section of a volume
in some programs and refuses it in others; stacks are ``.mrcs``: pyem#48). One line per problem."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from noa_core.errors import MissingFileError, NoaError
from noa_core.io.particles import FolderProject, stack_header, stack_runs
from noa_core.particles.table import Particles


def check(path: str | os.PathLike, project_dir: str | os.PathLike | None = None) -> list[str]:
    """The problems of ``path``'s rows (stacks relative to ``project_dir``, the current folder by default), one
    line each, in row order of the stacks; empty when there are none."""
    particles = Particles(path)
    table = particles.table
    paths, sections = table.image_names()
    names, stack_of = stack_runs(paths)
    rows_of = np.argsort(stack_of, kind="stable")
    starts = np.searchsorted(stack_of[rows_of], np.arange(len(names) + 1))
    boxes = table.boxes()
    project = FolderProject(project_dir)
    problems: list[str] = []
    for index, raw in enumerate(names.tolist()):
        name = raw.decode(errors="surrogateescape")
        rows = rows_of[starts[index]:starts[index + 1]]
        first = int(rows[0])
        where = table.where(first, table.image_field)
        if particles.is_star and Path(name).suffix.lower() == ".mrc":
            problems.append(f"{where}: {name} is named .mrc; RELION reads stacks named .mrcs (rename the file and "
                            "its rows, pyem#48)")
        try:
            stack = stack_header(project, name, where)
        except MissingFileError:
            problems.append(f"{where}: {name}: no such file ({rows.size} row(s) name it)")
            continue
        except NoaError as exc:
            problems.append(str(exc))
            continue
        for row in rows[sections[rows] >= stack.sections]:
            problems.append(f"{table.where(int(row), table.index_field)}: section {sections[row] + table.first_index}"
                            f" of {name}, which holds {stack.sections}")
        if boxes is not None:
            wrong = rows[(boxes[rows] != stack.width) | (boxes[rows] != stack.height)]
            for box in np.unique(boxes[wrong]).tolist():
                some = wrong[boxes[wrong] == box]
                problems.append(f"{table.where(int(some[0]), table.box_field)}: {box}, but {name} holds "
                                f"{stack.width} x {stack.height} images ({some.size} row(s))")
    return problems
