"""DLPack exchange on the CPU (noa_core.array.interop): NumPy's from_dlpack and __dlpack__ are the oracle.

Every exchange must share memory (checked by writing through one side and reading the other, and
with numpy.shares_memory), with strides converted between elements and bytes; the ctypes DLPack
structures that CUDA memory goes through are tested here on host memory, against NumPy.
"""

from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as nc
from noa_core.array import interop
from noa_core.errors import DeviceError, StrideError


class Producer:
    """An object known only through DLPack (like a PyTorch or JAX CPU tensor)."""

    def __init__(self, array, device=(interop.CPU, 0), versions=True):
        self.array, self.device, self.versions = array, device, versions

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if not self.versions:  # a producer older than DLPack 1.0
            if max_version is not None:
                raise TypeError("unexpected keyword argument 'max_version'")
            return self.array.__dlpack__()
        return self.array.__dlpack__(max_version=max_version)


class NoaCapsules:
    """Exports a CPU Array through interop.capsule (the code CUDA arrays use), for numpy.from_dlpack."""

    def __init__(self, array: nc.Array, legacy: bool = False):
        self.array, self.legacy = array, legacy

    def __dlpack_device__(self):
        return (interop.CPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        a = self.array
        shape, strides = interop._element_layout(a)
        pointer = a.buffer.ctypes.data + a.offset * a.itemsize
        return interop.capsule(pointer, (interop.CPU, 0), np.dtype(a.buffer.dtype), shape, strides, a,
                               read_only=not a.writable,
                               versioned=not self.legacy and max_version is not None and max_version >= (1, 0))


def views(x: np.ndarray) -> dict[str, nc.Array]:
    """C, F, permuted, sliced and broadcast views of one array."""
    a = nc.asarray(x)
    return {"C": a, "F": a.copy("F"), "permuted": a.permute((3, 1, 0, 2)), "sliced": a[:, 1:, ::2, 1::3],
            "broadcast": a[:1].broadcast((3,) + a.shape[1:])}


@pytest.fixture
def volume() -> np.ndarray:
    return np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) - 7


@pytest.mark.parametrize("name", ["C", "F", "permuted", "sliced", "broadcast"])
@pytest.mark.parametrize("export", ["numpy", "ctypes"])
def test_numpy_reads_arrays_through_dlpack(volume, name, export):
    a = views(volume)[name]
    y = np.from_dlpack(a if export == "numpy" else NoaCapsules(a))
    np.testing.assert_array_equal(y, a.numpy())
    assert y.strides == tuple(s * a.itemsize for s in a.strides)  # element strides -> bytes
    assert np.shares_memory(y, a.buffer)
    assert y.flags.writeable == a.writable  # a broadcast view goes read-only (DLPack 1.0's flag)
    if a.writable:
        y[0, 0, 0, 0] = 1234.5
        assert a.numpy()[0, 0, 0, 0] == 1234.5
    assert a.__dlpack_device__() == (1, 0)


def test_structures_match_dlpack_h():
    """Sizes and offsets of dlpack.h v1.0 on a 64-bit platform (what every consumer reads)."""
    assert ctypes.sizeof(interop.DLTensor) == 48 and interop.DLTensor.byte_offset.offset == 40
    assert ctypes.sizeof(interop.DLManagedTensor) == 64 and interop.DLManagedTensor.deleter.offset == 56
    assert ctypes.sizeof(interop.DLManagedTensorVersioned) == 80
    assert interop.DLManagedTensorVersioned.flags.offset == 24
    assert interop.DLManagedTensorVersioned.dl_tensor.offset == 32


def test_unversioned_capsules_are_read_by_numpy(volume):
    a = nc.asarray(volume)[:, ::2].permute((0, 1, 3, 2))
    y = np.from_dlpack(NoaCapsules(a, legacy=True))
    np.testing.assert_array_equal(y, a.numpy())
    assert np.shares_memory(y, volume)


def test_exported_tensors_are_released(volume):
    gc.collect()
    before = interop.export_count()
    a = nc.asarray(volume)[:, 1:]
    y = np.from_dlpack(NoaCapsules(a))
    assert interop.export_count() == before + 1
    del y
    gc.collect()
    assert interop.export_count() == before  # numpy called the deleter
    capsule = NoaCapsules(a).__dlpack__(max_version=(1, 0))
    assert interop.export_count() == before + 1
    del capsule  # never consumed: the capsule's destructor frees the tensor
    gc.collect()
    assert interop.export_count() == before


