"""``select``: the rows of a particle file chosen by ranges and/or a condition on its columns, written as a new
file whose every other byte (other columns, blocks, comments, RELION 3.1's optics table) is the input's."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noa_core.errors import ParameterError
from noa_core.io import star
from noa_core.particles import condition as conditions
from noa_core.particles.table import Particles, check_output


@dataclass(frozen=True)
class Selected:
    """What a selection wrote: the output, and how many of how many rows it kept."""

    path: Path
    kept: int
    rows: int


def chosen_rows(particles: Particles, rows: str | None = None, where: str | None = None) -> np.ndarray:
    """The 0-based rows of ``particles`` that ``rows`` (ranges) and ``where`` (a condition) both choose, in the
    file's order."""
    if rows is None and where is None:
        raise ParameterError("choose rows by ranges or a condition (or both)", "where")
    keep = np.ones(particles.rows, bool)
    if rows is not None:
        keep &= conditions.parse_rows(rows, particles.rows)
    if where is not None:
        condition = conditions.parse(where)
        for column in conditions.columns(condition):
            particles.require(column, "where")
        keep &= conditions.evaluate(condition, functools.cache(lambda name: particles.numbers(name, "where")),
                                    functools.cache(lambda name: particles.text(name, "where")))
    return np.flatnonzero(keep)


def select(src: str | os.PathLike, dst: str | os.PathLike, *, rows: str | None = None, where: str | None = None,
           overwrite: bool = False) -> Selected:
    """Write the rows of ``src`` that ``rows`` and ``where`` choose (both: rows both choose) to ``dst``, of the
    same kind (STAR or ``.cs``)."""
    particles = Particles(src)
    if Path(dst).suffix.lower() != particles.path.suffix.lower():
        raise ParameterError(f"{dst}: the output is written as its input, a {particles.path.suffix} file "
                             "(noa particles convert changes kinds)", "dst")
    path = check_output(dst, [particles.path], overwrite)
    kept = chosen_rows(particles, rows, where)
    star.write(path, particles.pieces(kept), overwrite=overwrite)
    return Selected(path, int(kept.size), particles.rows)
