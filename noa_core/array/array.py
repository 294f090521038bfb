"""The 4-d BDHW Array: a buffer, an element offset, shape, element strides, dtype and device.

The buffer is a NumPy array on the CPU (a numba device array on CUDA) of shape
``(n, *element_shape)``: one row per element, so element ``e`` is ``buffer[e]`` whatever the
element type. ``offset`` is the index of element ``[0, 0, 0, 0]``. Views share the buffer; every
layout decision is delegated to :mod:`noa_core.array.layout`.

The methods that run kernels (:meth:`Array.copy`, :meth:`~Array.astype`, :meth:`~Array.fill`, the
arithmetic operators, :meth:`~Array.to`, ...) call :class:`ArrayKernels`, which the modules above
this one provide (they import Array, so this module cannot import them): ``noa_core/__init__.py``
installs their loader as :data:`noa_core.providers.array_kernels`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from noa_core import providers
from noa_core.array import dtypes, layout
from noa_core.array.layout import Shape4, Strides4
from noa_core.errors import DeviceError, ReshapeError, ShapeError, StrideError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

DEVICES = ("cpu", "cuda")


def as_device(device: str) -> str:
    name = str(device).lower()
    if name not in DEVICES:
        raise DeviceError(f"unknown device {device!r}; expected 'cpu' or 'cuda'")
    return name


@dataclass(frozen=True)
class ArrayKernels:
    """The functions behind the methods of :class:`Array` that run kernels."""

    copy: Callable[[Array, str], Array]
    permute_copy: Callable[[Array, Sequence[int]], Array]
    astype: Callable[..., Array]  # (array, dtype, *, clamp)
    fill: Callable[[Array, Any], Array]
    arithmetic: Callable[..., Array]  # (name, *operands)
    transfer: Callable[[Array, str], Array]
    device_buffer: Callable[[int, np.dtype], Any]  # (count, dtype): a new buffer on the GPU
    # noa_core.array.interop: DLPack and the CUDA Array Interface (to_dlpack, dlpack_device,
    # cuda_array_interface, foreign_device, asarray_foreign).
    interop: Any = None


_kernels: ArrayKernels | None = None


def _array_kernels() -> ArrayKernels:
    """Loaded at the first method call that needs a kernel, so that importing noa_core skips numba."""
    global _kernels
    if _kernels is None:
        assert providers.array_kernels is not None, "noa_core installs the kernel provider on import"
        _kernels = providers.array_kernels()
    return _kernels


class Array:
    """A 4-d BDHW array. Create one with :func:`empty`, :func:`zeros`, :func:`asarray`, ..."""

    __slots__ = ("__weakref__", "_buffer", "_device", "_dtype", "_offset", "_shape", "_strides")

    def __init__(self, buffer: Any, offset: int, shape: Sequence[int], strides: Sequence[int],
                 dtype: np.dtype, device: str = "cpu") -> None:
        shape4 = layout.as_shape4(shape)
        if type(shape) is not Shape4 and len(tuple(shape)) != 4:
            raise ShapeError(f"Array needs a 4-d shape, got {tuple(shape)}; use noa_core.asarray to pad")
        strides4 = layout.check_strides(shape4, strides)
        extent = layout.memory_extent(shape4, strides4)
        if offset < 0 or (extent and offset + extent > buffer.shape[0]):
            raise StrideError(
                f"shape {shape4} with strides {strides4} at offset {offset} reaches past the end of a "
                f"buffer of {buffer.shape[0]} elements"
            )
        self._buffer = buffer
        self._offset = int(offset)
        self._shape: Shape4 = shape4
        self._strides: Strides4 = strides4
        self._dtype = dtype
        self._device = as_device(device)

    # -- description -----------------------------------------------------------------------------

    @property
    def buffer(self) -> Any:
        """The memory shared by every view: shape ``(n, *element_shape)``."""
        return self._buffer

    @property
    def offset(self) -> int:
        """Index in :attr:`buffer` of element ``[0, 0, 0, 0]``."""
        return self._offset

    @property
    def shape(self) -> Shape4:
        return self._shape

    @property
    def strides(self) -> Strides4:
        """Strides in elements (NumPy counts bytes)."""
        return self._strides

    @property
    def dtype(self) -> np.dtype:
        """The element type; a subarray dtype for vector and matrix elements."""
        return self._dtype

    @property
    def device(self) -> str:
        return self._device

    @property
    def element_shape(self) -> tuple[int, ...]:
        """Shape of one element: ``()`` for scalars, ``(4, 4)`` for 4x4 matrices."""
        return dtypes.element_shape_of(self._dtype)

    @property
    def size(self) -> int:
        """Number of elements (BDHW)."""
        return layout.element_count(self._shape)

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Logical size in bytes: elements times item size (a broadcast view counts every element)."""
        return self.size * self._dtype.itemsize

    @property
    def ndim(self) -> int:
        """3 if D > 1, else 2 if H > 1 and W > 1, else 1; the batch is ignored."""
        return layout.ndim(self._shape)

    @property
    def kind(self) -> str:
        """'image', 'image stack', 'volume' or 'volume stack'."""
        return layout.kind(self._shape)

    @property
    def order(self) -> str:
        """'C', 'F' or 'strided'."""
        return layout.order_of(self._shape, self._strides)

    @property
    def writable(self) -> bool:
        """False for read-only buffers (e.g. memory-mapped inputs) and broadcast views."""
        if layout.is_broadcast(self._shape, self._strides):
            return False
        flags = getattr(self._buffer, "flags", None)
        if isinstance(flags, dict):  # numba's device arrays: a dict of their layout (the simulator's: NumPy's flags)
            return bool(flags.get("WRITEABLE", True))
        return bool(flags is None or flags.writeable)

    def are_contiguous(self, order: str = "C") -> bool:
        """Whether the whole array is packed in ``order``: each dimension has size 1 or the packed stride.

        Args:
            order: 'C' or 'F' (height and width swapped).

        Returns:
            True when the elements fill ``size`` consecutive buffer rows in that order.

        Raises:
            LayoutError: ``order`` is not 'C' or 'F'.
        """
        return layout.are_contiguous(self._shape, self._strides, order)

    def is_contiguous(self, order: str = "C") -> tuple[bool, bool, bool, bool]:
        """Per-dimension contiguity (:func:`noa_core.layout.is_contiguous`).

        Args:
            order: 'C' or 'F' (height and width swapped).

        Returns:
            For each of B, D, H, W, whether it merges with the next inner dimension (size-1 dimensions always
            do, broadcast ones never).

        Raises:
            LayoutError: ``order`` is not 'C' or 'F'.
        """
        return layout.is_contiguous(self._shape, self._strides, order)

    def __repr__(self) -> str:
        element = f", element_shape={self.element_shape}" if self.element_shape else ""
        return (
            f"Array(shape={self._shape}, strides={self._strides}, dtype={dtypes.base_of(self._dtype)}{element}, "
            f"device={self._device}, order={self.order}, kind={self.kind!r})"
        )

    # -- views -------------------------------------------------------------------------------------

    def _view(self, offset: int, shape: Sequence[int], strides: Sequence[int]) -> Array:
        return Array(self._buffer, offset, shape, strides, self._dtype, self._device)

    def permute(self, perm: Sequence[int]) -> Array:
        """A view with the axes reordered: ``out.shape[i] == self.shape[perm[i]]``.

        Args:
            perm: a permutation of (0, 1, 2, 3).

        Returns:
            The view, sharing the buffer.

        Raises:
            PermutationError: ``perm`` is not a permutation of 0..3.
        """
        perm4 = layout.check_permutation(perm)
        return self._view(self._offset, layout.permute(self._shape, perm4), layout.permute(self._strides, perm4))

    def broadcast(self, shape: Sequence[int]) -> Array:
        """A read-only view where size-1 dimensions grow to ``shape`` (stride 0).

        Args:
            shape: the target shape (padded to BDHW); each size equals this array's or this array's is 1.

        Returns:
            The broadcast view, sharing the buffer.

        Raises:
            BroadcastError: a dimension of size above 1 differs from the target's.
        """
        target = layout.as_shape4(shape)
        return self._view(self._offset, target, layout.broadcast_strides(self._shape, self._strides, target))

    def __getitem__(self, key) -> Array:
        """Slicing that keeps 4 dimensions: an integer index leaves a size-1 dimension."""
        offset, shape, strides = layout.slice_view(self._shape, self._strides, key)
        return self._view(self._offset + offset, shape, strides)

    def reshape(self, shape: int | Sequence[int], *, allow_copy: bool = False) -> Array:
        """A view with a new shape (C order over BDHW; one -1 is inferred).

        When the strides do not allow a view, raise ReshapeError, or with ``allow_copy=True`` reshape
        a C-contiguous copy.

        Args:
            shape: the new shape, up to 4 sizes (padded to BDHW), one of which may be -1.
            allow_copy: reshape a copy where a view is impossible.

        Returns:
            The view (or, with ``allow_copy``, a new array) of the new shape.

        Raises:
            ShapeError: the new shape does not hold this array's elements or has more than 4 dimensions.
            ReshapeError: the strides allow no view and ``allow_copy`` is False.
        """
        new_shape = layout.infer_shape(self.size, shape)
        strides = layout.reshape_strides(self._shape, self._strides, new_shape)
        if strides is not None:
            return self._view(self._offset, new_shape, strides)
        if not allow_copy:
            raise ReshapeError(
                f"cannot reshape shape {self._shape} with strides {self._strides} into {new_shape} without "
                "a copy; pass allow_copy=True or copy() first"
            )
        return self.copy("C").reshape(new_shape)

    # -- copies --------------------------------------------------------------------------------------

    def copy(self, order: str = "C") -> Array:
        """A new packed array in 'C' or 'F' order ('K' keeps F for F arrays, C otherwise).

        Args:
            order: 'C', 'F' or 'K'.

        Returns:
            The copy, on this array's device.

        Raises:
            LayoutError: ``order`` is not 'C', 'F' or 'K'.
        """
        return _array_kernels().copy(self, order)

    def permute_copy(self, perm: Sequence[int]) -> Array:
        """A new C-contiguous array holding ``self.permute(perm)`` (cache-blocked, parallel).

        Args:
            perm: a permutation of (0, 1, 2, 3).

        Returns:
            The permuted copy.

        Raises:
            PermutationError: ``perm`` is not a permutation of 0..3.
        """
        return _array_kernels().permute_copy(self, perm)

    def astype(self, dtype: DTypeLike, *, clamp: bool = False) -> Array:
        """A converted copy; ``clamp=True`` clamps to the target range (NaN -> 0 for integers).

        Args:
            dtype: the element type of the copy.
            clamp: clamp values to the target's range instead of a C-style cast.

        Returns:
            The converted copy, in this array's layout order.

        Raises:
            DTypeError: ``dtype`` is not a supported element type.
        """
        return _array_kernels().astype(self, dtype, clamp=clamp)

    def fill(self, value: ArrayLike) -> Array:
        """Set every element to ``value`` in place; returns self.

        Args:
            value: a scalar, or for vector and matrix elements anything of the element's shape.

        Returns:
            This array.
        """
        return _array_kernels().fill(self, value)

    # -- arithmetic (new arrays; result type as numpy.result_type; operands broadcast) ------------

    def _arith(self, name: str, *operands) -> Array:
        if not all(isinstance(x, (Array, int, float, complex, bool, np.generic)) for x in operands):
            return NotImplemented
        return _array_kernels().arithmetic(name, *operands)

    def __add__(self, other) -> Array:
        return self._arith("add", self, other)

    def __radd__(self, other) -> Array:
        return self._arith("add", other, self)

    def __sub__(self, other) -> Array:
        return self._arith("subtract", self, other)

    def __rsub__(self, other) -> Array:
        return self._arith("subtract", other, self)

    def __mul__(self, other) -> Array:
        return self._arith("multiply", self, other)

    def __rmul__(self, other) -> Array:
        return self._arith("multiply", other, self)

    def __truediv__(self, other) -> Array:
        return self._arith("divide", self, other)

    def __rtruediv__(self, other) -> Array:
        return self._arith("divide", other, self)

    def __neg__(self) -> Array:
        return self._arith("negate", self)

    def to(self, device: str) -> Array:
        """This array on ``device`` ('cpu' or 'cuda'): itself if already there, else a copy.

        Args:
            device: 'cpu' or 'cuda'.

        Returns:
            This array, or its copy on ``device`` (packed in its C or F order).

        Raises:
            DeviceError: an unknown device, or CUDA is not available.
        """
        target = as_device(device)
        if target == self._device:
            return self
        return _array_kernels().transfer(self, target)

    # -- NumPy interop -------------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """A NumPy view sharing memory (shape ``(B, D, H, W, *element_shape)``, byte strides).

        Broadcast views come back read-only, like ``numpy.broadcast_to``.
        """
        if self._device != "cpu":
            raise DeviceError(f"array is on {self._device}; call .to('cpu') before viewing it with NumPy")
        buf = self._buffer
        byte_strides = tuple(s * self._dtype.itemsize for s in self._strides) + buf.strides[1:]
        return as_strided(buf[self._offset:], shape=self._shape + buf.shape[1:], strides=byte_strides,
                          writeable=self.writable)

    # -- DLPack and CUDA Array Interface (noa_core.array.interop) -----------------------------------------

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule sharing this array's memory (``numpy.from_dlpack``, ``torch.from_dlpack``,
        ``cupy.from_dlpack``); shape ``(B, D, H, W, *element_shape)``, strides in elements."""
        return _array_kernels().interop.to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device,
                                                  copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(1, 0) on the CPU, (2, device id) on CUDA: DLPack's device types."""
        return _array_kernels().interop.dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict:
        """Version 3 of the CUDA Array Interface (CuPy, PyTorch, numba); AttributeError on the CPU."""
        return _array_kernels().interop.cuda_array_interface(self)

    # -- Python scalars, as NumPy gives them from one element ----------------------------------------

    def item(self) -> Any:
        """The one element of a single-element array as a Python scalar (``float(noa.mean(x))`` too); a
        vector or matrix element comes back as a nested list. ValueError for more than one element, as NumPy."""
        self._check_single(ValueError)
        view = self.to("cpu").numpy().reshape((1, *self.element_shape))[0]
        return view.tolist() if self.element_shape else view.item()

    def _check_single(self, error: type[Exception]) -> None:
        if self.size != 1:
            raise error(f"only single-element arrays convert to Python scalars; shape {self.shape} has "
                        f"{self.size} elements")

    def __float__(self) -> float:
        self._check_single(TypeError)  # NumPy's error for float(), int() and complex() of many elements
        return float(self.item())

    def __int__(self) -> int:
        self._check_single(TypeError)
        return int(self.item())

    def __complex__(self) -> complex:
        self._check_single(TypeError)
        return complex(self.item())

    def __bool__(self) -> bool:
        if self.size != 1:  # NumPy's word for it
            raise ValueError(f"the truth value of an array of shape {self.shape} ({self.size} elements) is "
                             "ambiguous; reduce it first (noa.min, noa.max, noa.sum)")
        return bool(self.item())

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy:
            out = np.array(self.numpy(), dtype=dtype, copy=True)
            return out
        view = self.numpy()
        if dtype is not None and np.dtype(dtype) != view.dtype:
            if copy is False:
                raise ValueError(f"cannot view {view.dtype} as {dtype} without a copy")
            return view.astype(dtype)
        return view

    def _repr_png_(self) -> bytes | None:
        """A PNG picture for notebooks (IPython and Jupyter call this): an image, a stack's first image, or a
        volume's three central slices, longest side 512 pixels, sigma:3 contrast (:mod:`noa_core.pictures.drawing`);
        None (the text repr alone) for an array with no picture (empty, vector elements)."""
        assert providers.png_picture is not None, "noa_core installs the picture provider on import"
        return providers.png_picture(self)


