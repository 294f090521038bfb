"""The tables of particle files: RELION STAR (3.0, one block; 3.1 and later, optics and particles) and cryoSPARC
``.cs`` (a NumPy structured array), each read as the images its rows name (:class:`Table`) and written back with
new images: the rows kept, the image names and what the images' new pixel size and box change, every other
value as it was.

One class per kind of file (:class:`StarTable`, :class:`CsTable`) answers the same questions: how many rows,
which image each names, its pixel size and box, and the text or array of the file written with new images.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.lib import format as npy

from noa_core.errors import FileFormatError, MissingFileError
from noa_core.io import star

STAR_SUFFIX, CS_SUFFIX = ".star", ".cs"
SUFFIXES = (STAR_SUFFIX, CS_SUFFIX)
IMAGE_NAME = "rlnImageName"
_DETECTOR_PIXEL = "rlnDetectorPixelSize / rlnMagnification"  # RELION 3.0's pixel size: the one over the other (µm)
# RELION 3.0 shifts are in pixels; they scale with the pixel size (3.1's rlnOriginXAngst and Y are in Å)
PIXEL_SHIFTS = ("rlnOriginX", "rlnOriginY", "rlnOriginZ")


class ParticleError(FileFormatError):
    """A particle file whose rows name images that are not there or do not agree: the message names the file,
    the row and the field."""


def split_names(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RELION's ``N@path`` values (``S`` array) -> (the index text before ``@``, the path after it). A value
    without ``@`` names a whole file, its one image (index 1)."""
    at = np.strings.find(values, b"@")
    has = at > 0
    index_text = np.where(has, np.strings.slice(values, 0, np.maximum(at, 0)), b"1")
    paths = np.where(has, np.strings.slice(values, np.maximum(at, 0) + 1, None), values)
    return index_text, paths


@dataclass(frozen=True)
class NewImages:
    """What a particle file written with new images says of them.

    Attributes:
        rows: the source rows the output's images come from, in output order (0-based).
        names: each output row's image as the file names it (the stack's path, relative to the project folder
            or absolute).
        sections: each output row's 0-based section in its stack.
        pixel_size: the new images' pixel size in Å (0: unknown, the values are kept).
        box: the new images' size in pixels (square).
        pixel_scale: new pixel size over old (1: unchanged): shifts in pixels scale by its inverse.
    """

    rows: np.ndarray
    names: np.ndarray
    sections: np.ndarray
    pixel_size: float
    box: int
    pixel_scale: float


class Table(Protocol):
    """The rows of one particle file."""

    path: Path
    kind: str  # 'STAR' or 'cryoSPARC'
    image_field: str  # the field naming each row's stack, as messages name it
    index_field: str  # the field naming each row's section
    box_field: str  # the field saying the images' size
    first_index: int  # how the file counts sections: 1 (RELION) or 0 (cryoSPARC)

    @property
    def rows(self) -> int: ...

    def where(self, row: int | None, field: str | None = None) -> str:
        """How a message names row ``row`` (0-based; None: the table itself) and ``field`` of this file."""

    def image_names(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's stack path (``S`` array, as written, less cryoSPARC's ``>``) and 0-based section."""

    def pixel_sizes(self) -> np.ndarray:
        """Each row's image pixel size in Å (0 where the file does not say)."""

    @property
    def pixel_field(self) -> str:
        """The field :meth:`pixel_sizes` reads, as messages name it."""

    def boxes(self) -> np.ndarray | None:
        """Each row's image size in pixels, where the file says it (else None)."""

    def groups(self) -> np.ndarray | None:
        """Each row's optics group (RELION 3.1+) or exposure group, where the file has them (else None)."""

    def written(self, new: NewImages) -> list[bytes | np.ndarray]:
        """The bytes of this file written with ``new`` images, as pieces to write one after another."""

    def columns(self, row: int) -> dict[str, Any]:
        """Every value of row ``row`` (0-based, within the file's rows) by its field, JSON-ready: RELION's the
        particle loop's columns then those of the row's optics group (text as written), cryoSPARC's every field
        (sub-arrays as lists)."""


# -- RELION STAR ---------------------------------------------------------------------------------------


