"""What a file says about its array, and how that follows the array through permute and broadcast.

:class:`Metadata` is the header every format shares; fields only one format has live in that
format's part of it (:attr:`Metadata.mrc`, defined in :mod:`noa_core.io.mrc`), and the rows of a particle file
read as a stack in :attr:`Metadata.particles` (:mod:`noa_core.io.particles`): both follow the sections an
operation keeps.

Per-axis values (pixel size, origin, and the MRC start index, sampling and cell angle) are kept for
the depth, height and width axes only, in that order (Z, Y, X in MRC terms): the batch axis has no
physical size. When an operation moves the batch axis into D, H or W, the new axis gets the
"unknown" value (pixel size 0, origin 0, start 0, sampling unknown, angle 90).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from noa_core.array import layout
from noa_core.array.layout import Permutation4, Shape4
from noa_core.compute.moments import HeaderStatistics

Triple = tuple[float, ...]  # one value per D, H, W axis
# Per output section, the input's stored section it comes from (None: a new one), or a function giving them.
Picks = Sequence[int | None] | Callable[[], Sequence[int | None]] | None

ANGSTROM = "Å"
# Length units recognised when converting TIFF calibration to MRC Ångström, by their usual spellings.
_ANGSTROMS_PER_UNIT = {
    "å": 1.0, "a": 1.0, "angstrom": 1.0, "angstroms": 1.0,
    "nm": 10.0, "nanometer": 10.0, "nanometers": 10.0,
    "µm": 1e4, "μm": 1e4, "um": 1e4, "micron": 1e4, "microns": 1e4, "micrometer": 1e4,
    "mm": 1e7, "millimeter": 1e7, "cm": 1e8, "centimeter": 1e8, "m": 1e10, "meter": 1e10,
    "inch": 2.54e8, "in": 2.54e8,
}


class FormatFields(Protocol):
    """A format's own header fields (``Metadata.mrc`` holds :class:`noa_core.io.mrc.MrcFields`): they
    follow the array through permute, broadcast, resizing and the picking or joining of sections (the
    extended header's per-section records), adding notices for what they drop."""

    def permute(self, perm: Permutation4, notices: list[str]) -> FormatFields: ...

    def broadcast(self, shape: Shape4, target: Shape4, notices: list[str]) -> FormatFields: ...

    def resized(self, shape: Shape4, target: Shape4, grown_axes: Sequence[int] = ()) -> FormatFields: ...

    def take_sections(self, sections: int, stored: str | None, picks: Picks, why: str, pixel_scale: float,
                      notices: list[str]) -> FormatFields: ...

    def joined(self, parts: Sequence[tuple[Any, int, str | None, str]],  # Any: this format's fields or None
               notices: list[str]) -> FormatFields: ...


def permute_per_axis(values: Sequence, unknown, perm: Permutation4) -> tuple:
    """Per-D/H/W ``values`` after ``permute(perm)`` of BDHW: an axis from the batch gets ``unknown``."""
    return layout.permute((unknown,) + tuple(values), perm)[1:]


def stored_sections(shape: Sequence[int], axis: int, indices: Sequence[int]) -> list[int]:
    """The stored sections (``b * D + d``, as an MRC file holds them) of the output whose ``axis`` entries
    are the input's ``indices``."""
    b, d = shape[0], shape[1]
    if axis == 0:
        return [i * d + z for i in indices for z in range(d)]
    return [s * d + i for s in range(b) for i in indices]


def angstroms_per_unit(unit: str | None) -> float | None:
    """How many Ångström one ``unit`` is, or None for an unknown or missing unit."""
    if unit is None:
        return None
    return _ANGSTROMS_PER_UNIT.get(unit.strip().lower())


@dataclass
class Metadata:
    """Everything noa reads from a file header and writes back.

    Attributes:
        format: name of the format the file was read in ('mrc', 'tiff'), for reporting only.
        shape: BDHW shape of the array this metadata describes.
        dtype: element type as stored in the file (e.g. 'float32'; MRC mode 3 reads as 'complex64').
        pixel_size: per D, H, W axis, in ``unit`` (0 means unknown).
        unit: 'Å' for MRC; for TIFF what the file says (None when it says nothing).
        origin: per D, H, W axis, in ``unit`` (MRC origin fields).
        labels: MRC labels, oldest first.
        statistics: header statistics, or None when the file has none.
        kind: 'image', 'image stack', 'volume' or 'volume stack'.
        order: how the file stores the data: 'C', 'F' or 'strided' (None for derived metadata).
        axes: how the file's axes map to BDHW, in words.
        mrc: the MRC-only header fields (mode, start, sampling, ..., extended header), None when
            the source was not an MRC file.
        particles: the rows of the particle file each section is the image of
            (:class:`noa_core.io.particles.ParticleRows`, or why they no longer are), None when the source
            was not a particle file.
        path: the file read (None for derived metadata).
        series: TIFF series read.
        notices: things the user should know (dropped fields, series choice, transposed views...).
    """

    format: str
    shape: Shape4
    dtype: str
    pixel_size: Triple = (0.0, 0.0, 0.0)
    unit: str | None = ANGSTROM
    origin: Triple = (0.0, 0.0, 0.0)
    labels: list[str] = field(default_factory=list)
    statistics: HeaderStatistics | None = None
    kind: str = ""
    order: str | None = None
    axes: str = ""
    mrc: FormatFields | None = None
    particles: FormatFields | None = None
    path: str | None = None
    series: int | None = None
    notices: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.shape = layout.as_shape4(self.shape)
        if not self.kind:
            self.kind = layout.kind(self.shape)

    # -- derived metadata ------------------------------------------------------------------------

    def _derived(self, shape: Shape4, **changes) -> Metadata:
        """A copy describing a new array: no source file, no stored order, notices copied."""
        return dataclasses.replace(self, shape=shape, kind=layout.kind(shape), order=None, path=None,
                                   notices=list(self.notices), labels=list(self.labels), **changes)

    def permute(self, perm: Sequence[int]) -> Metadata:
        """Metadata of ``array.permute(perm)``: per-axis values follow their axes."""
        perm4 = layout.check_permutation(perm)
        out = self._derived(Shape4(layout.permute(self.shape, perm4)),
                            pixel_size=permute_per_axis(self.pixel_size, 0.0, perm4),
                            origin=permute_per_axis(self.origin, 0.0, perm4))
        if self.mrc is not None:
            out.mrc = self.mrc.permute(perm4, out.notices)
        if self.particles is not None:
            out.particles = self.particles.permute(perm4, out.notices)
        return out

    def broadcast(self, shape: int | Sequence[int]) -> Metadata:
        """Metadata of ``array.broadcast(shape)``: grown axes lose their MRC sampling."""
        target = layout.as_shape4(shape)
        layout.broadcast_strides(self.shape, layout.strides_for(self.shape), target)  # validates
        out = self._derived(target)
        if self.mrc is not None:
            out.mrc = self.mrc.broadcast(self.shape, target, out.notices)
        if self.particles is not None:
            out.particles = self.particles.broadcast(self.shape, target, out.notices)
        return out

    def derived(self, shape: Sequence[int], *, pixel_size: Sequence[float] | None = None,
                origin: Sequence[float] | None = None, grown_axes: Sequence[int] = ()) -> Metadata:
        """Metadata of an output of ``shape`` made from this array's voxels (a crop, pad, binning, flip,
        a choice of sections): pixel size and origin replaced where given; the format's per-axis fields of
        the axes whose size changed (or named in ``grown_axes``) become unknown."""
        target = layout.as_shape4(tuple(shape))
        out = self._derived(target)
        if pixel_size is not None:
            out.pixel_size = tuple(float(p) for p in pixel_size)
        if origin is not None:
            out.origin = tuple(float(o) for o in origin)
        if out.mrc is not None:
            out.mrc = out.mrc.resized(self.shape, target, grown_axes)
        if out.particles is not None:
            out.particles = out.particles.resized(self.shape, target, grown_axes)
        return out

    def with_sections(self, source: Metadata, picks: Picks, why: str = "", pixel_scale: float = 1.0,
                      merged: int = 1) -> Metadata:
        """This metadata (of an output) with the extended-header records of ``source``'s stored sections
        ``picks`` (:func:`stored_sections`), or, with ``picks`` None, without them because ``why``; FEI pixel
        sizes scaled by ``pixel_scale`` (a binning); ``merged``: each output section is made of that many input
        sections (an average of a group keeps its first one's record, but is no particle's image any more).
        The one rule for every operation that picks sections."""
        if self.mrc is not None:
            self.mrc = self.mrc.take_sections(source.shape[0] * source.shape[1], source.order, picks, why,
                                              pixel_scale, self.notices)
        if source.particles is not None:
            rows_of = None if merged > 1 else picks
            self.particles = source.particles.take_sections(source.shape[0] * source.shape[1], source.order, rows_of,
                                                            why or f"each section merges {merged} of its input",
                                                            pixel_scale, self.notices)
        return self

    def section_part(self, axis: int, start: int, stop: int) -> Metadata:
        """Metadata of entries ``start:stop`` along ``axis`` (batch 0 or depth 1) as a file of their own (a
        split): a volume's Z sections become an image stack and keep their place (IMOD's convention: section
        ``k`` lies at ``k * pixel - origin``, so the origin loses ``start * pixel``)."""
        _b, d, h, w = self.shape
        if axis == 0:
            out = self.derived((stop - start, d, h, w))
        else:
            out = self.derived((stop - start, 1, h, w),
                               origin=(self.origin[0] - start * self.pixel_size[0], *self.origin[1:]))
        return out.with_sections(self, lambda: stored_sections(self.shape, axis, range(start, stop)))

    @staticmethod
    def joined(metas: Sequence[Metadata], names: Sequence[str]) -> Metadata:
        """Metadata of arrays joined along the batch: the first one's (pixel size, origin, labels); the
        extended headers joined as :meth:`FormatFields.joined` says."""
        first = metas[0]
        out = first._derived(layout.Shape4((sum(m.shape[0] for m in metas), *first.shape[1:])))
        if out.mrc is not None:
            parts = [(m.mrc, m.shape[0] * m.shape[1], m.order, name) for m, name in zip(metas, names)]
            out.mrc = out.mrc.joined(parts, out.notices)
        if out.particles is not None:
            rows = [(m.particles, m.shape[0] * m.shape[1], m.order, name) for m, name in zip(metas, names)]
            out.particles = out.particles.joined(rows, out.notices)
        return out

    def with_pixel_size(self, pixel_size: Sequence[float]) -> Metadata:
        """A copy with ``pixel_size`` in Å (one value for every axis, or D, H, W); the origin converted to Å
        with it, so that both keep one unit."""
        values = tuple(float(v) for v in pixel_size)
        values = values * 3 if len(values) == 1 else values
        _, origin, _ = self.in_angstrom()
        return dataclasses.replace(self, pixel_size=values, origin=tuple(origin), unit=ANGSTROM,
                                   notices=list(self.notices), labels=list(self.labels))

    def resampled(self, shape: int | Sequence[int], pixel_size: Triple) -> Metadata:
        """Metadata of the array resampled onto ``shape`` (a Fourier rescale) with ``pixel_size`` per D, H, W:
        resized axes lose their MRC sampling, and the extended header goes when the shape changes."""
        target = layout.as_shape4(shape)
        out = self._derived(target, pixel_size=tuple(float(p) for p in pixel_size))
        if self.mrc is not None:
            out.mrc = self.mrc.broadcast(self.shape, target, out.notices)
        if self.particles is not None:  # each image resampled: still the particles' images
            out.particles = self.particles.resized(self.shape, target)
        return out

    def width_pixel_size(self) -> float | None:
        """The width axis' pixel size in Å, which the Fourier operations take for every axis (None: unknown)."""
        pixel, _, _ = self.in_angstrom()
        return pixel[2] if pixel[2] > 0 else None

    def in_angstrom(self) -> tuple[Triple, Triple, str | None]:
        """Pixel size and origin in Ångström, and a notice when the unit could not be converted."""
        scale = angstroms_per_unit(self.unit)
        if scale is None:
            if any(self.pixel_size):
                return self.pixel_size, self.origin, (
                    f"pixel size unit {self.unit!r} is unknown; values written unchanged as Å")
            return self.pixel_size, self.origin, None
        return (tuple(v * scale for v in self.pixel_size), tuple(v * scale for v in self.origin), None)
