#!/usr/bin/env python
"""A walkthrough of noa's array model from Python, checked as it goes.

Each section reproduces an example of the design guide's array model (BDHW shapes, element strides,
C and F order, contiguity, permute, broadcast, reshape) with an ``assert``, then shows that noa and
NumPy share memory without copying. Run it with the Python that has noa installed:

    python examples/walkthrough.py

It prints what it checks and ends with "walkthrough: all checks passed".
"""

from __future__ import annotations

import numpy as np

import noa_core as noa
from noa_core.array import layout


def show(label: str, value) -> None:
    print(f"  {label:<44} {value}")


def section(title: str) -> None:
    print(f"\n== {title}")


section("shapes are BDHW; lower-rank input is padded on the left")
assert noa.asarray(np.arange(5.0)).shape == (1, 1, 1, 5)             # a row vector
assert noa.asarray(np.zeros((5, 1))).shape == (1, 1, 5, 1)           # a column vector
assert noa.asarray(np.zeros((64, 48))).shape == (1, 1, 64, 48)       # an image
assert noa.zeros((40, 1, 64, 48)).kind == "image stack"
assert noa.zeros((1, 30, 64, 48)).kind == "volume"
assert noa.zeros((4, 30, 64, 48)).kind == "volume stack"
# ndim ignores the batch: 3 if D > 1, else 2 if H > 1 and W > 1, else 1.
assert [noa.zeros(s).ndim for s in [(1, 3, 4, 4), (7, 1, 4, 4), (1, 1, 5, 1), (1, 1, 1, 5)]] == [3, 2, 1, 1]
show("asarray(np.zeros((64, 48))).shape", noa.asarray(np.zeros((64, 48))).shape)

section("strides count elements; F order swaps only height and width")
c = noa.zeros((1, 2, 3, 4))
f = noa.zeros((1, 2, 3, 4), order="F")
assert c.strides == (24, 12, 4, 1)
assert f.strides == (24, 12, 1, 3)      # the width stride of a column-major image is its height
assert layout.strides_for((1, 30, 64, 128), "F") == (245760, 8192, 1, 64)
assert np.asarray(c).strides == (96, 48, 16, 4)  # NumPy counts bytes: 4 bytes per float32
show("C strides of (1, 2, 3, 4)", c.strides)
show("F strides of (1, 2, 3, 4)", f.strides)

section("permute returns a view; permute_copy a new C-contiguous array")
a = noa.arange((1, 3, 4, 5))
v = a.permute((0, 1, 3, 2))
assert v.shape == (1, 3, 5, 4) and v.strides == (60, 20, 1, 5)
assert v.are_contiguous("F") and not v.are_contiguous("C")
assert np.shares_memory(np.asarray(v), np.asarray(a))
p = a.permute_copy((0, 1, 3, 2))
assert p.strides == (60, 20, 4, 1) and not np.shares_memory(np.asarray(p), np.asarray(a))
assert np.array_equal(np.asarray(p), np.asarray(a).transpose(0, 1, 3, 2))
try:
    a.permute((0, 1, 1, 2))
    raise AssertionError("a repeated axis must be refused")
except noa.PermutationError as exc:
    show("permute((0, 1, 1, 2))", f"PermutationError: {exc}")

section("F order: a copy stored column-major, equal element for element")
fa = a.copy("F")
assert fa.order == "F" and fa.strides == (60, 20, 1, 4)
assert np.array_equal(np.asarray(fa), np.asarray(a))
# The kernels plan their loop from the output's strides, so a C or F copy is one contiguous run.
assert layout.plan_iteration(fa.shape, fa.strides) == ((1, 1, 1, 60), ((60, 60, 60, 1),))
show("a.copy('F').strides", fa.strides)

