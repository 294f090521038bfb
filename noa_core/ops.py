"""The operations users call by name, on image files: the CLI and the HTTP service call these.

Each file operation reads its input lazily (memory-mapped), builds a view (permute, broadcast) or an
expression, and streams the result into an atomic writer block by block, so memory stays bounded
whatever the file size. Array logic is delegated to :mod:`noa_core.array`, the kernels and
:mod:`noa_core.io`; this module only wires them together.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noa_core import dtypes, layout
from noa_core.array import Array
from noa_core.errors import ShapeError

Progress = Callable[[int, int], None]
PathLike = str | Path

# Bytes of output per streamed block: big enough to amortise kernel launches, small enough that a
# block of every operand fits comfortably in memory.
BLOCK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ReadOptions:
    """How to interpret input files: MRC stack/volume override and TIFF series."""

    as_stack: bool | None = None
    series: int | None = None

    def kwargs(self) -> dict:
        return {
            "as_stack": self.as_stack is True or None,
            "as_volume": self.as_stack is False or None,
            "series": self.series,
        }


DEFAULT_READ = ReadOptions()


def _no_progress(done: int, total: int) -> None:
    pass


def _read(path: PathLike, read: ReadOptions):
    from noa_core import io

    return io.read(path, **read.kwargs())


# -- description ---------------------------------------------------------------------------------


def info(path: PathLike, read: ReadOptions = DEFAULT_READ) -> dict:
    """A JSON-ready description of an image file (nothing but the header is read)."""
    array, meta = _read(path, read)
    return {
        "path": str(path),
        "format": meta.format,
        "dtype": str(dtypes.base_of(array.dtype)),
        "mode": meta.mode,
        "shape": list(array.shape),
        "strides": list(array.strides),
        "order": array.order,
        "kind": array.kind,
        "ndim": array.ndim,
        "pixel_size": list(meta.pixel_size),
        "pixel_unit": meta.pixel_unit,
        "origin": list(meta.origin),
        "statistics": dict(meta.statistics) if meta.statistics else None,
        "labels": list(meta.labels),
        "axes": meta.axes,
        "notices": list(meta.notices),
    }


def stats(path: PathLike, *, per_batch: bool = False, read: ReadOptions = DEFAULT_READ, device: str = "cpu") -> dict:
    """Min, max, mean and std computed from the data, over the whole file or per batch index."""
    from noa_core import reduce

    array, _ = _read(path, read)
    if array.size == 0:
        raise ShapeError(f"{path}: the array of shape {array.shape} is empty; it has no statistics")

    def of(view: Array) -> dict:
        view = view.to(device)
        return {
            "min": float(reduce.min(view)), "max": float(reduce.max(view)),
            "mean": float(reduce.mean(view)), "std": float(reduce.std(view)),
        }

    result = {"path": str(path), "shape": list(array.shape), **of(array)}
    if per_batch:
        result["per_batch"] = [{"batch": b, **of(array[b])} for b in range(array.shape[0])]
    return result


# -- file to file ---------------------------------------------------------------------------------


def permute(src: PathLike, dst: PathLike, axes: Sequence[int], *, read: ReadOptions = DEFAULT_READ,
            overwrite: bool = False, device: str = "cpu", progress: Progress = _no_progress) -> list[str]:
    """Write ``src`` with its BDHW axes reordered; the header follows the axes."""
    perm = layout.check_permutation(axes)
    array, meta = _read(src, read)
    label = f"noa permute --axes {','.join(map(str, perm))}"
    return _stream(dst, [array.permute(perm)], None, meta.permuted(perm), label,
                   overwrite=overwrite, device=device, progress=progress)


def broadcast(src: PathLike, dst: PathLike, shape: Sequence[int], *, read: ReadOptions = DEFAULT_READ,
              overwrite: bool = False, device: str = "cpu", progress: Progress = _no_progress) -> list[str]:
    """Write ``src`` with size-1 dimensions repeated to reach ``shape``."""
    target = layout.as_shape4(shape)
    array, meta = _read(src, read)
    label = f"noa broadcast --shape {','.join(map(str, target))}"
    return _stream(dst, [array.broadcast(target)], None, meta.broadcasted(target), label,
                   overwrite=overwrite, device=device, progress=progress)


def copy(src: PathLike, dst: PathLike, *, order: str = "C", dtype=None, clamp: bool = False,
         read: ReadOptions = DEFAULT_READ, overwrite: bool = False, device: str = "cpu",
         progress: Progress = _no_progress) -> list[str]:
    """Copy ``src`` to ``dst`` (format from the extension), in C, F or K order, maybe as ``dtype``."""
    from noa_core.array import resolve_copy_order

    array, meta = _read(src, read)
    out_dtype = None if dtype is None else dtypes.scalar_dtype(dtype)
    out_order = resolve_copy_order(array, order)
    words = [f"--order {out_order}"] + ([f"--dtype {out_dtype}"] if out_dtype is not None else [])
    return _stream(dst, [array], None, meta, "noa copy " + " ".join(words), order=out_order, dtype=out_dtype,
                   clamp=clamp, overwrite=overwrite, device=device, progress=progress)


def ewise(expression: str, srcs: Sequence[PathLike], dst: PathLike, *, dtype=None, read: ReadOptions = DEFAULT_READ,
          overwrite: bool = False, device: str = "cpu", progress: Progress = _no_progress) -> list[str]:
    """Evaluate ``expression`` over the files ``srcs`` (named a, b, c, ...) with broadcasting."""
    from noa_core.expr import compile_expression

    compiled = compile_expression(expression, len(srcs))
    inputs = [_read(src, read) for src in srcs]
    arrays = [array for array, _ in inputs]
    shape = layout.broadcast_shapes(*(a.shape for a in arrays))
    if dtype is not None:
        out_dtype = dtypes.scalar_dtype(dtype)
    else:
        out_dtype = compiled.result_dtype([a.dtype for a in arrays])
        if out_dtype == np.bool_:
            out_dtype = np.dtype("uint8")  # image formats store no booleans: 0 and 1
    # The output describes the same pixels as the first input of full shape.
    first = next(meta for array, meta in inputs if array.shape == shape) if any(
        a.shape == shape for a in arrays) else inputs[0][1].broadcasted(shape)
    views = [a.broadcast(shape) for a in arrays]
    return _stream(dst, views, compiled, first, f"noa ewise {expression!r}"[:80], dtype=out_dtype,
                   overwrite=overwrite, device=device, progress=progress)


def warmup() -> float:
    """Compile the common kernels into the on-disk cache; returns the seconds it took."""
    from noa_core import kernels

    start = time.perf_counter()
    kernels.warmup()
    return time.perf_counter() - start


# -- streaming ------------------------------------------------------------------------------------


def blocks(shape: layout.Shape4, itemsize: int, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple]:
    """Index tuples covering ``shape`` in C order, each holding at most ``block_bytes`` when possible.

    Blocks are runs of whole outer slices: whole batches, else whole sections, else whole rows.
    """
    per = [int(np.prod(shape[i + 1:])) * itemsize for i in range(4)]  # bytes of one index along axis i
    for axis in range(4):
        if per[axis] <= block_bytes or axis == 3:
            step = max(1, block_bytes // max(per[axis], 1))
            outer = [range(n) for n in shape[:axis]]
            for index in np.ndindex(*[len(r) for r in outer]) if axis else [()]:
                for start in range(0, shape[axis], step):
                    yield tuple(index) + (slice(start, min(start + step, shape[axis])),)
            return


def _stream(dst: PathLike, views: list[Array], expression, meta, label: str, *, order: str = "C", dtype=None,
            clamp: bool = False, overwrite: bool, device: str, progress: Progress) -> list[str]:
    """Write the element-wise result of ``views`` (one view copied, or an expression) to ``dst``."""
    from noa_core import io
    from noa_core.ewise import ewise as run_ewise

    shape = views[0].shape
    out_dtype = dtypes.element_dtype(dtype) if dtype is not None else views[0].dtype
    element = expression.numba_function() if expression is not None else None
    with io.create(dst, shape, out_dtype, meta, order=order, overwrite=overwrite, label=label) as writer:
        chunks = list(blocks(shape, out_dtype.itemsize))
        for done, index in enumerate(chunks, 1):
            target = writer.array[index]
            sources = [view[index] for view in views]
            if device != "cpu":
                result = _compute_on(device, sources, element, out_dtype, order, clamp)
                result.to("cpu").copy_to(target) if hasattr(result, "copy_to") else np.copyto(
                    target.numpy(), result.to("cpu").numpy())
            elif element is None:
                sources[0].astype(out_dtype, clamp=clamp, out=target)
            else:
                run_ewise(sources, [target], element)
            writer.block_written(index)
            progress(done, len(chunks))
    return list(writer.notices)


def _compute_on(device: str, sources: list[Array], element, out_dtype, order: str, clamp: bool) -> Array:
    from noa_core.array import empty
    from noa_core.ewise import ewise as run_ewise

    on_device = [s.copy("C").to(device) for s in sources]
    out = empty(sources[0].shape, out_dtype, order, device)
    if element is None:
        on_device[0].astype(out_dtype, clamp=clamp, out=out)
    else:
        run_ewise(on_device, [out], element)
    return out
