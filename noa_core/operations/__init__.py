"""The operation registry: one declaration per file operation, from which every door is derived.

Each built-in operation is declared by one light module here (``info``, ``stats``, ``permute``, ...)
defining ``OPERATION``, an :class:`Operation` of its kind (:class:`Writes`, :class:`WritesSeveral`,
:class:`Reports`, :class:`Edits`), whose work (plan, report, ...) lives in the module of the same name in
:mod:`noa_core.operations.implementations`, named by :class:`Implementation` references and imported on first
call. The CLI builds ``noa NAME`` from it, the service its routes ``/v1/upload/NAME``, ``/v1/paths/NAME`` and
its job type, :mod:`noa_core.run` the local and Dask drivers and ``noa warmup`` the kernels to compile. Adding
an operation is a declaration module (listed in :data:`BUILTIN`), its implementation module and its tests; a
module outside noa can :func:`register` its own (its functions given directly, or as :class:`Implementation`
references), and the modules named in ``NOA_OPERATIONS`` (comma-separated) are imported on first use, so that
their operations reach every door, the service and its workers included.

Example::

    from noa_core import operations
    from noa_core.run import local

    local.write(operations.get("permute").task(axes=(0, 1, 3, 2)), "in.mrc", "out.mrc")
    operations.get("info").describe("in.mrc")
"""

from __future__ import annotations

import importlib
import os
import re

from noa_core.errors import ParameterError
from noa_core.operations.spec import (
    REQUIRED,
    Choice,
    Edits,
    FileTask,
    Flag,
    Implementation,
    Inputs,
    Integer,
    Integers,
    Name,
    Operation,
    Options,
    Param,
    PerAxis,
    Real,
    Reals,
    Reports,
    Text,
    Writes,
    WritesDataSet,
    WritesSeveral,
)

__all__ = ["BUILTIN", "REQUIRED", "Choice", "Edits", "FileTask", "Flag", "Implementation", "Inputs", "Integer",
           "Integers", "Name", "Operation", "Options", "Param", "PerAxis", "Real", "Reals", "Reports", "Text", "Writes",
           "WritesDataSet", "WritesSeveral", "find", "get", "markdown_table", "names", "operations", "register",
           "unregister"]

BUILTIN = ("info", "preview", "stats", "permute", "broadcast", "copy", "ewise", "split", "join", "scale", "normalize",
           "header",
           "resize", "bin", "flip", "rotx", "sections", "average", "rescale", "filter", "powerspectrum", "fsc", "mask",
           "transform", "symmetrize", "extract", "tiltseries", "tiltcheck")  # modules of this package, in CLI order
PLUGINS_VARIABLE = "NOA_OPERATIONS"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_registry: dict[str, Operation] = {}
_loaded = False


def register(operation: Operation, *, replace: bool = False) -> Operation:
    """Add ``operation`` to every door; a name already taken is refused unless ``replace``."""
    _load()
    if not _NAME.match(operation.name):
        raise ParameterError(f"operation name {operation.name!r}: lower-case letters, digits and _ only")
    if operation.name in _registry and not replace:
        raise ParameterError(f"operation {operation.name!r} is already registered")
    _registry[operation.name] = operation
    return operation


def unregister(name: str) -> None:
    """Remove an operation (a test's throw-away one, say)."""
    _load()
    _registry.pop(name, None)


def get(name: str) -> Operation:
    """The operation called ``name``, or ParameterError listing the known ones."""
    _load()
    try:
        return _registry[name]
    except KeyError:
        raise ParameterError(f"unknown operation {name!r}; expected one of {', '.join(_registry)}") from None


def find(name: str) -> Operation | None:
    """The operation called ``name``, or None. A built-in one in a process that has loaded no declaration yet
    and names no plugins is imported alone: a command line needs only its own (the others cost 14 ms)."""
    if not _loaded and name in BUILTIN and not os.environ.get(PLUGINS_VARIABLE, "").strip():
        return importlib.import_module(f"{__name__}.{name}").OPERATION
    _load()
    return _registry.get(name)


def names() -> list[str]:
    """Every operation's name, built-ins first in :data:`BUILTIN` order, then in registration order."""
    _load()
    return list(_registry)


def operations() -> list[Operation]:
    _load()
    return list(_registry.values())


def markdown_table() -> str:
    """The README's table of operations: command, what it does, an example (``python -m noa_core.operations``)."""
    rows = ["| command | what it does | example |", "| --- | --- | --- |"]
    for operation in operations():
        cells = (f"`noa {operation.name}`", operation.summary, f"`{operation.examples[0]}`")
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def _load() -> None:
    """Import the built-in declarations, then the modules named in NOA_OPERATIONS (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in BUILTIN:
        operation = importlib.import_module(f"{__name__}.{name}").OPERATION
        _registry[operation.name] = operation
    # (not the builtin filter: importing the operation module `filter` rebinds that name in this package)
    for module in [m.strip() for m in os.environ.get(PLUGINS_VARIABLE, "").split(",") if m.strip()]:
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            raise ParameterError(f"{PLUGINS_VARIABLE}: cannot import {module!r} ({exc})") from None
        if hasattr(loaded, "OPERATION"):
            register(loaded.OPERATION, replace=True)
