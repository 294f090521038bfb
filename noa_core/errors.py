"""Exception types raised by noa_core.

Every error a user can cause has its own type so that the CLI and the service can turn it into a
one-line message (CLI exit code 2, HTTP 4xx) without inspecting message text. All of them derive
from :class:`NoaError`; the layout errors also derive from ``ValueError`` for Python callers.

The library speaks in parameters: a message that points at a parameter other than the one it concerns (the
remedy: "give ... to replace it") names it with :func:`param`, and each door spells it its own way
(:meth:`NoaError.spelt`): ``--force`` on the command line, ``overwrite`` over HTTP and from Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_MARK = "\x1f"  # unit separator: around a parameter named in a message, never in a file name or a number
_NAMED = re.compile(f"{_MARK}([A-Za-z_][A-Za-z0-9_]*)(?:=([^{_MARK}]*))?{_MARK}")
# How a door writes a parameter named in a message, and the value it would take (None: no value).
Spelling = Callable[[str, "str | None"], str]


def param(name: str, value: object = None) -> str:
    """``name`` (taking ``value``) as a message names it, for each door to spell: ``param("eer_group_last",
    "keep")`` reads ``--eer-group-last keep`` on the command line and ``eer_group_last=keep`` from Python."""
    return f"{_MARK}{name}{'' if value is None else f'={value}'}{_MARK}"


def keyword_spelling(name: str, value: str | None) -> str:
    """A parameter as Python and JSON name it: ``overwrite``, ``level=N``."""
    return name if value is None else f"{name}={value}"


def spelt(text: str, spelling: Spelling = keyword_spelling) -> str:
    """``text`` (a message, a notice) with the parameters it names written as ``spelling`` writes them."""
    return _NAMED.sub(lambda named: spelling(named[1], named[2]), text)


class NoaError(Exception):
    """Base class of every error noa raises on purpose."""

    def spelt(self, spelling: Spelling = keyword_spelling) -> str:
        """The message, its parameters written as ``spelling`` writes them."""
        return spelt(super().__str__(), spelling)

    def __str__(self) -> str:
        return self.spelt()


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


# ---------------------------------------------------------------------------------------------
# Files (noa_core.io). Messages are one line: "<file>: <header field>: <what is wrong>".
# ---------------------------------------------------------------------------------------------


class FileFormatError(NoaError, ValueError):
    """A file cannot be read or written as asked; the message names the file and the field."""


class MissingFileError(FileFormatError, FileNotFoundError):
    """An input file, or the folder of an output, does not exist."""


class NotAFileError(FileFormatError, IsADirectoryError):
    """A path names a directory (or another non-regular file) where a file is needed."""


class EmptyFileError(FileFormatError):
    """An input file holds no bytes."""


class UnknownFormatError(FileFormatError):
    """Neither the magic bytes nor the extension say MRC or TIFF."""


class HeaderError(FileFormatError):
    """A header field is invalid: a size, the space group, mz, the label count, ..."""


class SizeError(HeaderError):
    """Sizes are zero, negative, or so large that their product is absurd."""


class UnsupportedModeError(HeaderError):
    """The MRC mode is not one of 0, 1, 2, 3, 4, 6, 12 and 101."""


class AxisMappingError(HeaderError):
    """MRC mapc/mapr/maps is not a permutation, or TIFF axes cannot be mapped onto BDHW."""


class TruncatedFileError(FileFormatError):
    """The file holds fewer bytes than its header promises."""


class CorruptFileError(FileFormatError):
    """The file structure is damaged or is not an image (e.g. a TIFF that tifffile cannot parse)."""


class OutputExistsError(FileFormatError, FileExistsError):
    """The output exists and overwriting was not asked for."""


class NoSpaceError(FileFormatError):
    """The disk (or quota) has no room for an output; found before any data are written."""


class OutputIsInputError(OutputExistsError):
    """The output path names one of the inputs."""


class WriteDTypeError(FileFormatError, DTypeError):
    """The array's element type cannot be stored in the chosen format without an explicit dtype."""


class OverlapError(StrideError):
    """An output overlaps an input (or another output) other than element-for-element."""


class ReadOnlyError(NoaError, ValueError):
    """An output is read-only (e.g. a memory-mapped file opened for reading)."""


class SchedulerError(NoaError, RuntimeError):
    """Dask is not installed, or the scheduler named by the user cannot be reached or used."""


class ParameterError(NoaError, ValueError):
    """An operation's parameter is missing, unknown, of the wrong type or out of range.

    ``param`` is the parameter's name (None when the call itself is wrong) and ``problem`` what is
    wrong with it, so that a door can name the parameter its own way (``--axes``, ``axes``); ``among``: the
    parameters of which one must be given, when none was.
    """

    def __init__(self, problem: str, param: str | None = None, *, among: tuple[str, ...] = ()):
        message = problem if param is None else f"{param}: {problem}"
        if among:
            message += ": give " + (f"{', '.join(among[:-1])} or {among[-1]}" if len(among) > 1 else among[0])
        super().__init__(message)
        self.param, self.problem, self.among = param, problem, among


class LimitError(NoaError, ValueError):
    """The output would exceed a limit this process was given (a service's voxel limit)."""


class MemoryLimitError(LimitError):
    """A computation would need more memory at once than the machine has available."""


class ValueRangeError(NoaError, ValueError):
    """The data's values do not allow the operation: NaN or infinite values where finite ones are needed."""


class PathRefusedError(NoaError, PermissionError):
    """A path named inside a file (a particle file's stack) that the caller's rules refuse: outside the service's
    data root, absolute, through a link out of it."""


class SectionMismatchError(ShapeError):
    """Inputs to be stacked together (joined) differ in section size, depth or element type."""
