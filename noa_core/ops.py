"""The operations users call by name, on image files: the CLI and the HTTP service call these.

Each file operation reads its input lazily (memory-mapped), builds a view (permute, broadcast) or an
expression, and streams the result into an atomic writer block by block, so memory stays bounded
whatever the file size. Array logic is delegated to :mod:`noa_core.array`, the kernels and
:mod:`noa_core.io`; this module only wires them together.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noa_core import dtypes, layout
from noa_core.array import Array
from noa_core.errors import OutputIsInputError, ShapeError

Progress = Callable[[int, int], None]
PathLike = str | Path


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
        "pixel_unit": meta.unit,
        "origin": list(meta.origin),
        "statistics": dataclasses.asdict(meta.statistics) if meta.statistics else None,
        "labels": list(meta.labels),
        "axes": meta.axes,
        "notices": list(meta.notices),
    }


def stats(path: PathLike, *, per_batch: bool = False, read: ReadOptions = DEFAULT_READ, device: str = "cpu") -> dict:
    """Min, max, mean and std computed from the data, over the whole file and optionally per batch."""
    from noa_core import reduction

    array, _ = _read(path, read)
    if array.size == 0:
        raise ShapeError(f"{path}: the array of shape {array.shape} is empty; it has no statistics")
    array = array.to(device)

    def table(axes) -> dict[str, np.ndarray]:
        return {name: getattr(reduction, name)(array, axes).to("cpu").numpy().reshape(-1)
                for name in ("min", "max", "mean", "std")}

    whole = {name: float(values[0]) for name, values in table(None).items()}
    result = {"path": str(path), "shape": list(array.shape), **whole}
    if per_batch:
        rows = table((1, 2, 3))
        result["per_batch"] = [{"batch": b, **{name: float(v[b]) for name, v in rows.items()}}
                               for b in range(array.shape[0])]
    return result


# -- file to file ---------------------------------------------------------------------------------


def permute(src: PathLike, dst: PathLike, axes: Sequence[int], *, read: ReadOptions = DEFAULT_READ,
            overwrite: bool = False, device: str = "cpu", progress: Progress = _no_progress) -> list[str]:
    """Write ``src`` with its BDHW axes reordered; the header follows the axes."""
    return _stream(dst, plan_permute(src, axes, read=read), overwrite=overwrite, device=device, progress=progress)


def broadcast(src: PathLike, dst: PathLike, shape: Sequence[int], *, read: ReadOptions = DEFAULT_READ,
              overwrite: bool = False, device: str = "cpu", progress: Progress = _no_progress) -> list[str]:
    """Write ``src`` with size-1 dimensions repeated to reach ``shape``."""
    return _stream(dst, plan_broadcast(src, shape, read=read), overwrite=overwrite, device=device, progress=progress)


def copy(src: PathLike, dst: PathLike, *, order: str = "C", dtype=None, clamp: bool = False,
         read: ReadOptions = DEFAULT_READ, overwrite: bool = False, device: str = "cpu",
         progress: Progress = _no_progress) -> list[str]:
    """Copy ``src`` to ``dst`` (format from the extension), in C, F or K order, maybe as ``dtype``."""
    return _stream(dst, plan_copy(src, order=order, dtype=dtype, clamp=clamp, read=read), overwrite=overwrite, device=device, progress=progress)


def ewise(expression: str, srcs: Sequence[PathLike], dst: PathLike, *, dtype=None, read: ReadOptions = DEFAULT_READ,
          overwrite: bool = False, device: str = "cpu", progress: Progress = _no_progress) -> list[str]:
    """Evaluate ``expression`` over the files ``srcs`` (named a, b, c, ...) with broadcasting."""
    return _stream(dst, plan_ewise(expression, srcs, dtype=dtype, read=read), overwrite=overwrite, device=device, progress=progress)


# -- plans: what a file operation writes, decided from the input headers -------------------------


@dataclass
class Plan:
    """An output described before it exists: the files it is read from, sources viewed onto its
    shape, how a tile is computed, its element type, order, metadata and label.

    A driver creates the output and fills it tile by tile: :func:`_stream` in this process, or
    :func:`noa_core.cluster.write_split` in Dask tasks over the same tiles (so both write the same bytes).
    """

    inputs: list[PathLike]
    sources: list[Array]
    compute: Compute
    meta: object  # noa_core.io.Metadata (io is imported lazily)
    label: str
    dtype: np.dtype
    order: str = "C"

    @property
    def shape(self) -> layout.Shape4:
        return self.sources[0].shape

    def compute_on(self, device: str) -> Compute:
        """``compute`` running on ``device`` (tiles are moved there and back)."""
        return _on_device(self.compute, device)

    def create(self, dst: PathLike, *, overwrite: bool):
        """The :class:`noa_core.io.Writer` of ``dst`` for this output (a context manager)."""
        from noa_core import io

        return io.create(dst, self.shape, self.dtype, self.meta, order=self.order, overwrite=overwrite,
                         label=self.label)


def _plan(inputs: list[PathLike], sources: list[Array], compute: Compute, meta, label: str, dtype=None,
          order: str = "C") -> Plan:
    out_dtype = dtypes.element_dtype(dtype) if dtype is not None else sources[0].dtype
    return Plan(inputs, sources, compute, meta, label, out_dtype, order)


def plan_permute(src: PathLike, axes: Sequence[int], *, read: ReadOptions = DEFAULT_READ) -> Plan:
    """The plan of :func:`permute` (reads the header and maps the data, nothing more)."""
    perm = layout.check_permutation(axes)
    array, meta = _read(src, read)
    label = f"noa permute --axes {','.join(map(str, perm))}"
    return _plan([src], [array.permute(perm)], _converter("checked"), meta.permute(perm), label)


def plan_broadcast(src: PathLike, shape: Sequence[int], *, read: ReadOptions = DEFAULT_READ) -> Plan:
    """The plan of :func:`broadcast`."""
    target = layout.as_shape4(shape)
    array, meta = _read(src, read)
    label = f"noa broadcast --shape {','.join(map(str, target))}"
    return _plan([src], [array.broadcast(target)], _converter("checked"), meta.broadcast(target), label)


def plan_copy(src: PathLike, *, order: str = "C", dtype=None, clamp: bool = False,
              read: ReadOptions = DEFAULT_READ) -> Plan:
    """The plan of :func:`copy`."""
    from noa_core.array import resolve_copy_order

    array, meta = _read(src, read)
    out_dtype = None if dtype is None else dtypes.scalar_dtype(dtype)
    out_order = resolve_copy_order(array, order)
    words = [f"--order {out_order}"] + ([f"--dtype {out_dtype}"] if out_dtype is not None else [])
    return _plan([src], [array], _converter("clamp" if clamp else "checked"), meta, "noa copy " + " ".join(words),
                 out_dtype, out_order)


def plan_ewise(expression: str, srcs: Sequence[PathLike], *, dtype=None, read: ReadOptions = DEFAULT_READ) -> Plan:
    """The plan of :func:`ewise`."""
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
    # The output describes the pixels of the first input that has the full shape.
    meta = next((m for a, m in inputs if a.shape == shape), None) or inputs[0][1].broadcast(shape)
    return _plan(list(srcs), [a.broadcast(shape) for a in arrays], _evaluator(compiled), meta, f"noa ewise {expression}"[:80],
                 out_dtype)


# -- batches: one operation over many (input, output) pairs --------------------------------------


@dataclass(frozen=True, eq=False)
class FileOp:
    """One file operation and its options, to apply to many (input, output) pairs.

    ``name`` is 'permute', 'broadcast', 'copy' or 'ewise'; ``options`` are that function's keyword
    arguments except the paths, ``overwrite`` and ``progress`` (``device`` included). For 'ewise',
    ``options`` hold ``expression`` and ``others``: the inputs b, c, ... that every pair shares
    (the pair's input is ``a``). Plain data, so it pickles into Dask tasks by value.

    Example: ``FileOp("permute", {"axes": (0, 1, 3, 2)})(src, dst)``.
    """

    name: str
    options: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in _PLANS:
            raise ValueError(f"unknown file operation {self.name!r}; expected one of {', '.join(_PLANS)}")

    @property
    def device(self) -> str:
        return self.options.get("device", "cpu")

    def inputs(self, src: PathLike) -> list[PathLike]:
        """Every file read for the pair whose input is ``src``."""
        return [src, *self.options.get("others", ())]

    def plan(self, src: PathLike) -> Plan:
        """The plan for the pair whose input is ``src``."""
        options = {k: v for k, v in self.options.items() if k not in ("device", "others", "expression")}
        if self.name == "ewise":
            return plan_ewise(self.options["expression"], self.inputs(src), **options)
        return _PLANS[self.name](src, **options)

    def __call__(self, src: PathLike, dst: PathLike, *, overwrite: bool = False,
                 progress: Progress = _no_progress) -> list[str]:
        """Write ``dst`` from ``src`` in this process, like the operation's own function; return notices."""
        return _stream(dst, self.plan(src), overwrite=overwrite, device=self.device, progress=progress)


_PLANS: dict[str, Callable[..., Plan]] = {"permute": plan_permute, "broadcast": plan_broadcast, "copy": plan_copy,
                                          "ewise": plan_ewise}


@dataclass(frozen=True)
class FileResult:
    """What became of one pair of a batch: 'written', 'skipped' (the output was complete) or 'failed'."""

    src: Path
    dst: Path
    status: str
    notices: tuple[str, ...] = ()
    error: BaseException | None = None


Pairs = list[tuple[Path, Path]]


def split_complete(pairs: Sequence[tuple[PathLike, PathLike]]) -> tuple[Pairs, Pairs]:
    """``(to_do, complete)``: pairs whose output does not exist yet, and those whose output does.

    Outputs are written to a temporary file and renamed, so an existing output is a complete one:
    resuming an interrupted batch skips those and redoes the others from scratch.
    """
    todo, done = [], []
    for src, dst in pairs:
        (done if Path(dst).exists() else todo).append((Path(src), Path(dst)))
    return todo, done


def warmup() -> float:
    """Compile the common kernels into the on-disk cache; returns the seconds it took."""
    from noa_core.warmup import warmup as compile_kernels

    start = time.perf_counter()
    compile_kernels()
    return time.perf_counter() - start


# -- streaming ------------------------------------------------------------------------------------

Compute = Callable[[list[Array], Array], None]


def _converter(mode: str) -> Compute:
    from noa_core.elementwise import convert_into

    return lambda blocks, out: convert_into(blocks[0], out, mode=mode)


def _evaluator(expression) -> Compute:
    from noa_core.elementwise import ewise as run_ewise

    element = expression.numba_function()
    return lambda blocks, out: run_ewise(blocks, [out], element)


def _on_device(compute: Compute, device: str) -> Compute:
    """Run ``compute`` on ``device``: tiles go there and the result comes back into the output tile."""
    if device == "cpu":
        return compute
    from noa_core.array import empty
    from noa_core.devices import require_cuda
    from noa_core.elementwise import convert_into

    require_cuda()

    def on_device(blocks: list[Array], out: Array) -> None:
        result = empty(out.shape, out.dtype, device=device)
        compute([block.to(device) for block in blocks], result)
        convert_into(result.to("cpu"), out)

    return on_device


def check_distinct(dst: PathLike, srcs: Sequence[PathLike]) -> None:
    """Refuse an output that is one of the inputs: inputs are never modified, even with overwrite."""
    for src in srcs:
        if Path(dst).exists() and Path(src).exists() and Path(dst).samefile(src):
            raise OutputIsInputError(f"{dst}: the output is the input file {src}; write to a new file")


def _stream(dst: PathLike, plan: Plan, *, overwrite: bool, device: str, progress: Progress) -> list[str]:
    """Create ``dst`` (never one of the plan's inputs) and fill it tile by tile as ``plan`` says;
    return notices."""
    from noa_core import io

    check_distinct(dst, plan.inputs)
    with plan.create(dst, overwrite=overwrite) as writer:
        io.fill(writer, plan.sources, plan.compute_on(device), progress=progress)
    return list(writer.notices)