def resolve_copy_order(array: Array, order: str) -> str:
    """'K' keeps F for arrays packed in F order (and not C), C otherwise; 'C' and 'F' pass through."""
    if str(order).upper() == "K":
        return "F" if array.order == "F" else "C"
    return layout.as_order(order)


# ---------------------------------------------------------------------------------------------
# Factories
# ---------------------------------------------------------------------------------------------


def _allocate(count: int, dt: np.dtype) -> np.ndarray:
    return np.empty((count,) + dtypes.element_shape_of(dt), dtype=dtypes.base_of(dt))


def empty(shape: int | Sequence[int], dtype: DTypeLike = "float32", order: str = "C", device: str = "cpu") -> Array:
    """A new uninitialised array, packed in 'C' or 'F' order.

    Args:
        shape: up to 4 sizes, padded on the left to BDHW.
        dtype: the element type (a scalar, vector or matrix type).
        order: 'C' or 'F'.
        device: 'cpu' or 'cuda'.

    Returns:
        The array, its values unset.

    Raises:
        ShapeError: ``shape`` has more than 4 sizes or a negative one.
        DTypeError: ``dtype`` is not a supported element type.
        DeviceError: an unknown device, or CUDA is not available.
    """
    shape4 = layout.as_shape4(shape)
    dt = dtypes.element_dtype(dtype)
    target = as_device(device)
    if target != "cpu":  # allocated on the device: a host array sent over would cost a 1 GiB copy 75 ms on an H200
        buffer = _array_kernels().device_buffer(layout.element_count(shape4), dt)
        return Array(buffer, 0, shape4, layout.strides_for(shape4, order), dt, target)
    buffer = _allocate(layout.element_count(shape4), dt)
    return Array(buffer, 0, shape4, layout.strides_for(shape4, order), dt)


