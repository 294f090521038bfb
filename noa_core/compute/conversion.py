"""Conversions between element types: what happens to values a target type cannot hold (``mode``), and
the two ways of doing it, NumPy (:func:`noa_core.compute.compute_path.numpy_path`: small files) and noa's kernels,
which give the same bits.

Modes: 'cast' converts like C and NumPy's ``astype`` (complex to real keeps the real part; out-of-range
float to integer is undefined); 'clamp' clamps to the target's range, NaN becoming 0 for integer
targets (float targets keep NaN; complex targets are not clamped); 'checked' raises DTypeError naming
the values and the range, and refuses complex to real.
"""

from __future__ import annotations

import numpy as np

from noa_core import compute, kernels  # faces: the kernels' path loads numba, and only when it runs
from noa_core.array import Array, dtypes
from noa_core.array.dtypes import FLOAT16_COMPUTE
from noa_core.compute import compute_path
from noa_core.compute.moments import block_moments
from noa_core.errors import DTypeError, param


def _clamp_bounds(source: np.dtype, target: np.dtype) -> tuple[np.generic, np.generic] | None:
    """Target range expressed in the source's (real) type, or None when no clamping is needed."""
    src = np.dtype(source.char.lower()) if source.kind == "c" else source
    # float16 cannot hold every bound (uint16's 65535 rounds to inf): float16 sources compare in
    # float32, which is also what the CPU computes them in.
    src = FLOAT16_COMPUTE if src == np.float16 else src
    if target.kind == "f":
        if src.kind != "f" or np.finfo(src).max <= np.finfo(target).max:
            return None
        return src.type(np.finfo(target).min), src.type(np.finfo(target).max)
    if target.kind not in "iu" or src.kind == "b":
        return None
    info = np.iinfo(target)
    if src.kind in "iu":
        s = np.iinfo(src)
        return src.type(max(info.min, s.min)), src.type(min(info.max, s.max))
    lo, hi = src.type(info.min), src.type(info.max)
    # The largest float not above the integer maximum (e.g. float32(2**31 - 1) rounds up to 2**31).
    while int(hi) > info.max:
        hi = np.nextafter(hi, src.type(-np.inf))
    return lo, hi


CONVERSION_MODES = ("cast", "clamp", "checked")


def _check_range(source: Array, target: np.dtype) -> None:
    """Raise DTypeError when some value of ``source`` cannot be represented in ``target``."""
    if source.dtype.kind == "c" and target.kind != "c":
        raise DTypeError(f"cannot convert complex {source.dtype} to {target}: the imaginary part would be lost")
    if target.kind not in "iuf" or source.dtype.kind == "b" or source.size == 0:
        return
    if target.kind == "f":
        if source.dtype.kind != "f" or np.finfo(source.dtype).max <= np.finfo(target).max:
            return
        limits = (float(np.finfo(target).min), float(np.finfo(target).max))
    else:
        if source.dtype.kind in "iu" and np.can_cast(source.dtype, target):
            return
        limits = (int(np.iinfo(target).min), int(np.iinfo(target).max))
    if source.device == "cpu" and source.dtype.kind in "fiu":  # one vectorized pass for both (NaN propagates alike)
        found = block_moments(source)
        lo, hi = source.dtype.type(found.min), source.dtype.type(found.max)
    else:
        lo = compute.reduction.min(source).numpy().reshape(-1)[0]
        hi = compute.reduction.max(source).numpy().reshape(-1)[0]
    if target.kind == "f":  # NaN and inf carry over; only finite values beyond the range overflow
        lo, hi = (lo if np.isfinite(lo) else 0), (hi if np.isfinite(hi) else 0)
    if np.isnan(lo) or np.isnan(hi):
        raise DTypeError(f"{source.dtype} values include NaN, which {target} cannot hold; clamp them "
                         f"({param('clamp')}, NaN -> 0)")
    if lo < limits[0] or hi > limits[1]:
        raise DTypeError(
            f"values {lo}..{hi} of {source.dtype} do not fit {target} ({limits[0]}..{limits[1]}); "
            f"clamp them ({param('clamp')}) or choose a wider type"
        )


