"""Stack operations on BDHW arrays: resize, bin, flip, rotx, sections and average.

Each operation is written once, as the index arithmetic of an output region (which source region it
is computed from) and a compute that fills the output region from that source block. The file
operations (:mod:`noa_core.operations.resize`, ...) stream those regions tile by tile with bounded
memory; the functions here (:func:`resize`, :func:`bin`, :func:`flip`, :func:`rotx`,
:func:`sections`, :func:`average`) run the same computes on a whole in-memory Array.

Sections are the batch entries of a stack (B > 1), else the depth slices of a volume. Origins follow
IMOD's convention, as the tools these operations mirror (``clip``, ``trimvol``, ``newstack``): voxel
``i`` spans ``[i, i + 1)`` pixels and lies at ``i * pixel - origin``, so cropping at offset ``k``
subtracts ``k * pixel`` from the origin and the content stays where it was. (ChimeraX reads the MRC
origin with the other sign.)

No negative stride reaches a caller: flips and rotations reverse an axis inside a compute, from a
block already in memory into the output.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Sequence

import numba
import numpy as np
from numba.extending import overload

from noa_core import runtime  # noqa: F401 - numba's cache folder and threading layer, before any njit
from noa_core import layout
from noa_core.array import Array, asarray, empty
from noa_core.errors import DTypeError, ParameterError, ShapeError, ValueRangeError
from noa_core.layout import Shape4
from noa_core.limits import check_output_size

Key = tuple[slice, ...]
Compute = Callable[[list[Array], Array], None]
Reads = Callable[[Key], tuple[list[Array], Compute]]

AXES = {"x": 3, "y": 2, "z": 1}  # flip axis name -> BDHW axis


# ---------------------------------------------------------------------------------------------
# Sections: which axis, and the range lists that name them
# ---------------------------------------------------------------------------------------------


def section_axis(shape: Sequence[int]) -> int:
    """The BDHW axis whose entries are sections: the batch of a stack, else the depth of a volume."""
    return 0 if shape[0] > 1 else 1


class Selection(Sequence[int]):
    """Section indices given as ranges, in order, never listed one by one: a range list of 10 KB can
    name billions of sections. Indexing by a slice gives the list of that slice (a tile's)."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self._firsts = [first for first, _ in ranges]
        self._ends = list(itertools.accumulate(last + 1 - first for first, last in ranges))  # positions after each

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, item):  # type: ignore[override]
        if isinstance(item, slice):
            start, stop, step = item.indices(len(self))
            return [self[i] for i in range(start, stop, step)]
        position = item + len(self) if item < 0 else item
        if not 0 <= position < len(self):
            raise IndexError(item)
        k = bisect.bisect_right(self._ends, position)
        return self._firsts[k] + position - (self._ends[k - 1] if k else 0)


def parse_ranges(text: str, count: int, name: str, shape: Sequence[int] | None = None) -> Selection:
    """Section indices of a range list ('0-9,12'), in the order written; ParameterError names the bad part.

    Indices count from 0 and must be below ``count`` (the sections the input has). With ``shape`` (the
    input's), the output those sections make is checked against the output limits."""
    selection = Selection(_ranges(text, count, name))
    if shape is not None:
        out = list(shape)
        out[section_axis(shape)] = len(selection)
        check_output_size(out, what=name)
    return selection


def _ranges(text: str, count: int, name: str) -> list[tuple[int, int]]:
    """The ``(first, last)`` pairs of a range list, checked."""
    indices: list[tuple[int, int]] = []
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if match is None:
            raise ParameterError(f"{part!r} in {text!r} is not a section number or a range like 0-9", name)
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ParameterError(f"range {part!r} runs backwards; write {last}-{first}", name)
        if last >= count:
            raise ParameterError(f"section {last} (in {part!r}) is outside 0..{count - 1}: the input has "
                                 f"{count} section{'s' if count != 1 else ''}", name)
        indices.append((first, last))
    return indices


def selected_sections(shape: Sequence[int], keep: str | None, drop: str | None) -> Sequence[int]:
    """The input sections an output keeps, in output order, from ``keep`` or ``drop`` (exactly one)."""
    if (keep is None) == (drop is None):
        raise ParameterError("give either keep or drop (one range list such as 0-9,12)",
                             "keep" if keep is None else "drop")
    count = shape[section_axis(shape)]
    if keep is not None:
        return parse_ranges(keep, count, "keep", shape)
    dropped = set(parse_ranges(drop, count, "drop"))
    kept = [i for i in range(count) if i not in dropped]
    if not kept:
        raise ParameterError(f"{drop!r} drops every one of the {count} sections; nothing would be left", "drop")
    return kept


