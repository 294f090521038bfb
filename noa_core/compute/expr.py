"""A small, safe expression language for element-wise work over several arrays.

``compile_expression("a * b + 1", 2)`` parses the text with :mod:`ast`, accepts only arithmetic,
comparisons, conditional expressions and a fixed list of math functions over the names ``a``,
``b``, ``c`` ... (one per input, in order), and folds the parts made of constants alone. For the
element types of the inputs, :meth:`Expression.numba_function` then writes one statement per
operation, each computed in the type NumPy gives it (NEP 50: Python constants are "weak"), and
numba compiles that. Nothing the user typed is ever evaluated as Python.
:meth:`Expression.numpy_function` computes the same operations, typed by the same writer, with NumPy
on whole arrays (noa_core.compute.compute_path's NumPy path for small files), giving the same bits, or
None when the expression uses an operation NumPy computes differently from numba. This module
imports numba only to compile an element function.

Every step is bounded, so no expression can hang a process: the text's length, the tree's size
and depth, and the size of folded integer constants are limited before the work they would cost.

Where noa knowingly differs from NumPy: complex values have no order (NumPy orders them
lexicographically); a negative integer exponent coming from an input is computed, not refused (NumPy
checks every element at run time); an expression of constants alone whose value is an integer beyond
64 bits is refused (NumPy gives an array of Python objects, which no image holds).
"""

from __future__ import annotations

import ast
import hashlib
import math
import string
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from noa_core import kernels  # a face: numba loads only to compile an element function
from noa_core.errors import NoaError


class ExpressionError(NoaError, ValueError):
    """An expression is not valid in noa's expression language."""


MAX_INPUTS = 26
MAX_LENGTH = 2000
# Operations, names and constants in one expression: compile time grows with them (the worst
# accepted expression compiles in a few seconds, see tests/compute/test_expr.py).
MAX_NODES = 300
# Nesting (a chain of n additions is n deep): the checks below recurse once per level.
MAX_DEPTH = 100
# Folded integers stay below 2**1024: larger ones fit no element type (not even as a float64),
# and the bound keeps folding (9**9**9) from running away.
MAX_CONSTANT_BITS = 1024
# Compiled element functions kept in this process with the kernels built around them, least
# recently used dropped first (the service may set it, as it sets runtime.CACHE_EXPRESSIONS). Each
# costs about the same (about 5 MB with one kernel), so a count is the knob. numba never returns the
# machine code of a dropped function, though (LLVM's MCJIT keeps it until the process exits, numba
# issues 5976 and 6707): dropping frees the Python side only, and what bounds a long-running
# process's memory is the number of distinct expressions it compiles (compiled_count) before it
# is replaced.
CACHE_SIZE = 32

_BINARY = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "true_divide",
           ast.FloorDiv: "floor_divide", ast.Mod: "remainder", ast.Pow: "power"}
_COMPARE = {ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
            ast.Eq: "equal", ast.NotEq: "not_equal"}
_UNARY = {ast.USub: "negative", ast.UAdd: "positive", ast.Not: "logical_not"}
_BOOL = {ast.And: "logical_and", ast.Or: "logical_or"}
# Functions users may call: name -> (arity, operation). clip and where are built from these.
FUNCTIONS: dict[str, tuple[int, str]] = {
    "abs": (1, "absolute"), "sqrt": (1, "sqrt"), "exp": (1, "exp"), "log": (1, "log"), "log10": (1, "log10"),
    "sin": (1, "sin"), "cos": (1, "cos"), "tan": (1, "tan"), "floor": (1, "floor"), "ceil": (1, "ceil"),
    "min": (2, "minimum"), "max": (2, "maximum"), "clip": (3, "clip"), "where": (3, "where"),
}
CONSTANTS = {"pi": math.pi, "e": math.e}

