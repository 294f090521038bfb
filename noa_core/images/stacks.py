"""The sections of a stack: naming them (range lists), picking, splitting, joining and averaging them.

A *section* is one (height, width) image: the batch entries of a stack (B > 1), else the depth slices of a
volume (:func:`section_axis`). Each operation is written once, as the index arithmetic of an output region
(which source region it is computed from) and a compute filling it from that source block; the file
operations (:mod:`noa_core.operations.sections`, ``split``, ``join``, ``average``) stream those regions
tile by tile with bounded memory, and the functions here run the same computes on a whole in-memory
Array. What happens to a header when sections are picked or joined is :class:`noa_core.io.Metadata`'s, and
:func:`sections_metadata`, :func:`average_metadata` say it for those operations; given ``(array, metadata)``
pairs, the functions here return :class:`~noa_core.images.image.Image` pairs with that header.

Example::

    import noa_core as noa

    kept = noa.sections(stack, keep="0-9,12")      # those sections, in that order
    parts = noa.split(stack, 10)                   # arrays of 10 images (the last may hold fewer)
    whole = noa.join(parts)                        # the stack again
    fractions = noa.average(movie, 4)              # means of 4 consecutive frames
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence

import numpy as np

from noa_core.array import Array, asarray, layout
from noa_core.array.layout import Shape4
from noa_core.compute.tiles import Compute, Key, TileReads, compute_whole
from noa_core.errors import DTypeError, ParameterError, SectionMismatchError, ValueRangeError, param
from noa_core.images.image import Image, ImageInput, split_pair
from noa_core.io.metadata import Metadata, stored_sections
from noa_core.limits import check_output_size

BATCH, DEPTH = 0, 1


def section_axis(shape: Sequence[int]) -> int:
    """The BDHW axis whose entries are sections: the batch of a stack (of images or volumes), else the
    depth (the Z sections of a volume; the one section of an image)."""
    return BATCH if layout.as_shape4(shape)[0] > 1 else DEPTH


# -- range lists ------------------------------------------------------------------------------------


class Selection(Sequence[int]):
    """Section indices given as ranges, in order, never listed one by one: a range list of 10 KB can
    name billions of sections. Indexing by a slice gives the list of that slice (a tile's)."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self._firsts = [first for first, _ in ranges]
        self._ends = list(itertools.accumulate(last + 1 - first for first, last in ranges))  # positions after each

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, item):
        if isinstance(item, slice):
            start, stop, step = item.indices(len(self))
            return [self[i] for i in range(start, stop, step)]
        position = item + len(self) if item < 0 else item
        if not 0 <= position < len(self):
            raise IndexError(item)
        k = bisect.bisect_right(self._ends, position)
        return self._firsts[k] + position - (self._ends[k - 1] if k else 0)


def parse_ranges(text: str, count: int, name: str, shape: Sequence[int] | None = None, *, first: int = 0
                 ) -> Selection:
    """Section indices of a range list ('0-9,12'), in the order written; ParameterError names the bad part.

    The numbers written count from ``first`` (0; IMOD's view numbers count from 1), the indices returned from 0,
    below ``count`` (the sections the input has). With ``shape`` (the input's), the output those sections make is
    checked against the output limits."""
    selection = Selection(_ranges(text, count, name, first))
    if shape is not None:
        out = list(shape)
        out[section_axis(shape)] = len(selection)
        check_output_size(out, what=name)
    return selection


def _ranges(text: str, count: int, name: str, base: int) -> list[tuple[int, int]]:
    """The ``(first, last)`` pairs of a range list whose numbers count from ``base``, checked, counted from 0."""
    indices: list[tuple[int, int]] = []
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if match is None:
            raise ParameterError(f"{part!r} in {text!r} is not a section number or a range like {base}-9", name)
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ParameterError(f"range {part!r} runs backwards; write {last}-{first}", name)
        if first < base or last >= count + base:
            outside = first if first < base else last
            raise ParameterError(f"section {outside} (in {part!r}) is outside {base}..{count - 1 + base}: the input "
                                 f"has {count} section{'s' if count != 1 else ''}", name)
        indices.append((first - base, last - base))
    return indices


def selected_sections(shape: Sequence[int], keep: str | None, drop: str | None) -> Sequence[int]:
    """The input sections an output keeps, in output order, from ``keep`` or ``drop`` (exactly one)."""
    if (keep is None) == (drop is None):
        raise ParameterError("give either keep or drop (one range list such as 0-9,12)",
                             "keep" if keep is None else "drop")
    count = shape[section_axis(shape)]
    if keep is not None:
        return parse_ranges(keep, count, "keep", shape)
    assert drop is not None  # exactly one of keep and drop (checked above)
    dropped = set(parse_ranges(drop, count, "drop"))
    kept = [i for i in range(count) if i not in dropped]
    if not kept:
        raise ParameterError(f"{drop!r} drops every one of the {count} sections; nothing would be left", "drop")
    return kept


