"""MRC2014 files: header validation, reading as BDHW views, and header creation for writing.

:data:`FORMAT` is the MRC :class:`~noa_core.io.protocol.ImageFormat`; the header fields only MRC has
travel in :class:`MrcFields` (``Metadata.mrc``).

noa parses and validates the 1024-byte header itself (with mrcfile's header dtype) so that every
bad field gets its own one-line error before anything is allocated or mapped, then maps or reads
the data. mrcfile is the oracle in the tests.

Axes: the data on disk are sections x rows x columns; ``mapc``, ``mapr``, ``maps`` say which of
X, Y, Z the columns, rows and sections hold. noa returns a view in Z, Y, X terms (then BDHW), so a
file with another mapping opens as a permuted view. MRC2014 gives cell lengths, sampling (mx, my,
mz) and origin along X, Y, Z already, so they follow the axes without change; the start indices
(nxstart...) are per column/row/section and are permuted to X, Y, Z.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal, cast

import numpy as np
from numpy.lib.stride_tricks import as_strided

from noa_core import __version__
from noa_core.array import asarray, layout
from noa_core.array.layout import Permutation4, Shape4
from noa_core.errors import (
    AxisMappingError,
    FileFormatError,
    HeaderError,
    LayoutError,
    ParameterError,
    SizeError,
    TruncatedFileError,
    UnknownFormatError,
    UnsupportedModeError,
    WriteDTypeError,
    param,
)
from noa_core.io import mapped
from noa_core.io.compression import CHUNK_BYTES, Decompressed, opened_input, size_of
from noa_core.io.metadata import ANGSTROM, HeaderStatistics, Metadata, Triple, permute_per_axis
from noa_core.io.protocol import Created, OutputSpec, Probe, ReadRequest
from noa_core.io.read_options import MrcReadOptions
from noa_core.limits import check_input_size

if TYPE_CHECKING:
    from noa_core.array import Array

EXTENSIONS: tuple[str, ...] = (".mrc", ".mrcs", ".map", ".st", ".ali", ".rec")
HEADER_BYTES = 1024
# The MRC2014 header's 56 words, named as mrcfile names them (a test keeps the two equal): written out here,
# since importing mrcfile for it would cost every call 10 ms (issue 27).
_XYZ_F4 = [("x", "f4"), ("y", "f4"), ("z", "f4")]
HEADER_DTYPE = np.dtype(
    [(name, "i4") for name in ("nx", "ny", "nz", "mode", "nxstart", "nystart", "nzstart", "mx", "my", "mz")]
    + [("cella", _XYZ_F4), ("cellb", [("alpha", "f4"), ("beta", "f4"), ("gamma", "f4")]),
       ("mapc", "i4"), ("mapr", "i4"), ("maps", "i4"), ("dmin", "f4"), ("dmax", "f4"), ("dmean", "f4"),
       ("ispg", "i4"), ("nsymbt", "i4"), ("extra1", "V8"), ("exttyp", "S4"), ("nversion", "i4"),
       ("extra2", "V84"), ("origin", _XYZ_F4), ("map", "S4"), ("machst", "u1", 4), ("rms", "f4"),
       ("nlabl", "i4"), ("label", "S80", 10)])
_MAP_ID = (208, b"MAP ")  # offset and value of the MRC2014 'map' field
# Mode -> dtype of one stored value (mode 3 stores int16 pairs; 101 packs two 4-bit values a byte).
_MODE_DTYPES = {0: "i1", 1: "i2", 2: "f4", 3: "i2", 4: "c8", 6: "u2", 12: "f2", 101: "u1"}
_WRITE_MODES = {"int8": 0, "uint8": 0, "int16": 1, "float32": 2, "complex64": 4, "uint16": 6, "float16": 12}
WRITABLE_DTYPES = tuple(_WRITE_MODES)
# IMOD's stamp and flags (header bytes 152, 156): under the stamp, bit 0 of the flags SET means mode 0
# holds signed bytes, CLEAR unsigned (MRC_FLAGS_SBYTES, readBytesSigned in IMOD's libcfshr/b3dutil.c).
_IMOD_STAMP = 1146047817
_IMOD_SIGNED_BYTES = 1
_IMOD_STAMP_AT, _IMOD_FLAGS_AT = 152 - 112, 156 - 112  # offsets inside the 'extra2' field
# How uint8 data are written (write option 'uint8_mode'): widened to mode 6, which every reader agrees
# on (mrcfile does the same), or as IMOD's unsigned mode 0, which only IMOD reads as unsigned.
UINT8_MODES = ("widen", "imod")
# Names under which an ispg-0 file with mz == nz is a stack all the same (RELION's particle stacks,
# IMOD's tilt series and aligned stacks); under any other name such a file is a map written the old way.
_STACK_NAMES = (".mrcs", ".st", ".ali")
# Extended header types MRC2014 readers know (mrcfile.validate's list).
_EXTTYPES = ("CCP4", "MRCO", "SERI", "AGAR", "FEI1", "FEI2", "HDF5")
_VOLUME_STACK_ISPG = range(401, 631)
_VOLUME_ISPG = range(1, 231)
# Above this, a claimed data size is refused outright (256 TiB): no real file is that large.
MAX_DATA_BYTES = 1 << 48
# The extended header is held in memory: above this (64 MiB, far beyond any real one) it is refused.
MAX_EXTENDED_BYTES = 64 << 20
MAX_LABELS = 10
LABEL_BYTES = 80
MAX_STAMP_SECONDS = 253402300799  # SOURCE_DATE_EPOCH up to 9999-12-31 23:59:59 UTC, the last moment a label writes


# Extended header types whose records are one per section (mrcfile indexes FEI1/FEI2; SerialEM and Agard
# blocks hold nint bytes per section), and the ones holding symmetry operators, which belong to the map.
PER_SECTION_TYPES = ("FEI1", "FEI2", "SERI", "AGAR")
SYMMETRY_TYPES = ("CCP4", "MRCO")
# Per output section, the input section it comes from (None: a new one), or a function giving them.
Picks = Sequence[int | None] | Callable[[], Sequence[int | None]] | None


@dataclass(frozen=True)
class MrcFields:
    """The header fields only MRC has, per D, H, W axis where they are per axis (``Metadata.mrc``).

    Attributes:
        mode: MRC mode number as read.
        start: start indices (nxstart...) per D, H, W axis.
        sampling: mx/my/mz per D, H, W axis (0 when unknown: the axis size is written).
        cell_angles: cell angle opposite each of the D, H, W axes (gamma, beta, alpha).
        space_group: ispg as read.
        extended_header: extended header bytes (None when absent or dropped).
        exttyp: extended header type (e.g. 'FEI1').
        dropped: why the source's extended header was dropped on the way (permute, broadcast), for the
            output's notice; None when nothing was dropped.
    """

    mode: int | None = None
    start: tuple[int, ...] = (0, 0, 0)
    sampling: tuple[int, ...] = (0, 0, 0)
    cell_angles: Triple = (90.0, 90.0, 90.0)
    space_group: int | None = None
    extended_header: bytes | None = None
    exttyp: str | None = None
    dropped: str | None = None

    def permute(self, perm: Permutation4, notices: list[str]) -> MrcFields:
        """The fields of a BDHW array permuted by ``perm``: per-axis values follow their axes (an axis
        from the batch gets start 0, sampling unknown, angle 90); the extended header goes unless
        ``perm`` is the identity, with a notice added to ``notices``."""
        out = dataclasses.replace(self, start=permute_per_axis(self.start, 0, perm),
                                  sampling=permute_per_axis(self.sampling, 0, perm),
                                  cell_angles=permute_per_axis(self.cell_angles, 90.0, perm))
        if perm != (0, 1, 2, 3):
            out = out._without_extended_header(f"axes permuted by {perm}", notices)
        return out

    def broadcast(self, shape: Shape4, target: Shape4, notices: list[str]) -> MrcFields:
        """The fields of an array broadcast from ``shape`` to ``target``: grown axes lose their
        sampling; the extended header goes when the shape changes, with a notice added to ``notices``."""
        out = self.resized(shape, target)
        if target != shape:
            out = out._without_extended_header(f"shape broadcast from {shape} to {target}", notices)
        return out

    def resized(self, shape: Shape4, target: Shape4, grown_axes: Sequence[int] = ()) -> MrcFields:
        """The fields of an output of ``target`` made from an array of ``shape`` (a crop, pad, binning,
        regrouping): the D, H, W axes whose size changed, or named in ``grown_axes``, lose their sampling."""
        changed = [shape[i] != target[i] or i in grown_axes for i in (1, 2, 3)]
        return dataclasses.replace(self, sampling=tuple(0 if c else m for c, m in zip(changed, self.sampling)))

    def record_bytes(self, sections: int) -> int | None:
        """Bytes of one section's record when the extended header holds one per section of ``sections``
        stored sections (FEI1/FEI2 by mrcfile's record type, SERI/AGAR by division); None otherwise."""
        extended = self.extended_header
        if extended is None or self.exttyp not in PER_SECTION_TYPES:
            return None
        dtype = _records_dtype(self.exttyp)
        if dtype is not None:
            size = dtype.itemsize
        else:
            size = len(extended) // sections if sections and len(extended) % sections == 0 else 0
        return size if size and len(extended) >= size * sections else None

    def take_sections(self, sections: int, stored: str | None, picks: Picks, why: str, pixel_scale: float,
                      notices: list[str]) -> MrcFields:
        """The fields of an output whose stored sections are the input's ``picks`` (per output section, the
        input section whose record it takes, None for a new one; or a function giving them, called only
        where there are per-section records), for an input of ``sections`` stored sections in the order
        ``stored``. With ``picks`` None the sections are new, because ``why``. Per-section records follow
        their sections (FEI pixel sizes scaled by ``pixel_scale``, a binning); a block not per section (CCP4
        and MRCO symmetry operators) stays whenever the sections come from the input's. What cannot
        follow is dropped, with a notice added to ``notices``."""
        extended = self.extended_header
        if extended is None:
            return self
        if self.exttyp not in PER_SECTION_TYPES:
            if picks is not None or self.exttyp in SYMMETRY_TYPES:
                return self
            return self._without_extended_header(why, notices)
        if picks is None:
            return self._without_extended_header(why, notices)
        if callable(picks):
            picks = picks()
        if stored not in ("C", "F", None):
            return self._without_extended_header("the input's sections are not along Z (axis mapping), so its "
                                                 "records cannot follow them", notices)
        size = self.record_bytes(sections)
        if size is None:
            return self._without_extended_header(f"its {self.exttyp} records ({len(extended)} bytes) cannot be "
                                                 f"told apart for {sections} sections", notices)
        if any(p is None for p in picks):
            return self._without_extended_header("new sections were added, which have no records", notices)
        records = np.frombuffer(extended, np.uint8, count=size * sections).reshape(sections, size)
        chosen = records[cast(list[int], list(picks))] if len(picks) else records[:0]  # no None: refused above
        dtype = _records_dtype(self.exttyp)
        if dtype is not None and pixel_scale != 1.0 and len(chosen):
            typed = chosen.copy().view(dtype).reshape(-1)
            for name in ("Pixel size X", "Pixel size Y"):
                typed[name] = typed[name] * pixel_scale
            chosen = typed.view(np.uint8).reshape(len(picks), size)
        kept = np.ascontiguousarray(chosen).tobytes() or None
        return dataclasses.replace(self, extended_header=kept, exttyp=self.exttyp if kept else None)

    def joined(self, parts: Sequence[tuple[MrcFields | None, int, str | None, str]],
               notices: list[str]) -> MrcFields:
        """The fields of inputs joined along the batch, ``self`` being the first input's; ``parts`` gives per
        input its fields, stored sections, stored order and name. Per-section records are concatenated
        when every input has them, of one type; a block not per section stays when every input has the
        same one. Else the extended header is dropped, with a notice added to ``notices``."""
        if self.extended_header is None:
            return self
        first = parts[0][3]
        records = []
        for fields, sections, stored, name in parts:
            if fields is None or fields.extended_header is None:
                why = f"{name} has none"
            elif fields.exttyp != self.exttyp:
                why = f"{name}'s type ({fields.exttyp}) differs from {first}'s ({self.exttyp})"
            elif self.exttyp not in PER_SECTION_TYPES:
                if fields.extended_header == self.extended_header:
                    continue
                why = f"{name}'s {self.exttyp or 'untyped'} block differs from {first}'s"
            elif stored not in ("C", "F", None):
                why = f"{name}'s sections are not stored along Z"
            elif (size := fields.record_bytes(sections)) is None:
                why = f"{name}'s records are not one per section"
            else:
                records.append(fields.extended_header[:size * sections])
                continue
            return self._without_extended_header(f"inputs joined, and {why}", notices)
        if self.exttyp not in PER_SECTION_TYPES:
            return self
        return dataclasses.replace(self, extended_header=b"".join(records))

    def _without_extended_header(self, why: str, notices: list[str]) -> MrcFields:
        if self.extended_header is None:
            return self
        notices.append(f"extended header dropped: {why}, so it no longer matches the sections")
        return dataclasses.replace(self, extended_header=None, exttyp=None, dropped=why)



# ---------------------------------------------------------------------------------------------
# Header
# ---------------------------------------------------------------------------------------------


def _byte_order(raw: bytes) -> Literal["<", ">"]:
    """'<' or '>' from the machine stamp; for old files without one, the order giving a valid mode."""
    stamp = raw[212]
    if stamp in (0x44, 0x41):
        return "<"
    if stamp == 0x11:
        return ">"
    for order in ("<", ">"):
        mode = int(np.frombuffer(raw, f"{order}i4", count=1, offset=12)[0])
        if mode in _MODE_DTYPES:
            return order
    return "<"  # let the mode check name the problem


def parse_header(path: Path, raw: bytes) -> np.record:
    """The header record in the file's byte order, validated field by field."""
    if len(raw) < HEADER_BYTES:
        raise TruncatedFileError(f"{path}: header: {len(raw)} bytes, an MRC header needs {HEADER_BYTES}")
    order = _byte_order(raw)
    header = np.frombuffer(raw, HEADER_DTYPE.newbyteorder(order), count=1)[0]
    for name in ("nx", "ny", "nz"):
        if int(header[name]) <= 0:
            raise SizeError(f"{path}: {name}: size {int(header[name])} must be positive")
    mode = int(header["mode"])
    if mode not in _MODE_DTYPES:
        raise UnsupportedModeError(f"{path}: mode: {mode} is not an MRC mode noa reads "
                                   f"({', '.join(map(str, _MODE_DTYPES))})")
    maps = (int(header["mapc"]), int(header["mapr"]), int(header["maps"]))
    if sorted(maps) != [1, 2, 3]:
        raise AxisMappingError(f"{path}: mapc/mapr/maps: {maps} is not a permutation of (1, 2, 3)")
    nsymbt = int(header["nsymbt"])
    if not 0 <= nsymbt <= MAX_EXTENDED_BYTES:
        raise SizeError(f"{path}: nsymbt: extended header size {nsymbt} is "
                        f"{'negative' if nsymbt < 0 else f'over the {MAX_EXTENDED_BYTES}-byte limit'}")
    if data_bytes(header) > MAX_DATA_BYTES:
        raise SizeError(f"{path}: nx/ny/nz: {int(header['nx'])} x {int(header['ny'])} x {int(header['nz'])} "
                        f"in mode {mode} is {data_bytes(header)} bytes, beyond any real file")
    return header


def data_bytes(header: np.record) -> int:
    """Bytes of data the header promises (mode 101 pads each row to whole bytes)."""
    nx, ny, nz, mode = (int(header[k]) for k in ("nx", "ny", "nz", "mode"))
    if mode == 101:
        return (nx + 1) // 2 * ny * nz
    return nx * ny * nz * np.dtype(_MODE_DTYPES[mode]).itemsize * (2 if mode == 3 else 1)


def stack_layout(path: Path, header: np.record, file_size: int) -> tuple[int, np.dtype, int, int, int, float]:
    """Where the sections of a stack lie, for reading them one by one (a particle file's images): the byte offset
    of the first, the stored element type (in the file's byte order), how many, their height and width, and the
    pixel size (Å, 0 when unknown). Refuses what is not a plain stack of sections: sections stored in another
    axis order, modes without a NumPy type (3, 101), fewer bytes than the header promises."""
    mode = int(header["mode"])
    if (int(header["mapc"]), int(header["mapr"]), int(header["maps"])) != (1, 2, 3):
        raise AxisMappingError(f"{path}: mapc/mapr/maps: the sections are not stored row by row (1, 2, 3); "
                               "noa reads such stacks whole, not as a particle file's images")
    if mode in (3, 101):
        raise UnsupportedModeError(f"{path}: mode: {mode} (packed) is not a mode of particle images")
    offset = HEADER_BYTES + int(header["nsymbt"])
    if file_size < offset + data_bytes(header):
        raise TruncatedFileError(f"{path}: nx/ny/nz/mode: the header promises {offset + data_bytes(header)} bytes, "
                                 f"the file holds {file_size}")
    nx, ny, nz = (int(header[k]) for k in ("nx", "ny", "nz"))
    pixel = _pixel_size(float(header["cella"]["x"]), int(header["mx"]))
    return offset, _file_dtype(header), nz, ny, nx, pixel


def _imod_flags(header: np.record) -> int | None:
    """IMOD's flags when the header carries IMOD's stamp, else None."""
    extra = bytes(header["extra2"])
    order = _header_order(header)
    stamp = int(np.frombuffer(extra, f"{order}i4", count=1, offset=_IMOD_STAMP_AT)[0])
    if stamp != _IMOD_STAMP:
        return None
    return int(np.frombuffer(extra, f"{order}i4", count=1, offset=_IMOD_FLAGS_AT)[0])


def _header_order(header: np.record) -> Literal["<", ">", "="]:
    order = header.dtype["nx"].byteorder
    return order if order in ("<", ">") else "="


def _is_unsigned_mode0(header: np.record) -> bool:
    """IMOD's rule: stamped with the signed-bytes bit clear. Unstamped mode 0 is signed (MRC2014)."""
    flags = _imod_flags(header)
    return flags is not None and not flags & _IMOD_SIGNED_BYTES


def _mode0_notice(path: Path, header: np.record) -> str | None:
    """What the user should know about how mode-0 bytes were read: only unstamped files are a choice."""
    if int(header["mode"]) != 0 or _imod_flags(header) is not None:
        return None
    return (f"{path}: mode 0 without IMOD's stamp: bytes read as signed (-128..127), as MRC2014 says; "
            "files IMOD wrote as unsigned carry its stamp")


def _ispg0_volume(path: Path, header: np.record, sections: int) -> bool:
    """A map written the old way (RELION, cryoDRGN): ispg 0 with mz == nz > 1, not under a stack's name."""
    name = path.name.lower().removesuffix(".gz").removesuffix(".bz2")
    return (int(header["ispg"]) == 0 and sections > 1 and int(header["mz"]) == sections
            and not name.endswith(_STACK_NAMES))


def _bdhw_split(path: Path, header: np.record, nz_xyz: int, as_stack: bool,
                as_volume: bool, notices: list[str]) -> tuple[int, int, str]:
    """``(batch, depth, why)`` for the Z extent of a file, from ispg/mz or the caller's override; a
    choice the user may want to override is added to ``notices``."""
    if as_stack and as_volume:
        raise LayoutError(f"{path}: as_stack and as_volume cannot both be True")
    ispg, mz = int(header["ispg"]), int(header["mz"])
    if as_stack:
        return nz_xyz, 1, param("as_stack", "true")
    if as_volume:
        return 1, nz_xyz, param("as_stack", "false")
    if ispg in _VOLUME_STACK_ISPG:
        if mz <= 0 or nz_xyz % mz:
            raise HeaderError(f"{path}: mz: {nz_xyz} sections are not divisible by mz={mz} "
                              f"(ispg {ispg} says volume stack); give {param('as_stack', 'true')} or "
                              f"{param('as_stack', 'false')} to override")
        return nz_xyz // mz, mz, f"ispg {ispg}: volume stack"
    if ispg in _VOLUME_ISPG:
        return 1, nz_xyz, f"ispg {ispg}: volume"
    if _ispg0_volume(path, header, nz_xyz):
        notices.append(f"{path}: ispg 0 with mz = nz = {nz_xyz}: read as a volume (a map written the way "
                       f"RELION writes them); give {param('as_stack', 'true')} to read an image stack")
        return 1, nz_xyz, f"ispg 0, mz = nz = {nz_xyz}: volume"
    if ispg == 0:
        return nz_xyz, 1, "ispg 0: image stack" if nz_xyz > 1 else "ispg 0: image"
    raise HeaderError(f"{path}: ispg: space group {ispg} is neither 0 (images), 1-230 (volume) nor "
                      f"401-630 (volume stack); give {param('as_stack', 'true')} or {param('as_stack', 'false')}")


def _labels(header: np.record) -> list[str]:
    texts = [bytes(label).decode("latin-1").rstrip("\x00 ") for label in header["label"]]
    return [t for t in texts if t.strip()]


def _statistics(header: np.record) -> HeaderStatistics:
    lo, hi, mean, rms = (float(header[k]) for k in ("dmin", "dmax", "dmean", "rms"))
    determined = hi >= lo  # MRC2014: dmax < dmin means "not well determined"
    return HeaderStatistics(lo if determined else None, hi if determined else None,
                      mean if determined and mean >= lo else None, rms if rms >= 0 else None)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _read_exactly(stream, count: int, path: Path, what: str) -> bytearray:
    """``count`` bytes, grown chunk by chunk so memory only follows bytes that really exist."""
    out = bytearray()
    while len(out) < count:
        chunk = stream.read(min(count - len(out), CHUNK_BYTES))
        if not chunk:
            raise TruncatedFileError(f"{path}: {what}: the header promises {count} bytes, the file holds {len(out)}")
        out += chunk
    return out


def _decode(raw: np.ndarray, header: np.record) -> np.ndarray:
    """Values of modes that have no NumPy dtype: 3 (int16 pairs) and 101 (4-bit, low nibble first)."""
    nx, ny, nz, mode = (int(header[k]) for k in ("nx", "ny", "nz", "mode"))
    if mode == 3:
        pairs = raw.reshape(nz, ny, nx, 2)
        out = np.empty((nz, ny, nx), np.complex64)
        out.real, out.imag = pairs[..., 0], pairs[..., 1]
        return out
    packed = raw.reshape(nz, ny, (nx + 1) // 2)
    out = np.empty((nz, ny, nx), np.uint8)  # packed in C order, as the layout of every read assumes
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed[..., :nx // 2] >> 4
    return out


def _file_dtype(header: np.record) -> np.dtype:
    """The type of one stored value, in the file's byte order (mode 0 by IMOD's rule: see _is_unsigned_mode0)."""
    mode = int(header["mode"])
    if mode == 0 and _is_unsigned_mode0(header):
        return np.dtype("u1")
    return np.dtype(_MODE_DTYPES[mode]).newbyteorder(_header_order(header))


def _array_dtype(header: np.record) -> np.dtype:
    """The element type of the array a read gives: the stored type, native, or the decoded one."""
    decoded: dict[int, np.dtype] = {3: np.dtype(np.complex64), 101: np.dtype(np.uint8)}
    return decoded.get(int(header["mode"]), _file_dtype(header).newbyteorder("="))


def _bdhw_layout(path: Path, header: np.record, as_stack: bool, as_volume: bool,
                 notices: list[str]) -> tuple[Shape4, layout.Strides4, str]:
    """BDHW shape and element strides of the array a read gives (its sections are packed in C order),
    and the axis mapping in words; notices for the user are added to ``notices``."""
    nx, ny, nz = (int(header[k]) for k in ("nx", "ny", "nz"))
    crs = (int(header["mapc"]), int(header["mapr"]), int(header["maps"]))
    # per X, Y, Z (1, 2, 3): the size and element stride of the disk axis (columns, rows, sections) holding it
    disk = dict(zip(crs, ((nx, 1), (ny, nx), (nz, nx * ny))))
    (sz_n, sz), (h, sy), (w, sx) = disk[3], disk[2], disk[1]
    batch, depth, why = _bdhw_split(path, header, sz_n, as_stack, as_volume, notices)
    words = f"mapc={crs[0]} mapr={crs[1]} maps={crs[2]}; {why}"
    return layout.as_shape4((batch, depth, h, w)), layout.as_strides4((depth * sz, sz, sy, sx)), words


def _read_header(path: Path, source, file: BinaryIO, compressed: bool) -> tuple[np.record, bytes | None]:
    """The validated header and the extended header, read from ``source`` (the file, or its content when
    ``compressed``); the sizes it declares are checked against what the file can hold first."""
    header = parse_header(path, source.read(HEADER_BYTES))
    nsymbt = int(header["nsymbt"])
    total = HEADER_BYTES + nsymbt + data_bytes(header)
    if compressed:
        source.check_size(total, "nsymbt/nx/ny/nz/mode")
    else:
        size = size_of(file)
        if size < total:
            raise TruncatedFileError(f"{path}: nx/ny/nz/mode: the header promises {total} bytes "
                                     f"(extended header {nsymbt}), the file holds {size}")
    extended = bytes(_read_exactly(source, nsymbt, path, "nsymbt")) if nsymbt else None
    return header, extended


def _open(path: Path, kind: str | None, file: BinaryIO) -> BinaryIO | Decompressed:
    """What the content of ``file`` is read from: the file itself, or its decompressor."""
    return file if kind is None else Decompressed(path, kind, file)


def _spill(path: Path, source: Decompressed, nbytes: int, dtype: np.dtype) -> np.ndarray:
    """The next ``nbytes`` of ``source`` in native byte order, through an unlinked temporary file mapped
    read-only: memory stays bounded however far the content expands."""
    folder = mapped.spill_folder(path, nbytes, "nx/ny/nz/mode", "decompressing")
    # Unlinked from the start (O_TMPFILE where the file system has it, else removed as soon as made) and
    # mapped through its descriptor: a process killed while decompressing leaves nothing behind.
    import tempfile

    with tempfile.TemporaryFile(prefix="noa-", suffix=".decompressed", dir=folder) as temp:
        for start in range(0, nbytes, CHUNK_BYTES):  # whole items per chunk: CHUNK_BYTES is a multiple of 8
            chunk = source.read(min(CHUNK_BYTES, nbytes - start))
            if len(chunk) < min(CHUNK_BYTES, nbytes - start):
                raise TruncatedFileError(f"{path}: data: the header promises {nbytes} bytes, the stream holds "
                                         f"{start + len(chunk)}")
            temp.write(chunk if dtype.isnative else np.frombuffer(chunk, dtype).byteswap().tobytes())
        temp.flush()
        return mapped.map_input(path, 0, dtype.newbyteorder("="), nbytes // dtype.itemsize, private=True,
                                fd=temp.fileno())


def _read_data(path: Path, header: np.record, source, file: io.BufferedReader,
               request: ReadRequest[MrcReadOptions]) -> np.ndarray:
    """The stored values as a flat array (mapped where possible); a compressed stream is checked to its end."""
    nbytes, file_dtype = data_bytes(header), _file_dtype(header)
    count = nbytes // file_dtype.itemsize
    if request.compression is not None:
        if request.mmap:
            flat = _spill(path, source, nbytes, file_dtype)
        else:
            flat = np.frombuffer(_read_exactly(source, nbytes, path, "data"), file_dtype, count)
        source.finish(HEADER_BYTES + int(header["nsymbt"]) + nbytes)
        return flat
    offset = HEADER_BYTES + int(header["nsymbt"])
    if request.mmap and file_dtype.isnative and int(header["mode"]) not in (3, 101):
        return mapped.map_file(path, offset, file_dtype, count, request.tiles, file)
    file.seek(offset)
    flat = np.empty(count, file_dtype)
    if file.readinto(flat.view(np.uint8).data) != nbytes:
        raise TruncatedFileError(f"{path}: data: the file changed size while being read")
    return flat


def _read(path: Path, request: ReadRequest[MrcReadOptions]):
    """Read an MRC file: ``(Array, Metadata)``. Uncompressed native-order files map lazily."""
    with opened_input(path, request.opened) as file:
        source = _open(path, request.compression, file)
        header, extended = _read_header(path, source, file, request.compression is not None)
        notices: list[str] = []
        shape, strides, axes = _bdhw_layout(path, header, request.options.as_stack, request.options.as_volume,
                                            notices)
        check_input_size(shape, str(path))  # before the data: a compressed or swapped file is read whole
        flat = _read_data(path, header, source, file, request)
    if not flat.dtype.isnative:  # big-endian file: swap in place rather than holding two copies
        flat = flat.byteswap(inplace=True).view(flat.dtype.newbyteorder("="))
    nx, ny, nz = (int(header[k]) for k in ("nx", "ny", "nz"))
    disk = _decode(flat, header) if int(header["mode"]) in (3, 101) else flat.reshape(nz, ny, nx)
    bdhw = as_strided(disk, shape, tuple(s * disk.itemsize for s in strides), writeable=disk.flags.writeable)
    array = asarray(bdhw)
    return array, _metadata(path, header, array.shape, array.dtype, array.order, extended, axes, notices)


def _probe(path: Path, request: ReadRequest[MrcReadOptions]) -> Probe:
    """What :func:`_read` gives, from the header and extended header alone."""
    with opened_input(path, request.opened) as file:
        header, extended = _read_header(path, _open(path, request.compression, file), file,
                                        request.compression is not None)
    notices: list[str] = []
    shape, strides, axes = _bdhw_layout(path, header, request.options.as_stack, request.options.as_volume, notices)
    dtype = _array_dtype(header)
    return Probe(shape, strides, dtype,
                 _metadata(path, header, shape, dtype, layout.order_of(shape, strides), extended, axes, notices))


def _pixel_size(cell: float, sampling: int) -> float:
    """Cell length over sampling; 0 (unknown) unless both are positive and finite."""
    size = cell / sampling if sampling > 0 else 0.0
    return size if math.isfinite(size) and size > 0 else 0.0


def _metadata(path: Path, header: np.record, shape: Shape4, dtype: np.dtype, order: str, extended: bytes | None,
              axes: str, notices: list[str]) -> Metadata:
    crs = (int(header["mapc"]), int(header["mapr"]), int(header["maps"]))
    start_crs = (int(header["nxstart"]), int(header["nystart"]), int(header["nzstart"]))
    start_xyz = [0, 0, 0]
    for axis, value in zip(crs, start_crs):
        start_xyz[axis - 1] = value
    m_xyz = (int(header["mx"]), int(header["my"]), int(header["mz"]))
    cell = header["cella"]
    cell_xyz = (float(cell["x"]), float(cell["y"]), float(cell["z"]))
    pixel_xyz = tuple(_pixel_size(c, m) for c, m in zip(cell_xyz, m_xyz))
    origin = header["origin"]
    angles = header["cellb"]
    mode0_notice = _mode0_notice(path, header)
    if mode0_notice:
        notices.append(mode0_notice)
    if order == "F":
        notices.append(f"{path}: stored column-major (mapc=2, mapr=1): readers that ignore the axis "
                       "mapping show the transpose")
    exttyp = bytes(header["exttyp"]).decode("latin-1").strip("\x00 ") or None
    fields = MrcFields(
        mode=int(header["mode"]), start=(start_xyz[2], start_xyz[1], start_xyz[0]),
        sampling=(max(m_xyz[2], 0), max(m_xyz[1], 0), max(m_xyz[0], 0)),
        cell_angles=(float(angles["gamma"]), float(angles["beta"]), float(angles["alpha"])),
        space_group=int(header["ispg"]), extended_header=_little_endian_records(extended, exttyp, header),
        exttyp=exttyp if extended else None,
    )
    return Metadata(
        format=FORMAT.name, shape=shape, dtype=dtype.name,
        pixel_size=(pixel_xyz[2], pixel_xyz[1], pixel_xyz[0]), unit=ANGSTROM,
        origin=(float(origin["z"]), float(origin["y"]), float(origin["x"])),
        labels=_labels(header), statistics=_statistics(header),
        order=order, axes=axes, mrc=fields, path=str(path), notices=notices,
    )


# ---------------------------------------------------------------------------------------------
# Extended headers
# ---------------------------------------------------------------------------------------------


def _records_dtype(exttyp: str | None, order: str = "<") -> np.dtype | None:
    """mrcfile's dtype of one FEI1/FEI2 per-section record, None for other types."""
    if exttyp not in ("FEI1", "FEI2"):
        return None
    from mrcfile.dtypes import get_ext_header_dtype

    return get_ext_header_dtype(exttyp.encode("latin-1"), order)


def _little_endian_records(extended: bytes | None, exttyp: str | None, header: np.record) -> bytes | None:
    """The extended header as noa keeps it: FEI records of a big-endian file swapped to little-endian,
    the byte order of every MRC noa writes (other types are kept as read)."""
    dtype = _records_dtype(exttyp, _header_order(header))
    if extended is None or dtype is None or _header_order(header) != ">":
        return extended
    whole = len(extended) // dtype.itemsize * dtype.itemsize
    records = np.frombuffer(extended, dtype, count=whole // dtype.itemsize)
    return records.astype(dtype.newbyteorder("<")).tobytes() + extended[whole:]


def section_records(fields: MrcFields, sections: int) -> list[dict] | None:
    """Per-section pixel size (Y, X in Å) and tilt angle (degrees) of an FEI1/FEI2 extended header; None
    for other types or a header too short for ``sections`` records (as mrcfile's ``indexed_extended_header``)."""
    dtype = _records_dtype(fields.exttyp)
    extended = fields.extended_header or b""
    if dtype is None or len(extended) < sections * dtype.itemsize:
        return None
    records = np.frombuffer(extended, dtype, count=sections)
    if sections and int(records["Metadata size"][0]) != dtype.itemsize:
        return None
    metres = 1e10  # FEI records hold SI units; noa reports Å
    return [{"pixel_size": [float(r["Pixel size Y"]) * metres, float(r["Pixel size X"]) * metres],
             "tilt_angle": float(r["Alpha tilt"])} for r in records]


def _writable_exttyp(extended: bytes, exttyp: str | None) -> str | None:
    """The type to record for an extended header kept in an output, None when it cannot be named: a
    typeless block of 80-character text records is a pre-2014 CCP4 symmetry block."""
    if exttyp in _EXTTYPES:
        return exttyp
    is_text = all(32 <= c < 127 for c in extended)
    return "CCP4" if exttyp is None and len(extended) % 80 == 0 and is_text else None


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def mode_for(dtype: np.dtype, path: Path) -> int:
    """The MRC mode storing ``dtype``, or WriteDTypeError naming the allowed types."""
    try:
        return _WRITE_MODES[np.dtype(dtype).name]
    except KeyError:
        raise WriteDTypeError(f"{path}: mode: dtype {np.dtype(dtype).name} has no MRC mode; pass dtype= one of "
                              f"{', '.join(WRITABLE_DTYPES)}") from None


def uint8_mode(options: Mapping[str, str], path: Path) -> str:
    """The write option 'uint8_mode' ('widen' unless given), checked."""
    mode = options.get("uint8_mode", "widen")
    if mode not in UINT8_MODES:
        raise WriteDTypeError(f"{path}: uint8_mode: {mode!r} is not one of {', '.join(UINT8_MODES)}")
    return mode


def stored_dtype(dtype: np.dtype, options: Mapping[str, str], path: Path) -> np.dtype:
    """The element type stored for ``dtype``: uint8 is widened to uint16 (mode 6) unless IMOD's unsigned
    mode 0 is asked for, since MRC2014 readers (mrcfile, RELION) read mode 0 as signed."""
    if np.dtype(dtype) == np.uint8 and uint8_mode(options, path) == "widen":
        return np.dtype(np.uint16)
    return np.dtype(dtype)


def _uint8_notice(options: Mapping[str, str], path: Path) -> str:
    """How uint8 data were stored, and what other readers will see."""
    if uint8_mode(options, path) == "widen":
        return (f"{path}: uint8 data stored as uint16 (mode 6) so that every MRC reader sees the same values; "
                f"{param('uint8_mode', 'imod')} writes IMOD's unsigned mode 0")
    return (f"{path}: uint8 data stored as IMOD's unsigned mode 0 (stamp, signed-bytes flag clear): IMOD reads "
            "them as 0..255, strict MRC2014 readers (mrcfile, RELION) as signed bytes")


def _imod_extra(dtype: np.dtype) -> bytes:
    """The 'extra2' bytes of a mode-0 output: IMOD's stamp with the signed-bytes bit set for int8, clear
    for (IMOD-style) uint8; nothing for other modes."""
    extra = bytearray(84)
    if np.dtype(dtype) in (np.int8, np.uint8):
        flags = _IMOD_SIGNED_BYTES if np.dtype(dtype) == np.int8 else 0
        extra[_IMOD_STAMP_AT:_IMOD_STAMP_AT + 8] = np.array([_IMOD_STAMP, flags], "<i4").tobytes()
    return bytes(extra)


def _space_group(shape: Shape4, source: int | None) -> int:
    b, d, _, _ = shape
    if d > 1 and b > 1:
        return source if source is not None and source in _VOLUME_STACK_ISPG else 401
    if d > 1:
        return source if source is not None and source in _VOLUME_ISPG else 1
    return 0


def check_field(values: tuple[float, ...], name: str) -> None:
    """ParameterError unless every value fits an MRC header's float32 field as a normal number (or 0):
    beyond float32 it would be stored as inf, below its smallest normal as a denormal."""
    limits = np.finfo(np.float32)
    for v in values:
        if abs(v) > float(limits.max) or 0 < abs(v) < float(limits.tiny):
            raise ParameterError(f"{v:.6g} does not fit the header's float32 field (0, or between "
                                 f"{float(limits.tiny):.3g} "
                                 f"and {float(limits.max):.3g} in magnitude)", name)


def stamp_label(text: str | None, kind: str) -> str:
    """The label noa appends: version, UTC date, and what was done (at most 80 characters)."""
    date = _stamp_time().strftime("%Y-%m-%d %H:%M")
    return f"noa {__version__} {date}: {text or 'wrote ' + kind}"[:LABEL_BYTES]


def _stamp_time() -> datetime.datetime:
    """Now, or the moment ``SOURCE_DATE_EPOCH`` says (seconds since 1970, UTC) where it is set: the same bytes from
    the same inputs whenever a pipeline runs (reproducible-builds.org's variable)."""
    given = os.environ.get("SOURCE_DATE_EPOCH")
    if given is None:
        return datetime.datetime.now(datetime.UTC)
    if not (given.isascii() and given.isdigit()) or int(given) > MAX_STAMP_SECONDS:
        raise ParameterError(f"SOURCE_DATE_EPOCH: {given!r} is not a count of seconds since 1970-01-01 UTC (0 to "
                             f"{MAX_STAMP_SECONDS}); it sets the date noa writes in the labels")
    return datetime.datetime.fromtimestamp(int(given), datetime.UTC)


def merge_labels(old: list[str], new: str) -> list[str]:
    """``old + [new]``, at most 10: the first label stays, the oldest after it go."""
    labels = list(old) + [new]
    while len(labels) > MAX_LABELS:
        del labels[1]
    return labels


def make_header(spec: OutputSpec, stats: HeaderStatistics, labels: list[str], extended: bytes | None,
                exttyp: str | None) -> bytes:
    """The 1024 header bytes (little-endian, nversion 20141) describing an output array stored as
    :func:`stored_dtype` says (``spec.dtype`` with ``spec.write_options``).

    ``spec.order`` 'F' stores each section column-major and records it as mapc=2, mapr=1, maps=3.
    Pixel size and origin are converted to Å when the metadata unit allows; the MRC fields of the
    metadata (sampling, start, cell angles, space group) are kept where they still fit.
    """
    shape, order, metadata = spec.shape, spec.order, spec.metadata
    dtype = stored_dtype(spec.dtype, spec.write_options, spec.path)
    b, d, h, w = shape
    header = np.zeros((), HEADER_DTYPE.newbyteorder("<"))
    cols, rows = (h, w) if order == "F" else (w, h)
    header["nx"], header["ny"], header["nz"] = cols, rows, b * d
    header["mode"] = mode_for(dtype, spec.path)
    header["mapc"], header["mapr"], header["maps"] = (2, 1, 3) if order == "F" else (1, 2, 3)
    fields = metadata.mrc if metadata is not None and isinstance(metadata.mrc, MrcFields) else MrcFields()
    ispg = _space_group(shape, fields.space_group)
    header["ispg"] = ispg
    pixel, origin = ((0.0,) * 3, (0.0,) * 3) if metadata is None else metadata.in_angstrom()[:2]
    sampling, start, angles = fields.sampling, fields.start, fields.cell_angles
    # Sampling along X, Y, Z: the source's when known, else the axis size; an image stack samples 1
    # section and a volume stack's mz must be its volume depth (mrcfile and IMOD rely on both).
    mz = d if ispg in _VOLUME_STACK_ISPG or sampling[0] <= 0 else sampling[0]
    if ispg == 0:
        mz = 1
    m_xyz = (sampling[2] if sampling[2] > 0 else w, sampling[1] if sampling[1] > 0 else h, mz)
    header["mx"], header["my"], header["mz"] = m_xyz
    # An image stack's sections are spaced by the image's pixel size, as IMOD's newstack writes them: readers
    # that take the Z spacing from cella z / mz never see 0 where the pixel size is known.
    z_pixel = pixel[2] if ispg == 0 and pixel[0] <= 0 else pixel[0]
    for name, p, m in zip("xyz", (pixel[2], pixel[1], z_pixel), m_xyz):
        header["cella"][name] = p * m
    header["cellb"]["alpha"], header["cellb"]["beta"], header["cellb"]["gamma"] = angles[2], angles[1], angles[0]
    header["origin"]["x"], header["origin"]["y"], header["origin"]["z"] = origin[2], origin[1], origin[0]
    start_cr = (start[1], start[2]) if order == "F" else (start[2], start[1])
    header["nxstart"], header["nystart"], header["nzstart"] = start_cr[0], start_cr[1], start[0]
    header["dmin"] = stats.min if stats.min is not None else 0.0
    header["dmax"] = stats.max if stats.max is not None else -1.0
    header["dmean"] = stats.mean if stats.mean is not None else -2.0
    header["rms"] = stats.rms if stats.rms is not None else -1.0
    header["nsymbt"] = len(extended) if extended else 0
    header["exttyp"] = (exttyp or "").encode("latin-1")[:4] if extended else b""
    header["nversion"] = 20141
    header["map"] = b"MAP "
    header["machst"] = (0x44, 0x44, 0, 0)
    header["extra2"] = _imod_extra(dtype)
    header["nlabl"] = len(labels)
    for i, text in enumerate(labels):
        header["label"][i] = text.encode("latin-1", "replace")[:LABEL_BYTES]
    return header.tobytes()


def check_writable_shape(shape: Shape4, path: Path) -> None:
    """MRC sizes are 32-bit and positive."""
    b, d, h, w = shape
    if math.prod(shape) == 0:
        raise FileFormatError(f"{path}: shape: {shape} is empty; MRC sizes must be at least 1")
    if max(w, h, b * d) > np.iinfo(np.int32).max:
        raise SizeError(f"{path}: nx/ny/nz: shape {shape} exceeds the 32-bit MRC size fields")


def _extended_header(spec: OutputSpec, notices: list[str]) -> tuple[bytes | None, str | None]:
    """The source's extended header and its type when the output keeps its sections in their order
    (same shape; element type and order within sections may change) and the type can be named; else
    none, with a notice added to ``notices`` when one is dropped."""
    md = spec.metadata
    fields = md.mrc if md is not None and isinstance(md.mrc, MrcFields) else None
    if md is None or fields is None or fields.extended_header is None:
        if fields is not None and fields.dropped:  # by permute or broadcast
            notices.append(f"{spec.path}: extended header dropped: {fields.dropped}, so it no longer matches "
                           "the sections")
        return None, None
    extended = fields.extended_header
    if md.shape != spec.shape or md.order not in (None, "C", "F"):  # 'strided': sections are not along Z
        notices.append(f"{spec.path}: extended header dropped: the sections changed ({md.shape} {md.order} -> "
                       f"{spec.shape}), so its records no longer match them")
        return None, None
    exttyp = _writable_exttyp(extended, fields.exttyp)
    if exttyp is None:
        notices.append(f"{spec.path}: extended header dropped: its type ({fields.exttyp or 'none given'}) is not "
                       f"one MRC2014 readers know ({', '.join(_EXTTYPES)})")
        return None, None
    return extended, exttyp


def _output_header(spec: OutputSpec, stats: HeaderStatistics, extended: bytes | None, exttyp: str | None) -> bytes:
    """The header of an output: the source's labels plus noa's, the given statistics."""
    md = spec.metadata
    labels = merge_labels(md.labels if md is not None else [], stamp_label(spec.label, layout.kind(spec.shape)))
    return make_header(spec, stats, labels, extended, exttyp)


class MrcFormat:
    """MRC2014 files (and older ones without the 'MAP ' mark): the MRC :class:`~noa_core.io.protocol.ImageFormat`."""

    name = "mrc"
    title = "MRC"
    extensions = EXTENSIONS
    output_extensions = EXTENSIONS
    media_type = "application/octet-stream"  # MRC has no registered media type
    compressed_input = True
    header_statistics = True
    store = False
    checks_size = True
    indexed = False
    read_options: type = MrcReadOptions
    lacking: Mapping[str, str] = {"series": "MRC files hold one series"}

    def detect(self, head: bytes, path: Path) -> bool:
        offset, value = _MAP_ID
        return head[offset:offset + len(value)] == value

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        """Files written before MRC2014 have no 'MAP ' mark: one named as MRC is taken for MRC when its first
        bytes could be an MRC header (positive sizes, a known mode, in one byte order or the other); else
        it is not an MRC file, whatever its name (a text file saved as .mrc)."""
        if len(head) < 16:
            return True  # too short even to tell: the header check says how short
        for order in "<>":
            nx, ny, nz, mode = np.frombuffer(head, f"{order}i4", count=4)
            if min(nx, ny, nz) > 0 and int(mode) in _MODE_DTYPES:
                return True
        text = all(32 <= c < 127 or c in (9, 10, 13) for c in head[:256])
        raise UnknownFormatError(f"{path}: not an MRC file: no 'MAP ' stamp, and its first bytes are "
                                 f"{'text' if text else 'no MRC header (sizes and mode)'}")

    def read(self, path: Path, request: ReadRequest[MrcReadOptions]) -> tuple[Array, Metadata]:
        return _read(path, request)

    def probe(self, path: Path, request: ReadRequest[MrcReadOptions]) -> Probe:
        return _probe(path, request)

    def check_writable(self, dtype: np.dtype, shape: Shape4, path: Path) -> None:
        mode_for(dtype, path)
        check_writable_shape(shape, path)

    def create(self, temp: Path, spec: OutputSpec) -> Created:
        """The header (statistics unknown until :meth:`finish`) and extended header, then sparse room
        for the data: no time is spent writing zeros. uint8 data may be stored widened (see
        :func:`stored_dtype`): the returned ``dtype`` says so."""
        dtype = stored_dtype(spec.dtype, spec.write_options, spec.path)
        notices = [_uint8_notice(spec.write_options, spec.path)] if spec.dtype == np.uint8 else []
        extended, exttyp = _extended_header(spec, notices)
        md = spec.metadata
        if md is not None and md.format != self.name:  # MRC metadata is already in Å
            _, _, notice = md.in_angstrom()
            if notice:
                notices.append(f"{spec.path}: {notice}")
        offset = HEADER_BYTES + (len(extended) if extended else 0)
        with open(temp, "r+b") as f:
            f.write(_output_header(spec, HeaderStatistics(None, None, None, None), extended, exttyp))
            f.write(extended or b"")
            f.truncate(offset + math.prod(spec.shape) * dtype.itemsize)
        if spec.order == "F":
            notices.append(f"{spec.path}: stored column-major (mapc=2, mapr=1, maps=3): readers that "
                           "ignore the axis mapping show the transpose")
        return Created(offset, notices, dtype)

    def finish(self, temp: Path, spec: OutputSpec, statistics: HeaderStatistics) -> None:
        """Rewrite the header with the statistics of the data (and a label stamped now)."""
        extended, exttyp = _extended_header(spec, [])
        with open(temp, "r+b") as f:
            f.write(_output_header(spec, statistics, extended, exttyp))


FORMAT = MrcFormat()
