"""noa_core: 4-d BDHW arrays with element strides, layout rules, kernels, operations and image files.

Folders by layer, each importing only those below it (tests/test_layering.py): ``array/`` (the Array,
layout, element types, devices), ``kernels/`` (numba CPU and CUDA back-ends), ``compute/`` (launches,
element-wise, reductions, expressions, conversions), ``io/`` (formats, the writer, atomic outputs), the
domains ``fourier/``, ``geometry/``, ``images/`` and ``pictures/``, then ``operations/`` (one declaration
each) and ``run/`` (the drivers).

Names are loaded on first use (PEP 562), so that ``import noa_core`` (and the CLI's ``--help``,
which reads the operation declarations) loads neither NumPy nor numba until something needs them.

The operations that change what a header says (``resize``, ``bin_voxels``, ``flip``, ``rotx``, ``sections``,
``average``, ``split``, ``join``, ``fourier_resize``, ``rescale``) take an ``(array, metadata)`` pair, as
``io.read`` returns it, and then return an :class:`Image` with the header the same command writes
(:mod:`noa_core.images.image`): ``io.write(path, *noa.bin_voxels(io.read(path_in), 2))``.
"""

import importlib

# array, compute and pictures are lazy faces (their modules load on first use); providers, the hooks set below
from noa_core import array, compute, pictures, providers
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
# What noa is, in one line: `noa --help`, the service's API page and the package's description (a test keeps
# pyproject.toml's equal).
SUMMARY = ("Convert, reshape, filter, measure and look at cryo-EM and microscopy images, maps and movies (MRC, TIFF, "
           "OME-Zarr, EER) as 4-d BDHW arrays, from the shell, Python, HTTP and batch jobs.")


def _load_array_kernels():
    """What Array.copy, astype, fill, its operators and .to run: element-wise functions and the
    device transfer, which import Array themselves (and numba)."""
    elementwise = compute.elementwise
    return array.ArrayKernels(copy=elementwise.copy, permute_copy=elementwise.permute_copy,
                              astype=elementwise.astype, fill=elementwise.fill,
                              arithmetic=elementwise.arithmetic, transfer=array.devices.transfer,
                              device_buffer=array.devices.device_buffer,
                              interop=array.interop)


def _png_picture(values) -> bytes | None:
    """Array._repr_png_."""
    return pictures.drawing.png_picture(values)


providers.array_kernels = _load_array_kernels
providers.png_picture = _png_picture

# The one lazy table of the public names: name -> the module defining it.
_LAZY = {
    **dict.fromkeys(("Array", "arange", "asarray", "empty", "full", "ones", "zeros"), "noa_core.array.array"),
    **dict.fromkeys(("matrix", "vector"), "noa_core.array.dtypes"),
    **dict.fromkeys(("astype", "copy", "ewise", "fill", "permute_copy"), "noa_core.compute.elementwise"),
    "iwise": "noa_core.compute.indexwise",
    **dict.fromkeys(("max", "mean", "min", "reduce_ewise", "std", "sum", "var"), "noa_core.compute.reduction"),
    "cuda_available": "noa_core.array.devices",
    "from_dlpack": "noa_core.array.interop",
    **dict.fromkeys(("normalize", "scale"), "noa_core.images.intensity"),
    **dict.fromkeys(("average", "join", "sections", "split"), "noa_core.images.stacks"),
    **dict.fromkeys(("bin_voxels", "flip", "resize", "rotx"), "noa_core.images.boxes"),
    "Image": "noa_core.images.image",
    # noa rescale's module: fourier.resampling's functions with its header rule for (array, metadata) pairs
    **dict.fromkeys(("fourier_resize", "rescale"), "noa_core.operations.implementations.rescale"),
    "fsc": "noa_core.fourier.resolution",
    "symmetrize": "noa_core.geometry.symmetry",
    "preview": "noa_core.pictures.drawing",
}
# Modules users reach as ``noa_core.NAME`` (also lazily), and the layered folders.
_SUBMODULES = {"layout": "noa_core.array.layout", "fft": "noa_core.fourier.fft",
               "spectral": "noa_core.fourier.spectral",
               **{name: f"noa_core.{name}" for name in ("array", "compute", "fourier", "geometry", "io", "kernels",
                                                        "operations", "pictures", "run", "images")}}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(_SUBMODULES[name])
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'noa_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Array", "arange", "asarray", "empty", "full", "ones", "zeros", "matrix", "vector", "layout",
    "NoaError", "LayoutError", "ShapeError", "PermutationError", "BroadcastError", "ReshapeError",
    "StrideError", "DTypeError", "DeviceError", "__version__",
    "ewise", "iwise", "reduce_ewise", "sum", "mean", "min", "max", "var", "std", "copy", "permute_copy",
    "astype", "fill", "cuda_available", "from_dlpack",
    "split", "join", "sections", "average", "scale", "normalize",
    "resize", "bin_voxels", "flip", "rotx", "fourier_resize", "rescale", "Image", "fft", "spectral", "geometry",
    "pictures", "preview", "fsc", "symmetrize",
]