def sections_metadata(meta: Metadata, shape: Sequence[int], indices: Sequence[int]) -> Metadata:
    """The header of the sections ``indices`` of ``shape``, in that order, with their extended-header records; a
    volume's first kept slice becomes its first section (the origin moves with it)."""
    axis = section_axis(shape)
    out = list(shape)
    out[axis] = len(indices)
    origin = meta.origin
    if axis == DEPTH:
        origin = (meta.origin[0] - indices[0] * meta.pixel_size[0], *meta.origin[1:])
    return meta.derived(out, origin=origin).with_sections(meta, lambda: stored_sections(shape, axis, indices))


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


def sections_reads(source: Array, indices: Sequence[int]) -> TileReads:
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


# -- split and join -----------------------------------------------------------------------------------


def split_ranges(shape: Sequence[int], every: int) -> list[tuple[int, int]]:
    """``(start, stop)`` along :func:`split_axis` of each part of ``every`` entries (the last may hold fewer)."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ParameterError(f"{every!r} is not a positive whole number", "every")
    n = layout.as_shape4(shape)[section_axis(shape)]
    return [(start, min(start + every, n)) for start in range(0, n, every)]


def check_joinable(shapes: Sequence[Sequence[int]], types: Sequence[np.dtype], names: Sequence[str]) -> Shape4:
    """The shape of the inputs joined along the batch axis; SectionMismatchError naming the first input
    whose depth, height, width or element type differs from the first input's."""
    if not shapes:
        raise ParameterError("nothing to join: give at least one input")
    first = layout.as_shape4(shapes[0])
    for shape, dtype, name in zip(shapes[1:], types[1:], names[1:]):
        shape = layout.as_shape4(shape)
        if shape[1:] != first[1:]:
            raise SectionMismatchError(f"{name}: depth, height, width {shape[1:]} differ from {names[0]}'s "
                                       f"{first[1:]}; joined inputs must have the same")
        if np.dtype(dtype) != np.dtype(types[0]):
            raise SectionMismatchError(f"{name}: element type {np.dtype(dtype).name} differs from {names[0]}'s "
                                       f"{np.dtype(types[0]).name}; convert it first (copy, {param('dtype')})")
    return layout.Shape4((sum(layout.as_shape4(s)[0] for s in shapes), *first[1:]))


# -- average: groups of N consecutive sections ---------------------------------------------------------


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


def average_metadata(meta: Metadata, shape: Sequence[int], group: int) -> Metadata:
    """The header of groups of ``group`` sections of ``shape`` made one: a volume's slices ``group`` times
    thicker; each group takes its first section's extended-header record."""
    out, axis, _ = average_layout(shape, group)
    pixel = meta.pixel_size
    if axis == DEPTH:
        pixel = (pixel[0] * group, *pixel[1:])
    firsts = [g * group for g in range(out[axis])]
    return meta.derived(out, pixel_size=pixel, origin=meta.origin).with_sections(
        meta, stored_sections(shape, axis, firsts), merged=group)


def average_reads(source: Array, group: int, total: bool) -> TileReads:
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
                                  + (f"; average them instead (without {param('sum')})" if total else ""))
    np.copyto(dst, result, casting="unsafe")


# -- in memory ---------------------------------------------------------------------------------------


def stack_input(array) -> Array:
    """``array`` as an Array of scalar elements, as the stack and box operations take."""
    source = asarray(array)
    if source.element_shape:
        raise DTypeError(f"stack operations work on scalar elements, not {source.dtype}")
    return source