section("broadcast: size-1 dimensions grow with stride 0 (read-only)")
gain = noa.arange((1, 1, 4, 5))
b = gain.broadcast((10, 1, 4, 5))
assert b.strides == (0, 20, 5, 1) and not b.writable
assert b.is_contiguous() == (False, True, True, True) and not b.are_contiguous()
assert np.array_equal(np.asarray(b), np.broadcast_to(np.asarray(gain), (10, 1, 4, 5)))
try:
    noa.zeros((2, 3, 4, 5)).broadcast((2, 3, 4, 6))
    raise AssertionError("a size that is not 1 cannot grow")
except noa.BroadcastError as exc:
    show("broadcast((2,3,4,5) -> (2,3,4,6))", f"BroadcastError: {exc}")
try:
    b.fill(1.0)
    raise AssertionError("writing through a stride-0 dimension must be refused")
except noa.StrideError:
    show("fill() on a broadcast view", "StrideError (a data race otherwise)")

section("contiguity, whole-array and per dimension")
sliced = noa.zeros((2, 3, 8, 5))[:, :, ::2]            # every other row: B, D, H strides doubled
assert sliced.strides == (120, 40, 10, 1)
assert sliced.is_contiguous("C") == (True, True, False, True)
assert layout.is_contiguous((3, 128, 32, 64), (0, 64, 0, 1)) == (False, True, False, True)
show("(2,3,8,5)[:, :, ::2].is_contiguous()", sliced.is_contiguous())

section("reshape: a view when the strides allow it, else an explicit copy")
r = noa.arange((1, 2, 3, 4)).reshape((1, 1, 6, 4))
assert r.strides == (24, 24, 4, 1)
try:
    v.reshape((1, 1, 1, 60))
    raise AssertionError("a transposed view cannot be flattened without a copy")
except noa.ReshapeError:
    flat = v.reshape((1, 1, 1, 60), allow_copy=True)
assert np.array_equal(np.asarray(flat).ravel(), np.asarray(v).ravel())
show("permute view .reshape(-1) without a copy", "ReshapeError; allow_copy=True copies")

section("negative strides are refused, empty arrays are fine, matrices are element types")
x = np.arange(12.0).reshape(3, 4)
try:
    noa.asarray(x[::-1])
    raise AssertionError("negative strides must be refused")
except noa.StrideError:
    show("asarray(x[::-1])", "StrideError; use numpy.ascontiguousarray first")
assert noa.asarray(np.ascontiguousarray(x[::-1])).shape == (1, 1, 3, 4)
empty = noa.zeros((0, 3, 4, 5))
assert empty.copy("F").shape == (0, 3, 4, 5) and empty.size == 0
m = noa.zeros((8, 1, 1, 1), dtype=noa.matrix("float64", 4, 4))
assert m.shape == (8, 1, 1, 1) and m.element_shape == (4, 4) and np.asarray(m).shape == (8, 1, 1, 1, 4, 4)
show("matrix array: shape, element_shape", (m.shape, m.element_shape))

section("zero-copy interop with NumPy, both ways")
x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
nv = noa.asarray(x)                                       # a volume (1, 2, 3, 4) over x's memory
assert nv.shape == (1, 2, 3, 4) and np.shares_memory(np.asarray(nv), x)
x[0, 0, 0] = 100.0                                        # a write in NumPy is seen by noa...
assert float(np.asarray(nv)[0, 0, 0, 0]) == 100.0
np.asarray(nv.permute((0, 1, 3, 2)))[0, 0, 1, 0] = -1.0   # ...and a write through a noa view by NumPy
assert x[0, 0, 1] == -1.0
xt = noa.asarray(x.transpose(0, 2, 1))                    # NumPy's strided views keep their strides
assert xt.strides == (24, 12, 1, 4) and xt.order == "F"
doubled = nv * 2                                          # kernels return new arrays
assert np.array_equal(np.asarray(doubled), 2 * x[None])
show("noa.asarray(x) shares x's memory", np.shares_memory(np.asarray(nv), x))
show("(nv * 2) equals NumPy's 2 * x", True)

print("\nwalkthrough: all checks passed")
