"""User functions compiled once: kernels cached by what defines a function, not by its identity.

``noa.ewise(a, out, lambda v: v * 2.0)`` in a loop creates a new function object at every
evaluation of the lambda, so a cache keyed by identity compiles the kernel again each time
(0.25-0.5 s). :func:`canonical` maps every user function to a *representative* that the kernel
caches of :mod:`noa_core.kernels.cpu` and :mod:`noa_core.kernels.cuda` key on; two functions get
the same representative when numba would compile them to the same code:

- the same code object (bytecode, constants, nested code objects, names; Python's code equality);
- closure cells holding equal values;
- the current values of the globals the code reads (``LOAD_GLOBAL``, nested code included), and of
  the attributes the code reads from a module it uses as a global (``cfg.scale``);
- equal default arguments.

Values compare by type and bits for scalars (``1``, ``1.0`` and ``True`` differ, so do ``0.0`` and
``-0.0``; NaN equals NaN), element by element for tuples, by content for NumPy arrays up to
:data:`ARRAY_KEY_LIMIT` bytes (numba bakes them into the code), by identity and code for Python
functions used as globals or captured (numba calls only those it has registered, by identity:
``register_jitable``, ``overload``), by identity for modules and numba dispatchers, and by their own
equality for other hashable objects (types, dtypes, enums).

A representative is a private copy of the first function seen: its closure cells, the globals its
code reads and its defaults are frozen (arrays copied, other values shared), so numba, which reads
globals and closures again when it compiles each new argument type, never sees a value that
changed after the key was taken.

A function whose definition holds something that cannot be compared (a list, a dict, an array
larger than the limit...) keeps today's behaviour: it is compiled for each new function object,
and a warning, once per code object, says which variable prevents caching. The cache is an LRU of
:data:`CACHE_SIZE` representatives; evicting one drops the kernels built around it (numba keeps
the machine code until the process exits, as for expressions: see :mod:`noa_core.compute.expr`).
"""

from __future__ import annotations

import builtins
import dis
import functools
import hashlib
import os
import struct
import sys
import threading
import types
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from noa_core.kernels.operators import BUILTIN_OPS

# Representatives kept (with their kernels), least recently used dropped first.
CACHE_SIZE = 128
# NumPy arrays in a function's definition are compared by content up to this size (hashing costs
# about 1 ms per MB at every call); larger ones make the function uncacheable.
ARRAY_KEY_LIMIT = 1 << 20

_LOCK = threading.Lock()
_CACHE: OrderedDict[tuple, Callable] = OrderedDict()
_MISSES = [0]  # representatives created (functions compiled anew), evicted ones included
_WARNED: set = set()
_MISSING = object()


class UncacheableError(Exception):
    """Raised internally when a function's definition holds a value that cannot be compared."""


def compiled_count() -> int:
    """How many distinct user functions this process has admitted (each compiles its own kernels)."""
    return _MISSES[0]


def cached_count() -> int:
    """How many representatives the cache holds now."""
    return len(_CACHE)


def clear() -> None:
    """Drop every representative and the kernels built around them."""
    with _LOCK:
        evicted = list(_CACHE.values())
        _CACHE.clear()
    for function in evicted:
        _forget(function)


# -- what a code object reads ------------------------------------------------------------------


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


