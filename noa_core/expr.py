"""A small, safe expression language for element-wise work over several arrays.

``compile_expression("a * b + 1", 2)`` parses the text with :mod:`ast`, accepts only arithmetic,
comparisons, conditional expressions and a fixed list of math functions over the names ``a``,
``b``, ``c`` ... (one per input, in order), and builds a numba-compiled element function from the
checked tree. Nothing the user typed is ever evaluated as Python.
"""

from __future__ import annotations

import ast
import hashlib
import math
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noa_core import runtime
from noa_core.errors import NoaError


class ExpressionError(NoaError, ValueError):
    """An expression is not valid in noa's expression language."""


# Functions users may call: name -> (arity, scalar template for numba, array template for NumPy).
FUNCTIONS: dict[str, tuple[int, str, str]] = {
    "abs": (1, "np.abs({0})", "np.abs({0})"),
    "sqrt": (1, "np.sqrt({0})", "np.sqrt({0})"),
    "exp": (1, "np.exp({0})", "np.exp({0})"),
    "log": (1, "np.log({0})", "np.log({0})"),
    "log10": (1, "np.log10({0})", "np.log10({0})"),
    "sin": (1, "np.sin({0})", "np.sin({0})"),
    "cos": (1, "np.cos({0})", "np.cos({0})"),
    "tan": (1, "np.tan({0})", "np.tan({0})"),
    "floor": (1, "np.floor({0})", "np.floor({0})"),
    "ceil": (1, "np.ceil({0})", "np.ceil({0})"),
    "min": (2, "min({0}, {1})", "np.minimum({0}, {1})"),
    "max": (2, "max({0}, {1})", "np.maximum({0}, {1})"),
    "clip": (3, "min(max({0}, {1}), {2})", "np.minimum(np.maximum({0}, {1}), {2})"),
    "where": (3, "({1} if {0} else {2})", "np.where({0}, {1}, {2})"),
}
CONSTANTS = {"pi": repr(math.pi), "e": repr(math.e)}
MAX_INPUTS = 26
MAX_LENGTH = 2000

_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_UNARY = {ast.USub: ("-{0}", "-{0}"), ast.UAdd: ("+{0}", "+{0}"), ast.Not: ("not {0}", "np.logical_not({0})")}
_BOOL = {ast.And: ("and", "np.logical_and"), ast.Or: ("or", "np.logical_or")}


@dataclass(frozen=True)
class Expression:
    """A checked expression: its text, input names, and two sources generated from its tree.

    ``source`` is the element function numba compiles (scalars in, scalar out); ``array_source``
    is the same expression over NumPy arrays, which fixes the result dtype by NumPy's promotion
    rules and serves as an independent reference.
    """

    text: str
    names: tuple[str, ...]
    source: str
    array_source: str

    def evaluate_numpy(self, *arrays: np.ndarray) -> np.ndarray:
        """The expression evaluated by NumPy on whole arrays (broadcasting as NumPy does)."""
        function = _define(self.array_source)
        with np.errstate(all="ignore"):
            return np.asarray(function(*arrays))

    def result_dtype(self, dtypes: list[np.dtype]) -> np.dtype:
        """The dtype NumPy gives this expression on inputs of ``dtypes`` (the output's default)."""
        return self.evaluate_numpy(*(np.ones(1, dtype=dt) for dt in dtypes)).dtype

    def numba_function(self) -> Callable:
        """The element function compiled by numba (once per expression)."""
        return _compile_numba(self.source)


def input_names(count: int) -> tuple[str, ...]:
    if not 1 <= count <= MAX_INPUTS:
        raise ExpressionError(f"an expression takes 1 to {MAX_INPUTS} inputs, got {count}")
    return tuple(string.ascii_lowercase[:count])


def compile_expression(text: str, count: int) -> Expression:
    """Check ``text`` against the language and return an :class:`Expression` over ``count`` inputs."""
    names = input_names(count)
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression is {len(text)} characters long; the limit is {MAX_LENGTH}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"expression {text!r} is not valid: {exc.msg} at column {exc.offset}") from None
    scalar, array = _emit(tree.body, names, text)
    signature = f"def element({', '.join(names)}):\n    return "
    return Expression(text=text, names=names, source=signature + scalar + "\n", array_source=signature + array + "\n")


