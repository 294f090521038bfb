"""What the in-memory stack tests share: Hypothesis settings and shapes, the element types, and arrays of random
values laid out in either order."""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

import noa_core as noa
from helpers import random_values

SETTINGS = settings(max_examples=25, deadline=None)
shapes = st.tuples(*(st.integers(1, 5) for _ in range(4)))
DTYPES = ("int8", "uint8", "int16", "uint16", "float16", "float32", "float64", "complex64")


def values(shape, dtype="float32", seed=0) -> np.ndarray:
    return random_values(shape, dtype, seed, mean=3, sd=10)


def as_array(data: np.ndarray, order: str = "C") -> noa.Array:
    """The data as an Array laid out in ``order`` (noa's F: each section column-major)."""
    if order == "F":
        return noa.asarray(np.ascontiguousarray(data.transpose(0, 1, 3, 2))).permute((0, 1, 3, 2))
    return noa.asarray(data)
