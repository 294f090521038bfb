"""The interface every file format implements, after noa C++'s image encoder concept (core/io/Encoders.hpp).

A format is one object (``FORMAT`` in its module, e.g. :data:`noa_core.io.mrc.FORMAT`) listed in
:data:`noa_core.io.formats.FORMATS` (or MOVIES, read only, or STORES, directories). Over the small common
header, :class:`~noa_core.io.metadata.Metadata`, it says which files are its own (:meth:`ImageFormat.detect`),
reads one as a BDHW array (:meth:`ImageFormat.read`) or only what its header says of it
(:meth:`ImageFormat.probe`), with the read options it declares (``read_options``), and writes an output in
three steps driven by :class:`noa_core.io.stream.Writer`: refuse what it cannot store
(:meth:`ImageFormat.check_writable`), lay out the file with room for the packed data
(:meth:`ImageFormat.create`), and, once the data are written, complete the header (:meth:`ImageFormat.finish`).
The Writer maps and fills the data itself.

What every format promises is tested once, by the conformance suite ``tests/io/conformance.py``
(``FormatTests``) that each format's tests subclass.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from noa_core.array import layout
from noa_core.array.layout import Shape4, Strides4
from noa_core.io.metadata import HeaderStatistics, Metadata

if TYPE_CHECKING:
    from noa_core.array import Array


OptionsT = TypeVar("OptionsT")


@dataclass(frozen=True)
class ReadRequest(Generic[OptionsT]):
    """What a read was asked for, beside the path: the format's own read options, and how to read the data.

    Attributes:
        options: the read options given, as the format's ``read_options`` dataclass
            (:mod:`noa_core.io.read_options`: MRC's stack or volume, TIFF's series, channel and level, ...).
        compression: 'gzip' or 'bzip2' when the file is a compressed stream (found by
            :func:`noa_core.io.formats.detect`), else None.
        mmap: map uncompressed data read-only instead of loading it.
        tiles: the caller reads the array only tile by tile, through :func:`noa_core.io.mapped.read_view` (a
            plan's sources): a format may then make its data as the tiles ask for them (EER decodes fractions
            on demand instead of all first).
        projects: how the paths named inside a file (a particle file's stacks) are opened: the project of a
            ``project_dir`` read option (:data:`noa_core.io.particles.Projects`); None: folders of this machine.
            The service passes one that keeps them beneath its data root.
        opened: the input as :func:`noa_core.io.formats.detect` opened it (:func:`noa_core.io.compression.open_input`),
            which a format may read again from its start instead of opening the file anew
            (:func:`noa_core.io.compression.opened_input`); its caller closes it once the read returns.
    """

    options: OptionsT
    compression: str | None = None
    mmap: bool = True
    tiles: bool = False
    projects: Any = None
    opened: io.BufferedReader | None = None


@dataclass(frozen=True)
class Probe:
    """What an input's header says, its data unread: the BDHW shape and element strides that a read
    gives, the element type of the array, and the metadata.

    The header's sizes were checked against what the file can hold, so a probe that succeeds never
    promises more data than there are bytes (compressed: than the stream can expand to).
    """

    shape: Shape4
    strides: Strides4
    dtype: np.dtype
    metadata: Metadata

    def __post_init__(self) -> None:
        # size-1 dimensions take their packed C stride, as in every Array (such a stride is never used)
        packed = layout.strides_for(self.shape)
        object.__setattr__(self, "strides", layout.as_strides4(
            tuple(s if n != 1 else p for n, s, p in zip(self.shape, self.strides, packed))))

    @property
    def order(self) -> str:
        return layout.order_of(self.shape, self.strides)

    @property
    def kind(self) -> str:
        return layout.kind(self.shape)

    @property
    def ndim(self) -> int:
        return layout.ndim(self.shape)


@dataclass(frozen=True)
class OutputSpec:
    """The output a :class:`~noa_core.io.stream.Writer` makes: the same for ``create`` and ``finish``.

    Attributes:
        path: the final output path (named in notices and errors; the data go to a temporary file).
        shape: BDHW shape of the array written.
        dtype: element type stored.
        order: 'C', or 'F' for column-major sections.
        metadata: what to carry from the source (pixel size, labels, ...), or None.
        label: text of the label noa adds, where the format has labels (None: say what was written).
        write_options: format-specific choices by name (MRC: ``uint8_mode``); a format ignores others.
    """

    path: Path
    shape: Shape4
    dtype: np.dtype
    order: str
    metadata: Metadata | None
    label: str | None
    write_options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Created:
    """What :meth:`ImageFormat.create` made: the byte offset of the packed data, notices for the user, and
    the element type stored when the format widens the one asked for (MRC uint8 -> uint16; None: as asked)."""

    offset: int
    notices: list[str] = field(default_factory=list)
    dtype: np.dtype | None = None


class ImageFormat(Protocol):
    """One file format: detection, reading, and the steps of writing.

    Attributes:
        name: short name, e.g. 'mrc' (what :attr:`Metadata.format` holds for files read by it).
        title: the name in messages, e.g. 'MRC'.
        extensions: lower-case input extensions with their dot; the first is the usual one.
        output_extensions: extensions of outputs written in this format (none: read only, listed in
            :data:`noa_core.io.formats.MOVIES`).
        media_type: the HTTP media type of the format's files.
        compressed_input: whether gzip/bzip2-compressed files of this format are read.
        header_statistics: whether :meth:`finish` writes statistics (the Writer computes them then).
        store: whether its files are directories of chunks (a :class:`StoreFormat`, listed in
            :data:`noa_core.io.formats.STORES`) rather than one file.
        checks_size: whether :meth:`read` refuses an image over this context's voxel limit
            (:func:`noa_core.limits.check_input_size`) itself, between its header and its data; for the others,
            :func:`noa_core.io.formats.read` probes the header first where a limit holds.
        indexed: whether its files index data kept in another file beside them (an :class:`IndexedFormat`:
            particle files, whose images are an MRC stack).
        read_options: the frozen dataclass of the read options it takes (:mod:`noa_core.io.read_options`, where
            it is listed too): :meth:`read` and :meth:`probe` get one in ``request.options``; any other option
            given is refused before they are called.
        lacking: what it says of a read option it does not take, by the option's label ('series': 'MRC files
            hold one series'); an option not named here is refused as '<title> files have no <what it reads>'.
    """

    name: str
    title: str
    extensions: tuple[str, ...]
    output_extensions: tuple[str, ...]
    media_type: str
    compressed_input: bool
    header_statistics: bool
    store: bool
    checks_size: bool
    indexed: bool
    read_options: type
    lacking: Mapping[str, str]

    def detect(self, head: bytes, path: Path) -> bool:
        """Whether the first (decompressed) bytes of ``path`` carry this format's signature."""

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        """No format recognised ``head`` but ``path`` has one of this format's extensions: True to read it
        as this format anyway; otherwise raise the error saying why it is not one."""

    def read(self, path: Path, request: ReadRequest) -> tuple[Array, Metadata]:
        """The file's BDHW array (lazily mapped where possible) and its metadata."""

    def probe(self, path: Path, request: ReadRequest) -> Probe:
        """What :meth:`read` would give, from the header alone: no data are read or decompressed."""

    def check_writable(self, dtype: np.dtype, shape: Shape4, path: Path) -> None:
        """Refuse, with a WriteDTypeError or FileFormatError naming ``path``, what this format cannot store."""

    def create(self, temp: Path, spec: OutputSpec) -> Created:
        """Lay out an output in ``temp`` (an empty file): header and structure, and room for the packed
        data, whose offset it returns; the header statistics wait for :meth:`finish`."""

    def finish(self, temp: Path, spec: OutputSpec, statistics: HeaderStatistics) -> None:
        """Complete the header of ``temp`` once the data are written (statistics are those of the data)."""


class StoreFormat(ImageFormat, Protocol):
    """A format whose inputs and outputs are directories (OME-Zarr), listed in
    :data:`noa_core.io.formats.STORES`. ``store`` is True; :meth:`detect` gets the directory's path (and
    no bytes); the Writer calls :meth:`create_store` instead of :meth:`create` and writes each tile
    through the target :meth:`tiles` gives (any process may, each its own tiles), instead of into a file."""

    def create_store(self, store: Path, spec: OutputSpec) -> tuple[Shape4, list[str]]:
        """Lay out an output in the empty directory ``store`` (which the commit renames onto ``spec.path``):
        metadata and an empty array. Returns the chunk shape (BDHW), to which tiles are aligned, and notices."""

    def complete_store(self, store: Path) -> None:
        """Mark the store complete once every tile is written (the Writer calls it before the commit): what makes
        it an image to readers is written last, so a store that cannot be renamed into place (object storage) is
        never taken for a complete one."""

    def tiles(self, region: Any) -> Any:
        """The tile target of ``region`` (a :class:`noa_core.io.stream.Region` of a store): ``buffer(key, slot)``,
        ``write(key, buffer)``, ``sync()`` and ``close()``, as :class:`noa_core.io.stream.TileFile`."""


class IndexedFormat(ImageFormat, Protocol):
    """A format whose file names data kept in other files beside it (particle files: a STAR or .cs naming the
    sections of MRC stacks). ``indexed`` is True; a :class:`~noa_core.io.stream.Writer` fills one data file
    (named after :meth:`data_path`, laid out by :meth:`create` and :meth:`finish`), splits it into the data files
    :meth:`data_files` says where they are several, then writes the index (:meth:`written`), and places them all
    together or none."""

    def data_path(self, path: Path) -> Path:
        """Where the data of the output ``path`` go as one file."""

    def data_files(self, spec: OutputSpec) -> list[tuple[Path, np.ndarray]]:
        """The data files of the output ``spec``, each with the batch entries (sections) it holds, in order: one
        (:meth:`data_path`, every entry) unless the write options ask for several. Raises, before any data are
        computed, when ``spec`` cannot be indexed."""

    def written(self, spec: OutputSpec) -> Callable[[Sequence[tuple[Path, np.ndarray]]], list[bytes | np.ndarray]]:
        """What the index ``spec.path`` will hold once its data files are placed: a function of :meth:`data_files`
        (the bytes, in pieces). Raises, before any data are computed, when ``spec`` cannot be indexed."""
