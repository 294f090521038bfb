"""A tilt series as SerialEM's ``.mdoc`` describes it: one tilt per ``[ZValue = k]`` section (its angle, dose and
acquisition time, section k of the stack the mdoc describes, or the sum of the frames its SubFramePath names), their
order (by angle, or as acquired), which are
left out and why, the dose each had received before its exposure, the tilt axis and the pixel size; and the files
written beside a stack: IMOD's ``.rawtlt``/``.tlt``, an mdoc whose sections follow the stack, RELION 5's tilt-series
STAR.

The mdoc is read with mdocfile's models (teamtomo), a section at a time, so that a value it cannot read is named
with its section; everything it does not model is kept and written back. Its dialects: sections in any order
(PACEtomo sorts them; the ZValue says which tilt each is), a frame tilt series' ``[FrameSet = k]`` sections (they
describe frames files, not the stack's sections: left aside, not written back), SerialEM's fields of any version
(those mdocfile does not model are kept as text); a montage's (``Montage = 1``, ``[MontSection = k]``) is refused."""

from __future__ import annotations

import datetime
import itertools
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

import numpy as np
import pydantic
from mdocfile.data_models import Mdoc, MdocGlobalData, MdocSectionData
from mdocfile.utils import find_section_entries, find_title_entries

from noa_core.compute.moments import RunningStatistics
from noa_core.errors import FileFormatError, param
from noa_core.images import stacks
from noa_core.io import mapped, star

# mdocfile logs each field it does not model (kept all the same); without a handler Python would print them
logging.getLogger("mdocfile").addHandler(logging.NullHandler())

MAX_MDOC_BYTES = 64 << 20  # a 61-tilt mdoc is 50 KB, a large montage's a few MB
SAME_ANGLE = 0.01  # degrees: two tilts closer than this are one angle taken twice
ORDERS = ("angle", "acquisition")
# The tilt axis a title or an MRC label gives: 'Tilt axis angle = 85.3' as SerialEM, IMOD and noa write it, or
# 'TiltAxisAngle = -176.20' as Thermo Fisher's Tomography 5 writes it (as Scipion reads both)
_TILT_AXIS_TITLE = re.compile(r"(Tilt axis angle|TiltAxisAngle)\s*=\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)")
_SERIALEM_TITLE = re.compile(r"\bSerialEM\b")  # the first title of every mdoc SerialEM writes
_DATE_FORMATS = ("%d-%b-%y %H:%M:%S", "%d-%b-%Y %H:%M:%S")  # SerialEM's '30-Nov-15  15:21:38'
_MONTAGE = "a montage's mdoc (the pieces of one image): a montage is not a tilt series"


@dataclass(frozen=True)
class Tilt:
    """One tilt: section ``z`` (its ZValue) of the stack the mdoc describes."""

    z: int
    angle: float  # TiltAngle, degrees
    exposure: float | None  # ExposureDose, e/Å²
    prior: float | None  # PriorRecordDose: the dose of the series' earlier images, e/Å²
    time: datetime.datetime | None  # DateTime
    record: MdocSectionData  # the mdoc's section as read, written back renumbered


@dataclass(frozen=True)
class TiltSeries:
    """An mdoc read and checked: its tilts in ZValue order (``tilts[z].z == z``)."""

    path: Path
    titles: list[str]
    header: MdocGlobalData
    tilts: list[Tilt]
    pixel_size: float | None  # PixelSpacing, Å
    image_file: str | None  # the name of the stack it describes (ImageFile, without SerialEM's folder)
    image_size: tuple[int, int] | None  # ImageSize: width, height

    def where(self, z: int) -> str:
        """How a message names tilt ``z``: the file and its section."""
        return f"{self.path}: [ZValue = {z}]"

    def frames_stem(self, z: int) -> str:
        """The name of tilt ``z``'s frames file without its extension (SubFramePath, a path of SerialEM's Windows
        machine: the name after its last '\\' or '/'), after which MotionCor2, RELION and Warp name the frames'
        sum; FileFormatError where the section names no frames."""
        frames = self.tilts[z].record.SubFramePath
        if frames is None or not PureWindowsPath(str(frames)).name:
            raise FileFormatError(f"{self.where(z)}: no SubFramePath: the mdoc names no frames to find this tilt's "
                                  "sum by")
        name = PureWindowsPath(str(frames)).name
        return name.rsplit(".", 1)[0] if "." in name else name