# How each operation is written in the element function, over operands already in its loop type.
_TEMPLATES = {
    "add": "{0} + {1}", "subtract": "{0} - {1}", "multiply": "{0} * {1}", "true_divide": "true_divide({0}, {1})",
    "floor_divide": "{0} // {1}", "remainder": "{0} % {1}",
    "power": "power({0}, {1})",  # NumPy's complex zero to a power (kernels.power)
    "less": "{0} < {1}", "less_equal": "{0} <= {1}", "greater": "{0} > {1}", "greater_equal": "{0} >= {1}",
    "equal": "{0} == {1}", "not_equal": "{0} != {1}",
    # NumPy's truth of a value (NaN is true).
    "logical_and": "({0} != 0) and ({1} != 0)", "logical_or": "({0} != 0) or ({1} != 0)", "logical_not": "{0} == 0",
    "negative": "-{0}", "positive": "+{0}", "absolute": "abs({0})",
    **{name: f"np.{name}({{0}})" for name in ("sqrt", "exp", "log", "log10", "sin", "cos", "tan", "floor", "ceil")},
    # NaN-propagating, like NumPy's.
    "minimum": "({0} if {0} <= {1} or {0} != {0} else {1})", "maximum": "({0} if {0} >= {1} or {0} != {0} else {1})",
}
# NumPy's signed integers wrap around; numba's signed +, - and * tell LLVM that they never overflow,
# which lets it fold `a < a + b` into `b > 0`. Computed in the unsigned type of their width, they wrap.
_WRAPPING = {"add": "{u}({0}) + {u}({1})", "subtract": "{u}({0}) - {u}({1})", "multiply": "{u}({0}) * {u}({1})"}
# The operators on Python constants (folding), with Python's rules (which NumPy uses for them).
# and/or/not are NumPy's logical functions, which give NumPy booleans: those are not folded.
_FOLD: dict[str, Callable] = {
    "add": lambda x, y: x + y, "subtract": lambda x, y: x - y, "multiply": lambda x, y: x * y,
    "true_divide": lambda x, y: x / y, "floor_divide": lambda x, y: x // y, "remainder": lambda x, y: x % y,
    "power": lambda x, y: x ** y, "less": lambda x, y: x < y, "less_equal": lambda x, y: x <= y,
    "greater": lambda x, y: x > y, "greater_equal": lambda x, y: x >= y, "equal": lambda x, y: x == y,
    "not_equal": lambda x, y: x != y, "negative": lambda x: -x, "positive": lambda x: +x,
}
_SYMBOLS = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/", "floor_divide": "//", "remainder": "%",
            "power": "**", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==",
            "not_equal": "!=", "logical_and": "and", "logical_or": "or", "logical_not": "not", "negative": "-",
            "positive": "+", "absolute": "abs", "minimum": "min", "maximum": "max"}
# Comparisons with an integer constant outside the other side's type are decided by its sign alone.
_BEYOND = {"less": (True, False), "less_equal": (True, False), "greater": (False, True),
           "greater_equal": (False, True), "equal": (False, False), "not_equal": (True, True)}
_SWAPPED = {"less": "greater", "less_equal": "greater_equal", "greater": "less", "greater_equal": "less_equal"}
_ORDERED = {"less", "less_equal", "greater", "greater_equal", "minimum", "maximum"}
# The element function's conversions: t_int8(x) is np.int8(x), and so on.
_CASTS = {dt.name: f"t_{dt.name}" for dt in map(np.dtype, "?bhilqBHILQefdFD")}
_CAST_TYPES: dict[str, Callable[[Any], Any]] = {f"t_{name}": np.dtype(name).type for name in _CASTS}


# Operations that the NumPy path (Expression.numpy_function) computes to the same bits as numba, by
# the kinds of the types they read and write ('b' bool, 'i'/'u' integers, 'f' real, 'c' complex).
# Found by comparing both on every type, edge values included (tests/compute/test_compute_path.py):
# exactly rounded IEEE operations, integer arithmetic and NumPy's float // and % (which numba copies)
# agree. The others differ in the last bits or in NaN's sign on some values, as NumPy computes them
# with its own SIMD code (and FMA) and numba with LLVM's and libm's: exp, log, log10, sin, cos, tan
# and powers of floats, and complex multiplication, division, absolute value and square root.
_NUMPY_EXACT: dict[str, str] = {
    **dict.fromkeys(("add", "subtract", "negative", "positive", "less", "less_equal", "greater", "greater_equal",
                     "equal", "not_equal", "logical_and", "logical_or", "logical_not", "where", "constant"), "biufc"),
    **dict.fromkeys(("multiply", "true_divide", "floor_divide", "remainder", "absolute", "sqrt", "minimum", "maximum",
                     "floor", "ceil"), "biuf"),
    "integer_power": "biu",
}


