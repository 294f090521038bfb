"""Exception types raised by noa_core.

Every error a user can cause has its own type so that the CLI and the service can turn it into a
one-line message (CLI exit code 2, HTTP 4xx) without inspecting message text. All of them derive
from :class:`NoaError`; the layout errors also derive from ``ValueError`` for Python callers.
"""


class NoaError(Exception):
    """Base class of every error noa raises on purpose."""


class LayoutError(NoaError, ValueError):
    """A shape, strides, order or permutation is not valid."""


class ShapeError(LayoutError):
    """A shape has too many dimensions, a negative size, or the wrong rank for an operation."""


class PermutationError(LayoutError):
    """An axis permutation is not a permutation of 0..3."""


class BroadcastError(LayoutError):
    """Shapes cannot be broadcast together."""


class ReshapeError(LayoutError):
    """A reshape changes the element count or cannot be expressed as a view."""


class StrideError(LayoutError):
    """Strides are negative, misaligned, or unsafe to write through."""


class DTypeError(NoaError, TypeError):
    """An element type is not supported, or does not fit the operation."""


class DeviceError(NoaError, ValueError):
    """A device is unknown or unavailable, or operands live on different devices."""
