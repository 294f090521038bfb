"""Memory-mapped file regions, and releasing their pages so resident memory stays bounded.

Only mappings made here are ever released: they are shared file mappings (``MAP_SHARED``), where
``madvise(MADV_DONTNEED)`` merely unmaps pages that the page cache still holds (dirty pages are
written back by the kernel). On private or anonymous memory the same call would discard data, so
a mapping noa did not make is never touched.
"""

from __future__ import annotations

import mmap
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# mmap object -> address of its first byte. Weak, so a closed and dropped mapping leaves no trace.
_SHARED: weakref.WeakKeyDictionary[mmap.mmap, int] = weakref.WeakKeyDictionary()
_CAN_RELEASE = hasattr(mmap, "MADV_DONTNEED") and hasattr(mmap.mmap, "madvise")


def _register(mm: mmap.mmap) -> None:
    probe = np.frombuffer(mm, np.uint8, count=1)
    _SHARED[mm] = probe.ctypes.data
    del probe  # release the buffer export so that the mapping can be closed


def map_input(path: Path, offset: int, dtype: np.dtype, count: int) -> np.ndarray:
    """A read-only 1-d view of ``count`` items of ``dtype`` at byte ``offset`` of ``path``."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    _register(mm)
    return np.frombuffer(mm, dtype=dtype, count=count, offset=offset)


def map_output(path: Path, offset: int, dtype: np.dtype, count: int) -> tuple[mmap.mmap, np.ndarray]:
    """A writable 1-d view of ``count`` items at byte ``offset`` of an existing file of the right size."""
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE)
    _register(mm)
    return mm, np.frombuffer(mm, dtype=dtype, count=count, offset=offset)


def _mapping_of(array: np.ndarray) -> mmap.mmap | None:
    """The noa shared mapping under a NumPy view, following ``.base`` (and memoryview) links."""
    obj = array
    while obj is not None:
        if isinstance(obj, mmap.mmap):
            return obj if obj in _SHARED else None
        # np.frombuffer keeps a memoryview of the mapping as its base
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
    return None


def _pages(array: np.ndarray) -> tuple[mmap.mmap, int, int] | None:
    """The noa mapping under ``array`` and the page-aligned ``(start, length)`` that ``array`` spans in it."""
    if array.size == 0:
        return None
    mm = _mapping_of(array)
    if mm is None or mm.closed:
        return None
    lo = array.ctypes.data - _SHARED[mm]
    hi = lo + sum((n - 1) * s for n, s in zip(array.shape, array.strides)) + array.itemsize
    start = lo - lo % mmap.PAGESIZE
    return mm, start, min(hi, len(mm)) - start


def release(array: np.ndarray) -> None:
    """Drop from this process the resident pages spanned by ``array``, if it lives in a noa mapping."""
    span = _pages(array) if _CAN_RELEASE else None
    if span is not None:
        mm, start, length = span
        mm.madvise(mmap.MADV_DONTNEED, start, length)


def flush(arrays: Sequence[np.ndarray]) -> None:
    """Write back to the file (one msync) the pages from the lowest to the highest byte the ``arrays``
    span in one noa mapping; arrays in no noa mapping are skipped."""
    spans = [span for span in map(_pages, arrays) if span is not None]
    if spans:
        mm = spans[0][0]
        start = min(s for _, s, _ in spans)
        end = max(s + n for _, s, n in spans)
        mm.flush(start, end - start)


def is_mapped(array: np.ndarray) -> bool:
    """True when ``array`` views a file mapping made here (so other processes can map the same bytes)."""
    return _mapping_of(array) is not None
