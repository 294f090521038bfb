"""Late-bound providers: what a low module calls and a higher one supplies, so that imports only go down.

``array_kernels`` returns the :class:`noa_core.array.ArrayKernels` behind the Array methods that run
kernels (the element-wise module imports Array, so array.py cannot import it); ``noa_core/__init__.py``
installs it before any submodule is imported, without importing NumPy itself. ``png_picture`` draws an
Array as PNG bytes for notebooks (``Array._repr_png_``, with :mod:`noa_core.pictures.drawing`, which imports Array).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

array_kernels: Callable[[], Any] | None = None
png_picture: Callable[[Any], bytes | None] | None = None
