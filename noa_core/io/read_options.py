"""Each format's read options: what a read may ask of a file beside its path, declared once, by the format, as a
small frozen dataclass (its ``read_options`` member, see :class:`noa_core.io.protocol.ImageFormat`).

This module is light (no NumPy): the operations' shared READING parameters take their names and defaults from
these fields (:mod:`noa_core.operations.spec`), and ``noa --help`` imports them. An option is *given* when it
differs from its default (:func:`given`); a format refuses, naming it, an option given that it does not declare
(:func:`noa_core.io.formats.requested`). Each field's metadata says what the option reads (``what``: "TIFF
files have no channels"), and ``label`` where several options are one choice (MRC's as_stack/as_volume).
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _option(default: Any, what: str, label: str | None = None) -> Any:
    """A read option's field: its default, what it reads (refusals name it), and the label of the choice it is
    part of (several options, one choice)."""
    return field(default=default, metadata={"what": what, "label": label})


@dataclass(frozen=True)
class MrcReadOptions:
    """MRC (:mod:`noa_core.io.mrc`): the sections read as a stack of images, ``(nz, 1, ny, nx)``, or as one
    volume, ``(1, nz, ny, nx)``, whatever the header says (both false: as it says)."""

    as_stack: bool = _option(False, "choice of stack or volume", "as_stack/as_volume")
    as_volume: bool = _option(False, "choice of stack or volume", "as_stack/as_volume")


@dataclass(frozen=True)
class TiffReadOptions:
    """TIFF (:mod:`noa_core.io.tiff`): which series (None: the first, with a notice when there are several),
    which channel (C axis or samples per pixel; None: the file has one, or they map to the batch) and which
    pyramid level (None: level 0, the full resolution)."""

    series: int | None = _option(None, "series")
    channel: int | None = _option(None, "channels")
    level: int | None = _option(None, "pyramid levels")


@dataclass(frozen=True)
class OmeZarrReadOptions:
    """OME-Zarr (:mod:`noa_core.io.omezarr`): which channel and which multiscale level, as for TIFF."""

    channel: int | None = _option(None, "channels")
    level: int | None = _option(None, "pyramid levels")


@dataclass(frozen=True)
class EerReadOptions:
    """EER (:mod:`noa_core.io.eer`): hardware frames per fraction (None: 1), what becomes of the frames left
    over ('drop' or 'keep'), the grid (1, 2 or 3: 4K, 8K, 16K), and a gain file multiplying each fraction,
    turned upside down and rotated by 90-degree steps clockwise (None: 0) first
    (:func:`noa_core.io.eer.load_gain`)."""

    eer_group: int | None = _option(None, "EER frames")
    eer_group_last: str = _option("drop", "EER frames")
    eer_upsampling: int = _option(1, "EER frames")
    gain: str | None = _option(None, "EER frames")
    gain_flip_y: bool = _option(False, "EER frames")
    gain_rotate: int | None = _option(None, "EER frames")

    @property
    def frames_per_fraction(self) -> int:
        return self.eer_group or 1

    @property
    def quarter_turns(self) -> int:
        return self.gain_rotate or 0


@dataclass(frozen=True)
class ParticleReadOptions:
    """Particle files (:mod:`noa_core.io.particles`, RELION STAR and cryoSPARC .cs): the project folder the paths
    of their rows are relative to (None: the current folder, where RELION and cryoSPARC run)."""

    project_dir: str | None = _option(None, "particle rows")


# Every format's read options, in the order the doors list them (a test keeps this equal to the formats' own).
READ_OPTIONS = (MrcReadOptions, TiffReadOptions, OmeZarrReadOptions, EerReadOptions, ParticleReadOptions)


@functools.cache  # asked on every read: the declarations do not change
def fields() -> Mapping[str, dataclasses.Field]:
    """Every read option by name, in the order the doors list them: the first format declaring it gives its
    field (formats sharing an option agree on it: a test keeps them so)."""
    found: dict[str, dataclasses.Field] = {}
    for options in READ_OPTIONS:
        for f in dataclasses.fields(options):
            found.setdefault(f.name, f)
    return types.MappingProxyType(found)  # one for every caller: read only


def default(name: str) -> Any:
    """The default of the read option ``name`` (KeyError: no format declares it)."""
    return fields()[name].default


def given(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``options`` that ask for something: neither None nor their default (``as_stack=False``,
    ``eer_group_last='drop'`` ask for nothing). TypeError for a name no format declares."""
    known = fields()
    unknown = [name for name in options if name not in known]
    if unknown:
        raise TypeError(f"{unknown[0]!r} is not a read option ({', '.join(known)})")
    return {name: value for name, value in options.items() if value is not None and value != known[name].default}


def names(options: type) -> tuple[str, ...]:
    """The names of the read options of a format's dataclass ``options``."""
    return tuple(f.name for f in dataclasses.fields(options))
