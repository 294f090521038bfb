"""The box of an image, stack or volume: crop or pad it (resize), bin, flip, rotate 90 degrees about X.

Each operation is written once, as the index arithmetic of an output region (which source region it is
computed from) and a compute that fills the output region from that source block. The file operations
(:mod:`noa_core.operations.resize`, ``bin``, ``flip``, ``rotx``) stream those regions tile by tile with
bounded memory; the functions here run the same computes on a whole in-memory Array.

What each operation makes of a header is written once too (:func:`resize_metadata`, :func:`bin_metadata`,
:func:`flip_metadata`, :func:`rotx_metadata`): the file operations write it, and the functions here return it
when given an ``(array, metadata)`` pair (:mod:`noa_core.images.image`). Origins follow IMOD's convention, as
the tools these operations mirror (``clip``, ``trimvol``, ``newstack``): voxel ``i`` spans ``[i, i + 1)`` pixels
and lies at ``i * pixel - origin``, so cropping at offset ``k`` subtracts ``k * pixel`` from the origin and the
content stays where it was. (ChimeraX reads the MRC origin with the other sign.)

No negative stride reaches a caller: flips and rotations reverse an axis inside a compute, from a block
already in memory into the output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from noa_core import compute, kernels  # faces: numba's reductions and kernels load only on the kernels' path
from noa_core.array import Array, layout
from noa_core.array.layout import Shape4
from noa_core.compute import compute_path
from noa_core.compute.tiles import Compute, Key, TileReads, compute_whole
from noa_core.errors import ParameterError, ShapeError, param
from noa_core.images.image import Image, ImageInput, split_pair
from noa_core.images.stacks import operator_index, stack_input
from noa_core.io.metadata import Metadata, stored_sections

if TYPE_CHECKING:
    from noa_core.io.mrc import MrcFields

AXES = {"x": 3, "y": 2, "z": 1}  # flip axis name -> BDHW axis


# -- resize: crop or pad about the centre ---------------------------------------------------------------


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


def resize_metadata(meta: Metadata, shape: Sequence[int], target: Sequence[int]) -> Metadata:
    """The header of ``shape`` cropped or padded about its centre to ``target``: voxel ``i`` of the output is voxel
    ``i + offset`` of the input, so IMOD's origin moves by ``-offset * pixel`` on D, H, W and the content stays
    where it was; each section keeps its extended-header record, a padded one has none."""
    offsets = resize_offsets(shape, target)
    origin = tuple(o - k * p for o, k, p in zip(meta.origin, offsets[1:], meta.pixel_size))
    return meta.derived(target, origin=origin).with_sections(
        meta, lambda: _resize_section_picks(shape, target, offsets), "sections were added")


def _resize_section_picks(shape, target, offsets) -> list[int | None]:
    """Per output MRC section (b * D + d), the input section it shows, None for a padded one."""
    picks: list[int | None] = []
    for b in range(target[0]):
        for d in range(target[1]):
            ib, id_ = b + offsets[0], d + offsets[1]
            inside = 0 <= ib < shape[0] and 0 <= id_ < shape[1]
            picks.append(ib * shape[1] + id_ if inside else None)
    return picks


def fill_value(fill: str, dtype: np.dtype, mean: Callable[[], float] | None = None):
    """The value of ``--fill`` ('mean', 'zero' or a number) in ``dtype``: a mean is rounded for integer
    types; a number the type cannot hold is refused."""
    dtype = np.dtype(dtype)
    text = fill.strip().lower()
    if text == "zero":
        return dtype.type(0)
    value: float | complex
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


def resize_reads(source: Array, target: Shape4, value: Callable[[], object]) -> TileReads:
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


# -- bin: means of K x K (x K) blocks ------------------------------------------------------------------


def bin_factors(shape: Sequence[int], factor: int, depth: bool) -> tuple[int, int, int, int]:
    """Per-axis factors of ``bin --factor K [--depth]``; a 3-d binning of a stack of images is refused."""
    if factor < 1:
        raise ParameterError(f"{factor} is below 1", "factor")
    if depth and shape[1] == 1:
        raise ShapeError(f"bin {param('depth')} bins volumes (depth > 1); shape {tuple(shape)} is "
                         f"{'a stack of images' if shape[0] > 1 else 'one image'}: bin without {param('depth')}")
    factors = (1, factor if depth else 1, factor, factor)
    for axis, (n, k) in enumerate(zip(shape, factors)):
        if n < k:
            raise ShapeError(f"bin {param('factor', factor)}: the {layout.AXIS_NAMES[axis]} axis of shape "
                             f"{tuple(shape)} has {n} pixels, fewer than one bin")
    return factors


def bin_layout(shape: Sequence[int], factors: Sequence[int]) -> tuple[Shape4, tuple[int, ...]]:
    """The binned shape and, per axis, the first input index binned: a remainder is cropped evenly
    (``remainder // 2`` at the start, as IMOD's binning)."""
    out = tuple(n // k for n, k in zip(shape, factors))
    starts = tuple((n % k) // 2 for n, k in zip(shape, factors))
    return layout.as_shape4(out), starts


def bin_metadata(meta: Metadata, shape: Sequence[int], factors: Sequence[int], starts: Sequence[int]) -> Metadata:
    """The header of ``shape`` binned by ``factors`` from ``starts`` (:func:`bin_layout`): the pixel size K times,
    the origin where the kept region starts (bins cover voxels ``[start + j K, start + (j + 1) K)``); K sections
    binned into one take the first one's extended-header record, its FEI pixel size K times too."""
    out_shape, _ = bin_layout(shape, factors)
    pixel = tuple(p * k for p, k in zip(meta.pixel_size, factors[1:]))
    origin = tuple(o - s * p for o, s, p in zip(meta.origin, starts[1:], meta.pixel_size))
    out = meta.derived(out_shape, pixel_size=pixel, origin=origin, grown_axes=(2, 3))
    firsts = [starts[1] + z * factors[1] for z in range(out_shape[1])]
    return out.with_sections(meta, stored_sections(shape, 1, firsts), pixel_scale=factors[2])


def bin_reads(source: Array, factors: Sequence[int], starts: Sequence[int]) -> TileReads:
    """Output tile ``key`` of the binning: the input region of its bins, reduced by :func:`bin_block`."""
    out_shape, _ = bin_layout(source.shape, factors)

    def reads(key: Key) -> tuple[list[Array], Compute]:
        region = []
        for axis, k in enumerate(key):
            start, stop, _ = k.indices(out_shape[axis])
            region.append(slice(starts[axis] + start * factors[axis], starts[axis] + stop * factors[axis]))
        return [source[tuple(region)]], lambda blocks, out: bin_block(blocks[0], out, factors)

    return reads


def bin_block(block: Array, out: Array, factors: Sequence[int]) -> None:
    """``out`` = the mean of each ``factors`` box of ``block`` (whose shape is ``out.shape * factors``).

    Sums in float64 (complex128), multiplied by ``1 / (kd kh kw)``; integer outputs are rounded half to
    even, as ``numpy.rint``; float16 is computed in float32. The numba kernel adds each output row's
    ``kd * kh`` input rows in order, each row's ``kw`` values in order; NumPy (small files,
    :mod:`noa_core.compute.compute_path`) adds in that same order, so both give the same bits."""
    src = block.numpy()
    dst = out.numpy()
    if src.size == 0:
        return
    if src.dtype == np.float16:
        src = src.astype(np.float32)
    wide = np.complex128 if src.dtype.kind == "c" else np.float64
    through_float = dst.dtype == np.float16 or dst.dtype == np.bool_
    target = np.empty(dst.shape, np.float32) if through_float else dst
    if compute_path.numpy_path():
        with np.errstate(all="ignore"):
            _bin_numpy(src, target, factors[1:], wide)
    else:
        kernels.runtime.launch(kernels.binning.bin_kernel, True, src, target, *factors[1:], np.empty(0, wide))
    if through_float:
        np.copyto(dst, target, casting="unsafe")


def _bin_numpy(src: np.ndarray, dst: np.ndarray, factors: Sequence[int], wide) -> None:
    """The bin kernel's arithmetic with NumPy: per output value, ``acc += x`` over the box's input rows in
    order and, within a row, over its ``kw`` values in order, then ``acc * (1 / (kd kh kw))``."""
    kd, kh, kw = factors
    nb, nd, nh, nw = dst.shape
    boxes = src[:, :nd * kd, :nh * kh, :nw * kw].reshape(nb, nd, kd, nh, kh, nw, kw)
    ordered = boxes.transpose(0, 1, 3, 5, 2, 4, 6).reshape(nb, nd, nh, nw, kd * kh * kw)  # the kernel's order
    acc = np.add.accumulate(np.concatenate([np.zeros((*ordered.shape[:4], 1), wide), ordered.astype(wide)], axis=4),
                            axis=4)[..., -1]
    mean = acc * (1.0 / (kd * kh * kw))
    np.copyto(dst, np.rint(mean) if dst.dtype.kind in "iu" else mean, casting="unsafe")


# -- flip and rotx ------------------------------------------------------------------------------------


def flip_axis(shape: Sequence[int], axis: str) -> int:
    """The BDHW axis of ``--axis x|y|z``; z needs volumes (depth > 1)."""
    name = axis.lower()
    if name not in AXES:
        raise ParameterError(f"{axis!r} is not one of x, y, z", "axis")
    if name == "z" and shape[1] == 1:
        raise ShapeError(f"flip {param('axis', 'z')} mirrors the depth of volumes; shape {tuple(shape)} is "
                         f"{'a stack of images' if shape[0] > 1 else 'one image'} with depth 1 "
                         "(the sections operation reorders a stack)")
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


def flip_metadata(meta: Metadata, shape: Sequence[int], axis: int, about: str = "box") -> Metadata:
    """The header of ``shape`` mirrored along ``axis`` ``about`` 'box' or 'centre': both keep the box where it is,
    so the origin is kept (the reversal is about the box's middle, the centre mirror about the voxel ``n // 2``,
    which keeps its place); a z mirror reorders the sections and their extended-header records with them."""
    b, d = shape[0], shape[1]
    if axis == 1:
        last = mirror_sum(d, about)
        picks = [i * d + (last - z) % d for i in range(b) for z in range(d)]
    else:
        picks = list(range(b * d))
    return meta.derived(shape).with_sections(meta, picks)


def flip_reads(source: Array, axis: int, about: str = "box") -> TileReads:
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


def rotx_metadata(meta: Metadata, shape: Sequence[int]) -> Metadata:
    """The header of volumes of ``shape`` rotated by -90 degrees about X: pixel size, sampling, start and angles
    of Y and Z exchanged; the centres kept, as IMOD's clip_flip (rotx) keeps them (y' = z, z' = -y)."""
    out_shape = rotx_shape(shape)
    out = meta.permute((0, 2, 1, 3))
    (pz, py, _), (oz, oy, ox) = meta.pixel_size, meta.origin
    if py > 0 and pz > 0:
        ycen = shape[2] / 2 - oy / py
        zcen = shape[1] / 2 - oz / pz
        out.origin = ((out_shape[1] / 2 + ycen) * py, (out_shape[2] / 2 - zcen) * pz, ox)
    fields = cast("MrcFields | None", out.mrc)  # Metadata.mrc holds an MRC file's fields
    if fields is not None and fields.dropped:
        out.mrc = dataclasses.replace(fields, dropped="the volume was rotated about X")
    return out


def rotx_reads(source: Array) -> TileReads:
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


# -- in memory ---------------------------------------------------------------------------------------


def resize(array: ImageInput, shape: Sequence[int], fill: str | float = "mean") -> Array | Image:
    """``array`` cropped or padded about its centre to ``shape`` (2 to 4 sizes: H,W / D,H,W / B,D,H,W);
    new voxels take ``fill``: 'mean' (of the input), 'zero' or a number. Given an ``(array, metadata)`` pair, an
    :class:`~noa_core.images.image.Image` with :func:`resize_metadata` (the origin keeps the content in place).

    Args:
        array: the images or volumes (scalar elements), or an ``(array, metadata)`` pair.
        shape: the new sizes, H,W or D,H,W or B,D,H,W (each at least 1); the axes not given keep theirs.
        fill: what new voxels take: 'mean', 'zero' or a number the element type holds.

    Returns:
        A new array of the new shape, or an Image with its header.

    Raises:
        ParameterError: 2 to 4 sizes not given, a size below 1, or a ``fill`` that is not 'mean', 'zero' or a
            number the element type holds.
        DTypeError: vector or matrix elements.
        ShapeError: a pair whose metadata describes another shape than its array's.
    """
    values, meta = split_pair(array)
    source = stack_input(values)
    target = resize_shape(source.shape, tuple(shape))

    def mean() -> float:
        if source.size == 0:
            return 0.0
        value = compute.reduction.mean(source.to("cpu") if source.device != "cpu" else source).numpy().reshape(-1)[0]
        return value if source.dtype.kind == "c" else float(np.real(value))

    value = fill_value(str(fill), source.dtype, mean)
    out = compute_whole(source, target, source.dtype, resize_reads(source, target, lambda: value))
    return out if meta is None else Image(out, resize_metadata(meta, source.shape, target))


def bin_voxels(array: ImageInput, factor: int, depth: bool = False) -> Array | Image:
    """Means of ``factor`` x ``factor`` boxes of each image (x ``factor`` in depth with ``depth``); a
    remainder is cropped evenly. The element type is kept (integers rounded). Given an ``(array, metadata)``
    pair, an :class:`~noa_core.images.image.Image` with :func:`bin_metadata` (``factor`` times the pixel size).

    Args:
        array: the images or volumes (scalar elements), or an ``(array, metadata)`` pair.
        factor: the side of the boxes averaged, a whole number of at least 1.
        depth: bin the depth of volumes too.

    Returns:
        A new array of the binned shape (each axis ``n // factor``), or an Image with its header.

    Raises:
        ParameterError: ``factor`` is not a whole number, or is below 1.
        ShapeError: ``depth`` for images, an axis smaller than ``factor``, or a pair whose metadata describes
            another shape than its array's.
        DTypeError: vector or matrix elements.
    """
    values, meta = split_pair(array)
    source = stack_input(values)
    factors = bin_factors(source.shape, operator_index(factor, "factor"), depth)
    out_shape, starts = bin_layout(source.shape, factors)
    out = compute_whole(source, out_shape, source.dtype, bin_reads(source, factors, starts))
    return out if meta is None else Image(out, bin_metadata(meta, source.shape, factors, starts))


def flip(array: ImageInput, axis: str, about: str = "box") -> Array | Image:
    """``array`` mirrored along ``axis`` ('x', 'y' or 'z'): a new array, never a negative-stride view.
    ``about`` 'box' reverses the axis (RELION's --flipX/Y/Z); 'centre' mirrors it about the voxel
    ``n // 2``, which stays in place: the hand inversion of RELION's --invert_hand (:func:`mirror_sum`).
    Given an ``(array, metadata)`` pair, an :class:`~noa_core.images.image.Image` with :func:`flip_metadata`.

    Args:
        array: the images or volumes (scalar elements), or an ``(array, metadata)`` pair.
        axis: 'x', 'y' or 'z' (volumes only).
        about: 'box' or 'centre'.

    Returns:
        A new array of the same shape, or an Image with its header.

    Raises:
        ParameterError: an ``axis`` or ``about`` not among those.
        ShapeError: 'z' for images, or a pair whose metadata describes another shape than its array's.
        DTypeError: vector or matrix elements.
    """
    values, meta = split_pair(array)
    source = stack_input(values)
    index = flip_axis(source.shape, axis)
    out = compute_whole(source, source.shape, source.dtype, flip_reads(source, index, about))
    return out if meta is None else Image(out, flip_metadata(meta, source.shape, index, about))


def rotx(array: ImageInput) -> Array | Image:
    """Volumes rotated by -90 degrees about X as IMOD's ``clip rotx``: (B, D, H, W) -> (B, H, D, W) with
    ``out[b, k, j, i] = array[b, j, H - 1 - k, i]`` (keeps the hand, unlike swapping Y and Z). Given an
    ``(array, metadata)`` pair, an :class:`~noa_core.images.image.Image` with :func:`rotx_metadata`.

    Args:
        array: volumes (depth above 1, scalar elements), or an ``(array, metadata)`` pair.

    Returns:
        A new array of shape (B, H, D, W), or an Image with its header.

    Raises:
        ShapeError: images (depth 1), or a pair whose metadata describes another shape than its array's.
        DTypeError: vector or matrix elements.
    """
    values, meta = split_pair(array)
    source = stack_input(values)
    check_volume(source.shape, "rotx")
    out = compute_whole(source, rotx_shape(source.shape), source.dtype, rotx_reads(source))
    return out if meta is None else Image(out, rotx_metadata(meta, source.shape))
