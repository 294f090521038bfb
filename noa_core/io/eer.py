"""EER movies (Electron Event Representation, Thermo Fisher Falcon 4 detectors) read as stacks of fractions.

An EER file is a TIFF whose pages are hardware frames, each a run-length coded list of electron events
with their sub-pixel positions (Compression 65000: 8-bit runs and 2+2 sub-pixel bits; 65001: 7-bit
runs, 2+2 bits; 65002: the widths in tags 65007-65009). A file is EER when its first page has one of
those compressions, whatever its extension; plain TIFF files stay the TIFF module's. The pages are read
as a table of strip offsets and byte counts (:func:`parse`), each strip checked to be long enough for the
codes of its pixels before anything is decoded.

Reading gives ``(fractions, 1, H, W)``: fraction i is the sum of hardware frames ``i*N .. i*N+N-1``
(``eer_group`` N, default 1). Frames left over when N does not divide the count are dropped with a
notice, as RELION's ``--eer_grouping`` does, or make a last, smaller fraction (``eer_group_last='keep'``).
``eer_upsampling`` 1, 2 or 3 renders events on the physical grid (4K), twice (8K) or four times (16K)
finer, with RELION's sub-pixel convention. Counts are uint16; with a gain they are float32, each fraction
multiplied by the gain as RELION's motion correction does, after :func:`load_gain` has turned the file
into RELION's multiplicative gain. Rows are kept as stored (row 0 is the first the detector wrote).

Decoding is one numba kernel (:func:`noa_core.kernels.eer.decode_codes`, held to imagecodecs' ``eer_decode``
by the tests; compression 65000 as RELION reads it, see :data:`FULL_CODES`) adding each frame's events into one
accumulator per fraction (uint8 up to 255 frames a fraction, :func:`accumulator_dtype`) while it walks the strip's
codes, which must reach its last pixel (a strip cut short is refused, not read as fewer events). A kernel of
noa's, not imagecodecs' decoder, because a strip's codes had to be walked by noa anyway (imagecodecs reads a strip
cut short as fewer events), and because imagecodecs places each event at upsampling 2 in about 200 ns, 4-10x the
kernel's time: 72 of 95 s of a 400-frame 4K movie; fractions are decoded side by side in threads (the kernel releases
the GIL), so memory holds one fraction per thread (:data:`THREAD_BYTES` in all), never the movie; a gain
multiplies it in cache-sized bands of rows, a frame-sized gain without an upsampled copy of itself. A read that is
not by tiles gets the fractions in an unlinked temporary file mapped read-only (as OME-Zarr chunks do). For a
plan's source read only by tiles (``ReadRequest.tiles``: ``noa copy``, ``noa stats``) they are decoded as the
tiles ask, a few fractions ahead, each tile's rows multiplied by the gain straight into the tile's buffer (a
copy's output tile), so that they never reach a file; a tile spanning more fractions than that (an average of
many) has every fraction left decoded into the temporary file instead. Pixel
size is unknown: the acquisition XML gives the sensor's pixel, not the specimen's.

:data:`FORMAT` is the EER :class:`~noa_core.io.protocol.ImageFormat`; writing EER is not offered.
"""

from __future__ import annotations

import array
import contextlib
import functools
import io
import math
import os
import struct
import tempfile
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from noa_core import kernels  # a face: the decoding kernels (numba) load when frames are decoded
from noa_core.array import asarray, layout
from noa_core.array.layout import Shape4
from noa_core.errors import (
    CorruptFileError,
    FileFormatError,
    HeaderError,
    ParameterError,
    PathRefusedError,
    SizeError,
    TruncatedFileError,
    UnknownFormatError,
    WriteDTypeError,
    param,
)
from noa_core.io import atomic, formats, mapped, remote, tiff
from noa_core.io.compression import open_input, opened_input
from noa_core.io.metadata import HeaderStatistics, Metadata
from noa_core.io.protocol import Created, OutputSpec, Probe, ReadRequest
from noa_core.io.read_options import EerReadOptions
from noa_core.limits import MAX_OUTPUT_BYTES, check_input_size

if TYPE_CHECKING:
    from noa_core.array import Array

EXTENSIONS = (".eer", ".ecc")  # RELION takes both
COMPRESSIONS = {65000: (8, 2, 2), 65001: (7, 2, 2), 65002: None}  # run, x and y sub-pixel bits (65002: tags)
# Compressions whose every code carries sub-pixel bits, a largest run ("skip, no event") too: 65000, the first
# Falcon 4 files, as RELION's EERRenderer and Thermo Fisher's EerReaderLib of 2020 ("8 for old prototype EER
# files", "bit waste on overflow code") read it. The others waste none (the EER specification's example).
FULL_CODES = frozenset({65000})
_BIT_TAGS = (65007, 65008, 65009)
MAX_GROUP = 65535  # a uint16 accumulator holds at most one event per grid pixel and frame (accumulator_dtype)
MAX_FRACTION_PIXELS = 1 << 28  # 16K x 16K: a 4K detector at --eer-upsampling 3
MAX_STRIPS = 1 << 24  # strips in a movie: its table of offsets and byte counts stays under 256 MiB
THREAD_BYTES = 320 << 20  # the accumulators of the fractions decoded at once (one per thread): at most this much
_BAND_BYTES = 1 << 20  # a gained fraction is multiplied and written in bands of rows this size (cache-sized)
_SIGNATURES = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # TIFF and BigTIFF, either byte order
_INTEGERS = {3: "H", 4: "I", 16: "Q"}  # SHORT, LONG, LONG8: the types of the tags a frame's directory needs
_SAME_TAGS = (256, 257, 259, 278, *_BIT_TAGS)  # what every frame of a movie repeats
_FRAME_TAGS = frozenset({273, 279, *_SAME_TAGS})
_DIRECTORY_BYTES = 1024  # read at a directory's offset: a frame's directory (about 15 entries) in one call
MAX_ENTRIES = 4096  # entries in one directory (as tifffile): a frame's has about 15


# -- the page table: each page's directory, the few tags a frame needs ------------------------------


class _Entry(NamedTuple):
    """One IFD entry: its tag, type, value count, and its last field (the values, or where they lie)."""

    tag: int
    kind: int
    count: int  # type: ignore[assignment]  # the TIFF field's name; it hides tuple.count, which noa never calls
    value_or_offset: bytes


class _PastHead(Exception):
    """A directory read from a file's first bytes alone runs past them."""


