"""Masks of maps and images: RELION's soft masks grown from a threshold, and spheres and cylinders.

Every function takes and returns one image (H, W) or one volume (D, H, W) as a NumPy array; a mask is
float64 with 1 inside, 0 outside and a raised-cosine edge between (the file written from it is float32).
Distances are Euclidean, in pixels, from voxel centre to voxel centre, measured within the box (nothing
wraps around): scipy.ndimage's exact Euclidean distance transform, in time linear in the voxels.

:func:`threshold_mask` is ``relion_mask_create --ini_threshold T --extend_inimask E --width_soft_edge W``
(RELION 3.1.3's autoMask, src/mask.cpp), which searches a cube of neighbours around every voxel instead.
:func:`sphere` is ``relion_mask_create --denovo --outer_radius R --width_soft_edge W`` (raisedCrownMask);
:func:`cylinder` puts the same edge on a cylinder about Z, as RELION's helical masks combine theirs.

Example::

    from noa_core.geometry import masks
    mask = masks.threshold_mask(volume, 0.02, extend=3, width=6)   # float64, volume.shape
    ball = masks.sphere((64, 64, 64), radius=20, width=5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import ndimage

from noa_core.errors import ParameterError, ShapeError

__all__ = ["squared_distances", "binary", "extended", "soft_edge", "threshold_mask", "raised_crown", "sphere",
           "cylinder"]


def _check_rank(shape: Sequence[int], what: str, ranks: tuple[int, ...] = (2, 3)) -> None:
    if len(shape) not in ranks:
        raise ShapeError(f"{what} of shape {tuple(shape)}: give one image (H, W) or one volume (D, H, W)")


def squared_distances(target: np.ndarray) -> np.ndarray:
    """The squared Euclidean distance (pixels², float64, exact integers) from every voxel of ``target``'s
    box to the nearest True voxel of ``target`` (0 on those voxels); ``target`` must hold a True voxel."""
    # The nearest True voxel of each voxel (scipy's feature transform), then the squared offsets summed
    # axis by axis: less memory than scipy's own distances (which it computes from the same indices).
    nearest = np.empty((target.ndim, *target.shape), np.int32)
    ndimage.distance_transform_edt(~target, return_distances=False, return_indices=True, indices=nearest)
    total = np.zeros(target.shape, np.float64)
    for axis, n in enumerate(target.shape):
        place = np.arange(n, dtype=np.int32).reshape([-1 if a == axis else 1 for a in range(target.ndim)])
        offset = np.subtract(nearest[axis], place, out=nearest[axis])
        total += np.square(offset, dtype=np.float64)  # in float64: the square of a long axis overflows int32
    return total


def binary(values: np.ndarray, threshold: float) -> np.ndarray:
    """True where ``values >= threshold``, compared in float64 (RELION compares in double precision)."""
    return np.greater_equal(values, np.float64(threshold))


def _around(mask: np.ndarray, margin: int) -> tuple[slice, ...]:
    """The bounding box of ``mask``'s True voxels grown by ``margin`` pixels on every side, within the box.

    Distances to True voxels are exact inside it (every True voxel lies within), and every voxel outside it
    is more than ``margin`` pixels from all of them: the distance transforms run there alone, a particle's
    neighbourhood rather than the whole box."""
    region = []
    for axis, n in enumerate(mask.shape):
        others = tuple(a for a in range(mask.ndim) if a != axis)
        where = np.flatnonzero(mask.any(axis=others))
        region.append(slice(max(0, int(where[0]) - margin), min(n, int(where[-1]) + margin + 1)))
    return tuple(region)


def extended(mask: np.ndarray, pixels: float) -> np.ndarray:
    """The binary ``mask`` grown by ``pixels`` (> 0: every voxel nearer than ``pixels`` to a True voxel
    becomes True) or shrunk (< 0: every True voxel nearer than ``-pixels`` to a False one becomes False).
    Nearer is strictly: squared distance < pixels², as RELION's autoMask."""
    limit = pixels * pixels
    out = mask.copy()
    if pixels > 0 and mask.any():
        region = _around(mask, math.ceil(pixels))
        out[region] |= squared_distances(mask[region]) < limit
    elif pixels < 0 and not mask.all():
        # One layer of False voxels around the True ones holds, for each True voxel, a False voxel nearer
        # than any beyond it.
        region = _around(mask, 1)
        inside = mask[region]
        out[region] &= ~(squared_distances(~inside) < limit)
    return out


