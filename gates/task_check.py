"""Score one answer with its case's checker: 1.0 right, 0.0 wrong, or a grade in between
(a `function` may grade). `function` and `code` run only in the isolated subprocess."""

from __future__ import annotations

import json
import re
import string

from gates.task_sandbox import Verdict, run_isolated
from gates.task_suite import (
    Checker,
    Code,
    Exact,
    Function,
    JsonSchema,
    Limits,
    Normalised,
    Number,
    Regex,
)

_FENCED = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)(?:```|$)", re.DOTALL)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:[.,]\d+)*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")


def check(checker: Checker, answer: str, limits: Limits) -> Verdict:
    match checker:
        case Exact():
            return _bool(answer == checker.expected, f"expected exactly {checker.expected!r}")
        case Normalised():
            ok = normalise(answer) == normalise(checker.expected)
            return _bool(ok, f"expected {checker.expected!r} (normalised)")
        case Regex():
            flags = re.IGNORECASE if checker.ignore_case else 0
            found = re.search(checker.pattern, answer, flags) is not None
            return _bool(found, f"expected a match of /{checker.pattern}/")
        case Number():
            return _number(checker, answer)
        case JsonSchema():
            return _json(checker, answer)
        case Function():
            job: dict[str, object] = {
                "kind": "function",
                "source": checker.source,
                "answer": answer,
            }
            return run_isolated(job, limits)
        case Code():
            job = {"kind": "code", "answer": code_of(answer), "tests": checker.tests}
            return run_isolated(job, limits)
    raise TypeError(f"unknown checker {checker!r}")


def normalise(text: str) -> str:
    """Lower case, single spaces, no punctuation or quotes at either end."""
    return " ".join(text.lower().split()).strip(string.punctuation + " ")


def code_of(answer: str) -> str:
    """The first fenced block of a chat answer, else the whole answer."""
    found = _FENCED.search(answer)
    return found.group(1) if found else answer


def _bool(ok: bool, expected: str) -> Verdict:
    return Verdict(1.0 if ok else 0.0, "ok" if ok else expected)


def _number(checker: Number, answer: str) -> Verdict:
    found = _NUMBER.search(answer)
    want = f"expected {checker.value:g} ± {checker.tolerance:g}"
    if found is None:
        return Verdict(0.0, f"{want}, found no number")
    value = float(found.group(0).replace(",", ""))
    ok = abs(value - checker.value) <= checker.tolerance
    return Verdict(1.0 if ok else 0.0, "ok" if ok else f"{want}, found {value:g}")


def _json(checker: JsonSchema, answer: str) -> Verdict:
    import jsonschema

    try:
        value = json.loads(code_of(answer))
    except ValueError as exc:
        return Verdict(0.0, f"expected JSON, could not parse it: {exc}")
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(checker.json_schema).iter_errors(value)
    )
    if error is not None:
        return Verdict(0.0, f"JSON does not match the schema: {error.message}")
    return Verdict(1.0, "ok")
