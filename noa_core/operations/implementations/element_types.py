"""Element type names as users spell them, read by NumPy (the ``dtype`` parameters' spelling)."""

from __future__ import annotations

import numpy as np


def element_type_name(text: str) -> str:
    """NumPy's name for a type spelling ('f4' -> 'float32'); ``text`` itself when NumPy knows none."""
    try:
        return np.dtype(text).name
    except TypeError:
        return text