# -- reading ------------------------------------------------------------------------------------------------


def read(path: Path) -> TiltSeries:
    """The tilt series ``path`` describes; FileFormatError naming the section (its ZValue) and field of anything
    that is not a tilt series of images: no TiltAngle, a ZValue repeated or missing, pixel sizes that differ, a
    montage's or a frame set's mdoc."""
    size = path.stat().st_size
    check_size(path, size)
    series = parse(path, path.read_bytes())
    differing = pixel_size_disagreement(series)
    if differing is not None:
        raise FileFormatError(f"{series.path}: {differing[1]}")
    return series


def check_size(path: Path, size: int) -> None:
    """FileFormatError where ``size`` (bytes) is more than any mdoc's: it is never read whole."""
    if size > MAX_MDOC_BYTES:
        raise FileFormatError(f"{path}: {size} bytes: larger than any mdoc ({MAX_MDOC_BYTES >> 20} MiB at most)")


def parse(path: Path, data: bytes) -> TiltSeries:
    """The tilt series of the mdoc ``data`` (named ``path`` in messages), as :func:`read`, its sections' pixel sizes
    not compared (:func:`pixel_size_disagreement`): the first given is the series'."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"{path}: byte {exc.start}: not text; SerialEM's mdoc is text") from None
    lines = [line.strip() for line in text.splitlines()]
    starts = find_section_entries(lines)
    head = lines[:starts[0]] if starts else lines
    try:
        header = MdocGlobalData.from_lines(head)
    except ValueError as exc:  # pydantic's ValidationError, or a line that is not 'Name = value'
        raise FileFormatError(f"{path}: header: {_why(exc)}") from None
    if header.Montage:
        raise FileFormatError(f"{path}: Montage = 1: {_MONTAGE}")
    records = []
    for start, end in zip(starts, [*starts[1:], len(lines)]):
        if lines[start].startswith("[MontSection ="):
            raise FileFormatError(f"{path}: {lines[start]}: {_MONTAGE}")
        if lines[start].startswith("[FrameSet ="):  # a frames file's record, not a section of the stack
            continue
        try:
            records.append(MdocSectionData.from_lines(lines[start:end]))
        except ValueError as exc:
            raise FileFormatError(f"{path}: {lines[start]}: {_why(exc)}") from None
    if not records and starts:
        raise FileFormatError(f"{path}: {lines[starts[0]]}: a frame set's mdoc (the frames of one exposure), not a "
                              "tilt series")
    if not records:
        raise FileFormatError(f"{path}: no [ZValue = k] section: not the mdoc of a tilt series")
    by_z: dict[int, MdocSectionData] = {}
    for record in records:
        z = int(record.ZValue)
        if z in by_z:
            raise FileFormatError(f"{path}: [ZValue = {z}]: twice; each section of the stack is described once")
        by_z[z] = record
    missing = sorted(set(range(len(by_z))) - set(by_z))
    if missing:
        raise FileFormatError(f"{path}: [ZValue = {missing[0]}]: missing; the sections are numbered from 0 to "
                              f"{len(by_z) - 1}, and {max(by_z)} is there")
    tilts = [_tilt(path, by_z[z]) for z in range(len(by_z))]
    image_file = PureWindowsPath(str(header.ImageFile)).name if header.ImageFile is not None else None
    return TiltSeries(path, [head[i] for i in find_title_entries(head)], header, tilts,
                      _pixel_size(header, tilts), image_file, header.ImageSize)


def _why(exc: ValueError) -> str:
    if isinstance(exc, pydantic.ValidationError):
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"][:1])
        return f"{field}: {error['input']!r} is not valid ({error['msg']})"
    return "a line that is not 'Name = value'"


def _tilt(path: Path, record: MdocSectionData) -> Tilt:
    z = int(record.ZValue)
    angle = record.TiltAngle
    if angle is None:
        raise FileFormatError(f"{path}: [ZValue = {z}]: no TiltAngle")
    if not -90.0 <= angle <= 90.0:  # NaN included
        raise FileFormatError(f"{path}: [ZValue = {z}]: TiltAngle {angle}: not a stage tilt (-90 to 90 degrees)")
    return Tilt(z, float(angle), record.ExposureDose, record.PriorRecordDose, _time(record.DateTime), record)


def _time(text: str | None) -> datetime.datetime | None:
    if text is None:
        return None
    for form in _DATE_FORMATS:
        try:
            return datetime.datetime.strptime(" ".join(text.split()), form)
        except ValueError:
            continue
    return None


def _pixel_sizes(header: MdocGlobalData, tilts: list[Tilt]) -> list[tuple[int | None, float]]:
    """Every PixelSpacing the mdoc gives, by the ZValue of its section: its header's (None) first."""
    given: list[tuple[int | None, float]] = [(t.z, float(t.record.PixelSpacing)) for t in tilts
                                             if t.record.PixelSpacing]
    return [(None, float(header.PixelSpacing)), *given] if header.PixelSpacing else given