class StarTable:
    """A RELION particle STAR: the rows of the loop that has ``rlnImageName`` (``data_particles`` in 3.1 and
    later, with ``data_optics``; the one block of 3.0)."""

    kind = "STAR"
    image_field = index_field = IMAGE_NAME
    box_field = "rlnImageSize"
    first_index = 1

    def __init__(self, text: star.Star) -> None:
        self.text = text
        self.path = text.path
        candidates = [b for b in text if b.loop and IMAGE_NAME in b.labels]
        named = [b for b in candidates if b.name == "particles"]
        if not candidates:
            loops = ", ".join(f"data_{b.name}" for b in text if b.loop) or "no loop"
            raise ParticleError(f"{self.path}: no loop has an {IMAGE_NAME} column ({loops}): not a particle file "
                                "(a micrograph STAR names rlnMicrographName)")
        self.block = (named or candidates)[0]
        self.optics = text.block("optics") if "optics" in text and text.block("optics").loop else None

    @property
    def rows(self) -> int:
        return self.block.rows

    def where(self, row: int | None, field: str | None = None) -> str:
        return f"{self.path}: data_{self.block.name}" + ("" if row is None else f", row {row + 1}") + \
            (f", {field}" if field else "")

    def image_names(self) -> tuple[np.ndarray, np.ndarray]:
        values = self.text.values(self.block, IMAGE_NAME)
        index_text, paths = split_names(values)
        try:
            index = index_text.astype(np.int64)
        except ValueError:
            bad = next(i for i, v in enumerate(index_text.tolist()) if not v.isdigit())
            raise ParticleError(f"{self.where(bad, IMAGE_NAME)}: {values[bad].decode(errors='replace')!r} is not "
                                "N@stack (N counts sections from 1)") from None
        low = np.flatnonzero(index < 1)
        if low.size:
            raise ParticleError(f"{self.where(int(low[0]), IMAGE_NAME)}: {values[low[0]].decode(errors='replace')!r}: "
                                "sections are counted from 1")
        return paths, index - 1

    def optics_row(self) -> np.ndarray | None:
        """Each particle's row in the optics table (by rlnOpticsGroup), or None without one."""
        if self.optics is None or "rlnOpticsGroup" not in self.optics.labels:
            return None
        if "rlnOpticsGroup" not in self.block.labels:
            if self.optics.rows == 1:
                return np.zeros(self.rows, np.int64)
            raise ParticleError(f"{self.path}: data_{self.block.name} has no rlnOpticsGroup column and "
                                f"data_optics has {self.optics.rows} groups")
        groups = self.text.numbers(self.optics, "rlnOpticsGroup", np.int64)
        mine = self.text.numbers(self.block, "rlnOpticsGroup", np.int64)
        order = np.argsort(groups)
        at = np.searchsorted(groups[order], mine)
        at = np.minimum(at, len(groups) - 1)
        unknown = np.flatnonzero(groups[order][at] != mine)
        if unknown.size:
            row = int(unknown[0])
            raise ParticleError(f"{self.where(row, 'rlnOpticsGroup')}: group {mine[row]} is not in data_optics "
                                f"(groups {', '.join(map(str, sorted(groups.tolist())))})")
        return order[at]

    def optics_value(self, label: str) -> np.ndarray | None:
        at = self.optics_row()
        if at is None or self.optics is None or label not in self.optics.labels:  # optics: there when at is
            return None
        return self.text.numbers(self.optics, label)[at]

    def pixel_sizes(self) -> np.ndarray:
        from_optics = self.optics_value("rlnImagePixelSize")
        if from_optics is not None:
            return from_optics
        if "rlnImagePixelSize" in self.block.labels:
            return self.text.numbers(self.block, "rlnImagePixelSize")
        if self.pixel_field == _DETECTOR_PIXEL:
            return self.text.numbers(self.block, "rlnDetectorPixelSize") * 1e4 / \
                self.text.numbers(self.block, "rlnMagnification")
        return np.zeros(self.rows)

    @property
    def pixel_field(self) -> str:
        relion30 = "rlnDetectorPixelSize" in self.block.labels and "rlnMagnification" in self.block.labels
        return _DETECTOR_PIXEL if relion30 and "rlnImagePixelSize" not in self.block.labels else "rlnImagePixelSize"

    def boxes(self) -> np.ndarray | None:
        sizes = self.optics_value("rlnImageSize")
        return None if sizes is None else sizes.astype(np.int64)

    def groups(self) -> np.ndarray | None:
        if "rlnOpticsGroup" in self.block.labels:
            return self.text.numbers(self.block, "rlnOpticsGroup", np.int64)
        return None

    def written(self, new: NewImages) -> list[bytes | np.ndarray]:
        names = np.strings.add(np.strings.add(np.strings.zfill(_digits(new.sections + 1), 6), b"@"), new.names)
        replace: dict[str, np.ndarray] = {IMAGE_NAME: names}
        scale = new.pixel_scale
        if scale != 1:
            for label in PIXEL_SHIFTS:
                if label in self.block.labels:
                    replace[label] = self.text.numbers(self.block, label, rows=new.rows) / scale
            if self.optics is None:
                if "rlnImagePixelSize" in self.block.labels:
                    pixel = self.text.numbers(self.block, "rlnImagePixelSize", rows=new.rows)
                    replace["rlnImagePixelSize"] = pixel * scale
                elif "rlnMagnification" in self.block.labels:
                    magnification = self.text.numbers(self.block, "rlnMagnification", rows=new.rows)
                    replace["rlnMagnification"] = magnification / scale
        loops = {self.block.name: star.LoopEdit(rows=new.rows, replace=replace)}
        if self.optics is not None:
            loops["optics"] = self._optics_edit(new)
        return self.text.edited(loops)

    def columns(self, row: int) -> dict[str, Any]:
        values = _row_text(self.text, self.block, row)
        at = self.optics_row()
        if at is None or self.optics is None:
            return values
        optics = _row_text(self.text, self.optics, int(at[row]))
        return {**values, **{label: v for label, v in optics.items() if label not in values}}

    def _optics_edit(self, new: NewImages) -> star.LoopEdit:
        """The optics table with each group's image size, dimensionality and pixel size (scaled) updated, the
        columns that are missing added."""
        assert self.optics is not None  # called for a file with an optics table
        count = self.optics.rows
        values = {"rlnImageSize": np.full(count, new.box, np.int64),
                  "rlnImageDimensionality": np.full(count, 2, np.int64)}
        if "rlnImagePixelSize" in self.optics.labels:
            old = self.text.numbers(self.optics, "rlnImagePixelSize")
            values["rlnImagePixelSize"] = _rounded(old * new.pixel_scale) if new.pixel_scale != 1 else old
        elif new.pixel_size:
            values["rlnImagePixelSize"] = np.full(count, new.pixel_size)
        replace = {label: v for label, v in values.items() if label in self.optics.labels}
        add = {label: v for label, v in values.items() if label not in self.optics.labels}
        if "rlnImagePixelSize" in replace and new.pixel_scale == 1:
            del replace["rlnImagePixelSize"]  # kept as written
        return star.LoopEdit(replace=replace, add=add)