def full(shape: int | Sequence[int], value: ArrayLike, dtype: DTypeLike = "float32", order: str = "C",
         device: str = "cpu") -> Array:
    """A new array, packed in 'C' or 'F' order, every element ``value``.

    Args:
        shape: up to 4 sizes, padded on the left to BDHW.
        value: a scalar, or for vector and matrix elements anything of the element's shape.
        dtype: the element type (a scalar, vector or matrix type).
        order: 'C' or 'F'.
        device: 'cpu' or 'cuda'.

    Returns:
        The filled array.

    Raises:
        ShapeError: ``shape`` has more than 4 sizes or a negative one.
        DTypeError: ``dtype`` is not a supported element type.
        DeviceError: an unknown device, or CUDA is not available.
    """
    out = empty(shape, dtype, order)
    out.buffer[...] = value
    return out if as_device(device) == "cpu" else out.to(device)


def zeros(shape: int | Sequence[int], dtype: DTypeLike = "float32", order: str = "C", device: str = "cpu") -> Array:
    """A new array, packed in 'C' or 'F' order, every element 0.

    Args:
        shape: up to 4 sizes, padded on the left to BDHW.
        dtype: the element type (a scalar, vector or matrix type).
        order: 'C' or 'F'.
        device: 'cpu' or 'cuda'.

    Returns:
        The filled array.

    Raises:
        ShapeError: ``shape`` has more than 4 sizes or a negative one.
        DTypeError: ``dtype`` is not a supported element type.
        DeviceError: an unknown device, or CUDA is not available.
    """
    return full(shape, 0, dtype, order, device)


