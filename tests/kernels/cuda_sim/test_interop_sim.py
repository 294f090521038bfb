"""CUDA interchange and cached user kernels under numba's CUDA simulator (run by test_cuda_sim.py).

The simulator's device memory is host memory, so a CUDA Array Interface or DLPack pointer can be
checked against the host address of the simulated buffer, and sharing is proven by writing
through one side and reading the other.
"""

from __future__ import annotations

import gc
import importlib.util

import numba
import numpy as np
import pytest
from numba import cuda

import noa_core as nc
from noa_core.array import interop
from noa_core.compute import user_kernels
from noa_core.errors import StrideError
from noa_core.kernels import cuda as cuda_kernels

# Only under the simulator: test_cuda_sim.py runs these tests there, in a process of their own.
SIM_ONLY = ("checks pointers against the simulator's host memory: run under numba-cuda's simulator by "
            "tests/kernels/test_cuda_sim.py (in its own process)" if importlib.util.find_spec("numba_cuda") else
            "checks pointers against the simulator's host memory: needs numba-cuda (pip install -e '.[cuda]')")
pytestmark = pytest.mark.skipif(not (numba.config.ENABLE_CUDASIM and cuda.is_available()), reason=SIM_ONLY)


class Interface:
    """An object known only through __cuda_array_interface__ (like a CuPy array or a PyTorch CUDA tensor)."""

    def __init__(self, host: np.ndarray, readonly: bool = False):
        self.host = host
        self.__cuda_array_interface__ = {"shape": host.shape, "strides": host.strides, "typestr": host.dtype.str,
                                         "data": (host.__array_interface__["data"][0], readonly), "version": 3}


class Capsules:
    """An object known only through DLPack (like a JAX array), here exporting a noa CUDA Array."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        assert stream == 1  # noa asks for CUDA's legacy default stream, the one numba uses
        return self.array.__dlpack__(stream=stream, max_version=max_version)


def host_address(array: nc.Array) -> int:
    return array.buffer._ary.ctypes.data + array.offset * array.itemsize


@pytest.fixture
def volume() -> nc.Array:
    return nc.asarray(np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)).to("cuda")


@pytest.mark.parametrize("view", ["C", "F", "permuted", "sliced", "broadcast"])
def test_cuda_array_interface_of_views(volume, view):
    a = {"C": volume, "F": volume.copy("F"), "permuted": volume.permute((2, 0, 3, 1)),
         "sliced": volume[:, 1:, ::2, 1::2], "broadcast": volume[:1].broadcast((4, 3, 4, 5))}[view]
    interface = a.__cuda_array_interface__
    assert interface["version"] == 3 and interface["typestr"] == "<f4" and interface["shape"] == a.shape
    assert interface["strides"] == tuple(4 * s for s in a.strides)
    assert interface["data"] == (host_address(a), not a.writable)
    # The interface read the way CuPy or PyTorch read it: the same memory, the same values.
    host = np.lib.stride_tricks.as_strided(a.buffer._ary[a.offset:], a.shape, interface["strides"])
    np.testing.assert_array_equal(host, a.to("cpu").numpy())


def test_asarray_shares_cuda_array_interface_memory():
    h = np.arange(5 * 6, dtype=np.int32).reshape(5, 6)
    a = nc.asarray(Interface(h[:, ::2]))
    assert a.device == "cuda" and a.shape == (1, 1, 5, 3) and a.strides == (15, 15, 6, 2)
    np.testing.assert_array_equal(a.to("cpu").numpy()[0, 0], h[:, ::2])
    a.fill(-1)  # written through the shared memory
    assert (h[:, ::2] == -1).all() and (h[:, 1::2] != -1).all()
    f = nc.asarray(Interface(np.asfortranarray(h)))
    assert f.order == "F"
    assert nc.asarray(Interface(h), device="cpu").device == "cpu"  # moved only when asked
    with pytest.raises(StrideError, match="negative"):
        nc.asarray(Interface(h[::-1]))
    empty = type("Empty", (), {"__cuda_array_interface__": {"shape": (0, 3), "strides": None, "typestr": "<f8",
                                                            "data": (0, False), "version": 3}})()
    e = nc.asarray(empty)  # a null pointer is fine when there is nothing to point at
    assert e.device == "cuda" and e.shape == (1, 1, 0, 3) and e.size == 0


def test_noa_cuda_arrays_exchange_themselves(volume):
    view = volume[:, 1:, ::2]
    through_interface = type("Foreign", (), {"__cuda_array_interface__": view.__cuda_array_interface__})()
    b = nc.asarray(through_interface)
    assert b.device == "cuda" and b.shape == view.shape
    np.testing.assert_array_equal(b.to("cpu").numpy(), view.to("cpu").numpy())
    b.fill(7)
    assert (view.to("cpu").numpy() == 7).all()


@pytest.mark.parametrize("max_version", [(1, 0), None])
def test_dlpack_of_cuda_arrays(volume, max_version):
    view = volume[:, 1:, ::2].permute((0, 1, 3, 2))
    assert view.__dlpack_device__() == (interop.CUDA, 0)
    pointer, device, dtype, shape, strides, read_only, owner = interop.read_capsule(
        view.__dlpack__(max_version=max_version))
    assert (pointer, device, dtype) == (host_address(view), (interop.CUDA, 0), np.float32)
    assert shape == view.shape and strides == view.strides and not read_only
    del owner
    gc.collect()
    before = interop.export_count()
    c = nc.from_dlpack(Capsules(view))
    assert interop.export_count() == before + 1
    assert c.device == "cuda" and c.shape == view.shape
    np.testing.assert_array_equal(c.to("cpu").numpy(), view.to("cpu").numpy())
    c.fill(-2)
    assert (view.to("cpu").numpy() == -2).all()
    del c
    gc.collect()
    assert interop.export_count() == before  # the deleter ran when the last view went
    with pytest.raises(BufferError, match="read-only"):
        volume[:1].broadcast((2, 3, 4, 5)).__dlpack__()  # read-only needs DLPack 1.0
    with pytest.raises(BufferError, match="copy=True"):
        volume.__dlpack__(max_version=(1, 0), dl_device=(interop.CPU, 0), copy=False)


def test_cuda_user_kernels_compile_once(volume):
    out = nc.empty(volume.shape, "float32", device="cuda")
    before = (user_kernels.compiled_count(), len(cuda_kernels._KERNELS))
    for k in (2.0, 2.0, 2.0):
        nc.ewise(volume, out, lambda v: v * k)
    assert (user_kernels.compiled_count(), len(cuda_kernels._KERNELS)) == (before[0] + 1, before[1] + 1)
    np.testing.assert_array_equal(out.to("cpu").numpy(), volume.to("cpu").numpy() * 2.0)
    def tripled():
        return lambda v: v * 3.0

    nc.ewise(volume, out, tripled())
    np.testing.assert_array_equal(out.to("cpu").numpy(), volume.to("cpu").numpy() * 3.0)
    representative = user_kernels.canonical(tripled())
    assert any(f is representative for key in cuda_kernels._KERNELS for _, f in key[2])
    cuda_kernels.forget(representative)
    assert not any(f is representative for key in cuda_kernels._KERNELS for _, f in key[2])
