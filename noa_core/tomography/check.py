"""A tilt series checked, not assumed: a stack and the files beside it (IMOD's ``.rawtlt`` and ``.tlt``, its mdoc,
RELION 5's tilt-series STAR) compared section by section. Each disagreement is one finding naming the file and the
section (its line, ZValue or row): counts, angles and their order, pre-exposure that decreases in acquisition
order, pixel sizes, image sizes, tilt axes, and the tilt axis of an mdoc not written by SerialEM (Thermo Fisher's
Tomography 5 gives it in a convention of its own).

The files are found by the stack's stem (TS.st: TS.rawtlt, TS.tlt, TS.st.mdoc or TS.mdoc, TS.star:
:func:`~noa_core.tomography.beside.side_names`) and read by the caller, so that over HTTP every one is opened
beneath the data root; one that is not there is said, not a fault."""

from __future__ import annotations

import itertools
import math
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import numpy as np

from noa_core import tomography  # a face: the mdoc reader (mdocfile, pandas) loads when a file is read
from noa_core.errors import FileFormatError
from noa_core.io import star

if TYPE_CHECKING:
    from noa_core.tomography.tiltseries import TiltSeries

MAX_ANGLES_BYTES = 1 << 20  # a .tlt of 61 angles is 600 bytes
MAX_STAR_BYTES = 64 << 20
SAME_ANGLE = 0.05  # degrees: an angle written to two decimals (.rawtlt of other programs) is still the same one
SAME_AXIS = 0.05  # degrees
PIXEL_RTOL = 1e-3  # as the stack's header and the mdoc are compared when the stack is built
DOSE_ATOL = 1e-3  # e/Å², what a STAR written to 6 digits keeps
SIDE_FILES = ("rawtlt", "tlt", "mdoc", "star")
_IMAGE_NAME = re.compile(rb"^0*(\d+)@(.+)$")  # RELION's 'N@stack'


@dataclass(frozen=True)
class Stack:
    """What the stack's header says: its name (as a message gives it), sections, image size, pixel size (Å) and the
    tilt axis its labels give ('Tilt axis angle = 85.3', as SerialEM, IMOD and noa write it)."""

    name: str
    sections: int
    width: int
    height: int
    pixel_size: float | None
    axis: float | None


@dataclass(frozen=True)
class Finding:
    """One disagreement: the file it is found in, the stack's section concerned (from 0; None: the file as a
    whole), and what, in words beginning with where in the file (a line, a ZValue, a row)."""

    file: str
    section: int | None
    problem: str


def size_limit(kind: str) -> int:
    """The most bytes a side file of ``kind`` is read with: beyond it, it is none of these files."""
    return {"rawtlt": MAX_ANGLES_BYTES, "tlt": MAX_ANGLES_BYTES, "mdoc": tomography.tiltseries.MAX_MDOC_BYTES,
            "star": MAX_STAR_BYTES}[kind]


# -- reading ------------------------------------------------------------------------------------------------


def read_angles(name: str, data: bytes) -> np.ndarray:
    """IMOD's angle file: one angle a line (blank lines ignored); FileFormatError naming the line of one that is
    not an angle."""
    angles = []
    for number, text in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        words = text.split()
        if not words:
            continue
        try:
            angle = float(words[0])
        except ValueError:
            angle = math.nan
        if len(words) > 1 or not -180.0 <= angle <= 180.0:  # NaN included
            raise FileFormatError(f"{name}: line {number}: {text.strip()[:40]!r} is not a tilt angle in degrees")
        angles.append(angle)
    return np.array(angles, np.float64)


@dataclass(frozen=True)
class StarTable:
    """The tilt-series loop of a RELION 5 STAR: its block's name and the columns it has."""

    name: str
    columns: dict[str, np.ndarray]
    rows: int


STAR_NUMBERS = ("rlnTomoNominalStageTiltAngle", "rlnTomoNominalTiltAxisAngle", "rlnMicrographPreExposure")


def read_star(name: str, data: bytes, stack_name: str) -> StarTable:
    """The loop of the tilt series ``stack_name`` in a RELION 5 tilt-series STAR: the block named after it (as
    RELION names it), else the file's only loop."""
    read = star.Star(Path(name), data)
    wanted = tomography.tiltseries.block_name(posixpath.basename(stack_name))
    loops = [block for block in read if block.loop]
    named = [block for block in loops if block.name == wanted]
    if not named and len(loops) != 1:
        raise FileFormatError(f"{name}: no data_{wanted} loop (the tilt series' block) and {len(loops)} loops: not "
                              "RELION 5's STAR of this tilt series")
    block = (named or loops)[0]
    columns: dict[str, np.ndarray] = {label: read.numbers(block, label) for label in STAR_NUMBERS
                                      if label in block.labels}
    if "rlnMicrographName" in block.labels:
        columns["rlnMicrographName"] = read.values(block, "rlnMicrographName")
    return StarTable(block.name, columns, block.rows)