def runs(indices: Sequence[int]) -> list[tuple[int, int, int]]:
    """``indices`` as runs of consecutive increasing values: ``(position, first, length)`` each."""
    found: list[tuple[int, int, int]] = []
    for position, index in enumerate(indices):
        if found and index == found[-1][1] + found[-1][2] and position == found[-1][0] + found[-1][2]:
            at, first, length = found[-1]
            found[-1] = (at, first, length + 1)
        else:
            found.append((position, index, 1))
    return found


def sections_reads(source: Array, indices: Sequence[int]) -> Reads:
    """Output tile ``key`` of the selection ``indices`` along the section axis: one source view per run
    of consecutive sections, copied side by side."""
    axis = section_axis(source.shape)

    def reads(key: Key) -> tuple[list[Array], Compute]:
        start, stop, _ = key[axis].indices(len(indices))
        pieces = runs(indices[start:stop])
        views = []
        for _, first, length in pieces:
            region = list(key)
            region[axis] = slice(first, first + length)
            views.append(source[tuple(region)])

        def compute(blocks: list[Array], out: Array) -> None:
            target = out.numpy()
            for (position, _, length), block in zip(pieces, blocks):
                place = [slice(None)] * 4
                place[axis] = slice(position, position + length)
                np.copyto(target[tuple(place)], block.numpy())

        return views, compute

    return reads


# ---------------------------------------------------------------------------------------------
# Resize: crop or pad about the centre
# ---------------------------------------------------------------------------------------------


def resize_shape(shape: Sequence[int], sizes: Sequence[int]) -> Shape4:
    """The output shape of ``--shape`` with 2 to 4 sizes (H,W / D,H,W / B,D,H,W); the axes not given keep
    the input's size."""
    if not 2 <= len(sizes) <= 4:
        raise ParameterError(f"{len(sizes)} sizes given; give H,W or D,H,W or B,D,H,W", "shape")
    if any(n < 1 for n in sizes):
        raise ParameterError(f"{tuple(sizes)} has a size below 1", "shape")
    return layout.as_shape4(tuple(shape[:4 - len(sizes)]) + tuple(sizes))


