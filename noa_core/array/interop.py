"""Zero-copy exchange with other array libraries: DLPack and the CUDA Array Interface.

- :func:`from_dlpack` (``noa.from_dlpack``) and :func:`noa_core.array.asarray` take any object
  with ``__dlpack__`` (NumPy, PyTorch, JAX, CuPy) or ``__cuda_array_interface__`` (CuPy, PyTorch,
  numba) and share its memory: host memory becomes a CPU Array, CUDA memory a CUDA Array.
- :class:`~noa_core.array.Array` exports itself through ``__dlpack__``/``__dlpack_device__``
  (``numpy.from_dlpack(a)``, ``torch.from_dlpack(a)``, ``cupy.from_dlpack(a)``) and, on CUDA,
  ``__cuda_array_interface__`` (``cupy.asarray(a)``, ``torch.as_tensor(a, device='cuda')``).

Other libraries count strides in elements (DLPack) or bytes (NumPy, CUDA Array Interface); noa's
element strides are converted both ways. An Array is exported with shape ``(B, D, H, W,
*element_shape)``. Negative strides are refused, as everywhere in noa; a read-only source (a
memory-mapped file, a broadcast view) is exported with DLPack 1.0's read-only flag.

Host memory goes through NumPy's own DLPack code. CUDA memory is described with the structures of
``dlpack.h`` (v1.0, and the unversioned v0.x capsule for older consumers) written with ctypes
here, since numba-cuda's device arrays export no DLPack (numba-cuda reads DLPack, through
cuda.core, only for kernel arguments); the same code handles host memory, which is how it is
tested without a GPU (against ``numpy.from_dlpack`` and NumPy's capsules). Kernels synchronize
before returning, so exported memory is always ready: the consumer's stream needs no wait.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from noa_core.array import Array, as_device, asarray, devices, dtypes, layout
from noa_core.errors import DeviceError, DTypeError, ShapeError, StrideError

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

# DLDeviceType values (dlpack.h).
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA pinned host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
                 10: "ROCm", 11: "ROCm pinned host", 13: "CUDA managed", 14: "oneAPI"}
# DLDataTypeCode values.
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_CODES = {"i": _INT, "u": _UINT, "f": _FLOAT, "c": _COMPLEX, "b": _BOOL}
_KINDS = {code: kind for kind, code in _CODES.items()}
READ_ONLY, IS_COPIED = 1, 2  # DLPACK_FLAG_BITMASK_*
VERSION = (1, 0)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    """The unversioned (DLPack < 1.0) capsule content, named 'dltensor'."""

    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """The DLPack 1.0 capsule content, named 'dltensor_versioned' (it carries the read-only flag)."""

    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The capsule destructor gets the dying capsule: a raw pointer, never a Python reference to it.
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_pointer_of_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

# Capsule names: CPython keeps the pointer it is given, so they must outlive every capsule.
_NAME, _NAME_VERSIONED = b"dltensor", b"dltensor_versioned"
_USED = {_NAME: b"used_dltensor", _NAME_VERSIONED: b"used_dltensor_versioned"}

_LOCK = threading.Lock()
# Exported tensors: struct address -> (struct, shape and strides arrays, owner of the memory).
_EXPORTS: dict[int, tuple] = {}


@_DELETER
def _release_export(address: int) -> None:
    """The managed tensor's deleter: the consumer is done with the memory (any thread, GIL held)."""
    with _LOCK:
        _EXPORTS.pop(address, None)


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: int) -> None:
    """A capsule nobody consumed (still named 'dltensor...') frees its tensor; a consumed one was
    renamed 'used_...' and its consumer calls the deleter."""
    for name in (_NAME_VERSIONED, _NAME):
        if _api.PyCapsule_IsValid(capsule, name):
            address = _pointer_of_raw(capsule, name)
            if address:
                _release_export(address)
            return


_DESTRUCTOR_ADDRESS = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


# -- export ----------------------------------------------------------------------------------