def convert_into(source: Array, out: Array, *, mode: str = "cast") -> Array:
    """Write ``source`` (broadcast onto ``out``'s shape) into ``out``, converting to ``out.dtype`` as
    ``mode`` says (see the module); returns ``out``. The checks are made here, once; the values are stored
    by NumPy or by the kernels (:func:`noa_core.compute.compute_path.numpy_path`), which store the same bits."""
    if mode not in CONVERSION_MODES:
        raise ValueError(f"conversion mode {mode!r} is not one of {CONVERSION_MODES}")
    target = out.dtype
    bounds = None
    if target != source.dtype:
        if dtypes.element_shape_of(target) or dtypes.element_shape_of(source.dtype):
            raise DTypeError(f"conversion between scalar element types only; {source.dtype} to {target} is not "
                             "supported")
        if target.kind != "b":  # to bool is x != 0 in every mode
            if mode == "checked":
                _check_range(source, target)
            bounds = _clamp_bounds(source.dtype, target) if mode == "clamp" else None
    if compute_path.numpy_path() and out.device == "cpu" and source.device == "cpu":
        _store_numpy(source, out, bounds)
    else:
        _store_kernels(source, out, bounds)
    return out


def _store_kernels(source: Array, out: Array, bounds) -> None:
    """The values of :func:`convert_into`, stored by the kernels (clamped to ``bounds`` when given)."""
    launch, half_bits, operators = compute.dispatch.launch, compute.dispatch.half_bits, kernels.BUILTIN_OPS
    target = out.dtype
    if target == source.dtype:
        launch(operators["identity"], [source], [out], raw=True)
    elif target.kind == "b":
        launch(operators["nonzero"], [source], [out])
    elif bounds is not None:
        op = operators["clamp_nan_to_zero" if target.kind in "iu" else "clamp_keep_nan"]
        launch(op, [source, *bounds], [out])
    elif source.dtype.kind == "c" and target.kind != "c":
        launch(operators["real_part"], [source], [out])
    elif target == np.float16 and source.dtype.kind == "f" and out.device == "cpu":
        launch(operators["half_bits"], [source], [half_bits(out)])  # one pass, no float32 copy
    elif source.dtype == np.float16 and target == FLOAT16_COMPUTE and out.device == "cpu":
        launch(operators["half_value"], [half_bits(source)], [out])
    else:
        launch(operators["identity"], [source], [out])


def _store_numpy(source: Array, out: Array, bounds) -> None:
    """The values the kernels store, to the bit, with NumPy (the kernels' casts are C's, as NumPy's
    ``casting='unsafe'``; float16 is computed in float32, and a float16 output is computed in float32 and
    rounded, but where a float is only rounded to float16)."""
    target = out.dtype
    values, dst = np.broadcast_to(source.numpy(), out.shape), out.numpy()
    if target == source.dtype:
        np.copyto(dst, values)
        return
    if target.kind == "b":
        np.not_equal(values, 0, out=dst)
        return
    if source.dtype.kind == "c" and target.kind != "c":
        values = values.real
    if bounds is not None:
        if values.dtype == np.float16:
            values = values.astype(FLOAT16_COMPUTE)
        lo, hi = bounds
        clamped = np.where(values < lo, lo, np.where(values > hi, hi, values))  # NaN compares false: kept
        if target.kind in "iu" and clamped.dtype.kind == "f":
            clamped[np.isnan(clamped)] = 0
        values = clamped
    if target == np.float16 and not (source.dtype.kind == "f" and bounds is None):
        values = values.astype(FLOAT16_COMPUTE)  # the kernels compute a float16 output in float32, then round
    with np.errstate(all="ignore"):  # as the kernels: out-of-range casts are C's, without warnings
        np.copyto(dst, values, casting="unsafe")