class _Directories:
    """The image file directories (IFDs) of a TIFF file open as ``fd``, each read with a few ``pread`` calls
    and only its frame tags kept: tifffile's page objects cost a tenth of a millisecond and kilobytes each,
    which a movie of 100,000 pages turns into seconds and hundreds of MB. Every offset is checked against the
    file's size before it is read (a hostile header names any 64-bit offset)."""

    def __init__(self, path: Path, fd: int | None, head: bytes) -> None:
        """``fd`` None: only ``head``, the file's first bytes, is read (a read past it raises :class:`_PastHead`)."""
        if head[:4] not in _SIGNATURES or len(head) < 16:
            raise CorruptFileError(f"{path}: magic bytes: {head[:4]!r} is not a TIFF signature")
        self.path, self.fd, self.head = path, fd, head
        self.size = len(head) if fd is None else os.fstat(fd).st_size
        self.order = "<" if head[:2] == b"II" else ">"
        big = head[:4] in _SIGNATURES[2:]
        self.offset_format = self.order + ("Q" if big else "I")  # offsets, and the value count of an entry
        self.count_format = self.order + ("Q" if big else "H")  # entries in a directory
        self.entry_format = self.order + ("HHQ8s" if big else "HHI4s")
        self.entry_size = struct.calcsize(self.entry_format)
        self.first = struct.unpack_from(self.offset_format, head, 8 if big else 4)[0]

    def read(self, offset: int, page: int) -> tuple[dict[int, _Entry], int]:
        """The frame tags of the directory at ``offset`` (page ``page``), and the next directory's offset
        (0: none)."""
        count_size, link_size = struct.calcsize(self.count_format), struct.calcsize(self.offset_format)
        if offset + count_size > self.size:
            self._past_head()
            raise TruncatedFileError(f"{self.path}: page offset (page {page}): its directory at {offset} lies past "
                                     f"the end of the {self.size}-byte file")
        block = self._pread(_DIRECTORY_BYTES, offset)  # the whole directory, for a usual one
        count = struct.unpack_from(self.count_format, block)[0]
        if count > MAX_ENTRIES:
            raise CorruptFileError(f"{self.path}: page offset (page {page}): its directory at {offset} claims {count} "
                                   f"entries, more than the {MAX_ENTRIES} noa reads")
        end = count_size + count * self.entry_size + link_size
        if offset + end > self.size:
            self._past_head()
            raise TruncatedFileError(f"{self.path}: page offset (page {page}): its directory of {count} entries at "
                                     f"{offset} runs past the end of the {self.size}-byte file")
        if end > len(block):
            block = self._pread(end, offset)
        block = block[count_size:end]
        entries = {raw[0]: _Entry._make(raw) for raw in struct.iter_unpack(self.entry_format, block[:-link_size])
                   if raw[0] in _FRAME_TAGS}
        return entries, struct.unpack(self.offset_format, block[-link_size:])[0]

    def _pread(self, count: int, offset: int) -> bytes:
        """Up to ``count`` bytes at ``offset`` (of the head alone, where that is all there is: :meth:`__init__`)."""
        return self.head[offset:offset + count] if self.fd is None else os.pread(self.fd, count, offset)

    def _past_head(self) -> None:
        """Raise :class:`_PastHead` where only the head is read: what lies past it may still be in the file."""
        if self.fd is None:
            raise _PastHead

    def values(self, entry: _Entry, page: int) -> tuple[int, ...]:
        """The integer values of ``entry`` (read from where they lie when its field cannot hold them)."""
        code = _INTEGERS.get(entry.kind)
        if code is None:
            raise CorruptFileError(f"{self.path}: tag {entry.tag} (page {page}): type {entry.kind} is not an integer "
                                   "type (SHORT, LONG or LONG8)")
        nbytes = entry.count * struct.calcsize(code)
        if nbytes <= len(entry.value_or_offset):
            data = entry.value_or_offset[:nbytes]
        else:
            at = struct.unpack(self.offset_format, entry.value_or_offset)[0]
            if at + nbytes > self.size:
                self._past_head()
                raise TruncatedFileError(f"{self.path}: tag {entry.tag} (page {page}): {entry.count} values at "
                                         f"offset {at} run past the end of the {self.size}-byte file")
            data = self._pread(nbytes, at)
        return struct.unpack(f"{self.order}{entry.count}{code}", data)

    def value(self, entries: dict[int, _Entry], tag: int, page: int, default: int | None = None) -> int:
        """The single value of ``tag`` (``default`` when the directory lacks it)."""
        if tag not in entries:
            if default is None:
                raise CorruptFileError(f"{self.path}: tag {tag} (page {page}): missing, and a frame needs it")
            return default
        values = self.values(entries[tag], page)
        if len(values) != 1:
            raise CorruptFileError(f"{self.path}: tag {tag} (page {page}): {len(values)} values, where a frame has one")
        return values[0]


# -- detection: the first page's compression, from its IFD ------------------------------------------


def first_compression(path: Path, head: bytes) -> int | None:
    """The Compression tag of the first page of a TIFF whose first bytes are ``head`` (None: not a TIFF, no
    such tag, or a directory that cannot be read, which the TIFF module then refuses in its words): a few bytes
    read from the IFD, so that plain TIFF files cost nothing more."""
    if head[:4] not in _SIGNATURES or len(head) < 16:
        return None
    try:
        try:  # a first directory within the head (tifffile writes it at byte 8) is read without opening the file
            return _compression(_Directories(path, None, head))
        except _PastHead:
            pass
        with open_input(path) as f:
            return _compression(_Directories(path, f.fileno(), head))
    except PathRefusedError:  # opened beneath a data root (beneath.confined): the refusal, not "a plain TIFF"
        raise
    except (FileFormatError, OSError, struct.error):
        return None


def _compression(directories: _Directories) -> int | None:
    """The first page's Compression tag (None: it has none)."""
    entries, _ = directories.read(directories.first, 0)
    return directories.value(entries, 259, 0) if 259 in entries else None


