"""Plans: what a file operation writes, decided from the input headers before any data is read.

A declaration's ``plan`` function reads its inputs lazily (memory-mapped), views them onto the
output's shape (permute, broadcast) and says how a tile of the output is computed from the same
tile of every source (:func:`tiled_plan`). An output whose tiles do not come from the same tiles of
its inputs (a binning, a crop or pad, a selection of sections) gives ``reads`` instead
(:func:`region_plan`): for each output tile, the source views it is computed from and how (see
:data:`noa_core.compute.tiles.TileReads`); :func:`whole_image_plan` is the one of operations that take
whole images or volumes. A driver (:mod:`noa_core.run`) then creates the output and fills it tile by
tile, in this process or in Dask tasks over the same tiles, so both write the same bytes.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, Protocol

import numpy as np

import noa_core.compute  # a lazy face: noa_core.compute.elementwise (numba's kernels) loads on the numba path alone
from noa_core import io, limits  # io, a lazy face: the writer and atomic outputs load once an output is made
from noa_core.array import Array, asarray, dtypes, empty, layout
from noa_core.array.devices import require_cuda
from noa_core.compute import compute_path
from noa_core.compute.conversion import convert_into
from noa_core.compute.tiles import Compute, Key, TileReads, plan_tiles, same_tile
from noa_core.errors import OutputIsInputError, ValueRangeError
from noa_core.io.remote import as_path, remote_path

if TYPE_CHECKING:
    from noa_core.io import Metadata, Writer
    from noa_core.tomography.beside import SideFiles

PathLike = str | Path


class Options(Protocol):
    """What a plan takes from its operation's options (:class:`noa_core.operations.spec.Options`): the label
    of the command given, and the output format's own choices among them."""

    def output_label(self, detail: str = "") -> str: ...

    def write_options(self) -> dict[str, Any]: ...


@dataclass(kw_only=True)
class Plan:
    """An output described before it exists: the files it is read from, its shape, element type, order,
    metadata and label, the output format's own choices (``write_options``, e.g. MRC's ``uint8_mode``),
    and how its tiles are computed: either ``compute`` from the same tile of every one of ``sources``
    (viewed onto its shape), or ``reads`` (output tile key -> source views and their compute), each tile
    reading ``read_factor`` source bytes per byte it writes. Every tile spans the dimensions in
    ``whole_axes`` entirely (a compute that reverses an axis needs all of it). ``side_files``: the text files
    written beside it, given its path (:data:`~noa_core.tomography.beside.SideFiles`: a tilt series' angle,
    mdoc and STAR files), which a driver places with it, all or none
    (:func:`noa_core.run.local.placed_with_side_files`). Made by
    :func:`tiled_plan`, :func:`region_plan` or :func:`whole_image_plan`."""

    inputs: list[Path]
    meta: Metadata
    label: str
    dtype: np.dtype
    shape: layout.Shape4
    input_shapes: list[layout.Shape4] = field(default_factory=list)
    sources: list[Array] = field(default_factory=list)
    compute: Compute | None = None
    reads: TileReads | None = None
    order: str = "C"
    write_options: dict[str, str] = field(default_factory=dict)
    whole_axes: tuple[int, ...] = ()
    read_factor: float = 1.0
    notices: list[str] = field(default_factory=list)  # the operation's own, for the user (a cropped remainder)
    side_files: SideFiles | None = None  # text files placed with the output (a tilt series' angles, mdoc, STAR)

    def tile_reads(self, device: str = "cpu") -> TileReads:
        """What each output tile is computed from, and how, running on ``device`` (tiles are moved
        there and back)."""
        if self.reads is None:
            assert self.compute is not None  # a plan has reads or a compute
            return same_tile(self.sources, self.shape, on_device(self.compute, device))
        reads = self.reads

        def there(key: Key) -> tuple[list[Array], Compute]:
            views, compute = reads(key)
            return views, on_device(compute, device)

        return reads if device == "cpu" else there

    def keys(self, writer: Writer, block_bytes: int) -> list[Key]:
        """The output's tiles, in the order the local driver fills them (see
        :func:`noa_core.compute.tiles.plan_tiles`)."""
        sources = [] if self.reads is not None else self.sources
        return plan_tiles(writer, sources, block_bytes, self.whole_axes, self.read_factor)

    def create(self, dst: PathLike, *, overwrite: bool) -> Writer:
        """The writer of ``dst`` for this output (a context manager); never one of the inputs."""
        check_distinct(dst, self.inputs)
        return io.create(dst, self.shape, self.dtype, self.meta, order=self.order, overwrite=overwrite,
                         label=self.label, write_options=self.write_options)


