"""What a file says about its array, and how that follows the array through permute and broadcast.

:class:`Metadata` is the header every format shares; fields only one format has live in that
format's part of it (:attr:`Metadata.mrc`, defined in :mod:`noa_core.io.mrc`).

Per-axis values (pixel size, origin, and the MRC start index, sampling and cell angle) are kept for
the depth, height and width axes only, in that order (Z, Y, X in MRC terms): the batch axis has no
physical size. When an operation moves the batch axis into D, H or W, the new axis gets the
"unknown" value (pixel size 0, origin 0, start 0, sampling unknown, angle 90).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from noa_core import layout
from noa_core.layout import Shape4

Triple = tuple[float, float, float]

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
    follow the array through permute and broadcast, adding notices for what they drop."""

    def permute(self, perm: Shape4, notices: list[str]) -> FormatFields: ...

    def broadcast(self, shape: Shape4, target: Shape4, notices: list[str]) -> FormatFields: ...


def permute_per_axis(values: Sequence, unknown, perm: Shape4) -> tuple:
    """Per-D/H/W ``values`` after ``permute(perm)`` of BDHW: an axis from the batch gets ``unknown``."""
    return layout.permute((unknown,) + tuple(values), perm)[1:]


def angstroms_per_unit(unit: str | None) -> float | None:
    """How many Ångström one ``unit`` is, or None for an unknown or missing unit."""
    if unit is None:
        return None
    return _ANGSTROMS_PER_UNIT.get(unit.strip().lower())


@dataclass(frozen=True)
class Statistics:
    """Header statistics: minimum, maximum, mean and RMS deviation from the mean (None: unknown)."""

    min: float | None
    max: float | None
    mean: float | None
    rms: float | None


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
    statistics: Statistics | None = None
    kind: str = ""
    order: str | None = None
    axes: str = ""
    mrc: FormatFields | None = None
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
        out = self._derived(layout.permute(self.shape, perm4),
                            pixel_size=permute_per_axis(self.pixel_size, 0.0, perm4),
                            origin=permute_per_axis(self.origin, 0.0, perm4))
        if self.mrc is not None:
            out.mrc = self.mrc.permute(perm4, out.notices)
        return out

    def broadcast(self, shape: int | Sequence[int]) -> Metadata:
        """Metadata of ``array.broadcast(shape)``: grown axes lose their MRC sampling."""
        target = layout.as_shape4(shape)
        layout.broadcast_strides(self.shape, layout.strides_for(self.shape), target)  # validates
        out = self._derived(target)
        if self.mrc is not None:
            out.mrc = self.mrc.broadcast(self.shape, target, out.notices)
        return out

    def resampled(self, shape: int | Sequence[int], pixel_size: Triple) -> Metadata:
        """Metadata of the array resampled onto ``shape`` (a Fourier rescale) with ``pixel_size`` per D, H, W:
        resized axes lose their MRC sampling, and the extended header goes when the shape changes."""
        target = layout.as_shape4(shape)
        out = self._derived(target, pixel_size=tuple(float(p) for p in pixel_size))
        if self.mrc is not None:
            out.mrc = self.mrc.broadcast(self.shape, target, out.notices)
        return out

    def in_angstrom(self) -> tuple[Triple, Triple, str | None]:
        """Pixel size and origin in Ångström, and a notice when the unit could not be converted."""
        scale = angstroms_per_unit(self.unit)
        if scale is None:
            if any(self.pixel_size):
                return self.pixel_size, self.origin, (
                    f"pixel size unit {self.unit!r} is unknown; values written unchanged as Å")
            return self.pixel_size, self.origin, None
        return (tuple(v * scale for v in self.pixel_size), tuple(v * scale for v in self.origin), None)