def operator_index(value, name: str) -> int:
    """``value`` as a whole number; ParameterError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ParameterError(f"{value!r} is not an integer", name)
    return int(value)


def sections(array: ImageInput, keep: str | None = None, drop: str | None = None) -> Array | Image:
    """The sections (batch entries of a stack, else depth slices) listed by ``keep`` ('0-9,12', in that
    order) or all but those listed by ``drop``. Given an ``(array, metadata)`` pair, an
    :class:`~noa_core.images.image.Image` with :func:`sections_metadata`.

    Args:
        array: the stack or volume (scalar elements), or an ``(array, metadata)`` pair.
        keep: the sections kept, a range list counted from 0, in output order.
        drop: the sections left out, a range list (the others are kept in order).

    Returns:
        A new array of the kept sections along the section axis, or an Image with its header.

    Raises:
        ParameterError: neither or both of ``keep`` and ``drop``, a malformed range, a section outside the input,
            or every section dropped.
        DTypeError: vector or matrix elements.
        ShapeError: a pair whose metadata describes another shape than its array's.
        LimitError: the output would exceed the output limits.
    """
    values, meta = split_pair(array)
    source = stack_input(values)
    indices = selected_sections(source.shape, keep, drop)
    axis = section_axis(source.shape)
    shape = list(source.shape)
    shape[axis] = len(indices)
    out = compute_whole(source, shape, source.dtype, sections_reads(source, indices))
    return out if meta is None else Image(out, sections_metadata(meta, source.shape, indices))


def average(array: ImageInput, group: int, total: bool = False) -> Array | Image:
    """Averages (or sums, with ``total``) of ``group`` consecutive sections; an incomplete last group is left out.
    Integers and float16 give float32. Given an ``(array, metadata)`` pair, an
    :class:`~noa_core.images.image.Image` with :func:`average_metadata`.

    Args:
        array: the stack or volume (scalar elements), or an ``(array, metadata)`` pair.
        group: how many consecutive sections make one, from 1 to the number of sections.
        total: sum the sections of each group instead of averaging them.

    Returns:
        A new array of ``sections // group`` sections (float32 for integers and float16; float64, complex64 and
        complex128 kept), or an Image with its header (a volume's slices ``group`` times thicker).

    Raises:
        ParameterError: ``group`` is not a whole number, or is below 1 or above the number of sections.
        DTypeError: vector or matrix elements.
        ValueRangeError: sums (or means) beyond what the output type holds.
        ShapeError: a pair whose metadata describes another shape than its array's.
    """
    values, meta = split_pair(array)
    source = stack_input(values)
    out_shape, _, _ = average_layout(source.shape, operator_index(group, "group"))
    out = compute_whole(source, out_shape, average_dtype(source.dtype), average_reads(source, group, total))
    return out if meta is None else Image(out, average_metadata(meta, source.shape, group))


def join(arrays: Sequence[ImageInput]) -> Array | Image:
    """A new array: ``arrays`` (same depth, height, width and element type) stacked along the batch axis. Given
    ``(array, metadata)`` pairs, an :class:`~noa_core.images.image.Image` whose header is
    :meth:`~noa_core.io.Metadata.joined`'s (the first one's, the extended headers joined).

    Args:
        arrays: the arrays, or ``(array, metadata)`` pairs (all of one kind), in order.

    Returns:
        The joined array, or an Image with the joined header.

    Raises:
        ParameterError: no input, or arrays and pairs mixed.
        SectionMismatchError: an input whose depth, height, width or element type differs from the first's.
        ShapeError: a pair whose metadata describes another shape than its array's.
    """
    pairs = [split_pair(a) for a in arrays]
    metas = [meta for _, meta in pairs if meta is not None]
    if metas and len(metas) != len(pairs):
        raise ParameterError("give arrays or (array, metadata) pairs to join, not both", "arrays")
    sources = [asarray(a) for a, _ in pairs]
    names = [meta.path if meta is not None and meta.path else f"array {i}" for i, (_, meta) in enumerate(pairs)]
    check_joinable([a.shape for a in sources], [a.dtype for a in sources], names)
    out = asarray(np.concatenate([a.numpy() for a in sources], axis=0))
    return Image(out, Metadata.joined(metas, names)) if metas else out


def split(array: ImageInput, every: int = 1) -> list[Array] | list[Image]:
    """Copies of ``array``'s parts of ``every`` entries along the batch axis (a single volume: its Z
    sections), in order; the last part may hold fewer. Given an ``(array, metadata)`` pair, an
    :class:`~noa_core.images.image.Image` per part, with :meth:`~noa_core.io.Metadata.section_part`'s header.

    Args:
        array: the stack or volume, or an ``(array, metadata)`` pair.
        every: how many entries each part holds, at least 1.

    Returns:
        The parts (a volume's parts are stacks of images), or an Image per part.

    Raises:
        ParameterError: ``every`` is not a positive whole number.
        ShapeError: a pair whose metadata describes another shape than its array's.
    """
    value, meta = split_pair(array)
    source = asarray(value)
    axis = section_axis(source.shape)
    values = source.numpy()
    parts = []
    for start, stop in split_ranges(source.shape, every):
        key = [slice(None)] * 4
        key[axis] = slice(start, stop)
        part = values[tuple(key)]
        if axis == DEPTH:  # the Z sections of a volume become a stack of images
            part = part.reshape(stop - start, 1, *part.shape[2:])
        part = asarray(np.ascontiguousarray(part))
        parts.append(part if meta is None else Image(part, meta.section_part(axis, start, stop)))
    return parts
