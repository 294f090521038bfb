"""Element types: scalars, and vectors and matrices of scalars.

An element type is a NumPy dtype. Scalars are the plain dtypes below. A vector or matrix element
is a NumPy *subarray* dtype, e.g. ``matrix('float64', 4, 4)`` is ``dtype(('<f8', (4, 4)))``: an
array of n such matrices has BDHW shape ``(n, 1, 1, 1)`` and ``element_shape`` ``(4, 4)``. The
element shape is never part of the BDHW shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from noa_core.errors import DTypeError

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

SCALAR_TYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(name)
    for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)
SCALAR_NAMES = tuple(dt.name for dt in SCALAR_TYPES)


def scalar_dtype(value) -> np.dtype:
    """A supported scalar dtype from a name, a NumPy type or a dtype, in native byte order.

    This normalises a *type request*; data in another byte order is converted by the caller.
    """
    try:
        dt = np.dtype(value)
    except TypeError:
        raise DTypeError(f"unknown element type {value!r}; supported: {', '.join(SCALAR_NAMES)}") from None
    if dt.subdtype is not None or dt.fields is not None:
        raise DTypeError(f"element type {dt} is not a scalar type")
    native = dt.newbyteorder("=")
    if native not in SCALAR_TYPES:
        raise DTypeError(f"element type {dt} is not supported; supported: {', '.join(SCALAR_NAMES)}")
    return native


def element_dtype(value) -> np.dtype:
    """A supported element dtype: a scalar, or a subarray dtype of a supported scalar."""
    dt = value if isinstance(value, np.dtype) else None
    if dt is None:
        try:
            dt = np.dtype(value)
        except TypeError:
            raise DTypeError(f"unknown element type {value!r}; supported: {', '.join(SCALAR_NAMES)}") from None
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return np.dtype((scalar_dtype(base), shape))
    return scalar_dtype(dt)


def vector(scalar: DTypeLike, size: int) -> np.dtype:
    """Vector element type, e.g. ``vector('float32', 3)``.

    Args:
        scalar: the type of each component, a supported scalar type.
        size: the number of components, at least 1.

    Returns:
        The subarray dtype ``(scalar, (size,))``.

    Raises:
        DTypeError: ``scalar`` is not a supported scalar type, or ``size`` is below 1.
    """
    if size < 1:
        raise DTypeError(f"vector size {size} must be at least 1")
    return np.dtype((scalar_dtype(scalar), (int(size),)))


def matrix(scalar: DTypeLike, rows: int, cols: int) -> np.dtype:
    """Matrix element type, e.g. ``matrix('float64', 4, 4)`` (noa C++ ``Mat<f64,4,4>``).

    Args:
        scalar: the type of each entry, a supported scalar type.
        rows: the number of rows, at least 1.
        cols: the number of columns, at least 1.

    Returns:
        The subarray dtype ``(scalar, (rows, cols))``.

    Raises:
        DTypeError: ``scalar`` is not a supported scalar type, or a size is below 1.
    """
    if rows < 1 or cols < 1:
        raise DTypeError(f"matrix shape ({rows}, {cols}) must be at least (1, 1)")
    return np.dtype((scalar_dtype(scalar), (int(rows), int(cols))))


def base_of(dt: np.dtype) -> np.dtype:
    """The scalar type inside an element type."""
    return dt.subdtype[0] if dt.subdtype is not None else dt


def element_shape_of(dt: np.dtype) -> tuple[int, ...]:
    """The shape of one element: ``()`` for scalars, ``(n,)`` for vectors, ``(r, c)`` for matrices."""
    return tuple(dt.subdtype[1]) if dt.subdtype is not None else ()


# float16 elements are computed in float32 (numba has no float16 arithmetic on the CPU) and rounded when stored.
FLOAT16_COMPUTE = np.dtype(np.float32)
