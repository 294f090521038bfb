"""The C library's functions that noa calls where Python has none (Linux): renameat2, sync_file_range,
fallocate's hole punching."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any


@functools.cache
def function(name: str, *argtypes: Any) -> Callable[..., int] | None:
    """The C library's function ``name`` with its argument types set (errno kept for ``ctypes.get_errno``),
    loaded once; None off Linux or where the C library lacks it. Found among the process's own symbols:
    ``ctypes.util.find_library`` would run ``ldconfig`` in a subprocess."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        found = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    found.argtypes = argtypes
    return found