@functools.lru_cache(maxsize=1024)
def _names_read(code: types.CodeType) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The global names the code and its nested code objects read, and for each, the attributes
    read from it directly (``cfg.scale``: LOAD_GLOBAL then LOAD_ATTR/LOAD_METHOD)."""
    globals_read: dict[str, list[str]] = {}
    for c in _codes(code):
        previous = None
        for instruction in dis.get_instructions(c):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                globals_read.setdefault(instruction.argval, [])
                previous = instruction.argval
                continue
            if previous is not None and instruction.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                globals_read[previous].append(instruction.argval)
            previous = None
    return tuple(globals_read), {g: tuple(dict.fromkeys(a)) for g, a in globals_read.items() if a}


# -- keys ----------------------------------------------------------------------------------------

_EXACT = (type(None), bool, int, str, bytes)


def _is_plain(value) -> bool:
    """Scalars and tuples of scalars: the module attributes worth keying on."""
    if isinstance(value, (*_EXACT, float, complex, np.generic)):
        return True
    return isinstance(value, tuple) and all(_is_plain(v) for v in value)


def _value_key(value, where: str):
    """A hashable key equal for values numba compiles alike; UncacheableError naming ``where``."""
    kind = type(value)
    if kind in _EXACT:
        return kind, value
    if kind is float:
        return float, struct.pack("<d", value)
    if kind is complex:
        return complex, struct.pack("<dd", value.real, value.imag)
    if isinstance(value, np.generic):
        return "numpy scalar", value.dtype.str, value.tobytes()
    if isinstance(value, tuple):
        return kind, tuple(_value_key(v, where) for v in value)
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise UncacheableError(f"{where} is an array of Python objects")
        if value.nbytes > ARRAY_KEY_LIMIT:
            raise UncacheableError(f"{where} is an array of {value.nbytes} bytes, more than the "
                                   f"{ARRAY_KEY_LIMIT} compared by content (pass it as an input instead)")
        digest = hashlib.blake2b(np.ascontiguousarray(value).data, digest_size=16).digest()
        return "ndarray", value.dtype.str, value.shape, value.flags.c_contiguous, value.flags.f_contiguous, digest
    if kind is types.FunctionType:
        return "function", value, value.__code__  # a registered helper: numba knows it by identity
    if isinstance(value, types.ModuleType):
        return "module", value
    try:
        hash(value)
    except TypeError:
        raise UncacheableError(f"{where} holds a {kind.__name__}, which cannot be compared") from None
    return kind, value  # dispatchers, builtins, types, dtypes, enums: their own equality


def _function_key(function: types.FunctionType) -> tuple:
    """The key of a Python function: code, closure values, globals read, defaults."""
    code = function.__code__
    name = code.co_name
    closure = ()
    if function.__closure__:
        closure = tuple(_value_key(_cell_value(cell), f"closure variable {var!r} of {name}")
                        for var, cell in zip(code.co_freevars, function.__closure__))
    globals_read, attributes = _names_read(code)
    namespace = function.__globals__
    # FunctionType.__builtins__ (Python 3.10+): not in every typeshed mypy may use, so read as Any
    builtins_given = cast(Any, function).__builtins__
    builtin_names = builtins_given if isinstance(builtins_given, dict) else vars(builtins)
    read = []
    for var in globals_read:
        value = namespace.get(var, _MISSING)
        if value is _MISSING:
            value = builtin_names.get(var, _MISSING)
        if value is _MISSING:
            read.append((var, "missing"))
            continue
        key = _value_key(value, f"global {var!r} read by {name}")
        if isinstance(value, types.ModuleType) and var in attributes:
            # numba reads ``module.attribute`` when it compiles: key the plain values it reads.
            key += tuple((a, _value_key(v, f"{var}.{a}")) for a in attributes[var]
                         if _is_plain(v := getattr(value, a, _MISSING)))
        read.append((var, key))
    defaults: tuple = ()
    kwdefaults: tuple = ()
    if function.__defaults__:
        defaults = _value_key(function.__defaults__, f"a default argument of {name}")
    if function.__kwdefaults__:
        kwdefaults = tuple(sorted((k, _value_key(v, f"default argument {k!r} of {name}"))
                                  for k, v in function.__kwdefaults__.items()))
    return code, closure, tuple(read), defaults, kwdefaults


def _cell_value(cell: types.CellType):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet assigned
        return _MISSING


# -- representatives ---------------------------------------------------------------------------


def _frozen_value(value):
    """A copy of ``value`` that later changes to the original cannot reach."""
    if isinstance(value, np.ndarray):
        copy = value.copy(order="K")
        copy.flags.writeable = False
        return copy
    if type(value) is tuple:
        return tuple(_frozen_value(v) for v in value)
    return value


def _frozen_function(function: types.FunctionType) -> types.FunctionType:
    """A private copy of ``function`` whose closure, globals read and defaults are frozen."""
    code = function.__code__
    namespace = function.__globals__
    # FunctionType.__builtins__ (Python 3.10+): not in every typeshed mypy may use, so read as Any
    builtins_given = cast(Any, function).__builtins__
    builtin_names = builtins_given if isinstance(builtins_given, dict) else vars(builtins)
    frozen_globals = {"__builtins__": builtin_names, "__name__": namespace.get("__name__", "noa_user")}
    for var in _names_read(code)[0]:
        if var in namespace:
            frozen_globals[var] = _frozen_value(namespace[var])
    closure = None
    if function.__closure__:
        closure = tuple(types.CellType() if (v := _cell_value(cell)) is _MISSING else types.CellType(_frozen_value(v))
                        for cell in function.__closure__)
    defaults = _frozen_value(function.__defaults__) if function.__defaults__ else None
    copy = types.FunctionType(code, frozen_globals, function.__name__, defaults, closure)
    copy.__kwdefaults__ = dict(function.__kwdefaults__) if function.__kwdefaults__ else None
    copy.__qualname__ = function.__qualname__
    copy.__module__ = function.__module__
    copy.__doc__ = function.__doc__
    return copy


def _forget(function: Callable) -> None:
    """Drop the kernels built around an evicted representative, on every loaded back-end."""
    for module_name in ("noa_core.kernels.cpu", "noa_core.kernels.cuda"):
        module = sys.modules.get(module_name)
        if module is not None:
            module.forget(function)


def _admit(key: tuple, function: Callable) -> Callable:
    """Store ``function`` under ``key`` (unless another thread did first), evicting the oldest."""
    evicted = []
    with _LOCK:
        existing = _CACHE.get(key)
        if existing is not None:
            _CACHE.move_to_end(key)
            return existing
        _CACHE[key] = function
        _MISSES[0] += 1
        while len(_CACHE) > max(CACHE_SIZE, 1):
            evicted.append(_CACHE.popitem(last=False)[1])
    for old in evicted:
        _forget(old)
    return function


def _warn_once(function: types.FunctionType, reason: str) -> None:
    code = function.__code__
    with _LOCK:
        if code in _WARNED or len(_WARNED) > 4096:
            return
        _WARNED.add(code)
    warnings.warn(
        f"noa compiles {function.__qualname__} (line {code.co_firstlineno} of {code.co_filename}) anew for each "
        f"function object: {reason}, so its kernels cannot be cached by value",
        UncacheableFunctionWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The stack level of the first frame outside noa_core (the user's call to ewise, iwise...)."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame: types.FrameType | None
    frame, level = sys._getframe(2), 2  # warnings.warn counts _warn_once's frame as level 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


class UncacheableFunctionWarning(UserWarning):
    """A user function is compiled per function object because its definition cannot be compared."""


def _is_builtin(op: Callable) -> bool:
    """A built-in element operator: its kernels are cached by name (on disk), never frozen."""
    return BUILTIN_OPS.get(op.__name__) is op


def canonical(op: Callable) -> Callable:
    """The representative of a user function: the cached one compiled for an equal definition.

    Anything but a plain Python function (numba dispatchers, built-in operators, expressions) is
    returned as it is: kernels key on its identity, which is stable.
    """
    if type(op) is not types.FunctionType or _is_builtin(op):
        return op
    try:
        key = ("value", _function_key(op))
        with _LOCK:
            found = _CACHE.get(key)
            if found is not None:
                _CACHE.move_to_end(key)
                return found
        return _admit(key, _frozen_function(op))
    except UncacheableError as exc:
        _warn_once(op, str(exc))
    except (TypeError, ValueError) as exc:  # an object whose hash or equality misbehaves
        _warn_once(op, f"comparing its definition failed ({exc})")
    # Today's behaviour: the function object itself (held here, so its id cannot be reused while
    # the entry lives), and the LRU bounds how many of them keep kernels.
    return _admit(("identity", id(op)), op)