def soft_edge(mask: np.ndarray, width: float) -> np.ndarray:
    """The binary ``mask`` as float64 with a raised-cosine edge ``width`` pixels wide outside it: a voxel
    at distance ``d < width`` from the nearest True voxel gets ``0.5 + 0.5 cos(pi d / width)``, as
    RELION's autoMask (for widths up to 99.99 pixels: beyond, RELION's search caps d at sqrt(9999))."""
    values = mask.astype(np.float64)
    if width > 0 and mask.any():
        region = _around(mask, math.ceil(width))
        d2 = squared_distances(mask[region])
        edge = (d2 < width * width) & ~mask[region]
        part = values[region]
        part[edge] = 0.5 + 0.5 * np.cos(np.pi * np.sqrt(d2[edge]) / width)
    return values


def threshold_mask(values: np.ndarray, threshold: float, *, extend: float = 0.0, width: float = 0.0,
                   what: str = "the map") -> np.ndarray:
    """RELION's soft mask of ``values`` (one image or volume): True at ``values >= threshold``,
    :func:`extended` by ``extend`` pixels (negative shrinks), then a :func:`soft_edge` ``width`` pixels
    wide; float64. A threshold no value reaches, or a shrink that leaves nothing, would give an empty
    mask: ParameterError (on ``threshold`` or ``extend``), the message naming ``what``."""
    _check_rank(values.shape, what)
    if not width >= 0:
        raise ParameterError(f"{width:g} pixels: a soft edge is 0 pixels wide or more", "soft_edge")
    inside = binary(values, threshold)
    if not inside.any():
        largest = float(np.nanmax(values)) if values.size and not np.isnan(values).all() else float("nan")
        raise ParameterError(f"{threshold:g}: no value of {what} reaches it (the largest is {largest:.6g}); the mask "
                             "would be empty: give a lower threshold", "threshold")
    inside = extended(inside, extend)
    if not inside.any():
        raise ParameterError(f"{extend:g}: shrinking the mask of {what} at threshold {threshold:g} by {-extend:g} "
                             "pixels leaves nothing: shrink less or lower the threshold", "extend")
    return soft_edge(inside, width)


def raised_crown(distance: np.ndarray, radius: float, width: float) -> np.ndarray:
    """1 where ``distance < radius``, ``0.5 - 0.5 cos(pi (radius + width - d) / width)`` where ``radius <=
    d < radius + width``, 0 beyond (float64): the outer edge of RELION's raisedCrownMask, transcribed (so a
    voxel at exactly ``radius`` is 1 with an edge, 0 without)."""
    outer = radius + width
    values = (distance < radius).astype(np.float64)
    if width > 0:
        edge = (distance >= radius) & (distance < outer)
        values[edge] = 0.5 - 0.5 * np.cos(np.pi * (outer - distance[edge]) / width)
    return values


def _centred(n: int) -> np.ndarray:
    """Each index's offset from the box centre ``n // 2`` (RELION's origin), float64."""
    return np.arange(n, dtype=np.float64) - n // 2


def sphere(shape: Sequence[int], radius: float, width: float = 0.0) -> np.ndarray:
    """A ball (a disc for an image) of ``radius`` pixels about the box centre ``n // 2`` of each axis with a
    raised-cosine edge ``width`` pixels wide beyond it (:func:`raised_crown`), float64 of ``shape``:
    ``relion_mask_create --denovo --box_size N --outer_radius R --width_soft_edge W`` for a cube."""
    _check_rank(shape, "a sphere")
    squared = sum(np.square(_centred(n)).reshape([-1 if a == axis else 1 for a in range(len(shape))])
                  for axis, n in enumerate(shape))
    return raised_crown(np.sqrt(np.broadcast_to(squared, tuple(shape))), radius, width)


def cylinder(shape: Sequence[int], radius: float, height: float | None = None, width: float = 0.0) -> np.ndarray:
    """A cylinder about the Z (depth) axis through the box centre ``n // 2`` of each axis, float64 of the
    volume's ``shape`` (D, H, W): :func:`raised_crown` of the distance ``sqrt(y² + x²)`` from the axis with
    ``radius`` pixels, and, when ``height`` (pixels) is given, of ``|z|`` with ``height / 2``: the lower of
    the two, as RELION's helical masks (softMaskOutsideMapForHelix) combine a radial and a second edge. The
    edges are ``width`` pixels wide; without ``height`` the cylinder runs through the whole box."""
    _check_rank(shape, "a cylinder", (3,))
    depth, rows, columns = shape
    across = np.sqrt(np.square(_centred(rows))[:, None] + np.square(_centred(columns))[None, :])
    radial = raised_crown(across, radius, width)[None]
    if height is None:
        return np.ascontiguousarray(np.broadcast_to(radial, tuple(shape)))
    axial = raised_crown(np.abs(_centred(depth)), height / 2, width)[:, None, None]
    return np.minimum(radial, axial)