def test_read_only_needs_dlpack_1(volume):
    a = nc.asarray(volume)[:1].broadcast((3, 3, 4, 5))
    with pytest.raises(BufferError, match="read-only"):
        NoaCapsules(a).__dlpack__()
    with pytest.raises(BufferError):
        a.__dlpack__()  # NumPy's own export says the same


def test_element_types_and_vector_elements():
    for dtype in ("int8", "uint16", "float16", "complex64", "complex128", "bool", "int64"):
        x = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
        for source in (nc.asarray(x), NoaCapsules(nc.asarray(x))):
            y = np.from_dlpack(source)
            assert y.dtype == x.dtype
            np.testing.assert_array_equal(y.reshape(3, 4), x)
    m = nc.asarray(np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2), dtype=nc.matrix("float32", 2, 2))
    for source in (m, NoaCapsules(m)):
        y = np.from_dlpack(source)
        assert y.shape == (1, 1, 2, 3, 2, 2)
        np.testing.assert_array_equal(y.reshape(2, 3, 2, 2), m.numpy().reshape(2, 3, 2, 2))
    back = nc.from_dlpack(np.from_dlpack(m), dtype=nc.matrix("float32", 2, 2))
    assert back.shape == (1, 1, 2, 3) and back.dtype == m.dtype and np.shares_memory(back.numpy(), m.buffer)


def test_empty_arrays_cross_both_ways():
    a = nc.empty((2, 0, 3), "float32")
    y = np.from_dlpack(a)
    assert y.shape == (1, 2, 0, 3) and y.dtype == np.float32
    b = nc.from_dlpack(np.zeros((0, 4), np.int16))
    assert b.shape == (1, 1, 0, 4) and b.dtype == np.int16 and b.size == 0


def test_copy_and_device_requests(volume):
    a = nc.asarray(volume)
    copied = np.from_dlpack(a, copy=True)
    assert not np.shares_memory(copied, volume)
    np.testing.assert_array_equal(copied, a.numpy())
    assert np.shares_memory(np.from_dlpack(a, device="cpu"), volume)


@pytest.mark.parametrize("transform", [
    lambda x: x, lambda x: np.asfortranarray(x), lambda x: x.transpose(2, 0, 1), lambda x: x[::2, 1:, ::3],
    lambda x: x[:, :, None, 1], lambda x: np.broadcast_to(x[:1], (4,) + x.shape[1:]),
])
@pytest.mark.parametrize("versions", [True, False])
def test_from_dlpack_shares_numpy_memory(transform, versions):
    base = np.arange(4 * 5 * 6, dtype=np.float64).reshape(4, 5, 6)
    x = transform(base)
    if not versions and not x.flags.writeable:
        with pytest.raises(BufferError):  # the producer itself cannot say read-only before DLPack 1.0
            nc.from_dlpack(Producer(x, versions=versions))
        return
    a = nc.from_dlpack(Producer(x, versions=versions))
    assert a.device == "cpu" and a.shape == nc.layout.as_shape4(x.shape)
    np.testing.assert_array_equal(a.numpy().reshape(x.shape), x)
    assert np.shares_memory(a.numpy(), x)
    # DLPack < 1.0 cannot say whether memory may be written: NumPy (and so noa) reads it read-only.
    assert a.writable == (x.flags.writeable and versions)
    if a.writable:
        a.fill(-1)
        assert (x == -1).all()
    b = nc.asarray(Producer(x, versions=versions))  # asarray takes the same road
    assert np.shares_memory(b.numpy(), x)


def test_negative_strides_and_foreign_devices_are_refused():
    x = np.arange(12.0).reshape(3, 4)
    with pytest.raises(StrideError, match="negative"):
        nc.from_dlpack(x[::-1])
    with pytest.raises(StrideError, match="negative"):
        nc.asarray(Producer(x[:, ::-1]))
    with pytest.raises(DeviceError, match="OpenCL device"):
        nc.from_dlpack(Producer(x, device=(4, 0)))
    with pytest.raises(TypeError, match="does not support DLPack"):
        nc.from_dlpack([1, 2, 3])
    if not nc.cuda_available():
        with pytest.raises(DeviceError, match="CUDA is not available"):
            nc.from_dlpack(Producer(x, device=(interop.CUDA, 0)))
    assert not hasattr(nc.asarray(x), "__cuda_array_interface__")  # CPU arrays do not claim CUDA memory


