"""Which rows a selection keeps: row ranges (``0-99,200``) and conditions on columns (``rlnClassNumber in (3, 5)
and rlnDefocusU < 20000``), read by a small grammar of their own, never evaluated as Python.

Grammar (keywords in any case)::

    condition  := conjunction ('or' conjunction)*
    conjunction:= negation ('and' negation)*
    negation   := 'not' negation | '(' condition ')' | comparison
    comparison := COLUMN OPERATOR literal | COLUMN ['not'] 'in' '(' literal (',' literal)* ')'
    OPERATOR   := '==' | '=' | '!=' | '<' | '<=' | '>' | '>='
    literal    := NUMBER | 'text' | "text"

A number compares with the column's values read as numbers; quoted text with the values as the file writes
them (text order for ``<``). A column is a STAR label (``rlnClassNumber``) or a ``.cs`` field (``ctf/df1_A``).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from noa_core.errors import ParameterError

OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge}
_TOKEN = re.compile(r"""\s*(?:
    (?P<number>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?(?![\w/.]))
  | (?P<text>'[^']*'|"[^"]*")
  | (?P<name>[A-Za-z_][\w/.]*)
  | (?P<operator>==|!=|<=|>=|<|>|=)
  | (?P<mark>[(),])
)""", re.VERBOSE)
KEYWORDS = ("and", "or", "not", "in")


@dataclass(frozen=True)
class Token:
    kind: str  # number, text, name, keyword, operator, mark, end
    value: Any
    at: int  # the character it starts at, for messages


@dataclass(frozen=True)
class Comparison:
    column: str
    operator: str  # one of OPERATORS, or 'in' / 'not in'
    literals: tuple[float | bytes, ...]


@dataclass(frozen=True)
class Junction:
    kind: str  # 'and', 'or'
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class Negation:
    part: Condition


Condition = Comparison | Junction | Negation


def _tokens(text: str, param: str) -> list[Token]:
    tokens, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            start = len(text) - len(text[at:].lstrip())
            raise ParameterError(f"{text!r}: cannot read {text[start:start + 12]!r} (character {start + 1}): "
                                 "a condition holds columns, comparisons, numbers, quoted text, in (...), "
                                 "and, or, not", param)
        kind = str(match.lastgroup)
        raw = match.group(kind)
        start = match.start(kind)
        if kind == "number":
            tokens.append(Token(kind, float(raw), start))
        elif kind == "text":
            tokens.append(Token(kind, raw[1:-1].encode(), start))
        elif kind == "name" and raw.lower() in KEYWORDS:
            tokens.append(Token("keyword", raw.lower(), start))
        else:
            tokens.append(Token(kind, raw, start))
        at = match.end()
    tokens.append(Token("end", None, len(text)))
    return tokens


class _Reader:
    """A recursive-descent reader of one condition (the grammar above)."""

    def __init__(self, text: str, param: str) -> None:
        self.text, self.param = text, param
        self.tokens = _tokens(text, param)
        self.at = 0

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def refuse(self, expected: str) -> ParameterError:
        token = self.peek()
        found = "the end" if token.kind == "end" else repr(self.text[token.at:token.at + 16].split(" ")[0] or
                                                           self.text[token.at])
        return ParameterError(f"{self.text!r}: expected {expected} at character {token.at + 1}, found {found}",
                              self.param)

    def is_keyword(self, word: str) -> bool:
        token = self.peek()
        return token.kind == "keyword" and token.value == word

    def condition(self) -> Condition:
        parts = [self.conjunction()]
        while self.is_keyword("or"):
            self.take()
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else Junction("or", tuple(parts))

    def conjunction(self) -> Condition:
        parts = [self.negation()]
        while self.is_keyword("and"):
            self.take()
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else Junction("and", tuple(parts))

    def negation(self) -> Condition:
        if self.is_keyword("not"):
            self.take()
            return Negation(self.negation())
        if self.peek().kind == "mark" and self.peek().value == "(":
            self.take()
            inner = self.condition()
            self.expect_mark(")")
            return inner
        return self.comparison()

    def comparison(self) -> Condition:
        if self.peek().kind != "name":
            raise self.refuse("a column name")
        column = str(self.take().value)
        if self.is_keyword("not") or self.is_keyword("in"):
            negated = self.take().value == "not"
            if negated and not self.is_keyword("in"):
                raise self.refuse("in after not")
            if negated:
                self.take()
            self.expect_mark("(")
            literals = [self.literal()]
            while self.peek().kind == "mark" and self.peek().value == ",":
                self.take()
                literals.append(self.literal())
            self.expect_mark(")")
            if len({type(v) for v in literals}) > 1:
                raise ParameterError(f"{self.text!r}: the values in (...) after {column} mix numbers and quoted "
                                     "text", self.param)
            return Comparison(column, "not in" if negated else "in", tuple(literals))
        if self.peek().kind != "operator":
            raise self.refuse(f"a comparison (==, !=, <, <=, >, >=) or in (...) after {column}")
        symbol = str(self.take().value)
        return Comparison(column, symbol, (self.literal(),))

    def literal(self) -> float | bytes:
        if self.peek().kind not in ("number", "text"):
            raise self.refuse("a number or quoted text")
        return self.take().value

    def expect_mark(self, mark: str) -> None:
        token = self.peek()
        if token.kind != "mark" or token.value != mark:
            raise self.refuse(repr(mark))
        self.take()


def parse(text: str, param: str = "where") -> Condition:
    """The condition ``text`` reads as; a ParameterError for ``param`` naming where it stops making sense."""
    reader = _Reader(text, param)
    if reader.peek().kind == "end":
        raise ParameterError("an empty condition", param)
    condition = reader.condition()
    if reader.peek().kind != "end":
        raise reader.refuse("and, or or the end")
    return condition


def columns(condition: Condition) -> list[str]:
    """The columns ``condition`` names, in order, once each."""
    if isinstance(condition, Comparison):
        return [condition.column]
    parts = (condition.part,) if isinstance(condition, Negation) else condition.parts
    return list(dict.fromkeys(name for part in parts for name in columns(part)))


def evaluate(condition: Condition, numbers: Callable[[str], np.ndarray],
             text: Callable[[str], np.ndarray]) -> np.ndarray:
    """Whether each row meets ``condition`` (a bool array), its columns' values from ``numbers`` (float) or
    ``text`` (``S``), each asked once per column."""
    if isinstance(condition, Negation):
        return ~evaluate(condition.part, numbers, text)
    if isinstance(condition, Junction):
        combine = np.logical_and if condition.kind == "and" else np.logical_or
        result = evaluate(condition.parts[0], numbers, text)
        for part in condition.parts[1:]:
            result = combine(result, evaluate(part, numbers, text))
        return result
    numeric = isinstance(condition.literals[0], float)
    values = numbers(condition.column) if numeric else text(condition.column)
    if condition.operator in ("in", "not in"):
        found = np.isin(values, np.array(condition.literals))
        return ~found if condition.operator == "not in" else found
    return np.asarray(OPERATORS[condition.operator](values, condition.literals[0]))


def parse_rows(text: str, count: int, param: str = "rows") -> np.ndarray:
    """The rows ``text`` names (``0-99,200,500-``: 0-based, ranges including both ends, ``N-`` to the last), as a
    bool array over ``count`` rows; a ParameterError naming the part that is not a range or lies beyond."""
    chosen = np.zeros(count, bool)
    for part in text.split(","):
        piece = part.strip()
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d*))?", piece)
        if match is None:
            raise ParameterError(f"{piece!r} is not a row or a range of rows (0-99, 200, 500-: counted from 0)",
                                 param)
        first = int(match[1])
        last = first if match[2] is None else (count - 1 if match[2] == "" else int(match[2]))
        if last < first:
            raise ParameterError(f"{piece!r}: the range ends before it starts", param)
        if first >= count or last >= count:
            raise ParameterError(f"{piece!r}: the file has {count} rows (0 to {count - 1})", param)
        chosen[first:last + 1] = True
    return chosen