def _row_text(text: star.Star, block: star.Block, row: int) -> dict[str, str]:
    """The values of one row of ``block``'s loop by label, as written (quotes taken off): only that row is read."""
    one = dataclasses.replace(block, offsets=block.offsets[row:row + 2])
    return {label: text.values(one, label)[0].decode(errors="replace") for label in block.labels}


def _digits(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int64).astype("S20")


def _rounded(values: np.ndarray) -> np.ndarray:
    """Pixel sizes as RELION writes them: six decimals (a binning's exact ratio, not 1.0600000000000001)."""
    return np.round(values, 6)


# -- cryoSPARC .cs ---------------------------------------------------------------------------------------


class CsTable:
    """A cryoSPARC particle file: a NumPy structured array whose ``blob/path`` (project-relative, may start with
    ``>``) and ``blob/idx`` (from 0) name each row's image, ``blob/shape`` and ``blob/psize_A`` its box and pixel
    size."""

    kind = "cryoSPARC"
    image_field, index_field, box_field, pixel_field = "blob/path", "blob/idx", "blob/shape", "blob/psize_A"
    first_index = 0

    def __init__(self, path: Path, array: np.ndarray) -> None:
        self.path = path
        self.array = array
        names = array.dtype.names or ()
        for needed in ("blob/path", "blob/idx"):
            if needed not in names:
                raise ParticleError(f"{path}: no {needed} field: not a cryoSPARC particle file (fields: "
                                    f"{', '.join(names[:8]) or 'none'}{', ...' if len(names) > 8 else ''})")

    @property
    def rows(self) -> int:
        return len(self.array)

    def where(self, row: int | None, field: str | None = None) -> str:
        named = ([] if row is None else [f"row {row + 1}"]) + ([field] if field else [])
        return f"{self.path}: {', '.join(named)}" if named else str(self.path)

    def image_names(self) -> tuple[np.ndarray, np.ndarray]:
        paths = np.asarray(self.array["blob/path"])
        if paths.dtype.kind == "O":
            paths = np.array([p if isinstance(p, bytes) else str(p).encode() for p in paths], "S")
        paths = np.strings.lstrip(paths.astype("S"), b">")
        return paths, np.asarray(self.array["blob/idx"]).astype(np.int64)

    def pixel_sizes(self) -> np.ndarray:
        if "blob/psize_A" in (self.array.dtype.names or ()):
            return np.asarray(self.array["blob/psize_A"], np.float64)
        return np.zeros(self.rows)

    def boxes(self) -> np.ndarray | None:
        if "blob/shape" in (self.array.dtype.names or ()):
            return np.asarray(self.array["blob/shape"])[:, -1].astype(np.int64)
        return None

    def groups(self) -> np.ndarray | None:
        if "ctf/exp_group_id" in (self.array.dtype.names or ()):
            return np.asarray(self.array["ctf/exp_group_id"]).astype(np.int64)
        return None

    def written(self, new: NewImages) -> list[bytes | np.ndarray]:
        out = np.array(self.array[new.rows])  # a copy: the input stays as it was
        width = max(out.dtype["blob/path"].itemsize, int(np.strings.str_len(new.names).max(initial=1)) + 1)
        if width > out.dtype["blob/path"].itemsize:
            out = _widened(out, "blob/path", np.dtype(f"S{width}"))
        had_prefix = self.rows and bytes(np.asarray(self.array["blob/path"])[:1].astype("S")[0]).startswith(b">")
        out["blob/path"] = np.strings.add(b">", new.names) if had_prefix and not _absolute(new.names) else new.names
        out["blob/idx"] = new.sections
        names = out.dtype.names or ()
        if "blob/shape" in names:
            out["blob/shape"] = new.box
        if "blob/psize_A" in names and new.pixel_scale != 1:
            out["blob/psize_A"] = out["blob/psize_A"] * new.pixel_scale
        return [npy_bytes(out)]

    def columns(self, row: int) -> dict[str, Any]:
        record = self.array[row]
        return {name: _json_ready(record[name]) for name in self.array.dtype.names or ()}