# -- comparing --------------------------------------------------------------------------------------------

Add = Callable[[str, "int | None", str], None]  # a finding: the kind of file, the section, the problem


@dataclass(frozen=True)
class SideFiles:
    """The files beside a stack, read: each kind's name and content (None: not there)."""

    names: Mapping[str, str | None]
    rawtlt: np.ndarray | None
    tlt: np.ndarray | None
    mdoc: TiltSeries | None
    star: StarTable | None


def check(stack: Stack, side: SideFiles) -> list[Finding]:
    """Every disagreement between ``stack`` and the files beside it, and within each."""
    findings: list[Finding] = []
    add = lambda kind, section, problem: findings.append(  # noqa: E731
        Finding(side.names[kind] or kind, section, problem))
    reference = _reference_angles(stack, side)
    for kind in ("rawtlt", "tlt"):
        angles = side.rawtlt if kind == "rawtlt" else side.tlt
        if angles is not None:
            _check_angles(stack, kind, angles, reference if reference and reference[0] != kind else None,
                          kind == "tlt", add)
    if side.mdoc is not None:
        _check_mdoc(stack, side.mdoc, add)
    if side.star is not None:
        _check_star(stack, side, reference, add)
    return findings


def _reference_angles(stack: Stack, side: SideFiles) -> tuple[str, np.ndarray, Callable[[int], str]] | None:
    """The nominal angles of the stack's sections the others are held to, where they are given (one a section): the
    mdoc's, else the .rawtlt's; with how a section is named there."""
    if _describes(side.mdoc, stack):
        name = side.names["mdoc"]
        return "mdoc", np.array([t.angle for t in side.mdoc.tilts]), lambda z: f"{name} [ZValue = {z}]"
    if side.rawtlt is not None and len(side.rawtlt) == stack.sections:
        name = side.names["rawtlt"]
        return "rawtlt", side.rawtlt, lambda z: f"{name} line {z + 1}"
    return None


def _describes(series: TiltSeries | None, stack: Stack) -> TypeGuard[TiltSeries]:
    """Whether ``series`` is an mdoc of a section for each of the stack's (its sections to compare with theirs)."""
    return series is not None and len(series.tilts) == stack.sections


def _count(stack: Stack, count: int, things: str) -> str | None:
    if count == stack.sections:
        return None
    return f"{count} {things}, and the stack {stack.name} has {stack.sections} sections"


def _check_angles(stack: Stack, kind: str, angles: np.ndarray, reference, aligned: bool, add: Add) -> None:
    """An angle file against the stack (one angle a section) and the reference angles: the same values (a
    ``.rawtlt``: the nominal angles), or, ``aligned`` (a ``.tlt``, which alignment may shift), in the same order."""
    wrong_count = _count(stack, len(angles), "angles")
    if wrong_count is not None:
        missing = _missing_line(angles, reference)
        add(kind, missing, wrong_count + ("" if missing is None else
                                          f"; section {missing}'s angle ({reference[1][missing]:g}° in "
                                          f"{reference[2](missing)}) is not there"))
        return
    if reference is None or len(reference[1]) != len(angles):
        return
    _, expected, where = reference
    if aligned:
        for z in np.flatnonzero(_ranks(angles) != _ranks(expected)):
            add(kind, int(z), f"line {z + 1} (section {z}): {angles[z]:g}° is out of the order of the angles of "
                              f"{where(z)} ({expected[z]:g}° there)")
        return
    for z in np.flatnonzero(np.abs(angles - expected) > SAME_ANGLE):
        add(kind, int(z), f"line {z + 1} (section {z}): {angles[z]:g}°, and {expected[z]:g}° in {where(z)}")


def _ranks(angles: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(angles, kind="stable"), kind="stable")


def _missing_line(angles: np.ndarray, reference) -> int | None:
    """The section whose angle a file one line short lacks, where the others follow the reference's; else None."""
    if reference is None or len(angles) + 1 != len(reference[1]):
        return None
    expected = reference[1]
    return next((z for z in range(len(expected))
                 if np.allclose(angles, np.delete(expected, z), atol=SAME_ANGLE, rtol=0)), None)


