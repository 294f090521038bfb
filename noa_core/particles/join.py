"""``join``: several RELION particle STARs as one. The particles' rows follow one another in the order of the
files; with RELION 3.1 optics tables, identical optics rows (every value but the group number) become one group,
the others new groups numbered after them (a name already taken gets the new number appended), and each
particle's rlnOpticsGroup is rewritten where its number changed. The first file gives the labels, comments and
every other block; every value not renumbered is copied byte for byte."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from noa_core.errors import ParameterError
from noa_core.io import star
from noa_core.io.particle_files import ParticleError, StarTable
from noa_core.particles.table import check_output, star_table

GROUP, GROUP_NAME = "rlnOpticsGroup", "rlnOpticsGroupName"


@dataclass(frozen=True)
class Joined:
    """What a join wrote: the output, its rows, and its optics groups (0 for RELION 3.0 files)."""

    path: Path
    rows: int
    groups: int


def _same_labels(first: StarTable, other: StarTable, block: star.Block, first_block: star.Block) -> None:
    if block.labels == first_block.labels:
        return
    missing = [label for label in first_block.labels if label not in block.labels]
    extra = [label for label in block.labels if label not in first_block.labels]
    what = (f"lacks {', '.join(missing)}" if missing else f"has {', '.join(extra)}, which {first.path} has not"
            if extra else "has the same columns in another order")
    raise ParticleError(f"{other.path}: data_{block.name} {what} ({first.path} gives the columns of the output); "
                        "join files of one layout")


@dataclass
class _Groups:
    """The output's optics groups as they are met: each distinct optics row once, numbered from 1."""

    numbers: dict[tuple[bytes, ...], int]
    names: set[bytes]

    def number(self, key: tuple[bytes, ...]) -> tuple[int, bool]:
        """The group of the optics row ``key``, and whether it is new."""
        if key in self.numbers:
            return self.numbers[key], False
        self.numbers[key] = len(self.numbers) + 1
        return self.numbers[key], True


def _optics_pieces(tables: Sequence[StarTable]) -> tuple[list[np.ndarray], list[dict[int, int] | None], int]:
    """The rows of the output's optics table, file by file, and each file's old group -> new group."""
    first = cast(star.Block, tables[0].optics)  # every file has one: join checked
    groups = _Groups({}, set())
    bodies: list[np.ndarray] = []
    renumbered: list[dict[int, int] | None] = []
    name_column = first.labels.index(GROUP_NAME) if GROUP_NAME in first.labels else None
    for table in tables:
        optics = cast(star.Block, table.optics)
        _same_labels(tables[0], table, optics, first)
        text = table.text
        old = text.numbers(optics, GROUP, np.int64)
        values = [text.values(optics, label) for label in optics.labels if label != GROUP]
        keys = [tuple(column[i] for column in values) for i in range(optics.rows)]
        mapping: dict[int, int] = {}
        new_rows, new_numbers, new_names = [], [], []
        for row, key in enumerate(keys):
            number, new = groups.number(key)
            mapping[int(old[row])] = number
            if new:
                new_rows.append(row)
                new_numbers.append(number)
                if name_column is not None:
                    name = text.values(optics, GROUP_NAME, np.array([row]))[0]
                    new_names.append(name if name not in groups.names else name + b"_%d" % number)
                    groups.names.add(new_names[-1])
        replace = {GROUP: np.array(new_numbers, np.int64)}
        if name_column is not None:
            replace[GROUP_NAME] = np.array(new_names, "S")
        if new_rows:
            bodies.append(text.loop_rows(optics, star.LoopEdit(rows=np.array(new_rows), replace=replace)))
        renumbered.append(mapping)
    return bodies, renumbered, len(groups.numbers)


def _particle_rows(table: StarTable, mapping: dict[int, int] | None) -> np.ndarray:
    """The particles' rows of ``table``, each rlnOpticsGroup renumbered by ``mapping`` where one changes."""
    block, text = table.block, table.text
    if mapping is None or all(old == new for old, new in mapping.items()):
        return text.loop_rows(block, star.LoopEdit())
    if GROUP not in block.labels:
        raise ParticleError(f"{table.path}: data_{block.name} has no {GROUP} column, and its optics groups are "
                            "renumbered in the output")
    old = text.numbers(block, GROUP, np.int64)
    keys = np.array(sorted(mapping), np.int64)
    at = np.minimum(np.searchsorted(keys, old), keys.size - 1)
    unknown = np.flatnonzero(keys[at] != old)
    if unknown.size:
        row = int(unknown[0])
        raise ParticleError(f"{table.where(row, GROUP)}: group {old[row]} is not in data_optics")
    new = np.array([mapping[int(k)] for k in keys], np.int64)[at]
    return text.loop_rows(block, star.LoopEdit(replace={GROUP: new}))


def join(srcs: Sequence[str | os.PathLike], dst: str | os.PathLike, *, overwrite: bool = False) -> Joined:
    """Write the particles of every STAR of ``srcs``, in order, to ``dst`` (optics groups merged)."""
    if len(srcs) < 2:
        raise ParameterError(f"{len(srcs)} file(s): join takes two or more", "srcs")
    tables = [star_table(src) for src in srcs]
    path = check_output(dst, [t.path for t in tables], overwrite)
    first = tables[0]
    with_optics = [t.optics is not None for t in tables]
    if any(with_optics) and not all(with_optics):
        odd = tables[with_optics.index(not with_optics[0])]
        raise ParticleError(f"{odd.path}: RELION {'3.1' if odd.optics is not None else '3.0'} layout, "
                            f"{first.path} RELION {'3.1' if first.optics is not None else '3.0'}: join files of one "
                            "layout (noa particles convert changes it)")
    for table in tables[1:]:
        _same_labels(first, table, table.block, first.block)
    if first.optics is not None:
        optics_rows, mappings, groups = _optics_pieces(tables)
    else:
        optics_rows, mappings, groups = [], [None for _ in tables], 0
    pieces: list[bytes | np.ndarray] = []
    data = first.text.data
    for block in first.text:
        if block.name == first.block.name:
            pieces += [data[block.start:block.rows_start],
                       *(_particle_rows(t, m) for t, m in zip(tables, mappings)), data[block.rows_stop:block.stop]]
        elif first.optics is not None and block.name == first.optics.name:
            pieces += [data[block.start:block.rows_start], *optics_rows, data[block.rows_stop:block.stop]]
        else:
            pieces.append(data[block.start:block.stop])
    star.write(path, pieces, overwrite=overwrite)
    return Joined(path, sum(t.rows for t in tables), groups)