def _json_ready(value: Any) -> Any:
    """A field's value as JSON takes it: text decoded, sub-arrays as lists, NaN and infinities as their text."""
    if isinstance(value, np.ndarray):
        return [_json_ready(v) for v in value]
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _absolute(names: np.ndarray) -> bool:
    return bool(names.size) and bytes(names[0]).startswith(b"/")


def _widened(array: np.ndarray, field: str, dtype: np.dtype) -> np.ndarray:
    """``array`` with ``field`` of a wider type (a longer path than the file's ``S`` width holds)."""
    names, fields = array.dtype.names, array.dtype.fields
    assert names is not None and fields is not None  # a structured array
    descr = [(name, dtype if name == field else fields[name][0]) for name in names]
    out = np.empty(array.shape, descr)
    for name in names:
        out[name] = array[name]
    return out


def npy_bytes(array: np.ndarray) -> bytes:
    """The ``.npy`` bytes of ``array`` (what cryoSPARC's files are: ``np.save`` of the structured array)."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


# -- opening ---------------------------------------------------------------------------------------------


def is_particle_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a particle file by its extension (.star, .cs)."""
    return Path(path).suffix.lower() in SUFFIXES


def open_table(path: str | os.PathLike) -> Table:
    """The particle table of a STAR or ``.cs`` file (by its extension)."""
    path = Path(path)
    if path.suffix.lower() == CS_SUFFIX:
        return CsTable(path, _load_cs(path))
    return StarTable(star.read(path))


def _load_cs(path: Path) -> np.ndarray:
    """The structured array of a ``.cs`` file, its header's size checked against the file's before anything is
    allocated for it."""
    try:
        file = open(path, "rb")  # noqa: SIM115 (only the open is guarded here; `with file` below)
    except FileNotFoundError:
        raise MissingFileError(f"{path}: no such file") from None
    with file:
        try:
            version = npy.read_magic(file)
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, _, dtype = read_header(file)
        except (ValueError, OSError, SyntaxError) as exc:
            raise ParticleError(f"{path}: not a cryoSPARC .cs file (NumPy's array file format): {exc}") from None
        if dtype.names is None or len(shape) != 1 or dtype.hasobject:
            raise ParticleError(f"{path}: not a cryoSPARC particle file: a {dtype} array of shape {shape}, not a "
                                "table of named fields")
        size = os.fstat(file.fileno()).st_size - file.tell()
        if shape[0] * dtype.itemsize != size:
            raise ParticleError(f"{path}: the header promises {shape[0]} rows of {dtype.itemsize} bytes, the file "
                                f"holds {size} bytes of rows")
        array = np.empty(shape[0], dtype)
        file.readinto(array.view(np.uint8).data)
    return array


def tables_rows(tables: Sequence[Table]) -> int:
    return sum(t.rows for t in tables)
