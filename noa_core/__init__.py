"""noa_core: 4-d BDHW arrays with element strides, layout rules, kernels and MRC/TIFF files."""

from noa_core import array, layout
from noa_core.array import Array, arange, asarray, empty, full, ones, zeros
from noa_core.dtypes import matrix, vector
from noa_core.errors import (
    BroadcastError,
    DeviceError,
    DTypeError,
    LayoutError,
    NoaError,
    PermutationError,
    ReshapeError,
    ShapeError,
    StrideError,
)

__version__ = "0.1.0"


def _load_array_kernels() -> array.ArrayKernels:
    """What Array.copy, astype, fill, its operators and .to run: element-wise functions and the
    device transfer, which import Array themselves (and numba: loaded at their first use)."""
    from noa_core import devices, elementwise

    return array.ArrayKernels(copy=elementwise.copy, permute_copy=elementwise.permute_copy,
                              astype=elementwise.astype, fill=elementwise.fill,
                              arithmetic=elementwise.arithmetic, transfer=devices.transfer)


array.install_kernels(_load_array_kernels)

# The kernel functions import numba (about 0.3 s): load them on first use so that reading a header
# (`noa info`) stays fast.
_LAZY = {
    **dict.fromkeys(("astype", "copy", "ewise", "fill", "permute_copy"), "noa_core.elementwise"),
    "iwise": "noa_core.indexwise",
    **dict.fromkeys(("max", "mean", "min", "reduce_ewise", "std", "sum", "var"), "noa_core.reduction"),
    "cuda_available": "noa_core.devices",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'noa_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "Array", "arange", "asarray", "empty", "full", "ones", "zeros", "matrix", "vector", "layout",
    "NoaError", "LayoutError", "ShapeError", "PermutationError", "BroadcastError", "ReshapeError",
    "StrideError", "DTypeError", "DeviceError", "__version__",
    "ewise", "iwise", "reduce_ewise", "sum", "mean", "min", "max", "var", "std", "copy", "permute_copy",
    "astype", "fill", "cuda_available",
]
