"""Score one answer with its case's checker: 1.0 right, 0.0 wrong, or a grade in between
(a `function` may grade). `function` and `code` run only in the sandbox
(gates.task.sandbox), which sends back data; the verdict is reached here, from values
decoded from that data (gates.task.tests), with expectations the sandbox never sees."""

from __future__ import annotations

import json
import re
import string
from typing import Any

from gates.task.sandbox import Verdict, run_isolated, said
from gates.task.suite import (
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
from gates.task.tests import Malformed, Step, decode, plan

MAX_DETAIL = 300

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
            return _bounded(_graded(run_isolated(job, limits)))
        case Code():
            steps = plan(checker.tests)
            job = {
                "kind": "code",
                "answer": code_of(answer),
                "steps": [s.wire() for s in steps],
            }
            return _bounded(_tested(steps, run_isolated(job, limits)))
    raise TypeError(f"unknown checker {checker!r}")


def _bounded(verdict: Verdict) -> Verdict:
    if len(verdict.detail) <= MAX_DETAIL:
        return verdict
    return Verdict(verdict.score, verdict.detail[: MAX_DETAIL - 1] + "…")


def _graded(sent: dict[str, Any] | Verdict) -> Verdict:
    """A `function`'s grade: a bool or a number in [0, 1], sent as data."""
    if isinstance(sent, Verdict):
        return sent
    if "error" in sent:
        return Verdict(0.0, f"check() failed: {said(str(sent['error']))}")
    try:
        value = decode(sent.get("value"))
    except Malformed as exc:
        return Verdict(0.0, f"check() sent no value ({exc})")
    if type(value) not in (bool, int, float) or not 0.0 <= float(value) <= 1.0:
        return Verdict(0.0, "check() returned no bool or score in [0, 1]")
    return Verdict(float(value), f"check() returned {float(value):g}")


def _tested(steps: list[Step], sent: dict[str, Any] | Verdict) -> Verdict:
    """1.0 when every step ran and every probe's value meets its expectation, held here."""
    if isinstance(sent, Verdict):
        return sent
    if "answer_error" in sent:
        return Verdict(0.0, f"the answer's code failed: {said(str(sent['answer_error']))}")
    results = sent.get("steps")
    if not isinstance(results, list) or len(results) != len(steps):
        return Verdict(0.0, "the check sent no result for each test")
    for step, result in zip(steps, results, strict=True):
        failed = _failure(step, result)
        if failed is not None:
            return Verdict(0.0, f"failed at line {step.line} `{said(step.text, 80)}`: {failed}")
    return Verdict(1.0, "tests passed")


def _failure(step: Step, result: object) -> str | None:
    if not isinstance(result, dict):
        return "no result"
    if "error" in result:
        return f"raised {said(str(result['error']), 120)}"
    if not step.probe:
        return None if result.get("ran") is True else "no result"
    try:
        value = decode(result.get("value"))
        assert step.test is not None
        return None if step.test(value) is True else "the answer's value is not the expected one"
    except Malformed as exc:
        return f"no value ({exc})"
    except (TypeError, ValueError, ArithmeticError, RecursionError):
        return "the answer's value cannot be compared with the expected one"


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
