"""Arrays: the 4-d BDHW Array and its element strides (:mod:`.array`), the layout rules as pure functions
(:mod:`.layout`), element types (:mod:`.dtypes`), devices (:mod:`.devices`), DLPack and the CUDA Array
Interface (:mod:`.interop`), and the scalar rules both compute paths share (:mod:`.scalar_ops`). Loaded on
first use: ``import noa_core.array`` loads nothing."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__, ["array", "devices", "dtypes", "interop", "layout", "scalar_ops"],
    {"array": ["Array", "ArrayKernels", "arange", "as_device", "asarray", "empty", "full", "ones", "resolve_copy_order",
               "zeros"]})