# -- the movie's structure ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Movie:
    """What the pages of an EER file say: frame size, coding, and where each frame's strips lie.

    Attributes:
        height, width: pixels of the detector (a frame at upsampling 1).
        compression: 65000, 65001 or 65002.
        bits: widths of the run length and of the x and y sub-pixel fields.
        rows_per_strip: rows each strip of a frame covers (the last strip may cover fewer).
        offsets, counts: ``(frames, strips)`` int64, where each strip lies and its byte count.
        acquisition: the XML metadata (tag 65001) as tifffile parses it: name -> value, 'name.unit' -> unit.
    """

    height: int
    width: int
    compression: int
    bits: tuple[int, int, int]
    rows_per_strip: int
    offsets: np.ndarray
    counts: np.ndarray
    acquisition: dict[str, Any] = field(default_factory=dict)

    @property
    def frames(self) -> int:
        return len(self.offsets)

    def strip_rows(self, number: int) -> int:
        """Rows of strip ``number`` of a frame."""
        return min(self.rows_per_strip, self.height - number * self.rows_per_strip)


_Layout = tuple[int, int, int, tuple[int, int, int], int]  # height, width, compression, bits, rows per strip


def _bits(directories: _Directories, entries: dict[int, _Entry], compression: int, number: int) -> tuple[int, int, int]:
    """Widths of the run and of the x and y sub-pixel fields of page ``number``, whose Compression is
    ``compression``."""
    path = directories.path
    if compression not in COMPRESSIONS:
        raise CorruptFileError(f"{path}: Compression (page {number}): {compression} is not an EER compression "
                               f"(65000, 65001 or 65002, as the first page has)")
    bits = COMPRESSIONS[compression]
    if bits is None:
        if any(tag not in entries for tag in _BIT_TAGS):
            raise HeaderError(f"{path}: tags 65007-65009 (page {number}): compression 65002 needs the run and "
                              "sub-pixel widths, and the page lacks them")
        run_bits, x_bits, y_bits = (directories.value(entries, tag, number) for tag in _BIT_TAGS)
        bits = (run_bits, x_bits, y_bits)
    skip, horz, vert = bits
    if not (4 <= skip <= 14 and 1 <= horz <= 2 and 1 <= vert <= 2 and 8 < skip + horz + vert <= 16):
        raise HeaderError(f"{path}: tags 65007-65009 (page {number}): widths {skip},{horz},{vert} are not read by "
                          "noa (runs of 4 to 14 bits, sub-pixel fields of 1 or 2 bits, 9 to 16 bits a code)")
    return bits


def _acquisition(path: Path, opened: io.BufferedReader | None = None) -> dict[str, Any]:
    """The first page's acquisition XML (tag 65001) as tifffile parses it; tifffile reads that page only (of
    ``opened``, the file as detection opened it, where given)."""
    import tifffile

    messages: list[str] = []
    try:
        with tiff._library_messages(path, messages), opened_input(path, opened) as file, \
                tifffile.TiffFile(file, name=path.name) as tif:
            first = tif.pages.first
            acquisition = dict(first.eer_tags or {}) if first.is_eer else {}
    except FileFormatError:
        raise
    except Exception as exc:  # tifffile raises many types on damaged files; each becomes one error
        raise CorruptFileError(f"{path}: TIFF structure: {tiff._in_words(exc)}") from None
    if messages:
        raise CorruptFileError(messages[0])
    return acquisition


def _layout(directories: _Directories, entries: dict[int, _Entry], number: int) -> _Layout:
    """``(height, width, compression, bits, rows per strip)`` of page ``number``."""
    height, width = directories.value(entries, 257, number), directories.value(entries, 256, number)
    compression = directories.value(entries, 259, number)
    return (height, width, compression, _bits(directories, entries, compression, number),
            min(directories.value(entries, 278, number, default=height), height))


def _check_like_first(directories: _Directories, entries: dict[int, _Entry], number: int, first: _Layout) -> None:
    """Page ``number``, whose frame tags are not stored as the first page's, says the same of its frame."""
    path, (height, width, compression, bits, rows) = directories.path, first
    shape = directories.value(entries, 257, number), directories.value(entries, 256, number)
    if shape != (height, width):
        raise HeaderError(f"{path}: ImageWidth/ImageLength (page {number}): {shape[1]} x {shape[0]}, where the "
                          f"first page is {width} x {height}")
    page_compression = directories.value(entries, 259, number)
    page_bits = _bits(directories, entries, page_compression, number)  # says what is wrong with one not EER's
    if page_compression != compression:
        raise CorruptFileError(f"{path}: Compression (page {number}): {page_compression}, where the first page has "
                               f"{compression}; every frame is coded alike")
    if page_bits != bits:
        raise HeaderError(f"{path}: tags 65007-65009 (page {number}): widths differ from the first page's")
    if _layout(directories, entries, number)[4] != rows:
        raise CorruptFileError(f"{path}: RowsPerStrip (page {number}): differs from the first page's {rows}")


