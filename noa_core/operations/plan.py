"""Plans: what a file operation writes, decided from the input headers before any data is read.

A declaration's ``plan`` function reads its inputs lazily (memory-mapped), views them onto the
output's shape (permute, broadcast) and says how a tile of the output is computed from the same
tile of every source. An output whose tiles do not come from the same tiles of its inputs (a
binning, a crop or pad, a selection of sections) gives ``reads`` instead: for each output tile, the
source views it is computed from and how (see :data:`noa_core.io.stream.TileReads`). A driver (:mod:`noa_core.run`) then creates the output and fills it tile by
tile, in this process or in Dask tasks over the same tiles, so both write the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from noa_core import dtypes, layout
from noa_core.array import Array
from noa_core.errors import OutputIsInputError
from noa_core.limits import check_output_size
from noa_core.io import Metadata, Writer
from noa_core.io.stream import Compute, Key, TileReads
PathLike = str | Path


@dataclass
class Plan:
    """An output described before it exists: the files it is read from, sources viewed onto its
    shape, how a tile is computed, its element type, order, metadata and label, and the output
    format's own choices (``write_options``, e.g. MRC's ``uint8_mode``). Every tile spans the
    dimensions in ``whole_axes`` entirely (a compute that reverses an axis needs all of it).

    With ``reads`` (output tile key -> source views and their compute), ``sources`` are the arrays
    read, in any shapes, ``compute`` is unused, ``out_shape`` is the output's shape and
    ``read_factor`` the source bytes a tile reads per byte it writes (for tile sizes)."""

    inputs: list[Path]
    sources: list[Array]
    compute: Compute | None
    meta: Metadata
    label: str
    dtype: np.dtype
    order: str = "C"
    input_shapes: list[layout.Shape4] = field(default_factory=list)
    write_options: dict[str, str] = field(default_factory=dict)
    whole_axes: tuple[int, ...] = ()
    out_shape: layout.Shape4 | None = None
    reads: TileReads | None = None
    read_factor: float = 1.0
    notices: list[str] = field(default_factory=list)  # the operation's own, for the user (a cropped remainder)

    @property
    def shape(self) -> layout.Shape4:
        return self.out_shape if self.out_shape is not None else self.sources[0].shape

    def tile_reads(self, device: str = "cpu") -> TileReads:
        """What each output tile is computed from, and how, running on ``device`` (tiles are moved
        there and back)."""
        from noa_core.io.stream import same_tile

        if self.reads is None:
            return same_tile(self.sources, self.shape, on_device(self.compute, device))
        reads = self.reads

        def there(key: Key) -> tuple[list[Array], Compute]:
            views, compute = reads(key)
            return views, on_device(compute, device)

        return reads if device == "cpu" else there

    def keys(self, writer: Writer, block_bytes: int) -> list[Key]:
        """The output's tiles, in the order the local driver fills them (see :func:`stream.plan_tiles`)."""
        from noa_core.io.stream import plan_tiles

        sources = [] if self.reads is not None else self.sources
        return plan_tiles(writer, sources, block_bytes, self.whole_axes, self.read_factor)

    def create(self, dst: PathLike, *, overwrite: bool) -> Writer:
        """The writer of ``dst`` for this output (a context manager); never one of the inputs."""
        from noa_core import io

        check_distinct(dst, self.inputs)
        return io.create(dst, self.shape, self.dtype, self.meta, order=self.order, overwrite=overwrite,
                         label=self.label, write_options=self.write_options)


def make_plan(inputs: Sequence[PathLike], read: Sequence[Array], sources: Sequence[Array], compute: Compute | None,
              meta: Metadata, label: str, dtype=None, order: str = "C",
              write_options: dict[str, str] | None = None, whole_axes: tuple[int, ...] = (),
              shape: Sequence[int] | None = None, reads: TileReads | None = None,
              read_factor: float = 1.0, notices: Sequence[str] = ()) -> Plan:
    """A :class:`Plan` writing ``sources`` (viewed onto the output) computed from the arrays ``read``;
    the output type is ``dtype``, else the first source's.

    Or, with ``reads``, an output of ``shape`` whose tile ``key`` is ``compute(blocks, out)`` for
    ``views, compute = reads(key)`` (``compute`` may then be None; the views are slices of ``sources``).
    ``notices`` are what the user should know of this output (reported with the format's)."""
    if reads is not None and shape is None:
        raise ValueError("a plan with reads needs the output's shape")
    out_dtype = dtypes.element_dtype(dtype) if dtype is not None else sources[0].dtype
    check_output_size(shape if shape is not None else sources[0].shape, out_dtype.itemsize,
                      str(inputs[0]) if inputs else "")
    return Plan([Path(p) for p in inputs], list(sources), compute, meta, label, out_dtype, order,
                [a.shape for a in read], dict(write_options or {}), whole_axes,
                None if shape is None else layout.as_shape4(shape), reads, read_factor, list(notices))


def converter(mode: str) -> Compute:
    """Tiles copied into the output, converted with ``mode`` ('checked', 'clamp', 'cast')."""
    from noa_core.elementwise import convert_into

    def convert(blocks: list[Array], out: Array) -> None:
        convert_into(blocks[0], out, mode=mode)

    convert.copies = True  # type: ignore[attr-defined]  # same type in and out: the engine may read into `out`
    return convert


def evaluator(expression) -> Compute:
    """Tiles computed by a compiled expression over every source (typed for the sources' types)."""
    from noa_core.elementwise import ewise as run_ewise

    return lambda blocks, out: run_ewise(blocks, [out], expression.numba_function(*(b.dtype for b in blocks)))


def reversing(compute: Compute, axes: tuple[int, ...]) -> Compute:
    """``compute`` on tiles reversed along ``axes`` (of a plan whose tiles span those axes whole).

    noa refuses negative strides, so the reversed tile is a copy (one tile of memory)."""
    from noa_core.array import asarray

    def run(blocks: list[Array], out: Array) -> None:
        compute([asarray(np.ascontiguousarray(np.flip(block.numpy(), axes))) for block in blocks], out)

    return run


def on_device(compute: Compute, device: str) -> Compute:
    """Run ``compute`` on ``device``: tiles go there and the result comes back into the output tile."""
    if device == "cpu":
        return compute
    from noa_core.array import empty
    from noa_core.devices import require_cuda
    from noa_core.elementwise import convert_into

    require_cuda()

    def run_there(blocks: list[Array], out: Array) -> None:
        result = empty(out.shape, out.dtype, device=device)
        compute([block.to(device) for block in blocks], result)
        convert_into(result.to("cpu"), out)

    return run_there


def check_distinct(dst: PathLike, srcs: Sequence[PathLike]) -> None:
    """Refuse an output that is one of the inputs: inputs are never modified, even with overwrite."""
    for src in srcs:
        if Path(dst).exists() and Path(src).exists() and Path(dst).samefile(src):
            raise OutputIsInputError(f"{dst}: the output is the input file {src}; write to a new file")