def _check_mdoc(stack: Stack, series: TiltSeries, add: Add) -> None:
    wrong_count = _count(stack, len(series.tilts), "[ZValue] sections")
    if wrong_count is not None:
        add("mdoc", None, wrong_count)
    if series.image_size is not None and tuple(series.image_size) != (stack.width, stack.height):
        w, h = series.image_size
        add("mdoc", None, f"ImageSize {w} x {h}, and the stack {stack.name} holds {stack.width} x {stack.height} "
                          "images")
    differing = tomography.tiltseries.pixel_size_disagreement(series)
    if differing is not None:
        add("mdoc", differing[0], differing[1])
    elif series.pixel_size is not None and stack.pixel_size and not math.isclose(
            series.pixel_size, stack.pixel_size, rel_tol=PIXEL_RTOL):
        add("mdoc", None, f"PixelSpacing {series.pixel_size:g} Å, and {stack.pixel_size:g} Å in the header of the "
                          f"stack {stack.name}")
    doses, source = tomography.tiltseries.pre_exposure(series, None)
    if source is not None:
        order, told_by = tomography.tiltseries.acquisition_order(series)
        for before, z in itertools.pairwise(order):
            if doses[z] < doses[before] - DOSE_ATOL:
                add("mdoc", z, f"[ZValue = {z}]: pre-exposure {doses[z]:g} e/Å² ({source}), less than the "
                               f"{doses[before]:g} of [ZValue = {before}], taken before it ({told_by})")
    found = tomography.tiltseries.tilt_axis(series)
    if found is not None and stack.axis is not None and not _same_axis(found[0], stack.axis):
        add("mdoc", None, f"tilt axis {found[0]:g}° ({found[1]}), and {stack.axis:g}° in the labels of the stack "
                          f"{stack.name}")
    caution = tomography.tiltseries.tomography5_caution(series)
    if caution is not None:
        add("mdoc", None, caution)


def _same_axis(a: float, b: float) -> bool:
    return abs(tomography.tiltseries.wrapped(a - b)) <= SAME_AXIS


def _check_star(stack: Stack, side: SideFiles, reference, add: Add) -> None:
    table = side.star
    assert table is not None
    wrong_count = _count(stack, table.rows, f"rows in data_{table.name}")
    if wrong_count is not None:
        add("star", None, wrong_count)
        return
    names = table.columns.get("rlnMicrographName")
    stack_file = posixpath.basename(stack.name)
    if names is not None:
        for z, value in enumerate(names):
            parsed = _IMAGE_NAME.match(bytes(value))
            if parsed is None or int(parsed.group(1)) != z + 1 or \
                    posixpath.basename(parsed.group(2).decode(errors="replace")) != stack_file:
                add("star", z, f"row {z + 1} (section {z}): rlnMicrographName {value.decode(errors='replace')}, "
                               f"not {z + 1:06d}@{stack_file}")
    angles = table.columns.get("rlnTomoNominalStageTiltAngle")
    if angles is not None and reference is not None:
        _, expected, where = reference
        for row in np.flatnonzero(np.abs(angles - expected) > SAME_ANGLE):
            add("star", int(row), f"row {row + 1} (section {row}): rlnTomoNominalStageTiltAngle {angles[row]:g}°, "
                                  f"and {expected[row]:g}° in {where(row)}")
    axes = table.columns.get("rlnTomoNominalTiltAxisAngle")
    found = None if side.mdoc is None else tomography.tiltseries.tilt_axis(side.mdoc)
    if axes is not None and found is not None:
        for z in (z for z, axis in enumerate(axes) if not _same_axis(axis, found[0])):
            add("star", z, f"row {z + 1} (section {z}): rlnTomoNominalTiltAxisAngle {axes[z]:g}°, and "
                           f"{found[0]:g}° in {side.names['mdoc']} ({found[1]})")
            break  # one axis for the series: said once
    doses = table.columns.get("rlnMicrographPreExposure")
    if doses is not None and _describes(side.mdoc, stack):
        order, told_by = tomography.tiltseries.acquisition_order(side.mdoc)
        for before, z in itertools.pairwise(order):
            if doses[z] < doses[before] - DOSE_ATOL:
                add("star", z, f"row {z + 1} (section {z}): rlnMicrographPreExposure {doses[z]:g} e/Å², less than "
                               f"the {doses[before]:g} of row {before + 1}, taken before it ({told_by} in "
                               f"{side.names['mdoc']})")
