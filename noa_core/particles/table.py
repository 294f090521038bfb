"""A particle file as the table commands see it: its rows, its columns by name (as text or numbers), and the
file written back with some of its rows, in one home for STAR and ``.cs`` files."""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np

from noa_core.errors import OutputIsInputError, ParameterError
from noa_core.io import atomic, star
from noa_core.io.particle_files import CsTable, ParticleError, StarTable, npy_bytes, open_table


class Particles:
    """The rows of one particle file (a RELION STAR's particles loop, a cryoSPARC ``.cs`` array)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.table: StarTable | CsTable = cast(StarTable | CsTable, open_table(path))
        self.path = self.table.path

    @property
    def is_star(self) -> bool:
        return isinstance(self.table, StarTable)

    @property
    def rows(self) -> int:
        return self.table.rows

    @property
    def labels(self) -> tuple[str, ...]:
        """The columns (STAR labels; the ``.cs`` fields that hold one value per row)."""
        if isinstance(self.table, StarTable):
            return self.table.block.labels
        dtype = self.table.array.dtype
        return tuple(name for name in dtype.names or () if dtype[name].shape == ())

    @property
    def where(self) -> str:
        """How messages name the table: the file and, for a STAR, the block."""
        table = self.table
        return f"{self.path}: data_{table.block.name}" if isinstance(table, StarTable) else str(self.path)

    def require(self, label: str, param: str) -> None:
        """A ParameterError for ``param`` naming the closest columns where ``label`` is not one."""
        if label in self.labels:
            return
        close = difflib.get_close_matches(label, self.labels, n=3, cutoff=0.5)
        hint = f"; the closest: {', '.join(close)}" if close else f"; it has {', '.join(self.labels[:12])}" + \
            (", ..." if len(self.labels) > 12 else "")
        raise ParameterError(f"{self.where} has no column {label}{hint}", param)

    def text(self, label: str, param: str) -> np.ndarray:
        """Each row's value of ``label`` as the file writes it (``S`` array)."""
        self.require(label, param)
        if isinstance(self.table, StarTable):
            return self.table.text.values(self.table.block, label)
        return star.star_values(np.asarray(self.table.array[label]))

    def numbers(self, label: str, param: str) -> np.ndarray:
        """Each row's value of ``label`` as a number; a ParticleError naming the first row that is not one."""
        self.require(label, param)
        if isinstance(self.table, StarTable):
            return self.table.text.numbers(self.table.block, label)
        values = np.asarray(self.table.array[label])
        if values.dtype.kind not in "iufb":
            raise ParticleError(f"{self.table.where(0, label)}: holds text, not numbers")
        return values.astype(np.float64)

    def pieces(self, rows: np.ndarray) -> list[bytes | np.ndarray]:
        """The file's bytes with only ``rows`` (0-based, in this order) of its table: every other byte kept."""
        if isinstance(self.table, StarTable):
            return self.table.text.edited({self.table.block.name: star.LoopEdit(rows=rows)})
        return [npy_bytes(self.table.array[rows])]


def check_output(path: str | os.PathLike, inputs: Sequence[Path], overwrite: bool) -> Path:
    """The output path, refused where it exists (without ``overwrite``) or is one of the ``inputs``."""
    path = atomic.check_output(path, overwrite)
    for source in inputs:
        if path.exists() and source.exists() and path.samefile(source):
            raise OutputIsInputError(f"{path}: the output is the input file {source}; write to a new file")
    return path


def star_table(path: str | os.PathLike) -> StarTable:
    """A RELION particle STAR; a ParticleError where ``path`` is a ``.cs`` file."""
    table = open_table(path)
    if not isinstance(table, StarTable):
        raise ParticleError(f"{path}: a cryoSPARC file; this takes RELION STAR files (convert it to STAR first)")
    return table

