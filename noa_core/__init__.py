"""noa_core: 4-d BDHW arrays with element strides, layout rules, kernels and MRC/TIFF files."""

from noa_core import layout
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
from noa_core.ewise import astype, copy, ewise, fill, permute_copy
from noa_core.iwise import iwise
from noa_core.reduce import max, mean, min, reduce_ewise, std, sum, var
from noa_core.devices import cuda_available

__version__ = "0.1.0"

__all__ = [
    "Array", "arange", "asarray", "empty", "full", "ones", "zeros", "matrix", "vector", "layout",
    "NoaError", "LayoutError", "ShapeError", "PermutationError", "BroadcastError", "ReshapeError",
    "StrideError", "DTypeError", "DeviceError", "__version__",
    "ewise", "iwise", "reduce_ewise", "sum", "mean", "min", "max", "var", "std", "copy", "permute_copy",
    "astype", "fill", "cuda_available",
]