def ones(shape: int | Sequence[int], dtype: DTypeLike = "float32", order: str = "C", device: str = "cpu") -> Array:
    """A new array, packed in 'C' or 'F' order, every element 1.

    Args:
        shape: up to 4 sizes, padded on the left to BDHW.
        dtype: the element type (a scalar, vector or matrix type).
        order: 'C' or 'F'.
        device: 'cpu' or 'cuda'.

    Returns:
        The filled array.

    Raises:
        ShapeError: ``shape`` has more than 4 sizes or a negative one.
        DTypeError: ``dtype`` is not a supported element type.
        DeviceError: an unknown device, or CUDA is not available.
    """
    return full(shape, 1, dtype, order, device)


def arange(shape: int | Sequence[int], start: float = 0, step: float = 1, dtype: DTypeLike = "float32",
           device: str = "cpu") -> Array:
    """A C-contiguous array whose elements, in C order, are ``start, start + step, ...``.

    Args:
        shape: up to 4 sizes, padded on the left to BDHW.
        start: the first value.
        step: the difference between consecutive values (computed in float64, or int64 for integer types, then
            converted to ``dtype``).
        dtype: a scalar element type.
        device: 'cpu' or 'cuda'.

    Returns:
        The array.

    Raises:
        ShapeError: ``shape`` has more than 4 sizes or a negative one.
        DTypeError: ``dtype`` is not a supported scalar type.
        DeviceError: an unknown device, or CUDA is not available.
    """
    shape4 = layout.as_shape4(shape)
    dt = dtypes.scalar_dtype(dtype)
    count = layout.element_count(shape4)
    counted = np.dtype(np.float64 if dt.kind in "fc" else np.int64)
    buffer = (start + step * np.arange(count, dtype=counted)).astype(dt)
    out = Array(buffer, 0, shape4, layout.strides_for(shape4, "C"), dt)
    return out if as_device(device) == "cpu" else out.to(device)


