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

__version__ = "0.1.0"

__all__ = [
    "Array", "arange", "asarray", "empty", "full", "ones", "zeros", "matrix", "vector", "layout",
    "NoaError", "LayoutError", "ShapeError", "PermutationError", "BroadcastError", "ReshapeError",
    "StrideError", "DTypeError", "DeviceError", "__version__",
]