def _pixel_size(header: MdocGlobalData, tilts: list[Tilt]) -> float | None:
    """The pixel size of the series: the first PixelSpacing given (:func:`pixel_size_disagreement` says whether the
    others agree)."""
    given = _pixel_sizes(header, tilts)
    return given[0][1] if given else None


def pixel_size_disagreement(series: TiltSeries) -> tuple[int | None, str] | None:
    """The first section (its ZValue; None: the header) whose PixelSpacing differs from the first given (to 0.01%),
    and that in words naming both; None: they agree, as the images of a tilt series do."""
    given = _pixel_sizes(series.header, series.tilts)
    if not given:
        return None
    named = lambda z: "the header" if z is None else f"[ZValue = {z}]"  # noqa: E731
    (first_z, first), *others = given
    for z, value in others:
        if not math.isclose(value, first, rel_tol=1e-4):
            return z, (f"{named(z)}: PixelSpacing {value:g} Å, and {first:g} Å in {named(first_z)}: the images of a "
                       "tilt series share one pixel size")
    return None


# -- what the tilts are ---------------------------------------------------------------------------------------


def acquisition_order(series: TiltSeries) -> tuple[list[int], str]:
    """The tilts (their ZValues) in the order they were taken, and what told it: DateTime where every section has
    one (ties in ZValue order), else ZValue."""
    tilts = series.tilts
    if all(t.time is not None for t in tilts):
        return sorted(range(len(tilts)), key=lambda z: (tilts[z].time, z)), "DateTime"
    return list(range(len(tilts))), "ZValue"


def pre_exposure(series: TiltSeries, dose_per_tilt: float | None) -> tuple[np.ndarray, str | None]:
    """The dose (e/Å²) each tilt had received before its exposure, by ZValue, and where it comes from (None: the
    mdoc says nothing, zeros): ``dose_per_tilt`` times the tilts taken before it when given; else the mdoc's
    PriorRecordDose; else its ExposureDose summed over the tilts taken before it."""
    tilts = series.tilts
    order, told_by = acquisition_order(series)
    doses = np.zeros(len(tilts))
    if dose_per_tilt is not None:
        doses[order] = dose_per_tilt * np.arange(len(tilts))
        return doses, f"{dose_per_tilt:g} e/Å² per tilt, in acquisition order ({told_by})"
    if all(t.prior is not None for t in tilts):
        return np.array([t.prior for t in tilts], np.float64), "PriorRecordDose"
    exposures = [tilts[z].exposure for z in order]
    if all(e is not None for e in exposures) and any(exposures):
        taken = np.array(exposures, np.float64)
        doses[order] = np.concatenate(([0.0], np.cumsum(taken)[:-1]))
        return doses, f"ExposureDose summed in acquisition order ({told_by})"
    return doses, None


