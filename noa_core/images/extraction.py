"""Boxes cut from a micrograph at particle coordinates, as RELION 3.1.3's ``relion_preprocess --extract`` cuts them
(src/preprocessing.cpp, ``extractParticlesFromOneMicrograph``).

Shapes: a micrograph (H, W) and n coordinates (x, y) in pixels give n boxes (n, N, N). Values: the box of a
coordinate is centred on its integer position, the coordinate truncated toward zero (RELION's ``(long int)``
cast), spanning ``position - N//2 .. position - N//2 + N - 1`` on each axis (RELION's ``FIRST_XMIPP_INDEX``; an odd
box about N//2 alike). Pixels beyond the micrograph are filled as ``edge`` says: ``repeat`` copies the nearest
edge pixel (RELION: the row or column at the edge repeated, corners the corner pixel), ``zero`` writes 0, ``mean``
the micrograph's mean; ``drop`` is the caller's (such boxes are left out, :func:`crossing_edge`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EDGES = ("repeat", "drop", "zero", "mean")


def integer_positions(coordinates: np.ndarray) -> np.ndarray:
    """The integer pixel positions (n, 2) of coordinates (n, 2) as RELION takes them: truncated toward zero."""
    return np.trunc(np.asarray(coordinates, np.float64)).astype(np.int64)


def first_offset(box: int) -> int:
    """Where a box of ``box`` pixels starts relative to its centre: -(N//2) (RELION's FIRST_XMIPP_INDEX)."""
    return -(box // 2)


def outside(positions: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Which integer positions (n, 2; x, y) lie outside a micrograph of ``shape`` (H, W)."""
    height, width = shape
    x, y = positions[:, 0], positions[:, 1]
    return (x < 0) | (x >= width) | (y < 0) | (y >= height)


def crossing_edge(positions: np.ndarray, box: int, shape: Sequence[int]) -> np.ndarray:
    """Which boxes of ``box`` pixels at ``positions`` (n, 2; x, y) reach beyond a micrograph of ``shape`` (H, W)."""
    height, width = shape
    start = positions + first_offset(box)
    return (start[:, 0] < 0) | (start[:, 1] < 0) | (start[:, 0] + box > width) | (start[:, 1] + box > height)


def boxes(micrograph: np.ndarray, positions: np.ndarray, box: int, edge: str = "repeat", mean: float = 0.0,
          out: np.ndarray | None = None) -> np.ndarray:
    """The boxes (n, N, N) of ``micrograph`` (H, W; any real type, a memory map read only where boxes lie) at the
    integer ``positions`` (n, 2; x, y), in the micrograph's element type (or into ``out``, (n, N, N), a buffer the
    caller reuses); pixels beyond it filled as ``edge`` says (``mean``: the value written for ``edge='mean'``)."""
    height, width = micrograph.shape
    if out is None:
        out = np.empty((len(positions), box, box), micrograph.dtype)
    start = positions + first_offset(box)
    edged = crossing_edge(positions, box, (height, width))
    # a box within the micrograph is one slice copied into place: the loop's cost a box (about a microsecond) is
    # small next to its copy, and unlike an index array the boxes land in the caller's buffer
    for i, (x, y) in zip(np.flatnonzero(~edged).tolist(), start[~edged].tolist()):
        out[i] = micrograph[y:y + box, x:x + box]
    if edged.any():
        steps = np.arange(box)
        rows = start[edged, 1, None] + steps  # (e, N)
        columns = start[edged, 0, None] + steps
        # RELION's edge rule is the nearest pixel within the micrograph on each axis: clamped indices
        crossing = micrograph[np.clip(rows, 0, height - 1)[:, :, None], np.clip(columns, 0, width - 1)[:, None, :]]
        if edge in ("zero", "mean"):
            beyond = ((rows < 0) | (rows >= height))[:, :, None] | ((columns < 0) | (columns >= width))[:, None, :]
            crossing[beyond] = 0.0 if edge == "zero" else mean
        out[edged] = crossing
    return out
