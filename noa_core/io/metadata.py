"""What a file says about its array, and how that follows the array through permute and broadcast.

Per-axis values (pixel size, origin, start index, sampling, cell angle) are kept for the depth,
height and width axes only, in that order (Z, Y, X in MRC terms): the batch axis has no physical
size. When an operation moves the batch axis into D, H or W, the new axis gets the "unknown"
value (pixel size 0, origin 0, start 0, sampling unknown, angle 90).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

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
# The "no value" of each per-axis field, used for an axis that comes from the batch.
_UNKNOWN = {"pixel_size": 0.0, "origin": 0.0, "start": 0, "sampling": 0, "cell_angles": 90.0}


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
        format: 'mrc' or 'tiff'.
        shape: BDHW shape of the array this metadata describes.
        dtype: element type as stored in the file (e.g. 'float32'; mode 3 reads as 'complex64').
        mode: MRC mode number (None for TIFF).
        pixel_size: per D, H, W axis, in ``unit`` (0 means unknown).
        unit: 'Å' for MRC; for TIFF what the file says (None when it says nothing).
        origin: per D, H, W axis, in ``unit`` (MRC origin fields).
        start: MRC start indices (nxstart...) per D, H, W axis.
        sampling: MRC mx/my/mz per D, H, W axis (0 when unknown: the axis size is written).
        cell_angles: MRC cell angle opposite each of the D, H, W axes (gamma, beta, alpha).
        space_group: MRC ispg as read (None for TIFF).
        labels: MRC labels, oldest first.
        statistics: header statistics, or None when the file has none.
        kind: 'image', 'image stack', 'volume' or 'volume stack'.
        order: how the file stores the data: 'C', 'F' or 'strided' (None for derived metadata).
        axes: how the file's axes map to BDHW, in words.
        extended_header: MRC extended header bytes (None when absent or dropped).
        exttyp: MRC extended header type (e.g. 'FEI1').
        path: the file read (None for derived metadata).
        series: TIFF series read.
        notices: things the user should know (dropped fields, series choice, transposed views...).
    """

    format: str
    shape: Shape4
    dtype: str
    mode: int | None = None
    pixel_size: Triple = (0.0, 0.0, 0.0)
    unit: str | None = ANGSTROM
    origin: Triple = (0.0, 0.0, 0.0)
    start: tuple[int, int, int] = (0, 0, 0)
    sampling: tuple[int, int, int] = (0, 0, 0)
    cell_angles: Triple = (90.0, 90.0, 90.0)
    space_group: int | None = None
    labels: list[str] = field(default_factory=list)
    statistics: Statistics | None = None
    kind: str = ""
    order: str | None = None
    axes: str = ""
    extended_header: bytes | None = None
    exttyp: str | None = None
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

    def _drop_extended_header(self, out: Metadata, why: str) -> None:
        if out.extended_header is not None:
            out.extended_header = None
            out.exttyp = None
            out.notices.append(f"extended header dropped: {why}, so it no longer matches the sections")

    def permute(self, perm: Sequence[int]) -> Metadata:
        """Metadata of ``array.permute(perm)``: per-axis values follow their axes."""
        perm4 = layout.check_permutation(perm)
        per_axis = {}
        for name, unknown in _UNKNOWN.items():
            values = (unknown,) + tuple(getattr(self, name))
            per_axis[name] = layout.permute(values, perm4)[1:]
        out = self._derived(layout.permute(self.shape, perm4), **per_axis)
        if perm4 != (0, 1, 2, 3):
            self._drop_extended_header(out, f"axes permuted by {perm4}")
        return out

    def broadcast(self, shape: int | Sequence[int]) -> Metadata:
        """Metadata of ``array.broadcast(shape)``: grown axes lose their MRC sampling."""
        target = layout.as_shape4(shape)
        layout.broadcast_strides(self.shape, layout.strides_for(self.shape), target)  # validates
        grown = [old != new for old, new in zip(self.shape[1:], target[1:])]
        sampling = tuple(0 if g else m for g, m in zip(grown, self.sampling))
        out = self._derived(target, sampling=sampling)
        if target != self.shape:
            self._drop_extended_header(out, f"shape broadcast from {self.shape} to {target}")
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