def axis_title(text: str) -> tuple[str, float] | None:
    """The tilt axis angle a title or an MRC label gives and the words naming it: ('Tilt axis angle', 85.3) as
    SerialEM, IMOD and noa write it, ('TiltAxisAngle', -176.2) as Tomography 5 does; None: it gives none."""
    found = _TILT_AXIS_TITLE.search(text)
    return (found.group(1), float(found.group(2))) if found else None


def axis_in(text: str) -> float | None:
    """The tilt axis angle a title or an MRC label gives (:func:`axis_title`), or None."""
    found = axis_title(text)
    return None if found is None else found[1]


def wrapped(degrees: float) -> float:
    """``degrees`` as the same angle within [-180, 180)."""
    return (degrees + 180.0) % 360.0 - 180.0


def tilt_axis(series: TiltSeries) -> tuple[float, str] | None:
    """The tilt axis angle (degrees) and where it comes from: a title's (:func:`axis_title`), else the sections'
    RotationAngle less 90 (SerialEM's relation between them); None: neither is there."""
    for title in series.titles:
        found = axis_title(title)
        if found is not None:
            return found[1], f"the mdoc's '{found[0]}'"
    rotation = series.tilts[0].record.RotationAngle
    if rotation is None:
        return None
    return wrapped(rotation - 90.0), "the mdoc's RotationAngle - 90"


def views(text: str, count: int) -> list[int]:
    """The tilts (ZValues) that IMOD's view numbers ``text`` name ('1-3,40-41': from 1, in ZValue order) among
    ``count``, as ``exclude`` takes them; ParameterError naming ``exclude`` for text that is not such a list or a
    view past ``count``."""
    return list(stacks.parse_ranges(text, count, "exclude", first=1))


def tomography5_caution(series: TiltSeries) -> str | None:
    """What to say of an mdoc not written by SerialEM (no title names it) whose title gives the tilt axis:
    Thermo Fisher's Tomography 5 writes such mdocs, in a convention of its own (Warp's issue 461); None for others."""
    if any(_SERIALEM_TITLE.search(title) for title in series.titles):
        return None
    found = next((f for f in map(axis_title, series.titles) if f is not None), None)
    if found is None:
        return None
    words, axis = found
    serialem = wrapped(-axis - 90.0)  # as Scipion converts a Tomography 5 mdoc's
    return (f"'{words} = {axis:g}' in an mdoc no title of which names SerialEM: Thermo Fisher's Tomography 5 writes "
            f"such mdocs, and its tilt axis is known to be in a convention of its own (SerialEM's would be -{axis:g} "
            f"- 90 = {serialem:g}°); check it")


def excluded(series: TiltSeries, views: Sequence[int], max_angle: float | None, dark: float | None,
             means: Mapping[int, float] | None) -> dict[int, str]:
    """The mdoc's tilts left out (ZValue -> why): :func:`left_out` of their angles."""
    return left_out([t.angle for t in series.tilts], views, max_angle, dark, means)


def left_out(angles: Iterable[float], views: Sequence[int], max_angle: float | None, dark: float | None,
             means: Mapping[int, float] | None) -> dict[int, str]:
    """The tilts left out of those whose ``angles`` (degrees) are given in ZValue order (ZValue -> why, the first
    reason that applies): ``views`` (ZValues), angles beyond ``max_angle`` degrees either way, tilts whose mean is
    below ``dark`` times the median of the ``means`` given (ZValue -> the tilt's mean: those not left out otherwise,
    :func:`section_means`)."""
    out: dict[int, str] = {}
    for z in views:
        out.setdefault(z, f"view {z + 1} excluded")
    for z, angle in enumerate(angles):
        if max_angle is not None and abs(angle) > max_angle:
            out.setdefault(z, f"{angle:g}° is beyond {max_angle:g}°")
    if dark is not None and means:
        median = float(np.median(list(means.values())))
        for z, mean in means.items():
            if mean < dark * median:
                out.setdefault(z, f"mean {mean:.4g} below {dark:g} x the median {median:.4g} (dark)")
    return out


