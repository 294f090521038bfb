"""Point groups as RELION names them, and maps averaged over their operators.

:func:`point_group` reads a symmetry name as RELION 3.1.3 does (``src/symmetries.cpp``, case-insensitive):
``Cn`` (n-fold about z), ``Ci`` (inversion), ``Cs`` (mirror z), ``Cnv``, ``Cnh``, ``Sn`` (n even), ``Dn``
(``Cn`` and a 2-fold about x), ``Dnv``, ``Dnh``, ``T``, ``Td``, ``Th``, ``O``, ``Oh``, ``I`` (= ``I2``),
``I1``..``I4`` and ``Ih``, ``I1h``..``I4h`` (n from 1 to 99). Its operators are RELION's, in RELION's order:
the rotations, mirrors and inversion its symmetry definitions list (``fill_symmetry_class``), each
rotation axis giving the rotations by -360°·j/n (``rotation3DMatrix(...)`` transposed), then every new
product found the way ``SymList::compute_subgroup`` searches them, the identity first. The axes are the
exact ones RELION's decimals round (``0.816496`` is √(2/3)), so every group closes to rounding error.

A matrix ``R`` acts on ``(x, y, z)`` from the centre ``N // 2`` of each axis. :func:`symmetrize` writes
what ``relion_image_handler --sym`` writes (``symmetriseMap``): the mean of the map and, for every
operator but the identity, the map sampled at ``R r`` by trilinear interpolation (the output at ``r`` is
the input at ``R r``), a sample beyond the box's last voxel (by more than RELION's 1e-6) reading 0; the
sum, made in double precision in RELION's order, is divided by the group's order. On the CPU and on CUDA the
result is RELION's arithmetic transcribed (:mod:`noa_core.kernels.symmetrize`), faces included.

Example::

    from noa_core.geometry import symmetry
    symmetry.point_group("D3").matrices    # (6, 3, 3), on (x, y, z)
    out = symmetry.symmetrize(volume, "I1")  # volume: (1, D, H, W) or (D, H, W)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from noa_core import kernels  # a face: the CUDA back-end (numba-cuda) loads only for arrays on a GPU
from noa_core.array import Array, asarray, empty
from noa_core.compute.elementwise import astype
from noa_core.errors import DTypeError, ParameterError, ShapeError
from noa_core.geometry import point_groups
from noa_core.geometry.point_groups import PARTS
from noa_core.kernels import symmetrize as symmetrize_kernels
from noa_core.kernels.transform import launch_cuda

__all__ = ["PointGroup", "point_group", "symmetrize", "working_volumes"]

EQUAL = 1e-6  # RELION's XMIPP_EQUAL_ACCURACY: products closer than this to a known operator are that operator


def _unit(*v: float) -> tuple[float, float, float]:
    n = math.sqrt(sum(c * c for c in v))
    return tuple(c / n for c in v)  # type: ignore[return-value]


_PHI = (1 + math.sqrt(5)) / 2
_SIN36 = math.sqrt(1 - _PHI * _PHI / 4)
_COS_5_3 = _PHI * _PHI / math.sqrt(3 * (1 + _PHI * _PHI))  # cosine of the angle between a 5-fold and a 3-fold
_SIN_5_3 = math.sqrt(1 - _COS_5_3 * _COS_5_3)
# RELION's axes as exact unit vectors (x, y, z); its decimals in the comments.
_Z, _X = (0.0, 0.0, 1.0), (1.0, 0.0, 0.0)
_T2 = _unit(0, math.sqrt(2), 1)  # 0. 0.816496 0.577350
_O3 = _unit(1, 1, 1)  # .5773502 .5773502 .5773502
_I2_5 = _unit(1, 0, _PHI)  # 0.525731114 0 0.850650807
_I2_3 = _unit(0, 1, _PHI * _PHI)  # 0 0.356822076 0.934172364
_I1_5 = _unit(_PHI, 0, -1)  # 0.85065080702670 0 -0.5257311142635
_I1_3 = _unit(_PHI * _PHI, 1, 0)  # 0.9341723640 0.3568220765 0
_I3_2 = _unit(-1, 0, _PHI)  # -0.5257311143 0 0.8506508070
_I3_3 = (-_SIN_5_3 * _PHI / 2, _SIN_5_3 * _SIN36, _COS_5_3)  # -0.4911234778630044 0.3568220764705179 0.79465...
_I4_2 = _unit(1, 0, _PHI)  # 0.5257311143 0 0.8506508070
_I4_5 = _unit(2, 0, 1)  # 0.8944271932547096 0 0.4472135909903704
_I4_3 = (_SIN_5_3 * _PHI / 2, _SIN_5_3 * _SIN36, _COS_5_3)  # 0.4911234778630044 0.3568220764705179 0.79465...
_ICOSAHEDRAL = {"1": (("rot", 2, _X), ("rot", 5, _I1_5), ("rot", 3, _I1_3)),
                "2": (("rot", 2, _Z), ("rot", 5, _I2_5), ("rot", 3, _I2_3)),
                "3": (("rot", 2, _I3_2), ("rot", 5, _Z), ("rot", 3, _I3_3)),
                "4": (("rot", 2, _I4_2), ("rot", 5, _I4_5), ("rot", 3, _I4_3))}
_ICOSAHEDRAL_MIRROR = {"1": (0, 0, -1), "2": _X, "3": _unit(_PHI, 0, 1), "4": _unit(_PHI, 0, -1)}


@dataclass(frozen=True, eq=False)
class PointGroup:
    """A point group: its name as RELION reads it (upper case) and its operators.

    Attributes:
        name: ``C7``, ``D3``, ``I1``, ...
        matrices: ``(order, 3, 3)`` float64 acting on ``(x, y, z)`` column vectors, the identity first,
            then RELION's operators in RELION's order (its ``R(2)``, ``R(3)``, ...).
    """

    name: str
    matrices: np.ndarray

    @property
    def order(self) -> int:
        """The number of operators, the identity included (what the sum is divided by)."""
        return self.matrices.shape[0]

    @property
    def proper(self) -> bool:
        """Rotations only (no mirror or inversion)."""
        return bool(np.all(np.linalg.det(self.matrices) > 0))


def _rotation(degrees: float, axis: tuple[float, float, float]) -> np.ndarray:
    """The active right-handed rotation by ``degrees`` about the unit ``axis`` (RELION's rotation3DMatrix)."""
    u = np.asarray(axis)
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    cross = np.array([[0, -u[2], u[1]], [u[2], 0, -u[0]], [-u[1], u[0], 0]])
    r = c * np.eye(3) + s * cross + (1 - c) * np.outer(u, u)
    r[np.abs(r) < 1e-12] = 0.0  # exact zeros where RELION sets small values to zero (sin 180°)
    return r


def _generators(name: str) -> tuple[tuple, ...]:
    """RELION's symmetry definition of the canonical ``name`` (``fill_symmetry_class``): ('rot', fold, axis),
    ('mirror', normal) and ('inversion',) lines, in its order."""
    letter, digits, suffix, word, variant, mirrored = PARTS.fullmatch(name).groups()  # type: ignore[union-attr]
    if variant is not None:
        return _ICOSAHEDRAL[variant] + ((("mirror", _ICOSAHEDRAL_MIRROR[variant]),) if mirrored else ())
    if word is not None:
        return {"CI": (("inversion",),),
                "CS": (("mirror", _Z),),
                "T": (("rot", 3, _Z), ("rot", 2, _T2)),
                "TD": (("rot", 3, _Z), ("rot", 2, _T2), ("mirror", _unit(math.sqrt(2), math.sqrt(6), 0))),
                "TH": (("rot", 3, _Z), ("rot", 2, tuple(-c for c in _T2)), ("inversion",)),
                "O": (("rot", 3, _O3), ("rot", 4, _Z)),
                "OH": (("rot", 3, _O3), ("rot", 4, _Z), ("mirror", _unit(0, 1, 1))),
                "I": _ICOSAHEDRAL["2"],
                "IH": _ICOSAHEDRAL["2"] + (("mirror", _X),)}[word]
    n = int(digits)
    if letter == "S":
        return (("rot", n // 2, _Z), ("inversion",))
    if letter == "C":
        extra = {None: (), "V": (("mirror", (0.0, 1.0, 0.0)),), "H": (("mirror", _Z),)}[suffix]
        return (("rot", n, _Z),) + extra
    dihedral = ((("rot", n, _Z),) if n > 1 else ()) + (("rot", 2, _X),)
    return dihedral + {None: (), "V": (("mirror", _X),), "H": (("mirror", _Z),)}[suffix]


def _key(flip: bool, r: np.ndarray) -> tuple:
    return flip, (np.round(r, 7) + 0.0).tobytes()  # + 0.0: -0.0 and 0.0 are one key


@lru_cache(maxsize=64)
def _group(name: str) -> PointGroup:
    # (flip, R) pairs as RELION's SymList keeps (L, R): its inversion carries L = diag(1, 1, -1), which
    # only tells two operators apart in its search; the map is sampled with R alone.
    elements: list[tuple[bool, np.ndarray]] = []
    for line in _generators(name):
        if line[0] == "rot":
            _, fold, axis = line
            elements += [(False, _rotation(360.0 * j / fold, axis).T) for j in range(1, fold)]
        elif line[0] == "mirror":
            normal = np.asarray(line[1])
            elements.append((False, np.eye(3) - 2 * np.outer(normal, normal)))
        else:
            elements.append((True, -np.eye(3)))
    # compute_subgroup: pairs (i, j) taken shell by shell, (0, n), (1, n), ..., (n, n), (n, n - 1), ..., (n, 0),
    # the product R_i R_j kept when it is neither the identity nor an operator already listed.
    flips = [f for f, _ in elements]
    known = np.stack([r for _, r in elements]) if elements else np.empty((0, 3, 3))
    seen = {_key(f, r) for f, r in elements}  # a fast look-up; a miss is confirmed against every operator
    shell = 0
    while shell < len(flips):
        pairs = [(i, shell) for i in range(shell + 1)] + [(shell, j) for j in range(shell - 1, -1, -1)]
        products = np.einsum("pij,pjk->pik", known[[i for i, _ in pairs]], known[[j for _, j in pairs]])
        for (i, j), product in zip(pairs, products):
            flip = flips[i] != flips[j]
            if not flip and np.abs(product - np.eye(3)).max() <= EQUAL:
                continue
            if _key(flip, product) in seen:
                continue
            same = np.abs(known - product).max(axis=(1, 2)) <= EQUAL
            if np.any(same & (np.asarray(flips) == flip)):
                continue
            product[np.abs(product) < 1e-12] = 0.0  # exact zeros where RELION sets small values to zero
            flips.append(flip)
            known = np.concatenate([known, product[None]])
            seen.add(_key(flip, product))
        shell += 1
    elements = list(zip(flips, known))
    matrices = np.stack([np.eye(3)] + [r for _, r in elements])
    matrices.setflags(write=False)
    return PointGroup(name, matrices)


def point_group(name: str | PointGroup) -> PointGroup:
    """The point group RELION calls ``name`` (any case; :mod:`noa_core.geometry.point_groups` is the grammar);
    ParameterError (``sym``) for a name RELION does not know, I5 (RELION does not implement it), n = 0 or an
    odd Sn. Its name is the canonical one (``c01`` is ``C1``)."""
    if isinstance(name, PointGroup):
        return name
    if not isinstance(name, str):
        raise ParameterError(f"{name!r} is not a point group name", "sym")
    return _group(point_groups.read(name))


def working_volumes(dtype="float32", device: str = "cpu") -> float:
    """The float32 volumes (of the map's shape) that :func:`symmetrize` holds beyond a map of type ``dtype`` and its
    output: on the CPU none but, for a map neither float32 nor float64, its float32 copy (the rows copied
    between symmetric rows go 1024 at a time); on CUDA also the float64 sums (two)."""
    converted = 0 if np.dtype(dtype) in (np.float32, np.float64) else 1
    return float(converted) if device == "cpu" else 2.0 + converted


def symmetrize(volume: Array | np.ndarray, group: PointGroup, output: Array | np.ndarray | None = None) -> Array:
    """The mean of every volume of ``volume`` ((B, D, H, W), or (D, H, W); an Array or NumPy array, on
    the CPU or CUDA) over the operators of ``group`` (:func:`point_group` reads a name), as
    ``relion_image_handler --sym`` computes it (see the module): into ``output`` (float32 or float64 of the
    same shape and device, written in place) or a new float32 array, returned.

    One fused kernel (:mod:`noa_core.kernels.symmetrize`) samples and sums every operator in RELION's
    double-precision arithmetic, its rule at the box's faces included (a sample beyond the last voxel reads
    0), holding nothing but the map and its output (on CUDA, and a float64 volume of sums); rows that a
    2-fold about an axis, the inversion or an axial mirror of the group maps onto computed rows are copied
    from them (:func:`_symmetric_rows`: 1/4 of the work for I1, I2, O and D2n, 1/2 for I3, I4, Th, Dn (n
    odd), C2n). The CPU and CUDA kernels are compiled from one source: the same sums, in the same order (a
    GPU's compiler fuses multiplications and additions, so the last bits may differ: I1 on a 256³ map differed
    by at most 7.5e-9, in values up to 2.8, on an H200; docs/gpu.md).

    Args:
        volume: the volumes (real scalar elements; D, H and W above 1).
        group: the point group (:func:`point_group` reads one from its name).
        output: where the result goes, written in place.

    Returns:
        ``output`` as an Array (sharing a NumPy output's memory), or a new float32 array.

    Raises:
        ShapeError: an input that is not volumes, or an output of another shape, device or type.
        DTypeError: complex, vector or matrix elements.
    """
    x = volume if isinstance(volume, Array) else asarray(np.asarray(volume))  # (D, H, W) padded to (1, D, H, W)
    if x.shape[1] < 2 or x.shape[2] < 2 or x.shape[3] < 2:
        raise ShapeError(f"symmetrize: the input of shape {x.shape} is not a volume; point groups act on 3-d maps "
                         "(B, D, H, W) with D, H and W above 1")
    if x.dtype.kind not in "fiu" or x.element_shape:
        raise DTypeError(f"symmetrize: the input of element type {x.dtype} is not real numbers")
    if output is None:
        out = empty(x.shape, np.float32, device=x.device)
    else:
        out = output if isinstance(output, Array) else asarray(output)  # a NumPy output is written in place
        if out.shape != x.shape or out.device != x.device or out.dtype not in (np.float32, np.float64):
            raise ShapeError(f"symmetrize: the output ({out.shape}, {out.dtype}, {out.device}) must be float32 or "
                             f"float64 of the input's shape {x.shape} and device {x.device}")
    real = np.float64 if x.dtype == np.float64 else np.float32
    if x.dtype != real:  # the kernels sample their own type: integer and float16 maps are read as float32
        x = astype(x, real)
    operators = np.ascontiguousarray(group.matrices[1:])
    columns, targets, sources, flipped = _symmetric_rows(group, x.shape[1:])
    if x.device != "cpu":
        _symmetrize_on_device(x, out, operators, float(group.order), (columns, targets, sources, flipped))
        return out
    tiles = symmetrize_kernels.tiles_of(columns)
    source, target = x.numpy(), out.numpy()
    for b in range(x.shape[0]):
        kernels.runtime.launch(symmetrize_kernels.symmetrize_kernel, True, source[b], target[b], operators,
                               float(group.order), columns, tiles)
        _copy_rows(target[b], targets, sources, flipped)
    return out


def _symmetric_rows(group: PointGroup, shape) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Which rows of the output the kernel computes and which are copies, for a volume of ``shape`` (D, H, W).

    The mean over a group is the same at ``r`` and ``h r`` for every operator ``h`` of the group (the
    same samples, added in another order): for the operators that only flip signs of x, y, z (2-folds
    about the axes, the inversion, mirrors across the axial planes), ``h r`` is a voxel, so one row of
    each set of rows they exchange is computed, whole, and the others are copied from it, reversed where
    ``h`` flips x. In an even box, the first voxel of a reversed row has no partner (``2 (N//2)`` is past
    the last voxel) and is computed. Returns ``columns`` (D, H) int64 (the leading voxels computed per
    row), and for the copied rows their flat row indices (z H + y), their source rows', and whether
    reversed. The copies equal RELION's sums to double rounding (1 float32 unit at most, seldom)."""
    nz, ny, nx = shape
    signs = []
    for m in group.matrices[1:]:
        whole = np.rint(m)
        if np.abs(m - whole).max() < 1e-12 and np.count_nonzero(whole) == 3 and np.count_nonzero(np.diag(whole)) == 3:
            signs.append(tuple(int(v) for v in np.diag(whole)))
    signs.sort(reverse=True)  # those keeping x first: a copy is reversed only when no unreversed one exists
    k, i = np.meshgrid(np.arange(nz), np.arange(ny), indexing="ij")
    row = k * ny + i
    best, flip = row.copy(), np.zeros(row.shape, bool)
    for sx, sy, sz in signs:
        kk, ii = sz * (k - nz // 2) + nz // 2, sy * (i - ny // 2) + ny // 2
        image = np.where((kk >= 0) & (kk < nz) & (ii >= 0) & (ii < ny), kk * ny + ii, -1)
        better = image > best
        best = np.where(better, image, best)
        flip = np.where(better, sx < 0, flip)
    copied = best != row
    columns = np.where(copied, np.where(flip & (nx % 2 == 0), 1, 0), nx).astype(np.int64)
    return columns, row[copied], best[copied], flip[copied]


def _copy_rows(volume: np.ndarray, targets: np.ndarray, sources: np.ndarray, flipped: np.ndarray,
               chunk: int = 1024) -> None:
    """Fills the rows ``targets`` of ``volume`` (D, H, W) from the rows ``sources`` (flat z H + y indices),
    reversed about W//2 where ``flipped`` (the first voxel of an even row kept): ``chunk`` rows at a time."""
    ny, nx = volume.shape[1], volume.shape[2]
    first = 1 if nx % 2 == 0 else 0
    for start in range(0, len(targets), chunk):
        t, f = divmod(targets[start:start + chunk], ny), divmod(sources[start:start + chunk], ny)
        reverse = flipped[start:start + chunk]
        keep = ~reverse
        volume[t[0][keep], t[1][keep]] = volume[f[0][keep], f[1][keep]]
        volume[t[0][reverse], t[1][reverse], first:] = volume[f[0][reverse], f[1][reverse], first:][:, ::-1]


def _symmetrize_on_device(x: Array, out: Array, operators: np.ndarray, order: float, rows: tuple) -> None:
    """:func:`symmetrize` on CUDA: the CPU's sums by the same kernel source, one thread per row, then the
    symmetric rows copied (``rows``: :func:`_symmetric_rows`'s)."""
    from numba import cuda

    device_kernels = symmetrize_kernels.cuda_kernels()
    columns, targets, sources, flipped = (cuda.to_device(np.ascontiguousarray(v)) for v in rows)
    matrices = cuda.to_device(operators)
    total = cuda.device_array(x.shape[1:], np.float64)
    source, target = kernels.cuda.view4d(x), kernels.cuda.view4d(out)
    for b in range(x.shape[0]):
        launch_cuda(device_kernels["symmetrize"], x.shape[1] * x.shape[2], source[b], target[b], total, matrices, order,
                    columns)
        if len(rows[1]):
            launch_cuda(device_kernels["copy_rows"], len(rows[1]), target[b], targets, sources, flipped)
