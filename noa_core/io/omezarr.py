"""OME-Zarr stores (OME-NGFF 0.4 on zarr v2, 0.5 on zarr v3): the OME-Zarr :class:`~noa_core.io.protocol.ImageFormat`.

A store is a directory, not a file, so this format differs from MRC and TIFF in two places:

- Reading: a level of the multiscale image is decoded chunk by chunk (zarr does the decoding) into an
  unlinked temporary file, which is then mapped, as :func:`noa_core.io.mrc._spill` does for compressed
  MRC: memory stays bounded and every operation reads the input as it reads any mapped file.
- Writing: the store is created (group, metadata, an empty array) in a temporary directory beside the
  destination when the output opens; the tiles an operation computes are written straight into it as
  chunks (:class:`StoreTiles`), the planner aligning tiles to the chunk grid, so Dask tasks each write
  their own chunks; :class:`~noa_core.io.atomic.TemporaryOutput` then renames the directory into
  place. A reader never sees a partial store.

Axes map to BDHW as TIFF axes do (:func:`noa_core.io.tiff.map_axes`): time is the batch, z/y/x are
D/H/W, a channel axis is the batch when nothing else is (otherwise ``channel=`` picks one). Pixel
sizes come from the ``scale`` of the level's ``coordinateTransformations`` (times the multiscale's
own), in the axes' units; an axis without a unit has an unknown pixel size. noa writes the stored axes
``t`` (a batch larger than 1), ``z`` (a depth larger than 1), ``y``, ``x``, with the pixel size in
ångström (unit "angstrom") and the origin as a translation; unknown sizes get scale 1 and no unit.

zarr is imported inside the functions: commands that never touch a store do not pay for it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from noa_core import layout
from noa_core.errors import (
    CorruptFileError,
    FileFormatError,
    HeaderError,
    NoSpaceError,
    WriteDTypeError,
)
from noa_core.io import mapped, tiff
from noa_core.io.metadata import ANGSTROM, Metadata, Statistics, angstroms_per_unit
from noa_core.io.protocol import Created, OutputSpec, Probe, ReadRequest
from noa_core.layout import Shape4

if TYPE_CHECKING:
    from noa_core.array import Array

EXTENSIONS = (".ome.zarr", ".zarr")  # the usual one first; both are directories
# Files that make a directory a zarr node: zarr v3, then v2 group, attributes, array.
_NODE_FILES = ("zarr.json", ".zgroup", ".zattrs", ".zarray")
NGFF_VERSIONS = {"0.4": 2, "0.5": 3}  # the NGFF versions noa writes, with their zarr format
DEFAULT_NGFF = "0.4"  # zarr v2: what most viewers (napari, Fiji's MoBIE/n5-viewer, neuroglancer) read
CHUNK_BYTES = 16 << 20  # the largest chunk noa writes by default
BLOCK_BYTES = 64 << 20  # what one conversion step (decode or encode) holds in memory
_UNIT_NAMES = {"Å": "angstrom"}  # noa's units -> NGFF's (UDUNITS-2 names)


def is_store(path: Path) -> bool:
    """Whether ``path`` is a directory holding a zarr group or array (v2 or v3)."""
    return path.is_dir() and any((path / name).is_file() for name in _NODE_FILES)


def has_store_extension(path: Path) -> bool:
    return path.name.lower().endswith(EXTENSIONS)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _in_words(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _open_node(path: Path):
    import zarr  # here: the first store read pays for it, no other command does

    try:
        return zarr.open(store=str(path), mode="r")
    except Exception as exc:  # zarr raises many types on damaged metadata; each becomes one line
        raise CorruptFileError(f"{path}: zarr metadata: {_in_words(exc)}") from None


class _Level:
    """The array of the chosen level, with what the metadata say of its axes."""

    def __init__(self, array, letters: str, sizes: dict[str, tuple[float, str]], origin: dict[str, float],
                 units: dict[str, str], labels: list[str], version: str) -> None:
        self.array = array
        self.letters = letters
        self.sizes = sizes
        self.origin = origin
        self.units = units
        self.labels = labels
        self.version = version


def _axis_letters(path: Path, axes: Sequence[Any]) -> str:
    """One letter per axis, as tifffile names them: T(ime), C(hannel), Z, Y, X; '?' for other kinds."""
    names, kinds = [], []
    for axis in axes:
        if isinstance(axis, str):
            names.append(axis.lower())
            kinds.append(None)
        elif isinstance(axis, dict) and isinstance(axis.get("name"), str):
            names.append(axis["name"].lower())
            kinds.append(axis.get("type"))
        else:
            raise HeaderError(f"{path}: multiscales axes: {axis!r} is not an axis (a name, or an object with a name)")
    spatial = [i for i, (n, k) in enumerate(zip(names, kinds)) if k == "space" or (k is None and n in "zyx")]
    letters = []
    for i, (name, kind) in enumerate(zip(names, kinds)):
        if i in spatial:
            letters.append(name.upper() if name in ("z", "y", "x") else "ZYX"[3 - len(spatial) + spatial.index(i)])
        elif kind == "time" or (kind is None and name == "t"):
            letters.append("T")
        elif kind == "channel" or (kind is None and name == "c"):
            letters.append("C")
        else:
            letters.append("?")
    text = "".join(letters)
    if any(text.count(a) > 1 for a in "TCZYX"):
        raise HeaderError(f"{path}: multiscales axes: {names} name an axis twice")
    return text


def _transforms(path: Path, entries: Any, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """The scale and translation that a list of coordinateTransformations amounts to."""
    scale, translation = np.ones(ndim), np.zeros(ndim)
    for entry in entries or []:
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind == "identity":
            continue
        values = entry.get(kind) if kind in ("scale", "translation") else None
        if values is None:
            if isinstance(entry, dict) and "path" in entry:
                raise HeaderError(f"{path}: coordinateTransformations: transforms stored in files are not read")
            raise HeaderError(f"{path}: coordinateTransformations: {entry!r} is not a scale or translation")
        try:
            vector = np.asarray(values, float)
        except (TypeError, ValueError):
            raise HeaderError(f"{path}: coordinateTransformations: {kind} {values!r} is not numbers") from None
        if vector.shape != (ndim,):
            raise HeaderError(f"{path}: coordinateTransformations: {kind} has {vector.size} values for {ndim} axes")
        if kind == "scale":
            scale, translation = scale * vector, translation * vector
        else:
            translation = translation + vector
    return scale, translation


def _level(path: Path, request: ReadRequest, notices: list[str]) -> _Level:
    """Open the multiscale image of the store at ``path`` and its level ``request.level`` (default 0)."""
    import zarr

    node = _open_node(path)
    if isinstance(node, zarr.Array):  # a bare array: no axes named, no pixel size
        if request.level:
            raise HeaderError(f"{path}: level: a bare zarr array has one level (0)")
        letters = {2: "YX", 3: "ZYX", 4: "TZYX"}.get(node.ndim)
        if letters is None:
            raise HeaderError(f"{path}: shape: a bare zarr array of {node.ndim} dimensions {node.shape}; "
                              "noa reads 2 (YX), 3 (ZYX) or 4 (TZYX)")
        notices.append(f"{path}: a zarr array without OME metadata: axes taken as {letters}, pixel size unknown")
        return _Level(node, letters, {}, {}, {}, [], "none")
    attrs = node.attrs.asdict()
    ome = attrs["ome"] if isinstance(attrs.get("ome"), dict) else attrs
    multiscales = ome.get("multiscales")
    if not isinstance(multiscales, list) or not multiscales or not isinstance(multiscales[0], dict):
        what = "an HCS plate; open one of its images (plate/row/column/field)" if "plate" in ome or "well" in ome \
            else "a zarr group without OME multiscales metadata"
        raise HeaderError(f"{path}: multiscales: {what}")
    image = multiscales[0]
    if len(multiscales) > 1:
        notices.append(f"{path}: {len(multiscales)} multiscale images; reading the first")
    version = str(ome.get("version") or image.get("version") or "unknown")
    datasets = image.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise HeaderError(f"{path}: multiscales datasets: none listed")
    level = request.level or 0
    if not 0 <= level < len(datasets):
        raise HeaderError(f"{path}: level: {level} is not in 0..{len(datasets) - 1}")
    dataset = datasets[level]
    where = dataset.get("path") if isinstance(dataset, dict) else None
    if not isinstance(where, str) or ".." in where.split("/") or where.startswith("/"):
        raise HeaderError(f"{path}: multiscales datasets: level {level} path {where!r} is not inside the store")
    try:
        array = node[where]
    except Exception as exc:
        raise CorruptFileError(f"{path}: level {level}: array {where!r} cannot be opened ({_in_words(exc)})") from None
    if not isinstance(array, zarr.Array):
        raise HeaderError(f"{path}: level {level}: {where!r} is a group, not an array")
    axes = image.get("axes") or ["t", "c", "z", "y", "x"][5 - array.ndim:]  # NGFF 0.1-0.2 had no axes: TCZYX
    if len(axes) != array.ndim:
        raise HeaderError(f"{path}: multiscales axes: {len(axes)} axes for the {array.ndim} dimensions of level "
                          f"{level} {array.shape}")
    letters = _axis_letters(path, axes)
    scale, translation = _transforms(path, dataset.get("coordinateTransformations"), array.ndim)
    outer_scale, outer_translation = _transforms(path, image.get("coordinateTransformations"), array.ndim)
    scale, translation = scale * outer_scale, translation * outer_scale + outer_translation
    units = {letters[i]: a["unit"] for i, a in enumerate(axes)
             if isinstance(a, dict) and isinstance(a.get("unit"), str) and letters[i] in "ZYX"}
    sizes: dict[str, tuple[float, str]] = {}
    for i, letter in enumerate(letters):
        if letter not in "ZYX":
            continue
        if letter in units and scale[i] > 0:
            sizes[letter] = (float(scale[i]), units[letter])
        elif scale[i] != 1:
            notices.append(f"{path}: pixel size of {letter} unknown: scale {scale[i]:g} has no unit")
    origin = {letters[i]: float(translation[i]) for i in range(array.ndim) if letters[i] in units}
    noa_attrs = attrs.get("noa") if isinstance(attrs.get("noa"), dict) else {}
    labels = [str(x) for x in noa_attrs.get("labels", []) if isinstance(x, str)]
    return _Level(array, letters, sizes, origin, units, labels, version)


def _select_channel(path: Path, level: _Level, channel: int | None) -> tuple[tuple, tuple[int, ...], str]:
    """The selection of the level's array that a read takes (all, or one channel), its shape and letters."""
    shape = tuple(int(n) for n in level.array.shape)
    letters = level.letters
    if channel is None:
        return (slice(None),) * len(shape), shape, letters
    i = letters.find("C")
    count = shape[i] if i >= 0 else 1
    if not 0 <= channel < count:
        raise HeaderError(f"{path}: channel: {channel} is not in 0..{count - 1}")
    if i < 0:
        return (slice(None),) * len(shape), shape, letters
    selection = (slice(None),) * i + (channel,) + (slice(None),) * (len(shape) - i - 1)
    return selection, shape[:i] + shape[i + 1:], letters[:i] + letters[i + 1:]