def _element_layout(array: Array) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and strides in units of the base type: BDHW, then the packed element dimensions."""
    element = array.element_shape
    units = int(np.prod(element, dtype=np.int64)) if element else 1
    inner = tuple(int(s) for s in np.empty(element, np.int8).strides) if element else ()
    return (tuple(array.shape) + element, tuple(s * units for s in array.strides) + inner)


def dl_datatype(dtype: np.dtype) -> DLDataType:
    """The DLPack type of a NumPy scalar type; DTypeError when DLPack has none."""
    kind = _CODES.get(dtype.kind)
    if kind is None or dtype.byteorder == ">":
        raise DTypeError(f"element type {dtype} has no DLPack equivalent")
    return DLDataType(kind, dtype.itemsize * 8, 1)


def capsule(pointer: int, device: tuple[int, int], dtype: np.dtype, shape: Sequence[int], strides: Sequence[int],
            owner: Any, *, read_only: bool, versioned: bool) -> Any:
    """A DLPack capsule describing memory at ``pointer`` (``strides`` in elements of ``dtype``).

    ``owner`` is kept alive until the consumer calls the deleter (or the capsule dies unconsumed).
    A read-only tensor needs DLPack 1.0 to say so; BufferError otherwise, as NumPy does.
    """
    if read_only and not versioned:
        raise BufferError("a read-only array can only be exported with DLPack 1.0 (which marks it read-only); "
                          "the consumer asked for an older version")
    ndim = len(shape)
    shape_array = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_array = (ctypes.c_int64 * max(ndim, 1))(*strides)
    tensor = DLTensor(pointer or None, DLDevice(*device), ndim, dl_datatype(dtype),
                      ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64)),
                      ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64)), 0)
    managed: DLManagedTensorVersioned | DLManagedTensor
    if versioned:
        managed = DLManagedTensorVersioned(DLPackVersion(*VERSION), None, _release_export,
                                           READ_ONLY if read_only else 0, tensor)
        name = _NAME_VERSIONED
    else:
        managed = DLManagedTensor(tensor, None, _release_export)
        name = _NAME
    address = ctypes.addressof(managed)
    with _LOCK:
        _EXPORTS[address] = (managed, shape_array, strides_array, owner)
    return _api.PyCapsule_New(address, name, _DESTRUCTOR_ADDRESS)


def export_count() -> int:
    """Tensors exported and not yet released by their consumers (tests check that none leak)."""
    return len(_EXPORTS)


def device_pointer(buffer: Any) -> int:
    """Address of the first element of a CUDA buffer (the host address under the simulator)."""
    interface = getattr(buffer, "__cuda_array_interface__", None)
    if interface is not None:
        return interface["data"][0]
    return buffer._ary.ctypes.data  # numba's simulator: device arrays wrap host NumPy arrays


def cuda_device_id() -> int:
    from numba import cuda

    try:
        return int(cuda.get_current_device().id)
    except Exception:  # the simulator's fake device may not number itself
        return 0


def dlpack_device(array: Array) -> tuple[int, int]:
    return (CUDA, cuda_device_id()) if array.device == "cuda" else (CPU, 0)


def to_dlpack(array: Array, *, stream: Any = None, max_version: tuple[int, int] | None = None,
              dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """``Array.__dlpack__``: a capsule sharing ``array``'s memory (a copy only with ``copy=True``)."""
    if array.device == "cpu":
        kwargs = {"stream": stream, "dl_device": dl_device, "copy": copy}
        if max_version is not None:
            kwargs["max_version"] = tuple(max_version)
        return array.numpy().__dlpack__(**kwargs)
    here = dlpack_device(array)
    asked = None if dl_device is None else tuple(dl_device)
    if asked is not None and asked != here:
        if asked[0] == CPU and copy is not False:
            return to_dlpack(array.to("cpu"), max_version=max_version, copy=None)
        raise BufferError(f"the array lives on CUDA device {here[1]}; exporting it to device {asked} "
                          "needs copy=True")
    if copy:
        array = array.copy("K")
    shape, strides = _element_layout(array)
    pointer = device_pointer(array.buffer) + array.offset * array.itemsize
    versioned = max_version is not None and tuple(max_version) >= VERSION
    return capsule(pointer, here, dtypes.base_of(array.dtype), shape, strides, array,
                   read_only=not array.writable, versioned=versioned)