def resize_offsets(shape: Sequence[int], target: Sequence[int]) -> tuple[int, int, int, int]:
    """Per axis, the input index of output index 0: centre ``N // 2`` lands on ``N' // 2`` (as RELION and
    ``clip resize``); positive where the output crops, negative where it pads."""
    return tuple(n // 2 - m // 2 for n, m in zip(shape, target))  # type: ignore[return-value]


def fill_value(fill: str, dtype: np.dtype, mean: Callable[[], float] | None = None):
    """The value of ``--fill`` ('mean', 'zero' or a number) in ``dtype``: a mean is rounded for integer
    types; a number the type cannot hold is refused."""
    dtype = np.dtype(dtype)
    text = fill.strip().lower()
    if text == "zero":
        return dtype.type(0)
    if text == "mean":
        value = mean() if mean is not None else 0.0
    else:
        try:
            value = complex(text) if dtype.kind == "c" else float(text)
        except ValueError:
            raise ParameterError(f"{fill!r} is not mean, zero or a number", "fill") from None
        if not np.isfinite(value):
            raise ParameterError(f"{fill!r} is not a finite number", "fill")
    if dtype.kind in "iub":
        value = float(np.rint(value))
        limits = np.iinfo(dtype) if dtype.kind != "b" else None
        if limits is not None and not limits.min <= value <= limits.max:
            raise ParameterError(f"{fill!r} does not fit the input's type {dtype} "
                                 f"({limits.min}..{limits.max})", "fill")
        if limits is not None and text not in ("mean",) and value != float(text):
            raise ParameterError(f"{fill!r} is not an integer; the input's type is {dtype}", "fill")
    elif dtype.kind in "fc":
        largest = float(np.finfo(dtype).max)
        if max(abs(complex(value).real), abs(complex(value).imag)) > largest:
            raise ParameterError(f"{fill!r} does not fit the input's type {dtype} (at most ±{largest:.4g})", "fill")
    return dtype.type(value)


def resize_reads(source: Array, target: Shape4, value: Callable[[], object]) -> Reads:
    """Output tile ``key`` of ``source`` cropped or padded to ``target``: the overlapping source region,
    the rest filled with ``value()`` (asked only by tiles that pad)."""
    offsets = resize_offsets(source.shape, target)

    def reads(key: Key) -> tuple[list[Array], Compute]:
        region, place, inside = [], [], True
        for axis, k in enumerate(key):
            start, stop, _ = k.indices(target[axis])
            lo = max(start + offsets[axis], 0)
            hi = min(stop + offsets[axis], source.shape[axis])
            if hi <= lo:
                inside = False
                lo = hi = 0
            region.append(slice(lo, hi))
            place.append(slice(lo - offsets[axis] - start, hi - offsets[axis] - start))
        pads = not inside or any(p.stop - p.start != k.indices(target[i])[1] - k.indices(target[i])[0]
                                 for i, (p, k) in enumerate(zip(place, key)))
        pad_value = value() if pads else None

        def compute(blocks: list[Array], out: Array) -> None:
            target_tile = out.numpy()
            if pad_value is not None:
                target_tile[...] = pad_value
            if inside:
                np.copyto(target_tile[tuple(place)], blocks[0].numpy())

        return ([source[tuple(region)]] if inside else []), compute

    return reads


# ---------------------------------------------------------------------------------------------
# Bin: means of K x K (x K) blocks
# ---------------------------------------------------------------------------------------------


def bin_factors(shape: Sequence[int], factor: int, depth: bool) -> tuple[int, int, int, int]:
    """Per-axis factors of ``bin --factor K [--depth]``; a 3-d binning of a stack of images is refused."""
    if factor < 1:
        raise ParameterError(f"{factor} is below 1", "factor")
    if depth and shape[1] == 1:
        raise ShapeError(f"bin --depth bins volumes (depth > 1); shape {tuple(shape)} is "
                         f"{'a stack of images' if shape[0] > 1 else 'one image'}: bin without --depth")
    factors = (1, factor if depth else 1, factor, factor)
    for axis, (n, k) in enumerate(zip(shape, factors)):
        if n < k:
            raise ShapeError(f"bin --factor {factor}: the {layout.AXIS_NAMES[axis]} axis of shape {tuple(shape)} "
                             f"has {n} pixels, fewer than one bin")
    return factors  # type: ignore[return-value]


def bin_layout(shape: Sequence[int], factors: Sequence[int]) -> tuple[Shape4, tuple[int, ...]]:
    """The binned shape and, per axis, the first input index binned: a remainder is cropped evenly
    (``remainder // 2`` at the start, as IMOD's binning)."""
    out = tuple(n // k for n, k in zip(shape, factors))
    starts = tuple((n % k) // 2 for n, k in zip(shape, factors))
    return layout.as_shape4(out), starts


def bin_reads(source: Array, factors: Sequence[int], starts: Sequence[int]) -> Reads:
    """Output tile ``key`` of the binning: the input region of its bins, reduced by :func:`bin_block`."""
    out_shape, _ = bin_layout(source.shape, factors)

    def reads(key: Key) -> tuple[list[Array], Compute]:
        region = []
        for axis, k in enumerate(key):
            start, stop, _ = k.indices(out_shape[axis])
            region.append(slice(starts[axis] + start * factors[axis], starts[axis] + stop * factors[axis]))
        return [source[tuple(region)]], lambda blocks, out: bin_block(blocks[0], out, factors)

    return reads


# numba kernels of bin: parallel over output rows; each row accumulates its ``kd * kh`` input rows into a
# float64 (complex128) row buffer, so the input is read row by row, contiguously. Cached on disk.


@numba.njit(parallel=True, cache=runtime.CACHE_ENABLED, nogil=True)
def _bin(src, dst, kd, kh, kw, accumulator):
    """``accumulator``: an empty array of the type sums are made in (float64 or complex128); integer
    outputs take the nearest integer (half to even) of the mean."""
    nb, nd, nh, nw = dst.shape
    scale = 1.0 / (kd * kh * kw)
    for row in numba.prange(nb * nd * nh):
        b, rest = row // (nd * nh), row % (nd * nh)
        d, h = rest // nh, rest % nh
        acc = np.zeros(nw, accumulator.dtype)
        for zd in range(kd):
            for zh in range(kh):
                line = src[b, d * kd + zd, h * kh + zh]
                for w in range(nw):
                    for zw in range(kw):
                        acc[w] += line[w * kw + zw]
        for w in range(nw):
            dst[b, d, h, w] = _mean_as(acc[w] * scale, dst)


def _mean_as(value, dst):
    """A mean as ``dst`` stores it: the nearest integer (half to even) for integer outputs."""
    return np.rint(value) if dst.dtype.kind in "iu" else value


@overload(_mean_as)
def _mean_as_typed(value, dst):
    if isinstance(dst.dtype, numba.types.Integer):
        return lambda value, dst: np.rint(value)
    return lambda value, dst: value


def bin_block(block: Array, out: Array, factors: Sequence[int]) -> None:
    """``out`` = the mean of each ``factors`` box of ``block`` (whose shape is ``out.shape * factors``).

    A numba kernel accumulating in float64 (complex128); integer outputs are rounded half to even, as
    ``numpy.rint``. float16 is computed in float32 (numba has no float16 arithmetic)."""
    src = block.numpy()
    dst = out.numpy()
    if src.size == 0:
        return
    if src.dtype == np.float16:
        src = src.astype(np.float32)
    if dst.dtype == np.float16 or dst.dtype == np.bool_:
        scratch = np.empty(dst.shape, np.float32)
        _bin(src, scratch, *factors[1:], np.empty(0, np.float64))
        np.copyto(dst, scratch, casting="unsafe")
        return
    _bin(src, dst, *factors[1:], np.empty(0, np.complex128 if src.dtype.kind == "c" else np.float64))




# ---------------------------------------------------------------------------------------------
# Flip and rotx
# ---------------------------------------------------------------------------------------------


def flip_axis(shape: Sequence[int], axis: str) -> int:
    """The BDHW axis of ``--axis x|y|z``; z needs volumes (depth > 1)."""
    name = axis.lower()
    if name not in AXES:
        raise ParameterError(f"{axis!r} is not one of x, y, z", "axis")
    if name == "z" and shape[1] == 1:
        raise ShapeError(f"flip --axis z mirrors the depth of volumes; shape {tuple(shape)} is "
                         f"{'a stack of images' if shape[0] > 1 else 'one image'} with depth 1 "
                         "(use noa sections to reorder a stack)")
    return AXES[name]


FLIP_ABOUT = ("box", "centre")


def mirror_sum(n: int, about: str) -> int:
    """Output index ``i`` of an axis of ``n`` mirrored ``about`` 'box' or 'centre' takes input index
    ``(mirror_sum - i) % n``. 'box': ``n - 1``, the reversal about the box's middle (RELION's --flipX/Y/Z).
    'centre': ``2 (n // 2)``, the mirror about the voxel ``n // 2``, which stays in place: for an even
    ``n`` RELION's --invert_hand, index 0 having no mirror inside the box and keeping its value (RELION
    wraps); for an odd ``n`` the reversal (RELION's --invert_hand there takes ``(n - i) % n``, the
    reversal rolled by one voxel, which moves the centre voxel to ``n // 2 + 1``)."""
    if about not in FLIP_ABOUT:
        raise ParameterError(f"{about!r} is not one of {', '.join(FLIP_ABOUT)}", "about")
    return n - 1 if about == "box" else 2 * (n // 2)


def flip_reads(source: Array, axis: int, about: str = "box") -> Reads:
    """Output tile ``key`` of ``source`` mirrored along ``axis`` ``about`` 'box' or 'centre'
    (:func:`mirror_sum`): the mirrored region (two about the centre of an even axis, where output 0
    wraps onto input 0), each reversed in memory."""
    n = source.shape[axis]
    last = mirror_sum(n, about)

    def reads(key: Key) -> tuple[list[Array], Compute]:
        start, stop, _ = key[axis].indices(n)

        def region(first: int, end: int) -> Array:
            where = list(key)
            where[axis] = slice(first, end)
            return source[tuple(where)]

        if last - start < n:
            blocks = [region(last - stop + 1, last - start + 1)]
        else:  # output 0 takes input 0, outputs 1, 2, ... take inputs n - 1, n - 2, ...
            blocks = [region(0, 1)] + ([region(last - stop + 1, n)] if stop > 1 else [])
        return blocks, reversed_into

    def reversed_into(blocks: list[Array], out: Array) -> None:
        parts = [np.flip(block.numpy(), axis) for block in blocks]
        np.copyto(out.numpy(), parts[0] if len(parts) == 1 else np.concatenate(parts, axis))

    return reads


def check_volume(shape: Sequence[int], what: str) -> None:
    """Refuse an image or a stack of images where ``what`` needs volumes (depth > 1)."""
    if shape[1] == 1:
        kind = "a stack of images" if shape[0] > 1 else "one image"
        raise ShapeError(f"{what} needs volumes (depth > 1); shape {tuple(shape)} is {kind}")


def rotx_shape(shape: Sequence[int]) -> Shape4:
    """(B, D, H, W) -> (B, H, D, W)."""
    b, d, h, w = shape
    return layout.as_shape4((b, h, d, w))


def rotx_reads(source: Array) -> Reads:
    """Output tile ``key`` of the rotation by -90 degrees about X (IMOD ``clip rotx``, clip_proc.c
    ``clip_flip``: output section ``z'`` is input row ``ny - 1 - z'``, its rows the input sections in
    order), i.e. ``out[b, k, j, i] = in[b, j, H - 1 - k, i]``: y' = z, z' = -y, which keeps the hand."""
    h = source.shape[2]

    def reads(key: Key) -> tuple[list[Array], Compute]:
        kb, kk, kj, ki = key
        start, stop, _ = kk.indices(h)
        region = (kb, kj, slice(h - stop, h - start), ki)

        def compute(blocks: list[Array], out: Array) -> None:
            np.copyto(out.numpy(), np.flip(blocks[0].numpy(), 2).transpose(0, 2, 1, 3))

        return [source[region]], compute

    return reads


# ---------------------------------------------------------------------------------------------
# Average: groups of N consecutive sections
# ---------------------------------------------------------------------------------------------


def average_dtype(dtype: np.dtype) -> np.dtype:
    """The element type of averages or sums: float32 for integers and float16 (a mean is fractional and
    a sum may outgrow the type), complex64 for complex64, float64 and complex128 kept."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return dtype
    if dtype == np.float64:
        return dtype
    if dtype.kind not in "iufb":
        raise DTypeError(f"cannot average elements of type {dtype}")
    return np.dtype(np.float32)


def average_layout(shape: Sequence[int], group: int) -> tuple[Shape4, int, int]:
    """The output shape, the section axis and how many trailing sections are left out (an incomplete
    last group)."""
    axis = section_axis(shape)
    count = shape[axis]
    if group < 1:
        raise ParameterError(f"{group} is below 1", "group")
    if group > count:
        raise ParameterError(f"{group} is more than the {count} section{'s' if count != 1 else ''} of shape "
                             f"{tuple(shape)}", "group")
    out = list(shape)
    out[axis] = count // group
    return layout.as_shape4(out), axis, count % group


def average_reads(source: Array, group: int, total: bool) -> Reads:
    """Output tile ``key``: the ``group`` input sections of each output section, summed in float64 (or
    complex128), divided by ``group`` unless ``total``."""
    out_shape, axis, _ = average_layout(source.shape, group)

    def reads(key: Key) -> tuple[list[Array], Compute]:
        start, stop, _ = key[axis].indices(out_shape[axis])
        region = list(key)
        region[axis] = slice(start * group, stop * group)
        return [source[tuple(region)]], lambda blocks, out: average_block(blocks[0], out, axis, group, total)

    return reads


def average_block(block: Array, out: Array, axis: int, group: int, total: bool) -> None:
    src = block.numpy()
    dst = out.numpy()
    if src.size == 0:
        return
    grouped = src.reshape(src.shape[:axis] + (src.shape[axis] // group, group) + src.shape[axis + 1:])
    wide = np.complex128 if src.dtype.kind == "c" else np.float64
    result = np.add.reduce(grouped, axis=axis + 1, dtype=wide)
    if not total:
        result /= group
    if dst.dtype.kind in "fc" and np.isfinite(result).all():  # a sum the output's type cannot hold is refused
        largest = float(np.finfo(dst.dtype).max)
        if max(np.abs(result.real).max(), np.abs(result.imag).max() if result.dtype.kind == "c" else 0) > largest:
            raise ValueRangeError(f"the {'sums' if total else 'means'} exceed what {dst.dtype} holds (±{largest:.4g})"
                                  + ("; average them instead (without --sum)" if total else ""))
    np.copyto(dst, result, casting="unsafe")


# ---------------------------------------------------------------------------------------------
# In-memory functions
# ---------------------------------------------------------------------------------------------


def _run(source: Array, shape: Sequence[int], dtype, reads: Reads) -> Array:
    """The whole output as one tile: what the file operations compute tile by tile."""
    device = source.device
    if device != "cpu":  # these computes are NumPy and numba CPU code: run there, then move back
        source = source.to("cpu")
    out = empty(tuple(shape), dtype)
    if math.prod(out.shape) > 0:
        views, compute = reads(tuple(slice(0, n) for n in out.shape))
        compute([asarray(np.ascontiguousarray(v.numpy())) for v in views], out)
    return out if device == "cpu" else out.to(device)


def _source(array) -> Array:
    source = asarray(array)
    if source.element_shape:
        raise DTypeError(f"stack operations work on scalar elements, not {source.dtype}")
    return source


def resize(array, shape: Sequence[int], fill: str | float = "mean") -> Array:
    """``array`` cropped or padded about its centre to ``shape`` (2 to 4 sizes: H,W / D,H,W / B,D,H,W);
    new voxels take ``fill``: 'mean' (of the input), 'zero' or a number."""
    source = _source(array)
    target = resize_shape(source.shape, tuple(shape))

    def mean() -> float:
        from noa_core.reduction import mean as average_of

        if source.size == 0:
            return 0.0
        value = average_of(source.to("cpu") if source.device != "cpu" else source).numpy().reshape(-1)[0]
        return value if source.dtype.kind == "c" else float(np.real(value))

    value = fill_value(str(fill), source.dtype, mean)
    return _run(source, target, source.dtype, resize_reads(source, target, lambda: value))


def bin(array, factor: int, depth: bool = False) -> Array:  # noqa: A001 - the command's name
    """Means of ``factor`` x ``factor`` boxes of each image (x ``factor`` in depth with ``depth``); a
    remainder is cropped evenly. The element type is kept (integers rounded)."""
    source = _source(array)
    factors = bin_factors(source.shape, operator_index(factor, "factor"), depth)
    out_shape, starts = bin_layout(source.shape, factors)
    return _run(source, out_shape, source.dtype, bin_reads(source, factors, starts))


def flip(array, axis: str, about: str = "box") -> Array:
    """``array`` mirrored along ``axis`` ('x', 'y' or 'z'): a new array, never a negative-stride view.
    ``about`` 'box' reverses the axis (RELION's --flipX/Y/Z); 'centre' mirrors it about the voxel
    ``n // 2``, which stays in place: the hand inversion of RELION's --invert_hand (:func:`mirror_sum`)."""
    source = _source(array)
    index = flip_axis(source.shape, axis)
    return _run(source, source.shape, source.dtype, flip_reads(source, index, about))


def rotx(array) -> Array:
    """Volumes rotated by -90 degrees about X as IMOD's ``clip rotx``: (B, D, H, W) -> (B, H, D, W) with
    ``out[b, k, j, i] = array[b, j, H - 1 - k, i]`` (keeps the hand, unlike swapping Y and Z)."""
    source = _source(array)
    check_volume(source.shape, "rotx")
    return _run(source, rotx_shape(source.shape), source.dtype, rotx_reads(source))


def sections(array, keep: str | None = None, drop: str | None = None) -> Array:
    """The sections (batch entries of a stack, else depth slices) listed by ``keep`` ('0-9,12', in that
    order) or all but those listed by ``drop``."""
    source = _source(array)
    indices = selected_sections(source.shape, keep, drop)
    axis = section_axis(source.shape)
    shape = list(source.shape)
    shape[axis] = len(indices)
    return _run(source, shape, source.dtype, sections_reads(source, indices))


def average(array, group: int, sum: bool = False) -> Array:  # noqa: A002 - the option's name
    """Averages (or sums) of ``group`` consecutive sections; an incomplete last group is left out.
    Integers and float16 give float32."""
    source = _source(array)
    out_shape, _, _ = average_layout(source.shape, operator_index(group, "group"))
    return _run(source, out_shape, average_dtype(source.dtype), average_reads(source, group, sum))


def operator_index(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ParameterError(f"{value!r} is not an integer", name)
    return int(value)


# ---------------------------------------------------------------------------------------------
# Headers: extended-header records that follow the sections
# ---------------------------------------------------------------------------------------------

# Extended header types whose records are one per section (mrcfile indexes FEI1/FEI2; SerialEM and
# Agard blocks hold nint bytes per section). CCP4/MRCO blocks are symmetry operators, not per section.
PER_SECTION = ("FEI1", "FEI2", "SERI", "AGAR")


def follow_sections(meta, source_meta, picks: Sequence[int | None] | Callable[[], Sequence[int | None]] | None,
                    why: str, pixel_scale: float = 1.0):
    """``meta`` (describing the output) with the extended-header records of the MRC sections ``picks``
    (per output MRC section, the input MRC section whose record it takes; None: a new section; or a
    function giving them, called only where per-section records exist) or, with ``picks`` None, the
    records dropped because ``why``. FEI1/FEI2 pixel sizes are scaled by ``pixel_scale`` (binning).
    Records that cannot be told apart are dropped with a notice."""
    fields = getattr(meta, "mrc", None)
    if fields is None or fields.extended_header is None:
        return meta
    extended = fields.extended_header
    exttyp = fields.exttyp

    def dropped(reason: str):
        meta.mrc = dataclasses.replace(fields, extended_header=None, exttyp=None, dropped=reason)
        meta.notices.append(f"extended header dropped: {reason}, so it no longer matches the sections")
        return meta

    if exttyp not in PER_SECTION:
        if picks is not None or exttyp in ("CCP4", "MRCO"):
            return meta  # not per section (symmetry operators): kept as it is
        return dropped(why)
    if picks is None:
        return dropped(why)
    if callable(picks):
        picks = picks()
    if source_meta.order not in ("C", "F", None):
        return dropped("the input's sections are not along Z (axis mapping), so its records cannot follow them")
    in_sections = source_meta.shape[0] * source_meta.shape[1]
    record_dtype = _record_dtype(exttyp)
    size = record_dtype.itemsize if record_dtype is not None else (
        len(extended) // in_sections if in_sections and len(extended) % in_sections == 0 else 0)
    if size == 0 or len(extended) < size * in_sections:
        return dropped(f"its {exttyp} records ({len(extended)} bytes) cannot be told apart for "
                       f"{in_sections} sections")
    if any(p is None for p in picks):
        return dropped("new sections were added, which have no records")
    records = np.frombuffer(extended, np.uint8, count=size * in_sections).reshape(in_sections, size)
    chosen = records[list(picks)] if picks else records[:0]
    if record_dtype is not None and pixel_scale != 1.0 and len(chosen):
        typed = chosen.copy().view(record_dtype).reshape(-1)
        for name in ("Pixel size X", "Pixel size Y"):
            typed[name] = typed[name] * pixel_scale
        chosen = typed.view(np.uint8).reshape(len(picks), size)
    meta.mrc = dataclasses.replace(fields, extended_header=np.ascontiguousarray(chosen).tobytes() or None)
    if meta.mrc.extended_header is None:
        meta.mrc = dataclasses.replace(meta.mrc, exttyp=None)
    return meta


def _record_dtype(exttyp: str) -> np.dtype | None:
    from mrcfile.dtypes import get_ext_header_dtype

    return get_ext_header_dtype(exttyp.encode("latin-1"), "<")


def mrc_sections(shape: Sequence[int], axis: int, indices: Sequence[int]) -> list[int]:
    """The MRC sections (``b * D + d``) of the output whose ``axis`` entries are the input's ``indices``."""
    b, d = shape[0], shape[1]
    if axis == 0:
        return [i * d + z for i in indices for z in range(d)]
    return [s * d + i for s in range(b) for i in indices]


def derived(meta, shape: Sequence[int], *, pixel_size=None, origin=None, grown_axes: Sequence[int] = ()):
    """A copy of ``meta`` for an output of ``shape``: pixel size and origin replaced where given; the MRC
    sampling of the axes whose size changed becomes unknown (the axis size is written)."""
    target = layout.as_shape4(tuple(shape))
    out = meta._derived(target)
    if pixel_size is not None:
        out.pixel_size = tuple(float(p) for p in pixel_size)
    if origin is not None:
        out.origin = tuple(float(o) for o in origin)
    if out.mrc is not None:
        changed = [meta.shape[i] != target[i] or i in grown_axes for i in (1, 2, 3)]
        out.mrc = dataclasses.replace(out.mrc, sampling=tuple(0 if c else m for c, m in zip(changed, out.mrc.sampling)))
    return out