def _blocks(shape: Sequence[int], chunks: Sequence[int], itemsize: int, budget: int) -> Iterator[tuple[slice, ...]]:
    """Chunk-aligned blocks covering ``shape``, each about ``budget`` bytes at most (one chunk at least):
    whole chunks along the last axes first, so that each block is as contiguous as it can be."""
    block = [max(1, min(c, n)) for c, n in zip(chunks, shape)]
    for i in reversed(range(len(shape))):
        factor = max(1, budget // (math.prod(block) * itemsize))
        block[i] = min(shape[i], block[i] * factor)
        if block[i] < shape[i]:
            break
    starts = [range(0, n, b) for n, b in zip(shape, block)]
    for corner in itertools.product(*starts):
        yield tuple(slice(s, min(s + b, n)) for s, b, n in zip(corner, block, shape))


def _dtype_of(path: Path, array) -> np.dtype:
    dtype = np.dtype(array.dtype)
    if dtype.kind not in "iufcb" or dtype.subdtype is not None:
        raise HeaderError(f"{path}: dtype: {dtype} is not a numeric type noa reads")
    return dtype.newbyteorder("=") if dtype.kind != "b" else dtype


def _decode_into(path: Path, level: _Level, selection: tuple, blocks: Sequence[tuple[slice, ...]],
                 put: Callable[[tuple[slice, ...], np.ndarray], None]) -> None:
    """Decode ``blocks`` of the selected data (zarr decodes each block's chunks) and ``put(block, data)``.

    Each block is decoded into the same reused buffer: fresh memory for every block would cost a page
    fault per 4 KiB, as much as the decoding itself."""
    from zarr.core.buffer.cpu import NDBuffer

    stored = np.dtype(level.array.dtype)
    with mapped.scratch_buffers():
        for block in blocks:
            it = iter(block)
            full = tuple(next(it) if isinstance(s, slice) else s for s in selection)
            extents = [b.stop - b.start for b in block]
            data = mapped.scratch(math.prod(extents) * stored.itemsize, 0).view(stored).reshape(extents)
            try:
                level.array.get_basic_selection(full, out=NDBuffer.from_numpy_array(data))
            except Exception as exc:
                raise CorruptFileError(f"{path}: chunk data: {_in_words(exc)}") from None
            put(block, data)


def _box_writer(fd: int, shape: Sequence[int], dtype: np.dtype,
                path: Path) -> Callable[[tuple[slice, ...], np.ndarray], None]:
    """``put(block, data)`` writing a decoded block, as ``dtype`` (native byte order), into its box of a
    C-ordered file of ``shape`` with ``pwrite``, one call per contiguous run: written through a mapping,
    every 4 KiB page of the file would fault first, which cost more than the decoding."""
    strides = _c_strides(shape)

    def put(block: tuple[slice, ...], data: np.ndarray) -> None:
        extents = [b.stop - b.start for b in block]
        whole = len(shape)  # the axes from ``whole`` on are whole in the block: runs span them
        while whole > 0 and extents[whole - 1] == shape[whole - 1]:
            whole -= 1
        outer = max(whole - 1, 0)  # a run spans axis ``outer`` (part of it) and those after it
        flat = memoryview(np.ascontiguousarray(data, dtype).reshape(-1).view(np.uint8))
        run = math.prod(extents[outer:]) * dtype.itemsize
        for n, index in enumerate(np.ndindex(*extents[:outer])):
            first = sum((b.start + i) * st for b, i, st in zip(block, index, strides)) \
                + block[outer].start * strides[outer]
            mapped.pwrite_all(fd, flat[n * run:(n + 1) * run], first * dtype.itemsize, path)

    return put


def _decode(path: Path, level: _Level, selection: tuple, shape: tuple[int, ...], dtype: np.dtype,
            to_file: bool) -> np.ndarray:
    """The selected data, decoded block by block: into an unlinked temporary file mapped read-only
    (``mmap``), else into memory."""
    nbytes = math.prod(shape) * dtype.itemsize
    blocks = list(_blocks(shape, _selected_chunks(level, selection), dtype.itemsize, BLOCK_BYTES))
    if not to_file:
        data = np.empty(shape, dtype)
        _decode_into(path, level, selection, blocks, data.__setitem__)
        return data
    folder = mapped.spill_folder(path, nbytes, "shape", "decoding")
    with tempfile.NamedTemporaryFile(prefix="noa-", suffix=".zarr-decoded", dir=folder) as temp:
        allocate(path, temp.fileno(), nbytes, folder)
        _decode_into(path, level, selection, blocks, _box_writer(temp.fileno(), shape, dtype, path))
        return mapped.map_input(Path(temp.name), 0, dtype, math.prod(shape), private=True).reshape(shape)


def _selected_chunks(level: _Level, selection: tuple) -> list[int]:
    return [level.array.chunks[i] for i, s in enumerate(selection) if isinstance(s, slice)]


# -- decoding by several processes (the Dask driver) ---------------------------------------------

DecodedKey = tuple[Path, int, "int | None"]
# Stores whose selected data other processes decoded into a shared file (:func:`decode_blocks`), by
# (store path, level, channel): reading one of them maps that file instead of decoding.
_DECODED: dict[DecodedKey, Path] = {}


def decoded_key(path: Path, request: ReadRequest) -> DecodedKey:
    return Path(path).resolve(), request.level or 0, request.channel


@contextlib.contextmanager
def decoded_inputs(files: dict[DecodedKey, Path]) -> Iterator[None]:
    """Within the block, reading a store named in ``files`` maps its decoded data from the file given
    (a plain shared mapping, which tasks on other machines can map as well) instead of decoding it."""
    _DECODED.update(files)
    try:
        yield
    finally:
        for key in files:
            _DECODED.pop(key, None)


def decoding(path: Path, request: ReadRequest, budget: int = BLOCK_BYTES) -> tuple[int, list[tuple[slice, ...]]]:
    """What decoding the selected data of the store at ``path`` takes: the bytes of the decoded data
    (C order, as :func:`decode_blocks` writes them) and the chunk-aligned blocks, each about ``budget``."""
    level, dtype, selection, shape, _ = _selected(path, request, [])
    blocks = list(_blocks(shape, _selected_chunks(level, selection), dtype.itemsize, budget))
    return math.prod(shape) * dtype.itemsize, blocks


def decode_blocks(path: Path, request: ReadRequest, raw: Path, blocks: Sequence[tuple[slice, ...]]) -> None:
    """Decode ``blocks`` (from :func:`decoding`) of the store at ``path`` into their place in ``raw`` (a file
    of the decoded size), and make them durable: one task of a decoding shared by several processes."""
    level, dtype, selection, shape, _ = _selected(path, request, [])
    with open(raw, "r+b") as file:
        _decode_into(path, level, selection, blocks, _box_writer(file.fileno(), shape, dtype, path))
        os.fdatasync(file.fileno())


def allocate(path: Path, fd: int, nbytes: int, folder: str) -> None:
    """Give the temporary file its blocks now: a disk that fills while the mapping is written would be
    a SIGBUS (killing the process), and is an error here instead."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceError(f"{path}: shape: decoding the {nbytes} bytes of data: no space left in {folder}") \
                from None
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, nbytes)  # a file system that cannot allocate ahead: sparse, as a last resort


def _metadata(path: Path, level: _Level, shape: Shape4, dtype: np.dtype, words: str,
              notices: list[str]) -> Metadata:
    pixel, unit = tiff._in_one_unit(path, level.sizes, notices)
    origin = [0.0, 0.0, 0.0]
    to = angstroms_per_unit(unit)
    for i, letter in enumerate("ZYX"):
        own = angstroms_per_unit(level.units.get(letter))
        value = level.origin.get(letter, 0.0)
        if value and to and own:
            origin[i] = value * own / to
        elif value and level.units.get(letter) == unit:
            origin[i] = value
    if unit is not None and unit.lower() == "angstrom":
        unit = ANGSTROM
    return Metadata(format=FORMAT.name, shape=shape, dtype=dtype.name, pixel_size=pixel, unit=unit,
                    origin=tuple(origin), labels=list(level.labels), order="C",
                    axes=f"{words} (NGFF {level.version})", path=str(path), notices=notices)


def _selected(path: Path, request: ReadRequest,
              notices: list[str]) -> tuple[_Level, np.dtype, tuple, tuple[int, ...], str]:
    """The level, element type, selection (all, or one channel), shape and axis letters a read takes."""
    _check_request(path, request)
    level = _level(path, request, notices)
    dtype = _dtype_of(path, level.array)
    selection, shape, letters = _select_channel(path, level, request.channel)
    return level, dtype, selection, shape, letters


def _parsed(path: Path, request: ReadRequest, data: bool):
    notices: list[str] = []
    level, dtype, selection, shape, letters = _selected(path, request, notices)
    if math.prod(shape) == 0:
        raise HeaderError(f"{path}: shape: level {request.level or 0} {tuple(level.array.shape)} is empty")
    decoded = _DECODED.get(decoded_key(path, request)) if data else None
    if decoded is not None:  # decoded by other processes into a shared file
        values = mapped.map_input(decoded, 0, dtype, math.prod(shape)).reshape(shape)
    elif data:
        values = _decode(path, level, selection, shape, dtype, to_file=request.mmap)
    else:  # a stand-in over one element: only its shape and strides are looked at
        values = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape,
                                                 tuple(s * dtype.itemsize for s in _c_strides(shape)), writeable=False)
    bdhw, words = tiff.map_axes(path, values, letters, None)
    metadata = _metadata(path, level, layout.as_shape4(bdhw.shape), dtype, words, notices)
    return bdhw, metadata


def _c_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return strides


def _check_request(path: Path, request: ReadRequest) -> None:
    if request.as_stack or request.as_volume:
        raise FileFormatError(f"{path}: as_stack/as_volume: OME-Zarr axes name their meaning; these options "
                              "are for MRC")
    if request.series is not None:
        raise FileFormatError(f"{path}: series: OME-Zarr stores have no series; series= is for TIFF")


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def stored_axes(shape: Shape4) -> tuple[tuple[int, ...], str]:
    """Stored shape and axis names: a batch of 1 and a depth of 1 are left out, y and x always kept."""
    b, d, h, w = shape
    kept = [(n, a) for n, a in ((b, "t"), (d, "z")) if n > 1] + [(h, "y"), (w, "x")]
    return tuple(n for n, _ in kept), "".join(a for _, a in kept)


def default_chunks(stored: Sequence[int], itemsize: int, budget: int = CHUNK_BYTES) -> tuple[int, ...]:
    """Whole sections (y, x) per chunk, several along the next axis out while they fit in ``budget``; a
    section larger than ``budget`` is cut into bands of rows (and a row into pieces)."""
    chunks = [1] * len(stored)
    h, w = stored[-2:]
    row = w * itemsize
    if row > budget:
        chunks[-1] = max(1, budget // itemsize)
    else:
        chunks[-1] = w
        chunks[-2] = min(h, max(1, budget // row))
    if len(stored) > 2 and chunks[-2] == h:
        chunks[-3] = min(stored[-3], max(1, budget // (h * row)))
    return tuple(chunks)


def _write_options(spec: OutputSpec) -> tuple[str, tuple[int, ...]]:
    """The NGFF version and chunk shape asked for (``write_options`` 'ngff' and 'chunks'), checked."""
    version = str(spec.write_options.get("ngff") or DEFAULT_NGFF)
    if version not in NGFF_VERSIONS:
        raise FileFormatError(f"{spec.path}: ngff: {version!r} is not one noa writes ({', '.join(NGFF_VERSIONS)})")
    stored, names = stored_axes(spec.shape)
    chunks = spec.write_options.get("chunks")
    if chunks is None:
        return version, default_chunks(stored, spec.dtype.itemsize)
    try:
        values = tuple(int(c) for c in (chunks.split(",") if isinstance(chunks, str) else chunks))
    except (TypeError, ValueError):
        raise FileFormatError(f"{spec.path}: chunks: {chunks!r} is not a list of integers") from None
    if len(values) != len(stored) or any(c < 1 for c in values):
        raise FileFormatError(f"{spec.path}: chunks: {values} must be {len(stored)} positive sizes, one per stored "
                              f"axis {tuple(names)} of shape {stored}")
    return version, tuple(min(c, n) for c, n in zip(values, stored))


def _transforms_for(metadata: Metadata | None, names: str, notices: list[str],
                    path: Path) -> tuple[list[dict], list[dict]]:
    """The NGFF axes and the level's coordinateTransformations for ``metadata``."""
    if metadata is not None:
        pixel, origin, notice = metadata.in_angstrom()
        if notice:
            notices.append(f"{path}: {notice}")
    else:
        pixel, origin = (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)
    by_name = {"z": 0, "y": 1, "x": 2}
    axes, scale, translation = [], [], []
    for name in names:
        if name == "t":
            axes.append({"name": "t", "type": "time"})
            scale.append(1.0)
            translation.append(0.0)
            continue
        size = float(pixel[by_name[name]])
        axis = {"name": name, "type": "space"}
        if size > 0:
            axis["unit"] = _UNIT_NAMES[ANGSTROM]
        axes.append(axis)
        scale.append(size if size > 0 else 1.0)
        translation.append(float(origin[by_name[name]]) if size > 0 else 0.0)
    transforms = [{"type": "scale", "scale": scale}]
    if any(translation):
        transforms.append({"type": "translation", "translation": translation})
    return axes, transforms


def stored_key(key: Sequence[slice], shape: Shape4) -> tuple[slice, ...]:
    """The selection of the stored array (:func:`stored_axes`) that BDHW ``key`` is."""
    return tuple(k for i, (k, n) in enumerate(zip(key, shape)) if i >= 2 or n > 1)


def bdhw_chunks(chunks: Sequence[int], shape: Shape4) -> Shape4:
    """The stored ``chunks`` as a BDHW shape (1 along an axis that is not stored)."""
    it = iter(chunks)
    return layout.as_shape4(tuple(next(it) if i >= 2 or n > 1 else 1 for i, n in enumerate(shape)))


def create_store(store: Path, spec: OutputSpec) -> tuple[Shape4, list[str]]:
    """Create the OME-Zarr image of ``spec`` in the empty directory ``store``: group, metadata and an
    array with no chunk written yet. Returns the chunk shape (BDHW) and notices."""
    import numcodecs
    import zarr

    notices: list[str] = []
    version, chunks = _write_options(spec)
    stored, names = stored_axes(spec.shape)
    zarr_format = NGFF_VERSIONS[version]
    # lz4 with byte shuffle: fast enough to keep up with the disk; image data barely shrink with more work
    if zarr_format == 2:
        compressors = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    else:
        from zarr.codecs import BloscCodec

        compressors = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
    group = zarr.open_group(store=str(store), mode="w-", zarr_format=zarr_format)
    group.create_array("0", shape=stored, chunks=chunks, dtype=spec.dtype, compressors=compressors,
                       fill_value=0, dimension_names=tuple(names) if zarr_format == 3 else None)
    axes, transforms = _transforms_for(spec.metadata, names, notices, spec.path)
    image = {"name": spec.path.name, "axes": axes,
             "datasets": [{"path": "0", "coordinateTransformations": transforms}]}
    labels = list(spec.metadata.labels) if spec.metadata is not None else []
    if spec.label:
        labels.append(spec.label)
    attributes: dict[str, Any] = {}
    if zarr_format == 2:
        attributes["multiscales"] = [{"version": version, **image}]
    else:
        attributes["ome"] = {"version": version, "multiscales": [image]}
    if labels:
        attributes["noa"] = {"labels": labels}
    group.attrs.update(attributes)
    return bdhw_chunks(chunks, spec.shape), notices


class StoreTiles:
    """Output tiles written as chunks of the store a :class:`~noa_core.io.stream.Region` names: the
    tile target of an OME-Zarr output (:class:`~noa_core.io.stream.TileFile`'s twin for stores).

    A tile that covers whole chunks (the planner aligns tiles to the chunk grid) is encoded and written
    without reading anything back, so processes writing different tiles never touch the same chunk
    file. A tile that cuts chunks (:meth:`~noa_core.io.stream.Writer.write_block`) is merged into them
    by zarr, which is right within one process only.
    """

    def __init__(self, region) -> None:
        import zarr

        self.region = region
        # Tiles are written from one thread per core: encoding is most of a chunk's cost, and whole-chunk
        # tiles are independent (pwrite into a file is cheap enough for one thread).
        self.writers = max(1, min(4, mapped.io_threads()))
        self.array = zarr.open_array(store=str(region.path), path="0", mode="r+")

    def buffer(self, key: Sequence[slice], slot: int) -> np.ndarray:
        """A C-ordered BDHW buffer for tile ``key``, reused from tile to tile (``slot``)."""
        extents = [k.stop - k.start for k in key]
        return mapped.scratch(math.prod(extents) * self.region.dtype.itemsize, slot).view(self.region.dtype) \
            .reshape(extents)

    def write(self, key: Sequence[slice], buffer: np.ndarray) -> None:
        selection = stored_key(key, self.region.shape)
        try:
            self.array[selection] = buffer.reshape([s.stop - s.start for s in selection])
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NoSpaceError(f"{self.region.path}: no space left on device for its chunks") from None
            raise

    def sync(self) -> None:
        """Nothing to do: zarr closes each chunk file it writes, and the commit syncs the whole store."""

    def close(self) -> None:
        self.array = None


class OmeZarrFormat:
    """OME-Zarr stores (directories): the OME-Zarr :class:`~noa_core.io.protocol.ImageFormat`.

    ``store`` is True: :func:`noa_core.io.formats.detect` looks for it in directories, and the Writer
    calls :meth:`create_store` with a temporary directory instead of :meth:`create`, then writes tiles
    through :meth:`tiles`.
    """

    name = "omezarr"
    title = "OME-Zarr"
    extensions = EXTENSIONS
    output_extensions = EXTENSIONS
    media_type = "application/vnd.ome.zarr"  # never sent: a store is a directory (see formats.STORES)
    compressed_input = False
    header_statistics = False  # NGFF has no header statistics
    read_options = ("channel", "level")
    store = True

    def detect(self, head: bytes, path: Path) -> bool:
        return is_store(path)

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        raise FileFormatError(f"{path}: path: an OME-Zarr store is a directory, and this is a file")

    def read(self, path: Path, request: ReadRequest) -> tuple[Array, Metadata]:
        from noa_core.array import asarray

        bdhw, metadata = _parsed(path, request, data=True)
        return asarray(bdhw), metadata

    def probe(self, path: Path, request: ReadRequest) -> Probe:
        view, metadata = _parsed(path, request, data=False)
        strides = layout.as_strides4(tuple(s // view.itemsize for s in view.strides))
        return Probe(metadata.shape, strides, np.dtype(view.dtype), metadata)

    def check_writable(self, dtype: np.dtype, shape: Shape4, path: Path) -> None:
        if dtype.kind not in "iuf" or dtype.subdtype is not None:
            raise WriteDTypeError(f"{path}: dtype: {dtype} cannot be stored in OME-Zarr by noa; pass dtype= a "
                                  "real numeric type (uint8, uint16, float32, ...)")
        if math.prod(shape) == 0:
            raise FileFormatError(f"{path}: shape: {shape} is empty; nothing to write")

    def create(self, temp: Path, spec: OutputSpec) -> Created:
        raise FileFormatError(f"{spec.path}: an OME-Zarr output is a directory; it is made by create_store")

    def finish(self, temp: Path, spec: OutputSpec, statistics: Statistics) -> None:
        raise FileFormatError(f"{spec.path}: an OME-Zarr output is a directory; it is made by create_store")

    def create_store(self, store: Path, spec: OutputSpec) -> tuple[Shape4, list[str]]:
        chunks, notices = create_store(store, spec)
        if spec.order == "F":
            notices.append(f"{spec.path}: order: OME-Zarr chunks are stored row-major; order F does not apply")
        return chunks, notices

    def tiles(self, region) -> StoreTiles:
        return StoreTiles(region)


FORMAT = OmeZarrFormat()