def cuda_array_interface(array: Array) -> dict:
    """``Array.__cuda_array_interface__`` (version 3) of a CUDA array: byte strides, no stream to wait on."""
    if array.device != "cuda":
        raise AttributeError("__cuda_array_interface__ is only defined for CUDA arrays; this one lives on "
                             f"{array.device}")
    shape, strides = _element_layout(array)
    base = dtypes.base_of(array.dtype)
    pointer = device_pointer(array.buffer) + array.offset * array.itemsize if array.size else 0
    return {"shape": shape, "strides": tuple(s * base.itemsize for s in strides), "typestr": base.str,
            "data": (pointer, not array.writable), "version": 3, "stream": None}


# -- import ----------------------------------------------------------------------------------


class _Imported:
    """Owns a consumed DLPack tensor: calls its deleter when the last Array using it is gone."""

    def __init__(self, address: int, deleter) -> None:
        self.address = address
        self.deleter = deleter

    def __del__(self) -> None:
        if self.deleter:
            self.deleter(self.address)


def read_capsule(capsule_object: Any) -> tuple[int, tuple[int, int], np.dtype, tuple, tuple | None, bool, Any]:
    """Consume a DLPack capsule: (data pointer, device, dtype, shape, element strides or None for
    C order, read-only, owner). The capsule is renamed 'used_...'; the owner calls the deleter."""
    name = _api.PyCapsule_GetName(capsule_object)
    managed: DLManagedTensorVersioned | DLManagedTensor
    if name == _NAME_VERSIONED:
        name = _NAME_VERSIONED
        managed = DLManagedTensorVersioned.from_address(_api.PyCapsule_GetPointer(capsule_object, name))
        if managed.version.major != VERSION[0]:
            raise BufferError(f"DLPack version {managed.version.major}.{managed.version.minor} is not supported "
                              f"(noa reads {VERSION[0]}.x)")
        read_only = bool(managed.flags & READ_ONLY)
    elif name == _NAME:
        name = _NAME
        managed = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(capsule_object, name))
        read_only = False
    else:
        raise BufferError(f"not an unused DLPack capsule (its name is {name!r})")
    tensor = managed.dl_tensor
    address = ctypes.addressof(managed)
    deleter = managed.deleter if ctypes.cast(managed.deleter, ctypes.c_void_p).value else None
    _api.PyCapsule_SetName(capsule_object, _USED[name])
    owner = _Imported(address, deleter)
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else None
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    if lanes != 1 or code not in _KINDS or bits % 8:
        raise DTypeError(f"DLPack element type (code {code}, {bits} bits, {lanes} lanes) has no NumPy equivalent")
    dtype = np.dtype(f"{_KINDS[code]}{bits // 8}") if code != _BOOL else np.dtype(np.bool_)
    pointer = (tensor.data or 0) + tensor.byte_offset
    return pointer, (tensor.device.device_type, tensor.device.device_id), dtype, shape, strides, read_only, owner


def _host_view(pointer: int, dtype: np.dtype, shape: tuple, strides: tuple, read_only: bool, owner: Any) -> np.ndarray:
    """A NumPy view of host memory described by a DLPack tensor (``strides`` in elements)."""
    extent = layout_extent(shape, strides)
    memory = (ctypes.c_char * (extent * dtype.itemsize)).from_address(pointer) if extent else bytearray()
    flat = np.frombuffer(memory, dtype=dtype)  # type: ignore[arg-type]  # a ctypes array is a buffer
    if not isinstance(memory, bytearray):
        memory.owner = owner  # type: ignore[attr-defined]  # the memory stays valid while any view of it lives
    view = np.lib.stride_tricks.as_strided(flat, shape=shape, strides=[s * dtype.itemsize for s in strides],
                                           writeable=not read_only and bool(extent))
    return view