def tiled_plan(options: Options, *, inputs: Sequence[PathLike], read: Sequence[Array], meta: Metadata,
               compute: Compute, sources: Sequence[Array] | None = None, dtype=None, order: str = "C",
               whole_axes: tuple[int, ...] = (), detail: str = "", notices: Sequence[str] = (),
               side_files: SideFiles | None = None) -> Plan:
    """An output whose every tile is ``compute``d from the same tile of each of ``sources``: the arrays
    ``read`` from ``inputs``, viewed onto the output's shape (permuted, broadcast; default ``read``
    itself). The output's type is ``dtype``, else the first source's; its label is the command given
    (``options``) and ``detail``; ``notices`` are what the user should know of it; ``side_files`` are written
    beside it."""
    sources = list(read if sources is None else sources)
    out_dtype = dtypes.element_dtype(dtype) if dtype is not None else sources[0].dtype
    return _plan(options, inputs, read, meta, out_dtype, sources[0].shape, detail, notices, sources=sources,
                 compute=compute, order=order, whole_axes=whole_axes, side_files=side_files)


def region_plan(options: Options, *, inputs: Sequence[PathLike], read: Sequence[Array], meta: Metadata,
                shape: Sequence[int], reads: TileReads, dtype=None, read_factor: float = 1.0,
                whole_axes: tuple[int, ...] = (), detail: str = "", notices: Sequence[str] = (),
                side_files: SideFiles | None = None) -> Plan:
    """An output of ``shape`` whose tile ``key`` is ``compute(blocks, out)`` for ``views, compute =
    reads(key)``: regions of the arrays ``read`` from ``inputs`` (a crop, a binning, a choice of
    sections). ``read_factor`` is the source bytes a tile reads per byte it writes (for tile sizes).
    The output's type is ``dtype``, else the first array's; label, notices and side files as :func:`tiled_plan`."""
    out_dtype = dtypes.element_dtype(dtype) if dtype is not None else read[0].dtype
    return _plan(options, inputs, read, meta, out_dtype, layout.as_shape4(tuple(shape)), detail, notices,
                 reads=reads, read_factor=read_factor, whole_axes=whole_axes, side_files=side_files)


def _plan(options: Options, inputs: Sequence[PathLike], read: Sequence[Array], meta: Metadata, dtype: np.dtype,
          shape: layout.Shape4, detail: str, notices: Sequence[str], **how) -> Plan:
    limits.check_output_size(shape, dtype.itemsize, str(inputs[0]) if inputs else "")
    return Plan(inputs=[as_path(p) for p in inputs], meta=meta, label=options.output_label(detail), dtype=dtype,
                input_shapes=[a.shape for a in read], write_options=options.write_options(), shape=shape,
                notices=list(notices), **how)


WHOLE = (1, 2, 3)  # every tile spans D, H and W: whole images of a stack (D = 1), whole volumes
GROUP_BYTES = 32 << 20  # what a tile's computation holds at a time (see image_memory); one image at least
FLOAT_OUTPUT = np.dtype(np.float32)  # what the Fourier operations write: every format stores it, MRC no float64


def image_memory(in_bytes: int, out_bytes: int, working: float) -> int:
    """The bytes computing one image holds at once: the image read and a transformed (or float) copy of it,
    the output tile being filled and the one being written, and ``working`` output-sized buffers (FFT
    spectra, the result before it is copied into the tile)."""
    return math.ceil(2 * in_bytes + (2 + working) * out_bytes)


