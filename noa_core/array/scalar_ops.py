"""Scalar rules shared by noa's numba kernels and its NumPy path (which must give the same bits): the
NaN-propagating minimum and maximum, Chan et al.'s merge of two sets of moments, and how the moments
kernel cuts its work. Plain Python, so that the NumPy path runs without numba; the kernels compile
these same functions."""

from __future__ import annotations

CHUNK = 1 << 15  # elements of a row one task of a chunked kernel takes (moments, reductions)
LANES = 64  # independent sums a contiguous run is added in (vectorised), then added in order


def minimum(a, b):
    """NaN-propagating minimum, like numpy.min."""
    if a <= b or a != a:
        return a
    return b


def maximum(a, b):
    """NaN-propagating maximum, like numpy.max."""
    if a >= b or a != a:
        return a
    return b


def chan_merge(n, mean, m2, k, other_mean, other_m2):
    """Count, mean and squared deviations of two disjoint sets of values, from each set's
    (Chan et al.: exact, and stable where sums of squares are not)."""
    total = n + k
    delta = other_mean - mean
    distance = abs(delta)
    return total, mean + delta * (k / total), m2 + other_m2 + distance * distance * (n * k / total)