def layout_extent(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements spanned by a tensor of ``shape`` and element ``strides``; StrideError on negative ones."""
    if any(n == 0 for n in shape):
        return 0
    if any(s < 0 for n, s in zip(shape, strides) if n > 1):
        raise StrideError(f"strides {tuple(strides)} for shape {tuple(shape)} are negative; noa does not support "
                          "negative strides (make a contiguous copy first)")
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def _packed_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def _device_buffer(pointer: int, count: int, dtype: np.dtype, element_shape: tuple, owner: Any, stream: Any):
    """A 1-D numba device array of ``count`` elements at a CUDA ``pointer`` (kept alive by ``owner``)."""
    import numba
    from numba import cuda

    shape = (count,) + element_shape
    if count == 0:  # an empty array may carry a null pointer, which numba refuses to wrap
        return cuda.device_array(shape, dtype)
    if numba.config.ENABLE_CUDASIM:  # device memory is host memory there
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        host = _host_view(pointer, dtype, shape, _packed_strides(shape), False, owner)
        return FakeCUDAArray(host)
    interface = {"shape": shape, "strides": None, "typestr": dtype.str, "data": (pointer, False), "version": 3,
                 "stream": stream}
    return cuda.from_cuda_array_interface(interface, owner=owner, sync=True)


def cuda_array(pointer: int, dtype: np.dtype, shape: tuple, strides: tuple | None, owner: Any, *,
               element=None, stream: Any = None) -> Array:
    """A CUDA Array over device memory described by a pointer, NumPy-style ``shape`` and element
    ``strides`` (None: C order); ``element`` is the vector/matrix element type its trailing
    dimensions make, if any."""
    devices.require_cuda()
    strides = _packed_strides(shape) if strides is None else tuple(strides)
    dt = dtypes.element_dtype(element) if element is not None else dtypes.element_dtype(dtype)
    base, element_shape = dtypes.base_of(dt), dtypes.element_shape_of(dt)
    if base != dtype:
        raise DTypeError(f"CUDA memory of {dtype} cannot be shared as {dt}; convert it on the GPU first")
    outer = len(shape) - len(element_shape)
    if outer < 0 or tuple(shape[outer:]) != element_shape:
        raise ShapeError(f"array of shape {tuple(shape)} does not end with the element shape {element_shape} of {dt}")
    if any(n > 1 and s != p for n, s, p in zip(shape[outer:], strides[outer:], _packed_strides(element_shape))):
        raise StrideError(f"the elements of {dt} must be packed in memory to be shared; got strides {strides}")
    if outer > 4:
        raise ShapeError(f"an array of {outer} dimensions does not fit BDHW (at most 4)")
    units = int(np.prod(element_shape, dtype=np.int64)) if element_shape else 1
    outer_strides = []
    for n, s in zip(shape[:outer], strides[:outer]):
        if n > 1 and s % units:
            raise StrideError(f"strides {strides} do not step by whole elements of {dt}")
        outer_strides.append(s // units if n > 1 else 0)
    shape4 = layout.as_shape4(tuple(shape[:outer]))
    strides4 = (0,) * (4 - outer) + tuple(outer_strides)
    extent = layout_extent(shape4, strides4)
    # Size-1 dimensions take the packed stride, as asarray gives NumPy arrays.
    strides4 = tuple(s if n != 1 else p for n, s, p in zip(shape4, strides4, layout.strides_for(shape4)))
    buffer = _device_buffer(pointer, extent, base, element_shape, owner, stream)
    return Array(buffer, 0, shape4, strides4, dt, "cuda")


def from_cuda_array_interface(obj: Any, element=None) -> Array:
    """A CUDA Array sharing the memory of an object with ``__cuda_array_interface__`` (CuPy, PyTorch, numba)."""
    interface = obj.__cuda_array_interface__
    if interface.get("mask") is not None:
        raise DTypeError("masked CUDA arrays (__cuda_array_interface__ with a mask) are not supported")
    dtype = np.dtype(interface["typestr"])
    if dtype.byteorder == ">" or dtype.hasobject or dtype.kind not in "biufc":
        raise DTypeError(f"CUDA element type {interface['typestr']} is not supported")
    shape = tuple(int(n) for n in interface["shape"])
    byte_strides = interface.get("strides")
    strides = None
    if byte_strides is not None:
        if any(s % dtype.itemsize for s in byte_strides):
            raise StrideError(f"byte strides {tuple(byte_strides)} are not multiples of the {dtype.itemsize}-byte "
                              f"element size of {dtype}")
        strides = tuple(int(s) // dtype.itemsize for s in byte_strides)
    pointer = int(interface["data"][0] or 0)
    return cuda_array(pointer, dtype, shape, strides, obj, element=element, stream=interface.get("stream"))


def _dlpack_capsule(obj: Any, device: tuple[int, int]) -> Any:
    """Ask ``obj`` for a DLPack 1.0 capsule (older producers: unversioned) on ``device``'s stream."""
    stream = 1 if device[0] in (CUDA, CUDA_MANAGED) else None  # CUDA's legacy default stream, numba's
    try:
        return obj.__dlpack__(stream=stream, max_version=VERSION)
    except TypeError:  # a producer older than DLPack 1.0 knows no max_version
        return obj.__dlpack__(stream=stream)


def from_dlpack(obj: Any, *, dtype: DTypeLike | None = None) -> Array:
    """An Array sharing the memory of any object with ``__dlpack__`` (NumPy, PyTorch, JAX, CuPy...).

    Host memory gives a CPU Array, CUDA memory a CUDA Array, never a copy; ``dtype`` (a vector or
    matrix element type) makes the trailing dimensions one element. Strides are converted to
    element strides; negative strides are refused (StrideError), and so is memory on a device noa
    does not run on (DeviceError).

    Args:
        obj: an Array, or any object with ``__dlpack__`` and ``__dlpack_device__``.
        dtype: a vector or matrix element type whose shape the trailing dimensions are (default: scalars).

    Returns:
        The Array sharing ``obj``'s memory.

    Raises:
        TypeError: ``obj`` does not support DLPack.
        DTypeError: ``dtype``'s scalar type is not the data's (sharing cannot convert).
        StrideError: negative strides, or strides that are not multiples of the element size.
        ShapeError: more than 4 dimensions, or trailing dimensions that are not ``dtype``'s element shape.
        DeviceError: memory on a device noa does not run on, or on another CUDA device than noa's.
    """
    if isinstance(obj, Array):
        if dtype is not None and dtypes.element_dtype(dtype) != obj.dtype:
            raise DTypeError(f"from_dlpack shares memory; it cannot make {obj.dtype} into {dtype}")
        return obj
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"{type(obj).__name__} does not support DLPack (no __dlpack__ method)")
    device = tuple(obj.__dlpack_device__())
    if device[0] in (CPU, CUDA_HOST):
        view = np.from_dlpack(obj)
        if dtype is not None and dtypes.base_of(dtypes.element_dtype(dtype)) != view.dtype:
            raise DTypeError(f"from_dlpack shares memory; it cannot make {view.dtype} into {dtype}")
        return asarray(view, dtype)
    if device[0] in (CUDA, CUDA_MANAGED):
        devices.require_cuda()
        if device[1] != cuda_device_id():
            raise DeviceError(f"the array lives on CUDA device {device[1]}; noa runs on device {cuda_device_id()} "
                              "(select it with numba.cuda.select_device)")
        pointer, _, base, shape, strides, _, owner = read_capsule(_dlpack_capsule(obj, device))
        return cuda_array(pointer, base, shape, strides, owner, element=dtype)
    name = _DEVICE_NAMES.get(device[0], f"type {device[0]}")
    raise DeviceError(f"the array lives on a {name} device; noa shares CPU and CUDA memory only")


