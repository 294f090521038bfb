"""Particle coordinates as labs have them, read into one form: per micrograph, the (x, y) pixel coordinates of its
particles and the rows they were read from.

- RELION coordinate STARs (``mic_autopick.star``: a loop with rlnCoordinateX/Y, one file per micrograph);
- a RELION particles STAR (rlnMicrographName, rlnCoordinateX/Y and every other column, kept for re-extraction;
  :func:`recentred` applies rlnOriginX/YAngst as ``relion_preprocess --recenter`` does);
- cryoSPARC ``.cs`` (``location/center_x_frac`` times the width, ``center_y_frac`` times the height of
  ``location/micrograph_shape`` (H, W), rows counted from the first stored, as pyem's csparc2star reads them);
- EMAN ``.box`` (lower-left corner and box size: the centre is corner + size // 2, RELION's integer reading);
- plain text (``x y`` per line, further columns ignored, ``#`` comments);
- RELION's list of coordinate files (autopick.star: rlnMicrographName, rlnMicrographCoordinates), each file one of
  the above (:func:`read_or_list`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from noa_core.errors import FileFormatError
from noa_core.io import star

COORDINATE_X, COORDINATE_Y = "rlnCoordinateX", "rlnCoordinateY"
MICROGRAPH_NAME = "rlnMicrographName"
MICROGRAPH_COORDINATES = "rlnMicrographCoordinates"
ORIGINS = ("rlnOriginXAngst", "rlnOriginYAngst")


class CoordinateError(FileFormatError):
    """A coordinate file that cannot be read as coordinates (the message names the file and row)."""


@dataclass
class Picks:
    """The particles of one micrograph as a coordinate file gives them.

    Attributes:
        source: the file read.
        micrograph: the micrograph as the file names it (None: a file of one micrograph's coordinates).
        xy: (n, 2) coordinates in pixels, x (column) then y (row), as read (fractions kept).
        rows: each particle's 0-based row in the file (for messages).
        columns: a particles STAR's other columns for these rows (label -> ``S`` values), kept in the output.
        pixel_size: the particles' pixel size in Å where the file says it (a particles STAR's optics table), else 0.
    """

    source: Path
    micrograph: str | None
    xy: np.ndarray
    rows: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    pixel_size: float = 0.0

    def where(self, index: int) -> str:
        """The file and row of particle ``index``, in a user's words."""
        return f"{self.source}: row {int(self.rows[index]) + 1}"


def read(path: str | Path, name: str | None = None) -> list[Picks]:
    """The coordinates in ``path`` by micrograph, in the order micrographs first appear; the format follows the
    extension (.star, .cs, .box; anything else is plain text). ``name``: what the user calls the file, where
    ``path`` is another way to it (a descriptor opened beneath the service's data root): its extension says the
    format and messages name it."""
    path = Path(path)
    shown = path if name is None else Path(name)
    suffix = shown.suffix.lower()
    try:
        if suffix == ".star":
            picks = _star_picks(star.read(path), path)
        elif suffix == ".cs":
            picks = _read_cs(path)
        else:
            picks = [_read_text(path, box=suffix == ".box")]
    except FileFormatError as exc:
        if shown == path:
            raise
        raise CoordinateError(str(exc).replace(str(path), str(shown))) from None
    for found in picks:
        found.source = shown
    return picks


def _star_picks(text: star.Star, path: Path) -> list[Picks]:
    loops = [b for b in text if b.loop and COORDINATE_X in b.labels and COORDINATE_Y in b.labels]
    if not loops:
        raise CoordinateError(f"{path}: no loop has {COORDINATE_X} and {COORDINATE_Y} columns: not a coordinate file")
    named = [b for b in loops if b.name == "particles"]
    block = (named or loops)[0]
    try:
        xy = np.stack([text.numbers(block, COORDINATE_X), text.numbers(block, COORDINATE_Y)], axis=1)
    except star.StarError as exc:
        raise CoordinateError(str(exc)) from None
    rows = np.arange(block.rows)
    if MICROGRAPH_NAME not in block.labels:
        return [Picks(path, None, xy, rows)]
    names = text.values(block, MICROGRAPH_NAME)
    columns = {label: text.values(block, label) for label in block.labels}
    pixel_size = _particle_pixel_size(text, block)
    picks = []
    for name in dict.fromkeys(names.tolist()):
        mine = np.flatnonzero(names == name)
        picks.append(Picks(path, name.decode(), xy[mine], mine, {k: v[mine] for k, v in columns.items()},
                           pixel_size))
    return picks


def _particle_pixel_size(text: star.Star, block: star.Block) -> float:
    """The particles' pixel size from a 3.1 optics table (one group: the one value; several: the first's)."""
    if "optics" in text and "rlnImagePixelSize" in text.block("optics").labels and text.block("optics").rows:
        return float(text.numbers(text.block("optics"), "rlnImagePixelSize")[0])
    return 0.0