def whole_image_plan(options: Options, *, inputs: Sequence[PathLike], array: Array, shape: Sequence[int],
                     meta: Metadata, images: Callable | None = None, fill: Callable | None = None,
                     working: float = 1.0, dtype=FLOAT_OUTPUT, computed_voxels: int | None = None,
                     detail: str = "", notices: Sequence[str] = (), side_files: SideFiles | None = None) -> Plan:
    """An output of ``shape`` whose tile over batch entries ``key[0]`` is ``images(block, key)`` (a NumPy
    array of the output tile's shape) for ``block`` the input's same batch entries, whole; or
    ``fill(block, key, out)`` fills the output tile ``out`` itself (on the device the task runs on). The
    plan of the operations that take whole images or volumes (filter, rescale, powerspectrum, transform).

    One image (volume) and its output are held in memory whole, with ``working`` output-sized buffers
    beyond the output tile (FFT spectra, a result then copied): :func:`image_memory`. Before anything is
    planned, that is checked against the service's voxel limit and the memory the machine has available
    (:func:`noa_core.limits.check_working_memory`: LimitError), so an output that grows with a parameter
    (rescale --factor 64) is refused rather than computed into swap. A tile's images are read (with pread,
    as the engine reads) and computed a group of about :data:`GROUP_BYTES` of that memory at a time, so
    memory stays bounded even where the output is much smaller than the input (a rotational average: a
    few KiB per image); ``working`` also shrinks the tiles with the reads (``read_factor``).
    ``computed_voxels``: the voxels of one image as computed, where that is more than the output keeps
    (rescale's box before its window)."""
    label = options.output_label(detail)
    whole = (slice(None),) * 3
    out_dtype = np.dtype(dtype)
    in_bytes = math.prod(array.shape[1:]) * array.itemsize
    out_bytes = max(math.prod(shape[1:]), computed_voxels or 0) * out_dtype.itemsize
    limits.check_output_size(shape, out_dtype.itemsize, str(inputs[0]))  # first: an output too large to write says so
    held = image_memory(in_bytes, out_bytes, working)
    limits.check_working_memory(held, f"{inputs[0]}: {label}")
    group = max(1, GROUP_BYTES // max(1, held))

    def reads(key):
        start, stop, _ = key[0].indices(array.shape[0])

        def compute(blocks, out):
            for first in range(start, stop, group):
                last = min(first + group, stop)
                block = asarray(io.mapped.read_view(array[(slice(first, last), *whole)].numpy(), 0))
                part = out[(slice(first - start, last - start), *whole)]
                sub = (slice(first, last), *key[1:])
                if fill is not None:
                    fill(block if part.device == "cpu" else block.to(part.device), sub, part)
                else:
                    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused just below
                        values = images(block, sub)
                    if not np.isfinite(values).all() and np.isfinite(block.numpy()).all():
                        raise ValueRangeError(f"{inputs[0]}: {label}: values too large for a {values.dtype} "
                                              "Fourier transform (it overflows); scale the input down first")
                    np.copyto(part.numpy(), values, casting="same_kind")

        return [], compute

    read_factor = in_bytes / max(1, out_bytes)
    return region_plan(options, inputs=inputs, read=[array], meta=meta, shape=shape, reads=reads, dtype=out_dtype,
                       read_factor=read_factor + working, whole_axes=WHOLE, detail=detail, notices=notices,
                       side_files=side_files)


def converter(mode: str) -> Compute:
    """Tiles copied into the output, converted with ``mode`` ('checked', 'clamp', 'cast')."""
    def convert(blocks: list[Array], out: Array) -> None:
        convert_into(blocks[0], out, mode=mode)

    convert.copies = True  # type: ignore[attr-defined]  # same type in and out: the engine may read into `out`
    return convert


def evaluator(expression) -> Compute:
    """Tiles computed by an expression over every source (typed for the sources' types): with NumPy on
    the NumPy path where the expression's operations give NumPy's bits there too (:meth:`Expression.numpy_function`,
    None otherwise), else compiled by numba into the element-wise kernels."""
    def compute(blocks: list[Array], out: Array) -> None:
        types = [b.dtype for b in blocks]
        if compute_path.numpy_path() and out.device == "cpu":
            function = expression.numpy_function(*types)
            if function is not None:
                with np.errstate(all="ignore"):  # as the kernels: overflow to inf, no warnings
                    np.copyto(out.numpy(), function([b.numpy() for b in blocks]), casting="unsafe")
                return
        noa_core.compute.elementwise.ewise(blocks, [out], expression.numba_function(*types))

    return compute


def reversing(compute: Compute, axes: tuple[int, ...]) -> Compute:
    """``compute`` on tiles reversed along ``axes`` (of a plan whose tiles span those axes whole).

    noa refuses negative strides, so the reversed tile is a copy (one tile of memory)."""
    def run(blocks: list[Array], out: Array) -> None:
        compute([asarray(np.ascontiguousarray(np.flip(block.numpy(), axes))) for block in blocks], out)

    return run


def on_device(compute: Compute, device: str) -> Compute:
    """Run ``compute`` on ``device``: tiles go there and the result comes back into the output tile."""
    if device == "cpu":
        return compute
    require_cuda()

    def run_there(blocks: list[Array], out: Array) -> None:
        result = empty(out.shape, out.dtype, device=device)
        compute([block.to(device) for block in blocks], result)
        convert_into(result.to("cpu"), out)

    return run_there


def check_distinct(dst: PathLike, srcs: Sequence[PathLike]) -> None:
    """Refuse an output that is one of the inputs: inputs are never modified, even with overwrite. A URL is the
    same as another where their texts are (object storage has no links), and never a file of this machine."""
    dst_url = remote_path(dst)
    for src in srcs:
        src_url = remote_path(src)
        if dst_url is None and src_url is None:
            same = Path(dst).exists() and Path(src).exists() and Path(dst).samefile(src)
        else:
            same = dst_url is not None and src_url is not None and dst_url.url == src_url.url
        if same:
            raise OutputIsInputError(f"{dst}: the output is the input file {src}; write to a new file")


class RewrittenOutput:
    """An output that is not an image file (a table's text, a picture's PNG): any driver writes its values as
    an image's tiles, into the temporary file beside ``path`` (C order, ``shape``, ``dtype``); on a clean exit
    ``rewrite(values, out)`` writes the output from them into another temporary file, which replaces the
    first and is renamed into place: never half-written, nothing left behind on failure. ``compute`` pins a
    compute path while it is open (:func:`noa_core.compute.compute_path.using`)."""

    def __init__(self, path: Path, shape, dtype, overwrite: bool, rewrite: Callable[[Path, BinaryIO], None], *,
                 compute: str | None = None) -> None:
        self.path = io.atomic.check_output(path, overwrite)
        self.shape, self.order, self.chunks = shape, "C", None
        self.dtype = self.values_dtype = np.dtype(dtype)
        self.notices: list[str] = []
        self._rewrite, self._compute, self._overwrite = rewrite, compute, overwrite
        self._temp: Any = None
        self._pinned: Any = None

    def __enter__(self) -> RewrittenOutput:
        self._temp = io.atomic.TemporaryOutput(self.path, self._overwrite)
        if self._compute is not None:
            self._pinned = compute_path.using(self._compute)
            self._pinned.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if self._pinned is not None:
            self._pinned.__exit__(None, None, None)
        if exc_type is not None:
            self._temp.abort()
            return False
        try:
            # named as a temporary output, so that one a killed process leaves is found and removed as such; beside
            # the first (the output's folder, or this machine's temporary one for an output on object storage)
            fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=io.atomic.TEMP_SUFFIX,
                                        dir=self._temp.temp.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    self._rewrite(self._temp.temp, out)
                os.replace(name, self._temp.temp)
            except BaseException:
                os.unlink(name)
                raise
            self._temp.commit()
        except BaseException:
            self._temp.abort()
            raise
        return False

    def region(self):
        """Where the values go: the temporary file, packed; unmeasured (the output has no header statistics)."""
        return io.stream.Region(self._temp.temp, 0, self.dtype, self.shape, self.order, measured=False,
                                named=self._temp.path)

    def complete(self, stats) -> None:
        """Every tile written (the output has no header statistics)."""
