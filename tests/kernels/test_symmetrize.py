"""The fused symmetrize kernel against RELION 3.1.3's arithmetic written out in NumPy.

Oracle: ``symmetriseMap`` (src/symmetries.cpp) and ``applyGeometry(img, aux, R, IS_INV, DONT_WRAP)``
(src/transformations.h) transcribed line by line, vectorised over voxels: per row, ``xp`` starts at
``x = -cen_x`` and grows by ``A00`` per column (a sequential ``np.add.accumulate``, the same roundings as
RELION's loop); a sample more than 1e-6 outside ``[-cen, N - 1 - cen]`` on any axis is 0; the corner is
the truncated integer part; neighbours past the last voxel are left out; the terms are added in RELION's
order in float64, the map first, then the operators in order, and divided by the order. Same bits
expected. A second, independent check of the face rule: on a map of ones every sample inside the box is
1 (its weights sum to 1) and every other one 0, so the output is the count of operators landing inside,
within 1e-6, divided by the order.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noa_core.geometry import symmetry
from noa_core.kernels import runtime
from noa_core.kernels.symmetrize import symmetrize_kernel, tiles_of

EQUAL = 1e-6  # RELION's XMIPP_EQUAL_ACCURACY


def relion_apply_geometry(v: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RELION's applyGeometry of ``v`` (z, y, x) by ``a`` (3x3 on x, y, z; IS_INV, no wrap): the
    interpolated values (float64) and where a sample was taken (outside: ``aux`` = 0)."""
    nz, ny, nx = v.shape
    c = np.array([nx // 2, ny // 2, nz // 2])
    z = (np.arange(nz) - c[2]).astype(float)[:, None, None]
    y = (np.arange(ny) - c[1]).astype(float)[None, :, None]
    x0 = float(-c[0])
    axes = []
    for row in range(3):
        start = (x0 * a[row, 0] + y * a[row, 1]) + z * a[row, 2]  # (nz, ny, 1)
        steps = np.concatenate([np.broadcast_to(start, (nz, ny, 1)), np.full((nz, ny, nx - 1), a[row, 0])], axis=2)
        axes.append(np.add.accumulate(steps, axis=2))  # xp, yp, zp at every column, added up as RELION's loop
    inside = np.ones(v.shape, bool)
    for p, n, cen in zip(axes, (nx, ny, nz), c):
        inside &= (p >= -cen - EQUAL) & (p <= n - cen - 1 + EQUAL)
    corner, fraction = [], []
    for p, cen in zip(axes, c):
        w = np.where(inside, p + cen, 0.0)
        i = np.trunc(w).astype(np.int64)  # C's (int): towards zero
        corner.append(i)
        fraction.append(w - i)
    (m1, n1, o1), (wx, wy, wz) = corner, fraction
    vv = v.astype(np.float64)

    def at(o, n, m):
        return vv[np.minimum(o, nz - 1), np.minimum(n, ny - 1), np.minimum(m, nx - 1)]

    xm, yn, zo = m1 + 1 < nx, n1 + 1 < ny, o1 + 1 < nz
    tmp = (1 - wz) * (1 - wy) * (1 - wx) * at(o1, n1, m1)
    tmp = np.where(xm, tmp + (1 - wz) * (1 - wy) * wx * at(o1, n1, m1 + 1), tmp)
    tmp = np.where(yn, tmp + (1 - wz) * wy * (1 - wx) * at(o1, n1 + 1, m1), tmp)
    tmp = np.where(yn & xm, tmp + (1 - wz) * wy * wx * at(o1, n1 + 1, m1 + 1), tmp)
    tmp = np.where(zo, tmp + wz * (1 - wy) * (1 - wx) * at(o1 + 1, n1, m1), tmp)
    tmp = np.where(zo & xm, tmp + wz * (1 - wy) * wx * at(o1 + 1, n1, m1 + 1), tmp)
    tmp = np.where(zo & yn, tmp + wz * wy * (1 - wx) * at(o1 + 1, n1 + 1, m1), tmp)
    tmp = np.where(zo & yn & xm, tmp + wz * wy * wx * at(o1 + 1, n1 + 1, m1 + 1), tmp)
    return np.where(inside, tmp, 0.0), inside


def relion_symmetrise_map(v: np.ndarray, matrices: np.ndarray) -> np.ndarray:
    """RELION's symmetriseMap: sum = img; sum += aux per operator but the identity; sum / order."""
    total = v.astype(np.float64)
    for a in matrices[1:]:
        total = total + relion_apply_geometry(v, a)[0]
    return total / len(matrices)


def run_kernel(v: np.ndarray, name: str, dtype=np.float32) -> np.ndarray:
    g = symmetry.point_group(name)
    out = np.empty(v.shape, dtype)
    columns = np.full(v.shape[:2], v.shape[2], np.int64)  # every voxel computed
    runtime.launch(symmetrize_kernel, True, v, out, np.ascontiguousarray(g.matrices[1:]), float(g.order), columns,
                   tiles_of(columns))
    return out


@settings(max_examples=25, deadline=None)
@given(shape=st.tuples(st.integers(2, 13), st.integers(2, 13), st.integers(2, 13)),
       name=st.sampled_from(["C2", "C3", "C7", "D2", "D3", "T", "O", "I1", "I3", "D3H", "TH", "CI"]),
       single=st.booleans())
def test_the_kernel_is_relions_arithmetic_to_the_bit(shape, name, single):
    """Odd and even edges, boxes from 2 voxels (every sample near a face) up; float32 and float64 maps
    and outputs."""
    kind = np.float32 if single else np.float64
    v = np.random.default_rng(sum(shape)).normal(size=shape).astype(kind)
    expected = relion_symmetrise_map(v, symmetry.point_group(name).matrices)
    np.testing.assert_array_equal(run_kernel(v, name, kind), expected.astype(kind))


@pytest.mark.parametrize("shape", [(6, 6, 6), (9, 9, 10), (5, 8, 11)])
@pytest.mark.parametrize("name", ["C5", "O", "I2"])
def test_a_map_of_ones_counts_the_operators_that_sample_inside(shape, name):
    """RELION reads 0 for a sample beyond the last voxel (by more than 1e-6) and interpolates inside
    only: on ones, the output is (1 + operators landing inside) / order, never a fraction between."""
    g = symmetry.point_group(name)
    nz, ny, nx = shape
    z, y, x = np.meshgrid(*(np.arange(n) - n // 2 for n in shape), indexing="ij")
    r = np.stack([x, y, z], -1).astype(float)  # (x, y, z) from the centre
    high = np.array([nx - 1 - nx // 2, ny - 1 - ny // 2, nz - 1 - nz // 2]) + EQUAL
    low = -np.array([nx // 2, ny // 2, nz // 2]) - EQUAL
    count = np.ones(shape)
    for a in g.matrices[1:]:
        p = r @ a.T
        count += np.all((p >= low) & (p <= high), axis=-1)
    got = run_kernel(np.ones(shape, np.float32), name, np.float64)
    np.testing.assert_allclose(got, count / g.order, atol=1e-12)
    assert got.min() < 1 - 1e-9  # the faces are crossed: some operators land outside


@pytest.mark.parametrize("shape", [(9, 9, 9), (8, 10, 12), (7, 6, 11)])
@pytest.mark.parametrize("name, share", [("I1", 1 / 4), ("O", 1 / 4), ("TH", 1 / 2), ("I3", 1 / 2), ("C4", 1 / 2),
                                         ("C7", 1.0)])
def test_rows_copied_between_symmetric_rows_are_the_computed_ones(shape, name, share):
    """symmetrize computes the rows that a sign-flipping operator does not map onto others and copies the
    rest (reversed where x flips): the same values as computing every row, to float64 rounding of the sum
    (one float32 unit at most), at a quarter or half of the rows (a few more in even boxes, whose first
    row or plane has no partner)."""
    v = np.random.default_rng(7).normal(size=shape).astype(np.float32)
    g = symmetry.point_group(name)
    np.testing.assert_allclose(symmetry.symmetrize(v, g).numpy()[0], run_kernel(v, name), rtol=2.5e-7, atol=1e-7)
    columns = symmetry._symmetric_rows(g, shape)[0]
    computed = np.count_nonzero(columns == shape[2]) / columns.size
    assert share <= computed <= share + (shape[0] + shape[1]) / columns.size
