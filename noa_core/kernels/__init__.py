"""Every numba kernel: the back-ends (:mod:`.cpu`, :mod:`.cuda`), the element operators they share
(:mod:`.operators`, :data:`BUILTIN_OPS`), generated source (:mod:`.sources`: :func:`compile_source`,
:func:`generated_sources`), the kernels of transforms, binning, FSC shells, symmetrization, EER decoding and STAR
tables,
and numba's set-up (:mod:`.runtime`). Loaded on first use: ``import noa_core.kernels`` loads neither NumPy
nor numba, so a module on the NumPy path (small files) reaches the kernels through this face at call time."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    ["binning", "cpu", "cuda", "eer", "operators", "runtime", "shells", "sources", "star", "symmetrize", "transform"],
    {"operators": ["BUILTIN_OPS", "half_precision", "power", "true_divide"],
     "sources": ["cache_on_disk", "compile_source", "compile_template", "generated_sources", "kernel_filename",
                 "operand_variants", "transpose_plan"]})