def parse(path: Path, opened: io.BufferedReader | None = None) -> Movie:
    """The structure of the EER file ``path``: every page's directory is read and checked (compression, size,
    strips within the file and long enough for their frame) before any data are read; only each strip's offset
    and byte count are kept. ``opened``: the file as detection opened it, read rather than opened again."""
    acquisition = _acquisition(path, opened)
    with opened_input(path, opened) as file:
        directories = _Directories(path, file.fileno(), os.pread(file.fileno(), 16, 0))
        size = directories.size
        first_entries, _ = directories.read(directories.first, 0)
        first = height, width, compression, bits, rows = _layout(directories, first_entries, 0)
        if height < 1 or width < 1 or rows < 1:
            raise HeaderError(f"{path}: ImageWidth/ImageLength/RowsPerStrip: {width} x {height} in strips of {rows} "
                              "rows is not a frame")
        per_frame = -(-height // rows)
        same = [first_entries.get(tag) for tag in _SAME_TAGS]  # a page storing these tags alike needs no check
        offsets, counts = array.array("q"), array.array("q")
        seen: set[int] = set()
        at, number = directories.first, 0
        while at:
            if at in seen:
                raise CorruptFileError(f"{path}: page offset (page {number}): the pages loop back to a directory "
                                       "already read")
            seen.add(at)
            entries, link = directories.read(at, number)
            if [entries.get(tag) for tag in _SAME_TAGS] != same:
                _check_like_first(directories, entries, number, first)
            strips = [entries[tag].count if tag in entries else 0 for tag in (273, 279)]
            if strips != [per_frame, per_frame]:
                raise CorruptFileError(f"{path}: StripOffsets/StripByteCounts (page {number}): {strips[0]} and "
                                       f"{strips[1]} strips, where {height} rows of {rows} a strip make {per_frame}")
            if len(offsets) + per_frame > MAX_STRIPS:
                raise SizeError(f"{path}: StripOffsets (page {number}): more than the {MAX_STRIPS} strips noa reads "
                                "in a movie")
            page_offsets, page_counts = (directories.values(entries[tag], number) for tag in (273, 279))
            for offset, count in zip(page_offsets, page_counts):
                if offset + count > size:
                    raise TruncatedFileError(f"{path}: StripOffsets/StripByteCounts (page {number}): a strip of "
                                             f"{count} bytes at offset {offset} ends past the {size}-byte file")
                offsets.append(offset)
                counts.append(count)
            at, number = link, number + 1
    movie = Movie(height, width, compression, bits, rows, np.frombuffer(offsets, np.int64).reshape(-1, per_frame),
                  np.frombuffer(counts, np.int64).reshape(-1, per_frame), acquisition)
    _check_strip_sizes(path, movie)
    _check_strips_apart(path, movie)
    return movie


def _check_strips_apart(path: Path, movie: Movie) -> None:
    """No two strips share bytes: a detector writes each frame's own, and pages pointing at one long strip
    would cost a whole frame's decoding each for bytes the file holds once (a small file of many frames)."""
    order = np.argsort(movie.offsets, axis=None, kind="stable")
    starts, ends = movie.offsets.ravel()[order], (movie.offsets + movie.counts).ravel()[order]
    shared = np.flatnonzero(starts[1:] < ends[:-1])
    if shared.size:
        later = np.unravel_index(order[shared[0] + 1], movie.offsets.shape)
        raise CorruptFileError(f"{path}: StripOffsets (page {int(later[0])}): strip {int(later[1])} at offset "
                               f"{int(starts[shared[0] + 1])} overlaps another strip; each frame's strips are its own")


def _check_strip_sizes(path: Path, movie: Movie) -> None:
    """Each strip long enough to cover its pixels: a code skips at most ``2**runbits - 1`` of them and takes at
    least ``runbits`` bits, so a strip of fewer bytes is cut short or lies about its frame (a strip of a few
    bytes declaring a 16K x 16K frame would otherwise cost the decoding of that whole frame)."""
    skip = movie.bits[0]
    pixels = np.array([movie.strip_rows(i) * movie.width for i in range(movie.counts.shape[1])], np.int64)
    least = (-(-pixels // ((1 << skip) - 1)) * skip + 7) // 8
    short = movie.counts < least
    if short.any():
        frame, number = (int(i) for i in np.argwhere(short)[0])
        raise CorruptFileError(f"{path}: StripByteCounts (page {frame}): strip {number} holds "
                               f"{int(movie.counts[frame, number])} bytes, and the codes of its {movie.width} x "
                               f"{movie.strip_rows(number)} pixels need at least {int(least[number])} ({skip}-bit "
                               f"runs of at most {(1 << skip) - 1} pixels): the strip is cut short or its frame size "
                               "is false")


# -- what a read asks for --------------------------------------------------------------------------


@dataclass(frozen=True)
class Fractions:
    """How a read groups and renders the frames: ``groups`` (frame ranges, one per fraction), the grid
    factor along y and x, the element type, and notices."""

    groups: list[range]
    factor: tuple[int, int]
    dtype: np.dtype
    notices: list[str]

    def shape(self, movie: Movie) -> Shape4:
        return layout.as_shape4((len(self.groups), 1, movie.height * self.factor[0], movie.width * self.factor[1]))


def fractions(path: Path, movie: Movie, options: EerReadOptions) -> Fractions:
    """The fractions ``options`` ask of ``movie``, checked: group size, what to do with the frames left
    over, and the grid (sub-pixel bits bound the upsampling)."""
    group = options.frames_per_fraction
    upsampling = options.eer_upsampling
    level = upsampling - 1
    _skip, horz, vert = movie.bits
    if level > min(horz, vert):
        raise ParameterError(f"{path}: {upsampling} needs {level} sub-pixel bits along x and y; this movie has "
                             f"{horz} and {vert} (compression {movie.compression})", "eer_upsampling")
    factor = (1 << level, 1 << level)
    rows = movie.rows_per_strip
    if level and (movie.width % (1 << horz) or rows % (1 << vert) or movie.height % rows % (1 << vert)):
        raise ParameterError(f"{path}: {upsampling} needs frames and strips whose width and height are multiples of "
                             f"{1 << horz} and {1 << vert} (as imagecodecs decodes them); this movie's frames are "
                             f"{movie.width} x {movie.height} in strips of {rows} rows", "eer_upsampling")
    if movie.height * movie.width * factor[0] * factor[1] > MAX_FRACTION_PIXELS:
        raise SizeError(f"{path}: ImageWidth/ImageLength: {movie.width} x {movie.height} at upsampling {upsampling} "
                        f"is more than the {MAX_FRACTION_PIXELS} pixels a fraction may have")
    notices = []
    whole, left = divmod(movie.frames, group)
    groups = [range(i * group, (i + 1) * group) for i in range(whole)]
    if left and options.eer_group_last == "keep":
        groups.append(range(whole * group, movie.frames))
        notices.append(f"{path}: {movie.frames} frames in fractions of {group}: the last fraction sums the "
                       f"{left} frames left over")
    elif left:
        dropped = f"the last {left} frames are" if left > 1 else "the last frame is"
        notices.append(f"{path}: {movie.frames} frames in fractions of {group}: {dropped} dropped, as RELION does "
                       f"({param('eer_group_last', 'keep')} sums them into a last fraction)")
    if not groups:
        raise ParameterError(f"{path}: {group} frames a fraction, and the movie has {movie.frames}; give "
                             f"{param('eer_group_last', 'keep')} to sum them all, or a smaller group", "eer_group")
    dtype = np.dtype(np.float32 if options.gain else np.uint16)
    return Fractions(groups, factor, dtype, notices)


# -- gain ------------------------------------------------------------------------------------------


def _gain_image(gain: Path, notices: list[str]) -> np.ndarray:
    """The gain file's first image, float32 (RELION reads its first page), rows as stored."""
    array, _meta = formats.read(gain)
    values = np.asarray(array.numpy(), np.float32)
    if array.shape[1] > 1:
        raise ParameterError(f"{gain}: a gain is an image; this file holds a volume {tuple(array.shape)}", "gain")
    if array.shape[0] > 1:
        notices.append(f"{gain}: {array.shape[0]} images; the first is the gain, as RELION reads it")
    return values[0, 0]


def check_gain_header(gain: Path, movie_path: Path, movie: Movie, factor: tuple[int, int], rotate: int) -> None:
    """The gain's size from its header, checked against the movie (ParameterError naming both sizes)."""
    shape = formats.probe(gain).shape
    _check_gain_size(gain, (shape[2], shape[3]), movie_path, movie, factor, rotate)


def _check_gain_size(gain: Path, size: tuple[int, int], movie_path: Path, movie: Movie, factor: tuple[int, int],
                     rotate: int) -> None:
    gh, gw = (size[1], size[0]) if rotate % 2 else size
    grid = (movie.height * factor[0], movie.width * factor[1])
    fits = [(movie.height, movie.width), grid] + [(grid[0] * k, grid[1] * k) for k in (2, 4)]
    if (gh, gw) not in fits:
        turned = f" (after {param('gain_rotate', rotate)})" if rotate % 2 else ""
        raise ParameterError(f"{gain}: {gw} x {gh} pixels{turned} does not fit {movie_path}, whose frames are "
                             f"{movie.width} x {movie.height} ({grid[1]} x {grid[0]} as read): a gain is the frame's "
                             "size, the grid's, or 2 or 4 times finer", "gain")


def load_gain(gain: Path, movie_path: Path, movie: Movie, factor: tuple[int, int], flip_y: bool = False,
              rotate: int = 0, notices: list[str] | None = None) -> np.ndarray:
    """The multiplicative float32 gain on the read grid, as RELION 3.1.3's ``EERRenderer::loadEERGain``
    makes it (a fraction is multiplied by it, as ``relion_run_motioncorr`` does): :func:`reading_gain` with
    each of a frame-sized gain's pixels repeated over its grid pixels."""
    values = reading_gain(gain, movie_path, movie, factor, flip_y, rotate, notices)
    ky, kx = movie.height * factor[0] // values.shape[0], movie.width * factor[1] // values.shape[1]
    return np.repeat(np.repeat(values, ky, axis=0), kx, axis=1) if ky > 1 else values


def reading_gain(gain: Path, movie_path: Path, movie: Movie, factor: tuple[int, int], flip_y: bool = False,
                 rotate: int = 0, notices: list[str] | None = None) -> np.ndarray:
    """The multiplicative float32 gain, on the read grid or, when the file has the frame's size, on the frame
    (each of its pixels stands for its grid pixels: a fraction is multiplied by it without an 8K or 16K copy).

    The file's first image, rows as stored, is first rotated ``rotate`` x 90 degrees clockwise as
    relion_display shows it (``--gain_rot``), then flipped upside down when ``flip_y`` (``--gain_flip 1``).
    Then, as RELION: a gain of the frame's size on a finer grid gives each grid pixel its physical pixel's
    value; a finer gain than the grid is summed over each grid pixel (in float32, row by row); a '.gain'
    file is multiplicative as it is; any other (MRC: counts) becomes ``mean / gain``, the mean taken over
    the grid, zeros left at 0 (defects: their pixels read 0). RELION's TIFF reader turns images upside
    down and its ``loadEERGain`` turns a '.gain' back, so RELION too pairs the rows as stored.
    """
    notices = [] if notices is None else notices
    values = np.rot90(_gain_image(gain, notices), -rotate)
    if flip_y:
        values = values[::-1]
    _check_gain_size(gain, (values.shape[0], values.shape[1]), movie_path, movie, factor, 0)
    grid = (movie.height * factor[0], movie.width * factor[1])
    if values.shape[0] > grid[0]:
        ky, kx = values.shape[0] // grid[0], values.shape[1] // grid[1]
        summed = np.zeros(grid, np.float32)
        for dy in range(ky):  # RELION's order: gain(i / 2, j / 2) += original(i, j), row by row
            for dx in range(kx):
                summed += values[dy::ky, dx::kx]
        values = summed
    values = np.ascontiguousarray(values, np.float32)
    if gain.suffix.lower() != ".gain":  # the mean of a repeated gain is its own: each pixel counts k x k times
        values = _inverted(values)
    return values


def _inverted(counts: np.ndarray) -> np.ndarray:
    """RELION's ``mean / gain`` in double, 0 kept, stored as float32: a band of rows at a time, so that a
    16K gain never has a float64 copy."""
    mean = counts.sum(dtype=np.float64) / counts.size
    out = np.empty(counts.shape, np.float32)
    rows = max(1, _BAND_BYTES // (counts.shape[1] * 8))
    for first in range(0, counts.shape[0], rows):
        band = counts[first:first + rows].astype(np.float64)
        np.divide(mean, band, out=band, where=band != 0)  # where 0: stays 0
        out[first:first + rows] = band
    return out


# -- decoding -------------------------------------------------------------------------------------


def accumulator_dtype(frames: int) -> np.dtype:
    """The counts of a fraction summing at most ``frames`` frames: uint8 up to 255 frames, else uint16 (up to
    :data:`MAX_GROUP`). A frame adds at most one event to a grid pixel at every upsampling
    (:func:`~noa_core.kernels.eer.decode_codes`), so no count exceeds ``frames``; uint8 halves what the fractions
    decoded at once hold (128 MiB less for three 8K fractions)."""
    return np.dtype(np.uint8 if frames <= np.iinfo(np.uint8).max else np.uint16)


def _decode_frames(path: Path, fd: int, movie: Movie, frames: range, out: np.ndarray, level: int) -> None:
    """Add the events of ``frames`` into ``out`` (:func:`accumulator_dtype`, the fraction's grid), strip by strip
    (:func:`~noa_core.kernels.eer.decode_codes`), each strip's codes checked to reach its last pixel (a strip cut
    short is refused, not read as fewer events)."""
    skip, horz, vert = movie.bits
    full_codes = movie.compression in FULL_CODES
    fy = out.shape[0] // movie.height
    for frame in frames:
        for number, (offset, count) in enumerate(zip(movie.offsets[frame].tolist(), movie.counts[frame].tolist())):
            data = os.pread(fd, count, offset)
            if len(data) != count:
                raise TruncatedFileError(f"{path}: data: the file changed size while being read (frame {frame})")
            rows = movie.strip_rows(number)
            first = number * movie.rows_per_strip
            reached = kernels.eer.decode_codes(np.frombuffer(data, np.uint8), skip, horz, vert,
                                               out[first * fy:(first + rows) * fy], level, full_codes)
            _check_end(path, movie, frame, number, reached)


def _check_end(path: Path, movie: Movie, frame: int, number: int, reached: int) -> None:
    """A strip's codes reach its last pixel, neither stopping before it nor jumping past it."""
    rows = movie.strip_rows(number)
    pixels = rows * movie.width
    if reached == pixels:
        return
    where = f"{path}: strip {number} of frame {frame}"
    layout = (" (compression 65000 is read as RELION reads it: 12 bits a code, 8 of run and 4 of sub-pixel "
              "position, after every run)" if movie.compression in FULL_CODES else "")
    if reached > pixels:
        raise CorruptFileError(f"{where}: its events run past the end of the {movie.width} x {rows}-pixel "
                               f"strip{layout}")
    raise CorruptFileError(f"{where}: its codes stop at pixel {reached} of the {movie.width} x {rows}-pixel strip, "
                           f"before its last: the strip is cut short or damaged{layout}")


def _threads(fraction_bytes: int, count: int) -> int:
    return max(1, min(mapped.io_threads(), count, THREAD_BYTES // max(fraction_bytes, 1)))


class _Decoder:
    """Decodes fractions of ``plan``: :meth:`counts` into an accumulator (of :attr:`accumulator` type),
    :meth:`multiply` rows of those counts by the gain, and :meth:`fraction` both, into the accumulator of the
    thread decoding it (reused), handing the rows to ``put(fraction, rows, first_row)``: the uint16 counts
    themselves, or (uint8 counts, or a gain) ``plan.dtype`` rows in cache-sized bands. ``gain`` is on the grid,
    or on the frame (:func:`reading_gain`), each pixel then multiplying its k x k grid pixels. ``fd``: the movie,
    open."""

    def __init__(self, path: Path, fd: int, movie: Movie, plan: Fractions, gain: np.ndarray | None) -> None:
        self.path, self.fd, self.movie, self.plan, self.gain = path, fd, movie, plan, gain
        self.shape = tuple(plan.shape(movie)[2:])
        self.level = plan.factor[0].bit_length() - 1
        self.accumulator = accumulator_dtype(max(len(group) for group in plan.groups))
        self.banded = self.accumulator != plan.dtype  # counts handed on in bands of plan.dtype rows
        self.k = 1 if gain is None else self.shape[0] // gain.shape[0]
        self.rows = max(self.k, _BAND_BYTES // (self.shape[1] * 4) // self.k * self.k)  # whole gain rows a band
        self.local = threading.local()

    @property
    def thread_bytes(self) -> int:
        """What one decoding thread holds: its accumulator and its band of rows."""
        band = self.rows * self.shape[1] * self.plan.dtype.itemsize if self.banded else 0
        return math.prod(self.shape) * self.accumulator.itemsize + band

    def counts(self, index: int, out: np.ndarray) -> None:
        """The events of fraction ``index`` counted into ``out`` (:attr:`accumulator`, the fraction's grid)."""
        out.fill(0)
        _decode_frames(self.path, self.fd, self.movie, self.plan.groups[index], out, self.level)

    def multiply(self, counts: np.ndarray, first: int, out: np.ndarray) -> None:
        """``out`` (``plan.dtype``, at most :attr:`rows` rows) = rows ``first ..`` of ``counts`` x the gain (or
        without a gain, the counts as they are)."""
        gain, k, n = self.gain, self.k, len(out)
        if gain is None:
            out[:] = counts[first:first + n]
            return
        if k == 1:
            np.multiply(counts[first:first + n], gain[first:first + n], out=out)
            return
        # grid pixel (y, x) takes the gain's (y // k, x // k): the gain rows widened once, then the grid rows
        # of each y % k multiplied by them (rows may start and end anywhere in a gain row)
        if not hasattr(self.local, "wide"):
            self.local.wide = np.empty((self.rows // k + 1, self.shape[1]), np.float32)
        top = first // k
        wide = self.local.wide[:(first + n - 1) // k + 1 - top]
        for j in range(k):
            wide[:, j::k] = gain[top:top + len(wide)]
        for i in range(k):
            row = first + (i - first) % k  # the band's first row of this y % k
            if row < first + n:
                rows = counts[row:first + n:k]
                np.multiply(rows, wide[row // k - top:row // k - top + len(rows)], out=out[row - first::k])

    def fraction(self, index: int, put: Callable[[int, np.ndarray, int], None]) -> None:
        local, shape, rows = self.local, self.shape, self.rows
        if not hasattr(local, "counts"):
            local.counts = np.empty(shape, self.accumulator)
            local.band = np.empty((min(rows, shape[0]), shape[1]), self.plan.dtype) if self.banded else None
        counts = local.counts
        self.counts(index, counts)
        if not self.banded:
            put(index, counts, 0)
            return
        for first in range(0, shape[0], rows):
            band = local.band[:min(rows, shape[0] - first)]
            self.multiply(counts, first, band)
            put(index, band, first)


def decode(path: Path, movie: Movie, plan: Fractions, gain: np.ndarray | None,
           put: Callable[[int, np.ndarray, int], None]) -> None:
    """Decode every fraction of ``plan`` (:class:`_Decoder`), side by side in threads."""
    with open_input(path) as file:
        decoder = _Decoder(path, file.fileno(), movie, plan, gain)
        threads = _threads(decoder.thread_bytes, len(plan.groups))
        if threads == 1:
            for index in range(len(plan.groups)):
                decoder.fraction(index, put)
            return
        stop = threading.Event()

        def one(index: int) -> None:
            if stop.is_set():
                return
            try:
                decoder.fraction(index, put)
            except BaseException:
                stop.set()
                raise

        with ThreadPoolExecutor(threads, "noa-eer") as pool:
            for future in [pool.submit(one, i) for i in range(len(plan.groups))]:
                future.result()


class _OnDemand:
    """The fractions of an array read by tiles, decoded as :func:`noa_core.io.mapped.read_view` asks for byte
    ranges of them (its mapping's ``produce`` and ``gather``). A read of a few fractions (a tile of a copy) finds
    each one's counts decoded in memory, the next ones decoded ahead in the other threads, and has them
    multiplied by the gain straight into its buffer (a plain copy's is the output tile's): no temporary file,
    no copy of the fraction but the one the tile needs. A fraction no longer asked gives its accumulator back.
    A read spanning more fractions than that (an F-ordered copy, an average of many fractions) decodes every
    fraction left into the unlinked temporary file ``temp``, which holds them from then on. A fraction asked
    again is decoded again."""

    def __init__(self, path: Path, movie: Movie, plan: Fractions, gain: np.ndarray | None, temp: int) -> None:
        self.file = open_input(path)  # open while the mapping lives
        self.decoder = _Decoder(path, self.file.fileno(), movie, plan, gain)
        self.path, self.temp, self.count, self.dtype = path, temp, len(plan.groups), plan.dtype
        self.pixels = math.prod(self.decoder.shape)
        self.fraction_bytes = self.pixels * plan.dtype.itemsize
        self.write = functools.partial(_write_rows, temp, path, self.fraction_bytes)
        self.threads = _threads(self.decoder.thread_bytes, self.count)
        self.capacity = 2 * self.threads + 1  # fractions held at once: those read, those ahead
        self.pool = ThreadPoolExecutor(self.threads, "noa-eer")
        # fraction -> its Future (running or done), least recently asked first: its counts, or None once in the file
        self.decoding: dict[int, Future] = {}
        self.in_file: set[int] = set()
        self.spare: deque[np.ndarray] = deque()  # an accumulator given back (a deque: taken without the lock)
        self.keep_all = False
        self.readers: Counter[int] = Counter()  # fraction -> reads under way (it stays)
        self.lock = threading.Lock()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.file.close()
        os.close(self.temp)

    def _counted(self, index: int) -> np.ndarray:
        """Fraction ``index``'s counts, in an accumulator given back before or a new one."""
        try:
            counts = self.spare.pop()
        except IndexError:
            counts = np.empty(self.decoder.shape, self.decoder.accumulator)
        self.decoder.counts(index, counts)
        return counts

    def _give_back(self, future: Future) -> None:
        # one spare at most: read in order, a fraction's accumulator goes to the one asked after it, and memory
        # holds the fractions read and ahead, no more
        if not future.cancelled() and future.exception() is None and not self.spare:
            self.spare.append(future.result())

    @contextlib.contextmanager
    def __call__(self, first: int, stop: int) -> Iterator[None]:
        """Bytes ``first .. stop-1`` decoded now (or ahead), kept while the block reads them."""
        asked = range(first // self.fraction_bytes, min(self.count, (stop - 1) // self.fraction_bytes + 1))
        with self.lock:
            if len(asked) + self.threads > self.capacity:
                self.keep_all = True
            wanted = range(asked.start, self.count) if self.keep_all else \
                range(asked.start, min(self.count, asked.stop + self.threads))
            unused = [i for i in self.decoding if i not in wanted and not self.readers[i] and i not in self.in_file]
            for index in unused:  # its accumulator comes back once its decoding ends, for the next one asked
                self.decoding.pop(index).add_done_callback(self._give_back)
            for index in wanted:
                if index in self.decoding:
                    self.decoding[index] = self.decoding.pop(index)  # asked again: most recent
                elif self.keep_all:
                    self.decoding[index] = self.pool.submit(self.decoder.fraction, index, self.write)
                    self.in_file.add(index)
                else:
                    self.decoding[index] = self.pool.submit(self._counted, index)
            futures = [self.decoding[i] for i in asked]
            self.readers.update(asked)
        try:
            for future in futures:
                future.result()
            yield
        finally:
            with self.lock:
                self.readers.subtract(asked)

    def read_into(self, buffer: memoryview, offset: int) -> bool:
        """Fill ``buffer`` with the bytes from ``offset`` on (of fractions the enclosing :meth:`__call__` asked)."""
        out = np.frombuffer(buffer, self.dtype)
        element, done = offset // self.dtype.itemsize, 0
        while done < out.size:
            index, at = divmod(element + done, self.pixels)
            n = min(out.size - done, self.pixels - at)
            with self.lock:
                future = self.decoding[index]
            counts = future.result()
            if counts is None:
                piece = buffer[done * self.dtype.itemsize:(done + n) * self.dtype.itemsize]
                if os.preadv(self.temp, [piece], index * self.fraction_bytes + at * self.dtype.itemsize) != len(piece):
                    return False
            else:
                self._put(counts, at, out[done:done + n])
            done += n
        return True

    def _put(self, counts: np.ndarray, at: int, out: np.ndarray) -> None:
        """``out`` = elements ``at ..`` of a fraction whose counts are ``counts`` (times the gain, if any): whole
        rows in bands of :attr:`_Decoder.rows`, a part of a row through a row of its own."""
        if self.decoder.gain is None:
            out[:] = counts.reshape(-1)[at:at + len(out)]
            return
        width, done = self.decoder.shape[1], 0
        while done < len(out):
            row, column = divmod(at + done, width)
            if column or len(out) - done < width:
                n = min(width - column, len(out) - done)
                line = np.empty((1, width), np.float32)
                self.decoder.multiply(counts, row, line)
                out[done:done + n] = line[0, column:column + n]
            else:
                rows = min(self.decoder.rows, (len(out) - done) // width)
                n = rows * width
                self.decoder.multiply(counts, row, out[done:done + n].reshape(rows, width))
            done += n


def _write_rows(fd: int, path: Path, fraction_bytes: int, index: int, rows: np.ndarray, first: int) -> None:
    """Rows ``first ..`` of fraction ``index`` into the temporary file ``fd``, which holds the fractions one
    after another (a :class:`_Decoder`'s ``put``)."""
    at = index * fraction_bytes + first * rows.shape[1] * rows.itemsize
    mapped.pwrite_all(fd, np.ascontiguousarray(rows).reshape(-1).view(np.uint8).data, at, path)


def _read_fractions(path: Path, movie: Movie, plan: Fractions, gain: np.ndarray | None, to_file: bool,
                    tiles: bool = False) -> np.ndarray:
    """Every fraction, ``(fractions, H, W)``: in an unlinked temporary file mapped read-only (``to_file``), else
    in memory; ``tiles`` (with ``to_file``): decoded as tiles are read (:class:`_OnDemand`), not all first."""
    shape = tuple(plan.shape(movie)[i] for i in (0, 2, 3))
    nbytes = math.prod(shape) * plan.dtype.itemsize
    if nbytes > MAX_OUTPUT_BYTES:
        raise SizeError(f"{path}: {shape[0]} fractions of {shape[2]} x {shape[1]} are more than noa reads")
    if not to_file:
        data = np.empty(shape, plan.dtype)

        def into_memory(index: int, rows: np.ndarray, first: int) -> None:
            data[index, first:first + len(rows)] = rows

        decode(path, movie, plan, gain, into_memory)
        return data
    folder = mapped.spill_folder(path, nbytes, "frames", "decoding")
    with tempfile.TemporaryFile(prefix="noa-", suffix=".eer-decoded", dir=folder) as temp:
        if tiles:  # read only through read_view, with pread where from the file: holes until written, no SIGBUS
            os.ftruncate(temp.fileno(), nbytes)
            on_demand = _OnDemand(path, movie, plan, gain, os.dup(temp.fileno()))
            return mapped.map_input(path, 0, plan.dtype, math.prod(shape), private=True, fd=temp.fileno(),
                                    produce=on_demand, gather=on_demand).reshape(shape)
        # its blocks now: a disk that fills while the mapping is read would be a SIGBUS
        atomic.reserve(temp.fileno(), nbytes, f"{path}: decoding the {nbytes} bytes of fractions: no space left in "
                       f"{folder}")
        decode(path, movie, plan, gain, functools.partial(_write_rows, temp.fileno(), path, nbytes // shape[0]))
        return mapped.map_input(path, 0, plan.dtype, math.prod(shape), private=True, fd=temp.fileno()).reshape(shape)


# -- metadata --------------------------------------------------------------------------------------


def _acquisition_label(acquisition: dict[str, Any]) -> str | None:
    """The acquisition XML in one line: exposure, dose rate, sensor size (what the tags give)."""
    parts = []
    for key, name in (("exposureTime", "exposure"), ("meanDoseRate", "dose rate"), ("totalDose", "total dose")):
        if key in acquisition:
            parts.append(f"{name} {acquisition[key]:g} {acquisition.get(key + '.unit', '')}".rstrip()
                         if isinstance(acquisition[key], (int, float)) else f"{name} {acquisition[key]}")
    if "sensorImageWidth" in acquisition and "sensorImageHeight" in acquisition:
        parts.append(f"sensor {acquisition['sensorImageWidth']} x {acquisition['sensorImageHeight']}")
    return "EER " + ", ".join(parts) if parts else None


def _metadata(path: Path, movie: Movie, plan: Fractions, options: EerReadOptions) -> Metadata:
    group = len(plan.groups[0])
    coding = f"EER {movie.frames} frames, compression {movie.compression} (bits {','.join(map(str, movie.bits))})"
    labels = [coding] + [label for label in [_acquisition_label(movie.acquisition)] if label]
    upsampling = plan.factor[0].bit_length()
    axes = (f"frames -> B: {len(plan.groups)} fractions of {group} of the {movie.frames} frames, "
            f"{movie.width} x {movie.height} detector at upsampling {upsampling}"
            + (f", times the gain {options.gain}" if options.gain else ""))
    return Metadata(format=FORMAT.name, shape=plan.shape(movie), dtype=plan.dtype.name, pixel_size=(0.0, 0.0, 0.0),
                    unit=None, labels=labels, order="C", axes=axes, path=str(path), notices=list(plan.notices))


def _opened(path: Path, request: ReadRequest[EerReadOptions]) -> tuple[Movie, Fractions]:
    options = request.options
    if not options.gain and (options.gain_flip_y or options.gain_rotate):
        raise ParameterError(f"{path}: {param('gain_flip_y')} and {param('gain_rotate')} turn a gain; give "
                             f"{param('gain', 'FILE')}", "gain")
    movie = parse(path, request.opened)
    plan = fractions(path, movie, options)
    if options.gain:
        check_gain_header(remote.as_path(options.gain), path, movie, plan.factor, options.quarter_turns)
    return movie, plan


class EerFormat:
    """EER movies: the EER :class:`~noa_core.io.protocol.ImageFormat` (read only)."""

    name = "eer"
    title = "EER"
    extensions = EXTENSIONS
    output_extensions: tuple[str, ...] = ()
    media_type = "image/tiff"
    compressed_input = False  # the pages are found by offset
    header_statistics = False
    store = False
    checks_size = True
    indexed = False
    read_options = EerReadOptions
    lacking: Mapping[str, str] = {"as_stack/as_volume": "an EER movie reads as a stack of fractions",
                                  "series": "an EER movie has one series of frames"}

    def detect(self, head: bytes, path: Path) -> bool:
        if head[:4] in _SIGNATURES and path.suffix.lower() in EXTENSIONS and remote.is_remote(path):
            # its frames are found and decoded by pread on a descriptor, which a remote object has not
            raise UnknownFormatError(f"{path}: EER movies are read from files of this machine only; copy it here "
                                     "first")
        return first_compression(path, head) in COMPRESSIONS

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        if head[:4] in _SIGNATURES:
            raise CorruptFileError(f"{path}: Compression: the first page is not EER-coded (65000, 65001 or 65002); "
                                   "a plain TIFF is read under a .tif name")
        raise CorruptFileError(f"{path}: magic bytes: {head[:4]!r} is not a TIFF signature, so not an EER movie")

    def read(self, path: Path, request: ReadRequest[EerReadOptions]) -> tuple[Array, Metadata]:
        """The fractions ``request`` asks for; fractions over this context's voxel limit are refused from the
        frames' directories, before the gain or any frame is read."""
        options = request.options
        movie, plan = _opened(path, request)
        check_input_size(plan.shape(movie), str(path))
        metadata = _metadata(path, movie, plan, options)
        gain = None
        if options.gain:
            gain = reading_gain(remote.as_path(options.gain), path, movie, plan.factor, bool(options.gain_flip_y),
                                options.quarter_turns, metadata.notices)
        data = _read_fractions(path, movie, plan, gain, to_file=request.mmap, tiles=request.tiles)
        return asarray(data[:, None]), metadata

    def probe(self, path: Path, request: ReadRequest[EerReadOptions]) -> Probe:
        movie, plan = _opened(path, request)
        shape = plan.shape(movie)
        return Probe(shape, layout.strides_for(shape), plan.dtype, _metadata(path, movie, plan, request.options))

    def check_writable(self, dtype: np.dtype, shape: Shape4, path: Path) -> None:
        raise WriteDTypeError(f"{path}: EER is read, not written; write the fractions as .mrc or .tif")

    def create(self, temp: Path, spec: OutputSpec) -> Created:
        raise FileFormatError(f"{spec.path}: EER is read, not written")

    def finish(self, temp: Path, spec: OutputSpec, statistics: HeaderStatistics) -> None:
        raise FileFormatError(f"{spec.path}: EER is read, not written")


FORMAT = EerFormat()