def section_means(section: Callable[[int], np.ndarray], count: int, before: Mapping[int, str]) -> dict[int, float]:
    """The mean of each of ``count`` tilts' images (ZValue -> mean; ``section(z)``: tilt z's, a view of its file)
    but those left out ``before`` (by view or angle), which ``dark`` compares in :func:`left_out`: read one at a
    time, with pread (no page fault on the file); 0 for complex values."""
    with mapped.scratch_buffers():
        return {z: RunningStatistics.of(mapped.read_view(section(z))).result().mean or 0.0
                for z in range(count) if z not in before}


def stack_order(series: TiltSeries, kept: Sequence[int], order: str) -> list[int]:
    """The tilts ``kept`` (ZValues) in the output stack's order: by angle, or as acquired; FileFormatError where
    two of them have one angle."""
    angle = [t.angle for t in series.tilts]
    by_angle = sorted(kept, key=lambda z: (angle[z], z))
    for a, b in itertools.pairwise(by_angle):
        if angle[b] - angle[a] < SAME_ANGLE:
            raise FileFormatError(f"{series.where(b)}: TiltAngle {angle[b]:g}, and {angle[a]:g} at [ZValue = {a}]: "
                                  f"one angle taken twice; {param('exclude')} one of them (view {b + 1} or {a + 1})")
    if order == "angle":
        return by_angle
    chosen = set(kept)
    return [z for z in acquisition_order(series)[0] if z in chosen]


# -- the files beside the stack -------------------------------------------------------------------------------


def angles_text(series: TiltSeries, order: Sequence[int]) -> str:
    """IMOD's ``.rawtlt`` (and ``.tlt`` before alignment): one angle a line, in stack order, as the mdoc wrote it."""
    return "".join(f"{series.tilts[z].angle!r}\n" for z in order)


def mdoc_text(series: TiltSeries, order: Sequence[int], image_file: str, axis: float) -> str:
    """The mdoc of the stack ``image_file`` holding the tilts ``order``: each section renumbered as the stack's,
    every field kept; the tilt-axis title says ``axis``."""
    records = [series.tilts[z].record.model_copy(update={"ZValue": i}) for i, z in enumerate(order)]
    titles = [_TILT_AXIS_TITLE.sub(lambda found: f"{found.group(1)} = {axis:g}", title) for title in series.titles]
    header = series.header.model_copy(update={"ImageFile": Path(image_file)})
    return Mdoc(titles=titles, global_data=header, section_data=records).to_string() + "\n"


def relion_star(series: TiltSeries, order: Sequence[int], images: Sequence[str], axis: float, doses: np.ndarray,
                name: str) -> list[bytes | np.ndarray]:
    """RELION 5's tilt-series STAR (its block named after the tilt series' file ``name``): a row per tilt in stack
    order, ``images`` naming each (``N@stack``), its nominal stage tilt, the tilt axis, its pre-exposure (``doses``
    by ZValue) and, where the mdoc has it, the target defocus."""
    tilts = [series.tilts[z] for z in order]
    columns: dict[str, np.ndarray] = {
        "rlnMicrographName": np.array([name.encode() for name in images], "S"),
        "rlnTomoNominalStageTiltAngle": np.array([t.angle for t in tilts], np.float64),
        "rlnTomoNominalTiltAxisAngle": np.full(len(tilts), axis, np.float64),
        "rlnMicrographPreExposure": np.array([doses[t.z] for t in tilts], np.float64)}
    if all(t.record.TargetDefocus is not None for t in tilts):
        columns["rlnTomoNominalDefocus"] = np.array([t.record.TargetDefocus for t in tilts], np.float64)
    return star.loop_text(block_name(name), columns)


def block_name(name: str) -> str:
    """RELION's name of a tilt series (its STAR block): the file name without extensions, blanks made '_'."""
    return "_".join(name.split(".")[0].split()) or "tilt_series"
