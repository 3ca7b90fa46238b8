"""A `code` case's tests, split so that the verdict never depends on the answer's objects.

The tests are read here, in the trusted process: each top-level `assert` becomes a probe,
an expression the untrusted process evaluates (its value comes back as plain data, see
`decode`), and an expectation only this process holds: `== 5`, `is None`, true, false.
The expected values never reach the untrusted process, and they are compared with values
decoded from JSON here, never with an object the answer made. Other top-level statements
(assignments, imports) run there before the probes that follow them; raising fails the
case, but only the asserts can pass it.

Accepted asserts: `assert EXPR OP LITERAL` (or `LITERAL OP EXPR`) with one operator of
`==, !=, <, <=, >, >=, in, not in`, or `is` / `is not` with None, True or False;
`assert EXPR` (its value is true) and `assert not EXPR` (false), where EXPR is no
comparison or boolean operator. A literal is what `ast.literal_eval` reads.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 64
_OPS: dict[type[ast.cmpop], tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
    ast.In: ("in", lambda a, b: a in b),
    ast.NotIn: ("not in", lambda a, b: a not in b),
    ast.Is: ("is", operator.is_),
    ast.IsNot: ("is not", operator.is_not),
}


@dataclass(frozen=True)
class Step:
    """One top-level statement: `run` (setup) or a probe, `expression` with its test."""

    line: int
    text: str
    source: str
    probe: bool
    test: Callable[[Any], bool] | None = None

    def wire(self) -> dict[str, str]:
        """What the untrusted process is told: code to run or an expression, no expectation."""
        return {"eval" if self.probe else "run": self.source}


def plan(tests: str) -> list[Step]:
    """The steps of a `code` case's tests; ValueError names a statement it cannot judge."""
    try:
        module = ast.parse(tests)
    except SyntaxError as exc:
        raise ValueError(f"the tests are not Python: {exc.msg} (line {exc.lineno})") from None
    steps = [_step(node, tests) for node in module.body]
    if not any(s.probe for s in steps):
        raise ValueError("the tests have no top-level assert: nothing could pass the answer")
    return steps


def _step(node: ast.stmt, tests: str) -> Step:
    text = (ast.get_source_segment(tests, node) or ast.unparse(node)).strip()
    where = f"line {node.lineno}"
    if not isinstance(node, ast.Assert):
        if any(isinstance(n, ast.Assert) for n in ast.walk(node)):
            raise ValueError(f"{where}: an assert must be a top-level statement")
        return Step(node.lineno, text, ast.unparse(node), probe=False)
    test = node.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _probe(node, text, test.operand, lambda v: not v)
    if isinstance(test, ast.Compare):
        return _compare(node, text, test)
    return _probe(node, text, test, bool)


def _probe(node: ast.Assert, text: str, expr: ast.expr, test: Callable[[Any], bool]) -> Step:
    if isinstance(expr, ast.Compare | ast.BoolOp) or (
        isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not)
    ):
        raise ValueError(
            f"line {node.lineno}: compare the answer's value with a literal "
            f"(`assert f(x) == 3`), not with another computed value: {text}"
        )
    return Step(node.lineno, text, ast.unparse(expr), probe=True, test=test)


def _compare(node: ast.Assert, text: str, test: ast.Compare) -> Step:
    where = f"line {node.lineno}"
    if len(test.ops) != 1:
        raise ValueError(f"{where}: one comparison an assert: {text}")
    name, compare = _OPS[type(test.ops[0])]
    left, right = test.left, test.comparators[0]
    literal = _literal(right)
    if literal is not _NONE:
        expr = left
        check: Callable[[Any], bool] = lambda v: bool(compare(v, literal))  # noqa: E731
    else:
        literal = _literal(left)
        if literal is _NONE:
            raise ValueError(f"{where}: one side of the comparison must be a literal: {text}")
        expr = right
        check = lambda v: bool(compare(literal, v))  # noqa: E731
    if name in ("is", "is not") and not any(literal is c for c in (None, True, False)):
        raise ValueError(f"{where}: `{name}` only with None, True or False: {text}")
    return _probe(node, text, expr, check)


_NONE = object()


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NONE


class Malformed(ValueError):
    """The untrusted process sent something that is not a value in the agreed form."""


def decode(data: Any, depth: int = 0) -> Any:
    """A value from the untrusted process's JSON as plain Python: None, bool, int, float,
    str, or {"list"|"tuple"|"set"|"frozenset": [...]}, {"dict": [[k, v], ...]},
    {"bytes": hex}, {"complex": [re, im]}; anything else it could not send
    ({"other": type}) becomes an Opaque that equals nothing."""
    if depth > MAX_DEPTH:
        raise Malformed("nested too deep")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is not dict or len(data) != 1:
        raise Malformed(f"not a value: {type(data).__name__}")
    ((tag, body),) = data.items()
    try:
        return _TAGS[tag](body, depth + 1)
    except KeyError:
        raise Malformed(f"unknown tag {str(tag)[:20]!r}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise Malformed(f"bad {str(tag)[:20]}: {type(exc).__name__}") from None


def _items(body: Any, depth: int) -> list[Any]:
    if type(body) is not list:
        raise Malformed("not a list")
    return [decode(item, depth) for item in body]


class Opaque:
    """A value the untrusted process could not send as data: equal to nothing."""

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    def __bool__(self) -> bool:
        raise Malformed("the truth of an object only the answer's process knows")


def _pair(body: Any, depth: int) -> tuple[Any, Any]:
    if type(body) is not list or len(body) != 2:
        raise Malformed("not a pair")
    return decode(body[0], depth), decode(body[1], depth)


def _complex(body: Any, depth: int) -> complex:
    real, imag = _pair(body, depth)
    if type(real) is not float or type(imag) is not float:
        raise Malformed("not a complex")
    return complex(real, imag)


_TAGS: dict[str, Callable[[Any, int], Any]] = {
    "list": _items,
    "tuple": lambda body, depth: tuple(_items(body, depth)),
    "set": lambda body, depth: set(_items(body, depth)),
    "frozenset": lambda body, depth: frozenset(_items(body, depth)),
    "dict": lambda body, depth: dict(_pair(item, depth) for item in _items_raw(body)),
    "bytes": lambda body, depth: bytes.fromhex(body) if type(body) is str else _bad(),
    "complex": _complex,
    "other": lambda body, depth: Opaque(),
}


def _items_raw(body: Any) -> list[Any]:
    if type(body) is not list:
        raise Malformed("not a list")
    return body


def _bad() -> Any:
    raise Malformed("bad value")
