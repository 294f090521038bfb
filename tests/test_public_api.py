"""The public API is typed and documented: every function that ``noa_core.__all__`` and ``noa_core.io.__all__``
export, and every public method of :class:`noa_core.Array` and :class:`noa_core.Image`, has full annotations and a
Google-style docstring whose ``Args:`` section names exactly its parameters, in order (so the docs cannot drift from
the signature), with ``Returns:`` (or ``Yields:``) unless it returns None; a ``Raises:`` section, where there is one,
names exception classes that exist."""

import builtins
import inspect
import re
from collections.abc import Callable, Iterator

import pytest

import noa_core
import noa_core.io
from noa_core import errors

SECTION = re.compile(r"^(\s*)(Args|Arguments|Returns|Yields|Raises|Examples?|Notes?|See Also|Attributes):\s*$")
ENTRY = re.compile(r"^(\*{0,2}[A-Za-z_]\w*)(?:\s*\([^)]*\))?:(\s|$)")


def public_callables() -> Iterator[tuple[str, Callable, bool]]:
    """``(qualified name, function, is a method)`` of each function exported and each public method of the
    exported classes Array and Image (property getters included: their return type)."""
    for module in (noa_core, noa_core.io):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isfunction(value):
                yield f"{module.__name__}.{name}", value, False
    for cls in (noa_core.Array, noa_core.Image):
        for name, value in vars(cls).items():
            if name.startswith("_"):
                continue
            if isinstance(value, property):
                yield f"{cls.__name__}.{name}", value.fget, True
            elif isinstance(value, (staticmethod, classmethod)):
                yield f"{cls.__name__}.{name}", value.__func__, isinstance(value, classmethod)
            elif inspect.isfunction(value):
                yield f"{cls.__name__}.{name}", value, True


def sections(doc: str) -> dict[str, list[str]]:
    """The entries of each Google-style section of ``doc`` (an entry per name: ``name (type): what``), by title."""
    found: dict[str, list[str]] = {}
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        header = SECTION.match(line)
        if header is None:
            continue
        indent = len(header.group(1))
        entries: list[str] = []
        entry_indent = None
        for body in lines[i + 1:]:
            if not body.strip():
                continue
            depth = len(body) - len(body.lstrip())
            if depth <= indent:
                break
            if entry_indent is None:
                entry_indent = depth
            if depth == entry_indent:
                entry = ENTRY.match(body.strip())
                entries.append(entry.group(1) if entry else body.strip())
        found[header.group(2)] = entries
    return found


def problems(function: Callable, method: bool) -> list[str]:
    """What ``function``'s annotations and docstring lack, in words; empty when it is typed and documented."""
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())[1 if method else 0:]  # self (or cls) is not documented
    found = []
    unannotated = [p.name for p in parameters if p.annotation is inspect.Parameter.empty]
    if unannotated:
        found.append(f"parameters without a type: {', '.join(unannotated)}")
    returns = signature.return_annotation
    if returns is inspect.Signature.empty:
        found.append("no return type")
    doc = inspect.getdoc(function) or ""
    titled = sections(doc)
    if parameters:
        if "Args" not in titled and "Arguments" not in titled:
            found.append("no Args: section")
        else:
            documented = [name.lstrip("*") for name in titled.get("Args", titled.get("Arguments", []))]
            if documented != [p.name for p in parameters]:
                found.append(f"Args: names {documented}, the parameters are {[p.name for p in parameters]}")
    returns_none = returns in (None, "None")
    # a method without parameters (a property, Array.numpy) says what it gives in its summary
    if not returns_none and (parameters or not method) and "Returns" not in titled and "Yields" not in titled:
        found.append("no Returns: section")
    for raised in titled.get("Raises", []):
        if not isinstance(getattr(errors, raised, getattr(builtins, raised, None)), type):
            found.append(f"Raises: names {raised!r}, not an exception of noa_core.errors or Python's")
    return found


PUBLIC = list(public_callables())


def test_the_walk_reaches_the_public_api():
    names = {name for name, _, _ in PUBLIC}
    assert {"noa_core.asarray", "noa_core.bin_voxels", "noa_core.io.read", "noa_core.io.write", "Array.reshape",
            "Image.permute"} <= names
    assert len(names) > 50


@pytest.mark.parametrize(("name", "function", "method"), PUBLIC, ids=[name for name, _, _ in PUBLIC])
def test_public_function_is_typed_and_documented(name, function, method):
    found = problems(function, method)
    assert not found, f"{name}: " + "; ".join(found)


def _documented(array: int, factor: int = 2) -> int:
    """Summary.

    Args:
        array (int): the input,
            on two lines.
        factor: the factor.

    Returns:
        The product.

    Raises:
        ParameterError: when the factor is below 1.
    """
    return array * factor


def _drifted(array, *, scale: float):
    """Summary.

    Args:
        array: the input.
        factor: a parameter renamed since.

    Raises:
        NoSuchError: never.
    """
    return array


def _no_return() -> None:
    """Nothing returned, nothing taken: no section needed."""


def test_the_checks_find_what_is_missing_and_accept_what_is_complete():
    assert problems(_documented, method=False) == []
    assert problems(_no_return, method=False) == []
    found = problems(_drifted, method=False)
    assert found == ["parameters without a type: array", "no return type",
                     "Args: names ['array', 'factor'], the parameters are ['array', 'scale']",
                     "no Returns: section",
                     "Raises: names 'NoSuchError', not an exception of noa_core.errors or Python's"]