@pytest.mark.parametrize("versioned", [True, False])
def test_reading_numpy_capsules(versioned):
    """The ctypes reader (what CUDA capsules from PyTorch, CuPy or JAX go through) on NumPy's capsules."""
    base = np.arange(3 * 4 * 5, dtype=np.int16).reshape(3, 4, 5)
    x = base[:, ::2, 1:].transpose(1, 0, 2)
    references = sys.getrefcount(base)
    capsule = x.__dlpack__(max_version=(1, 0)) if versioned else x.__dlpack__()
    pointer, device, dtype, shape, strides, read_only, owner = interop.read_capsule(capsule)
    del capsule  # renamed 'used_...': its destructor leaves the tensor to the owner
    assert device == (1, 0) and dtype == np.int16 and shape == x.shape and not read_only
    assert strides == tuple(s // 2 for s in x.strides) and pointer == x.__array_interface__["data"][0]
    view = interop._host_view(pointer, dtype, shape, strides, read_only, owner)
    del owner
    np.testing.assert_array_equal(view, x)
    view[0, 0, 0] = 999
    assert x[0, 0, 0] == 999
    del view
    gc.collect()
    assert sys.getrefcount(base) <= references + 1  # the deleter let NumPy's export go


def test_a_used_capsule_is_refused():
    capsule = np.arange(3.0).__dlpack__()
    interop.read_capsule(capsule)
    with pytest.raises(BufferError, match="used_dltensor"):
        interop.read_capsule(capsule)


@settings(max_examples=25, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.integers(1, 6)),
       perm=st.permutations(range(4)), order=st.sampled_from("CF"),
       dtype=st.sampled_from(["float32", "int16", "complex64", "uint8"]))
def test_round_trips_keep_values_strides_and_memory(shape, perm, order, dtype):
    x = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    a = nc.asarray(x).copy(order).permute(perm)
    y = np.from_dlpack(a)
    np.testing.assert_array_equal(y, x.transpose(perm))
    back = nc.from_dlpack(y)
    assert back.shape == a.shape and back.dtype == a.dtype
    np.testing.assert_array_equal(back.numpy(), a.numpy())
    assert np.shares_memory(back.numpy(), a.buffer)
    for n, s, t in zip(a.shape, a.strides, back.strides):
        assert n == 1 or s == t


# ---------------------------------------------------------------------------------------------
# PyTorch (its CPU build) as a second, independent DLPack peer. `scripts/test` installs it when pip
# finds the wheel without the network; elsewhere these tests skip, NumPy's peer above still runs.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["C", "F", "permuted", "sliced", "broadcast"])
def test_torch_reads_arrays_through_dlpack(volume, name):
    torch = pytest.importorskip("torch")
    a = views(volume)[name]
    t = torch.from_dlpack(a)
    np.testing.assert_array_equal(t.numpy(), a.numpy())
    assert t.stride() == a.strides and t.data_ptr() == a.numpy().ctypes.data  # element strides, same memory
    if a.writable:
        t[0, 0, 0, 0] = 1234.5
        assert a.numpy()[0, 0, 0, 0] == 1234.5


@pytest.mark.parametrize("transform", [
    lambda t: t, lambda t: t.permute(2, 0, 1), lambda t: t[::2, 1:, ::3], lambda t: t[:, :, None, 1],
    lambda t: t[:1].expand(4, 5, 6), lambda t: t.transpose(0, 2).contiguous().transpose(0, 2),
])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "uint8", "complex64", "float16"])
def test_noa_shares_torch_tensors(transform, dtype):
    torch = pytest.importorskip("torch")
    base = torch.arange(4 * 5 * 6, dtype=torch.float64).reshape(4, 5, 6).to(getattr(torch, dtype))
    t = transform(base)
    for a in (nc.from_dlpack(t), nc.asarray(t)):
        assert a.device == "cpu" and a.shape == nc.layout.as_shape4(tuple(t.shape)) and a.dtype == np.dtype(dtype)
        assert a.strides[4 - t.dim():] == tuple(s if n > 1 else a.strides[4 - t.dim() + i]
                                                 for i, (s, n) in enumerate(zip(t.stride(), t.shape)))
        np.testing.assert_array_equal(a.numpy().reshape(tuple(t.shape)), t.numpy())
        assert a.numpy().ctypes.data == t.data_ptr()
    written = nc.from_dlpack(base)
    written.fill(3)  # torch's tensors are writable: noa writes the tensor's memory
    assert bool((base == 3).all())


def test_kernels_write_into_shared_torch_tensors():
    torch = pytest.importorskip("torch")
    t = torch.rand(2, 3, 16, 17, dtype=torch.float32)
    out = torch.empty_like(t).permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)  # an F-ordered output
    nc.ewise([nc.asarray(t)], [nc.asarray(out)], lambda v: v * 2 + 1)
    torch.testing.assert_close(out, t * 2 + 1)
