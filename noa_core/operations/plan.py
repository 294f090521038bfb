"""Plans: what a file operation writes, decided from the input headers before any data is read.

A declaration's ``plan`` function reads its inputs lazily (memory-mapped), views them onto the
output's shape (permute, broadcast) and says how a tile of the output is computed from the same
tile of every source. A driver (:mod:`noa_core.run`) then creates the output and fills it tile by
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
from noa_core.io import Metadata, Writer

Compute = Callable[[list[Array], Array], None]
PathLike = str | Path


@dataclass
class Plan:
    """An output described before it exists: the files it is read from, sources viewed onto its
    shape, how a tile is computed, its element type, order, metadata and label, and the output
    format's own choices (``write_options``, e.g. MRC's ``uint8_mode``). Every tile spans the
    dimensions in ``whole_axes`` entirely (a compute that reverses an axis needs all of it)."""

    inputs: list[Path]
    sources: list[Array]
    compute: Compute
    meta: Metadata
    label: str
    dtype: np.dtype
    order: str = "C"
    input_shapes: list[layout.Shape4] = field(default_factory=list)
    write_options: dict[str, str] = field(default_factory=dict)
    whole_axes: tuple[int, ...] = ()

    @property
    def shape(self) -> layout.Shape4:
        return self.sources[0].shape

    def compute_on(self, device: str) -> Compute:
        """``compute`` running on ``device`` (tiles are moved there and back)."""
        return on_device(self.compute, device)

    def create(self, dst: PathLike, *, overwrite: bool) -> Writer:
        """The writer of ``dst`` for this output (a context manager); never one of the inputs."""
        from noa_core import io

        check_distinct(dst, self.inputs)
        return io.create(dst, self.shape, self.dtype, self.meta, order=self.order, overwrite=overwrite,
                         label=self.label, write_options=self.write_options)


def make_plan(inputs: Sequence[PathLike], read: Sequence[Array], sources: Sequence[Array], compute: Compute,
              meta: Metadata, label: str, dtype=None, order: str = "C",
              write_options: dict[str, str] | None = None, whole_axes: tuple[int, ...] = ()) -> Plan:
    """A :class:`Plan` writing ``sources`` (viewed onto the output) computed from the arrays ``read``;
    the output type is ``dtype``, else the first source's."""
    out_dtype = dtypes.element_dtype(dtype) if dtype is not None else sources[0].dtype
    return Plan([Path(p) for p in inputs], list(sources), compute, meta, label, out_dtype, order,
                [a.shape for a in read], dict(write_options or {}), whole_axes)


def converter(mode: str) -> Compute:
    """Tiles copied into the output, converted with ``mode`` ('checked', 'clamp', 'cast')."""
    from noa_core.elementwise import convert_into

    return lambda blocks, out: convert_into(blocks[0], out, mode=mode)


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
