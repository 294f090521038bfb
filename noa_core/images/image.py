"""An array with the metadata that describes it, as :func:`noa_core.io.read` gives them and :func:`noa_core.io.write`
takes them.

The operations that change what a header says (the box, the sampling, the sections: resize, bin_voxels, flip, rotx,
sections, average, split, join, fourier_resize, rescale) take an ``(array, metadata)`` pair in place of an array
and then return an :class:`Image`, whose metadata is what the same command writes (each operation's header rule,
which its file operation uses too). So the obvious code writes the right header::

    image = io.read("map.mrc")                      # (array, metadata)
    binned = noa.bin_voxels(image, 2, depth=True)   # Image: twice the pixel size, the origin of the kept voxels
    io.write("binned.mrc", *binned)

An Array alone still gives an Array. Operations on values alone (scale, normalize, filters, symmetrize) keep the
header: write their result with the input's metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

import numpy as np

from noa_core.array import Array, asarray
from noa_core.errors import ShapeError
from noa_core.io.metadata import Metadata

# What the operations that may change a header take: values alone (an Array, or a NumPy array as noa_core.asarray
# takes it), or an (array, metadata) pair (an Image, or what noa_core.io.read returns).
Values: TypeAlias = Array | np.ndarray
ImageInput: TypeAlias = Values | tuple[Values, Metadata]


class Image(NamedTuple):
    """An array and its metadata (a pair: ``array, meta = image``; ``io.write(path, *image)``)."""

    array: Array
    meta: Metadata

    def permute(self, perm: Sequence[int]) -> Image:
        """The array's axes reordered (a view, :meth:`Array.permute`), pixel size and origin following them.

        Args:
            perm: a permutation of (0, 1, 2, 3).

        Returns:
            The permuted Image.

        Raises:
            PermutationError: ``perm`` is not a permutation of 0..3.
        """
        return Image(self.array.permute(perm), self.meta.permute(perm))


def split_pair(value) -> tuple[object, Metadata | None]:
    """``(array, metadata)`` of an ``(array, metadata)`` pair (an :class:`Image`, or what :func:`noa_core.io.read`
    returns); ``(value, None)`` for anything else. A pair whose metadata describes another shape than its
    array's is refused: the header derived from it would be wrong."""
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], Metadata)):
        return value, None
    array, meta = value
    shape = asarray(array).shape
    if tuple(meta.shape) != tuple(shape):
        raise ShapeError(f"the metadata describes shape {tuple(meta.shape)}, its array has shape {tuple(shape)}: "
                         "pair an array with the metadata an operation returned with it")
    return array, meta