def asarray(obj: Any, dtype: DTypeLike | None = None, device: str | None = None) -> Array:
    """An Array from an Array, a NumPy array, a CuPy/PyTorch/JAX array or anything NumPy accepts.

    NumPy arrays are shared, not copied, when their dtype is supported, in native byte order and
    equal to ``dtype`` (if given): byte strides become element strides. Lower-rank input is padded on
    the left to BDHW. With a vector or matrix ``dtype``, the trailing dimensions of the input are the
    element shape. Objects with ``__cuda_array_interface__`` or ``__dlpack__`` (CuPy, PyTorch, JAX)
    are shared where they live (CUDA memory gives a CUDA array) unless ``device`` says otherwise;
    everything else, Arrays included, goes to ``device`` (default 'cpu').

    Args:
        obj: an Array, a NumPy array, an object with ``__cuda_array_interface__`` or ``__dlpack__``, or anything
            ``numpy.asarray`` takes, of at most 4 dimensions (plus the element's).
        dtype: the element type (default: the input's, in native byte order).
        device: 'cpu' or 'cuda' (default: where the input lives; 'cpu' for host objects).

    Returns:
        The Array, sharing the input's memory where it can.

    Raises:
        ShapeError: more than 4 dimensions, or trailing dimensions that are not ``dtype``'s element shape.
        StrideError: strides that are not multiples of the element size.
        DTypeError: an unsupported element type.
        DeviceError: an unknown device, or CUDA is not available.
    """
    if isinstance(obj, Array):
        device = "cpu" if device is None else device
        if dtype is not None and dtypes.element_dtype(dtype) != obj.dtype:
            return asarray(obj.to("cpu").numpy(), dtype, device)
        return obj if obj.device == as_device(device) else obj.to(device)
    if not isinstance(obj, np.ndarray) and (hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")):
        interop = _array_kernels().interop
        if interop.foreign_device(obj) is not None:
            return interop.asarray_foreign(obj, dtype, device)
    device = "cpu" if device is None else device

    x = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
    if dtype is None:
        dt = dtypes.element_dtype(x.dtype.newbyteorder("=") if x.dtype.byteorder not in "=|" else x.dtype)
    else:
        dt = dtypes.element_dtype(dtype)
    base, element_shape = dtypes.base_of(dt), dtypes.element_shape_of(dt)
    if x.dtype != base:
        x = x.astype(base)  # a conversion (or a byte swap) cannot be shared
    if element_shape:
        if x.shape[x.ndim - len(element_shape):] != element_shape or x.ndim < len(element_shape):
            raise ShapeError(f"array of shape {x.shape} does not end with the element shape {element_shape} of {dt}")
        if x.strides[x.ndim - len(element_shape):] != np.empty(element_shape, base).strides:
            x = np.ascontiguousarray(x)  # elements are stored packed; a strided element needs a copy
    outer_ndim = x.ndim - len(element_shape)
    shape4 = layout.as_shape4(x.shape[:outer_ndim])
    itemsize = dt.itemsize
    byte_strides = (0,) * (4 - outer_ndim) + x.strides[:outer_ndim]
    misaligned = [s for s in byte_strides if s % itemsize]
    if misaligned:
        raise StrideError(
            f"NumPy strides {x.strides} (bytes) are not multiples of the {itemsize}-byte element size of {dt}; "
            "copy the array first (numpy.ascontiguousarray)"
        )
    strides4 = layout.check_strides(shape4, tuple(s // itemsize for s in byte_strides))
    strides4 = layout.Strides4(s if n != 1 else p for n, s, p in zip(shape4, strides4, layout.strides_for(shape4)))
    extent = layout.memory_extent(shape4, strides4)
    buffer = as_strided(x, shape=(extent,) + element_shape, strides=(itemsize,) + x.strides[outer_ndim:],
                        writeable=x.flags.writeable)
    out = Array(buffer, 0, shape4, strides4, dt)
    return out if as_device(device) == "cpu" else out.to(device)