@dataclass(frozen=True)
class Node:
    """A checked operation (``op``: 'input', 'constant', 'where' or a NumPy ufunc's name) on ``args``;
    ``value`` is an input's name or a constant; ``text`` the user's words for it (for messages)."""

    op: str
    args: tuple[Node, ...] = ()
    value: Any = None  # str (an input) or int, float, complex, bool (a constant)
    text: str = ""


@dataclass(frozen=True)
class _Value:
    """An operand while writing the element function: a variable ``code`` of NumPy type ``dtype``,
    or a Python ``constant`` (weak: ``dtype`` None; ``code`` is then the user's words for it)."""

    code: str
    dtype: np.dtype | None = None
    constant: Any = None


@dataclass(frozen=True)
class _Arg:
    """An operand of one operation, already in the operation's type ``dtype``: ``code`` in the
    element function; for the NumPy path, the ``variable`` (an input or a temporary) it converts, or
    else the NumPy scalar ``value`` it is (converted as the element function converts it)."""

    code: str
    dtype: np.dtype
    variable: str | None = None
    value: object = None


@dataclass(frozen=True)
class _Step:
    """One operation of the element function: temporary ``name`` = ``op`` (a NumPy ufunc's name,
    'where', 'constant' or 'integer_power') of ``args``, stored in ``dtype``."""

    name: str
    op: str
    args: tuple[_Arg, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class _Typed:
    """An expression written for given input types: the element function's ``source``, its result
    ``dtype`` and the same operations as ``steps``; ``result`` names the variable returned."""

    source: str
    dtype: np.dtype
    steps: tuple[_Step, ...]
    result: str


@dataclass(frozen=True)
class Expression:
    """A checked, folded expression over inputs ``names``, typed and compiled per input types."""

    text: str
    names: tuple[str, ...]
    tree: Node
    _typed: dict = field(default_factory=dict, compare=False, repr=False)

    def source(self, *dtypes) -> str:
        """The element function for inputs of ``dtypes`` (scalars in, scalar out), as Python text."""
        return self._typed_for(dtypes).source

    def result_dtype(self, dtypes: Sequence) -> np.dtype:
        """The dtype NumPy gives this expression on inputs of ``dtypes`` (the output's default)."""
        return self._typed_for(tuple(dtypes)).dtype

    def numba_function(self, *dtypes) -> Callable:
        """The element function for inputs of ``dtypes``, compiled by numba (once per source)."""
        return _compile_numba(self.source(*dtypes))

    def numpy_function(self, *dtypes) -> Callable[[list[np.ndarray]], np.ndarray] | None:
        """The expression on whole arrays of ``dtypes``, computed with NumPy, or None where it uses
        an operation whose NumPy result may differ from numba's in the last bits (see _NUMPY_EXACT).

        The function takes the input arrays (in order; any strides, read-only or broadcast views,
        never written) and returns an array broadcastable to them: stored into an output with
        ``np.copyto(out, result, casting="unsafe")``, it gives the bytes that the element function
        from :meth:`numba_function` gives through the ewise kernels. Each operation runs in the type
        the element function computes it in (a float16 step in float32, rounded to float16 as it is made:
        NumPy's own float16 arithmetic keeps the other operand's NaN where both are NaN)."""
        typed = self._typed_for(tuple(dtypes))
        if not all(step.dtype.kind in _NUMPY_EXACT.get(step.op, "")
                   and all(arg.dtype.kind in _NUMPY_EXACT[step.op] for arg in step.args) for step in typed.steps):
            return None
        inputs = tuple((name, _computed_as(dtype)) for name, dtype in zip(self.names, map(np.dtype, dtypes)))
        # Each step as (its name, the NumPy function, its arguments: (variable or None, value, type), its type).
        steps = tuple((step.name, _NUMPY_OPERATIONS.get(step.op) or getattr(np, step.op),
                       tuple((arg.variable, arg.value, _computed_as(arg.dtype)) for arg in step.args), step.dtype)
                      for step in typed.steps)
        result = typed.result

        def evaluate(arrays: Sequence[np.ndarray]) -> np.ndarray:
            if len(arrays) != len(inputs):
                raise ExpressionError(f"expression {_shown(self.text)} takes {len(inputs)} input(s), "
                                      f"got {len(arrays)}")
            variables = {name: np.asarray(array, dtype) for (name, dtype), array in zip(inputs, arrays)}
            with np.errstate(all="ignore"):  # the element function gives inf, NaN and wrapped integers silently
                for name, operation, args, dtype in steps:
                    values = [np.asarray(value if variable is None else variables[variable], computed)
                              for variable, value, computed in args]
                    value = np.asarray(operation(*values), _computed_as(dtype))
                    variables[name] = value.astype(np.float16).astype(value.dtype) if dtype == np.float16 else value
            return variables[result]

        return evaluate

    def _typed_for(self, dtypes: tuple) -> _Typed:
        key = tuple(np.dtype(dt) for dt in dtypes)
        typed = self._typed.get(key)
        if typed is None:
            if len(key) != len(self.names):
                raise ExpressionError(f"expression {_shown(self.text)} takes {len(self.names)} input(s), "
                                      f"got {len(key)}")
            typed = self._typed[key] = _Writer(self.text, dict(zip(self.names, key))).function(self.tree)
        return typed


def input_names(count: int) -> tuple[str, ...]:
    if not 1 <= count <= MAX_INPUTS:
        raise ExpressionError(f"an expression takes 1 to {MAX_INPUTS} inputs, got {count}")
    return tuple(string.ascii_lowercase[:count])


def compile_expression(text: str, count: int) -> Expression:
    """Check ``text`` against the language and return an :class:`Expression` over ``count`` inputs."""
    names = input_names(count)
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression is {len(text)} characters long; the limit is {MAX_LENGTH}")
    stripped = text.strip()
    try:
        tree = ast.parse(stripped, mode="eval")
    except SyntaxError as exc:  # its offset counts in the stripped text from 1; 0 (or past it): the text ended early
        column = exc.offset or 0
        where = (f"at column {column + len(text) - len(text.lstrip())}" if 0 < column <= len(stripped)
                 else "at the end")
        raise ExpressionError(f"expression {_shown(text)} is not valid: {exc.msg} {where}") from None
    except (RecursionError, MemoryError):
        raise ExpressionError(f"expression {_shown(text)} is nested too deeply") from None
    _check_size(tree.body, text)
    return Expression(text=text, names=names, tree=_Reader(names, text, stripped).node(tree.body))


_TOO_LARGE = f"is too large a number (over 2**{MAX_CONSTANT_BITS})"


def _refused(text: str, words: str, problem: str) -> ExpressionError:
    """The error for the part ``words`` of expression ``text``: both quoted, then the problem."""
    return ExpressionError(f"expression {_shown(text)}: {_shown(words)} {problem}")


def _shown(text: str) -> str:
    """The expression quoted for a message (a long one cut short, so the message stays one short line)."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _check_size(root: ast.AST, text: str) -> None:
    """Refuse a tree with more than MAX_NODES nodes or deeper than MAX_DEPTH (walked without recursion)."""
    count, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise ExpressionError(f"expression {_shown(text)} is nested more than {MAX_DEPTH} levels deep; "
                                  "split it up")
        if count > MAX_NODES:
            raise ExpressionError(f"expression {_shown(text)} has more than {MAX_NODES} terms and operations; "
                                  "split it up")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.operator, ast.cmpop, ast.unaryop, ast.boolop, ast.expr_context)))


class _Reader:
    """The checked, folded :class:`Node` tree of a parsed expression."""

    def __init__(self, names: tuple[str, ...], text: str, stripped: str):
        self.names, self.text, self.stripped = names, text, stripped

    def node(self, node: ast.AST) -> Node:
        words = ast.get_source_segment(self.stripped, node) or type(node).__name__
        if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
            return self.constant(node.value, words)
        if isinstance(node, ast.Name):
            return self.name(node.id, words)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self.operation(_BINARY[type(node.op)], [node.left, node.right], words)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return self.operation(_UNARY[type(node.op)], [node.operand], words)
        if isinstance(node, ast.BoolOp) and type(node.op) in _BOOL:
            return self.chain(_BOOL[type(node.op)], [self.node(value) for value in node.values], words)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            # a < b < c means (a < b) and (b < c), element by element.
            operands = [self.node(operand) for operand in (node.left, *node.comparators)]
            pairs = [self.fold(_COMPARE[type(op)], (left, right), words)
                     for op, left, right in zip(node.ops, operands, operands[1:])]
            return self.chain("logical_and", pairs, words)
        if isinstance(node, ast.IfExp):
            return self.operation("where", [node.test, node.body, node.orelse], words)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            return self.call(node.func.id, node.args, words)
        raise _refused(self.text, words, "is not allowed (arithmetic, comparisons and math functions only)")

    def constant(self, value, words: str) -> Node:
        if type(value) is int and value.bit_length() > MAX_CONSTANT_BITS:
            raise _refused(self.text, words, _TOO_LARGE)
        return Node("constant", value=value, text=words)

    def name(self, name: str, words: str) -> Node:
        if name in self.names:
            return Node("input", value=name, text=words)
        if name in CONSTANTS:
            return self.constant(CONSTANTS[name], words)
        if len(name) == 1 and name in string.ascii_lowercase:
            raise ExpressionError(
                f"expression {_shown(self.text)} uses input {name!r}, but only {len(self.names)} input(s) were given "
                f"({', '.join(self.names)})"
            )
        raise ExpressionError(
            f"expression {_shown(self.text)} uses unknown name {name!r}; inputs are {', '.join(self.names)}"
        )

    def call(self, name: str, args: list[ast.expr], words: str) -> Node:
        if name not in FUNCTIONS:
            raise ExpressionError(
                f"expression {_shown(self.text)} calls unknown function {name!r}; "
                f"available: {', '.join(sorted(FUNCTIONS))}"
            )
        arity, op = FUNCTIONS[name]
        if len(args) != arity:
            raise ExpressionError(f"function {name!r} takes {arity} argument(s), got {len(args)}")
        if op == "clip":  # clip(x, low, high) is min(max(x, low), high), as NumPy computes it
            x, low, high = (self.node(arg) for arg in args)
            return Node("minimum", (Node("maximum", (x, low), text=words), high), text=words)
        return self.operation(op, args, words)

    def operation(self, op: str, args: list[ast.expr], words: str) -> Node:
        return self.fold(op, tuple(self.node(arg) for arg in args), words)

    def chain(self, op: str, operands: list[Node], words: str) -> Node:
        result = operands[0]
        for operand in operands[1:]:
            result = self.fold(op, (result, operand), words)
        return result

    def fold(self, op: str, args: tuple[Node, ...], words: str) -> Node:
        """``op`` on ``args``; computed now when every argument is a Python constant and ``op`` is
        an operator (functions of constants give NumPy scalars, which are not weak: not folded)."""
        if op not in _FOLD or any(arg.op != "constant" for arg in args):
            return Node(op, args, text=words)
        values = [arg.value for arg in args]
        if (op == "power" and _too_large_power(*values)) or (op == "multiply" and _too_large_product(*values)):
            raise _refused(self.text, words, _TOO_LARGE)
        try:
            value = _FOLD[op](*values)
        except ZeroDivisionError:
            raise _refused(self.text, words, "divides by zero") from None
        except OverflowError:
            raise _refused(self.text, words, _TOO_LARGE) from None
        if isinstance(value, complex):
            raise _refused(self.text, words, "is a complex number; use real constants")
        return self.constant(value, words)


def _too_large_power(base, exponent) -> bool:
    """Whether an integer ``base ** exponent`` would exceed MAX_CONSTANT_BITS (decided before computing it)."""
    if type(base) not in (int, bool) or type(exponent) not in (int, bool) or exponent <= 0 or abs(base) <= 1:
        return False
    return exponent * math.log2(abs(base)) > MAX_CONSTANT_BITS


def _too_large_product(x, y) -> bool:
    return type(x) is int and type(y) is int and x.bit_length() + y.bit_length() > MAX_CONSTANT_BITS + 1


class _Writer:
    """The element function of a tree for given input types: one statement per operation, each in
    the type NumPy computes it in."""

    def __init__(self, text: str, inputs: dict[str, np.dtype]):
        self.text, self.inputs = text, inputs
        self.lines: list[str] = []
        self.steps: list[_Step] = []

    def function(self, tree: Node) -> _Typed:
        """The source of ``element(a, b, ...)``, its result dtype and its steps."""
        result = self.value(tree)
        if result.dtype is None:  # the whole expression is a constant: NumPy makes it an array
            dtype = np.asarray(result.constant).dtype
            if dtype.kind == "O":  # an integer beyond 64 bits: NumPy holds it as a Python object, no image can
                raise _refused(self.text, tree.text, "is an integer beyond every integer type an image holds "
                                                     "(NumPy keeps it as a Python object)")
            result = self.constant(self.literal(result.constant, dtype, tree))
        assert result.dtype is not None  # a constant has just been given its type
        body = "".join(f"    {line}\n" for line in self.lines)
        source = f"def element({', '.join(self.inputs)}):\n{body}    return {result.code}\n"
        return _Typed(source, result.dtype, tuple(self.steps), result.code)

    def value(self, node: Node) -> _Value:
        if node.op == "input":
            return _Value(node.value, self.inputs[node.value])
        if node.op == "constant":
            return _Value(node.text, None, node.value)
        operands = [self.value(arg) for arg in node.args]
        if node.op == "where":
            return self.where(node, *operands)
        return self.ufunc(node, operands)

    def ufunc(self, node: Node, operands: list[_Value]) -> _Value:
        loop = self.loop(node, operands)
        *ins, out = loop
        if node.op in _BEYOND:
            decided = self.beyond_range(node.op, operands, ins[0])
            if decided is not None:
                return self.constant(self.literal(decided, np.dtype(bool), node))
        if node.op in _ORDERED and ins[0].kind == "c":
            raise _refused(self.text, node.text, "compares complex values, which have no order")
        if node.op == "power" and ins[1].kind in "iu" and any(
                v.dtype is None and v.constant < 0 for v in operands[1:]):
            raise _refused(self.text, node.text, "raises integers to a negative power, which NumPy refuses too "
                                                 "(write a float exponent: -1.0)")
        args = tuple(self.operand(value, dtype, node) for value, dtype in zip(operands, ins))
        if node.op == "power" and out.kind in "iu":
            base, exponent = args
            return self.integer_power(base, exponent, out)
        template = _template(node.op, out)
        if node.op == "floor_divide" and ins[0] == np.int64:  # numba gives 0 for MIN // -1, NumPy MIN
            template = "(-{0} if {1} == -1 else {0} // {1})"
        return self.assign(template.format(*(arg.code for arg in args)), out, node.op, args)

    def loop(self, node: Node, operands: list[_Value]) -> tuple[np.dtype, ...]:
        """NumPy's loop types for ``node``'s ufunc on these operands (weak constants by their Python type)."""
        ufunc = getattr(np, node.op)
        # A Python bool is no weaker than NumPy's (the lowest type); resolve_dtypes takes int and float.
        given: tuple[Any, ...] = tuple(v.dtype if v.dtype is not None else
                      np.dtype(bool) if type(v.constant) is bool else type(v.constant) for v in operands)
        try:
            return ufunc.resolve_dtypes(given + (None,))
        except (TypeError, np.exceptions.DTypePromotionError):
            types = " and ".join(getattr(t, "name", None) or f"a Python {t.__name__}" for t in given)
            symbol = _SYMBOLS.get(node.op, node.op)
            raise _refused(self.text, node.text, f"uses {symbol!r}, which is not defined for {types} values") from None

    @staticmethod
    def beyond_range(op: str, operands: list[_Value], dtype: np.dtype) -> bool | None:
        """The result of comparing an integer type with an integer constant beyond its range (NumPy
        compares the true values), else None."""
        if dtype.kind not in "iu":
            return None
        info = np.iinfo(dtype)
        for side, value in enumerate(operands):
            if value.dtype is None and type(value.constant) is int and not info.min <= value.constant <= info.max:
                above = value.constant > info.max
                # `constant < x` is `x > constant`.
                return _BEYOND[_SWAPPED.get(op, op) if side == 0 else op][0 if above else 1]
        return None

    def where(self, node: Node, condition: _Value, *branches: _Value) -> _Value:
        """``x if c else y``: NumPy's np.where, whose type is the branches' result type; constants
        are converted to it as np.where does (integers wrap around)."""
        result = np.result_type(*(v.dtype if v.dtype is not None else v.constant for v in branches))
        args = []
        for value in branches:
            if value.dtype is None:
                with np.errstate(all="ignore"):
                    try:
                        converted = np.asarray(value.constant).astype(result).item()
                    except OverflowError:
                        raise self.too_large(node, result) from None
                args.append(self.literal(converted, result, node))
            else:
                args.append(self.operand(value, result, node))
        test = (_Arg(condition.code, condition.dtype, variable=condition.code) if condition.dtype is not None
                else self.literal(bool(condition.constant), np.dtype(bool), node))
        return self.assign(f"({args[0].code} if {test.code} != 0 else {args[1].code})", result, "where",
                           (test, *args))

    def operand(self, value: _Value, dtype: np.dtype, node: Node) -> _Arg:
        """``value`` converted to ``dtype`` (a constant must fit an integer type, as NumPy requires)."""
        if value.dtype is None:
            if dtype.kind in "iu" and not np.iinfo(dtype).min <= value.constant <= np.iinfo(dtype).max:
                raise _refused(self.text, value.code, f"is out of range for {dtype} values (NumPy refuses it too)")
            return self.literal(value.constant, dtype, node)
        code = value.code if value.dtype == dtype else f"{_CASTS[dtype.name]}({value.code})"
        return _Arg(code, dtype, variable=value.code)

    def literal(self, constant, dtype: np.dtype, node: Node) -> _Arg:
        """``constant`` as a value of ``dtype``: Python text, and the NumPy scalar that text gives."""
        cast = _CAST_TYPES[_CASTS[dtype.name]]
        if dtype.kind == "b":
            return _Arg(repr(bool(constant)), dtype, value=np.bool_(bool(constant)))
        if dtype.kind in "iu":
            return _Arg(f"{_CASTS[dtype.name]}({int(constant)})", dtype, value=cast(int(constant)))
        try:
            number = complex(constant) if dtype.kind == "c" else float(constant)
        except OverflowError:
            raise self.too_large(node, dtype) from None
        with np.errstate(all="ignore"):  # a float beyond float32 is inf there, as numba converts it
            # The value of the text below: NaN is the name nan (positive, whatever NaN was folded).
            value = cast(complex(_named(number.real), _named(number.imag)) if dtype.kind == "c"
                         else _named(number.real))
        if dtype.kind == "c":
            return _Arg(f"{_CASTS[dtype.name]}(complex({_real(number.real)}, {_real(number.imag)}))", dtype,
                        value=value)
        return _Arg(f"{_CASTS[dtype.name]}({_real(number.real)})", dtype, value=value)  # .real: the float itself

    def constant(self, literal: _Arg) -> _Value:
        """A temporary holding the constant ``literal``."""
        return self.assign(literal.code, literal.dtype, "constant", (literal,))

    def integer_power(self, base: _Arg, exponent: _Arg, dtype: np.dtype) -> _Value:
        """``base ** exponent`` by squaring in ``dtype``, wrapping around as NumPy does (numba's own
        integer power turns to floating point beyond an exponent of 65536). At most 64 rounds; a
        negative exponent (which NumPy refuses) gives 1."""
        cast = _CASTS[dtype.name]
        product = _template("multiply", dtype)
        result = self.assign("1", dtype, "integer_power", (base, exponent))
        name = result.code
        self.lines += [f"{name}_base, {name}_exponent = {base.code}, {exponent.code}",
                       f"while {name}_exponent > 0:",
                       f"    if {name}_exponent & 1:",
                       f"        {name} = {cast}({product.format(name, f'{name}_base')})",
                       f"    {name}_base = {cast}({product.format(f'{name}_base', f'{name}_base')})",
                       f"    {name}_exponent >>= 1"]
        return result

    def too_large(self, node: Node, dtype: np.dtype) -> ExpressionError:
        return _refused(self.text, node.text, f"holds a constant too large for {dtype} (NumPy refuses it too)")

    def assign(self, code: str, dtype: np.dtype, op: str, args: tuple[_Arg, ...]) -> _Value:
        """A new temporary ``code`` of ``dtype``: the operation ``op`` of ``args``."""
        name = f"t{len(self.lines)}"
        self.lines.append(f"{name} = {_CASTS[dtype.name]}({code})")
        self.steps.append(_Step(name, op, args, dtype))
        return _Value(name, dtype)


def _template(op: str, dtype: np.dtype) -> str:
    """The template of ``op`` computed in ``dtype``: signed integer +, - and * wrap around (see _WRAPPING)."""
    if op in _WRAPPING and dtype.kind == "i":
        return _WRAPPING[op].replace("{u}", _CASTS[f"u{dtype.name}"])
    return _TEMPLATES[op]


def _computed_as(dtype: np.dtype) -> np.dtype:
    """The type values of ``dtype`` are held in (float16 in float32, as the element function holds them)."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _minimum(x, y):
    return np.where((x <= y) | (x != x), x, y)  # as _TEMPLATES writes it: NaN first, and the signs of zeros


def _maximum(x, y):
    return np.where((x >= y) | (x != x), x, y)


def _power(x, y):
    """NumPy's power, complex64 ones computed in complex128 and rounded, as :func:`noa_core.kernels.power` does."""
    if np.result_type(x, y) == np.complex64:
        return np.power(np.asarray(x, np.complex128), np.asarray(y, np.complex128)).astype(np.complex64)
    return np.power(x, y)


# The NumPy path's operations (over operands already in the operation's type), where they are not
# NumPy's ufunc of that name: each as _TEMPLATES writes it.
_NUMPY_OPERATIONS: dict[str, Callable] = {
    "constant": lambda x: x,
    "where": lambda test, x, y: np.where(np.not_equal(test, 0), x, y),
    "logical_and": lambda x, y: np.not_equal(x, 0) & np.not_equal(y, 0),
    "logical_or": lambda x, y: np.not_equal(x, 0) | np.not_equal(y, 0),
    "logical_not": lambda x: np.equal(x, 0),
    "minimum": _minimum, "maximum": _maximum, "power": _power,
    # The element function multiplies by squaring, wrapping around; a negative exponent gives 1.
    "integer_power": lambda x, y: np.power(x, np.maximum(y, 0) if y.dtype.kind == "i" else y),
}


def _named(number: float) -> float:
    """The float :func:`_real`'s text gives in the element function."""
    return math.nan if math.isnan(number) else number


def _real(number: float) -> str:
    """Python text for a float (inf and nan are names in the element function's namespace)."""
    return repr(number) if math.isfinite(number) else str(number)


def _define(source: str) -> Callable:
    """The function ``element`` of ``source`` (generated from a checked tree), compiled under a
    ``<noa kernel expression #HASH>`` name of its own (see noa_core.kernels.compile_source)."""
    namespace: dict = {"np": np, "true_divide": kernels.true_divide, "power": kernels.power, "inf": math.inf,
                       "nan": math.nan, **_CAST_TYPES,
                       # numba has no float16 arithmetic on the CPU: a step NumPy computes in float16 is
                       # held in a float32, rounded to float16 as it is made, as NumPy rounds each one (a
                       # comparison or a truth test of exp(-18.0) sees float16's 0, not float32's 1.5e-08).
                       "t_float16": kernels.half_precision}
    return kernels.compile_source(source, "expression", namespace)["element"]


_NUMBA_CACHE: OrderedDict[str, Callable] = OrderedDict()
_NUMBA_LOCK = threading.Lock()
_COMPILED = [0]  # element functions compiled by this process, dropped ones included
_MODULE_SOURCE = Path(__file__).read_bytes()


def _compile_numba(source: str) -> Callable:
    with _NUMBA_LOCK:
        function = _NUMBA_CACHE.get(source)
        if function is not None:
            _NUMBA_CACHE.move_to_end(source)
            return function
    import numba  # only to compile: NumPy's path (small files) never does

    runtime = kernels.runtime  # numba configured before anything is compiled
    # error_model='numpy': division by zero gives inf/nan as in NumPy instead of raising.
    function = numba.njit(nogil=True, error_model="numpy")(_define(source))
    # The generated source and this module (how it is compiled, what it may call) define the
    # function, so a digest of both names the kernels built around it in numba's on-disk cache
    # (see kernels.cpu._op_name): an expression compiles once per cache, not once per process.
    # The service turns this off: its clients' expressions must not fill the disk.
    if runtime.CACHE_EXPRESSIONS:
        function.noa_cache_tag = "expr" + hashlib.sha1(_MODULE_SOURCE + source.encode()).hexdigest()[:16]
    with _NUMBA_LOCK:
        _NUMBA_CACHE[source] = function
        _COMPILED[0] += 1
        while len(_NUMBA_CACHE) > max(CACHE_SIZE, 1):
            _forget(_NUMBA_CACHE.popitem(last=False)[1])
    return function


def compiled_count() -> int:
    """How many element functions this process has compiled (each keeps its machine code until exit)."""
    return _COMPILED[0]


def _forget(function: Callable) -> None:
    """Drop the kernels built around an evicted element function, so that its memory is freed."""
    kernels.cpu.forget(function)
