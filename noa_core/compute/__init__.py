"""Computing on Arrays: kernel launches (:mod:`.dispatch`), element-wise, index-wise and reduction front ends,
checked expressions (:mod:`.expr`), user kernels, conversions between element types, moments, and the choice
between NumPy and the numba kernels (:mod:`.compute_path`). Loaded on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__, ["compute_path", "conversion", "dispatch", "elementwise", "expr", "indexwise", "moments", "reduction",
               "user_kernels"])