def _emit(node: ast.AST, names: tuple[str, ...], text: str) -> tuple[str, str]:
    """(scalar source, array source) for a checked node; anything else raises ExpressionError."""

    def both(template_scalar: str, template_array: str, *children: ast.AST) -> tuple[str, str]:
        parts = [_emit(child, names, text) for child in children]
        return (template_scalar.format(*(p[0] for p in parts)), template_array.format(*(p[1] for p in parts)))

    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        return repr(node.value), repr(node.value)
    if isinstance(node, ast.Name):
        if node.id in names:
            return node.id, node.id
        if node.id in CONSTANTS:
            return CONSTANTS[node.id], CONSTANTS[node.id]
        if len(node.id) == 1 and node.id in string.ascii_lowercase:
            raise ExpressionError(
                f"expression {text!r} uses input {node.id!r}, but only {len(names)} input(s) were given "
                f"({', '.join(names)})"
            )
        raise ExpressionError(f"expression {text!r} uses unknown name {node.id!r}; inputs are {', '.join(names)}")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        template = "({0} %s {1})" % _BINARY[type(node.op)]
        # numba raises on a complex division by zero; true_divide gives NumPy's inf/nan instead.
        scalar = "true_divide({0}, {1})" if isinstance(node.op, ast.Div) else template
        return both(scalar, template, node.left, node.right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        scalar, array = _UNARY[type(node.op)]
        return both(f"({scalar})", f"({array})", node.operand)
    if isinstance(node, ast.BoolOp) and type(node.op) in _BOOL:
        word, function = _BOOL[type(node.op)]
        slots = [f"{{{i}}}" for i in range(len(node.values))]
        array = slots[0]
        for slot in slots[1:]:
            array = f"{function}({array}, {slot})"
        # bool() keeps Python's and/or from returning an operand, so the result is a bool as in NumPy.
        return both("(" + f" {word} ".join(f"bool({slot})" for slot in slots) + ")", array, *node.values)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        operands = [node.left, *node.comparators]
        pairs = [f"({{{i}}} {_COMPARE[type(op)]} {{{i + 1}}})" for i, op in enumerate(node.ops)]
        array = pairs[0]
        for pair in pairs[1:]:
            array = f"np.logical_and({array}, {pair})"
        return both("(" + " and ".join(pairs) + ")", array, *operands)
    if isinstance(node, ast.IfExp):
        return both("({1} if {0} else {2})", "np.where({0}, {1}, {2})", node.test, node.body, node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        name = node.func.id
        if name not in FUNCTIONS:
            raise ExpressionError(
                f"expression {text!r} calls unknown function {name!r}; available: {', '.join(sorted(FUNCTIONS))}"
            )
        arity, scalar, array = FUNCTIONS[name]
        if len(node.args) != arity:
            raise ExpressionError(f"function {name!r} takes {arity} argument(s), got {len(node.args)}")
        return both(scalar, array, *node.args)
    snippet = ast.get_source_segment(text.strip(), node) or type(node).__name__
    raise ExpressionError(
        f"expression {text!r}: {snippet!r} is not allowed (arithmetic, comparisons and math functions only)"
    )


def _define(source: str) -> Callable:
    from noa_core.kernels import true_divide

    namespace: dict = {"np": np, "true_divide": true_divide}
    exec(compile(source, "<noa expression>", "exec"), namespace)  # noqa: S102 - generated from a checked tree
    return namespace["element"]


_NUMBA_CACHE: dict[str, Callable] = {}
_MODULE_SOURCE = Path(__file__).read_bytes()


def _compile_numba(source: str) -> Callable:
    function = _NUMBA_CACHE.get(source)
    if function is None:
        import numba

        # error_model='numpy': division by zero gives inf/nan as in NumPy instead of raising.
        function = numba.njit(nogil=True, error_model="numpy")(_define(source))
        # The generated source and this module (how it is compiled, what it may call) define the
        # function, so a digest of both names the kernels built around it in numba's on-disk cache
        # (see kernels.cpu._op_name): an expression compiles once per cache, not once per process.
        # The service turns this off: its clients' expressions must not fill the disk.
        if runtime.CACHE_EXPRESSIONS:
            function.noa_cache_tag = "expr" + hashlib.sha1(_MODULE_SOURCE + source.encode()).hexdigest()[:16]
        _NUMBA_CACHE[source] = function
    return function