def foreign_device(obj: Any) -> str | None:
    """'cuda' or 'cpu' for objects :func:`asarray` shares through CUDA or DLPack; None otherwise."""
    if isinstance(obj, (Array, np.ndarray)):
        return None
    if hasattr(obj, "__cuda_array_interface__"):  # a property may raise AttributeError for host memory
        return "cuda"
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        try:
            kind = obj.__dlpack_device__()[0]
        except Exception:  # a producer that cannot say: let NumPy try
            return None
        return "cuda" if kind in (CUDA, CUDA_MANAGED) else "cpu"
    return None


def asarray_foreign(obj: Any, dtype, device: str | None) -> Array:
    """``asarray`` for objects with ``__cuda_array_interface__`` or DLPack: shared where they live,
    then moved to ``device`` if another was asked for."""
    target = dtypes.element_dtype(dtype) if dtype is not None else None
    element = target if target is not None and dtypes.element_shape_of(target) else None
    if hasattr(obj, "__cuda_array_interface__"):
        shared = from_cuda_array_interface(obj, element=element)
    else:
        shared = from_dlpack(obj, dtype=element)
    if target is not None and element is None and shared.dtype != target:
        shared = shared.astype(target)  # another scalar type: converted, as asarray converts NumPy arrays
    return shared if device is None else shared.to(as_device(device))
