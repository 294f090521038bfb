"""``split``: a particle file cut into several, by the value of a column (one file per class, per micrograph, per
optics group) or into N parts of consecutive rows whose sizes differ by at most one. Each output keeps every
other byte of the input (its optics table whole); all are placed together or none."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noa_core.errors import ParameterError
from noa_core.io import atomic, star
from noa_core.particles.table import Particles, check_output

_UNSAFE = re.compile(rb"[^A-Za-z0-9._-]+")  # what a value may not bring into a file name


@dataclass(frozen=True)
class Part:
    """One output of a split: its path, the value its rows share (None for --parts), its row count."""

    path: Path
    value: str | None
    rows: int


def prefix_of(src: Path, out: str | os.PathLike | None) -> Path:
    """Where the outputs go, less their endings: beside ``src`` under its name (``out`` None), in the folder
    ``out`` under ``src``'s name, or ``out`` itself as the prefix."""
    if out is None:
        return src.with_suffix("")
    out_text = os.fspath(out)
    if out_text.endswith(os.sep) or Path(out).is_dir():
        return Path(out) / src.stem
    return Path(out)


def _groups(particles: Particles, by: str) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """The distinct values of column ``by`` (sorted), the rows in value order (file order within a value) and
    where each value's rows start."""
    values = particles.text(by, "by")
    distinct, inverse = np.unique(values, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    starts = np.searchsorted(inverse[order], np.arange(distinct.size + 1))
    return distinct.tolist(), order, starts


def split(src: str | os.PathLike, out: str | os.PathLike | None = None, *, by: str | None = None,
          parts: int | None = None, overwrite: bool = False) -> list[Part]:
    """Write the rows of ``src`` into one file per value of the column ``by`` (``PREFIX_<by>_<value>``), or
    into ``parts`` files of consecutive rows (``PREFIX_split1`` ..., as RELION names them), PREFIX from
    :func:`prefix_of`; the outputs are of ``src``'s kind."""
    if (by is None) == (parts is None):
        raise ParameterError("give a column to split by or a number of parts (one of the two)", "by")
    particles = Particles(src)
    prefix = prefix_of(particles.path, out)
    suffix = particles.path.suffix
    if not prefix.parent.is_dir():
        raise ParameterError(f"{prefix.parent}: no such folder", "out")
    planned: list[tuple[Path, str | None, np.ndarray]] = []
    if by is not None:
        values, order, starts = _groups(particles, by)
        named: dict[Path, bytes] = {}
        for k, value in enumerate(values):
            safe = _UNSAFE.sub(b"_", value).strip(b"_") or b"_"
            path = Path(f"{prefix}_{by}_{safe.decode()}{suffix}")
            if path in named:
                raise ParameterError(f"the values {named[path].decode(errors='replace')!r} and "
                                     f"{value.decode(errors='replace')!r} of {by} make one file name, {path.name}",
                                     "by")
            named[path] = value
            planned.append((path, value.decode(errors="replace"), np.sort(order[starts[k]:starts[k + 1]])))
    elif parts is not None:
        if parts < 1 or parts > max(particles.rows, 1):
            raise ParameterError(f"{parts}: between 1 and the file's {particles.rows} rows", "parts")
        for k, rows in enumerate(np.array_split(np.arange(particles.rows), parts)):
            planned.append((Path(f"{prefix}_split{k + 1}{suffix}"), None, rows))
    paths = [check_output(path, [particles.path], overwrite) for path, _, _ in planned]
    outputs: list[atomic.TemporaryOutput] = []
    try:
        for path, (_, _, rows) in zip(paths, planned):  # one output's text in memory at a time
            outputs.append(star.prepared(path, particles.pieces(rows), overwrite))
    except BaseException:
        for output in outputs:
            output.abort()
        raise
    atomic.commit_together(outputs)
    return [Part(path, value, int(rows.size)) for path, (_, value, rows) in zip(paths, planned)]