def _read_cs(path: Path) -> list[Picks]:
    try:
        table = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise CoordinateError(f"{path}: not a cryoSPARC .cs file ({exc})") from None
    needed = ("location/center_x_frac", "location/center_y_frac", "location/micrograph_path",
              "location/micrograph_shape")
    missing = [name for name in needed if table.dtype.names is None or name not in table.dtype.names]
    if missing:
        raise CoordinateError(f"{path}: no {missing[0]} field: not a cryoSPARC file of picks")
    shape = np.asarray(table["location/micrograph_shape"], np.float64).reshape(len(table), -1)
    xy = np.stack([table["location/center_x_frac"] * shape[:, -1], table["location/center_y_frac"] * shape[:, -2]],
                  axis=1).astype(np.float64)
    names = table["location/micrograph_path"]
    picks = []
    for name in dict.fromkeys(names.tolist()):
        mine = np.flatnonzero(names == name)
        text = name.decode() if isinstance(name, bytes) else str(name)
        picks.append(Picks(path, text.lstrip(">"), xy[mine], mine))
    return picks


def _read_text(path: Path, box: bool) -> Picks:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        raise CoordinateError(f"{path}: no such file") from None
    values: list[list[float]] = []
    rows: list[int] = []
    for number, line in enumerate(lines):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            numbers = [float(w) for w in words[:4 if box else 2]]
        except ValueError:
            if not rows and not box:  # a header line (ximdisp, xmipp), as RELION skips it
                continue
            raise CoordinateError(f"{path}: row {number + 1}: {line.strip()!r} is not "
                                  f"{'x y width height' if box else 'x y'} numbers") from None
        if len(numbers) < (4 if box else 2):
            raise CoordinateError(f"{path}: row {number + 1}: {len(numbers)} values; "
                                  f"{'x y width height' if box else 'x y'} expected")
        if box:  # RELION: xpos = x + w / 2 in integers
            x, y, w, h = numbers
            numbers = [int(x) + int(w) // 2, int(y) + int(h) // 2] if all(map(math.isfinite, numbers)) \
                else [math.nan, math.nan]
        values.append(numbers[:2])
        rows.append(number)
    return Picks(path, None, np.array(values, np.float64).reshape(-1, 2), np.array(rows, np.int64))


def matches(picks: Picks, micrograph: str) -> bool:
    """Whether ``picks`` name ``micrograph`` (as the micrographs' list names it)."""
    return picks.micrograph is not None and same_micrograph(picks.micrograph, micrograph)


def same_micrograph(named: str, micrograph: str) -> bool:
    """Whether a file's ``named`` micrograph is ``micrograph`` (as the micrographs' list names it): the same path,
    or the same name without its folder and extension (cryoSPARC and re-extracted STARs name micrographs of other
    jobs)."""
    return PurePosixPath(named) == PurePosixPath(micrograph) or _stem(named) == _stem(micrograph)


@dataclass(frozen=True)
class ListedFile:
    """A row of RELION's list of coordinate files (``data_coordinate_files`` of autopick.star, manualpick.star):
    the micrograph, the coordinate file of its picks (project-relative) and where the row is."""

    micrograph: str
    coordinates: str
    where: str


def read_or_list(path: str | Path) -> tuple[list[Picks], None] | tuple[None, list[ListedFile]]:
    """``(the coordinates in path, None)`` (:func:`read`), or ``(None, its rows)`` when it is RELION's list of
    coordinate files (a loop with rlnMicrographName and rlnMicrographCoordinates, as relion_autopick and
    relion_manualpick write it); a STAR is read once either way."""
    path = Path(path)
    if path.suffix.lower() != ".star":
        return read(path), None
    text = star.read(path)
    listed = _listed(text, path)
    return (_star_picks(text, path), None) if listed is None else (None, listed)


def _listed(text: star.Star, path: Path) -> list[ListedFile] | None:
    blocks = [b for b in text if b.loop and MICROGRAPH_NAME in b.labels and MICROGRAPH_COORDINATES in b.labels]
    if not blocks:
        return None
    block = blocks[0]
    names = text.values(block, MICROGRAPH_NAME).tolist()
    files = text.values(block, MICROGRAPH_COORDINATES).tolist()
    return [ListedFile(name.decode(), coordinates.decode(), f"{path}: data_{block.name}, row {row + 1}")
            for row, (name, coordinates) in enumerate(zip(names, files))]


def _stem(name: str) -> str:
    stem = PurePosixPath(name).name
    return stem.split(".", 1)[0] if "." in stem else stem


def round_half_away(values: np.ndarray) -> np.ndarray:
    """RELION's ROUND: halves away from zero."""
    return np.where(values > 0, np.floor(values + 0.5), np.ceil(values - 0.5))


def recentred(picks: Picks, micrograph_pixel_size: float) -> Picks:
    """``picks`` of a particles STAR recentred as ``relion_preprocess --reextract_data_star --recenter`` does: each
    origin (rlnOriginX/YAngst, in the particles' pixels once divided by their pixel size, then in the micrograph's)
    moves the coordinate by its rounded value and keeps the remainder (in Å of the micrograph)."""
    missing = [label for label in ORIGINS if label not in picks.columns]
    if missing:
        raise CoordinateError(f"{picks.source}: no {missing[0]} column to recentre on")
    particle = picks.pixel_size or micrograph_pixel_size
    offsets = np.stack([picks.columns[label].astype(np.float64) for label in ORIGINS], axis=1) / particle
    offsets *= particle / micrograph_pixel_size
    moved = round_half_away(offsets)
    xy = picks.xy - moved
    columns = dict(picks.columns)
    columns[COORDINATE_X], columns[COORDINATE_Y] = xy[:, 0], xy[:, 1]
    for i, label in enumerate(ORIGINS):
        columns[label] = micrograph_pixel_size * (offsets[:, i] - moved[:, i])
    return Picks(picks.source, picks.micrograph, xy, picks.rows, columns, picks.pixel_size)
